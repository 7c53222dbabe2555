//! The call under the circuit: every store call a check makes goes through here, so the circuit
//! sees each success and failure, and the counters and metrics each call.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::circuit::Permit;
use crate::command::{Decision, Policy};
use crate::observe;
use crate::{Error, Limiter};

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

impl Limiter {
    /// One store call through the circuit, recorded either way.
    pub(crate) async fn call<T>(
        &self,
        latency: &mut Option<Duration>,
        mode: Mode,
        f: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let i = &self.inner;
        let permit = match mode {
            Mode::Forced => Permit::Call,
            _ => i.circuit.permit(i.config.clock.now_ns()),
        };
        if permit == Permit::Skip {
            return Err(Error::CircuitOpen);
        }
        i.counters.store_calls.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let result = if mode == Mode::Request {
            let deadline = i.deadline.current();
            // Registered before the call: an opening that happens while it waits wakes it.
            let opened = i.opened.notified();
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
                    i.counters.timeouts.fetch_add(1, Ordering::Relaxed);
                    if mode == Mode::Request {
                        i.deadline.record(took);
                    }
                }
                observe::store_call(took, Some(e.kind()));
                if i.circuit.failure(i.config.clock.now_ns(), permit) {
                    i.opened.notify_waiters();
                }
            }
            other => {
                if mode == Mode::Request {
                    i.deadline.record(took);
                }
                observe::store_call(took, other.as_ref().err().map(Error::kind));
                let recovered = i.circuit.success();
                self.store_answered(recovered);
            }
        }
        result
    }

    /// One decision by the store, under the circuit.
    pub(crate) async fn decided(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
        latency: &mut Option<Duration>,
    ) -> Result<Decision, Error> {
        let store = &self.inner.store;
        self.call(latency, Mode::Request, store.decide(key, policy, cost))
            .await
    }
}
