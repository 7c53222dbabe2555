//! The settle step: post-response settles, Envoy's `apply_on_stream_done` rate limits (a `hits_addend` taken
//! from what the response cost, e.g. model tokens in dynamic metadata) are charged to the key
//! the request was decided on, into debt if need be, and never denied: the response is gone, so
//! the cost lands on the request that incurred it and the next requests pay it. A descriptor is
//! a settle when it carries an entry with key [`SETTLE_KEY`](crate::config::SETTLE_KEY) (left out of matching and of the
//! store key, so it meets the request path's rule and key), when it gives back
//! (`is_negative_hits`), or when its rule says `settle: true` and it charges (a `hits_addend` of
//! 0 on such a rule still checks). One store call for the whole request: `RL.CHARGE` for one
//! key, `RL.SETTLE` for several or for a give-back. While the store does not answer, each rule
//! follows its class, as the client's reservations do: Billing owes the charge to the ledger
//! (journaled, charged when the store answers), the others drop it; both are counted.
//! A concurrency rule's settle is its stream-done report: the holder's slot given back
//! (`concurrency.rs`).

use ratelimit_client::{Class, Decision, Error, Limit, Policy, Settlement, Source};

use crate::item::{Item, Outcome};
use crate::metrics::RuleCounts;
use crate::steps::Steps;

impl Steps<'_> {
    /// Settles every item: the rates' tokens moved, the slots given back; answers each with
    /// the state after it. Never fails: an error is logged and counted, the request answered
    /// OK.
    pub(crate) async fn settle(&self, items: &mut [Item]) {
        self.settle_rates(items).await;
        self.release(items).await;
    }

    /// Settles every rate item that moves tokens (a settle by ≠ 0).
    async fn settle_rates(&self, items: &mut [Item]) {
        let live: Vec<usize> = (0..items.len())
            .filter(|i| {
                items
                    .get(*i)
                    .is_some_and(|it| it.settle_by() != 0 && it.rule.limit.is_some())
            })
            .collect();
        if live.is_empty() {
            return;
        }
        self.metrics.service("settle_calls", 1);
        match self.settle_on_store(items, &live).await {
            Ok(decisions) => {
                for (i, d) in live.iter().zip(decisions.iter()) {
                    let Some(item) = items.get_mut(*i) else {
                        continue;
                    };
                    item.outcome = Some(Outcome::settled(d));
                    let by = item.settle_by();
                    let n = by.unsigned_abs();
                    if by < 0 {
                        // Given back: a denial cached for this key may no longer hold.
                        self.denials.forget(&item.key);
                    }
                    let counts = if by > 0 {
                        RuleCounts {
                            settle_charged: n,
                            ..RuleCounts::default()
                        }
                    } else {
                        RuleCounts {
                            settle_given_back: n,
                            ..RuleCounts::default()
                        }
                    };
                    self.count_settle(item, &counts);
                }
            }
            Err(e) if e.store_down() => {
                for i in live {
                    if let Some(item) = items.get_mut(i) {
                        self.settle_locally(item).await;
                    }
                }
            }
            Err(e) => {
                // A key of another type, or arguments the store refuses: a config bug to log;
                // the response is gone, so nothing to refuse.
                log::error!("settle refused by the store: {e}");
                self.metrics.service("settle_error", 1);
                for item in live.iter().filter_map(|i| items.get(*i)) {
                    let counts = RuleCounts {
                        settle_dropped: item.settle_by().unsigned_abs(),
                        ..RuleCounts::default()
                    };
                    self.count_settle(item, &counts);
                }
            }
        }
    }

    /// One call: `RL.CHARGE key n POLICY …` for one key charged, else `RL.SETTLE` over all (the
    /// domain is the keys' hash tag: one slot on a Cluster). Through the client's circuit and
    /// request deadline, as the decisions are.
    async fn settle_on_store(
        &self,
        items: &[Item],
        live: &[usize],
    ) -> Result<Vec<Decision>, Error> {
        let limiter = self.limiter;
        if limiter.circuit_open() {
            return Err(Error::CircuitOpen);
        }
        self.metrics.service("store_calls", 1);
        if let [one] = live {
            let charge = items.get(*one).filter(|it| it.settle_by() > 0);
            if let Some((key, p, by)) = charge.and_then(|it| it.settle_entry(it.settle_by())) {
                let charged = limiter.charge_call(key, by.unsigned_abs(), Some(&p));
                return match charged.await? {
                    Some(d) => Ok(vec![d]),
                    None => Err(Error::Reply("RL.CHARGE with a policy replied nil".into())),
                };
            }
        }
        let limiters: Vec<(&str, Policy, i64)> = live
            .iter()
            .filter_map(|i| {
                let item = items.get(*i)?;
                item.settle_entry(item.settle_by())
            })
            .collect();
        limiter.settle_call(&limiters).await.map(|all| all.limiters)
    }

    /// The store did not answer: a Billing charge is owed to the client's ledger (a reservation
    /// of 0 decided by the fallback, settled at the charge: the client's own path); anything else
    /// is dropped.
    async fn settle_locally(&self, item: &mut Item) {
        let Some(limit) = item.rule.limit.as_ref() else {
            return;
        };
        let by = item.settle_by();
        let n = by.unsigned_abs();
        let mut counts = RuleCounts::default();
        if by > 0 && limit.class() == Class::Billing {
            match self.journal(limit, &item.key, n).await {
                Ok(Settlement::Local { journaled, dropped }) => {
                    counts.settle_journaled = journaled;
                    counts.settle_dropped = dropped;
                }
                Ok(Settlement::Store(_)) => counts.settle_charged = n,
                Ok(Settlement::Nothing) | Err(_) => counts.settle_dropped = n,
            }
        } else {
            counts.settle_dropped = n;
        }
        item.outcome = Some(Outcome {
            admitted: true,
            remaining: 0,
            retry_after_ms: None,
            reset_after_ms: limit.policy().window_ms,
            local_cache: false,
            source: Some(Source::Fallback(limit.class())),
        });
        self.count_settle(item, &counts);
    }

    /// Through a reservation of 0 tokens, so the charge takes the client's Billing path (the
    /// ledger and its journal). The reservation's own check charges nothing, so one that still
    /// lands on the store later adds nothing.
    async fn journal(&self, limit: &Limit, key: &str, n: u64) -> Result<Settlement, Error> {
        let reservation = self.limiter.reserve(&[(limit, key)], 0).await?;
        if reservation.decision().combined.source == Source::Store && !reservation.admitted() {
            // The store answered again and the key is in debt: charge it there.
            let policy = limit.store_policy();
            return match self.limiter.charge_call(key, n, Some(&policy)).await? {
                Some(d) => Ok(Settlement::Store(ratelimit_client::AllDecision {
                    combined: d,
                    limiters: vec![d],
                })),
                None => Ok(Settlement::Nothing),
            };
        }
        reservation.settle(n).await
    }

    fn count_settle(&self, item: &Item, counts: &RuleCounts) {
        self.count(&item.stats_key, &item.rule, counts);
    }
}
