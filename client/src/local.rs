//! The local bucket a class falls back on: the core's GCRA (`ratelimit_core::algo::gcra`, the
//! module's own) over the client's clock, under a policy scaled to this gateway's share. The
//! client states no algorithm of its own.

use ratelimit_core::algo::gcra::{self, Gcra};
use ratelimit_core::algo::{self as core, ms_ceil};

use crate::command::{Decision, Policy, Source};

#[derive(Clone, Debug)]
pub(crate) struct LocalBucket {
    policy: core::Policy,
    /// None: full (a fresh bucket).
    state: Option<Gcra>,
}

impl LocalBucket {
    /// The policy's rate and capacity divided by `share` (at least 1 token of capacity and a
    /// rate of at least one token per W·share).
    pub(crate) fn share_of(policy: &Policy, share: u64) -> LocalBucket {
        let share = share.max(1);
        let limit = (policy.limit / share).max(1);
        let capacity = (policy.capacity() / share).max(1);
        LocalBucket::new(limit, policy.window_ms, capacity)
    }

    /// An explicit local limit: `limit` per `window_ms`, capacity `limit`.
    pub(crate) fn explicit(limit: u64, window_ms: u64) -> LocalBucket {
        let limit = limit.max(1);
        LocalBucket::new(limit, window_ms, limit)
    }

    /// L per W ms with capacity B, each brought within the core's bounds (the store would
    /// refuse a policy outside them; the fallback still needs a bucket).
    fn new(limit: u64, window_ms: u64, capacity: u64) -> LocalBucket {
        LocalBucket {
            policy: core::Policy::nearest(limit, window_ms, capacity),
            state: None,
        }
    }

    /// The same bucket with `remaining` tokens at `at_ns` (none beyond its capacity), refilling
    /// at its rate from then: a fallback that starts from what the store last said.
    pub(crate) fn starting_at(mut self, remaining: u64, at_ns: u64) -> LocalBucket {
        let missing = self.capacity().saturating_sub(remaining);
        self.state = gcra::check(None, &self.policy, at_ns, missing).next;
        self
    }

    pub(crate) fn capacity(&self) -> u64 {
        self.policy.capacity()
    }

    /// Spends `cost` if it fits; the decision in the reply's terms. A cost above the capacity
    /// never fits: denied, retrying when the bucket is full and `cost − capacity` more tokens
    /// would have come.
    pub(crate) fn take(&mut self, now_ns: u64, cost: u64, source: Source) -> Decision {
        let policy = &self.policy;
        let over = cost.saturating_sub(policy.capacity());
        let outcome = gcra::check(
            self.state.as_ref(),
            policy,
            now_ns,
            cost.min(policy.capacity()),
        );
        let d = outcome.decision;
        let allowed = d.allowed == 1 && over == 0;
        if allowed {
            self.state = outcome.next;
        }
        let retry_after_ns = if over > 0 {
            let beyond = policy.ns_ceil(u128::from(over).saturating_mul(policy.units_per_token()));
            Some(d.reset_after_ns.saturating_add(beyond))
        } else {
            d.retry_after_ns
        };
        Decision {
            allowed,
            granted: u64::from(allowed),
            limit: d.capacity,
            remaining: d.remaining,
            retry_after_ms: retry_after_ns.filter(|_| !allowed).map(ms_ceil),
            reset_after_ms: ms_ceil(d.reset_after_ns),
            source,
        }
    }

    /// True when the bucket is full at `now` (it can be forgotten).
    pub(crate) fn full_at(&self, now_ns: u64) -> bool {
        self.state.is_none_or(|s| {
            gcra::check(Some(&s), &self.policy, now_ns, 0)
                .decision
                .reset_after_ns
                == 0
        })
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
