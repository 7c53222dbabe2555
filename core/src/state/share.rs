//! A region's share of a global limit, held with the key's limiter (see docs/regions.md).
//!
//! A key limited across regions is called, in each region, with that region's *safe* policy
//! (the share it may use when nobody tells it otherwise, L/N by default). The budget controller
//! stores a share with the key (`RL.SHARE`): until the share's expiry the key is decided under
//! the caller's policy scaled to the share ([`scaled`]: L becomes the share, W stays, B keeps its
//! ratio to L, rounded down); from the expiry on, under the caller's policy again. The state
//! carries over each time (`Algorithm::rescale`: what was spent stays spent), and the key never
//! remembers the scaled policies as other configurations: a share is one configuration moving.
//!
//! `asked` and `admitted` count what the key was asked and admitted since `RL.DEMAND` last read
//! them: kept in memory only, never encoded, never replicated (a replica's or a reloaded key's
//! counters start at 0), so they are left out of equality too.

use crate::algo::policy::Policy;

/// The share a controller stored: L under it, until `expire_at_ms` (the module's clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    pub limit: u64,
    pub expire_at_ms: u64,
}

/// A key that holds a share: the share, the limiter's state `S` (the stored `AlgoState`, never
/// itself `Shared` or `Remembered`), and the demand counters.
#[derive(Clone, Debug)]
pub struct Shared<S> {
    pub share: Share,
    pub current: S,
    pub asked: u64,
    pub admitted: u64,
}

impl<S: PartialEq> PartialEq for Shared<S> {
    fn eq(&self, other: &Shared<S>) -> bool {
        self.share == other.share && self.current == other.current
    }
}

impl<S: Eq> Eq for Shared<S> {}

impl<S> Shared<S> {
    /// Counts a request: `asked` (its cost, or a lease's WANT) and what was `admitted`. Memory
    /// only: the counters are neither stored nor propagated (`RL.DEMAND` reads them).
    pub fn count(&mut self, asked: u64, admitted: u64) {
        self.asked = self.asked.saturating_add(asked);
        self.admitted = self.admitted.saturating_add(admitted);
    }
}

impl Share {
    /// Whether the share is in force at `now_ns` (else the caller's policy is).
    pub fn active(&self, now_ns: u64) -> bool {
        u128::from(now_ns) < u128::from(self.expire_at_ms) * 1_000_000
    }

    /// How long the key must still live for the share: until its expiry.
    pub fn keep_ns(&self, now_ns: u64) -> u64 {
        self.expire_at_ms
            .saturating_mul(1_000_000)
            .saturating_sub(now_ns)
    }

    /// The policy a request under `called` is decided under at `now_ns`.
    pub fn policy_for(&self, called: &Policy, now_ns: u64) -> Policy {
        if self.active(now_ns) {
            scaled(called, self.limit)
        } else {
            *called
        }
    }
}

/// `called` with L = `limit`: W unchanged, B scaled by limit / L and rounded down (never below
/// 1), so that the share never admits more at once than its part of the burst. A share the
/// bounds refuse (L above the maximum) leaves the policy as called.
pub fn scaled(called: &Policy, limit: u64) -> Policy {
    if limit == called.limit() {
        return *called;
    }
    let capacity = u128::from(called.capacity()) * u128::from(limit) / u128::from(called.limit());
    let capacity = u64::try_from(capacity).unwrap_or(u64::MAX).max(1);
    Policy::new(limit, called.window_ms(), capacity).unwrap_or(*called)
}

/// The largest stored expiry: the effect envelope's bound (`RL.SETSTATE`'s PXAT).
pub const MAX_EXPIRE_AT_MS: u64 = 1_000_000_000_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_keeps_w_and_the_burst_ratio() {
        let safe = Policy::new(100, 1000, 200).unwrap();
        let p = scaled(&safe, 250);
        assert_eq!((p.limit(), p.window_ms(), p.capacity()), (250, 1000, 500));
        let p = scaled(&safe, 1);
        assert_eq!((p.limit(), p.capacity()), (1, 2));
        let p = scaled(&Policy::new(3, 1000, 1).unwrap(), 1);
        assert_eq!((p.limit(), p.capacity()), (1, 1));
        assert_eq!(scaled(&safe, 100), safe);
        assert_eq!(scaled(&safe, u64::MAX), safe);
    }

    #[test]
    fn the_share_holds_until_its_expiry() {
        let safe = Policy::new(100, 1000, 100).unwrap();
        let share = Share {
            limit: 40,
            expire_at_ms: 5000,
        };
        assert_eq!(share.policy_for(&safe, 5_000_000_000 - 1).limit(), 40);
        assert_eq!(share.policy_for(&safe, 5_000_000_000), safe);
        assert_eq!(share.keep_ns(4_000_000_000), 1_000_000_000);
        assert_eq!(share.keep_ns(6_000_000_000), 0);
    }
}
