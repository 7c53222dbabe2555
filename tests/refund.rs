//! RL.REFUND against a real server: tokens come back under the key's stored policy, never above
//! the capacity; a missing key is nil. Argument errors: tests/arguments.rs.

mod support;
use support::*;

fn refund(c: &mut Connection, key: &str, n: &str) -> [i64; 5] {
    rl(c, &["RL.REFUND", key, n])
}

#[test]
fn token_bucket_comes_back_capped_at_its_capacity() {
    let (_s, mut c) = server();
    rl(&mut c, &["RL.TOKENBUCKET", "t", "10", "1000", "COST", "6"]);
    assert_eq!(refund(&mut c, "t", "2"), [2, 10, 6, -1, 400]);
    // reset_after 400 ms: the key lives the minimum TTL, 1 s.
    assert_eq!(pexpiretime(&mut c, "t"), (T0_MS + 1000) as i64);
    // Only 4 fit: 4 are given back, the key is full (it lives the minimum TTL, like a fresh
    // limiter).
    assert_eq!(refund(&mut c, "t", "100"), [4, 10, 10, -1, 0]);
    assert_eq!(pexpiretime(&mut c, "t"), (T0_MS + 1000) as i64);
    // Already full: nothing given back, nothing written.
    let before = dump(&mut c, "t");
    assert_eq!(refund(&mut c, "t", "1"), [0, 10, 10, -1, 0]);
    assert_eq!(dump(&mut c, "t"), before);
    // Spent, then refilled by half a token: a refund of 3 adds 3 whole tokens to the half.
    rl(&mut c, &["RL.TOKENBUCKET", "t", "10", "1000", "COST", "10"]);
    clock_advance(&mut c, 50);
    assert_eq!(refund(&mut c, "t", "3"), [3, 10, 3, -1, 650]);
    assert_eq!(
        rl(&mut c, &["RL.TOKENBUCKET", "t", "10", "1000", "COST", "0"]),
        [1, 10, 3, -1, 650]
    );
}

#[test]
fn gcra_moves_back_never_before_now() {
    let (_s, mut c) = server();
    rl(&mut c, &["RL.GCRA", "g", "10", "1000", "COST", "6"]);
    assert_eq!(refund(&mut c, "g", "2"), [2, 10, 6, -1, 400]);
    assert_eq!(pexpiretime(&mut c, "g"), (T0_MS + 1000) as i64);
    assert_eq!(refund(&mut c, "g", "1000000000000"), [4, 10, 10, -1, 0]);
    // Never before now: the arrival time stops at now, exactly where a key that spent one token
    // and got it back stands (not 10^12 intervals in the past, which would bank credit).
    rl(&mut c, &["RL.GCRA", "h", "10", "1000"]);
    assert_eq!(refund(&mut c, "h", "1"), [1, 10, 10, -1, 0]);
    assert_eq!(dump(&mut c, "g"), dump(&mut c, "h"));
    assert_eq!(
        rl(&mut c, &["RL.GCRA", "g", "10", "1000", "COST", "10"]),
        [1, 10, 0, -1, 1000]
    );
    assert_eq!(
        rl(&mut c, &["RL.GCRA", "g", "10", "1000"]),
        [0, 10, 0, 100, 1000]
    );
    // A key already full is left as it is.
    clock_advance(&mut c, 5000);
    let before = dump(&mut c, "h");
    assert_eq!(refund(&mut c, "h", "3"), [0, 10, 10, -1, 0]);
    assert_eq!(dump(&mut c, "h"), before);
}

/// The gateway's cycle: lease a batch, spend part of it, refund the rest when the lease lapses.
#[test]
fn a_lapsed_lease_is_refunded() {
    let (_s, mut c) = server();
    assert_eq!(
        rl(&mut c, &["RL.LEASE", "l", "10", "1000", "WANT", "10"])[..3],
        [10, 10, 0]
    );
    clock_advance(&mut c, 20);
    assert_eq!(refund(&mut c, "l", "7"), [7, 10, 7, -1, 280]);
    assert_eq!(
        rl(&mut c, &["RL.LEASE", "l", "10", "1000", "WANT", "10"])[..3],
        [7, 10, 0]
    );
}

#[test]
fn a_missing_key_is_nil_and_stays_missing() {
    let (_s, mut c) = server();
    assert_eq!(
        cmd(&mut c, &["RL.REFUND", "nothing", "5"]).unwrap(),
        Value::Nil
    );
    assert_eq!(cmd(&mut c, &["EXISTS", "nothing"]).unwrap(), Value::Int(0));
}

#[test]
fn other_types_are_wrongtype() {
    let (_s, mut c) = server();
    cmd(&mut c, &["SET", "s", "x"]).unwrap();
    cmd(&mut c, &["LPUSH", "l", "x"]).unwrap();
    assert_eq!(
        err(&mut c, &["RL.REFUND", "s", "1"]),
        "WRONGTYPE the key holds a string, not a limiter; use another key or DEL it"
    );
    assert!(err(&mut c, &["RL.REFUND", "l", "1"]).starts_with("WRONGTYPE the key holds a list"));
}

#[test]
fn command_metadata() {
    let (_s, mut c) = server();
    let keys: Vec<Value> = redis::cmd("COMMAND")
        .arg("GETKEYSANDFLAGS")
        .arg("RL.REFUND")
        .arg("k")
        .arg("1")
        .query(&mut c)
        .unwrap();
    assert_eq!(format!("{keys:?}").matches("RW").count(), 1, "{keys:?}");
    let info = format!(
        "{:?}",
        cmd(&mut c, &["COMMAND", "INFO", "RL.REFUND", "RL.LEASE"]).unwrap()
    );
    // The flags as simple strings: servers with ACL categories (7.2+) also list "@write" and
    // "@fast" as categories.
    for flag in ["write", "denyoom", "fast"] {
        let quoted = format!("simple-string(\"{flag}\")");
        assert_eq!(info.matches(&quoted).count(), 2, "{flag}: {info}");
    }
}

/// The window algorithms (the limiters of the registry without BURST) give back from the
/// current count, never below zero; the sliding log drops its newest entries first.
#[test]
fn window_algorithms_count_down_never_below_zero() {
    let (_s, mut c) = server();
    let windows = limiter_algorithms().filter(|a| !a.burst);
    for command in windows.map(|a| a.command.as_str()) {
        let key = command;
        rl(&mut c, &[command, key, "10", "1000", "COST", "4"]);
        let before = rl(&mut c, &[command, key, "10", "1000", "COST", "0"]);
        assert_eq!(before[2], 6, "{command}");
        let given = refund(&mut c, key, "3");
        assert_eq!((given[0], given[1], given[2]), (3, 10, 9), "{command}");
        // Only one is still spent: asking for 5 gives back 1.
        let given = refund(&mut c, key, "5");
        assert_eq!((given[0], given[2]), (1, 10), "{command}");
        assert_eq!(
            rl(&mut c, &[command, key, "10", "1000", "COST", "10"])[0],
            1,
            "{command}: the whole window is available again"
        );
        assert_eq!(rl(&mut c, &[command, key, "10", "1000"])[0], 0, "{command}");
    }
}

#[test]
fn sliding_log_refund_removes_the_newest_entries() {
    let (_s, mut c) = server();
    let log = ["RL.SLIDINGLOG", "log", "3", "1000"];
    rl(&mut c, &log);
    clock_advance(&mut c, 400);
    rl(&mut c, &log);
    rl(&mut c, &log);
    // Full; the oldest entry leaves at +1000 ms (600 ms from now).
    assert_eq!(rl(&mut c, &log)[3], 600);
    // Refund the newest: one slot free now, and the oldest still leaves first.
    assert_eq!(refund(&mut c, "log", "1")[0], 1);
    assert_eq!(rl(&mut c, &log)[0], 1);
    assert_eq!(rl(&mut c, &log)[3], 600);
}
