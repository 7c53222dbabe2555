//! A hot key split over k sub-keys: the slots the client picks are the slots Redis Cluster
//! computes (CLUSTER KEYSLOT on a cluster-enabled server), all different, and each sub-key holds
//! L/k on the store.

mod support;

use std::time::Duration;

use ratelimit_client::{key_slot, sub_keys, Class, Config, Limit, Limiter, Policy, Store};
use support::Server;

#[test]
fn sub_keys_fall_on_the_slots_redis_computes_all_different() {
    // The bus port explicitly: port + 10000 would be out of range for the test ports.
    let bus = support::free_port().to_string();
    let s = Server::with(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-port",
        &bus,
    ]);
    for key in ["api:hot", "api:{tenant:7}:hot", "x}{y", ""] {
        let keys = sub_keys(key, 16);
        let mut slots = Vec::new();
        for k in &keys {
            let slot: u16 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(k)
                .query(&mut s.connect())
                .unwrap();
            assert_eq!(slot, key_slot(k.as_bytes()), "{k}");
            slots.push(slot);
        }
        slots.sort();
        slots.dedup();
        assert_eq!(slots.len(), 16, "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sub_key_holds_its_share() {
    let s = Server::start();
    let store = Store::connect(&s.url()).await.unwrap();
    let limiter = Limiter::new(
        store,
        Config {
            deadline: Duration::from_secs(1),
            ..Config::default()
        },
    );
    let hot = Limit::new("hot", Policy::gcra(100, 1000), Class::Contract).split(4);
    let mut admitted = 0;
    for _ in 0..120 {
        admitted += u64::from(limiter.check(&hot, "api:hot").await.unwrap().allowed);
    }
    // 4 sub-keys of 25: the whole key admits 100 at once, as unsplit.
    assert_eq!(admitted, 100);
    for k in sub_keys("api:hot", 4) {
        assert_eq!(s.ints(&["RL.PEEK", &k])[1..3], [25, 0], "{k}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_cluster_connection() {
    // A one-node Cluster that serves every slot: enough to drive `cluster-async` for real.
    let bus = support::free_port().to_string();
    let s = Server::with(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-port",
        &bus,
    ]);
    let _: () = redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .query(&mut s.connect())
        .unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query(&mut s.connect())
            .unwrap();
        if info.contains("cluster_state:ok") {
            break;
        }
        assert!(std::time::Instant::now() < until, "{info}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let url = s.url();
    let store = Store::connect_cluster(&[url.as_str()]).await.unwrap();
    let store = store.with_deadline(Duration::from_secs(1));
    let d = store
        .decide("c:a", &Policy::gcra(10, 1000), 3)
        .await
        .unwrap();
    assert_eq!(d.reply().to_vec(), s.ints(&["RL.PEEK", "c:a"]));
    let limiter = Limiter::new(
        store,
        Config {
            deadline: Duration::from_secs(1),
            ..Config::default()
        },
    );
    let hot = Limit::new("hot", Policy::gcra(40, 1000), Class::Contract)
        .split(4)
        .lease(2);
    let mut admitted = 0;
    for _ in 0..50 {
        admitted += u64::from(limiter.check(&hot, "c:hot").await.unwrap().allowed);
    }
    assert_eq!(admitted, 40);
    assert_eq!(s.calls("RL.LEASE"), 20 + 4);
}
