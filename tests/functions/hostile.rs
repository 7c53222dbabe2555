//! Hostile values. Keys are plain strings and lists: any client can write them. Whatever a key
//! holds, every function answers (a reply, or WRONGTYPE), with a number of commands bounded by
//! the list's length (the policy's L, never a count the value claims), and every integer it
//! answers is exact (below 2^53).

use super::*;

/// A field of a planted value: numbers a limiter could hold, near the bounds, and text no
/// limiter holds (exponents, signs, NaN, 20-digit and 40-digit runs).
fn hostile_field() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    prop_oneof![
        (0u64..12).prop_map(|n| n.to_string()),
        (0u64..=20_000_000).prop_map(|n| n.to_string()),
        (0u64..200_000).prop_map(|d| (T0_MS - 100_000 + d).to_string()),
        prop::sample::select(vec![
            "999999999999999",
            "1000000000000000",
            "9007199254740992",
            "9007199254740993",
            "18446744073709551615",
            "1e400",
            "-1",
            "-0",
            "-999999999999999",
            "nan",
            "inf",
            "0x10",
            "1.5",
            "",
            " 1",
            "99999999999999999999999999999999999999",
        ])
        .prop_map(String::from),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
    ]
}

/// What a test plants under a key.
#[derive(Clone, Debug)]
enum Planted {
    String(String),
    List(Vec<String>),
    Hash,
}

/// A value for a limiter's key: a tag and fields (mostly the right number), a sliding-log list
/// (a header over entries, garbage among them), or another type.
fn hostile_value() -> impl proptest::strategy::Strategy<Value = Planted> {
    use proptest::prelude::*;
    let tag = prop::sample::select(vec!["g", "t", "h", "c", "f", "s", "x"]);
    let string = (tag, prop::collection::vec(hostile_field(), 3..=8))
        .prop_map(|(tag, f)| Planted::String(format!("{tag} {}", f.join(" "))));
    // A plausible limiter, each field of it now and then hostile: what gets checked is the
    // fields one by one.
    let near = (
        prop::sample::select(vec!["g", "t", "h", "c", "f"]),
        1u64..=10,
        prop::sample::select(vec![1u64, 10, 1000, 60_000]),
        1u64..=10,
        prop::collection::vec(
            prop_oneof![
                3 => (0u64..3000).prop_map(|d| (T0_MS - 2000 + d).to_string()),
                3 => (0u64..12).prop_map(|n| n.to_string()),
                1 => hostile_field(),
            ],
            4,
        ),
        prop::bool::weighted(0.8),
    )
        .prop_map(|(tag, l, w, b, rest, plausible)| {
            // Fields after the policy: (tat_ms, rem, ns[, d]), (tokens, ns, last), (start,
            // prev, curr), (start, count); a window start is aligned when plausible.
            let mut rest = rest;
            let aligned = |s: &str| {
                s.parse::<u64>()
                    .map(|n| (n - n % w).to_string())
                    .unwrap_or_else(|_| s.to_string())
            };
            let (policy, fields) = match tag {
                "c" => (format!("{l} {w}"), 3),
                "f" => (format!("{l} {w}"), 2),
                "h" => (format!("{l} {w} {b}"), 4),
                _ => (format!("{l} {w} {b}"), 3),
            };
            if plausible && matches!(tag, "c" | "f") {
                rest[0] = aligned(&rest[0]);
            }
            if plausible && tag == "t" {
                rest.rotate_left(1);
            }
            rest.truncate(fields);
            format!("{tag} {policy} {}", rest.join(" "))
        });
    // A key that remembers configurations: several such values, " ; "-separated.
    let remembered = prop::collection::vec(near.clone(), 2..=5)
        .prop_map(|parts| Planted::String(parts.join(" ; ")));
    let near = near.prop_map(Planted::String);
    // A sliding log as the library writes it (sorted entries, the header's sum), sometimes with
    // one field of it hostile.
    let plausible_log = (
        1u64..=10,
        prop::sample::select(vec![1u64, 1000, 60_000]),
        prop::collection::vec((0u64..3, 1u64..4), 0..10),
        prop::option::weighted(0.3, (0usize..16, hostile_field())),
    )
        .prop_map(|(l, w, steps, hostile)| {
            let mut at = T0_MS - 2500;
            let mut entries: Vec<(u64, u64)> = Vec::new();
            for (gap, n) in steps {
                at += 1 + gap * 300;
                entries.push((at, n));
            }
            entries.truncate(l as usize);
            let total: u64 = entries.iter().map(|e| e.1).sum();
            let newest = entries.last().map_or(0, |e| e.0);
            let mut fields = [
                l.to_string(),
                w.to_string(),
                total.to_string(),
                newest.to_string(),
                entries.len().to_string(),
            ];
            let mut counts: Vec<String> = entries.iter().map(|e| e.1.to_string()).collect();
            if let Some((i, v)) = hostile {
                if let Some(f) = fields.get_mut(i) {
                    *f = v;
                } else if let Some(n) = counts.get_mut(i - fields.len()) {
                    *n = v;
                }
            }
            let mut out = vec![format!("s {}", fields.join(" "))];
            out.extend(
                entries
                    .iter()
                    .zip(&counts)
                    .map(|((a, _), n)| format!("{a} {n}")),
            );
            Planted::List(out)
        });
    let entry = prop_oneof![
        (0u64..3000, 1u64..5).prop_map(|(d, n)| format!("{} {n}", T0_MS - 1000 + d)),
        (hostile_field(), hostile_field()).prop_map(|(a, b)| format!("{a} {b}")),
        hostile_field(),
    ];
    let log = (
        1u64..=10,
        prop::sample::select(vec![1u64, 1000, 60_000]),
        prop::collection::vec(hostile_field(), 3),
        prop::collection::vec(entry, 0..40),
    )
        .prop_map(|(l, w, head, entries)| {
            let mut list = vec![format!("s {l} {w} {}", head.join(" "))];
            list.extend(entries);
            Planted::List(list)
        });
    let raw_log = (
        prop::collection::vec(hostile_field(), 5),
        prop::collection::vec(hostile_field(), 0..4),
    )
        .prop_map(|(head, entries)| {
            let mut list = vec![format!("s {}", head.join(" "))];
            list.extend(entries);
            Planted::List(list)
        });
    prop_oneof![
        1 => string,
        4 => near,
        2 => remembered,
        1 => log,
        4 => plausible_log,
        1 => raw_log,
        1 => Just(Planted::Hash),
    ]
}

fn plant(c: &mut Connection, key: &str, value: &Planted) {
    cmd(c, &["DEL", key]).unwrap();
    match value {
        Planted::String(v) => {
            cmd(c, &["SET", key, v]).unwrap();
        }
        Planted::List(items) => {
            let mut words = vec!["RPUSH", key];
            words.extend(items.iter().map(String::as_str));
            cmd(c, &words).unwrap();
        }
        Planted::Hash => {
            cmd(c, &["HSET", key, "tat", "1"]).unwrap();
        }
    }
}

/// Every function over `key`, under the policies it is called with: 10 per second, and the
/// planted value's own policy when it reads as one (no policy change then).
fn hostile_calls(key: &str, value: &Planted) -> Vec<Vec<String>> {
    let own = match value {
        Planted::String(v) => v.split(' ').skip(1).take(2).collect::<Vec<_>>(),
        Planted::List(items) => items[0].split(' ').skip(1).take(2).collect(),
        Planted::Hash => Vec::new(),
    };
    let mut policies = vec![vec!["10".to_string(), "1000".to_string()]];
    // COST 3 only where it fits the capacity (10); an argument error is not the point here.
    let small = |s: &str| s.parse::<u64>().is_ok_and(|n| (1..=10_000).contains(&n));
    if own.len() == 2 && own.iter().all(|f| small(f)) {
        policies.push(own.iter().map(|f| f.to_string()).collect());
    }
    let mut calls = vec![
        words(&["FCALL", "rl_peek", "1", key]),
        words(&["FCALL", "rl_refund", "1", key, "1"]),
    ];
    for p in &policies {
        for (_, function, name, _) in ALGORITHMS {
            let costs: &[&str] = if p[0] == "10" {
                &["1", "0", "3"]
            } else {
                &["1", "0"]
            };
            for &cost in costs {
                let mut call = words(&["FCALL", function, "1", key]);
                call.extend(p.iter().cloned());
                call.extend(words(&["COST", cost]));
                calls.push(call);
            }
            let mut all = words(&["FCALL", "rl_all", "2", key, "{h}:fresh", name]);
            all.extend(p.iter().cloned());
            all.extend(words(&["GCRA", "10", "1000"]));
            calls.push(all);
        }
        let mut shape = words(&["FCALL", "rl_shape", "1", key]);
        shape.extend(p.iter().cloned());
        shape.extend(words(&["QUEUE", "3"]));
        calls.push(shape);
        let mut lease = words(&["FCALL", "rl_lease", "1", key]);
        lease.extend(p.iter().cloned());
        lease.extend(words(&["WANT", "2"]));
        calls.push(lease);
    }
    calls
}

/// Every integer of a reply (nested for rl_all), or what is not one.
fn reply_ints(v: &Value, out: &mut Vec<i64>) -> Result<(), String> {
    match v {
        Value::Int(n) => out.push(*n),
        Value::Nil => {}
        Value::Array(items) => {
            for item in items {
                reply_ints(item, out)?;
            }
        }
        other => return Err(format!("{other:?}")),
    }
    Ok(())
}

/// How many commands the server ran since the last `CONFIG RESETSTAT`, FCALL aside: what the
/// function called (each LRANGE reads at most 33 elements).
fn commands_run(c: &mut Connection) -> u64 {
    let stats: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
    stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_fcall:"))
        .filter(|l| !l.starts_with("cmdstat_config"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Random and adversarial values under every function's key: each call answers a reply whose
/// integers are exact, or WRONGTYPE, running at most a few commands per 32 list elements; a
/// value the library answered and wrote is one it reads again; the server answers a second
/// connection throughout. A hang would fail the read timeout instead of blocking the suite.
/// The functions with a hot path are called through the scripts backend too, whose hot path
/// remembers nothing between calls.
#[test]
fn hostile_values_are_answered_in_bounded_work() {
    use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
    let (s, mut c) = both();
    c.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let scripts = scripts_on_key_clock(&mut c);
    let other = std::cell::RefCell::new(s.connect());
    // The runner takes a `Fn`: the connections and the count are borrowed per case.
    let c = std::cell::RefCell::new(c);
    let answered = std::cell::Cell::new(0usize);
    // A fixed seed: the same 200 cases on every run, so the count of replies below is stable.
    let config = Config {
        cases: 200,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let key = "{h}:planted";
    let strategy = (hostile_value(), 0u64..4000);
    runner
        .run(&strategy, |(value, offset)| {
            let c = &mut *c.borrow_mut();
            at(c, T0_MS - 2000 + offset);
            let now = (T0_MS - 2000 + offset).to_string();
            cmd(c, &["SET", "rl-test-clock", &now]).unwrap();
            let calls = hostile_calls(key, &value).into_iter().flat_map(|call| {
                let script = scripts.get(&call[1]).map(|sha| {
                    let mut evalsha = call.clone();
                    evalsha[0] = "EVALSHA".into();
                    evalsha[1] = sha.clone();
                    evalsha
                });
                std::iter::once(call).chain(script)
            });
            for call in calls {
                plant(c, key, &value);
                let length = match &value {
                    Planted::List(items) => items.len() as u64,
                    _ => 1,
                };
                let before = dump(c, key);
                cmd(c, &["CONFIG", "RESETSTAT"]).unwrap();
                let r = reply(c, &call);
                let run = commands_run(c);
                let wrote = dump(c, key) != before;
                // Reading: one LRANGE per 32 entries, twice over at most (a policy change,
                // then the decision); writing: a handful of commands.
                let bound = 24 + 2 * length.div_ceil(32);
                if run > bound {
                    return Err(TestCaseError::fail(format!(
                        "{call:?} on {value:?}: {run} commands (bound {bound})"
                    )));
                }
                match &r {
                    Ok(v) => {
                        let mut ints = Vec::new();
                        reply_ints(v, &mut ints)
                            .map_err(|e| TestCaseError::fail(format!("{call:?}: {e}")))?;
                        if let Some(n) = ints.iter().find(|n| n.unsigned_abs() >= 1 << 53) {
                            return Err(TestCaseError::fail(format!(
                                "{call:?} on {value:?}: {n} is not exact in a double"
                            )));
                        }
                        answered.set(answered.get() + 1);
                        // What the library answered on, and wrote, it reads again.
                        let peek = reply(c, &words(&["FCALL", "rl_peek", "1", key]));
                        if wrote && peek.is_err() {
                            return Err(TestCaseError::fail(format!(
                                "{call:?} on {value:?} answered {v:?}, then the key: {peek:?}"
                            )));
                        }
                    }
                    Err(e) if e.starts_with("WRONGTYPE ") => {}
                    Err(e) => {
                        return Err(TestCaseError::fail(format!("{call:?} on {value:?}: {e}")))
                    }
                }
            }
            let pong: String = redis::cmd("PING").query(&mut *other.borrow_mut()).unwrap();
            assert_eq!(pong, "PONG");
            Ok(())
        })
        .unwrap();
    let answered = answered.get();
    assert!(
        answered > 400,
        "only {answered} calls answered with a reply"
    );
}

/// The values the attack used: a sliding-log header claiming 10^15 entries (the server hung),
/// a million entries over an empty list, an entry count of 10^400, a GCRA arrival time of
/// 10^15 − 1 ms, garbage entries under a valid header: WRONGTYPE at once, for every function
/// that reads the key.
#[test]
fn planted_headers_are_refused_at_once() {
    let (_s, mut c) = both();
    let now = T0_MS.to_string();
    let lists: Vec<Vec<String>> = vec![
        words(&["s 10 1000 0 1 999999999999999"]),
        words(&["s 10 1000 0 1 1000000"]),
        vec![format!("s 10 1000 1{} 1 1", "0".repeat(400)), "1 1".into()],
        vec![
            format!("s 10 1000 5 {now} 3"),
            "garbage".into(),
            "x y".into(),
            "1 99999999999999999999".into(),
        ],
    ];
    for list in &lists {
        let mut push = vec!["RPUSH", "f:plog"];
        push.extend(list.iter().map(String::as_str));
        for call in [
            words(&["FCALL", "rl_slidinglog", "1", "f:plog", "10", "1000"]),
            words(&["FCALL", "rl_slidinglog", "1", "f:plog", "10", "1001"]),
            words(&["FCALL", "rl_refund", "1", "f:plog", "1"]),
            words(&["FCALL", "rl_peek", "1", "f:plog"]),
            words(&["FCALL", "rl_all", "1", "f:plog", "SLIDINGLOG", "10", "1000"]),
        ] {
            cmd(&mut c, &["DEL", "f:plog"]).unwrap();
            cmd(&mut c, &push).unwrap();
            let r = reply(&mut c, &call);
            assert!(
                matches!(&r, Err(e) if e.starts_with("WRONGTYPE ")),
                "{list:?} {call:?}: {r:?}"
            );
        }
    }
    cmd(&mut c, &["SET", "f:g", "g 10 1000 10 999999999999999 0 0"]).unwrap();
    for call in [
        words(&["FCALL", "rl_gcra", "1", "f:g", "10", "1000"]),
        words(&["FCALL", "rl_peek", "1", "f:g"]),
    ] {
        let r = reply(&mut c, &call);
        assert!(
            matches!(&r, Err(e) if e.starts_with("WRONGTYPE ")),
            "{call:?}: {r:?}"
        );
    }
}

/// How many times each command ran since the last `CONFIG RESETSTAT`, FCALL and CONFIG aside.
fn commands_by_name(c: &mut Connection) -> std::collections::BTreeMap<String, u64> {
    let stats: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
    stats
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            (name != "fcall" && !name.starts_with("config")).then(|| (name.to_string(), calls))
        })
        .collect()
}

/// A policy change on a full log of 10^4 entries (the library's largest L) reads the entries
/// that leave and writes the header: alternating W by 1 ms costs a few commands per call, not
/// the log rewritten (the attack's 189.8 ms and 209 KB per call). A change that drops or merges
/// most of the log reads it once; the calls after it are small again.
#[test]
fn a_policy_change_on_a_full_log_costs_only_what_leaves() {
    let (_s, mut c) = both();
    let l = 10_000u64;
    let now = T0_MS + 20_000;
    let mut push = vec![
        "RPUSH".to_string(),
        "f:big".into(),
        format!("s {l} 3600000 {l} {} {l}", now - 1),
    ];
    push.extend((0..l).map(|i| format!("{} 1", now - l + i)));
    for chunk in push[2..].chunks(1000) {
        let mut words = vec!["RPUSH", "f:big"];
        words.extend(chunk.iter().map(String::as_str));
        cmd(&mut c, &words).unwrap();
    }
    let call = |c: &mut Connection, l: &str, w: &str| -> Vec<i64> {
        let r = reply(c, &words(&["FCALL", "rl_slidinglog", "1", "f:big", l, w]));
        redis::from_redis_value(&r.unwrap()).unwrap()
    };
    for i in 0..20u64 {
        at(&mut c, now + i);
        cmd(&mut c, &["CONFIG", "RESETSTAT"]).unwrap();
        let w = if i % 2 == 0 { "3600001" } else { "3600000" };
        assert_eq!(call(&mut c, "10000", w)[..3], [0, 10_000, 0], "call {i}");
        let run = commands_by_name(&mut c);
        let total: u64 = run.values().sum();
        assert!(total <= 6, "call {i}: {run:?}");
        assert!(
            !run.contains_key("rpush") && !run.contains_key("del"),
            "{run:?}"
        );
    }
    // A refund takes from the newest entries, in place (the key read as any limiter first:
    // GET, TYPE, then the list).
    cmd(&mut c, &["CONFIG", "RESETSTAT"]).unwrap();
    let r = reply(&mut c, &words(&["FCALL", "rl_refund", "1", "f:big", "2"]));
    let r: Vec<i64> = redis::from_redis_value(&r.unwrap()).unwrap();
    assert_eq!(r[..3], [2, 10_000, 2]);
    let run = commands_by_name(&mut c);
    assert!(run.values().sum::<u64>() <= 8, "{run:?}");
    assert!(
        !run.contains_key("rpush") && !run.contains_key("del"),
        "{run:?}"
    );
    // Half the window: the hour's configuration, remembered, still counts the older half, so
    // nothing leaves the log (docs/functions.md, the sliding log's rule); the entries that left
    // the new window are read once (32 entries per LRANGE), and where its window starts is
    // stored with it.
    at(&mut c, now + 20);
    cmd(&mut c, &["CONFIG", "RESETSTAT"]).unwrap();
    assert_eq!(call(&mut c, "10000", "5000")[..3], [1, 10_000, 5_022]);
    let run = commands_by_name(&mut c);
    assert!(run.values().sum::<u64>() <= 6 + 5_000 / 32 + 2, "{run:?}");
    let len: i64 = redis::cmd("LLEN").arg("f:big").query(&mut c).unwrap();
    assert_eq!(len, 1 + 9_998 + 1);
    // L = 10 over the same W: denied, and the calls after it read a few entries from each end
    // (each configuration from where its window starts), whatever the log's length.
    assert_eq!(call(&mut c, "10", "5000")[..3], [0, 10, 0]);
    for i in 0..3 {
        cmd(&mut c, &["CONFIG", "RESETSTAT"]).unwrap();
        assert_eq!(call(&mut c, "10", "5000")[..3], [0, 10, 0]);
        let run = commands_by_name(&mut c);
        assert!(run.values().sum::<u64>() <= 6, "call {i}: {run:?}");
    }
}
