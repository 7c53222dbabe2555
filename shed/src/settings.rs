//! The sidecar's settings: each a flag or the same name as an environment variable (for
//! systemd), the flag winning. `--listen` and `--upstream` are needed; everything else has a
//! default, and a value given is used as written or refused by name.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use http::{HeaderName, Uri};

use crate::admission::QueueSettings;
use crate::limit::Bounds;
use crate::shedder::Settings as ShedSettings;

/// Flag → environment variable; the flags that take no value are `SWITCHES`.
const FLAGS: &[(&str, &str)] = &[
    ("--listen", "SHED_LISTEN"),
    ("--upstream", "SHED_UPSTREAM"),
    ("--priority-header", "SHED_PRIORITY_HEADER"),
    ("--tenant-header", "SHED_TENANT_HEADER"),
    ("--admin-listen", "SHED_ADMIN_LISTEN"),
    ("--upstream-h2", "SHED_UPSTREAM_H2"),
    ("--min-limit", "SHED_MIN_LIMIT"),
    ("--max-limit", "SHED_MAX_LIMIT"),
    ("--initial-limit", "SHED_INITIAL_LIMIT"),
    ("--latency-target-ms", "SHED_LATENCY_TARGET_MS"),
    ("--max-queue", "SHED_MAX_QUEUE"),
    ("--max-tenants", "SHED_MAX_TENANTS"),
];
const SWITCHES: &[&str] = &["--upstream-h2"];

pub const USAGE: &str = "usage: redis-ratelimit-shed --listen ADDR --upstream http://HOST:PORT \
[--priority-header NAME] [--tenant-header NAME] [--admin-listen ADDR] [--upstream-h2] \
[--min-limit N] [--max-limit N] [--initial-limit N] [--latency-target-ms MS] [--max-queue N] \
[--max-tenants N]  (each also an environment variable: SHED_LISTEN, SHED_UPSTREAM, ...)";

#[derive(Clone, Debug)]
pub struct Settings {
    pub listen: SocketAddr,
    pub upstream: Uri,
    pub priority_header: Option<HeaderName>,
    pub tenant_header: Option<HeaderName>,
    /// Where `/metrics` and `/healthcheck` are served; on `listen` when none.
    pub admin_listen: Option<SocketAddr>,
    /// Speak HTTP/2 (prior knowledge) to the upstream, as a gRPC service needs.
    pub upstream_h2: bool,
    pub shed: ShedSettings,
}

impl Settings {
    /// From the arguments (without the program's name) and the environment.
    pub fn parse(args: &[String], env: &HashMap<String, String>) -> Result<Settings, String> {
        let mut given: HashMap<&str, String> = HashMap::new();
        for (flag, var) in FLAGS {
            if let Some(v) = env.get(*var) {
                given.insert(flag, v.clone());
            }
        }
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let (name, inline) = match a.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (a.as_str(), None),
            };
            let Some((flag, _)) = FLAGS.iter().find(|(f, _)| *f == name) else {
                return Err(format!("unknown argument {a}\n{USAGE}"));
            };
            let value = if SWITCHES.contains(flag) {
                inline.unwrap_or_else(|| "true".into())
            } else {
                match inline.or_else(|| it.next().cloned()) {
                    Some(v) => v,
                    None => return Err(format!("{flag} needs a value")),
                }
            };
            given.insert(flag, value);
        }
        let get = |flag: &str| given.get(flag).map(String::as_str);
        let need = |flag: &str| get(flag).ok_or_else(|| format!("{flag} is required\n{USAGE}"));
        let number = |flag: &str| -> Result<Option<usize>, String> {
            get(flag)
                .map(|v| v.parse().map_err(|_| format!("{flag}: not a count: {v}")))
                .transpose()
        };
        let header = |flag: &str| -> Result<Option<HeaderName>, String> {
            get(flag)
                .map(|v| HeaderName::try_from(v).map_err(|_| format!("{flag}: not a header: {v}")))
                .transpose()
        };
        let addr = |flag: &str, v: &str| -> Result<SocketAddr, String> {
            v.parse()
                .map_err(|_| format!("{flag}: not an address: {v}"))
        };

        let listen = addr("--listen", need("--listen")?)?;
        let upstream_text = need("--upstream")?;
        let upstream: Uri = upstream_text
            .parse()
            .map_err(|_| format!("--upstream: not a URI: {upstream_text}"))?;
        if upstream.scheme_str() != Some("http") || upstream.authority().is_none() {
            return Err(format!(
                "--upstream: only http://HOST:PORT is supported: {upstream_text}"
            ));
        }
        let upstream_h2 = match get("--upstream-h2") {
            None | Some("false") | Some("0") => false,
            Some("true") | Some("1") => true,
            Some(v) => return Err(format!("--upstream-h2: not true or false: {v}")),
        };
        let defaults = Bounds::default();
        let mut bounds = Bounds {
            min_limit: number("--min-limit")?.unwrap_or(defaults.min_limit),
            max_limit: number("--max-limit")?.unwrap_or(defaults.max_limit),
            initial_limit: number("--initial-limit")?.unwrap_or(defaults.initial_limit),
            latency_target: number("--latency-target-ms")?
                .map(|ms| Duration::from_millis(ms as u64)),
        };
        // An initial limit not given follows the bounds given; one given must fit them.
        if get("--initial-limit").is_none() {
            bounds.initial_limit = bounds
                .initial_limit
                .clamp(bounds.min_limit, bounds.max_limit.max(bounds.min_limit));
        }
        bounds.validate()?;
        let queue = QueueSettings {
            max_queue: number("--max-queue")?,
            max_tenants: number("--max-tenants")?.unwrap_or(QueueSettings::default().max_tenants),
            ..QueueSettings::default()
        };
        Ok(Settings {
            listen,
            upstream,
            priority_header: header("--priority-header")?,
            tenant_header: header("--tenant-header")?,
            admin_listen: get("--admin-listen")
                .map(|v| addr("--admin-listen", v))
                .transpose()?,
            upstream_h2,
            shed: ShedSettings {
                bounds,
                queue,
                ..ShedSettings::default()
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str], env: &[(&str, &str)]) -> Result<Settings, String> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::parse(&args, &env)
    }

    #[test]
    fn flags_and_environment() {
        let s = parse(
            &["--listen", "127.0.0.1:8081", "--priority-header=x-priority"],
            &[
                ("SHED_UPSTREAM", "http://127.0.0.1:8080"),
                ("SHED_TENANT_HEADER", "x-tenant"),
                ("SHED_LISTEN", "127.0.0.1:1"),
            ],
        )
        .unwrap();
        assert_eq!(s.listen.port(), 8081);
        assert_eq!(s.tenant_header.unwrap().as_str(), "x-tenant");
        assert_eq!(s.priority_header.unwrap().as_str(), "x-priority");
        assert_eq!(s.shed.bounds, Bounds::default());
    }

    #[test]
    fn refusals_name_the_setting() {
        let base = [
            "--listen",
            "127.0.0.1:1",
            "--upstream",
            "http://127.0.0.1:2",
        ];
        let with = |extra: &[&str]| {
            let mut a = base.to_vec();
            a.extend_from_slice(extra);
            parse(&a, &[]).unwrap_err()
        };
        assert!(with(&["--min-limit", "x"]).contains("--min-limit"));
        assert!(with(&["--min-limit", "50", "--max-limit", "10"]).contains("min_limit"));
        assert!(with(&["--bogus"]).contains("--bogus"));
        assert!(parse(&["--listen", "127.0.0.1:1"], &[])
            .unwrap_err()
            .contains("--upstream"));
        assert!(parse(
            &["--listen", "127.0.0.1:1", "--upstream", "https://x:1"],
            &[]
        )
        .unwrap_err()
        .contains("--upstream"));
        // Bounds given alone: the initial limit follows them.
        let s = parse(&[&base[..], &["--min-limit", "20"]].concat(), &[]).unwrap();
        assert_eq!(s.shed.bounds.initial_limit, 20);
    }
}
