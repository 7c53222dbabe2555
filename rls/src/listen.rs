//! Where gRPC listens: GRPC_HOST:GRPC_PORT over TCP, or the Unix socket GRPC_UDS (as the peer:
//! then no TCP port), over TLS when GRPC_SERVER_USE_TLS is set (`tls.rs`).

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;

use tokio::net::{TcpListener, UnixListener};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::server::{Router, TcpIncoming};

use crate::settings::Settings;
use crate::tls;

/// The address gRPC serves on: `host:port`, or a socket path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GrpcAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl fmt::Display for GrpcAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GrpcAddr::Tcp(a) => write!(f, "{a}"),
            GrpcAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

pub enum Incoming {
    Tcp(TcpListener),
    Tls(TcpListener, tls::Acceptor),
    Unix(UnixListener, PathBuf),
}

/// Binds the gRPC listener the settings name.
pub async fn grpc(settings: &Settings) -> Result<Incoming, String> {
    let acceptor = if settings.grpc_tls {
        Some(tls::Acceptor::from_settings(settings)?)
    } else {
        None
    };
    if !settings.grpc_uds.is_empty() {
        if acceptor.is_some() {
            return Err("GRPC_SERVER_USE_TLS with GRPC_UDS: TLS is served on TCP only".into());
        }
        let path = PathBuf::from(&settings.grpc_uds);
        // A socket left by a process that did not stop cleanly would make the bind fail.
        if std::fs::symlink_metadata(&path).is_ok_and(|m| {
            use std::os::unix::fs::FileTypeExt;
            m.file_type().is_socket()
        }) {
            let _ = std::fs::remove_file(&path);
        }
        let listener =
            UnixListener::bind(&path).map_err(|e| format!("GRPC_UDS {}: {e}", path.display()))?;
        return Ok(Incoming::Unix(listener, path));
    }
    let listener = TcpListener::bind((settings.grpc_host.as_str(), settings.grpc_port))
        .await
        .map_err(|e| format!("GRPC {}:{}: {e}", settings.grpc_host, settings.grpc_port))?;
    Ok(match acceptor {
        Some(a) => Incoming::Tls(listener, a),
        None => Incoming::Tcp(listener),
    })
}

impl Incoming {
    pub fn local_addr(&self) -> GrpcAddr {
        match self {
            Incoming::Tcp(l) | Incoming::Tls(l, _) => l.local_addr().map_or(
                GrpcAddr::Tcp(SocketAddr::from(([0, 0, 0, 0], 0))),
                GrpcAddr::Tcp,
            ),
            Incoming::Unix(_, path) => GrpcAddr::Unix(path.clone()),
        }
    }

    /// Serves `router` until `stop` resolves.
    pub async fn serve(
        self,
        router: Router,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), tonic::transport::Error> {
        match self {
            Incoming::Tcp(l) => {
                // Nagle held each reply's trailers (a second small write) for the peer's delayed
                // ACK: ~40 ms a reply at 16 or more descriptors, over Envoy's 20 ms timeout.
                let incoming = TcpIncoming::from(l).with_nodelay(Some(true));
                router.serve_with_incoming_shutdown(incoming, stop).await
            }
            Incoming::Tls(l, acceptor) => {
                router
                    .serve_with_incoming_shutdown(acceptor.incoming(l), stop)
                    .await
            }
            Incoming::Unix(l, path) => {
                let served = router
                    .serve_with_incoming_shutdown(UnixListenerStream::new(l), stop)
                    .await;
                let _ = std::fs::remove_file(path);
                served
            }
        }
    }
}
