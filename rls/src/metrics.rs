//! Counters per rule and for the service, rendered in Prometheus's text format on `/metrics`.
//! Per rule (label `key`: the peer's stats key `domain.key_value…`), as the peer names them:
//! `ratelimit_service_rate_limit_{total_hits, over_limit, near_limit, within_limit, shadow_mode,
//! over_limit_with_local_cache}_total`, and ours: `…_fallback_total` (label `class`: decided
//! by the class's fallback because the store did not answer), and the tokens of post-response
//! settles: `…_settle_{charged, given_back, journaled, dropped}_total` (charged into the store,
//! given back to it, owed to the billing journal while the store was down, not settled: the
//! store was down and the class is not billing). For the service:
//! `ratelimit_service_config_load_{success,error}_total`,
//! `ratelimit_service_call_should_rate_limit_{redis_error,service_error}_total`,
//! `ratelimit_service_global_shadow_mode_total`, `ratelimit_service_store_calls_total`, and
//! `ratelimit_service_store_backend{backend="module"|"functions"|"scripts"} 1`: how the store
//! is reached (docs/functions.md, backends).

use std::collections::BTreeMap;
use std::sync::Mutex;

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
    }
}

type Field = fn(&RuleCounts) -> u64;

#[derive(Default)]
pub struct Metrics {
    rules: Mutex<BTreeMap<(String, &'static str), RuleCounts>>,
    service: Mutex<BTreeMap<&'static str, u64>>,
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

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let rules = self.rules.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let fields: [(&str, Field); 10] = [
            ("total_hits", |c| c.total_hits),
            ("over_limit", |c| c.over_limit),
            ("near_limit", |c| c.near_limit),
            ("within_limit", |c| c.within_limit),
            ("shadow_mode", |c| c.shadow_mode),
            ("over_limit_with_local_cache", |c| {
                c.over_limit_with_local_cache
            }),
            ("settle_charged", |c| c.settle_charged),
            ("settle_given_back", |c| c.settle_given_back),
            ("settle_journaled", |c| c.settle_journaled),
            ("settle_dropped", |c| c.settle_dropped),
        ];
        for (field, get) in fields {
            let name = format!("ratelimit_service_rate_limit_{field}_total");
            out += &format!("# TYPE {name} counter\n");
            let mut by_key: BTreeMap<&str, u64> = BTreeMap::new();
            for ((k, _), c) in &rules {
                *by_key.entry(k).or_default() += get(c);
            }
            for (k, v) in by_key {
                out += &format!("{name}{{key=\"{}\"}} {v}\n", escape(k));
            }
        }
        let name = "ratelimit_service_rate_limit_fallback_total";
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
        let service = self
            .service
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for (k, v) in service {
            out += &format!(
                "# TYPE ratelimit_service_{k}_total counter\nratelimit_service_{k}_total {v}\n"
            );
        }
        let backend = *self.backend.lock().unwrap_or_else(|p| p.into_inner());
        if !backend.is_empty() {
            out += &format!(
                "# TYPE ratelimit_service_store_backend gauge\n\
                 ratelimit_service_store_backend{{backend=\"{backend}\"}} 1\n"
            );
        }
        out
    }
}

/// A label value in the exposition format: backslash, double quote and newline escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
