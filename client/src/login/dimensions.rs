//! Where each dimension lives in the store: its key and its policy. An account's keys share the
//! hash tag of its tag (so its cap and its (account, network) count are one `RL.ALL` on a
//! Cluster too); a network's key and the signal's counters have their own.
//!
//! Failures are counted on token buckets (`RL.REFUND` resets them on a success), the signal on
//! sliding counters, and the growing delay on a leaky-bucket queue (`RL.SHAPE`): every attempt
//! takes a place, the places drain at one per step, and an attempt with more places ahead of it
//! than the free ones waits its turn. A failure also charges extra places (`RL.CHARGE`), more
//! for each failure in a row, so the wait after it grows: see [`DelayQueue::extra`].

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
    pub(super) delay: DelayQueue,
    pub(super) strict_delay: DelayQueue,
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
            delay: DelayQueue::new(s.free_failures, s.delay_step, s.max_delay),
            strict_delay: DelayQueue::new(
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

    pub(super) fn delay_of(&self, tier: Tier) -> &DelayQueue {
        match tier {
            Tier::Normal => &self.delay,
            Tier::Strict => &self.strict_delay,
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

/// An account's delay queue in one tier: `RL.SHAPE key 1 step QUEUE q DELAY free−1`. A burst of
/// `free` attempts goes at once, the next waits a step; the queue holds the free places and
/// `max_delay`'s worth of steps.
pub(super) struct DelayQueue {
    pub(super) shape: Shape,
    free: u64,
    max_steps: u64,
}

impl DelayQueue {
    fn new(free: u64, step: std::time::Duration, max_delay: std::time::Duration) -> DelayQueue {
        let d = free.saturating_sub(1);
        let max_steps = steps(max_delay, step).max(1);
        DelayQueue {
            shape: Shape {
                limit: 1,
                window_ms: ms(step),
                queue: Some(d.saturating_add(max_steps)),
                delay: ShapeDelay::Delay(d),
            },
            free,
            max_steps,
        }
    }

    /// How many places a reset gives back: the whole queue and the one beyond it.
    pub(super) fn places(&self) -> u64 {
        self.shape.queue.unwrap_or(0).saturating_add(1)
    }

    /// The places the k-th failure in a row charges beyond the one its attempt took: none below
    /// `free`, then 2^(k−free) − 1, so that an attacker who waits out each delay waits about
    /// step × 2^(k−free) after the k-th failure: 1 s, 2 s, 4 s … by default, never more than
    /// `max_delay`.
    pub(super) fn extra(&self, k: u64) -> u64 {
        if k < self.free {
            return 0;
        }
        let doubling = (k - self.free).min(62);
        (1u64 << doubling).min(self.max_steps) - 1
    }
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
        // 5 free, then steps of 1 s up to 60 s: DELAY 4, QUEUE 64.
        assert_eq!(d.delay.shape.delay, ShapeDelay::Delay(4));
        assert_eq!(
            (d.delay.shape.queue, d.delay.shape.window_ms),
            (Some(64), 1000)
        );
        assert_eq!(d.delay.places(), 65);
        assert_eq!(d.strict_delay.shape.queue, Some(1 + 60));
        let extra: Vec<u64> = (3..14).map(|k| d.delay.extra(k)).collect();
        assert_eq!(extra, [0, 0, 0, 1, 3, 7, 15, 31, 59, 59, 59]);
        assert_eq!(d.delay.extra(u64::MAX), 59);
    }
}
