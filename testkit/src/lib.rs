//! Real servers for the workspace's tests: `redis-server` plain or over TLS (certificates made
//! here), with ACL users from an aclfile, replicas, and `redis-sentinel` watching a master. Each
//! listens on a free loopback port and is killed when dropped. No mocks: what a test talks to is
//! the server a production fleet runs.

pub mod certs;
pub mod sentinel;
pub mod server;

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

pub use certs::{Pair, Pki, ServerCert};
pub use sentinel::Sentinel;
pub use server::{ClientCerts, Options, Server, Tls};

/// A loopback port free now (the kernel's choice). Another process may take it before the
/// server binds it: the servers here retry with another port when that happens.
pub fn free_port() -> Result<u16, String> {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free loopback port: {e}"))
}

/// A new directory under the system's temporary directory, unique to this process and call.
pub fn scratch_dir(what: &str) -> Result<PathBuf, String> {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "rl-testkit-{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}
