//! Start and reload as the peer: a bad config at start runs on, counted, unhealthy under
//! HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED until a good one is written; a store down at start is
//! retried with REDIS_STARTUP_*'s backoff (and given up after REDIS_STARTUP_MAX_ELAPSED_TIME);
//! REDIS_TIMEOUT is the store's deadline.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelimit_client::ManualClock;
use ratelimit_rls::server;
use ratelimit_rls::settings::Settings;
use support::*;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const GOOD: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n";

async fn grpc_health(addr: &str, service: &str) -> i32 {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut h = HealthClient::new(channel);
    h.check(HealthCheckRequest {
        service: service.into(),
    })
    .await
    .map_or(-1, |r| r.into_inner().status)
}

/// Polls (bounded, as `until`) until gRPC health says SERVING for `service`: the reload task
/// marks the HTTP healthcheck healthy first and reports to gRPC health later in the same round.
async fn until_serving(addr: &str, service: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while grpc_health(addr, service).await != SERVING {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for gRPC health SERVING on {service:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

const SERVING: i32 = 1;
const NOT_SERVING: i32 = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_config_at_start_runs_on_unhealthy_until_a_good_one_loads() {
    let redis = Redis::start();
    let root = scratch("bad-start");
    write_config(
        &root,
        "config.yaml",
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n",
    );
    let s = settings(
        &root,
        &redis,
        &[("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true")],
    );
    let running = server::start_with_clock(s, Arc::new(ManualClock::new(0)))
        .await
        .unwrap();
    let (http, grpc) = (running.http_addr.port(), running.grpc_addr.to_string());
    assert_eq!(
        running.service.metrics.service_count("config_load_error"),
        1
    );
    assert_eq!(http_get(http, "/healthcheck").map(|r| r.0), Some(500));
    assert_eq!(grpc_health(&grpc, "ratelimit").await, NOT_SERVING);
    let mut client = ratelimit_rls::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::connect(format!("http://{grpc}")).await.unwrap();
    let refused = client
        .should_rate_limit(simple("d", &[&[("k", "v")]]))
        .await;
    assert_eq!(refused.unwrap_err().code(), tonic::Code::Unavailable);

    write_config(&root, "config.yaml", GOOD);
    let svc = running.service.clone();
    until("the good config", || svc.has_config()).await;
    until("healthy", || {
        http_get(http, "/healthcheck").map(|r| r.0) == Some(200)
    })
    .await;
    for name in [
        "",
        "ratelimit",
        "envoy.service.ratelimit.v3.RateLimitService",
    ] {
        until_serving(&grpc, name).await;
    }
    let r = client
        .should_rate_limit(simple("d", &[&[("k", "v")]]))
        .await
        .unwrap();
    assert_eq!(codes(&r.into_inner()), (OK, vec![(OK, 1)]));
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_down_at_start_is_retried_then_served() {
    let port = free_port();
    let root = scratch("late-store");
    write_config(&root, "config.yaml", GOOD);
    let vars = [
        ("REDIS_SOCKET_TYPE", "tcp".to_string()),
        ("REDIS_URL", format!("127.0.0.1:{port}")),
        ("RUNTIME_ROOT", root.display().to_string()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".to_string()),
        ("HOST", "127.0.0.1".to_string()),
        ("PORT", "0".to_string()),
        ("GRPC_HOST", "127.0.0.1".to_string()),
        ("GRPC_PORT", "0".to_string()),
        ("REDIS_STARTUP_INITIAL_INTERVAL", "10ms".to_string()),
        ("REDIS_STARTUP_MAX_INTERVAL", "40ms".to_string()),
        ("RLS_DEADLINE_MS", "2000".to_string()),
        ("DEBUG_HOST", "127.0.0.1".to_string()),
        ("DEBUG_PORT", "0".to_string()),
        ("USE_STATSD", "false".to_string()),
    ];
    let s = Settings::from_lookup(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))
        .unwrap();
    let starting = tokio::spawn(server::start_with_clock(s, Arc::new(ManualClock::new(0))));
    // The RLS is retrying: bring the store up on the port it keeps trying.
    let redis = Redis::start_at(port);
    let running = starting
        .await
        .unwrap()
        .expect("started once the store answered");
    let mut client = ratelimit_rls::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::connect(format!("http://{}", running.grpc_addr)).await.unwrap();
    let r = client
        .should_rate_limit(simple("d", &[&[("k", "v")]]))
        .await
        .unwrap();
    assert_eq!(codes(&r.into_inner()), (OK, vec![(OK, 1)]));
    assert!(redis.calls("rl.fixedwindow") >= 1);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_never_answers_is_given_up_after_the_max_elapsed_time() {
    let root = scratch("no-store");
    write_config(&root, "config.yaml", GOOD);
    let url = format!("127.0.0.1:{}", free_port());
    let vars = [
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", url.as_str()),
        ("RUNTIME_ROOT", "/nonexistent"),
        ("GRPC_PORT", "0"),
        ("PORT", "0"),
        ("REDIS_STARTUP_INITIAL_INTERVAL", "5ms"),
        ("REDIS_STARTUP_MAX_ELAPSED_TIME", "30ms"),
    ];
    let s = Settings::from_lookup(|k| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    })
    .unwrap();
    let err = server::start_with_clock(s, Arc::new(ManualClock::new(0)))
        .await
        .err()
        .expect("given up");
    assert!(err.contains("given up after"), "{err}");
}

#[test]
fn redis_timeout_is_the_deadline_and_ours_wins_when_set() {
    let with = |vars: &[(&str, &str)]| {
        Settings::from_lookup(|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
        .unwrap()
        .deadline
    };
    assert_eq!(with(&[]), Duration::from_millis(5));
    assert_eq!(
        with(&[("REDIS_TIMEOUT", "250ms")]),
        Duration::from_millis(250)
    );
    assert_eq!(with(&[("REDIS_TIMEOUT", "10s")]), Duration::from_secs(10));
    assert_eq!(
        with(&[("REDIS_TIMEOUT", "10s"), ("RLS_DEADLINE_MS", "20")]),
        Duration::from_millis(20)
    );
    assert!(Settings::from_lookup(|k| (k == "REDIS_TIMEOUT").then(|| "ten".to_string())).is_err());
}
