//! A TCP proxy on loopback between the controller and one region's store: it adds latency to
//! every chunk each way, drops connections at random (a rate per thousand chunks), and
//! partitions (closes every connection, refuses new ones) on command.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
struct Control {
    latency_ms: AtomicU64,
    partitioned: AtomicBool,
    drop_per_mille: AtomicU64,
    rng: AtomicU64,
    open: Mutex<Vec<TcpStream>>,
}

pub struct Proxy {
    pub port: u16,
    control: Arc<Control>,
}

impl Proxy {
    pub fn start(upstream: u16, latency_ms: u64) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy bind");
        let port = listener.local_addr().expect("proxy port").port();
        let control = Arc::new(Control::default());
        control.latency_ms.store(latency_ms, Ordering::Relaxed);
        control
            .rng
            .store(u64::from(upstream) | 1, Ordering::Relaxed);
        let c = Arc::clone(&control);
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if c.partitioned.load(Ordering::Relaxed) {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
                    continue;
                };
                if let Ok(mut open) = c.open.lock() {
                    open.extend(client.try_clone().ok());
                    open.extend(server.try_clone().ok());
                }
                let (ca, cb) = (Arc::clone(&c), Arc::clone(&c));
                std::thread::spawn(move || pump(client, s2, &ca));
                std::thread::spawn(move || pump(server, c2, &cb));
            }
        });
        Proxy { port, control }
    }

    /// Cuts the region off (every connection closed, new ones refused) or heals it.
    pub fn partition(&self, on: bool) {
        self.control.partitioned.store(on, Ordering::Relaxed);
        if on {
            self.cut();
        }
    }

    /// Closes every open connection.
    pub fn cut(&self) {
        if let Ok(mut open) = self.control.open.lock() {
            for s in open.drain(..) {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }

    /// Drops a connection at `per_mille` of the chunks it carries.
    pub fn drops(&self, per_mille: u64) {
        self.control
            .drop_per_mille
            .store(per_mille, Ordering::Relaxed);
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, c: &Control) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let latency = c.latency_ms.load(Ordering::Relaxed);
        if latency > 0 {
            std::thread::sleep(Duration::from_millis(latency));
        }
        let x = c.rng.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        let dropped = (x ^ (x >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9) % 1000
            < c.drop_per_mille.load(Ordering::Relaxed);
        if c.partitioned.load(Ordering::Relaxed) || dropped {
            break;
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
