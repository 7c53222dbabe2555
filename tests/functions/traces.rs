//! The differential traces: random requests, costs, peeks, leases, refunds and RL.ALL on both
//! sides (and on the scripts backend), policies near the bounds and at the edges, shaping and
//! concurrency, every reply and expiry equal; the one documented difference; what writes nothing.

use super::*;
use crate::calls::{cost, limiters, next_instant, random_call, run_trace, Limiter, Policy};
use crate::charges::charge_call;

/// Same policy on each key for the whole trace: requests, costs, peeks, leases, refunds,
/// RL.ALL, at instants a few ms apart, seconds apart and stepped back.
#[test]
fn traces_agree_with_the_module() {
    assert_covers(
        "ALGORITHMS (the library's function of each limiter)",
        limiter_algorithms(),
        ALGORITHMS.iter().map(|a| a.0),
    );
    let (_s, mut c) = both();
    for seed in 1..=80u64 {
        let mut rng = Rng(seed * 0x9e37_79b9);
        let lims = limiters(&mut rng, 1);
        cmd(&mut c, &["FLUSHALL"]).unwrap();
        run_trace(&mut c, seed, &lims, 80);
    }
}

/// The scripts backend (client/src/scripts.rs: one script per function, generated from the
/// library) on the same random traces, every reply and expiry equal to the module's. A script
/// keeps nothing between calls, so its test copy's clock reads a key the test sets.
#[test]
fn the_scripts_backend_agrees_with_the_module() {
    let (_s, mut c) = both();
    let shas = scripts_on_key_clock(&mut c);
    let mut answered = 0;
    for seed in 1..=30u64 {
        let mut rng = Rng(seed * 0x2545_f491);
        let lims = limiters(&mut rng, 1);
        cmd(&mut c, &["FLUSHALL"]).unwrap();
        let mut now = T0_MS + rng.below(1_000_000);
        for n in 0..60 {
            now = next_instant(&mut rng, now);
            clock_set(&mut c, now);
            cmd(&mut c, &["SET", "rl-test-clock", &now.to_string()]).unwrap();
            let call = if n % 5 == 4 {
                charge_call(&mut rng, &lims)
            } else {
                random_call(&mut rng, &lims)
            };
            let mut script = call.library.clone();
            script[0] = "EVALSHA".into();
            script[1] = shas[&call.library[1]].clone();
            let (m, f) = (reply(&mut c, &call.module), reply(&mut c, &script));
            answered += usize::from(f.is_ok());
            assert_eq!(m, f, "seed {seed} call {n} at {now}: {:?}", call.module);
            for k in &call.keys {
                assert_eq!(
                    pexpiretime(&mut c, &format!("m:{k}")),
                    pexpiretime(&mut c, &format!("f:{k}")),
                    "seed {seed} call {n} at {now}: expiry of {k} after {:?}",
                    call.module
                );
            }
        }
    }
    assert!(answered > 1000, "{answered} answered");
}

/// Policies near the library's bounds (L and BURST up to 10^7, W up to 9·10^7 ms): the products
/// the bounds are there for (B·W near 9·10^14) stay exact.
#[test]
fn large_policies_agree() {
    large_policies(1);
}

/// Random traces over policies near the bounds, `policies` per key.
pub fn large_policies(policies: usize) {
    let (_s, mut c) = both();
    let mut answered = 0;
    for seed in 1..=30u64 {
        let mut rng = Rng(seed * 0x1234_5677);
        let lims: Vec<Limiter> = [0usize, 1, 3, 4]
            .iter()
            .map(|&algo| Limiter {
                algo,
                policies: (0..policies)
                    .map(|_| Policy::large(&mut rng, ALGORITHMS[algo].3))
                    .collect(),
            })
            .collect();
        cmd(&mut c, &["FLUSHALL"]).unwrap();
        answered += run_trace(&mut c, seed, &lims, 40);
    }
    assert!(
        answered > 30 * 40 * 3 / 4,
        "{answered} answered without an error"
    );
}

/// A token bucket is a function of absolute time, as GCRA is: a clock stepped back finds it
/// owing the refill of the time it went back, and a refund then leaves a debt (the library
/// stores the negative balance, the module a refill that starts later): the same replies and
/// expiries at every instant after.
#[test]
fn a_bucket_owes_the_time_the_clock_went_back() {
    let (_s, mut c) = both();
    let module = |cost: &str| words(&["RL.TOKENBUCKET", "m:k", "10", "1000", "COST", cost]);
    let library = |cost: &str| {
        words(&[
            "FCALL",
            "rl_tokenbucket",
            "1",
            "f:k",
            "10",
            "1000",
            "COST",
            cost,
        ])
    };
    let check = |c: &mut Connection, what: &str| {
        for (m, f) in [
            (module("0"), library("0")),
            (
                words(&["RL.PEEK", "m:k"]),
                words(&["FCALL", "rl_peek", "1", "f:k"]),
            ),
        ] {
            assert_eq!(reply(c, &m), reply(c, &f), "{what}: {m:?}");
        }
        assert_eq!(pexpiretime(c, "m:k"), pexpiretime(c, "f:k"), "{what}");
    };
    assert_eq!(reply(&mut c, &module("10")), reply(&mut c, &library("10")));
    at(&mut c, T0_MS - 500);
    check(&mut c, "500 ms back");
    let (m, f) = (
        reply(&mut c, &words(&["RL.REFUND", "m:k", "1"])),
        reply(&mut c, &words(&["FCALL", "rl_refund", "1", "f:k", "1"])),
    );
    assert_eq!(m, f, "refund while owing");
    let stored: String = redis::cmd("GET").arg("f:k").query(&mut c).unwrap();
    assert!(
        stored.contains(" -"),
        "a debt is stored as a negative balance: {stored}"
    );
    for step in [-500i64, -300, -100, 0, 99, 100, 200, 1000] {
        at(&mut c, (T0_MS as i64 + step) as u64);
        check(&mut c, &format!("at {step} ms"));
    }
    assert_eq!(reply(&mut c, &module("2")), reply(&mut c, &library("2")));
}

/// Replies at instants the module and the library both take exactly: sub-millisecond rates
/// (L per 1 ms), large costs, the longest windows the library accepts.
#[test]
fn edge_policies_agree() {
    let (_s, mut c) = both();
    let cases: &[&[&str]] = &[
        &["1000", "1", "COST", "1000"],
        &["1000", "1", "BURST", "10000000", "COST", "10000000"],
        &["10000000", "90000000", "COST", "10000000"],
        &["7", "90000000", "BURST", "3"],
        &["3", "1000"],
    ];
    for (command, function, _, burst) in ALGORITHMS {
        for (n, args) in cases.iter().enumerate() {
            if !burst && args.contains(&"BURST") {
                continue;
            }
            if command == "RL.SLIDINGLOG" && args[0].len() > 4 {
                continue;
            }
            at(&mut c, T0_MS);
            let key = format!("{n}{command}");
            for step in [0, 0, 1, 333, 334, 1000, 89_999_999] {
                at(&mut c, T0_MS + step);
                let mut m = words(&[command, &format!("m:{key}")]);
                m.extend(words(args));
                let mut f = words(&["FCALL", function, "1", &format!("f:{key}")]);
                f.extend(words(args));
                assert_eq!(reply(&mut c, &m), reply(&mut c, &f), "{m:?} at +{step}");
            }
        }
    }
    // Windows longer than the continuous algorithms take, on the fixed window and the log.
    for (command, function) in [
        ("RL.FIXEDWINDOW", "rl_fixedwindow"),
        ("RL.SLIDINGLOG", "rl_slidinglog"),
    ] {
        for step in [0, 5, 8_796_093, 8_796_094] {
            at(&mut c, T0_MS + step);
            let m = words(&[command, "m:long", "3", "8796093"]);
            let f = words(&["FCALL", function, "1", "f:long", "3", "8796093"]);
            assert_eq!(reply(&mut c, &m), reply(&mut c, &f), "{m:?} at +{step}");
        }
        cmd(&mut c, &["DEL", "m:long", "f:long"]).unwrap();
    }
}

/// RL.SHAPE and `rl_shape`: the six-integer reply (the delay last) and the expiry, on random
/// shapers (L, W, QUEUE, DELAY or NODELAY), with peeks and refunds.
#[test]
fn shaping_agrees_with_the_module() {
    shaping(1);
}

/// Random shaping traces, each call picking one of `shapers` shapers for the key.
pub fn shaping(count: usize) {
    let (_s, mut c) = both();
    let mut delayed = 0;
    for seed in 1..=40u64 {
        let mut rng = Rng(seed * 0x7f4a_7c15);
        cmd(&mut c, &["FLUSHALL"]).unwrap();
        let shapers: Vec<Vec<String>> = (0..count)
            .map(|_| {
                let p = Policy::random(&mut rng, false);
                let q = rng.below(8);
                let mut a = vec![
                    p.l.to_string(),
                    p.w.to_string(),
                    "QUEUE".into(),
                    q.to_string(),
                ];
                match rng.below(3) {
                    0 => a.push("NODELAY".into()),
                    1 => a.extend(["DELAY".to_string(), rng.below(q + 1).to_string()]),
                    _ => {}
                }
                a
            })
            .collect();
        let mut now = T0_MS + rng.below(1_000_000);
        for n in 0..60 {
            now = next_instant(&mut rng, now);
            at(&mut c, now);
            let (m, f) = match rng.below(10) {
                0 => (
                    words(&["RL.PEEK", "m:s"]),
                    words(&["FCALL", "rl_peek", "1", "f:s"]),
                ),
                1 => (
                    words(&["RL.REFUND", "m:s", "2"]),
                    words(&["FCALL", "rl_refund", "1", "f:s", "2"]),
                ),
                _ => {
                    let mut a = shapers[rng.below(count as u64) as usize].clone();
                    let q: u64 = a[3].parse().unwrap();
                    a.extend(["COST".to_string(), cost(&mut rng, q + 1).to_string()]);
                    let mut m = words(&["RL.SHAPE", "m:s"]);
                    m.extend(a.clone());
                    let mut f = words(&["FCALL", "rl_shape", "1", "f:s"]);
                    f.extend(a);
                    (m, f)
                }
            };
            let (rm, rf) = (reply(&mut c, &m), reply(&mut c, &f));
            assert_eq!(rm, rf, "seed {seed} call {n}: {m:?}");
            if let Ok(Value::Array(v)) = rf {
                delayed += usize::from(v.len() == 6 && v[5] != Value::Int(0));
            }
            assert_eq!(
                pexpiretime(&mut c, "m:s"),
                pexpiretime(&mut c, "f:s"),
                "seed {seed} call {n}: {m:?}"
            );
        }
    }
    assert!(delayed > 20, "only {delayed} delayed replies");
}

/// RL.CONCURRENCY and `rl_concurrency`: every reply, on random calls (ACQUIRE, RENEW, RELEASE,
/// PEEK over a few ids, now and then another N or TTL) at random instants; every expiry while
/// the library's set exists (it goes with its last holder; the module keeps an empty limiter
/// for 1 s).
#[test]
fn concurrency_agrees_with_the_module() {
    let (_s, mut c) = both();
    let (mut admitted, mut denied) = (0, 0);
    for seed in 1..=30u64 {
        let mut rng = Rng(seed * 0x9e37_79b9);
        cmd(&mut c, &["FLUSHALL"]).unwrap();
        let policies: Vec<(String, String)> = (0..2)
            .map(|_| {
                (
                    (1 + rng.below(4)).to_string(),
                    (1 + rng.below(3000)).to_string(),
                )
            })
            .collect();
        let mut now = T0_MS + rng.below(1_000_000);
        for n in 0..80 {
            now = next_instant(&mut rng, now);
            at(&mut c, now);
            let (l, w) = &policies[usize::from(rng.below(8) == 0)];
            let op = rng.pick(&["ACQUIRE", "ACQUIRE", "RENEW", "RELEASE", "PEEK", "acquire"]);
            let id = rng.pick(&["a", "b", "c", "d", "e"]);
            let mut args = vec![l.clone(), w.clone(), op.to_string()];
            if op != "PEEK" {
                args.push(id.to_string());
            }
            let mut m = words(&["RL.CONCURRENCY", "m:c"]);
            m.extend(args.clone());
            let mut f = words(&["FCALL", "rl_concurrency", "1", "f:c"]);
            f.extend(args);
            let (rm, rf) = (reply(&mut c, &m), reply(&mut c, &f));
            assert_eq!(rm, rf, "seed {seed} call {n}: {m:?}");
            if let Ok(Value::Array(v)) = &rm {
                match (op.eq_ignore_ascii_case("ACQUIRE"), &v[0]) {
                    (true, Value::Int(1)) => admitted += 1,
                    (true, _) => denied += 1,
                    _ => {}
                }
            }
            let library = pexpiretime(&mut c, "f:c");
            if library > 0 {
                assert_eq!(
                    pexpiretime(&mut c, "m:c"),
                    library,
                    "seed {seed} call {n}: {m:?}"
                );
            }
        }
    }
    assert!(
        admitted > 200 && denied > 50,
        "{admitted} admitted, {denied} denied"
    );
}

/// The one documented difference in replies within the bounds: a sliding log with a window of
/// 2^43 ns (about 2.44 hours) or longer stores its instants in ticks of 2^k ns in the module,
/// rounded up, so off a tick the module's entry leaves up to a tick later and its
/// `reset_after_ms`, `retry_after_ms` and expiry read 1 ms more; the library's entry leaves
/// exactly W after its millisecond. Decisions are the same (docs/functions.md).
#[test]
fn long_sliding_log_windows_differ_by_the_module_tick() {
    let (_s, mut c) = both();
    at(&mut c, T0_MS + 1);
    let w = "100000000000";
    let module = |cost: &str| words(&["RL.SLIDINGLOG", "m:k", "3", w, "COST", cost]);
    let library = |cost: &str| words(&["FCALL", "rl_slidinglog", "1", "f:k", "3", w, "COST", cost]);
    let ints =
        |v: Result<Value, String>| -> Vec<i64> { redis::from_redis_value(&v.unwrap()).unwrap() };
    for cost in ["1", "2", "1"] {
        let (m, f) = (
            ints(reply(&mut c, &module(cost))),
            ints(reply(&mut c, &library(cost))),
        );
        assert_eq!(m[..3], f[..3], "cost {cost}");
        assert_eq!(
            (m[3] - f[3], m[4] - f[4]),
            (if m[0] == 1 { 0 } else { 1 }, 1),
            "{m:?} {f:?}"
        );
    }
    assert_eq!(pexpiretime(&mut c, "m:k") - pexpiretime(&mut c, "f:k"), 1);
}

/// A denial under the key's own policy, a `COST 0` peek and `rl_peek` write nothing: the
/// server's count of changes (`rdb_changes_since_last_save`, what propagation follows) stays
/// and a WATCH on the key holds; an admitted request aborts it.
#[test]
fn denials_and_peeks_write_nothing() {
    let (_s, mut c) = both();
    let changes = |c: &mut Connection| -> String {
        let info: String = redis::cmd("INFO").arg("persistence").query(c).unwrap();
        info.lines()
            .find(|l| l.starts_with("rdb_changes_since_last_save:"))
            .unwrap()
            .to_string()
    };
    // EXEC after WATCH and `call`: whether the transaction ran (nothing touched the key).
    let watched = |c: &mut Connection, call: &[String]| -> bool {
        cmd(c, &["WATCH", "f:k"]).unwrap();
        reply(c, call).unwrap();
        cmd(c, &["MULTI"]).unwrap();
        cmd(c, &["PING"]).unwrap();
        cmd(c, &["EXEC"]).unwrap() != Value::Nil
    };
    for (_, function, _, _) in ALGORITHMS {
        cmd(&mut c, &["DEL", "f:k"]).unwrap();
        let request =
            |cost: &str| words(&["FCALL", function, "1", "f:k", "3", "60000", "COST", cost]);
        let empty = changes(&mut c);
        assert!(
            !watched(&mut c, &request("3")),
            "{function}: an admission must touch the key"
        );
        let before = changes(&mut c);
        assert_ne!(
            before, empty,
            "{function}: an admission must count as a change"
        );
        for call in [
            request("1"),
            request("0"),
            words(&["FCALL", "rl_peek", "1", "f:k"]),
            words(&["FCALL_RO", "rl_peek", "1", "f:k"]),
        ] {
            assert!(watched(&mut c, &call), "{call:?} touched the key");
        }
        assert_eq!(changes(&mut c), before, "{function}: something was written");
    }
}
