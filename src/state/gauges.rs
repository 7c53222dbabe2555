//! Gauges of the limiter values Redis holds: live keys and value memory per algorithm, and
//! sliding-log entries. They follow every value through the data type's lifecycle: a value enters
//! when a command stores a new one, when Redis loads one (`rdb_load`: RDB, `DEBUG RELOAD`,
//! `RESTORE`, a replica's full sync, a diskless load into a temporary database) or copies one
//! (`COPY`), and leaves through the `free` callback (`DEL`, overwrite, expiry, eviction,
//! `FLUSHALL`, a discarded temporary database). `free` runs on a background thread for
//! `FLUSHALL ASYNC` and other lazy frees, so everything here is an atomic; `Relaxed` is enough for
//! independent statistics. `metrics` reads them for `INFO ratelimit`.

use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

use super::{Limiter, ALGORITHM_IDS, MAX_TAG};
use crate::algo::Algorithm;

/// A gauge slot per stored tag (slot 0 unused).
const SLOTS: usize = MAX_TAG as usize + 1;

/// How INSPECT and INFO name the algorithm with stored tag `tag`.
pub fn algorithm_name(tag: u8) -> &'static str {
    ALGORITHM_IDS
        .iter()
        .find(|&&(t, _)| t == tag)
        .map_or("unknown", |&(_, id)| id)
}

/// Live limiter values per algorithm tag, their memory (what `mem_usage` reports for each) and
/// the sliding-log entries they hold. Signed: a transient negative would show a missed hook
/// rather than wrap to 2^64.
static KEYS: [AtomicI64; SLOTS] = [const { AtomicI64::new(0) }; SLOTS];
static MEMORY: [AtomicI64; SLOTS] = [const { AtomicI64::new(0) }; SLOTS];
/// Entries per tag: the sliding log's, and the concurrency limiter's holders.
static ENTRIES: [AtomicI64; SLOTS] = [const { AtomicI64::new(0) }; SLOTS];
/// Live values that remember more than one configuration (a key in a rollout, `algo::step`).
static REMEMBERING: AtomicI64 = AtomicI64::new(0);

/// What one limiter value contributes to the gauges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    tag: u8,
    /// `size_of::<Limiter>()` plus its heap bytes: what `MEMORY USAGE` counts for the value.
    bytes: usize,
    /// Sliding-log entries or concurrency holders (0 for the other algorithms).
    entries: u64,
    /// Whether it remembers more than one configuration.
    remembering: bool,
}

impl Footprint {
    pub fn of(limiter: &Limiter) -> Footprint {
        Footprint {
            tag: limiter.state.tag(),
            bytes: limiter.value_bytes(),
            entries: limiter.log_entries(),
            remembering: !limiter.others().is_empty(),
        }
    }

    fn apply(self, sign: i64) {
        let slot = usize::from(self.tag);
        let bytes = i64::try_from(self.bytes).unwrap_or(i64::MAX);
        let entries = i64::try_from(self.entries).unwrap_or(i64::MAX);
        if let (Some(keys), Some(memory)) = (KEYS.get(slot), MEMORY.get(slot)) {
            keys.fetch_add(sign, Relaxed);
            memory.fetch_add(sign.wrapping_mul(bytes), Relaxed);
        }
        if let (true, Some(gauge)) = (entries != 0, ENTRIES.get(slot)) {
            gauge.fetch_add(sign.wrapping_mul(entries), Relaxed);
        }
        if self.remembering {
            REMEMBERING.fetch_add(sign, Relaxed);
        }
    }
}

/// A limiter value now owned by Redis: stored by a command, loaded, or copied.
pub fn limiter_created(limiter: &Limiter) {
    Footprint::of(limiter).apply(1);
}

/// A limiter value Redis is freeing (any thread).
pub fn limiter_freed(limiter: &Limiter) {
    Footprint::of(limiter).apply(-1);
}

/// A value Redis owns was changed in place; `before` is its footprint before the change.
/// Unchanged footprints (most decisions: the state types have a fixed size) cost nothing.
pub fn limiter_changed(before: Footprint, after: &Limiter) {
    let after = Footprint::of(after);
    if after != before {
        before.apply(-1);
        after.apply(1);
    }
}

/// The gauges of one algorithm: (live keys, value memory in bytes).
pub fn algorithm_gauges(tag: u8) -> (i64, i64) {
    let slot = usize::from(tag);
    match (KEYS.get(slot), MEMORY.get(slot)) {
        (Some(k), Some(m)) => (k.load(Relaxed), m.load(Relaxed)),
        _ => (0, 0),
    }
}

pub fn log_entries() -> i64 {
    entries(crate::algo::sliding_log::SlidingLog::TAG)
}

/// The entries the values of the algorithm with stored tag `tag` hold (sliding-log entries,
/// concurrency holders; 0 for the fixed-size states).
pub fn entries(tag: u8) -> i64 {
    ENTRIES.get(usize::from(tag)).map_or(0, |e| e.load(Relaxed))
}

/// Live values that remember more than one configuration.
pub fn remembering_keys() -> i64 {
    REMEMBERING.load(Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::{sliding_log::SlidingLog, Algorithm, Policy};
    use crate::state::AlgoState;

    #[test]
    fn gauges_follow_a_value_changed_in_place() {
        let p = Policy::new(10, 1000, 10).unwrap();
        let t0 = crate::algo::props::T0;
        let log = |costs: &[u64]| {
            let mut state: Option<SlidingLog> = None;
            for (i, &c) in costs.iter().enumerate() {
                state = SlidingLog::check(state.as_ref(), &p, t0 + i as u64, c)
                    .next
                    .or(state);
            }
            Limiter {
                policy: p,
                state: AlgoState::SlidingLog(state.unwrap()),
            }
        };
        let tag = 3;
        let (keys, memory) = algorithm_gauges(tag);
        let entries = log_entries();
        let mut l = log(&[1, 1]);
        limiter_created(&l);
        // 48 bytes of Limiter, and the log's heap: 3 header words and a ring of 2 slots.
        assert_eq!(algorithm_gauges(tag), (keys + 1, memory + 48 + 8 * (3 + 2)));
        assert_eq!(log_entries(), entries + 2);
        let before = Footprint::of(&l);
        l = log(&[1, 1, 1, 1]);
        limiter_changed(before, &l);
        assert_eq!(algorithm_gauges(tag), (keys + 1, memory + 48 + 8 * (3 + 4)));
        assert_eq!(log_entries(), entries + 4);
        limiter_freed(&l);
        assert_eq!(algorithm_gauges(tag), (keys, memory));
        assert_eq!(log_entries(), entries);
        assert_eq!(algorithm_name(tag), "sliding_log");
        assert_eq!(algorithm_name(200), "unknown");
    }
}
