//! Reserve, then settle (model tokens): concurrent requests reserve an estimate, then settle at
//! what they really used, some far above it; the store counts exactly the sum of what was used.
//! Reservations dropped without a settle give their estimate back after the grace; a Billing
//! overage settled while the store is stalled is journaled and charged when it answers.

mod support;

use std::time::Duration;

use ratelimit_client::{Class, Config, Limit, Limiter, Policy, Settlement, Source, Store};
use support::proxy::{Fault, Proxy};
use support::{counted, limiter, Server};

/// What request `i` really used: mostly under its estimate of 100, one in five far above it.
fn actual(i: u64) -> u64 {
    let mut x = (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 29;
    if x.is_multiple_of(5) {
        500 + x % 2500
    } else {
        x % 200
    }
}

const ESTIMATE: u64 = 100;

/// 50 requests at once reserve 100 tokens each from 5,000 per minute (GCRA: 12 ms a token) and
/// settle at what they used; the `drop_every`-th drops its reservation instead. Returns the
/// admitted requests' (actual, settled) pairs.
async fn fifty(l: &Limiter, limit: &Limit, key: &str, drop_every: u64) -> Vec<(u64, bool)> {
    // Every reservation is decided before any settles: which of them the store admits then
    // depends on the estimates alone, not on how the tasks interleave on a loaded machine.
    let reserved = std::sync::Arc::new(tokio::sync::Barrier::new(50));
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let (l, limit, key) = (l.clone(), limit.clone(), key.to_string());
            let reserved = reserved.clone();
            tokio::spawn(async move {
                let r = l
                    .reserve(&[(&limit, &key)], ESTIMATE)
                    .await
                    .unwrap()
                    .with_grace(Duration::from_secs(10));
                reserved.wait().await;
                if !r.admitted() {
                    return None;
                }
                assert_eq!(r.decision().combined.source, Source::Store);
                if drop_every > 0 && i % drop_every == 0 {
                    drop(r);
                    return Some((actual(i), false));
                }
                match r.settle(actual(i)).await.unwrap() {
                    Settlement::Store(all) => {
                        let moved = all.limiters[0].granted;
                        assert_eq!(moved, actual(i).abs_diff(ESTIMATE), "request {i}");
                    }
                    Settlement::Nothing => assert_eq!(actual(i), ESTIMATE),
                    other => panic!("request {i}: {other:?}"),
                }
                Some((actual(i), true))
            })
        })
        .collect();
    let mut admitted = Vec::new();
    for t in tasks {
        admitted.extend(t.await.unwrap());
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_requests_are_charged_exactly_what_they_used() {
    let s = Server::start();
    let clock = support::manual_clock();
    let l = limiter(&s, &clock).await;
    let limit = Limit::new("tokens", Policy::gcra(5000, 60_000), Class::Contract);
    let admitted = fifty(&l, &limit, "tok:a", 0).await;
    assert!(admitted.len() >= 10, "{admitted:?}");
    let used: u64 = admitted.iter().map(|(a, _)| a).sum();
    assert_eq!(counted(&s, "tok:a"), used);
    // Whatever the overages, the next reservation waits exactly until the debt and its own
    // estimate fit the 5,000 again: 12 ms a token.
    let next = l.reserve(&[(&limit, "tok:a")], ESTIMATE).await.unwrap();
    let owed = (used + ESTIMATE).saturating_sub(5000);
    assert!(owed > 0, "the overages put the key into debt: {admitted:?}");
    assert!(!next.admitted());
    assert_eq!(next.decision().combined.retry_after_ms, Some(owed * 12));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_reservations_give_their_estimate_back_after_the_grace() {
    let s = Server::start();
    let clock = support::manual_clock();
    let l = limiter(&s, &clock).await;
    let limit = Limit::new("tokens", Policy::gcra(5000, 60_000), Class::Contract);
    let admitted = fifty(&l, &limit, "tok:b", 3).await;
    let settled: u64 = admitted.iter().filter(|a| a.1).map(|a| a.0).sum();
    let dropped = admitted.iter().filter(|a| !a.1).count() as u64;
    assert!(dropped > 0, "{admitted:?}");
    assert_eq!(counted(&s, "tok:b"), settled + dropped * ESTIMATE);
    // Within the grace nothing goes back; after it, every dropped estimate does.
    assert_eq!(l.give_back_dropped().await, 0);
    clock.advance(Duration::from_secs(10));
    assert_eq!(l.give_back_dropped().await as u64, dropped);
    assert_eq!(counted(&s, "tok:b"), settled);
}

/// A key and its tenant: one reservation, one settle over both (`RL.SETTLE`), each by the
/// difference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_limits_settle_in_one_call() {
    let s = Server::start();
    let clock = support::manual_clock();
    let l = limiter(&s, &clock).await;
    let key = Limit::new("key", Policy::gcra(20_000, 60_000), Class::Contract);
    let tenant = Limit::new("tenant", Policy::gcra(100_000, 60_000), Class::Contract);
    let limits = [(&key, "tok:{t}:key"), (&tenant, "tok:{t}:tenant")];
    let r = l.reserve(&limits, 1500).await.unwrap();
    assert!(r.admitted());
    let Settlement::Store(all) = r.settle(4200).await.unwrap() else {
        panic!("not settled by the store")
    };
    assert_eq!(all.limiters[0].granted, 2700);
    assert_eq!(all.limiters[1].granted, 2700);
    assert_eq!(s.calls("RL.SETTLE"), 1);
    assert_eq!(counted(&s, "tok:{t}:key"), 4200);
    assert_eq!(counted(&s, "tok:{t}:tenant"), 4200);
    let r = l.reserve(&limits, 1500).await.unwrap();
    r.settle(300).await.unwrap();
    assert_eq!(counted(&s, "tok:{t}:key"), 4500);
}

/// The store cannot be reached between the reservation and the settle: a Billing overage is
/// owed to the ledger, then charged when the store answers again; a Contract one is not settled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_billing_overage_waits_in_the_ledger_while_the_store_is_unreachable() {
    let s = Server::start();
    let clock = support::manual_clock();
    let proxy = Proxy::start(s.port).await;
    let l = Limiter::new(
        Store::connect(&proxy.url()).await.unwrap(),
        Config {
            deadline: Duration::from_millis(500),
            clock: clock.clone(),
            ..Config::default()
        },
    );
    let billing = Limit::new("billing", Policy::gcra(100_000, 60_000), Class::Billing);
    let contract = Limit::new("contract", Policy::gcra(100_000, 60_000), Class::Contract);
    let b = l.reserve(&[(&billing, "tok:bill")], 1000).await.unwrap();
    let c = l
        .reserve(&[(&contract, "tok:contract")], 1000)
        .await
        .unwrap();
    // Connections closed and refused: the settles never reach the store.
    proxy.set(Fault::Drop);
    assert_eq!(
        b.settle(3500).await.unwrap(),
        Settlement::Local {
            journaled: 2500,
            dropped: 0
        }
    );
    assert_eq!(l.unsettled().get("tok:bill"), Some(&2500));
    assert_eq!(
        c.settle(3500).await.unwrap(),
        Settlement::Local {
            journaled: 0,
            dropped: 2500
        }
    );
    proxy.set(Fault::None);
    let report = l.shutdown().await;
    assert_eq!((report.charged, report.unsettled), (2500, 0));
    assert_eq!(counted(&s, "tok:bill"), 3500);
    assert_eq!(counted(&s, "tok:contract"), 1000);
}
