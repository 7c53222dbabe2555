//! A TCP proxy in the test process between the client and a server, whose faults the test sets:
//! added latency, dropped connections (closed, new ones refused), or half-open ones (open, but
//! nothing forwarded either way).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None,
    /// Each chunk from the server is held this long.
    Latency(Duration),
    /// Every connection is closed and new ones are closed on accept.
    Drop,
    /// Connections stay open, but nothing passes.
    HalfOpen,
    /// A hostile or broken store: the next reply is replaced by a bulk header of 512 MB
    /// (`$536870911`) and then up to 300 MB of zeros, as fast as the client reads them.
    Flood,
}

pub struct Proxy {
    pub port: u16,
    fault: watch::Sender<Fault>,
}

impl Proxy {
    /// Listens on a loopback port the OS picks and forwards to `127.0.0.1:upstream`.
    pub async fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (fault, rx) = watch::channel(Fault::None);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let rx = rx.clone();
                if *rx.borrow() == Fault::Drop {
                    drop(client);
                    continue;
                }
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await {
                        pipe(client, server, rx).await;
                    }
                });
            }
        });
        Proxy { port, fault }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn set(&self, fault: Fault) {
        let _ = self.fault.send(fault);
    }
}

async fn pipe(client: TcpStream, server: TcpStream, rx: watch::Receiver<Fault>) {
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = tokio::spawn(copy(cr, sw, rx.clone(), false));
    let down = tokio::spawn(copy(sr, cw, rx, true));
    let _ = tokio::join!(up, down);
}

async fn copy(
    mut from: impl AsyncReadExt + Unpin,
    mut to: impl AsyncWriteExt + Unpin,
    mut rx: watch::Receiver<Fault>,
    delayed: bool,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            r = from.read(&mut buf) => match r { Ok(0) | Err(_) => return, Ok(n) => n },
            _ = rx.changed() => {
                if *rx.borrow() == Fault::Drop { return; }
                continue;
            }
        };
        let fault = *rx.borrow();
        match fault {
            Fault::Drop => return,
            Fault::HalfOpen => {
                // Swallow the bytes and everything after until the fault changes.
                loop {
                    if rx.changed().await.is_err() {
                        return;
                    }
                    match *rx.borrow() {
                        Fault::HalfOpen => continue,
                        Fault::Drop => return,
                        _ => break,
                    }
                }
                // The swallowed request is lost: the connection is out of step, close it.
                return;
            }
            Fault::Flood if delayed => {
                if to.write_all(b"$536870911\r\n").await.is_err() {
                    return;
                }
                let zeros = vec![0u8; 64 * 1024];
                for _ in 0..(300 << 20) / zeros.len() {
                    if to.write_all(&zeros).await.is_err() {
                        return;
                    }
                }
                return;
            }
            Fault::Latency(d) if delayed => tokio::time::sleep(d).await,
            _ => {}
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
