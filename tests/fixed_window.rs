//! RL.FIXEDWINDOW against a real server: exact replies at pinned times, epoch-aligned windows,
//! peeks, policy changes, a clock stepped back. Argument errors: tests/arguments.rs.

mod support;
use support::*;

/// A server with the clock pinned at T0_MS, which is a multiple of 1000 ms (not of 60000).
const FW: [&str; 4] = ["RL.FIXEDWINDOW", "k", "10", "1000"];

#[test]
fn exact_replies_at_pinned_times() {
    let (_s, mut c) = server();
    clock_advance(&mut c, 250);
    assert_eq!(rl(&mut c, &FW), [1, 10, 9, -1, 750]);
    assert_eq!(rl(&mut c, &with(&FW, &["COST", "9"])), [1, 10, 0, -1, 750]);
    // Full until the window ends: retry and reset are both the boundary.
    assert_eq!(rl(&mut c, &FW), [0, 10, 0, 750, 750]);
    // reset_after 750 ms: the key lives the minimum TTL, 1 s.
    assert_eq!(pexpiretime(&mut c, "k"), (T0_MS + 250 + 1000) as i64);
    clock_advance(&mut c, 749);
    assert_eq!(rl(&mut c, &FW), [0, 10, 0, 1, 1]);
    clock_advance(&mut c, 1);
    assert_eq!(rl(&mut c, &FW), [1, 10, 9, -1, 1000]);
    assert_eq!(pexpiretime(&mut c, "k"), (T0_MS + 2000) as i64);
}

#[test]
fn windows_are_aligned_to_the_unix_epoch() {
    let (_s, mut c) = server();
    // T0_MS mod 60000 = 40000: the minute window started 40 s ago and ends in 20 s.
    assert_eq!(T0_MS % 60_000, 40_000);
    assert_eq!(
        rl(&mut c, &["RL.FIXEDWINDOW", "m", "5", "60000"]),
        [1, 5, 4, -1, 20_000]
    );
    assert_eq!(pexpiretime(&mut c, "m"), (T0_MS + 20_000) as i64);
}

#[test]
fn peeks_change_nothing() {
    let (_s, mut c) = server();
    let peek = with(&FW, &["COST", "0"]);
    assert_eq!(rl(&mut c, &peek), [1, 10, 10, -1, 0]);
    assert_eq!(cmd(&mut c, &["EXISTS", "k"]).unwrap(), Value::Int(0));
    rl(&mut c, &with(&FW, &["COST", "10"]));
    assert_peeks_change_nothing(&mut c, &peek, [0, 10, 0, 1000, 1000]);
}

#[test]
fn a_denial_writes_nothing() {
    let (_s, mut c) = server();
    let d = ["RL.FIXEDWINDOW", "d", "1", "60000"];
    rl(&mut c, &d);
    assert_denial_writes_nothing(&mut c, &d);
}

#[test]
fn new_policy_applies_at_once_and_carries_the_count() {
    let (_s, mut c) = server();
    clock_advance(&mut c, 250);
    rl(&mut c, &["RL.FIXEDWINDOW", "p", "10", "1000", "COST", "6"]);
    // Limit 20: the 6 spent carry over.
    assert_eq!(
        rl(&mut c, &["RL.FIXEDWINDOW", "p", "20", "1000"]),
        [1, 20, 13, -1, 750]
    );
    // 5 per 500 ms: the 7 spent may all lie in [T0, T0 + 500): full until 500 ms.
    assert_eq!(
        rl(&mut c, &["RL.FIXEDWINDOW", "p", "5", "500"]),
        [0, 5, 0, 250, 250]
    );
    // That denial stored the new policy (a tightening that is denied must hold), with all 7
    // carried to it, above its L. Back at 20 per second, the 7 still count.
    assert_eq!(
        rl(&mut c, &["RL.FIXEDWINDOW", "p", "20", "1000"]),
        [1, 20, 12, -1, 750]
    );
}

#[test]
fn clock_backwards_never_restarts_the_window() {
    let (_s, mut c) = server();
    clock_advance(&mut c, 1500);
    assert_eq!(rl(&mut c, &with(&FW, &["COST", "10"])), [1, 10, 0, -1, 500]);
    // Back into the previous window: the stored window stays full until its end.
    clock_advance(&mut c, -1300);
    assert_eq!(rl(&mut c, &FW), [0, 10, 0, 1800, 1800]);
}

#[test]
fn a_key_keeps_its_algorithm() {
    let (_s, mut c) = server();
    rl(&mut c, &FW);
    rl(&mut c, &["RL.TOKENBUCKET", "t", "10", "1000"]);
    cmd(&mut c, &["SET", "s", "x"]).unwrap();
    for (words, holds, wanted) in [
        (
            &["RL.SLIDINGCOUNTER", "k", "10", "1000"][..],
            "a fixed window limiter",
            "sliding counter",
        ),
        (
            &["RL.GCRA", "k", "10", "1000", "COST", "0"],
            "a fixed window limiter",
            "GCRA",
        ),
        (
            &["RL.FIXEDWINDOW", "t", "10", "1000"],
            "a token bucket limiter",
            "fixed window",
        ),
        (
            &["RL.FIXEDWINDOW", "s", "10", "1000"],
            "a string",
            "fixed window",
        ),
    ] {
        assert_wrongtype(&mut c, words, holds, wanted);
    }
}
