//! How a [`Limiter`](crate::Limiter) behaves: its deadlines, the number of gateways its
//! fallbacks share the store with, its leases, logs and billing journal.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::circuit::CircuitConfig;
use crate::clock::{Clock, SystemClock};
use crate::observe::{self, LogSink};

/// The default `Config::max_deadline`.
pub const DEFAULT_MAX_DEADLINE: Duration = Duration::from_millis(20);

/// How a [`Limiter`](crate::Limiter) behaves; `Config::default()` is a sound start.
#[derive(Clone)]
pub struct Config {
    /// The shortest deadline of a check's store call: the longest it waits for the store before
    /// its class's fallback decides while the store answers within it.
    pub deadline: Duration,
    /// The longest deadline: a store slower than usual but answering (a busy host) stretches
    /// the deadline to 4 × its recent p99, up to this (docs/client.md, "Deadlines"). At or below
    /// `deadline`: the deadline is fixed.
    pub max_deadline: Duration,
    /// N, the number of gateways sharing the store: the local fallbacks take L/N. `None`: the
    /// security class fails closed (unless a limit sets its own local limit), the contract
    /// class takes L.
    pub gateways: Option<u32>,
    pub circuit: CircuitConfig,
    /// How long leased tokens may be spent after the grant; then they lapse.
    pub lease_lifetime: Duration,
    /// The deadline of each store call during `shutdown` (refunds, billing flush).
    pub shutdown_deadline: Duration,
    /// `Retry-After` of a fail-closed security decision.
    pub fail_closed_retry: Duration,
    /// The client's clock (leases, local buckets, circuit backoff).
    pub clock: Arc<dyn Clock>,
    /// Log one decision in this many (0: none).
    pub log_every: u64,
    pub log_sink: LogSink,
    /// The billing journal: every count Billing admits without the store is appended here
    /// before the request proceeds (fsynced in batches), and every charge before it is sent;
    /// the next `Limiter` with the same path replays it. One path per process.
    pub billing_journal: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            deadline: crate::store::DEFAULT_DEADLINE,
            max_deadline: DEFAULT_MAX_DEADLINE,
            gateways: None,
            circuit: CircuitConfig::default(),
            lease_lifetime: Duration::from_secs(1),
            shutdown_deadline: Duration::from_secs(2),
            fail_closed_retry: Duration::from_secs(1),
            clock: Arc::new(SystemClock::new()),
            log_every: 1000,
            log_sink: observe::log_sink(),
            billing_journal: None,
        }
    }
}
