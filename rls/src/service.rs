//! `ShouldRateLimit`: a request's descriptors matched to rules, decided together in one store
//! call (`RL.ALL`; the rule's own command when only one descriptor is limited), all or nothing,
//! through the client's limiter (deadline, circuit, the class's fallback), with the denial cache
//! in front of it and shadow mode after it.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as PbLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use ratelimit_client::{Algorithm, Clock, Decision, Error, Limiter, Source};

use crate::config::{descriptor_key, Config, Rule, Unit, SETTLE_KEY};
use crate::denials::Denials;
use crate::headers::{self, Part};
use crate::metrics::{Metrics, RuleCounts};
use crate::settings::Settings;

pub struct Service {
    config: RwLock<Arc<Config>>,
    limiter: Limiter,
    /// `REDIS_PERSECOND`: the limiter of the second store, deciding rules whose unit is a second.
    per_second: Option<Limiter>,
    settings: Arc<Settings>,
    pub denials: Denials,
    pub metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
}

/// Why a request got no answer (Envoy then applies its `failure_mode_deny`).
#[derive(Debug)]
pub enum Refusal {
    /// An empty domain or no descriptors.
    BadRequest(String),
    /// The store refused the call for a reason no fallback may hide (a wrong type at a key).
    Store(Error),
}

/// One limited key on its way to a decision: a descriptor, or several of one request that
/// name the same key (`RL.ALL` takes a key once: their hits are added up).
pub(crate) struct Item {
    pub(crate) indexes: Vec<usize>,
    pub(crate) rule: Arc<Rule>,
    pub(crate) stats_key: String,
    pub(crate) key: String,
    pub(crate) hits: u64,
    pub(crate) shadow: bool,
    /// Charged after the fact instead of decided (`settle.rs`), by `by` tokens (negative: given
    /// back).
    pub(crate) settle: bool,
    pub(crate) by: i64,
    pub(crate) outcome: Option<Outcome>,
}

/// What was decided for one item.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Outcome {
    /// This descriptor would admit the request (on a denied request: it was not charged).
    pub(crate) admitted: bool,
    pub(crate) remaining: u64,
    pub(crate) retry_after_ms: Option<u64>,
    pub(crate) reset_after_ms: u64,
    pub(crate) local_cache: bool,
    pub(crate) source: Source,
}

impl Item {
    /// Whether a denial by the store denies the request: a charge, or a check (hits_addend 0) on
    /// a `settle: true` rule, whose requests only check and pay after (denied while in debt).
    fn enforced(&self) -> bool {
        self.hits > 0 || self.rule.settle
    }
}

impl Outcome {
    pub(crate) fn of(d: &Decision) -> Outcome {
        Outcome {
            admitted: d.allowed,
            remaining: d.remaining,
            retry_after_ms: d.retry_after_ms,
            reset_after_ms: d.reset_after_ms,
            local_cache: false,
            source: d.source,
        }
    }

    fn local_denial(retry_ms: u64, local_cache: bool) -> Outcome {
        Outcome {
            admitted: false,
            remaining: 0,
            retry_after_ms: Some(retry_ms),
            reset_after_ms: retry_ms,
            local_cache,
            source: Source::Store,
        }
    }
}

impl Service {
    pub fn new(
        limiter: Limiter,
        settings: Arc<Settings>,
        clock: Arc<dyn Clock>,
        config: Config,
    ) -> Service {
        Service {
            config: RwLock::new(Arc::new(config)),
            denials: Denials::new(settings.denial_cache_max),
            limiter,
            per_second: None,
            settings,
            metrics: Arc::new(Metrics::default()),
            clock,
        }
    }

    pub fn limiter(&self) -> &Limiter {
        &self.limiter
    }

    /// The same service with a second store for the rules whose unit is a second.
    pub fn with_per_second(mut self, limiter: Limiter) -> Service {
        self.per_second = Some(limiter);
        self
    }

    pub fn per_second(&self) -> Option<&Limiter> {
        self.per_second.as_ref()
    }

    pub fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Swaps in a new config: requests in flight finish on the old one. The denial cache is
    /// emptied (a limit may have been raised).
    pub fn replace_config(&self, config: Config) {
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config);
        self.denials.clear();
    }

    pub async fn should_rate_limit(
        &self,
        req: &RateLimitRequest,
    ) -> Result<RateLimitResponse, Refusal> {
        if req.domain.is_empty() {
            self.metrics
                .service("call_should_rate_limit_service_error", 1);
            return Err(Refusal::BadRequest(
                "rate limit domain must not be empty".into(),
            ));
        }
        if req.descriptors.is_empty() {
            self.metrics
                .service("call_should_rate_limit_service_error", 1);
            return Err(Refusal::BadRequest(
                "rate limit descriptor list must not be empty".into(),
            ));
        }
        let config = self.config();
        // Settles are charged apart, after the decisions (never denied: `settle.rs`).
        let (mut settles, mut items): (Vec<Item>, Vec<Item>) =
            self.items(&config, req).into_iter().partition(|i| i.settle);
        let now = self.clock.now_ns();
        let global_shadow = self.settings.shadow_mode;

        // Answered here: a limit of 0 (the module refuses L 0; a check of it is not a denial),
        // a charge above the capacity, a key cached as denied.
        for item in items.iter_mut() {
            let Some(policy) = item.rule.policy().copied() else {
                continue;
            };
            let window_ms = item.rule.unit.seconds() * 1000;
            if policy.limit == 0 || item.hits > policy.capacity() {
                item.outcome = Some(Outcome::local_denial(window_ms, false));
            } else if item.hits > 0 {
                if let Some(retry) = self.denials.denied(&item.key, now) {
                    item.outcome = Some(Outcome::local_denial(retry, true));
                }
            }
        }
        let enforced_local = items
            .iter()
            .any(|i| !i.shadow && i.hits > 0 && i.outcome.is_some_and(|o| !o.admitted));
        if !enforced_local {
            let pending: Vec<usize> = (0..items.len())
                .filter(|i| items[*i].outcome.is_none())
                .collect();
            self.decide(&mut items, &pending).await?;
            // Denied only by shadow rules: charge the others, answer OK.
            let denied: Vec<usize> = pending
                .iter()
                .copied()
                .filter(|i| items[*i].hits > 0 && items[*i].outcome.is_some_and(|o| !o.admitted))
                .collect();
            if !denied.is_empty() && denied.iter().all(|i| items[*i].shadow) {
                let rest: Vec<usize> = pending
                    .iter()
                    .copied()
                    .filter(|i| !denied.contains(i) && items[*i].hits > 0)
                    .collect();
                if !rest.is_empty() {
                    self.decide(&mut items, &rest).await?;
                }
            }
            self.undo_when_a_check_denies(&mut items).await;
        }
        self.remember_denials(&items, now);
        self.settle(&mut settles).await;
        items.append(&mut settles);
        Ok(self.respond(req, &items, global_shadow))
    }

    /// The limited descriptors: each matched to its rule (the descriptor's own `limit` override
    /// first), rules named in another matched rule's `replaces` dropped, unlimited ones left out.
    /// A descriptor is a settle when it carries the `rls_settle` entry (left out of matching and
    /// of the key), gives back (`is_negative_hits`), or charges a `settle: true` rule.
    fn items(&self, config: &Config, req: &RateLimitRequest) -> Vec<Item> {
        let mut matched: Vec<Item> = Vec::new();
        for (index, d) in req.descriptors.iter().enumerate() {
            let marked = d.entries.iter().any(|e| e.key == SETTLE_KEY);
            let entries: Vec<(&str, &str)> = d
                .entries
                .iter()
                .filter(|e| e.key != SETTLE_KEY)
                .map(|e| (e.key.as_str(), e.value.as_str()))
                .collect();
            if entries.is_empty() {
                continue;
            }
            let own_key = descriptor_key(&req.domain, &entries);
            let rule = match &d.limit {
                Some(o) => Unit::from_proto(o.unit).map(|unit| {
                    Arc::new(Rule::from_override(
                        own_key.clone(),
                        o.requests_per_unit,
                        unit,
                    ))
                }),
                None => config.rule_for(&req.domain, &entries),
            };
            let Some(rule) = rule else { continue };
            let stats_key = if rule.detailed_metric {
                own_key
            } else {
                rule.stats_key.clone()
            };
            let hits = hits(req, d);
            let settle = marked || d.is_negative_hits || (rule.settle && hits > 0);
            let size = i64::try_from(hits).unwrap_or(i64::MAX);
            let by = if d.is_negative_hits { -size } else { size };
            let key = rule.policy().map_or(String::new(), |p| {
                self.store_key(&req.domain, &entries, p.algorithm)
            });
            matched.push(Item {
                indexes: vec![index],
                key,
                stats_key,
                hits,
                shadow: rule.shadow_mode || self.settings.shadow_mode,
                settle,
                by,
                rule,
                outcome: None,
            });
        }
        let replaced: HashSet<String> = matched
            .iter()
            .flat_map(|i| i.rule.replaces.iter().cloned())
            .collect();
        let mut items: Vec<Item> = Vec::new();
        for item in matched {
            let rule = &item.rule;
            if rule.unlimited || (!rule.name.is_empty() && replaced.contains(&rule.name)) {
                continue;
            }
            if rule.policy().is_none() {
                continue;
            }
            if let Some(same) = items
                .iter_mut()
                .find(|i| i.key == item.key && i.settle == item.settle)
            {
                same.indexes.extend(item.indexes);
                same.hits = same.hits.saturating_add(item.hits);
                same.by = same.by.saturating_add(item.by);
                continue;
            }
            items.push(item);
        }
        items
    }

    /// `<prefix>rls:{<domain>}:<key>_<value>.<key>_<value>:<ALGORITHM>`: the domain is the hash
    /// tag, so every descriptor of a request is on one Cluster slot (one `RL.ALL`); the
    /// algorithm is in the key so that changing a rule's algorithm starts a new key instead of
    /// meeting the old one's type.
    fn store_key(&self, domain: &str, entries: &[(&str, &str)], algorithm: Algorithm) -> String {
        let mut key = format!("{}rls:{{{domain}}}:", self.settings.cache_key_prefix);
        for (i, (k, v)) in entries.iter().enumerate() {
            if i > 0 {
                key.push('.');
            }
            key.push_str(k);
            if !v.is_empty() {
                key.push('_');
                key.push_str(v);
            }
        }
        key.push(':');
        key.push_str(algorithm.name());
        key
    }

    /// The store decisions over `which` items: per-second rules and the others apart when a
    /// per-second store is set (each store's part is one call).
    async fn decide(&self, items: &mut [Item], which: &[usize]) -> Result<(), Refusal> {
        if self.per_second.is_none() {
            return self.decide_on(&self.limiter, items, which).await;
        }
        let (second, other): (Vec<usize>, Vec<usize>) = which.iter().partition(|i| {
            items
                .get(**i)
                .is_some_and(|it| it.rule.unit == Unit::Second)
        });
        if let Some(l) = &self.per_second {
            self.decide_on(l, items, &second).await?;
        }
        self.decide_on(&self.limiter, items, &other).await
    }

    /// One store decision over `which` items: the rule's own command for one, `RL.ALL` for more.
    async fn decide_on(
        &self,
        limiter: &Limiter,
        items: &mut [Item],
        which: &[usize],
    ) -> Result<(), Refusal> {
        let result = match which {
            [] => return Ok(()),
            [one] => {
                let item = &items[*one];
                let Some(limit) = item.rule.limit.as_ref() else {
                    return Ok(());
                };
                limiter
                    .check_cost(limit, &item.key, item.hits)
                    .await
                    .map(|d| vec![d])
            }
            many => {
                let checks: Vec<_> = many
                    .iter()
                    .filter_map(|i| {
                        let item = &items[*i];
                        item.rule
                            .limit
                            .as_ref()
                            .map(|l| (l, item.key.as_str(), item.hits))
                    })
                    .collect();
                limiter.check_all(&checks).await.map(|a| a.limiters)
            }
        };
        self.metrics.service("store_calls", 1);
        let decisions = result.map_err(|e| {
            self.metrics
                .service("call_should_rate_limit_redis_error", 1);
            log::error!("store error: {e}");
            Refusal::Store(e)
        })?;
        for (i, d) in which.iter().zip(decisions.iter()) {
            items[*i].outcome = Some(Outcome::of(d));
        }
        Ok(())
    }

    /// Keys the store denied with nothing left are answered here until their retry time. Only
    /// when that time holds for any charge: a cost of 1, or a fixed window (denied until the
    /// window ends whatever the cost).
    fn remember_denials(&self, items: &[Item], now: u64) {
        for item in items {
            let Some(o) = item.outcome else { continue };
            let Some(policy) = item.rule.policy() else {
                continue;
            };
            let exact = item.hits == 1 || policy.algorithm == Algorithm::FixedWindow;
            if !o.admitted
                && !o.local_cache
                && o.source == Source::Store
                && o.remaining == 0
                && exact
            {
                if let Some(retry) = o.retry_after_ms.filter(|r| *r > 0) {
                    self.denials.deny(&item.key, now, retry);
                }
            }
        }
    }

    fn respond(
        &self,
        req: &RateLimitRequest,
        items: &[Item],
        global_shadow: bool,
    ) -> RateLimitResponse {
        let mut statuses: Vec<DescriptorStatus> = req
            .descriptors
            .iter()
            .map(|_| DescriptorStatus {
                code: Code::Ok as i32,
                ..DescriptorStatus::default()
            })
            .collect();
        let mut over = false;
        let mut would_be_over = false;
        let mut parts = Vec::new();
        for item in items {
            let rule = &item.rule;
            let current = PbLimit {
                name: rule.name.clone(),
                requests_per_unit: rule.requests_per_unit,
                unit: rule.unit.proto(),
            };
            let counts = self.count(item);
            let class = rule.limit.as_ref().map_or("", |l| l.class().name());
            self.metrics.rule(&item.stats_key, class, &counts);
            let Some(o) = item.outcome else {
                // Not asked: another descriptor was denied here without a store call.
                for i in &item.indexes {
                    if let Some(status) = statuses.get_mut(*i) {
                        status.current_limit = Some(current.clone());
                    }
                }
                continue;
            };
            let denied = !o.admitted && item.enforced();
            if denied {
                would_be_over = true;
                if !item.shadow {
                    over = true;
                }
            }
            let reset_ms = if denied {
                o.reset_after_ms.max(o.retry_after_ms.unwrap_or(0))
            } else {
                o.reset_after_ms
            };
            for i in &item.indexes {
                let Some(status) = statuses.get_mut(*i) else {
                    continue;
                };
                status.current_limit = Some(current.clone());
                status.code = if denied && !item.shadow {
                    Code::OverLimit as i32
                } else {
                    Code::Ok as i32
                };
                status.limit_remaining = u32::try_from(o.remaining).unwrap_or(u32::MAX);
                status.duration_until_reset = Some(PbDuration {
                    seconds: i64::try_from(reset_ms.div_ceil(1000)).unwrap_or(i64::MAX),
                    nanos: 0,
                });
            }
            // A settle's response is gone: it adds nothing to the headers.
            if let Some(p) = rule.policy().filter(|_| !item.settle) {
                parts.push(Part {
                    name: if rule.name.is_empty() {
                        item.stats_key.clone()
                    } else {
                        rule.name.clone()
                    },
                    requests_per_unit: u64::from(rule.requests_per_unit),
                    limit: p.limit,
                    window_ms: p.window_ms,
                    burst: p.burst,
                    admitted: o.admitted,
                    hits: item.hits,
                    remaining: o.remaining,
                    retry_after_ms: o.retry_after_ms,
                    reset_after_ms: reset_ms,
                });
            }
        }
        if global_shadow && would_be_over {
            self.metrics.service("global_shadow_mode", 1);
        }
        let retry = items
            .iter()
            .filter_map(|i| {
                i.outcome
                    .filter(|o| !o.admitted && i.enforced() && !i.shadow)
            })
            .filter_map(|o| o.retry_after_ms)
            .max();
        let response_headers_to_add =
            headers::response_headers(&self.settings, &parts, over, retry)
                .into_iter()
                .map(|(key, value)| HeaderValue {
                    key,
                    value,
                    ..HeaderValue::default()
                })
                .collect();
        RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
            statuses,
            response_headers_to_add,
            ..RateLimitResponse::default()
        }
    }

    /// The peer's counters for one item: every hit is total; a denied one is over the limit
    /// (and shadow, and answered locally, as it was); an admitted one is within the limit, and
    /// near it for the part above NEAR_LIMIT_RATIO of the limit.
    fn count(&self, item: &Item) -> RuleCounts {
        if item.settle {
            // Counted by `settle` as charged, given back, journaled or dropped.
            return RuleCounts::default();
        }
        let h = item.hits;
        let mut c = RuleCounts {
            total_hits: h,
            ..RuleCounts::default()
        };
        let Some(o) = item.outcome else { return c };
        if matches!(o.source, Source::Fallback(_)) {
            c.fallback = 1;
        }
        if !o.admitted && item.enforced() {
            c.over_limit = h;
            if o.local_cache {
                c.over_limit_with_local_cache = h;
            }
            if item.shadow {
                c.shadow_mode = h;
            }
        } else if o.admitted {
            c.within_limit = h;
            let capacity = item.rule.policy().map_or(0, |p| p.capacity());
            let near = (capacity as f64 * self.settings.near_limit_ratio).floor() as u64;
            let used = capacity.saturating_sub(o.remaining);
            if used > near {
                c.near_limit = h.min(used - near);
            }
        }
        c
    }
}

/// The charge of one descriptor: its own `hits_addend` when set (0 checks without charging),
/// else the request's, where 0 means 1 (as the peer reads both).
fn hits(req: &RateLimitRequest, d: &RateLimitDescriptor) -> u64 {
    match &d.hits_addend {
        Some(v) => v.value,
        None => u64::from(req.hits_addend.max(1)),
    }
}
