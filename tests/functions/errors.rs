//! Errors: every argument error the module's text (but for the library's own bounds and the
//! arity message), and values another client wrote under a limiter's key refused as WRONGTYPE.

use super::*;

/// Argument errors: the module's text, but for the library's own bounds and the arity message.
#[test]
fn argument_errors_match_the_module() {
    let (_s, mut c) = both();
    cmd(&mut c, &["SET", "m:str", "x"]).unwrap();
    cmd(&mut c, &["SET", "f:str", "x"]).unwrap();
    cmd(&mut c, &["RL.GCRA", "m:gcra", "10", "1000"]).unwrap();
    cmd(&mut c, &["FCALL", "rl_gcra", "1", "f:gcra", "10", "1000"]).unwrap();
    // (function, key, arguments after the key): the same error from both sides.
    let same: &[(&str, &str, &[&str])] = &[
        ("GCRA", "gcra", &["abc", "1000"]),
        ("GCRA", "gcra", &["0", "1000"]),
        ("GCRA", "gcra", &["1.5", "1000"]),
        ("GCRA", "gcra", &["+1", "1000"]),
        ("GCRA", "gcra", &["10", "1000", "BURST"]),
        ("GCRA", "gcra", &["10", "1000", "COST"]),
        ("GCRA", "gcra", &["10", "1000", "BURST", "0"]),
        ("GCRA", "gcra", &["10", "1000", "COST", "-1"]),
        ("GCRA", "gcra", &["10", "1000", "COST", "11"]),
        ("GCRA", "gcra", &["10", "1000", "BURST", "3", "COST", "4"]),
        ("GCRA", "gcra", &["10", "1000", "COST", "1", "cost", "1"]),
        ("GCRA", "gcra", &["10", "1000", "BURST", "5", "burst", "5"]),
        ("GCRA", "gcra", &["10", "1000", "FOO", "1"]),
        ("GCRA", "gcra", &["10", "1000", "\r\nSET", "1"]),
        ("GCRA", "gcra", &["1", "90000000", "BURST", "20000"]),
        ("GCRA", "str", &["10", "1000"]),
        ("TOKENBUCKET", "gcra", &["10", "1000"]),
        ("SLIDINGLOG", "log", &["10", "1000", "BURST", "10"]),
        ("SLIDINGCOUNTER", "c", &["10", "1000", "COST", "11"]),
        ("FIXEDWINDOW", "w", &["10", "1000", "WANT", "1"]),
        ("LEASE", "lease", &["1", "1", "WANT", "0"]),
        ("LEASE", "lease", &["1", "1", "WANT", "1.5"]),
        ("LEASE", "lease", &["1", "1", "BURST", "2"]),
        ("LEASE", "lease", &["1", "1", "COST", "1"]),
        ("LEASE", "lease", &["1", "1", "WANT", "1", "WANT", "2"]),
        ("LEASE", "lease", &["1", "1", "WANT", "1", "BURST"]),
        ("LEASE", "gcra", &["1", "1", "WANT", "1"]),
        ("SHAPE", "gcra", &["10", "1000"]),
        ("SHAPE", "s", &["10", "1000", "QUEUE"]),
        ("SHAPE", "s", &["10", "1000", "QUEUE", "x"]),
        ("SHAPE", "s", &["10", "1000", "QUEUE", "2", "DELAY", "3"]),
        ("SHAPE", "s", &["10", "1000", "DELAY", "1", "NODELAY"]),
        ("SHAPE", "s", &["10", "1000", "NODELAY", "NODELAY"]),
        ("SHAPE", "s", &["10", "1000", "QUEUE", "1", "QUEUE", "1"]),
        ("SHAPE", "s", &["10", "1000", "QUEUE", "2", "COST", "4"]),
        ("SHAPE", "s", &["10", "1000", "BURST", "2"]),
        ("SHAPE", "s", &["1", "90000000", "QUEUE", "20000"]),
        ("REFUND", "gcra", &["0"]),
        ("REFUND", "gcra", &["x"]),
        ("CONCURRENCY", "cc", &["0", "1000", "PEEK"]),
        ("CONCURRENCY", "cc", &["1001", "1000", "PEEK"]),
        ("CONCURRENCY", "cc", &["2", "0", "PEEK"]),
        ("CONCURRENCY", "cc", &["2", "x", "ACQUIRE", "a"]),
        ("CONCURRENCY", "cc", &["2", "1000", "GRAB", "a"]),
        ("CONCURRENCY", "cc", &["2", "1000", "acquire"]),
        ("CONCURRENCY", "cc", &["2", "1000", "RELEASE", ""]),
        ("CONCURRENCY", "cc", &["2", "1000", "PEEK", "a"]),
        ("CONCURRENCY", "cc", &["2", "1000", "ACQUIRE", "a", "b"]),
        ("CONCURRENCY", "str", &["2", "1000", "PEEK"]),
    ];
    // The key prefixes aside, and the bounds (the library's are checked below).
    let relabel = |e: String| {
        let e = e.replace("'m:", "'").replace("'f:", "'");
        e.split(": expected an integer")
            .next()
            .unwrap_or_default()
            .to_string()
    };
    for &(name, key, args) in same {
        let mut m = words(&[&format!("RL.{name}"), &format!("m:{key}")]);
        m.extend(words(args));
        let function = format!("rl_{}", name.to_lowercase());
        let mut f = words(&["FCALL", &function, "1", &format!("f:{key}")]);
        f.extend(words(args));
        let (em, ef) = (reply(&mut c, &m), reply(&mut c, &f));
        assert!(em.is_err(), "{m:?}: {em:?}");
        assert_eq!(em.map_err(relabel), ef.map_err(relabel), "{m:?}");
    }
    // RL.ALL: the module's numkeys is FCALL's.
    let all: &[&[&str]] = &[
        &["2", "a", "a", "GCRA", "10", "1000", "GCRA", "10", "1000"],
        &["2", "a", "b", "GCRA", "10", "1000"],
        &["1", "a", "GCRA", "10", "1000", "GCRA", "10", "1000"],
        &["1", "a", "LEAKY", "10", "1000"],
        &["1", "a", "SLIDINGLOG", "10", "1000", "BURST", "20"],
        &["1", "a", "GCRA", "10", "1000", "COST", "11"],
        &["1", "str", "GCRA", "10", "1000"],
        &["1", "gcra", "FIXEDWINDOW", "10", "1000"],
        &["1", "a", "GCRA", "10", "1000", "WANT", "1"],
    ];
    for args in all {
        let n: usize = args[0].parse().unwrap();
        let mut m = vec!["RL.ALL".to_string(), n.to_string()];
        let mut f = words(&["FCALL", "rl_all", args[0]]);
        for (i, a) in args[1..].iter().enumerate() {
            let (am, af) = if i < n {
                (format!("m:{a}"), format!("f:{a}"))
            } else {
                (a.to_string(), a.to_string())
            };
            m.push(am);
            f.push(af);
        }
        let (em, ef) = (reply(&mut c, &m), reply(&mut c, &f));
        assert!(em.is_err(), "{m:?}: {em:?}");
        assert_eq!(em.map_err(relabel), ef.map_err(relabel), "{m:?}");
    }
    // The library's own bounds (docs/functions.md), each naming the argument.
    let bounds: &[(&[&str], &str)] = &[
        (
            &["rl_gcra", "1", "k", "10000001", "1000"],
            "ERR invalid L '10000001': expected an integer from 1 to 10000000",
        ),
        (
            &["rl_gcra", "1", "k", "10", "90000001"],
            "ERR invalid W '90000001': expected an integer from 1 to 90000000",
        ),
        (
            &["rl_slidingcounter", "1", "k", "10", "90000001"],
            "ERR invalid W '90000001': expected an integer from 1 to 90000000",
        ),
        (
            &["rl_fixedwindow", "1", "k", "10", "1000000000001"],
            "ERR invalid W '1000000000001': expected an integer from 1 to 1000000000000",
        ),
        (
            &[
                "rl_tokenbucket",
                "1",
                "k",
                "10",
                "1000",
                "BURST",
                "10000001",
            ],
            "ERR invalid BURST '10000001': expected an integer from 1 to 10000000",
        ),
        (
            &["rl_lease", "1", "k", "10", "1000", "WANT", "10000001"],
            "ERR invalid WANT '10000001': expected an integer from 1 to 10000000",
        ),
        (
            &["rl_slidinglog", "1", "k", "10001", "1000"],
            "ERR L 10001 is above the library's sliding log maximum (10000)",
        ),
        (
            &["rl_gcra", "1", "k", "10"],
            "ERR wrong number of arguments for 'rl_gcra' function",
        ),
        (
            &["rl_gcra", "2", "k", "j", "10", "1000"],
            "ERR wrong number of arguments for 'rl_gcra' function",
        ),
        (
            &["rl_lease", "1", "k", "10", "1000", "WANT"],
            "ERR wrong number of arguments for 'rl_lease' function",
        ),
        (
            &["rl_all", "0", "GCRA", "10", "1000"],
            "ERR invalid numkeys '0': expected an integer from 1 to 32",
        ),
    ];
    for (args, expected) in bounds {
        let mut f = vec!["FCALL".to_string()];
        f.extend(words(args));
        let e = reply(&mut c, &f).unwrap_err();
        assert!(e.starts_with(expected), "{f:?}: {e}");
    }
    // None of them wrote anything.
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
    let mut keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["f:gcra", "f:str", "m:gcra", "m:str"]);
}

/// Numbers not written plainly (the hot path reads only digits without a leading zero) answer as
/// the module does, through `FCALL` and the scripts backend, in every place of `rl_gcra` and
/// `rl_tokenbucket` and on a fresh key and one holding the plain policy: what `strtod` (Lua's
/// `tonumber` and `s + 0`, base 10) would read as a number, spaces, signs, exponents (`1e2` is
/// 100 in three characters), hexadecimal (`0xF4240` is 1,000,000 in seven), fractions, and
/// leading zeros (the library's bounds, which differ from the module's, are left to
/// `argument_errors_match_the_module`).
#[test]
fn numbers_not_written_plainly_answer_as_the_module() {
    let (_s, mut c) = both();
    let shas = scripts_on_key_clock(&mut c);
    cmd(&mut c, &["SET", "rl-test-clock", &T0_MS.to_string()]).unwrap();
    let hostile = [
        " 5", "+5", "05", "5 ", "\t5", "1e2", "1E2", "12e2", "1e+3", "0x10", "0xF4240", "0X989680",
        "-5", "-0", "1.0", "1.", ".5", "", "inf", "nan", "9999999", "00000001", "5\n",
    ];
    let relabel = |e: String| {
        let e = e
            .replace("'m:", "'")
            .replace("'f:", "'")
            .replace("'s:", "'");
        e.split(": expected an integer")
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let mut compared = 0;
    for (command, function) in [("RL.GCRA", "rl_gcra"), ("RL.TOKENBUCKET", "rl_tokenbucket")] {
        for place in 0..4 {
            for h in hostile {
                let mut args = vec!["50", "1000", "BURST", "20", "COST", "2"];
                args[[0, 1, 3, 5][place]] = h;
                for held in [false, true] {
                    let key = format!("{function}:{place}:{h}:{held}");
                    let (m, f, s) = (format!("m:{key}"), format!("f:{key}"), format!("s:{key}"));
                    if held {
                        let plain = ["50", "1000", "BURST", "20", "COST", "2"];
                        cmd(&mut c, &[[command, &m].as_slice(), &plain].concat()).unwrap();
                        cmd(
                            &mut c,
                            &[["FCALL", function, "1", &f].as_slice(), &plain].concat(),
                        )
                        .unwrap();
                        cmd(
                            &mut c,
                            &[["EVALSHA", &shas[function], "1", &s].as_slice(), &plain].concat(),
                        )
                        .unwrap();
                    }
                    let module = reply(&mut c, &words(&[[command, &m].as_slice(), &args].concat()));
                    let library = reply(
                        &mut c,
                        &words(&[["FCALL", function, "1", &f].as_slice(), &args].concat()),
                    );
                    let script = reply(
                        &mut c,
                        &words(&[["EVALSHA", &shas[function], "1", &s].as_slice(), &args].concat()),
                    );
                    let (module, library, script) = (
                        module.map_err(relabel),
                        library.map_err(relabel),
                        script.map_err(relabel),
                    );
                    assert_eq!(module, library, "{function} {args:?} held {held}");
                    assert_eq!(module, script, "{function} {args:?} held {held}, script");
                    compared += 1;
                }
            }
        }
    }
    assert_eq!(compared, 2 * 4 * hostile.len() * 2);
}

/// Values another client wrote under a limiter's key are never trusted: a string or a list that
/// is not exactly a stored limiter within the bounds is answered WRONGTYPE, a valid header over
/// garbage entries too.
#[test]
fn foreign_values_are_not_limiters() {
    let (_s, mut c) = both();
    let strings = [
        "g 0 1000 10 1 0 0",
        "g 10 1000 10 1 0",
        "g 10 1000 10 1 0 0 0",
        "g 10 1000 10 9999999999999999 0 0",
        "g 10  1000 10 1 0 0",
        "g 10 1000 10 1 0 0 ",
        "g 10 100000000 10 1 0 0",
        "g 10 1000 10000001 1 0 0",
        "t 10 1000 10 abc 0 0",
        "g 10 1000 10 -1 0 0",
        "t 10 1000 10 5 -1 0",
        "t -10 1000 10 5 0 0",
        "t 10 1000 10 --5 0 0",
        "c 10 1000",
        "f -1 1000 0 0",
        "s 10 1000 0 0 0",
        "x 1 2 3",
        "",
        "g",
    ];
    // Long values, which a backtracking pattern would take seconds over: refused at once.
    let long = [
        format!("g {} 1 1 1 1 1", "9".repeat(10_000)),
        format!("g {}", "1 ".repeat(5_000)),
        format!("g 1 1 1 1 1 1{}", " ".repeat(1_000)),
    ];
    for v in strings
        .iter()
        .copied()
        .chain(long.iter().map(String::as_str))
    {
        cmd(&mut c, &["SET", "f:x", v]).unwrap();
        for f in [
            words(&["FCALL", "rl_peek", "1", "f:x"]),
            words(&["FCALL", "rl_refund", "1", "f:x", "1"]),
            words(&["FCALL", "rl_gcra", "1", "f:x", "10", "1000"]),
        ] {
            assert_eq!(
                reply(&mut c, &f),
                Err(format!(
                    "WRONGTYPE the key holds a string, not a{} limiter; use another key or DEL it",
                    if f[1] == "rl_gcra" { " GCRA" } else { "" }
                )),
                "{v:?} {f:?}"
            );
        }
    }
    for head in [
        "s 10 1000 x",
        "s 0 1000 0 0 0",
        "hello",
        "s 10 1000 1 1 1 1",
    ] {
        cmd(&mut c, &["DEL", "f:x"]).unwrap();
        cmd(&mut c, &["RPUSH", "f:x", head, "1 1"]).unwrap();
        let e = reply(
            &mut c,
            &words(&["FCALL", "rl_slidinglog", "1", "f:x", "10", "1000"]),
        );
        assert_eq!(
            e,
            Err("WRONGTYPE the key holds a list, not a sliding log limiter; use another key or DEL it".into()),
            "{head:?}"
        );
    }
    // A valid header over entries it does not describe: refused as the entries are read.
    cmd(&mut c, &["DEL", "f:x"]).unwrap();
    let now = T0_MS.to_string();
    cmd(
        &mut c,
        &[
            "RPUSH",
            "f:x",
            &format!("s 10 1000 5 {now} 3"),
            "garbage",
            "x y",
            "1 99999999999999999999",
        ],
    )
    .unwrap();
    for f in [
        words(&["FCALL", "rl_slidinglog", "1", "f:x", "10", "1000"]),
        words(&["FCALL", "rl_peek", "1", "f:x"]),
        words(&["FCALL", "rl_refund", "1", "f:x", "3"]),
        words(&["FCALL", "rl_slidinglog", "1", "f:x", "5", "1000"]),
    ] {
        let r = reply(&mut c, &f);
        assert!(
            matches!(&r, Err(e) if e.starts_with("WRONGTYPE the key holds a list")),
            "{f:?}: {r:?}"
        );
    }
}
