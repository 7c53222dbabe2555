//! The store's connection settings from envoyproxy/ratelimit's variables, with its names and
//! meanings (its src/settings/settings.go), turned into the client's one
//! [`ConnectionSettings`] per store: the main store and, with `REDIS_PERSECOND=true`, the store
//! of the rules whose unit is a second.
//!
//! | variable | meaning |
//! |---|---|
//! | `REDIS_SOCKET_TYPE` | `tcp` or `unix` (default `unix`) |
//! | `REDIS_TYPE` | `SINGLE`, `CLUSTER` or `SENTINEL` (default `SINGLE`) |
//! | `REDIS_URL` | `host:port` or a socket path; a Cluster's `host:port,…`; Sentinel's `master,host:port,…`; or a URL of the client's forms |
//! | `REDIS_AUTH` | `password` or `user:password` |
//! | `REDIS_SENTINEL_AUTH` | the sentinels' own `password` or `user:password` |
//! | `REDIS_TLS` | TLS to the store (and its sentinels) |
//! | `REDIS_TLS_CACERT` | a PEM CA bundle trusted besides the system roots |
//! | `REDIS_TLS_CLIENT_CERT`, `REDIS_TLS_CLIENT_KEY` | a client certificate for mutual TLS |
//! | `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION` | verify the chain, not the name |
//! | `REDIS_PERSECOND` | a second store for per-second rules, set by `REDIS_PERSECOND_SOCKET_TYPE`, `_TYPE`, `_URL`, `_AUTH`, `_SENTINEL_AUTH`, `_TLS` (the TLS files are shared, as the peer's) |

use std::path::PathBuf;

use ratelimit_client::{Addr, Auth, ConnectionSettings, Target, Tls};

/// The main store and the per-second one.
#[derive(Clone, Debug)]
pub struct StoreSettings {
    pub main: ConnectionSettings,
    /// `REDIS_PERSECOND=true`: rules whose unit is `SECOND` are decided here.
    pub per_second: Option<ConnectionSettings>,
}

impl StoreSettings {
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<StoreSettings, String> {
        let tls = Tls {
            ca_file: path(get("REDIS_TLS_CACERT")),
            client_cert: path(get("REDIS_TLS_CLIENT_CERT")),
            client_key: path(get("REDIS_TLS_CLIENT_KEY")),
            skip_hostname_verification: flag(get, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")?,
        };
        let main = one(get, "REDIS", "/var/run/nutcracker/ratelimit.sock", &tls)?;
        let per_second = if flag(get, "REDIS_PERSECOND")? {
            Some(one(
                get,
                "REDIS_PERSECOND",
                "/var/run/nutcracker/ratelimitpersecond.sock",
                &tls,
            )?)
        } else {
            None
        };
        Ok(StoreSettings { main, per_second })
    }
}

/// One store from the variables `PREFIX_…`.
fn one(
    get: &dyn Fn(&str) -> Option<String>,
    prefix: &str,
    default_url: &str,
    tls_files: &Tls,
) -> Result<ConnectionSettings, String> {
    let var = |name: &str| format!("{prefix}_{name}");
    let text = |name: &str, default: &str| get(&var(name)).unwrap_or_else(|| default.into());
    let socket = text("SOCKET_TYPE", "unix").to_ascii_lowercase();
    let kind = text("TYPE", "SINGLE").to_ascii_uppercase();
    let url = text("URL", default_url);
    let tls = flag(get, &var("TLS"))?;
    let named = |e: String| format!("{}={}: {e}", var("URL"), redact(&url));
    let parts: Vec<&str> = url
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .collect();
    let tcp = |u: &str| -> Result<Addr, String> {
        let url = if u.contains("://") {
            u.to_string()
        } else {
            format!("redis://{u}")
        };
        match ConnectionSettings::parse(&url).map_err(named)?.target {
            Target::Server(addr) => Ok(addr),
            _ => Err(named(format!("'{u}': expected host:port"))),
        }
    };
    let mut settings = match (kind.as_str(), parts.as_slice()) {
        // A URL of the client's forms says everything itself (REDIS_AUTH and REDIS_TLS add to it).
        ("SINGLE", [one]) if one.contains("://") => {
            ConnectionSettings::parse(one).map_err(named)?
        }
        ("SINGLE", [one]) => match socket.as_str() {
            "tcp" => ConnectionSettings::server(tcp(one)?),
            "unix" => ConnectionSettings::server(Addr::Unix(PathBuf::from(one))),
            other => return Err(format!("{}={other}: tcp or unix", var("SOCKET_TYPE"))),
        },
        ("SINGLE", _) => {
            return Err(named(
                "SINGLE takes one address (a Cluster's list needs REDIS_TYPE=CLUSTER)".into(),
            ))
        }
        ("CLUSTER", nodes) if !nodes.is_empty() => ConnectionSettings {
            target: Target::Cluster(nodes.iter().map(|n| tcp(n)).collect::<Result<_, _>>()?),
            ..ConnectionSettings::server(Addr::Unix(PathBuf::new()))
        },
        ("SENTINEL", [master, sentinels @ ..]) if !sentinels.is_empty() => ConnectionSettings {
            target: Target::Sentinel {
                master: master.to_string(),
                sentinels: sentinels.iter().map(|s| tcp(s)).collect::<Result<_, _>>()?,
            },
            ..ConnectionSettings::server(Addr::Unix(PathBuf::new()))
        },
        ("SENTINEL", _) => {
            return Err(named(
                "SENTINEL expects the master's name and the sentinels: master,host:port,…".into(),
            ))
        }
        (other, _) => {
            return Err(format!(
                "{}={other}: SINGLE, CLUSTER or SENTINEL",
                var("TYPE")
            ))
        }
    };
    let auth = Auth::from_peer(&text("AUTH", ""));
    if !auth.is_none() {
        settings.auth = auth;
    }
    let sentinel_auth = Auth::from_peer(&text("SENTINEL_AUTH", ""));
    if !sentinel_auth.is_none() {
        settings.sentinel_auth = sentinel_auth;
    }
    if tls {
        let from_url = settings.tls.take().unwrap_or_default();
        settings.tls = Some(Tls {
            ca_file: tls_files.ca_file.clone().or(from_url.ca_file),
            client_cert: tls_files.client_cert.clone().or(from_url.client_cert),
            client_key: tls_files.client_key.clone().or(from_url.client_key),
            skip_hostname_verification: tls_files.skip_hostname_verification
                || from_url.skip_hostname_verification,
        });
    }
    settings.check().map_err(named)?;
    Ok(settings)
}

fn path(v: Option<String>) -> Option<PathBuf> {
    v.filter(|p| !p.is_empty()).map(PathBuf::from)
}

fn flag(get: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<bool, String> {
    match get(name) {
        None => Ok(false),
        Some(v) => match v.to_ascii_lowercase().as_str() {
            "1" | "true" | "t" | "yes" => Ok(true),
            "0" | "false" | "f" | "no" | "" => Ok(false),
            _ => Err(format!("{name}={v}: not a boolean")),
        },
    }
}

/// A URL variable's value for a message: credentials in it are replaced by `***`.
fn redact(url: &str) -> String {
    url.split(',')
        .map(|u| match u.rfind('@') {
            Some(at) => {
                let scheme = u.find("://").filter(|s| *s < at).map_or(0, |s| s + 3);
                format!(
                    "{}***@{}",
                    u.get(..scheme).unwrap_or_default(),
                    u.get(at + 1..).unwrap_or_default()
                )
            }
            None => u.to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(vars: &[(&str, &str)]) -> Result<StoreSettings, String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        StoreSettings::from_lookup(&|k| map.get(k).cloned())
    }

    fn tcp(host: &str, port: u16) -> Addr {
        Addr::Tcp {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn the_peers_forms_become_connection_settings() {
        let s = with(&[]).unwrap();
        assert_eq!(
            s.main.target,
            Target::Server(Addr::Unix("/var/run/nutcracker/ratelimit.sock".into()))
        );
        assert!(s.per_second.is_none());

        let s = with(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "10.0.0.1:6379"),
            ("REDIS_AUTH", "gw:p@ss:word"),
            ("REDIS_TLS", "true"),
            ("REDIS_TLS_CACERT", "/etc/ca.pem"),
            ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true"),
        ])
        .unwrap();
        assert_eq!(s.main.target, Target::Server(tcp("10.0.0.1", 6379)));
        assert_eq!(s.main.auth.user.as_deref(), Some("gw"));
        assert_eq!(
            s.main.auth.password.as_ref().map(|p| p.expose()),
            Some("p@ss:word")
        );
        let tls = s.main.tls.clone().unwrap();
        assert_eq!(tls.ca_file, Some(PathBuf::from("/etc/ca.pem")));
        assert!(tls.skip_hostname_verification);
        assert!(!format!("{s:?}").contains("p@ss"));

        let s = with(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_TYPE", "sentinel"),
            ("REDIS_URL", "mymaster,10.0.0.1:26379,10.0.0.2:26379"),
            ("REDIS_SENTINEL_AUTH", "spw"),
            ("REDIS_PERSECOND", "true"),
            ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
            ("REDIS_PERSECOND_TYPE", "CLUSTER"),
            ("REDIS_PERSECOND_URL", "10.0.1.1:7000,10.0.1.2:7000"),
            ("REDIS_PERSECOND_AUTH", "only-a-password"),
        ])
        .unwrap();
        assert_eq!(
            s.main.target,
            Target::Sentinel {
                master: "mymaster".into(),
                sentinels: vec![tcp("10.0.0.1", 26379), tcp("10.0.0.2", 26379)]
            }
        );
        assert!(s.main.sentinel_auth.password.is_some());
        let ps = s.per_second.unwrap();
        assert_eq!(
            ps.target,
            Target::Cluster(vec![tcp("10.0.1.1", 7000), tcp("10.0.1.2", 7000)])
        );
        assert_eq!(ps.auth.user, None);
    }

    #[test]
    fn nonsense_is_refused_by_the_variables_name() {
        for (vars, says) in [
            (vec![("REDIS_TYPE", "MEMCACHE")], "REDIS_TYPE=MEMCACHE"),
            (
                vec![("REDIS_TYPE", "SENTINEL"), ("REDIS_URL", "m")],
                "REDIS_URL",
            ),
            (vec![("REDIS_SOCKET_TYPE", "udp")], "REDIS_SOCKET_TYPE"),
            (
                vec![("REDIS_PERSECOND", "yes"), ("REDIS_PERSECOND_TLS", "x")],
                "REDIS_PERSECOND_TLS",
            ),
            (
                vec![
                    ("REDIS_SOCKET_TYPE", "tcp"),
                    ("REDIS_URL", "h:1"),
                    ("REDIS_TLS", "true"),
                    ("REDIS_TLS_CLIENT_CERT", "/c.pem"),
                ],
                "needs its key",
            ),
        ] {
            let e = with(&vars).unwrap_err();
            assert!(e.contains(says), "{vars:?}: {e}");
        }
    }
}
