//! The billing ledger: counts Billing admitted while the store did not decide, owed per store key
//! and charged to the store when it answers again, each charge with an idempotency token so that
//! it counts once however often it is sent (a timed-out charge may still land; the next process
//! replays the journal's). With `Config::billing_journal`, every change is in the journal first.

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::billing::journal::{Journal, Record};
use crate::billing::owed::{Book, Charge};
use crate::call::{Mode, Shared};
use crate::command::{Decision, Policy, Source};
use crate::error::Error;
use crate::limit::key_slot;
use crate::store::Store;
use crate::sync::lock;

/// How long the store remembers a charge's token: a charge sent again later (a journal replayed
/// after a longer outage) may be counted twice. A day: the Functions library takes windows up to
/// 25 h.
pub const CHARGE_TOKEN_TTL: Duration = Duration::from_secs(86_400);

pub(crate) struct Ledger {
    book: Mutex<Book>,
    journal: Option<Arc<Journal>>,
    last_reconcile_ns: AtomicU64,
    reconciling: AtomicBool,
    settling: tokio::sync::Mutex<()>,
}

/// What the store did with a charge.
enum Charged {
    /// Counted now, or earlier (its token was spent).
    Counted,
    /// Not counted: the quota has no room (the key's decision).
    Denied(Decision),
}

static TOKENS: AtomicU64 = AtomicU64::new(0);

/// A token no other charge of any process shares: the wall clock, the process, a counter.
fn new_token() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = TOKENS.fetch_add(1, Ordering::Relaxed);
    format!("{now:x}-{:x}-{n:x}", std::process::id())
}

/// The key that records a charge's token: the charged key's own name plus a suffix (so an ACL
/// key pattern that covers the key covers it), in the key's hash slot on a Cluster (the
/// charged key in braces when the suffix would move it); `None` when no name shares the slot.
fn token_key(key: &str, token: &str, cluster: bool) -> Option<String> {
    let plain = format!("{key}:rl-charge:{token}");
    if !cluster || key_slot(plain.as_bytes()) == key_slot(key.as_bytes()) {
        return Some(plain);
    }
    let tagged = format!("{{{key}}}:rl-charge:{token}");
    (key_slot(tagged.as_bytes()) == key_slot(key.as_bytes())).then_some(tagged)
}

impl Ledger {
    /// The ledger, with what the journal at `path` (if any) still owes.
    pub(crate) fn new(path: Option<&Path>) -> Ledger {
        let (journal, book) = match path {
            Some(p) => {
                let (j, book) = Journal::open(p);
                (Some(j), book)
            }
            None => (None, Book::default()),
        };
        Ledger {
            book: Mutex::new(book),
            journal,
            last_reconcile_ns: AtomicU64::new(0),
            reconciling: AtomicBool::new(false),
            settling: tokio::sync::Mutex::new(()),
        }
    }

    /// Billing's fallback: admit, and owe `cost` (when `commit`), in the journal before the
    /// request proceeds. The decision's `remaining` and `reset_after_ms` are estimates for the
    /// headers: what the store last said (`last`: remaining, ms until full) less what is owed,
    /// else the capacity less what is owed, full within one window.
    pub(crate) fn fail_open(
        &self,
        key: &str,
        policy: &Policy,
        cost: u64,
        commit: bool,
        source: Source,
        last: Option<(u64, u64)>,
    ) -> Decision {
        let mut book = lock(&self.book);
        let owed = book.owed(key);
        if commit {
            book.owe(key, policy, cost);
            if let Some(j) = &self.journal {
                j.append(Record::Owe(key, policy, cost), &book);
            }
        }
        Decision {
            allowed: true,
            granted: 1,
            limit: policy.capacity(),
            remaining: last
                .map_or(policy.capacity(), |(r, _)| r)
                .saturating_sub(owed.saturating_add(cost)),
            retry_after_ms: None,
            reset_after_ms: last.map_or(policy.window_ms, |(_, reset)| reset),
            source,
        }
    }

    /// What is owed (in debts and in charges not known to be counted), by store key.
    pub(crate) fn unsettled(&self) -> HashMap<String, u64> {
        let book = lock(&self.book);
        let mut out: HashMap<String, u64> = HashMap::new();
        for (k, d) in &book.debts {
            *out.entry(k.clone()).or_default() += d.amount;
        }
        for c in book.charges.values() {
            *out.entry(c.key.clone()).or_default() += c.amount;
        }
        out
    }

    pub(crate) fn total(&self) -> u64 {
        self.unsettled().values().sum()
    }

    /// Leaves the journal as what is still owed (shutdown): a snapshot, or no file at all.
    pub(crate) fn close(&self) {
        let book = lock(&self.book);
        if let Some(j) = &self.journal {
            if book.is_empty() {
                j.remove();
            } else {
                j.snapshot(&book);
            }
        }
    }

    /// The next charge for `key`: an open one, else a new one of up to `room` from its debt
    /// (journaled and fsynced before it is sent).
    async fn next_charge(&self, key: &str, room: u64) -> Option<(String, Charge)> {
        let (token, charge) = {
            let mut book = lock(&self.book);
            if let Some((t, c)) = book.charges.iter().find(|(_, c)| c.key == key) {
                return Some((t.clone(), c.clone()));
            }
            let debt = *book.debts.get(key)?;
            let charge = Charge {
                key: key.to_string(),
                policy: debt.policy,
                amount: debt.amount.min(room).min(debt.policy.capacity()).max(1),
                uncertain: false,
            };
            let token = new_token();
            book.take_debt(key, charge.amount);
            book.charges.insert(token.clone(), charge.clone());
            if let Some(j) = &self.journal {
                j.append(Record::Charge(&token, &charge), &book);
            }
            (token, charge)
        };
        if let Some(j) = self.journal.clone() {
            // A charge that lands must be in the journal even after a power loss.
            let _ = tokio::task::spawn_blocking(move || j.sync()).await;
        }
        Some((token, charge))
    }

    /// The charge was counted, or denied without running (`back`: owed again).
    fn close_charge(&self, token: &str, back: bool) {
        let mut book = lock(&self.book);
        let Some(c) = book.charges.remove(token) else {
            return;
        };
        if back {
            book.owe(&c.key, &c.policy, c.amount);
        }
        if let Some(j) = &self.journal {
            let record = if back {
                Record::Drop(token)
            } else {
                Record::Done(token)
            };
            j.append(record, &book);
        }
    }

    fn mark_uncertain(&self, token: &str) {
        if let Some(c) = lock(&self.book).charges.get_mut(token) {
            c.uncertain = true;
        }
    }
}

impl Ledger {
    /// A store call succeeded: charge what billing admitted without it, at once when it just
    /// came back, else at most once per second (a quota that is spent keeps its debt until it
    /// refills).
    pub(crate) fn store_answered(self: &Arc<Self>, shared: &Arc<Shared>, recovered: bool) {
        if lock(&self.book).is_empty() {
            return;
        }
        let now = shared.config.clock.now_ns();
        let last = self.last_reconcile_ns.load(Ordering::Relaxed);
        if recovered || now.saturating_sub(last) >= 1_000_000_000 {
            self.last_reconcile_ns.store(now, Ordering::Relaxed);
            self.spawn_reconcile(shared);
        }
    }

    /// Starts a reconcile in the background unless one is running.
    fn spawn_reconcile(self: &Arc<Self>, shared: &Arc<Shared>) {
        if self.reconciling.swap(true, Ordering::AcqRel) {
            return;
        }
        let (me, shared) = (self.clone(), shared.clone());
        let task: std::pin::Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move {
            // A store that just came back may drop the first calls (a reconnect): a few tries.
            for attempt in 0..5u32 {
                if me.reconcile_once(&shared, false).await || shared.circuit.is_open() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
            }
            me.reconciling.store(false, Ordering::Release);
        });
        tokio::spawn(task);
    }

    /// One pass over the owed keys; false when the store failed on the way.
    pub(crate) async fn reconcile_once(&self, shared: &Arc<Shared>, force: bool) -> bool {
        let _one = self.settling.lock().await;
        let keys: Vec<String> = {
            let book = lock(&self.book);
            let mut keys: Vec<String> = book.debts.keys().cloned().collect();
            keys.extend(book.charges.values().map(|c| c.key.clone()));
            keys.sort();
            keys.dedup();
            keys
        };
        for key in keys {
            let mut latency = None;
            if self
                .settle(shared, &key, force, &mut latency)
                .await
                .is_err()
            {
                return false;
            }
        }
        if let Some(j) = &self.journal {
            let book = lock(&self.book);
            if book.is_empty() {
                j.snapshot(&book);
            }
        }
        true
    }

    /// Charges `key`'s debt in chunks the store admits. `Ok(Some(denial))` when some is still
    /// owed because the store denies; `Err` when the store did not answer (all still owed).
    /// `force` ignores the circuit (shutdown).
    async fn settle(
        &self,
        shared: &Arc<Shared>,
        key: &str,
        force: bool,
        latency: &mut Option<Duration>,
    ) -> Result<Option<Decision>, Error> {
        let store = shared
            .store
            .clone()
            .with_deadline(shared.config.shutdown_deadline);
        let mode = if force {
            Mode::Forced
        } else {
            Mode::Background
        };
        let mut room = u64::MAX;
        loop {
            let Some((token, charge)) = self.next_charge(key, room).await else {
                return Ok(None);
            };
            let sent = shared
                .call(latency, mode, charge_once(&store, &token, &charge))
                .await;
            match sent {
                Ok(Charged::Counted) => {
                    self.close_charge(&token, false);
                    room = u64::MAX;
                }
                // Denied, and never sent without an answer: it did not run; owed again, in
                // a chunk that fits what the store has left.
                Ok(Charged::Denied(d)) if !charge.uncertain => {
                    self.close_charge(&token, true);
                    if d.remaining > 0 && d.remaining < charge.amount {
                        room = d.remaining;
                    } else {
                        return Ok(Some(d));
                    }
                }
                // It may still land: only ever again with its own token and amount.
                Ok(Charged::Denied(d)) => return Ok(Some(d)),
                Err(e) => {
                    if matches!(e, Error::Timeout | Error::Unreachable(_)) {
                        self.mark_uncertain(&token);
                    }
                    return Err(e);
                }
            }
        }
    }
}

/// One charge in one atomic call: `RL.ALL` over the charged key (COST amount) and the token's
/// key (a GCRA of 1 per `CHARGE_TOKEN_TTL`, COST 1). Both are charged or neither: the token
/// admits once, so a second send of the same charge is denied by the token and changes nothing.
/// Without a token key in the key's slot, the charge is a plain call (at least once).
async fn charge_once(store: &Store, token: &str, c: &Charge) -> Result<Charged, Error> {
    let Some(token_key) = token_key(&c.key, token, store.is_cluster()) else {
        let d = store.decide(&c.key, &c.policy, c.amount).await?;
        return Ok(if d.allowed {
            Charged::Counted
        } else {
            Charged::Denied(d)
        });
    };
    let ttl_ms = u64::try_from(CHARGE_TOKEN_TTL.as_millis()).unwrap_or(u64::MAX);
    let all = store
        .all(&[
            (c.key.as_str(), c.policy, c.amount),
            (token_key.as_str(), Policy::gcra(1, ttl_ms), 1),
        ])
        .await?;
    let token_spent = all.limiters.get(1).is_some_and(|t| !t.allowed);
    Ok(match all.limiters.first() {
        _ if all.combined.allowed || token_spent => Charged::Counted,
        Some(d) => Charged::Denied(*d),
        None => Charged::Denied(all.combined),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_keys_share_the_charged_keys_slot() {
        let t = new_token();
        assert_ne!(t, new_token());
        for key in ["rl:q:abc", "rl:{tenant}:q", "x{y"] {
            let k = token_key(key, &t, true).unwrap();
            assert_eq!(key_slot(k.as_bytes()), key_slot(key.as_bytes()), "{key}");
            assert!(token_key(key, &t, false).unwrap().starts_with(key));
        }
        assert!(token_key("rl:q:abc", &t, true)
            .unwrap()
            .starts_with("{rl:q:abc}"));
    }
}
