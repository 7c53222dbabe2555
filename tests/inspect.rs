//! `RL.PEEK key` and `RL.INSPECT key`: read-only, so they answer on replicas (also cluster
//! replicas in READONLY mode); PEEK equals a `COST 0` request under the stored policy, INSPECT
//! explains the stored state field by field on the debug clock.

mod support;
use support::cluster::{slot, Cluster};
use support::*;

/// `RL.INSPECT key` as (field, value) pairs, from the RESP2 flat array; None for nil.
fn inspect(c: &mut Connection, key: &str) -> Option<Vec<(String, Value)>> {
    match redis::cmd("RL.INSPECT").arg(key).query(c).unwrap() {
        Value::Nil => None,
        Value::Array(items) => Some(
            items
                .chunks(2)
                .map(|pair| match pair {
                    [Value::BulkString(name), value] => {
                        (String::from_utf8(name.clone()).unwrap(), value.clone())
                    }
                    other => panic!("not a field-value pair: {other:?}"),
                })
                .collect(),
        ),
        other => panic!("RL.INSPECT {key}: {other:?}"),
    }
}

fn text(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

/// Expected fields: the algorithm, then integers.
fn fields(algorithm: &str, ints: &[(&str, i64)]) -> Vec<(String, Value)> {
    std::iter::once(("algorithm".to_string(), text(algorithm)))
        .chain(ints.iter().map(|&(k, v)| (k.to_string(), Value::Int(v))))
        .collect()
}

/// The key's TTL on the module clock, in ms.
fn ttl(c: &mut Connection, key: &str, now_ms: u64) -> i64 {
    pexpiretime(c, key) - now_ms as i64
}

#[test]
fn inspect_explains_every_algorithm() {
    let (_s, mut c) = server();
    // GCRA, 10 per second, burst 5: 5 spent, 50 ms later 4.5 tokens owed.
    rl(
        &mut c,
        &["RL.GCRA", "g", "10", "1000", "BURST", "5", "COST", "5"],
    );
    // Token bucket, same policy: 5 spent, then 250 ms later 2 more of the 2.5 refilled.
    rl(
        &mut c,
        &[
            "RL.TOKENBUCKET",
            "t",
            "10",
            "1000",
            "BURST",
            "5",
            "COST",
            "5",
        ],
    );
    // Sliding log, 5 per second: 2 now, 3 at +300 ms.
    rl(&mut c, &["RL.SLIDINGLOG", "l", "5", "1000", "COST", "2"]);
    // Fixed window, 10 per second: full (T0 is a window boundary).
    rl(&mut c, &["RL.FIXEDWINDOW", "f", "10", "1000", "COST", "10"]);
    clock_advance(&mut c, 50);
    let now = T0_MS + 50;
    let g_ttl = ttl(&mut c, "g", now);
    assert_eq!(
        inspect(&mut c, "g").unwrap(),
        fields(
            "gcra",
            &[
                ("limit", 10),
                ("window_ms", 1000),
                ("burst", 5),
                ("tat_ms", 450),
                ("debt_millitokens", 4500),
                ("remaining", 0),
                ("retry_after_ms", 50),
                ("reset_after_ms", 450),
                ("ttl_ms", g_ttl),
            ]
        )
    );
    assert_eq!(g_ttl, 950, "the 1 s minimum TTL from T0");

    clock_advance(&mut c, 200);
    rl(
        &mut c,
        &[
            "RL.TOKENBUCKET",
            "t",
            "10",
            "1000",
            "BURST",
            "5",
            "COST",
            "2",
        ],
    );
    let now = T0_MS + 250;
    let t_ttl = ttl(&mut c, "t", now);
    assert_eq!(
        inspect(&mut c, "t").unwrap(),
        fields(
            "token_bucket",
            &[
                ("limit", 10),
                ("window_ms", 1000),
                ("burst", 5),
                ("millitokens", 500),
                ("stored_millitokens", 500),
                ("last_refill_ms", 0),
                ("remaining", 0),
                ("retry_after_ms", 50),
                ("reset_after_ms", 450),
                ("ttl_ms", t_ttl),
            ]
        )
    );

    clock_advance(&mut c, 50);
    rl(&mut c, &["RL.SLIDINGLOG", "l", "5", "1000", "COST", "3"]);
    clock_advance(&mut c, 400);
    let now = T0_MS + 700;
    let l_ttl = ttl(&mut c, "l", now);
    assert_eq!(
        inspect(&mut c, "l").unwrap(),
        fields(
            "sliding_log",
            &[
                ("limit", 5),
                ("window_ms", 1000),
                ("burst", 5),
                ("entries", 2),
                ("oldest_ms", -700),
                ("newest_ms", -400),
                ("count", 5),
                ("remaining", 0),
                ("retry_after_ms", 300),
                ("reset_after_ms", 600),
                ("ttl_ms", l_ttl),
            ]
        )
    );
    assert_eq!(l_ttl, 600);

    let f_ttl = ttl(&mut c, "f", now);
    assert_eq!(
        inspect(&mut c, "f").unwrap(),
        fields(
            "fixed_window",
            &[
                ("limit", 10),
                ("window_ms", 1000),
                ("burst", 10),
                ("window_start_ms", -700),
                ("count", 10),
                ("remaining", 0),
                ("retry_after_ms", 300),
                ("reset_after_ms", 300),
                ("ttl_ms", f_ttl),
            ]
        )
    );

    // Sliding counter, 10 per second: 8 in one window, 3 in the next 250 ms into it (8·0.75 + 3).
    clock_set(&mut c, T0_MS + 10_000);
    rl(
        &mut c,
        &["RL.SLIDINGCOUNTER", "s", "10", "1000", "COST", "8"],
    );
    clock_advance(&mut c, 1250);
    rl(
        &mut c,
        &["RL.SLIDINGCOUNTER", "s", "10", "1000", "COST", "3"],
    );
    let s_ttl = ttl(&mut c, "s", T0_MS + 11_250);
    assert_eq!(
        inspect(&mut c, "s").unwrap(),
        fields(
            "sliding_counter",
            &[
                ("limit", 10),
                ("window_ms", 1000),
                ("burst", 10),
                ("window_start_ms", -250),
                ("previous_count", 8),
                ("current_count", 3),
                ("estimate_millirequests", 9000),
                ("remaining", 1),
                ("retry_after_ms", -1),
                ("reset_after_ms", 1750),
                ("ttl_ms", s_ttl),
            ]
        )
    );

    // The shaper, 10 per second with a queue of 4 and d = 1: five at once, read 350 ms later.
    clock_set(&mut c, T0_MS + 20_000);
    cmd(
        &mut c,
        &[
            "RL.SHAPE", "q", "10", "1000", "QUEUE", "4", "DELAY", "1", "COST", "5",
        ],
    )
    .unwrap();
    clock_advance(&mut c, 350);
    let q_ttl = ttl(&mut c, "q", T0_MS + 20_350);
    assert_eq!(
        inspect(&mut c, "q").unwrap(),
        fields(
            "shape",
            &[
                ("limit", 10),
                ("window_ms", 1000),
                ("burst", 5),
                ("tat_ms", 150),
                ("queued_millirequests", 1500),
                ("undelayed", 1),
                ("delay_ms", 50),
                ("remaining", 3),
                ("retry_after_ms", -1),
                ("reset_after_ms", 150),
                ("ttl_ms", q_ttl),
            ]
        )
    );
    assert_eq!(q_ttl, 650);

    // Concurrency, N = 3 for 1 s: a at +20000 ms, b at +20350 (released again), c at +20600;
    // read at +20700.
    let n = ["RL.CONCURRENCY", "n", "3", "1000"];
    cmd(&mut c, &with(&n, &["ACQUIRE", "a"])).unwrap();
    cmd(&mut c, &with(&n, &["ACQUIRE", "b"])).unwrap();
    clock_advance(&mut c, 250);
    cmd(&mut c, &with(&n, &["ACQUIRE", "c"])).unwrap();
    cmd(&mut c, &with(&n, &["RELEASE", "b"])).unwrap();
    clock_advance(&mut c, 100);
    let n_ttl = ttl(&mut c, "n", T0_MS + 20_700);
    assert_eq!(
        inspect(&mut c, "n").unwrap(),
        fields(
            "concurrency",
            &[
                ("limit", 3),
                ("window_ms", 1000),
                ("burst", 3),
                ("holders", 2),
                ("next_expiry_ms", 650),
                ("remaining", 1),
                ("retry_after_ms", -1),
                ("reset_after_ms", 900),
                ("ttl_ms", n_ttl),
            ]
        )
    );
    assert_eq!(n_ttl, 900);
    // Each key above was explained field by field: together they hold every algorithm.
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
    let explained: Vec<String> = keys
        .iter()
        .map(|k| match &inspect(&mut c, k).unwrap()[0].1 {
            Value::BulkString(id) => String::from_utf8_lossy(id).into_owned(),
            other => panic!("{k}: algorithm {other:?}"),
        })
        .collect();
    assert_covers("inspect_explains_every_algorithm", algorithms(), explained);
}

/// INSPECT's last three decision fields and PEEK are exactly what a COST 0 request answers.
#[test]
fn peek_and_inspect_agree_with_cost_0() {
    let (_s, mut c) = server();
    for (i, words) in WORKLOAD.iter().enumerate() {
        decide(&mut c, words);
        clock_advance(&mut c, 7 * (i as i64 % 5));
        let key = words[1];
        if words[0] == "RL.REFUND" || words[0] == "RL.CHARGE" {
            continue;
        }
        if words[0] == "RL.CONCURRENCY" {
            let expected = rl(&mut c, &with(&words[..4], &["PEEK"]));
            assert_eq!(rl(&mut c, &["RL.PEEK", key]), expected, "{words:?}");
            continue;
        }
        let policy: Vec<&str> = words
            .iter()
            .copied()
            .take_while(|w| !w.eq_ignore_ascii_case("COST") && !w.eq_ignore_ascii_case("WANT"))
            .collect();
        // RL.LEASE shares the token bucket's state; its peek is RL.TOKENBUCKET … COST 0.
        let mut peek = policy.clone();
        if peek[0] == "RL.LEASE" {
            peek[0] = "RL.TOKENBUCKET";
        }
        // The decision's five fields (RL.SHAPE adds its delay).
        let expected: [i64; 5] = decide(&mut c, &with(&peek, &["COST", "0"]))[..5]
            .try_into()
            .unwrap();
        let fields = inspect(&mut c, key).unwrap();
        if fields
            .iter()
            .any(|(k, v)| k == "limit" && *v != Value::Int(policy[2].parse().unwrap()))
        {
            continue; // the key holds another policy than this command's (a later change)
        }
        assert_eq!(rl(&mut c, &["RL.PEEK", key]), expected, "{words:?}");
        // The three fields before `ttl_ms` (a key in a rollout lists its others after it).
        let ttl = fields.iter().position(|(k, _)| k == "ttl_ms").unwrap();
        let tail: Vec<_> = fields[ttl - 3..ttl]
            .iter()
            .map(|(_, v)| v.clone())
            .collect();
        assert_eq!(
            tail,
            [expected[2], expected[3], expected[4]].map(Value::Int),
            "{words:?}"
        );
    }
}

#[test]
fn missing_keys_are_nil_and_other_types_wrongtype() {
    let (_s, mut c) = server();
    assert_eq!(cmd(&mut c, &["RL.PEEK", "nope"]).unwrap(), Value::Nil);
    assert_eq!(cmd(&mut c, &["RL.INSPECT", "nope"]).unwrap(), Value::Nil);
    cmd(&mut c, &["SET", "str", "x"]).unwrap();
    for command in ["RL.PEEK", "RL.INSPECT"] {
        let e = err(&mut c, &[command, "str"]);
        assert!(e.starts_with("WRONGTYPE the key holds a string"), "{e}");
        assert!(err(&mut c, &[command]).contains("wrong number of arguments"));
        assert!(err(&mut c, &[command, "a", "b"]).contains("wrong number of arguments"));
    }
    // Neither creates a key nor touches one.
    rl(&mut c, &["RL.GCRA", "k", "10", "1000"]);
    let before = snapshot(&mut c);
    for _ in 0..3 {
        rl(&mut c, &["RL.PEEK", "k"]);
        inspect(&mut c, "k").unwrap();
    }
    assert_eq!(snapshot(&mut c), before);
}

#[test]
fn read_only_commands_are_flagged_so() {
    let (_s, mut c) = server();
    for command in ["RL.PEEK", "RL.INSPECT"] {
        let info: Value = redis::cmd("COMMAND")
            .arg("INFO")
            .arg(command)
            .query(&mut c)
            .unwrap();
        let text = format!("{info:?}");
        assert!(text.contains("readonly"), "{text}");
        assert!(!text.contains("\"write\""), "{text}");
        let keys: Value = redis::cmd("COMMAND")
            .arg("GETKEYSANDFLAGS")
            .arg(command)
            .arg("k")
            .query(&mut c)
            .unwrap();
        let text = format!("{keys:?}");
        assert!(text.contains("RO") && !text.contains("RW"), "{text}");
    }
}

#[test]
fn inspect_is_a_map_in_resp3() {
    let s = Server::start();
    let client =
        redis::Client::open(format!("redis://127.0.0.1:{}/?protocol=resp3", s.port)).unwrap();
    let mut c = client.get_connection().unwrap();
    clock_set(&mut c, T0_MS);
    rl(&mut c, &["RL.GCRA", "k", "10", "1000"]);
    let Value::Map(pairs) = redis::cmd("RL.INSPECT").arg("k").query(&mut c).unwrap() else {
        panic!("not a map");
    };
    assert_eq!(pairs[0], (text("algorithm"), text("gcra")));
    assert_eq!(pairs[1], (text("limit"), Value::Int(10)));
    assert_eq!(pairs.len(), 10);
}

/// A replica answers from its own copy: PEEK equals the master's COST 0 answer for every
/// algorithm, INSPECT the master's INSPECT (both clocks at the same instant).
#[test]
fn a_replica_answers_peek_and_inspect() {
    let (master, replica) = (Server::start(), Server::start());
    let (mut m, mut r) = (master.connect(), replica.connect());
    clock_set(&mut m, T0_MS);
    clock_set(&mut r, T0_MS);
    replicate(&mut r, &master);
    let sessions: [&[&str]; 8] = [
        &["RL.GCRA", "g", "10", "1000", "BURST", "5"],
        &["RL.TOKENBUCKET", "t", "10", "1000", "BURST", "5"],
        &["RL.SLIDINGLOG", "l", "5", "1000"],
        &["RL.SLIDINGCOUNTER", "s", "5", "1000"],
        &["RL.FIXEDWINDOW", "f", "5", "1000"],
        &["RL.LEASE", "e", "10", "1000", "WANT", "3"],
        &["RL.SHAPE", "q", "5", "1000", "QUEUE", "3"],
        &["RL.CONCURRENCY", "n", "3", "1000", "ACQUIRE", "a"],
    ];
    assert_covers(
        "a_replica_answers_peek_and_inspect's sessions",
        algorithms(),
        sessions.map(|words| words[0]),
    );
    let n = sessions.len() as i64;
    for round in 0..7 {
        for words in sessions {
            decide(&mut m, words);
        }
        wait_replica(&mut m);
        for words in sessions {
            let key = words[1];
            let mut peek: Vec<&str> = words.iter().copied().take_while(|w| *w != "WANT").collect();
            if peek[0] == "RL.LEASE" {
                peek[0] = "RL.TOKENBUCKET";
            }
            let zero: &[&str] = if peek[0] == "RL.CONCURRENCY" {
                peek.truncate(4);
                &["PEEK"]
            } else {
                &["COST", "0"]
            };
            let expected: [i64; 5] = decide(&mut m, &with(&peek, zero))[..5].try_into().unwrap();
            assert_eq!(
                rl(&mut r, &["RL.PEEK", key]),
                expected,
                "round {round}: {words:?}"
            );
            assert_eq!(
                inspect(&mut r, key),
                inspect(&mut m, key),
                "round {round}: {key}"
            );
        }
        clock_advance(&mut m, 90);
        clock_advance(&mut r, 90);
    }
    assert_eq!(cmd(&mut r, &["RL.PEEK", "missing"]).unwrap(), Value::Nil);
    // The limiter commands themselves are still refused there.
    assert!(err(&mut r, &["RL.GCRA", "g", "10", "1000"]).starts_with("READONLY"));
    // Each server's INFO is its own view: the replica ran the peeks and applied the effects.
    let info = |c: &mut Connection, field: &str| -> i64 {
        let text: String = redis::cmd("INFO").arg("ratelimit").query(c).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("ratelimit_{field}:")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in {text}"))
    };
    assert_eq!(info(&mut r, "rl_peek_peeks"), 7 * n + 1);
    assert_eq!(info(&mut r, "rl_inspect_peeks"), 7 * n);
    // Redis itself refused that RL.GCRA (a read-only replica): the module never saw it.
    assert_eq!(info(&mut r, "rl_gcra_errors"), 0);
    assert!(info(&mut r, "rl_setstate_calls") > 0);
    assert_eq!(info(&mut r, "keys"), n);
    assert_eq!(info(&mut m, "rl_peek_peeks"), 0);
    assert_eq!(info(&mut m, "rl_inspect_peeks"), 7 * n);
    assert_eq!(
        info(&mut m, "rl_gcra_admitted") + info(&mut m, "rl_gcra_denied"),
        7
    );
    assert_eq!(info(&mut m, "keys"), n);
}

/// In a cluster, a replica in READONLY mode answers RL.PEEK and RL.INSPECT for its slots;
/// without READONLY it redirects to the master, as for any read.
#[test]
fn a_cluster_replica_answers_in_readonly_mode() {
    let cluster = Cluster::start(15_000);
    let mut client = cluster.client();
    let key = "user:42";
    let words = ["RL.GCRA", key, "10", "1000", "COST", "4"];
    let _: Vec<i64> = support::limiters::to_cmd(&words.map(String::from))
        .query(&mut client)
        .unwrap();
    let master = cluster.owner(slot(key));
    let mut m = cluster.connect(master);
    let expected = rl(&mut m, &["RL.GCRA", key, "10", "1000", "COST", "0"]);
    let mut rc = cluster.connect(cluster.replica_of(master));
    let moved = err(&mut rc, &["RL.PEEK", key]);
    assert!(moved.starts_with("MOVED"), "{moved}");
    cmd(&mut rc, &["READONLY"]).unwrap();
    wait_for("the replica has the key", || {
        matches!(cmd(&mut rc, &["EXISTS", key]), Ok(Value::Int(1)))
    });
    assert_eq!(rl(&mut rc, &["RL.PEEK", key]), expected);
    assert_eq!(inspect(&mut rc, key), inspect(&mut m, key));
}
