//! The tower layer in front of a real hyper service with a fixed number of workers: overload
//! is shed at once with a reason, tiers in order, a flooding tenant held to its share,
//! cancellation and upstream errors leave nothing in flight, and the adaptive limit (driven on
//! a manual clock) comes back after the service speeds up. Counts and order, never timings.

mod support;

use std::sync::Arc;
use std::time::Duration;

use ratelimit_shed::clock::ManualClock;
use ratelimit_shed::gradient::{Gradient, GradientSettings};
use ratelimit_shed::limit::FixedLimit;
use ratelimit_shed::{Bounds, ByHeaders, QueueSettings, ShedLayer, Shedder};
use support::{client, get, serve, until, Work};
use tower::Layer;

fn fixed(limit: usize, max_queue: Option<usize>) -> Shedder {
    let queue = QueueSettings {
        max_queue,
        ..QueueSettings::default()
    };
    Shedder::with(
        Box::new(FixedLimit(limit)),
        queue,
        Arc::new(ManualClock::default()),
    )
}

fn headers() -> ByHeaders {
    ByHeaders::new(
        Some(http::HeaderName::from_static("x-priority")),
        Some(http::HeaderName::from_static("x-tenant")),
    )
}

async fn behind_layer(shedder: &Shedder, work: &Work) -> std::net::SocketAddr {
    serve(ShedLayer::new(shedder.clone(), headers()).layer(work.service())).await
}

/// Sends one request in the background.
fn spawn_get(
    addr: std::net::SocketAddr,
    headers: Vec<(&'static str, String)>,
) -> tokio::task::JoinHandle<support::Seen> {
    tokio::spawn(async move {
        let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        get(&client(), addr, "/", &h).await
    })
}

fn tagged(id: &str, tier: &str, tenant: &str) -> Vec<(&'static str, String)> {
    vec![
        ("x-id", id.to_string()),
        ("x-priority", tier.to_string()),
        ("x-tenant", tenant.to_string()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_is_shed_at_once_and_the_service_never_holds_more_than_the_limit() {
    let work = Work::new(8);
    let shedder = fixed(4, Some(4));
    let addr = behind_layer(&shedder, &work).await;
    let mut admitted = Vec::new();
    for i in 0..4 {
        admitted.push(spawn_get(addr, tagged(&format!("run{i}"), "default", "t")));
    }
    work.entered(4).await;
    for i in 0..4 {
        admitted.push(spawn_get(addr, tagged(&format!("wait{i}"), "default", "t")));
    }
    until("4 queued", || shedder.stats().queued == 4).await;
    // Full and queue full: answered at once (the service's gate is still closed).
    let c = client();
    for _ in 0..10 {
        let seen = get(&c, addr, "/", &[("x-tenant", "t")]).await;
        assert_eq!(seen.status, 503);
        assert_eq!(seen.reason.as_deref(), Some("overloaded"));
        assert_eq!(seen.retry_after.as_deref(), Some("1"));
    }
    work.release(8);
    for h in admitted {
        assert_eq!(h.await.unwrap().status, 200);
    }
    assert_eq!(work.max_busy(), 4);
    until("nothing in flight", || shedder.stats().in_flight == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiers_are_shed_lowest_first_and_served_highest_first() {
    let work = Work::new(8);
    let shedder = fixed(2, Some(2));
    let addr = behind_layer(&shedder, &work).await;
    let running: Vec<_> = (0..2)
        .map(|i| spawn_get(addr, tagged(&format!("run{i}"), "default", "t")))
        .collect();
    work.entered(2).await;
    let batch = spawn_get(addr, tagged("b", "batch", "t"));
    until("batch queued", || shedder.stats().queued == 1).await;
    let sheddable = spawn_get(addr, tagged("s", "sheddable", "t"));
    until("sheddable queued", || shedder.stats().queued == 2).await;
    // Each higher tier takes the place of the lowest queued.
    let default = spawn_get(addr, tagged("d", "default", "t"));
    assert_eq!(batch.await.unwrap().status, 503);
    let critical = spawn_get(addr, tagged("c", "critical", "t"));
    let shed = sheddable.await.unwrap();
    assert_eq!(
        (shed.status, shed.reason.as_deref()),
        (503, Some("overloaded"))
    );
    // A lower tier arriving now is shed itself; the queue holds default and critical.
    let c = client();
    let late = get(
        &c,
        addr,
        "/",
        &[("x-id", "late"), ("x-priority", "batch"), ("x-tenant", "t")],
    )
    .await;
    assert_eq!(late.status, 503);
    // One slot frees at a time, so the order the queue hands slots out is the order the
    // service sees (two freed together would race each other to a worker).
    work.release(1);
    work.entered(3).await;
    work.release(3);
    for h in running.into_iter().chain([critical, default]) {
        assert_eq!(h.await.unwrap().status, 200);
    }
    // Critical was served before default, though it came later.
    let mut order = work.order.lock().unwrap().clone();
    order[..2].sort();
    assert_eq!(order, ["run0", "run1", "c", "d"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_tenant_is_held_to_its_share_while_the_others_are_served() {
    let work = Work::new(8);
    let shedder = fixed(4, None);
    let addr = behind_layer(&shedder, &work).await;
    let mut flood: Vec<_> = (0..4)
        .map(|i| spawn_get(addr, tagged(&format!("f{i}"), "default", "flood")))
        .collect();
    work.entered(4).await;
    let queued: Vec<_> = (0..4)
        .map(|i| spawn_get(addr, tagged(&format!("fq{i}"), "default", "flood")))
        .collect();
    until("the flood queued", || shedder.stats().queued == 4).await;
    // Each polite tenant takes the place of one of the flooder's queued requests.
    let mut polite = Vec::new();
    for i in 0..4 {
        polite.push(spawn_get(
            addr,
            tagged(&format!("p{i}"), "default", &format!("polite{i}")),
        ));
        until("the polite tenant queued", || {
            shedder.stats().active_tenants == 2 + i
        })
        .await;
    }
    for h in queued {
        let seen = h.await.unwrap();
        assert_eq!(
            (seen.status, seen.reason.as_deref()),
            (503, Some("over_share"))
        );
    }
    // More of the flood is shed at once, with its reason.
    let c = client();
    for _ in 0..5 {
        let seen = get(&c, addr, "/", &[("x-tenant", "flood")]).await;
        assert_eq!(
            (seen.status, seen.reason.as_deref()),
            (503, Some("over_share"))
        );
    }
    work.release(8);
    for h in polite.drain(..).chain(flood.drain(..)) {
        assert_eq!(h.await.unwrap().status, 200);
    }
    let order = work.order.lock().unwrap().clone();
    assert_eq!(order.iter().filter(|id| id.starts_with('p')).count(), 4);
    until("nothing in flight", || shedder.stats().in_flight == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_callers_and_upstream_errors_leave_nothing_in_flight() {
    let work = Work::new(8);
    let shedder = fixed(2, Some(4));
    let addr = behind_layer(&shedder, &work).await;
    // Two in service and two queued, then every caller hangs up.
    let callers: Vec<_> = (0..2)
        .map(|i| spawn_get(addr, tagged(&format!("gone{i}"), "default", "t")))
        .collect();
    work.entered(2).await;
    let waiting: Vec<_> = (0..2)
        .map(|i| spawn_get(addr, tagged(&format!("gone-q{i}"), "default", "u")))
        .collect();
    until("2 queued", || shedder.stats().queued == 2).await;
    for h in callers.into_iter().chain(waiting) {
        h.abort();
    }
    until("the cancelled gone", || {
        shedder.expire();
        let s = shedder.stats();
        (s.in_flight, s.queued, s.active_tenants) == (0, 0, 0)
    })
    .await;
    // Errors from the service, overloaded or not, give the place back too.
    let errors: Vec<_> = ["500", "503", "504", "404"]
        .into_iter()
        .map(|status| {
            let mut h = tagged("err", "default", "t");
            h.push(("x-status", status.to_string()));
            spawn_get(addr, h)
        })
        .collect();
    work.release(4);
    let mut statuses = Vec::new();
    for h in errors {
        statuses.push(h.await.unwrap().status);
    }
    statuses.sort();
    assert_eq!(statuses, [404, 500, 503, 504]);
    let s = shedder.stats();
    assert_eq!((s.in_flight, s.queued, s.active_tenants), (0, 0, 0));
}

/// One round of the drive: as many requests as the limit, all let finish after `rtt` on the
/// shedder's clock (the latency a service of `workers` shows at that concurrency).
async fn round(
    addr: std::net::SocketAddr,
    work: &Work,
    shedder: &Shedder,
    clock: &ManualClock,
    service: Duration,
    workers: usize,
    total: &mut usize,
) {
    let limit = shedder.stats().limit;
    let before = work.count();
    let calls: Vec<_> = (0..limit)
        .map(|_| spawn_get(addr, tagged("r", "default", "t")))
        .collect();
    work.entered(before + limit).await;
    clock.advance(service.mul_f64((limit as f64 / workers as f64).max(1.0)));
    work.release(limit);
    for h in calls {
        assert_eq!(h.await.unwrap().status, 200);
    }
    *total += limit;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_shrinks_when_the_service_slows_and_recovers_when_it_speeds_up() {
    const WORKERS: usize = 8;
    let clock = ManualClock::default();
    let alg = Gradient::new(Bounds::default(), GradientSettings::default()).unwrap();
    let shedder = Shedder::with(
        Box::new(alg),
        QueueSettings::default(),
        Arc::new(clock.clone()),
    );
    // The service's workers are the drive's: the layer's work never waits for one.
    let work = Work::new(1_000);
    let addr = behind_layer(&shedder, &work).await;
    let mut total = 0;
    let run = |service_ms: u64, rounds: usize| {
        let (work, shedder, clock) = (work.clone(), shedder.clone(), clock.clone());
        async move {
            let mut t = 0;
            for _ in 0..rounds {
                round(
                    addr,
                    &work,
                    &shedder,
                    &clock,
                    Duration::from_millis(service_ms),
                    WORKERS,
                    &mut t,
                )
                .await;
            }
            t
        }
    };
    total += run(10, 150).await;
    let normal = shedder.stats().limit;
    assert!(normal >= WORKERS, "limit {normal} at 10 ms");
    // Four times slower for a few windows: the limit comes down.
    total += run(40, 12).await;
    let slow = shedder.stats().limit;
    assert!(slow < normal, "limit {slow} at 40 ms, {normal} before");
    // Twice faster than at first: back above the workers.
    total += run(5, 300).await;
    let fast = shedder.stats().limit;
    assert!(
        fast >= WORKERS && fast > slow,
        "limit {fast} at 5 ms, {slow} slow"
    );
    assert!(total > 0);
    assert_eq!(shedder.stats().in_flight, 0);
}
