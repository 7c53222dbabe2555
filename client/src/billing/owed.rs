//! What the billing ledger owes, as it is in memory and as the journal replays it: debts by
//! store key, and charges (sent or about to be) by their idempotency token.

use std::collections::HashMap;

use crate::command::Policy;

/// What billing admitted on one key without the store and is not in a charge yet, and the
/// policy to charge it with.
#[derive(Clone, Copy)]
pub(crate) struct Debt {
    pub(crate) policy: Policy,
    pub(crate) amount: u64,
}

/// A charge sent (or about to be) with its token.
#[derive(Clone)]
pub(crate) struct Charge {
    pub(crate) key: String,
    pub(crate) policy: Policy,
    pub(crate) amount: u64,
    /// Sent without a definite answer (timed out, connection lost, or from a journal): it may
    /// have been counted, so it is only ever sent again with the same token and amount.
    pub(crate) uncertain: bool,
}

/// Debts by store key, charges by token.
#[derive(Default)]
pub(crate) struct Book {
    pub(crate) debts: HashMap<String, Debt>,
    pub(crate) charges: HashMap<String, Charge>,
}

impl Book {
    pub(crate) fn owe(&mut self, key: &str, policy: &Policy, amount: u64) {
        let debt = self.debts.entry(key.to_string()).or_insert(Debt {
            policy: *policy,
            amount: 0,
        });
        debt.policy = *policy;
        debt.amount = debt.amount.saturating_add(amount);
    }

    pub(crate) fn take_debt(&mut self, key: &str, amount: u64) {
        if let Some(d) = self.debts.get_mut(key) {
            d.amount = d.amount.saturating_sub(amount);
            if d.amount == 0 {
                self.debts.remove(key);
            }
        }
    }

    pub(crate) fn owed(&self, key: &str) -> u64 {
        let charged: u64 = self
            .charges
            .values()
            .filter(|c| c.key == key)
            .map(|c| c.amount)
            .sum();
        self.debts.get(key).map_or(0, |d| d.amount) + charged
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.debts.is_empty() && self.charges.is_empty()
    }
}
