//! Counters per rule and for the service, under the peer's names, and ours beside them.
//!
//! The peer's, per rule (its stats key `domain.key_value…`): `total_hits`, `over_limit`,
//! `near_limit`, `within_limit`, `shadow_mode`, `over_limit_with_local_cache`; per unknown
//! domain `domain_not_found`; for the service `config_load_success`, `config_load_error`,
//! `global_shadow_mode`, `call.should_rate_limit.{redis_error,service_error}`, and per gRPC
//! method the request count and response time. Sent to statsd as the peer names them
//! (`statsd.rs`), and rendered on `/metrics` as the peer's default statsd-to-Prometheus mapping
//! names them: `ratelimit_service_rate_limit_<stat>{domain, key1, key2…}`,
//! `ratelimit_service_should_rate_limit_error{err_type}`,
//! `ratelimit_service_total_requests{grpc_method}`,
//! `ratelimit_service_response_time_seconds{grpc_method}` (a histogram),
//! `ratelimit_service_config_load_success`…
//!
//! Ours, under `rls_`: per rule `rls_rule_fallback_total{key, class}` (decided by the class's
//! fallback because the store did not answer) and the tokens of post-response settles,
//! `rls_rule_settle_{charged, given_back, journaled, dropped}_total{key}`, and the slots of
//! concurrency rules, `rls_rule_concurrency_{released, release_missed, release_dropped,
//! no_holder}_total{key}`; for the service
//! `rls_<name>_total` (store calls, settle calls and errors, checks given back), and
//! `rls_store_backend{backend="module"|"functions"|"scripts"} 1`: how the store is reached
//! (docs/functions.md, backends).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// What happened to the hits of one rule in one request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuleCounts {
    pub total_hits: u64,
    pub over_limit: u64,
    pub near_limit: u64,
    pub within_limit: u64,
    pub shadow_mode: u64,
    pub over_limit_with_local_cache: u64,
    pub fallback: u64,
    pub settle_charged: u64,
    pub settle_given_back: u64,
    pub settle_journaled: u64,
    pub settle_dropped: u64,
    /// Slots a stream-done report gave back.
    pub concurrency_released: u64,
    /// Stream-done reports whose holder held no slot (denied, lapsed at its TTL, released).
    pub concurrency_release_missed: u64,
    /// Stream-done reports the store did not take (down, or refused): the slot lapses at its TTL.
    pub concurrency_release_dropped: u64,
    /// Descriptors of a concurrency rule without a usable holder entry (denied on the request
    /// path; nothing to release on a stream-done report).
    pub concurrency_no_holder: u64,
}

impl RuleCounts {
    fn add(&mut self, o: &RuleCounts) {
        self.total_hits += o.total_hits;
        self.over_limit += o.over_limit;
        self.near_limit += o.near_limit;
        self.within_limit += o.within_limit;
        self.shadow_mode += o.shadow_mode;
        self.over_limit_with_local_cache += o.over_limit_with_local_cache;
        self.fallback += o.fallback;
        self.settle_charged += o.settle_charged;
        self.settle_given_back += o.settle_given_back;
        self.settle_journaled += o.settle_journaled;
        self.settle_dropped += o.settle_dropped;
        self.concurrency_released += o.concurrency_released;
        self.concurrency_release_missed += o.concurrency_release_missed;
        self.concurrency_release_dropped += o.concurrency_release_dropped;
        self.concurrency_no_holder += o.concurrency_no_holder;
    }
}

type Field = fn(&RuleCounts) -> u64;

/// The peer's per-rule stats, by the name it gives them.
pub const PEER_RULE_STATS: [(&str, Field); 6] = [
    ("total_hits", |c| c.total_hits),
    ("over_limit", |c| c.over_limit),
    ("near_limit", |c| c.near_limit),
    ("within_limit", |c| c.within_limit),
    ("shadow_mode", |c| c.shadow_mode),
    ("over_limit_with_local_cache", |c| {
        c.over_limit_with_local_cache
    }),
];

/// Ours per rule.
const OUR_RULE_STATS: [(&str, Field); 8] = [
    ("settle_charged", |c| c.settle_charged),
    ("settle_given_back", |c| c.settle_given_back),
    ("settle_journaled", |c| c.settle_journaled),
    ("settle_dropped", |c| c.settle_dropped),
    ("concurrency_released", |c| c.concurrency_released),
    ("concurrency_release_missed", |c| {
        c.concurrency_release_missed
    }),
    ("concurrency_release_dropped", |c| {
        c.concurrency_release_dropped
    }),
    ("concurrency_no_holder", |c| c.concurrency_no_holder),
];

/// The peer's service counters: (our name, its statsd name under `ratelimit.service.`, its
/// Prometheus name and labels).
pub const PEER_SERVICE_STATS: [(&str, &str, &str); 5] = [
    (
        "config_load_success",
        "config_load_success",
        "ratelimit_service_config_load_success",
    ),
    (
        "config_load_error",
        "config_load_error",
        "ratelimit_service_config_load_error",
    ),
    (
        "global_shadow_mode",
        "global_shadow_mode",
        "ratelimit_service_global_shadow_mode",
    ),
    (
        "call_should_rate_limit_redis_error",
        "call.should_rate_limit.redis_error",
        "ratelimit_service_should_rate_limit_error{err_type=\"redis_error\"}",
    ),
    (
        "call_should_rate_limit_service_error",
        "call.should_rate_limit.service_error",
        "ratelimit_service_should_rate_limit_error{err_type=\"service_error\"}",
    ),
];

/// The upper bounds (seconds) of the response-time histogram's buckets: Prometheus's defaults.
const BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// One gRPC method's requests and response times.
#[derive(Clone, Debug, Default)]
pub struct Timing {
    pub count: u64,
    pub sum_seconds: f64,
    buckets: [u64; BUCKETS.len()],
    /// Response times (ms) since statsd last took them, at most `STATSD_TIMINGS_MAX`.
    pending_ms: Vec<f64>,
}

/// Response times kept between two statsd flushes, at most; more in one interval are counted
/// in the histogram but not sent one by one.
pub const STATSD_TIMINGS_MAX: usize = 10_000;

#[derive(Default)]
pub struct Metrics {
    rules: Mutex<BTreeMap<(String, &'static str), RuleCounts>>,
    service: Mutex<BTreeMap<&'static str, u64>>,
    domains_not_found: Mutex<BTreeMap<String, u64>>,
    timings: Mutex<BTreeMap<&'static str, Timing>>,
    backend: Mutex<&'static str>,
}

impl Metrics {
    /// Adds one request's counts for the rule at `key` (its fallback class, or "" when none).
    pub fn rule(&self, key: &str, class: &'static str, counts: &RuleCounts) {
        let mut rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        rules
            .entry((key.to_string(), class))
            .or_default()
            .add(counts);
    }

    /// The store's backend, as `Backend::name` says it.
    pub fn set_backend(&self, backend: &'static str) {
        *self.backend.lock().unwrap_or_else(|p| p.into_inner()) = backend;
    }

    pub fn service(&self, name: &'static str, by: u64) {
        let mut s = self.service.lock().unwrap_or_else(|p| p.into_inner());
        *s.entry(name).or_default() += by;
    }

    pub fn domain_not_found(&self, domain: &str) {
        let mut d = self
            .domains_not_found
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *d.entry(domain.to_string()).or_default() += 1;
    }

    /// One request of `method`, answered in `took`.
    pub fn request(&self, method: &'static str, took: Duration) {
        let mut t = self.timings.lock().unwrap_or_else(|p| p.into_inner());
        let t = t.entry(method).or_default();
        let secs = took.as_secs_f64();
        t.count += 1;
        t.sum_seconds += secs;
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                t.buckets[i] += 1;
            }
        }
        if t.pending_ms.len() < STATSD_TIMINGS_MAX {
            t.pending_ms.push(secs * 1000.0);
        }
    }

    /// A rule's counts summed over classes (tests, the log).
    pub fn of(&self, key: &str) -> RuleCounts {
        let rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = RuleCounts::default();
        for ((k, _), c) in rules.iter() {
            if k == key {
                out.add(c);
            }
        }
        out
    }

    pub fn service_count(&self, name: &str) -> u64 {
        let s = self.service.lock().unwrap_or_else(|p| p.into_inner());
        s.get(name).copied().unwrap_or(0)
    }

    pub fn requests(&self, method: &str) -> u64 {
        let t = self.timings.lock().unwrap_or_else(|p| p.into_inner());
        t.get(method).map_or(0, |t| t.count)
    }

    /// Every counter as the peer names it in statsd, with its total so far: what `statsd.rs`
    /// sends the increase of.
    pub fn peer_counters(&self) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        for (key, c) in self.by_key() {
            for (stat, get) in PEER_RULE_STATS {
                out.push((
                    format!("ratelimit.service.rate_limit.{key}.{stat}"),
                    get(&c),
                ));
            }
        }
        let d = self
            .domains_not_found
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for (domain, n) in d {
            out.push((
                format!("ratelimit.service.rate_limit.{domain}.domain_not_found"),
                n,
            ));
        }
        for (ours, statsd, _) in PEER_SERVICE_STATS {
            out.push((
                format!("ratelimit.service.{statsd}"),
                self.service_count(ours),
            ));
        }
        let t = self.timings.lock().unwrap_or_else(|p| p.into_inner());
        for (method, timing) in t.iter() {
            out.push((
                format!("ratelimit_server.{method}.total_requests"),
                timing.count,
            ));
        }
        out
    }

    /// The response times (ms) per method since the last call.
    pub fn take_timings(&self) -> Vec<(&'static str, Vec<f64>)> {
        let mut t = self.timings.lock().unwrap_or_else(|p| p.into_inner());
        t.iter_mut()
            .map(|(m, timing)| (*m, std::mem::take(&mut timing.pending_ms)))
            .collect()
    }

    fn by_key(&self) -> BTreeMap<String, RuleCounts> {
        let rules = self.rules.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: BTreeMap<String, RuleCounts> = BTreeMap::new();
        for ((k, _), c) in rules.iter() {
            out.entry(k.clone()).or_default().add(c);
        }
        out
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let by_key = self.by_key();
        for (stat, get) in PEER_RULE_STATS {
            let name = format!("ratelimit_service_rate_limit_{stat}");
            out += &format!("# TYPE {name} counter\n");
            for (k, c) in &by_key {
                out += &format!("{name}{{{}}} {}\n", key_labels(k), get(c));
            }
        }
        let name = "ratelimit_service_rate_limit_domain_not_found";
        out += &format!("# TYPE {name} counter\n");
        let d = self
            .domains_not_found
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for (domain, n) in d {
            out += &format!("{name}{{domain=\"{}\"}} {n}\n", escape(&domain));
        }
        let mut typed = std::collections::HashSet::new();
        for (ours, _, prom) in PEER_SERVICE_STATS {
            let base = prom.split('{').next().unwrap_or(prom);
            if typed.insert(base) {
                out += &format!("# TYPE {base} counter\n");
            }
            out += &format!("{prom} {}\n", self.service_count(ours));
        }
        self.render_timings(&mut out);
        let rules = self.rules.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let name = "rls_rule_fallback_total";
        out += &format!("# TYPE {name} counter\n");
        for ((k, class), c) in &rules {
            if c.fallback > 0 {
                out += &format!(
                    "{name}{{key=\"{}\",class=\"{class}\"}} {}\n",
                    escape(k),
                    c.fallback
                );
            }
        }
        for (stat, get) in OUR_RULE_STATS {
            let name = format!("rls_rule_{stat}_total");
            out += &format!("# TYPE {name} counter\n");
            for (k, c) in &by_key {
                out += &format!("{name}{{key=\"{}\"}} {}\n", escape(k), get(c));
            }
        }
        let service = self
            .service
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for (k, v) in service {
            if PEER_SERVICE_STATS.iter().any(|(ours, _, _)| *ours == k) {
                continue;
            }
            out += &format!("# TYPE rls_{k}_total counter\nrls_{k}_total {v}\n");
        }
        let backend = *self.backend.lock().unwrap_or_else(|p| p.into_inner());
        if !backend.is_empty() {
            out += &format!(
                "# TYPE rls_store_backend gauge\nrls_store_backend{{backend=\"{backend}\"}} 1\n"
            );
        }
        out
    }

    fn render_timings(&self, out: &mut String) {
        let t = self
            .timings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let name = "ratelimit_service_total_requests";
        *out += &format!("# TYPE {name} counter\n");
        for (method, timing) in &t {
            *out += &format!("{name}{{grpc_method=\"{method}\"}} {}\n", timing.count);
        }
        let name = "ratelimit_service_response_time_seconds";
        *out += &format!("# TYPE {name} histogram\n");
        for (method, timing) in &t {
            for (bound, n) in BUCKETS.iter().zip(timing.buckets.iter()) {
                *out += &format!("{name}_bucket{{grpc_method=\"{method}\",le=\"{bound}\"}} {n}\n");
            }
            *out += &format!(
                "{name}_bucket{{grpc_method=\"{method}\",le=\"+Inf\"}} {}\n",
                timing.count
            );
            *out += &format!(
                "{name}_sum{{grpc_method=\"{method}\"}} {}\n",
                timing.sum_seconds
            );
            *out += &format!(
                "{name}_count{{grpc_method=\"{method}\"}} {}\n",
                timing.count
            );
        }
    }
}

/// A stats key as the peer's mapping labels it: the domain, then `key1`, `key2`… one per
/// dot-separated part (a value holding a dot splits, as it does there).
fn key_labels(key: &str) -> String {
    let mut parts = key.split('.');
    let mut out = format!("domain=\"{}\"", escape(parts.next().unwrap_or("")));
    for (i, p) in parts.enumerate() {
        out += &format!(",key{}=\"{}\"", i + 1, escape(p));
    }
    out
}

/// A label value in the exposition format: backslash, double quote and newline escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
