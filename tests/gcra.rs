//! RL.GCRA against a real server: exact replies at pinned times, TTLs, peeks,
//! policy changes, a clock stepped back, key specs. Argument errors: tests/arguments.rs.

mod support;
use support::*;

#[test]
fn exact_replies_at_pinned_times() {
    let (_s, mut c) = server();
    let gcra = ["RL.GCRA", "k", "10", "1000"];
    assert_eq!(rl(&mut c, &gcra), [1, 10, 9, -1, 100]);
    for i in 2..=10 {
        assert_eq!(rl(&mut c, &gcra), [1, 10, 10 - i, -1, 100 * i]);
    }
    assert_eq!(rl(&mut c, &gcra), [0, 10, 0, 100, 1000]);
    // The key lives until the limiter is full again.
    assert_eq!(pexpiretime(&mut c, "k"), (T0_MS + 1000) as i64);
    clock_advance(&mut c, 99);
    assert_eq!(rl(&mut c, &gcra), [0, 10, 0, 1, 901]);
    clock_advance(&mut c, 1);
    assert_eq!(rl(&mut c, &gcra), [1, 10, 0, -1, 1000]);
}

#[test]
fn the_ttl_is_reset_after_but_at_least_one_second() {
    let (_s, mut c) = server();
    // reset_after 5000 ms: the key lives exactly that long.
    assert_eq!(rl(&mut c, &["RL.GCRA", "long", "1", "5000"])[4], 5000);
    assert_eq!(pexpiretime(&mut c, "long"), (T0_MS + 5000) as i64);
    // reset_after 10 ms: the key lives 1 s, so a client calling a few times a second does not
    // delete and recreate it on every request.
    assert_eq!(rl(&mut c, &["RL.GCRA", "short", "100", "1000"])[4], 10);
    assert_eq!(pexpiretime(&mut c, "short"), (T0_MS + 1000) as i64);
    clock_advance(&mut c, 999);
    assert_eq!(
        rl(&mut c, &["RL.GCRA", "short", "100", "1000"]),
        [1, 100, 99, -1, 10]
    );
    assert_eq!(pexpiretime(&mut c, "short"), (T0_MS + 999 + 1000) as i64);
}

#[test]
fn burst_cost_and_peek() {
    let (_s, mut c) = server();
    // 1 per second, bursts of 5.
    assert_eq!(
        rl(
            &mut c,
            &["RL.GCRA", "b", "1", "1000", "BURST", "5", "COST", "5"]
        ),
        [1, 5, 0, -1, 5000]
    );
    assert_eq!(
        rl(&mut c, &["RL.GCRA", "b", "1", "1000", "burst", "5"]),
        [0, 5, 0, 1000, 5000]
    );
    clock_advance(&mut c, 3000);
    // A peek answers like cost 1 and spends nothing, however often.
    assert_peeks_change_nothing(
        &mut c,
        &["RL.GCRA", "b", "1", "1000", "BURST", "5", "COST", "0"],
        [1, 5, 3, -1, 2000],
    );
    assert_eq!(
        rl(
            &mut c,
            &["RL.GCRA", "b", "1", "1000", "COST", "3", "BURST", "5"]
        ),
        [1, 5, 0, -1, 5000]
    );
    assert_eq!(
        rl(
            &mut c,
            &["RL.GCRA", "b", "1", "1000", "BURST", "5", "COST", "2"]
        ),
        [0, 5, 0, 2000, 5000]
    );
    // A peek on a missing key creates nothing.
    assert_eq!(
        rl(&mut c, &["RL.GCRA", "nokey", "1", "1000", "COST", "0"]),
        [1, 1, 1, -1, 0]
    );
    assert_eq!(cmd(&mut c, &["EXISTS", "nokey"]).unwrap(), Value::Int(0));
}

#[test]
fn retry_after_is_exact() {
    let (_s, mut c) = server();
    // 3 per second: the emission interval is 333.33… ms; retry must round up.
    let g = ["RL.GCRA", "r", "3", "1000"];
    for _ in 0..3 {
        assert_eq!(rl(&mut c, &g)[0], 1);
    }
    let denied = rl(&mut c, &g);
    assert_eq!(denied, [0, 3, 0, 334, 1000]);
    clock_advance(&mut c, 333);
    assert_eq!(
        rl(&mut c, &g)[0],
        0,
        "1 ms before retry_after: still denied"
    );
    clock_advance(&mut c, 1);
    assert_eq!(rl(&mut c, &g)[0], 1, "at retry_after: admitted");
}

#[test]
fn new_policy_applies_at_once_and_carries_what_was_spent() {
    let (_s, mut c) = server();
    for _ in 0..5 {
        rl(&mut c, &["RL.GCRA", "p", "10", "1000"]);
    }
    // Raising the limit to 100 keeps the 5 spent: 95 remain (94 after this request).
    assert_eq!(
        rl(&mut c, &["RL.GCRA", "p", "100", "1000"]),
        [1, 100, 94, -1, 60]
    );
    // Lowering it to 2 per second with burst 2: 6 spent already, nothing left.
    assert_eq!(rl(&mut c, &["RL.GCRA", "p", "2", "1000"])[0], 0);
}

#[test]
fn a_denial_writes_nothing() {
    let (_s, mut c) = server();
    let d = ["RL.GCRA", "d", "1", "60000"];
    rl(&mut c, &d);
    assert_denial_writes_nothing(&mut c, &d);
}

#[test]
fn clock_backwards_admits_nothing_extra() {
    let (_s, mut c) = server();
    for _ in 0..10 {
        rl(&mut c, &["RL.GCRA", "t", "10", "1000"]);
    }
    clock_advance(&mut c, -5000);
    assert_eq!(
        rl(&mut c, &["RL.GCRA", "t", "10", "1000"]),
        [0, 10, 0, 5100, 6000]
    );
}

#[test]
fn limits_at_the_bounds_keep_exact_arithmetic() {
    let (_s, mut c) = server();
    let max = "1000000000000";
    // The fastest rate: 10^12 per ms.
    assert_eq!(
        rl(&mut c, &["RL.GCRA", "fast", max, "1", "COST", max]),
        [1, 1_000_000_000_000, 0, -1, 1]
    );
    // The slowest refill allowed: one token per 10^12 ms.
    assert_eq!(
        rl(&mut c, &["RL.GCRA", "slow", "1", max]),
        [1, 1, 0, -1, 1_000_000_000_000]
    );
    assert_eq!(
        rl(&mut c, &["RL.GCRA", "slow", "1", max]),
        [0, 1, 0, 1_000_000_000_000, 1_000_000_000_000]
    );
}

#[test]
fn key_spec_and_flags_route_the_key() {
    let (_s, mut c) = server();
    let keys: Vec<(String, Vec<String>)> = redis::cmd("COMMAND")
        .arg("GETKEYSANDFLAGS")
        .arg("RL.GCRA")
        .arg("user:1")
        .arg("10")
        .arg("1000")
        .query(&mut c)
        .unwrap();
    assert_eq!(
        keys,
        vec![(
            "user:1".to_string(),
            vec!["RW".to_string(), "access".into(), "update".into()]
        )]
    );
    let info = format!(
        "{:?}",
        cmd(&mut c, &["COMMAND", "INFO", "RL.GCRA"]).unwrap()
    );
    for flag in ["write", "denyoom", "fast"] {
        assert!(info.contains(flag), "{info}");
    }
}
