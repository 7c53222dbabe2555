//! The gateway's limiter: every check goes to the store within a deadline, through a circuit,
//! and falls back on its limit's class when the store does not decide; leased tokens are spent
//! locally; billing counts admitted during an outage are charged to the store when it answers.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::call::{Counters, Mode};
use crate::circuit::{Circuit, CircuitConfig};
use crate::clock::{Clock, SystemClock};
use crate::command::{AllDecision, Class, Decision, Policy, Source};
use crate::deadline::Deadline;
use crate::fallback::Fallback;
use crate::lease::Leases;
use crate::ledger::Ledger;
use crate::observe::{self, LogRecord, LogSink};
use crate::{Error, Limit, Store};

/// The default `Config::max_deadline`.
pub const DEFAULT_MAX_DEADLINE: Duration = Duration::from_millis(20);

/// How a [`Limiter`] behaves; `Config::default()` is a sound start.
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

/// Counters a test or an operator can read without a metrics exporter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub store_calls: u64,
    pub lease_spent: u64,
    pub fallbacks: u64,
    pub lapsed_tokens: u64,
    /// Store calls that timed out. Such a call may still be applied by the store later (a
    /// stalled server runs what it had queued): a billing request whose check timed out and
    /// that the fallback then admitted may be counted twice, never zero times. (Charges of the
    /// ledger carry a token and count once.)
    pub timeouts: u64,
}

/// What `shutdown` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Unspent leased tokens given back with `RL.REFUND`.
    pub refunded: u64,
    /// Billing counts charged to the store.
    pub charged: u64,
    /// Billing counts the store could not take (or whose charge timed out), left in the journal
    /// for the next process (or lost without one).
    pub unsettled: u64,
}

pub(crate) struct Inner {
    pub(crate) store: Store,
    pub(crate) config: Config,
    pub(crate) circuit: Circuit,
    pub(crate) counters: Counters,
    pub(crate) fallback: Fallback,
    pub(crate) leases: Leases,
    pub(crate) ledger: Ledger,
    pub(crate) deadline: Deadline,
    /// Woken when the circuit opens: request calls still waiting stop waiting.
    pub(crate) opened: tokio::sync::Notify,
    decisions: AtomicU64,
    /// Reservations dropped without a settle (see `reservation`).
    pub(crate) dropped: crate::reservation::Dropped,
}

/// The limiter a gateway shares between its request handlers (cheap to clone).
#[derive(Clone)]
pub struct Limiter {
    pub(crate) inner: Arc<Inner>,
}

impl Limiter {
    /// A limiter over `store`; its calls get the deadlines of `config` (the store's own
    /// becomes the longest, `max_deadline`). Reads the billing journal, if any, back into the
    /// counts to charge.
    pub fn new(store: Store, config: Config) -> Limiter {
        let deadline = Deadline::new(config.deadline, config.max_deadline);
        let store = store.with_deadline(deadline.cap());
        let ledger = Ledger::new(config.billing_journal.as_deref());
        Limiter {
            inner: Arc::new(Inner {
                store,
                circuit: Circuit::new(config.circuit),
                config,
                counters: Counters::default(),
                fallback: Fallback::default(),
                leases: Leases::default(),
                ledger,
                deadline,
                opened: tokio::sync::Notify::new(),
                decisions: AtomicU64::new(0),
                dropped: Default::default(),
            }),
        }
    }

    /// The store, for typed calls without fallback.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The deadline of the next store call (between `Config::deadline` and `max_deadline`).
    pub fn deadline(&self) -> Duration {
        self.inner.deadline.current()
    }

    /// True while the circuit is open (or probing): the store is not being called.
    pub fn circuit_open(&self) -> bool {
        self.inner.circuit.is_open()
    }

    pub fn stats(&self) -> Stats {
        let c = &self.inner.counters;
        Stats {
            store_calls: c.store_calls.load(Ordering::Relaxed),
            lease_spent: c.lease_spent.load(Ordering::Relaxed),
            fallbacks: c.fallbacks.load(Ordering::Relaxed),
            lapsed_tokens: c.lapsed.load(Ordering::Relaxed),
            timeouts: c.timeouts.load(Ordering::Relaxed),
        }
    }

    /// Billing counts admitted without the store and not charged yet, by store key.
    pub fn unsettled(&self) -> HashMap<String, u64> {
        self.inner.ledger.unsettled()
    }

    /// One request of cost 1 on `key` under `limit`.
    pub async fn check(&self, limit: &Limit, key: &str) -> Result<Decision, Error> {
        self.check_cost(limit, key, 1).await
    }

    /// One request of cost `cost`. A denial is `Ok`; `Err` only for what no fallback may hide
    /// (the store rejected the limit's arguments, the key holds another type).
    pub async fn check_cost(&self, limit: &Limit, key: &str, cost: u64) -> Result<Decision, Error> {
        let started = Instant::now();
        let key = limit.store_key(key);
        let policy = limit.store_policy();
        let mut store_latency = None;
        let result = match limit.lease {
            Some(k) => {
                self.leased(&key, &policy, cost, k, &mut store_latency)
                    .await
            }
            None => self.decided(&key, &policy, cost, &mut store_latency).await,
        };
        let (decision, status) = match result {
            Ok(d) => {
                if limit.class != Class::Contract {
                    let now = self.inner.config.clock.now_ns();
                    self.inner.fallback.seen(limit, &key, &d, now);
                }
                (d, "ok")
            }
            Err(e) if e.store_down() => {
                (self.fall_back(limit, &key, &policy, cost, true), e.kind())
            }
            Err(e) => return Err(e),
        };
        self.observe(limit, &decision, started.elapsed(), store_latency, status);
        Ok(decision)
    }

    /// One atomic decision over several limits (`RL.ALL`): admitted only if every one admits.
    /// Keys are used as given (no lease, no split) and must share a hash slot on a Cluster.
    /// When the store does not decide, each limit's fallback decides and all must admit.
    pub async fn check_all(&self, checks: &[(&Limit, &str, u64)]) -> Result<AllDecision, Error> {
        let started = Instant::now();
        let args: Vec<(&str, Policy, u64)> =
            checks.iter().map(|(l, k, c)| (*k, l.policy, *c)).collect();
        let mut latency = None;
        let result = self
            .call(&mut latency, Mode::Request, self.inner.store.all(&args))
            .await;
        let (all, status) = match result {
            Ok(all) => {
                let now = self.inner.config.clock.now_ns();
                for ((l, k, _), d) in checks.iter().zip(&all.limiters) {
                    if l.class != Class::Contract {
                        self.inner.fallback.seen(l, k, d, now);
                    }
                }
                (all, "ok")
            }
            Err(e) if e.store_down() => {
                // Each fallback decides on a copy; only if all admit are they charged.
                let mut limiters: Vec<Decision> = checks
                    .iter()
                    .map(|(l, k, c)| self.fall_back(l, k, &l.policy, *c, false))
                    .collect();
                let admit = limiters.iter().all(|d| d.allowed);
                if admit {
                    limiters = checks
                        .iter()
                        .map(|(l, k, c)| self.fall_back(l, k, &l.policy, *c, true))
                        .collect();
                }
                (combine(&limiters, admit), e.kind())
            }
            Err(e) => return Err(e),
        };
        if let Some((first, _, _)) = checks.first() {
            self.observe(first, &all.combined, started.elapsed(), latency, status);
        }
        Ok(all)
    }

    fn observe(
        &self,
        limit: &Limit,
        d: &Decision,
        took: Duration,
        store_latency: Option<Duration>,
        status: &'static str,
    ) {
        observe::decision(&limit.name, limit.class, d, took, status);
        let every = self.inner.config.log_every;
        if every > 0
            && self
                .inner
                .decisions
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(every)
        {
            (self.inner.config.log_sink)(&LogRecord {
                limit: limit.name.clone(),
                class: limit.class,
                algorithm: limit.policy.algorithm,
                allowed: d.allowed,
                remaining: d.remaining,
                source: d.source,
                store_latency,
                status,
            });
        }
    }

    /// A clean shutdown: gives unspent leased tokens back, charges the store for billing counts,
    /// and writes what it could not charge to the journal (when configured).
    pub async fn shutdown(&self) -> ShutdownReport {
        let i = &self.inner;
        let store = i.store.clone().with_deadline(i.config.shutdown_deadline);
        let refunded = self.refund_leases(&store).await;
        let before = i.ledger.total();
        self.reconcile_once(true).await;
        let unsettled = i.ledger.total();
        i.ledger.close();
        ShutdownReport {
            refunded,
            charged: before.saturating_sub(unsettled),
            unsettled,
        }
    }
}

fn combine(limiters: &[Decision], admit: bool) -> AllDecision {
    let tightest = limiters
        .iter()
        .min_by_key(|d| d.remaining)
        .copied()
        .unwrap_or(Decision {
            allowed: admit,
            granted: 0,
            limit: 0,
            remaining: 0,
            retry_after_ms: None,
            reset_after_ms: 0,
            source: Source::Store,
        });
    let retry = limiters.iter().filter_map(|d| d.retry_after_ms).max();
    AllDecision {
        combined: Decision {
            allowed: admit,
            granted: u64::from(admit),
            retry_after_ms: if admit { None } else { retry.or(Some(1)) },
            reset_after_ms: limiters.iter().map(|d| d.reset_after_ms).max().unwrap_or(0),
            ..tightest
        },
        limiters: limiters.to_vec(),
    }
}
