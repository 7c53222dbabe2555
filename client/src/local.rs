//! The local bucket a class falls back on: a GCRA over the client's clock. `interval` is the
//! emission interval (ns per token), `capacity` how many may pass at once after idle, `tat` the
//! theoretical arrival time: the instant the bucket is full again.

use crate::command::{Decision, Policy, Source};

#[derive(Clone, Debug)]
pub(crate) struct LocalBucket {
    interval: u128,
    capacity: u64,
    tat: u128,
}

impl LocalBucket {
    /// The policy's rate and capacity divided by `share` (at least 1 token of capacity and a
    /// rate of at least one token per W·share).
    pub(crate) fn share_of(policy: &Policy, share: u64) -> LocalBucket {
        let share = share.max(1);
        let limit = (policy.limit / share).max(1);
        LocalBucket {
            interval: u128::from(policy.window_ms.max(1)) * 1_000_000 / u128::from(limit),
            capacity: (policy.capacity() / share).max(1),
            tat: 0,
        }
        .nonzero()
    }

    /// An explicit local limit: `limit` per `window_ms`, capacity `limit`.
    pub(crate) fn explicit(limit: u64, window_ms: u64) -> LocalBucket {
        let limit = limit.max(1);
        LocalBucket {
            interval: u128::from(window_ms.max(1)) * 1_000_000 / u128::from(limit),
            capacity: limit,
            tat: 0,
        }
        .nonzero()
    }

    /// The same bucket with `remaining` tokens at `at_ns` (none beyond its capacity), refilling
    /// at its rate from then: a fallback that starts from what the store last said.
    pub(crate) fn starting_at(mut self, remaining: u64, at_ns: u64) -> LocalBucket {
        let missing = self.capacity.saturating_sub(remaining);
        self.tat = u128::from(at_ns).saturating_add(u128::from(missing) * self.interval);
        self
    }

    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    fn nonzero(mut self) -> LocalBucket {
        self.interval = self.interval.max(1);
        self
    }

    /// Spends `cost` if it fits; the decision in the reply's terms.
    pub(crate) fn take(&mut self, now_ns: u64, cost: u64, source: Source) -> Decision {
        let now = u128::from(now_ns);
        let full = u128::from(self.capacity).saturating_mul(self.interval);
        let tat = self.tat.max(now);
        let new_tat = tat.saturating_add(u128::from(cost).saturating_mul(self.interval));
        let ms_up = |ns: u128| u64::try_from(ns.div_ceil(1_000_000)).unwrap_or(u64::MAX);
        let remaining = |tat: u128| {
            u64::try_from((full.saturating_sub(tat - now)) / self.interval).unwrap_or(0)
        };
        if new_tat - now <= full {
            self.tat = new_tat;
            Decision {
                allowed: true,
                granted: 1,
                limit: self.capacity,
                remaining: remaining(new_tat),
                retry_after_ms: None,
                reset_after_ms: ms_up(new_tat - now),
                source,
            }
        } else {
            Decision {
                allowed: false,
                granted: 0,
                limit: self.capacity,
                remaining: remaining(tat),
                retry_after_ms: Some(ms_up(new_tat - now - full)),
                reset_after_ms: ms_up(tat - now),
                source,
            }
        }
    }

    /// True when the bucket is full at `now` (it can be forgotten).
    pub(crate) fn full_at(&self, now_ns: u64) -> bool {
        self.tat <= u128::from(now_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Class;

    #[test]
    fn a_share_admits_its_part_then_refills_at_its_rate() {
        // 100 per second over 4 gateways: 25 at once, then one per 40 ms.
        let mut b = LocalBucket::share_of(&Policy::gcra(100, 1000), 4);
        let src = Source::Fallback(Class::Contract);
        let t0 = 1_000_000_000;
        for i in 0..25 {
            let d = b.take(t0, 1, src);
            assert!(d.allowed, "{i}");
            assert_eq!(d.remaining, 24 - i);
        }
        let d = b.take(t0, 1, src);
        assert!(!d.allowed);
        assert_eq!(d.retry_after_ms, Some(40));
        assert!(!b.take(t0 + 39_999_999, 1, src).allowed);
        assert!(b.take(t0 + 40_000_000, 1, src).allowed);
    }

    #[test]
    fn a_bucket_started_from_a_decision_has_its_remaining_then_refills() {
        // 90 per minute over 3 gateways: 30 here, one per 2 s; the store said 6 left.
        let src = Source::Fallback(Class::Security);
        let t0 = 5_000_000_000;
        let mut b = LocalBucket::share_of(&Policy::gcra(90, 60_000), 3).starting_at(6, t0);
        for _ in 0..6 {
            assert!(b.take(t0, 1, src).allowed);
        }
        assert!(!b.take(t0, 1, src).allowed);
        assert!(b.take(t0 + 2_000_000_000, 1, src).allowed);
        let mut empty = LocalBucket::share_of(&Policy::gcra(90, 60_000), 3).starting_at(0, t0);
        assert_eq!(empty.take(t0, 1, src).retry_after_ms, Some(2000));
    }

    #[test]
    fn explicit_limit_and_tiny_shares_never_divide_by_zero() {
        let src = Source::Fallback(Class::Security);
        let mut b = LocalBucket::explicit(0, 0);
        assert!(b.take(0, 1, src).allowed);
        let mut huge = LocalBucket::explicit(1, u64::MAX);
        assert!(!huge.take(0, u64::MAX, src).allowed);
        let mut b = LocalBucket::share_of(&Policy::gcra(1, 1), 1_000);
        assert!(b.take(5, 1, src).allowed);
        assert!(!b.take(5, 1, src).allowed);
        assert!(b.full_at(5 + 1_000_000_000));
    }
}
