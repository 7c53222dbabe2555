//! The peer's HTTP endpoints: `POST /json` on the main port (200 when OK, 429 when over, the
//! response in protobuf's JSON mapping), and the debug port's `/rlconfig` and `/stats`.

mod support;

use std::io::{Read, Write};
use std::time::Duration;

use support::*;

const CONFIG: &str = "domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1, name: one}
";

fn post(port: u16, path: &str, body: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, out.split_once("\r\n\r\n").unwrap().1.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_json_and_the_debug_port() {
    let redis = Redis::start();
    let rls = Rls::start(&redis, CONFIG, &[]).await;
    let http = rls.running().http_addr.port();
    let ask = r#"{"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]}"#;
    let (status, body) = post(http, "/json", ask);
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["overallCode"], "OK");
    assert_eq!(v["statuses"][0]["currentLimit"]["requestsPerUnit"], 1);
    assert_eq!(v["statuses"][0]["currentLimit"]["unit"], "MINUTE");
    assert_eq!(v["statuses"][0]["currentLimit"]["name"], "one");
    assert_eq!(v["statuses"][0]["durationUntilReset"], "60s");
    let (status, body) = post(http, "/json", ask);
    assert_eq!(status, 429, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["overallCode"], "OVER_LIMIT");
    assert_eq!(v["statuses"][0]["code"], "OVER_LIMIT");
    assert!(
        v["statuses"][0].get("limitRemaining").is_none(),
        "0 is left out"
    );
    assert_eq!(post(http, "/json", "{not json").0, 400);
    let big = format!("{{\"domain\": \"{}\"}}", "x".repeat(70_000));
    assert_eq!(post(http, "/json", &big).0, 413);

    let debug = rls.running().debug_addr.port();
    let (status, config) = http_get(debug, "/rlconfig").unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        config,
        "d.k: unit=MINUTE requests_per_unit=1, shadow_mode: false, quota_mode: false, algorithm: FIXEDWINDOW\n"
    );
    let (_, stats) = http_get(debug, "/stats").unwrap();
    assert!(
        stats.contains("ratelimit.service.rate_limit.d.k.total_hits: 2\n"),
        "{stats}"
    );
    assert!(
        stats.contains("ratelimit.service.rate_limit.d.k.over_limit: 1\n"),
        "{stats}"
    );
}
