//! The billing ledger: counts Billing admitted while the store did not decide, owed per store key
//! and charged to the store when it answers again (in chunks it admits), kept across a clean
//! shutdown in the journal.

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::command::{Decision, Policy, Source};
use crate::journal;
use crate::limiter::lock;
use crate::{Error, Limiter};

/// What billing admitted on one key without the store, and the policy to charge it with.
#[derive(Clone, Copy)]
pub(crate) struct Debt {
    pub(crate) policy: Policy,
    pub(crate) amount: u64,
}

pub(crate) struct Ledger {
    debts: Mutex<HashMap<String, Debt>>,
    last_reconcile_ns: AtomicU64,
    reconciling: AtomicBool,
    settling: tokio::sync::Mutex<()>,
}

impl Ledger {
    /// The ledger, with what the journal at `path` (if any) still owes.
    pub(crate) fn new(path: Option<&Path>) -> Ledger {
        Ledger {
            debts: Mutex::new(path.map(journal::read).unwrap_or_default()),
            last_reconcile_ns: AtomicU64::new(0),
            reconciling: AtomicBool::new(false),
            settling: tokio::sync::Mutex::new(()),
        }
    }

    /// Billing's fallback: admit, and owe `cost` (when `commit`).
    pub(crate) fn fail_open(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
        commit: bool,
        source: Source,
    ) -> Decision {
        let mut debts = lock(&self.debts);
        let owed = debts.get(key).map_or(0, |d| d.amount);
        if commit {
            let debt = debts.entry(key.to_string()).or_insert(Debt {
                policy: *policy,
                amount: 0,
            });
            debt.amount = debt.amount.saturating_add(cost);
        }
        Decision {
            allowed: true,
            granted: 1,
            limit: policy.capacity(),
            remaining: policy.capacity().saturating_sub(owed.saturating_add(cost)),
            retry_after_ms: None,
            reset_after_ms: 0,
            source,
        }
    }

    /// What is owed, by store key.
    pub(crate) fn unsettled(&self) -> HashMap<String, u64> {
        lock(&self.debts)
            .iter()
            .map(|(k, d)| (k.clone(), d.amount))
            .collect()
    }

    pub(crate) fn total(&self) -> u64 {
        lock(&self.debts).values().map(|d| d.amount).sum()
    }

    /// Writes what is still owed to the journal (shutdown).
    pub(crate) fn save(&self, path: &Path) {
        let debts = lock(&self.debts).clone();
        if let Err(e) = journal::write(path, &debts) {
            log::error!("billing journal {}: {e}", path.display());
        }
    }
}

impl Limiter {
    /// A store call succeeded: charge what billing admitted without it, at once when it just
    /// came back, else at most once per second (a quota that is spent keeps its debt until it
    /// refills).
    pub(crate) fn store_answered(&self, recovered: bool) {
        let i = &self.inner;
        if lock(&i.ledger.debts).is_empty() {
            return;
        }
        let now = i.config.clock.now_ns();
        let last = i.ledger.last_reconcile_ns.load(Ordering::Relaxed);
        if recovered || now.saturating_sub(last) >= 1_000_000_000 {
            i.ledger.last_reconcile_ns.store(now, Ordering::Relaxed);
            self.spawn_reconcile();
        }
    }

    /// Starts a reconcile in the background unless one is running.
    fn spawn_reconcile(&self) {
        if self.inner.ledger.reconciling.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        let task: std::pin::Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move {
            // A store that just came back may drop the first calls (a reconnect): a few tries.
            for attempt in 0..5u32 {
                if me.reconcile_once(false).await || me.inner.circuit.is_open() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
            }
            me.inner.ledger.reconciling.store(false, Ordering::Release);
        });
        tokio::spawn(task);
    }

    /// Charges the store for what billing admitted while it did not answer (each call with
    /// the shutdown deadline: this is not on a request's path; a charge that times out may
    /// still be applied, and is then counted twice, never zero times). Counts the store cannot
    /// take yet (the quota is spent) stay owed and are charged as it refills: a successful store
    /// call starts another reconcile at most once per second while anything is owed.
    pub async fn reconcile(&self) {
        self.reconcile_once(false).await;
    }

    /// One pass over the debts; false when the store failed on the way.
    pub(crate) async fn reconcile_once(&self, force: bool) -> bool {
        let _one = self.inner.ledger.settling.lock().await;
        let keys: Vec<String> = lock(&self.inner.ledger.debts).keys().cloned().collect();
        for key in keys {
            let mut latency = None;
            if self.settle(&key, force, &mut latency).await.is_err() {
                return false;
            }
        }
        true
    }

    /// Charges `key`'s debt in chunks the store admits. `Ok(Some(denial))` when some is still
    /// owed because the store denies; `Err` when the store did not answer (all still owed).
    /// `force` ignores the circuit (shutdown).
    async fn settle(
        &self,
        key: &str,
        force: bool,
        latency: &mut Option<Duration>,
    ) -> Result<Option<Decision>, Error> {
        let store = self
            .inner
            .store
            .clone()
            .with_deadline(self.inner.config.shutdown_deadline);
        // The debt stays in the map (so `unsettled` is exact) and shrinks by what is charged;
        // `settling` keeps a second reconcile from charging it again meanwhile.
        let owed = |debts: &HashMap<String, Debt>| debts.get(key).copied();
        let Some(debt) = owed(&lock(&self.inner.ledger.debts)) else {
            return Ok(None);
        };
        let policy = debt.policy;
        let mut room = policy.capacity();
        loop {
            let amount = owed(&lock(&self.inner.ledger.debts)).map_or(0, |d| d.amount);
            if amount == 0 {
                return Ok(None);
            }
            let chunk = amount.min(room).max(1);
            match self
                .call(latency, force, store.decide(key, &policy, chunk))
                .await?
            {
                d if d.allowed => {
                    let mut debts = lock(&self.inner.ledger.debts);
                    if let Some(debt) = debts.get_mut(key) {
                        debt.amount = debt.amount.saturating_sub(chunk);
                        if debt.amount == 0 {
                            debts.remove(key);
                        }
                    }
                    room = policy.capacity();
                }
                d if d.remaining > 0 && d.remaining < chunk => room = d.remaining,
                d => return Ok(Some(d)),
            }
        }
    }
}
