//! The check step's store calls: a rule's own command for one item, `RL.ALL` for several, one
//! call per store (the per-second one apart); each descriptor its own call in the peer's mode;
//! concurrency slots beside rates (`concurrency.rs`), or in steps on the library backends.
//! Every call goes through the client's limiter (circuit, deadline, the class's fallback).
//! A `peek` looks without charging: every item's cost taken as 0.

use ratelimit_client::{Backend, Limiter};

use crate::item::{Item, Outcome};
use crate::steps::{per_second_rule, Refusal, Steps};

impl Steps<'_> {
    /// The store decisions over `which` items: per-second rules and the others apart when a
    /// per-second store is set (each store's part is one call).
    pub(crate) async fn decide(
        &self,
        items: &mut [Item],
        which: &[usize],
        peek: bool,
    ) -> Result<(), Refusal> {
        let Some(per_second) = self.per_second else {
            return self.decide_on(self.limiter, items, which, peek).await;
        };
        let (second, other): (Vec<usize>, Vec<usize>) = which
            .iter()
            .partition(|i| items.get(**i).is_some_and(|it| per_second_rule(&it.rule)));
        self.decide_on(per_second, items, &second, peek).await?;
        self.decide_on(self.limiter, items, &other, peek).await
    }

    /// One store decision over `which` items: the rule's own command for one, `RL.ALL` for more.
    async fn decide_on(
        &self,
        limiter: &Limiter,
        items: &mut [Item],
        which: &[usize],
        peek: bool,
    ) -> Result<(), Refusal> {
        let has_slots = |i: &usize| items.get(*i).is_some_and(Item::is_slot);
        if which.iter().any(has_slots) {
            if limiter.store().backend() != Backend::Module && which.len() > 1 {
                return self.decide_in_steps(limiter, items, which, peek).await;
            }
            return self.decide_with_slots(limiter, items, which, peek).await;
        }
        let checks: Vec<_> = which
            .iter()
            .filter_map(|i| items.get(*i)?.check(peek))
            .collect();
        let result = match checks.as_slice() {
            [] => return Ok(()),
            [(limit, key, cost)] if which.len() == 1 => {
                limiter.check_cost(limit, key, *cost).await.map(|d| vec![d])
            }
            many => limiter.check_all(many).await.map(|a| a.limiters),
        };
        self.metrics.service("store_calls", 1);
        let decisions = result.map_err(|e| self.store_error(e))?;
        for (i, d) in which.iter().zip(decisions.iter()) {
            if let Some(item) = items.get_mut(*i) {
                item.outcome = Some(Outcome::of(d));
            }
        }
        Ok(())
    }

    /// Each of `which` decided on its own, as the peer decides them (STOP_CACHE_KEY_INCREMENT_
    /// WHEN_OVERLIMIT unset): one admitted is charged whatever the others answer. The calls go
    /// out together on the one connection; a store error refuses the request, as one `RL.ALL`'s.
    pub(crate) async fn decide_each(
        &self,
        items: &mut [Item],
        which: &[usize],
    ) -> Result<(), Refusal> {
        if which.len() < 2 {
            return self.decide(items, which, false).await;
        }
        let calls = which.iter().filter_map(|i| {
            let item = items.get(*i)?;
            let (limit, key, cost) = item.check(false)?;
            Some(async move {
                let limiter = self.limiter_of(&item.rule);
                (*i, limiter.check_cost(limit, key, cost).await)
            })
        });
        let results = futures_util::future::join_all(calls).await;
        self.metrics.service("store_calls", results.len() as u64);
        let mut failed = None;
        for (i, result) in results {
            match result {
                Ok(d) => {
                    if let Some(item) = items.get_mut(i) {
                        item.outcome = Some(Outcome::of(&d));
                    }
                }
                Err(e) => failed = Some(e),
            }
        }
        match failed {
            None => Ok(()),
            Some(e) => Err(self.store_error(e)),
        }
    }

    /// The library's way (its `rl_all` takes no concurrency keys): the slots first, each its
    /// own `rl_concurrency` call; then, when all were admitted, the rates; the slots taken are
    /// given back when a rate denies. When a slot denies, the rates are only looked at (cost 0).
    async fn decide_in_steps(
        &self,
        limiter: &Limiter,
        items: &mut [Item],
        which: &[usize],
        peek: bool,
    ) -> Result<(), Refusal> {
        let (slots, rates) = Item::slots_and_rates(items, which);
        for i in &slots {
            self.decide_with_slots(limiter, items, &[*i], peek).await?;
        }
        // A peek takes no slot: nothing to give back.
        let denies = |i: &usize| !peek && items.get(*i).is_some_and(Item::denies);
        let slots_deny = slots.iter().any(denies);
        Box::pin(self.decide(items, &rates, peek || slots_deny)).await?;
        let denies = |i: &usize| !peek && items.get(*i).is_some_and(Item::denies);
        if slots_deny || rates.iter().any(denies) {
            self.give_back_slots(items, &slots).await;
        }
        Ok(())
    }
}
