//! The sidecar in front of a real hyper service with gated workers: over HTTP/1.1 and h2,
//! overload and a flooding tenant shed with their reasons, cancelled callers and a dead upstream
//! leave nothing in flight; and the binary itself, configured by environment variables, serving
//! `/healthcheck`, `/metrics` and the proxied service.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

use ratelimit_shed::clock::ManualClock;
use ratelimit_shed::limit::FixedLimit;
use ratelimit_shed::proxy::{self, Sidecar};
use ratelimit_shed::{ByHeaders, QueueSettings, Shedder};
use support::{client, get, h2_client, serve, until, Work};
use tokio::net::TcpListener;

async fn sidecar(shedder: &Shedder, upstream: std::net::SocketAddr) -> std::net::SocketAddr {
    let classify = ByHeaders::new(
        Some(http::HeaderName::from_static("x-priority")),
        Some(http::HeaderName::from_static("x-tenant")),
    );
    let uri = format!("http://{upstream}").parse().unwrap();
    let sidecar = Sidecar::new(shedder.clone(), classify, &uri, false, None).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(proxy::serve(listener, Arc::new(sidecar), true));
    addr
}

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

fn spawn_get(
    addr: std::net::SocketAddr,
    h2: bool,
    headers: Vec<(&'static str, String)>,
) -> tokio::task::JoinHandle<support::Seen> {
    tokio::spawn(async move {
        let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let c = if h2 { h2_client() } else { client() };
        get(&c, addr, "/", &h).await
    })
}

fn tenant(t: &str) -> Vec<(&'static str, String)> {
    vec![("x-tenant", t.to_string())]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sidecar_sheds_overload_and_a_flooding_tenant_over_http1_and_h2() {
    let work = Work::new(8);
    let upstream = serve(work.service()).await;
    let shedder = fixed(4, None);
    let addr = sidecar(&shedder, upstream).await;
    // The flooder fills the service (over h2) and the queue (over HTTP/1.1).
    let running: Vec<_> = (0..4)
        .map(|_| spawn_get(addr, true, tenant("flood")))
        .collect();
    work.entered(4).await;
    let queued: Vec<_> = (0..4)
        .map(|_| spawn_get(addr, false, tenant("flood")))
        .collect();
    until("the flood queued", || shedder.stats().queued == 4).await;
    // Four other tenants each take a queued place of the flooder's.
    let mut polite = Vec::new();
    for i in 0..4 {
        polite.push(spawn_get(addr, i % 2 == 0, tenant(&format!("polite{i}"))));
        until("polite queued", || shedder.stats().active_tenants == 2 + i).await;
    }
    for h in queued {
        let seen = h.await.unwrap();
        assert_eq!(
            (seen.status, seen.reason.as_deref()),
            (503, Some("over_share"))
        );
    }
    // Over h2 too, a shed request is answered at once.
    let seen = get(&h2_client(), addr, "/", &[("x-tenant", "flood")]).await;
    assert_eq!((seen.status, seen.retry_after.as_deref()), (503, Some("1")));
    work.release(8);
    for h in running.into_iter().chain(polite) {
        assert_eq!(h.await.unwrap().status, 200);
    }
    until("nothing in flight", || shedder.stats().in_flight == 0).await;
    assert_eq!(work.max_busy(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_callers_and_a_dead_upstream_leave_nothing_in_flight() {
    let work = Work::new(8);
    let upstream = serve(work.service()).await;
    let shedder = fixed(2, Some(2));
    let addr = sidecar(&shedder, upstream).await;
    let callers: Vec<_> = (0..4)
        .map(|i| spawn_get(addr, i % 2 == 1, tenant("t")))
        .collect();
    work.entered(2).await;
    until("2 queued", || shedder.stats().queued == 2).await;
    for h in callers {
        h.abort();
    }
    until("the cancelled gone", || {
        shedder.expire();
        let s = shedder.stats();
        (s.in_flight, s.queued, s.active_tenants) == (0, 0, 0)
    })
    .await;
    // An upstream that refuses connections: 502, and the place is given back. The port stays
    // bound (never listening) to the end of the test, so no other test's listener can take it.
    let held = tokio::net::TcpSocket::new_v4().unwrap();
    held.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let dead = held.local_addr().unwrap();
    let shedder = fixed(2, Some(2));
    let addr = sidecar(&shedder, dead).await;
    for _ in 0..3 {
        assert_eq!(get(&client(), addr, "/", &[]).await.status, 502);
    }
    assert_eq!(shedder.stats().in_flight, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_reads_its_environment_and_serves_health_metrics_and_the_service() {
    let work = Work::new(8);
    let upstream = serve(work.service()).await;
    work.release(1_000);
    let mut child = Command::new(env!("CARGO_BIN_EXE_redis-ratelimit-shed"))
        .env("SHED_LISTEN", "127.0.0.1:0")
        .env("SHED_UPSTREAM", format!("http://{upstream}"))
        .env("SHED_PRIORITY_HEADER", "x-priority")
        .args(["--tenant-header", "x-tenant"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    let addr: std::net::SocketAddr = line
        .strip_prefix("listening on ")
        .and_then(|l| l.split(',').next())
        .unwrap()
        .parse()
        .unwrap();
    let c = client();
    assert_eq!(get(&c, addr, "/healthcheck", &[]).await.status, 200);
    for tier in ["critical", "batch"] {
        let seen = get(&c, addr, "/", &[("x-priority", tier), ("x-tenant", "a")]).await;
        assert_eq!(seen.status, 200);
    }
    let metrics = {
        use http_body_util::{BodyExt, Full};
        let req = http::Request::get(format!("http://{addr}/metrics"))
            .body(Full::new(bytes::Bytes::new()))
            .unwrap();
        let resp = c.request(req).await.unwrap();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(body.to_vec()).unwrap()
    };
    for name in ["shed_limit", "shed_in_flight", "shed_admitted_total"] {
        assert!(metrics.contains(name), "{name} missing from:\n{metrics}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}
