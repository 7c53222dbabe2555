//! rl_charge (RL.CHARGE): overages charged into debt, paid by the next requests.

use super::*;
use crate::calls::{cost, limiters, multi_key_head, next_instant, Call, Limiter};

/// A call of a charge trace on key `k{i}`: a request, a charge (the POLICY form, which creates
/// a missing key), a refund, or a peek.
pub fn charge_call(rng: &mut Rng, limiters: &[Limiter]) -> Call {
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
    let (chosen, keys, mut module, mut library) =
        multi_key_head(rng, limiters, "RL.SETTLE", "rl_settle");
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
