//! The header helpers against the worked table of docs/http.md (read from the file: the same rows,
//! replayed through the typed calls on a real server) and for several limiters through RL.ALL.

mod support;

use std::time::Duration;

use ratelimit_client::http::{quota, retry_delay, Headers};
use ratelimit_client::{Policy, Store};
use support::Server;

/// The backticked parts of a table cell.
fn ticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

fn header(r: &ratelimit_client::http::Response, name: &str) -> String {
    r.headers
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worked_table_of_docs_http_md() {
    let s = Server::start();
    let store = Store::connect(&s.url())
        .await
        .unwrap()
        .with_deadline(Duration::from_secs(2));
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/http.md")).unwrap();
    let rows: Vec<&str> = doc
        .lines()
        .filter(|l| l.starts_with("| `RL.GCRA "))
        .collect();
    assert!(rows.len() >= 4, "the table of docs/http.md has moved");
    for row in rows {
        let cells: Vec<&str> = row.split(" | ").collect();
        let command = &ticked(cells[0])[0];
        let words: Vec<&str> = command.split(' ').collect();
        let (key, l, w) = (
            words[1],
            words[2].parse().unwrap(),
            words[3].parse().unwrap(),
        );
        let mut policy = Policy::gcra(l, w);
        if words.get(4) == Some(&"BURST") {
            policy = policy.burst(words[5].parse().unwrap());
        }
        let times = if cells[0].contains("again") { 2 } else { 1 };
        let mut d = None;
        for _ in 0..times {
            d = Some(store.decide(key, &policy, 1).await.unwrap());
        }
        let d = d.unwrap();
        let reply: Vec<String> = d.reply().iter().map(i64::to_string).collect();
        assert_eq!(reply.join(" "), cells[1].trim(), "{row}");
        let r = Headers::default().response("default", &policy, &d);
        assert_eq!(
            ticked(cells[2]),
            vec![header(&r, "RateLimit-Policy")],
            "{row}"
        );
        let expected = ticked(cells[3]);
        if d.allowed {
            assert_eq!(r.status, 200);
            assert_eq!(expected, vec![header(&r, "RateLimit")], "{row}");
        } else {
            assert!(cells[3].starts_with("429"), "{row}");
            assert_eq!(r.status, 429);
            let got = vec![
                format!("Retry-After: {}", header(&r, "Retry-After")),
                header(&r, "RateLimit"),
            ];
            assert_eq!(expected, got, "{row}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_limiters_through_rl_all() {
    let s = Server::start();
    let store = Store::connect(&s.url())
        .await
        .unwrap()
        .with_deadline(Duration::from_secs(2));
    let key = Policy::token_bucket(10, 1000);
    let tenant = Policy::fixed_window(2, 86_400_000);
    let names = [("key", &key), ("tenant", &tenant)];
    let call = [("h:{t}:key", key, 4), ("h:{t}:tenant", tenant, 1)];
    let h = Headers::default();

    let all = store.all(&call).await.unwrap();
    let r = h.response_all(&names, &all);
    assert_eq!(r.status, 200);
    assert_eq!(
        header(&r, "RateLimit-Policy"),
        r#""key";q=10;w=1, "tenant";q=2;w=86400"#
    );
    assert_eq!(
        header(&r, "RateLimit"),
        r#""key";r=6;t=1, "tenant";r=1;t=60800"#
    );

    store.all(&call).await.unwrap();
    // The tenant's daily quota (a UTC-day window, 60800 s left at the pinned instant) is
    // spent: 429 until it ends. The key, with 2 tokens for a cost of 4, would deny too (in 1 s).
    let all = store.all(&call).await.unwrap();
    let r = h.response_all(&names, &all);
    assert_eq!(r.status, 429);
    assert_eq!(header(&r, "Retry-After"), "60800");
    assert_eq!(
        header(&r, "RateLimit"),
        r#""key";r=0;t=1, "tenant";r=0;t=60800"#
    );
}

#[test]
fn quota_retry_jitter_and_the_burst_parameter() {
    assert_eq!(quota(&Policy::gcra(30, 1500)), (60, 3));
    assert_eq!(quota(&Policy::gcra(1, 1001)), (1000, 1001));
    let h = Headers {
        burst_parameter: "example-burst".into(),
        ..Headers::default()
    };
    assert_eq!(
        h.policy_item("x", &Policy::gcra(100, 1000).burst(200)),
        r#""x";q=100;w=1;example-burst=200"#
    );
    let denied = ratelimit_client::Decision {
        allowed: false,
        granted: 0,
        limit: 1,
        remaining: 0,
        retry_after_ms: Some(1500),
        reset_after_ms: 1500,
        source: ratelimit_client::Source::Store,
    };
    for random in [0, 1, 700, 1500, u64::MAX] {
        let d = retry_delay(&denied, random);
        assert!(
            d >= Duration::from_millis(1500) && d <= Duration::from_millis(3000),
            "{d:?}"
        );
    }
    // With jitter, Retry-After is the rounded-up second or one more, and t follows it.
    let h = Headers {
        jitter: true,
        ..Headers::default()
    };
    for _ in 0..20 {
        let r = h.response("d", &Policy::gcra(1, 1500), &denied);
        let s = header(&r, "Retry-After");
        assert!(s == "2" || s == "3", "{s}");
        assert_eq!(header(&r, "RateLimit"), format!("\"d\";r=0;t={s}"));
    }
}
