//! RL.SLIDINGCOUNTER against a real server: exact replies at pinned times (the solved retry
//! instant, rounded up), peeks, policy changes, a clock stepped back. Argument errors:
//! tests/arguments.rs.

mod support;
use support::*;

/// A server with the clock pinned at T0_MS, which is a multiple of 1000 ms (not of 60000).
const SC: [&str; 4] = ["RL.SLIDINGCOUNTER", "k", "10", "1000"];

/// The seed's edge: a full window just before a boundary weighs 10 at the boundary and one less
/// every 100 ms after it.
#[test]
fn exact_replies_at_pinned_times() {
    let (_s, mut c) = server();
    clock_advance(&mut c, 950);
    // Fresh until both windows have passed: the next window still weighs this one.
    assert_eq!(
        rl(&mut c, &with(&SC, &["COST", "10"])),
        [1, 10, 0, -1, 1050]
    );
    assert_eq!(pexpiretime(&mut c, "k"), (T0_MS + 2000) as i64);
    clock_advance(&mut c, 50);
    // At the boundary the estimate is exactly 10: denied, admitted 1 ns later (1 ms rounded up).
    assert_eq!(rl(&mut c, &SC), [0, 10, 0, 1, 1000]);
    clock_advance(&mut c, 250);
    // Estimate 7.5: admitted; then 8.5, so 2 more would pass.
    assert_eq!(rl(&mut c, &SC), [1, 10, 2, -1, 1750]);
    // Cost 4 needs 8.5 − (weight lost) + 3 < 10: 10·(1 − e) + 1 + 3 < 10 from e = 400 ms + 1 ns.
    assert_eq!(
        rl(&mut c, &with(&SC, &["COST", "4"])),
        [0, 10, 2, 151, 1750]
    );
    clock_advance(&mut c, 150);
    assert_eq!(rl(&mut c, &with(&SC, &["COST", "4"])), [0, 10, 3, 1, 1600]);
    clock_advance(&mut c, 1);
    assert_eq!(rl(&mut c, &with(&SC, &["COST", "4"])), [1, 10, 0, -1, 1599]);
    assert_eq!(pexpiretime(&mut c, "k"), (T0_MS + 3000) as i64);
}

#[test]
fn windows_are_aligned_to_the_unix_epoch() {
    let (_s, mut c) = server();
    // T0_MS mod 60000 = 40000: this window ends in 20 s, and the next one still weighs it.
    assert_eq!(
        rl(&mut c, &["RL.SLIDINGCOUNTER", "m", "5", "60000"]),
        [1, 5, 4, -1, 80_000]
    );
}

#[test]
fn peeks_change_nothing() {
    let (_s, mut c) = server();
    let peek = with(&SC, &["COST", "0"]);
    assert_eq!(rl(&mut c, &peek), [1, 10, 10, -1, 0]);
    assert_eq!(cmd(&mut c, &["EXISTS", "k"]).unwrap(), Value::Int(0));
    rl(&mut c, &with(&SC, &["COST", "7"]));
    assert_peeks_change_nothing(&mut c, &peek, [1, 10, 3, -1, 2000]);
}

#[test]
fn a_denial_writes_nothing() {
    let (_s, mut c) = server();
    let d = ["RL.SLIDINGCOUNTER", "d", "1", "60000"];
    rl(&mut c, &d);
    assert_denial_writes_nothing(&mut c, &d);
}

#[test]
fn new_policy_applies_at_once_and_carries_the_counts() {
    let (_s, mut c) = server();
    clock_advance(&mut c, 250);
    rl(
        &mut c,
        &["RL.SLIDINGCOUNTER", "p", "10", "1000", "COST", "6"],
    );
    // Limit 20, same windows: the 6 spent carry over.
    assert_eq!(
        rl(&mut c, &["RL.SLIDINGCOUNTER", "p", "20", "1000"]),
        [1, 20, 13, -1, 1750]
    );
    // 5 per 500 ms: the 7 may all lie in [T0, T0 + 500), all of them counted there (above the
    // new L: nothing spent is forgotten). The next window weighs them 7·(500 − e)/500, below 5
    // from e = 142.9 ms on: 250 + 142.9 ms from now.
    assert_eq!(
        rl(&mut c, &["RL.SLIDINGCOUNTER", "p", "5", "500"]),
        [0, 5, 0, 393, 750]
    );
}

#[test]
fn clock_backwards_never_restarts_the_window() {
    let (_s, mut c) = server();
    clock_advance(&mut c, 1500);
    assert_eq!(
        rl(&mut c, &with(&SC, &["COST", "10"])),
        [1, 10, 0, -1, 1500]
    );
    // Back into the previous window: the stored window counts as just begun.
    clock_advance(&mut c, -1300);
    assert_eq!(rl(&mut c, &SC), [0, 10, 0, 1801, 2800]);
}

#[test]
fn a_key_keeps_its_algorithm() {
    let (_s, mut c) = server();
    rl(&mut c, &SC);
    rl(&mut c, &["RL.SLIDINGLOG", "l", "10", "1000"]);
    assert_wrongtype(
        &mut c,
        &["RL.FIXEDWINDOW", "k", "10", "1000"],
        "a sliding counter limiter",
        "fixed window",
    );
    assert_wrongtype(
        &mut c,
        &["RL.SLIDINGCOUNTER", "l", "10", "1000", "COST", "0"],
        "a sliding log limiter",
        "sliding counter",
    );
}

/// The largest policy keeps its arithmetic exact.
#[test]
fn the_largest_policy_keeps_exact_arithmetic() {
    let (_s, mut c) = server();
    let max = "1000000000000";
    assert_eq!(
        rl(&mut c, &["RL.SLIDINGCOUNTER", "big", max, max, "COST", max])[0],
        1
    );
    assert_eq!(
        rl(&mut c, &["RL.SLIDINGCOUNTER", "big", max, max])[..3],
        [0, 1_000_000_000_000, 0]
    );
}
