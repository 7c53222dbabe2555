//! Configurations alternating on a key during a rollout (issue 18): each of the issue's traces,
//! replayed on the debug clock, admits no more than the configuration in force allows, on the
//! master, after `DEBUG RELOAD`, and on a replica; `RL.ALL`, `RL.REFUND`, `RL.PEEK` and the gauges
//! see the remembered configurations too. See `algo::step` for the rule.

mod support;

use redis::Connection;
use support::*;

/// 4000000000000 ms, the README's pinned instant (2096): keys stay alive on Redis's own clock.
const T0_MS: u64 = 4_000_000_000_000;

fn at(c: &mut Connection, t_ms: u64) {
    clock_set(c, T0_MS + t_ms);
}

fn allowed(c: &mut Connection, words: &str) -> i64 {
    let words: Vec<&str> = words.split(' ').collect();
    rl(c, &words)[0]
}

/// The issue's fixed-window trace: 100/h spent at once, then every second a 10/s call (denied)
/// and 100/h COST 100 again. It admitted 6,000 in 60 s; now the hour's 100 are all there is.
#[test]
fn fixed_window_alternating_an_hour_and_a_second() {
    let (_s, mut c) = server();
    let mut admitted = 0;
    for second in 0..60 {
        at(&mut c, second * 1000);
        admitted += 100 * allowed(&mut c, "RL.FIXEDWINDOW f 100 3600000 COST 100");
        at(&mut c, second * 1000 + 500);
        admitted += allowed(&mut c, "RL.FIXEDWINDOW f 10 1000");
    }
    // The hour's configuration admitted its 100 once (not 100 every second). The second's is
    // full again when its second ends, so it is dropped and starts each second from the hour's
    // state carried over (100 spent): denied.
    assert_eq!(admitted, 100);
}

/// The sliding log's: 100/h COST 100, a 10/s call 1.5 s later (which sees only its own second),
/// then 100/h COST 99. It admitted 4,000 in 60 s; now 100 + at most 10 per second under 10/s.
#[test]
fn sliding_log_alternating_an_hour_and_a_second() {
    let (_s, mut c) = server();
    let mut admitted = 0;
    for round in 0..30 {
        let t = round * 2000;
        at(&mut c, t);
        admitted += 100 * allowed(&mut c, "RL.SLIDINGLOG l 100 3600000 COST 100");
        at(&mut c, t + 1500);
        admitted += allowed(&mut c, "RL.SLIDINGLOG l 10 1000");
        at(&mut c, t + 2000 - 1);
        admitted += 99 * allowed(&mut c, "RL.SLIDINGLOG l 100 3600000 COST 99");
    }
    // The hour's configuration admitted its 100 once; the second's, one call a round.
    assert_eq!(admitted, 100 + 30);
}

/// GCRA: 1/s burst 10 spent, a 10/s burst-1 call denied, and 1/s COST 10 a second later. It
/// admitted 20 in 1 s; the slow configuration's debt now drains at its own rate.
#[test]
fn gcra_alternating_rates() {
    let (_s, mut c) = server();
    at(&mut c, 0);
    assert_eq!(allowed(&mut c, "RL.GCRA g 1 1000 BURST 10 COST 10"), 1);
    at(&mut c, 1);
    assert_eq!(allowed(&mut c, "RL.GCRA g 10 1000 BURST 1"), 0);
    at(&mut c, 1001);
    assert_eq!(allowed(&mut c, "RL.GCRA g 1 1000 BURST 10 COST 10"), 0);
    // The slow configuration's own bucket: 1 token back after 1 s, 10 after 10 s.
    assert_eq!(allowed(&mut c, "RL.GCRA g 1 1000 BURST 10 COST 1"), 1);
    at(&mut c, 10_000);
    assert_eq!(allowed(&mut c, "RL.GCRA g 1 1000 BURST 10 COST 10"), 0);
    at(&mut c, 11_000);
    assert_eq!(allowed(&mut c, "RL.GCRA g 1 1000 BURST 10 COST 10"), 1);
}

/// RL.SHAPE the same with QUEUE 9 and QUEUE 0.
#[test]
fn shape_alternating_queues() {
    let (_s, mut c) = server();
    at(&mut c, 0);
    assert_eq!(
        ints::<6>(
            &mut c,
            &["RL.SHAPE", "s", "1", "1000", "QUEUE", "9", "NODELAY", "COST", "10"]
        )[0],
        1
    );
    at(&mut c, 1);
    assert_eq!(ints::<6>(&mut c, &["RL.SHAPE", "s", "10", "1000"])[0], 0);
    at(&mut c, 1001);
    assert_eq!(
        ints::<6>(
            &mut c,
            &["RL.SHAPE", "s", "1", "1000", "QUEUE", "9", "NODELAY", "COST", "10"]
        )[0],
        0
    );
}

/// Token bucket: 10/1000 B10 COST 10, 3/7 B6 denied, 3/7 B6 COST 5 at 13 ms. It admitted 15 in
/// 13 ms where either alone allows 11.
#[test]
fn token_bucket_alternating_rates() {
    let (_s, mut c) = server();
    at(&mut c, 0);
    assert_eq!(
        allowed(&mut c, "RL.TOKENBUCKET t 10 1000 BURST 10 COST 10"),
        1
    );
    at(&mut c, 1);
    assert_eq!(allowed(&mut c, "RL.TOKENBUCKET t 3 7 BURST 6"), 0);
    at(&mut c, 13);
    assert_eq!(allowed(&mut c, "RL.TOKENBUCKET t 3 7 BURST 6 COST 5"), 0);
    // Back under the first configuration: its own bucket, 13 ms of refill at 10/s: nothing.
    assert_eq!(allowed(&mut c, "RL.TOKENBUCKET t 10 1000 BURST 10"), 0);
}

/// The sliding counter alternating an hour and a second, as the fixed window.
#[test]
fn sliding_counter_alternating_an_hour_and_a_second() {
    let (_s, mut c) = server();
    let mut admitted = 0;
    for second in 0..60 {
        at(&mut c, second * 1000);
        admitted += 100 * allowed(&mut c, "RL.SLIDINGCOUNTER sc 100 3600000 COST 100");
        at(&mut c, second * 1000 + 500);
        admitted += allowed(&mut c, "RL.SLIDINGCOUNTER sc 10 1000");
    }
    // As the fixed window: 100 once; the second's, dropped once full, starts again from the
    // hour's 100 carried over each second: denied.
    assert_eq!(admitted, 100);
}

/// A key remembering three configurations is stored (format 2), reloaded, replicated and
/// restored byte for byte, and keeps deciding the same way afterwards.
#[test]
fn remembered_configurations_survive_reload_and_replication() {
    let master = Server::start();
    let replica = Server::start();
    let (mut m, mut r) = (master.connect(), replica.connect());
    clock_set(&mut m, T0_MS);
    clock_set(&mut r, T0_MS + 3_600_000);
    replicate(&mut r, &master);
    for (i, cmdline) in [
        "RL.SLIDINGLOG k:log 100 3600000 COST 5",
        "RL.SLIDINGLOG k:log 10 1000 COST 5",
        "RL.SLIDINGLOG k:log 20 60000",
        "RL.GCRA k:gcra 1 1000 BURST 10 COST 10",
        "RL.GCRA k:gcra 10 1000 BURST 1",
        "RL.GCRA k:gcra 5 100 BURST 3",
        "RL.FIXEDWINDOW k:fw 100 3600000 COST 100",
        "RL.FIXEDWINDOW k:fw 10 1000",
        "RL.TOKENBUCKET k:tb 10 1000 COST 10",
        "RL.TOKENBUCKET k:tb 3 7 BURST 6",
    ]
    .iter()
    .enumerate()
    {
        clock_advance(&mut m, 1 + i as i64);
        allowed(&mut m, cmdline);
    }
    // Admits under the configuration the log holds as current: in place, one charged delta
    // for its three configurations, applied by the replica to the same bytes.
    for i in 0..30 {
        clock_advance(&mut m, 7 + i % 5);
        allowed(&mut m, "RL.SLIDINGLOG k:log 20 60000");
    }
    wait_replica(&mut m);
    let keys = ["k:log", "k:gcra", "k:fw", "k:tb"];
    for key in keys {
        let bytes = dump(&mut m, key).expect(key);
        assert_eq!(
            dump(&mut r, key),
            Some(bytes.clone()),
            "{key} on the replica"
        );
        assert_eq!(
            pexpiretime(&mut r, key),
            pexpiretime(&mut m, key),
            "{key} expiry"
        );
    }
    let before: Vec<_> = keys.iter().map(|k| dump(&mut m, k)).collect();
    cmd(&mut m, &["DEBUG", "RELOAD"]).unwrap();
    let after: Vec<_> = keys.iter().map(|k| dump(&mut m, k)).collect();
    assert_eq!(before, after, "changed by a reload");
    // RESTORE of the dump into a new key: same bytes.
    let bytes = dump(&mut m, "k:log").unwrap();
    redis::cmd("RESTORE")
        .arg("k:copy")
        .arg(0)
        .arg(bytes.clone())
        .query::<()>(&mut m)
        .unwrap();
    assert_eq!(dump(&mut m, "k:copy"), Some(bytes));
    // The hour's configuration still counts the 5 + 5 + 1 spent under all three, and the 20 −
    // 1 − 10 = 9 admitted since (of 30 calls) under the current one.
    assert_eq!(
        rl(
            &mut m,
            &["RL.SLIDINGLOG", "k:log", "100", "3600000", "COST", "0"]
        )[2],
        80
    );
    // RL.PEEK answers under the configuration the key shows (the last one called).
    let peek: Vec<i64> = redis::cmd("RL.PEEK").arg("k:log").query(&mut m).unwrap();
    assert_eq!(peek[1], 20);
}

/// A key remembers eight configurations at most: a ninth, while none of the eight can be
/// dropped, is decided within every one of them and changes nothing it holds but their states
/// (the key still shows the eighth), so its value stops growing.
#[test]
fn at_most_eight_configurations() {
    let (_s, mut c) = server();
    let mut sizes = Vec::new();
    for l in 1..=10u64 {
        // Rates of l per second, each owing what the others spent: no two states alike.
        at(&mut c, l);
        let call = format!("RL.GCRA eight {l} 1000 BURST 100 COST 5");
        assert_eq!(allowed(&mut c, &call), 1, "{call}");
        sizes.push(dump(&mut c, "eight").unwrap().len());
    }
    assert!(sizes[..8].windows(2).all(|w| w[0] < w[1]), "{sizes:?}");
    assert_eq!(sizes[7], sizes[8]);
    assert_eq!(sizes[8], sizes[9]);
    // The key shows the eighth configuration and lists the seven others.
    let fields = inspect(&mut c, "eight");
    assert_eq!(int_field(&fields, "limit"), 8);
    assert_eq!(int_field(&fields, "configurations"), 8);
    // Everything the ten admitted (50) counts for the first: 50 of its burst of 100 left.
    assert_eq!(
        rl(
            &mut c,
            &["RL.GCRA", "eight", "1", "1000", "BURST", "100", "COST", "0"]
        )[2],
        50
    );
}

/// The issue's attack: one 100/h configuration cycled with four fast ones (10 per 1 to 1.3 s)
/// for 60 rounds, one a second, on every limiter algorithm. With four configurations at most,
/// each round pushed the slow one out and it came back empty: a fixed window admitted 6,000.
/// Now the slow configuration admits its 100 once, and the whole never exceeds what the
/// loosest configuration alone allows over the minute.
#[test]
fn a_fifth_configuration_cannot_refill_a_slow_one() {
    let (_s, mut c) = server();
    for (word, bucket) in [
        ("GCRA", true),
        ("TOKENBUCKET", true),
        ("SLIDINGLOG", false),
        ("SLIDINGCOUNTER", false),
        ("FIXEDWINDOW", false),
    ] {
        let key = format!("attack:{word}");
        let burst = |l: u64| {
            if bucket {
                format!(" BURST {l}")
            } else {
                String::new()
            }
        };
        let slow = format!("RL.{word} {key} 100 3600000{} COST 100", burst(100));
        let fast: Vec<(u64, String)> = (0..4)
            .map(|i| {
                let w = 1000 + 100 * i;
                (w, format!("RL.{word} {key} 10 {w}{}", burst(10)))
            })
            .collect();
        let (mut slow_admitted, mut total) = (0, 0);
        for round in 0..60u64 {
            at(&mut c, 10_000_000 + round * 1000);
            let admitted = 100 * allowed(&mut c, &slow);
            slow_admitted += admitted;
            total += admitted;
            for (i, (_, call)) in fast.iter().enumerate() {
                at(&mut c, 10_000_000 + round * 1000 + 10 * (i as u64 + 1));
                total += allowed(&mut c, call);
            }
        }
        assert_eq!(
            slow_admitted, 100,
            "{word}: the slow configuration refilled"
        );
        // The loosest alone over the 59.04 s the calls span: 10 per 1 s with a burst of 10 (or
        // the windows it touches, at most 61 for the window algorithms; 2 L for the sliding
        // counter's estimate in any W), against the hour's 100.
        let loosest = if bucket { 10 + 591 } else { 10 * 61 + 10 };
        assert!(
            total <= loosest,
            "{word}: {total} admitted, the loosest alone {loosest}"
        );
    }
}

/// `RL.ALL` follows the same rule: its limiters alternate configurations like single keys.
#[test]
fn rl_all_alternating_configurations() {
    let (_s, mut c) = server();
    let mut admitted = 0;
    for second in 0..20 {
        at(&mut c, second * 1000);
        let v: redis::Value = redis::cmd("RL.ALL")
            .arg(&["1", "a", "FIXEDWINDOW", "100", "3600000", "COST", "100"])
            .query(&mut c)
            .unwrap();
        admitted += 100 * first_int(&v);
        at(&mut c, second * 1000 + 500);
        let v: redis::Value = redis::cmd("RL.ALL")
            .arg(&["1", "a", "FIXEDWINDOW", "10", "1000"])
            .query(&mut c)
            .unwrap();
        admitted += first_int(&v);
    }
    assert_eq!(admitted, 100);
}

fn first_int(v: &redis::Value) -> i64 {
    match v {
        redis::Value::Array(parts) => match parts.first() {
            Some(redis::Value::Array(combined)) => match combined.first() {
                Some(redis::Value::Int(n)) => *n,
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

/// A refund gives back to every remembered configuration: each was charged.
#[test]
fn refund_reaches_every_configuration() {
    let (_s, mut c) = server();
    at(&mut c, 0);
    assert_eq!(allowed(&mut c, "RL.FIXEDWINDOW r 10 60000 COST 10"), 1);
    assert_eq!(allowed(&mut c, "RL.FIXEDWINDOW r 20 60000 COST 10"), 1);
    // Both full now under their own L (10 of 10; 20 of 20).
    let back: Vec<i64> = redis::cmd("RL.REFUND")
        .arg("r")
        .arg(5)
        .query(&mut c)
        .unwrap();
    assert_eq!(back[0], 5);
    assert_eq!(allowed(&mut c, "RL.FIXEDWINDOW r 20 60000 COST 5"), 1);
    // Under 10: 20 − 5 + 5 = 20 counted, nothing left.
    assert_eq!(allowed(&mut c, "RL.FIXEDWINDOW r 10 60000"), 0);
}

/// `RL.INSPECT`'s fields as name-value pairs (RESP2: a flat array).
fn inspect(c: &mut Connection, key: &str) -> Vec<redis::Value> {
    match redis::cmd("RL.INSPECT").arg(key).query(c).unwrap() {
        redis::Value::Array(items) => items,
        other => panic!("{other:?}"),
    }
}

/// An integer field of an `RL.INSPECT` reply.
fn int_field(fields: &[redis::Value], name: &str) -> i64 {
    fields
        .chunks(2)
        .find_map(|pair| match pair {
            [redis::Value::BulkString(n), redis::Value::Int(v)] if n == name.as_bytes() => Some(*v),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no {name} in {fields:?}"))
}

/// A configuration is dropped as soon as it holds nothing more than a fresh start would: a
/// change of L alone (kin, same W) leaves one configuration at once; another W is listed by
/// `RL.INSPECT` with when it will be dropped, and goes once it is full again, while the key
/// stays busy under the current one.
#[test]
fn configurations_are_dropped_at_once() {
    let (_s, mut c) = server();
    at(&mut c, 0);
    for l in [100, 200, 150] {
        assert_eq!(allowed(&mut c, &format!("RL.SLIDINGLOG kin {l} 60000")), 1);
    }
    assert!(!several(&mut c, "kin"), "one configuration");
    assert_eq!(allowed(&mut c, "RL.FIXEDWINDOW w 10 1000"), 1);
    assert_eq!(allowed(&mut c, "RL.FIXEDWINDOW w 100 3600000"), 1);
    let fields = inspect(&mut c, "w");
    assert_eq!(int_field(&fields, "configurations"), 2);
    let others = fields
        .chunks(2)
        .find_map(|pair| match pair {
            [redis::Value::BulkString(n), redis::Value::Array(o)] if n == b"others" => Some(o),
            _ => None,
        })
        .expect("others");
    let redis::Value::Array(other) = &others[0] else {
        panic!("{others:?}")
    };
    assert_eq!(int_field(other, "limit"), 10);
    assert_eq!(int_field(other, "count"), 2);
    assert_eq!(int_field(other, "drop_after_ms"), 1000);
    // Busy under 100/h: the 10/s configuration goes with the first write after its second.
    at(&mut c, 1000);
    assert_eq!(allowed(&mut c, "RL.FIXEDWINDOW w 100 3600000"), 1);
    assert!(!several(&mut c, "w"), "one configuration");
}

/// Whether `RL.INSPECT` lists other configurations.
fn several(c: &mut Connection, key: &str) -> bool {
    inspect(c, key)
        .iter()
        .any(|v| v == &redis::Value::BulkString(b"others".to_vec()))
}

/// `RL.ALL` over sliding logs that remember another configuration, admitted under their own:
/// each is charged in place and sends one charged delta, which the replica applies to the same
/// bytes.
#[test]
fn rl_all_charges_remembering_logs_in_place_on_the_replica_too() {
    let master = Server::start();
    let replica = Server::start();
    let (mut m, mut r) = (master.connect(), replica.connect());
    clock_set(&mut m, T0_MS);
    clock_set(&mut r, T0_MS);
    replicate(&mut r, &master);
    for key in ["all:a", "all:b"] {
        allowed(&mut m, &format!("RL.SLIDINGLOG {key} 5 60001"));
    }
    let mut admitted = 0;
    for i in 0..12 {
        clock_advance(&mut m, 3 + i % 4);
        let v: redis::Value = redis::cmd("RL.ALL")
            .arg(&[
                "2",
                "all:a",
                "all:b",
                "SLIDINGLOG",
                "5",
                "60000",
                "SLIDINGLOG",
                "9",
                "60000",
            ])
            .query(&mut m)
            .unwrap();
        admitted += first_int(&v);
    }
    // 5 in the minute under 5/60000, one spent under 5/60001 before: 4 admitted.
    assert_eq!(admitted, 4);
    // Another algorithm's command under the same policy is refused, as for any log.
    let e = cmd(&mut m, &["RL.GCRA", "all:a", "5", "60000"]).unwrap_err();
    assert!(e.to_string().contains("WRONGTYPE"), "{e}");
    assert_eq!(int_field(&inspect(&mut m, "all:a"), "configurations"), 2);
    wait_replica(&mut m);
    for key in ["all:a", "all:b"] {
        assert_eq!(dump(&mut r, key), dump(&mut m, key), "{key} on the replica");
        assert_eq!(
            pexpiretime(&mut r, key),
            pexpiretime(&mut m, key),
            "{key} expiry"
        );
    }
    let info: String = redis::cmd("INFO").arg("ratelimit").query(&mut r).unwrap();
    assert!(
        info.contains("ratelimit_rl_setstate_errors:0"),
        "a refused delta: {info}"
    );
}
