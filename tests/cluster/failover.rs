//! Failover: a manual failover continues exactly; a crash forgets only the admits no replica
//! acknowledged.

use redis::cluster::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};

use super::*;

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
