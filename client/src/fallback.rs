//! What each class decides without the store: a local bucket per (limit, key) for Security and
//! Contract, fail open and count for Billing (the count goes to the billing ledger).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use crate::command::{Class, Decision, Policy, Source};
use crate::limiter::lock;
use crate::local::LocalBucket;
use crate::{Limit, Limiter};

/// Fallback buckets and lease pools kept at most (the least useful are dropped beyond it).
pub(crate) const MAX_LOCAL_KEYS: usize = 100_000;

/// The local buckets, by (limit name, store key).
#[derive(Default)]
pub(crate) struct Fallback {
    buckets: Mutex<HashMap<(String, String), LocalBucket>>,
}

impl Limiter {
    /// The class's decision without the store. `commit` false decides on a copy (RL.ALL's
    /// first pass).
    pub(crate) fn fall_back(
        &self,
        limit: &Limit,
        key: &str,
        policy: &Policy,
        cost: u64,
        commit: bool,
    ) -> Decision {
        let i = &self.inner;
        let source = Source::Fallback(limit.class);
        if commit {
            i.counters.fallbacks.fetch_add(1, Ordering::Relaxed);
        }
        let now = i.config.clock.now_ns();
        let bucket = match limit.class {
            Class::Billing => return i.ledger.fail_open(key, policy, cost, commit, source),
            Class::Security => match (limit.local, i.config.gateways) {
                (Some((l, w)), _) => LocalBucket::explicit(l, w),
                (None, Some(n)) => LocalBucket::share_of(policy, u64::from(n)),
                (None, None) => {
                    return Decision {
                        allowed: false,
                        granted: 0,
                        limit: policy.capacity(),
                        remaining: 0,
                        retry_after_ms: Some(
                            u64::try_from(i.config.fail_closed_retry.as_millis()).unwrap_or(1000),
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
                    i.config.gateways.unwrap_or(1)
                };
                LocalBucket::share_of(policy, u64::from(n))
            }
        };
        let mut buckets = lock(&i.fallback.buckets);
        if buckets.len() >= MAX_LOCAL_KEYS {
            buckets.retain(|_, b| !b.full_at(now));
        }
        let b = buckets
            .entry((limit.name.clone(), key.to_string()))
            .or_insert(bucket);
        if commit {
            b.take(now, cost, source)
        } else {
            b.clone().take(now, cost, source)
        }
    }
}
