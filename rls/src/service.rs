//! `ShouldRateLimit`: a request's descriptors matched to rules and decided through the client's
//! limiter (deadline, circuit, the class's fallback), with the denial cache in front of it: each
//! on its own as the peer decides them, or, with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, together
//! in one store call (`RL.ALL`), all or nothing. `answer.rs` writes the response.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use ratelimit_client::{Algorithm, Clock, Decision, Error, Limit, Limiter, Source};

use crate::config::{descriptor_key, Config, Matched, Rule, Unit, HOLDER_KEY, SETTLE_KEY};
use crate::denials::Denials;
use crate::local_slots::LocalSlots;
use crate::metrics::Metrics;
use crate::settings::Settings;

pub struct Service {
    config: RwLock<Arc<Config>>,
    /// A config has loaded (at start or since).
    has_config: AtomicBool,
    limiter: Limiter,
    /// `REDIS_PERSECOND`: the limiter of the second store, deciding rules whose unit is a second.
    per_second: Option<Limiter>,
    settings: Arc<Settings>,
    pub denials: Denials,
    pub metrics: Arc<Metrics>,
    pub(crate) clock: Arc<dyn Clock>,
    /// Concurrency slots taken here while the store does not answer (`local_slots.rs`).
    pub(crate) local_slots: LocalSlots,
}

/// Why a request got no answer (Envoy then applies its `failure_mode_deny`).
#[derive(Debug)]
pub enum Refusal {
    /// An empty domain or no descriptors.
    BadRequest(String),
    /// No config has loaded yet (the one at start was refused).
    NoConfig,
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
    /// The rule's `shadow_mode`: a denial answers OK in its status and in the total.
    pub(crate) shadow: bool,
    /// `quota_mode` (the rule's, or QUOTA_MODE): a denial shows in its status; the request is
    /// denied only when every quota descriptor is.
    pub(crate) quota: bool,
    /// Its denial alone does not deny the request (shadow, quota, or SHADOW_MODE): in the
    /// atomic mode, the others are charged without it.
    pub(crate) soft: bool,
    /// Charged after the fact instead of decided (`settle.rs`), by `by` tokens (negative: given
    /// back).
    pub(crate) settle: bool,
    pub(crate) by: i64,
    /// A concurrency rule's holder: the value of the descriptor's `rls_holder` entry.
    pub(crate) holder: Option<String>,
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
    /// Who decided; `None`: this server, without asking (a limit of 0, a charge above the
    /// capacity, the denial cache), so it is never taken for the store's answer.
    pub(crate) source: Option<Source>,
}

impl Item {
    /// The store check this item makes when its rule has a rate limit, as `check_all` takes it:
    /// (the limit, the key, the hits).
    pub(crate) fn check(&self) -> Option<(&Limit, &str, u64)> {
        self.rule
            .limit
            .as_ref()
            .map(|l| (l, self.key.as_str(), self.hits))
    }

    /// Whether a denial by the store denies the request: a charge, or a check (hits_addend 0) on
    /// a `settle: true` rule, whose requests only check and pay after (denied while in debt).
    pub(crate) fn enforced(&self) -> bool {
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
            source: Some(d.source),
        }
    }

    pub(crate) fn local_denial(retry_ms: u64, local_cache: bool) -> Outcome {
        Outcome {
            admitted: false,
            remaining: 0,
            retry_after_ms: Some(retry_ms),
            reset_after_ms: retry_ms,
            local_cache,
            source: None,
        }
    }
}

impl Service {
    /// `config` is `None` when none loaded at start: every request is refused until one does.
    pub fn new(
        limiter: Limiter,
        settings: Arc<Settings>,
        clock: Arc<dyn Clock>,
        config: Option<Config>,
    ) -> Service {
        Service {
            has_config: AtomicBool::new(config.is_some()),
            config: RwLock::new(Arc::new(config.unwrap_or_default())),
            denials: Denials::new(settings.local_cache_size_in_bytes),
            limiter,
            per_second: None,
            settings,
            metrics: Arc::new(Metrics::default()),
            clock,
            local_slots: LocalSlots::default(),
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
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

    pub fn has_config(&self) -> bool {
        self.has_config.load(Ordering::Relaxed)
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
        self.has_config.store(true, Ordering::Relaxed);
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
        if !self.has_config() {
            self.metrics
                .service("call_should_rate_limit_service_error", 1);
            return Err(Refusal::NoConfig);
        }
        let config = self.config();
        if !config.domains.contains_key(&req.domain) {
            self.metrics.domain_not_found(&req.domain);
        }
        // Settles are charged apart, after the decisions (never denied: `settle.rs`).
        let (items, unlimited) = self.items(&config, req);
        let (mut settles, mut items): (Vec<Item>, Vec<Item>) =
            items.into_iter().partition(|i| i.settle);
        // RL.ALL (and RL.SETTLE) take at most 32 keys, and the peer's mode sends one call per
        // descriptor at once: a request with more is refused before anything is charged, never
        // split (a later call's denial would leave the earlier calls' charges) nor failed open.
        let most = self.settings.max_descriptors;
        if items.len() > most || settles.len() > most {
            self.metrics
                .service("call_should_rate_limit_service_error", 1);
            return Err(Refusal::BadRequest(format!(
                "{} limited descriptors in one request: at most {most} are decided at once \
                 (RLS_MAX_DESCRIPTORS)",
                items.len().max(settles.len())
            )));
        }
        let now = self.clock.now_ns();
        // A slot taken by a request another rule denies would be held until the stream-done
        // report: a request with a concurrency rule is always decided all or nothing.
        let atomic = self.settings.stop_increment_when_overlimit
            || items.iter().any(|i| i.rule.concurrency.is_some());

        // Answered here: a limit of 0 (the module refuses L 0; a check of it is not a denial),
        // a charge above the capacity, a key cached as denied.
        for item in items.iter_mut() {
            if item.rule.concurrency.is_some() {
                self.refuse_without_holder(item);
                continue;
            }
            let Some(policy) = item.rule.policy().copied() else {
                continue;
            };
            if policy.limit == 0 || item.hits > policy.capacity() {
                let rest = rest_of_window_ms(item.rule.unit);
                item.outcome = Some(Outcome::local_denial(rest, false));
            } else if item.hits > 0 {
                if let Some(retry) = self.denials.denied(&item.key, item.hits, now) {
                    item.outcome = Some(Outcome::local_denial(retry, true));
                }
            }
        }
        let pending: Vec<usize> = (0..items.len())
            .filter(|i| items[*i].outcome.is_none())
            .collect();
        if !atomic {
            // The peer's default: every descriptor decided (and charged) on its own.
            self.decide_each(&mut items, &pending).await?;
        } else if !items
            .iter()
            .any(|i| !i.soft && i.hits > 0 && i.outcome.is_some_and(|o| !o.admitted))
        {
            self.decide(&mut items, &pending).await?;
            // Denied only by shadow or quota rules: charge the others.
            let denied: Vec<usize> = pending
                .iter()
                .copied()
                .filter(|i| items[*i].hits > 0 && items[*i].outcome.is_some_and(|o| !o.admitted))
                .collect();
            if !denied.is_empty() && denied.iter().all(|i| items[*i].soft) {
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
        } else if !pending.is_empty() {
            // Denied here already: the others are only looked at (a cost of 0), so that their
            // statuses tell what is left, as the peer's do.
            let saved: Vec<u64> = pending
                .iter()
                .map(|i| std::mem::take(&mut items[*i].hits))
                .collect();
            let peeked = self.decide(&mut items, &pending).await;
            for (i, hits) in pending.iter().zip(saved) {
                items[*i].hits = hits;
            }
            peeked?;
        }
        self.remember_denials(&items, now);
        self.settle(&mut settles).await;
        self.release(&mut settles).await;
        items.append(&mut settles);
        Ok(self.respond(req, &items, &unlimited))
    }

    /// The limited descriptors: each matched to its rule (the descriptor's own `limit` override
    /// first), rules named in another matched rule's `replaces` dropped, unlimited ones left out.
    /// A descriptor is a settle when it carries the `rls_settle` entry (left out of matching and
    /// of the key), gives back (`is_negative_hits`), or charges a `settle: true` rule.
    /// Also the indexes of the descriptors whose rule is `unlimited` (answered with the largest
    /// remaining, as the peer answers).
    fn items(&self, config: &Config, req: &RateLimitRequest) -> (Vec<Item>, Vec<usize>) {
        let mut matched: Vec<Item> = Vec::new();
        for (index, d) in req.descriptors.iter().enumerate() {
            let marked = d.entries.iter().any(|e| e.key == SETTLE_KEY);
            let holder = d.entries.iter().find(|e| e.key == HOLDER_KEY);
            let entries: Vec<(&str, &str)> = d
                .entries
                .iter()
                .filter(|e| e.key != SETTLE_KEY && e.key != HOLDER_KEY)
                .map(|e| (e.key.as_str(), e.value.as_str()))
                .collect();
            if entries.is_empty() {
                continue;
            }
            let own_key = descriptor_key(&req.domain, &entries);
            let found = match &d.limit {
                Some(o) => Unit::from_proto(o.unit).map(|unit| Matched {
                    rule: Arc::new(Rule::from_override(
                        own_key.clone(),
                        o.requests_per_unit,
                        unit,
                    )),
                    stats_key: own_key.clone(),
                    shared: Vec::new(),
                }),
                None => config.rule_for(&req.domain, &entries),
            };
            let Some(Matched {
                rule,
                stats_key,
                shared,
            }) = found
            else {
                continue;
            };
            let hits = hits(req, d);
            let settle = marked || d.is_negative_hits || (rule.settle && hits > 0);
            let size = i64::try_from(hits).unwrap_or(i64::MAX);
            let by = if d.is_negative_hits { -size } else { size };
            let kind = match (rule.policy(), rule.concurrency) {
                (Some(p), _) => Some(p.algorithm.name()),
                (None, Some(_)) => Some("CONCURRENCY"),
                (None, None) => None,
            };
            let key = kind.map_or(String::new(), |kind| {
                self.store_key(&req.domain, &entries, &shared, kind)
            });
            matched.push(Item {
                indexes: vec![index],
                key,
                stats_key,
                hits,
                shadow: rule.shadow_mode,
                quota: rule.quota_mode || self.settings.quota_mode,
                soft: rule.shadow_mode
                    || rule.quota_mode
                    || self.settings.shadow_mode
                    || self.settings.quota_mode,
                settle,
                by,
                holder: holder.map(|e| e.value.clone()),
                rule,
                outcome: None,
            });
        }
        let replaced: HashSet<String> = matched
            .iter()
            .flat_map(|i| i.rule.replaces.iter().cloned())
            .collect();
        let mut items: Vec<Item> = Vec::new();
        let mut unlimited = Vec::new();
        for item in matched {
            let rule = &item.rule;
            if rule.unlimited {
                unlimited.extend(item.indexes);
                continue;
            }
            if !rule.name.is_empty() && replaced.contains(&rule.name) {
                continue;
            }
            if !rule.is_limited() {
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
        (items, unlimited)
    }

    /// `<prefix>rls:{<domain>}:<key>_<value>.<key>_<value>:<ALGORITHM>` (`CONCURRENCY` for a
    /// concurrency rule): the domain is the hash
    /// tag, so every descriptor of a request is on one Cluster slot (one `RL.ALL`); the
    /// algorithm is in the key so that changing a rule's algorithm starts a new key instead of
    /// meeting the old one's type. A `share_threshold` entry's value is its pattern: every
    /// value the pattern matches shares the one counter.
    fn store_key(
        &self,
        domain: &str,
        entries: &[(&str, &str)],
        shared: &[Option<String>],
        kind: &str,
    ) -> String {
        let mut key = format!("{}rls:{{{domain}}}:", self.settings.cache_key_prefix);
        for (i, (k, v)) in entries.iter().enumerate() {
            if i > 0 {
                key.push('.');
            }
            let v = shared.get(i).and_then(Option::as_deref).unwrap_or(v);
            key.push_str(k);
            if !v.is_empty() {
                key.push('_');
                key.push_str(v);
            }
        }
        key.push(':');
        key.push_str(kind);
        key
    }

    /// The limiter deciding `rule`: the per-second store's for a rule whose unit is a second
    /// when that store is set (the peer's split), else the main store's.
    fn limiter_of(&self, rule: &Rule) -> &Limiter {
        match &self.per_second {
            Some(l) if rule.unit == Unit::Second && rule.concurrency.is_none() => l,
            _ => &self.limiter,
        }
    }

    /// The store decisions over `which` items: per-second rules and the others apart when a
    /// per-second store is set (each store's part is one call).
    pub(crate) async fn decide(&self, items: &mut [Item], which: &[usize]) -> Result<(), Refusal> {
        if self.per_second.is_none() {
            return self.decide_on(&self.limiter, items, which).await;
        }
        let (second, other): (Vec<usize>, Vec<usize>) = which.iter().partition(|i| {
            items
                .get(**i)
                .is_some_and(|it| it.rule.unit == Unit::Second && it.rule.concurrency.is_none())
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
        if which.iter().any(|i| items[*i].rule.concurrency.is_some()) {
            return self.decide_with_slots(limiter, items, which).await;
        }
        let result = match which {
            [] => return Ok(()),
            [one] => {
                let Some((limit, key, hits)) = items[*one].check() else {
                    return Ok(());
                };
                limiter.check_cost(limit, key, hits).await.map(|d| vec![d])
            }
            many => {
                let checks: Vec<_> = many.iter().filter_map(|i| items[*i].check()).collect();
                limiter.check_all(&checks).await.map(|a| a.limiters)
            }
        };
        self.metrics.service("store_calls", 1);
        let decisions = result.map_err(|e| self.store_error(e))?;
        for (i, d) in which.iter().zip(decisions.iter()) {
            items[*i].outcome = Some(Outcome::of(d));
        }
        Ok(())
    }

    /// Each of `which` decided on its own, as the peer decides them (STOP_CACHE_KEY_INCREMENT_
    /// WHEN_OVERLIMIT unset): one admitted is charged whatever the others answer. The calls go
    /// out together on the one connection; a store error refuses the request, as one `RL.ALL`'s.
    async fn decide_each(&self, items: &mut [Item], which: &[usize]) -> Result<(), Refusal> {
        if which.len() < 2 {
            return self.decide(items, which).await;
        }
        let calls = which.iter().filter_map(|i| {
            let item = &items[*i];
            let (limit, key, hits) = item.check()?;
            Some(async move {
                let limiter = self.limiter_of(&item.rule);
                (*i, limiter.check_cost(limit, key, hits).await)
            })
        });
        let results = futures_util::future::join_all(calls).await;
        self.metrics.service("store_calls", results.len() as u64);
        let mut failed = None;
        for (i, result) in results {
            match result {
                Ok(d) => items[i].outcome = Some(Outcome::of(&d)),
                Err(e) => failed = Some(e),
            }
        }
        match failed {
            None => Ok(()),
            Some(e) => Err(self.store_error(e)),
        }
    }

    pub(crate) fn store_error(&self, e: Error) -> Refusal {
        self.metrics
            .service("call_should_rate_limit_redis_error", 1);
        log::error!("store error: {e}");
        Refusal::Store(e)
    }

    /// Keys the store denied are answered here until the store's retry time, for the charges
    /// that answer holds for: in a fixed window, every charge above what it has left (denied
    /// until the window ends); in the others, this charge and larger ones (a larger one needs at
    /// least as long). Only the store's own denials: never one decided here (a charge above the
    /// capacity says nothing about smaller ones) nor a fallback's.
    fn remember_denials(&self, items: &[Item], now: u64) {
        for item in items {
            let Some(o) = item.outcome else { continue };
            let Some(policy) = item.rule.policy() else {
                continue;
            };
            if o.admitted || item.hits == 0 || o.source != Some(Source::Store) {
                continue;
            }
            let min_hits = if policy.algorithm == Algorithm::FixedWindow {
                o.remaining.saturating_add(1)
            } else {
                item.hits
            };
            if let Some(retry) = o.retry_after_ms.filter(|r| *r > 0) {
                self.denials.deny(&item.key, min_hits, now, retry);
            }
        }
    }
}

/// The rest of the unit's epoch-aligned window on this server's clock, as the peer computes
/// every reset: what a limit answered here (0, or a charge above it) reports.
fn rest_of_window_ms(unit: Unit) -> u64 {
    let window = unit.seconds() * 1000;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    window - now % window
}

/// The charge of one descriptor: its own `hits_addend` when set (0 checks without charging),
/// else the request's, where 0 means 1 (as the peer reads both).
fn hits(req: &RateLimitRequest, d: &RateLimitDescriptor) -> u64 {
    match &d.hits_addend {
        Some(v) => v.value,
        None => u64::from(req.hits_addend.max(1)),
    }
}
