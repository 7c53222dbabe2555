//! What the servers load and whom they let in: the module's path and the minimal ACL rules that
//! docs/operating.md documents.

use std::path::PathBuf;

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
+rl.concurrency +rl.peek";

/// The rule of docs/operating.md for the Functions backend (a server without the module, the
/// library loaded): detecting it (`FUNCTION LIST`), calling it (`FCALL`, `FCALL_RO`), and the
/// commands its functions run, which Redis checks against the caller's ACL (`ZREM` the gateway
/// client also sends itself: a concurrency slot's release).
pub fn minimal_functions_acl(name: &str, password: &str, pattern: &str) -> String {
    format!("user {name} on >{password} ~{pattern} resetchannels -@all {FUNCTIONS_COMMANDS}")
}

/// The commands of the minimal rule for the Functions backend (docs/operating.md).
pub const FUNCTIONS_COMMANDS: &str = "+command|info +function|list +fcall +fcall_ro +time +get \
+set +del +type +pexpireat +llen +lrange +lset +ltrim +rpush +zadd +zcard +zcount +zrange \
+zrangebyscore +zrem +zremrangebyscore +zscore";

/// The regions controller's minimal rule (docs/operating.md): `RL.DEMAND`, `RL.SHARE`, `SCAN`
/// for key patterns, `CLUSTER SLOTS` for a Cluster region.
pub fn minimal_regions_acl(name: &str, password: &str, pattern: &str) -> String {
    format!("user {name} on >{password} ~{pattern} resetchannels -@all {REGIONS_COMMANDS}")
}

/// The commands of the regions controller's minimal rule (docs/operating.md).
pub const REGIONS_COMMANDS: &str = "+command|info +rl.demand +rl.share +scan +cluster|slots";
