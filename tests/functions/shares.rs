//! Shares and demand: the regions controller's RL.SHARE and RL.DEMAND (rl_share, rl_demand) on
//! the keys the gateways call, every reply and expiry equal to the module's. The library takes
//! no share on a sliding log (docs/functions.md, what differs): these traces use the others.

use super::*;
use crate::calls::{next_instant, random_call, Call, Limiter, Policy};
use crate::charges::charge_call;

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
    let (_s, mut c) = both();
    let shas = scripts_on_key_clock(&mut c);
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
