//! The interface between the limiter and the limit algorithm (STYLE.md 19): the limiter counts
//! requests in flight and reports one [`Sample`] per completed request; the algorithm answers the
//! concurrency limit. An algorithm is pure (no clock, no I/O: a sample carries its own time), so
//! its tests replay recorded samples.

use std::time::Duration;

/// One completed request, as the limiter saw it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// When the request completed, on the limiter's clock (any origin, never going back).
    pub at: Duration,
    /// From admission (a permit taken) to completion: the service's latency, no queue wait.
    pub rtt: Duration,
    /// Requests in flight when this one was admitted, itself included.
    pub in_flight: usize,
    /// The service said it was overloaded (a 503/504, a timeout, an error from its transport).
    pub dropped: bool,
}

/// What an algorithm can say about itself, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Observed {
    /// The no-load latency the algorithm compares against.
    pub min_rtt: Option<Duration>,
    /// The last window's gradient (no-load latency with its tolerance ÷ the window's latency).
    pub gradient: f64,
    /// Whether the algorithm is measuring its no-load latency at reduced concurrency now.
    pub probing: bool,
}

/// A concurrency limit algorithm fed samples.
pub trait LimitAlgorithm: Send {
    /// Takes one completed request into account.
    fn on_sample(&mut self, sample: Sample);
    /// The number of requests allowed in flight now (at least 1).
    fn limit(&self) -> usize;
    /// The limit outside a measurement at reduced concurrency (a probe): what the queue in front
    /// of the service is sized by, so that a probe's few tens of milliseconds shed no more than
    /// they hold back. The same as `limit` for an algorithm that does not probe.
    fn steady_limit(&self) -> usize {
        self.limit()
    }
    /// How many more than `limit` a critical request of a tenant within its share may find in
    /// flight and still be admitted at once (none unless the algorithm says so: a fixed limit
    /// is a hard one).
    fn critical_overdraft(&self) -> usize {
        0
    }
    /// Internal figures for the metrics.
    fn observed(&self) -> Observed;
}

/// Optional bounds an operator may set; none is needed. A bound that contradicts another is
/// refused by [`Bounds::validate`], never silently adjusted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounds {
    /// The limit never goes below this (default 3; also the concurrency at which the no-load
    /// latency is measured, so it should be at most the service's worker count).
    pub min_limit: usize,
    /// The limit never goes above this (default 1,000).
    pub max_limit: usize,
    /// The limit at start (default 10: safe for most services until latency says more).
    pub initial_limit: usize,
    /// A latency the service should keep: when a window's mean latency is above it, the limit
    /// shrinks even if the no-load comparison would allow more (default none).
    pub latency_target: Option<Duration>,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            min_limit: 3,
            max_limit: 1_000,
            initial_limit: 10,
            latency_target: None,
        }
    }
}

impl Bounds {
    /// Refuses bounds that cannot all hold.
    pub fn validate(&self) -> Result<(), String> {
        if self.min_limit == 0 {
            return Err("min_limit must be at least 1".into());
        }
        if self.min_limit > self.max_limit {
            return Err(format!(
                "min_limit {} is above max_limit {}",
                self.min_limit, self.max_limit
            ));
        }
        if self.initial_limit < self.min_limit || self.initial_limit > self.max_limit {
            return Err(format!(
                "initial_limit {} is outside min_limit {} ..= max_limit {}",
                self.initial_limit, self.min_limit, self.max_limit
            ));
        }
        if self.latency_target == Some(Duration::ZERO) {
            return Err("latency_target must be above zero".into());
        }
        Ok(())
    }
}

/// A limit that never moves: what tower's `ConcurrencyLimit` does, for comparisons and for
/// operators who pin `min_limit = max_limit`.
#[derive(Clone, Copy, Debug)]
pub struct FixedLimit(pub usize);

impl LimitAlgorithm for FixedLimit {
    fn on_sample(&mut self, _: Sample) {}
    fn limit(&self) -> usize {
        self.0.max(1)
    }
    fn observed(&self) -> Observed {
        Observed::default()
    }
}
