//! A hot key split over shards keeps its limit.

use std::collections::BTreeSet;

use redis::cluster::ClusterConnection;

use super::*;

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
