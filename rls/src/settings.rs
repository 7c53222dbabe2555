//! The environment, read once at start: envoyproxy/ratelimit's variables with their meaning and
//! defaults, ours prefixed `RLS_`. The peer's variables that make no sense here are accepted and
//! logged as ignored, with why (IGNORED); those that choose what this server does not do are
//! refused by name (REFUSED); unknown ones are not an error.

use std::path::PathBuf;
use std::time::Duration;

use crate::store_settings::StoreSettings;

use crate::yaml_limits::YamlLimits;

/// `RL.ALL`'s most keys per call: the most descriptors one request can be decided on at once.
pub const MAX_KEYS_PER_CALL: usize = 32;

/// The peer's variables this server accepts but does not use (with why, for the log line).
const IGNORED: &[(&str, &str)] = &[
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
        "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        "one multiplexed connection per node, pipelined",
    ),
    (
        "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        "one multiplexed connection: no pool to run empty",
    ),
    (
        "FORCE_START_WITHOUT_INITIAL_CONFIG",
        "a bad or missing config never stops this server: it always starts and waits for one",
    ),
    (
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        "the response time is a histogram in seconds, as the peer's default mapping gives it",
    ),
    (
        "TRACING_ENABLED",
        "no tracing exporter: spans are not recorded",
    ),
    ("TRACING_SERVICE_NAME", "no tracing exporter"),
    ("TRACING_SERVICE_NAMESPACE", "no tracing exporter"),
    ("TRACING_SERVICE_INSTANCE_ID", "no tracing exporter"),
    ("TRACING_EXPORTER_PROTOCOL", "no tracing exporter"),
    ("TRACING_SAMPLING_RATE", "no tracing exporter"),
];

/// The peer's variables that choose what this server does not do: refused at start, by name,
/// when set to anything but the default.
const REFUSED: &[(&str, &str, &str)] = &[
    (
        "BACKEND_TYPE",
        "redis",
        "the store is Redis with the module (memcache is not served)",
    ),
    (
        "CONFIG_TYPE",
        "FILE",
        "configuration comes from files (xDS is not served)",
    ),
    (
        "USE_DOG_STATSD_MOGRIFIERS",
        "",
        "DogStatsD mogrifiers are not applied",
    ),
    (
        "PROMETHEUS_MAPPER_YAML",
        "",
        "a custom statsd-to-Prometheus mapping is not read: the default mapping's names are served",
    ),
    ("MEMCACHE_HOST_PORT", "", "memcache is not served"),
    ("MEMCACHE_SRV", "", "memcache is not served"),
];

/// The denial cache's default bound: 16 MiB, under 2 % of a 1 GiB container.
pub const DEFAULT_LOCAL_CACHE_BYTES: u64 = 16 << 20;

#[derive(Clone, Debug)]
pub struct Settings {
    pub host: String,
    pub port: u16,
    /// DEBUG_HOST, DEBUG_PORT (0.0.0.0, 6070): `/rlconfig` and `/stats`.
    pub debug_host: String,
    pub debug_port: u16,
    /// RLS_HTTP_MAX_REQUEST_BYTES (65536): the longest request an HTTP port reads (head and
    /// body, e.g. a `POST /json`); longer is answered 413.
    pub http_max_request_bytes: usize,
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
    /// QUOTA_MODE: every descriptor in quota mode (the request denied only when all are over).
    pub quota_mode: bool,
    /// RESPONSE_DYNAMIC_METADATA: the request and the passed rules' `metadata` in the response.
    pub response_dynamic_metadata: bool,
    /// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: one descriptor over its limit charges none of
    /// the request's (one atomic `RL.ALL`); unset, each is decided and charged on its own.
    pub stop_increment_when_overlimit: bool,
    pub headers_enabled: bool,
    pub header_limit: String,
    pub header_remaining: String,
    pub header_reset: String,
    pub near_limit_ratio: f64,
    /// USE_STATSD (true, as the peer), STATSD_HOST, STATSD_PORT, EXTRA_TAGS, USE_DOG_STATSD,
    /// STATS_FLUSH_INTERVAL, DISABLE_STATS: `statsd.rs`.
    pub use_statsd: bool,
    pub statsd_host: String,
    pub statsd_port: u16,
    /// EXTRA_TAGS `k1:v1,k2:v2`, sorted by key.
    pub extra_tags: Vec<(String, String)>,
    pub use_dog_statsd: bool,
    pub stats_flush_interval: Duration,
    pub disable_stats: bool,
    pub use_prometheus: bool,
    pub prometheus_addr: String,
    pub prometheus_path: String,
    pub log_level: String,
    pub log_format: String,
    /// The longest a decision waits for the store (then its class decides): `RLS_DEADLINE_MS`,
    /// else the peer's `REDIS_TIMEOUT`, else 5 ms.
    pub deadline: Duration,
    /// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: unhealthy until a config with a domain loads.
    pub healthy_with_config: bool,
    /// FORCE_START_WITHOUT_INITIAL_CONFIG: accepted; a bad or missing config at start never
    /// stops this server (it serves without a config until one loads), set or not.
    pub force_start_without_initial_config: bool,
    /// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: health follows the store (unhealthy while the
    /// client's circuit is open, i.e. the store keeps failing).
    pub redis_health_follows_store: bool,
    /// REDIS_STARTUP_INITIAL_INTERVAL, _MAX_INTERVAL, _MAX_ELAPSED_TIME (0: forever): a store
    /// that does not answer at start is retried, the wait doubling up to the max.
    pub redis_startup_initial: Duration,
    pub redis_startup_max_interval: Duration,
    pub redis_startup_max_elapsed: Duration,
    /// GRPC_UDS: a Unix socket path to serve gRPC on instead of GRPC_HOST:GRPC_PORT.
    pub grpc_uds: String,
    /// GRPC_MAX_CONNECTION_AGE, GRPC_MAX_CONNECTION_AGE_GRACE (24h, 1h).
    pub grpc_max_connection_age: Duration,
    pub grpc_max_connection_age_grace: Duration,
    /// GRPC_SERVER_USE_TLS with GRPC_SERVER_TLS_CERT/_KEY (PEM files); GRPC_CLIENT_TLS_CACERT
    /// makes it mutual (a client certificate signed by that CA required), GRPC_CLIENT_TLS_SAN
    /// also requires that name among the client certificate's subject alternative names.
    pub grpc_tls: bool,
    pub grpc_tls_cert: String,
    pub grpc_tls_key: String,
    pub grpc_client_ca: String,
    pub grpc_client_san: String,
    /// `RLS_GATEWAYS`: how many RLS replicas share the store (the fallbacks take L/N).
    pub gateways: Option<u32>,
    /// `RLS_RELOAD_INTERVAL_MS`: how often the config directory is checked for changes.
    pub reload_interval: Duration,
    /// `RLS_IETF_HEADERS`: also add `RateLimit-Policy` and `RateLimit` (docs/http.md).
    pub ietf_headers: bool,
    /// `LOCAL_CACHE_SIZE_IN_BYTES` (the peer's name): the denial cache's bound in bytes, its
    /// keys and a fixed cost per entry counted; 0 turns it off, as for the peer.
    pub local_cache_size_in_bytes: u64,
    /// `RLS_CONFIG_MAX_DEPTH` and `RLS_CONFIG_MAX_ALIAS_NODES`: a config file's bounds.
    pub yaml_limits: YamlLimits,
    /// `RLS_MAX_DESCRIPTORS`: limited descriptors (distinct store keys) one request may bring,
    /// at most RL.ALL's 32; a request with more is refused with INVALID_ARGUMENT.
    pub max_descriptors: usize,
    /// `RLS_BILLING_JOURNAL`: a file where billing counts owed while the store is down (admits
    /// and settles) are written before they count, so a killed server's are charged by the next.
    pub billing_journal: Option<std::path::PathBuf>,
    /// `REDIS_LOAD_LIBRARY`: `no` (default), `missing` or `replace`: whether the service loads
    /// the Functions library on a store without the module (docs/functions.md, versions).
    pub load_library: ratelimit_client::LoadLibrary,
}

impl Settings {
    /// From the process environment.
    pub fn from_env() -> Result<Settings, String> {
        Settings::from_lookup(|k| std::env::var(k).ok())
    }

    /// From any lookup (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
        for (k, default, why) in REFUSED {
            if let Some(v) = get(k) {
                if !v.trim().is_empty() && !v.trim().eq_ignore_ascii_case(default) {
                    return Err(format!("{k}={v} is refused: {why}"));
                }
            }
        }
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
        let duration = |k: &str, default: &str| -> Result<Duration, String> {
            crate::go_duration::parse(&text(k, default)).map_err(|e| format!("{k}: {e}"))
        };
        let deadline = match (get("RLS_DEADLINE_MS"), get("REDIS_TIMEOUT")) {
            (Some(ms), _) => Duration::from_millis(number("RLS_DEADLINE_MS", Some(ms), 5u64)?),
            (None, Some(_)) => duration("REDIS_TIMEOUT", "")?,
            (None, None) => Duration::from_millis(5),
        };
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
        if get("RLS_DENIAL_CACHE_MAX").is_some() {
            return Err(
                "RLS_DENIAL_CACHE_MAX is replaced by LOCAL_CACHE_SIZE_IN_BYTES (a bound in bytes)"
                    .into(),
            );
        }
        let max_descriptors: usize = number(
            "RLS_MAX_DESCRIPTORS",
            get("RLS_MAX_DESCRIPTORS"),
            MAX_KEYS_PER_CALL,
        )?;
        if max_descriptors == 0 || max_descriptors > MAX_KEYS_PER_CALL {
            return Err(format!(
                "RLS_MAX_DESCRIPTORS={max_descriptors}: between 1 and {MAX_KEYS_PER_CALL} \
                 (RL.ALL decides at most {MAX_KEYS_PER_CALL} keys at once)"
            ));
        }
        Ok(Settings {
            host: text("HOST", "0.0.0.0"),
            port: number("PORT", get("PORT"), 8080)?,
            debug_host: text("DEBUG_HOST", "0.0.0.0"),
            debug_port: number("DEBUG_PORT", get("DEBUG_PORT"), 6070)?,
            http_max_request_bytes: number(
                "RLS_HTTP_MAX_REQUEST_BYTES",
                get("RLS_HTTP_MAX_REQUEST_BYTES"),
                65_536,
            )?,
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
            quota_mode: flag("QUOTA_MODE", false)?,
            response_dynamic_metadata: flag("RESPONSE_DYNAMIC_METADATA", false)?,
            stop_increment_when_overlimit: flag("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false)?,
            headers_enabled: flag("LIMIT_RESPONSE_HEADERS_ENABLED", false)?,
            header_limit: text("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
            header_remaining: text("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
            header_reset: text("LIMIT_RESET_HEADER", "RateLimit-Reset"),
            near_limit_ratio,
            use_statsd: flag("USE_STATSD", true)?,
            statsd_host: text("STATSD_HOST", "localhost"),
            statsd_port: number("STATSD_PORT", get("STATSD_PORT"), 8125)?,
            extra_tags: parse_tags(&text("EXTRA_TAGS", ""))?,
            use_dog_statsd: flag("USE_DOG_STATSD", false)?,
            stats_flush_interval: duration("STATS_FLUSH_INTERVAL", "10s")?,
            disable_stats: flag("DISABLE_STATS", false)?,
            use_prometheus: flag("USE_PROMETHEUS", false)?,
            prometheus_addr: text("PROMETHEUS_ADDR", ":9090"),
            prometheus_path: text("PROMETHEUS_PATH", "/metrics"),
            log_level: text("LOG_LEVEL", "WARN"),
            log_format: text("LOG_FORMAT", "text"),
            deadline: deadline.max(Duration::from_millis(1)),
            healthy_with_config: flag("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)?,
            force_start_without_initial_config: flag("FORCE_START_WITHOUT_INITIAL_CONFIG", false)?,
            redis_health_follows_store: flag("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false)?,
            redis_startup_initial: duration("REDIS_STARTUP_INITIAL_INTERVAL", "1s")?,
            redis_startup_max_interval: duration("REDIS_STARTUP_MAX_INTERVAL", "30s")?,
            redis_startup_max_elapsed: duration("REDIS_STARTUP_MAX_ELAPSED_TIME", "0")?,
            grpc_uds: text("GRPC_UDS", ""),
            grpc_max_connection_age: duration("GRPC_MAX_CONNECTION_AGE", "24h")?,
            grpc_max_connection_age_grace: duration("GRPC_MAX_CONNECTION_AGE_GRACE", "1h")?,
            grpc_tls: flag("GRPC_SERVER_USE_TLS", false)?,
            grpc_tls_cert: text("GRPC_SERVER_TLS_CERT", ""),
            grpc_tls_key: text("GRPC_SERVER_TLS_KEY", ""),
            grpc_client_ca: text("GRPC_CLIENT_TLS_CACERT", ""),
            grpc_client_san: text("GRPC_CLIENT_TLS_SAN", ""),
            gateways,
            reload_interval: Duration::from_millis(reload_ms.max(10)),
            ietf_headers: flag("RLS_IETF_HEADERS", false)?,
            local_cache_size_in_bytes: number(
                "LOCAL_CACHE_SIZE_IN_BYTES",
                get("LOCAL_CACHE_SIZE_IN_BYTES"),
                DEFAULT_LOCAL_CACHE_BYTES,
            )?,
            yaml_limits: YamlLimits {
                max_depth: number(
                    "RLS_CONFIG_MAX_DEPTH",
                    get("RLS_CONFIG_MAX_DEPTH"),
                    YamlLimits::default().max_depth,
                )?,
                max_alias_nodes: number(
                    "RLS_CONFIG_MAX_ALIAS_NODES",
                    get("RLS_CONFIG_MAX_ALIAS_NODES"),
                    YamlLimits::default().max_alias_nodes,
                )?,
            },
            max_descriptors,
            billing_journal: get("RLS_BILLING_JOURNAL")
                .filter(|p| !p.is_empty())
                .map(std::path::PathBuf::from),
            load_library: text("REDIS_LOAD_LIBRARY", "no").parse()?,
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

/// EXTRA_TAGS: `k1:v1,k2:v2`.
fn parse_tags(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut tags = Vec::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once(':')
            .ok_or_else(|| format!("EXTRA_TAGS: '{pair}' is not key:value"))?;
        tags.push((k.trim().to_string(), v.trim().to_string()));
    }
    tags.sort();
    Ok(tags)
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
        assert_eq!(
            with(&[]).unwrap().load_library,
            ratelimit_client::LoadLibrary::No
        );
        assert_eq!(
            with(&[("REDIS_LOAD_LIBRARY", "replace")])
                .unwrap()
                .load_library,
            ratelimit_client::LoadLibrary::Replace
        );
        assert!(with(&[("REDIS_LOAD_LIBRARY", "yes")])
            .err()
            .is_some_and(|e| e.contains("REDIS_LOAD_LIBRARY")));
        // What this server once refused for lack of a feature, it takes now.
        assert!(with(&[("REDIS_TYPE", "SENTINEL"), ("REDIS_URL", "m,h:26379")]).is_ok());
        assert!(with(&[
            ("REDIS_TLS", "true"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "h:6379")
        ])
        .is_ok());
        assert_eq!(
            Settings::ignored(|k| (k == "REDIS_POOL_SIZE").then(|| "10".to_string())).len(),
            1
        );
        assert!(with(&[("BACKEND_TYPE", "redis"), ("CONFIG_TYPE", "FILE")]).is_ok());
        let err = with(&[("BACKEND_TYPE", "memcache")]).unwrap_err();
        assert!(err.starts_with("BACKEND_TYPE=memcache is refused"), "{err}");
        assert!(with(&[("CONFIG_TYPE", "GRPC_XDS")]).is_err());
        assert!(with(&[("PROMETHEUS_MAPPER_YAML", "/m.yaml")]).is_err());
        let s = with(&[
            ("GRPC_MAX_CONNECTION_AGE", "90s"),
            ("GRPC_MAX_CONNECTION_AGE_GRACE", "1m30s"),
            ("STATS_FLUSH_INTERVAL", "250ms"),
        ])
        .unwrap();
        assert_eq!(s.grpc_max_connection_age, Duration::from_secs(90));
        assert_eq!(s.grpc_max_connection_age_grace, Duration::from_secs(90));
        assert_eq!(s.stats_flush_interval, Duration::from_millis(250));
        let s = with(&[]).unwrap();
        assert_eq!(s.grpc_max_connection_age, Duration::from_secs(86_400));
        assert!((s.use_statsd, s.debug_port) == (true, 6070));
        assert!(with(&[("GRPC_MAX_CONNECTION_AGE", "1 day")]).is_err());
        let s = with(&[("EXTRA_TAGS", "foo:bar, a:b")]).unwrap();
        assert_eq!(
            s.extra_tags,
            [("a".into(), "b".into()), ("foo".into(), "bar".into())]
        );
        assert!(with(&[("EXTRA_TAGS", "foo")]).is_err());
    }

    #[test]
    fn credentials_are_handed_over_as_written_and_never_shown() {
        // REDIS_AUTH reaches AUTH as written: no URL is built from it, so nothing to encode.
        let s = with(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "h:1"),
            ("REDIS_AUTH", "al ice:p@ss/w#1?+=%"),
        ])
        .unwrap();
        assert_eq!(s.redis.main.auth.user.as_deref(), Some("al ice"));
        assert_eq!(
            s.redis.main.auth.password.as_ref().map(|p| p.expose()),
            Some("p@ss/w#1?+=%")
        );
        assert!(!format!("{s:?}").contains("p@ss"));
        assert!(!s.redis.main.to_string().contains("p@ss"));
        assert!(with(&[("RLS_DENIAL_CACHE_MAX", "10")]).is_err());
        assert!(with(&[("RLS_MAX_DESCRIPTORS", "33")]).is_err());
    }
}
