//! A gateway in a few lines: axum, the client's `RateLimitLayer`, the client's address from
//! `X-Forwarded-For` as written by the last trusted proxy, keyed per IPv4 address and per IPv6
//! /64, and a clean shutdown on SIGTERM (systemd, Kubernetes) or SIGINT (Ctrl-C) that refunds
//! leases and charges billing counts.
//!
//! `cargo run -p redis-ratelimit-client --example gateway -- [REDIS_URL] [LISTEN] [TRUSTED,...]`
//! (defaults `redis://127.0.0.1:6379/`, `127.0.0.1:8080`, `127.0.0.1`), then
//! `curl -i http://127.0.0.1:8080/`: 10 per second per client, a burst of 20, then 429.

use std::net::SocketAddr;

use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use ratelimit_client::layer::{client_ip, Prefixes, RateLimitLayer, Trusted};
use ratelimit_client::{Class, Config, Limit, Limiter, Policy, Store};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let redis = args.next().unwrap_or("redis://127.0.0.1:6379/".into());
    let listen = args.next().unwrap_or("127.0.0.1:8080".into());
    let trusted: Vec<Trusted> = args
        .next()
        .unwrap_or("127.0.0.1".into())
        .split(',')
        .map(|t| Trusted::parse(t).ok_or(format!("not an address or network: {t}")))
        .collect::<Result<_, _>>()?;

    let store = Store::connect(&redis).await?;
    let limiter = Limiter::new(store, Config::default());
    let limit = Limit::new("per-ip", Policy::gcra(10, 1000).burst(20), Class::Contract);
    // One key per IPv4 address, one per IPv6 /64: a client rotating addresses inside its /64
    // is still one client.
    let prefixes = Prefixes { v4: 32, v6: 64 };
    let key = move |req: &axum::extract::Request| {
        let peer = req.extensions().get::<ConnectInfo<SocketAddr>>()?.0.ip();
        let ip = client_ip(req.headers(), peer, &trusted);
        Some(format!("rl:ip:{}", prefixes.key(ip)))
    };

    let app = Router::new()
        .route("/", get(|| async { "ok\n" }))
        .layer(RateLimitLayer::new(limiter.clone(), limit, key));
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("listening on http://{listen}/ (store {redis})");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(stop_signal())
    .await?;
    let report = limiter.shutdown().await;
    println!("shutdown: {report:?}");
    Ok(())
}

/// SIGTERM or SIGINT, whichever comes first.
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
