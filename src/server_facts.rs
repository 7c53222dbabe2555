//! Facts about the server the module was loaded into, found once at load: which server and
//! version it is (the load refused below Redis 7.0), which module API it offers, logged in one
//! line; and the ACL categories the commands join where the server has them (7.2+).
//!
//! Valkey 8 answers `RedisModule_GetServerVersion` with its own version (8.0.1 → 0x00080001)
//! while `INFO server` says `redis_version:7.2.4` (the Redis it is compatible with); its name
//! and own version are there too (`server_name:valkey`, `valkey_version`), read through
//! `RedisModule_GetServerInfo`. Redis has no `server_name` field.

use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};

use redis_module::Context;

use crate::host::load;

/// The oldest server the module supports (0x00MMmmpp, as `RedisModule_GetServerVersion`).
pub const MIN_VERSION: i32 = 0x0007_0000;

/// What the running server told the module about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// "Redis", or the `server_name` a fork reports (e.g. "valkey").
    pub name: String,
    /// Its own version string (`valkey_version` for Valkey), if known.
    pub version: Option<String>,
    /// The version it reports to modules (`RedisModule_GetServerVersion`), 0x00MMmmpp, if the
    /// API exists.
    pub redis_version: Option<i32>,
}

impl Server {
    /// "Redis 7.2.6", "valkey 8.0.1", "Redis (version unknown)"; a fork whose own version
    /// differs from the one it gives modules shows both.
    pub fn describe(&self) -> String {
        let mut s = self.name.clone();
        match (&self.version, self.redis_version) {
            (Some(v), Some(r)) if *v != version_string(r) => {
                s.push_str(&format!(" {v} (module API of Redis {})", version_string(r)));
            }
            (Some(v), _) => s.push_str(&format!(" {v}")),
            (None, Some(r)) => s.push_str(&format!(" {}", version_string(r))),
            (None, None) => s.push_str(" (version unknown)"),
        }
        s
    }

    /// Below Redis 7.0 (by the version the server reports to modules).
    pub fn too_old(&self) -> bool {
        self.redis_version.is_some_and(|v| v < MIN_VERSION)
    }
}

/// 0x00070206 → "7.2.6".
pub fn version_string(v: i32) -> String {
    format!("{}.{}.{}", (v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff)
}

/// Asks the running server (through `host::load`: a missing API function is `None`).
pub fn detect(ctx: &Context) -> Server {
    let mut server = Server {
        name: "Redis".to_string(),
        version: None,
        redis_version: load::server_version(),
    };
    let fields = load::server_info(ctx, c"server", &[c"server_name", c"redis_version"]);
    let field = |name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    match field("server_name") {
        Some(name) => {
            let own = CString::new(format!("{name}_version")).unwrap_or_default();
            server.version = load::server_info(ctx, c"server", &[own.as_c_str()])
                .into_iter()
                .next()
                .map(|(_, v)| v);
            server.name = name;
        }
        None => server.version = field("redis_version"),
    }
    server
}

/// The module's own ACL category, granting the gateway commands.
pub const ACL_CATEGORY: &str = "ratelimit";

/// Whether `@ratelimit` exists on this server (added at load, Redis 7.4+ and Valkey 8).
static OWN_CATEGORY: AtomicBool = AtomicBool::new(false);

/// Adds `@ratelimit` where the server can (`RedisModule_AddACLCategory`, only during load).
/// A category of that name that already exists (another module's) is used as it is.
pub fn add_acl_category(ctx: &Context) -> bool {
    let added = load::add_acl_category(ctx, c"ratelimit");
    OWN_CATEGORY.store(added, Ordering::Relaxed);
    added
}

/// A command's ACL categories for `RedisModule_SetCommandACLCategories`: the row's, without
/// `ratelimit` where the server has no such category (7.2). None where the server has no
/// categories for module commands at all (7.0: grant by command name).
pub fn acl_categories(row: &str) -> Option<CString> {
    if !load::has_command_acl_categories() {
        return None;
    }
    CString::new(categories_for(row, OWN_CATEGORY.load(Ordering::Relaxed))).ok()
}

fn categories_for(row: &str, own_category: bool) -> String {
    row.split_whitespace()
        .filter(|c| own_category || *c != ACL_CATEGORY)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The module API features the module uses where the server offers them, for the load line.
pub fn features() -> String {
    let categories = load::has_command_acl_categories();
    let acl = match (categories, OWN_CATEGORY.load(Ordering::Relaxed)) {
        (true, true) => "ACL categories built-in + @ratelimit",
        (true, false) => "ACL categories built-in only (no @ratelimit before Redis 7.4)",
        (false, _) => "no ACL categories for module commands (grant by name)",
    };
    format!("clock {}; {acl}", crate::clock::source())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_redis_and_forks() {
        let redis = Server {
            name: "Redis".into(),
            version: Some("7.2.6".into()),
            redis_version: Some(0x0007_0206),
        };
        assert_eq!(redis.describe(), "Redis 7.2.6");
        assert!(!redis.too_old());
        let valkey = Server {
            name: "valkey".into(),
            version: Some("8.0.1".into()),
            redis_version: Some(0x0008_0001),
        };
        assert_eq!(valkey.describe(), "valkey 8.0.1");
        let fork = Server {
            name: "fork".into(),
            version: Some("1.2.3".into()),
            redis_version: Some(0x0007_0204),
        };
        assert_eq!(fork.describe(), "fork 1.2.3 (module API of Redis 7.2.4)");
        let old = Server {
            name: "Redis".into(),
            version: None,
            redis_version: Some(0x0006_020e),
        };
        assert_eq!(old.describe(), "Redis 6.2.14");
        assert!(old.too_old());
    }

    #[test]
    fn ratelimit_category_only_where_the_server_added_it() {
        assert_eq!(
            categories_for("write fast ratelimit", true),
            "write fast ratelimit"
        );
        assert_eq!(categories_for("write fast ratelimit", false), "write fast");
        assert_eq!(
            categories_for("admin dangerous fast", false),
            "admin dangerous fast"
        );
    }
}
