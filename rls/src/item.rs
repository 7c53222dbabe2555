//! One limited key of a `ShouldRateLimit` request on its way through the steps: what it asks
//! ([`Hits`], carried one way from the descriptor's `hits_addend` to the store call), how its
//! denial counts ([`Mode`], decided once when it is matched), and what was decided for it
//! ([`Outcome`]). Values only: the steps that fill them are `check.rs`, `settle.rs` and
//! `concurrency.rs`; `answer.rs` reads them.

use std::sync::Arc;

use ratelimit_client::{Decision, Limit, Policy, Source};

use crate::config::Rule;

/// What a descriptor's hits ask of its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hits {
    /// Decided now: the cost charged when admitted; 0 checks without charging.
    Check(u64),
    /// Charged after the fact (`settle.rs`), never denied, by a signed number of tokens: into
    /// debt when positive, given back when negative.
    Settle(i64),
}

impl Hits {
    /// Several descriptors of one request naming one key ask once: their hits added up, a
    /// check with a check and a settle with a settle (`None` for a check and a settle).
    fn plus(self, other: Hits) -> Option<Hits> {
        match (self, other) {
            (Hits::Check(a), Hits::Check(b)) => Some(Hits::Check(a.saturating_add(b))),
            (Hits::Settle(a), Hits::Settle(b)) => Some(Hits::Settle(a.saturating_add(b))),
            _ => None,
        }
    }
}

/// How an item's denial counts toward the answer, decided once from its rule and the settings
/// (envoyproxy/ratelimit's semantics, as `answer.rs` applies them).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Mode {
    /// The rule's `shadow_mode`: a denial answers OK in its status and in the total, counted as
    /// `shadow_mode`.
    pub(crate) shadow: bool,
    /// `quota_mode` (the rule's, or QUOTA_MODE): a denial shows in its status; the request is
    /// denied only when every quota descriptor is.
    pub(crate) quota: bool,
    /// SHADOW_MODE: the status as decided, the total OK (counted as `global_shadow_mode`).
    pub(crate) global_shadow: bool,
}

impl Mode {
    /// Its denial alone does not deny the request: in the atomic mode, the others are charged
    /// without it.
    pub(crate) fn soft(&self) -> bool {
        self.shadow || self.quota || self.global_shadow
    }
}

/// One limited key on its way to a decision: a descriptor, or several of one request that
/// name the same key (`RL.ALL` takes a key once: their hits are added up).
pub(crate) struct Item {
    pub(crate) indexes: Vec<usize>,
    pub(crate) rule: Arc<Rule>,
    pub(crate) stats_key: String,
    pub(crate) key: String,
    pub(crate) hits: Hits,
    pub(crate) mode: Mode,
    /// A concurrency rule's holder: the value of the descriptor's `rls_holder` entry.
    pub(crate) holder: Option<String>,
    pub(crate) outcome: Option<Outcome>,
}

/// What was decided for one item.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Outcome {
    /// This descriptor would admit the request (on a denied request: it was not charged).
    pub(crate) admitted: bool,
    pub(crate) remaining: u64,
    pub(crate) retry_after_ms: Option<u64>,
    pub(crate) reset_after_ms: u64,
    pub(crate) local_cache: bool,
    /// Who decided; `None`: this server, without asking (a limit of 0, a charge above the
    /// capacity, the denial cache), so it is never taken for the store's answer.
    pub(crate) source: Option<Source>,
}

impl Item {
    /// The cost a check charges (0 for a settle, which is not decided).
    pub(crate) fn cost(&self) -> u64 {
        match self.hits {
            Hits::Check(n) => n,
            Hits::Settle(_) => 0,
        }
    }

    /// The signed number of tokens a settle moves (0 for a check, which is not settled).
    pub(crate) fn settle_by(&self) -> i64 {
        match self.hits {
            Hits::Settle(by) => by,
            Hits::Check(_) => 0,
        }
    }

    /// What giving back an admitted check's cost moves: its hits, negative.
    pub(crate) fn check_given_back(&self) -> i64 {
        -i64::try_from(self.cost()).unwrap_or(i64::MAX)
    }

    /// The `RL.SETTLE` entry that moves this item's key by `by` tokens, as `settle_call` takes
    /// it (the rule's policy, so that a key the settle creates is the request path's).
    pub(crate) fn settle_entry(&self, by: i64) -> Option<(&str, Policy, i64)> {
        let policy = self.rule.limit.as_ref()?.store_policy();
        Some((self.key.as_str(), policy, by))
    }

    pub(crate) fn is_settle(&self) -> bool {
        matches!(self.hits, Hits::Settle(_))
    }

    /// A concurrency rule's item: it takes (or gives back) a slot rather than a rate's amount.
    pub(crate) fn is_slot(&self) -> bool {
        self.rule.concurrency.is_some()
    }

    /// `which` split into the concurrency items (slots) and the rest (rates), each in order.
    pub(crate) fn slots_and_rates(items: &[Item], which: &[usize]) -> (Vec<usize>, Vec<usize>) {
        which
            .iter()
            .partition(|i| items.get(**i).is_some_and(Item::is_slot))
    }

    /// Takes `other`'s descriptors when it names the same key and asks the same way: then
    /// `None`, else `other` back.
    pub(crate) fn absorb(&mut self, other: Item) -> Option<Item> {
        if self.key != other.key {
            return Some(other);
        }
        let Some(sum) = self.hits.plus(other.hits) else {
            return Some(other);
        };
        self.hits = sum;
        self.indexes.extend(other.indexes);
        None
    }

    /// The store check this item makes when its rule has a rate limit, as `check_all` takes it:
    /// (the limit, the key, the cost; 0 when `peek`: only looked at).
    pub(crate) fn check(&self, peek: bool) -> Option<(&Limit, &str, u64)> {
        let cost = if peek { 0 } else { self.cost() };
        self.rule
            .limit
            .as_ref()
            .map(|l| (l, self.key.as_str(), cost))
    }

    /// Whether a denial by the store denies the request: a charge, or a check (hits_addend 0) on
    /// a `settle: true` rule, whose requests only check and pay after (denied while in debt).
    pub(crate) fn enforced(&self) -> bool {
        self.cost() > 0 || self.rule.settle
    }

    /// An enforced denial that denies the request.
    pub(crate) fn denies(&self) -> bool {
        !self.mode.soft() && self.enforced() && self.outcome.is_some_and(|o| !o.admitted)
    }
}

impl Outcome {
    pub(crate) fn of(d: &Decision) -> Outcome {
        Outcome {
            admitted: d.allowed,
            remaining: d.remaining,
            retry_after_ms: d.retry_after_ms,
            reset_after_ms: d.reset_after_ms,
            local_cache: false,
            source: Some(d.source),
        }
    }

    pub(crate) fn local_denial(retry_ms: u64, local_cache: bool) -> Outcome {
        Outcome {
            admitted: false,
            remaining: 0,
            retry_after_ms: Some(retry_ms),
            reset_after_ms: retry_ms,
            local_cache,
            source: None,
        }
    }

    /// A settle's or a release's answer: admitted (never denied), with what the store says is
    /// left after it (0 in debt).
    pub(crate) fn settled(d: &Decision) -> Outcome {
        Outcome {
            admitted: true,
            retry_after_ms: None,
            ..Outcome::of(d)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_of_one_key_add_up_only_the_same_way() {
        let (check, settle) = (Hits::Check(2), Hits::Settle(-3));
        assert_eq!(check.plus(Hits::Check(5)), Some(Hits::Check(7)));
        assert_eq!(settle.plus(Hits::Settle(10)), Some(Hits::Settle(7)));
        assert_eq!(check.plus(settle), None);
        assert_eq!(settle.plus(check), None);
        assert_eq!(
            Hits::Check(u64::MAX).plus(Hits::Check(1)),
            Some(Hits::Check(u64::MAX))
        );
    }
}
