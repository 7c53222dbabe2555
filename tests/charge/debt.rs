//! The debt: every limiter goes into it and waits exactly until it is paid, the next requests
//! pay it, a refund undoes a charge, a missing key is created in debt only with a policy, the
//! debt is bounded (a saturated charge says so), RL.INSPECT shows it, and every remembered
//! configuration is charged.

use super::*;

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
