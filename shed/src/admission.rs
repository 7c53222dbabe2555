//! The admission core, synchronous and clock-free (the caller passes `now`): counts requests in
//! flight, asks the limit algorithm for the limit, and when the service is full decides who
//! waits, who is shed, and who goes next. The order, best first: a tenant within its fair share
//! before one over it (a flood costs the others nothing, whatever tiers it claims: see
//! `precedence` for what over means); then the higher tier; then the tenant furthest below its share; then the one that waited longest.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::limit::{LimitAlgorithm, Sample};
use crate::queue::{Entry, Queue, Waiter};
use crate::rejection::{Reason, Rejection};
use crate::tenants::Tenants;
use crate::tier::Tier;

/// The places kept for tenants within their share, in spreads (square roots) of the limit; see
/// `Admission::reserved`. Measured in a discrete-event run of this core (19 tenants at 0.8 C, one
/// at 10 × its share): 1 spread kept the well-behaved at 98.2 % success, 1.5 at 99.3 %, 2 at
/// 99.7 % with the flooder at 0.97 of its max-min share.
const RESERVE_SPREADS: f64 = 2.0;

/// How long, in no-load latencies, a flood is remembered after its last request over a share.
const FLOOD_MEMORY: u32 = 20;

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
    /// The longest wait under a standing queue (default: `interval`, no standing cut; see
    /// `queue.rs` for why).
    pub target: Option<Duration>,
    /// The longest wait otherwise, and how long waits must stay above `target` to call the
    /// queue standing (default: half the service's no-load latency, the whole of it for a
    /// critical request; 100 ms until measured).
    pub interval: Option<Duration>,
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
            target: None,
            interval: None,
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
    /// Waiting for a place, at most `wait` (the caller's timer: `expire` sheds it then too).
    Queued {
        wait: Duration,
    },
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
    /// When a request of a tenant over its share last arrived.
    over_share_at: Option<Duration>,
}

impl<W: Waiter> Admission<W> {
    pub fn new(alg: Box<dyn LimitAlgorithm>, settings: QueueSettings) -> Admission<W> {
        Admission {
            alg,
            in_flight: 0,
            tenants: Tenants::new(settings.max_tenants, settings.weights),
            queue: Queue::new(settings.target, settings.interval),
            max_queue: settings.max_queue,
            over_share_at: None,
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
    /// The longest a request of `tier` may wait in the queue now.
    pub fn allowed_wait(&self, tier: Tier) -> Duration {
        self.queue.allowed_wait(tier)
    }

    fn queue_cap(&self) -> usize {
        self.max_queue
            .unwrap_or_else(|| self.alg.steady_limit().max(1))
    }

    /// A tenant is over its share when it holds more than its share of the limit now *and* took
    /// more than its share of the recent admissions (`Tenants::heavy`): the first alone puts a
    /// well-behaved tenant's second request beside a flooder's once a share is about one place
    /// (20 tenants on a limit of 12); the second alone flickers for tenants sharing an
    /// overloaded service evenly, letting their low tiers pass others' critical requests.
    fn precedence(&self, tier: Tier, tenant: &str) -> Precedence {
        let used = self.tenants.share_used(tenant, 0, self.limit());
        Precedence {
            within_share: used <= 1.0 || !self.tenants.heavy(tenant),
            tier: tier.rank(),
            room: -used,
        }
    }

    /// The places kept for tenants within their share (2 √limit, rounded up, leaving at least
    /// one for anyone): a tenant over its share fills the limit only up to the rest, so a
    /// well-behaved tenant's request finds a place at once instead of waiting for a completion
    /// behind a flood. The others' requests in flight come and go like Poisson arrivals, whose
    /// spread is about the square root of their number: two spreads cover their bursts.
    /// Nobody is over its share while tenants share evenly, so this costs a service under even
    /// overload nothing; under a flood, the limit algorithm sees the kept places' lower latency
    /// and raises the limit, so the service stays busy.
    fn reserved(&self) -> usize {
        let limit = self.limit();
        ((RESERVE_SPREADS * (limit as f64).sqrt()).ceil() as usize).min(limit - 1)
    }

    /// Whether a request of a tenant over its share arrived lately (within `FLOOD_MEMORY`
    /// no-load latencies). A tenant within its share then waits in the queue as long as a
    /// critical request: it waits for places the flood would otherwise take, not for a service
    /// that cannot serve it, and waiting half a no-load latency, as it does under even
    /// overload (where a longer wait is a late answer rather than goodput), lost it 1–2 % of its
    /// requests in the flood's first half second and in the probe's (`tests/simulated.rs`,
    /// eight seeds: 98.0 % → 99.4 % on average, every seed ≥ 99 %, its p99 22–32 ms).
    fn flooded(&self, now: Duration) -> bool {
        let memory = self
            .alg
            .observed()
            .min_rtt
            .map_or(Duration::from_secs(1), |d| {
                d.checked_mul(FLOOD_MEMORY).unwrap_or(Duration::MAX)
            });
        self.over_share_at
            .is_some_and(|t| now.saturating_sub(t) <= memory)
    }

    /// How many may be in flight for a request of precedence `p` to be admitted: the limit;
    /// less the kept places for a tenant over its share; and for a critical request within its
    /// share, the algorithm's overdraft more (`LimitAlgorithm::critical_overdraft`).
    fn open_to(&self, p: Precedence) -> usize {
        let limit = self.limit();
        if !p.within_share {
            limit - self.reserved()
        } else if p.tier == Tier::Critical.rank() {
            limit.saturating_add(self.alg.critical_overdraft())
        } else {
            limit
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
        let p = self.precedence(tier, tenant);
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
        self.tenants.arrived(&tenant);
        // Below the kept places with nobody waiting, any request is admitted: no need to rank it.
        if self.queue.is_empty() && self.in_flight + self.reserved() < self.limit() {
            return Arrival::Admitted(self.admit(tenant, ticket.tier, now));
        }
        // Counted before it is ranked, so its own share and the evicted one's reason see the
        // newcomer's tenant among the active ones.
        self.tenants.queue(&tenant);
        let mine = self.precedence(ticket.tier, &tenant);
        if !mine.within_share {
            self.over_share_at = Some(now);
        }
        // After `expire`, whoever still waits cannot have a place: the service is full, or they
        // are over their share and only the reserved places are left, or they are critical and
        // the overdraft is taken. So a place open to this request passes nobody who could take
        // it.
        if self.in_flight < self.open_to(mine) && (self.queue.is_empty() || mine.within_share) {
            self.tenants.unqueue(&tenant);
            return Arrival::Admitted(self.admit(tenant, ticket.tier, now));
        }
        let full = self.queue.len() >= self.queue_cap();
        if full && self.worst().is_none_or(|(_, p)| p >= mine) {
            let rejection = self.shed(ticket.tier, &tenant);
            self.tenants.unqueue(&tenant);
            return Arrival::Rejected(rejection);
        }
        if full {
            // Full queue: the newcomer takes the place of the queue's last.
            let worst = self.worst().map_or(0, |(i, _)| i);
            if let Some(e) = self.queue.take(worst, now) {
                let rejection = self.shed(e.tier, &e.tenant);
                self.tenants.unqueue(&e.tenant);
                settled.push(settle(e, Err(rejection)));
            }
        }
        let patient = mine.within_share && self.flooded(now);
        self.queue.entries.push(Entry {
            tenant,
            tier: ticket.tier,
            enqueued: now,
            waiter,
            patient,
        });
        Arrival::Queued {
            wait: self.queue.allowed_wait_of(ticket.tier, patient),
        }
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
        self.queue.set_no_load(self.alg.observed().min_rtt);
        let (gone, late) = self.queue.expire(now);
        for e in gone {
            self.tenants.unqueue(&e.tenant);
        }
        for e in late {
            self.tenants.unqueue(&e.tenant);
            settled.push(settle(e, Err(Rejection::new(Reason::QueueTimeout))));
        }
        while let Some((i, p)) = self.best() {
            // The best cannot go, so none can: over its share, all are, and the last places
            // wait for the others; not critical, none is, and the overdraft is not theirs.
            if self.in_flight >= self.open_to(p) {
                break;
            }
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
            .map(|(i, e)| (i, self.precedence(e.tier, &e.tenant)))
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
