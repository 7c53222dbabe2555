//! The gateway's limiter: every check goes to the store within a deadline, through a circuit,
//! and falls back on its limit's class when the store does not decide; leased tokens are spent
//! locally; billing counts admitted during an outage are charged to the store when it answers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::billing::ledger::Ledger;
use crate::call::{Answered, Mode, Shared};
use crate::command::{AllDecision, Class, Decision, Policy, Source};
use crate::config::Config;
use crate::error::Error;
use crate::fallback::Fallback;
use crate::lease::Leases;
use crate::limit::Limit;
use crate::observe::{self, LogRecord};
use crate::reservation::{Dropped, Reservation};
use crate::store::{AllEntry, SlotEntry, Store};

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
    /// Store calls sent again after their connection broke ([`Store::resent`]). The break may
    /// have come after the server applied the first send, so each of these, like a timeout, may
    /// have counted once more than its request (the retry counted too, or the retry failed and
    /// the fallback admitted it).
    pub resent: u64,
}

impl Stats {
    /// The most a store can have counted beyond what this limiter's requests were admitted for:
    /// one per call that timed out or was sent again (docs/client.md, billing).
    pub fn uncertain(&self) -> u64 {
        self.timeouts.saturating_add(self.resent)
    }
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

/// The concerns' state, each beside the others: every store call goes through `shared`.
struct Inner {
    shared: Arc<Shared>,
    fallback: Fallback,
    leases: Leases,
    ledger: Arc<Ledger>,
    /// Reservations dropped without a settle (see `reservation`).
    dropped: Arc<Dropped>,
    decisions: AtomicU64,
}

/// The limiter a gateway shares between its request handlers (cheap to clone).
#[derive(Clone)]
pub struct Limiter {
    inner: Arc<Inner>,
}

impl Limiter {
    /// A limiter over `store`; its calls get the deadlines of `config` (the store's own
    /// becomes the longest, `max_deadline`). Reads the billing journal, if any, back into the
    /// counts to charge.
    pub fn new(store: Store, config: Config) -> Limiter {
        let ledger = Arc::new(Ledger::new(config.billing_journal.as_deref()));
        let billing = ledger.clone();
        let answered: Answered =
            Box::new(move |shared, recovered| billing.store_answered(shared, recovered));
        Limiter {
            inner: Arc::new(Inner {
                shared: Arc::new(Shared::new(store, config, answered)),
                fallback: Fallback::default(),
                leases: Leases::default(),
                ledger,
                dropped: Default::default(),
                decisions: AtomicU64::new(0),
            }),
        }
    }

    /// What the limiter's concerns share (the concurrency slots use it beside the checks).
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    /// The store, for typed calls without fallback.
    pub fn store(&self) -> &Store {
        &self.inner.shared.store
    }

    /// The deadline of the next store call (between `Config::deadline` and `max_deadline`).
    pub fn deadline(&self) -> Duration {
        self.inner.shared.deadline.current()
    }

    /// True while the circuit is open (or probing): the store is not being called.
    pub fn circuit_open(&self) -> bool {
        self.inner.shared.circuit.is_open()
    }

    pub fn stats(&self) -> Stats {
        let c = &self.inner.shared.counters;
        Stats {
            store_calls: c.store_calls.load(Ordering::Relaxed),
            lease_spent: c.lease_spent.load(Ordering::Relaxed),
            fallbacks: c.fallbacks.load(Ordering::Relaxed),
            lapsed_tokens: c.lapsed.load(Ordering::Relaxed),
            timeouts: c.timeouts.load(Ordering::Relaxed),
            resent: self.inner.shared.store.resent(),
        }
    }

    /// Billing counts admitted without the store and not charged yet, by store key.
    pub fn unsettled(&self) -> HashMap<String, u64> {
        self.inner.ledger.unsettled()
    }

    /// Charges the store for what billing admitted while it did not answer (each call with
    /// the shutdown deadline: this is not on a request's path). Each charge carries a token the
    /// store records in the same atomic call, so a charge that timed out and is sent again (now,
    /// or by the next process from the journal) counts once. Counts the store cannot take yet
    /// (the quota is spent) stay owed and are charged as it refills: a successful store call
    /// starts another reconcile at most once per second while anything is owed.
    pub async fn reconcile(&self) {
        let i = &self.inner;
        i.ledger.reconcile_once(&i.shared, false).await;
    }

    /// One request of cost 1 on `key` under `limit`.
    pub async fn check(&self, limit: &Limit, key: &str) -> Result<Decision, Error> {
        self.check_cost(limit, key, 1).await
    }

    /// One request of cost `cost`. A denial is `Ok`; `Err` only for what no fallback may hide
    /// (the store rejected the limit's arguments, the key holds another type).
    pub async fn check_cost(&self, limit: &Limit, key: &str, cost: u64) -> Result<Decision, Error> {
        if limit.class == Class::Capacity {
            return Ok(Decision::to_shedder(&limit.policy, cost));
        }
        let started = Instant::now();
        let key = limit.store_key(key);
        let policy = limit.store_policy();
        let mut store_latency = None;
        let i = &self.inner;
        let result = match limit.lease {
            Some(k) => {
                let (shared, latency) = (&i.shared, &mut store_latency);
                i.leases
                    .leased(shared, &key, &policy, cost, k, latency)
                    .await
            }
            None => {
                i.shared
                    .decided(&key, &policy, cost, &mut store_latency)
                    .await
            }
        };
        let (decision, status) = match result {
            Ok(d) => {
                if limit.class != Class::Contract {
                    let now = self.inner.shared.config.clock.now_ns();
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
        // Capacity-class limits never reach the store: the others decide, and they are spliced
        // back in place, admitted.
        if checks.iter().any(|(l, _, _)| l.class == Class::Capacity) {
            let stored: Vec<_> = checks
                .iter()
                .filter(|(l, _, _)| l.class != Class::Capacity)
                .copied()
                .collect();
            let decided = match stored.is_empty() {
                true => Vec::new(),
                false => Box::pin(self.check_all(&stored)).await?.limiters,
            };
            let mut decided = decided.into_iter();
            let limiters: Vec<Decision> = checks
                .iter()
                .filter_map(|(l, _, c)| match l.class {
                    Class::Capacity => Some(Decision::to_shedder(&l.policy, *c)),
                    _ => decided.next(),
                })
                .collect();
            let admit = limiters.iter().all(|d| d.allowed);
            return Ok(combine(&limiters, admit));
        }
        let started = Instant::now();
        let args: Vec<(&str, Policy, u64)> =
            checks.iter().map(|(l, k, c)| (*k, l.policy, *c)).collect();
        let mut latency = None;
        let shared = &self.inner.shared;
        let result = shared
            .call(&mut latency, Mode::Request, shared.store.all(&args))
            .await;
        let (all, status) = match result {
            Ok(all) => {
                let now = self.inner.shared.config.clock.now_ns();
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

    /// One atomic `RL.ALL` over rate checks and concurrency slots (module backend), under the
    /// circuit and the request deadline: the decisions of `checks`, then those of `slots`, in
    /// order. No fallback here: when the store does not decide the error says so
    /// ([`Error::store_down`]) and the caller decides by class, the rate checks through
    /// [`Limiter::fall_back_all`]. Keys as given, in one hash slot on a Cluster; a
    /// capacity-class check is refused (it never goes to the store).
    pub async fn check_all_slots(
        &self,
        checks: &[(&Limit, &str, u64)],
        slots: &[(&str, SlotEntry<'_>)],
    ) -> Result<AllDecision, Error> {
        if checks.iter().any(|(l, _, _)| l.class == Class::Capacity) {
            return Err(Error::Config(
                "a capacity-class limit is not decided beside concurrency slots".into(),
            ));
        }
        let mut entries: Vec<(&str, AllEntry<'_>)> = checks
            .iter()
            .map(|(l, k, c)| (*k, AllEntry::Rate(l.policy, *c)))
            .collect();
        entries.extend(slots.iter().map(|(k, s)| (*k, AllEntry::Slot(*s))));
        let shared = &self.inner.shared;
        let all = shared
            .call(&mut None, Mode::Request, shared.store.all_entries(&entries))
            .await?;
        let now = shared.config.clock.now_ns();
        for ((l, k, _), d) in checks.iter().zip(&all.limiters) {
            if l.class != Class::Contract {
                self.inner.fallback.seen(l, k, d, now);
            }
        }
        Ok(all)
    }

    /// One `RL.CONCURRENCY` call (`FCALL rl_concurrency` on the library) under the circuit
    /// and the request deadline, without a guard: the caller releases. No fallback here.
    pub async fn slot_call(&self, key: &str, slot: SlotEntry<'_>) -> Result<Decision, Error> {
        let shared = &self.inner.shared;
        let call = shared
            .store
            .concurrency(key, slot.limit, slot.ttl_ms, slot.op);
        shared.call(&mut None, Mode::Request, call).await
    }

    /// `RL.SETTLE` over `limiters` (each by its own signed difference: a charge into debt, a
    /// give-back) under the circuit and the request deadline, as every check's call. No
    /// fallback: the caller decides what an unanswered settle means.
    pub async fn settle_call(
        &self,
        limiters: &[(&str, Policy, i64)],
    ) -> Result<AllDecision, Error> {
        let shared = &self.inner.shared;
        let call = shared.store.settle(limiters);
        shared.call(&mut None, Mode::Request, call).await
    }

    /// `RL.CHARGE key n [POLICY …]` under the circuit and the request deadline (see
    /// [`Store::charge`]). No fallback.
    pub async fn charge_call(
        &self,
        key: &str,
        n: u64,
        policy: Option<&Policy>,
    ) -> Result<Option<Decision>, Error> {
        let shared = &self.inner.shared;
        let call = shared.store.charge(key, n, policy);
        shared.call(&mut None, Mode::Request, call).await
    }

    /// Each check's class decides without the store (as [`Limiter::check_all`] does when the
    /// store does not answer); `commit` false decides on a copy, so that a caller admits only
    /// when every limit (its own slots too) admits, then commits. A commit counts as a
    /// fallback each.
    pub fn fall_back_all(&self, checks: &[(&Limit, &str, u64)], commit: bool) -> Vec<Decision> {
        checks
            .iter()
            .map(|(l, k, c)| self.fall_back(l, k, &l.policy, *c, commit))
            .collect()
    }

    /// The class's decision without the store. `commit` false decides on a copy (RL.ALL's
    /// first pass).
    fn fall_back(
        &self,
        limit: &Limit,
        key: &str,
        policy: &Policy,
        cost: u64,
        commit: bool,
    ) -> Decision {
        let i = &self.inner;
        i.fallback
            .decide(&i.shared, &i.ledger, limit, key, policy, cost, commit)
    }

    /// Reserves `estimate` tokens on every `(limit, key)` at once (`RL.ALL`, keys used as given,
    /// in one hash slot on a Cluster): admitted only if every limit admits. Settle the
    /// reservation when the request is done; a denied one has nothing to settle.
    pub async fn reserve(
        &self,
        limits: &[(&Limit, &str)],
        estimate: u64,
    ) -> Result<Reservation, Error> {
        let checks: Vec<(&Limit, &str, u64)> =
            limits.iter().map(|(l, k)| (*l, *k, estimate)).collect();
        let decision = self.check_all(&checks).await?;
        let i = &self.inner;
        let (shared, ledger, dropped) = (i.shared.clone(), i.ledger.clone(), i.dropped.clone());
        Ok(Reservation::new(
            shared, ledger, dropped, limits, estimate, decision,
        ))
    }

    /// Gives back the estimates of reservations dropped without a settle whose grace has run
    /// out (on the client's clock); returns how many reservations went back. Dropping a
    /// reservation schedules this after its grace; a test with a `ManualClock` calls it.
    pub async fn give_back_dropped(&self) -> usize {
        self.inner.dropped.give_back(&self.inner.shared).await
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
        let every = self.inner.shared.config.log_every;
        if every > 0
            && self
                .inner
                .decisions
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(every)
        {
            (self.inner.shared.config.log_sink)(&LogRecord {
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
        let store = i
            .shared
            .store
            .clone()
            .with_deadline(i.shared.config.shutdown_deadline);
        let refunded = i.leases.refund(&i.shared, &store).await;
        let before = i.ledger.total();
        i.ledger.reconcile_once(&i.shared, true).await;
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
