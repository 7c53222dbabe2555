//! The connection settings of every component that talks to the store, one type parsed once:
//! where the store is (a server, a Cluster, or a master named by sentinels), TLS (a CA bundle or
//! the system roots, a client certificate for mutual TLS, hostname verification), the ACL user
//! and its password. The RLS and the regions controller build one from their own settings; a
//! URL says it all in one string (docs/operating.md, "Connections"):
//!
//! | form | store |
//! |---|---|
//! | `redis://[user[:password]@]host[:port][/db]` | one server |
//! | `rediss://…` | one server over TLS |
//! | `unix:///path/redis.sock[?db=N]`, `redis+unix://` | one server on a Unix socket |
//! | `redis+cluster://[user[:password]@]host:port[,host:port…]`, `rediss+cluster://` | a Cluster |
//! | `redis+sentinel://[user[:password]@]host:port[,host:port…]/master[/db]`, `rediss+sentinel://` | the master the sentinels name |
//!
//! Query parameters: `ca=PATH`, `cert=PATH`, `key=PATH`, `skip_hostname_verification=true`,
//! `sentinel_user=`, `sentinel_password=`, `user=`, `password=` (for a Unix socket). User names
//! and passwords are percent-decoded.

use std::fmt;
use std::path::PathBuf;

use percent_encoding::percent_decode_str;

use crate::secret::Secret;

/// The default port of a server, and of a sentinel.
pub const DEFAULT_PORT: u16 = 6379;
pub const DEFAULT_SENTINEL_PORT: u16 = 26379;

/// One address: a host and port, or a Unix socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Addr {
    Tcp { host: String, port: u16 },
    Unix(PathBuf),
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Addr::Tcp { host, port } => write!(f, "{host}:{port}"),
            Addr::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// Where the store is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// One server.
    Server(Addr),
    /// A Cluster, reached through any of these nodes.
    Cluster(Vec<Addr>),
    /// The master that these sentinels name `master`.
    Sentinel {
        master: String,
        sentinels: Vec<Addr>,
    },
}

/// TLS to the store (and to the sentinels, and to every Cluster node).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tls {
    /// A PEM bundle of CAs trusted besides the system's roots.
    pub ca_file: Option<PathBuf>,
    /// A PEM client certificate (chain) for mutual TLS, with its key.
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    /// Verify the certificate's chain but not that it names the host: for servers reached by an
    /// address their certificate does not list. Off by default; named so in every setting.
    pub skip_hostname_verification: bool,
}

/// Credentials: an ACL user (`None`: `default`) and its password.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Auth {
    pub user: Option<String>,
    pub password: Option<Secret>,
}

impl Auth {
    /// `password` or `user:password`, as envoyproxy/ratelimit's `REDIS_AUTH` reads it (empty:
    /// none).
    pub fn from_peer(text: &str) -> Auth {
        match text.split_once(':') {
            _ if text.is_empty() => Auth::default(),
            Some((user, pass)) => Auth {
                user: (!user.is_empty()).then(|| user.to_string()),
                password: Some(Secret::new(pass)),
            },
            None => Auth {
                user: None,
                password: Some(Secret::new(text)),
            },
        }
    }

    pub fn is_none(&self) -> bool {
        self.user.is_none() && self.password.is_none()
    }

    /// Who connects, for error messages (never the password).
    pub fn who(&self) -> String {
        match (&self.user, &self.password) {
            (Some(u), _) => format!("user '{u}'"),
            (None, Some(_)) => "the default user with a password".into(),
            (None, None) => "the default user without a password".into(),
        }
    }
}

/// Everything needed to open a connection to the store. `Debug` and `Display` never show a
/// password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionSettings {
    pub target: Target,
    pub auth: Auth,
    /// The sentinels' own credentials (`requirepass` or an ACL user on the sentinels).
    pub sentinel_auth: Auth,
    pub db: i64,
    pub tls: Option<Tls>,
}

impl ConnectionSettings {
    /// One server, no TLS, no credentials.
    pub fn server(addr: Addr) -> ConnectionSettings {
        ConnectionSettings {
            target: Target::Server(addr),
            auth: Auth::default(),
            sentinel_auth: Auth::default(),
            db: 0,
            tls: None,
        }
    }

    /// Parses a URL of the forms above; the error names what is wrong (never the password).
    pub fn parse(url: &str) -> Result<ConnectionSettings, String> {
        let url = url.trim();
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| format!("'{}': not a URL (redis://host:port/)", redact(url)))?;
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let scheme = scheme.to_ascii_lowercase();
        let tls = scheme.starts_with("rediss");
        let mut settings = ConnectionSettings::server(Addr::Unix(PathBuf::new()));
        settings.tls = tls.then(Tls::default);
        match scheme.as_str() {
            "unix" | "redis+unix" => {
                settings.target = Target::Server(Addr::Unix(PathBuf::from(decode(rest)?)));
            }
            "redis" | "rediss" | "redis+cluster" | "rediss+cluster" | "redis+sentinel"
            | "rediss+sentinel" => {
                let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
                let (userinfo, hosts) = match authority.rsplit_once('@') {
                    Some((u, h)) => (Some(u), h),
                    None => (None, authority),
                };
                if let Some(userinfo) = userinfo {
                    settings.auth = userinfo_auth(userinfo)?;
                }
                let sentinel = scheme.ends_with("sentinel");
                let default_port = if sentinel {
                    DEFAULT_SENTINEL_PORT
                } else {
                    DEFAULT_PORT
                };
                let addrs = hosts
                    .split(',')
                    .filter(|h| !h.is_empty())
                    .map(|h| host_port(h, default_port))
                    .collect::<Result<Vec<_>, _>>()?;
                let mut segments = path.split('/').filter(|s| !s.is_empty());
                if sentinel {
                    let master = segments.next().ok_or_else(|| {
                        format!("{scheme}:// needs the master's name: {scheme}://host:port/mymaster")
                    })?;
                    settings.target = Target::Sentinel {
                        master: decode(master)?,
                        sentinels: addrs,
                    };
                } else if scheme.ends_with("cluster") {
                    settings.target = Target::Cluster(addrs);
                } else {
                    let [addr] = <[Addr; 1]>::try_from(addrs).map_err(|a| {
                        format!(
                            "{scheme}:// names {} hosts: one server (a Cluster is redis+cluster://)",
                            a.len()
                        )
                    })?;
                    settings.target = Target::Server(addr);
                }
                if let Some(db) = segments.next() {
                    settings.db = parse_db(db)?;
                }
                if let Some(extra) = segments.next() {
                    return Err(format!("'{extra}': the URL's path is /db (or /master/db)"));
                }
            }
            other => {
                return Err(format!(
                    "{other}://: redis://, rediss://, unix://, redis+cluster://, redis+sentinel:// (or rediss+…)"
                ))
            }
        }
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            settings.set(k, &decode(v)?)?;
        }
        settings.check()?;
        Ok(settings)
    }

    /// One query parameter.
    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let tls = || -> Result<(), String> {
            Err(format!(
                "{key}=: a TLS setting on a URL without TLS (rediss://)"
            ))
        };
        match key {
            "db" => self.db = parse_db(value)?,
            "user" => self.auth.user = Some(value.to_string()),
            "password" | "pass" => self.auth.password = Some(Secret::new(value)),
            "sentinel_user" => self.sentinel_auth.user = Some(value.to_string()),
            "sentinel_password" => self.sentinel_auth.password = Some(Secret::new(value)),
            "ca" | "cert" | "key" | "skip_hostname_verification" => {
                let Some(t) = self.tls.as_mut() else {
                    return tls();
                };
                match key {
                    "ca" => t.ca_file = Some(PathBuf::from(value)),
                    "cert" => t.client_cert = Some(PathBuf::from(value)),
                    "key" => t.client_key = Some(PathBuf::from(value)),
                    _ => t.skip_hostname_verification = parse_flag(key, value)?,
                }
            }
            other => return Err(format!("unknown URL parameter '{other}'")),
        }
        Ok(())
    }

    /// What must hold whatever built the settings.
    pub fn check(&self) -> Result<(), String> {
        match &self.target {
            Target::Cluster(a) | Target::Sentinel { sentinels: a, .. } if a.is_empty() => {
                return Err("no host named".into())
            }
            Target::Cluster(a) | Target::Sentinel { sentinels: a, .. }
                if a.iter().any(|a| matches!(a, Addr::Unix(_))) =>
            {
                return Err("a Cluster's nodes and the sentinels are host:port".into())
            }
            Target::Server(Addr::Unix(p)) if p.as_os_str().is_empty() => {
                return Err("unix://: no socket path".into())
            }
            Target::Server(Addr::Unix(_)) if self.tls.is_some() => {
                return Err("TLS over a Unix socket: use rediss:// with host:port".into())
            }
            Target::Cluster(_) if self.db != 0 => {
                return Err("a Cluster has only database 0".into())
            }
            _ => {}
        }
        if let Some(tls) = &self.tls {
            if tls.client_cert.is_some() != tls.client_key.is_some() {
                return Err(
                    "a client certificate needs its key and a key its certificate (cert= and key=)"
                        .into(),
                );
            }
        }
        Ok(())
    }

    /// The settings as a URL with the password replaced by `***`, for logs.
    pub fn redacted(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for ConnectionSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = if self.tls.is_some() { "s" } else { "" };
        let user = match (&self.auth.user, &self.auth.password) {
            (Some(u), Some(_)) => format!("{u}:***@"),
            (Some(u), None) => format!("{u}@"),
            (None, Some(_)) => ":***@".into(),
            (None, None) => String::new(),
        };
        let list = |a: &[Addr]| a.iter().map(Addr::to_string).collect::<Vec<_>>().join(",");
        match &self.target {
            Target::Server(Addr::Unix(p)) => write!(f, "unix://{}", p.display())?,
            Target::Server(a) => write!(f, "redis{s}://{user}{a}/{}", self.db)?,
            Target::Cluster(a) => write!(f, "redis{s}+cluster://{user}{}", list(a))?,
            Target::Sentinel { master, sentinels } => write!(
                f,
                "redis{s}+sentinel://{user}{}/{master}/{}",
                list(sentinels),
                self.db
            )?,
        }
        if let Some(t) = &self.tls {
            if t.skip_hostname_verification {
                write!(f, " (hostname not verified)")?;
            }
        }
        Ok(())
    }
}

/// `user:password`, `:password` or `user`, percent-decoded.
fn userinfo_auth(userinfo: &str) -> Result<Auth, String> {
    let (user, pass) = match userinfo.split_once(':') {
        Some((u, p)) => (u, Some(p)),
        None => (userinfo, None),
    };
    Ok(Auth {
        user: (!user.is_empty()).then(|| decode(user)).transpose()?,
        password: pass.map(decode).transpose()?.map(Secret::new),
    })
}

fn host_port(text: &str, default_port: u16) -> Result<Addr, String> {
    let (host, port) = match text.rsplit_once(':') {
        // An IPv6 address in brackets: [::1]:6379.
        Some((h, p)) if !p.contains(']') => (h, p),
        _ => (text, ""),
    };
    let port = if port.is_empty() {
        default_port
    } else {
        port.parse()
            .map_err(|_| format!("'{text}': the port is not a number from 1 to 65535"))?
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || port == 0 {
        return Err(format!("'{text}': expected host:port"));
    }
    Ok(Addr::Tcp {
        host: host.to_string(),
        port,
    })
}

fn parse_db(text: &str) -> Result<i64, String> {
    text.parse::<i64>()
        .ok()
        .filter(|d| *d >= 0)
        .ok_or_else(|| format!("database '{text}': expected a number ≥ 0"))
}

fn parse_flag(key: &str, value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" => Ok(true),
        "0" | "false" | "no" | "" => Ok(false),
        _ => Err(format!("{key}={value}: true or false")),
    }
}

fn decode(text: &str) -> Result<String, String> {
    percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| "a percent-encoded value that is not UTF-8".to_string())
}

/// A URL for an error message: anything before `@` (after the scheme) is dropped.
fn redact(url: &str) -> String {
    let Some(at) = url.rfind('@') else {
        return url.to_string();
    };
    let scheme = url.find("://").filter(|s| *s < at).map_or(0, |s| s + 3);
    format!(
        "{}***@{}",
        url.get(..scheme).unwrap_or_default(),
        url.get(at + 1..).unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(host: &str, port: u16) -> Addr {
        Addr::Tcp {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn every_url_form_parses_and_prints_without_its_password() {
        let s = ConnectionSettings::parse("redis://gw:p%40ss%3Aw@10.0.0.1:6380/2").unwrap();
        assert_eq!(s.target, Target::Server(tcp("10.0.0.1", 6380)));
        assert_eq!(s.auth.user.as_deref(), Some("gw"));
        assert_eq!(s.auth.password.as_ref().map(Secret::expose), Some("p@ss:w"));
        assert_eq!(s.db, 2);
        assert_eq!(s.to_string(), "redis://gw:***@10.0.0.1:6380/2");
        assert!(!format!("{s:?}").contains("p@ss"));

        let s = ConnectionSettings::parse(
            "rediss://:pw@cache.example:6390/?ca=/etc/ca.pem&cert=/c.pem&key=/k.pem&skip_hostname_verification=true",
        )
        .unwrap();
        let tls = s.tls.clone().unwrap();
        assert_eq!(tls.ca_file, Some(PathBuf::from("/etc/ca.pem")));
        assert!(tls.skip_hostname_verification);
        assert_eq!(s.auth.user, None);
        assert_eq!(
            s.to_string(),
            "rediss://:***@cache.example:6390/0 (hostname not verified)"
        );

        let s = ConnectionSettings::parse("unix:///run/redis.sock?db=3&password=x").unwrap();
        assert_eq!(
            s.target,
            Target::Server(Addr::Unix("/run/redis.sock".into()))
        );
        assert_eq!(s.db, 3);

        let s = ConnectionSettings::parse("rediss+cluster://u:p@a:7000,b:7001").unwrap();
        assert_eq!(
            s.target,
            Target::Cluster(vec![tcp("a", 7000), tcp("b", 7001)])
        );

        let s = ConnectionSettings::parse(
            "redis+sentinel://gw:pw@s1,s2:26380/my%20master/1?sentinel_password=sp",
        )
        .unwrap();
        assert_eq!(
            s.target,
            Target::Sentinel {
                master: "my master".into(),
                sentinels: vec![tcp("s1", 26379), tcp("s2", 26380)]
            }
        );
        assert_eq!(s.db, 1);
        assert_eq!(
            s.sentinel_auth.password.as_ref().map(Secret::expose),
            Some("sp")
        );
        assert!(!s.to_string().contains("pw") && !format!("{s:?}").contains("sp\""));
    }

    #[test]
    fn nonsense_is_refused_by_name_without_the_password() {
        for (url, says) in [
            ("localhost:6379", "not a URL"),
            ("http://x", "http://"),
            ("redis://a:1,b:2", "one server"),
            ("redis://h:99999", "port"),
            ("redis+sentinel://h:1", "master's name"),
            ("redis://h/x", "database"),
            ("redis://h/?ca=/x", "without TLS"),
            ("rediss://h/?cert=/c", "needs its key"),
            ("redis://h/?colour=blue", "unknown URL parameter"),
            ("redis+cluster://h:1/3", "database 0"),
        ] {
            let e = ConnectionSettings::parse(url).unwrap_err();
            assert!(e.contains(says), "{url}: {e}");
        }
        let e = ConnectionSettings::parse("secret-pw@nowhere").unwrap_err();
        assert!(!e.contains("secret-pw"), "{e}");
    }

    #[test]
    fn the_peers_auth_is_a_password_or_user_and_password() {
        let a = Auth::from_peer("s3cret");
        assert_eq!((a.user, a.password.unwrap().expose()), (None, "s3cret"));
        let a = Auth::from_peer("gw:pa:ss");
        assert_eq!(
            (a.user.as_deref(), a.password.unwrap().expose()),
            (Some("gw"), "pa:ss")
        );
        assert!(Auth::from_peer("").is_none());
    }
}
