//! Many connections at once: one tenant over fifty keys from sixteen connections, the clock
//! frozen, admits exactly its limit.

use std::sync::{Arc, Barrier};

use super::*;

/// 16 connections, 50 keys under one tenant, the clock frozen: the tenant admits exactly its
/// 100 in total, no key more than its 5, and no denial spends a token anywhere.
#[test]
fn sixteen_connections_fifty_keys_one_tenant() {
    const KEYS: usize = 50;
    const THREADS: usize = 16;
    let (s, _c) = server();
    let barrier = Arc::new(Barrier::new(THREADS));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let mut c = s.connect();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let mut admitted = vec![0i64; KEYS];
                barrier.wait();
                // Every thread walks all keys twice, each from its own starting point.
                for i in 0..2 * KEYS {
                    let k = (t * 7 + i * 3) % KEYS;
                    let key = format!("rl:{{tenant:1}}:key:{k}");
                    let (combined, each) = all(
                        &mut c,
                        &[
                            "RL.ALL",
                            "2",
                            &key,
                            "rl:{tenant:1}:tenant",
                            "TOKENBUCKET",
                            "5",
                            "60000",
                            "FIXEDWINDOW",
                            "100",
                            "86400000",
                        ],
                    );
                    assert_eq!(combined[0], each[0][0].min(each[1][0]));
                    admitted[k] += combined[0];
                }
                admitted
            })
        })
        .collect();
    let mut per_key = vec![0i64; KEYS];
    for w in workers {
        for (total, n) in per_key.iter_mut().zip(w.join().unwrap()) {
            *total += n;
        }
    }
    assert_eq!(per_key.iter().sum::<i64>(), 100, "{per_key:?}");
    let mut c = s.connect();
    for (k, &n) in per_key.iter().enumerate() {
        assert!(n <= 5, "key {k} admitted {n}");
        let key = format!("rl:{{tenant:1}}:key:{k}");
        let (_, each) = all(
            &mut c,
            &[
                "RL.ALL",
                "2",
                &key,
                "rl:{tenant:1}:tenant",
                "TOKENBUCKET",
                "5",
                "60000",
                "COST",
                "0",
                "FIXEDWINDOW",
                "100",
                "86400000",
                "COST",
                "0",
            ],
        );
        assert_eq!(each[0][2], 5 - n, "key {k}: a denial spent its tokens");
        assert_eq!(each[1][2], 0, "the tenant");
    }
}
