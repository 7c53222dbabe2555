//! Replication, AOF, cluster: a replica on another clock ends digest-identical, one call's
//! effects arrive together (changed keys only), an AOF restart keeps the states, a cluster takes
//! one slot and refuses a cross-slot call, and a charged sliding log propagates a delta.
//! `ALL_WORKLOAD` is the calls the replication tests run.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::support::cluster::{slot, Cluster};

use super::*;

/// A master and a replica, the replica's clock 3 hours ahead.
fn pair() -> (Server, Server, Connection, Connection) {
    // No 5 s wait before the first sync; no PING from the master moving its offset meanwhile.
    let master = Server::with(
        &[
            "--repl-diskless-sync-delay",
            "0",
            "--repl-ping-replica-period",
            "3600",
        ],
        &[],
    );
    let replica = Server::with(&["--replicaof", "127.0.0.1", &master.port.to_string()], &[]);
    let (mut m, mut r) = (master.connect(), replica.connect());
    clock_set(&mut m, T0_MS);
    clock_set(&mut r, T0_MS + 3 * 3_600_000);
    wait_for("replica link up", || {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut r).unwrap();
        info.contains("master_link_status:up")
    });
    (master, replica, m, r)
}

fn offset(c: &mut Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("replication").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("master_repl_offset:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("master_repl_offset")
}

/// A workload of RL.ALL calls: admits, denials, peeks, costs, policy changes.
const ALL_WORKLOAD: &[&[&str]] = &[
    &[
        "RL.ALL",
        "2",
        "w:{t}:k1",
        "w:{t}:t",
        "GCRA",
        "3",
        "1000",
        "FIXEDWINDOW",
        "20",
        "60000",
    ],
    &[
        "RL.ALL",
        "2",
        "w:{t}:k2",
        "w:{t}:t",
        "TOKENBUCKET",
        "5",
        "1000",
        "COST",
        "3",
        "FIXEDWINDOW",
        "20",
        "60000",
    ],
    &[
        "RL.ALL",
        "3",
        "w:{t}:k1",
        "w:{t}:k2",
        "w:{t}:log",
        "GCRA",
        "3",
        "1000",
        "COST",
        "0",
        "TOKENBUCKET",
        "5",
        "1000",
        "SLIDINGLOG",
        "4",
        "2000",
        "COST",
        "2",
    ],
    &[
        "RL.ALL",
        "2",
        "w:{t}:ctr",
        "w:{t}:t",
        "SLIDINGCOUNTER",
        "6",
        "1000",
        "COST",
        "2",
        "FIXEDWINDOW",
        "20",
        "60000",
    ],
    &[
        "RL.ALL",
        "2",
        "w:{t}:k1",
        "w:{t}:t",
        "GCRA",
        "3",
        "1000",
        "BURST",
        "5",
        "FIXEDWINDOW",
        "20",
        "60000",
    ],
    &[
        "RL.ALL",
        "2",
        "w:{t}:k1",
        "w:{t}:t",
        "GCRA",
        "3",
        "1000",
        "COST",
        "0",
        "FIXEDWINDOW",
        "20",
        "60000",
        "COST",
        "0",
    ],
    &[
        "RL.ALL",
        "2",
        "w:{t}:log",
        "w:{t}:t",
        "SLIDINGLOG",
        "2",
        "2000",
        "COST",
        "2",
        "FIXEDWINDOW",
        "25",
        "60000",
    ],
];

/// The distinct keys `ALL_WORKLOAD` names (each call's `numkeys` keys): what a snapshot after
/// it holds, however many rows a new algorithm adds.
fn workload_keys() -> usize {
    let mut keys: Vec<&str> = ALL_WORKLOAD
        .iter()
        .flat_map(|words| {
            let n: usize = words[1].parse().expect("numkeys");
            words[2..2 + n].iter().copied()
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys.len()
}

#[test]
fn a_replica_on_another_clock_ends_digest_identical() {
    assert_covers(
        "ALL_WORKLOAD",
        limiter_algorithms(),
        ALL_WORKLOAD.iter().flat_map(|words| words.iter()),
    );
    let (_ms, _rs, mut m, mut r) = pair();
    for _ in 0..6 {
        for words in ALL_WORKLOAD {
            all(&mut m, words);
            clock_advance(&mut m, 137);
        }
    }
    wait_replica(&mut m);
    let (on_master, on_replica) = (snapshot(&mut m), snapshot(&mut r));
    assert_eq!(on_master.len(), workload_keys());
    assert_eq!(on_master, on_replica);
    let digest =
        |c: &mut Connection| -> String { redis::cmd("DEBUG").arg("DIGEST").query(c).unwrap() };
    assert_eq!(digest(&mut m), digest(&mut r));
}

/// What a replica receives, as MONITOR shows it: (command, key) for MULTI, EXEC, RL.SETSTATE
/// and SET, up to `SET marker`.
fn stream_until_marker(monitor: &mut BufReader<TcpStream>) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    loop {
        let mut line = String::new();
        let n = monitor.read_line(&mut line).expect("MONITOR line");
        assert!(n > 0, "MONITOR closed");
        // +1700000000.000000 [0 127.0.0.1:port] "CMD" "key" ...
        let Some((_, words)) = line.split_once("] ") else {
            continue;
        };
        let mut quoted = words.split('"').skip(1).step_by(2);
        let command = quoted.next().unwrap_or_default().to_uppercase();
        let key = quoted.next().unwrap_or_default().to_string();
        if !["MULTI", "EXEC", "RL.SETSTATE", "SET"].contains(&command.as_str()) {
            continue;
        }
        let done = command == "SET" && key == "marker";
        seen.push((command, key));
        if done {
            return seen;
        }
    }
}

/// The effects of one call reach the replica in one MULTI/EXEC, one RL.SETSTATE per changed key
/// only; a denial or a peek sends nothing, a denial that changes a policy sends that key.
#[test]
fn effects_of_one_call_arrive_together_changed_keys_only() {
    let (_ms, rs, mut m, _r) = pair();
    let mut monitor = TcpStream::connect(("127.0.0.1", rs.port)).unwrap();
    monitor
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    monitor.write_all(b"MONITOR\r\n").unwrap();
    let mut monitor = BufReader::new(monitor);
    let mut ok = String::new();
    monitor.read_line(&mut ok).unwrap();
    assert_eq!(ok.trim(), "+OK");

    let admit_both = [
        "RL.ALL", "2", "r:a", "r:b", "GCRA", "2", "60000", "GCRA", "5", "60000",
    ];
    assert_eq!(all(&mut m, &admit_both).0[0], 1);
    // r:b looked at (COST 0): only r:a and r:c change.
    let c_not_b = [
        "RL.ALL", "3", "r:a", "r:b", "r:c", "GCRA", "2", "60000", "GCRA", "5", "60000", "COST",
        "0", "GCRA", "1", "60000",
    ];
    assert_eq!(all(&mut m, &c_not_b).0[0], 1);
    wait_replica(&mut m);
    let before = offset(&mut m);
    // r:a is spent: denied; then peeks, over stored and over fresh keys.
    assert_eq!(all(&mut m, &admit_both).0[0], 0);
    let peek = [
        "RL.ALL", "2", "r:a", "r:new", "GCRA", "2", "60000", "COST", "0", "GCRA", "5", "60000",
        "COST", "0",
    ];
    assert_eq!(all(&mut m, &peek).0[0], 0);
    let fresh_peek = [
        "RL.ALL", "2", "r:x", "r:y", "GCRA", "2", "60000", "COST", "0", "GCRA", "5", "60000",
        "COST", "0",
    ];
    assert_eq!(all(&mut m, &fresh_peek).0[0], 1);
    assert_eq!(offset(&mut m), before, "a denial or a peek was propagated");
    // Denied by r:a, but r:b's policy changes (5 -> 6 per minute): r:b alone is sent.
    let new_policy = [
        "RL.ALL", "2", "r:a", "r:b", "GCRA", "2", "60000", "GCRA", "6", "60000",
    ];
    assert_eq!(all(&mut m, &new_policy).0[0], 0);
    assert!(offset(&mut m) > before);
    cmd(&mut m, &["SET", "marker", "1"]).unwrap();
    let pair = |c: &str, k: &str| (c.to_string(), k.to_string());
    assert_eq!(
        stream_until_marker(&mut monitor),
        [
            pair("MULTI", ""),
            pair("RL.SETSTATE", "r:a"),
            pair("RL.SETSTATE", "r:b"),
            pair("EXEC", ""),
            pair("MULTI", ""),
            pair("RL.SETSTATE", "r:a"),
            pair("RL.SETSTATE", "r:c"),
            pair("EXEC", ""),
            pair("RL.SETSTATE", "r:b"),
            pair("SET", "marker"),
        ]
    );
}

#[test]
fn aof_restart_keeps_the_states() {
    let mut s = Server::with(&["--appendonly", "yes", "--appendfsync", "always"], &[]);
    let mut c = s.connect();
    clock_set(&mut c, T0_MS);
    wait_persistence_idle(&mut c);
    for _ in 0..4 {
        for words in ALL_WORKLOAD {
            all(&mut c, words);
            clock_advance(&mut c, 91);
        }
    }
    let before = snapshot(&mut c);
    assert_eq!(before.len(), workload_keys());
    s.restart("NOSAVE");
    let mut c = s.connect();
    assert_eq!(snapshot(&mut c), before);
    // And the limiters go on from there.
    clock_set(&mut c, T0_MS + 28 * 91);
    assert_eq!(all(&mut c, ALL_WORKLOAD[0]).1[1][1], 20);
}

/// On a 3-master cluster, a tenant's keys under one hash tag are decided together on the master
/// of their slot (a cluster client finds it; another master answers MOVED); keys in two slots
/// get Redis's CROSSSLOT.
#[test]
fn cluster_same_slot_works_cross_slot_is_refused() {
    let cluster = Cluster::start(5000);
    let (tenant, key) = ("rl:{tenant:7}:tenant", "rl:{tenant:7}:key:abc");
    assert_eq!(slot(tenant), slot(key));
    let words = [
        "RL.ALL",
        "2",
        key,
        tenant,
        "TOKENBUCKET",
        "100",
        "60000",
        "COST",
        "20",
        "FIXEDWINDOW",
        "1000",
        "86400000",
    ];
    let to_cmd = |words: &[&str]| {
        let mut command = redis::cmd(words[0]);
        for w in &words[1..] {
            command.arg(*w);
        }
        command
    };
    let mut client = cluster.client();
    for i in 0..5 {
        let reply: Vec<Vec<i64>> = to_cmd(&words).query(&mut client).unwrap();
        assert_eq!(reply[1], [1, 100, 80 - 20 * i, -1, 12000 * (i + 1)]);
        assert_eq!(reply[2][2], 999 - i);
    }
    let reply: Vec<Vec<i64>> = to_cmd(&words).query(&mut client).unwrap();
    assert_eq!(reply[0][0], 0, "the key's bucket is spent");
    assert_eq!(reply[2][2], 995, "the tenant kept its tokens");

    let owner = cluster.owner(slot(tenant));
    let mut on_owner = cluster.connect(owner);
    let count: i64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot(tenant))
        .query(&mut on_owner)
        .unwrap();
    assert_eq!(count, 2);
    let other = cluster
        .masters()
        .into_iter()
        .find(|&m| m != owner)
        .expect("another master");
    let e = err(&mut cluster.connect(other), &words);
    assert!(e.starts_with("MOVED"), "{e}");

    let elsewhere = "rl:{tenant:8}:key:abc";
    assert_ne!(slot(elsewhere), slot(tenant));
    let mut cross = words;
    cross[2] = elsewhere;
    for node in cluster.masters() {
        let e = err(&mut cluster.connect(node), &cross);
        assert!(e.starts_with("CROSSSLOT"), "{e}");
    }
    let e = to_cmd(&cross)
        .query::<Value>(&mut client)
        .expect_err("cross-slot keys");
    assert!(
        e.to_string().contains("CROSSSLOT") || e.to_string().contains("slot"),
        "{e}"
    );
    // Nothing was written anywhere but the tenant's two keys on their master.
    let sizes: Vec<i64> = cluster
        .masters()
        .into_iter()
        .map(|m| dbsize(&mut cluster.connect(m)))
        .collect();
    assert_eq!(sizes.iter().sum::<i64>(), 2, "{sizes:?}");
    assert_eq!(dbsize(&mut on_owner), 2);
}

/// A sliding log admitted by `RL.ALL` under the policy it holds goes out as a delta, as from
/// `RL.SLIDINGLOG`: the bytes propagated per call do not grow with the log (a full state of
/// 1,000 entries is about 8 KB), and the replica ends digest-identical, the log of a denied call
/// untouched.
#[test]
fn a_sliding_log_charged_by_rl_all_propagates_a_delta() {
    let (_ms, _rs, mut m, mut r) = pair();
    let admit = [
        "RL.ALL",
        "2",
        "d:{t}:log",
        "d:{t}:day",
        "SLIDINGLOG",
        "5000",
        "60000",
        "FIXEDWINDOW",
        "100000",
        "86400000",
    ];
    for _ in 0..1000 {
        assert_eq!(all(&mut m, &admit).0[0], 1);
        clock_advance(&mut m, 1);
    }
    wait_replica(&mut m);
    let before = offset(&mut m);
    for _ in 0..10 {
        assert_eq!(all(&mut m, &admit).0[0], 1);
        clock_advance(&mut m, 1);
    }
    let per_call = (offset(&mut m) - before) / 10;
    assert!(
        per_call < 400,
        "{per_call} bytes propagated per call on a 1,000-entry log"
    );
    // The day's quota denies a call that the log admits: the log is not charged.
    let log_before = dump(&mut m, "d:{t}:log");
    let denied = [&admit[..], &["COST", "100000"]].concat();
    assert_eq!(all(&mut m, &denied).0[0], 0);
    assert_eq!(dump(&mut m, "d:{t}:log"), log_before);
    wait_replica(&mut m);
    let digest =
        |c: &mut Connection| -> String { redis::cmd("DEBUG").arg("DIGEST").query(c).unwrap() };
    assert_eq!(digest(&mut m), digest(&mut r));
    assert_eq!(snapshot(&mut m), snapshot(&mut r));
    // The in-place change keeps the entry gauge exact, on both sides.
    for c in [&mut m, &mut r] {
        let inspected: Vec<Value> = redis::cmd("RL.INSPECT").arg("d:{t}:log").query(c).unwrap();
        let entries = inspected
            .chunks(2)
            .find(|kv| kv[0] == Value::BulkString(b"entries".to_vec()))
            .map(|kv| redis::from_redis_value::<i64>(&kv[1]).unwrap());
        let info: String = redis::cmd("INFO").arg("ratelimit").query(c).unwrap();
        let gauge = info
            .lines()
            .find_map(|l| l.strip_prefix("ratelimit_sliding_log_entries:"))
            .and_then(|v| v.trim().parse::<i64>().ok());
        assert_eq!(gauge, entries);
    }
}
