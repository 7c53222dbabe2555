//! Operating the RLS: configs refused with file and entry, reloads (good and bad) under load
//! without a failed request, and the binary itself: health (HTTP and gRPC), metrics, structured
//! logs, the peer's variables it ignores, a clean stop on SIGTERM.

mod support;

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelimit_client::ManualClock;
use ratelimit_rls::server;
use support::*;

const GOOD: &str = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1000000}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_config_at_start_is_named_counted_and_the_server_runs_on() {
    let redis = Redis::start();
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("config.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")],
            "config/config.yaml: descriptors[0] (key 'k').rate_limit: invalid rate limit unit 'fortnight'",
        ),
        (
            &[("a.yaml", "domain: d\n"), ("b.yaml", "domain: d\n")],
            "config/b.yaml: duplicate domain 'd' in config file",
        ),
        (
            &[("config.yaml", "domain: d\ndescriptors:\n  - key: k\n    ratelimit: {}\n")],
            "config/config.yaml: descriptors[0]: config error, unknown key 'ratelimit'",
        ),
        (
            &[("config.yaml", "domain: d\ndescriptors:\n  - key: ''\n")],
            "config/config.yaml: descriptors[0]: descriptor has empty key",
        ),
        (
            &[("config.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, class: vip}\n")],
            "config/config.yaml: descriptors[0] (key 'k').rate_limit: unknown class 'vip' (security, contract, billing)",
        ),
    ];
    for (i, (files, want)) in cases.iter().enumerate() {
        let root = std::env::temp_dir().join(format!("rl-rls-bad-{}-{i}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (name, yaml) in *files {
            write_config(&root, name, yaml);
        }
        let s = settings(&root, &redis, &[]);
        let err = server::load_config(&s).expect_err("refused");
        assert_eq!(err, *want, "case {i}");
        // As the peer: logged and counted, and the server runs on without a config, every
        // request refused until one loads.
        let clock = Arc::new(ManualClock::new(0));
        let running = server::start_with_clock(s, clock).await.expect("runs on");
        let m = &running.service.metrics;
        assert_eq!(m.service_count("config_load_error"), 1, "case {i}");
        assert!(!running.service.has_config(), "case {i}");
        running.stop().await;
        let _ = std::fs::remove_dir_all(&root);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_good_and_bad_under_load_fail_no_request() {
    let redis = Redis::start();
    let mut rls = Rls::start(&redis, GOOD, &[]).await;
    let stop = Arc::new(AtomicBool::new(false));
    let (done, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut load = Vec::new();
    for t in 0..4 {
        let mut client = rls.client.clone();
        let (stop, done, failed) = (stop.clone(), done.clone(), failed.clone());
        load.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let key = format!("load{t}");
                let r = client
                    .should_rate_limit(simple("d", &[&[("k", key.as_str())]]))
                    .await;
                match r {
                    Ok(r) if r.get_ref().overall_code == OK => done.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    let metrics = rls.running().service.metrics.clone();
    // The load at start counts as the peer counts it.
    assert_eq!(metrics.service_count("config_load_success"), 1);
    // A good change: a second domain appears.
    rls.write(
        "other.yaml",
        "domain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
    );
    until("the good reload", || {
        metrics.service_count("config_load_success") == 2
    })
    .await;
    assert_eq!(
        codes(&rls.ask(simple("e", &[&[("k", "x")]])).await).1,
        vec![(OK, 0)]
    );
    // A bad change: refused, the old config stays and answers.
    rls.write(
        "other.yaml",
        "domain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight}\n",
    );
    until("the refused reload", || {
        metrics.service_count("config_load_error") == 1
    })
    .await;
    assert_eq!(
        codes(&rls.ask(simple("e", &[&[("k", "x")]])).await).0,
        OVER_LIMIT
    );
    // Good again: the limit raised applies at once.
    rls.write(
        "other.yaml",
        "domain: e\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3}\n",
    );
    until("the second good reload", || {
        metrics.service_count("config_load_success") == 3
    })
    .await;
    assert_eq!(
        codes(&rls.ask(simple("e", &[&[("k", "x")]])).await).1,
        vec![(OK, 1)]
    );
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.await.unwrap();
    }
    assert_eq!(failed.load(Ordering::Relaxed), 0);
    assert!(done.load(Ordering::Relaxed) > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_health_and_metrics_and_stops_on_sigterm() {
    let redis = Redis::start();
    let root = std::env::temp_dir().join(format!("rl-rls-bin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    write_config(&root, "config.yaml", GOOD);
    let (http, grpc) = (free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_redis-ratelimit-rls"))
        .env_clear()
        .env("HOST", "127.0.0.1")
        .env("PORT", http.to_string())
        .env("GRPC_HOST", "127.0.0.1")
        .env("GRPC_PORT", grpc.to_string())
        .env("RUNTIME_ROOT", &root)
        .env("RUNTIME_SUBDIRECTORY", "ratelimit")
        .env("REDIS_SOCKET_TYPE", "tcp")
        .env("REDIS_URL", redis.url())
        .env("LOG_LEVEL", "info")
        .env("LOG_FORMAT", "json")
        .env("USE_STATSD", "false")
        .env("REDIS_POOL_SIZE", "10")
        .env("DEBUG_HOST", "127.0.0.1")
        .env("DEBUG_PORT", "0")
        .env("SOME_UNKNOWN_VARIABLE", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while http_get(http, "/healthcheck").map(|(s, _)| s) != Some(200) {
        assert!(Instant::now() < deadline, "no /healthcheck");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let url = format!("http://127.0.0.1:{grpc}");
    let channel = tonic::transport::Channel::from_shared(url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    let mut client = ratelimit_rls::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::connect(url)
        .await
        .unwrap();
    let r = client
        .should_rate_limit(simple("d", &[&[("k", "x")]]))
        .await
        .unwrap();
    assert_eq!(r.get_ref().overall_code, OK);
    let (status, metrics) = http_get(http, "/metrics").unwrap();
    assert_eq!(status, 200);
    assert!(
        metrics.contains("ratelimit_service_rate_limit_total_hits{domain=\"d\",key1=\"k\"} 1\n"),
        "{metrics}"
    );
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let exit = child.wait().unwrap();
    assert!(exit.success(), "{exit}");
    let mut logs = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut logs)
        .unwrap();
    assert!(logs.lines().all(|l| l.starts_with("{\"time\":")), "{logs}");
    assert!(logs.contains("REDIS_POOL_SIZE is ignored"), "{logs}");
    assert!(logs.contains("SIGTERM: shutting down"), "{logs}");
    let _ = std::fs::remove_dir_all(&root);
}
