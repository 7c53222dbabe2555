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

use crate::config::{descriptor_key, Config, Rule, Unit};
use crate::denials::Denials;
use crate::headers::{self, Part};
use crate::metrics::{Metrics, RuleCounts};
use crate::settings::Settings;

pub struct Service {
    config: RwLock<Arc<Config>>,
    limiter: Limiter,
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
struct Item {
    indexes: Vec<usize>,
    rule: Arc<Rule>,
    stats_key: String,
    key: String,
    hits: u64,
    shadow: bool,
    outcome: Option<Outcome>,
}

/// What was decided for one item.
#[derive(Clone, Copy, Debug)]
struct Outcome {
    /// This descriptor would admit the request (on a denied request: it was not charged).
    admitted: bool,
    remaining: u64,
    retry_after_ms: Option<u64>,
    reset_after_ms: u64,
    local_cache: bool,
    source: Source,
}

impl Outcome {
    fn of(d: &Decision) -> Outcome {
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
            settings,
            metrics: Arc::new(Metrics::default()),
            clock,
        }
    }

    pub fn limiter(&self) -> &Limiter {
        &self.limiter
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
        let mut items = self.items(&config, req);
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
        }
        self.remember_denials(&items, now);
        Ok(self.respond(req, &items, global_shadow))
    }

    /// The limited descriptors: each matched to its rule (the descriptor's own `limit` override
    /// first), rules named in another matched rule's `replaces` dropped, unlimited ones left out.
    fn items(&self, config: &Config, req: &RateLimitRequest) -> Vec<Item> {
        let mut matched: Vec<(usize, Arc<Rule>, String, u64)> = Vec::new();
        for (index, d) in req.descriptors.iter().enumerate() {
            let entries: Vec<(&str, &str)> = d
                .entries
                .iter()
                .map(|e| (e.key.as_str(), e.value.as_str()))
                .collect();
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
            matched.push((index, rule, stats_key, hits(req, d)));
        }
        let replaced: HashSet<&str> = matched
            .iter()
            .flat_map(|(_, r, _, _)| r.replaces.iter().map(String::as_str))
            .collect();
        let mut items: Vec<Item> = Vec::new();
        for (index, rule, stats_key, hits) in &matched {
            if rule.unlimited || (!rule.name.is_empty() && replaced.contains(rule.name.as_str())) {
                continue;
            }
            let Some(policy) = rule.policy() else {
                continue;
            };
            let Some(d) = req.descriptors.get(*index) else {
                continue;
            };
            let key = self.store_key(&req.domain, d, policy.algorithm);
            if let Some(same) = items.iter_mut().find(|i| i.key == key) {
                same.indexes.push(*index);
                same.hits = same.hits.saturating_add(*hits);
                continue;
            }
            items.push(Item {
                indexes: vec![*index],
                key,
                stats_key: stats_key.clone(),
                hits: *hits,
                shadow: rule.shadow_mode || self.settings.shadow_mode,
                rule: rule.clone(),
                outcome: None,
            });
        }
        items
    }

    /// `<prefix>rls:{<domain>}:<key>_<value>.<key>_<value>:<ALGORITHM>`: the domain is the hash
    /// tag, so every descriptor of a request is on one Cluster slot (one `RL.ALL`); the
    /// algorithm is in the key so that changing a rule's algorithm starts a new key instead of
    /// meeting the old one's type.
    fn store_key(&self, domain: &str, d: &RateLimitDescriptor, algorithm: Algorithm) -> String {
        let mut key = format!("{}rls:{{{domain}}}:", self.settings.cache_key_prefix);
        for (i, e) in d.entries.iter().enumerate() {
            if i > 0 {
                key.push('.');
            }
            key.push_str(&e.key);
            if !e.value.is_empty() {
                key.push('_');
                key.push_str(&e.value);
            }
        }
        key.push(':');
        key.push_str(algorithm.name());
        key
    }

    /// One store decision over `which` items: the rule's own command for one, `RL.ALL` for more.
    async fn decide(&self, items: &mut [Item], which: &[usize]) -> Result<(), Refusal> {
        let result = match which {
            [] => return Ok(()),
            [one] => {
                let item = &items[*one];
                let Some(limit) = item.rule.limit.as_ref() else {
                    return Ok(());
                };
                self.limiter
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
                self.limiter.check_all(&checks).await.map(|a| a.limiters)
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
            let denied = !o.admitted && item.hits > 0;
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
            if let Some(p) = rule.policy() {
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
            .filter_map(|i| i.outcome.filter(|o| !o.admitted && i.hits > 0 && !i.shadow))
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
        let h = item.hits;
        let mut c = RuleCounts {
            total_hits: h,
            ..RuleCounts::default()
        };
        let Some(o) = item.outcome else { return c };
        if matches!(o.source, Source::Fallback(_)) {
            c.fallback = 1;
        }
        if !o.admitted && h > 0 {
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
