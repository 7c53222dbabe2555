//! Errors, which change nothing: numkeys, a key named twice, keys and limiters that do not pair,
//! unknown algorithms and options, wherever in the call they come; `COMMAND GETKEYS` and ACL key
//! patterns see every key; a misspelt algorithm after the first limiter is named as one.

use super::*;

#[test]
fn errors_change_nothing() {
    let (_s, mut c) = server();
    rl(&mut c, &["RL.TOKENBUCKET", "tb", "10", "1000"]);
    cmd(&mut c, &["SET", "s", "x"]).unwrap();
    // `fresh` comes first and would be admitted: an error later in the call must not write it.
    let g = ["GCRA", "1", "1000"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            with(&["RL.ALL", "2", "fresh", "fresh"], &[g, g].concat()),
            "ERR key 'fresh' is named twice; each key has one limiter",
        ),
        (
            with(&["RL.ALL", "0", "fresh"], &g),
            "ERR invalid numkeys '0': expected an integer from 1 to 32",
        ),
        (
            with(&["RL.ALL", "33", "fresh"], &g),
            "ERR invalid numkeys '33': expected an integer from 1 to 32",
        ),
        (
            with(&["RL.ALL", "two", "fresh"], &g),
            "ERR invalid numkeys 'two': expected an integer from 1 to 32",
        ),
        (
            with(&["RL.ALL", "-1", "fresh"], &g),
            "ERR invalid numkeys '-1'",
        ),
        (
            with(&["RL.ALL", "2", "fresh", "other"], &g),
            "ERR no limiter for key 'other': expected 2 limiters, one per key",
        ),
        (
            with(&["RL.ALL", "1", "fresh"], &[g, g].concat()),
            "ERR more limiters than keys: numkeys is 1",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "LEAKYBUCKET", "1", "1000"],
            "ERR unknown algorithm 'LEAKYBUCKET'; expected GCRA, TOKENBUCKET, SLIDINGLOG, SLIDINGCOUNTER or FIXEDWINDOW",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "RL.GCRA", "1", "1000"],
            "ERR unknown algorithm 'RL.GCRA'",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "LEASE", "1", "1000"],
            "ERR unknown algorithm 'LEASE'",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "TOKENBUCKET", "5", "1000", "WANT", "2"],
            "ERR unknown option 'WANT'; expected BURST or COST",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "SLIDINGLOG", "5", "1000", "BURST", "9"],
            "ERR unknown option 'BURST'; expected COST",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "SLIDINGCOUNTER", "5", "1000", "BURST", "9"],
            "ERR unknown option 'BURST'; expected COST",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "FIXEDWINDOW", "5", "1000", "BURST", "9"],
            "ERR unknown option 'BURST'; expected COST",
        ),
        (
            with(
                &["RL.ALL", "2", "fresh", "other"],
                &[&g[..], &["FIXEDWINDOW", "3", "1000", "COST", "4"]].concat(),
            ),
            "ERR COST 4 can never be admitted: it exceeds the capacity 3",
        ),
        (
            with(
                &["RL.ALL", "2", "fresh", "other"],
                &[&g[..], &["GCRA", "5", "1000", "BURST", "8", "COST", "9"]].concat(),
            ),
            "ERR COST 9 can never be admitted: it exceeds the capacity 8",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "GCRA", "0", "1000"],
            "ERR invalid L '0': expected an integer from 1 to 1000000000000",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "GCRA", "1", "1000", "COST", "1", "COST", "1"],
            "ERR option COST given more than once",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "GCRA", "1", "1000", "COST"],
            "ERR option COST needs a value",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "SLIDINGLOG", "100000", "1000"],
            "above ratelimit.max-log-entries",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "GCRA", "1"],
            "wrong number of arguments",
        ),
        (
            with(&["RL.ALL", "2", "fresh", "other"], &[&g[..], &["GCRA", "1"]].concat()),
            "wrong number of arguments",
        ),
    ];
    assert_errors_change_nothing(&mut c, cases);
    // WRONGTYPE names the key, on any position of the call.
    let before = snapshot(&mut c);
    assert_eq!(
        err(&mut c, &with(&["RL.ALL", "2", "fresh", "tb"], &[g, g].concat())),
        "WRONGTYPE the key 'tb' holds a token bucket limiter, not a GCRA limiter; use another key or DEL it"
    );
    assert_eq!(
        err(
            &mut c,
            &with(&["RL.ALL", "2", "s", "fresh"], &[g, g].concat())
        ),
        "WRONGTYPE the key 's' holds a string, not a GCRA limiter; use another key or DEL it"
    );
    assert_eq!(snapshot(&mut c), before);
    assert_eq!(dump(&mut c, "fresh"), None);
}

/// The keys are found from `numkeys`, by Redis itself: `COMMAND GETKEYS` lists them, and an ACL
/// user limited to `rl:*` cannot name another key in any position.
#[test]
fn getkeys_and_acl_key_patterns_see_every_key() {
    let (s, mut c) = server();
    let words = [
        "RL.ALL", "2", "rl:a", "other:b", "GCRA", "1", "1000", "GCRA", "1", "1000",
    ];
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg(&words[..])
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["rl:a", "other:b"]);
    cmd(
        &mut c,
        &["ACL", "SETUSER", "gw", "on", ">pw", "~rl:*", "+@all"],
    )
    .unwrap();
    let mut gw = s.connect();
    cmd(&mut gw, &["AUTH", "gw", "pw"]).unwrap();
    let e = err(&mut gw, &words);
    assert!(e.starts_with("NOPERM"), "{e}");
    assert_eq!(dbsize(&mut c), 0);
    let mut allowed = words;
    allowed[3] = "rl:b";
    assert_eq!(all(&mut gw, &allowed).0[0], 1);
}

/// A misspelt algorithm after the first limiter is named as an algorithm, as docs/rl-all.md
/// says (it used to be read as an option of the limiter before it).
#[test]
fn an_unknown_algorithm_after_the_first_limiter_is_named_as_one() {
    let (_s, mut c) = server();
    for words in [
        &[
            "RL.ALL", "2", "a", "b", "GCRA", "10", "1000", "LEAKY", "10", "1000",
        ][..],
        &[
            "RL.ALL",
            "3",
            "a",
            "b",
            "c",
            "GCRA",
            "10",
            "1000",
            "COST",
            "2",
            "TOKENBUCKET",
            "5",
            "1000",
            "LEAKY",
            "1",
            "1000",
        ],
    ] {
        assert_eq!(
            err(&mut c, words),
            "ERR unknown algorithm 'LEAKY'; expected GCRA, TOKENBUCKET, SLIDINGLOG, SLIDINGCOUNTER or FIXEDWINDOW"
        );
    }
    // The last limiter still names a wrong option as an option.
    assert_eq!(
        err(
            &mut c,
            &["RL.ALL", "2", "a", "b", "GCRA", "10", "1000", "GCRA", "1", "1000", "LEAKY", "1"]
        ),
        "ERR unknown option 'LEAKY'; expected BURST or COST"
    );
    let keys: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(keys, 0);
}
