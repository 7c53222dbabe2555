//! The environment, read once at start: envoyproxy/ratelimit's variables with their meaning and
//! defaults where they apply here, ours prefixed `RLS_`. Variables of the peer that make no sense
//! here are accepted and logged as ignored; unknown ones are not an error.

use std::path::PathBuf;
use std::time::Duration;

use crate::store_settings::StoreSettings;

/// The peer's variables this server accepts but does not use (with why, for the log line).
const IGNORED: &[(&str, &str)] = &[
    (
        "USE_STATSD",
        "no statsd sink: metrics are Prometheus on /metrics",
    ),
    ("STATSD_HOST", "no statsd sink"),
    ("STATSD_PORT", "no statsd sink"),
    ("USE_DOG_STATSD", "no statsd sink"),
    ("EXTRA_TAGS", "no statsd sink"),
    ("STATS_FLUSH_INTERVAL", "Prometheus is scraped, not flushed"),
    ("DISABLE_STATS", "metrics are only rendered when scraped"),
    ("DEBUG_HOST", "no debug port: /metrics is on the HTTP port"),
    ("DEBUG_PORT", "no debug port: /metrics is on the HTTP port"),
    ("GRPC_UDS", "gRPC listens on GRPC_HOST:GRPC_PORT only"),
    ("BACKEND_TYPE", "the store is always Redis with the module"),
    ("REDIS_POOL_SIZE", "one multiplexed connection, pipelined"),
    (
        "REDIS_PIPELINE_WINDOW",
        "one multiplexed connection, pipelined",
    ),
    (
        "REDIS_PIPELINE_LIMIT",
        "one multiplexed connection, pipelined",
    ),
    (
        "EXPIRATION_JITTER_MAX_SECONDS",
        "the module expires its keys itself",
    ),
    (
        "LOCAL_CACHE_SIZE_IN_BYTES",
        "the denial cache is always on, bounded by entries",
    ),
    (
        "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
        "a denied request is never charged here",
    ),
    ("CONFIG_TYPE", "configuration comes from files only"),
    ("TRACING_ENABLED", "no tracing exporter"),
];

#[derive(Clone, Debug)]
pub struct Settings {
    pub host: String,
    pub port: u16,
    pub grpc_host: String,
    pub grpc_port: u16,
    pub runtime_root: PathBuf,
    pub runtime_subdirectory: String,
    pub runtime_appdirectory: String,
    pub runtime_watch_root: bool,
    pub runtime_ignore_dotfiles: bool,
    pub merge_domain_config: bool,
    /// The store(s): `REDIS_*` and `REDIS_PERSECOND_*` (store_settings.rs).
    pub redis: StoreSettings,
    pub cache_key_prefix: String,
    pub shadow_mode: bool,
    pub headers_enabled: bool,
    pub header_limit: String,
    pub header_remaining: String,
    pub header_reset: String,
    pub near_limit_ratio: f64,
    pub use_prometheus: bool,
    pub prometheus_addr: String,
    pub prometheus_path: String,
    pub log_level: String,
    pub log_format: String,
    /// `RLS_DEADLINE_MS`: the longest a decision waits for the store (then its class decides).
    pub deadline: Duration,
    /// `RLS_GATEWAYS`: how many RLS replicas share the store (the fallbacks take L/N).
    pub gateways: Option<u32>,
    /// `RLS_RELOAD_INTERVAL_MS`: how often the config directory is checked for changes.
    pub reload_interval: Duration,
    /// `RLS_IETF_HEADERS`: also add `RateLimit-Policy` and `RateLimit` (docs/http.md).
    pub ietf_headers: bool,
    /// `RLS_DENIAL_CACHE_MAX`: keys kept in the denial cache at most.
    pub denial_cache_max: usize,
    /// `RLS_BILLING_JOURNAL`: a file where billing counts owed while the store is down (admits
    /// and settles) are written before they count, so a killed server's are charged by the next.
    pub billing_journal: Option<std::path::PathBuf>,
}

impl Settings {
    /// From the process environment.
    pub fn from_env() -> Result<Settings, String> {
        Settings::from_lookup(|k| std::env::var(k).ok())
    }

    /// From any lookup (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
        let text = |k: &str, default: &str| get(k).unwrap_or_else(|| default.to_string());
        let flag = |k: &str, default: bool| -> Result<bool, String> {
            match get(k) {
                None => Ok(default),
                Some(v) => match v.to_ascii_lowercase().as_str() {
                    "1" | "true" | "t" | "yes" => Ok(true),
                    "0" | "false" | "f" | "no" | "" => Ok(false),
                    _ => Err(format!("{k}={v}: not a boolean")),
                },
            }
        };
        fn number<T: std::str::FromStr>(
            k: &str,
            v: Option<String>,
            default: T,
        ) -> Result<T, String> {
            match v {
                None => Ok(default),
                Some(v) => v
                    .trim()
                    .parse()
                    .map_err(|_| format!("{k}={v}: not a number")),
            }
        }
        let deadline_ms: u64 = number("RLS_DEADLINE_MS", get("RLS_DEADLINE_MS"), 5)?;
        let reload_ms: u64 = number(
            "RLS_RELOAD_INTERVAL_MS",
            get("RLS_RELOAD_INTERVAL_MS"),
            1000,
        )?;
        let gateways = match get("RLS_GATEWAYS") {
            None => None,
            Some(v) => Some(number("RLS_GATEWAYS", Some(v), 1u32)?),
        };
        let near_limit_ratio: f64 = number("NEAR_LIMIT_RATIO", get("NEAR_LIMIT_RATIO"), 0.8)?;
        Ok(Settings {
            host: text("HOST", "0.0.0.0"),
            port: number("PORT", get("PORT"), 8080)?,
            grpc_host: text("GRPC_HOST", "0.0.0.0"),
            grpc_port: number("GRPC_PORT", get("GRPC_PORT"), 8081)?,
            runtime_root: PathBuf::from(text("RUNTIME_ROOT", "/srv/runtime_data/current")),
            runtime_subdirectory: text("RUNTIME_SUBDIRECTORY", ""),
            runtime_appdirectory: text("RUNTIME_APPDIRECTORY", "config"),
            runtime_watch_root: flag("RUNTIME_WATCH_ROOT", true)?,
            runtime_ignore_dotfiles: flag("RUNTIME_IGNOREDOTFILES", false)?,
            merge_domain_config: flag("MERGE_DOMAIN_CONFIG", false)?,
            redis: StoreSettings::from_lookup(&get)?,
            cache_key_prefix: text("CACHE_KEY_PREFIX", ""),
            shadow_mode: flag("SHADOW_MODE", false)?,
            headers_enabled: flag("LIMIT_RESPONSE_HEADERS_ENABLED", false)?,
            header_limit: text("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
            header_remaining: text("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
            header_reset: text("LIMIT_RESET_HEADER", "RateLimit-Reset"),
            near_limit_ratio,
            use_prometheus: flag("USE_PROMETHEUS", false)?,
            prometheus_addr: text("PROMETHEUS_ADDR", ":9090"),
            prometheus_path: text("PROMETHEUS_PATH", "/metrics"),
            log_level: text("LOG_LEVEL", "WARN"),
            log_format: text("LOG_FORMAT", "text"),
            deadline: Duration::from_millis(deadline_ms.max(1)),
            gateways,
            reload_interval: Duration::from_millis(reload_ms.max(10)),
            ietf_headers: flag("RLS_IETF_HEADERS", false)?,
            denial_cache_max: number("RLS_DENIAL_CACHE_MAX", get("RLS_DENIAL_CACHE_MAX"), 100_000)?,
            billing_journal: get("RLS_BILLING_JOURNAL")
                .filter(|p| !p.is_empty())
                .map(std::path::PathBuf::from),
        })
    }

    /// The peer's variables set here that this server does not use, with why.
    pub fn ignored(get: impl Fn(&str) -> Option<String>) -> Vec<String> {
        IGNORED
            .iter()
            .filter(|(k, _)| get(k).is_some())
            .map(|(k, why)| format!("{k} is ignored: {why}"))
            .collect()
    }

    /// The directory of the config files: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY
    /// (the peer reads `config.*` keys under the subdirectory when RUNTIME_WATCH_ROOT is true,
    /// the app directory itself otherwise: the same files).
    pub fn config_dir(&self) -> PathBuf {
        self.runtime_root
            .join(&self.runtime_subdirectory)
            .join(&self.runtime_appdirectory)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(vars: &[(&str, &str)]) -> Result<Settings, String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn the_peers_defaults_and_urls() {
        let s = with(&[]).unwrap();
        assert_eq!((s.port, s.grpc_port), (8080, 8081));
        assert_eq!(
            s.config_dir(),
            PathBuf::from("/srv/runtime_data/current/config")
        );
        let s = with(&[
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ])
        .unwrap();
        assert_eq!(s.config_dir(), PathBuf::from("/data/ratelimit/config"));
        // What this server once refused for lack of a feature, it takes now.
        assert!(with(&[("REDIS_TYPE", "SENTINEL"), ("REDIS_URL", "m,h:26379")]).is_ok());
        assert!(with(&[
            ("REDIS_TLS", "true"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "h:6379")
        ])
        .is_ok());
        assert_eq!(
            Settings::ignored(|k| (k == "USE_STATSD").then(|| "true".to_string())).len(),
            1
        );
    }
}
