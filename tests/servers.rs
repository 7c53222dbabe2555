//! What differs between the servers the module runs on (Redis 7.0, 7.2, 7.4, Valkey 8), run by
//! `make test-servers` against each with its binaries first on PATH:
//! - state written by Debian's Redis 7.0.15 (RDB, AOF, a replication stream) loads unchanged on
//!   the server under test (skipped when that server is 7.0.15's binary itself);
//! - the real clock: a sub-millisecond policy never admits more than its promise, and on
//!   servers with `RedisModule_CachedMicroseconds` every call inside one MULTI or script sees
//!   one instant;
//! - the load log line names the server and the clock.

mod support;
use support::cluster::info_field;
use support::*;

use std::path::PathBuf;

/// The server under test as it reports itself: (`server_name` or "redis", its own version,
/// the Redis version it reports).
fn identity(c: &mut Connection) -> (String, String, (u32, u32, u32)) {
    let info: String = redis::cmd("INFO").arg("server").query(c).unwrap();
    let redis_version = info_field(&info, "redis_version").expect("redis_version");
    let parts: Vec<u32> = redis_version
        .split('.')
        .map(|p| p.parse().unwrap())
        .collect();
    let triple = (parts[0], parts[1], parts[2]);
    match info_field(&info, "server_name") {
        Some(name) => {
            let own = info_field(&info, &format!("{name}_version")).unwrap_or(redis_version);
            (name, own, triple)
        }
        None => ("Redis".to_string(), redis_version, triple),
    }
}

/// Servers reporting Redis 7.2 or later (Valkey reports 7.2.4) give modules a µs clock.
fn has_micro_clock(c: &mut Connection) -> bool {
    identity(c).2 >= (7, 2, 0)
}

/// The first `name` on PATH, resolved.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .and_then(|p| p.canonicalize().ok())
}

/// True when the server under test differs from Debian's 7.0.15 (which must exist); else
/// prints why the calling test is skipped.
fn old_server_differs(test: &str) -> bool {
    let old = std::path::Path::new(OLD_SERVER).canonicalize().ok();
    let new = on_path(SERVER);
    match (&old, &new) {
        (None, _) => {
            println!("{test}: skipped: no {OLD_SERVER} to write the old state with");
            false
        }
        (Some(o), Some(n)) if o == n => {
            println!(
                "{test}: skipped: the server under test is {OLD_SERVER} itself \
                 (run through `make test-servers`)"
            );
            false
        }
        _ => true,
    }
}

/// A COST 0 peek per key of `WORKLOAD`, with the policy the workload left on it.
const PEEKS: &[&[&str]] = &[
    &["RL.GCRA", "gcra:a", "20", "1000", "COST", "0"],
    &["RL.GCRA", "gcra:b", "3", "1000", "BURST", "7", "COST", "0"],
    &["RL.GCRA", "gcra:c", "1", "3600000", "COST", "0"],
    &["RL.GCRA", "gcra:d", "1000", "1", "BURST", "50", "COST", "0"],
    &[
        "RL.TOKENBUCKET",
        "tb:a",
        "5",
        "1000",
        "BURST",
        "20",
        "COST",
        "0",
    ],
    &[
        "RL.TOKENBUCKET",
        "tb:b",
        "7",
        "60000",
        "BURST",
        "2",
        "COST",
        "0",
    ],
    &[
        "RL.TOKENBUCKET",
        "lease:a",
        "10",
        "1000",
        "BURST",
        "12",
        "COST",
        "0",
    ],
    &["RL.SLIDINGLOG", "sl:a", "8", "500", "COST", "0"],
    &["RL.SLIDINGLOG", "sl:b", "3", "60000", "COST", "0"],
    &["RL.SLIDINGLOG", "sl:c", "1000", "86400000", "COST", "0"],
    &["RL.SLIDINGLOG", "sl:d", "5", "60000", "COST", "0"],
    &["RL.SLIDINGCOUNTER", "sc:a", "20", "2000", "COST", "0"],
    &["RL.SLIDINGCOUNTER", "sc:b", "2", "60000", "COST", "0"],
    &["RL.FIXEDWINDOW", "fw:a", "4", "100", "COST", "0"],
    &["RL.FIXEDWINDOW", "fw:b", "1", "60000", "COST", "0"],
    &["RL.SHAPE", "sh:a", "20", "1000", "QUEUE", "8", "COST", "0"],
    &[
        "RL.SHAPE", "sh:b", "1", "60000", "QUEUE", "2", "DELAY", "1", "COST", "0",
    ],
    &["RL.CONCURRENCY", "cc:a", "3", "1000", "PEEK"],
    &["RL.CONCURRENCY", "cc:b", "1", "60000", "PEEK"],
];

/// `PEEKS` has a peek for every key of `WORKLOAD`, and only those.
fn assert_peeks_cover_the_workload() {
    let keys = |table: &[&[&str]]| -> std::collections::BTreeSet<String> {
        table.iter().map(|words| words[1].to_string()).collect()
    };
    assert_eq!(
        keys(PEEKS),
        keys(WORKLOAD),
        "PEEKS must peek at every key of support::WORKLOAD"
    );
}

/// Every key with its DUMP minus the trailer (the 2-byte RDB version, which each server
/// writes as its own, and the CRC over it) and its absolute expiry.
fn portable_snapshot(c: &mut Connection) -> std::collections::BTreeMap<String, (Vec<u8>, i64)> {
    snapshot(c)
        .into_iter()
        .map(|(k, (dump, at))| {
            let body = dump[..dump.len() - 10].to_vec();
            (k, (body, at))
        })
        .collect()
}

/// The peeks' replies at the debug clock instants `at`, `at`+50 ms and `at`+1 hour; the clock
/// is left at `at`.
fn peeks(c: &mut Connection, at: u64) -> Vec<Vec<i64>> {
    let mut out = Vec::new();
    for offset in [0, 50, 3_600_000] {
        clock_set(c, at + offset);
        out.extend(PEEKS.iter().map(|words| decide(c, words)));
    }
    clock_set(c, at);
    out
}

fn clock_get(c: &mut Connection) -> u64 {
    redis::cmd("RL.DEBUG")
        .arg("CLOCK")
        .arg("GET")
        .query(c)
        .unwrap()
}

fn digest(c: &mut Connection) -> String {
    redis::cmd("DEBUG").arg("DIGEST").query(c).unwrap()
}

#[test]
fn rdb_and_aof_written_by_redis_7_0_load_unchanged() {
    assert_peeks_cover_the_workload();
    if !old_server_differs("rdb_and_aof_written_by_redis_7_0_load_unchanged") {
        return;
    }
    // 7.0.15 writes an AOF whose base is the module's own rewrite (RL.SETSTATE + PEXPIREAT)
    // followed by an incremental file of replicated effects, and an RDB.
    let aof = [
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        "no",
    ];
    let old = Server::using(OLD_SERVER, &aof, &[]);
    let mut o = old.connect();
    assert_eq!(identity(&mut o).2, (7, 0, 15), "{OLD_SERVER} is not 7.0.15");
    clock_set(&mut o, T0_MS);
    run_workload(&mut o, 2);
    wait_persistence_idle(&mut o);
    cmd(&mut o, &["BGREWRITEAOF"]).unwrap();
    wait_persistence_idle(&mut o);
    run_workload(&mut o, 1);
    cmd(&mut o, &["SAVE"]).unwrap();
    let at = clock_get(&mut o);
    let (want, want_peeks) = (portable_snapshot(&mut o), peeks(&mut o, at));
    assert!(want.len() >= 10, "{want:?}");
    let dir = old.dir().display().to_string();
    let _ = cmd(&mut o, &["SHUTDOWN", "NOSAVE"]);
    drop(o);

    // The server under test, on the old server's directory: first from the RDB, then the AOF.
    for (what, options) in [("RDB", &["--appendonly", "no"][..]), ("AOF", &aof[..])] {
        let mut extra = vec!["--dir", &dir];
        extra.extend_from_slice(options);
        let new = Server::with(&extra, &[]);
        let mut n = new.connect();
        clock_set(&mut n, at);
        assert_eq!(portable_snapshot(&mut n), want, "{what} written by 7.0.15");
        assert_eq!(peeks(&mut n, at), want_peeks, "peeks after the {what}");
        let _ = cmd(&mut n, &["SHUTDOWN", "NOSAVE"]);
    }
    drop(old);
}

#[test]
fn replica_of_a_redis_7_0_master_ends_digest_identical() {
    if !old_server_differs("replica_of_a_redis_7_0_master_ends_digest_identical") {
        return;
    }
    let master = Server::using(OLD_SERVER, &[], &[]);
    let replica = Server::start();
    let (mut m, mut r) = (master.connect(), replica.connect());
    clock_set(&mut m, T0_MS);
    // Some state before the full sync (it travels as an RDB), the rest as a command stream.
    run_workload(&mut m, 1);
    replicate(&mut r, &master);
    run_workload(&mut m, 2);
    wait_replica(&mut m);
    let on_master = portable_snapshot(&mut m);
    assert!(on_master.len() >= 10);
    assert_eq!(portable_snapshot(&mut r), on_master);
    assert_eq!(digest(&mut r), digest(&mut m));
}

/// One pipeline: TIME, `n` × `words`, TIME. Returns (admitted, elapsed µs by the server).
fn pipelined(c: &mut Connection, words: &[&str], n: usize) -> (i64, i64) {
    let mut pipe = redis::pipe();
    pipe.cmd("TIME");
    for _ in 0..n {
        let mut command = redis::cmd(words[0]);
        for w in &words[1..] {
            command.arg(*w);
        }
        pipe.add_command(command);
    }
    pipe.cmd("TIME");
    let replies: Vec<Value> = pipe.query(c).unwrap();
    let micros = |v: &Value| -> i64 {
        let (s, us): (String, String) = redis::from_redis_value(v).unwrap();
        s.parse::<i64>().unwrap() * 1_000_000 + us.parse::<i64>().unwrap()
    };
    let elapsed = micros(&replies[n + 1]) - micros(&replies[0]);
    let admitted = replies[1..=n]
        .iter()
        .map(|v| redis::from_redis_value::<Vec<i64>>(v).unwrap()[0])
        .sum();
    (admitted, elapsed)
}

#[test]
fn real_clock_sub_millisecond_policy_never_beats_its_promise() {
    // Not pinned: the module follows the server's clock.
    let s = Server::start();
    let mut c = s.connect();
    let (name, version, _) = identity(&mut c);
    let micro = has_micro_clock(&mut c);
    // L = 1000 per W = 1 ms, BURST 1: one request per µs, nothing saved up.
    let words = ["RL.GCRA", "k", "1000", "1", "BURST", "1"];
    let (admitted, elapsed_us) = pipelined(&mut c, &words, 2_000);
    println!(
        "{name} {version}: 2,000 pipelined RL.GCRA k 1000 1 BURST 1 admitted {admitted} \
         in {elapsed_us} µs of server time ({} clock)",
        if micro { "µs" } else { "ms" }
    );
    assert!(admitted >= 1);
    assert!(
        admitted <= 1 + elapsed_us,
        "admitted {admitted} in {elapsed_us} µs: more than 1 + 1 per µs"
    );
    if micro {
        // 2,000 commands cannot all run within one microsecond.
        assert!(admitted > 1, "a µs clock admitted only {admitted}");
    }
}

#[test]
fn one_instant_per_transaction_and_script_on_the_cached_clock() {
    let s = Server::start();
    let mut c = s.connect();
    let (name, version, _) = identity(&mut c);
    if !has_micro_clock(&mut c) {
        // 7.0: the module reads the live ms clock, which can tick inside a transaction.
        println!("{name} {version}: skipped: no RedisModule_CachedMicroseconds (7.2+)");
        return;
    }
    // One request per µs, no burst: every call after the first at the same instant is denied.
    let words = ["RL.GCRA", "m", "1000", "1", "BURST", "1"];
    let mut pipe = redis::pipe();
    pipe.atomic();
    for _ in 0..500 {
        let mut command = redis::cmd(words[0]);
        for w in &words[1..] {
            command.arg(*w);
        }
        pipe.add_command(command);
    }
    let replies: Vec<Vec<i64>> = pipe.query(&mut c).unwrap();
    let admitted: i64 = replies.iter().map(|r| r[0]).sum();
    assert_eq!(admitted, 1, "MULTI of 500 on one instant");

    let script = "local n = 0 for i = 1, 500 do \
                  n = n + redis.call('RL.GCRA', KEYS[1], '1000', '1', 'BURST', '1')[1] end \
                  return n";
    let admitted: i64 = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("s")
        .query(&mut c)
        .unwrap();
    assert_eq!(admitted, 1, "a script of 500 on one instant");
}

#[test]
fn the_load_log_names_the_server_and_the_clock() {
    let s = Server::start();
    let mut c = s.connect();
    let (name, version, reported) = identity(&mut c);
    let log = s.log();
    let line = log
        .lines()
        .find(|l| l.contains("<ratelimit> loaded on "))
        .unwrap_or_else(|| panic!("no load line in:\n{log}"));
    println!("{line}");
    assert!(
        line.contains(&format!("loaded on {name} {version}")),
        "{line}"
    );
    let clock = if reported >= (7, 2, 0) {
        "clock µs (CachedMicroseconds)"
    } else {
        "clock ms (Milliseconds)"
    };
    assert!(line.contains(clock), "{line}");
}

fn info(c: &mut Connection, section: &str) -> String {
    redis::cmd("INFO").arg(section).query(c).unwrap()
}

#[test]
fn swapdb_diskless_load_and_async_loading_keep_replicas_identical() {
    let master = Server::with(
        &[
            "--repl-diskless-sync",
            "yes",
            "--repl-diskless-sync-delay",
            "0",
            "--repl-backlog-size",
            "16384",
        ],
        &[],
    );
    let replica = Server::with(&["--repl-diskless-load", "swapdb"], &[]);
    let (mut m, mut r) = (master.connect(), replica.connect());
    clock_set(&mut m, T0_MS);
    run_workload(&mut m, 2);
    cmd(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
    )
    .unwrap();
    let synced = |r: &mut Connection| {
        let i = info(r, "replication") + &info(r, "persistence");
        i.contains("master_link_status:up") && i.contains("async_loading:0")
    };
    wait_for("first sync", || synced(&mut r));
    let log = replica.log();
    assert!(!log.contains("Skipping diskless-load"), "{log}");
    assert!(
        log.contains("Swapping active DB with loaded DB"),
        "no swapdb load:\n{log}"
    );
    wait_replica(&mut m);
    assert_eq!(snapshot(&mut r), snapshot(&mut m));
    let before = snapshot(&mut r);

    // A second full sync with the same replication id loads asynchronously: the replica serves
    // reads from its old data meanwhile. Slow the load down (5 ms per key, serving clients
    // every KB), drop the replica's link and write more than the backlog holds, so that it
    // cannot resume partially.
    let mut more = redis::pipe();
    for i in 0..400 {
        more.cmd("RL.GCRA")
            .arg(format!("more:{i}"))
            .arg(10)
            .arg(1000)
            .ignore();
    }
    let () = more.query(&mut m).unwrap();
    cmd(
        &mut r,
        &[
            "CONFIG",
            "SET",
            "loading-process-events-interval-bytes",
            "1024",
        ],
    )
    .unwrap();
    cmd(&mut r, &["CONFIG", "SET", "key-load-delay", "5000"]).unwrap();
    let mut pipe = redis::pipe();
    pipe.atomic()
        .cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .ignore()
        .cmd("SET")
        .arg("filler")
        .arg("x".repeat(100_000))
        .ignore();
    let () = pipe.query(&mut m).unwrap();
    run_workload(&mut m, 1);
    wait_for("async loading", || {
        info(&mut r, "persistence").contains("async_loading:1")
    });
    // Still the old data while the new loads.
    assert_eq!(dump(&mut r, "gcra:a"), before["gcra:a"].0.clone().into());
    cmd(&mut r, &["CONFIG", "SET", "key-load-delay", "0"]).unwrap();
    wait_for("second sync", || synced(&mut r));
    wait_replica(&mut m);
    assert_eq!(snapshot(&mut r), snapshot(&mut m));
    assert_eq!(digest(&mut r), digest(&mut m));
    // The gauges counted the temporary db while it loaded; once the old db is freed (in the
    // background) they are the master's again.
    let gauges = |c: &mut Connection| {
        let text = info(c, "ratelimit");
        text.lines()
            .filter(|l| l.contains("_keys:") || l.contains("_memory:"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let on_master = gauges(&mut m);
    assert!(!on_master.is_empty(), "{}", info(&mut m, "ratelimit"));
    wait_for("the replica's gauges", || gauges(&mut r) == on_master);
    assert!(
        replica
            .log()
            .matches("Swapping active DB with loaded DB")
            .count()
            >= 2
    );
}

/// A connection as a new ACL user with the given rules (`on >pw ~*` added).
fn as_user(s: &Server, c: &mut Connection, name: &str, rules: &[&str]) -> Connection {
    let mut words = vec!["ACL", "SETUSER", name, "reset", "on", ">pw", "~*"];
    words.extend_from_slice(rules);
    cmd(c, &words).unwrap();
    let client = redis::Client::open(format!("redis://{name}:pw@127.0.0.1:{}/", s.port)).unwrap();
    client.get_connection().unwrap()
}

/// True when the command was refused by ACL (not by its own checks).
fn noperm(c: &mut Connection, words: &[&str]) -> bool {
    match cmd(c, words) {
        Err(e) => e.code() == Some("NOPERM"),
        Ok(_) => false,
    }
}

const GATEWAY_CALLS: &[&[&str]] = &[
    &["RL.GCRA", "g", "10", "1000"],
    &["RL.TOKENBUCKET", "t", "10", "1000"],
    &["RL.LEASE", "t", "10", "1000", "WANT", "2"],
    &["RL.REFUND", "t", "1"],
    &["RL.CHARGE", "t", "1"],
    &["RL.SETTLE", "1", "a", "GCRA", "10", "1000", "BY", "-1"],
    &["RL.SLIDINGLOG", "l", "10", "1000"],
    &["RL.SLIDINGCOUNTER", "c", "10", "1000"],
    &["RL.FIXEDWINDOW", "f", "10", "1000"],
    &["RL.ALL", "1", "a", "GCRA", "10", "1000"],
    &["RL.SHAPE", "s", "10", "1000"],
    &["RL.CONCURRENCY", "n", "10", "1000", "ACQUIRE", "a"],
    &["RL.THROTTLE", "th", "5", "10", "60"],
    &["RL.PEEK", "g"],
    &["RL.INSPECT", "g"],
];
const SETSTATE: &[&str] = &["RL.SETSTATE", "k", "garbage"];
const DEBUG: &[&str] = &["RL.DEBUG", "CLOCK", "GET"];
/// The budget controller's commands (docs/regions.md): dangerous, never `ratelimit`.
const SHARE: &[&str] = &[
    "RL.SHARE",
    "GCRA",
    "10",
    "1000",
    "10",
    "k",
    "1",
    "9000000000000",
];
const DEMAND: &[&str] = &["RL.DEMAND", "k"];

/// `GATEWAY_CALLS` calls every command of the module but the operator and controller commands.
fn assert_gateway_calls_cover_the_module() {
    let operator = [SETSTATE[0], DEBUG[0], SHARE[0], DEMAND[0]];
    let missing: Vec<&String> = module_commands()
        .iter()
        .filter(|c| !operator.contains(&c.as_str()) && !GATEWAY_CALLS.iter().any(|w| w[0] == *c))
        .collect();
    assert!(
        missing.is_empty(),
        "GATEWAY_CALLS has no call of {missing:?}"
    );
}

#[test]
fn acl_categories_where_the_server_has_them() {
    let s = Server::start();
    let mut c = s.connect();
    let (name, version, reported) = identity(&mut c);
    assert_gateway_calls_cover_the_module();
    let categories = reported >= (7, 2, 0);
    let own = name == "valkey" || reported >= (7, 4, 0);
    println!("{name} {version}: ACL categories {categories}, @ratelimit {own}");

    // The operator's view: everything but the dangerous commands.
    let mut ops = as_user(&s, &mut c, "ops", &["+@all", "-@dangerous"]);
    for words in GATEWAY_CALLS {
        assert!(!noperm(&mut ops, words), "{words:?}");
    }
    // On 7.0 module commands belong to no category: -@dangerous does not remove them.
    assert_eq!(noperm(&mut ops, SETSTATE), categories);
    assert_eq!(noperm(&mut ops, DEBUG), categories);
    assert_eq!(noperm(&mut ops, SHARE), categories);
    assert_eq!(noperm(&mut ops, DEMAND), categories);
    // Write/read split: -@write removes the limiters (they write) where categories exist.
    let mut reader = as_user(&s, &mut c, "reader", &["+@all", "-@write"]);
    assert_eq!(noperm(&mut reader, GATEWAY_CALLS[0]), categories);

    if own {
        let mut gw = as_user(&s, &mut c, "gw", &["-@all", "+@ratelimit"]);
        for words in GATEWAY_CALLS {
            assert!(!noperm(&mut gw, words), "{words:?}");
        }
        assert!(noperm(&mut gw, SETSTATE));
        assert!(noperm(&mut gw, DEBUG));
        assert!(noperm(&mut gw, SHARE));
        assert!(noperm(&mut gw, DEMAND));
        assert!(noperm(&mut gw, &["GET", "g"]));
    } else {
        let e = err(&mut c, &["ACL", "SETUSER", "gw", "+@ratelimit"]);
        assert!(e.contains("ratelimit"), "{e}");
    }

    // The allow-list by name (the README's recipe for 7.0) works everywhere.
    let mut rules = vec!["-@all".to_string()];
    for words in GATEWAY_CALLS {
        let rule = format!("+{}", words[0].to_ascii_lowercase());
        if !rules.contains(&rule) {
            rules.push(rule);
        }
    }
    let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
    let mut named = as_user(&s, &mut c, "named", &rules);
    for words in GATEWAY_CALLS {
        assert!(!noperm(&mut named, words), "{words:?}");
    }
    assert!(noperm(&mut named, SETSTATE));
    assert!(noperm(&mut named, DEBUG));
    assert!(noperm(&mut named, SHARE));
    assert!(noperm(&mut named, DEMAND));
}
