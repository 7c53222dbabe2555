//! The check step: the request path's items decided, each on its own as the peer decides them,
//! or, with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT or a concurrency rule, together in one store
//! call (`RL.ALL`), all or nothing; with the denial cache in front of the store and behind it.
//! The store calls themselves are `store_calls.rs`.

use ratelimit_client::{Algorithm, Policy, Source};

use crate::config::Unit;
use crate::item::{Item, Outcome};
use crate::steps::{Refusal, Steps};

impl Steps<'_> {
    /// Decides every item that asks a check. Only a store error no fallback may hide fails it.
    pub(crate) async fn check(&self, items: &mut [Item]) -> Result<(), Refusal> {
        let now = self.clock.now_ns();
        // A slot taken by a request another rule denies would be held until the stream-done
        // report: a request with a concurrency rule is always decided all or nothing.
        let atomic = self.settings.stop_increment_when_overlimit || items.iter().any(Item::is_slot);
        self.answer_here(items, now);
        let pending: Vec<usize> = (0..items.len())
            .filter(|i| items.get(*i).is_some_and(|it| it.outcome.is_none()))
            .collect();
        if !atomic {
            // The peer's default: every descriptor decided (and charged) on its own.
            self.decide_each(items, &pending).await?;
        } else if items
            .iter()
            .any(|it| !it.mode.soft() && it.cost() > 0 && it.outcome.is_some_and(|o| !o.admitted))
        {
            // Denied here already: the others are only looked at (a cost of 0), so that their
            // statuses tell what is left, as the peer's do.
            self.decide(items, &pending, true).await?;
        } else {
            self.decide(items, &pending, false).await?;
            // Denied only by shadow or quota rules: charge the others.
            let denied_by = |it: &Item| it.cost() > 0 && it.outcome.is_some_and(|o| !o.admitted);
            let denied: Vec<usize> = pending
                .iter()
                .copied()
                .filter(|i| items.get(*i).is_some_and(denied_by))
                .collect();
            let all_soft = denied
                .iter()
                .all(|i| items.get(*i).is_some_and(|it| it.mode.soft()));
            if !denied.is_empty() && all_soft {
                let rest: Vec<usize> = pending
                    .iter()
                    .copied()
                    .filter(|i| {
                        !denied.contains(i) && items.get(*i).is_some_and(|it| it.cost() > 0)
                    })
                    .collect();
                if !rest.is_empty() {
                    self.decide(items, &rest, false).await?;
                }
            }
            self.give_back_when_a_check_denies(items).await;
        }
        self.remember_denials(items, now);
        Ok(())
    }

    /// Answered here, without the store: a limit of 0 (the module refuses L 0; a check of it is
    /// not a denial), a charge above the capacity, a key cached as denied, a concurrency charge
    /// without a holder.
    fn answer_here(&self, items: &mut [Item], now: u64) {
        for item in items.iter_mut() {
            if item.is_slot() {
                self.refuse_without_holder(item);
                continue;
            }
            let Some(policy) = item.rule.policy().copied() else {
                continue;
            };
            let cost = item.cost();
            if policy.limit == 0 || cost > policy.capacity() {
                let rest = rest_of_window_ms(item.rule.unit);
                item.outcome = Some(Outcome::local_denial(rest, false));
            } else if cost > 0 {
                if let Some(retry) = self.denials.denied(&item.key, cost, now) {
                    item.outcome = Some(Outcome::local_denial(retry, true));
                }
            }
        }
    }

    /// Keys the store denied are answered here until the store's retry time, for the charges
    /// that answer holds for: in a fixed window, every charge above what it has left (denied
    /// until the window ends); in the others, this charge and larger ones (a larger one needs at
    /// least as long). Only the store's own denials: never one decided here (a charge above the
    /// capacity says nothing about smaller ones) nor a fallback's.
    fn remember_denials(&self, items: &[Item], now: u64) {
        for item in items {
            let Some(o) = item.outcome else { continue };
            let Some(policy) = item.rule.policy() else {
                continue;
            };
            let cost = item.cost();
            if o.admitted || cost == 0 || o.source != Some(Source::Store) {
                continue;
            }
            let min_hits = if policy.algorithm == Algorithm::FixedWindow {
                o.remaining.saturating_add(1)
            } else {
                cost
            };
            if let Some(retry) = o.retry_after_ms.filter(|r| *r > 0) {
                self.denials.deny(&item.key, min_hits, now, retry);
            }
        }
    }

    /// A check (`hits_addend` 0) on a `settle: true` rule denies the request while its key is
    /// in debt, but `RL.ALL` takes a cost of 0 as a peek that denies nothing: the request's
    /// other descriptors were charged. They are given back in one `RL.SETTLE`, so a denied
    /// request costs nothing here either.
    async fn give_back_when_a_check_denies(&self, items: &mut [Item]) {
        let from_store = |o: &Outcome| o.source == Some(Source::Store);
        let denied = items.iter().any(|i| {
            !i.mode.shadow
                && i.cost() == 0
                && i.rule.settle
                && i.outcome.is_some_and(|o| !o.admitted && from_store(&o))
        });
        let charged: Vec<usize> = (0..items.len())
            .filter(|i| {
                items.get(*i).is_some_and(|item| {
                    item.cost() > 0 && item.outcome.is_some_and(|o| o.admitted && from_store(&o))
                })
            })
            .collect();
        if !denied || charged.is_empty() {
            return;
        }
        // The slots taken go back too (their stream-done report may never be sent).
        self.give_back_slots(items, &charged).await;
        let limiters: Vec<(&str, Policy, i64)> = charged
            .iter()
            .filter_map(|i| {
                let item = items.get(*i)?;
                item.settle_entry(item.check_given_back())
            })
            .collect();
        if limiters.is_empty() {
            return;
        }
        self.metrics.service("store_calls", 1);
        match self.limiter.settle_call(&limiters).await {
            Ok(all) => {
                self.metrics.service("check_denied_given_back", 1);
                for (i, d) in charged.iter().zip(all.limiters.iter()) {
                    if let Some(o) = items.get_mut(*i).and_then(|it| it.outcome.as_mut()) {
                        o.remaining = d.remaining;
                    }
                }
            }
            Err(e) => {
                log::warn!("a request denied by a check kept its other charges: {e}");
                self.metrics.service("check_denied_give_back_error", 1);
            }
        }
    }
}

/// The rest of the unit's epoch-aligned window on this server's clock, as the peer computes
/// every reset: what a limit answered here (0, or a charge above it) reports.
fn rest_of_window_ms(unit: Unit) -> u64 {
    let window = unit.seconds() * 1000;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    window - now % window
}
