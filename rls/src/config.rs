//! The rate limit configuration as envoyproxy/ratelimit reads it: per domain, a tree of
//! descriptors (`key`, optional `value`), each level optionally carrying a rule. `load.rs` builds
//! it from YAML; this file holds the types and the lookup a request's descriptor goes through.

use std::collections::HashMap;
use std::sync::Arc;

use ratelimit_client::{Algorithm, Class, Limit, Policy};

/// The units of `rate_limit.unit`, each a whole number of seconds; MONTH is 30 days and YEAR 365
/// days, as the peer counts them, and every window is aligned to the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    pub fn parse(name: &str) -> Option<Unit> {
        Some(match name.to_ascii_uppercase().as_str() {
            "SECOND" => Unit::Second,
            "MINUTE" => Unit::Minute,
            "HOUR" => Unit::Hour,
            "DAY" => Unit::Day,
            "WEEK" => Unit::Week,
            "MONTH" => Unit::Month,
            "YEAR" => Unit::Year,
            _ => return None,
        })
    }

    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 604_800,
            Unit::Month => 2_592_000,
            Unit::Year => 31_536_000,
        }
    }

    /// The enum value of `envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit`.
    pub fn proto(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    pub fn from_proto(value: i32) -> Option<Unit> {
        [
            Unit::Second,
            Unit::Minute,
            Unit::Hour,
            Unit::Day,
            Unit::Week,
            Unit::Month,
            Unit::Year,
        ]
        .into_iter()
        .find(|u| u.proto() == value)
    }
}

/// One `rate_limit` block, resolved.
#[derive(Clone, Debug)]
pub struct Rule {
    /// `domain.key_value.key2`: the peer's stats key, our metrics' `key` label.
    pub stats_key: String,
    /// `rate_limit.name` ("" when unset): what `replaces` refers to.
    pub name: String,
    pub replaces: Vec<String>,
    pub unlimited: bool,
    pub unit: Unit,
    pub requests_per_unit: u32,
    pub shadow_mode: bool,
    pub detailed_metric: bool,
    /// `rate_limit.settle` (ours): a hit on this rule is charged after the fact (into debt, never
    /// denied) instead of decided; a hits_addend of 0 still checks. See `settle.rs`.
    pub settle: bool,
    /// The client limit deciding it (policy, class, lease). `None` when unlimited.
    pub limit: Option<Limit>,
}

impl Rule {
    pub fn policy(&self) -> Option<&Policy> {
        self.limit.as_ref().map(Limit::policy)
    }

    /// The rule of a descriptor's own `limit` override (a fixed window, contract class).
    pub fn from_override(stats_key: String, requests_per_unit: u32, unit: Unit) -> Rule {
        let options = Options::default();
        Rule {
            limit: Some(options.limit(&stats_key, requests_per_unit, unit)),
            stats_key,
            name: String::new(),
            replaces: Vec::new(),
            unlimited: false,
            unit,
            requests_per_unit,
            shadow_mode: false,
            detailed_metric: false,
            settle: false,
        }
    }
}

/// Our extensions of the `rate_limit` block.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub algorithm: Algorithm,
    pub burst: Option<u64>,
    pub class: Class,
    pub lease: Option<u64>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            // The peer's only algorithm, so a swapped-in server answers as the old one did.
            algorithm: Algorithm::FixedWindow,
            burst: None,
            class: Class::Contract,
            lease: None,
        }
    }
}

impl Options {
    /// The client limit: L = requests_per_unit, W = the unit. L 0 is kept as 0 here; the
    /// service denies it without a store call (the module refuses L 0).
    pub fn limit(&self, stats_key: &str, requests_per_unit: u32, unit: Unit) -> Limit {
        let mut policy = Policy::new(
            self.algorithm,
            u64::from(requests_per_unit),
            unit.seconds() * 1000,
        );
        policy.burst = self.burst;
        let limit = Limit::new(stats_key, policy, self.class);
        match self.lease {
            Some(k) => limit.lease(k),
            None => limit,
        }
    }
}

/// One level of the descriptor tree.
#[derive(Debug, Default)]
pub struct Node {
    /// By `key` or `key_value` (the peer's composite key).
    pub children: HashMap<String, Node>,
    /// Composite keys ending in `*`, in file order: prefix matches.
    pub wildcards: Vec<String>,
    pub rule: Option<Arc<Rule>>,
}

/// Every domain's tree, and the files it came from.
#[derive(Debug, Default)]
pub struct Config {
    pub domains: HashMap<String, Node>,
    pub files: Vec<String>,
}

impl Config {
    /// The algorithms the rules use (GCRA when none), each once: what the store's ACL user must
    /// be allowed to run.
    pub fn algorithms(&self) -> Vec<ratelimit_client::Algorithm> {
        fn walk(node: &Node, out: &mut Vec<ratelimit_client::Algorithm>) {
            if let Some(p) = node.rule.as_ref().and_then(|r| r.policy()) {
                if !out.contains(&p.algorithm) {
                    out.push(p.algorithm);
                }
            }
            for child in node.children.values() {
                walk(child, out);
            }
        }
        let mut out = Vec::new();
        for node in self.domains.values() {
            walk(node, &mut out);
        }
        if out.is_empty() {
            out.push(ratelimit_client::Algorithm::Gcra);
        }
        out
    }

    /// The rule for one request descriptor's entries, matched as the peer matches: at each level
    /// `key_value` first, then a wildcard `key_prefix*`, then the key-only default; the rule
    /// applies only if it sits at the level of the descriptor's last entry. A matched level
    /// without `rate_limit` (a whitelist) yields no rule.
    pub fn rule_for(&self, domain: &str, entries: &[(&str, &str)]) -> Option<Arc<Rule>> {
        let mut node = self.domains.get(domain)?;
        let mut found = None;
        for (i, (key, value)) in entries.iter().enumerate() {
            let composite = format!("{key}_{value}");
            let next = node
                .children
                .get(&composite)
                .or_else(|| {
                    node.wildcards
                        .iter()
                        .find(|w| composite.starts_with(w.trim_end_matches('*')))
                        .and_then(|w| node.children.get(w))
                })
                .or_else(|| node.children.get(*key));
            let Some(next) = next else { break };
            if i + 1 == entries.len() {
                found = next.rule.clone();
            }
            if next.children.is_empty() {
                break;
            }
            node = next;
        }
        found
    }
}

/// The descriptor entry key that marks a settle (its value is not read; see `settle`): part of
/// the request format, as the descriptor key is.
pub const SETTLE_KEY: &str = "rls_settle";

/// The peer's key for a descriptor's own entries: `domain.key_value.key2` (no `_` when the
/// value is empty).
pub fn descriptor_key(domain: &str, entries: &[(&str, &str)]) -> String {
    let mut out = String::from(domain);
    for (k, v) in entries {
        out.push('.');
        out.push_str(k);
        if !v.is_empty() {
            out.push('_');
            out.push_str(v);
        }
    }
    out
}
