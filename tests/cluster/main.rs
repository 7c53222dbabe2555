//! Redis Cluster and failover: every limiter command (the `LIMITERS` table) routed by a
//! cluster-aware client over all 16384 slots and on hash-tagged keys, resharding with
//! `MIGRATE`, manual and crash failover, hot keys split over shards, and replicas refusing writes.
//!
//! Each test starts its own 3-master/3-replica cluster on loopback (killed on drop) and compares
//! every decision with a standalone reference server at the same pinned clock: "the cluster
//! decides exactly as one server would".
//!
//! The files: this one holds what they share (the reference server, a decision step on both,
//! the clock advanced on every node, a slot on a given master); `slots.rs` every command routed
//! over every slot and resharding; `failover.rs` manual and crash failover; `replicas.rs`
//! replicas refusing writes; `hot_keys.rs` a hot key split over shards.

#[path = "../support/mod.rs"]
mod support;

mod failover;
mod hot_keys;
mod replicas;
mod slots;

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
