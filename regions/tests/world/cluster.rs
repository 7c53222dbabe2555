//! A region whose store is a Redis Cluster: three masters on loopback (no replicas), each
//! answering through one backend (the module and its debug clock, or the library on the real
//! clock, which the nodes' gossip needs), slots split in three (`CLUSTER ADDSLOTSRANGE`), joined with
//! `CLUSTER MEET`. Each node has its own directory (its nodes.conf), removed on drop.

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use ratelimit_client::Backend;
use redis::Value;

use super::Server;

/// A node's cluster bus listens on its port + 10000: both must be free, and the bus port below
/// the kernel's ephemeral range, so node ports come from [10000, 22767].
fn node_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(104_729);
    for _ in 0..12_768 {
        let n = start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed));
        let port = (10_000 + n % 12_768) as u16;
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + 10_000) {
            return port;
        }
    }
    panic!("no free port pair for a cluster node");
}

pub struct ClusterStore {
    pub nodes: Vec<Server>,
    dirs: Vec<PathBuf>,
}

impl ClusterStore {
    pub fn start() -> ClusterStore {
        ClusterStore::start_as(Backend::Module, true)
    }

    /// `install`: the library loaded by the test (else the controller is to load it).
    pub fn start_as(backend: Backend, install: bool) -> ClusterStore {
        let mut nodes = Vec::new();
        let mut dirs = Vec::new();
        static STARTED: AtomicU32 = AtomicU32::new(0);
        for _ in 0..3 {
            let n = STARTED.fetch_add(1, Ordering::Relaxed);
            let dir =
                std::env::temp_dir().join(format!("rl-regions-cluster-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("node dir");
            let options: Vec<String> = [
                "--cluster-enabled",
                "yes",
                "--cluster-node-timeout",
                "5000",
                "--cluster-config-file",
                "nodes.conf",
            ]
            .map(String::from)
            .into_iter()
            .chain(["--dir".to_string(), dir.display().to_string()])
            .collect();
            nodes.push(Server::launch(backend, install, false, &options, node_port));
            dirs.push(dir);
        }
        let store = ClusterStore { nodes, dirs };
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

impl Drop for ClusterStore {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
        for dir in &self.dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
