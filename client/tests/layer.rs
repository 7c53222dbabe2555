//! The tower layer on an axum router, against a real server: 200 with the RateLimit fields, then
//! 429 with Retry-After; the key from X-Forwarded-For only through a trusted proxy.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::routing::get;
use axum::Router;
use ratelimit_client::layer::{client_ip, RateLimitLayer, Trusted};
use ratelimit_client::{Class, Config, Limit, Limiter, Policy, Store};
use support::Server;
use tower::ServiceExt;

fn request(peer: &str, xff: Option<&str>) -> Request<Body> {
    let mut req = Request::builder().uri("/");
    if let Some(v) = xff {
        req = req.header("x-forwarded-for", v);
    }
    let mut req = req.body(Body::empty()).unwrap();
    let peer: SocketAddr = format!("{peer}:40000").parse().unwrap();
    req.extensions_mut().insert(ConnectInfo(peer));
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_axum_router_limits_by_the_client_behind_a_trusted_proxy() {
    let s = Server::start();
    let store = Store::connect(&s.url()).await.unwrap();
    let limiter = Limiter::new(
        store,
        Config {
            deadline: Duration::from_secs(1),
            ..Config::default()
        },
    );
    let limit = Limit::new("per-ip", Policy::gcra(2, 1000), Class::Contract);
    let trusted = vec![Trusted::parse("10.0.0.0/8").unwrap()];
    let key = move |req: &Request<Body>| {
        let peer = req.extensions().get::<ConnectInfo<SocketAddr>>()?.0.ip();
        Some(format!(
            "rl:ip:{}",
            client_ip(req.headers(), peer, &trusted)
        ))
    };
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(limiter, limit, key));

    // Client 203.0.113.9 through the proxy 10.0.0.5, spoofing an address in front.
    let via_proxy = || request("10.0.0.5", Some("6.6.6.6, 203.0.113.9"));
    let r = app.clone().oneshot(via_proxy()).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["ratelimit-policy"], r#""per-ip";q=2;w=1"#);
    assert_eq!(r.headers()["ratelimit"], r#""per-ip";r=1;t=1"#);
    let r = app.clone().oneshot(via_proxy()).await.unwrap();
    assert_eq!(r.status(), 200);
    let r = app.clone().oneshot(via_proxy()).await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(r.headers()["ratelimit"], r#""per-ip";r=0;t=1"#);
    assert_eq!(s.ints(&["RL.PEEK", "rl:ip:203.0.113.9"])[2], 0);

    // The spoofed address is its own client only when it connects itself; an untrusted peer's
    // header is ignored.
    let r = app
        .clone()
        .oneshot(request("6.6.6.6", Some("203.0.113.9")))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(s.ints(&["RL.PEEK", "rl:ip:6.6.6.6"])[2], 1);
}
