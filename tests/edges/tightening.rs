//! A tightened policy is never forgotten, even when the call that brings it is denied: by every
//! limiter, in a debt, a lease, RL.ALL and a peek; a TTL never shorter than the last reset.

use super::*;

/// The reply of `RL.REFUND probe 1` on a copy of `key`: fields 2–5 are a peek under the policy
/// *stored* in the key, so they show which policy the key holds without touching it.
fn stored_policy_probe(c: &mut Connection, key: &str) -> [i64; 5] {
    let probe = format!("{key}:probe");
    cmd(c, &["COPY", key, &probe, "REPLACE"]).unwrap();
    let reply = rl(c, &["RL.REFUND", &probe, "1"]);
    cmd(c, &["DEL", &probe]).unwrap();
    reply
}

/// Admits among `n` calls of `words`.
fn admits(c: &mut Connection, words: &[&str], n: usize) -> i64 {
    (0..n).map(|_| rl(c, words)[0]).sum()
}

/// The sequence for one algorithm, at the debug clock's T0: A spends everything, B
/// (tighter) is denied — and must still be stored, with a TTL covering its reset, so that 2 s
/// later B still denies.
fn denied_tightening_is_never_forgotten(command: &str, a: &[&str], b: &[&str]) {
    let (_s, mut c) = server();
    let key = "t";
    let spend = call(command, key, a, &["COST", "10"]);
    assert_eq!(rl(&mut c, &words(&spend))[0], 1, "{spend:?}");
    let before = dump(&mut c, key);
    let tightened = call(command, key, b, &[]);
    let denial = rl(&mut c, &words(&tightened));
    assert_eq!(denial[0], 0, "{tightened:?}: {denial:?}");
    let reset_after = denial[4];
    assert!(reset_after > 1000, "{tightened:?}: {denial:?}");
    // The key lives at least until the denial's reset (on the debug clock, which is at T0).
    let at = pexpiretime(&mut c, key);
    assert!(
        at >= T0_MS as i64 + reset_after,
        "{command}: the key expires at T0+{} ms, before the denial's reset_after_ms {reset_after}",
        at - T0_MS as i64
    );
    // The new policy is stored: the key changed, and a peek under the stored policy resets
    // later than anything policy A (1 s) could say.
    assert_ne!(
        dump(&mut c, key),
        before,
        "{command}: the denied call with a new policy stored nothing"
    );
    let probe = stored_policy_probe(&mut c, key);
    assert!(
        probe[4] > 1000,
        "{command}: the key still holds the old policy (refund probe {probe:?})"
    );
    // 2 s later the tightened policy still denies: 10 per minute were spent at T0.
    clock_advance(&mut c, 2000);
    let got = admits(&mut c, &words(&tightened), 10);
    assert_eq!(
        got, 0,
        "{command}: {got} extra admitted 2 s after the tightening"
    );
}

#[test]
fn denied_tightening_is_never_forgotten_by_any_limiter() {
    for (command, a, b) in tightenings() {
        denied_tightening_is_never_forgotten(command, &a, &b);
    }
}

/// The bucket algorithms' debt (GCRA, token bucket) must drain at the new rate from the
/// tightening on: 400 ms after it, 10 per minute refills nothing (the issue saw 4 admits: the old
/// rate, 10 per second).
#[test]
fn denied_tightening_stops_debt_draining_at_the_old_rate() {
    let buckets = tightenings()
        .into_iter()
        .filter(|(command, ..)| algorithm(command).burst);
    for (command, a, b) in buckets {
        let (_s, mut c) = server();
        rl(&mut c, &words(&call(command, "d", &a, &["COST", "10"])));
        let tightened = call(command, "d", &b, &[]);
        assert_eq!(rl(&mut c, &words(&tightened))[0], 0, "{tightened:?}");
        clock_advance(&mut c, 400);
        let got = admits(&mut c, &words(&tightened), 10);
        assert_eq!(
            got, 0,
            "{command}: {got} admitted 400 ms after the tightening"
        );
    }
}

/// `RL.LEASE` with a new policy that grants nothing stores the policy too.
#[test]
fn lease_with_a_new_policy_and_nothing_granted_stores_the_policy() {
    let (_s, mut c) = server();
    assert_eq!(
        rl(&mut c, &["RL.LEASE", "l", "10", "1000", "WANT", "10"])[0],
        10
    );
    let before = dump(&mut c, "l");
    let tightened = ["RL.LEASE", "l", "10", "60000", "WANT", "5"];
    let reply = rl(&mut c, &tightened);
    assert_eq!(reply[0], 0, "{reply:?}");
    assert!(
        pexpiretime(&mut c, "l") >= T0_MS as i64 + reply[4],
        "the key expires before the zero grant's reset_after_ms {}",
        reply[4]
    );
    assert_ne!(dump(&mut c, "l"), before, "the new policy was not stored");
    clock_advance(&mut c, 2000);
    let granted = rl(&mut c, &["RL.LEASE", "l", "10", "60000", "WANT", "10"])[0];
    assert_eq!(granted, 0, "{granted} granted 2 s after the tightening");
}

/// `RL.ALL`'s limiters, each a five-integer array, after the combined decision.
fn rl_all(c: &mut Connection, words: &[&str]) -> Vec<[i64; 5]> {
    let mut command = redis::cmd(words[0]);
    for w in &words[1..] {
        command.arg(*w);
    }
    let v: Vec<Vec<i64>> = command
        .query(c)
        .unwrap_or_else(|e| panic!("{words:?}: {e}"));
    v.into_iter()
        .map(|r| r.try_into().unwrap_or_else(|r| panic!("{words:?}: {r:?}")))
        .collect()
}

/// `RL.ALL` denied because one key's tightened policy denies stores that policy too.
#[test]
fn denied_tightening_in_rl_all_is_never_forgotten() {
    let (_s, mut c) = server();
    rl(&mut c, &["RL.GCRA", "a", "10", "1000", "COST", "10"]);
    rl(&mut c, &["RL.FIXEDWINDOW", "b", "5", "1000"]);
    let before = dump(&mut c, "a");
    let all = [
        "RL.ALL",
        "2",
        "a",
        "b",
        "GCRA",
        "10",
        "60000",
        "FIXEDWINDOW",
        "5",
        "1000",
    ];
    let replies = rl_all(&mut c, &all);
    assert_eq!(replies[0][0], 0, "{replies:?}");
    let reset_after = replies[1][4];
    assert!(reset_after > 1000, "{replies:?}");
    assert!(
        pexpiretime(&mut c, "a") >= T0_MS as i64 + reset_after,
        "a expires before its reset_after_ms {reset_after}"
    );
    assert_ne!(
        dump(&mut c, "a"),
        before,
        "the new policy of a was not stored"
    );
    clock_advance(&mut c, 2000);
    let got = admits(&mut c, &["RL.GCRA", "a", "10", "60000"], 10);
    assert_eq!(got, 0, "{got} extra admitted 2 s after the tightening");
}

/// A peek (`COST 0`) with a new policy stays write-free: it stores nothing, moves no expiry
/// and creates no key.
#[test]
fn peek_with_a_new_policy_writes_nothing() {
    let (_s, mut c) = server();
    for (command, a, b) in tightenings() {
        let key = format!("p:{command}");
        rl(&mut c, &words(&call(command, &key, &a, &["COST", "10"])));
        let (before, at) = (dump(&mut c, &key), pexpiretime(&mut c, &key));
        let peek = call(command, &key, &b, &["COST", "0"]);
        assert_eq!(rl(&mut c, &words(&peek))[0], 0, "{peek:?}");
        assert_eq!(dump(&mut c, &key), before, "{peek:?} changed the key");
        assert_eq!(pexpiretime(&mut c, &key), at, "{peek:?} moved the expiry");
        let fresh = call(command, "p:fresh", &b, &["COST", "0"]);
        assert_eq!(rl(&mut c, &words(&fresh))[0], 1, "{fresh:?}");
        assert_eq!(dump(&mut c, "p:fresh"), None, "{fresh:?} created the key");
    }
}

/// A small deterministic generator (xorshift64): the same sequence on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The property, on the server: for calls that switch at random between policies, at
/// random times, with random costs, the key's TTL is never shorter than the last reply's
/// reset_after_ms — denied calls and zero grants included.
#[test]
fn ttl_never_shorter_than_the_last_reset_across_policy_switches() {
    let (_s, mut c) = server();
    let with_burst: &[&[&str]] = &[
        &["10", "1000", "BURST", "10"],
        &["10", "60000", "BURST", "10"],
        &["5", "200", "BURST", "20"],
        &["100", "10000", "BURST", "30"],
    ];
    let windows: &[&[&str]] = &[
        &["10", "1000"],
        &["10", "60000"],
        &["3", "500"],
        &["50", "10000"],
    ];
    // Every limiter of the registry, and RL.LEASE.
    let mut families: Vec<(&str, &[&[&str]], &str)> = limiter_algorithms()
        .map(|a| {
            let policies = if a.burst { with_burst } else { windows };
            (a.command.as_str(), policies, "COST")
        })
        .collect();
    families.push(("RL.LEASE", with_burst, "WANT"));
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut now = T0_MS as i64;
    let mut denied_switches = 0;
    for (command, policies, amount) in families {
        let key = format!("prop:{command}");
        let mut last: Option<&[&str]> = None;
        // Two policies per run of calls, switching between them.
        for _ in 0..8 {
            let pair = [
                policies[rng.below(4) as usize],
                policies[rng.below(4) as usize],
            ];
            for _ in 0..40 {
                let policy = pair[rng.below(2) as usize];
                // B when the policy has a burst, else L.
                let capacity = policy.get(3).unwrap_or(&policy[0]);
                let capacity: u64 = capacity.parse().unwrap();
                let n = if rng.below(5) == 0 {
                    capacity
                } else {
                    1 + rng.below(capacity.min(4))
                };
                let n = n.to_string();
                let call = call(command, &key, policy, &[amount, &n]);
                let reply = rl(&mut c, &words(&call));
                if reply[0] == 0 && last.is_some_and(|l| l != policy) {
                    denied_switches += 1;
                }
                last = Some(policy);
                let at = pexpiretime(&mut c, &key);
                if at != -2 {
                    assert!(
                        at >= now + reply[4],
                        "{call:?} answered {reply:?} at T0+{} ms but the key expires at T0+{} ms",
                        now - T0_MS as i64,
                        at - T0_MS as i64
                    );
                }
                let step = if rng.below(4) == 0 {
                    0
                } else {
                    rng.below(2500) as i64
                };
                clock_advance(&mut c, step);
                now += step;
            }
        }
    }
    // The case the property is about happened often enough to matter.
    assert!(
        denied_switches >= 20,
        "{denied_switches} denied policy switches"
    );
}
