//! The admission core, synchronous and clock-free (the caller passes `now`): counts requests in
//! flight, asks the limit algorithm for the limit, and when the service is full decides who
//! waits, who is shed, and who goes next. The order, best first: a tenant within its fair share
//! before one over it (a flood costs the others nothing, whatever tiers it claims); then the
//! higher tier; then the tenant furthest below its share; then the one that waited longest.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::limit::{LimitAlgorithm, Sample};
use crate::queue::{Entry, Queue, Waiter};
use crate::rejection::{Reason, Rejection};
use crate::tenants::Tenants;
use crate::tier::Tier;

/// What the admission knows of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ticket {
    pub tier: Tier,
    /// The tenant as the gateway keys it (API key, tenant id, IP prefix); `""` for none.
    pub tenant: String,
}

/// The queue and tenant settings (none required).
#[derive(Clone, Debug, PartialEq)]
pub struct QueueSettings {
    /// The longest wait under a standing queue (default 5 ms).
    pub target: Duration,
    /// The longest wait otherwise, and how long waits must stay above `target` to call the
    /// queue standing (default 100 ms).
    pub interval: Duration,
    /// The most requests waiting; `None` (default) is the current limit. `Some(0)`: no queue,
    /// a request finding the service full is shed at once (tiers then order nothing).
    pub max_queue: Option<usize>,
    /// The most tenants counted apart (default 10,000); more share one entry.
    pub max_tenants: usize,
    /// Tenants with more (or fewer) than one share of the limit.
    pub weights: HashMap<String, u32>,
}

impl Default for QueueSettings {
    fn default() -> QueueSettings {
        QueueSettings {
            target: Duration::from_millis(5),
            interval: Duration::from_millis(100),
            max_queue: None,
            max_tenants: 10_000,
            weights: HashMap::new(),
        }
    }
}

/// An admitted request, until it completes.
#[derive(Clone, Debug)]
pub struct Grant {
    pub tenant: Arc<str>,
    pub tier: Tier,
    pub admitted_at: Duration,
    pub in_flight: usize,
}

/// A queued request's fate, for the caller to send to its waiter.
pub struct Settled<W> {
    pub waiter: W,
    pub tier: Tier,
    pub tenant: Arc<str>,
    pub outcome: Result<Grant, Rejection>,
}

pub enum Arrival {
    Admitted(Grant),
    Queued,
    Rejected(Rejection),
}

/// How a completed request ended, for the algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// The service answered (whatever the status but an overload one).
    Answered,
    /// The service said it was overloaded or failed to answer (503, 504, transport error).
    Dropped,
    /// The caller went away first: the latency says nothing, only the count is given back.
    Cancelled,
}

/// The order key: larger goes first, smaller is shed first.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
struct Precedence {
    within_share: bool,
    tier: u8,
    room: f64,
}

pub struct Admission<W> {
    alg: Box<dyn LimitAlgorithm>,
    in_flight: usize,
    tenants: Tenants,
    queue: Queue<W>,
    max_queue: Option<usize>,
}

impl<W: Waiter> Admission<W> {
    pub fn new(alg: Box<dyn LimitAlgorithm>, settings: QueueSettings) -> Admission<W> {
        Admission {
            alg,
            in_flight: 0,
            tenants: Tenants::new(settings.max_tenants, settings.weights),
            queue: Queue::new(settings.target, settings.interval),
            max_queue: settings.max_queue,
        }
    }

    pub fn limit(&self) -> usize {
        self.alg.limit().max(1)
    }
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }
    pub fn queued(&self) -> usize {
        self.queue.len()
    }
    pub fn active_tenants(&self) -> usize {
        self.tenants.active()
    }
    pub fn algorithm(&self) -> &dyn LimitAlgorithm {
        &*self.alg
    }
    pub fn allowed_wait(&self) -> Duration {
        self.queue.allowed_wait()
    }

    fn queue_cap(&self) -> usize {
        self.max_queue.unwrap_or_else(|| self.limit())
    }

    fn precedence(&self, tier: Tier, tenant: &str, extra: usize) -> Precedence {
        let used = self.tenants.share_used(tenant, extra, self.limit());
        Precedence {
            within_share: used <= 1.0,
            tier: tier.rank(),
            room: -used,
        }
    }

    fn admit(&mut self, tenant: Arc<str>, tier: Tier, now: Duration) -> Grant {
        self.in_flight += 1;
        self.tenants.start(&tenant);
        Grant {
            tenant,
            tier,
            admitted_at: now,
            in_flight: self.in_flight,
        }
    }

    /// Over its share is the reason only when other tenants are waiting or running: a lone
    /// tenant is simply more than the service can take.
    fn shed(&self, tier: Tier, tenant: &str) -> Rejection {
        let p = self.precedence(tier, tenant, 0);
        let others = self.tenants.active() > 1;
        Rejection::new(if others && !p.within_share {
            Reason::OverShare
        } else {
            Reason::Overloaded
        })
    }

    pub fn arrive(
        &mut self,
        now: Duration,
        ticket: &Ticket,
        waiter: W,
        settled: &mut Vec<Settled<W>>,
    ) -> Arrival {
        self.expire(now, settled);
        let tenant = self.tenants.key(&ticket.tenant);
        if self.in_flight < self.limit() && self.queue.is_empty() {
            return Arrival::Admitted(self.admit(tenant, ticket.tier, now));
        }
        let mine = self.precedence(ticket.tier, &tenant, 1);
        let full = self.queue.len() >= self.queue_cap();
        if full && self.worst().is_none_or(|(_, p)| p >= mine) {
            return Arrival::Rejected(self.shed(ticket.tier, &tenant));
        }
        // Counted before an eviction, so the evicted one's reason sees the newcomer.
        self.tenants.queue(&tenant);
        if full {
            // Full queue: the newcomer takes the place of the queue's last.
            let worst = self.worst().map_or(0, |(i, _)| i);
            if let Some(e) = self.queue.take(worst, now) {
                let rejection = self.shed(e.tier, &e.tenant);
                self.tenants.unqueue(&e.tenant);
                settled.push(settle(e, Err(rejection)));
            }
        }
        self.queue.entries.push(Entry {
            tenant,
            tier: ticket.tier,
            enqueued: now,
            waiter,
        });
        Arrival::Queued
    }

    /// A request completed: gives back its place, feeds the algorithm, lets the queue in.
    pub fn complete(
        &mut self,
        now: Duration,
        grant: &Grant,
        how: Completion,
        settled: &mut Vec<Settled<W>>,
    ) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.tenants.finish(&grant.tenant);
        if how != Completion::Cancelled {
            self.alg.on_sample(Sample {
                at: now,
                rtt: now.saturating_sub(grant.admitted_at),
                in_flight: grant.in_flight,
                dropped: how == Completion::Dropped,
            });
        }
        self.expire(now, settled);
    }

    /// Drops the queue's cancelled entries, sheds those that waited too long, and admits the
    /// best waiting requests while there is room.
    pub fn expire(&mut self, now: Duration, settled: &mut Vec<Settled<W>>) {
        let (gone, late) = self.queue.expire(now);
        for e in gone {
            self.tenants.unqueue(&e.tenant);
        }
        for e in late {
            self.tenants.unqueue(&e.tenant);
            settled.push(settle(e, Err(Rejection::new(Reason::QueueTimeout))));
        }
        while self.in_flight < self.limit() {
            let Some((i, _)) = self.best() else { break };
            let Some(e) = self.queue.take(i, now) else {
                break;
            };
            self.tenants.unqueue(&e.tenant);
            let grant = self.admit(e.tenant.clone(), e.tier, now);
            settled.push(settle(e, Ok(grant)));
        }
    }

    /// The caller of a settled admission went away before receiving it: give the place back
    /// (no sample: it never ran).
    pub fn undo(&mut self, now: Duration, grant: &Grant, settled: &mut Vec<Settled<W>>) {
        self.complete(now, grant, Completion::Cancelled, settled);
    }

    fn ranked(&self) -> impl Iterator<Item = (usize, Precedence)> + '_ {
        self.queue
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (i, self.precedence(e.tier, &e.tenant, 0)))
    }

    /// The entry to admit next: the best precedence, the oldest among equals.
    fn best(&self) -> Option<(usize, Precedence)> {
        self.ranked().fold(None, |best, (i, p)| match best {
            Some((_, b)) if p <= b => best,
            _ => Some((i, p)),
        })
    }

    /// The entry to shed first: the worst precedence, the newest among equals.
    fn worst(&self) -> Option<(usize, Precedence)> {
        self.ranked().fold(None, |worst, (i, p)| match worst {
            Some((_, w)) if p > w => worst,
            _ => Some((i, p)),
        })
    }
}

fn settle<W>(e: Entry<W>, outcome: Result<Grant, Rejection>) -> Settled<W> {
    Settled {
        waiter: e.waiter,
        tier: e.tier,
        tenant: e.tenant,
        outcome,
    }
}

#[cfg(test)]
mod tests;
