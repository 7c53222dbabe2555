//! Redis Cluster and failover: every limiter command (the `LIMITERS` table) routed by a
//! cluster-aware client over all 16384 slots and on hash-tagged keys, resharding with
//! `MIGRATE`, manual and crash failover, hot keys split over shards, and replicas refusing writes.
//!
//! Each test starts its own 3-master/3-replica cluster on loopback (killed on drop) and compares
//! every decision with a standalone reference server at the same pinned clock: "the cluster
//! decides exactly as one server would".

mod support;

use std::collections::BTreeSet;
use std::time::Instant;

use redis::cluster::{cluster_pipe, ClusterConnection};
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::ConnectionLike;
use support::cluster::*;
use support::limiters::*;
use support::*;

/// `cluster-node-timeout` where no failure is expected: long enough that a loaded machine does
/// not trigger a failover by accident.
const CALM_NODE_TIMEOUT_MS: u64 = 5000;

/// A standalone server at the cluster's pinned clock: what every decision must equal.
fn reference() -> (Server, Connection) {
    let s = Server::start();
    let mut c = s.connect();
    clock_set(&mut c, T0_MS);
    (s, c)
}

fn query(c: &mut dyn ConnectionLike, words: &[String]) -> Value {
    to_cmd(words)
        .query(c)
        .unwrap_or_else(|e| panic!("{words:?}: {e}"))
}

/// A key's `DUMP` and absolute expiry.
fn state(c: &mut dyn ConnectionLike, key: &str) -> (Option<Vec<u8>>, i64) {
    let d = redis::cmd("DUMP").arg(key).query(c).unwrap();
    let at = redis::cmd("PEXPIRETIME").arg(key).query(c).unwrap();
    (d, at)
}

/// One key per limiter: `{tag}:<command>`.
fn tagged_keys(tag: &str) -> Vec<(&'static Limiter, String)> {
    all_limiters()
        .iter()
        .map(|l| (l, format!("{{{tag}}}:{}", l.command)))
        .collect()
}

/// Runs call number `n` of each key's session (cycling through it) on the cluster and on
/// the reference; the replies must be equal.
fn step(c: &mut dyn ConnectionLike, r: &mut Connection, keys: &[(&Limiter, String)], n: usize) {
    for (limiter, key) in keys {
        let words = call(limiter.session[n % limiter.session.len()], key);
        assert_eq!(query(c, &words), query(r, &words), "{words:?}");
    }
}

fn advance(cluster: &Cluster, r: &mut Connection, ms: i64) {
    cluster.clock_advance(ms);
    clock_advance(r, ms);
}

/// A slot served by `master` and a hash tag that lands in it.
fn slot_on(cluster: &Cluster, master: usize, tags: &[String]) -> (u16, String) {
    let port = cluster.nodes[master].port;
    let range = cluster
        .slots()
        .into_iter()
        .find(|r| r.master == port)
        .expect("the master serves slots");
    (range.start, tags[usize::from(range.start)].clone())
}

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

#[test]
fn manual_failover_continues_exactly() {
    let cluster = Cluster::start(CALM_NODE_TIMEOUT_MS);
    let (_reference, mut r) = reference();
    let mut c = cluster.client();
    let tags = tags_for_all_slots();
    let shards: Vec<(usize, Vec<(&Limiter, String)>)> = cluster
        .masters()
        .into_iter()
        .map(|m| (m, tagged_keys(&slot_on(&cluster, m, &tags).1)))
        .collect();
    let all: Vec<(&Limiter, String)> = shards.iter().flat_map(|(_, k)| k.clone()).collect();
    let mut n = 0;
    for _ in 0..3 {
        step(&mut c, &mut r, &all, n);
        advance(&cluster, &mut r, 30);
        n += 1;
    }
    // Fail over every shard in turn; after each, the promoted replica holds exactly the
    // master's state and the next decisions are exactly the reference's.
    for (master, keys) in &shards {
        let replica = cluster.replica_of(*master);
        let mut m = cluster.connect(*master);
        let before: Vec<_> = keys.iter().map(|(_, k)| state(&mut m, k)).collect();
        cmd(&mut cluster.connect(replica), &["CLUSTER", "FAILOVER"]).unwrap();
        cluster.wait_promoted(replica);
        assert_eq!(role(&mut m), "slave");
        let mut p = cluster.connect(replica);
        let after: Vec<_> = keys.iter().map(|(_, k)| state(&mut p, k)).collect();
        assert_eq!(after, before);
        for _ in 0..2 {
            step(&mut c, &mut r, &all, n);
            advance(&cluster, &mut r, 30);
            n += 1;
        }
    }
}

/// What one crash failover left behind, per key.
struct Crash {
    /// State-changing decisions the master acknowledged to the client.
    admits: Vec<usize>,
    /// Of those, how many the promoted replica does not know (always the last ones).
    forgotten: Vec<usize>,
    /// `WAIT 1` replies, one per decision in order, when the client waited.
    acks: Vec<Vec<i64>>,
}

impl Crash {
    fn admits(&self) -> usize {
        self.admits.iter().sum()
    }

    fn forgotten(&self) -> usize {
        self.forgotten.iter().sum()
    }
}

/// `WAIT 1 <ms>` on the cluster client's connection to the master of `slot`: the connection
/// that carried the decisions, as WAIT counts the replicas that acknowledged this
/// connection's writes.
fn wait_one(c: &mut ClusterConnection, slot: u16, ms: u64) -> i64 {
    let route = Route::new(slot, SlotAddr::Master);
    let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
    let v = c
        .route_command(redis::cmd("WAIT").arg(1).arg(ms), routing)
        .unwrap();
    redis::from_redis_value(&v).unwrap()
}

/// Runs `rounds` of every limiter's session on `keys` through the cluster client; the same calls
/// on the reference give the state after each decision (`history`).
fn crash_rounds(
    c: &mut ClusterConnection,
    r: &mut Connection,
    keys: &[(&Limiter, String)],
    history: &mut [Vec<Vec<u8>>],
    rounds: usize,
    wait: Option<(u16, u64)>,
    acks: &mut [Vec<i64>],
) {
    for _ in 0..rounds {
        for (((limiter, key), states), acks) in
            keys.iter().zip(history.iter_mut()).zip(acks.iter_mut())
        {
            for words in limiter.session {
                let words = call(words, key);
                let reply = query(c, &words);
                if let Some((slot, ms)) = wait {
                    acks.push(wait_one(c, slot, ms));
                }
                assert_eq!(reply, query(r, &words), "{words:?}");
                let after = dump(r, key).expect("a decision leaves the key");
                assert_ne!(
                    states.last(),
                    Some(&after),
                    "{words:?} must change the state (see LIMITERS)"
                );
                states.push(after);
            }
        }
    }
}

/// Decisions on keys of `master`, then SIGKILL it and let its replica take over. With `lag`,
/// the replica is caught up (a `WAIT` by the harness), then stops applying its master's stream
/// (`CLIENT PAUSE … WRITE` on the replica also holds the replication link's writes) for the
/// last `lag` rounds; once the link is seen down the pause is lifted, and what was still
/// unapplied is dropped with the link.
fn crash(
    cluster: &mut Cluster,
    r: &mut Connection,
    master: usize,
    tag: &str,
    slot: u16,
    wait: bool,
    lag: usize,
) -> Crash {
    const ROUNDS: usize = 4;
    let replica = cluster.replica_of(master);
    let keys = tagged_keys(tag);
    let mut history = vec![Vec::new(); keys.len()];
    let mut acks = vec![Vec::new(); keys.len()];
    let mut c = cluster.client();
    let up = wait.then_some((slot, 10_000));
    crash_rounds(&mut c, r, &keys, &mut history, ROUNDS - lag, up, &mut acks);
    let mut rc = cluster.connect(replica);
    if lag > 0 {
        assert_eq!(wait_one(&mut c, slot, 10_000), 1, "the replica caught up");
        cmd(&mut rc, &["CLIENT", "PAUSE", "60000", "WRITE"]).unwrap();
        let stalled = wait.then_some((slot, 50));
        crash_rounds(&mut c, r, &keys, &mut history, lag, stalled, &mut acks);
    }
    cluster.kill(master);
    if lag > 0 {
        wait_for("the replica to lose its master", || {
            let text: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut rc)
                .unwrap();
            info_field(&text, "master_link_status").as_deref() == Some("down")
        });
        cmd(&mut rc, &["CLIENT", "UNPAUSE"]).unwrap();
    }
    cluster.wait_promoted(replica);
    let mut promoted = cluster.connect(replica);
    let mut forgotten = Vec::new();
    for ((_, key), states) in keys.iter().zip(&history) {
        // The promoted state is one the master had: replication loses a suffix, never more.
        let remembered = match dump(&mut promoted, key) {
            None => 0,
            Some(d) => {
                1 + states
                    .iter()
                    .rposition(|s| *s == d)
                    .unwrap_or_else(|| panic!("{key}: the promoted state is none the master had"))
            }
        };
        forgotten.push(states.len() - remembered);
    }
    // The cluster decides again, on the promoted replica.
    let (limiter, key) = &keys[0];
    query(&mut cluster.client(), &call(limiter.session[0], key));
    Crash {
        admits: history.iter().map(Vec::len).collect(),
        forgotten,
        acks,
    }
}

#[test]
fn crash_failover_forgets_only_unacknowledged_admits() {
    // A short node timeout: failure detection and promotion take about 2–4 s.
    let mut cluster = Cluster::start(1500);
    let (_reference, mut r) = reference();
    let tags = tags_for_all_slots();
    let masters = cluster.masters();
    let shard = |cluster: &Cluster, i: usize| {
        let (slot, tag) = slot_on(cluster, masters[i], &tags);
        (masters[i], tag, slot)
    };
    const LAG: usize = 2;

    // 1. No WAIT, replica keeping up, SIGKILL right after the last reply.
    let (m, tag, slot) = shard(&cluster, 0);
    let fast = crash(&mut cluster, &mut r, m, &tag, slot, false, 0);
    eprintln!(
        "crash failover, no WAIT, replica keeping up: {} of {} admits forgotten",
        fast.forgotten(),
        fast.admits()
    );

    // 2. No WAIT, replica lagging for the last LAG rounds: exactly those are forgotten.
    let (m, tag, slot) = shard(&cluster, 1);
    let lagging = crash(&mut cluster, &mut r, m, &tag, slot, false, LAG);
    eprintln!(
        "crash failover, no WAIT, replica lagging: {} of {} admits forgotten",
        lagging.forgotten(),
        lagging.admits()
    );
    let lagged: Vec<usize> = all_limiters()
        .iter()
        .map(|l| LAG * l.session.len())
        .collect();
    assert_eq!(lagging.forgotten, lagged);

    // 3. WAIT 1 after every decision, replica lagging as in 2: WAIT answers 1 for every
    //    admit the promoted replica remembers and 0 for every one it forgot.
    let (m, tag, slot) = shard(&cluster, 2);
    let waited = crash(&mut cluster, &mut r, m, &tag, slot, true, LAG);
    let unconfirmed: usize = waited.acks.iter().flatten().filter(|&&a| a == 0).count();
    eprintln!(
        "crash failover, WAIT 1 after each decision, replica lagging: {} of {} admits \
         forgotten; WAIT answered 0 for {unconfirmed}, 1 for the others",
        waited.forgotten(),
        waited.admits()
    );
    assert_eq!(waited.forgotten, lagged);
    for ((acks, admits), forgotten) in waited
        .acks
        .iter()
        .zip(&waited.admits)
        .zip(&waited.forgotten)
    {
        // Per key, in order: 1 for each remembered admit, 0 for each forgotten one.
        let mut expected = vec![1; admits - forgotten];
        expected.resize(*admits, 0);
        assert_eq!(acks, &expected);
    }
    assert!(cluster.none_crashed());
}

#[test]
fn replicas_refuse_every_limiter_command() {
    // A plain replica answers Redis's own READONLY error, before the module runs.
    let master = Server::with(&["--repl-diskless-sync-delay", "0"], &[]);
    let mut replica = Server::start();
    let mut r = replica.connect();
    cmd(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
    )
    .unwrap();
    wait_for("replica link up", || {
        let text: String = redis::cmd("INFO").arg("replication").query(&mut r).unwrap();
        info_field(&text, "master_link_status").as_deref() == Some("up")
    });
    clock_set(&mut r, T0_MS);
    let mut refused: Vec<Vec<String>> = all_limiters()
        .iter()
        .flat_map(|l| l.session.iter().map(|w| call(w, "k")))
        .collect();
    refused.push(call(&["RL.GCRA", KEY, "10", "1000", "COST", "0"], "k"));
    refused.push(call(&["RL.SETSTATE", KEY, "state", "PXAT", "5"], "k"));
    const READONLY: &str = "READONLY You can't write against a read only replica.";
    for words in &refused {
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        assert_eq!(err(&mut r, &words), READONLY, "{words:?}");
        // Nor through a script or a transaction.
        let mut script = vec!["EVAL", "return redis.call(unpack(ARGV))", "1", "k"];
        script.extend(&words);
        let e = err(&mut r, &script);
        assert!(e.starts_with(READONLY), "{words:?} in a script: {e}");
        cmd(&mut r, &["MULTI"]).unwrap();
        assert_eq!(err(&mut r, &words), READONLY, "{words:?} in MULTI");
        let e = err(&mut r, &["EXEC"]);
        assert!(e.starts_with("EXECABORT"), "{e}");
    }
    let size: i64 = redis::cmd("DBSIZE").query(&mut r).unwrap();
    assert_eq!(size, 0);
    assert!(replica.alive());
    // The key-less debug command still runs there (how the tests pin replicas' clocks).
    let now: i64 = redis::cmd("RL.DEBUG")
        .arg("CLOCK")
        .arg("GET")
        .query(&mut r)
        .unwrap();
    assert_eq!(now, T0_MS as i64);

    // In a cluster, a replica redirects them to its master (MOVED), also after READONLY,
    // which lets a connection read from a replica but never write.
    let mut cluster = Cluster::start(CALM_NODE_TIMEOUT_MS);
    let tags = tags_for_all_slots();
    for master in cluster.masters() {
        let (slot, tag) = slot_on(&cluster, master, &tags);
        let moved = format!("MOVED {slot} 127.0.0.1:{}", cluster.nodes[master].port);
        let mut rc = cluster.connect(cluster.replica_of(master));
        for readonly in [false, true] {
            if readonly {
                cmd(&mut rc, &["READONLY"]).unwrap();
            }
            for (limiter, key) in tagged_keys(&tag) {
                for words in limiter.session {
                    let words = call(words, &key);
                    let words: Vec<&str> = words.iter().map(String::as_str).collect();
                    assert_eq!(err(&mut rc, &words), moved, "{words:?}");
                }
            }
        }
    }
    assert!(cluster.none_crashed());
}

/// Sub-limits for a limit split k ways: L/k each, the remainder spread one by one over the
/// first sub-keys, so that they sum to exactly L (never more).
fn split(limit: u64, k: u64) -> Vec<u64> {
    (0..k)
        .map(|i| limit / k + u64::from(i < limit % k))
        .collect()
}

#[test]
fn a_hot_key_split_over_shards_keeps_its_limit() {
    let cluster = Cluster::start(CALM_NODE_TIMEOUT_MS);
    let (limit, window, k) = (10u64, 1000u64, 3u64);
    let limits = split(limit, k);
    assert_eq!(limits, [4, 3, 3]);
    assert_eq!(limits.iter().sum::<u64>(), limit);

    // A shared hash tag would put every sub-key in one slot, on one shard: no spreading.
    let tagged: BTreeSet<u16> = (0..k)
        .map(|i| slot(&format!("rl:{{user:42}}:{i}")))
        .collect();
    assert_eq!(tagged.len(), 1);
    // Untagged names hash apart; pick the first suffixes whose slots are on distinct masters.
    let mut sub_keys: Vec<(String, usize)> = Vec::new();
    for i in 0.. {
        let name = format!("rl:user:42:{i}");
        let owner = cluster.owner(slot(&name));
        if sub_keys.iter().all(|(_, o)| *o != owner) {
            sub_keys.push((name, owner));
        }
        if sub_keys.len() == k as usize {
            break;
        }
    }
    let mut c = cluster.client();
    let decide = |c: &mut ClusterConnection, i: usize| -> i64 {
        let words = [
            "RL.GCRA".to_string(),
            sub_keys[i].0.clone(),
            limits[i].to_string(),
            window.to_string(),
        ];
        let reply: Vec<i64> = to_cmd(&words).query(c).unwrap();
        reply[0]
    };

    // 30 requests at one instant, spread round-robin: exactly L pass, each sub-key its share.
    let mut admitted = vec![0; k as usize];
    for n in 0..30 {
        let i = n % k as usize;
        admitted[i] += decide(&mut c, i);
    }
    assert_eq!(admitted, [4, 3, 3]);
    for (name, owner) in &sub_keys {
        let mut m = cluster.connect(*owner);
        assert!(dump(&mut m, name).is_some(), "{name} on its own master");
        let size: i64 = redis::cmd("DBSIZE").query(&mut m).unwrap();
        assert_eq!(size, 1);
    }

    // Overload for 5 s (one request every 20 ms): never more than B + L·t/W in total.
    let mut total = 0;
    for n in 0..250 {
        cluster.clock_advance(20);
        total += decide(&mut c, n % k as usize);
    }
    assert!(total <= 5 * limit as i64, "{total}");
    assert!(total >= 5 * limit as i64 - k as i64, "{total}");

    // Uneven routing under-admits: one caller sending only to its sub-key gets that share.
    cluster.clock_advance(window as i64);
    let alone: i64 = (0..10).map(|_| decide(&mut c, 0)).sum();
    assert_eq!(alone, 4);
}
