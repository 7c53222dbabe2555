//! The client's own time, in nanoseconds from an arbitrary origin: lease lifetimes, the local
//! fallback buckets and the circuit's backoff read it. Tests move a [`ManualClock`] by hand;
//! the store's decisions use the server's clock, never this one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub trait Clock: Send + Sync {
    fn now_ns(&self) -> u64;
}

/// Monotonic time since the clock was made.
pub struct SystemClock(Instant);

impl SystemClock {
    pub fn new() -> SystemClock {
        SystemClock(Instant::now())
    }
}

impl Default for SystemClock {
    fn default() -> SystemClock {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A clock that moves only when told.
pub struct ManualClock(AtomicU64);

impl ManualClock {
    pub fn new(start_ns: u64) -> ManualClock {
        ManualClock(AtomicU64::new(start_ns))
    }

    pub fn advance(&self, by: Duration) {
        let ns = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.0.fetch_add(ns, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

pub(crate) fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
