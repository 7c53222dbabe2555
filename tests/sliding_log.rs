//! RL.SLIDINGLOG against a real server: exact replies at pinned times, compact storage measured
//! with MEMORY USAGE, `ratelimit.max-log-entries` (CONFIG; the load argument is in tests/module.rs),
//! peeks, policy changes, a clock stepped back. Argument errors: tests/arguments.rs.

mod support;
use support::*;

const SL: [&str; 4] = ["RL.SLIDINGLOG", "k", "10", "1000"];

fn memory_usage(c: &mut Connection, key: &str) -> i64 {
    redis::cmd("MEMORY").arg("USAGE").arg(key).query(c).unwrap()
}

#[test]
fn exact_replies_at_pinned_times() {
    let (_s, mut c) = server();
    assert_eq!(rl(&mut c, &with(&SL, &["COST", "3"])), [1, 10, 7, -1, 1000]);
    clock_advance(&mut c, 100);
    assert_eq!(rl(&mut c, &with(&SL, &["COST", "5"])), [1, 10, 2, -1, 1000]);
    assert_eq!(rl(&mut c, &SL), [1, 10, 1, -1, 1000]);
    clock_advance(&mut c, 100);
    // 9 in the window: cost 2 waits for the 3 from T0 to leave, at T0 + 1000.
    let two = with(&SL, &["COST", "2"]);
    assert_eq!(rl(&mut c, &two), [0, 10, 1, 800, 900]);
    assert_eq!(rl(&mut c, &with(&SL, &["COST", "0"])), [1, 10, 1, -1, 900]);
    assert_eq!(pexpiretime(&mut c, "k"), (T0_MS + 1100) as i64);
    clock_advance(&mut c, 799);
    assert_eq!(rl(&mut c, &two), [0, 10, 1, 1, 101]);
    clock_advance(&mut c, 1);
    assert_eq!(rl(&mut c, &two), [1, 10, 2, -1, 1000]);
    assert_eq!(pexpiretime(&mut c, "k"), (T0_MS + 2000) as i64);
}

/// One entry per distinct instant, 8 bytes each: at L = 1000 the log of 1000 requests costs
/// 8 bytes per entry over a log of one. A COST 5 request, or 10 at the same instant, is one entry.
#[test]
fn storage_is_eight_bytes_per_entry() {
    let (_s, mut c) = server();
    let m = ["RL.SLIDINGLOG", "m", "1000", "60000"];
    rl(&mut c, &m);
    let one = memory_usage(&mut c, "m");
    for _ in 1..1000 {
        clock_advance(&mut c, 1);
        assert_eq!(rl(&mut c, &m)[0], 1);
    }
    assert_eq!(rl(&mut c, &m)[..3], [0, 1000, 0]);
    let full = memory_usage(&mut c, "m");
    println!("MEMORY USAGE at L=1000: 1 entry {one} B, 1000 entries {full} B");
    assert_eq!(full - one, 999 * 8, "{one} then {full}");

    rl(&mut c, &["RL.SLIDINGLOG", "a", "10", "1000"]);
    rl(&mut c, &["RL.SLIDINGLOG", "b", "10", "1000", "COST", "5"]);
    for _ in 0..10 {
        rl(&mut c, &["RL.SLIDINGLOG", "c", "10", "1000"]);
    }
    let a = memory_usage(&mut c, "a");
    assert_eq!(memory_usage(&mut c, "b"), a);
    assert_eq!(memory_usage(&mut c, "c"), a);
    // A denial stores nothing; the next admitted request stores the log trimmed: at
    // T0 + 60499 the 500 entries from T0 to T0 + 499 have left, 500 remain, plus this one. The
    // log is a ring (an admit drops and appends without copying it): it keeps its slots while
    // more than half full, and shrinks to 1.5 times its entries when it is at most half full.
    clock_advance(&mut c, 1000);
    assert_eq!(rl(&mut c, &m)[0], 0);
    assert_eq!(memory_usage(&mut c, "m"), full);
    clock_set(&mut c, T0_MS + 60_499);
    assert_eq!(rl(&mut c, &m), [1, 1000, 499, -1, 60_000]);
    assert_eq!(memory_usage(&mut c, "m"), full);
    // At T0 + 60899, 101 remain (T0 + 900 .. T0 + 999, and T0 + 60499), plus this one: 102
    // entries, 153 slots.
    clock_set(&mut c, T0_MS + 60_899);
    assert_eq!(rl(&mut c, &m), [1, 1000, 898, -1, 60_000]);
    assert_eq!(memory_usage(&mut c, "m"), one + 8 * 152);
}

#[test]
fn max_log_entries_bounds_l() {
    let (_s, mut c) = server();
    assert_eq!(max_log_entries(&mut c), "10000");
    let e = err(&mut c, &["RL.SLIDINGLOG", "k", "10001", "1000"]);
    assert_eq!(e, "ERR L 10001 is above ratelimit.max-log-entries (10000): a sliding log stores an entry per request; use RL.SLIDINGCOUNTER for large limits, or raise the config");
    assert_eq!(rl(&mut c, &["RL.SLIDINGLOG", "k", "10000", "1000"])[0], 1);
    // CONFIG SET applies at once, to peeks too, and to keys created under the old bound.
    cmd(&mut c, &["CONFIG", "SET", "ratelimit.max-log-entries", "5"]).unwrap();
    assert_eq!(max_log_entries(&mut c), "5");
    for words in [
        &["RL.SLIDINGLOG", "n", "6", "1000", "COST", "0"][..],
        &["RL.SLIDINGLOG", "k", "10000", "1000"],
    ] {
        let e = err(&mut c, words);
        assert!(e.contains("is above ratelimit.max-log-entries (5)"), "{e}");
    }
    assert_eq!(
        rl(&mut c, &["RL.SLIDINGLOG", "n", "5", "1000"]),
        [1, 5, 4, -1, 1000]
    );
    // The sliding counter has no such bound.
    assert_eq!(
        rl(&mut c, &["RL.SLIDINGCOUNTER", "sc", "10000", "1000"])[0],
        1
    );
    for bad in ["0", "1000001", "x"] {
        let e = err(&mut c, &["CONFIG", "SET", "ratelimit.max-log-entries", bad]);
        assert!(e.starts_with("ERR"), "{bad}: {e}");
    }
    assert_eq!(max_log_entries(&mut c), "5");
}

#[test]
fn peeks_change_nothing() {
    let (_s, mut c) = server();
    let peek = with(&SL, &["COST", "0"]);
    assert_eq!(rl(&mut c, &peek), [1, 10, 10, -1, 0]);
    assert_eq!(cmd(&mut c, &["EXISTS", "k"]).unwrap(), Value::Int(0));
    rl(&mut c, &with(&SL, &["COST", "10"]));
    clock_advance(&mut c, 400);
    assert_peeks_change_nothing(&mut c, &peek, [0, 10, 0, 600, 600]);
}

#[test]
fn a_denial_writes_nothing() {
    let (_s, mut c) = server();
    let d = ["RL.SLIDINGLOG", "d", "2", "60000"];
    rl(&mut c, &d);
    clock_advance(&mut c, 10);
    rl(&mut c, &d);
    assert_denial_writes_nothing(&mut c, &d);
}

#[test]
fn new_policy_applies_at_once_and_carries_the_entries() {
    let (_s, mut c) = server();
    for (at, cost) in [(0, "3"), (300, "3"), (300, "0"), (300, "0")] {
        clock_set(&mut c, T0_MS + at);
        rl(&mut c, &["RL.SLIDINGLOG", "p", "10", "1000", "COST", cost]);
    }
    clock_set(&mut c, T0_MS + 600);
    rl(&mut c, &["RL.SLIDINGLOG", "p", "10", "1000", "COST", "4"]);
    clock_set(&mut c, T0_MS + 700);
    // L = 5: all 10 spent still count; one more fits once 6 have left, at T0 + 1300.
    assert_eq!(
        rl(&mut c, &["RL.SLIDINGLOG", "p", "5", "1000"]),
        [0, 5, 0, 600, 900]
    );
    // That denial stored L = 5 and the whole log (a tightening that is denied must hold, and a
    // lowered L forgets nothing). 20 per 500 ms: the 7 of T0 + 300 and T0 + 600 lie in the new
    // window and carry over.
    assert_eq!(
        rl(&mut c, &["RL.SLIDINGLOG", "p", "20", "500"]),
        [1, 20, 12, -1, 500]
    );
}

#[test]
fn clock_backwards_admits_nothing_extra() {
    let (_s, mut c) = server();
    clock_advance(&mut c, 2000);
    let l = ["RL.SLIDINGLOG", "b", "3", "1000"];
    assert_eq!(rl(&mut c, &with(&l, &["COST", "2"])), [1, 3, 1, -1, 1000]);
    clock_advance(&mut c, -2000);
    // Recorded with the newest entry (T0 + 2000), so it leaves with it.
    assert_eq!(rl(&mut c, &l), [1, 3, 0, -1, 3000]);
    assert_eq!(rl(&mut c, &l), [0, 3, 0, 3000, 3000]);
}

#[test]
fn a_key_keeps_its_algorithm() {
    let (_s, mut c) = server();
    rl(&mut c, &SL);
    rl(&mut c, &["RL.GCRA", "g", "10", "1000"]);
    assert_wrongtype(
        &mut c,
        &["RL.SLIDINGCOUNTER", "k", "10", "1000"],
        "a sliding log limiter",
        "sliding counter",
    );
    assert_wrongtype(
        &mut c,
        &["RL.SLIDINGLOG", "g", "10", "1000"],
        "a GCRA limiter",
        "sliding log",
    );
    cmd(&mut c, &["HSET", "h", "f", "v"]).unwrap();
    assert_wrongtype(
        &mut c,
        &["RL.SLIDINGLOG", "h", "10", "1000"],
        "a hash",
        "sliding log",
    );
}

/// The longest window (the tick is then 2^17 ns) keeps working.
#[test]
fn the_longest_window_keeps_working() {
    let (_s, mut c) = server();
    let max = "1000000000000";
    assert_eq!(
        rl(&mut c, &["RL.SLIDINGLOG", "long", "2", max]),
        [1, 2, 1, -1, 1_000_000_000_000]
    );
}
