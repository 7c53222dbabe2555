//! RL.CHARGE against a real server, for every limiter of the registry: an overage charged into
//! debt, the next requests denied until it is paid with an exact retry_after, a refund of the
//! same amount undoing it, a bounded debt that saturates and says so, a missing key created in
//! debt under the policy given; the debt through a replica, DEBUG RELOAD, an AOF rewrite and
//! RESTORE, byte for byte. Argument errors: tests/arguments.rs.

mod support;
use support::registry::Algorithm;
use support::*;

fn charge(c: &mut Connection, key: &str, n: &str) -> [i64; 5] {
    rl(c, &["RL.CHARGE", key, n])
}

/// `L W` of 10 per second for `a` (BURST 10 where it takes one), with `extra` after.
fn limiter<'a>(a: &'a Algorithm, key: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    with(&[a.command.as_str(), key, "10", "1000"], extra)
}

/// The key's peek: what a cost-1 request would get now, spending nothing.
fn peek(c: &mut Connection, a: &Algorithm, key: &str) -> [i64; 5] {
    rl(c, &limiter(a, key, &["COST", "0"]))
}

#[test]
fn every_limiter_goes_into_debt_and_waits_exactly_until_it_is_paid() {
    let (_s, mut c) = server();
    for a in limiter_algorithms() {
        let key = a.id.as_str();
        clock_set(&mut c, T0_MS);
        // The whole capacity spent, then 15 more charged: 25 counted against 10.
        assert_eq!(
            rl(&mut c, &limiter(a, key, &["COST", "10"]))[0],
            1,
            "{}",
            a.id
        );
        let charged = charge(&mut c, key, "15");
        assert_eq!(
            (charged[0], charged[1], charged[2]),
            (15, 10, 0),
            "{}",
            a.id
        );
        let retry = charged[3];
        assert!(retry > 0, "{}: {charged:?}", a.id);
        // Denied until the debt is paid: 1 ms before retry_after, admitted at it.
        let denied = rl(&mut c, &limiter(a, key, &[]));
        assert_eq!(denied[0], 0, "{}", a.id);
        assert_eq!(denied[3], retry, "{}", a.id);
        clock_advance(&mut c, retry - 1);
        assert_eq!(rl(&mut c, &limiter(a, key, &[]))[0], 0, "{}", a.id);
        clock_advance(&mut c, 1);
        assert_eq!(rl(&mut c, &limiter(a, key, &[]))[0], 1, "{}", a.id);
    }
}

/// The bucket algorithms carry the debt until the refill repays it: 25 spent of 10 at 10 per
/// second, so 16 tokens must come back (1.6 s) before one passes, where a spent bucket waits
/// 100 ms. The window algorithms count it in the window it lands in.
#[test]
fn the_debt_is_what_the_next_requests_pay() {
    let (_s, mut c) = server();
    for a in limiter_algorithms() {
        let key = a.id.as_str();
        rl(&mut c, &limiter(a, key, &["COST", "10"]));
        let charged = charge(&mut c, key, "15");
        if a.burst {
            assert_eq!(charged, [15, 10, 0, 1600, 2500], "{}", a.id);
        } else {
            // Every window algorithm lets the charge go with the window, 1 s after T0 (the
            // sliding counter weighs it into the next window: later).
            assert!(charged[3] >= 1000, "{}: {charged:?}", a.id);
        }
    }
}

#[test]
fn a_refund_after_a_charge_undoes_it() {
    let (_s, mut c) = server();
    for a in limiter_algorithms() {
        let key = a.id.as_str();
        rl(&mut c, &limiter(a, key, &["COST", "4"]));
        let (before, at, answer) = (
            dump(&mut c, key),
            pexpiretime(&mut c, key),
            peek(&mut c, a, key),
        );
        assert_eq!(charge(&mut c, key, "30")[0], 30, "{}", a.id);
        assert_ne!(dump(&mut c, key), before, "{}", a.id);
        // The whole 30 is given back, though `remaining` was 0 throughout most of it.
        assert_eq!(rl(&mut c, &["RL.REFUND", key, "30"])[0], 30, "{}", a.id);
        assert_eq!(peek(&mut c, a, key), answer, "{}", a.id);
        assert_eq!(dump(&mut c, key), before, "{}", a.id);
        assert_eq!(pexpiretime(&mut c, key), at, "{}", a.id);
    }
}

#[test]
fn a_missing_key_is_created_in_debt_only_with_a_policy() {
    let (_s, mut c) = server();
    assert_eq!(
        cmd(&mut c, &["RL.CHARGE", "nothing", "5"]).unwrap(),
        Value::Nil
    );
    assert_eq!(cmd(&mut c, &["EXISTS", "nothing"]).unwrap(), Value::Int(0));
    // A response that finished after its key expired: created, in debt, with a TTL covering it.
    assert_eq!(
        rl(
            &mut c,
            &["RL.CHARGE", "late", "25", "POLICY", "GCRA", "10", "1000"]
        ),
        [25, 10, 0, 1600, 2500]
    );
    assert_eq!(pexpiretime(&mut c, "late"), T0_MS as i64 + 2500);
    assert_eq!(
        rl(
            &mut c,
            &[
                "RL.CHARGE",
                "late:tb",
                "3",
                "POLICY",
                "tokenbucket",
                "10",
                "1000",
                "BURST",
                "5"
            ]
        ),
        [3, 5, 2, -1, 300]
    );
    for a in limiter_algorithms() {
        let key = format!("new:{}", a.id);
        let created = rl(
            &mut c,
            &["RL.CHARGE", &key, "12", "POLICY", &a.word, "10", "1000"],
        );
        assert_eq!(
            (created[0], created[1], created[2]),
            (12, 10, 0),
            "{}",
            a.id
        );
        // Created as a key of that algorithm, under that policy: its own command agrees.
        assert_eq!(
            rl(&mut c, &limiter(a, &key, &["COST", "0"]))[0],
            0,
            "{}",
            a.id
        );
    }
    // On an existing key POLICY names the algorithm it must hold; its L, W and B are not applied.
    rl(&mut c, &["RL.TOKENBUCKET", "tb", "10", "1000"]);
    assert_wrongtype(
        &mut c,
        &["RL.CHARGE", "tb", "1", "POLICY", "GCRA", "10", "1000"],
        "a token bucket limiter",
        "GCRA",
    );
    assert_eq!(
        rl(
            &mut c,
            &["RL.CHARGE", "tb", "1", "POLICY", "TOKENBUCKET", "99", "9"]
        ),
        [1, 10, 8, -1, 200]
    );
    cmd(&mut c, &["SET", "s", "x"]).unwrap();
    assert!(err(&mut c, &["RL.CHARGE", "s", "1"]).starts_with("WRONGTYPE the key holds a string"));
}

/// A charge beyond the debt's bound counts what fits (field 1 below n) and stops there; once at
/// the bound a charge changes nothing and writes nothing.
#[test]
fn the_debt_is_bounded_and_a_saturated_charge_says_so() {
    let (_s, mut c) = server();
    let slow = ["POLICY", "GCRA", "1", "1000000000000"];
    let first = rl(&mut c, &with(&["RL.CHARGE", "g", "1000000000000"], &slow));
    assert!(first[0] < 1_000_000_000_000, "{first:?}");
    let before = (dump(&mut c, "g"), pexpiretime(&mut c, "g"));
    assert_eq!(charge(&mut c, "g", "5")[0], 0);
    assert_eq!((dump(&mut c, "g"), pexpiretime(&mut c, "g")), before);
    // A window's count stops at 10^12, a sliding log's at 10^6.
    let fw = [
        "RL.CHARGE",
        "f",
        "1000000000000",
        "POLICY",
        "FIXEDWINDOW",
        "10",
        "1000",
    ];
    assert_eq!(rl(&mut c, &fw)[0], 1_000_000_000_000);
    assert_eq!(charge(&mut c, "f", "1")[0], 0);
    let log = [
        "RL.CHARGE",
        "l",
        "3000000",
        "POLICY",
        "SLIDINGLOG",
        "10",
        "1000",
    ];
    assert_eq!(rl(&mut c, &log)[0], 1_000_000);
    assert_eq!(charge(&mut c, "l", "1")[0], 0);
    assert_eq!(rl(&mut c, &["RL.SLIDINGLOG", "l", "10", "1000"])[3], 1000);
}

/// `RL.INSPECT` shows the debt in each algorithm's own terms.
#[test]
fn inspect_shows_the_debt() {
    let (_s, mut c) = server();
    let expected = [
        ("gcra", "debt_millitokens", 25_000),
        ("token_bucket", "millitokens", -15_000),
        ("sliding_log", "count", 25),
        ("sliding_counter", "current_count", 25),
        ("fixed_window", "count", 25),
    ];
    assert_covers(
        "inspect_shows_the_debt",
        limiter_algorithms(),
        expected.iter().map(|e| e.0),
    );
    for (id, field, value) in expected {
        let a = algorithm(id);
        rl(&mut c, &limiter(a, id, &["COST", "10"]));
        charge(&mut c, id, "15");
        let fields: Vec<Value> = redis::cmd("RL.INSPECT").arg(id).query(&mut c).unwrap();
        let found = fields.chunks(2).find_map(|pair| match pair {
            [Value::BulkString(name), Value::Int(v)] if name == field.as_bytes() => Some(*v),
            _ => None,
        });
        assert_eq!(found, Some(value), "{id}: {fields:?}");
    }
}

/// Keys in debt of every algorithm, one created by the charge.
fn indebted(c: &mut Connection) {
    for a in limiter_algorithms() {
        let key = a.id.as_str();
        rl(c, &limiter(a, key, &["COST", "7"]));
        clock_advance(c, 3);
        charge(c, key, "19");
    }
    ints::<6>(
        c,
        &["RL.SHAPE", "shape", "10", "1000", "QUEUE", "4", "COST", "3"],
    );
    charge(c, "shape", "11");
    cmd(
        c,
        &[
            "RL.SETTLE",
            "2",
            "{s}:a",
            "{s}:b",
            "GCRA",
            "10",
            "1000",
            "BY",
            "17",
            "SLIDINGLOG",
            "10",
            "1000",
            "BY",
            "4",
        ],
    )
    .unwrap();
    rl(
        c,
        &[
            "RL.CHARGE",
            "created",
            "40",
            "POLICY",
            "TOKENBUCKET",
            "10",
            "1000",
            "BURST",
            "5",
        ],
    );
}

fn digest(c: &mut Connection) -> String {
    redis::cmd("DEBUG").arg("DIGEST").query(c).unwrap()
}

#[test]
fn the_debt_reaches_a_replica_byte_for_byte_and_a_saturated_charge_sends_nothing() {
    let master = Server::start();
    let replica = Server::start();
    let (mut m, mut r) = (master.connect(), replica.connect());
    clock_set(&mut m, T0_MS);
    clock_set(&mut r, T0_MS + 3 * 3_600_000);
    replicate(&mut r, &master);
    indebted(&mut m);
    wait_replica(&mut m);
    assert_eq!(snapshot(&mut m), snapshot(&mut r));
    assert_eq!(digest(&mut m), digest(&mut r));
    // Replicas never decide, nor charge.
    assert!(err(&mut r, &["RL.CHARGE", "gcra", "1"]).contains("READONLY"));
    // At the bound: nothing changes, nothing is sent.
    rl(
        &mut m,
        &[
            "RL.CHARGE",
            "g",
            "1000000000000",
            "POLICY",
            "GCRA",
            "1",
            "1000000000000",
        ],
    );
    wait_replica(&mut m);
    let offset = |c: &mut Connection| -> String {
        let info: String = redis::cmd("INFO").arg("replication").query(c).unwrap();
        info.lines()
            .find(|l| l.starts_with("master_repl_offset:"))
            .unwrap_or_default()
            .to_string()
    };
    let before = offset(&mut m);
    assert_eq!(charge(&mut m, "g", "9")[0], 0);
    assert_eq!(offset(&mut m), before);
}

#[test]
fn the_debt_survives_debug_reload_and_restore() {
    let (_s, mut c) = server();
    indebted(&mut c);
    let (before, d) = (snapshot(&mut c), digest(&mut c));
    cmd(&mut c, &["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(snapshot(&mut c), before);
    assert_eq!(digest(&mut c), d);
    for (key, (payload, at)) in &before {
        let copy = format!("{key}:restored");
        redis::cmd("RESTORE")
            .arg(&copy)
            .arg(*at)
            .arg(payload.as_slice())
            .arg("ABSTTL")
            .query::<()>(&mut c)
            .unwrap();
        assert_eq!(dump(&mut c, &copy).as_ref(), Some(payload));
        // The restored key owes what the original owes.
        assert_eq!(
            rl(&mut c, &["RL.REFUND", &copy, "1"]),
            rl(&mut c, &["RL.REFUND", key, "1"]),
            "{key}"
        );
    }
}

#[test]
fn the_debt_survives_an_aof_rewrite_and_a_restart() {
    let mut s = Server::with(
        &[
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--aof-use-rdb-preamble",
            "no",
        ],
        &[],
    );
    let mut c = s.connect();
    clock_set(&mut c, T0_MS);
    indebted(&mut c);
    wait_persistence_idle(&mut c);
    cmd(&mut c, &["BGREWRITEAOF"]).unwrap();
    wait_persistence_idle(&mut c);
    // Charged after the rewrite: lands in the new incremental file.
    charge(&mut c, "gcra", "3");
    let before = snapshot(&mut c);
    s.restart("NOSAVE");
    let mut c = s.connect();
    assert_eq!(snapshot(&mut c), before);
}

/// `RL.SETTLE`: a request reserved over its key, its tenant and the model-wide limit is
/// settled over all three in one call, each by its own difference.
#[test]
fn rl_settle_settles_every_limiter_by_its_own_difference() {
    let (_s, mut c) = server();
    let keys = ["3", "{t}:key", "{t}:tenant", "{t}:model"];
    let reserve = with(
        &keys,
        &[
            "TOKENBUCKET",
            "100",
            "60000",
            "COST",
            "50",
            "GCRA",
            "1000",
            "60000",
            "COST",
            "50",
            "SLIDINGLOG",
            "100",
            "60000",
            "COST",
            "1",
        ],
    );
    let all = |c: &mut Connection, words: &[&str]| -> Vec<Vec<i64>> {
        let name = if words.contains(&"BY") {
            "RL.SETTLE"
        } else {
            "RL.ALL"
        };
        let mut command = redis::cmd(name);
        for w in words {
            command.arg(*w);
        }
        command
            .query(c)
            .unwrap_or_else(|e| panic!("{words:?}: {e}"))
    };
    assert_eq!(all(&mut c, &reserve)[0][0], 1);
    // The response cost 120 tokens: 70 more on the key and the tenant; the model-wide limiter
    // counts requests, so its difference is 0. A second response cost 30: 20 back.
    let settle = |c: &mut Connection, key: &str, tenant: &str, model: &str| {
        all(
            c,
            &with(
                &keys,
                &[
                    "TOKENBUCKET",
                    "100",
                    "60000",
                    "BY",
                    key,
                    "GCRA",
                    "1000",
                    "60000",
                    "BY",
                    tenant,
                    "SLIDINGLOG",
                    "100",
                    "60000",
                    "BY",
                    model,
                ],
            ),
        )
    };
    let settled = settle(&mut c, "70", "70", "0");
    assert_eq!(settled[1], [70, 100, 0, 12600, 72000]);
    assert_eq!(settled[2][..3], [70, 1000, 880]);
    assert_eq!(settled[3][..3], [0, 100, 99]);
    // Combined: all counted in full; the key is the tightest and the longest to wait.
    assert_eq!(settled[0], [1, 100, 0, 12600, 72000]);
    let given = settle(&mut c, "-20", "-20", "0");
    assert_eq!(given[1][..3], [20, 100, 0]);
    assert_eq!(given[2][..3], [20, 1000, 900]);
    // Every limiter moved by exactly what it was asked: the key owes 100 of 100 now.
    assert_eq!(
        rl(
            &mut c,
            &["RL.TOKENBUCKET", "{t}:key", "100", "60000", "COST", "0"]
        )[3],
        600
    );
}

#[test]
fn rl_settle_is_all_or_nothing() {
    let (_s, mut c) = server();
    rl(&mut c, &["RL.GCRA", "{u}:a", "10", "1000", "COST", "5"]);
    cmd(&mut c, &["SET", "{u}:b", "x"]).unwrap();
    rl(&mut c, &["RL.FIXEDWINDOW", "{u}:c", "10", "1000"]);
    assert_errors_change_nothing(
        &mut c,
        [
            (
                vec![
                    "RL.SETTLE",
                    "2",
                    "{u}:a",
                    "{u}:b",
                    "GCRA",
                    "10",
                    "1000",
                    "BY",
                    "5",
                    "GCRA",
                    "10",
                    "1000",
                    "BY",
                    "5",
                ],
                "WRONGTYPE the key '{u}:b' holds a string",
            ),
            (
                vec![
                    "RL.SETTLE",
                    "2",
                    "{u}:a",
                    "{u}:c",
                    "GCRA",
                    "10",
                    "1000",
                    "BY",
                    "5",
                    "GCRA",
                    "10",
                    "1000",
                    "BY",
                    "5",
                ],
                "WRONGTYPE the key '{u}:c' holds a fixed window limiter",
            ),
            (
                vec![
                    "RL.SETTLE",
                    "2",
                    "{u}:a",
                    "{u}:d",
                    "GCRA",
                    "10",
                    "1000",
                    "BY",
                    "5",
                    "GCRA",
                    "10",
                    "1000",
                ],
                "ERR no BY d for key '{u}:d': every limiter is settled by its own difference",
            ),
            (
                vec![
                    "RL.SETTLE",
                    "1",
                    "{u}:a",
                    "GCRA",
                    "10",
                    "1000",
                    "COST",
                    "2",
                    "BY",
                    "5",
                ],
                "ERR RL.SETTLE takes BY d, not COST: the request was already decided",
            ),
            (
                vec![
                    "RL.SETTLE",
                    "1",
                    "{u}:a",
                    "GCRA",
                    "10",
                    "1000",
                    "BURST",
                    "5",
                    "BY",
                ],
                "ERR option BY needs a value",
            ),
            (
                vec!["RL.SETTLE", "1", "{u}:a", "GCRA", "10", "1000", "BY", "1.5"],
                "ERR invalid BY '1.5': expected an integer from -1000000000000 to 1000000000000",
            ),
        ],
    );
    // A missing key is created in debt by a charge, and left missing by a refund.
    let created: Vec<Vec<i64>> = redis::cmd("RL.SETTLE")
        .arg(&[
            "2", "{u}:new", "{u}:gone", "GCRA", "10", "1000", "BY", "15", "GCRA", "10", "1000",
            "BY", "-4",
        ])
        .query(&mut c)
        .unwrap();
    assert_eq!(
        created,
        vec![
            vec![1, 10, 0, 600, 1500],
            vec![15, 10, 0, 600, 1500],
            vec![0, 10, 10, -1, 0]
        ]
    );
    assert_eq!(cmd(&mut c, &["EXISTS", "{u}:gone"]).unwrap(), Value::Int(0));
}

/// Redis finds RL.SETTLE's keys as it finds RL.ALL's (key specs, `COMMAND GETKEYS`, cluster
/// routing), and RL.CHARGE's as RL.REFUND's.
#[test]
fn keys_are_declared() {
    let (_s, mut c) = server();
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg(&[
            "RL.SETTLE",
            "2",
            "a",
            "b",
            "GCRA",
            "1",
            "1",
            "BY",
            "1",
            "GCRA",
            "1",
            "1",
            "BY",
            "-1",
        ])
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["a", "b"]);
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg(&["RL.CHARGE", "k", "5"])
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["k"]);
}

/// A key in a rollout remembers its other configurations: a charge (and a refund) reaches each
/// by its own rule, as an admission does.
#[test]
fn every_remembered_configuration_is_charged() {
    let (_s, mut c) = server();
    rl(&mut c, &["RL.GCRA", "r", "10", "1000", "COST", "2"]);
    rl(&mut c, &["RL.GCRA", "r", "20", "1000", "COST", "3"]);
    assert_eq!(charge(&mut c, "r", "4"), [4, 20, 11, -1, 450]);
    let peek = |c: &mut Connection, l: &str| rl(c, &["RL.GCRA", "r", l, "1000", "COST", "0"])[2];
    assert_eq!((peek(&mut c, "10"), peek(&mut c, "20")), (1, 11));
    assert_eq!(rl(&mut c, &["RL.REFUND", "r", "4"])[0], 4);
    assert_eq!((peek(&mut c, "10"), peek(&mut c, "20")), (5, 15));
}
