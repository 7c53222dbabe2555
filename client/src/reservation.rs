//! Reserve, then settle: a request whose cost is known only once it is served (model tokens)
//! reserves an estimate on its limits in one atomic decision (`RL.ALL`), and settles the
//! difference when it is done in one call (`RL.SETTLE`: the unused part given back, or the
//! overage charged into debt). A reservation dropped without a settle gives its estimate back
//! after a grace, so a crashed handler does not hold budget. While the store does not answer, a
//! settle follows each limit's class: Billing owes its overage to the ledger (journaled, charged
//! when the store answers again); the other classes' settles are not made (their local fallback
//! decided without the store). docs/tokens.md is the guide.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Value;

use crate::billing::ledger::Ledger;
use crate::call::{Mode, Shared};
use crate::clock::ns;
use crate::command::{AllDecision, Class, Decision, Policy, Source};
use crate::error::Error;
use crate::limit::Limit;
use crate::store::Store;
use crate::sync::lock;

/// How long a reservation dropped without a settle holds its estimate, by default.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);

/// One limit of a reservation: the key as the store has it, and its policy and class.
#[derive(Clone)]
struct Part {
    key: String,
    policy: Policy,
    class: Class,
}

/// An estimate reserved on one or several limits; settle it with [`Reservation::settle`].
pub struct Reservation {
    shared: Arc<Shared>,
    ledger: Arc<Ledger>,
    dropped: Arc<Dropped>,
    parts: Vec<Part>,
    estimate: u64,
    decision: AllDecision,
    grace: Duration,
    /// Admitted and not settled yet: what a drop gives back.
    open: bool,
}

/// What a settle did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settlement {
    /// Nothing to settle: the reservation was denied, or the estimate was exact.
    Nothing,
    /// The store settled every limit; each decision's `granted` is the tokens it moved (charged
    /// or given back), the rest its state after the settle.
    Store(AllDecision),
    /// The store did not answer (or the reservation was decided by the fallback): `journaled`
    /// tokens of Billing overage are owed to the ledger and charged when the store answers;
    /// `dropped` tokens (refunds, and the other classes' overage) are not settled.
    Local { journaled: u64, dropped: u64 },
}

/// Reservations dropped without a settle, each with the client-clock instant its estimate
/// goes back at.
#[derive(Default)]
pub(crate) struct Dropped(Mutex<Vec<(u64, Vec<Part>, u64)>>);

impl Dropped {
    /// Gives back the estimates whose grace has run out (on the client's clock); how many
    /// reservations went back.
    pub(crate) async fn give_back(&self, shared: &Arc<Shared>) -> usize {
        let now = shared.config.clock.now_ns();
        let due: Vec<(u64, Vec<Part>, u64)> = {
            let mut dropped = lock(&self.0);
            let (due, kept) = dropped.drain(..).partition(|(at, ..)| *at <= now);
            *dropped = kept;
            due
        };
        let mut given = 0;
        for (at, parts, estimate) in due {
            let by = -i64::try_from(estimate).unwrap_or(i64::MAX);
            match settle_parts(shared, &parts, by, Mode::Background).await {
                Ok(_) => given += 1,
                // Not answered: tried again at the next call.
                Err(e) if e.store_down() => lock(&self.0).push((at, parts, estimate)),
                Err(_) => {}
            }
        }
        given
    }
}

async fn settle_parts(
    shared: &Arc<Shared>,
    parts: &[Part],
    by: i64,
    mode: Mode,
) -> Result<AllDecision, Error> {
    let limiters: Vec<(&str, Policy, i64)> = parts
        .iter()
        .map(|p| (p.key.as_str(), p.policy, by))
        .collect();
    let mut latency = None;
    let store = &shared.store;
    shared
        .call(&mut latency, mode, store.settle(&limiters))
        .await
}

impl Reservation {
    /// The reservation `decision` made of `estimate` on every `(limit, key)`.
    pub(crate) fn new(
        shared: Arc<Shared>,
        ledger: Arc<Ledger>,
        dropped: Arc<Dropped>,
        limits: &[(&Limit, &str)],
        estimate: u64,
        decision: AllDecision,
    ) -> Reservation {
        let parts = limits
            .iter()
            .map(|(l, k)| Part {
                key: (*k).to_string(),
                policy: *l.policy(),
                class: l.class(),
            })
            .collect();
        Reservation {
            shared,
            ledger,
            dropped,
            parts,
            estimate,
            open: decision.combined.allowed,
            decision,
            grace: DEFAULT_GRACE,
        }
    }

    /// The decision on the reservation: `combined` for all the limits, then one per limit.
    pub fn decision(&self) -> &AllDecision {
        &self.decision
    }

    pub fn admitted(&self) -> bool {
        self.decision.combined.allowed
    }

    /// How long a drop without a settle holds the estimate before giving it back.
    pub fn with_grace(mut self, grace: Duration) -> Reservation {
        self.grace = grace;
        self
    }

    /// Settles at `actual` tokens in one call: `actual − estimate` charged (into debt if need
    /// be) or given back, on every limit. See [`Settlement`] for a store that does not answer.
    pub async fn settle(mut self, actual: u64) -> Result<Settlement, Error> {
        if !self.open {
            return Ok(Settlement::Nothing);
        }
        self.open = false;
        let by = i128::from(actual) - i128::from(self.estimate);
        let by = i64::try_from(by).map_err(|_| Error::Reply(format!("settle by {by}")))?;
        if by == 0 {
            return Ok(Settlement::Nothing);
        }
        if self.decision.combined.source != Source::Store {
            return Ok(self.locally(by));
        }
        match settle_parts(&self.shared, &self.parts, by, Mode::Request).await {
            Ok(all) => Ok(Settlement::Store(all)),
            Err(e) if e.store_down() => Ok(self.locally(by)),
            Err(e) => Err(e),
        }
    }

    /// A settle without the store: Billing owes its overage (journaled); the rest is dropped.
    fn locally(&self, by: i64) -> Settlement {
        let n = by.unsigned_abs();
        let (mut journaled, mut dropped) = (0, 0);
        for p in &self.parts {
            if by > 0 && p.class == Class::Billing {
                let source = Source::Fallback(Class::Billing);
                let ledger = &self.ledger;
                ledger.fail_open(&p.key, &p.policy, n, true, source, None);
                journaled += n;
            } else {
                dropped += n;
            }
        }
        Settlement::Local { journaled, dropped }
    }
}

impl Drop for Reservation {
    /// An admitted reservation never settled: its estimate goes back after the grace (only
    /// where the store holds it).
    fn drop(&mut self) {
        if !self.open || self.decision.combined.source != Source::Store {
            return;
        }
        let at = self
            .shared
            .config
            .clock
            .now_ns()
            .saturating_add(ns(self.grace));
        lock(&self.dropped.0).push((at, self.parts.clone(), self.estimate));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (shared, dropped, grace) = (self.shared.clone(), self.dropped.clone(), self.grace);
            runtime.spawn(async move {
                tokio::time::sleep(grace).await;
                dropped.give_back(&shared).await;
            });
        }
    }
}

impl Store {
    /// `RL.CHARGE key n [POLICY …]`: charges n tokens whatever the key holds (into debt);
    /// `policy` creates a missing key, else a missing key is `None`. `granted` is the tokens
    /// charged.
    pub async fn charge(
        &self,
        key: &str,
        n: u64,
        policy: Option<&Policy>,
    ) -> Result<Option<Decision>, Error> {
        let mut cmd = self.backend().command("CHARGE", &[key]);
        cmd.arg(n);
        if let Some(p) = policy {
            cmd.arg("POLICY").arg(p.algorithm.name());
            p.args(&mut cmd);
        }
        match self.query(&cmd).await? {
            Value::Nil => Ok(None),
            v => Decision::from_value(&v).map(Some),
        }
    }

    /// `RL.SETTLE numkeys key … ALGORITHM L W [BURST B] BY d …`: each limiter settled by its own
    /// difference in one atomic call (one hash slot on a Cluster); the library's `rl_settle`.
    pub async fn settle(&self, limiters: &[(&str, Policy, i64)]) -> Result<AllDecision, Error> {
        let keys: Vec<&str> = limiters.iter().map(|(k, _, _)| *k).collect();
        let mut cmd = self.backend().command("SETTLE", &keys);
        for (_, policy, by) in limiters {
            cmd.arg(policy.algorithm.name());
            policy.args(&mut cmd);
            cmd.arg("BY").arg(*by);
        }
        match self.query(&cmd).await? {
            Value::Array(items) if items.len() == limiters.len() + 1 => {
                let mut decisions = items.iter().map(Decision::from_value);
                let combined = decisions
                    .next()
                    .ok_or_else(|| Error::Reply("empty RL.SETTLE reply".into()))??;
                Ok(AllDecision {
                    combined,
                    limiters: decisions.collect::<Result<_, _>>()?,
                })
            }
            other => Err(Error::Reply(format!("RL.SETTLE reply {other:?}"))),
        }
    }
}
