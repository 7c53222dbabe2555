//! The shedder a layer or the sidecar holds: the admission core behind a lock, its clock, and
//! permits that give their place back when dropped, so a request cancelled anywhere (the caller
//! hung up, a timeout above, a panic) leaves the count right.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

use crate::admission::{Admission, Arrival, Completion, Grant, QueueSettings, Settled, Ticket};
use crate::clock::{Clock, MonotonicClock};
use crate::gradient::{Gradient, GradientSettings};
use crate::limit::{Bounds, LimitAlgorithm};
use crate::meter;
use crate::queue::Waiter;
use crate::rejection::{Reason, Rejection};

type Handoff = oneshot::Sender<Result<Permit, Rejection>>;

impl Waiter for Handoff {
    fn is_closed(&self) -> bool {
        oneshot::Sender::is_closed(self)
    }
}

/// Everything the shedder can be told; nothing is required.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Settings {
    pub bounds: Bounds,
    pub gradient: GradientSettings,
    pub queue: QueueSettings,
}

struct Inner {
    state: Mutex<Admission<Handoff>>,
    clock: Arc<dyn Clock>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Admission<Handoff>> {
        // The state is kept consistent between statements; a panic elsewhere cannot break it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The figures a test or a status page reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stats {
    pub limit: usize,
    pub in_flight: usize,
    pub queued: usize,
    pub active_tenants: usize,
}

#[derive(Clone)]
pub struct Shedder {
    inner: Arc<Inner>,
}

impl Shedder {
    /// The gradient limit on the monotonic clock; refuses contradictory settings by name.
    pub fn new(settings: Settings) -> Result<Shedder, String> {
        let alg = Gradient::new(settings.bounds, settings.gradient)?;
        Ok(Shedder::with(
            Box::new(alg),
            settings.queue,
            Arc::new(MonotonicClock::default()),
        ))
    }

    /// Any limit algorithm, any clock (tests: a `ManualClock` and recorded latencies).
    pub fn with(
        alg: Box<dyn LimitAlgorithm>,
        queue: QueueSettings,
        clock: Arc<dyn Clock>,
    ) -> Shedder {
        Shedder {
            inner: Arc::new(Inner {
                state: Mutex::new(Admission::new(alg, queue)),
                clock,
            }),
        }
    }

    pub fn stats(&self) -> Stats {
        let s = self.inner.lock();
        Stats {
            limit: s.limit(),
            in_flight: s.in_flight(),
            queued: s.queued(),
            active_tenants: s.active_tenants(),
        }
    }

    /// The limit algorithm's own figures (no-load latency, gradient, probing).
    pub fn observed(&self) -> crate::limit::Observed {
        self.inner.lock().algorithm().observed()
    }

    /// Admits the request now, after a short wait in the queue, or sheds it with a reason.
    pub async fn acquire(&self, ticket: &Ticket) -> Result<Permit, Rejection> {
        let (tx, mut rx) = oneshot::channel();
        let mut settled = Vec::new();
        let arrival = {
            let mut s = self.inner.lock();
            let now = self.inner.clock.now();
            let arrival = s.arrive(now, ticket, tx, &mut settled);
            publish(&s);
            arrival
        };
        self.inner.deliver(settled);
        match arrival {
            Arrival::Admitted(grant) => {
                meter::admitted(grant.tier);
                Ok(Permit::new(self.inner.clone(), grant))
            }
            Arrival::Rejected(r) => {
                meter::rejected(ticket.tier, &ticket.tenant, r.reason);
                Err(r)
            }
            Arrival::Queued { wait } => {
                tokio::select! {
                    r = &mut rx => r.unwrap_or(Err(Rejection::new(Reason::Overloaded))),
                    () = self.inner.clock.sleep(wait) => {
                        // An admission may have crossed the timer: take it rather than lose it.
                        rx.close();
                        match rx.try_recv() {
                            Ok(r) => r,
                            Err(_) => {
                                meter::rejected(ticket.tier, &ticket.tenant, Reason::QueueTimeout);
                                self.expire();
                                Err(Rejection::new(Reason::QueueTimeout))
                            }
                        }
                    }
                }
            }
        }
    }

    /// Sheds the queued requests that waited too long and drops cancelled ones (every arrival
    /// and completion does this; a test on a manual clock calls it after advancing).
    pub fn expire(&self) {
        let mut settled = Vec::new();
        {
            let mut s = self.inner.lock();
            s.expire(self.inner.clock.now(), &mut settled);
            publish(&s);
        }
        self.inner.deliver(settled);
    }
}

impl Inner {
    /// Sends queued requests their fate, outside the lock. A permit whose caller is gone comes
    /// back from `send` and is dropped here, which gives its place back.
    fn deliver(self: &Arc<Self>, settled: Vec<Settled<Handoff>>) {
        for s in settled {
            match s.outcome {
                Ok(grant) => {
                    meter::admitted(grant.tier);
                    let _ = s.waiter.send(Ok(Permit::new(self.clone(), grant)));
                }
                Err(r) => {
                    meter::rejected(s.tier, &s.tenant, r.reason);
                    let _ = s.waiter.send(Err(r));
                }
            }
        }
    }
}

fn publish(s: &Admission<Handoff>) {
    meter::levels(&meter::Levels {
        limit: s.limit(),
        in_flight: s.in_flight(),
        queued: s.queued(),
        active_tenants: s.active_tenants(),
        observed: s.algorithm().observed(),
    });
}

/// A place in flight. Dropped without [`Permit::finish`] it counts as cancelled: the place is
/// given back, and no latency is sampled.
pub struct Permit {
    inner: Arc<Inner>,
    grant: Grant,
    how: Completion,
}

impl Permit {
    fn new(inner: Arc<Inner>, grant: Grant) -> Permit {
        Permit {
            inner,
            grant,
            how: Completion::Cancelled,
        }
    }

    /// Ends the request: its latency (up to now) and whether the service was overloaded.
    pub fn finish(mut self, how: Completion) {
        self.how = how;
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut settled = Vec::new();
        {
            let mut s = self.inner.lock();
            let now = self.inner.clock.now();
            s.complete(now, &self.grant, self.how, &mut settled);
            publish(&s);
        }
        self.inner.deliver(settled);
    }
}
