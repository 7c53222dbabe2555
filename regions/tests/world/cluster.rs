//! A region whose store is a Redis Cluster: three masters on loopback (no replicas), each
//! answering through one backend (the module and its debug clock, or the library on the real
//! clock, which the nodes' gossip needs), slots split in three (`CLUSTER ADDSLOTSRANGE`), joined with
//! `CLUSTER MEET`. Each node is a testkit cluster node (a port whose bus port is free too) in a
//! directory of its own (its nodes.conf).

use std::time::{Duration, Instant};

use ratelimit_client::Backend;
use redis::Value;

use super::Server;

pub struct ClusterStore {
    pub nodes: Vec<Server>,
}

impl ClusterStore {
    pub fn start() -> ClusterStore {
        ClusterStore::start_as(Backend::Module, true)
    }

    /// `install`: the library loaded by the test (else the controller is to load it).
    pub fn start_as(backend: Backend, install: bool) -> ClusterStore {
        let options = [
            "--cluster-node-timeout",
            "5000",
            "--cluster-config-file",
            "nodes.conf",
        ];
        let nodes = (0..3)
            .map(|_| Server::launch(backend, install, false, &options, true))
            .collect();
        let store = ClusterStore { nodes };
        let ranges = [(0, 5460), (5461, 10922), (10923, 16383)];
        for (node, (start, end)) in store.nodes.iter().zip(ranges) {
            let mut c = node.connect().expect("node");
            let _: Value = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(start)
                .arg(end)
                .query(&mut c)
                .expect("ADDSLOTSRANGE");
        }
        let mut first = store.nodes[0].connect().expect("node");
        for node in &store.nodes[1..] {
            let _: Value = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(node.port)
                .query(&mut first)
                .expect("MEET");
        }
        let began = Instant::now();
        while !store.settled() {
            assert!(
                began.elapsed() < Duration::from_secs(60),
                "the cluster did not settle"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        store
    }

    /// Every node in state ok and seeing all three masters' slots.
    fn settled(&self) -> bool {
        self.nodes.iter().all(|node| {
            let Ok(mut c) = node.connect() else {
                return false;
            };
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut c)
                .unwrap_or_default();
            let slots: Vec<Value> = redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query(&mut c)
                .unwrap_or_default();
            info.contains("cluster_state:ok") && slots.len() == 3
        })
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.nodes[0].port)
    }

    /// The node serving `key` (by asking each: a key's node answers RL.DEMAND, the others MOVED).
    pub fn node_of(&self, key: &str) -> usize {
        self.nodes
            .iter()
            .position(|n| {
                let Ok(mut c) = n.connect() else { return false };
                n.command("DEMAND", &[key])
                    .query::<Vec<Vec<i64>>>(&mut c)
                    .is_ok()
            })
            .expect("a node serves the key")
    }
}
