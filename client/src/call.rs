//! The call under the circuit: every store call a check makes goes through here, so the circuit
//! sees each success and failure, and the counters and metrics each call.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::circuit::{Circuit, Permit};
use crate::command::{Decision, Policy};
use crate::config::Config;
use crate::deadline::Deadline;
use crate::error::Error;
use crate::observe;
use crate::store::Store;

/// What the limiter counts (read as [`Stats`](crate::Stats)).
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) store_calls: AtomicU64,
    pub(crate) lease_spent: AtomicU64,
    pub(crate) fallbacks: AtomicU64,
    pub(crate) lapsed: AtomicU64,
    pub(crate) timeouts: AtomicU64,
}

/// How a store call meets the circuit and the deadline.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A request's call: skipped while the circuit is open, bounded by the adaptive deadline,
    /// released at once when the circuit opens while it waits.
    Request,
    /// The ledger's charges: skipped while the circuit is open, bounded by the store's own
    /// deadline (`shutdown_deadline`).
    Background,
    /// Shutdown: made even when the circuit is open.
    Forced,
}

/// What the limiter's concerns (leases, fallback, the billing ledger, reservations) share: the
/// store, the configuration, and what each store call meets on its way.
pub(crate) struct Shared {
    pub(crate) store: Store,
    pub(crate) config: Config,
    pub(crate) circuit: Circuit,
    pub(crate) counters: Counters,
    pub(crate) deadline: Deadline,
    /// Woken when the circuit opens: request calls still waiting stop waiting.
    pub(crate) opened: tokio::sync::Notify,
    answered: Answered,
}

/// Told of every store call that the store answered, and whether it closed the circuit: the
/// billing ledger, above, charges then what it owes.
pub(crate) type Answered = Box<dyn Fn(&Arc<Shared>, bool) + Send + Sync>;

impl Shared {
    /// What the calls over `store` share; they get the deadlines of `config` (the store's own
    /// becomes the longest, `max_deadline`).
    pub(crate) fn new(store: Store, config: Config, answered: Answered) -> Shared {
        let deadline = Deadline::new(config.deadline, config.max_deadline);
        let store = store.with_deadline(deadline.cap());
        Shared {
            store,
            circuit: Circuit::new(config.circuit),
            config,
            counters: Counters::default(),
            deadline,
            opened: tokio::sync::Notify::new(),
            answered,
        }
    }

    /// One store call through the circuit, recorded either way.
    pub(crate) async fn call<T>(
        self: &Arc<Self>,
        latency: &mut Option<Duration>,
        mode: Mode,
        f: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let permit = match mode {
            Mode::Forced => Permit::Call,
            _ => self.circuit.permit(self.config.clock.now_ns()),
        };
        if permit == Permit::Skip {
            return Err(Error::CircuitOpen);
        }
        self.counters.store_calls.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let result = if mode == Mode::Request {
            let deadline = self.deadline.current();
            // Registered before the call: an opening that happens while it waits wakes it.
            let opened = self.opened.notified();
            tokio::pin!(opened);
            opened.as_mut().enable();
            let released = permit == Permit::Call;
            tokio::select! {
                biased;
                r = tokio::time::timeout(deadline, f) => r.unwrap_or(Err(Error::Timeout)),
                // Other calls timed out and opened the circuit: this one stops waiting too (it
                // may still run on the store, as a timed-out call may).
                () = &mut opened, if released => Err(Error::Timeout),
            }
        } else {
            f.await
        };
        let took = started.elapsed();
        *latency = Some(took);
        match &result {
            Err(e) if e.store_down() => {
                if *e == Error::Timeout {
                    self.counters.timeouts.fetch_add(1, Ordering::Relaxed);
                    if mode == Mode::Request {
                        self.deadline.record(took);
                    }
                }
                observe::store_call(took, Some(e.kind()));
                if self.circuit.failure(self.config.clock.now_ns(), permit) {
                    self.opened.notify_waiters();
                }
            }
            other => {
                if mode == Mode::Request {
                    self.deadline.record(took);
                }
                observe::store_call(took, other.as_ref().err().map(Error::kind));
                let recovered = self.circuit.success();
                (self.answered)(self, recovered);
            }
        }
        result
    }

    /// One decision by the store, under the circuit.
    pub(crate) async fn decided(
        self: &Arc<Self>,
        key: &str,
        policy: &Policy,
        cost: u64,
        latency: &mut Option<Duration>,
    ) -> Result<Decision, Error> {
        let store = &self.store;
        self.call(latency, Mode::Request, store.decide(key, policy, cost))
            .await
    }
}
