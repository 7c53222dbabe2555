//! The random calls of a differential trace, each as the module's words and the library's,
//! and `run_trace`, which sends both and holds every reply and expiry equal.

use super::*;

#[derive(Clone, Copy, Debug)]
pub struct Policy {
    pub l: u64,
    pub w: u64,
    pub b: u64,
}

impl Policy {
    /// Near the library's bounds: L and BURST up to 10^7, W up to 9·10^7 ms.
    pub fn large(rng: &mut Rng, burst: bool) -> Policy {
        let l = rng.pick(&[9_999_991, 10_000_000, 123_457, 65_536, 3]);
        let w = rng.pick(&[1, 7, 86_400_000, 90_000_000, 89_999_999]);
        let b = if burst { 1 + rng.below(10_000_000) } else { l };
        Policy { l, w, b }
    }

    pub fn random(rng: &mut Rng, burst: bool) -> Policy {
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
    pub fn args(&self, burst: bool) -> Vec<String> {
        let mut a = vec![self.l.to_string(), self.w.to_string()];
        if burst {
            a.extend(["BURST".to_string(), self.b.to_string()]);
        }
        a
    }
}

/// One limiter key of a trace: its algorithm and the policies calls pick from (one, or two for
/// the policy-change traces).
pub struct Limiter {
    pub algo: usize,
    pub policies: Vec<Policy>,
}

/// A call, as the module's words and the library's.
pub struct Call {
    pub module: Vec<String>,
    pub library: Vec<String>,
    /// The keys it touches, without the side's prefix.
    pub keys: Vec<String>,
}

pub fn cost(rng: &mut Rng, capacity: u64) -> u64 {
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
pub fn random_call(rng: &mut Rng, limiters: &[Limiter]) -> Call {
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
            let (chosen, keys, mut module, mut library) =
                multi_key_head(rng, limiters, "RL.ALL", "rl_all");
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
/// 1 to 3 distinct keys of `limiters` drawn at random for a call over several keys (`RL.ALL`,
/// `RL.SETTLE`): their indices, their names, and the heads of the module's call (`command n
/// m:k…`) and of the library's (`FCALL fname n f:k…`), each limiter's words to follow.
pub fn multi_key_head(
    rng: &mut Rng,
    limiters: &[Limiter],
    command: &str,
    fname: &str,
) -> (Vec<usize>, Vec<String>, Vec<String>, Vec<String>) {
    let n = 1 + rng.below(3.min(limiters.len() as u64)) as usize;
    let mut chosen: Vec<usize> = Vec::new();
    while chosen.len() < n {
        let j = rng.below(limiters.len() as u64) as usize;
        if !chosen.contains(&j) {
            chosen.push(j);
        }
    }
    let keys: Vec<String> = chosen.iter().map(|j| format!("k{j}")).collect();
    let mut module = vec![command.to_string(), n.to_string()];
    module.extend(keys.iter().map(|k| format!("m:{k}")));
    let mut library = vec!["FCALL".into(), fname.to_string(), n.to_string()];
    library.extend(keys.iter().map(|k| format!("f:{k}")));
    (chosen, keys, module, library)
}

pub fn next_instant(rng: &mut Rng, now: u64) -> u64 {
    match rng.below(20) {
        0..=7 => now,
        8..=13 => now + 1 + rng.below(10),
        14..=18 => now + rng.below(3000),
        _ => now - rng.below(30),
    }
}

/// Runs `calls` random calls over `limiters` on both sides; every reply and every touched key's
/// absolute expiry must be equal. Returns how many were answered without an error.
pub fn run_trace(c: &mut Connection, seed: u64, limiters: &[Limiter], calls: usize) -> usize {
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

pub fn limiters(rng: &mut Rng, policies: usize) -> Vec<Limiter> {
    (0..ALGORITHMS.len())
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
