//! A region whose store is a Redis Cluster (three masters with the module, real nodes on
//! loopback) beside two standalone regions: the controller learns the cluster's masters, reads
//! and writes each key on the master of its slot (keys sharing a hash tag in one call), moves
//! the shares to the demand, and counts the region unreachable when one master is down.

mod world;

use ratelimit_regions::{Config, Controller};
use redis::{Connection, Value};
use world::cluster::ClusterStore;
use world::{Server, T0_MS};

const KEYS: u64 = 120;
const TAGGED: u64 = 30;

fn clock(looks: &mut [Connection], now_ms: u64) {
    for c in looks {
        let _: Value = redis::cmd("RL.DEBUG")
            .arg("CLOCK")
            .arg("SET")
            .arg(now_ms)
            .query(c)
            .expect("clock");
    }
}

/// The share a store holds for a key (0: none).
fn share(c: &mut Connection, key: &str) -> u64 {
    let rows: Vec<Vec<u64>> = redis::cmd("RL.DEMAND")
        .arg(key)
        .query(c)
        .expect("RL.DEMAND");
    rows[0][2]
}

#[test]
fn a_cluster_region_is_read_and_written_per_slot() {
    let cluster = ClusterStore::start();
    let others = [Server::start(), Server::start()];
    let mut looks: Vec<Connection> = cluster
        .nodes
        .iter()
        .chain(&others)
        .map(|s| s.connect().expect("connect"))
        .collect();
    let text = format!(
        "period_ms = 2000\nlifetime_ms = 10000\nclock_margin_ms = 0\ntimeout_ms = 10000\nbatch = 4\n\
         [[regions]]\nname = \"a\"\nurl = \"{}\"\ncluster = true\n\
         [[regions]]\nname = \"b\"\nurl = \"redis://127.0.0.1:{}\"\n\
         [[regions]]\nname = \"c\"\nurl = \"redis://127.0.0.1:{}\"\n\
         [[keys]]\nkeys = [\"cl:{{1..{KEYS}}}\", \"{{tag}}:{{1..{TAGGED}}}\"]\nalgorithm = \"GCRA\"\n\
         limit = 1000\nwindow_ms = 1000\nburst = 100\nfloor = 5\n",
        cluster.url(),
        others[0].port,
        others[1].port
    );
    let mut controller = Controller::new(Config::parse(&text).expect("config")).expect("new");
    let mut now = T0_MS;
    clock(&mut looks, now);
    let report = controller.period(now);
    assert!(report.unreachable.is_empty(), "{report:?}");
    // Every key written at its safe share in every region, the cluster's on the masters of
    // their slots: every master holds some, the tagged keys all on one.
    let keys = (KEYS + TAGGED) as usize;
    assert_eq!(report.shares_written, 3 * keys, "{report:?}");
    let sizes: Vec<usize> = looks[..3]
        .iter_mut()
        .map(|c| redis::cmd("DBSIZE").query(c).expect("DBSIZE"))
        .collect();
    assert_eq!(sizes.iter().sum::<usize>(), keys, "{sizes:?}");
    assert!(sizes.iter().all(|&n| n > 0), "{sizes:?}");
    let tag_node = cluster.node_of("{tag}:1");
    assert!(sizes[tag_node] >= TAGGED as usize);
    assert_eq!(share(&mut looks[tag_node], "{tag}:7"), 333);

    // Demand in the cluster's region only, on two keys on different masters (or the same):
    // their shares move to it, lowers before raises, never above L in sum.
    let hot = ["cl:1", "{tag}:3"];
    for _ in 0..3 {
        now += 100;
        clock(&mut looks, now);
        for key in hot {
            let node = cluster.node_of(key);
            let mut pipe = redis::pipe();
            for _ in 0..50 {
                pipe.cmd("RL.GCRA")
                    .arg(key)
                    .arg(333)
                    .arg(1000)
                    .arg("BURST")
                    .arg(33);
            }
            let _: Vec<Value> = pipe.query(&mut looks[node]).expect("gateway");
        }
        now += 1900;
        clock(&mut looks, now);
        let report = controller.period(now);
        assert!(report.unreachable.is_empty(), "{report:?}");
    }
    for key in hot {
        let a = share(&mut looks[cluster.node_of(key)], key);
        let (b, c) = (share(&mut looks[3], key), share(&mut looks[4], key));
        assert!(a > 900 && b < 333 && c < 333, "{key}: {a} {b} {c}");
        assert!(a + b + c <= 1000, "{key}: {a} {b} {c}");
    }

    // A master down: the region's step fails as a whole; it is unreachable, the others decide.
    let mut cluster = cluster;
    cluster.nodes[2].kill();
    now += 2000;
    clock(&mut looks[..2], now);
    clock(&mut looks[3..], now);
    let report = controller.period(now);
    assert_eq!(report.unreachable, ["a"], "{report:?}");
}

/// What one region costs the controller at 100,000 keys as a 3-master cluster against a
/// standalone store (one region each, the first period writing every key, then a quiet one):
/// `cargo test -p redis-ratelimit-regions --test cluster -- --ignored --nocapture`.
#[test]
#[ignore]
fn cluster_against_standalone_at_100k_keys() {
    const KEYS: u64 = 100_000;
    let cluster = ClusterStore::start();
    let standalone = Server::start();
    let mut looks: Vec<Connection> = cluster
        .nodes
        .iter()
        .chain(std::iter::once(&standalone))
        .map(|s| s.connect().expect("connect"))
        .collect();
    clock(&mut looks, T0_MS);
    let url = format!("redis://127.0.0.1:{}", standalone.port);
    for (name, region) in [
        (
            "cluster",
            format!("url = \"{}\"\ncluster = true\n", cluster.url()),
        ),
        ("standalone", format!("url = \"{url}\"\n")),
    ] {
        let text = format!(
            "period_ms = 2000\nlifetime_ms = 30000\nclock_margin_ms = 0\ntimeout_ms = 60000\n\
             [[regions]]\nname = \"a\"\n{region}\
             [[keys]]\nkeys = [\"scale:{{1..{KEYS}}}\"]\nalgorithm = \"GCRA\"\nlimit = 1000\n\
             window_ms = 1000\nburst = 100\n"
        );
        let mut controller = Controller::new(Config::parse(&text).expect("config")).expect("new");
        for (label, now) in [("first", T0_MS), ("quiet", T0_MS + 2000)] {
            clock(&mut looks, now);
            let r = controller.period(now);
            assert!(r.unreachable.is_empty(), "{r:?}");
            println!(
                "| {name} | {label} | {} ms | {} ms | {} |",
                r.duration.as_millis(),
                r.compute.as_millis(),
                r.shares_written
            );
        }
    }
}
