//! Policy changes. GCRA, token-bucket, fixed-window, sliding-counter and shaper keys remember
//! configurations by the module's rule (src/algo/step.rs: up to eight per key, each charged what
//! the key admits, dropped at once when as good as fresh or equal to its kin's state carried
//! over, one more decided so that it can only deny more): these traces hold every reply and
//! expiry equal to the module's. A sliding log keeps the one-configuration rule (a new policy
//! carries what was spent over to it), so its switching trace is ignored until the library
//! charges each remembered log in place (`cargo test --test functions -- --ignored` shows where
//! they part).

use super::*;
use crate::calls::{limiters, run_trace, Limiter, Policy};
use crate::traces::{large_policies, shaping};

/// Each call picks one of two policies for its key (a sliding log keeps one).
#[test]
fn policy_changes_agree_with_the_module() {
    let (_s, mut c) = both();
    for seed in 1..=80u64 {
        let mut rng = Rng(seed * 0x51_7cc1_b727);
        let mut lims = limiters(&mut rng, 2);
        for lim in &mut lims {
            if ALGORITHMS[lim.algo].0 == "RL.SLIDINGLOG" {
                lim.policies.truncate(1);
            }
        }
        cmd(&mut c, &["FLUSHALL"]).unwrap();
        run_trace(&mut c, seed, &lims, 80);
    }
}

/// A sliding log switching between two policies.
#[test]
#[ignore = "the library's sliding log rule is stricter than the module's (admitted only when every remembered configuration admits): docs/functions.md"]
fn sliding_log_policy_changes_agree_with_the_module() {
    let (_s, mut c) = both();
    for seed in 1..=80u64 {
        let mut rng = Rng(seed * 0x51_7cc1_b727);
        let lims: Vec<Limiter> = limiters(&mut rng, 2)
            .into_iter()
            .filter(|lim| ALGORITHMS[lim.algo].0 == "RL.SLIDINGLOG")
            .collect();
        cmd(&mut c, &["FLUSHALL"]).unwrap();
        run_trace(&mut c, seed, &lims, 80);
    }
}

/// The trace of the rollout bug the module fixed: 100 spent under L = 100, then calls
/// alternating between L = 10 and L = 100 in the same minute admit nothing more.
#[test]
fn alternating_limits_admit_nothing_more() {
    let (_s, mut c) = both();
    for (command, function) in [
        ("RL.FIXEDWINDOW", "rl_fixedwindow"),
        ("RL.SLIDINGLOG", "rl_slidinglog"),
        ("RL.SLIDINGCOUNTER", "rl_slidingcounter"),
    ] {
        let module = |l: &str, cost: &str| words(&[command, "m:k", l, "60000", "COST", cost]);
        let library =
            |l: &str, cost: &str| words(&["FCALL", function, "1", "f:k", l, "60000", "COST", cost]);
        assert_eq!(
            reply(&mut c, &module("100", "100")),
            reply(&mut c, &library("100", "100"))
        );
        at(&mut c, T0_MS + 1);
        let mut admitted = 0;
        for i in 0..40 {
            let l = if i % 2 == 0 { "10" } else { "100" };
            let (m, f) = (
                reply(&mut c, &module(l, "1")),
                reply(&mut c, &library(l, "1")),
            );
            assert_eq!(m, f, "{command} call {i}");
            if let Ok(Value::Array(v)) = f {
                admitted += i64::from(v[0] == Value::Int(1));
            }
        }
        assert_eq!(admitted, 0, "{command}");
        at(&mut c, T0_MS);
    }
}

/// GCRA and the token bucket across changes of W, the case where the module's carried balance
/// has a fraction of a millisecond unit (it rounds to the nanosecond unit): the library carries
/// that fraction too, and every reply stays equal. Each call picks one of two policies.
#[test]
fn window_changes_on_buckets() {
    let (_s, mut c) = both();
    for seed in 1..=60u64 {
        let mut rng = Rng(seed * 0x2545_f491);
        let lims: Vec<Limiter> = (0..2)
            .map(|algo| Limiter {
                algo,
                policies: vec![
                    Policy::random(&mut rng, true),
                    Policy::random(&mut rng, true),
                ],
            })
            .collect();
        cmd(&mut c, &["FLUSHALL"]).unwrap();
        run_trace(&mut c, seed, &lims, 60);
    }
}

/// Policies near the library's bounds, switching between two per key: W² near 8.1·10^15 when W
/// changes stays exact.
#[test]
fn large_policy_changes_agree() {
    large_policies(2);
}

/// `rl_shape` switching between two shapers (a new DELAY is stored like a new policy).
#[test]
fn shaping_policy_changes_agree() {
    shaping(2);
}

/// Up to twelve policies per key: a key remembers up to eight configurations, and a request that
/// would bring one more is decided so that it can only deny more (src/algo/step.rs, overflow).
#[test]
fn many_configurations_agree_with_the_module() {
    let (_s, mut c) = both();
    for seed in 1..=40u64 {
        let mut rng = Rng(seed * 0x2f6b_9a1d_3c55);
        let mut lims = limiters(&mut rng, 12);
        for lim in &mut lims {
            if ALGORITHMS[lim.algo].0 == "RL.SLIDINGLOG" {
                lim.policies.truncate(1);
            } else if seed % 2 == 0 {
                // Twelve distinct long windows: no kin, and states slow to be full again, so
                // that a ninth configuration comes while eight are remembered (overflow).
                for (i, p) in lim.policies.iter_mut().enumerate() {
                    p.w = 20_000 + 1000 * i as u64;
                }
            }
        }
        cmd(&mut c, &["FLUSHALL"]).unwrap();
        run_trace(&mut c, seed, &lims, 160);
    }
}

/// The sliding log's rule in the library (docs/functions.md), checked against an independent
/// count over random traces with 2 to 8 configurations (and a ninth and tenth: merged): every
/// admission under (L, W) at t finds, among everything the key admitted in (t − W, t] since that
/// configuration was taken up (its first call, or its first call after an instant its window
/// held nothing), at most L. So no number of configurations admits more than the loosest alone.
#[test]
fn sliding_log_configurations_keep_each_promise() {
    let (_s, mut c) = both();
    for seed in 1..=40u64 {
        let mut rng = Rng(seed * 0x9e37_79b9);
        let n = 2 + rng.below(9) as usize;
        let policies: Vec<(u64, u64)> = (0..n)
            .map(|_| {
                (
                    1 + rng.below(12),
                    [1, 10, 100, 1000, 5000][rng.below(5) as usize],
                )
            })
            .collect();
        cmd(&mut c, &["FLUSHALL"]).unwrap();
        let mut t = T0_MS;
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        let mut last_call: Vec<Option<u64>> = vec![None; n];
        let mut taken_up = vec![0u64; n];
        for step in 0..150 {
            t += rng.below(400);
            at(&mut c, t);
            let i = rng.below(n as u64) as usize;
            let (l, w) = policies[i];
            // Empty at some instant since its last call: taken up anew now.
            let empty_at = |s: u64| !admitted.iter().any(|&(a, _)| a <= s && a + w > s);
            let anew = match last_call[i] {
                None => true,
                Some(prev) => {
                    empty_at(prev)
                        || empty_at(t)
                        || admitted
                            .iter()
                            .any(|&(a, _)| a + w >= prev && a + w <= t && empty_at(a + w))
                }
            };
            if anew {
                taken_up[i] = t;
            }
            last_call[i] = Some(t);
            let cost = 1 + rng.below(l.min(3));
            let r = reply(
                &mut c,
                &words(&[
                    "FCALL",
                    "rl_slidinglog",
                    "1",
                    "f:k",
                    &l.to_string(),
                    &w.to_string(),
                    "COST",
                    &cost.to_string(),
                ]),
            );
            let v: Vec<i64> = redis::from_redis_value(&r.unwrap()).unwrap();
            if v[0] == 1 {
                admitted.push((t, cost));
                let counted: u64 = admitted
                    .iter()
                    .filter(|&&(a, _)| a + w > t && a >= taken_up[i])
                    .map(|&(_, n)| n)
                    .sum();
                assert!(
                    counted <= l,
                    "seed {seed} step {step}: {counted} in the window of ({l}, {w}), {policies:?}"
                );
            }
        }
    }
    at(&mut c, T0_MS);
}

/// The rollouts through the library: 100 per hour beside 10 per second for 60 s, and one
/// 100-per-hour configuration cycled with four fast ones (a fifth configuration, then more than
/// eight). Every reply equal to the module's, so the library admits what the module does.
#[test]
fn rollouts_admit_as_the_module() {
    rollouts(
        &[
            ("RL.GCRA", "rl_gcra", true),
            ("RL.TOKENBUCKET", "rl_tokenbucket", true),
            ("RL.SLIDINGCOUNTER", "rl_slidingcounter", false),
            ("RL.FIXEDWINDOW", "rl_fixedwindow", false),
        ],
        true,
    );
}

/// The same rollouts on a sliding log, whose rule in the library is stricter than the module's
/// (docs/functions.md): every reply may differ, but the library admits at most what the module
/// admits, itself no more than the loosest configuration alone.
#[test]
fn sliding_log_rollouts_admit_as_the_module() {
    rollouts(&[("RL.SLIDINGLOG", "rl_slidinglog", false)], false);
}

/// Runs the rollouts of `rollouts_admit_as_the_module` on each (command, function, has BURST):
/// every reply equal when `exact`, else the library admitting at most what the module does.
fn rollouts(limiters: &[(&str, &str, bool)], exact: bool) {
    let (_s, mut c) = both();
    for &(command, function, bucket) in limiters {
        let call = |side: &str, l: u64, w: u64, cost: u64| {
            let mut v = if side == "m" {
                words(&[command, "m:k"])
            } else {
                words(&["FCALL", function, "1", "f:k"])
            };
            v.extend(words(&[&l.to_string(), &w.to_string()]));
            if bucket {
                v.extend(words(&["BURST", &l.to_string()]));
            }
            v.extend(words(&["COST", &cost.to_string()]));
            v
        };
        let mut admitted = [0i64; 2];
        let mut both_sides = |c: &mut Connection, l: u64, w: u64, cost: u64, what: &str| {
            let (m, f) = (
                reply(c, &call("m", l, w, cost)),
                reply(c, &call("f", l, w, cost)),
            );
            if exact {
                assert_eq!(m, f, "{command} {what}");
            }
            for (i, r) in [m, f].iter().enumerate() {
                if let Ok(Value::Array(v)) = r {
                    admitted[i] += i64::from(v[0] == Value::Int(1)) * cost as i64;
                }
            }
        };
        // 100 per hour and 10 per second, alternating every second for a minute.
        cmd(&mut c, &["FLUSHALL"]).unwrap();
        for round in 0..60u64 {
            at(&mut c, T0_MS + round * 1000);
            both_sides(&mut c, 100, 3_600_000, 100, &format!("hour, round {round}"));
            at(&mut c, T0_MS + round * 1000 + 500);
            both_sides(&mut c, 10, 1000, 1, &format!("second, round {round}"));
        }
        // One slow configuration cycled with four (then nine) fast ones.
        for fast in [4u64, 9] {
            cmd(&mut c, &["FLUSHALL"]).unwrap();
            for round in 0..60u64 {
                let t = T0_MS + 10_000_000 + round * 1000;
                at(&mut c, t);
                both_sides(&mut c, 100, 3_600_000, 100, &format!("slow, round {round}"));
                for i in 0..fast {
                    at(&mut c, t + 10 * (i + 1));
                    both_sides(
                        &mut c,
                        10,
                        1000 + 100 * i,
                        1,
                        &format!("fast {i}, round {round}"),
                    );
                }
            }
        }
        if exact {
            assert_eq!(admitted[0], admitted[1], "{command}");
        } else {
            assert!(
                admitted[1] <= admitted[0],
                "{command}: the library admitted {}, the module {}",
                admitted[1],
                admitted[0]
            );
        }
    }
    at(&mut c, T0_MS);
}

/// A token-bucket key in debt, switched to a kin configuration (the same L and W, a larger B)
/// and back a second later: the larger one's state is then exactly the smaller one's carried
/// over, so the module drops it (`core/src/algo/step.rs` `droppable`, rule b) and the key lives
/// for the smaller one's reset. The library stores a debt as a negative balance at the instant
/// it was written, the module as a refill that starts later (the same bucket whenever written),
/// so comparing the stored fields kept the larger configuration, and its 30 s longer reset, in
/// the library (`many_configurations_agree_with_the_module` found it with 6 limiters, seed 13).
#[test]
fn a_kin_bucket_in_debt_is_dropped_as_in_the_module() {
    let (_s, mut c) = both();
    let request = |b: &str, cost: &str| {
        let args = ["2", "60000", "BURST", b, "COST", cost];
        let mut module = words(&["RL.TOKENBUCKET", "m:k"]);
        let mut library = words(&["FCALL", "rl_tokenbucket", "1", "f:k"]);
        module.extend(words(&args));
        library.extend(words(&args));
        (module, library)
    };
    let charge = (
        words(&["RL.CHARGE", "m:k", "1"]),
        words(&["FCALL", "rl_charge", "1", "f:k", "1"]),
    );
    let calls = [
        (0, request("2", "2")),
        (0, charge),
        (0, request("3", "1")),
        (1000, request("2", "1")),
        (1000, request("3", "0")),
        (31_000, request("3", "1")),
    ];
    for (i, (after_ms, (module, library))) in calls.iter().enumerate() {
        at(&mut c, T0_MS + after_ms);
        let (m, f) = (reply(&mut c, module), reply(&mut c, library));
        assert_eq!(m, f, "call {i}: {module:?}");
        assert_eq!(
            pexpiretime(&mut c, "m:k"),
            pexpiretime(&mut c, "f:k"),
            "call {i}: the expiry after {module:?}"
        );
    }
}
