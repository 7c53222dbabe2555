//! The file as shipped: it reads the time once, from `TIME`, decides on the server's clock, and
//! registers one function per algorithm of the registry (and its version).

use super::*;

/// The shipped file reads the time once, from `TIME`, on the line the test copy replaces, and
/// peeks are declared read-only.
#[test]
fn the_shipped_file_reads_only_time() {
    assert!(LIBRARY.starts_with("#!lua name=ratelimit\n"));
    let reads: Vec<&str> = LIBRARY.lines().filter(|l| l.contains("TIME")).collect();
    // (`PEXPIRETIME`, which rl_share reads, is a key's expiry, not the clock.)
    let code: Vec<&&str> = reads
        .iter()
        .filter(|l| !l.trim_start().starts_with("--") && l.contains("redis.call('TIME')"))
        .collect();
    assert_eq!(code.len(), 1, "{reads:?}");
    assert!(code[0].starts_with("local function now_ms("));
    assert!(!test_library().contains("'TIME'"));

    let (_s, mut c) = both();
    let list = reply(
        &mut c,
        &words(&["FUNCTION", "LIST", "LIBRARYNAME", "ratelimit"]),
    )
    .unwrap();
    let text = format!("{list:?}");
    for f in [
        "rl_gcra",
        "rl_tokenbucket",
        "rl_slidinglog",
        "rl_slidingcounter",
        "rl_fixedwindow",
        "rl_lease",
        "rl_refund",
        "rl_all",
        "rl_peek",
        "rl_shape",
    ] {
        assert!(text.contains(f), "{f} missing from {text}");
    }
    // FCALL_RO takes only the no-writes function.
    cmd(&mut c, &["FCALL", "rl_gcra", "1", "f:k", "10", "1000"]).unwrap();
    assert!(cmd(&mut c, &["FCALL_RO", "rl_peek", "1", "f:k"]).is_ok());
    assert!(cmd(&mut c, &["FCALL_RO", "rl_gcra", "1", "f:k", "10", "1000"]).is_err());
    // The version the header declares, read-only.
    let declared = LIBRARY
        .lines()
        .find_map(|l| l.strip_prefix("local LIBRARY_VERSION = '"))
        .and_then(|v| v.strip_suffix('\''))
        .expect("the version line");
    assert_eq!(
        reply(&mut c, &words(&["FCALL_RO", "rl_version", "0"])),
        Ok(Value::BulkString(declared.as_bytes().to_vec()))
    );
}

/// The shipped file on the real clock: a fresh key's first reply, and a burst spent at once.
#[test]
fn the_shipped_file_decides_on_the_server_clock() {
    let s = Server::start();
    let mut c = s.connect();
    load(&mut c, LIBRARY);
    let f = |c: &mut Connection, args: &[&str]| {
        let mut w = vec!["FCALL"];
        w.extend(args);
        rl(c, &w)
    };
    assert_eq!(
        f(
            &mut c,
            &["rl_fixedwindow", "1", "w", "5", "86400000", "COST", "5"]
        )[..3],
        [1, 5, 0]
    );
    let denied = f(&mut c, &["rl_fixedwindow", "1", "w", "5", "86400000"]);
    assert_eq!(denied[..3], [0, 5, 0]);
    assert!(denied[3] > 0 && denied[3] <= 86_400_000);
    let sent = std::time::Instant::now();
    assert_eq!(
        f(&mut c, &["rl_gcra", "1", "g", "10", "60000"]),
        [1, 10, 9, -1, 6000]
    );
    let ttl: i64 = redis::cmd("PTTL").arg("g").query(&mut c).unwrap();
    // The key lives 6 s from the call, less what passed since (a loaded machine may stall).
    let passed = sent.elapsed().as_millis() as i64;
    assert!(
        (6_000 - passed - 1..=6_000).contains(&ttl),
        "{ttl}, {passed} ms"
    );
}

/// The library registers one function per algorithm of the core's registry (`rl_<word>`), and
/// its RL.ALL words are the registry's limiters: its one list (`LIST` in ratelimit.lua) cannot
/// drift from the module's without this failing.
#[test]
fn the_library_registers_one_function_per_algorithm_of_the_registry() {
    let (_s, mut c) = both();
    let list = reply(
        &mut c,
        &words(&["FUNCTION", "LIST", "LIBRARYNAME", "ratelimit"]),
    )
    .unwrap();
    let text = format!("{list:?}");
    let registered: std::collections::BTreeSet<String> = text
        .split(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
        .filter(|w| w.starts_with("rl_") && *w != "rl_test_clock")
        .map(str::to_string)
        .collect();
    let registry = ratelimit_core::algo::listed::REGISTRY;
    let mut expected: std::collections::BTreeSet<String> = registry
        .iter()
        .map(|a| format!("rl_{}", a.word.to_ascii_lowercase()))
        .collect();
    for f in [
        "rl_lease",
        "rl_refund",
        "rl_charge",
        "rl_all",
        "rl_peek",
        "rl_settle",
        "rl_version",
        "rl_inspect",
        "rl_throttle",
        "rl_share",
        "rl_demand",
    ] {
        expected.insert(f.to_string());
    }
    // What only the module does says so.
    let err = reply(&mut c, &words(&["FCALL", "rl_inspect", "1", "k"])).unwrap_err();
    assert!(
        err.contains("RL.INSPECT needs the redis-ratelimit module"),
        "{err}"
    );
    assert_eq!(registered, expected);
    let limiters: Vec<&str> = registry
        .iter()
        .filter(|a| a.limiter)
        .map(|a| a.word)
        .collect();
    let (last, first) = limiters.split_last().expect("the registry lists limiters");
    let wanted = format!(
        "ERR unknown algorithm 'NOPE'; expected {} or {last}",
        first.join(", ")
    );
    let err = reply(
        &mut c,
        &words(&["FCALL", "rl_all", "1", "k", "NOPE", "10", "1000"]),
    )
    .unwrap_err();
    assert!(err.contains(&wanted[4..]), "{err} vs {wanted}");
}
