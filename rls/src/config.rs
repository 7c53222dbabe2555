//! The rate limit configuration as envoyproxy/ratelimit reads it: per domain, a tree of
//! descriptors (`key`, optional `value`), each level optionally carrying a rule. `load.rs` builds
//! it from YAML; this file holds the types and the lookup a request's descriptor goes through.

use std::collections::HashMap;
use std::sync::Arc;

use envoy_types::pb::google::protobuf::Struct;
use ratelimit_client::{Algorithm, Class, Limit, Policy};

use crate::wildcard::Wildcard;

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
    /// `quota_mode` on the descriptor: its denial alone does not deny the request; the request
    /// is denied when every quota-mode descriptor of it is over (or any other one is).
    pub quota_mode: bool,
    pub detailed_metric: bool,
    /// `metadata` on the descriptor: returned in the response's dynamic metadata when the
    /// request passes this descriptor and `RESPONSE_DYNAMIC_METADATA` is on.
    pub metadata: Option<Arc<Struct>>,
    /// `rate_limit.settle` (ours): a hit on this rule is charged after the fact (into debt, never
    /// denied) instead of decided; a hits_addend of 0 still checks. See `settle.rs`.
    pub settle: bool,
    /// The client limit deciding it (policy, class, lease). `None` when unlimited, and for a
    /// concurrency rule.
    pub limit: Option<Limit>,
    /// `rate_limit.concurrency` (ours): a concurrency rule instead of a rate (`concurrency.rs`).
    pub concurrency: Option<Concurrency>,
}

/// A concurrency rule: at most `limit` requests in flight per key, each holding its slot from
/// its request until Envoy's stream-done report releases it, and never longer than `ttl_ms`
/// after its request (the bound on what a lost report holds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Concurrency {
    /// N, 1 to the module's `MAX_HOLDERS` (1,000).
    pub limit: u64,
    /// `ttl`: how long a slot is held at most (the request path takes it; nothing renews it).
    pub ttl_ms: u64,
    /// What decides while the store does not answer.
    pub class: Class,
}

/// `ttl` when a concurrency rule does not say: longer than Envoy's default route timeout (15 s)
/// and most streams, so a request in flight keeps its slot; a lost stream-done report then
/// holds a slot at most this long.
pub const DEFAULT_SLOT_TTL_MS: u64 = 300_000;

/// The descriptor entry key whose value names a concurrency rule's holder (Envoy's
/// `request_headers` action on `x-request-id`): left out of matching and of the store key, as
/// [`SETTLE_KEY`] is.
pub const HOLDER_KEY: &str = "rls_holder";

impl Rule {
    pub fn policy(&self) -> Option<&Policy> {
        self.limit.as_ref().map(Limit::policy)
    }

    /// Whether requests are decided on it: a rate's policy or a concurrency rule.
    pub fn is_limited(&self) -> bool {
        self.limit.is_some() || self.concurrency.is_some()
    }

    /// The class deciding without the store ("" when unlimited): the metrics' `class` label.
    pub fn class_name(&self) -> &'static str {
        match (&self.limit, &self.concurrency) {
            (Some(l), _) => l.class().name(),
            (None, Some(c)) => c.class.name(),
            (None, None) => "",
        }
    }

    /// What a descriptor can take at most: the rate's capacity, a concurrency rule's N.
    pub fn capacity(&self) -> u64 {
        match (self.policy(), &self.concurrency) {
            (Some(p), _) => p.capacity(),
            (None, Some(c)) => c.limit,
            (None, None) => 0,
        }
    }

    /// The `unit` of the response's `current_limit`: none (UNKNOWN) for a concurrency rule,
    /// which bounds requests at once, not per unit of time.
    pub fn unit_proto(&self) -> i32 {
        match self.concurrency {
            Some(_) => 0,
            None => self.unit.proto(),
        }
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
            quota_mode: false,
            detailed_metric: false,
            metadata: None,
            settle: false,
            concurrency: None,
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
    /// Composite keys holding a `*`, in file order: tried after the exact `key_value`.
    pub wildcards: Vec<Wildcard>,
    pub rule: Option<Arc<Rule>>,
    /// `value_to_metric`: the request's value goes into the stats key at this level.
    pub value_to_metric: bool,
    /// `share_threshold` (a wildcard entry only): every value it matches shares one counter
    /// and one stats key, both named by the pattern.
    pub share_threshold: bool,
}

/// Every domain's tree, and the files it came from.
#[derive(Debug, Default)]
pub struct Config {
    pub domains: HashMap<String, Node>,
    pub files: Vec<String>,
}

/// A request descriptor's rule, and how this request names it.
#[derive(Clone, Debug)]
pub struct Matched {
    pub rule: Arc<Rule>,
    /// The stats key of this request: the rule's, with `value_to_metric` levels carrying the
    /// request's value, the whole request's `key_value`s under `detailed_metric`, and a
    /// `share_threshold` level always its pattern.
    pub stats_key: String,
    /// Per entry, the pattern that replaces its value in the store key (`share_threshold`).
    pub shared: Vec<Option<String>>,
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

    /// Whether any rule is a concurrency rule (the store's ACL user must run RL.CONCURRENCY).
    pub fn has_concurrency(&self) -> bool {
        fn walk(node: &Node) -> bool {
            node.rule.as_ref().is_some_and(|r| r.concurrency.is_some())
                || node.children.values().any(walk)
        }
        self.domains.values().any(walk)
    }

    /// The rule for one request descriptor's entries, matched as the peer matches: at each level
    /// `key_value` first, then the first wildcard entry that matches `key_value`, then the
    /// key-only default; the rule applies only if it sits at the level of the descriptor's last
    /// entry. A matched level without `rate_limit` (a whitelist) yields no rule.
    pub fn rule_for(&self, domain: &str, entries: &[(&str, &str)]) -> Option<Matched> {
        let mut node = self.domains.get(domain)?;
        let mut found = None;
        let mut stats_key = String::from(domain);
        let mut shared: Vec<Option<String>> = vec![None; entries.len()];
        for (i, (key, value)) in entries.iter().enumerate() {
            let composite = format!("{key}_{value}");
            let (next, shown) = if let Some(n) = node.children.get(&composite) {
                (n, *value)
            } else if let Some((w, n)) = node
                .wildcards
                .iter()
                .find(|w| w.matches(&composite))
                .and_then(|w| node.children.get(&w.composite).map(|n| (w, n)))
            {
                let pattern = w
                    .composite
                    .strip_prefix(key)
                    .and_then(|p| p.strip_prefix('_'))
                    .unwrap_or(&w.composite);
                if n.share_threshold {
                    if let Some(slot) = shared.get_mut(i) {
                        *slot = Some(pattern.to_string());
                    }
                    (n, pattern)
                } else if n.value_to_metric {
                    (n, *value)
                } else {
                    (n, pattern)
                }
            } else if let Some(n) = node.children.get(*key) {
                (n, if n.value_to_metric { *value } else { "" })
            } else {
                break;
            };
            stats_key.push('.');
            stats_key.push_str(key);
            if !shown.is_empty() {
                stats_key.push('_');
                stats_key.push_str(shown);
            }
            if i + 1 == entries.len() {
                found = next.rule.clone();
            }
            if next.children.is_empty() {
                break;
            }
            node = next;
        }
        let rule = found?;
        if rule.detailed_metric {
            stats_key = detailed_key(domain, entries, &shared);
        }
        Some(Matched {
            rule,
            stats_key,
            shared,
        })
    }
}

/// The peer's `detailed_metric` key: every entry's `key_value` as sent (`key_` for an empty
/// value, as the peer writes it), a `share_threshold` entry's pattern instead of its value.
fn detailed_key(domain: &str, entries: &[(&str, &str)], shared: &[Option<String>]) -> String {
    let any_shared = shared.iter().any(Option::is_some);
    let mut out = String::from(domain);
    for (i, (k, v)) in entries.iter().enumerate() {
        out.push('.');
        out.push_str(k);
        match shared.get(i).and_then(Option::as_deref) {
            Some(pattern) => {
                out.push('_');
                out.push_str(pattern);
            }
            None if any_shared && v.is_empty() => {}
            None => {
                out.push('_');
                out.push_str(v);
            }
        }
    }
    out
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
