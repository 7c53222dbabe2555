//! Leases: tokens this process takes from the store k at a time (`RL.LEASE`) and spends locally
//! until they lapse; unspent ones go back with `RL.REFUND` at shutdown.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::call::{Mode, Shared};
use crate::clock::ns;
use crate::command::{Decision, Policy, Source};
use crate::error::Error;
use crate::fallback::MAX_LOCAL_KEYS;
use crate::store::Store;
use crate::sync::lock;

#[derive(Default)]
struct Pool {
    tokens: u64,
    /// The store had no token before this instant: deny locally until then.
    empty_until_ns: u64,
    expires_ns: u64,
    store_remaining: u64,
    limit: u64,
    reset_after_ms: u64,
}

/// The pools of leased tokens, by store key.
#[derive(Default)]
pub(crate) struct Leases {
    pools: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Pool>>>>,
}

impl Leases {
    /// Spends leased tokens, taking a new lease when they run out or lapse.
    pub(crate) async fn leased(
        &self,
        shared: &Arc<Shared>,
        key: &str,
        policy: &Policy,
        cost: u64,
        k: u64,
        latency: &mut Option<Duration>,
    ) -> Result<Decision, Error> {
        let pool = {
            let mut pools = lock(&self.pools);
            if pools.len() >= MAX_LOCAL_KEYS {
                let now = shared.config.clock.now_ns();
                pools.retain(|_, p| p.try_lock().map_or(true, |p| p.expires_ns > now));
            }
            pools.entry(key.to_string()).or_default().clone()
        };
        // Requests for one key queue for its pool; none waits longer than the deadline.
        let mut p = tokio::time::timeout(shared.deadline.current(), pool.lock())
            .await
            .map_err(|_| Error::Timeout)?;
        let now = shared.config.clock.now_ns();
        if p.expires_ns <= now && p.tokens > 0 {
            shared
                .counters
                .lapsed
                .fetch_add(p.tokens, Ordering::Relaxed);
            p.tokens = 0;
        }
        if p.tokens >= cost {
            p.tokens -= cost;
            shared.counters.lease_spent.fetch_add(1, Ordering::Relaxed);
            return Ok(Decision {
                allowed: true,
                granted: 1,
                limit: p.limit,
                remaining: p.store_remaining.saturating_add(p.tokens),
                retry_after_ms: None,
                reset_after_ms: p.reset_after_ms,
                source: Source::Lease,
            });
        }
        if now < p.empty_until_ns {
            // The store said when a token is back: no call before then.
            return Ok(Decision {
                allowed: false,
                granted: 0,
                limit: p.limit,
                remaining: p.tokens,
                retry_after_ms: Some((p.empty_until_ns - now).div_ceil(1_000_000)),
                reset_after_ms: p.reset_after_ms,
                source: Source::Lease,
            });
        }
        let want = k.max(cost).saturating_sub(p.tokens).max(1);
        let d = shared
            .call(
                latency,
                Mode::Request,
                shared.store.lease(key, policy, want),
            )
            .await?;
        if d.granted > 0 {
            if p.tokens == 0 {
                p.expires_ns = now.saturating_add(ns(shared.config.lease_lifetime));
            }
            p.tokens += d.granted;
        }
        if d.granted == 0 {
            let retry_ns = d.retry_after_ms.unwrap_or(0).saturating_mul(1_000_000);
            p.empty_until_ns = now.saturating_add(retry_ns);
        }
        p.store_remaining = d.remaining;
        p.limit = d.limit;
        p.reset_after_ms = d.reset_after_ms;
        if p.tokens >= cost {
            p.tokens -= cost;
            Ok(Decision {
                allowed: true,
                granted: 1,
                remaining: d.remaining.saturating_add(p.tokens),
                retry_after_ms: None,
                ..d
            })
        } else {
            // Not enough for this cost: keep what was granted, say when the rest comes.
            let missing = cost - p.tokens;
            let per_token = policy.window_ms.div_ceil(policy.limit.max(1));
            let retry = d
                .retry_after_ms
                .unwrap_or_else(|| missing.saturating_mul(per_token));
            Ok(Decision {
                allowed: false,
                granted: 0,
                remaining: p.tokens,
                retry_after_ms: Some(retry),
                ..d
            })
        }
    }

    /// Gives every unexpired leased token back (shutdown); the tokens given back.
    pub(crate) async fn refund(&self, shared: &Arc<Shared>, store: &Store) -> u64 {
        let mut refunded = 0;
        let pools: Vec<(String, Arc<tokio::sync::Mutex<Pool>>)> = lock(&self.pools)
            .iter()
            .map(|(k, p)| (k.clone(), p.clone()))
            .collect();
        let now = shared.config.clock.now_ns();
        for (key, pool) in pools {
            let mut p = pool.lock().await;
            if p.tokens > 0 && p.expires_ns > now {
                let mut latency = None;
                if let Ok(Some(d)) = shared
                    .call(&mut latency, Mode::Forced, store.refund(&key, p.tokens))
                    .await
                {
                    refunded += d.granted;
                }
            }
            p.tokens = 0;
        }
        refunded
    }
}
