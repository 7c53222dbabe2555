//! A region whose store is a Redis Cluster (three masters with the module, real nodes on
//! loopback) beside two standalone regions: the controller learns the cluster's masters, reads
//! and writes each key on the master of its slot (keys sharing a hash tag in one call), moves
//! the shares to the demand, and counts the region unreachable when one master is down. On
//! each backend: with the library, the controller loads it on every master itself
//! (`load_library = "missing"`), or serves it by EVALSHA where FUNCTION is refused; the
//! library's stores run on the real clock (a Cluster's gossip needs it), and the controller's
//! periods start at the real time.

mod world;

use ratelimit_client::Backend;
use ratelimit_regions::{Config, Controller};
use redis::{Connection, Value};
use world::cluster::ClusterStore;
use world::{Server, T0_MS};

const KEYS: u64 = 120;
const TAGGED: u64 = 30;

on_every_backend!(a_cluster_region_is_read_and_written_per_slot);

/// Sets each server's clock (`looks[i]` a connection to `servers[i]`).
fn clock(servers: &[&Server], looks: &mut [Connection], now_ms: u64) {
    for (s, c) in servers.iter().zip(looks) {
        s.set_clock(c, now_ms);
    }
}

/// The share a store holds for a key (0: none).
fn share(s: &Server, c: &mut Connection, key: &str) -> u64 {
    let rows: Vec<Vec<u64>> = s.command("DEMAND", &[key]).query(c).expect("RL.DEMAND");
    rows[0][2]
}

fn a_cluster_region_is_read_and_written_per_slot(backend: Backend) {
    let cluster = ClusterStore::start_as(backend, false);
    let others = [0, 1].map(|_| Server::launch(backend, true, false, &[], false));
    let mut looks: Vec<Connection> = cluster
        .nodes
        .iter()
        .chain(&others)
        .map(|s| s.connect().expect("connect"))
        .collect();
    let text = format!(
        "period_ms = 2000\nlifetime_ms = 10000\nclock_margin_ms = 0\ntimeout_ms = 10000\nbatch = 4\n\
         load_library = \"missing\"\n\
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
    let mut now = match backend {
        Backend::Module => T0_MS,
        _ => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(T0_MS, |d| d.as_millis() as u64),
    };
    let servers: Vec<&Server> = cluster.nodes.iter().chain(&others).collect();
    clock(&servers, &mut looks, now);
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
    assert_eq!(
        share(servers[tag_node], &mut looks[tag_node], "{tag}:7"),
        333
    );

    // Demand in the cluster's region only, on two keys on different masters (or the same):
    // their shares move to it, lowers before raises, never above L in sum.
    let hot = ["cl:1", "{tag}:3"];
    for _ in 0..3 {
        now += 100;
        clock(&servers, &mut looks, now);
        for key in hot {
            let node = cluster.node_of(key);
            let mut pipe = redis::pipe();
            for _ in 0..50 {
                let mut call = servers[node].command("GCRA", &[key]);
                call.arg(333).arg(1000).arg("BURST").arg(33);
                pipe.add_command(call);
            }
            let _: Vec<Value> = pipe.query(&mut looks[node]).expect("gateway");
        }
        now += 1900;
        clock(&servers, &mut looks, now);
        let report = controller.period(now);
        assert!(report.unreachable.is_empty(), "{report:?}");
    }
    for key in hot {
        let node = cluster.node_of(key);
        let a = share(servers[node], &mut looks[node], key);
        let (b, c) = (
            share(servers[3], &mut looks[3], key),
            share(servers[4], &mut looks[4], key),
        );
        assert!(a > 900 && b < 333 && c < 333, "{key}: {a} {b} {c}");
        assert!(a + b + c <= 1000, "{key}: {a} {b} {c}");
    }

    // A master down: the region's step fails as a whole; it is unreachable, the others decide.
    drop(servers);
    let mut cluster = cluster;
    cluster.nodes[2].kill();
    let servers: Vec<&Server> = cluster.nodes.iter().chain(&others).collect();
    now += 2000;
    clock(&servers[..2], &mut looks[..2], now);
    clock(&servers[3..], &mut looks[3..], now);
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
    let servers: Vec<&Server> = cluster
        .nodes
        .iter()
        .chain(std::iter::once(&standalone))
        .collect();
    clock(&servers, &mut looks, T0_MS);
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
            clock(&servers, &mut looks, now);
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
