//! RL.SHAPE against a real server: nginx's documented `limit_req` examples (rate 1 r/s, burst 5;
//! with `nodelay`; with `delay=`) on the debug clock, the sixth field, errors, durability and
//! replication.

mod support;
use support::*;

/// RL.SHAPE's six-integer reply: the five standard fields and `delay_ms`.
fn shape(c: &mut Connection, words: &[&str]) -> [i64; 6] {
    ints(c, words)
}

/// `limit_req_zone … rate=1r/s; limit_req zone=one burst=5;`: of seven requests at once, the
/// first goes now, five are queued and released one per second, the seventh is rejected.
#[test]
fn nginx_rate_1rs_burst_5() {
    let (_s, mut c) = server();
    let req = ["RL.SHAPE", "k", "1", "1000", "QUEUE", "5"];
    for i in 0..6 {
        // limit = queue + 1 (how many may pass at once after idle); delay i s.
        assert_eq!(
            shape(&mut c, &req),
            [1, 6, 5 - i, -1, 1000 * (i + 1), 1000 * i]
        );
    }
    assert_eq!(shape(&mut c, &req), [0, 6, 0, 1000, 6000, 0]);
    // The key lives until the queue has drained.
    assert_eq!(pexpiretime(&mut c, "k"), (T0_MS + 6000) as i64);
    clock_advance(&mut c, 999);
    assert_eq!(shape(&mut c, &req), [0, 6, 0, 1, 5001, 0]);
    clock_advance(&mut c, 1);
    // One place freed, at the back of the queue: released at 6 s.
    assert_eq!(shape(&mut c, &req), [1, 6, 0, -1, 6000, 5000]);
    // Idle until drained: the next one goes at once.
    clock_advance(&mut c, 6000);
    assert_eq!(shape(&mut c, &req), [1, 6, 5, -1, 1000, 0]);
}

/// `burst=5 nodelay`: six go at once, the seventh is rejected, one place frees every second.
#[test]
fn nginx_rate_1rs_burst_5_nodelay() {
    let (_s, mut c) = server();
    let req = ["RL.SHAPE", "k", "1", "1000", "QUEUE", "5", "NODELAY"];
    for i in 0..6 {
        assert_eq!(shape(&mut c, &req), [1, 6, 5 - i, -1, 1000 * (i + 1), 0]);
    }
    assert_eq!(shape(&mut c, &req), [0, 6, 0, 1000, 6000, 0]);
    clock_advance(&mut c, 1000);
    assert_eq!(shape(&mut c, &req), [1, 6, 0, -1, 6000, 0]);
    assert_eq!(shape(&mut c, &req), [0, 6, 0, 1000, 6000, 0]);
}

/// `burst=5 delay=3`: the first and three excess requests go at once, the 5th and 6th wait 1 s
/// and 2 s, the 7th is rejected.
#[test]
fn nginx_rate_1rs_burst_5_delay_3() {
    let (_s, mut c) = server();
    let req = ["RL.SHAPE", "k", "1", "1000", "QUEUE", "5", "DELAY", "3"];
    let delays: Vec<i64> = (0..6).map(|_| shape(&mut c, &req)[5]).collect();
    assert_eq!(delays, [0, 0, 0, 0, 1000, 2000]);
    assert_eq!(shape(&mut c, &req), [0, 6, 0, 1000, 6000, 0]);
}

#[test]
fn defaults_cost_peek_and_rounding() {
    let (_s, mut c) = server();
    // No QUEUE: nginx's default burst 0, one request per interval, never a delay.
    let strict = ["RL.SHAPE", "s", "2", "1000"];
    assert_eq!(shape(&mut c, &strict), [1, 1, 0, -1, 500, 0]);
    assert_eq!(shape(&mut c, &strict), [0, 1, 0, 500, 500, 0]);
    // COST n is released with its last unit: 3 at once on an idle key wait 2 intervals.
    let req = ["RL.SHAPE", "c", "3", "1000", "QUEUE", "4", "COST", "3"];
    // T = 333.33 ms: the delay is rounded up to the ms.
    assert_eq!(shape(&mut c, &req), [1, 5, 2, -1, 1000, 667]);
    // A peek answers as a cost-1 request would (delay included) and changes nothing.
    let peek = ["RL.SHAPE", "c", "3", "1000", "QUEUE", "4", "COST", "0"];
    let (before, at) = (dump(&mut c, "c"), pexpiretime(&mut c, "c"));
    for _ in 0..3 {
        assert_eq!(shape(&mut c, &peek), [1, 5, 2, -1, 1000, 1000]);
    }
    assert_eq!((dump(&mut c, "c"), pexpiretime(&mut c, "c")), (before, at));
    // A peek on a missing key creates nothing.
    assert_eq!(
        shape(&mut c, &["RL.SHAPE", "none", "1", "1000", "COST", "0"]),
        [1, 1, 1, -1, 0, 0]
    );
    assert_eq!(dump(&mut c, "none"), None);
}

#[test]
fn errors_name_the_argument_and_change_nothing() {
    let (_s, mut c) = server();
    shape(&mut c, &["RL.SHAPE", "k", "1", "1000", "QUEUE", "5"]);
    assert_errors_change_nothing(
        &mut c,
        [
            (
                vec!["RL.SHAPE", "k", "1", "1000", "QUEUE", "2", "DELAY", "3"],
                "DELAY",
            ),
            (vec!["RL.SHAPE", "k", "1", "1000", "DELAY", "1"], "DELAY"),
            (
                vec![
                    "RL.SHAPE", "k", "1", "1000", "QUEUE", "5", "DELAY", "1", "NODELAY",
                ],
                "NODELAY",
            ),
            (
                vec!["RL.SHAPE", "k", "1", "1000", "QUEUE", "5", "COST", "7"],
                "COST",
            ),
            (vec!["RL.SHAPE", "k", "1", "1000", "QUEUE", "-1"], "QUEUE"),
            (vec!["RL.SHAPE", "k", "1", "1000", "BURST", "5"], "BURST"),
            (vec!["RL.SHAPE", "k", "0", "1000"], "invalid L"),
            (vec!["RL.SHAPE", "k", "1", "1000", "QUEUE"], "QUEUE"),
            (
                vec!["RL.SHAPE", "k", "1", "1000", "QUEUE", "1", "QUEUE", "1"],
                "QUEUE",
            ),
        ],
    );
    assert!(err(&mut c, &["RL.SHAPE", "k", "1"]).contains("wrong number of arguments"));
}

#[test]
fn wrongtype_both_ways() {
    let (_s, mut c) = server();
    rl(&mut c, &["RL.GCRA", "g", "1", "1000"]);
    shape(&mut c, &["RL.SHAPE", "q", "1", "1000"]);
    assert_wrongtype(
        &mut c,
        &["RL.SHAPE", "g", "1", "1000"],
        "a GCRA limiter",
        "leaky bucket",
    );
    assert_wrongtype(
        &mut c,
        &["RL.GCRA", "q", "1", "1000"],
        "a leaky bucket limiter",
        "GCRA",
    );
    cmd(&mut c, &["SET", "str", "x"]).unwrap();
    assert_wrongtype(
        &mut c,
        &["RL.SHAPE", "str", "1", "1000"],
        "a string",
        "leaky bucket",
    );
}

/// A denial writes nothing; a new policy or a new DELAY is stored even when denied.
#[test]
fn denials_write_nothing_but_a_new_policy_holds() {
    let (_s, mut c) = server();
    let req = ["RL.SHAPE", "k", "1", "1000", "QUEUE", "2"];
    for _ in 0..3 {
        shape(&mut c, &req);
    }
    let before = dump(&mut c, "k");
    assert_eq!(shape(&mut c, &req)[0], 0);
    assert_eq!(dump(&mut c, "k"), before);
    // Same rate and queue, another DELAY: denied, but stored.
    let nodelay = ["RL.SHAPE", "k", "1", "1000", "QUEUE", "2", "NODELAY"];
    assert_eq!(shape(&mut c, &nodelay)[0], 0);
    assert_ne!(dump(&mut c, "k"), before);
    clock_advance(&mut c, 1000);
    assert_eq!(shape(&mut c, &nodelay), [1, 3, 0, -1, 3000, 0]);
}

#[test]
fn refund_gives_queue_places_back() {
    let (_s, mut c) = server();
    let req = ["RL.SHAPE", "k", "1", "1000", "QUEUE", "5"];
    for _ in 0..4 {
        shape(&mut c, &req);
    }
    // Two queued requests were never sent: their places come back.
    assert_eq!(rl(&mut c, &["RL.REFUND", "k", "2"]), [2, 6, 4, -1, 2000]);
    assert_eq!(shape(&mut c, &req), [1, 6, 3, -1, 3000, 2000]);
}

/// Fills a few keys, with the clock moving, for the durability checks.
fn workload(c: &mut Connection) {
    for (i, words) in [
        &["RL.SHAPE", "a", "1", "1000", "QUEUE", "5"][..],
        &["RL.SHAPE", "a", "1", "1000", "QUEUE", "5"],
        &[
            "RL.SHAPE", "b", "10", "1000", "QUEUE", "20", "DELAY", "4", "COST", "3",
        ],
        &["RL.SHAPE", "c", "7", "60000", "QUEUE", "3", "NODELAY"],
        &["RL.SHAPE", "a", "1", "1000", "QUEUE", "5", "DELAY", "2"],
        &["RL.SHAPE", "c", "7", "60000", "QUEUE", "3", "NODELAY"],
    ]
    .iter()
    .enumerate()
    {
        shape(c, words);
        clock_advance(c, 7 + i as i64);
    }
}

fn keys(c: &mut Connection) -> std::collections::BTreeMap<String, (Vec<u8>, i64)> {
    snapshot(c)
}

#[test]
fn debug_reload_keeps_state_and_expiry() {
    let (_s, mut c) = server();
    workload(&mut c);
    let before = keys(&mut c);
    assert_eq!(before.len(), 3);
    let digest =
        |c: &mut Connection| -> String { redis::cmd("DEBUG").arg("DIGEST").query(c).unwrap() };
    let d = digest(&mut c);
    cmd(&mut c, &["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(keys(&mut c), before);
    assert_eq!(digest(&mut c), d);
    // And it decides on from where it was.
    assert_eq!(
        shape(
            &mut c,
            &["RL.SHAPE", "a", "1", "1000", "QUEUE", "5", "DELAY", "2"]
        )[0],
        1
    );
}

#[test]
fn replica_on_another_clock_ends_byte_identical() {
    let (_master, _replica, mut m, mut r) = replica_hours_ahead();
    workload(&mut m);
    wait_replica(&mut m);
    let on_master = keys(&mut m);
    assert_eq!(on_master.len(), 3);
    assert_eq!(on_master, keys(&mut r));
    let e = err(&mut r, &["RL.SHAPE", "a", "1", "1000"]);
    assert!(e.starts_with("READONLY"), "{e}");
}
