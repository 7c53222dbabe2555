//! The module itself, apart from any one command: the panic guard, the debug clock and the load
//! arguments.

mod support;
use support::*;

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
    for command in limiter_algorithms().map(|a| a.command.as_str()) {
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
fn unknown_module_arguments_fail_the_load() {
    let e = match Server::on_port(free_port(), &[], &["DEBUG-CLOK", "yes"]) {
        Err(e) => e,
        Ok(_) => panic!("the load should fail"),
    };
    assert!(e.contains("exited"), "{e}");
}

#[test]
fn max_log_entries_as_a_load_argument() {
    let s = Server::with(&[], &["max-log-entries", "50"]);
    let mut c = s.connect();
    clock_set(&mut c, T0_MS);
    assert_eq!(max_log_entries(&mut c), "50");
    assert_eq!(rl(&mut c, &["RL.SLIDINGLOG", "k", "50", "1000"])[0], 1);
    let e = err(&mut c, &["RL.SLIDINGLOG", "k", "51", "1000"]);
    assert!(e.contains("is above ratelimit.max-log-entries (50)"), "{e}");
}

/// A server whose module was loaded without DEBUG-CLOCK.
struct PlainServer(Server);

impl PlainServer {
    fn start() -> PlainServer {
        PlainServer(Server::with(&[], &["DEBUG-CLOCK", "no"]))
    }
}

/// How the tests learn the registry (`support::registry`): every algorithm the module had when
/// it was written is found, with its command, `BURST` and `RL.ALL` as the module defines them
/// (a new algorithm adds to the list; it does not change these).
#[test]
fn the_tests_see_the_registry_as_the_module_declares_it() {
    let known = [
        ("gcra", "RL.GCRA", true, true),
        ("token_bucket", "RL.TOKENBUCKET", true, true),
        ("sliding_log", "RL.SLIDINGLOG", false, true),
        ("sliding_counter", "RL.SLIDINGCOUNTER", false, true),
        ("fixed_window", "RL.FIXEDWINDOW", false, true),
        ("shape", "RL.SHAPE", false, false),
        ("concurrency", "RL.CONCURRENCY", false, false),
    ];
    let seen: Vec<(&str, &str, bool, bool)> = algorithms()
        .iter()
        .map(|a| (a.id.as_str(), a.command.as_str(), a.burst, a.limiter))
        .collect();
    for algorithm in known {
        assert!(seen.contains(&algorithm), "{algorithm:?} not in {seen:?}");
    }
    for a in algorithms() {
        assert_eq!(a.command, format!("RL.{}", a.word));
        assert!(module_commands().contains(&a.command), "{}", a.command);
    }
}
