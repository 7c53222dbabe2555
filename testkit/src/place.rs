//! Where a test server lives: a free loopback port and a scratch directory of its own.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A port for a test server, from [61000, 65535]: above the kernel's usual ephemeral range
/// (32768–60999), where outgoing connections and `bind(0)` take theirs, and apart from the
/// cluster nodes' range ([`cluster_port`]). Each call of a process takes the next port, so the
/// threads of one test binary never pick the same one; a port another process holds is
/// skipped, and a server that still loses its port is started again elsewhere
/// (`Server::start`).
pub fn free_port() -> Result<u16, String> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    match next_free(&NEXT, 61_000, 4_536, |_| true) {
        Some(port) => Ok(port),
        None => TcpListener::bind(("127.0.0.1", 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| format!("no free loopback port: {e}")),
    }
}

/// Port + this is a cluster node's bus port.
pub const BUS_OFFSET: u16 = 10_000;

/// A port for a Redis Cluster node whose bus port (+[`BUS_OFFSET`]) is free too, from
/// [10000, 22767]: both then stay below the kernel's ephemeral range and apart from
/// [`free_port`]'s. A node that still fails to bind is started again on another port.
pub fn cluster_port() -> Result<u16, String> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    next_free(&NEXT, 10_000, 12_768, |port| port_free(port + BUS_OFFSET))
        .ok_or_else(|| "no free port pair for a cluster node".into())
}

/// The next port of [first, first + span) after the last one `next` gave, free now and `also`.
/// Test binaries of several packages run at once on one machine: each process starts somewhere
/// else in the range.
fn next_free(next: &AtomicU32, first: u32, span: u32, also: impl Fn(u16) -> bool) -> Option<u16> {
    let start = std::process::id().wrapping_mul(7919);
    (0..span)
        .map(|_| start.wrapping_add(next.fetch_add(1, Ordering::Relaxed)))
        .map(|n| (first + n % span) as u16)
        .find(|&port| port_free(port) && also(port))
}

fn port_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A new directory under the system's temporary directory, unique to this process and call.
/// The caller owns it: [`Scratch`] is the one that cleans up after itself.
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

/// A [`scratch_dir`] removed when dropped if the test passed. A failing test's thread is
/// unwinding when its servers drop: their directories (logs, RDB and AOF files) are kept for a
/// look, and named on stderr, which the test's output shows.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(what: &str) -> Result<Scratch, String> {
        scratch_dir(what).map(Scratch)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

/// A scratch directory reads as its path: `&scratch` where a `&Path` is wanted.
impl std::ops::Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("testkit: kept {} (the test failed)", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
