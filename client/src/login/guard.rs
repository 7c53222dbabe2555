//! The login guard: one call before the password check, one after. Each attempt from an unknown
//! device takes a place on every count it could add to (the account's delay queue, its failure
//! cap, its count from this network, the network's count) before its password is checked, so
//! concurrent attempts cannot all pass on one free place; a success gives them back (the
//! account's counts reset: failures in a row, as NIST counts them), a failure keeps them. An
//! attempt refused by one dimension gives back what the others took.

use std::net::IpAddr;

use crate::command::{AllDecision, Class, Decision, Shaped, Source};
use crate::error::Error;
use crate::limiter::Limiter;

use super::decision::{AfterLogin, Dimension, LoginDecision, Outcome, Ticket, Verdict};
use super::device::{Device, Devices};
use super::dimensions::{Dimensions, METER_LIMIT};
use super::settings::{InvalidSetting, LoginSettings};
use super::signal::{Reading, Signal, SignalState, Tier};

/// One login attempt, as the application knows it before checking the password.
#[derive(Clone, Copy, Debug)]
pub struct Attempt<'a> {
    /// The account name as typed (only its keyed hash reaches the store; longer than
    /// `max_account_bytes`: refused).
    pub account: &'a str,
    /// The client's address: from `client_ip::client_ip` behind proxies you trust.
    pub ip: IpAddr,
    /// The device token the guard issued to this browser or app, if it presented one.
    pub device_token: Option<&'a str>,
    /// The client solved the challenge (CAPTCHA) a `Verdict::Challenge` asked for.
    pub challenge_passed: bool,
}

/// Login protection over a [`Limiter`] (cheap to clone: share one per process).
#[derive(Clone)]
pub struct LoginGuard {
    inner: std::sync::Arc<Inner>,
}

struct Inner {
    limiter: Limiter,
    settings: LoginSettings,
    devices: Devices,
    dims: Dimensions,
    signal: Signal,
}

impl LoginGuard {
    /// A guard deciding through `limiter`'s store, deadline, circuit and Security fallback.
    pub fn new(limiter: Limiter, settings: LoginSettings) -> Result<LoginGuard, InvalidSetting> {
        settings.validate()?;
        let devices = Devices::new(&settings.secret).map_err(|_| InvalidSetting {
            name: "secret",
            expected: "a key HMAC-SHA-256 takes",
        })?;
        let dims = Dimensions::new(&settings);
        Ok(LoginGuard {
            inner: std::sync::Arc::new(Inner {
                limiter,
                settings,
                devices,
                dims,
                signal: Signal::default(),
            }),
        })
    }

    /// Whether `token` is a valid, unexpired device token of `account` (for a verifier in front
    /// of the login service, e.g. an Envoy `ext_authz` setting `x-login-device`).
    pub fn device(&self, account: &str, token: Option<&str>) -> Device {
        let now_s = self.inner.settings.clock.now_ns() / 1_000_000_000;
        self.inner.devices.verify(account, token, now_s)
    }

    /// What the global signal last read.
    pub fn signal(&self) -> SignalState {
        self.inner.signal.state()
    }

    /// Before the password check: whether to check it. `Err` only for what no fallback may hide
    /// (the store refused a key or a policy).
    pub async fn before(&self, attempt: &Attempt<'_>) -> Result<LoginDecision, Error> {
        let i = &self.inner;
        if attempt.account.len() > i.settings.max_account_bytes {
            return Ok(observed(LoginDecision {
                verdict: Verdict::Deny,
                dimension: Dimension::Account,
                reason: "the account name is longer than max_account_bytes",
                tier: i.signal.tier(),
                device: Device::Unknown,
                challenge: false,
                retry_after_ms: None,
                source: Source::Store,
                ticket: None,
            }));
        }
        let now = i.settings.clock.now_ns();
        let tag = i.devices.account_tag(attempt.account);
        let device = i
            .devices
            .verify(attempt.account, attempt.device_token, now / 1_000_000_000);
        if device == Device::Trusted {
            return self.trusted(attempt.account, tag).await;
        }
        self.refresh(now).await?;
        let tier = i.signal.tier();
        let mut d = LoginDecision {
            verdict: Verdict::Proceed,
            dimension: Dimension::None,
            reason: "within every limit",
            tier,
            device,
            challenge: false,
            retry_after_ms: None,
            source: Source::Store,
            ticket: None,
        };
        if tier == Tier::Strict && i.settings.challenge_unknown_devices && !attempt.challenge_passed
        {
            d.verdict = Verdict::Challenge;
            d.dimension = Dimension::Global;
            d.challenge = true;
            d.reason =
                "the global failure rate is high: an unknown device solves a challenge first";
            self.count(tier).await?;
            return Ok(observed(d));
        }
        let network = i.settings.prefixes.key(attempt.ip);
        let (account_key, pair_key) = (i.dims.account_key(&tag), i.dims.pair_key(&tag, &network));
        let (delay_key, prefix_key) = (i.dims.delay_key(&tag), i.dims.prefix_key(&network));
        let prefix_limit = i.dims.prefix_limit(tier);
        let checks = [
            (&i.dims.account, account_key.as_str(), 1),
            (&i.dims.pair, pair_key.as_str(), 1),
        ];
        let (shaped, group, net) = tokio::join!(
            self.shape(&delay_key, tier, 1),
            i.limiter.check_all(&checks),
            i.limiter.check(prefix_limit, &prefix_key),
        );
        let (shaped, group, net) = (shaped?, group?, net?);
        d.source = source(&group, &net);
        refused_by(&mut d, shaped.as_ref(), &group, &net);
        if d.verdict == Verdict::Proceed {
            let cap = group.limiters.first();
            d.ticket = Some(Ticket {
                account: attempt.account.to_string(),
                tag,
                prefix: Some(network),
                tier,
                failures: cap.map_or(0, |c| c.limit.saturating_sub(c.remaining)),
            });
            return Ok(observed(d));
        }
        // Refused: give back what the other dimensions took.
        let shaped_took = shaped.is_some_and(|s| s.decision.allowed);
        let group_took = group.combined.allowed && group.combined.source == Source::Store;
        let net_took = net.allowed && net.source == Source::Store;
        tokio::try_join!(
            self.refund(shaped_took, &delay_key, 1),
            self.refund(group_took, &account_key, 1),
            self.refund(group_took, &pair_key, 1),
            self.refund(net_took, &prefix_key, 1),
            self.count(tier),
        )?;
        Ok(observed(d))
    }

    /// A trusted device: its account's own budget, nothing else.
    async fn trusted(&self, account: &str, tag: String) -> Result<LoginDecision, Error> {
        let i = &self.inner;
        let d = i
            .limiter
            .check(&i.dims.trusted, &i.dims.trusted_key(&tag))
            .await?;
        let proceed = d.allowed;
        Ok(observed(LoginDecision {
            verdict: if proceed {
                Verdict::Proceed
            } else {
                Verdict::Deny
            },
            dimension: Dimension::TrustedDevice,
            reason: if proceed {
                "a trusted device of the account: its own budget"
            } else {
                "the failure budget of the account's trusted devices is spent"
            },
            tier: i.signal.tier(),
            device: Device::Trusted,
            challenge: false,
            retry_after_ms: d.retry_after_ms.filter(|_| !proceed),
            source: d.source,
            ticket: proceed.then(|| Ticket {
                account: account.to_string(),
                tag,
                prefix: None,
                tier: i.signal.tier(),
                failures: 0,
            }),
        }))
    }

    /// After the password check of an attempt that proceeded.
    pub async fn after(&self, ticket: Ticket, outcome: Outcome) -> Result<AfterLogin, Error> {
        let i = &self.inner;
        let s = &i.settings;
        let tag = &ticket.tag;
        let mut after = AfterLogin {
            outcome,
            device_token: None,
            retry_after_ms: None,
            tier: i.signal.tier(),
        };
        match (outcome, &ticket.prefix) {
            (Outcome::Success, None) => {
                self.refund(true, &i.dims.trusted_key(tag), s.trusted_failures)
                    .await?;
            }
            (Outcome::Success, Some(network)) => {
                let queue = i.dims.delay_of(ticket.tier);
                let (account, pair) = (i.dims.account_key(tag), i.dims.pair_key(tag, network));
                let (delay, net) = (i.dims.delay_key(tag), i.dims.prefix_key(network));
                tokio::try_join!(
                    self.refund(true, &account, s.max_failures),
                    self.refund(true, &pair, s.pair_failures),
                    self.refund(true, &delay, queue.places()),
                    self.refund(true, &net, 1),
                )?;
            }
            (Outcome::Failure, None) => self.count(i.signal.tier()).await?,
            (Outcome::Failure, Some(_)) => {
                let delay_key = i.dims.delay_key(tag);
                let extra = i.dims.delay_of(ticket.tier).extra(ticket.failures);
                let next = async {
                    self.charge(&delay_key, extra).await?;
                    self.shape(&delay_key, ticket.tier, 0).await
                };
                let (next, ()) = tokio::try_join!(next, self.count(ticket.tier))?;
                after.retry_after_ms = next.and_then(wait);
            }
        }
        if outcome == Outcome::Success {
            let now = s.clock.now_ns();
            let expires = (now / 1_000_000_000).saturating_add(s.device_lifetime.as_secs());
            after.device_token = Some(i.devices.issue(&ticket.account, now, expires));
        }
        Ok(after)
    }

    /// `RL.SHAPE` on the account's delay queue (`cost` 0 peeks); `None` when the store did not
    /// answer (the fallback's caps still hold) or the circuit is open.
    async fn shape(&self, key: &str, tier: Tier, cost: u64) -> Result<Option<Shaped>, Error> {
        let i = &self.inner;
        if i.limiter.circuit_open() {
            return Ok(None);
        }
        let shape = &i.dims.delay_of(tier).shape;
        match i.limiter.store().shape(key, shape, cost).await {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.store_down() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `RL.REFUND key n` when `took`; a store that does not answer keeps the count (strict).
    async fn refund(&self, took: bool, key: &str, n: u64) -> Result<(), Error> {
        let i = &self.inner;
        if !took || i.limiter.circuit_open() {
            return Ok(());
        }
        match i.limiter.store().refund(key, n).await {
            Ok(_) => Ok(()),
            Err(e) if e.store_down() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `RL.CHARGE key n` on the delay queue: the extra places of a failure in a row (a key gone
    /// meanwhile, or a store that does not answer, charges nothing).
    async fn charge(&self, key: &str, n: u64) -> Result<(), Error> {
        let i = &self.inner;
        if n == 0 || i.limiter.circuit_open() {
            return Ok(());
        }
        match i.limiter.store().charge(key, n, None).await {
            Ok(_) => Ok(()),
            Err(e) if e.store_down() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Counts a failure or a refused attempt on the signal (the baseline only in the normal
    /// tier) and reads the signal from the answers.
    async fn count(&self, tier: Tier) -> Result<(), Error> {
        self.read(1, tier == Tier::Normal).await
    }

    /// Reads the signal when this gateway's last reading is older than `signal_refresh`.
    async fn refresh(&self, now: u64) -> Result<(), Error> {
        let refresh =
            u64::try_from(self.inner.settings.signal_refresh.as_nanos()).unwrap_or(u64::MAX);
        if self.inner.signal.claim(now, refresh) {
            self.read(0, false).await?;
        }
        Ok(())
    }

    /// Adds `cost` to the recent count (and to the baseline when `baseline`), reads both.
    async fn read(&self, cost: u64, baseline: bool) -> Result<(), Error> {
        let i = &self.inner;
        if i.limiter.circuit_open() {
            return Ok(());
        }
        let (recent_key, baseline_key) = i.dims.signal_keys();
        let store = i.limiter.store();
        let base_cost = if baseline { cost } else { 0 };
        let (recent, base) = tokio::join!(
            store.decide(&recent_key, &i.dims.recent, cost),
            store.decide(&baseline_key, &i.dims.baseline, base_cost),
        );
        let (recent, base) = match (recent, base) {
            (Ok(r), Ok(b)) => (r, b),
            (Err(e), _) | (_, Err(e)) if e.store_down() => return Ok(()),
            (Err(e), _) | (_, Err(e)) => return Err(e),
        };
        let reading = Reading {
            recent: METER_LIMIT.saturating_sub(recent.remaining),
            baseline: METER_LIMIT.saturating_sub(base.remaining),
        };
        i.signal
            .observe(&i.settings, reading, i.settings.clock.now_ns());
        Ok(())
    }
}

/// The wait a shaper's answer asks for: its delay, or the retry time when the queue is full.
fn wait(s: Shaped) -> Option<u64> {
    if !s.decision.allowed {
        return s.decision.retry_after_ms;
    }
    (s.delay_ms > 0).then_some(s.delay_ms)
}

/// Fallback when any limit decided without the store.
fn source(group: &AllDecision, net: &Decision) -> Source {
    let fell_back = |s: Source| matches!(s, Source::Fallback(_));
    if fell_back(net.source) || group.limiters.iter().any(|d| fell_back(d.source)) {
        Source::Fallback(Class::Security)
    } else {
        group.combined.source
    }
}

/// Which dimension refuses the attempt, if any: a hard limit (429) before the delay (401).
fn refused_by(d: &mut LoginDecision, shaped: Option<&Shaped>, group: &AllDecision, net: &Decision) {
    let denied = |x: &Decision| (!x.allowed).then_some(x.retry_after_ms);
    let account = group.limiters.first().and_then(denied);
    let pair = group.limiters.get(1).and_then(denied);
    let (dimension, reason, retry) = if let Some(retry) = account {
        let why = "the account's cap of failures in a row is reached";
        (Dimension::Account, why, retry)
    } else if let Some(retry) = pair {
        let why = "too many failures on this account from this network";
        (Dimension::Pair, why, retry)
    } else if let Some(retry) = denied(net) {
        (
            Dimension::Prefix,
            "too many failures from this network",
            retry,
        )
    } else if let Some(ms) = shaped.copied().and_then(wait) {
        d.verdict = Verdict::Delay;
        d.dimension = Dimension::Account;
        d.reason = "failures in a row on this account: each adds to the wait";
        d.retry_after_ms = Some(ms);
        return;
    } else {
        return;
    };
    d.verdict = Verdict::Deny;
    d.dimension = dimension;
    d.reason = reason;
    d.retry_after_ms = Some(retry.unwrap_or(1));
}

/// Counts the decision in the metrics and hands it back.
fn observed(d: LoginDecision) -> LoginDecision {
    metrics::counter!(
        "ratelimit_client_login_decisions_total",
        "verdict" => d.verdict.name(),
        "dimension" => d.dimension.name(),
        "tier" => d.tier.name()
    )
    .increment(1);
    d
}
