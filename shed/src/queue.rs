//! The short queue in front of a full service, time-bounded the CoDel way: a request may wait
//! up to `interval` while waits are short, and only `target` once every request taken from the
//! queue for a whole `interval` had waited longer than `target` (a standing queue: overload
//! that waiting will not fix). Which request leaves first is the admission's choice; this file
//! keeps the entries and the clock of waits.

use std::sync::Arc;
use std::time::Duration;

use crate::tier::Tier;

/// A waiting request's handle: closed once the caller went away (cancelled or timed out).
pub trait Waiter {
    fn is_closed(&self) -> bool;
}

pub struct Entry<W> {
    pub tenant: Arc<str>,
    pub tier: Tier,
    pub enqueued: Duration,
    pub waiter: W,
}

pub struct Queue<W> {
    pub entries: Vec<Entry<W>>,
    target: Duration,
    interval: Duration,
    /// Since when every request taken from the queue had waited longer than `target`.
    above_since: Option<Duration>,
    standing: bool,
}

impl<W: Waiter> Queue<W> {
    pub fn new(target: Duration, interval: Duration) -> Queue<W> {
        Queue {
            entries: Vec::new(),
            target,
            interval,
            above_since: None,
            standing: false,
        }
    }

    /// The longest a request may wait now.
    pub fn allowed_wait(&self) -> Duration {
        if self.standing {
            self.target
        } else {
            self.interval
        }
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
        if waited <= self.target {
            self.above_since = None;
            self.standing = false;
        } else {
            let since = *self.above_since.get_or_insert(now);
            self.standing = now.saturating_sub(since) >= self.interval;
        }
        Some(e)
    }

    /// Removes the entries whose caller went away (first) and those that waited past the
    /// allowed wait (second), in queue order.
    pub fn expire(&mut self, now: Duration) -> (Vec<Entry<W>>, Vec<Entry<W>>) {
        let allowed = self.allowed_wait();
        let (mut gone, mut late) = (Vec::new(), Vec::new());
        let mut i = 0;
        while i < self.entries.len() {
            let e = &self.entries[i];
            if e.waiter.is_closed() {
                gone.push(self.entries.remove(i));
            } else if now.saturating_sub(e.enqueued) > allowed {
                late.push(self.entries.remove(i));
            } else {
                i += 1;
            }
        }
        // Late ones waited longer than the target: that is a standing queue's mark too.
        if !late.is_empty() {
            let since = *self.above_since.get_or_insert(now);
            self.standing = now.saturating_sub(since) >= self.interval;
        }
        (gone, late)
    }
}
