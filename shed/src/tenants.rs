//! Requests in flight and queued per tenant, and each active tenant's fair share of the limit.
//! A tenant is active while it has a request in flight or queued; its entry goes when it has
//! none, so the table holds at most `in flight + queued` entries, and never more than
//! `max_tenants` plus one: past that, new keys share one overflow entry (a cardinality attack gets one
//! share, not one per key).

use std::collections::HashMap;
use std::sync::Arc;

/// The key every tenant beyond `max_tenants` shares.
pub const OVERFLOW: &str = "\u{0}overflow";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub in_flight: usize,
    pub queued: usize,
    pub weight: u32,
}

impl Usage {
    fn total(&self) -> usize {
        self.in_flight + self.queued
    }
}

#[derive(Debug)]
pub struct Tenants {
    active: HashMap<Arc<str>, Usage>,
    weights: HashMap<String, u32>,
    total_weight: u64,
    max_tenants: usize,
    overflow: Arc<str>,
}

impl Tenants {
    /// `weights`: the tenants that get more (or less) than one share; a weight of 0 counts as 1.
    pub fn new(max_tenants: usize, weights: HashMap<String, u32>) -> Tenants {
        Tenants {
            active: HashMap::new(),
            weights,
            total_weight: 0,
            max_tenants: max_tenants.max(1),
            overflow: Arc::from(OVERFLOW),
        }
    }

    /// The key a request of `tenant` is counted under.
    pub fn key(&self, tenant: &str) -> Arc<str> {
        if let Some((k, _)) = self.active.get_key_value(tenant) {
            return k.clone();
        }
        if self.active.len() >= self.max_tenants {
            return self.overflow.clone();
        }
        Arc::from(tenant)
    }

    pub fn active(&self) -> usize {
        self.active.len()
    }

    fn entry(&mut self, key: &Arc<str>) -> &mut Usage {
        let weights = &self.weights;
        let total = &mut self.total_weight;
        self.active.entry(key.clone()).or_insert_with(|| {
            let weight = weights.get(&**key).copied().unwrap_or(1).max(1);
            *total += u64::from(weight);
            Usage {
                weight,
                ..Usage::default()
            }
        })
    }

    fn tidy(&mut self, key: &Arc<str>) {
        if let Some(u) = self.active.get(key) {
            if u.total() == 0 {
                self.total_weight -= u64::from(u.weight);
                self.active.remove(key);
            }
        }
    }

    pub fn queue(&mut self, key: &Arc<str>) {
        self.entry(key).queued += 1;
    }

    pub fn unqueue(&mut self, key: &Arc<str>) {
        if let Some(u) = self.active.get_mut(key) {
            u.queued = u.queued.saturating_sub(1);
        }
        self.tidy(key);
    }

    pub fn start(&mut self, key: &Arc<str>) {
        self.entry(key).in_flight += 1;
    }

    pub fn finish(&mut self, key: &Arc<str>) {
        if let Some(u) = self.active.get_mut(key) {
            u.in_flight = u.in_flight.saturating_sub(1);
        }
        self.tidy(key);
    }

    pub fn usage(&self, key: &str) -> Usage {
        self.active.get(key).copied().unwrap_or(Usage {
            weight: self.weights.get(key).copied().unwrap_or(1).max(1),
            ..Usage::default()
        })
    }

    /// How far `key`'s requests (in flight and queued, plus `extra` about to be) are into its
    /// fair share of `limit`: below 1 within the share, above 1 over it.
    pub fn share_used(&self, key: &str, extra: usize, limit: usize) -> f64 {
        let u = self.usage(key);
        let known = self.active.contains_key(key);
        let total = self.total_weight + if known { 0 } else { u64::from(u.weight) };
        let share = limit.max(1) as f64 * f64::from(u.weight) / total.max(1) as f64;
        (u.total() + extra) as f64 / share.max(f64::MIN_POSITIVE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_go_when_a_tenant_has_nothing_left() {
        let mut t = Tenants::new(10, HashMap::new());
        let a = t.key("a");
        t.queue(&a);
        t.unqueue(&a);
        t.start(&a);
        assert_eq!(t.active(), 1);
        t.finish(&a);
        assert_eq!(t.active(), 0);
        assert_eq!(t.total_weight, 0);
    }

    #[test]
    fn keys_beyond_the_bound_share_one_entry() {
        let mut t = Tenants::new(3, HashMap::new());
        for i in 0..1000 {
            let k = t.key(&format!("attacker-{i}"));
            t.start(&k);
        }
        // Three apart, plus the overflow entry the other 997 share.
        assert_eq!(t.active(), 4);
        assert_eq!(t.usage(OVERFLOW).in_flight, 997);
    }

    #[test]
    fn weights_divide_the_limit() {
        let weights = HashMap::from([("big".to_string(), 3)]);
        let mut t = Tenants::new(10, weights);
        let (big, small) = (t.key("big"), t.key("small"));
        t.start(&big);
        t.start(&small);
        // limit 8: big's share 6, small's 2.
        assert_eq!(t.share_used("big", 0, 8), 1.0 / 6.0);
        assert_eq!(t.share_used("small", 1, 8), 1.0);
        // A newcomer counts its own weight in the total: 8 · 1 / 5.
        assert_eq!(t.share_used("new", 1, 8), 1.0 / 1.6);
    }
}
