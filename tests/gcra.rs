//! RL.GCRA against a real server: exact replies at pinned times, every hostile input.

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
fn hostile_inputs_are_clear_errors_and_change_nothing() {
    let (mut s, mut c) = server();
    rl(&mut c, &["RL.GCRA", "k", "10", "1000"]);
    cmd(&mut c, &["SET", "str", "x"]).unwrap();
    cmd(&mut c, &["LPUSH", "list", "x"]).unwrap();
    let huge = "9".repeat(5000);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["RL.GCRA", "k", "abc", "1000"],
            "ERR invalid L 'abc': expected an integer from 1 to 1000000000000",
        ),
        (vec!["RL.GCRA", "k", "0", "1000"], "invalid L '0'"),
        (vec!["RL.GCRA", "k", "-1", "1000"], "invalid L '-1'"),
        (vec!["RL.GCRA", "k", "1.5", "1000"], "invalid L '1.5'"),
        (vec!["RL.GCRA", "k", " 1", "1000"], "invalid L ' 1'"),
        (vec!["RL.GCRA", "k", "+1", "1000"], "invalid L '+1'"),
        (vec!["RL.GCRA", "k", "1e3", "1000"], "invalid L '1e3'"),
        (vec!["RL.GCRA", "k", "", "1000"], "invalid L ''"),
        (
            vec!["RL.GCRA", "k", "18446744073709551616", "1000"],
            "invalid L",
        ),
        (vec!["RL.GCRA", "k", "1000000000001", "1000"], "invalid L"),
        (
            vec!["RL.GCRA", "k", &huge, "1000"],
            "invalid L '99999999999999999999999999999999...'",
        ),
        (vec!["RL.GCRA", "k", "10", "0"], "invalid W '0'"),
        (vec!["RL.GCRA", "k", "10", "-1000"], "invalid W"),
        (vec!["RL.GCRA", "k", "10", "1000000000001"], "invalid W"),
        (
            vec!["RL.GCRA", "k", "10", "9223372036854775808"],
            "invalid W",
        ),
        (
            vec!["RL.GCRA", "k", "10", "1000", "BURST"],
            "ERR option BURST needs a value",
        ),
        (
            vec!["RL.GCRA", "k", "10", "1000", "COST"],
            "ERR option COST needs a value",
        ),
        (
            vec!["RL.GCRA", "k", "10", "1000", "BURST", "0"],
            "invalid BURST '0'",
        ),
        (
            vec!["RL.GCRA", "k", "10", "1000", "BURST", "x"],
            "invalid BURST 'x'",
        ),
        (
            vec!["RL.GCRA", "k", "10", "1000", "COST", "-1"],
            "invalid COST '-1'",
        ),
        (
            vec!["RL.GCRA", "k", "10", "1000", "COST", "11"],
            "ERR COST 11 can never be admitted: it exceeds the capacity 10",
        ),
        (
            vec!["RL.GCRA", "k", "10", "1000", "BURST", "3", "COST", "4"],
            "exceeds the capacity 3",
        ),
        (
            vec!["RL.GCRA", "k", "10", "1000", "COST", "1", "COST", "1"],
            "ERR option COST given more than once",
        ),
        (
            vec!["RL.GCRA", "k", "10", "1000", "BURST", "5", "burst", "5"],
            "ERR option BURST given more than once",
        ),
        (
            vec!["RL.GCRA", "k", "10", "1000", "FOO", "1"],
            "ERR unknown option 'FOO'; expected BURST or COST",
        ),
        (
            vec!["RL.GCRA", "k", "10", "1000", "WANT", "1"],
            "unknown option 'WANT'",
        ),
        (
            vec!["RL.GCRA", "k", "10", "1000", "\r\nSET", "1"],
            "unknown option '??SET'",
        ),
        (
            vec!["RL.GCRA", "k", "1", "1000000000000", "BURST", "2"],
            "takes longer than",
        ),
        (vec!["RL.GCRA", "k", "10"], "wrong number of arguments"),
        (vec!["RL.GCRA", "k"], "wrong number of arguments"),
        (vec!["RL.GCRA"], "wrong number of arguments"),
        (
            vec!["RL.GCRA", "str", "10", "1000"],
            "WRONGTYPE the key holds a string, not a GCRA limiter",
        ),
        (
            vec!["RL.GCRA", "list", "10", "1000", "COST", "0"],
            "WRONGTYPE the key holds a list",
        ),
        (
            vec!["RL.SETSTATE", "k", "garbage"],
            "ERR invalid limiter state",
        ),
        (
            vec!["RL.SETSTATE", "k", ""],
            "ERR invalid limiter state: truncated",
        ),
        (vec!["RL.DEBUG", "CLOCK", "SET", "x"], "invalid ms 'x'"),
        (
            vec!["RL.DEBUG", "CLOCK", "JUMP"],
            "unknown CLOCK action 'JUMP'",
        ),
        (vec!["RL.DEBUG", "NOPE", "x"], "unknown subcommand 'NOPE'"),
        (vec!["RL.DEBUG", "CLOCK"], "wrong number of arguments"),
    ];
    assert_errors_change_nothing(&mut c, cases);
    assert_eq!(
        cmd(&mut c, &["GET", "str"]).unwrap(),
        Value::BulkString(b"x".to_vec())
    );
    assert_eq!(
        cmd(&mut c, &["PING"]).unwrap(),
        Value::SimpleString("PONG".into())
    );
    assert!(s.alive());
    let _ = &mut s;
}

#[test]
fn a_panic_in_a_handler_is_an_error_not_a_crash() {
    let (mut s, mut c) = server();
    rl(&mut c, &["RL.GCRA", "k", "10", "1000"]);
    assert_eq!(err(&mut c, &["RL.DEBUG", "PANIC"]), "ERR internal error");
    assert!(s.alive());
    assert_eq!(
        rl(&mut c, &["RL.GCRA", "k", "10", "1000"]),
        [1, 10, 8, -1, 200]
    );
    assert!(s.log().contains("panic caught in RL.DEBUG"));
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
fn the_debug_clock_stays_within_its_bounds_and_limiters_keep_working() {
    let (_s, mut c) = server();
    let max = "10000000000000";
    for _ in 0..3 {
        let at: i64 = redis::cmd("RL.DEBUG")
            .arg("CLOCK")
            .arg("ADVANCE")
            .arg(max)
            .query(&mut c)
            .unwrap();
        assert_eq!(at, 10_000_000_000_000);
    }
    for command in [
        "RL.GCRA",
        "RL.TOKENBUCKET",
        "RL.SLIDINGLOG",
        "RL.SLIDINGCOUNTER",
        "RL.FIXEDWINDOW",
    ] {
        assert_eq!(
            rl(&mut c, &[command, command, "1", "1000000000000"])[0],
            1,
            "{command}"
        );
        assert_eq!(
            rl(&mut c, &[command, command, "1", "1000000000000"])[0],
            0,
            "{command}"
        );
    }
    let mut at = 1;
    for _ in 0..2 {
        at = redis::cmd("RL.DEBUG")
            .arg("CLOCK")
            .arg("ADVANCE")
            .arg(format!("-{max}"))
            .query(&mut c)
            .unwrap();
    }
    assert_eq!(at, 0, "pinned at the epoch, not back to the real clock");
}

#[test]
fn debug_clock_is_refused_without_the_load_argument() {
    let s = Server::start();
    let mut c = s.connect();
    let _ = &s;
    // This server has it; a server loaded without it refuses.
    assert!(cmd(&mut c, &["RL.DEBUG", "CLOCK", "GET"]).is_ok());
    let plain = PlainServer::start();
    let mut p = plain.0.connect();
    let e = err(&mut p, &["RL.DEBUG", "CLOCK", "SET", "1000"]);
    assert!(e.contains("the debug clock is off"), "{e}");
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

#[test]
fn unknown_module_arguments_fail_the_load() {
    let dir = tempdir::Dir::new();
    let status = std::process::Command::new("redis-server")
        .args([
            "--port",
            &free_port().to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--dir",
        ])
        .arg(dir.path())
        .arg("--loadmodule")
        .arg(module_path())
        .args(["DEBUG-CLOK", "yes"])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success());
}

/// A server whose module was loaded without DEBUG-CLOCK.
struct PlainServer(Server);

impl PlainServer {
    fn start() -> PlainServer {
        PlainServer(Server::with(&[], &["DEBUG-CLOCK", "no"]))
    }
}
