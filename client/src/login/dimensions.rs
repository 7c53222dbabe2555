//! Where each dimension lives in the store: its key and its policy. An account's keys share the
//! hash tag of its tag (so its cap and its (account, network) count are one `RL.ALL` on a
//! Cluster too); a network's key and the signal's counters have their own.
//!
//! Failures are counted on token buckets (`RL.REFUND` resets them on a success), the growing
//! delay is a leaky-bucket queue (`RL.SHAPE`: each failure takes a place, the places drain at one
//! per step, and a place beyond the free ones waits its turn), the signal on sliding counters.

use crate::command::{Class, Policy, Shape, ShapeDelay};
use crate::limit::Limit;

use super::settings::{ms, steps, LoginSettings, MAX_STORE_VALUE};
use super::signal::Tier;

/// The sliding counters' L: never reached, so each counts everything (the count is L − remaining).
pub(super) const METER_LIMIT: u64 = MAX_STORE_VALUE;

/// The limits of each dimension, as the client's `Limiter` decides them (Security class: while
/// the store does not answer, each gateway's own strict local limit).
pub(super) struct Dimensions {
    pub(super) account: Limit,
    pub(super) pair: Limit,
    pub(super) prefix: Limit,
    pub(super) strict_prefix: Limit,
    pub(super) trusted: Limit,
    pub(super) shape: Shape,
    pub(super) strict_shape: Shape,
    pub(super) recent: Policy,
    pub(super) baseline: Policy,
    prefix_key: String,
}

impl Dimensions {
    pub(super) fn new(s: &LoginSettings) -> Dimensions {
        let fallback = ms(s.fallback_window);
        let security = |name: &str, limit: u64, window| {
            Limit::new(
                name,
                Policy::token_bucket(limit, ms(window)),
                Class::Security,
            )
        };
        Dimensions {
            account: security("login-account", s.max_failures, s.failure_window)
                .local_limit(s.fallback_account_attempts, fallback),
            pair: security("login-account-network", s.pair_failures, s.pair_window)
                .local_limit(s.fallback_account_attempts, fallback),
            prefix: security("login-network", s.prefix_failures, s.prefix_window)
                .local_limit(s.fallback_prefix_attempts, fallback),
            strict_prefix: security(
                "login-network-strict",
                s.strict_prefix_failures,
                s.prefix_window,
            )
            .local_limit(s.fallback_prefix_attempts, fallback),
            // A trusted device keeps its own budget through an outage too.
            trusted: security("login-trusted", s.trusted_failures, s.trusted_window)
                .local_limit(s.trusted_failures, ms(s.trusted_window)),
            shape: shape(s.free_failures, s.delay_step, s.max_delay),
            strict_shape: shape(
                s.strict_free_failures,
                s.strict_delay_step,
                s.strict_max_delay,
            ),
            recent: Policy::sliding_counter(METER_LIMIT, ms(s.signal_window)),
            baseline: Policy::sliding_counter(METER_LIMIT, ms(s.baseline_window)),
            prefix_key: s.key_prefix.clone(),
        }
    }

    pub(super) fn prefix_limit(&self, tier: Tier) -> &Limit {
        match tier {
            Tier::Normal => &self.prefix,
            Tier::Strict => &self.strict_prefix,
        }
    }

    pub(super) fn shape_of(&self, tier: Tier) -> &Shape {
        match tier {
            Tier::Normal => &self.shape,
            Tier::Strict => &self.strict_shape,
        }
    }

    /// The account's failure cap: `login:{<tag>}:fail`.
    pub(super) fn account_key(&self, tag: &str) -> String {
        format!("{}{{{tag}}}:fail", self.prefix_key)
    }

    /// The account's delay queue: `login:{<tag>}:delay`.
    pub(super) fn delay_key(&self, tag: &str) -> String {
        format!("{}{{{tag}}}:delay", self.prefix_key)
    }

    /// The account's failures from one network: `login:{<tag>}:net:<network>`.
    pub(super) fn pair_key(&self, tag: &str, network: &str) -> String {
        format!("{}{{{tag}}}:net:{network}", self.prefix_key)
    }

    /// The account's trusted devices' budget: `login:{<tag>}:trusted`.
    pub(super) fn trusted_key(&self, tag: &str) -> String {
        format!("{}{{{tag}}}:trusted", self.prefix_key)
    }

    /// A network's failures over all accounts: `login:net:{<network>}`.
    pub(super) fn prefix_key(&self, network: &str) -> String {
        format!("{}net:{{{network}}}", self.prefix_key)
    }

    /// The signal's two counters: `login:{signal}:recent` and `login:{signal}:baseline`.
    pub(super) fn signal_keys(&self) -> (String, String) {
        let p = &self.prefix_key;
        (
            format!("{p}{{signal}}:recent"),
            format!("{p}{{signal}}:baseline"),
        )
    }
}

/// `RL.SHAPE key 1 step QUEUE q DELAY free−1`: the attempt after k failures in a row (each
/// holding a place) goes at once while k < free, else waits (k − free + 1) steps; the queue holds
/// the free places and `max_delay`'s worth of steps.
fn shape(free: u64, step: std::time::Duration, max_delay: std::time::Duration) -> Shape {
    let d = free.saturating_sub(1);
    Shape {
        limit: 1,
        window_ms: ms(step),
        queue: Some(d.saturating_add(steps(max_delay, step))),
        delay: ShapeDelay::Delay(d),
    }
}

/// How many places a reset gives back: the whole queue and the one beyond it.
pub(super) fn places(shape: &Shape) -> u64 {
    shape.queue.unwrap_or(0).saturating_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::login::secret::Secret;

    #[test]
    fn keys_share_the_accounts_slot_and_the_shape_holds_the_delays() {
        let s = LoginSettings::new(Secret::new(vec![3; 32]).unwrap());
        let d = Dimensions::new(&s);
        let slot = |k: &str| crate::limit::key_slot(k.as_bytes());
        let tag = "0123456789abcdef0123456789abcdef";
        let account = d.account_key(tag);
        assert_eq!(account, "login:{0123456789abcdef0123456789abcdef}:fail");
        for k in [
            d.delay_key(tag),
            d.pair_key(tag, "2001:db8::/64"),
            d.trusted_key(tag),
        ] {
            assert_eq!(slot(&k), slot(&account), "{k}");
        }
        assert_eq!(d.prefix_key("203.0.113.0/24"), "login:net:{203.0.113.0/24}");
        // 5 free, then 1 s more per failure up to 60 s: DELAY 4, QUEUE 64.
        assert_eq!(d.shape.delay, ShapeDelay::Delay(4));
        assert_eq!((d.shape.queue, d.shape.window_ms), (Some(64), 1000));
        assert_eq!(places(&d.shape), 65);
        assert_eq!(d.strict_shape.queue, Some(1 + 60));
    }
}
