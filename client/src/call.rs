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

impl Limiter {
    /// One store call through the circuit: skipped while it is open, recorded either way.
    /// `force` calls even when the circuit is open (shutdown).
    pub(crate) async fn call<T>(
        &self,
        latency: &mut Option<Duration>,
        force: bool,
        f: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let i = &self.inner;
        if !force && i.circuit.permit(i.config.clock.now_ns()) == Permit::Skip {
            return Err(Error::CircuitOpen);
        }
        i.counters.store_calls.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let result = f.await;
        let took = started.elapsed();
        *latency = Some(took);
        match &result {
            Err(e) if e.store_down() => {
                if *e == Error::Timeout {
                    i.counters.timeouts.fetch_add(1, Ordering::Relaxed);
                }
                observe::store_call(took, Some(e.kind()));
                i.circuit.failure(i.config.clock.now_ns());
            }
            other => {
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
        self.call(latency, false, store.decide(key, policy, cost))
            .await
    }
}
