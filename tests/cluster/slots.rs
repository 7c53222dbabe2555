//! Every limiter command routed by a cluster-aware client: `COMMAND GETKEYSANDFLAGS` names each
//! key, every limiter runs on every slot and on hash tags, and resharding a slot with `MIGRATE`
//! keeps state and expiry.

use std::collections::BTreeSet;
use std::time::Instant;

use redis::cluster::cluster_pipe;

use super::*;

/// `cmd` sent right after `ASKING` on the same connection: how a node in IMPORTING state is
/// asked about a slot it does not serve yet.
fn asking<T: redis::FromRedisValue>(c: &mut Connection, cmd: &redis::Cmd) -> T {
    let mut pipe = redis::pipe();
    pipe.cmd("ASKING").ignore().add_command(cmd.clone());
    let (v,): (T,) = pipe.query(c).unwrap();
    v
}

fn cluster_cmd(c: &mut Connection, words: &[&str]) {
    let mut command = redis::cmd("CLUSTER");
    for w in words {
        command.arg(*w);
    }
    let _: Value = command
        .query(c)
        .unwrap_or_else(|e| panic!("CLUSTER {words:?}: {e}"));
}

#[test]
fn command_getkeysandflags_names_the_key_of_every_command() {
    let s = Server::start();
    let mut c = s.connect();
    let keys_and_flags = |c: &mut Connection, words: &[String]| -> Vec<(String, Vec<String>)> {
        redis::cmd("COMMAND")
            .arg("GETKEYSANDFLAGS")
            .arg(words)
            .query(c)
            .unwrap_or_else(|e| panic!("{words:?}: {e}"))
    };
    for limiter in all_limiters() {
        let flags: Vec<String> = limiter.key_flags.iter().map(|f| f.to_string()).collect();
        for words in limiter.session {
            let words = call(words, "k");
            assert_eq!(
                keys_and_flags(&mut c, &words),
                [("k".to_string(), flags.clone())],
                "{words:?}"
            );
        }
        // Clients that predate key specs read the first/last/step of COMMAND INFO.
        let info: Vec<Vec<Value>> = redis::cmd("COMMAND")
            .arg("INFO")
            .arg(limiter.command)
            .query(&mut c)
            .unwrap();
        let entry = &info[0];
        let ints: Vec<i64> = entry[3..6]
            .iter()
            .map(|v| redis::from_redis_value(v).unwrap())
            .collect();
        assert_eq!(ints, [1, 1, 1], "{}", limiter.command);
        let command_flags: Vec<String> = redis::from_redis_value(&entry[2]).unwrap();
        assert!(
            command_flags.iter().any(|f| f == "write"),
            "{}: replicas refuse it only if it is a write command",
            limiter.command
        );
    }
    // The internal effect command changes its key (its DELTA form reads the state it changes);
    // the debug command has none.
    let setstate = call(&["RL.SETSTATE", KEY, "state", "PXAT", "5"], "k");
    assert_eq!(
        keys_and_flags(&mut c, &setstate),
        [(
            "k".to_string(),
            vec!["RW".to_string(), "update".to_string()]
        )]
    );
    assert_eq!(
        err(
            &mut c,
            &["COMMAND", "GETKEYSANDFLAGS", "RL.DEBUG", "CLOCK", "GET"]
        ),
        "ERR The command has no key arguments"
    );
}

#[test]
fn every_limiter_runs_on_every_slot_and_on_hash_tags() {
    let cluster = Cluster::start(CALM_NODE_TIMEOUT_MS);
    let (_reference, mut r) = reference();
    let mut c = cluster.client();
    let n = all_limiters().len();
    let keys = keys_for_all_slots("user", n);

    // A first decision on a fresh key in every slot for every limiter, pipelined per node.
    for (j, limiter) in all_limiters().iter().enumerate() {
        let first = limiter.session[0];
        let expected = query(&mut r, &call(first, &format!("fresh:{j}")));
        for chunk in keys.chunks(2048) {
            let mut pipe = cluster_pipe();
            for slot_keys in chunk {
                pipe.add_command(to_cmd(&call(first, &slot_keys[j])));
            }
            let replies: Vec<Value> = pipe
                .query(&mut c)
                .unwrap_or_else(|e| panic!("{}: {e}", limiter.command));
            for (slot_keys, reply) in chunk.iter().zip(&replies) {
                assert_eq!(reply, &expected, "{} {}", limiter.command, slot_keys[j]);
            }
        }
    }
    // Each key is on the master serving its slot: every slot there holds one key per limiter.
    for range in cluster.slots() {
        let mut m = cluster.connect(cluster.node_at(range.master));
        let mut pipe = redis::pipe();
        for s in range.start..=range.end {
            pipe.cmd("CLUSTER").arg("COUNTKEYSINSLOT").arg(s);
        }
        let counts: Vec<usize> = pipe.query(&mut m).unwrap();
        assert!(counts.iter().all(|&k| k == n), "{range:?}: {counts:?}");
        let size: usize = redis::cmd("DBSIZE").query(&mut m).unwrap();
        assert_eq!(size, n * usize::from(range.end - range.start + 1));
    }

    // Whole sessions, with time passing, on a sample of slots and on hash-tagged keys
    // (`{tenant:7}:key:1` …: one slot, one master, every algorithm side by side).
    let mut sample: Vec<(&Limiter, String)> = keys
        .iter()
        .step_by(257)
        .flat_map(|slot_keys| all_limiters().iter().zip(slot_keys.iter().cloned()))
        .collect();
    for (limiter, key) in &sample {
        query(&mut r, &call(limiter.session[0], key));
    }
    let tagged: Vec<(&Limiter, String)> = all_limiters()
        .iter()
        .enumerate()
        .flat_map(|(j, l)| (1..=3).map(move |i| (l, format!("{{tenant:7}}:key:{}", j * 3 + i))))
        .collect();
    let tenant_slot = slot("{tenant:7}");
    assert!(tagged.iter().all(|(_, k)| slot(k) == tenant_slot));
    step(&mut c, &mut r, &tagged, 0);
    sample.extend(tagged.iter().cloned());
    let longest = all_limiters()
        .iter()
        .map(|l| l.session.len())
        .max()
        .unwrap_or(1);
    for n in 1..3 * longest {
        advance(&cluster, &mut r, 150);
        step(&mut c, &mut r, &sample, n);
    }
    for (_, key) in &sample {
        assert_eq!(state(&mut c, key), state(&mut r, key), "{key}");
    }
    let mut owner = cluster.connect(cluster.owner(tenant_slot));
    let in_slot: usize = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(tenant_slot)
        .query(&mut owner)
        .unwrap();
    assert_eq!(
        in_slot,
        tagged.len() + n,
        "the tenant's keys and the slot's user keys"
    );
}

#[test]
fn resharding_a_slot_keeps_state_and_expiry() {
    let cluster = Cluster::start(CALM_NODE_TIMEOUT_MS);
    let (_reference, mut r) = reference();
    let mut c = cluster.client();
    let tags = tags_for_all_slots();
    let masters = cluster.masters();
    let (src, dst) = (masters[0], masters[1]);
    let (slot, tag) = slot_on(&cluster, src, &tags);
    let tag = tag.as_str();
    // Three keys of every algorithm in the slot, with state and an expiry.
    let keys: Vec<(&Limiter, String)> = all_limiters()
        .iter()
        .flat_map(|l| (0..3).map(move |i| (l, format!("{{{tag}}}:{}:{i}", l.command))))
        .collect();
    for n in 0..4 {
        step(&mut c, &mut r, &keys, n);
        advance(&cluster, &mut r, 40);
    }
    let (mut s, mut d) = (cluster.connect(src), cluster.connect(dst));
    let before: Vec<_> = keys.iter().map(|(_, k)| state(&mut s, k)).collect();

    // Move the slot: IMPORTING on the target, MIGRATING on the source, MIGRATE the keys.
    let (src_id, dst_id) = (cluster.id(src), cluster.id(dst));
    cluster_cmd(
        &mut d,
        &["SETSLOT", &slot.to_string(), "IMPORTING", &src_id],
    );
    cluster_cmd(
        &mut s,
        &["SETSLOT", &slot.to_string(), "MIGRATING", &dst_id],
    );
    let listed: BTreeSet<String> = redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(slot)
        .arg(1000)
        .query(&mut s)
        .unwrap();
    assert_eq!(listed, keys.iter().map(|(_, k)| k.clone()).collect());
    let mut migrate = redis::cmd("MIGRATE");
    migrate
        .arg("127.0.0.1")
        .arg(cluster.nodes[dst].port)
        .arg("")
        .arg(0)
        .arg(10_000)
        .arg("KEYS");
    for (_, key) in &keys {
        migrate.arg(key);
    }
    let started = Instant::now();
    let _: Value = migrate.query(&mut s).unwrap();
    // MIGRATE sends a relative TTL: the target's expiry is later by the time between the
    // source reading its clock and the target reading its own, which lies within the call.
    let within_ms = (started.elapsed().as_micros().div_ceil(1000) as i64).max(1);

    for ((_, key), (dumped, at)) in keys.iter().zip(&before) {
        let moved: Option<Vec<u8>> = asking(&mut d, redis::cmd("DUMP").arg(key));
        assert_eq!(&moved, dumped, "{key}: DUMP after MIGRATE");
        let moved_at: i64 = asking(&mut d, redis::cmd("PEXPIRETIME").arg(key));
        let shift = moved_at - at;
        assert!(
            (0..=within_ms).contains(&shift),
            "{key}: expiry moved by {shift} ms (MIGRATE took under {within_ms} ms)"
        );
    }
    let left: usize = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut s)
        .unwrap();
    assert_eq!(left, 0, "every key left the source");
    // Mid-migration the source answers ASK; the client follows it to the target, for moved
    // keys and for a new key of every algorithm.
    let fresh = all_limiters()
        .iter()
        .map(|l| (l, format!("{{{tag}}}:{}:new", l.command)));
    let keys: Vec<(&Limiter, String)> = keys.iter().cloned().chain(fresh).collect();
    step(&mut c, &mut r, &keys, 0);

    // Hand the slot over: the target first, then the source and the third master.
    for node in [dst, src, masters[2]] {
        cluster_cmd(
            &mut cluster.connect(node),
            &["SETSLOT", &slot.to_string(), "NODE", &dst_id],
        );
    }
    wait_for("every node to see the slot's new owner", || {
        cluster.settled() && cluster.owner(slot) == dst
    });
    for n in 1..4 {
        advance(&cluster, &mut r, 40);
        step(&mut c, &mut r, &keys, n);
    }
    // Every key now lives on the target (and its replica), decided exactly like the reference.
    let mut replica = cluster.connect(cluster.replica_of(dst));
    cmd(&mut replica, &["READONLY"]).unwrap();
    for (_, key) in &keys {
        let expected = state(&mut r, key);
        assert_eq!(state(&mut d, key), expected, "{key}");
        wait_for("the target's replica", || {
            state(&mut replica, key) == expected
        });
    }
    let left: usize = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut s)
        .unwrap();
    assert_eq!(left, 0);
}
