//! The denial cache: a store key the store denied is denied here, for a charge at least as large
//! as the one the store's answer holds for, until the store's retry time, without a store call.
//! The peer's local cache keeps keys over the limit for the rest of their window; this one keeps
//! the store's own retry time and the smallest charge it denies, so it is exact for every
//! algorithm (a GCRA key is cached until its next token, not for a whole window; a fixed window
//! that denied 101 with 60 left still admits 60).
//!
//! Bounded in bytes (`LOCAL_CACHE_SIZE_IN_BYTES`): each entry counts its key and
//! [`ENTRY_OVERHEAD`]. Entries leave in the order they came (a queue beside the map), so adding
//! one costs O(1) amortized: no scan of the map under the lock.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// What an entry costs besides its key: the map's and the queue's slots, the shared key's
/// header, the entry's numbers (measured sizes rounded up).
pub const ENTRY_OVERHEAD: u64 = 128;

/// One cached denial.
#[derive(Clone, Copy)]
struct Denial {
    /// Denied until this instant (the store's retry time).
    until_ns: u64,
    /// Denied for a charge of at least this many hits.
    min_hits: u64,
    /// Which push to the queue this entry is: an older queue slot of the same key is stale.
    seq: u64,
}

#[derive(Default)]
struct Cache {
    map: HashMap<Arc<str>, Denial>,
    /// Every entry pushed, oldest first, with its cost; a slot whose `seq` the map no longer
    /// holds is stale (the key was forgotten or cached again) and still counted in `bytes`
    /// until it leaves, so the bound holds over everything kept.
    queue: VecDeque<(Arc<str>, u64, u64)>,
    bytes: u64,
    next_seq: u64,
}

pub struct Denials {
    cache: Mutex<Cache>,
    max_bytes: u64,
}

impl Denials {
    /// A cache of at most `max_bytes` (0: nothing is cached).
    pub fn new(max_bytes: u64) -> Denials {
        Denials {
            cache: Mutex::new(Cache::default()),
            max_bytes,
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The ms left before `key` may be asked again for `hits`, if a denial cached for it holds at
    /// `now_ns` for that charge.
    pub fn denied(&self, key: &str, hits: u64, now_ns: u64) -> Option<u64> {
        let mut cache = self.cache();
        let d = *cache.map.get(key)?;
        if d.until_ns <= now_ns {
            cache.map.remove(key);
            return None;
        }
        (hits >= d.min_hits).then(|| (d.until_ns - now_ns).div_ceil(1_000_000))
    }

    /// Deny `key` for charges of `min_hits` or more until `retry_ms` after `now_ns`. The oldest
    /// entries leave to make room; a key larger than the whole cache is not kept (the store
    /// still answers for it).
    pub fn deny(&self, key: &str, min_hits: u64, now_ns: u64, retry_ms: u64) {
        let cost = (key.len() as u64).saturating_add(ENTRY_OVERHEAD);
        if cost > self.max_bytes {
            return;
        }
        let mut cache = self.cache();
        while cache.bytes + cost > self.max_bytes {
            let Some((old, seq, old_cost)) = cache.queue.pop_front() else {
                break;
            };
            cache.bytes -= old_cost;
            if cache.map.get(&old).is_some_and(|d| d.seq == seq) {
                cache.map.remove(&old);
            }
        }
        let seq = cache.next_seq;
        cache.next_seq += 1;
        let key: Arc<str> = Arc::from(key);
        cache.queue.push_back((key.clone(), seq, cost));
        cache.bytes += cost;
        cache.map.insert(
            key,
            Denial {
                until_ns: now_ns.saturating_add(retry_ms.saturating_mul(1_000_000)),
                min_hits: min_hits.max(1),
                seq,
            },
        );
    }

    /// Forget one key: tokens were given back to it, it may admit before its retry time.
    pub fn forget(&self, key: &str) {
        self.cache().map.remove(key);
    }

    /// Forget everything: a new config may have changed the limits.
    pub fn clear(&self) {
        *self.cache() = Cache::default();
    }

    /// Keys cached (expired ones not yet asked for included).
    pub fn len(&self) -> usize {
        self.cache().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes counted against `LOCAL_CACHE_SIZE_IN_BYTES`.
    pub fn bytes(&self) -> u64 {
        self.cache().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denied_until_the_retry_time_then_forgotten() {
        let d = Denials::new(1 << 20);
        d.deny("a", 1, 1_000_000_000, 1500);
        assert_eq!(d.denied("a", 1, 1_000_000_000), Some(1500));
        assert_eq!(d.denied("a", 1, 2_499_999_999), Some(1));
        assert_eq!(d.denied("a", 1, 2_500_000_000), None);
        assert!(d.is_empty());
    }

    #[test]
    fn a_denial_holds_only_for_charges_as_large() {
        let d = Denials::new(1 << 20);
        // The store denied 101 with 100 left (a fixed window): 101 and more are denied here,
        // 100 and less go to the store.
        d.deny("a", 101, 0, 60_000);
        assert_eq!(d.denied("a", 100, 0), None);
        assert_eq!(d.denied("a", 1, 0), None);
        assert_eq!(d.denied("a", 101, 0), Some(60_000));
        assert_eq!(d.denied("a", 500, 0), Some(60_000));
    }

    #[test]
    fn bounded_in_bytes_the_oldest_leaving_first() {
        let per = 1 + ENTRY_OVERHEAD;
        let d = Denials::new(3 * per);
        for k in ["a", "b", "c", "d"] {
            d.deny(k, 1, 0, 10);
        }
        assert_eq!(d.bytes(), 3 * per);
        assert_eq!(d.denied("a", 1, 0), None, "the oldest made room");
        assert_eq!(d.denied("d", 1, 0), Some(10));
        // A key larger than the cache is not kept; nothing else is lost for it.
        d.deny(&"x".repeat(4 * per as usize), 1, 0, 10);
        assert_eq!(d.len(), 3);
        // Stale queue slots (a key cached again, one forgotten) count until they leave.
        for _ in 0..100 {
            d.deny("b", 1, 0, 10);
            d.forget("c");
        }
        assert!(d.bytes() <= 3 * per);
        assert_eq!(d.denied("b", 1, 0), Some(10));
        // Off.
        let off = Denials::new(0);
        off.deny("a", 1, 0, 10);
        assert!(off.is_empty());
    }
}
