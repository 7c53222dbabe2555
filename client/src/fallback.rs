//! What each class decides without the store: a local bucket per (limit, key) for Security and
//! Contract, fail open and count for Billing (the count goes to the billing ledger).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use crate::billing::ledger::Ledger;
use crate::call::Shared;
use crate::command::{Class, Decision, Policy, Source};
use crate::limit::Limit;
use crate::local::LocalBucket;
use crate::sync::lock;

/// Fallback buckets and lease pools kept at most (the least useful are dropped beyond it).
pub(crate) const MAX_LOCAL_KEYS: usize = 100_000;

/// The local buckets, by (limit name, store key), and the store's last answer for each
/// Security key (where its bucket starts when the store stops answering).
#[derive(Default)]
pub(crate) struct Fallback {
    buckets: Mutex<HashMap<(String, String), LocalBucket>>,
    seen: Mutex<HashMap<(String, String), Seen>>,
}

/// What the store last said about a key: `remaining` at `at_ns`, full again at `full_ns`.
#[derive(Clone, Copy)]
struct Seen {
    remaining: u64,
    capacity: u64,
    at_ns: u64,
    full_ns: u64,
}

impl Fallback {
    /// What the store last said about a key that is not full again by `now_ns`: its remaining
    /// and the ms until it is full, as of now.
    pub(crate) fn last(&self, limit: &Limit, key: &str, now_ns: u64) -> Option<(u64, u64)> {
        let id = (limit.name.clone(), key.to_string());
        let s = *lock(&self.seen).get(&id)?;
        (s.full_ns > now_ns).then(|| (s.remaining, (s.full_ns - now_ns).div_ceil(1_000_000)))
    }

    /// Remembers the store's decision for a Security or Billing key, and forgets the key's fallback bucket
    /// (the next outage starts from this decision, not from the last one's bucket).
    pub(crate) fn seen(&self, limit: &Limit, key: &str, d: &Decision, now_ns: u64) {
        let id = (limit.name.clone(), key.to_string());
        lock(&self.buckets).remove(&id);
        let mut seen = lock(&self.seen);
        if seen.len() >= MAX_LOCAL_KEYS {
            seen.retain(|_, s| s.full_ns > now_ns);
            if seen.len() >= MAX_LOCAL_KEYS {
                // All still meaningful (long windows): forget them rather than grow.
                seen.clear();
            }
        }
        let full_ns = now_ns.saturating_add(d.reset_after_ms.saturating_mul(1_000_000));
        seen.insert(
            id,
            Seen {
                remaining: d.remaining,
                capacity: d.limit,
                at_ns: now_ns,
                full_ns,
            },
        );
    }

    /// `bucket` started from the store's last decision on the key, scaled to the bucket's share
    /// of the capacity; full when the store never answered for it (or it is full again by now).
    fn started(&self, id: &(String, String), bucket: LocalBucket, now_ns: u64) -> LocalBucket {
        match lock(&self.seen).get(id) {
            Some(s) if s.full_ns > now_ns => {
                let share = u128::from(s.remaining) * u128::from(bucket.capacity())
                    / u128::from(s.capacity.max(1));
                bucket.starting_at(u64::try_from(share).unwrap_or(u64::MAX), s.at_ns)
            }
            _ => bucket,
        }
    }
}

impl Fallback {
    /// The class's decision without the store (Billing's from the `ledger`). `commit` false
    /// decides on a copy (RL.ALL's first pass).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn decide(
        &self,
        shared: &Shared,
        ledger: &Ledger,
        limit: &Limit,
        key: &str,
        policy: &Policy,
        cost: u64,
        commit: bool,
    ) -> Decision {
        let source = Source::Fallback(limit.class);
        if commit {
            shared.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
        }
        let now = shared.config.clock.now_ns();
        let bucket = match limit.class {
            // Never sent to the store, so never here; admitted, as everywhere.
            Class::Capacity => return Decision::to_shedder(policy, cost),
            Class::Billing => {
                let last = self.last(limit, key, now);
                return ledger.fail_open(key, policy, cost, commit, source, last);
            }
            Class::Security => match (limit.local, shared.config.gateways) {
                (Some((l, w)), _) => LocalBucket::explicit(l, w),
                (None, Some(n)) => LocalBucket::share_of(policy, u64::from(n)),
                (None, None) => {
                    return Decision {
                        allowed: false,
                        granted: 0,
                        limit: policy.capacity(),
                        remaining: 0,
                        retry_after_ms: Some(
                            u64::try_from(shared.config.fail_closed_retry.as_millis())
                                .unwrap_or(1000),
                        ),
                        reset_after_ms: 0,
                        source,
                    }
                }
            },
            Class::Contract => {
                let n = if limit.overshoot {
                    1
                } else {
                    shared.config.gateways.unwrap_or(1)
                };
                LocalBucket::share_of(policy, u64::from(n))
            }
        };
        let mut buckets = lock(&self.buckets);
        if buckets.len() >= MAX_LOCAL_KEYS {
            buckets.retain(|_, b| !b.full_at(now));
        }
        let id = (limit.name.clone(), key.to_string());
        let b = match buckets.entry(id) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let bucket = if limit.class == Class::Security {
                    self.started(e.key(), bucket, now)
                } else {
                    bucket
                };
                e.insert(bucket)
            }
        };
        if commit {
            b.take(now, cost, source)
        } else {
            b.clone().take(now, cost, source)
        }
    }
}
