//! TCP_NODELAY on every listener, read off the server's own accepted sockets. With Nagle on, a
//! reply's trailers (a second small write) waited for the client's delayed ACK: ~44 ms a reply at
//! 16 descriptors, over Envoy's 20 ms timeout. Timing that would depend on the machine's load, so
//! the test asks the kernel instead: the RLS runs in this process, and its accepted socket is one
//! of this process's descriptors.

mod support;

use std::mem::ManuallyDrop;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::FromRawFd;
use std::time::Duration;

use ratelimit_rls::listen::GrpcAddr;
use support::*;

const GOOD: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n";

/// TCP_NODELAY of the socket this process accepted from `peer` on `port`, once the server has
/// had the time to set it. The accepted socket is in the descriptor table as soon as `accept`
/// returns, a moment before the server's next line sets the option: reading it at first sight
/// raced that line (seen failing once on a loaded machine, the TLS listener). So a socket seen
/// without the option is read again until it has it; the bound only ends a broken run.
async fn accepted_nodelay(port: u16, peer: SocketAddr) -> bool {
    let mut seen = None;
    for _ in 0..1_000 {
        seen = find_accepted(port, peer);
        if seen == Some(true) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    seen.unwrap_or_else(|| panic!("no socket accepted from {peer} on port {port}"))
}

fn find_accepted(port: u16, peer: SocketAddr) -> Option<bool> {
    for entry in std::fs::read_dir("/proc/self/fd").ok()?.flatten() {
        let is_socket = std::fs::read_link(entry.path())
            .map(|l| l.to_string_lossy().starts_with("socket:"))
            .unwrap_or(false);
        let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if !is_socket {
            continue;
        }
        // Borrowed, never closed: the descriptor belongs to the server.
        let s = ManuallyDrop::new(unsafe { TcpStream::from_raw_fd(fd) });
        let local = s.local_addr().ok().map(|a| a.port());
        if local == Some(port) && s.peer_addr().ok() == Some(peer) {
            return s.nodelay().ok();
        }
    }
    None
}

/// Connects to `port` and returns whether the server set TCP_NODELAY on its side.
async fn server_sets_nodelay(port: u16) -> bool {
    let client = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let me = client.local_addr().unwrap();
    let nodelay = accepted_nodelay(port, me).await;
    drop(client);
    nodelay
}

fn grpc_port(running: &ratelimit_rls::server::Running) -> u16 {
    match &running.grpc_addr {
        GrpcAddr::Tcp(a) => a.port(),
        other => panic!("{other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grpc_and_http_listeners_set_nodelay() {
    let redis = Redis::start();
    let rls = Rls::start(&redis, GOOD, &[]).await;
    assert!(server_sets_nodelay(grpc_port(rls.running())).await, "gRPC");
    assert!(
        server_sets_nodelay(rls.running().http_addr.port()).await,
        "HTTP"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tls_grpc_listener_sets_nodelay() {
    let redis = Redis::start();
    let dir = redis.scratch("pki");
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(dir.join("server.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
    let (cert, key) = (
        dir.join("server.pem").display().to_string(),
        dir.join("server.key").display().to_string(),
    );
    let root = scratch("nodelay-tls");
    write_config(&root, "config.yaml", GOOD);
    let tls = [
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", cert.as_str()),
        ("GRPC_SERVER_TLS_KEY", key.as_str()),
    ];
    let running = ratelimit_rls::server::start(settings(&root, &redis, &tls))
        .await
        .unwrap();
    // Set at accept, before the handshake: a bare TCP connection shows it.
    assert!(server_sets_nodelay(grpc_port(&running)).await, "TLS gRPC");
    running.stop().await;
}
