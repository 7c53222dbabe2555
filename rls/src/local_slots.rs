//! The slots a concurrency rule of the contract class takes on this server alone while the store
//! does not answer: per key, at most N ÷ `RLS_GATEWAYS` holders (N when unset), each named by
//! its holder id and living `ttl` on this server's clock, so that the fleet together stays near
//! N and a slot whose stream-done report reaches another replica (or never comes) frees itself.
//! The holders are the module's own algorithm (`ratelimit_core::algo::concurrency`), run here on
//! the RLS's clock. Such a slot never reaches the store.

use std::collections::HashMap;
use std::sync::Mutex;

use ratelimit_client::{Class, Decision, Source};
use ratelimit_core::algo::concurrency::{holder_id, Concurrency, Op};
use ratelimit_core::algo::{ms_ceil, Policy};

/// Keys held at most; when full, keys without a live holder are dropped, and a new key beyond
/// it is denied (a bounded table is worth more than admitting what cannot be counted).
pub const MAX_LOCAL_SLOT_KEYS: usize = 10_000;

#[derive(Default)]
pub struct LocalSlots {
    keys: Mutex<HashMap<String, Concurrency>>,
}

impl LocalSlots {
    /// An ACQUIRE by `holder` (`None`: a PEEK) of one of `share` slots of `key`, each living
    /// `ttl_ms`; `commit` false answers without taking.
    pub fn decide(
        &self,
        key: &str,
        holder: Option<&str>,
        share: u64,
        ttl_ms: u64,
        now_ns: u64,
        commit: bool,
    ) -> Decision {
        let Ok(policy) = Policy::new(share.max(1), ttl_ms, share.max(1)) else {
            return denied(share, ttl_ms);
        };
        let op = holder.map_or(Op::Peek, |h| Op::Acquire(holder_id(h.as_bytes())));
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if !keys.contains_key(key) && keys.len() >= MAX_LOCAL_SLOT_KEYS {
            keys.retain(|_, c| c.live(now_ns) > 0);
            if keys.len() >= MAX_LOCAL_SLOT_KEYS {
                return denied(share, ttl_ms);
            }
        }
        let (d, _) = match (commit, keys.get_mut(key)) {
            (true, Some(held)) => held.apply(&policy, now_ns, op),
            (true, None) => {
                let mut held = Concurrency::default();
                let answer = held.apply(&policy, now_ns, op);
                if held.live(now_ns) > 0 {
                    keys.insert(key.to_string(), held);
                }
                answer
            }
            (false, held) => held.cloned().unwrap_or_default().apply(&policy, now_ns, op),
        };
        Decision {
            allowed: d.allowed > 0,
            granted: d.allowed,
            limit: d.capacity,
            remaining: d.remaining,
            retry_after_ms: d.retry_after_ns.map(ms_ceil),
            reset_after_ms: ms_ceil(d.reset_after_ns),
            source: Source::Fallback(Class::Contract),
        }
    }

    /// Ends `holder`'s local slot of `key`, if it holds one: true when it did.
    pub fn release(&self, key: &str, holder: &str, ttl_ms: u64, now_ns: u64) -> bool {
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        let Some(held) = keys.get_mut(key) else {
            return false;
        };
        let id = holder_id(holder.as_bytes());
        let released = held.holds(id, now_ns);
        if let Ok(policy) = Policy::new(1, ttl_ms, 1) {
            held.apply(&policy, now_ns, Op::Release(id));
        }
        if held.live(now_ns) == 0 {
            keys.remove(key);
        }
        released
    }
}

fn denied(share: u64, ttl_ms: u64) -> Decision {
    Decision {
        allowed: false,
        granted: 0,
        limit: share,
        remaining: 0,
        retry_after_ms: Some(ttl_ms),
        reset_after_ms: ttl_ms,
        source: Source::Fallback(Class::Contract),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_share_of_slots_by_holder_freed_by_release_or_ttl() {
        let slots = LocalSlots::default();
        let take = |h: &str, now: u64| slots.decide("k", Some(h), 2, 100, now, true).allowed;
        assert!(take("a", 0));
        // The same holder again renews its slot, never a second one.
        assert!(take("a", 0));
        assert!(take("b", 0));
        assert!(!take("c", 0));
        // A look on a copy takes nothing.
        assert!(!slots.decide("k", None, 2, 100, 0, false).allowed);
        assert!(slots.release("k", "a", 100, 10 * MS));
        assert!(!slots.release("k", "a", 100, 10 * MS));
        assert!(take("c", 10 * MS));
        // b's slot frees itself at its TTL.
        assert!(!take("d", 99 * MS));
        assert!(take("d", 100 * MS));
    }
}
