//! The Functions backend: on a server without the module but with the `ratelimit` library
//! (functions/ratelimit.lua, issue 21), the client detects it and its typed calls answer as the
//! raw `FCALL rl_*` on a twin key. The library decides on the real clock (no debug clock), so the
//! two calls may be a millisecond or so apart: times are compared within a tolerance.
//! Skipped, with a note, while functions/ratelimit.lua is not in the tree.

mod support;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ratelimit_client::{Backend, Policy, Store};

use support::Server;

/// When the first test here started: no two calls of a test are further apart than this.
static START: OnceLock<Instant> = OnceLock::new();

/// A time in a reply is a time of some call minus the time of this one, so a typed reply and
/// its twin's differ by at most the span their calls covered: 50 ms, or more when a loaded
/// machine stalled the test for longer.
fn close(typed: &[i64], raw: &[i64], what: &str) {
    assert_eq!(typed[..3], raw[..3], "{what}: {typed:?} vs {raw:?}");
    let span = START.get().map_or(0, |t| t.elapsed().as_millis() as i64);
    let tolerance = (span + 2).max(50);
    for i in 3..typed.len() {
        assert!(
            (typed[i] - raw[i]).abs() <= tolerance,
            "{what}: {typed:?} vs {raw:?} (tolerance {tolerance} ms)"
        );
    }
}

/// A server (without the module) with the Functions library loaded; None, with a note, when
/// the library is not in the tree.
fn with_library() -> Option<Server> {
    START.get_or_init(Instant::now);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../functions/ratelimit.lua");
    let Ok(library) = std::fs::read_to_string(path) else {
        eprintln!("functions/ratelimit.lua is absent: the Functions backend is not tested");
        return None;
    };
    let s = Server::plain();
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(&library)
        .query(&mut s.connect())
        .unwrap();
    Some(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_calls_through_fcall() {
    let Some(s) = with_library() else {
        return;
    };
    let store = Store::connect(&s.url())
        .await
        .unwrap()
        .with_deadline(Duration::from_secs(2));
    assert_eq!(store.backend(), Backend::Functions);
    let raw = |f: &str, key: &str, rest: &[&str]| -> Vec<i64> {
        let mut w = vec!["FCALL", f, "1", key];
        w.extend_from_slice(rest);
        s.ints(&w)
    };
    let cases: [(Policy, &str, &[&str]); 5] = [
        (
            Policy::gcra(10, 60_000).burst(20),
            "rl_gcra",
            &["10", "60000", "BURST", "20"],
        ),
        (
            Policy::token_bucket(10, 60_000),
            "rl_tokenbucket",
            &["10", "60000"],
        ),
        (
            Policy::sliding_log(10, 60_000),
            "rl_slidinglog",
            &["10", "60000"],
        ),
        (
            Policy::sliding_counter(10, 60_000),
            "rl_slidingcounter",
            &["10", "60000"],
        ),
        (
            Policy::fixed_window(10, 86_400_000),
            "rl_fixedwindow",
            &["10", "86400000"],
        ),
    ];
    for (n, (p, f, args)) in cases.iter().enumerate() {
        for cost in ["1", "4", "0", "3"] {
            let t = store
                .decide(&format!("t:{n}"), p, cost.parse().unwrap())
                .await
                .unwrap();
            let mut rest = args.to_vec();
            rest.extend(["COST", cost]);
            close(&t.reply(), &raw(f, &format!("r:{n}"), &rest), f);
        }
        let t = store.peek(&format!("t:{n}")).await.unwrap().unwrap();
        close(
            &t.reply(),
            &raw("rl_peek", &format!("r:{n}"), &[]),
            "rl_peek",
        );
    }
    let shape = ratelimit_client::Shape {
        limit: 1,
        window_ms: 60_000,
        queue: Some(5),
        delay: ratelimit_client::ShapeDelay::Delay(1),
    };
    for _ in 0..3 {
        let t = store.shape("t:shape", &shape, 1).await.unwrap();
        let r = raw(
            "rl_shape",
            "r:shape",
            &["1", "60000", "QUEUE", "5", "DELAY", "1", "COST", "1"],
        );
        close(&t.reply(), &r, "rl_shape");
    }
    let p = Policy::token_bucket(100, 60_000);
    let t = store.lease("t:lease", &p, 30).await.unwrap();
    close(
        &t.reply(),
        &raw("rl_lease", "r:lease", &["100", "60000", "WANT", "30"]),
        "rl_lease",
    );
    let t = store.refund("t:lease", 5).await.unwrap().unwrap();
    close(
        &t.reply(),
        &raw("rl_refund", "r:lease", &["5"]),
        "rl_refund",
    );
    let all = store
        .all(&[
            ("t:{a}:1", Policy::gcra(5, 60_000), 1),
            ("t:{a}:2", Policy::fixed_window(3, 86_400_000), 1),
        ])
        .await
        .unwrap();
    let v = s
        .value(&[
            "FCALL",
            "rl_all",
            "2",
            "r:{a}:1",
            "r:{a}:2",
            "GCRA",
            "5",
            "60000",
            "COST",
            "1",
            "FIXEDWINDOW",
            "3",
            "86400000",
            "COST",
            "1",
        ])
        .unwrap();
    let redis::Value::Array(items) = v else {
        panic!("{v:?}")
    };
    let raw: Vec<Vec<i64>> = items
        .iter()
        .map(|i| redis::from_redis_value(i).unwrap())
        .collect();
    close(&all.combined.reply(), &raw[0], "rl_all");
    for (t, r) in all.limiters.iter().zip(&raw[1..]) {
        close(&t.reply(), r, "rl_all limiter");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_sent_twice_through_fcall_counts_once() {
    let Some(s) = with_library() else {
        return;
    };
    // The charge's shape (RL.ALL over the key and a token key of 1 per day), sent twice
    // through the library as the ledger sends it: the second is denied by its token.
    let store = Store::connect(&s.url())
        .await
        .unwrap()
        .with_deadline(Duration::from_secs(2));
    let quota = Policy::fixed_window(100, 86_400_000);
    let token = Policy::gcra(1, 86_400_000);
    let charge = [("q:f", quota, 7), ("q:f:rl-charge:t1", token, 1)];
    let first = store.all(&charge).await.unwrap();
    assert!(first.combined.allowed);
    let again = store.all(&charge).await.unwrap();
    assert!(!again.combined.allowed);
    assert!(!again.limiters[1].allowed, "denied by the token");
    assert!(again.limiters[0].allowed, "the quota had room");
    assert_eq!(store.peek("q:f").await.unwrap().unwrap().remaining, 93);
}

/// A concurrency slot through `FCALL rl_concurrency`: the guard takes, holds and gives back a
/// slot on the Functions backend as on the module.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_slot_through_fcall() {
    use ratelimit_client::{Class, ConcurrencyLimit, Config, Limiter};
    let Some(s) = with_library() else {
        return;
    };
    let store = Store::connect(&s.url()).await.unwrap();
    assert_eq!(store.backend(), Backend::Functions);
    let limiter = Limiter::new(
        store,
        Config {
            deadline: Duration::from_millis(500),
            ..Config::default()
        },
    );
    let jobs = ConcurrencyLimit::new("jobs", 1, Duration::from_secs(60), Class::Contract);
    let slot = limiter.acquire(&jobs, "jobs:f").await.unwrap();
    let guard = slot.guard.expect("a free slot");
    let denied = limiter.acquire(&jobs, "jobs:f").await.unwrap();
    assert!(denied.guard.is_none());
    assert!(denied.decision.retry_after_ms.is_some_and(|ms| ms > 59_000));
    assert!(guard.release().await.unwrap());
    let peek = [
        "FCALL",
        "rl_concurrency",
        "1",
        "jobs:f",
        "1",
        "60000",
        "PEEK",
    ];
    assert_eq!(s.ints(&peek)[..3], [1, 1, 1]);
}
