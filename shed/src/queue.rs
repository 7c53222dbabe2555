//! The short queue in front of a full service, time-bounded the CoDel way: a request may wait
//! up to `interval` while waits are short, and only `target` once every request taken from the
//! queue for a whole `interval` had waited longer than `target` (a standing queue: overload
//! that waiting will not fix). Which request leaves first is the admission's choice; this file
//! keeps the entries and the clock of waits.
//!
//! Unless set, both follow the service's no-load latency as the limit algorithm measures it, per
//! tier: `interval` is half of it, because a longer wait takes an admitted request past twice an
//! idle service's latency (the limit's own queue inside the service adds the other half), a late
//! success rather than goodput. A critical request may wait twice the no-load latency: two full
//! turns of the service (every place freed twice) without room for it is what "critical alone
//! exceeds capacity" looks like, while a service of equal service times frees its places in
//! bunches and the limit algorithm's probes run at a reduced limit, both of which a shorter
//! wait turned into shed critical requests. Measured in tests/simulated.rs's run at 5 × C (10 %
//! critical): critical success 98.9 % at one no-load latency, 99.7 % at 1.5, 99.9 % at 2, its
//! p99 26.9, 27.2 and 27.8 ms (the service's own line behind the workers is most of it; a
//! critical request now rarely waits here at all: see `LimitAlgorithm::critical_overdraft`).
//! While a flood is on, a tenant within its share waits as long as a critical request (see
//! `Admission::flooded`).
//! `target` is `interval`, so there is no standing cut. The
//! queue is served by precedence, not in order: a higher tier or a tenant within its share is
//! taken at once, so the waits of the requests taken say nothing of those left behind, and a cut
//! at a fraction of `interval` would shed a well-behaved tenant's request that waited for the
//! next completion behind a flood.

use std::sync::Arc;
use std::time::Duration;

use crate::tier::Tier;

/// The longest wait, as a fraction of the no-load latency, when `interval` is not set.
const INTERVAL_OF_NO_LOAD: f64 = 0.5;
/// The same for a critical request.
const CRITICAL_INTERVAL_OF_NO_LOAD: f64 = 2.0;
/// The longest wait before the no-load latency is first measured, when `interval` is not set.
const UNMEASURED_INTERVAL: Duration = Duration::from_millis(100);

/// A waiting request's handle: closed once the caller went away (cancelled or timed out).
pub trait Waiter {
    fn is_closed(&self) -> bool;
}

pub struct Entry<W> {
    pub tenant: Arc<str>,
    pub tier: Tier,
    pub enqueued: Duration,
    pub waiter: W,
    /// Waits as long as a critical request (see `Queue::allowed_wait_of`).
    pub patient: bool,
}

pub struct Queue<W> {
    pub entries: Vec<Entry<W>>,
    /// As set; `None`: from `no_load`.
    target: Option<Duration>,
    interval: Option<Duration>,
    /// The service's no-load latency, as the limit algorithm last measured it.
    no_load: Option<Duration>,
    /// Since when every request taken from the queue had waited longer than `target`.
    above_since: Option<Duration>,
    standing: bool,
}

impl<W: Waiter> Queue<W> {
    pub fn new(target: Option<Duration>, interval: Option<Duration>) -> Queue<W> {
        Queue {
            entries: Vec::new(),
            target,
            interval,
            no_load: None,
            above_since: None,
            standing: false,
        }
    }

    /// The service's no-load latency now: the waits not set follow it.
    pub fn set_no_load(&mut self, no_load: Option<Duration>) {
        self.no_load = no_load;
    }

    fn interval(&self, tier: Tier) -> Duration {
        let fraction = match tier {
            Tier::Critical => CRITICAL_INTERVAL_OF_NO_LOAD,
            _ => INTERVAL_OF_NO_LOAD,
        };
        self.interval.unwrap_or_else(|| {
            self.no_load
                .map_or(UNMEASURED_INTERVAL, |d| d.mul_f64(fraction))
        })
    }

    fn target(&self, tier: Tier) -> Duration {
        self.target.unwrap_or_else(|| self.interval(tier))
    }

    /// The longest a request of `tier` may wait now.
    pub fn allowed_wait(&self, tier: Tier) -> Duration {
        if self.standing {
            self.target(tier)
        } else {
            self.interval(tier)
        }
    }

    /// The longest a request of `tier` may wait now, a patient one (a tenant within its share
    /// while another is over it: see `Admission::arrive`) as long as a critical one.
    pub fn allowed_wait_of(&self, tier: Tier, patient: bool) -> Duration {
        self.allowed_wait(if patient { Tier::Critical } else { tier })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Takes entry `i` out, noting how long it waited.
    pub fn take(&mut self, i: usize, now: Duration) -> Option<Entry<W>> {
        if i >= self.entries.len() {
            return None;
        }
        let e = self.entries.remove(i);
        let waited = now.saturating_sub(e.enqueued);
        if waited <= self.target(e.tier) {
            self.above_since = None;
            self.standing = false;
        } else {
            let since = *self.above_since.get_or_insert(now);
            self.standing = now.saturating_sub(since) >= self.interval(e.tier);
        }
        Some(e)
    }

    /// Removes the entries whose caller went away (first) and those that waited past the
    /// allowed wait (second), in queue order.
    pub fn expire(&mut self, now: Duration) -> (Vec<Entry<W>>, Vec<Entry<W>>) {
        let (mut gone, mut late) = (Vec::new(), Vec::new());
        let mut i = 0;
        while i < self.entries.len() {
            let e = &self.entries[i];
            if e.waiter.is_closed() {
                gone.push(self.entries.remove(i));
            } else if now.saturating_sub(e.enqueued) > self.allowed_wait_of(e.tier, e.patient) {
                late.push(self.entries.remove(i));
            } else {
                i += 1;
            }
        }
        // Late ones waited longer than the target: that is a standing queue's mark too.
        if !late.is_empty() {
            let since = *self.above_since.get_or_insert(now);
            let tier = late.first().map_or(Tier::Default, |e| e.tier);
            self.standing = now.saturating_sub(since) >= self.interval(tier);
        }
        (gone, late)
    }
}
