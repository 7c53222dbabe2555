//! A Redis Cluster of real nodes on 127.0.0.1: 3 masters and 3 replicas made by
//! `redis-cli --cluster create … --cluster-replicas 1`, each node with the module and its debug
//! clock pinned at `T0_MS`. Every node is killed on drop, also when a test fails.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use redis::cluster::{ClusterClient, ClusterConnection};

use super::{wait_for, Connection, Server, T0_MS};

/// One slot range and who serves it, as `CLUSTER SLOTS` reports it (ports identify nodes).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SlotRange {
    pub start: u16,
    pub end: u16,
    pub master: u16,
    pub replicas: Vec<u16>,
}

pub struct Cluster {
    /// Indexed by node number. A killed node keeps its place (see `killed`).
    pub nodes: Vec<Server>,
    killed: Vec<bool>,
}

/// Runs a program to completion within `limit`, or kills it and panics.
fn run_bounded(program: &str, args: &[String], limit: Duration) -> String {
    let mut child = Command::new(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e} (apt-get install redis-tools)"));
    let deadline = Instant::now() + limit;
    while matches!(child.try_wait(), Ok(None)) {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{program} {args:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("collect output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{program} {args:?} failed:\n{text}");
    text
}

fn info(c: &mut Connection, section: &str) -> String {
    redis::cmd("INFO").arg(section).query(c).unwrap_or_default()
}

/// `field:value` from INFO or CLUSTER INFO text.
pub fn info_field(text: &str, field: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

fn parse_slots(v: redis::Value) -> Option<Vec<SlotRange>> {
    use redis::Value::{Array, Int};
    let Array(ranges) = v else { return None };
    let mut out = Vec::new();
    for range in ranges {
        let Array(fields) = range else { return None };
        let (Some(Int(start)), Some(Int(end))) = (fields.first(), fields.get(1)) else {
            return None;
        };
        let mut ports = fields.iter().skip(2).map(|node| match node {
            Array(n) => match n.get(1) {
                Some(Int(p)) => u16::try_from(*p).ok(),
                _ => None,
            },
            _ => None,
        });
        let master = ports.next()??;
        let replicas: Option<Vec<u16>> = ports.collect();
        let mut replicas = replicas?;
        replicas.sort_unstable();
        out.push(SlotRange {
            start: u16::try_from(*start).ok()?,
            end: u16::try_from(*end).ok()?,
            master,
            replicas,
        });
    }
    out.sort();
    Some(out)
}

impl Cluster {
    /// Six nodes (3 masters, 3 replicas) with the given `cluster-node-timeout`, settled (every
    /// node agrees on the slots, every replica linked) and every debug clock at `T0_MS`.
    pub fn start(node_timeout_ms: u64) -> Cluster {
        let timeout = node_timeout_ms.to_string();
        let options = [
            "--cluster-enabled",
            "yes",
            "--cluster-node-timeout",
            &timeout,
            "--cluster-config-file",
            "nodes.conf",
            // Replicas sync at once instead of waiting 5 s for company.
            "--repl-diskless-sync-delay",
            "0",
            // CLUSTER SLOTS lists a replica only once its replication offset is not 0: the
            // master's PINGs move it without any write (every 10 s by default).
            "--repl-ping-replica-period",
            "1",
        ];
        let nodes: Vec<Server> = (0..6)
            .map(|_| {
                let mut last = String::new();
                // A node that still loses its port (or bus port) to another process meanwhile
                // is started again on another pair (`testkit::cluster_port`).
                for _ in 0..20 {
                    let port = testkit::cluster_port().unwrap_or_else(|e| panic!("{e}"));
                    match Server::on_port(port, &options, &[]) {
                        Ok(server) => return server,
                        Err(e) => last = e,
                    }
                }
                panic!("cannot start a cluster node: {last}");
            })
            .collect();
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)));
        args.extend(["--cluster-replicas", "1", "--cluster-yes"].map(String::from));
        let cluster = Cluster {
            killed: vec![false; nodes.len()],
            nodes,
        };
        run_bounded("redis-cli", &args, Duration::from_secs(60));
        cluster.wait_settled();
        let shape: Vec<usize> = cluster.slots().iter().map(|r| r.replicas.len()).collect();
        assert_eq!(shape, [1, 1, 1], "3 masters with one replica each");
        cluster.clock_set(T0_MS);
        cluster
    }

    pub fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&i| !self.killed[i])
    }

    pub fn connect(&self, node: usize) -> Connection {
        self.nodes[node].connect()
    }

    pub fn node_at(&self, port: u16) -> usize {
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    pub fn id(&self, node: usize) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.connect(node))
            .unwrap()
    }

    /// The slot map as a live node sees it.
    pub fn slots(&self) -> Vec<SlotRange> {
        let node = self.live().next().expect("a live node");
        self.slots_seen_by(node).expect("CLUSTER SLOTS")
    }

    fn slots_seen_by(&self, node: usize) -> Option<Vec<SlotRange>> {
        let mut c = self.nodes[node].try_connect().ok()?;
        parse_slots(redis::cmd("CLUSTER").arg("SLOTS").query(&mut c).ok()?)
    }

    /// Node numbers of the masters serving slots, in slot order.
    pub fn masters(&self) -> Vec<usize> {
        self.slots()
            .iter()
            .map(|r| self.node_at(r.master))
            .collect()
    }

    /// The master serving `slot`.
    pub fn owner(&self, slot: u16) -> usize {
        let ranges = self.slots();
        let range = ranges
            .iter()
            .find(|r| r.start <= slot && slot <= r.end)
            .unwrap_or_else(|| panic!("slot {slot} is not served"));
        self.node_at(range.master)
    }

    /// The one replica of `master`.
    pub fn replica_of(&self, master: usize) -> usize {
        let port = self.nodes[master].port;
        let ranges = self.slots();
        let range = ranges.iter().find(|r| r.master == port).expect("a master");
        self.node_at(*range.replicas.first().expect("a replica"))
    }

    /// True when every live node is in state ok and sees the same slot map, which lists every
    /// live node, and every live replica's link to its master is up.
    pub fn settled(&self) -> bool {
        let mut seen = None;
        for node in self.live() {
            let Ok(mut c) = self.nodes[node].try_connect() else {
                return false;
            };
            let state: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut c)
                .unwrap_or_default();
            if info_field(&state, "cluster_state").as_deref() != Some("ok") {
                return false;
            }
            let replication = info(&mut c, "replication");
            if info_field(&replication, "role").as_deref() == Some("slave")
                && info_field(&replication, "master_link_status").as_deref() != Some("up")
            {
                return false;
            }
            let Some(slots) = self.slots_seen_by(node) else {
                return false;
            };
            if seen.get_or_insert_with(|| slots.clone()) != &slots {
                return false;
            }
        }
        // The map lists exactly the live nodes (a replica still being attached is missing).
        seen.is_some_and(|ranges| {
            let listed: BTreeSet<u16> = ranges
                .iter()
                .flat_map(|r| std::iter::once(r.master).chain(r.replicas.iter().copied()))
                .collect();
            listed == self.live().map(|i| self.nodes[i].port).collect()
        })
    }

    /// Waits (bounded) until the cluster has settled.
    pub fn wait_settled(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.settled() {
            assert!(
                Instant::now() < deadline,
                "the cluster did not settle; slot maps: {:?}",
                self.live()
                    .map(|n| (self.nodes[n].port, self.slots_seen_by(n)))
                    .collect::<BTreeMap<_, _>>()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A cluster-aware client (the `redis` crate's), started from every live node.
    pub fn client(&self) -> ClusterConnection {
        let urls: Vec<String> = self
            .live()
            .map(|i| format!("redis://127.0.0.1:{}/", self.nodes[i].port))
            .collect();
        let c = ClusterClient::builder(urls)
            .connection_timeout(Duration::from_secs(5))
            .build()
            .and_then(|client| client.get_connection())
            .expect("cluster connection");
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        c.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        c
    }

    /// Pins every live node's debug clock.
    pub fn clock_set(&self, ms: u64) {
        for node in self.live() {
            super::clock_set(&mut self.connect(node), ms);
        }
    }

    /// Moves every live node's debug clock.
    pub fn clock_advance(&self, ms: i64) {
        for node in self.live() {
            super::clock_advance(&mut self.connect(node), ms);
        }
    }

    /// SIGKILL, as a crash.
    pub fn kill(&mut self, node: usize) {
        self.nodes[node].kill();
        self.killed[node] = true;
    }

    /// True when every node not killed on purpose is still running.
    pub fn none_crashed(&mut self) -> bool {
        (0..self.nodes.len()).all(|i| self.killed[i] || self.nodes[i].alive())
    }

    /// Waits (bounded) until `node` is a master with its own slots, and the cluster settled.
    pub fn wait_promoted(&self, node: usize) {
        let port = self.nodes[node].port;
        wait_for("the replica to be promoted", || {
            self.slots_seen_by(node)
                .is_some_and(|ranges| ranges.iter().any(|r| r.master == port))
        });
        self.wait_settled();
    }
}

/// The replication role of a node (`master` or `slave`).
pub fn role(c: &mut Connection) -> String {
    info_field(&info(c, "replication"), "role").unwrap_or_default()
}

/// The slot of a key (hash tags honoured), computed as the cluster does.
pub fn slot(key: &str) -> u16 {
    redis::cluster_routing::get_slot(key.as_bytes())
}

/// A hash tag for every slot: `tags[s]` is a string whose slot is `s`, so `{tags[s]}:anything`
/// lands in slot `s`.
pub fn tags_for_all_slots() -> Vec<String> {
    keys_for_all_slots("t", 1)
        .into_iter()
        .map(|mut v| v.remove(0))
        .collect()
}

/// `per_slot` distinct keys `<prefix>:<n>` (no hash tag) for every one of the 16384 slots.
pub fn keys_for_all_slots(prefix: &str, per_slot: usize) -> Vec<Vec<String>> {
    let mut keys: Vec<Vec<String>> = vec![Vec::new(); 16384];
    let mut missing = 16384 * per_slot;
    let mut n = 0u64;
    while missing > 0 {
        let key = format!("{prefix}:{n}");
        let slot_keys = &mut keys[usize::from(slot(&key))];
        if slot_keys.len() < per_slot {
            slot_keys.push(key);
            missing -= 1;
        }
        n += 1;
    }
    keys
}
