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

/// The module to load: `$RL_MODULE`, else the workspace's debug build (run `cargo build`).
pub fn module_path() -> Result<PathBuf, String> {
    if let Ok(path) = std::env::var("RL_MODULE") {
        return Ok(PathBuf::from(path));
    }
    let debug = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/debug/libredis_ratelimit.so");
    if debug.exists() {
        Ok(debug)
    } else {
        Err(format!(
            "{} is missing: run `cargo build` (or `make build`) first",
            debug.display()
        ))
    }
}

/// The rule of docs/operating.md ("Connections", the minimal ACL rule for the module backend)
/// for a user `name` with password `password` on keys `pattern`: what a gateway's client, the
/// RLS and the regions controller need, and nothing more.
pub fn minimal_module_acl(name: &str, password: &str, pattern: &str) -> String {
    format!("user {name} on >{password} ~{pattern} resetchannels -@all {MODULE_COMMANDS}")
}

/// The commands of the minimal rule for the module backend (docs/operating.md).
pub const MODULE_COMMANDS: &str = "+command|info +rl.gcra +rl.tokenbucket +rl.slidinglog \
+rl.slidingcounter +rl.fixedwindow +rl.lease +rl.refund +rl.charge +rl.settle +rl.all +rl.shape \
+rl.peek";

/// The regions controller's minimal rule (docs/operating.md): `RL.DEMAND`, `RL.SHARE`, `SCAN`
/// for key patterns, `CLUSTER SLOTS` for a Cluster region.
pub fn minimal_regions_acl(name: &str, password: &str, pattern: &str) -> String {
    format!("user {name} on >{password} ~{pattern} resetchannels -@all {REGIONS_COMMANDS}")
}

/// The commands of the regions controller's minimal rule (docs/operating.md).
pub const REGIONS_COMMANDS: &str = "+command|info +rl.demand +rl.share +scan +cluster|slots";
