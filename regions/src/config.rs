//! The controller's configuration file (TOML): the regions, the globally limited keys with their
//! policy, and the control loop's settings. See docs/regions.md for an example.

use std::collections::HashSet;
use std::path::PathBuf;

use ratelimit_client::{Addr, ConnectionSettings, LoadLibrary, Secret, Target};
use ratelimit_core::algo::listed;
use ratelimit_core::algo::{Policy as StorePolicy, PolicyError};
use serde::Deserialize;

/// The whole file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// How often shares are rebalanced, in ms.
    #[serde(default = "default_period_ms")]
    pub period_ms: u64,
    /// How long a written share holds, in ms: a region the controller cannot reach keeps it that
    /// long, then falls back to its safe share. Refreshed when less than half of it is left.
    #[serde(default = "default_lifetime_ms")]
    pub lifetime_ms: u64,
    /// A key's shares move only when one of them would move by more than this fraction of L.
    #[serde(default = "default_hysteresis")]
    pub hysteresis: f64,
    /// How far the regions' clocks may be from the controller's, in ms: every share is counted
    /// that much longer than its expiry.
    #[serde(default = "default_clock_margin_ms")]
    pub clock_margin_ms: u64,
    /// Keys per `RL.DEMAND` or `RL.SHARE` call.
    #[serde(default = "default_batch")]
    pub batch: usize,
    /// How long one region may take to answer a step of a period, in ms (default: period / 4).
    pub timeout_ms: Option<u64>,
    /// `SCAN` calls (of `batch` keys each) per pattern, per region (per master of a cluster) and
    /// period, to discover the keys of the groups' `patterns`.
    #[serde(default = "default_scan_calls")]
    pub scan_calls: usize,
    /// Keys listed over the whole file, `{a..b}` ranges counted as expanded, at most: counted
    /// before anything is expanded, so a range cannot take the controller's memory.
    #[serde(default = "default_max_keys")]
    pub max_keys: u64,
    /// What the controller may do to a region without the module (docs/regions.md, managed
    /// Redis): `no` (the default: the Functions library if loaded, else the scripts backend),
    /// `missing` (loads the library where absent), `replace` (also over an older one).
    pub load_library: Option<String>,
    pub regions: Vec<Region>,
    pub keys: Vec<KeyGroup>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Region {
    pub name: String,
    /// `redis://host:port[/db]` of the region's store (a standalone server with the module);
    /// with `cluster`, of any node of the region's Redis Cluster (every node with the module).
    pub url: String,
    /// The store is a Redis Cluster: the controller learns its masters from the node at `url`
    /// and sends each the calls for the keys of its slots.
    #[serde(default)]
    pub cluster: bool,
    /// The ACL user (else the URL's, else `default`).
    pub user: Option<String>,
    /// A file holding the password (its first line), or an environment variable holding it:
    /// never the password itself in this file (a URL may still carry one).
    pub password_file: Option<PathBuf>,
    pub password_env: Option<String>,
    /// The sentinels' own password (`redis+sentinel://` URLs), from a file or a variable.
    pub sentinel_password_file: Option<PathBuf>,
    pub sentinel_password_env: Option<String>,
    /// TLS (`rediss://` or `rediss+sentinel://` URLs): a CA bundle trusted besides the system
    /// roots, a client certificate and key for mutual TLS, and the named switch that verifies
    /// the chain but not the host name.
    pub tls_ca: Option<PathBuf>,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    #[serde(default)]
    pub tls_skip_hostname_verification: bool,
}

impl Region {
    /// The region's connection settings: its URL with the user, the passwords read from their
    /// file or variable, and the TLS files. Errors name the region and the setting.
    pub fn connection(&self) -> Result<ConnectionSettings, String> {
        let named = |e: String| format!("region '{}': {e}", self.name);
        let mut settings = ConnectionSettings::parse(&self.url).map_err(named)?;
        if let Some(user) = &self.user {
            settings.auth.user = Some(user.clone());
        }
        let secret = |file: &Option<PathBuf>, env: &Option<String>, what: &str| match (file, env) {
            (Some(_), Some(_)) => Err(format!("{what}_file or {what}_env, not both")),
            (Some(f), None) => std::fs::read_to_string(f)
                .map(|t| Some(Secret::new(t.lines().next().unwrap_or_default())))
                .map_err(|e| format!("{what}_file {}: {e}", f.display())),
            (None, Some(v)) => std::env::var(v)
                .map(|t| Some(Secret::new(t)))
                .map_err(|_| format!("{what}_env: the variable {v} is not set")),
            (None, None) => Ok(None),
        };
        if let Some(p) =
            secret(&self.password_file, &self.password_env, "password").map_err(named)?
        {
            settings.auth.password = Some(p);
        }
        if let Some(p) = secret(
            &self.sentinel_password_file,
            &self.sentinel_password_env,
            "sentinel_password",
        )
        .map_err(named)?
        {
            settings.sentinel_auth.password = Some(p);
        }
        let tls_set = self.tls_ca.is_some()
            || self.tls_cert.is_some()
            || self.tls_key.is_some()
            || self.tls_skip_hostname_verification;
        match settings.tls.as_mut() {
            Some(tls) => {
                tls.ca_file = self.tls_ca.clone().or(tls.ca_file.take());
                tls.client_cert = self.tls_cert.clone().or(tls.client_cert.take());
                tls.client_key = self.tls_key.clone().or(tls.client_key.take());
                tls.skip_hostname_verification |= self.tls_skip_hostname_verification;
            }
            None if tls_set => {
                return Err(named(
                    "tls_* settings need a rediss:// (or rediss+sentinel://) url".into(),
                ))
            }
            None => {}
        }
        if self.cluster && !matches!(settings.target, Target::Server(Addr::Tcp { .. })) {
            return Err(named(
                "cluster = true takes the url of one node (redis:// or rediss://)".into(),
            ));
        }
        settings.check().map_err(named)?;
        Ok(settings)
    }
}

/// Keys sharing one global policy.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyGroup {
    /// Key names; `{a..b}` in a name expands to every integer from a to b.
    #[serde(default)]
    pub keys: Vec<String>,
    /// Glob-style patterns (`SCAN MATCH`): the limiter keys matching one, in any region, join
    /// the group when found (see docs/regions.md, "Key patterns").
    #[serde(default)]
    pub patterns: Vec<String>,
    /// A limiter's command word of the registry (`ratelimit_core::algo::listed::limiters`), in
    /// any case: `GCRA`, `tokenbucket`.
    pub algorithm: String,
    /// The global L per W ms, with a burst of B (default L; the window algorithms have B = L).
    pub limit: u64,
    pub window_ms: u64,
    pub burst: Option<u64>,
    /// A region's share when it holds none (or its share expired): what its gateways call the
    /// keys with. Default L / number of regions, rounded down.
    pub safe: Option<u64>,
    /// The least share a region gets, so a quiet region still admits. Default L / 200 (at least 1).
    pub floor: Option<u64>,
}

fn default_period_ms() -> u64 {
    2000
}
fn default_lifetime_ms() -> u64 {
    30_000
}
fn default_hysteresis() -> f64 {
    0.02
}
fn default_clock_margin_ms() -> u64 {
    50
}
fn default_batch() -> usize {
    1000
}
fn default_scan_calls() -> usize {
    4
}
/// The controller took 1.4 KB per key at three regions (peak resident over three periods at
/// 100,000 keys): 350 MB here, about a third of a 1 GiB container.
fn default_max_keys() -> u64 {
    250_000
}

/// One group's policy, as the controller uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub algorithm: String,
    pub limit: u64,
    pub window_ms: u64,
    pub burst: u64,
    pub safe: u64,
    /// The burst gateways call with: B × safe / L, rounded down (at least 1).
    pub safe_burst: u64,
    pub floor: u64,
}

impl Config {
    pub fn parse(text: &str) -> Result<Config, String> {
        let config: Config = toml::from_str(text).map_err(|e| e.to_string())?;
        config.validate()?;
        Ok(config)
    }

    /// The `load_library` setting, refused by name when it is none of its words.
    pub fn load_library(&self) -> Result<LoadLibrary, String> {
        match self.load_library.as_deref() {
            None => Ok(LoadLibrary::No),
            Some(word) => word
                .parse()
                .map_err(|_| format!("load_library '{word}': expected no, missing or replace")),
        }
    }

    fn validate(&self) -> Result<(), String> {
        self.load_library()?;
        if self.regions.is_empty() {
            return Err("no regions".into());
        }
        if self.period_ms == 0 || self.lifetime_ms < 2 * self.period_ms {
            return Err("lifetime_ms must be at least two periods".into());
        }
        if !(0.0..1.0).contains(&self.hysteresis) || self.batch == 0 {
            return Err("hysteresis must be in [0, 1) and batch at least 1".into());
        }
        let mut names = HashSet::new();
        for region in &self.regions {
            if region.name.is_empty() {
                return Err("a region has an empty name".into());
            }
            if !names.insert(region.name.as_str()) {
                return Err(format!("region '{}' is named twice", region.name));
            }
            region.connection()?;
        }
        let mut total: u64 = 0;
        for group in &self.keys {
            for name in &group.keys {
                total = total.saturating_add(count(name)?);
            }
        }
        if total > self.max_keys {
            return Err(format!(
                "{total} keys once ranges are expanded: at most max_keys = {}",
                self.max_keys
            ));
        }
        // A key in two groups would get two splits, each summing to its own L.
        let mut keys: HashSet<String> = HashSet::new();
        for group in &self.keys {
            self.policy(group)?;
            for key in expand(&group.keys)? {
                if key.is_empty() {
                    return Err("an empty key name".into());
                }
                if !keys.insert(key.clone()) {
                    return Err(format!("key '{key}' is listed twice (one key, one group)"));
                }
            }
        }
        Ok(())
    }

    /// The group's policy with its defaults filled in, checked: the safe shares and the floors
    /// of all regions fit in L.
    pub fn policy(&self, group: &KeyGroup) -> Result<Policy, String> {
        let n = self.regions.len() as u64;
        // The registry's limiters and its burst rule: the window algorithms have B = L.
        let Some(listed) = listed::limiter_by_word(&group.algorithm) else {
            return Err(format!("unknown algorithm '{}'", group.algorithm));
        };
        let algorithm = listed.word.to_string();
        let windowed = !listed.burst;
        let limit = group.limit;
        let burst = group.burst.unwrap_or(limit);
        if limit == 0 || group.window_ms == 0 || burst == 0 || (windowed && burst != limit) {
            return Err(format!(
                "bad policy L {limit} W {} B {burst} for {algorithm}",
                group.window_ms
            ));
        }
        let safe = group.safe.unwrap_or(limit / n);
        let floor = group.floor.unwrap_or((limit / 200).max(1));
        if safe == 0 || safe.saturating_mul(n) > limit || floor.saturating_mul(n) > limit {
            return Err(format!(
                "L {limit} is too small for {n} regions with safe {safe} and floor {floor}"
            ));
        }
        let safe_burst = if windowed {
            safe
        } else {
            u64::try_from(u128::from(burst) * u128::from(safe) / u128::from(limit))
                .unwrap_or(u64::MAX)
                .max(1)
        };
        // The stores refuse a policy beyond the module's bounds: every period would find every
        // region `unreachable`. Both policies a store sees are checked: the global one (a share
        // is at most L) and the safe one the gateways call with.
        for (what, l, b) in [("", limit, burst), ("safe ", safe, safe_burst)] {
            StorePolicy::new(l, group.window_ms, b).map_err(|e| {
                let why = match e {
                    PolicyError::Limit => "L above 10^12",
                    PolicyError::Window => "window_ms above 10^12",
                    PolicyError::Capacity => "burst above 10^12",
                    PolicyError::RefillTooSlow => "burst × window_ms / L above 10^12 ms",
                };
                format!(
                    "the {what}policy L {l} W {} B {b} is beyond the module's bounds: {why}",
                    group.window_ms
                )
            })?;
        }
        Ok(Policy {
            algorithm,
            limit,
            window_ms: group.window_ms,
            burst,
            safe,
            safe_burst,
            floor,
        })
    }

    pub fn timeout_ms(&self) -> u64 {
        self.timeout_ms.unwrap_or(self.period_ms / 4).max(1)
    }
}

/// Every key name, `{a..b}` ranges expanded (their number bounded first by [`Config`]'s
/// `max_keys`).
pub fn expand(names: &[String]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for name in names {
        count(name)?;
        match range(name) {
            Some((prefix, a, b, suffix)) => {
                out.extend((a..=b).map(|i| format!("{prefix}{i}{suffix}")));
            }
            None => out.push(name.clone()),
        }
    }
    Ok(out)
}

/// How many keys a name expands to, without expanding it.
fn count(name: &str) -> Result<u64, String> {
    match range(name) {
        Some((_, a, b, _)) if b < a => Err(format!("bad range in '{name}'")),
        Some((_, a, b, _)) => Ok((b - a).saturating_add(1)),
        None => Ok(1),
    }
}

/// The first `{a..b}` in a name (other braces, such as a Cluster hash tag `{tenant}`, stay as
/// they are): what comes before it, a, b, and what comes after it.
fn range(name: &str) -> Option<(&str, u64, u64, &str)> {
    let mut from = 0;
    while let Some(open) = name[from..].find('{').map(|i| from + i) {
        let close = open + name[open..].find('}')?;
        let bounds = name[open + 1..close]
            .split_once("..")
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)));
        if let Some((a, b)) = bounds {
            return Some((&name[..open], a, b, &name[close + 1..]));
        }
        from = open + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
        period_ms = 2000
        [[regions]]
        name = "a"
        url = "redis://127.0.0.1:6379"
        [[regions]]
        name = "b"
        url = "redis://127.0.0.1:6380"
        [[regions]]
        name = "c"
        url = "redis://127.0.0.1:6381"
        [[keys]]
        keys = ["tenant:{1..3}", "search", "{eu}:{7..8}"]
        algorithm = "gcra"
        limit = 3000
        window_ms = 1000
        burst = 6000
    "#;

    #[test]
    fn defaults_and_expansion() {
        let config = Config::parse(EXAMPLE).unwrap();
        assert_eq!(config.lifetime_ms, 30_000);
        let policy = config.policy(&config.keys[0]).unwrap();
        assert_eq!(
            (policy.safe, policy.safe_burst, policy.floor),
            (1000, 2000, 15)
        );
        assert_eq!(
            expand(&config.keys[0].keys).unwrap(),
            ["tenant:1", "tenant:2", "tenant:3", "search", "{eu}:7", "{eu}:8"]
        );
    }

    #[test]
    fn refuses_what_cannot_hold() {
        for (from, to) in [
            ("limit = 3000", "limit = 2"),
            ("algorithm = \"gcra\"", "algorithm = \"shape\""),
            ("period_ms = 2000", "period_ms = 20000"),
            ("burst = 6000", "burst = 0"),
        ] {
            assert!(Config::parse(&EXAMPLE.replace(from, to)).is_err(), "{to}");
        }
    }

    #[test]
    fn refuses_what_would_be_loaded_and_ignored_or_never_answer() {
        let cases = [
            // One key in two groups: the stricter L would be ignored.
            (
                format!("{EXAMPLE}[[keys]]\nkeys = [\"search\"]\nalgorithm = \"gcra\"\nlimit = 30\nwindow_ms = 1000\n"),
                "key 'search' is listed twice (one key, one group)",
            ),
            (
                EXAMPLE.replace("\"search\"", "\"tenant:2\""),
                "key 'tenant:2' is listed twice (one key, one group)",
            ),
            (EXAMPLE.replace("\"search\"", "\"\""), "an empty key name"),
            (
                EXAMPLE.replace("name = \"c\"", "name = \"a\""),
                "region 'a' is named twice",
            ),
            (EXAMPLE.replace("name = \"c\"", "name = \"\""), "a region has an empty name"),
            (
                EXAMPLE.replace("limit = 3000", "limit = 10000000000000"),
                "the policy L 10000000000000 W 1000 B 6000 is beyond the module's bounds: L above 10^12",
            ),
            (
                EXAMPLE.replace("window_ms = 1000", "window_ms = 9223372036854775807"),
                "the policy L 3000 W 9223372036854775807 B 6000 is beyond the module's bounds: window_ms above 10^12",
            ),
            // Five ranges of ten million: 6.5 GB once expanded; refused before.
            (
                EXAMPLE.replace(
                    "\"search\"",
                    "\"a{1..9999999}\", \"b{1..9999999}\", \"c{1..9999999}\", \"d{1..9999999}\", \"e{1..9999999}\"",
                ),
                "50000000 keys once ranges are expanded: at most max_keys = 250000",
            ),
            (
                EXAMPLE.replace("period_ms = 2000", "period_ms = 2000\nload_library = \"yes\""),
                "load_library 'yes': expected no, missing or replace",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(Config::parse(&text).unwrap_err(), want);
        }
        let loads = EXAMPLE.replace(
            "period_ms = 2000",
            "period_ms = 2000\nload_library = \"missing\"",
        );
        assert_eq!(
            Config::parse(&loads).and_then(|c| c.load_library()),
            Ok(LoadLibrary::Missing)
        );
        let bigger = format!(
            "max_keys = 300000\n{}",
            EXAMPLE.replace("tenant:{1..3}", "t{1..299990}")
        );
        assert!(Config::parse(&bigger).is_ok());
    }
}
