//! The Redis Functions library (`functions/ratelimit.lua`) against the module: the same random
//! traces on the same server at the same instants, every reply and every key's absolute expiry
//! equal (docs/functions.md lists what differs, and why). Also: argument errors, effects
//! replication to a replica that never runs a function, memory per key beside the module's, and
//! a cluster with the library loaded on every node.
//!
//! The library reads the server's `TIME`; the copy these tests load reads a clock the test sets
//! instead (`rl_test_clock`), so that both sides decide at the module's debug-clock instant.

mod support;

use support::cluster::*;
use support::*;

const LIBRARY: &str = include_str!("../functions/ratelimit.lua");

/// The clock of the scripts under test: a script keeps nothing between calls, so it reads the
/// instant the test set in the key `rl-test-clock`.
const CLOCK_FROM_KEY: &str =
    "local function now_ms() return tonumber(redis.call('GET', 'rl-test-clock')) end";

/// The library with its one line that reads `TIME` (`local function now_ms(…`) replaced by
/// `clock`.
fn with_clock(clock: &str) -> String {
    let line = LIBRARY
        .lines()
        .find(|l| l.starts_with("local function now_ms("))
        .expect("the clock line");
    LIBRARY.replacen(line, clock, 1)
}

/// The library as shipped, with the one line that reads `TIME` replaced by a clock that the
/// extra function `rl_test_clock` sets: what the differential tests load.
fn test_library() -> String {
    let replaced = with_clock("local test_now = 0 local function now_ms() return test_now end");
    format!(
        "{replaced}\nredis.register_function{{function_name = 'rl_test_clock', \
         flags = {{ 'no-writes' }}, callback = function(_, args) \
         test_now = tonumber(args[1]) return test_now end}}\n"
    )
}

fn load(c: &mut Connection, code: &str) {
    let name: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(code)
        .query(c)
        .unwrap();
    assert_eq!(name, "ratelimit");
}

/// A server with the module (debug clock) and the test copy of the library, both at `ms`.
fn both() -> (Server, Connection) {
    let s = Server::start();
    let mut c = s.connect();
    load(&mut c, &test_library());
    at(&mut c, T0_MS);
    (s, c)
}

/// Sets both clocks.
fn at(c: &mut Connection, ms: u64) {
    clock_set(c, ms);
    let _: i64 = redis::cmd("FCALL")
        .arg("rl_test_clock")
        .arg(0)
        .arg(ms)
        .query(c)
        .unwrap();
}

/// The reply of a command, errors included (as text), so that both sides compare whole.
fn reply(c: &mut Connection, words: &[String]) -> Result<Value, String> {
    let mut command = redis::cmd(&words[0]);
    for w in &words[1..] {
        command.arg(w);
    }
    command.query(c).map_err(|e| {
        format!(
            "{} {}",
            e.code().unwrap_or("?"),
            e.detail().unwrap_or_default()
        )
    })
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
}

/// The module's command for an algorithm, and the library's function: the library has one per
/// limiter of the registry (`traces_agree_with_the_module` fails for a limiter without a row).
const ALGORITHMS: [(&str, &str, &str, bool); 5] = [
    ("RL.GCRA", "rl_gcra", "GCRA", true),
    ("RL.TOKENBUCKET", "rl_tokenbucket", "TOKENBUCKET", true),
    ("RL.SLIDINGLOG", "rl_slidinglog", "SLIDINGLOG", false),
    (
        "RL.SLIDINGCOUNTER",
        "rl_slidingcounter",
        "SLIDINGCOUNTER",
        false,
    ),
    ("RL.FIXEDWINDOW", "rl_fixedwindow", "FIXEDWINDOW", false),
];

#[derive(Clone, Copy, Debug)]
struct Policy {
    l: u64,
    w: u64,
    b: u64,
}

impl Policy {
    /// Near the library's bounds: L and BURST up to 10^7, W up to 9·10^7 ms.
    fn large(rng: &mut Rng, burst: bool) -> Policy {
        let l = rng.pick(&[9_999_991, 10_000_000, 123_457, 65_536, 3]);
        let w = rng.pick(&[1, 7, 86_400_000, 90_000_000, 89_999_999]);
        let b = if burst { 1 + rng.below(10_000_000) } else { l };
        Policy { l, w, b }
    }

    fn random(rng: &mut Rng, burst: bool) -> Policy {
        let l = rng.pick(&[1, 2, 3, 7, 10, 100, 1000]);
        let w = rng.pick(&[1, 3, 10, 100, 1000, 7000, 60_000]);
        let b = if burst && rng.below(2) == 0 {
            1 + rng.below(2 * l)
        } else {
            l
        };
        Policy { l, w, b }
    }

    /// `L W [BURST B]`.
    fn args(&self, burst: bool) -> Vec<String> {
        let mut a = vec![self.l.to_string(), self.w.to_string()];
        if burst {
            a.extend(["BURST".to_string(), self.b.to_string()]);
        }
        a
    }
}

/// One limiter key of a trace: its algorithm and the policies calls pick from (one, or two for
/// the policy-change traces).
struct Limiter {
    algo: usize,
    policies: Vec<Policy>,
}

/// A call, as the module's words and the library's.
struct Call {
    module: Vec<String>,
    library: Vec<String>,
    /// The keys it touches, without the side's prefix.
    keys: Vec<String>,
}

fn cost(rng: &mut Rng, capacity: u64) -> u64 {
    match rng.below(10) {
        0 => 0,
        1 | 2 => 1 + rng.below(capacity),
        _ => 1,
    }
}

fn pick_policy(rng: &mut Rng, lim: &Limiter) -> Policy {
    lim.policies[rng.below(lim.policies.len() as u64) as usize]
}

/// A random call over the trace's limiters.
fn random_call(rng: &mut Rng, limiters: &[Limiter]) -> Call {
    let i = rng.below(limiters.len() as u64) as usize;
    let key = format!("k{i}");
    let lim = &limiters[i];
    let (command, function, _, burst) = ALGORITHMS[lim.algo];
    let single = |module: Vec<String>, library: Vec<String>| Call {
        module,
        library,
        keys: vec![key.clone()],
    };
    match rng.below(20) {
        0 => single(
            words(&["RL.PEEK", &format!("m:{key}")]),
            words(&["FCALL", "rl_peek", "1", &format!("f:{key}")]),
        ),
        1 => {
            let n = (1 + rng.below(3)).to_string();
            single(
                words(&["RL.REFUND", &format!("m:{key}"), &n]),
                words(&["FCALL", "rl_refund", "1", &format!("f:{key}"), &n]),
            )
        }
        2 if lim.algo == 1 => {
            let p = pick_policy(rng, lim);
            let mut args = p.args(true);
            args.extend([
                "WANT".to_string(),
                (1 + rng.below(2 * p.b)).min(10_000_000).to_string(),
            ]);
            let mut module = words(&["RL.LEASE", &format!("m:{key}")]);
            module.extend(args.clone());
            let mut library = words(&["FCALL", "rl_lease", "1", &format!("f:{key}")]);
            library.extend(args);
            single(module, library)
        }
        3 | 4 => {
            // RL.ALL over 1 to 3 distinct keys.
            let n = 1 + rng.below(3.min(limiters.len() as u64)) as usize;
            let mut chosen: Vec<usize> = Vec::new();
            while chosen.len() < n {
                let j = rng.below(limiters.len() as u64) as usize;
                if !chosen.contains(&j) {
                    chosen.push(j);
                }
            }
            let keys: Vec<String> = chosen.iter().map(|j| format!("k{j}")).collect();
            let mut module = vec!["RL.ALL".to_string(), n.to_string()];
            module.extend(keys.iter().map(|k| format!("m:{k}")));
            let mut library = vec!["FCALL".into(), "rl_all".into(), n.to_string()];
            library.extend(keys.iter().map(|k| format!("f:{k}")));
            for &j in &chosen {
                let lim = &limiters[j];
                let (_, _, name, burst) = ALGORITHMS[lim.algo];
                let p = pick_policy(rng, lim);
                let mut part = vec![name.to_string()];
                part.extend(p.args(burst));
                part.extend(["COST".to_string(), cost(rng, p.b).to_string()]);
                module.extend(part.clone());
                library.extend(part);
            }
            Call {
                module,
                library,
                keys,
            }
        }
        _ => {
            let p = pick_policy(rng, lim);
            let mut args = p.args(burst);
            let c = cost(rng, p.b);
            if c != 1 || rng.below(2) == 0 {
                // In capitals the library's hot path takes it, else its general path.
                let option = if rng.below(4) == 0 { "cost" } else { "COST" };
                args.extend([option.to_string(), c.to_string()]);
            }
            let mut module = words(&[command, &format!("m:{key}")]);
            module.extend(args.clone());
            let mut library = words(&["FCALL", function, "1", &format!("f:{key}")]);
            library.extend(args);
            single(module, library)
        }
    }
}

/// The next instant: mostly the same or a few ms later, sometimes much later, sometimes a
/// little earlier (a clock stepped back).
fn next_instant(rng: &mut Rng, now: u64) -> u64 {
    match rng.below(20) {
        0..=7 => now,
        8..=13 => now + 1 + rng.below(10),
        14..=18 => now + rng.below(3000),
        _ => now - rng.below(30),
    }
}

/// Runs `calls` random calls over `limiters` on both sides; every reply and every touched key's
/// absolute expiry must be equal. Returns how many were answered without an error.
fn run_trace(c: &mut Connection, seed: u64, limiters: &[Limiter], calls: usize) -> usize {
    let mut answered = 0;
    let mut rng = Rng(seed);
    let mut now = T0_MS + rng.below(1_000_000);
    for n in 0..calls {
        now = next_instant(&mut rng, now);
        at(c, now);
        let call = random_call(&mut rng, limiters);
        let (m, f) = (reply(c, &call.module), reply(c, &call.library));
        answered += usize::from(f.is_ok());
        assert_eq!(
            m, f,
            "seed {seed} call {n} at {now}: {:?} vs {:?}",
            call.module, call.library
        );
        for k in &call.keys {
            let (pm, pf) = (
                pexpiretime(c, &format!("m:{k}")),
                pexpiretime(c, &format!("f:{k}")),
            );
            assert_eq!(
                pm, pf,
                "seed {seed} call {n} at {now}: expiry of {k} after {:?}",
                call.module
            );
        }
    }
    answered
}

fn limiters(rng: &mut Rng, policies: usize) -> Vec<Limiter> {
    (0..5)
        .map(|algo| {
            let burst = ALGORITHMS[algo].3;
            let mut policies: Vec<Policy> =
                (0..policies).map(|_| Policy::random(rng, burst)).collect();
            if ALGORITHMS[algo].0 == "RL.SLIDINGLOG" {
                for p in &mut policies {
                    p.l = p.l.min(100);
                    p.b = p.l;
                }
            }
            Limiter { algo, policies }
        })
        .collect()
}

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
    let source = with_clock(CLOCK_FROM_KEY);
    let (_s, mut c) = both();
    let mut shas = std::collections::HashMap::new();
    for entry in ratelimit_client::scripts::ENTRIES {
        let script = ratelimit_client::scripts::generate(&source, entry).expect("the marks");
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(&script)
            .query(&mut c)
            .unwrap();
        shas.insert(entry.to_string(), sha);
    }
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

/////////////////////////////////////////////////////////////////////////////////////////////////
// Policy changes. GCRA, token-bucket, fixed-window, sliding-counter and shaper keys remember
// configurations by the module's rule (src/algo/step.rs: up to eight per key, each charged what
// the key admits, dropped at once when as good as fresh or equal to its kin's state carried
// over, one more decided so that it can only deny more): these traces hold every reply and
// expiry equal to the module's. A sliding log keeps the one-configuration rule (a new policy
// carries what was spent over to it), so its switching trace is ignored until the library
// charges each remembered log in place (`cargo test --test functions -- --ignored` shows where
// they part).

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

// End of the policy-change part.
/////////////////////////////////////////////////////////////////////////////////////////////////

/// Policies near the library's bounds (L and BURST up to 10^7, W up to 9·10^7 ms): the products
/// the bounds are there for (B·W near 9·10^14) stay exact.
#[test]
fn large_policies_agree() {
    large_policies(1);
}

/// Random traces over policies near the bounds, `policies` per key.
fn large_policies(policies: usize) {
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
fn shaping(count: usize) {
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

/// Argument errors: the module's text, but for the library's own bounds and the arity message.
#[test]
fn argument_errors_match_the_module() {
    let (_s, mut c) = both();
    cmd(&mut c, &["SET", "m:str", "x"]).unwrap();
    cmd(&mut c, &["SET", "f:str", "x"]).unwrap();
    cmd(&mut c, &["RL.GCRA", "m:gcra", "10", "1000"]).unwrap();
    cmd(&mut c, &["FCALL", "rl_gcra", "1", "f:gcra", "10", "1000"]).unwrap();
    // (function, key, arguments after the key): the same error from both sides.
    let same: &[(&str, &str, &[&str])] = &[
        ("GCRA", "gcra", &["abc", "1000"]),
        ("GCRA", "gcra", &["0", "1000"]),
        ("GCRA", "gcra", &["1.5", "1000"]),
        ("GCRA", "gcra", &["+1", "1000"]),
        ("GCRA", "gcra", &["10", "1000", "BURST"]),
        ("GCRA", "gcra", &["10", "1000", "COST"]),
        ("GCRA", "gcra", &["10", "1000", "BURST", "0"]),
        ("GCRA", "gcra", &["10", "1000", "COST", "-1"]),
        ("GCRA", "gcra", &["10", "1000", "COST", "11"]),
        ("GCRA", "gcra", &["10", "1000", "BURST", "3", "COST", "4"]),
        ("GCRA", "gcra", &["10", "1000", "COST", "1", "cost", "1"]),
        ("GCRA", "gcra", &["10", "1000", "BURST", "5", "burst", "5"]),
        ("GCRA", "gcra", &["10", "1000", "FOO", "1"]),
        ("GCRA", "gcra", &["10", "1000", "\r\nSET", "1"]),
        ("GCRA", "gcra", &["1", "90000000", "BURST", "20000"]),
        ("GCRA", "str", &["10", "1000"]),
        ("TOKENBUCKET", "gcra", &["10", "1000"]),
        ("SLIDINGLOG", "log", &["10", "1000", "BURST", "10"]),
        ("SLIDINGCOUNTER", "c", &["10", "1000", "COST", "11"]),
        ("FIXEDWINDOW", "w", &["10", "1000", "WANT", "1"]),
        ("LEASE", "lease", &["1", "1", "WANT", "0"]),
        ("LEASE", "lease", &["1", "1", "WANT", "1.5"]),
        ("LEASE", "lease", &["1", "1", "BURST", "2"]),
        ("LEASE", "lease", &["1", "1", "COST", "1"]),
        ("LEASE", "lease", &["1", "1", "WANT", "1", "WANT", "2"]),
        ("LEASE", "lease", &["1", "1", "WANT", "1", "BURST"]),
        ("LEASE", "gcra", &["1", "1", "WANT", "1"]),
        ("SHAPE", "gcra", &["10", "1000"]),
        ("SHAPE", "s", &["10", "1000", "QUEUE"]),
        ("SHAPE", "s", &["10", "1000", "QUEUE", "x"]),
        ("SHAPE", "s", &["10", "1000", "QUEUE", "2", "DELAY", "3"]),
        ("SHAPE", "s", &["10", "1000", "DELAY", "1", "NODELAY"]),
        ("SHAPE", "s", &["10", "1000", "NODELAY", "NODELAY"]),
        ("SHAPE", "s", &["10", "1000", "QUEUE", "1", "QUEUE", "1"]),
        ("SHAPE", "s", &["10", "1000", "QUEUE", "2", "COST", "4"]),
        ("SHAPE", "s", &["10", "1000", "BURST", "2"]),
        ("SHAPE", "s", &["1", "90000000", "QUEUE", "20000"]),
        ("REFUND", "gcra", &["0"]),
        ("REFUND", "gcra", &["x"]),
        ("CONCURRENCY", "cc", &["0", "1000", "PEEK"]),
        ("CONCURRENCY", "cc", &["1001", "1000", "PEEK"]),
        ("CONCURRENCY", "cc", &["2", "0", "PEEK"]),
        ("CONCURRENCY", "cc", &["2", "x", "ACQUIRE", "a"]),
        ("CONCURRENCY", "cc", &["2", "1000", "GRAB", "a"]),
        ("CONCURRENCY", "cc", &["2", "1000", "acquire"]),
        ("CONCURRENCY", "cc", &["2", "1000", "RELEASE", ""]),
        ("CONCURRENCY", "cc", &["2", "1000", "PEEK", "a"]),
        ("CONCURRENCY", "cc", &["2", "1000", "ACQUIRE", "a", "b"]),
        ("CONCURRENCY", "str", &["2", "1000", "PEEK"]),
    ];
    // The key prefixes aside, and the bounds (the library's are checked below).
    let relabel = |e: String| {
        let e = e.replace("'m:", "'").replace("'f:", "'");
        e.split(": expected an integer")
            .next()
            .unwrap_or_default()
            .to_string()
    };
    for &(name, key, args) in same {
        let mut m = words(&[&format!("RL.{name}"), &format!("m:{key}")]);
        m.extend(words(args));
        let function = format!("rl_{}", name.to_lowercase());
        let mut f = words(&["FCALL", &function, "1", &format!("f:{key}")]);
        f.extend(words(args));
        let (em, ef) = (reply(&mut c, &m), reply(&mut c, &f));
        assert!(em.is_err(), "{m:?}: {em:?}");
        assert_eq!(em.map_err(relabel), ef.map_err(relabel), "{m:?}");
    }
    // RL.ALL: the module's numkeys is FCALL's.
    let all: &[&[&str]] = &[
        &["2", "a", "a", "GCRA", "10", "1000", "GCRA", "10", "1000"],
        &["2", "a", "b", "GCRA", "10", "1000"],
        &["1", "a", "GCRA", "10", "1000", "GCRA", "10", "1000"],
        &["1", "a", "LEAKY", "10", "1000"],
        &["1", "a", "SLIDINGLOG", "10", "1000", "BURST", "20"],
        &["1", "a", "GCRA", "10", "1000", "COST", "11"],
        &["1", "str", "GCRA", "10", "1000"],
        &["1", "gcra", "FIXEDWINDOW", "10", "1000"],
        &["1", "a", "GCRA", "10", "1000", "WANT", "1"],
    ];
    for args in all {
        let n: usize = args[0].parse().unwrap();
        let mut m = vec!["RL.ALL".to_string(), n.to_string()];
        let mut f = words(&["FCALL", "rl_all", args[0]]);
        for (i, a) in args[1..].iter().enumerate() {
            let (am, af) = if i < n {
                (format!("m:{a}"), format!("f:{a}"))
            } else {
                (a.to_string(), a.to_string())
            };
            m.push(am);
            f.push(af);
        }
        let (em, ef) = (reply(&mut c, &m), reply(&mut c, &f));
        assert!(em.is_err(), "{m:?}: {em:?}");
        assert_eq!(em.map_err(relabel), ef.map_err(relabel), "{m:?}");
    }
    // The library's own bounds (docs/functions.md), each naming the argument.
    let bounds: &[(&[&str], &str)] = &[
        (
            &["rl_gcra", "1", "k", "10000001", "1000"],
            "ERR invalid L '10000001': expected an integer from 1 to 10000000",
        ),
        (
            &["rl_gcra", "1", "k", "10", "90000001"],
            "ERR invalid W '90000001': expected an integer from 1 to 90000000",
        ),
        (
            &["rl_slidingcounter", "1", "k", "10", "90000001"],
            "ERR invalid W '90000001': expected an integer from 1 to 90000000",
        ),
        (
            &["rl_fixedwindow", "1", "k", "10", "1000000000001"],
            "ERR invalid W '1000000000001': expected an integer from 1 to 1000000000000",
        ),
        (
            &[
                "rl_tokenbucket",
                "1",
                "k",
                "10",
                "1000",
                "BURST",
                "10000001",
            ],
            "ERR invalid BURST '10000001': expected an integer from 1 to 10000000",
        ),
        (
            &["rl_lease", "1", "k", "10", "1000", "WANT", "10000001"],
            "ERR invalid WANT '10000001': expected an integer from 1 to 10000000",
        ),
        (
            &["rl_slidinglog", "1", "k", "10001", "1000"],
            "ERR L 10001 is above the library's sliding log maximum (10000)",
        ),
        (
            &["rl_gcra", "1", "k", "10"],
            "ERR wrong number of arguments for 'rl_gcra' function",
        ),
        (
            &["rl_gcra", "2", "k", "j", "10", "1000"],
            "ERR wrong number of arguments for 'rl_gcra' function",
        ),
        (
            &["rl_lease", "1", "k", "10", "1000", "WANT"],
            "ERR wrong number of arguments for 'rl_lease' function",
        ),
        (
            &["rl_all", "0", "GCRA", "10", "1000"],
            "ERR invalid numkeys '0': expected an integer from 1 to 32",
        ),
    ];
    for (args, expected) in bounds {
        let mut f = vec!["FCALL".to_string()];
        f.extend(words(args));
        let e = reply(&mut c, &f).unwrap_err();
        assert!(e.starts_with(expected), "{f:?}: {e}");
    }
    // None of them wrote anything.
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
    let mut keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["f:gcra", "f:str", "m:gcra", "m:str"]);
}

/// Values another client wrote under a limiter's key are never trusted: a string or a list that
/// is not exactly a stored limiter within the bounds is answered WRONGTYPE, a valid header over
/// garbage entries too.
#[test]
fn foreign_values_are_not_limiters() {
    let (_s, mut c) = both();
    let strings = [
        "g 0 1000 10 1 0 0",
        "g 10 1000 10 1 0",
        "g 10 1000 10 1 0 0 0",
        "g 10 1000 10 9999999999999999 0 0",
        "g 10  1000 10 1 0 0",
        "g 10 1000 10 1 0 0 ",
        "g 10 100000000 10 1 0 0",
        "g 10 1000 10000001 1 0 0",
        "t 10 1000 10 abc 0 0",
        "g 10 1000 10 -1 0 0",
        "t 10 1000 10 5 -1 0",
        "t -10 1000 10 5 0 0",
        "t 10 1000 10 --5 0 0",
        "c 10 1000",
        "f -1 1000 0 0",
        "s 10 1000 0 0 0",
        "x 1 2 3",
        "",
        "g",
    ];
    // Long values, which a backtracking pattern would take seconds over: refused at once.
    let long = [
        format!("g {} 1 1 1 1 1", "9".repeat(10_000)),
        format!("g {}", "1 ".repeat(5_000)),
        format!("g 1 1 1 1 1 1{}", " ".repeat(1_000)),
    ];
    for v in strings
        .iter()
        .copied()
        .chain(long.iter().map(String::as_str))
    {
        cmd(&mut c, &["SET", "f:x", v]).unwrap();
        for f in [
            words(&["FCALL", "rl_peek", "1", "f:x"]),
            words(&["FCALL", "rl_refund", "1", "f:x", "1"]),
            words(&["FCALL", "rl_gcra", "1", "f:x", "10", "1000"]),
        ] {
            assert_eq!(
                reply(&mut c, &f),
                Err(format!(
                    "WRONGTYPE the key holds a string, not a{} limiter; use another key or DEL it",
                    if f[1] == "rl_gcra" { " GCRA" } else { "" }
                )),
                "{v:?} {f:?}"
            );
        }
    }
    for head in [
        "s 10 1000 x",
        "s 0 1000 0 0 0",
        "hello",
        "s 10 1000 1 1 1 1",
    ] {
        cmd(&mut c, &["DEL", "f:x"]).unwrap();
        cmd(&mut c, &["RPUSH", "f:x", head, "1 1"]).unwrap();
        let e = reply(
            &mut c,
            &words(&["FCALL", "rl_slidinglog", "1", "f:x", "10", "1000"]),
        );
        assert_eq!(
            e,
            Err("WRONGTYPE the key holds a list, not a sliding log limiter; use another key or DEL it".into()),
            "{head:?}"
        );
    }
    // A valid header over entries it does not describe: refused as the entries are read.
    cmd(&mut c, &["DEL", "f:x"]).unwrap();
    let now = T0_MS.to_string();
    cmd(
        &mut c,
        &[
            "RPUSH",
            "f:x",
            &format!("s 10 1000 5 {now} 3"),
            "garbage",
            "x y",
            "1 99999999999999999999",
        ],
    )
    .unwrap();
    for f in [
        words(&["FCALL", "rl_slidinglog", "1", "f:x", "10", "1000"]),
        words(&["FCALL", "rl_peek", "1", "f:x"]),
        words(&["FCALL", "rl_refund", "1", "f:x", "3"]),
        words(&["FCALL", "rl_slidinglog", "1", "f:x", "5", "1000"]),
    ] {
        let r = reply(&mut c, &f);
        assert!(
            matches!(&r, Err(e) if e.starts_with("WRONGTYPE the key holds a list")),
            "{f:?}: {r:?}"
        );
    }
}

/// The shipped file reads the time once, from `TIME`, on the line the test copy replaces, and
/// peeks are declared read-only.
#[test]
fn the_shipped_file_reads_only_time() {
    assert!(LIBRARY.starts_with("#!lua name=ratelimit\n"));
    let reads: Vec<&str> = LIBRARY.lines().filter(|l| l.contains("TIME")).collect();
    // (`PEXPIRETIME`, which rl_share reads, is a key's expiry, not the clock.)
    let code: Vec<&&str> = reads
        .iter()
        .filter(|l| !l.trim_start().starts_with("--") && l.contains("redis.call('TIME')"))
        .collect();
    assert_eq!(code.len(), 1, "{reads:?}");
    assert!(code[0].starts_with("local function now_ms("));
    assert!(!test_library().contains("'TIME'"));

    let (_s, mut c) = both();
    let list = reply(
        &mut c,
        &words(&["FUNCTION", "LIST", "LIBRARYNAME", "ratelimit"]),
    )
    .unwrap();
    let text = format!("{list:?}");
    for f in [
        "rl_gcra",
        "rl_tokenbucket",
        "rl_slidinglog",
        "rl_slidingcounter",
        "rl_fixedwindow",
        "rl_lease",
        "rl_refund",
        "rl_all",
        "rl_peek",
        "rl_shape",
    ] {
        assert!(text.contains(f), "{f} missing from {text}");
    }
    // FCALL_RO takes only the no-writes function.
    cmd(&mut c, &["FCALL", "rl_gcra", "1", "f:k", "10", "1000"]).unwrap();
    assert!(cmd(&mut c, &["FCALL_RO", "rl_peek", "1", "f:k"]).is_ok());
    assert!(cmd(&mut c, &["FCALL_RO", "rl_gcra", "1", "f:k", "10", "1000"]).is_err());
    // The version the header declares, read-only.
    let declared = LIBRARY
        .lines()
        .find_map(|l| l.strip_prefix("local LIBRARY_VERSION = '"))
        .and_then(|v| v.strip_suffix('\''))
        .expect("the version line");
    assert_eq!(
        reply(&mut c, &words(&["FCALL_RO", "rl_version", "0"])),
        Ok(Value::BulkString(declared.as_bytes().to_vec()))
    );
}

/// The shipped file on the real clock: a fresh key's first reply, and a burst spent at once.
#[test]
fn the_shipped_file_decides_on_the_server_clock() {
    let s = Server::start();
    let mut c = s.connect();
    load(&mut c, LIBRARY);
    let f = |c: &mut Connection, args: &[&str]| {
        let mut w = vec!["FCALL"];
        w.extend(args);
        rl(c, &w)
    };
    assert_eq!(
        f(
            &mut c,
            &["rl_fixedwindow", "1", "w", "5", "86400000", "COST", "5"]
        )[..3],
        [1, 5, 0]
    );
    let denied = f(&mut c, &["rl_fixedwindow", "1", "w", "5", "86400000"]);
    assert_eq!(denied[..3], [0, 5, 0]);
    assert!(denied[3] > 0 && denied[3] <= 86_400_000);
    assert_eq!(
        f(&mut c, &["rl_gcra", "1", "g", "10", "60000"]),
        [1, 10, 9, -1, 6000]
    );
    let ttl: i64 = redis::cmd("PTTL").arg("g").query(&mut c).unwrap();
    assert!((5_900..=6_000).contains(&ttl), "{ttl}");
}

/// Effects replication: a replica ends with the master's exact keys and expiries, and never
/// runs a function (its command statistics show the effects, no FCALL).
#[test]
fn replicas_receive_effects_never_calls() {
    let (master, mut m) = both();
    let replica = Server::start();
    let mut r = replica.connect();
    // Another clock on the replica's module: nothing there may decide.
    clock_set(&mut r, T0_MS + 12_345_678);
    replicate(&mut r, &master);
    cmd(&mut r, &["CONFIG", "RESETSTAT"]).unwrap();
    let mut rng = Rng(77);
    let lims = limiters(&mut rng, 1);
    run_trace(&mut m, 77, &lims, 300);
    wait_replica(&mut m);
    let keys: Vec<String> = redis::cmd("KEYS").arg("f:*").query(&mut m).unwrap();
    assert!(keys.len() >= 4, "{keys:?}");
    for k in &keys {
        assert_eq!(dump(&mut m, k), dump(&mut r, k), "{k}");
        assert_eq!(pexpiretime(&mut m, k), pexpiretime(&mut r, k), "{k}");
    }
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut r)
        .unwrap();
    assert!(!stats.contains("cmdstat_fcall"), "{stats}");
    assert!(stats.contains("cmdstat_set:"), "{stats}");
    // And a replica refuses the write functions, as it refuses the module's commands.
    let e = cmd(&mut r, &["FCALL", "rl_gcra", "1", "f:x", "10", "1000"]).unwrap_err();
    assert!(e.to_string().contains("read only"), "{e}");
    // Its copy of the library reads its own clock (a stored arrival time far ahead of a clock
    // is refused, as a planted one): about the master's.
    cmd(
        &mut r,
        &[
            "FCALL",
            "rl_test_clock",
            "0",
            &(T0_MS + 3_000_000).to_string(),
        ],
    )
    .unwrap();
    assert!(cmd(&mut r, &["FCALL", "rl_peek", "1", &keys[0]]).is_ok());
}

/// `MEMORY USAGE` of one key per algorithm, the module's beside the library's, after the same
/// requests (printed; docs/functions.md quotes it). The library's must stay within a bound.
#[test]
fn memory_per_key() {
    let (_s, mut c) = both();
    println!("{:<18} {:>7} {:>8}", "algorithm", "module", "library");
    for (command, function, _, _) in ALGORITHMS {
        for i in 0..10u64 {
            at(&mut c, T0_MS + i);
            cmd(&mut c, &[command, "m:k", "100", "60000"]).unwrap();
            cmd(&mut c, &["FCALL", function, "1", "f:k", "100", "60000"]).unwrap();
        }
        let usage = |c: &mut Connection, k: &str| -> i64 {
            redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(k)
                .arg("SAMPLES")
                .arg(0)
                .query(c)
                .unwrap()
        };
        let (m, f) = (usage(&mut c, "m:k"), usage(&mut c, "f:k"));
        println!("{command:<18} {m:>7} {f:>8}");
        assert!(f < 1000, "{command}: {f} bytes");
        cmd(&mut c, &["DEL", "m:k", "f:k"]).unwrap();
    }
}

/// A cluster: the library loaded on every master with `redis-cli --cluster call` (masters pass
/// it to their replicas), called through a cluster-aware client on keys in every shard, and
/// RL.ALL's form over hash-tagged keys.
#[test]
fn cluster_with_the_library_on_every_node() {
    let cluster = Cluster::start(5000);
    let first = cluster.live().next().unwrap();
    let node = format!("127.0.0.1:{}", cluster.nodes[first].port);
    // The recipe of docs/functions.md, verbatim but for the node: it prints one line per
    // master, not the library redis-cli echoes as the command it calls.
    let docs = include_str!("../docs/functions.md");
    let recipe = docs
        .lines()
        .find(|l| l.starts_with("redis-cli --cluster call "))
        .expect("the recipe in docs/functions.md")
        .replace("127.0.0.1:7000", &node);
    let out = std::process::Command::new("sh")
        .args(["-c", &recipe])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines.len(), cluster.masters().len(), "{printed}");
    assert!(
        lines.iter().all(|l| l.ends_with(": ratelimit")),
        "{printed}"
    );
    for n in cluster.live().collect::<Vec<_>>() {
        let mut c = cluster.connect(n);
        wait_for("the library on every node", || {
            let list: Value = redis::cmd("FUNCTION").arg("LIST").query(&mut c).unwrap();
            format!("{list:?}").contains("rl_gcra")
        });
    }
    let mut client = cluster.client();
    let tags = tags_for_all_slots();
    let masters = cluster.masters();
    let mut shards = std::collections::BTreeSet::new();
    for slot in (0..16384u16).step_by(1000) {
        let key = format!("{{{}}}:user", tags[slot as usize]);
        let r: Vec<i64> = redis::cmd("FCALL")
            .arg("rl_gcra")
            .arg(1)
            .arg(&key)
            .arg(10)
            .arg(60_000)
            .query(&mut client)
            .unwrap();
        assert_eq!(r, [1, 10, 9, -1, 6000], "{key}");
        shards.insert(cluster.owner(slot));
        let all: Vec<Vec<i64>> = redis::cmd("FCALL")
            .arg("rl_all")
            .arg(2)
            .arg(&key)
            .arg(format!("{{{}}}:ip", tags[slot as usize]))
            .arg("GCRA")
            .arg(10)
            .arg(60_000)
            .arg("FIXEDWINDOW")
            .arg(100)
            .arg(86_400_000)
            .query(&mut client)
            .unwrap();
        assert_eq!(all[0][..4], [1, 10, 8, -1], "{key}");
    }
    assert_eq!(shards.len(), masters.len());
    // Keys in different slots: the cluster refuses the call before the library runs.
    let e = redis::cmd("FCALL")
        .arg("rl_all")
        .arg(2)
        .arg("a")
        .arg("b")
        .arg("GCRA")
        .arg(1)
        .arg(1000)
        .arg("GCRA")
        .arg(1)
        .arg(1000)
        .query::<Value>(&mut client)
        .unwrap_err();
    assert!(e.to_string().to_uppercase().contains("CROSSSLOT"), "{e}");
}

/////////////////////////////////////////////////////////////////////////////////////////////////
// Hostile values. Keys are plain strings and lists: any client can write them. Whatever a key
// holds, every function answers (a reply, or WRONGTYPE), with a number of commands bounded by
// the list's length (the policy's L, never a count the value claims), and every integer it
// answers is exact (below 2^53).

/// A field of a planted value: numbers a limiter could hold, near the bounds, and text no
/// limiter holds (exponents, signs, NaN, 20-digit and 40-digit runs).
fn hostile_field() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    prop_oneof![
        (0u64..12).prop_map(|n| n.to_string()),
        (0u64..=20_000_000).prop_map(|n| n.to_string()),
        (0u64..200_000).prop_map(|d| (T0_MS - 100_000 + d).to_string()),
        prop::sample::select(vec![
            "999999999999999",
            "1000000000000000",
            "9007199254740992",
            "9007199254740993",
            "18446744073709551615",
            "1e400",
            "-1",
            "-0",
            "-999999999999999",
            "nan",
            "inf",
            "0x10",
            "1.5",
            "",
            " 1",
            "99999999999999999999999999999999999999",
        ])
        .prop_map(String::from),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
    ]
}

/// What a test plants under a key.
#[derive(Clone, Debug)]
enum Planted {
    String(String),
    List(Vec<String>),
    Hash,
}

/// A value for a limiter's key: a tag and fields (mostly the right number), a sliding-log list
/// (a header over entries, garbage among them), or another type.
fn hostile_value() -> impl proptest::strategy::Strategy<Value = Planted> {
    use proptest::prelude::*;
    let tag = prop::sample::select(vec!["g", "t", "h", "c", "f", "s", "x"]);
    let string = (tag, prop::collection::vec(hostile_field(), 3..=8))
        .prop_map(|(tag, f)| Planted::String(format!("{tag} {}", f.join(" "))));
    // A plausible limiter, each field of it now and then hostile: what gets checked is the
    // fields one by one.
    let near = (
        prop::sample::select(vec!["g", "t", "h", "c", "f"]),
        1u64..=10,
        prop::sample::select(vec![1u64, 10, 1000, 60_000]),
        1u64..=10,
        prop::collection::vec(
            prop_oneof![
                3 => (0u64..3000).prop_map(|d| (T0_MS - 2000 + d).to_string()),
                3 => (0u64..12).prop_map(|n| n.to_string()),
                1 => hostile_field(),
            ],
            4,
        ),
        prop::bool::weighted(0.8),
    )
        .prop_map(|(tag, l, w, b, rest, plausible)| {
            // Fields after the policy: (tat_ms, rem, ns[, d]), (tokens, ns, last), (start,
            // prev, curr), (start, count); a window start is aligned when plausible.
            let mut rest = rest;
            let aligned = |s: &str| {
                s.parse::<u64>()
                    .map(|n| (n - n % w).to_string())
                    .unwrap_or_else(|_| s.to_string())
            };
            let (policy, fields) = match tag {
                "c" => (format!("{l} {w}"), 3),
                "f" => (format!("{l} {w}"), 2),
                "h" => (format!("{l} {w} {b}"), 4),
                _ => (format!("{l} {w} {b}"), 3),
            };
            if plausible && matches!(tag, "c" | "f") {
                rest[0] = aligned(&rest[0]);
            }
            if plausible && tag == "t" {
                rest.rotate_left(1);
            }
            rest.truncate(fields);
            format!("{tag} {policy} {}", rest.join(" "))
        });
    // A key that remembers configurations: several such values, " ; "-separated.
    let remembered = prop::collection::vec(near.clone(), 2..=5)
        .prop_map(|parts| Planted::String(parts.join(" ; ")));
    let near = near.prop_map(Planted::String);
    // A sliding log as the library writes it (sorted entries, the header's sum), sometimes with
    // one field of it hostile.
    let plausible_log = (
        1u64..=10,
        prop::sample::select(vec![1u64, 1000, 60_000]),
        prop::collection::vec((0u64..3, 1u64..4), 0..10),
        prop::option::weighted(0.3, (0usize..16, hostile_field())),
    )
        .prop_map(|(l, w, steps, hostile)| {
            let mut at = T0_MS - 2500;
            let mut entries: Vec<(u64, u64)> = Vec::new();
            for (gap, n) in steps {
                at += 1 + gap * 300;
                entries.push((at, n));
            }
            entries.truncate(l as usize);
            let total: u64 = entries.iter().map(|e| e.1).sum();
            let newest = entries.last().map_or(0, |e| e.0);
            let mut fields = [
                l.to_string(),
                w.to_string(),
                total.to_string(),
                newest.to_string(),
                entries.len().to_string(),
            ];
            let mut counts: Vec<String> = entries.iter().map(|e| e.1.to_string()).collect();
            if let Some((i, v)) = hostile {
                if let Some(f) = fields.get_mut(i) {
                    *f = v;
                } else if let Some(n) = counts.get_mut(i - fields.len()) {
                    *n = v;
                }
            }
            let mut out = vec![format!("s {}", fields.join(" "))];
            out.extend(
                entries
                    .iter()
                    .zip(&counts)
                    .map(|((a, _), n)| format!("{a} {n}")),
            );
            Planted::List(out)
        });
    let entry = prop_oneof![
        (0u64..3000, 1u64..5).prop_map(|(d, n)| format!("{} {n}", T0_MS - 1000 + d)),
        (hostile_field(), hostile_field()).prop_map(|(a, b)| format!("{a} {b}")),
        hostile_field(),
    ];
    let log = (
        1u64..=10,
        prop::sample::select(vec![1u64, 1000, 60_000]),
        prop::collection::vec(hostile_field(), 3),
        prop::collection::vec(entry, 0..40),
    )
        .prop_map(|(l, w, head, entries)| {
            let mut list = vec![format!("s {l} {w} {}", head.join(" "))];
            list.extend(entries);
            Planted::List(list)
        });
    let raw_log = (
        prop::collection::vec(hostile_field(), 5),
        prop::collection::vec(hostile_field(), 0..4),
    )
        .prop_map(|(head, entries)| {
            let mut list = vec![format!("s {}", head.join(" "))];
            list.extend(entries);
            Planted::List(list)
        });
    prop_oneof![
        1 => string,
        4 => near,
        2 => remembered,
        1 => log,
        4 => plausible_log,
        1 => raw_log,
        1 => Just(Planted::Hash),
    ]
}

fn plant(c: &mut Connection, key: &str, value: &Planted) {
    cmd(c, &["DEL", key]).unwrap();
    match value {
        Planted::String(v) => {
            cmd(c, &["SET", key, v]).unwrap();
        }
        Planted::List(items) => {
            let mut words = vec!["RPUSH", key];
            words.extend(items.iter().map(String::as_str));
            cmd(c, &words).unwrap();
        }
        Planted::Hash => {
            cmd(c, &["HSET", key, "tat", "1"]).unwrap();
        }
    }
}

/// Every function over `key`, under the policies it is called with: 10 per second, and the
/// planted value's own policy when it reads as one (no policy change then).
fn hostile_calls(key: &str, value: &Planted) -> Vec<Vec<String>> {
    let own = match value {
        Planted::String(v) => v.split(' ').skip(1).take(2).collect::<Vec<_>>(),
        Planted::List(items) => items[0].split(' ').skip(1).take(2).collect(),
        Planted::Hash => Vec::new(),
    };
    let mut policies = vec![vec!["10".to_string(), "1000".to_string()]];
    // COST 3 only where it fits the capacity (10); an argument error is not the point here.
    let small = |s: &str| s.parse::<u64>().is_ok_and(|n| (1..=10_000).contains(&n));
    if own.len() == 2 && own.iter().all(|f| small(f)) {
        policies.push(own.iter().map(|f| f.to_string()).collect());
    }
    let mut calls = vec![
        words(&["FCALL", "rl_peek", "1", key]),
        words(&["FCALL", "rl_refund", "1", key, "1"]),
    ];
    for p in &policies {
        for (_, function, name, _) in ALGORITHMS {
            let costs: &[&str] = if p[0] == "10" {
                &["1", "0", "3"]
            } else {
                &["1", "0"]
            };
            for &cost in costs {
                let mut call = words(&["FCALL", function, "1", key]);
                call.extend(p.iter().cloned());
                call.extend(words(&["COST", cost]));
                calls.push(call);
            }
            let mut all = words(&["FCALL", "rl_all", "2", key, "{h}:fresh", name]);
            all.extend(p.iter().cloned());
            all.extend(words(&["GCRA", "10", "1000"]));
            calls.push(all);
        }
        let mut shape = words(&["FCALL", "rl_shape", "1", key]);
        shape.extend(p.iter().cloned());
        shape.extend(words(&["QUEUE", "3"]));
        calls.push(shape);
        let mut lease = words(&["FCALL", "rl_lease", "1", key]);
        lease.extend(p.iter().cloned());
        lease.extend(words(&["WANT", "2"]));
        calls.push(lease);
    }
    calls
}

/// Every integer of a reply (nested for rl_all), or what is not one.
fn reply_ints(v: &Value, out: &mut Vec<i64>) -> Result<(), String> {
    match v {
        Value::Int(n) => out.push(*n),
        Value::Nil => {}
        Value::Array(items) => {
            for item in items {
                reply_ints(item, out)?;
            }
        }
        other => return Err(format!("{other:?}")),
    }
    Ok(())
}

/// How many commands the server ran since the last `CONFIG RESETSTAT`, FCALL aside: what the
/// function called (each LRANGE reads at most 33 elements).
fn commands_run(c: &mut Connection) -> u64 {
    let stats: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
    stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_fcall:"))
        .filter(|l| !l.starts_with("cmdstat_config"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// The SHA of each function's script on the scripts backend that has a hot path, loaded on `c`,
/// its clock read from the key `rl-test-clock` (a script keeps nothing between calls).
fn hot_scripts(c: &mut Connection) -> std::collections::HashMap<String, String> {
    let source = with_clock(CLOCK_FROM_KEY);
    ["rl_gcra", "rl_tokenbucket"]
        .into_iter()
        .map(|entry| {
            let script = ratelimit_client::scripts::generate(&source, entry).expect("the marks");
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(&script)
                .query(c)
                .unwrap();
            (entry.to_string(), sha)
        })
        .collect()
}

/// Random and adversarial values under every function's key: each call answers a reply whose
/// integers are exact, or WRONGTYPE, running at most a few commands per 32 list elements; a
/// value the library answered and wrote is one it reads again; the server answers a second
/// connection throughout. A hang would fail the read timeout instead of blocking the suite.
/// The functions with a hot path are called through the scripts backend too, whose hot path
/// remembers nothing between calls.
#[test]
fn hostile_values_are_answered_in_bounded_work() {
    use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
    let (s, mut c) = both();
    c.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let scripts = hot_scripts(&mut c);
    let other = std::cell::RefCell::new(s.connect());
    // The runner takes a `Fn`: the connections and the count are borrowed per case.
    let c = std::cell::RefCell::new(c);
    let answered = std::cell::Cell::new(0usize);
    // A fixed seed: the same 200 cases on every run, so the count of replies below is stable.
    let config = Config {
        cases: 200,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let key = "{h}:planted";
    let strategy = (hostile_value(), 0u64..4000);
    runner
        .run(&strategy, |(value, offset)| {
            let c = &mut *c.borrow_mut();
            at(c, T0_MS - 2000 + offset);
            let now = (T0_MS - 2000 + offset).to_string();
            cmd(c, &["SET", "rl-test-clock", &now]).unwrap();
            let calls = hostile_calls(key, &value).into_iter().flat_map(|call| {
                let script = scripts.get(&call[1]).map(|sha| {
                    let mut evalsha = call.clone();
                    evalsha[0] = "EVALSHA".into();
                    evalsha[1] = sha.clone();
                    evalsha
                });
                std::iter::once(call).chain(script)
            });
            for call in calls {
                plant(c, key, &value);
                let length = match &value {
                    Planted::List(items) => items.len() as u64,
                    _ => 1,
                };
                let before = dump(c, key);
                cmd(c, &["CONFIG", "RESETSTAT"]).unwrap();
                let r = reply(c, &call);
                let run = commands_run(c);
                let wrote = dump(c, key) != before;
                // Reading: one LRANGE per 32 entries, twice over at most (a policy change,
                // then the decision); writing: a handful of commands.
                let bound = 24 + 2 * length.div_ceil(32);
                if run > bound {
                    return Err(TestCaseError::fail(format!(
                        "{call:?} on {value:?}: {run} commands (bound {bound})"
                    )));
                }
                match &r {
                    Ok(v) => {
                        let mut ints = Vec::new();
                        reply_ints(v, &mut ints)
                            .map_err(|e| TestCaseError::fail(format!("{call:?}: {e}")))?;
                        if let Some(n) = ints.iter().find(|n| n.unsigned_abs() >= 1 << 53) {
                            return Err(TestCaseError::fail(format!(
                                "{call:?} on {value:?}: {n} is not exact in a double"
                            )));
                        }
                        answered.set(answered.get() + 1);
                        // What the library answered on, and wrote, it reads again.
                        let peek = reply(c, &words(&["FCALL", "rl_peek", "1", key]));
                        if wrote && peek.is_err() {
                            return Err(TestCaseError::fail(format!(
                                "{call:?} on {value:?} answered {v:?}, then the key: {peek:?}"
                            )));
                        }
                    }
                    Err(e) if e.starts_with("WRONGTYPE ") => {}
                    Err(e) => {
                        return Err(TestCaseError::fail(format!("{call:?} on {value:?}: {e}")))
                    }
                }
            }
            let pong: String = redis::cmd("PING").query(&mut *other.borrow_mut()).unwrap();
            assert_eq!(pong, "PONG");
            Ok(())
        })
        .unwrap();
    let answered = answered.get();
    assert!(
        answered > 400,
        "only {answered} calls answered with a reply"
    );
}

/// The values the attack used: a sliding-log header claiming 10^15 entries (the server hung),
/// a million entries over an empty list, an entry count of 10^400, a GCRA arrival time of
/// 10^15 − 1 ms, garbage entries under a valid header: WRONGTYPE at once, for every function
/// that reads the key.
#[test]
fn planted_headers_are_refused_at_once() {
    let (_s, mut c) = both();
    let now = T0_MS.to_string();
    let lists: Vec<Vec<String>> = vec![
        words(&["s 10 1000 0 1 999999999999999"]),
        words(&["s 10 1000 0 1 1000000"]),
        vec![format!("s 10 1000 1{} 1 1", "0".repeat(400)), "1 1".into()],
        vec![
            format!("s 10 1000 5 {now} 3"),
            "garbage".into(),
            "x y".into(),
            "1 99999999999999999999".into(),
        ],
    ];
    for list in &lists {
        let mut push = vec!["RPUSH", "f:plog"];
        push.extend(list.iter().map(String::as_str));
        for call in [
            words(&["FCALL", "rl_slidinglog", "1", "f:plog", "10", "1000"]),
            words(&["FCALL", "rl_slidinglog", "1", "f:plog", "10", "1001"]),
            words(&["FCALL", "rl_refund", "1", "f:plog", "1"]),
            words(&["FCALL", "rl_peek", "1", "f:plog"]),
            words(&["FCALL", "rl_all", "1", "f:plog", "SLIDINGLOG", "10", "1000"]),
        ] {
            cmd(&mut c, &["DEL", "f:plog"]).unwrap();
            cmd(&mut c, &push).unwrap();
            let r = reply(&mut c, &call);
            assert!(
                matches!(&r, Err(e) if e.starts_with("WRONGTYPE ")),
                "{list:?} {call:?}: {r:?}"
            );
        }
    }
    cmd(&mut c, &["SET", "f:g", "g 10 1000 10 999999999999999 0 0"]).unwrap();
    for call in [
        words(&["FCALL", "rl_gcra", "1", "f:g", "10", "1000"]),
        words(&["FCALL", "rl_peek", "1", "f:g"]),
    ] {
        let r = reply(&mut c, &call);
        assert!(
            matches!(&r, Err(e) if e.starts_with("WRONGTYPE ")),
            "{call:?}: {r:?}"
        );
    }
}

/// How many times each command ran since the last `CONFIG RESETSTAT`, FCALL and CONFIG aside.
fn commands_by_name(c: &mut Connection) -> std::collections::BTreeMap<String, u64> {
    let stats: String = redis::cmd("INFO").arg("commandstats").query(c).unwrap();
    stats
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            (name != "fcall" && !name.starts_with("config")).then(|| (name.to_string(), calls))
        })
        .collect()
}

/// A policy change on a full log of 10^4 entries (the library's largest L) reads the entries
/// that leave and writes the header: alternating W by 1 ms costs a few commands per call, not
/// the log rewritten (the attack's 189.8 ms and 209 KB per call). A change that drops or merges
/// most of the log reads it once; the calls after it are small again.
#[test]
fn a_policy_change_on_a_full_log_costs_only_what_leaves() {
    let (_s, mut c) = both();
    let l = 10_000u64;
    let now = T0_MS + 20_000;
    let mut push = vec![
        "RPUSH".to_string(),
        "f:big".into(),
        format!("s {l} 3600000 {l} {} {l}", now - 1),
    ];
    push.extend((0..l).map(|i| format!("{} 1", now - l + i)));
    for chunk in push[2..].chunks(1000) {
        let mut words = vec!["RPUSH", "f:big"];
        words.extend(chunk.iter().map(String::as_str));
        cmd(&mut c, &words).unwrap();
    }
    let call = |c: &mut Connection, l: &str, w: &str| -> Vec<i64> {
        let r = reply(c, &words(&["FCALL", "rl_slidinglog", "1", "f:big", l, w]));
        redis::from_redis_value(&r.unwrap()).unwrap()
    };
    for i in 0..20u64 {
        at(&mut c, now + i);
        cmd(&mut c, &["CONFIG", "RESETSTAT"]).unwrap();
        let w = if i % 2 == 0 { "3600001" } else { "3600000" };
        assert_eq!(call(&mut c, "10000", w)[..3], [0, 10_000, 0], "call {i}");
        let run = commands_by_name(&mut c);
        let total: u64 = run.values().sum();
        assert!(total <= 6, "call {i}: {run:?}");
        assert!(
            !run.contains_key("rpush") && !run.contains_key("del"),
            "{run:?}"
        );
    }
    // A refund takes from the newest entries, in place (the key read as any limiter first:
    // GET, TYPE, then the list).
    cmd(&mut c, &["CONFIG", "RESETSTAT"]).unwrap();
    let r = reply(&mut c, &words(&["FCALL", "rl_refund", "1", "f:big", "2"]));
    let r: Vec<i64> = redis::from_redis_value(&r.unwrap()).unwrap();
    assert_eq!(r[..3], [2, 10_000, 2]);
    let run = commands_by_name(&mut c);
    assert!(run.values().sum::<u64>() <= 8, "{run:?}");
    assert!(
        !run.contains_key("rpush") && !run.contains_key("del"),
        "{run:?}"
    );
    // Half the window: the hour's configuration, remembered, still counts the older half, so
    // nothing leaves the log (docs/functions.md, the sliding log's rule); the entries that left
    // the new window are read once (32 entries per LRANGE), and where its window starts is
    // stored with it.
    at(&mut c, now + 20);
    cmd(&mut c, &["CONFIG", "RESETSTAT"]).unwrap();
    assert_eq!(call(&mut c, "10000", "5000")[..3], [1, 10_000, 5_022]);
    let run = commands_by_name(&mut c);
    assert!(run.values().sum::<u64>() <= 6 + 5_000 / 32 + 2, "{run:?}");
    let len: i64 = redis::cmd("LLEN").arg("f:big").query(&mut c).unwrap();
    assert_eq!(len, 1 + 9_998 + 1);
    // L = 10 over the same W: denied, and the calls after it read a few entries from each end
    // (each configuration from where its window starts), whatever the log's length.
    assert_eq!(call(&mut c, "10", "5000")[..3], [0, 10, 0]);
    for i in 0..3 {
        cmd(&mut c, &["CONFIG", "RESETSTAT"]).unwrap();
        assert_eq!(call(&mut c, "10", "5000")[..3], [0, 10, 0]);
        let run = commands_by_name(&mut c);
        assert!(run.values().sum::<u64>() <= 6, "call {i}: {run:?}");
    }
}

/////////////////////////////////////////////////////////////////////////////////////////////////
// rl_charge (RL.CHARGE): overages charged into debt, paid by the next requests.

/// A call of a charge trace on key `k{i}`: a request, a charge (the POLICY form, which creates
/// a missing key), a refund, or a peek.
fn charge_call(rng: &mut Rng, limiters: &[Limiter]) -> Call {
    let i = rng.below(limiters.len() as u64) as usize;
    let key = format!("k{i}");
    let lim = &limiters[i];
    let (command, function, name, burst) = ALGORITHMS[lim.algo];
    let p = lim.policies[0];
    let (m, f) = (format!("m:{key}"), format!("f:{key}"));
    if rng.below(6) == 0 {
        return settle_call(rng, limiters);
    }
    let (mut module, mut library, args) = match rng.below(10) {
        0..=3 => {
            let mut args = p.args(burst);
            args.extend(["COST".to_string(), cost(rng, p.b).to_string()]);
            (
                words(&[command, &m]),
                words(&["FCALL", function, "1", &f]),
                args,
            )
        }
        4..=6 => {
            let mut args = vec![(1 + rng.below(3 * p.b)).to_string()];
            if rng.below(2) == 0 {
                args.extend(["POLICY".to_string(), name.to_string()]);
                args.extend(p.args(burst));
            }
            (
                words(&["RL.CHARGE", &m]),
                words(&["FCALL", "rl_charge", "1", &f]),
                args,
            )
        }
        7 | 8 => (
            words(&["RL.REFUND", &m]),
            words(&["FCALL", "rl_refund", "1", &f]),
            vec![(1 + rng.below(2 * p.b)).to_string()],
        ),
        _ => (
            words(&["RL.PEEK", &m]),
            words(&["FCALL", "rl_peek", "1", &f]),
            vec![],
        ),
    };
    module.extend(args.clone());
    library.extend(args);
    Call {
        module,
        library,
        keys: vec![key],
    }
}

/// RL.SETTLE over 1 to 3 distinct keys, each by a random signed difference (0 included).
fn settle_call(rng: &mut Rng, limiters: &[Limiter]) -> Call {
    let n = 1 + rng.below(3.min(limiters.len() as u64)) as usize;
    let mut chosen: Vec<usize> = Vec::new();
    while chosen.len() < n {
        let j = rng.below(limiters.len() as u64) as usize;
        if !chosen.contains(&j) {
            chosen.push(j);
        }
    }
    let keys: Vec<String> = chosen.iter().map(|j| format!("k{j}")).collect();
    let mut module = vec!["RL.SETTLE".to_string(), n.to_string()];
    module.extend(keys.iter().map(|k| format!("m:{k}")));
    let mut library = vec!["FCALL".into(), "rl_settle".into(), n.to_string()];
    library.extend(keys.iter().map(|k| format!("f:{k}")));
    for &j in &chosen {
        let lim = &limiters[j];
        let (_, _, name, burst) = ALGORITHMS[lim.algo];
        let p = lim.policies[0];
        let by = rng.below(4 * p.b + 1) as i64 - 2 * p.b as i64;
        let mut part = vec![name.to_string()];
        part.extend(p.args(burst));
        part.extend(["BY".to_string(), by.to_string()]);
        module.extend(part.clone());
        library.extend(part);
    }
    Call {
        module,
        library,
        keys,
    }
}

/// Requests, charges into debt (and keys created in debt), refunds and peeks: every reply and
/// every key's absolute expiry equal to the module's.
#[test]
fn charges_agree_with_the_module() {
    let (_s, mut c) = both();
    let (mut charged, mut settled) = (0, 0);
    for seed in 1..=60u64 {
        let mut rng = Rng(seed * 0x5851_f42d);
        let lims = limiters(&mut rng, 1);
        cmd(&mut c, &["FLUSHALL"]).unwrap();
        let mut now = T0_MS + rng.below(1_000_000);
        for n in 0..80 {
            now = next_instant(&mut rng, now);
            at(&mut c, now);
            let call = charge_call(&mut rng, &lims);
            let (m, f) = (reply(&mut c, &call.module), reply(&mut c, &call.library));
            assert_eq!(
                m, f,
                "seed {seed} call {n} at {now}: {:?} vs {:?}",
                call.module, call.library
            );
            charged += usize::from(call.module[0] == "RL.CHARGE" && m.is_ok());
            for k in &call.keys {
                assert_eq!(
                    pexpiretime(&mut c, &format!("m:{k}")),
                    pexpiretime(&mut c, &format!("f:{k}")),
                    "seed {seed} call {n} at {now}: expiry of {k} after {:?}",
                    call.module
                );
            }
            settled += usize::from(call.module[0] == "RL.SETTLE" && m.is_ok());
        }
    }
    assert!(charged > 400, "{charged} charges");
    assert!(settled > 300, "{settled} settles");
}

#[test]
fn charge_errors_match_the_module() {
    let (_s, mut c) = both();
    cmd(&mut c, &["SET", "m:s", "x"]).unwrap();
    cmd(&mut c, &["SET", "f:s", "x"]).unwrap();
    rl(&mut c, &["RL.TOKENBUCKET", "m:t", "10", "1000"]);
    cmd(
        &mut c,
        &["FCALL", "rl_tokenbucket", "1", "f:t", "10", "1000"],
    )
    .unwrap();
    // (n's bound is the library's own: docs/functions.md.)
    for args in [
        &["x", "1", "2"][..],
        &["x", "1", "POLICY"],
        &["x", "1", "POLICY", "SHAPE", "10", "1000"],
        &["x", "1", "POLICY", "GCRA", "10", "1000", "COST", "5"],
        &[
            "x",
            "1",
            "POLICY",
            "FIXEDWINDOW",
            "10",
            "1000",
            "BURST",
            "5",
        ],
        &[
            "x", "1", "POLICY", "GCRA", "10", "1000", "BURST", "5", "BURST", "5",
        ],
        &["t", "1", "POLICY", "GCRA", "10", "1000"],
        &["s", "1"],
    ] {
        let mut module = vec!["RL.CHARGE".to_string(), format!("m:{}", args[0])];
        let mut library = words(&["FCALL", "rl_charge", "1", &format!("f:{}", args[0])]);
        module.extend(words(&args[1..]));
        library.extend(words(&args[1..]));
        let (m, f) = (reply(&mut c, &module), reply(&mut c, &library));
        assert!(m.is_err(), "{module:?}: {m:?}");
        assert_eq!(m, f.map_err(|e| e.replace("f:", "m:")), "{module:?}");
    }
}

/// The library registers one function per algorithm of the core's registry (`rl_<word>`), and
/// its RL.ALL words are the registry's limiters: its one list (`LIST` in ratelimit.lua) cannot
/// drift from the module's without this failing.
#[test]
fn the_library_registers_one_function_per_algorithm_of_the_registry() {
    let (_s, mut c) = both();
    let list = reply(
        &mut c,
        &words(&["FUNCTION", "LIST", "LIBRARYNAME", "ratelimit"]),
    )
    .unwrap();
    let text = format!("{list:?}");
    let registered: std::collections::BTreeSet<String> = text
        .split(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
        .filter(|w| w.starts_with("rl_") && *w != "rl_test_clock")
        .map(str::to_string)
        .collect();
    let registry = ratelimit_core::algo::listed::REGISTRY;
    let mut expected: std::collections::BTreeSet<String> = registry
        .iter()
        .map(|a| format!("rl_{}", a.word.to_ascii_lowercase()))
        .collect();
    for f in [
        "rl_lease",
        "rl_refund",
        "rl_charge",
        "rl_all",
        "rl_peek",
        "rl_settle",
        "rl_version",
        "rl_inspect",
        "rl_throttle",
        "rl_share",
        "rl_demand",
    ] {
        expected.insert(f.to_string());
    }
    // What only the module does says so.
    let err = reply(&mut c, &words(&["FCALL", "rl_inspect", "1", "k"])).unwrap_err();
    assert!(
        err.contains("RL.INSPECT needs the redis-ratelimit module"),
        "{err}"
    );
    assert_eq!(registered, expected);
    let limiters: Vec<&str> = registry
        .iter()
        .filter(|a| a.limiter)
        .map(|a| a.word)
        .collect();
    let (last, first) = limiters.split_last().expect("the registry lists limiters");
    let wanted = format!(
        "ERR unknown algorithm 'NOPE'; expected {} or {last}",
        first.join(", ")
    );
    let err = reply(
        &mut c,
        &words(&["FCALL", "rl_all", "1", "k", "NOPE", "10", "1000"]),
    )
    .unwrap_err();
    assert!(err.contains(&wanted[4..]), "{err} vs {wanted}");
}

/////////////////////////////////////////////////////////////////////////////////////////////////
// Shares and demand: the regions controller's RL.SHARE and RL.DEMAND (rl_share, rl_demand) on
// the keys the gateways call, every reply and expiry equal to the module's. The library takes
// no share on a sliding log (docs/functions.md, what differs): these traces use the others.

/// The limiters a key may hold a share on (ALGORITHMS' rows but the sliding log).
const SHARED: [usize; 4] = [0, 1, 3, 4];

/// A random call of a share trace: RL.SHARE (one key, or two of one algorithm), RL.DEMAND, a
/// gateway's call (a request, a lease, RL.ALL, a refund, a peek) under the key's safe policy, or
/// now and then another one, or a settle (RL.CHARGE, RL.REFUND, RL.SETTLE).
fn share_call(rng: &mut Rng, limiters: &[Limiter], now: u64) -> Call {
    let i = rng.below(limiters.len() as u64) as usize;
    let lim = &limiters[i];
    let (_, _, name, _) = ALGORITHMS[lim.algo];
    let safe = lim.policies[0];
    match rng.below(8) {
        0 | 1 => {
            let mut keys = vec![i];
            if rng.below(3) == 0 {
                // Its twin: the same algorithm (a missing key is created under it).
                keys.push(i ^ 1);
            }
            let mut shares = Vec::new();
            for _ in &keys {
                let share = match rng.below(6) {
                    0 => 0,
                    _ => 1 + rng.below(2 * safe.l),
                };
                let expire_at = match rng.below(12) {
                    0 => now.saturating_sub(rng.below(100)),
                    _ => now + 1 + rng.below(5000),
                };
                shares.push((share, expire_at));
            }
            let head = vec![
                name.to_string(),
                safe.l.to_string(),
                safe.w.to_string(),
                safe.b.to_string(),
            ];
            let mut module = vec!["RL.SHARE".to_string()];
            module.extend(head.clone());
            let mut library = vec!["FCALL".into(), "rl_share".into(), keys.len().to_string()];
            library.extend(keys.iter().map(|k| format!("f:k{k}")));
            library.extend(head);
            for (k, (share, at)) in keys.iter().zip(&shares) {
                module.extend([format!("m:k{k}"), share.to_string(), at.to_string()]);
                library.extend([share.to_string(), at.to_string()]);
            }
            Call {
                module,
                library,
                keys: keys.iter().map(|k| format!("k{k}")).collect(),
            }
        }
        2 => {
            let n = 1 + rng.below(3) as usize;
            let keys: Vec<String> = (0..n)
                .map(|_| format!("k{}", rng.below(limiters.len() as u64)))
                .collect();
            let mut module = vec!["RL.DEMAND".to_string()];
            module.extend(keys.iter().map(|k| format!("m:{k}")));
            let mut library = vec!["FCALL".into(), "rl_demand".into(), n.to_string()];
            library.extend(keys.iter().map(|k| format!("f:{k}")));
            Call {
                module,
                library,
                keys,
            }
        }
        3 => charge_call(rng, limiters),
        _ => random_call(rng, limiters),
    }
}

/// The keys of a share trace: two per algorithm that takes a share (k0 and k1 the first, …),
/// each with a safe policy the gateways call with, and now and then another (a gateway with an
/// older configuration).
fn share_limiters(rng: &mut Rng) -> Vec<Limiter> {
    SHARED
        .iter()
        .flat_map(|&algo| [algo, algo])
        .map(|algo| {
            let burst = ALGORITHMS[algo].3;
            let mut policies = vec![Policy::random(rng, burst)];
            if rng.below(3) == 0 {
                policies.push(Policy::random(rng, burst));
            }
            // The safe policy most of the time.
            policies.push(policies[0]);
            policies.push(policies[0]);
            Limiter { algo, policies }
        })
        .collect()
}

/// Runs a share trace; `library` turns the library's words into what is sent (FCALL as it is,
/// or EVALSHA for the scripts backend). Returns how many library calls were answered, and how
/// many RL.DEMAND rows counted requests on a key holding a share.
fn run_share_trace(
    c: &mut Connection,
    seed: u64,
    calls: usize,
    set_clock: &dyn Fn(&mut Connection, u64),
    library: &dyn Fn(Vec<String>) -> Vec<String>,
) -> (usize, usize) {
    let mut rng = Rng(seed * 0x5851_f42d);
    let limiters = share_limiters(&mut rng);
    let mut now = T0_MS + rng.below(1_000_000);
    let (mut answered, mut counted) = (0, 0);
    for n in 0..calls {
        now = next_instant(&mut rng, now);
        set_clock(c, now);
        let call = share_call(&mut rng, &limiters, now);
        let (m, f) = (reply(c, &call.module), reply(c, &library(call.library)));
        answered += usize::from(f.is_ok());
        if let (Ok(Value::Array(rows)), "RL.DEMAND") = (&f, call.module[0].as_str()) {
            counted += rows
                .iter()
                .filter(|r| matches!(r, Value::Array(v) if v.first() != Some(&Value::Int(0)) && v.get(2) != Some(&Value::Int(0))))
                .count();
        }
        assert_eq!(m, f, "seed {seed} call {n} at {now}: {:?}", call.module);
        for k in &call.keys {
            assert_eq!(
                pexpiretime(c, &format!("m:{k}")),
                pexpiretime(c, &format!("f:{k}")),
                "seed {seed} call {n} at {now}: expiry of {k} after {:?}",
                call.module
            );
        }
    }
    (answered, counted)
}

#[test]
fn shares_and_demand_agree_with_the_module() {
    let (_s, mut c) = both();
    let (mut answered, mut counted) = (0, 0);
    for seed in 1..=60u64 {
        cmd(&mut c, &["FLUSHALL"]).unwrap();
        let (a, n) = run_share_trace(&mut c, seed, 80, &at, &|w| w);
        (answered, counted) = (answered + a, counted + n);
    }
    println!("{answered} answered, {counted} demand rows of a shared key asked for");
    assert!(
        answered > 3000 && counted > 100,
        "{answered} answered, {counted} counted"
    );
}

/// The same on the scripts backend (its test copy's clock reads a key, as above).
#[test]
fn the_scripts_backend_shares_as_the_module() {
    let source = with_clock(CLOCK_FROM_KEY);
    let (_s, mut c) = both();
    let mut shas = std::collections::HashMap::new();
    for entry in ratelimit_client::scripts::ENTRIES {
        let script = ratelimit_client::scripts::generate(&source, entry).expect("the marks");
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(&script)
            .query(&mut c)
            .unwrap();
        shas.insert(entry.to_string(), sha);
    }
    let set_clock = |c: &mut Connection, now: u64| {
        clock_set(c, now);
        cmd(c, &["SET", "rl-test-clock", &now.to_string()]).unwrap();
    };
    let evalsha = |mut w: Vec<String>| {
        w[0] = "EVALSHA".into();
        w[1] = shas[&w[1]].clone();
        w
    };
    let (mut answered, mut counted) = (0, 0);
    for seed in 1..=20u64 {
        cmd(&mut c, &["FLUSHALL"]).unwrap();
        let (a, n) = run_share_trace(&mut c, seed, 60, &set_clock, &evalsha);
        (answered, counted) = (answered + a, counted + n);
    }
    assert!(
        answered > 600 && counted > 20,
        "{answered} answered, {counted} counted"
    );
}
