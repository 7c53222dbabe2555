//! Concurrency rules (`rate_limit: {concurrency: N, ttl: 5m}`): at most N requests in flight per
//! key. The request path takes a slot for the holder its descriptor names (the `rls_holder`
//! entry: Envoy's `request_headers` action on `x-request-id`), and Envoy's stream-done report
//! (`apply_on_stream_done`: the same descriptor marked as a settle, with the `rls_settle` entry
//! or `is_negative_hits`) gives it back. Nothing renews a slot: it lives `ttl` at most, so a lost
//! report holds it that long and no longer.
//!
//! Beside rate rules a request is one `RL.ALL` with `CONCURRENCY N TTL ACQUIRE id` entries: a
//! request denied by any rule takes no slot and spends no token. The Functions library's
//! `rl_all` takes no concurrency keys: on that backend (and the scripts one) the slots are taken
//! first (`rl_concurrency`), the rates decided after, and the slots given back when a rate
//! denies, so a denied request still ends holding nothing (for one round trip it did).
//!
//! While the store does not answer, the rule's class decides, as the client's slots do:
//! contract, a slot of this server's own N ÷ `RLS_GATEWAYS` (`local_slots.rs`); security,
//! denied; billing, admitted, held nowhere.

use ratelimit_client::{Class, Decision, Error, Limiter, SlotEntry, SlotOp, Source};
use ratelimit_core::algo::concurrency::MAX_ID_BYTES;

use crate::item::{Item, Outcome};
use crate::metrics::RuleCounts;
use crate::steps::{Refusal, Steps};

/// How long a denial decided without the store for a security-class rule asks to wait.
const CLOSED_RETRY_MS: u64 = 1_000;

impl Item {
    /// The holder, when it can name a slot in the store (1 to 1,024 bytes).
    fn usable_holder(&self) -> Option<&str> {
        self.holder
            .as_deref()
            .filter(|h| !h.is_empty() && h.len() <= MAX_ID_BYTES)
    }

    /// The `RL.CONCURRENCY` entry of this item's request: ACQUIRE for a charge, PEEK for a
    /// check (`hits_addend` 0) or when `peek`ed beside a denial.
    fn slot(&self, peek: bool) -> Option<SlotEntry<'_>> {
        let c = self.rule.concurrency?;
        let op = match self.usable_holder() {
            Some(h) if !peek && self.cost() > 0 => SlotOp::Acquire(h),
            _ => SlotOp::Peek,
        };
        Some(SlotEntry {
            limit: c.limit,
            ttl_ms: c.ttl_ms,
            op,
        })
    }
}

impl Steps<'_> {
    /// A concurrency descriptor that would take a slot without a usable holder (no
    /// `rls_holder` entry, an empty one, or one over 1,024 bytes) has no slot its stream-done
    /// report could give back: denied here, never admitted unlimited, and counted.
    pub(crate) fn refuse_without_holder(&self, item: &mut Item) {
        if item.cost() == 0 || item.usable_holder().is_some() {
            return;
        }
        item.outcome = Some(Outcome::local_denial(0, false));
        let counts = RuleCounts {
            concurrency_no_holder: 1,
            ..RuleCounts::default()
        };
        self.count(&item.stats_key, &item.rule, &counts);
    }

    /// The decision over `which` items, some of them concurrency rules, on `limiter`: one
    /// `RL.ALL` (one `RL.CONCURRENCY` alone); a library backend calls it one slot at a time
    /// (`store_calls.rs`).
    pub(crate) async fn decide_with_slots(
        &self,
        limiter: &Limiter,
        items: &mut [Item],
        which: &[usize],
        peek: bool,
    ) -> Result<(), Refusal> {
        let (slots, rates) = Item::slots_and_rates(items, which);
        let checks: Vec<_> = rates
            .iter()
            .filter_map(|i| items.get(*i)?.check(peek))
            .collect();
        let entries: Vec<_> = slots
            .iter()
            .filter_map(|i| {
                let item = items.get(*i)?;
                item.slot(peek).map(|s| (item.key.as_str(), s))
            })
            .collect();
        let result = match (checks.as_slice(), entries.as_slice()) {
            ([], [(key, slot)]) => limiter.slot_call(key, *slot).await.map(|d| vec![d]),
            _ => limiter
                .check_all_slots(&checks, &entries)
                .await
                .map(|a| a.limiters),
        };
        self.metrics.service("store_calls", 1);
        let order: Vec<usize> = rates.iter().chain(slots.iter()).copied().collect();
        let decisions = match result {
            Ok(d) => d,
            Err(e) if e.store_down() => {
                // Each class decides on a copy; only when all admit is anything taken.
                let now = self.clock.now_ns();
                let local = |commit: bool| {
                    let mut decided = limiter.fall_back_all(&checks, commit);
                    decided.extend(
                        slots
                            .iter()
                            .filter_map(|i| self.slot_fallback(items.get(*i)?, now, commit, peek)),
                    );
                    decided
                };
                let mut decided = local(false);
                if decided.iter().all(|d| d.allowed) {
                    decided = local(true);
                }
                decided
            }
            Err(e) => return Err(self.store_error(e)),
        };
        for (i, d) in order.iter().zip(decisions.iter()) {
            if let Some(item) = items.get_mut(*i) {
                item.outcome = Some(Outcome::of(d));
            }
        }
        Ok(())
    }

    /// What a concurrency rule's class decides without the store (see the module comment).
    fn slot_fallback(
        &self,
        item: &Item,
        now_ns: u64,
        commit: bool,
        peek: bool,
    ) -> Option<Decision> {
        let c = item.rule.concurrency?;
        let answer = |allowed: bool| Decision {
            allowed,
            granted: u64::from(allowed),
            limit: c.limit,
            remaining: if allowed { c.limit } else { 0 },
            retry_after_ms: (!allowed).then_some(CLOSED_RETRY_MS),
            reset_after_ms: 0,
            source: Source::Fallback(c.class),
        };
        Some(match c.class {
            Class::Security => answer(false),
            Class::Billing => answer(true),
            Class::Contract | Class::Capacity => {
                let gateways = u64::from(self.settings.gateways.unwrap_or(1).max(1));
                let share = (c.limit / gateways).max(1);
                let holder = match item.slot(peek).map(|s| s.op) {
                    Some(SlotOp::Acquire(h)) => Some(h),
                    _ => None,
                };
                let ttl = c.ttl_ms;
                self.local_slots
                    .decide(&item.key, holder, share, ttl, now_ns, commit)
            }
        })
    }

    /// Gives back the slots the request path took in `which` (a request denied after they
    /// were taken): the store's, and this server's own.
    pub(crate) async fn give_back_slots(&self, items: &[Item], which: &[usize]) {
        for item in which.iter().filter_map(|i| items.get(*i)) {
            let (Some(c), Some(o)) = (item.rule.concurrency, item.outcome) else {
                continue;
            };
            let Some(SlotOp::Acquire(holder)) = item.slot(false).map(|s| s.op) else {
                continue;
            };
            if !o.admitted {
                continue;
            }
            if matches!(o.source, Some(Source::Fallback(_))) {
                let now = self.clock.now_ns();
                self.local_slots.release(&item.key, holder, c.ttl_ms, now);
                continue;
            }
            let release = SlotEntry {
                limit: c.limit,
                ttl_ms: c.ttl_ms,
                op: SlotOp::Release(holder),
            };
            self.metrics.service("store_calls", 1);
            if let Err(e) = self.limiter.slot_call(&item.key, release).await {
                log::warn!("a denied request's slot is held until its TTL: {e}");
            }
        }
    }

    /// Stream-done reports of concurrency rules: each holder's slot given back (the store's,
    /// and this server's own from an outage), answered OK always. A report the store does not
    /// take leaves the slot to lapse at its TTL.
    pub(crate) async fn release(&self, settles: &mut [Item]) {
        let now = self.clock.now_ns();
        let calls = settles.iter().enumerate().filter_map(|(i, item)| {
            let c = item.rule.concurrency?;
            let Some(holder) = item.usable_holder() else {
                let nothing: Option<(bool, Result<Decision, Error>)> = None;
                return Some(futures_util::future::Either::Left(
                    async move { (i, nothing) },
                ));
            };
            let local = self.local_slots.release(&item.key, holder, c.ttl_ms, now);
            let release = SlotEntry {
                limit: c.limit,
                ttl_ms: c.ttl_ms,
                op: SlotOp::Release(holder),
            };
            Some(futures_util::future::Either::Right(async move {
                let answer = self.limiter.slot_call(&item.key, release).await;
                (i, Some((local, answer)))
            }))
        });
        let results = futures_util::future::join_all(calls).await;
        for (i, result) in results {
            let Some(item) = settles.get_mut(i) else {
                continue;
            };
            let mut counts = RuleCounts::default();
            let decision = match result {
                None => {
                    counts.concurrency_no_holder = 1;
                    None
                }
                Some((local, Ok(d))) => {
                    self.metrics.service("store_calls", 1);
                    if d.allowed || local {
                        counts.concurrency_released = 1;
                    } else {
                        counts.concurrency_release_missed = 1;
                    }
                    Some(d)
                }
                Some((local, Err(e))) => {
                    if !e.store_down() {
                        log::error!("a slot's release refused by the store: {e}");
                    }
                    if local {
                        counts.concurrency_released = 1;
                    } else {
                        counts.concurrency_release_dropped = 1;
                    }
                    None
                }
            };
            item.outcome = Some(match decision {
                Some(d) => Outcome::settled(&d),
                // Nothing the store said: OK, with nothing to tell.
                None => Outcome {
                    admitted: true,
                    remaining: 0,
                    retry_after_ms: None,
                    reset_after_ms: 0,
                    local_cache: false,
                    source: None,
                },
            });
            self.count(&item.stats_key, &item.rule, &counts);
        }
    }
}
