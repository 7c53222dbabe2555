//! `INFO ratelimit`: counters exact after a scripted mix of admits, denials, peeks and errors
//! (and reset by `CONFIG RESETSTAT`), and gauges equal to what a `SCAN … TYPE ratelimit` finds
//! after every event of a limiter's lifecycle, on a master and on its replica.

mod support;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use support::*;

/// `INFO ratelimit` as numbers, without the `ratelimit_` prefix.
fn info(c: &mut Connection) -> HashMap<String, i64> {
    let text: String = redis::cmd("INFO").arg("ratelimit").query(c).unwrap();
    assert!(text.contains("# ratelimit\r\n"), "{text}");
    text.lines()
        .filter_map(|l| l.strip_prefix("ratelimit_"))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().parse().unwrap()))
        .collect()
}

fn field(info: &HashMap<String, i64>, name: &str) -> i64 {
    *info
        .get(name)
        .unwrap_or_else(|| panic!("INFO ratelimit lacks {name}: {info:?}"))
}

#[test]
fn counters_count_a_scripted_mix() {
    let (_s, mut c) = server();
    let gcra = ["RL.GCRA", "k", "3", "1000"];
    for _ in 0..5 {
        rl(&mut c, &gcra); // 3 admitted, 2 denied
    }
    rl(&mut c, &with(&gcra, &["COST", "0"]));
    rl(&mut c, &with(&gcra, &["COST", "0"]));
    rl(&mut c, &["RL.PEEK", "k"]);
    cmd(&mut c, &["RL.PEEK", "missing"]).unwrap();
    cmd(&mut c, &["RL.INSPECT", "k"]).unwrap();
    err(&mut c, &["RL.GCRA", "k", "abc", "1000"]);
    cmd(&mut c, &["SET", "str", "x"]).unwrap();
    err(&mut c, &["RL.GCRA", "str", "3", "1000"]);
    err(&mut c, &["RL.PEEK", "str"]);
    // An arity error is Redis's own rejection: the module never sees the call.
    err(&mut c, &["RL.GCRA", "k"]);

    let lease = ["RL.LEASE", "tb", "10", "1000", "WANT", "4"];
    for granted in [4, 4, 2, 0] {
        assert_eq!(rl(&mut c, &lease)[0], granted);
    }
    assert_eq!(rl(&mut c, &["RL.REFUND", "tb", "3"])[0], 3);
    assert_eq!(
        cmd(&mut c, &["RL.REFUND", "nothing", "3"]).unwrap(),
        Value::Nil
    );
    rl(&mut c, &["RL.FIXEDWINDOW", "fw", "1", "1000"]);
    rl(&mut c, &["RL.FIXEDWINDOW", "fw", "1", "1000"]);

    // RL.THROTTLE answers redis-cell's "limited" in field 1: counted as the decision it is.
    let throttle = ["RL.THROTTLE", "th", "2", "10", "60"];
    for limited in [0, 0, 0, 1] {
        assert_eq!(rl(&mut c, &throttle)[0], limited);
    }
    rl(&mut c, &with(&throttle, &["0"]));
    rl(&mut c, &with(&throttle, &["100"])); // more than the burst: never passes, a denial
                                            // RL.SHAPE's sixth field does not change how it is counted.
    let shape: Vec<i64> = redis::cmd("RL.SHAPE")
        .arg("sh")
        .arg(1)
        .arg(1000)
        .query(&mut c)
        .unwrap();
    assert_eq!(shape[0], 1);
    let shape: Vec<i64> = redis::cmd("RL.SHAPE")
        .arg("sh")
        .arg(1)
        .arg(1000)
        .query(&mut c)
        .unwrap();
    assert_eq!(shape[0], 0);

    // RL.ALL counts each call once, by its combined decision.
    let all = [
        "RL.ALL",
        "2",
        "{u}a",
        "{u}b",
        "GCRA",
        "1",
        "1000",
        "FIXEDWINDOW",
        "5",
        "1000",
    ];
    for _ in 0..2 {
        cmd(&mut c, &all).unwrap();
    }

    let i = info(&mut c);
    let expect = [
        ("rl_all_admitted", 1),
        ("rl_all_denied", 1),
        ("rl_throttle_admitted", 3),
        ("rl_throttle_denied", 2),
        ("rl_throttle_peeks", 1),
        ("rl_shape_admitted", 1),
        ("rl_shape_denied", 1),
        ("rl_gcra_admitted", 3),
        ("rl_gcra_denied", 2),
        ("rl_gcra_peeks", 2),
        ("rl_gcra_errors", 2),
        ("rl_peek_peeks", 2),
        ("rl_peek_errors", 1),
        ("rl_inspect_peeks", 1),
        ("rl_lease_admitted", 3),
        ("rl_lease_denied", 1),
        ("rl_lease_tokens_requested", 16),
        ("rl_lease_tokens_granted", 10),
        ("rl_refund_calls", 2),
        ("rl_refund_tokens", 3),
        ("rl_fixedwindow_admitted", 1),
        ("rl_fixedwindow_denied", 1),
        ("rl_tokenbucket_admitted", 0),
    ];
    for (name, n) in expect {
        assert_eq!(field(&i, name), n, "{name}");
    }
    assert_eq!(field(&i, "keys"), 7);
    assert_eq!(field(&i, "gcra_keys"), 3);
    assert_eq!(field(&i, "shape_keys"), 1);
    assert!(
        !i.contains_key("cl_throttle_admitted"),
        "CL.THROTTLE is not registered"
    );
    assert_eq!(field(&i, "token_bucket_keys"), 1);
    assert_eq!(field(&i, "fixed_window_keys"), 2);
    assert_eq!(field(&i, "max_log_entries"), 10_000);

    // CONFIG RESETSTAT: every counter back to 0, the gauges untouched.
    cmd(&mut c, &["CONFIG", "RESETSTAT"]).unwrap();
    let after = info(&mut c);
    for (name, value) in &after {
        let gauge = name.ends_with("_keys")
            || name.ends_with("_memory")
            || [
                "keys",
                "memory",
                "sliding_log_entries",
                "max_log_entries",
                "keys_with_several_configurations",
            ]
            .contains(&name.as_str());
        if gauge {
            assert_eq!(value, &i[name], "{name}");
        } else {
            assert_eq!(*value, 0, "{name} after CONFIG RESETSTAT");
        }
    }
    cmd(
        &mut c,
        &["CONFIG", "SET", "ratelimit.max-log-entries", "500"],
    )
    .unwrap();
    assert_eq!(field(&info(&mut c), "max_log_entries"), 500);
    rl(&mut c, &gcra);
    assert_eq!(field(&info(&mut c), "rl_gcra_denied"), 1);
}

/// Key `n` of the `a`-th algorithm of the registry: every key name is 8 bytes, so every key
/// has the same overhead in MEMORY USAGE.
fn key(a: usize, n: usize) -> String {
    format!("a{a:02}:{n:04}")
}

/// Creates keys `from..to` of every algorithm in the selected database; sliding logs get
/// several entries each (the clock moves between requests). One key in three is called under
/// another configuration first, so it remembers two.
fn create(c: &mut Connection, from: usize, to: usize) {
    for n in from..to {
        for (a, algorithm) in algorithms().iter().enumerate() {
            let k = key(a, n);
            if n % 3 == 0 {
                let call = [algorithm.command.as_str(), &k, "100", "120000"];
                cmd(c, &with(&call, algorithm.operation())).unwrap();
                clock_advance(c, 3);
            }
            for _ in 0..=(n % 4) {
                // RL.SHAPE answers six integers; only success matters here.
                let call = [algorithm.command.as_str(), &k, "100", "60000"];
                cmd(c, &with(&call, algorithm.operation())).unwrap();
                clock_advance(c, 3);
            }
        }
    }
}

/// What a SCAN finds, by algorithm: keys, summed MEMORY USAGE, and sliding-log entries.
/// (Indexed like `algorithms()`.)
#[derive(Debug)]
struct Scanned {
    keys: Vec<i64>,
    memory_usage: Vec<i64>,
    log_entries: i64,
    /// Keys that remember more than one configuration.
    several: i64,
}

fn scan(c: &mut Connection) -> Scanned {
    let n = algorithms().len();
    let mut s = Scanned {
        keys: vec![0; n],
        memory_usage: vec![0; n],
        log_entries: 0,
        several: 0,
    };
    for db in [0, 1] {
        cmd(c, &["SELECT", &db.to_string()]).unwrap();
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("COUNT")
                .arg(1000)
                .arg("TYPE")
                .arg("ratelimit")
                .query(c)
                .unwrap();
            for k in keys {
                // Expired meanwhile (the expiry test): counted on neither side.
                let Some((algorithm, entries, several)) = inspect_algorithm(c, &k) else {
                    continue;
                };
                let Some(i) = algorithms().iter().position(|a| a.id == algorithm) else {
                    panic!("{k} holds an unknown algorithm {algorithm}");
                };
                let usage: Option<i64> =
                    redis::cmd("MEMORY").arg("USAGE").arg(&k).query(c).unwrap();
                let Some(usage) = usage else { continue };
                s.keys[i] += 1;
                s.memory_usage[i] += usage;
                s.log_entries += entries;
                s.several += i64::from(several);
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
    }
    cmd(c, &["SELECT", "0"]).unwrap();
    s
}

/// The `algorithm` field of `RL.INSPECT`, the `entries` (0 if absent) of every configuration
/// (the current one's and those in `others`), and whether it has `others`; None for a key that
/// vanished.
fn inspect_algorithm(c: &mut Connection, k: &str) -> Option<(String, i64, bool)> {
    let v: Value = redis::cmd("RL.INSPECT").arg(k).query(c).unwrap();
    let Value::Array(items) = v else { return None };
    let entries_of = |items: &[Value]| {
        items
            .chunks(2)
            .find_map(|pair| match pair {
                [Value::BulkString(name), Value::Int(n)] if name == b"entries" => Some(*n),
                _ => None,
            })
            .unwrap_or(0)
    };
    let (mut algorithm, mut entries, mut several) = (None, entries_of(&items), false);
    for pair in items.chunks(2) {
        match pair {
            [Value::BulkString(name), Value::BulkString(value)] if name == b"algorithm" => {
                algorithm = Some(String::from_utf8(value.clone()).unwrap());
            }
            [Value::BulkString(name), Value::Array(others)] if name == b"others" => {
                several = true;
                for other in others {
                    let Value::Array(fields) = other else {
                        panic!("{other:?}")
                    };
                    entries += entries_of(fields);
                }
            }
            _ => {}
        }
    }
    algorithm.map(|a| (a, entries, several))
}

/// The gauges agree with a SCAN: key counts exactly; memory exactly up to a per-key overhead
/// (the key name and dict entry MEMORY USAGE adds to the value) that is the same for every key
/// and every checkpoint of a test.
fn gauges_match(c: &mut Connection, overhead: &mut Option<i64>) -> Result<(), String> {
    let s = scan(c);
    let i = info(c);
    let mut total_keys = 0;
    for (n, name) in algorithms().iter().map(|a| &a.id).enumerate() {
        let (keys, memory) = (
            field(&i, &format!("{name}_keys")),
            field(&i, &format!("{name}_memory")),
        );
        if keys != s.keys[n] {
            return Err(format!("{name}_keys {keys}, SCAN found {}", s.keys[n]));
        }
        total_keys += keys;
        if keys == 0 {
            if memory != 0 {
                return Err(format!("{name}_memory {memory} with no keys"));
            }
            continue;
        }
        let extra = s.memory_usage[n] - memory;
        if extra % keys != 0 {
            return Err(format!(
                "{name}_memory {memory}: MEMORY USAGE sums to {}",
                s.memory_usage[n]
            ));
        }
        let per_key = *overhead.get_or_insert(extra / keys);
        if extra != per_key * keys {
            return Err(format!(
                "{name}_memory {memory}: MEMORY USAGE sums to {} over {keys} keys, overhead {per_key}",
                s.memory_usage[n]
            ));
        }
    }
    if field(&i, "keys") != total_keys {
        return Err(format!("keys {} != {total_keys}", field(&i, "keys")));
    }
    let memory: i64 = algorithms()
        .iter()
        .map(|a| field(&i, &format!("{}_memory", a.id)))
        .sum();
    if field(&i, "memory") != memory {
        return Err(format!("memory {} != {memory}", field(&i, "memory")));
    }
    if field(&i, "keys_with_several_configurations") != s.several {
        return Err(format!(
            "keys_with_several_configurations {} != {} (SCAN and RL.INSPECT)",
            field(&i, "keys_with_several_configurations"),
            s.several
        ));
    }
    if field(&i, "sliding_log_entries") != s.log_entries {
        return Err(format!(
            "sliding_log_entries {} != {} (SCAN and RL.INSPECT)",
            field(&i, "sliding_log_entries"),
            s.log_entries
        ));
    }
    Ok(())
}

/// Waits (bounded) until the gauges match a SCAN: frees may run on a background thread.
fn assert_gauges(c: &mut Connection, overhead: &mut Option<i64>, when: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match gauges_match(c, overhead) {
            Ok(()) => return,
            Err(e) if Instant::now() >= deadline => panic!("after {when}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn keys_gauge(c: &mut Connection) -> i64 {
    field(&info(c), "keys")
}

#[test]
fn gauges_follow_every_lifecycle_event_on_master_and_replica() {
    let (master, replica) = (Server::start(), Server::start());
    let (mut m, mut r) = (master.connect(), replica.connect());
    clock_set(&mut m, T0_MS);
    clock_set(&mut r, T0_MS);
    replicate(&mut r, &master);
    let (mut om, mut or) = (None, None);
    let mut check = |m: &mut Connection, r: &mut Connection, when: &str| {
        wait_replica(m);
        assert_gauges(m, &mut om, &format!("{when} (master)"));
        assert_gauges(r, &mut or, &format!("{when} (replica)"));
    };

    let every = 0..algorithms().len();
    // Created by commands, replicated as RL.SETSTATE effects.
    create(&mut m, 0, 12);
    assert_eq!(keys_gauge(&mut m), 12 * every.len() as i64);
    assert!(field(&info(&mut m), "keys_with_several_configurations") > 0);
    check(&mut m, &mut r, "create");
    // Changed in place: sliding logs grow and shrink (entries leave the window).
    clock_advance(&mut m, 59_990);
    create(&mut m, 0, 6);
    // RL.REFUND changes in place too: a refunded sliding log drops its newest entries.
    for n in 6..10 {
        for a in every.clone() {
            rl(&mut m, &["RL.REFUND", &key(a, n), "2"]);
        }
    }
    check(&mut m, &mut r, "in-place changes");

    // DEBUG RELOAD: every value saved, freed and loaded again.
    cmd(&mut m, &["DEBUG", "RELOAD"]).unwrap();
    check(&mut m, &mut r, "DEBUG RELOAD");

    // RESTORE (new key, and REPLACE over an existing one), COPY, DEL, UNLINK.
    for a in every.clone() {
        let dumped = dump(&mut m, &key(a, 3)).unwrap();
        restore(&mut m, &key(a, 9001), &dumped, false);
        restore(&mut m, &key(a, 4), &dumped, true);
        cmd(&mut m, &["COPY", &key(a, 5), &key(a, 9002)]).unwrap();
        cmd(&mut m, &["COPY", &key(a, 6), &key(a, 7), "REPLACE"]).unwrap();
    }
    check(&mut m, &mut r, "RESTORE and COPY");
    for a in every.clone() {
        cmd(&mut m, &["DEL", &key(a, 0)]).unwrap();
        cmd(&mut m, &["UNLINK", &key(a, 1)]).unwrap();
    }
    check(&mut m, &mut r, "DEL and UNLINK");
    // A limiter replaced by one of another algorithm (in place): each by the next one's.
    for a in every.clone() {
        let other = dump(&mut m, &key((a + 1) % every.len(), 2)).unwrap();
        restore(&mut m, &key(a, 2), &other, true);
    }
    check(&mut m, &mut r, "RESTORE of another algorithm");

    // Expiry by Redis's real clock (the debug clock never expires a key).
    for a in every.clone() {
        cmd(&mut m, &["PEXPIRE", &key(a, 8), "1"]).unwrap();
    }
    wait_for("keys expired", || {
        let exists: i64 = redis::cmd("EXISTS")
            .arg(every.clone().map(|a| key(a, 8)).collect::<Vec<_>>())
            .query(&mut m)
            .unwrap();
        exists == 0
    });
    check(&mut m, &mut r, "expiry");

    // SWAPDB, with keys in database 1 too.
    cmd(&mut m, &["SELECT", "1"]).unwrap();
    create(&mut m, 100, 104);
    cmd(&mut m, &["SELECT", "0"]).unwrap();
    cmd(&mut m, &["SWAPDB", "0", "1"]).unwrap();
    check(&mut m, &mut r, "SWAPDB");

    // Eviction: a tight maxmemory with allkeys-random.
    let used: String = redis::cmd("INFO").arg("memory").query(&mut m).unwrap();
    let used: i64 = used
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    cmd(
        &mut m,
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-random"],
    )
    .unwrap();
    cmd(
        &mut m,
        &["CONFIG", "SET", "maxmemory", &(used + 20_000).to_string()],
    )
    .unwrap();
    let evicted = |m: &mut Connection| -> i64 {
        let stats: String = redis::cmd("INFO").arg("stats").query(m).unwrap();
        stats
            .lines()
            .find_map(|l| l.strip_prefix("evicted_keys:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    };
    let mut n = 2000;
    while evicted(&mut m) == 0 && n < 9000 {
        for (a, algorithm) in algorithms().iter().enumerate() {
            let k = key(a, n);
            let call = [algorithm.command.as_str(), &k, "100", "60000"];
            let _ = cmd(&mut m, &with(&call, algorithm.operation()));
        }
        n += 1;
    }
    assert!(evicted(&mut m) > 0, "nothing was evicted");
    cmd(&mut m, &["CONFIG", "SET", "maxmemory", "0"]).unwrap();
    check(&mut m, &mut r, "eviction");

    // A full sync: the replica drops its data and loads the master's RDB. First the replica
    // diverges (promoted, written to), so the resync cannot be partial.
    cmd(&mut r, &["REPLICAOF", "NO", "ONE"]).unwrap();
    create(&mut r, 500, 503);
    replicate(&mut r, &master);
    check(&mut m, &mut r, "full sync");
    // Again with a diskless load into a temporary database (`repl-diskless-load swapdb`).
    cmd(&mut r, &["REPLICAOF", "NO", "ONE"]).unwrap();
    create(&mut r, 600, 603);
    cmd(&mut r, &["CONFIG", "SET", "repl-diskless-load", "swapdb"]).unwrap();
    replicate(&mut r, &master);
    check(&mut m, &mut r, "full sync with a swapdb diskless load");

    // FLUSHALL ASYNC frees on a background thread; FLUSHALL frees at once.
    cmd(&mut m, &["FLUSHALL", "ASYNC"]).unwrap();
    check(&mut m, &mut r, "FLUSHALL ASYNC");
    assert_eq!(keys_gauge(&mut m), 0);
    assert_eq!(keys_gauge(&mut r), 0);
    create(&mut m, 0, 3);
    check(&mut m, &mut r, "create after FLUSHALL ASYNC");
    cmd(&mut m, &["FLUSHALL"]).unwrap();
    check(&mut m, &mut r, "FLUSHALL");
    let i = info(&mut m);
    assert_eq!(
        (
            field(&i, "keys"),
            field(&i, "memory"),
            field(&i, "sliding_log_entries")
        ),
        (0, 0, 0)
    );
}

/// A restart from an AOF loads limiters through RL.SETSTATE (the incremental part) and the
/// RDB preamble (rdb_load): both count.
#[test]
fn gauges_after_an_aof_reload() {
    let mut s = Server::with(&["--appendonly", "yes"], &[]);
    let mut c = s.connect();
    clock_set(&mut c, T0_MS);
    create(&mut c, 0, 5);
    cmd(&mut c, &["BGREWRITEAOF"]).unwrap();
    wait_persistence_idle(&mut c);
    create(&mut c, 5, 8);
    let mut overhead = None;
    assert_gauges(&mut c, &mut overhead, "before restart");
    s.restart("NOSAVE");
    let mut c = s.connect();
    assert_eq!(keys_gauge(&mut c), 8 * algorithms().len() as i64);
    assert_gauges(&mut c, &mut overhead, "AOF reload");
    cmd(&mut c, &["DEBUG", "LOADAOF"]).unwrap();
    assert_gauges(&mut c, &mut overhead, "DEBUG LOADAOF");
}

/// `RESTORE key 0 <dumped> [REPLACE]`.
fn restore(c: &mut Connection, key: &str, dumped: &[u8], replace: bool) {
    let mut restore = redis::cmd("RESTORE");
    restore.arg(key).arg(0).arg(dumped);
    if replace {
        restore.arg("REPLACE");
    }
    let _: () = restore.query(c).unwrap();
}
