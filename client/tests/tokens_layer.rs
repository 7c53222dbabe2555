//! The token layer on an axum router, against a real server: requests reserve an estimate (from a
//! header, or the default) on a key and its tenant, and are settled from the response — at the
//! count a handler sets, or at the tokens a metered body streamed, whole or dropped mid-body.
//! The store counts exactly the tokens the clients received; a request cancelled before its
//! response gives its estimate back after the grace.

mod support;

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Request};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http_body::Frame;
use http_body_util::BodyExt;
use ratelimit_client::layer::{TokenLimitLayer, UsedTokens};
use ratelimit_client::{Class, Limit, Limiter, Policy};
use support::{counted, limiter, Server};
use tower::ServiceExt;

/// A fake model's answer: `n` tokens ("t "), `per_frame` to a data frame.
struct Tokens {
    left: u64,
    per_frame: u64,
}

impl http_body::Body for Tokens {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        let k = self.left.min(self.per_frame);
        self.left -= k;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from("t ".repeat(k as usize))))))
    }
}

fn header(h: &HeaderMap, name: &str) -> Option<u64> {
    h.get(name)?.to_str().ok()?.parse().ok()
}

fn tokens_in(data: &Bytes) -> u64 {
    data.iter().filter(|b| **b == b' ').count() as u64
}

/// `/stream` streams `x-tokens` tokens, 7 to a frame; `/once` answers them whole and says so
/// in `UsedTokens`; `/hang` signals it started and never answers.
fn app(layer: TokenLimitLayer<Keys, Estimate, Counter>, started: Started) -> Router {
    Router::new()
        .route(
            "/stream",
            get(|h: HeaderMap| async move {
                let n = header(&h, "x-tokens").unwrap_or(0);
                Body::new(Tokens {
                    left: n,
                    per_frame: 7,
                })
            }),
        )
        .route(
            "/once",
            get(|h: HeaderMap| async move {
                let n = header(&h, "x-tokens").unwrap_or(0);
                let mut resp: Response = "t ".repeat(n as usize).into_response();
                resp.extensions_mut().insert(UsedTokens(n));
                resp
            }),
        )
        .route(
            "/hang",
            get(move || async move {
                if let Some(tx) = started.lock().unwrap().take() {
                    let _ = tx.send(());
                }
                std::future::pending::<&'static str>().await
            }),
        )
        .layer(layer)
}

type Started = Arc<Mutex<Option<tokio::sync::oneshot::Sender<()>>>>;
type Keys = fn(&Request<Body>) -> Option<Vec<String>>;
type Estimate = fn(&Request<Body>) -> Option<u64>;
type Counter = fn(&Bytes) -> u64;

const DEFAULT_ESTIMATE: u64 = 100;

fn layer(limiter: Limiter) -> TokenLimitLayer<Keys, Estimate, Counter> {
    let key = Limit::new("tokens", Policy::gcra(20_000, 60_000), Class::Contract);
    let tenant = Limit::new("tenant", Policy::gcra(100_000, 60_000), Class::Contract);
    let keys: Keys = |_| Some(vec!["tok:{t}:key".into(), "tok:{t}:tenant".into()]);
    let estimate: Estimate = |req| header(req.headers(), "x-estimate");
    let counter: Counter = tokens_in;
    TokenLimitLayer::new(limiter, vec![key, tenant], keys, DEFAULT_ESTIMATE)
        .estimate(estimate)
        .count(counter)
        .grace(Duration::from_secs(10))
}

/// Request `i`'s real size: mostly near the estimate, one in four far above it.
fn actual(i: u64) -> u64 {
    let mut x = (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 29;
    if x.is_multiple_of(4) {
        600 + x % 3000
    } else {
        x % 250
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_counts_exactly_the_tokens_streamed() {
    let s = Server::start();
    let clock = support::manual_clock();
    let limiter = limiter(&s, &clock).await;
    let layer = layer(limiter.clone());
    let settles = layer.settles();
    let app = app(layer, Arc::default());

    let tasks: Vec<_> = (0..50u64)
        .map(|i| {
            let app = app.clone();
            tokio::spawn(async move {
                let path = if i % 5 == 1 { "/once" } else { "/stream" };
                let mut req = Request::builder()
                    .uri(path)
                    .header("x-tokens", actual(i).to_string());
                if i % 2 == 0 {
                    req = req.header("x-estimate", (50 + i * 3).to_string());
                }
                let resp = app.oneshot(req.body(Body::empty()).unwrap()).await.unwrap();
                if resp.status() == 429 {
                    return (0, false);
                }
                assert_eq!(resp.status(), 200, "request {i}");
                // Every third streamed response is dropped after two frames.
                let frames = if i % 3 == 0 && path == "/stream" {
                    2
                } else {
                    usize::MAX
                };
                let mut body = resp.into_body();
                let mut received = 0;
                for _ in 0..frames {
                    match body.frame().await {
                        Some(Ok(f)) => received += f.data_ref().map_or(0, tokens_in),
                        Some(Err(e)) => panic!("request {i}: {e}"),
                        None => break,
                    }
                }
                drop(body);
                (received, received < actual(i))
            })
        })
        .collect();
    let (mut streamed, mut cut) = (0, 0);
    for t in tasks {
        let (received, cut_short) = t.await.unwrap();
        streamed += received;
        cut += usize::from(cut_short);
    }
    assert!(cut > 0, "no body was dropped mid-stream");
    assert!(streamed > 5 * DEFAULT_ESTIMATE);
    settles.settled().await;
    assert_eq!(counted(&s, "tok:{t}:key"), streamed);
    assert_eq!(counted(&s, "tok:{t}:tenant"), streamed);
    // Every reservation was settled: nothing is left to give back after the grace.
    clock.advance(Duration::from_secs(10));
    assert_eq!(limiter.give_back_dropped().await, 0);
    assert_eq!(counted(&s, "tok:{t}:key"), streamed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_body_is_settled_before_it_ends_and_a_denial_is_a_429() {
    let s = Server::start();
    let clock = support::manual_clock();
    let limiter = limiter(&s, &clock).await;
    let app = app(layer(limiter), Arc::default());
    let get = |tokens: u64, estimate: Option<u64>| {
        let mut req = Request::builder()
            .uri("/stream")
            .header("x-tokens", tokens.to_string());
        if let Some(e) = estimate {
            req = req.header("x-estimate", e.to_string());
        }
        req.body(Body::empty()).unwrap()
    };
    // The default estimate reserved, then 25,000 tokens streamed: settled by the time the
    // client reads the end, the key 5,000 into debt.
    let resp = app.clone().oneshot(get(25_000, None)).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["ratelimit-policy"],
        r#""tokens";q=20000;w=60, "tenant";q=100000;w=60"#
    );
    assert_eq!(
        resp.headers()["ratelimit"],
        format!(
            r#""tokens";r={};t=1, "tenant";r={};t=1"#,
            20_000 - DEFAULT_ESTIMATE,
            100_000 - DEFAULT_ESTIMATE
        )
    );
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(tokens_in(&body), 25_000);
    assert_eq!(counted(&s, "tok:{t}:key"), 25_000);
    assert_eq!(s.calls("RL.SETTLE"), 1);
    // In debt: the next reservation is denied, charged nothing, settled nothing.
    let resp = app.clone().oneshot(get(10, Some(1))).await.unwrap();
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "16");
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(body.is_empty());
    assert_eq!(counted(&s, "tok:{t}:key"), 25_000);
    assert_eq!(s.calls("RL.SETTLE"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_request_gives_its_estimate_back_after_the_grace() {
    let s = Server::start();
    let clock = support::manual_clock();
    let limiter = limiter(&s, &clock).await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let app = app(layer(limiter.clone()), Arc::new(Mutex::new(Some(tx))));
    let req = Request::builder()
        .uri("/hang")
        .header("x-estimate", "700")
        .body(Body::empty())
        .unwrap();
    let call = app.oneshot(req);
    tokio::select! {
        _ = call => panic!("/hang answered"),
        started = rx => started.unwrap(),
    }
    // The handler started (its estimate reserved) and the call was dropped.
    assert_eq!(counted(&s, "tok:{t}:key"), 700);
    assert_eq!(limiter.give_back_dropped().await, 0);
    clock.advance(Duration::from_secs(10));
    assert_eq!(limiter.give_back_dropped().await, 1);
    assert_eq!(counted(&s, "tok:{t}:key"), 0);
}
