//! Leases: tokens taken k at a time with RL.LEASE and spent locally; a fleet of gateways never
//! admits more than the bucket allows and calls the store about 1/k as often; unspent tokens
//! lapse after the lease lifetime and go back with RL.REFUND on shutdown.

mod support;

use std::sync::Arc;
use std::time::Duration;

use ratelimit_client::{Class, Config, Limit, Limiter, ManualClock, Policy, Source, Store};
use support::Server;

const K: u64 = 10;

/// A gateway whose store calls wait up to `deadline`.
async fn gateway(s: &Server, clock: &Arc<ManualClock>, deadline: Duration) -> Limiter {
    let store = Store::connect(&s.url()).await.unwrap();
    Limiter::new(
        store,
        Config {
            deadline,
            gateways: Some(4),
            clock: clock.clone(),
            ..Config::default()
        },
    )
}

/// `n` requests at once on one gateway; how many were admitted.
async fn burst(l: &Limiter, limit: &Limit, key: &str, n: usize) -> u64 {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (l, limit, key) = (l.clone(), limit.clone(), key.to_string());
            tokio::spawn(async move { l.check(&limit, &key).await.unwrap() })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        let d = t.await.unwrap();
        assert_ne!(d.source, Source::Fallback(Class::Contract), "{d:?}");
        admitted += u64::from(d.allowed);
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_never_exceeds_the_bucket_and_calls_the_store_once_per_k() {
    let s = Server::start();
    let clock = support::manual_clock();
    let limit = Limit::new("api", Policy::token_bucket(100, 1000), Class::Contract).lease(K);
    // Generous: 240 checks queue on each gateway's lease calls, and a loaded machine must not
    // turn a slow reply into a fallback.
    let fleet = futures(4, |_| gateway(&s, &clock, Duration::from_secs(5))).await;

    // The server's clock is pinned: the bucket holds B = 100 and does not refill.
    let mut admitted = 0;
    let runs: Vec<_> = fleet
        .iter()
        .map(|g| {
            let (g, limit) = (g.clone(), limit.clone());
            tokio::spawn(async move { burst(&g, &limit, "fleet:key", 60).await })
        })
        .collect();
    for r in runs {
        admitted += r.await.unwrap();
    }
    let leases = s.calls("RL.LEASE");
    assert!(admitted <= 100, "admitted {admitted} of a bucket of 100");
    assert!(admitted >= 100 - 4 * K, "admitted only {admitted}");
    // 240 requests: about 100/k grants, and one empty answer per gateway (then it waits locally).
    assert!(leases <= 100 / K + 2 * 4, "{leases} RL.LEASE calls");
    let spent_locally: u64 = fleet.iter().map(|g| g.stats().lease_spent).sum();
    assert!(spent_locally >= admitted - leases, "{spent_locally}");

    // Half a window later 50 tokens are back (and the gateways' waits are over).
    s.clock_advance(500);
    clock.advance(Duration::from_millis(500));
    let runs: Vec<_> = fleet
        .iter()
        .map(|g| {
            let (g, limit) = (g.clone(), limit.clone());
            tokio::spawn(async move { burst(&g, &limit, "fleet:key", 30).await })
        })
        .collect();
    let mut later = 0;
    for r in runs {
        later += r.await.unwrap();
    }
    // B + L·t/W = 100 + 50: never more over the whole run.
    assert!(admitted + later <= 150, "{admitted} + {later}");

    // Shutdown gives back what is unspent: the bucket then holds exactly what was not admitted.
    let mut refunded = 0;
    for g in &fleet {
        refunded += g.shutdown().await.refunded;
    }
    let remaining = s.ints(&["RL.PEEK", "fleet:key"])[2] as u64;
    assert_eq!(
        remaining,
        (150 - admitted - later).min(100),
        "refunded {refunded}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unspent_tokens_lapse_after_the_lifetime() {
    let s = Server::start();
    let clock = support::manual_clock();
    let g = gateway(&s, &clock, Duration::from_secs(5)).await;
    let limit = Limit::new("api", Policy::token_bucket(100, 1000), Class::Contract).lease(K);
    assert_eq!(
        g.check(&limit, "lapse").await.unwrap().source,
        Source::Store
    );
    for _ in 0..4 {
        assert_eq!(
            g.check(&limit, "lapse").await.unwrap().source,
            Source::Lease
        );
    }
    // The default lifetime is 1 s: the 5 unspent tokens lapse; a new lease is taken.
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        g.check(&limit, "lapse").await.unwrap().source,
        Source::Store
    );
    assert_eq!(g.stats().lapsed_tokens, 5);
    assert_eq!(s.calls("RL.LEASE"), 2);
    assert_eq!(s.ints(&["RL.PEEK", "lapse"])[2], 80);
    // Shutdown refunds the 9 unspent of the second lease, never the lapsed ones.
    assert_eq!(g.shutdown().await.refunded, 9);
    assert_eq!(s.ints(&["RL.PEEK", "lapse"])[2], 89);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leased_tokens_are_spent_while_the_store_is_stalled() {
    let s = Server::start();
    let clock = support::manual_clock();
    // Short: the last check waits it out on the stalled store.
    let g = gateway(&s, &clock, Duration::from_millis(500)).await;
    let limit = Limit::new("api", Policy::token_bucket(100, 1000), Class::Contract).lease(K);
    assert_eq!(
        g.check(&limit, "stall").await.unwrap().source,
        Source::Store
    );
    s.stop();
    // Spent here without a store call, so nothing waits on the stalled store (counted, not
    // timed: a loaded machine can take longer than any bound on a local call).
    let calls = g.stats().store_calls;
    for _ in 0..9 {
        let d = g.check(&limit, "stall").await.unwrap();
        assert_eq!(d.source, Source::Lease);
    }
    assert_eq!(g.stats().store_calls, calls);
    // The lease is spent: the contract fallback (100/4) decides.
    let d = g.check(&limit, "stall").await.unwrap();
    assert_eq!(d.source, Source::Fallback(Class::Contract));
    s.resume();
}

async fn futures<T, F: std::future::Future<Output = T>>(
    n: usize,
    f: impl Fn(usize) -> F,
) -> Vec<T> {
    let mut out = Vec::new();
    for i in 0..n {
        out.push(f(i).await);
    }
    out
}
