//! What the steps of one `ShouldRateLimit` request work with, borrowed from the service for
//! that request: the stores (every call through the client's limiter: its circuit, its
//! adaptive deadline, the class's fallback), the denial cache, the slots held here while the
//! store does not answer, the settings and the counters. Each step is its own file:
//! `check.rs` (and `store_calls.rs`, `concurrency.rs` under it), `settle.rs`, `answer.rs`;
//! `service.rs` runs them in order.

use ratelimit_client::{Clock, Error, Limiter};

use crate::config::{Rule, Unit};
use crate::denials::Denials;
use crate::local_slots::LocalSlots;
use crate::metrics::{Metrics, RuleCounts};
use crate::settings::Settings;

/// Why a request got no answer (Envoy then applies its `failure_mode_deny`).
#[derive(Debug)]
pub enum Refusal {
    /// An empty domain, no descriptors, or more limited ones than are decided at once.
    BadRequest(String),
    /// No config has loaded yet (the one at start was refused).
    NoConfig,
    /// The store refused the call for a reason no fallback may hide (a wrong type at a key).
    Store(Error),
}

pub(crate) struct Steps<'a> {
    pub(crate) limiter: &'a Limiter,
    /// `REDIS_PERSECOND`: the limiter of the second store, deciding rules whose unit is a second.
    pub(crate) per_second: Option<&'a Limiter>,
    pub(crate) settings: &'a Settings,
    pub(crate) metrics: &'a Metrics,
    pub(crate) denials: &'a Denials,
    pub(crate) clock: &'a dyn Clock,
    pub(crate) local_slots: &'a LocalSlots,
}

impl Steps<'_> {
    /// The limiter deciding `rule`: the per-second store's for a rule whose unit is a second
    /// when that store is set (the peer's split), else the main store's.
    pub(crate) fn limiter_of(&self, rule: &Rule) -> &Limiter {
        match self.per_second {
            Some(l) if per_second_rule(rule) => l,
            _ => self.limiter,
        }
    }

    /// A store error no fallback may hide: counted as the peer's redis_error, logged, and the
    /// request refused.
    pub(crate) fn store_error(&self, e: Error) -> Refusal {
        self.metrics
            .service("call_should_rate_limit_redis_error", 1);
        log::error!("store error: {e}");
        Refusal::Store(e)
    }

    /// Counts `counts` on the rule of `stats_key`.
    pub(crate) fn count(&self, stats_key: &str, rule: &Rule, counts: &RuleCounts) {
        self.metrics.rule(stats_key, rule.class_name(), counts);
    }
}

/// A rule the per-second store decides when one is set: a rate whose unit is a second (a
/// concurrency rule's slots stay on the main store, whatever its unit).
pub(crate) fn per_second_rule(rule: &Rule) -> bool {
    rule.unit == Unit::Second && rule.concurrency.is_none()
}
