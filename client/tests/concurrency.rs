//! Concurrency slots against a real server (its module clock pinned): a guard gives its slot
//! back when dropped, also when the future holding it is cancelled; it renews a stream for
//! longer than the TTL; the fallback per class when the store is down; the tower layer.

mod support;

use std::convert::Infallible;
use std::time::{Duration, Instant};

use ratelimit_client::layer::ConcurrencyLimitLayer;
use ratelimit_client::{Class, ConcurrencyLimit, Config, Limiter, Source, Store};
use support::Server;

async fn limiter(s: &Server, config: Config) -> Limiter {
    let store = Store::connect(&s.url()).await.unwrap();
    Limiter::new(
        store,
        Config {
            deadline: Duration::from_millis(500),
            ..config
        },
    )
}

/// The free slots of `key` (N, TTL 60 s), as the server sees them.
fn free(s: &Server, key: &str, n: u64) -> i64 {
    s.ints(&["RL.CONCURRENCY", key, &n.to_string(), "60000", "PEEK"])[2]
}

/// Polls (bounded) until `f` holds: for what a background task does.
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_or_cancelled_holder_gives_its_slot_back() {
    let s = Server::start();
    let l = limiter(&s, Config::default()).await;
    let jobs = ConcurrencyLimit::new("jobs", 2, Duration::from_secs(60), Class::Contract);
    let a = l.acquire(&jobs, "jobs:acme").await.unwrap();
    let b = l.acquire(&jobs, "jobs:acme").await.unwrap();
    assert!(a.guard.is_some() && b.guard.is_some());
    let c = l.acquire(&jobs, "jobs:acme").await.unwrap();
    assert!(c.guard.is_none());
    assert_eq!(c.decision.retry_after_ms, Some(60_000));
    assert_eq!(free(&s, "jobs:acme", 2), 0);

    // Released explicitly: the store gave it back.
    assert!(a.guard.unwrap().release().await.unwrap());
    assert_eq!(free(&s, "jobs:acme", 2), 1);

    // A request future holding a slot is cancelled (its client went away): the slot goes back.
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let request = {
        let (l, jobs) = (l.clone(), jobs.clone());
        tokio::spawn(async move {
            let slot = l.acquire(&jobs, "jobs:acme").await.unwrap();
            let _guard = slot.guard.expect("a free slot");
            held_tx.send(()).unwrap();
            std::future::pending::<()>().await;
        })
    };
    held_rx.await.unwrap();
    assert_eq!(free(&s, "jobs:acme", 2), 0);
    request.abort();
    eventually("the cancelled request's slot back", || {
        free(&s, "jobs:acme", 2) == 1
    })
    .await;

    // Dropped: the same.
    drop(b);
    eventually("the dropped slot back", || free(&s, "jobs:acme", 2) == 2).await;
}

/// A stream that lasts five TTLs on the server's clock keeps its slot: the guard renews it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_stream_is_renewed_beyond_the_ttl() {
    let s = Server::start();
    let l = limiter(&s, Config::default()).await;
    let streams = ConcurrencyLimit::new("streams", 1, Duration::from_secs(1), Class::Contract)
        .renew_every(Duration::from_millis(10));
    let guard = l.acquire(&streams, "llm:key").await.unwrap().guard.unwrap();
    let next_expiry = || {
        let v: Vec<redis::Value> = redis::cmd("RL.INSPECT")
            .arg("llm:key")
            .query(&mut s.connect())
            .unwrap();
        v.chunks(2)
            .find_map(|kv| match kv {
                [redis::Value::BulkString(k), redis::Value::Int(n)] if k == b"next_expiry_ms" => {
                    Some(*n)
                }
                _ => None,
            })
            .unwrap()
    };
    for _ in 0..5 {
        // 600 ms pass on the server: the slot would expire 400 ms later unless renewed.
        s.clock_advance(600);
        eventually("a renewal at the new time", || next_expiry() == 1000).await;
    }
    // The guard counts a renewal when its reply arrives, after the server applied it (and not
    // when the reply missed the deadline): the count catches up with what the server shows.
    eventually("five renewals counted", || guard.renewals() >= 5).await;
    // 3 s after the ACQUIRE, the TTL 1 s: still held, so another stream is denied.
    let other = l.acquire(&streams, "llm:key").await.unwrap();
    assert!(other.guard.is_none(), "{:?}", other.decision);
    drop(guard);
    let peek = ["RL.CONCURRENCY", "llm:key", "1", "1000", "PEEK"];
    eventually("the slot back", || s.ints(&peek)[2] == 1).await;
}

/// The store down (SIGSTOP): Contract counts N ÷ gateways locally, Security is closed, Billing
/// open; a local slot goes back to the local count on drop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fallback_of_each_class() {
    let s = Server::start();
    let l = limiter(
        &s,
        Config {
            deadline: Duration::from_millis(50),
            max_deadline: Duration::from_millis(50),
            gateways: Some(2),
            ..Config::default()
        },
    )
    .await;
    let ttl = Duration::from_secs(60);
    let contract = ConcurrencyLimit::new("c", 4, ttl, Class::Contract);
    let security = ConcurrencyLimit::new("s", 4, ttl, Class::Security);
    let billing = ConcurrencyLimit::new("b", 4, ttl, Class::Billing);
    s.stop();
    let first = l.acquire(&contract, "k").await.unwrap();
    assert_eq!(first.decision.source, Source::Fallback(Class::Contract));
    let second = l.acquire(&contract, "k").await.unwrap();
    let third = l.acquire(&contract, "k").await.unwrap();
    assert!(first.guard.is_some() && second.guard.is_some());
    assert!(third.guard.is_none(), "4 ÷ 2 gateways: 2 here");
    assert_eq!(third.decision.limit, 2);
    drop(first);
    assert!(l.acquire(&contract, "k").await.unwrap().guard.is_some());
    let denied = l.acquire(&security, "k").await.unwrap();
    assert!(denied.guard.is_none());
    assert_eq!(denied.decision.source, Source::Fallback(Class::Security));
    let open = l.acquire(&billing, "k").await.unwrap();
    assert!(open.guard.is_some());
    assert_eq!(open.guard.unwrap().id(), None);
    s.resume();
}

/// The tower layer: the response body holds the request's slot until it is dropped; a request
/// beyond N gets 429 with Retry-After.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_holds_a_slot_per_response_body() {
    use tower::{Layer, Service, ServiceExt};
    let s = Server::start();
    let l = limiter(&s, Config::default()).await;
    let limit = ConcurrencyLimit::new("uploads", 1, Duration::from_secs(60), Class::Contract);
    let key = |r: &http::Request<String>| {
        r.headers()
            .get("x-partner")?
            .to_str()
            .ok()
            .map(str::to_string)
    };
    let inner = tower::service_fn(|_r: http::Request<String>| async {
        Ok::<_, Infallible>(http::Response::new(String::from("ok")))
    });
    let mut svc = ConcurrencyLimitLayer::new(l, limit, key).layer(inner);
    let request = || {
        http::Request::builder()
            .header("x-partner", "p1")
            .body(String::new())
            .unwrap()
    };
    let first = svc.ready().await.unwrap().call(request()).await.unwrap();
    assert_eq!(first.status(), 200);
    let second = svc.ready().await.unwrap().call(request()).await.unwrap();
    assert_eq!(second.status(), 429);
    assert_eq!(second.headers()["retry-after"], "60");
    drop(first);
    eventually("the body's slot back", || free(&s, "p1", 1) == 1).await;
    let third = svc.ready().await.unwrap().call(request()).await.unwrap();
    assert_eq!(third.status(), 200);
}
