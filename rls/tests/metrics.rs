//! Metrics as the peer emits them: statsd received on a real UDP socket (its names, EXTRA_TAGS
//! in the name), Prometheus with its names and labels, each name checked against the list
//! taken from its docs (`tests/compat/metric_names.txt`); an outage counted as redis_error and
//! seen by /healthcheck under REDIS_HEALTH_CHECK_ACTIVE_CONNECTION.

mod support;

use std::collections::HashSet;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use support::*;

const CONFIG: &str = "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: p
    descriptors:
      - key: q
        rate_limit: {unit: minute, requests_per_unit: 5}
";

fn names() -> Vec<(String, String, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/compat/metric_names.txt");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut p = l.split_whitespace();
            let kind = p.next().unwrap_or("").to_string();
            let name = p.next().unwrap_or("").to_string();
            (kind, name, p.next().unwrap_or("").to_string())
        })
        .collect()
}

/// Traffic touching every counter: admitted, near, over (and cached), an unknown domain, a
/// bad request.
async fn traffic(rls: &mut Rls) {
    for _ in 0..3 {
        rls.ask(simple("d", &[&[("k", "v")]])).await;
    }
    rls.ask(simple("d", &[&[("p", "1"), ("q", "2")]])).await;
    rls.ask(simple("nowhere", &[&[("k", "v")]])).await;
    let _ = rls
        .client
        .should_rate_limit(simple("", &[&[("k", "v")]]))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statsd_on_a_real_udp_socket_with_the_peers_names() {
    let redis = Redis::start();
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let port = socket.local_addr().unwrap().port().to_string();
    let mut rls = Rls::start(
        &redis,
        CONFIG,
        &[
            ("USE_STATSD", "true"),
            ("STATSD_HOST", "127.0.0.1"),
            ("STATSD_PORT", &port),
            ("STATS_FLUSH_INTERVAL", "10ms"),
            ("EXTRA_TAGS", "foo:bar,a:b"),
        ],
    )
    .await;
    traffic(&mut rls).await;
    let tags = ".__a=b.__foo=bar";
    // (name, total): counters arrive as increases, summed here over the flushes.
    let want: Vec<(String, u64)> = vec![
        (
            format!("ratelimit.service.rate_limit.d.k.total_hits{tags}"),
            3,
        ),
        (
            format!("ratelimit.service.rate_limit.d.k.within_limit{tags}"),
            1,
        ),
        (
            format!("ratelimit.service.rate_limit.d.k.over_limit{tags}"),
            2,
        ),
        (
            format!("ratelimit.service.rate_limit.d.k.over_limit_with_local_cache{tags}"),
            1,
        ),
        (
            format!("ratelimit.service.rate_limit.d.p.q.total_hits{tags}"),
            1,
        ),
        (
            format!("ratelimit.service.rate_limit.nowhere.domain_not_found{tags}"),
            1,
        ),
        (format!("ratelimit.service.config_load_success{tags}"), 1),
        (
            format!("ratelimit.service.call.should_rate_limit.service_error{tags}"),
            1,
        ),
        (
            format!("ratelimit_server.ShouldRateLimit.total_requests{tags}"),
            6,
        ),
    ];
    let mut sums: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
    let mut timers = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buf = [0u8; 65_536];
    let missing = |sums: &std::collections::HashMap<String, u64>| -> Vec<(String, u64)> {
        want.iter()
            .filter(|(n, v)| sums.get(n) != Some(v))
            .cloned()
            .collect()
    };
    while !missing(&sums).is_empty() || timers == 0 {
        assert!(
            Instant::now() < deadline,
            "missing: {:?} in {sums:?}",
            missing(&sums)
        );
        let Ok(n) = socket.recv(&mut buf) else {
            continue;
        };
        for line in String::from_utf8_lossy(&buf[..n]).lines() {
            let Some((name, rest)) = line.split_once(':') else {
                continue;
            };
            if let Some(count) = rest.strip_suffix("|c") {
                *sums.entry(name.to_string()).or_default() += count.parse::<u64>().unwrap_or(0);
            } else if rest.ends_with("|ms")
                && name == format!("ratelimit_server.ShouldRateLimit.response_time{tags}")
            {
                timers += 1;
            }
        }
    }
    let seen: HashSet<String> = sums.keys().cloned().collect();
    // Every statsd name of the peer's list has a line here (the placeholders filled).
    for (kind, name, _) in names().into_iter().filter(|n| n.0 == "statsd") {
        let prefix = name
            .replace("{key}", "d.k")
            .replace("{domain}", "nowhere")
            .replace("{method}", "ShouldRateLimit");
        let emitted = seen.contains(&format!("{prefix}{tags}")) || name.ends_with("response_time");
        let never_changed = [
            "shadow_mode",
            "redis_error",
            "config_load_error",
            "global_shadow_mode",
            "near_limit",
        ]
        .iter()
        .any(|s| prefix.ends_with(s));
        // Counters that stayed 0 are not sent (only increases are): checked on /metrics below.
        assert!(emitted || never_changed, "{kind} {name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_names_and_labels_as_the_peers_mapping() {
    let redis = Redis::start();
    let mut rls = Rls::start(&redis, CONFIG, &[]).await;
    traffic(&mut rls).await;
    let http = rls.running().http_addr.port();
    let (status, text) = http_get(http, "/metrics").unwrap();
    assert_eq!(status, 200);
    for (_, name, labels) in names().into_iter().filter(|n| n.0 == "prometheus") {
        let keys: Vec<&str> = labels.split(',').collect();
        let found = text.lines().any(|l| {
            let Some(rest) = l.strip_prefix(&format!("{name}{{")) else {
                return false;
            };
            let inside = rest.split('}').next().unwrap_or("");
            let got: Vec<&str> = inside
                .split(',')
                .filter_map(|kv| kv.split('=').next())
                .collect();
            got == keys
        });
        assert!(found, "{name}{{{labels}}} not in\n{text}");
    }
    assert!(
        text.contains("ratelimit_service_rate_limit_total_hits{domain=\"d\",key1=\"k\"} 3\n"),
        "{text}"
    );
    assert!(text.contains(
        "ratelimit_service_rate_limit_total_hits{domain=\"d\",key1=\"p\",key2=\"q\"} 1\n"
    ));
    assert!(
        text.contains("ratelimit_service_should_rate_limit_error{err_type=\"service_error\"} 1\n")
    );
    assert!(text.contains("ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"} 6\n"));
    assert!(text.contains("ratelimit_service_config_load_success 1\n"));
    // Ours beside them, under our own names.
    assert!(text.contains("rls_store_calls_total "), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_is_counted_and_seen_by_the_healthcheck() {
    let mut redis = Redis::start();
    let mut rls = Rls::start(
        &redis,
        CONFIG,
        &[("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "true")],
    )
    .await;
    let http = rls.running().http_addr.port();
    assert_eq!(http_get(http, "/healthcheck").map(|r| r.0), Some(200));
    redis.kill();
    for _ in 0..5 {
        rls.ask(simple("d", &[&[("p", "1"), ("q", "2")]])).await;
    }
    let m = rls.running().service.metrics.clone();
    assert!(m.service_count("call_should_rate_limit_redis_error") >= 5);
    until("unhealthy", || {
        http_get(http, "/healthcheck").map(|r| r.0) == Some(500)
    })
    .await;
    let (_, text) = http_get(http, "/metrics").unwrap();
    assert!(
        text.contains("ratelimit_service_should_rate_limit_error{err_type=\"redis_error\"} 5\n"),
        "{text}"
    );
}
