//! Faults injected for real (SIGSTOP, kill, restart, and a TCP proxy that adds latency, drops or
//! half-opens connections): each class's promised decision within the deadline, the circuit that
//! stops paying the stall, and the store's state reconciled after recovery.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelimit_client::{
    CircuitConfig, Class, Config, Decision, Limit, Limiter, ManualClock, Policy, Source, Store,
};
use support::proxy::{Fault, Proxy};
use support::Server;

const DEADLINE: Duration = Duration::from_millis(100);
/// What a loaded 2-core CI machine may add to a deadline (scheduling, not the store).
const SLACK: Duration = Duration::from_millis(400);

fn config(clock: &Arc<ManualClock>, gateways: Option<u32>) -> Config {
    Config {
        deadline: DEADLINE,
        gateways,
        circuit: CircuitConfig {
            failures: 3,
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        },
        clock: clock.clone(),
        ..Config::default()
    }
}

async fn limiter(url: &str, clock: &Arc<ManualClock>, gateways: Option<u32>) -> Limiter {
    let store = Store::connect(url).await.unwrap();
    Limiter::new(store, config(clock, gateways))
}

/// A check that must decide within the deadline (plus scheduling slack).
async fn timed(l: &Limiter, limit: &Limit, key: &str) -> Decision {
    let t = Instant::now();
    let d = l.check(limit, key).await.unwrap();
    assert!(
        t.elapsed() < DEADLINE + SLACK,
        "{key}: took {:?}",
        t.elapsed()
    );
    d
}

/// Moves the client's clock past the backoff and checks until the store decides again (bounded).
async fn until_store(l: &Limiter, clock: &ManualClock, limit: &Limit, key: &str) -> Decision {
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        clock.advance(Duration::from_secs(2));
        let d = l.check(limit, key).await.unwrap();
        if d.source == Source::Store {
            return d;
        }
        assert!(Instant::now() < until, "the store never came back: {d:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `RL.PEEK key` until its `remaining` is `expected` (the reconcile runs in a task).
async fn wait_remaining(s: &Server, key: &str, expected: i64) {
    wait_counted(s, key, expected, 0).await
}

/// Polls until the store counted at least what was admitted (`remaining` at most `expected`),
/// then checks it counted at most `over` more: calls that timed out in flight and ran later.
async fn wait_counted(s: &Server, key: &str, expected: i64, over: u64) {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let r = s.ints(&["RL.PEEK", key]);
        if r[2] <= expected {
            assert!(
                r[2] >= expected - over as i64,
                "{key}: remaining {} below {expected} - {over}",
                r[2]
            );
            return;
        }
        assert!(
            Instant::now() < until,
            "{key}: remaining {} not {expected}",
            r[2]
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn limits() -> (Limit, Limit, Limit, Limit) {
    (
        Limit::new("login", Policy::gcra(8, 60_000), Class::Security),
        Limit::new("api", Policy::gcra(100, 1000), Class::Contract),
        Limit::new("api-loose", Policy::gcra(100, 1000), Class::Contract).overshoot(true),
        Limit::new(
            "quota",
            Policy::fixed_window(100, 86_400_000),
            Class::Billing,
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_store_each_class_decides_within_the_deadline_then_reconciles() {
    let s = Server::start();
    let clock = support::manual_clock();
    let l = limiter(&s.url(), &clock, Some(4)).await;
    let (login, api, loose, quota) = limits();
    for _ in 0..30 {
        assert_eq!(timed(&l, &quota, "q:1").await.source, Source::Store);
    }
    assert_eq!(timed(&l, &api, "a:1").await.source, Source::Store);

    s.stop();
    // Security: L/N = 2 of 8 per minute in this gateway, then denied.
    let d: Vec<Decision> = futures_all(&l, &login, "login:alice", 3).await;
    assert!(d
        .iter()
        .all(|d| d.source == Source::Fallback(Class::Security)));
    assert_eq!(d.iter().filter(|d| d.allowed).count(), 2);
    assert!(d[2].retry_after_ms.is_some());
    // Contract: a bucket of 100/4 = 25 here; with overshoot the whole 100.
    let d = futures_all(&l, &api, "a:2", 26).await;
    assert_eq!(d.iter().filter(|d| d.allowed).count(), 25);
    assert!(d
        .iter()
        .all(|d| d.source == Source::Fallback(Class::Contract)));
    let d = futures_all(&l, &loose, "a:3", 101).await;
    assert_eq!(d.iter().filter(|d| d.allowed).count(), 100);
    // Billing: fail open, count.
    let d = futures_all(&l, &quota, "q:1", 20).await;
    assert!(d
        .iter()
        .all(|d| d.allowed && d.source == Source::Fallback(Class::Billing)));
    assert_eq!(l.unsettled().get("q:1"), Some(&20));
    // The circuit opened after 3 timeouts: the store is no longer called at all.
    assert!(l.circuit_open());
    assert!(l.stats().store_calls <= 31 + 3 + 1, "{:?}", l.stats());

    s.resume();
    until_store(&l, &clock, &api, "a:1").await;
    // Everything billing admitted during the stall is charged: 30 + 20 of 100.
    wait_remaining(&s, "q:1", 50).await;
    wait_settled(&l).await;
}

/// Polls until the limiter owes the store nothing: the store may count a charge (seen through
/// another connection) a moment before the reconcile task has read the reply and cleared it.
async fn wait_settled(l: &Limiter) {
    let until = Instant::now() + Duration::from_secs(10);
    while !l.unsettled().is_empty() {
        assert!(Instant::now() < until, "still owed: {:?}", l.unsettled());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_without_a_local_limit_fails_closed() {
    let s = Server::start();
    let clock = support::manual_clock();
    let l = limiter(&s.url(), &clock, None).await;
    let (login, ..) = limits();
    let with_local = login.clone().local_limit(1, 60_000);
    assert!(timed(&l, &login, "login:bob").await.allowed);
    s.stop();
    let d = timed(&l, &login, "login:bob").await;
    assert!(!d.allowed);
    assert_eq!(d.source, Source::Fallback(Class::Security));
    assert_eq!(d.retry_after_ms, Some(1000));
    // An explicit local limit instead: 1 per minute here.
    assert!(timed(&l, &with_local, "login:carol").await.allowed);
    assert!(!timed(&l, &with_local, "login:carol").await.allowed);
    s.resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_store_falls_back_and_after_restart_billing_is_charged() {
    // fsync on every write: what the store counted survives the kill.
    let mut s = Server::with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let clock = support::manual_clock();
    let l = limiter(&s.url(), &clock, Some(2)).await;
    let (_, api, _, quota) = limits();
    for _ in 0..10 {
        assert_eq!(timed(&l, &quota, "q:k").await.source, Source::Store);
    }
    s.kill();
    for _ in 0..15 {
        let d = timed(&l, &quota, "q:k").await;
        assert_eq!(d.source, Source::Fallback(Class::Billing));
    }
    let d = futures_all(&l, &api, "a:k", 51).await;
    assert_eq!(d.iter().filter(|d| d.allowed).count(), 50, "L/N = 100/2");
    s.restart(support::T0_MS);
    until_store(&l, &clock, &api, "a:k").await;
    eprintln!("stats {:?} unsettled {:?}", l.stats(), l.unsettled());
    wait_remaining(&s, "q:k", 75).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_drops_and_half_open_connections_through_a_proxy() {
    let s = Server::start();
    let proxy = Proxy::start(s.port).await;
    let clock = support::manual_clock();
    let l = limiter(&proxy.url(), &clock, Some(4)).await;
    let (_, api, _, quota) = limits();
    assert_eq!(timed(&l, &api, "a:p").await.source, Source::Store);
    for (fault, name) in [
        (Fault::Latency(Duration::from_millis(300)), "latency"),
        (Fault::Drop, "drop"),
        (Fault::HalfOpen, "half-open"),
    ] {
        proxy.set(fault);
        for _ in 0..5 {
            let d = timed(&l, &api, "a:p").await;
            assert_eq!(d.source, Source::Fallback(Class::Contract), "{name}");
            let d = timed(&l, &quota, "q:p").await;
            assert_eq!(d.source, Source::Fallback(Class::Billing), "{name}");
        }
        proxy.set(Fault::None);
        until_store(&l, &clock, &api, "a:p").await;
    }
    // 15 billing requests were admitted without the store; all are counted now (a call that
    // timed out behind the added latency still ran on the server: counted twice at most).
    wait_counted(&s, "q:p", 85, l.stats().uncertain()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_shutdown_never_loses_billing_counts() {
    let s = Server::start();
    let clock = support::manual_clock();
    let journal = std::env::temp_dir().join(format!("rl-journal-{}", std::process::id()));
    let _ = std::fs::remove_file(&journal);
    let mut cfg = config(&clock, Some(4));
    cfg.billing_journal = Some(journal.clone());
    // Generous where the store answers at shutdown (a loaded machine must not miss it); short
    // below, where it must not.
    cfg.shutdown_deadline = Duration::from_secs(5);
    let (_, _, _, quota) = limits();

    // Through a proxy that drops connections: a call that failed may still have counted on the
    // store when it was sent again (Stats::resent) or timed out, one extra count at most each.
    let proxy = Proxy::start(s.port).await;
    // The store answers again at shutdown: the counts are charged then.
    let l = Limiter::new(Store::connect(&proxy.url()).await.unwrap(), cfg.clone());
    proxy.set(Fault::Drop);
    for _ in 0..7 {
        timed(&l, &quota, "q:s").await;
    }
    proxy.set(Fault::None);
    let report = l.shutdown().await;
    assert_eq!((report.charged, report.unsettled), (7, 0));
    let over = l.stats().uncertain();
    wait_counted(&s, "q:s", 93, over).await;

    // It does not: they go to the journal, and the next limiter charges them.
    let unreachable = Config {
        shutdown_deadline: Duration::from_millis(200),
        ..cfg.clone()
    };
    let l = Limiter::new(Store::connect(&proxy.url()).await.unwrap(), unreachable);
    proxy.set(Fault::Drop);
    for _ in 0..4 {
        timed(&l, &quota, "q:s").await;
    }
    let report = l.shutdown().await;
    proxy.set(Fault::None);
    assert_eq!((report.charged, report.unsettled), (0, 4));
    assert!(journal.exists());
    let over = over + l.stats().uncertain();
    let l = Limiter::new(Store::connect(&s.url()).await.unwrap(), cfg);
    assert_eq!(l.unsettled().get("q:s"), Some(&4));
    l.reconcile().await;
    wait_counted(&s, "q:s", 89, over).await;
    let report = l.shutdown().await;
    assert_eq!(report.unsettled, 0);
    assert!(!journal.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overage_admitted_during_an_outage_is_charged_as_the_quota_refills() {
    let s = Server::start();
    let proxy = Proxy::start(s.port).await;
    let clock = support::manual_clock();
    let l = limiter(&proxy.url(), &clock, Some(4)).await;
    let quota = Limit::new(
        "quota",
        Policy::fixed_window(10, 86_400_000),
        Class::Billing,
    );
    for _ in 0..8 {
        assert!(timed(&l, &quota, "q:o").await.allowed);
    }
    proxy.set(Fault::Drop);
    for _ in 0..5 {
        assert!(timed(&l, &quota, "q:o").await.allowed);
    }
    proxy.set(Fault::None);
    let (_, api, _, _) = limits();
    until_store(&l, &clock, &api, "a:o").await;
    // The store took 2 of the 5 owed; 3 stay owed (or up to one more per check that may have
    // counted on the store too, which left it that much less room).
    l.reconcile().await;
    let owed = l.unsettled().get("q:o").copied().unwrap_or(0);
    let over = l.stats().uncertain();
    assert!((3..=3 + over).contains(&owed), "owed {owed}, over {over}");
    assert_eq!(s.ints(&["RL.PEEK", "q:o"])[2], 0);
    // The next window takes them.
    s.clock_advance(86_400_000);
    l.reconcile().await;
    assert!(l.unsettled().is_empty());
    let d = l.check(&quota, "q:o").await.unwrap();
    assert!(d.allowed);
    assert_eq!(d.remaining, 6);
}

/// `n` concurrent checks of one key.
async fn futures_all(l: &Limiter, limit: &Limit, key: &str, n: usize) -> Vec<Decision> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(timed(l, limit, key).await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_limits_at_once_fall_back_together() {
    let s = Server::start();
    let clock = support::manual_clock();
    let l = limiter(&s.url(), &clock, Some(4)).await;
    let key = Limit::new("key", Policy::gcra(8, 60_000), Class::Contract);
    let tenant = Limit::new(
        "tenant",
        Policy::fixed_window(100, 86_400_000),
        Class::Billing,
    );
    let checks = [(&key, "all:{t}:key", 1), (&tenant, "all:{t}:tenant", 1)];
    let all = l.check_all(&checks).await.unwrap();
    assert!(all.combined.allowed);
    assert_eq!(all.combined.source, Source::Store);
    assert_eq!(all.limiters.len(), 2);

    s.stop();
    // The key's local share is 8/4 = 2: two admitted (and counted for the tenant), then denied
    // by the key, and the tenant is not charged for the denial.
    let mut admitted = 0;
    for _ in 0..4 {
        let t = Instant::now();
        let all = l.check_all(&checks).await.unwrap();
        assert!(t.elapsed() < DEADLINE + SLACK);
        assert_eq!(all.limiters[0].source, Source::Fallback(Class::Contract));
        admitted += u64::from(all.combined.allowed);
    }
    assert_eq!(admitted, 2);
    assert_eq!(l.unsettled().get("all:{t}:tenant"), Some(&2));
    s.resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_on_a_stalled_store_each_wait_at_most_the_deadline() {
    let s = Server::start();
    let clock = support::manual_clock();
    let l = limiter(&s.url(), &clock, Some(4)).await;
    let (_, api, _, _) = limits();
    assert_eq!(timed(&l, &api, "c:0").await.source, Source::Store);
    s.stop();
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let (l, api) = (l.clone(), api.clone());
            tokio::spawn(async move {
                let t = Instant::now();
                let d = l.check(&api, &format!("c:{}", i % 5)).await.unwrap();
                (t.elapsed(), d.source)
            })
        })
        .collect();
    for t in tasks {
        let (took, source) = t.await.unwrap();
        assert!(took < DEADLINE + SLACK, "took {took:?}");
        assert_eq!(source, Source::Fallback(Class::Contract));
    }
    s.resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_security_fallback_starts_from_what_the_store_last_said() {
    // 30 per minute, 3 gateways with `gateways: Some(3)`.
    let s = Server::start();
    let clock = support::manual_clock();
    let mut gateways = Vec::new();
    for _ in 0..3 {
        gateways.push(limiter(&s.url(), &clock, Some(3)).await);
    }
    let login = Limit::new("login", Policy::gcra(30, 60_000), Class::Security);
    // Half the budget through the store, round robin: each gateway last saw 17, 16, 15 left.
    for i in 0..15 {
        let d = timed(&gateways[i % 3], &login, "login:half").await;
        assert_eq!(d.source, Source::Store);
    }
    // All of it: the last answers were 2, 1, 0 left.
    for i in 0..30 {
        timed(&gateways[i % 3], &login, "login:all").await;
    }
    s.stop();
    let outage = |key: &'static str| {
        let gateways = gateways.clone();
        let login = login.clone();
        async move {
            let mut admitted = 0;
            for g in &gateways {
                for _ in 0..30 {
                    let d = timed(g, &login, key).await;
                    assert_eq!(d.source, Source::Fallback(Class::Security));
                    admitted += u64::from(d.allowed);
                }
            }
            admitted
        }
    };
    // Each gateway its third of what it last saw: 17/3 + 16/3 + 15/3 = 5 + 5 + 5.
    assert_eq!(
        outage("login:half").await,
        15,
        "store 15 + outage 15 = the budget"
    );
    assert_eq!(outage("login:all").await, 0, "2/3 + 1/3 + 0/3");
    // A key the store never answered for starts at the share: 10 per gateway.
    assert_eq!(outage("login:new").await, 30);
    // Then each refills at its share of the rate: one per 6 s per gateway.
    clock.advance(Duration::from_secs(6));
    assert_eq!(outage("login:all").await, 3);
    s.resume();
}

/// This process's resident memory, from /proc (Linux).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_floods_a_reply_costs_a_connection_not_memory() {
    let s = Server::start();
    let proxy = Proxy::start(s.port).await;
    let clock = support::manual_clock();
    let l = limiter(&proxy.url(), &clock, Some(4)).await;
    let (_, api, _, quota) = limits();
    assert_eq!(timed(&l, &api, "f:a").await.source, Source::Store);
    let before = rss_bytes();
    proxy.set(Fault::Flood);
    for _ in 0..5 {
        // Each reply's header declares 512 MB: the connection is closed at the header.
        let d = timed(&l, &api, "f:a").await;
        assert_eq!(d.source, Source::Fallback(Class::Contract));
        let d = timed(&l, &quota, "f:q").await;
        assert_eq!(d.source, Source::Fallback(Class::Billing));
        clock.advance(Duration::from_secs(2));
    }
    let grown = rss_bytes().saturating_sub(before);
    assert!(grown < 64 << 20, "grew {} MB", grown >> 20);
    proxy.set(Fault::None);
    until_store(&l, &clock, &api, "f:a").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn billing_fallback_headers_continue_from_the_stores_last_answer() {
    let s = Server::start();
    let clock = support::manual_clock();
    let l = limiter(&s.url(), &clock, Some(4)).await;
    let (_, _, _, quota) = limits(); // 100 per day
    for _ in 0..30 {
        timed(&l, &quota, "h:q").await;
    }
    let last = timed(&l, &quota, "h:q").await;
    assert_eq!((last.remaining, last.source), (69, Source::Store));
    s.stop();
    let d = timed(&l, &quota, "h:q").await;
    assert_eq!(d.source, Source::Fallback(Class::Billing));
    // 69 left at the last answer, 1 admitted since: 68, never the whole quota again.
    assert_eq!(d.remaining, 68);
    assert!(d.reset_after_ms > 0 && d.reset_after_ms <= last.reset_after_ms);
    // A key the store never answered for: the quota less what is owed, full within a window.
    let d = timed(&l, &quota, "h:new").await;
    assert_eq!((d.remaining, d.reset_after_ms), (99, 86_400_000));
    s.resume();
}
