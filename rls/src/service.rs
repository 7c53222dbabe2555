//! `ShouldRateLimit` as one pipeline of steps: the descriptors matched to rules, as items
//! (`matching.rs`); the checks decided (`check.rs`: the denial cache, the store through the
//! client's limiter, concurrency slots); the settles charged or given back (`settle.rs`:
//! stream-done reports, `rls_settle`, negative hits); the response written (`answer.rs`).
//! Every step works with the same borrowed [`Steps`]; this file only runs them in order.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use ratelimit_client::{Clock, Limiter};

use crate::config::Config;
use crate::denials::Denials;
use crate::item::Item;
use crate::local_slots::LocalSlots;
use crate::matching::{self, Descriptors};
use crate::metrics::Metrics;
use crate::settings::Settings;
use crate::steps::Steps;

pub use crate::steps::Refusal;

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

    /// The one path every request takes: refused when it cannot be decided; else matched,
    /// its checks decided, its settles charged, answered.
    pub async fn should_rate_limit(
        &self,
        req: &RateLimitRequest,
    ) -> Result<RateLimitResponse, Refusal> {
        let config = self.decidable(req)?;
        let Descriptors {
            items,
            unlimited,
            in_quota,
        } = matching::descriptors(&config, &self.settings, req);
        let (mut settles, mut checks): (Vec<Item>, Vec<Item>) =
            items.into_iter().partition(Item::is_settle);
        self.refuse_too_many(&checks, &settles)?;
        let steps = self.steps();
        steps.check(&mut checks).await?;
        // Settles after the decisions, never denied (`settle.rs`).
        steps.settle(&mut settles).await;
        checks.append(&mut settles);
        Ok(steps.answer(req, &checks, &unlimited, &in_quota))
    }

    /// The config to decide `req` on, unless the request or the service cannot be decided: an
    /// empty domain, no descriptors, no config loaded yet.
    fn decidable(&self, req: &RateLimitRequest) -> Result<Arc<Config>, Refusal> {
        let refusal = if req.domain.is_empty() {
            Some(Refusal::BadRequest(
                "rate limit domain must not be empty".into(),
            ))
        } else if req.descriptors.is_empty() {
            Some(Refusal::BadRequest(
                "rate limit descriptor list must not be empty".into(),
            ))
        } else if !self.has_config() {
            Some(Refusal::NoConfig)
        } else {
            None
        };
        if let Some(refusal) = refusal {
            self.metrics
                .service("call_should_rate_limit_service_error", 1);
            return Err(refusal);
        }
        let config = self.config();
        if !config.domains.contains_key(&req.domain) {
            self.metrics.domain_not_found(&req.domain);
        }
        Ok(config)
    }

    /// RL.ALL (and RL.SETTLE) take at most 32 keys, and the peer's mode sends one call per
    /// descriptor at once: a request with more is refused before anything is charged, never
    /// split (a later call's denial would leave the earlier calls' charges) nor failed open.
    fn refuse_too_many(&self, checks: &[Item], settles: &[Item]) -> Result<(), Refusal> {
        let most = self.settings.max_descriptors;
        let limited = checks.len().max(settles.len());
        if limited <= most {
            return Ok(());
        }
        self.metrics
            .service("call_should_rate_limit_service_error", 1);
        Err(Refusal::BadRequest(format!(
            "{limited} limited descriptors in one request: at most {most} are decided at once \
             (RLS_MAX_DESCRIPTORS)"
        )))
    }

    /// What the steps of one request work with.
    fn steps(&self) -> Steps<'_> {
        Steps {
            limiter: &self.limiter,
            per_second: self.per_second.as_ref(),
            settings: &self.settings,
            metrics: &self.metrics,
            denials: &self.denials,
            clock: self.clock.as_ref(),
            local_slots: &self.local_slots,
        }
    }
}
