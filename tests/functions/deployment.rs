//! The library deployed: effects replicated to a replica that never runs a function, memory
//! per key beside the module's, and a cluster with the library loaded on every node.

use super::*;
use crate::calls::{limiters, run_trace};

/// Effects replication: a replica ends with the master's exact keys and expiries, and never
/// runs a function (its command statistics show the effects, no FCALL).
#[test]
fn replicas_receive_effects_never_calls() {
    let (master, mut m) = both();
    let replica = Server::start();
    let mut r = replica.connect();
    // Another clock on the replica's module: nothing there may decide.
    clock_set(&mut r, T0_MS + 12_345_678);
    replicate(&mut r, &master);
    cmd(&mut r, &["CONFIG", "RESETSTAT"]).unwrap();
    let mut rng = Rng(77);
    let lims = limiters(&mut rng, 1);
    run_trace(&mut m, 77, &lims, 300);
    wait_replica(&mut m);
    let keys: Vec<String> = redis::cmd("KEYS").arg("f:*").query(&mut m).unwrap();
    assert!(keys.len() >= 4, "{keys:?}");
    for k in &keys {
        assert_eq!(dump(&mut m, k), dump(&mut r, k), "{k}");
        assert_eq!(pexpiretime(&mut m, k), pexpiretime(&mut r, k), "{k}");
    }
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut r)
        .unwrap();
    assert!(!stats.contains("cmdstat_fcall"), "{stats}");
    assert!(stats.contains("cmdstat_set:"), "{stats}");
    // And a replica refuses the write functions, as it refuses the module's commands.
    let e = cmd(&mut r, &["FCALL", "rl_gcra", "1", "f:x", "10", "1000"]).unwrap_err();
    assert!(e.to_string().contains("read only"), "{e}");
    // Its copy of the library reads its own clock (a stored arrival time far ahead of a clock
    // is refused, as a planted one): about the master's.
    cmd(
        &mut r,
        &[
            "FCALL",
            "rl_test_clock",
            "0",
            &(T0_MS + 3_000_000).to_string(),
        ],
    )
    .unwrap();
    assert!(cmd(&mut r, &["FCALL", "rl_peek", "1", &keys[0]]).is_ok());
}

/// The hot path's shortest TTL on the shipped file (the server's clock): `SET … PX 1000`, which
/// Redis 7 replicates as `SET … PXAT` with the absolute time. Through `FCALL` and the scripts
/// backend, a key whose reset is 1 ms lives at least 1 s from the call's `TIME`, and a replica
/// that applies the write 200 ms late (busy in `DEBUG SLEEP`) ends with the master's exact
/// expiry, which a relative `PX` would have put 200 ms later. (A replica answers a key past its
/// expiry as missing: on a host so loaded that 1 s went by before the replica was read, the
/// attempt says nothing and is made again on a new key.)
#[test]
fn the_shortest_ttl_replicates_as_an_absolute_expiry() {
    let master = Server::start();
    let mut m = master.connect();
    load(&mut m, LIBRARY);
    let replica = Server::start();
    let mut r = replica.connect();
    replicate(&mut r, &master);
    let script = ratelimit_client::scripts::generate(LIBRARY, "rl_gcra").expect("the marks");
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(&script)
        .query(&mut m)
        .unwrap();
    let now = |c: &mut Connection| -> i64 {
        let time: Vec<String> = redis::cmd("TIME").query(c).unwrap();
        time[0].parse::<i64>().unwrap() * 1000 + time[1].parse::<i64>().unwrap() / 1000
    };
    for (name, head) in [
        ("f", ["FCALL", "rl_gcra"]),
        ("s", ["EVALSHA", sha.as_str()]),
    ] {
        let mut checked = false;
        for attempt in 0..5 {
            let key = format!("{name}:px:{attempt}");
            let mut busy = replica.connect();
            let sleeper = std::thread::spawn(move || cmd(&mut busy, &["DEBUG", "SLEEP", "0.2"]));
            std::thread::sleep(std::time::Duration::from_millis(50));
            let before = now(&mut m);
            let mut words = head.to_vec();
            words.extend(["1", &key, "1000", "1000"]);
            assert_eq!(rl(&mut m, &words), [1, 1000, 999, -1, 1], "{key}");
            let at = pexpiretime(&mut m, &key);
            // 1 s from the server's clock during the call: bounded by its clock read before and
            // after, whatever time the loaded host took between them.
            let after = now(&mut m);
            assert!(
                at >= before + 1000 && at <= after + 1000,
                "{key}: {at} from {before} to {after}"
            );
            sleeper.join().unwrap().unwrap();
            wait_replica(&mut m);
            let copy = pexpiretime(&mut r, &key);
            if copy == -2 && now(&mut r) >= at {
                continue;
            }
            assert_eq!(copy, at, "{key}");
            checked = true;
            break;
        }
        assert!(
            checked,
            "{name}: the replica was read after the key's expiry 5 times"
        );
    }
}

/// `MEMORY USAGE` of one key per algorithm, the module's beside the library's, after the same
/// requests (printed; docs/functions.md quotes it). The library's must stay within a bound.
#[test]
fn memory_per_key() {
    let (_s, mut c) = both();
    println!("{:<18} {:>7} {:>8}", "algorithm", "module", "library");
    for (command, function, _, _) in ALGORITHMS {
        for i in 0..10u64 {
            at(&mut c, T0_MS + i);
            cmd(&mut c, &[command, "m:k", "100", "60000"]).unwrap();
            cmd(&mut c, &["FCALL", function, "1", "f:k", "100", "60000"]).unwrap();
        }
        let usage = |c: &mut Connection, k: &str| -> i64 {
            redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(k)
                .arg("SAMPLES")
                .arg(0)
                .query(c)
                .unwrap()
        };
        let (m, f) = (usage(&mut c, "m:k"), usage(&mut c, "f:k"));
        println!("{command:<18} {m:>7} {f:>8}");
        assert!(f < 1000, "{command}: {f} bytes");
        cmd(&mut c, &["DEL", "m:k", "f:k"]).unwrap();
    }
}

/// A cluster: the library loaded on every master with `redis-cli --cluster call` (masters pass
/// it to their replicas), called through a cluster-aware client on keys in every shard, and
/// RL.ALL's form over hash-tagged keys.
#[test]
fn cluster_with_the_library_on_every_node() {
    let cluster = Cluster::start(5000);
    let first = cluster.live().next().unwrap();
    let node = format!("127.0.0.1:{}", cluster.nodes[first].port);
    // The recipe of docs/functions.md, verbatim but for the node: it prints one line per
    // master, not the library redis-cli echoes as the command it calls.
    let docs = include_str!("../../docs/functions.md");
    let recipe = docs
        .lines()
        .find(|l| l.starts_with("redis-cli --cluster call "))
        .expect("the recipe in docs/functions.md")
        .replace("127.0.0.1:7000", &node);
    let out = std::process::Command::new("sh")
        .args(["-c", &recipe])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines.len(), cluster.masters().len(), "{printed}");
    assert!(
        lines.iter().all(|l| l.ends_with(": ratelimit")),
        "{printed}"
    );
    for n in cluster.live().collect::<Vec<_>>() {
        let mut c = cluster.connect(n);
        wait_for("the library on every node", || {
            let list: Value = redis::cmd("FUNCTION").arg("LIST").query(&mut c).unwrap();
            format!("{list:?}").contains("rl_gcra")
        });
    }
    let mut client = cluster.client();
    let tags = tags_for_all_slots();
    let masters = cluster.masters();
    let mut shards = std::collections::BTreeSet::new();
    for slot in (0..16384u16).step_by(1000) {
        let key = format!("{{{}}}:user", tags[slot as usize]);
        let r: Vec<i64> = redis::cmd("FCALL")
            .arg("rl_gcra")
            .arg(1)
            .arg(&key)
            .arg(10)
            .arg(60_000)
            .query(&mut client)
            .unwrap();
        assert_eq!(r, [1, 10, 9, -1, 6000], "{key}");
        shards.insert(cluster.owner(slot));
        let all: Vec<Vec<i64>> = redis::cmd("FCALL")
            .arg("rl_all")
            .arg(2)
            .arg(&key)
            .arg(format!("{{{}}}:ip", tags[slot as usize]))
            .arg("GCRA")
            .arg(10)
            .arg(60_000)
            .arg("FIXEDWINDOW")
            .arg(100)
            .arg(86_400_000)
            .query(&mut client)
            .unwrap();
        assert_eq!(all[0][..4], [1, 10, 8, -1], "{key}");
    }
    assert_eq!(shards.len(), masters.len());
    // Keys in different slots: the cluster refuses the call before the library runs.
    let e = redis::cmd("FCALL")
        .arg("rl_all")
        .arg(2)
        .arg("a")
        .arg("b")
        .arg("GCRA")
        .arg(1)
        .arg(1000)
        .arg("GCRA")
        .arg(1)
        .arg(1000)
        .query::<Value>(&mut client)
        .unwrap_err();
    assert!(e.to_string().to_uppercase().contains("CROSSSLOT"), "{e}");
}
