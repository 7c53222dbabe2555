//! A store that answers but cannot decide (`OOM` under `maxmemory`, `NOREPLICAS`, `BUSY` behind a
//! long script): each class falls back as when the store is down, the fallback is counted, the
//! circuit opens, and billing is charged exactly once the store can decide again.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelimit_client::{
    CircuitConfig, Class, Config, Error, Limit, Limiter, ManualClock, Policy, Source, Store,
};
use support::Server;

fn config(clock: &Arc<ManualClock>) -> Config {
    Config {
        // Long: an error reply is immediate, so no check here ever reaches it.
        deadline: Duration::from_secs(5),
        gateways: Some(4),
        circuit: CircuitConfig {
            failures: 3,
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        },
        clock: clock.clone(),
        ..Config::default()
    }
}

fn limits() -> (Limit, Limit, Limit) {
    (
        Limit::new("login", Policy::gcra(8, 60_000), Class::Security),
        Limit::new("api", Policy::gcra(100, 1000), Class::Contract),
        Limit::new(
            "quota",
            Policy::fixed_window(100, 86_400_000),
            Class::Billing,
        ),
    )
}

/// Checks every class while the store refuses; `refusal` says what the store answers.
async fn each_class_falls_back(l: &Limiter, clock: &ManualClock, tag: &str) {
    let (login, api, quota) = limits();
    let before = l.stats();
    for i in 0..5 {
        let d = l.check(&login, &format!("{tag}:login")).await.unwrap();
        assert_eq!(d.source, Source::Fallback(Class::Security), "{tag} {i}");
        assert_eq!(d.allowed, i < 2, "{tag} {i}: L/N = 8/4");
        let d = l.check(&api, &format!("{tag}:api")).await.unwrap();
        assert_eq!(d.source, Source::Fallback(Class::Contract), "{tag} {i}");
        let d = l.check(&quota, &format!("{tag}:quota")).await.unwrap();
        assert!(d.allowed, "{tag}: billing fails open");
        assert_eq!(d.source, Source::Fallback(Class::Billing), "{tag} {i}");
    }
    let after = l.stats();
    assert_eq!(after.fallbacks - before.fallbacks, 15, "{tag}");
    assert!(l.circuit_open(), "{tag}: the refusals opened the circuit");
    // 3 refusals opened it; the rest did not call the store.
    assert_eq!(after.store_calls - before.store_calls, 3, "{tag}");
    assert_eq!(l.unsettled().get(&format!("{tag}:quota")), Some(&5));
    // A probe while it still refuses keeps it open.
    clock.advance(Duration::from_secs(2));
    l.check(&api, &format!("{tag}:api")).await.unwrap();
    assert!(l.circuit_open(), "{tag}");
}

/// Checks until the store decides again (the client's clock past each backoff), then waits for
/// the ledger to be charged.
async fn recovers(l: &Limiter, clock: &ManualClock, s: &Server, tag: &str) {
    let (_, api, _) = limits();
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        clock.advance(Duration::from_secs(2));
        let d = l.check(&api, &format!("{tag}:api")).await.unwrap();
        if d.source == Source::Store {
            break;
        }
        assert!(Instant::now() < until, "{tag}: the store never came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let until = Instant::now() + Duration::from_secs(10);
    while !l.unsettled().is_empty() {
        assert!(
            Instant::now() < until,
            "{tag}: still owed {:?}",
            l.unsettled()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // An error reply is definite (the call did not run): counted exactly, 5 of 100.
    let key = format!("{tag}:quota");
    assert_eq!(s.ints(&["RL.PEEK", &key])[2], 95, "{tag}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_memory_and_too_few_replicas_are_the_store_down_for_every_class() {
    let s = Server::start();
    let clock = support::manual_clock();
    let l = Limiter::new(Store::connect(&s.url()).await.unwrap(), config(&clock));
    let (_, api, _) = limits();
    assert_eq!(l.check(&api, "warm").await.unwrap().source, Source::Store);

    let config_set = |k: &str, v: &str| {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query(&mut s.connect())
            .unwrap();
    };
    config_set("maxmemory", "1");
    // The typed call says why.
    match l.store().decide("oom:x", &Policy::gcra(1, 1000), 1).await {
        Err(Error::Unavailable(m)) => assert!(m.starts_with("OOM"), "{m}"),
        other => panic!("{other:?}"),
    }
    each_class_falls_back(&l, &clock, "oom").await;
    config_set("maxmemory", "0");
    recovers(&l, &clock, &s, "oom").await;

    config_set("min-replicas-to-write", "1");
    each_class_falls_back(&l, &clock, "norepl").await;
    config_set("min-replicas-to-write", "0");
    recovers(&l, &clock, &s, "norepl").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_past_the_busy_threshold_is_the_store_down() {
    let s = Server::with(&["--busy-reply-threshold", "10"]);
    let clock = support::manual_clock();
    let l = Limiter::new(Store::connect(&s.url()).await.unwrap(), config(&clock));
    let (_, api, _) = limits();
    assert_eq!(l.check(&api, "warm").await.unwrap().source, Source::Store);

    // A script that never ends, on its own connection (its caller blocks until SCRIPT KILL).
    let mut busy = s.connect();
    let script = std::thread::spawn(move || {
        redis::cmd("EVAL")
            .arg("while true do end")
            .arg(0)
            .query::<redis::Value>(&mut busy)
    });
    // Until the server says BUSY to everyone else.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match s.value(&["PING"]) {
            Err(e) if e.code() == Some("BUSY") => break,
            _ => assert!(Instant::now() < until, "the script never got busy"),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    each_class_falls_back(&l, &clock, "busy").await;
    let _ = s.value(&["SCRIPT", "KILL"]);
    assert!(script.join().unwrap().is_err(), "the script was killed");
    recovers(&l, &clock, &s, "busy").await;
}
