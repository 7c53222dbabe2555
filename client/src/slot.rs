//! Concurrency slots (`RL.CONCURRENCY`): [`Limiter::acquire`] takes one slot of a key for a
//! request in flight and hands back a [`SlotGuard`], which renews the slot while the request
//! lasts (a stream longer than the TTL keeps it) and gives it back when dropped, also when the
//! future holding it is cancelled. A slot whose RELEASE is lost frees itself TTL after its last
//! renewal. On the Functions library and the scripts backend the release is a bare `ZREM key
//! id` (the library's holders are a sorted set scored by expiry): the module's RELEASE there.
//!
//! When the store does not answer the ACQUIRE, the limit's class decides on this gateway alone:
//! - Contract: a local count per key of N ÷ gateways (`Config::gateways`; N when unset), so
//!   the fleet together stays near N;
//! - Security: closed, denied with `Config::fail_closed_retry`;
//! - Billing: open, admitted and counted nowhere (a slot bounds load, not money owed).
//!
//! Such a local slot never reaches the store: it is given back to the local count on drop.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::call::{Mode, Shared};
use crate::command::{Class, Decision, Source};
use crate::error::Error;
use crate::fallback::MAX_LOCAL_KEYS;
use crate::limiter::Limiter;
use crate::store::SlotOp;
use crate::sync::lock;

/// At most `limit` requests in flight per key; a holder that is never released frees its slot
/// `ttl` after its last acquire or renewal. Clones share the local counts of the fallback.
#[derive(Clone)]
pub struct ConcurrencyLimit {
    name: String,
    limit: u64,
    ttl_ms: u64,
    class: Class,
    renew_every: Duration,
    local: Arc<Mutex<HashMap<String, u64>>>,
}

impl ConcurrencyLimit {
    /// N = `limit` (1 to 1,000, the module's bound), a holder's TTL `ttl` (whole milliseconds,
    /// at least 1); a guard renews its slot every TTL/3.
    pub fn new(name: &str, limit: u64, ttl: Duration, class: Class) -> ConcurrencyLimit {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        ConcurrencyLimit {
            name: name.to_string(),
            limit,
            ttl_ms,
            class,
            renew_every: Duration::from_millis((ttl_ms / 3).max(1)),
            local: Arc::default(),
        }
    }

    /// How often a guard renews its slot (shorter than the TTL, or the slot lapses).
    pub fn renew_every(mut self, every: Duration) -> ConcurrencyLimit {
        self.renew_every = every.max(Duration::from_millis(1));
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// What the class decides without the store (see the module comment).
    fn fall_back(&self, key: &str, shared: &Shared) -> Slot {
        let source = Source::Fallback(self.class);
        let answer = |allowed: bool, limit: u64, remaining: u64, retry: Option<u64>| Decision {
            allowed,
            granted: u64::from(allowed),
            limit,
            remaining,
            retry_after_ms: retry,
            reset_after_ms: if allowed { self.ttl_ms } else { 0 },
            source,
        };
        match self.class {
            Class::Billing => Slot {
                decision: answer(true, self.limit, self.limit, None),
                guard: Some(SlotGuard { held: Held::Open }),
            },
            Class::Security => {
                let retry =
                    u64::try_from(shared.config.fail_closed_retry.as_millis()).unwrap_or(1000);
                Slot {
                    decision: answer(false, self.limit, 0, Some(retry)),
                    guard: None,
                }
            }
            // Capacity is a local decision anyway (the shedder's class): a local count here too.
            Class::Contract | Class::Capacity => {
                let gateways = u64::from(shared.config.gateways.unwrap_or(1).max(1));
                let share = (self.limit / gateways).max(1);
                let mut counts = lock(&self.local);
                if counts.len() >= MAX_LOCAL_KEYS {
                    counts.retain(|_, n| *n > 0);
                }
                let held = counts.entry(key.to_string()).or_insert(0);
                if *held >= share {
                    // No expiry to wait for here: try again about when a request ends.
                    let retry = self.renew_every.as_millis().max(1);
                    return Slot {
                        decision: answer(false, share, 0, u64::try_from(retry).ok()),
                        guard: None,
                    };
                }
                *held += 1;
                Slot {
                    decision: answer(true, share, share - *held, None),
                    guard: Some(SlotGuard {
                        held: Held::Local {
                            counts: self.local.clone(),
                            key: key.to_string(),
                        },
                    }),
                }
            }
        }
    }
}

/// What [`Limiter::acquire`] answered: the decision (a denial's `retry_after_ms` is when the
/// earliest holder's slot frees) and, when admitted, the guard that holds the slot.
pub struct Slot {
    pub decision: Decision,
    pub guard: Option<SlotGuard>,
}

/// Holds one slot: renews it every `renew_every` while it lives and gives it back when dropped
/// (a background RELEASE on the current Tokio runtime; without one, the slot frees at its TTL).
/// [`SlotGuard::release`] gives it back and waits for the answer.
pub struct SlotGuard {
    held: Held,
}

enum Held {
    /// A slot of the store's key, and the task renewing it.
    Store {
        call: Arc<StoreSlot>,
        renewer: JoinHandle<()>,
    },
    /// A slot of the Contract fallback's local count.
    Local {
        counts: Arc<Mutex<HashMap<String, u64>>>,
        key: String,
    },
    /// Billing's fallback: nothing is held anywhere.
    Open,
    Released,
}

/// One slot of the store: its key, N, TTL and holder id, and the calls it makes.
struct StoreSlot {
    shared: Arc<Shared>,
    key: String,
    id: String,
    limit: u64,
    ttl_ms: u64,
    renewals: AtomicU64,
}

impl StoreSlot {
    /// One call on the slot, outside any request (the store's longer deadline, under the
    /// circuit: while it is open the call is skipped and the slot lives on its TTL).
    async fn call(&self, op: SlotOp<'_>) -> Result<Decision, Error> {
        let store = self
            .shared
            .store
            .clone()
            .with_deadline(self.shared.config.shutdown_deadline);
        let call = store.concurrency(&self.key, self.limit, self.ttl_ms, op);
        self.shared.call(&mut None, Mode::Background, call).await
    }

    /// Gives the slot back (a bare ZREM on the library's backends: [`crate::Store::release_slot`]):
    /// whether the store held it. Under the circuit and the longer deadline, as `call`.
    async fn release(&self) -> Result<bool, Error> {
        let store = self
            .shared
            .store
            .clone()
            .with_deadline(self.shared.config.shutdown_deadline);
        let call = store.release_slot(&self.key, self.limit, self.ttl_ms, &self.id);
        self.shared.call(&mut None, Mode::Background, call).await
    }

    /// Renews every `every`; a slot found gone (it lapsed while renewals failed) is taken again
    /// when one is free.
    async fn renew(self: Arc<Self>, every: Duration) {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            tick.tick().await;
            if let Ok(d) = self.call(SlotOp::Renew(&self.id)).await {
                if d.allowed || self.call(SlotOp::Acquire(&self.id)).await.is_ok() {
                    self.renewals.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

impl SlotGuard {
    /// The holder's id in the store (None for a fallback's slot).
    pub fn id(&self) -> Option<&str> {
        match &self.held {
            Held::Store { call, .. } => Some(&call.id),
            _ => None,
        }
    }

    /// Renewals the store answered so far.
    pub fn renewals(&self) -> u64 {
        match &self.held {
            Held::Store { call, .. } => call.renewals.load(Ordering::Relaxed),
            _ => 0,
        }
    }

    /// Gives the slot back now; true when the store (or the local count) held it.
    pub async fn release(mut self) -> Result<bool, Error> {
        match std::mem::replace(&mut self.held, Held::Released) {
            Held::Store { call, renewer } => {
                renewer.abort();
                call.release().await
            }
            Held::Local { counts, key } => {
                give_back(&counts, &key);
                Ok(true)
            }
            Held::Open | Held::Released => Ok(false),
        }
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        match std::mem::replace(&mut self.held, Held::Released) {
            Held::Store { call, renewer } => {
                renewer.abort();
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move {
                        let _ = call.release().await;
                    });
                }
            }
            Held::Local { counts, key } => give_back(&counts, &key),
            Held::Open | Held::Released => {}
        }
    }
}

fn give_back(counts: &Mutex<HashMap<String, u64>>, key: &str) {
    let mut counts = lock(counts);
    if let Some(n) = counts.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            counts.remove(key);
        }
    }
}

/// A holder id unique to this process and call: the process id, the start instant and a count.
fn next_id() -> String {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    static START: std::sync::OnceLock<u128> = std::sync::OnceLock::new();
    let start = START.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    });
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    format!("{}-{start:x}-{n}", std::process::id())
}

impl Limiter {
    /// Takes a slot of `key` under `limit` for one request, under a fresh holder id.
    pub async fn acquire(&self, limit: &ConcurrencyLimit, key: &str) -> Result<Slot, Error> {
        self.acquire_as(limit, key, &next_id()).await
    }

    /// Takes a slot under the caller's holder id (a request id: an ACQUIRE retried with it
    /// renews its slot, never takes a second). A denial is `Ok`; `Err` only for what no
    /// fallback may hide (the store rejected the arguments, the key holds another type).
    pub async fn acquire_as(
        &self,
        limit: &ConcurrencyLimit,
        key: &str,
        id: &str,
    ) -> Result<Slot, Error> {
        let shared = self.shared();
        let call = shared
            .store
            .concurrency(key, limit.limit, limit.ttl_ms, SlotOp::Acquire(id));
        match shared.call(&mut None, Mode::Request, call).await {
            Ok(decision) => {
                let guard = decision.allowed.then(|| {
                    let slot = Arc::new(StoreSlot {
                        shared: shared.clone(),
                        key: key.to_string(),
                        id: id.to_string(),
                        limit: limit.limit,
                        ttl_ms: limit.ttl_ms,
                        renewals: AtomicU64::new(0),
                    });
                    let renewer = tokio::spawn(slot.clone().renew(limit.renew_every));
                    SlotGuard {
                        held: Held::Store {
                            call: slot,
                            renewer,
                        },
                    }
                });
                Ok(Slot { decision, guard })
            }
            Err(e) if e.store_down() => {
                shared.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
                Ok(limit.fall_back(key, shared))
            }
            Err(e) => Err(e),
        }
    }
}
