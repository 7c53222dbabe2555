//! A streaming inference gateway in a few lines: a fake model answers `?tokens=N` with N tokens
//! streamed in frames of 8, behind the client's `TokenLimitLayer`. Each request reserves its
//! `x-max-tokens` (or 1,000) on its API key's budget and its tenant's, and is settled at the
//! tokens its body really streamed — when the body ends, or when the client hangs up.
//!
//! `cargo run -p redis-ratelimit-client --example tokens -- [REDIS_URL] [LISTEN]` (defaults
//! `redis://127.0.0.1:6379/`, `127.0.0.1:8080`), then
//! `curl -N -i -H 'x-api-key: abc' -H 'x-tenant: acme' 'http://127.0.0.1:8080/?tokens=300'`:
//! 20,000 tokens a minute per key, 100,000 per tenant; a response past the budget puts the key
//! in debt and the next requests get 429 until it is paid.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Request, Uri};
use axum::routing::get;
use axum::Router;
use ratelimit_client::layer::TokenLimitLayer;
use ratelimit_client::{Class, Config, Limit, Limiter, Policy, Store};

/// The fake model: `left` tokens ("tok "), 8 to a data frame.
struct Completion {
    left: usize,
}

impl http_body::Body for Completion {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        let k = self.left.min(8);
        self.left -= k;
        Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from(
            "tok ".repeat(k),
        )))))
    }
}

async fn complete(uri: Uri) -> Body {
    let tokens = uri
        .query()
        .and_then(|q| q.strip_prefix("tokens="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(100);
    Body::new(Completion { left: tokens })
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name)?.to_str().ok()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let redis = args.next().unwrap_or("redis://127.0.0.1:6379/".into());
    let listen = args.next().unwrap_or("127.0.0.1:8080".into());

    let limiter = Limiter::new(Store::connect(&redis).await?, Config::default());
    let key = Limit::new("tokens", Policy::gcra(20_000, 60_000), Class::Contract);
    let tenant = Limit::new("tenant", Policy::gcra(100_000, 60_000), Class::Billing);
    // Both keys in the tenant's hash slot: one RL.ALL to reserve, one RL.SETTLE to settle.
    let keys = |req: &Request<Body>| {
        let api_key = header(req.headers(), "x-api-key")?;
        let tenant = header(req.headers(), "x-tenant").unwrap_or("default");
        Some(vec![
            format!("tok:{{{tenant}}}:key:{api_key}"),
            format!("tok:{{{tenant}}}"),
        ])
    };
    let estimate = |req: &Request<Body>| header(req.headers(), "x-max-tokens")?.parse().ok();
    let layer = TokenLimitLayer::new(limiter.clone(), vec![key, tenant], keys, 1000)
        .estimate(estimate)
        .count(|frame: &Bytes| frame.iter().filter(|b| **b == b' ').count() as u64);
    let settles = layer.settles();

    let app = Router::new().route("/", get(complete)).layer(layer);
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("listening on http://{listen}/ (store {redis})");
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    // Settles of bodies dropped at the end, then leases and billing counts.
    settles.settled().await;
    println!("shutdown: {:?}", limiter.shutdown().await);
    Ok(())
}
