//! The adaptive deadline: a store call waits at most a small multiple of the store's recent p99,
//! never less than `Config::deadline` and never more than `Config::max_deadline`. So a healthy
//! store on an idle host keeps the configured deadline, a busy host (slower but answering)
//! stretches it instead of timing out healthy calls, and a frozen store cannot stretch it: its
//! calls time out, they are recorded at the deadline, and the circuit opens after three.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::clock::ns;

/// Latency buckets: 4 per power of two of nanoseconds (about 19 % wide), up to 2^40 ns.
const BUCKETS: usize = 160;
/// The effective deadline is recomputed every this many samples.
const EVERY: u32 = 256;
/// Counts are halved when they reach this many samples: the p99 follows the last few thousand
/// calls.
const HALF_LIFE: u32 = 4096;
/// The deadline is this many times the observed p99.
pub(crate) const P99_FACTOR: u64 = 4;

pub(crate) struct Deadline {
    floor_ns: u64,
    cap_ns: u64,
    counts: Vec<AtomicU32>,
    samples: AtomicU32,
    current_ns: AtomicU64,
}

fn bucket(ns: u64) -> usize {
    let ns = ns.max(1);
    let log = 63 - ns.leading_zeros() as usize;
    let sub = if log >= 2 {
        ((ns >> (log - 2)) & 3) as usize
    } else {
        0
    };
    (log * 4 + sub).min(BUCKETS - 1)
}

/// The upper edge of a bucket, in ns.
fn upper(b: usize) -> u64 {
    let (log, sub) = (b / 4, (b % 4) as u64);
    if log < 2 {
        return 1 << (log + 1);
    }
    (4 + sub + 1) << (log - 2)
}

impl Deadline {
    /// `floor` is the configured deadline; `cap` at or below it turns adaptation off.
    pub(crate) fn new(floor: Duration, cap: Duration) -> Deadline {
        let floor_ns = ns(floor);
        Deadline {
            floor_ns,
            cap_ns: ns(cap).max(floor_ns),
            counts: (0..BUCKETS).map(|_| AtomicU32::new(0)).collect(),
            samples: AtomicU32::new(0),
            current_ns: AtomicU64::new(floor_ns),
        }
    }

    /// The deadline of the next call.
    pub(crate) fn current(&self) -> Duration {
        Duration::from_nanos(self.current_ns.load(Ordering::Relaxed))
    }

    /// The longest a call may ever wait.
    pub(crate) fn cap(&self) -> Duration {
        Duration::from_nanos(self.cap_ns)
    }

    /// One call's latency (a call that timed out: the deadline it had).
    pub(crate) fn record(&self, took: Duration) {
        if self.cap_ns == self.floor_ns {
            return;
        }
        if let Some(c) = self.counts.get(bucket(ns(took))) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        let n = self.samples.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(EVERY) {
            self.update(n);
        }
    }

    fn update(&self, n: u32) {
        let counts: Vec<u32> = self
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
        let mut below = 0u64;
        let mut p99 = 0;
        for (b, &c) in counts.iter().enumerate() {
            below += u64::from(c);
            if below * 100 >= total * 99 {
                p99 = upper(b);
                break;
            }
        }
        let deadline = p99
            .saturating_mul(P99_FACTOR)
            .clamp(self.floor_ns, self.cap_ns);
        self.current_ns.store(deadline, Ordering::Relaxed);
        if n >= HALF_LIFE {
            for c in &self.counts {
                let v = c.load(Ordering::Relaxed);
                c.store(v / 2, Ordering::Relaxed);
            }
            self.samples.store(n / 2, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_cover_their_values() {
        for ns in [1u64, 2, 3, 7, 100, 999, 54_000, 5_000_000, 1 << 39] {
            assert!(upper(bucket(ns)) >= ns, "{ns}");
            assert!(upper(bucket(ns)) <= ns + ns / 4 + 2, "{ns}");
        }
        assert!((1..BUCKETS).all(|b| upper(b) >= upper(b - 1)));
    }

    #[test]
    fn follows_the_p99_within_its_bounds() {
        let ms = Duration::from_millis;
        let d = Deadline::new(ms(5), ms(20));
        for _ in 0..EVERY * 4 {
            d.record(Duration::from_micros(80));
        }
        assert_eq!(d.current(), ms(5), "a fast store keeps the floor");
        // A busy host: 3 % of calls take 4 ms.
        for i in 0..HALF_LIFE * 2 {
            d.record(if i % 33 == 0 {
                ms(4)
            } else {
                Duration::from_micros(80)
            });
        }
        let stretched = d.current();
        assert!(stretched > ms(15) && stretched <= ms(20), "{stretched:?}");
        // Back to fast: it comes down again.
        for _ in 0..HALF_LIFE * 8 {
            d.record(Duration::from_micros(80));
        }
        assert_eq!(d.current(), ms(5));
        // Adaptation off.
        let fixed = Deadline::new(ms(100), ms(20));
        fixed.record(ms(90));
        assert_eq!((fixed.current(), fixed.cap()), (ms(100), ms(100)));
    }
}
