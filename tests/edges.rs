//! The module at its edges (issue 9): a tightened policy is never forgotten, even when the call
//! that brings it is denied; replicas never decide; a denial is not a write (WATCH, the dirty
//! counter, keyspace notifications); what ACLs on Redis 7.0 can and cannot do; a corrupted
//! `RL.SETSTATE` in an AOF is dropped with a warning naming the key.

mod support;
use std::time::Duration;

use support::*;

/// Every limiter of the registry with the tightening: policy A (10 per second, all
/// spent at once) then policy B (10 per minute), with BURST 10 where the algorithm takes it.
fn tightenings() -> Vec<(&'static str, Vec<&'static str>, Vec<&'static str>)> {
    limiter_algorithms()
        .map(|a| {
            let burst: &[&str] = if a.burst { &["BURST", "10"] } else { &[] };
            (
                a.command.as_str(),
                with(&["10", "1000"], burst),
                with(&["10", "60000"], burst),
            )
        })
        .collect()
}

/// `command key policy… extra…` as owned words.
fn call(command: &str, key: &str, policy: &[&str], extra: &[&str]) -> Vec<String> {
    [command, key]
        .iter()
        .chain(policy)
        .chain(extra)
        .map(|w| w.to_string())
        .collect()
}

fn words(owned: &[String]) -> Vec<&str> {
    owned.iter().map(String::as_str).collect()
}

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

// ---------------------------------------------------------------------------------------------
// Replicas

/// A debt carried to a policy so slow that it would outlast the last instant a clock can read
/// (100 spent, then 1 per 10^12 ms) is stored at that instant, which a stored state may hold: the
/// key denies, reloads and replicates (the unbounded carried debt failed validation, so the
/// replica refused the effect and a reload refused the RDB).
#[test]
fn a_debt_carried_past_the_end_of_time_is_stored_validly() {
    // Field 1 of the reply: five integers, or RL.SHAPE's six.
    let allowed = |c: &mut Connection, command: &str, words: &[&str]| match command {
        "RL.SHAPE" => ints::<6>(c, words)[0],
        _ => ints::<5>(c, words)[0],
    };
    let (_ms, _rs, mut m, mut r) = pair();
    for command in ["RL.GCRA", "RL.SHAPE"] {
        let key = format!("slow:{command}");
        // The same capacities: BURST 100 and 1, QUEUE 99 and 0.
        let (size, big, one) = match command {
            "RL.SHAPE" => ("QUEUE", "99", "0"),
            _ => ("BURST", "100", "1"),
        };
        let (fast, slow) = (
            ["100", "1000", size, big],
            ["1", "1000000000000", size, one],
        );
        let first: Vec<&str> = [command, &key]
            .into_iter()
            .chain(fast)
            .chain(["COST", "100"])
            .collect();
        assert_eq!(allowed(&mut m, command, &first), 1, "{command}");
        let tightened: Vec<&str> = [command, &key].into_iter().chain(slow).collect();
        assert_eq!(allowed(&mut m, command, &tightened), 0, "{command}");
        wait_replica(&mut m);
        assert_eq!(dump(&mut r, &key), dump(&mut m, &key), "{command}: replica");
        let before = dump(&mut m, &key);
        cmd(&mut m, &["DEBUG", "RELOAD"]).unwrap();
        assert_eq!(dump(&mut m, &key), before, "{command}: reload");
        assert_eq!(allowed(&mut m, command, &tightened), 0, "{command}");
    }
}

/// A rollout: gateways with the old configuration (100 per minute) and the new one (10 per
/// minute) call one key alternately after the old one spent its 100. Every call is denied: a
/// lowered L keeps counting what was spent (a count clamped to the new L let every call under
/// the old policy through, for the three window algorithms). The key's state, with more spent
/// than its L, survives a reload and reaches a replica unchanged.
#[test]
fn alternating_limits_during_a_rollout_admit_nothing_more() {
    let (_ms, _rs, mut m, mut r) = pair();
    for command in ["RL.SLIDINGLOG", "RL.SLIDINGCOUNTER", "RL.FIXEDWINDOW"] {
        let key = format!("rollout:{command}");
        assert_eq!(
            rl(&mut m, &[command, &key, "100", "60000", "COST", "100"])[0],
            1
        );
        let mut admitted = 0;
        for i in 0..40 {
            clock_advance(&mut m, 10);
            let limit = if i % 2 == 0 { "10" } else { "100" };
            admitted += rl(&mut m, &[command, &key, limit, "60000"])[0];
        }
        assert_eq!(
            admitted, 0,
            "{command}: alternating policies refilled the key"
        );
        // Stored under L = 100 by the last call, with all 100 still counted.
        assert_eq!(
            rl(&mut m, &[command, &key, "100", "60000", "COST", "0"])[2],
            0
        );
        assert_eq!(rl(&mut m, &[command, &key, "10", "60000"])[0], 0);
        // Now stored under L = 10 holding 100: valid on reload and on the replica.
        wait_replica(&mut m);
        assert_eq!(dump(&mut r, &key), dump(&mut m, &key), "{command}");
        let before = dump(&mut m, &key);
        cmd(&mut m, &["DEBUG", "RELOAD"]).unwrap();
        assert_eq!(dump(&mut m, &key), before, "{command}: changed by a reload");
        assert_eq!(
            rl(&mut m, &[command, &key, "100", "60000"])[0],
            0,
            "{command}"
        );
    }
}

/// A master and a replica (both with the module, clocks pinned at T0).
fn pair() -> (Server, Server, Connection, Connection) {
    let master = Server::start();
    let replica = Server::start();
    let (mut m, mut r) = (master.connect(), replica.connect());
    clock_set(&mut m, T0_MS);
    clock_set(&mut r, T0_MS);
    replicate(&mut r, &master);
    (master, replica, m, r)
}

/// A denied call that brings a new policy is an effect: the replica gets the same state and
/// expiry as the master, for every algorithm.
#[test]
fn denied_tightening_reaches_the_replica() {
    let (_ms, _rs, mut m, mut r) = pair();
    for (command, a, b) in tightenings() {
        let key = format!("r:{command}");
        rl(&mut m, &words(&call(command, &key, &a, &["COST", "10"])));
        wait_replica(&mut m);
        let before = dump(&mut m, &key);
        assert_eq!(dump(&mut r, &key), before, "{command}: replica out of sync");
        assert_eq!(rl(&mut m, &words(&call(command, &key, &b, &[])))[0], 0);
        wait_replica(&mut m);
        let after = dump(&mut m, &key);
        assert_ne!(
            after, before,
            "{command}: the denied tightening stored nothing"
        );
        assert_eq!(
            dump(&mut r, &key),
            after,
            "{command}: the replica did not get the new policy"
        );
        assert_eq!(pexpiretime(&mut r, &key), pexpiretime(&mut m, &key));
    }
}

/// Every limiter command a client might send to a replica (the key `rr:lease` exists there,
/// replicated from the master): each algorithm's of the registry, then the others.
fn replica_calls(state: &str) -> Vec<Vec<&str>> {
    let own = algorithms()
        .iter()
        .map(|a| with(&[a.command.as_str(), "rr:new", "2", "60000"], a.operation()));
    own.chain([
        vec!["RL.GCRA", "rr:new", "2", "60000", "COST", "0"],
        vec!["RL.TOKENBUCKET", "rr:new", "2", "60000", "BURST", "3"],
        vec!["RL.LEASE", "rr:new", "2", "60000", "WANT", "1"],
        vec!["RL.LEASE", "rr:lease", "10", "60000", "WANT", "1"],
        vec!["RL.REFUND", "rr:lease", "1"],
        vec!["RL.REFUND", "rr:new", "1"],
        vec!["RL.SETSTATE", "rr:new", state],
        vec![
            "RL.ALL",
            "2",
            "rr:new",
            "rr:lease",
            "GCRA",
            "2",
            "60000",
            "TOKENBUCKET",
            "10",
            "60000",
        ],
    ])
    .collect()
}

/// The encoded state of a full GCRA limiter of 10 per 100 ms (burst 10): format 1, tag 1, L, W,
/// B as little-endian u64, TAT 0 as a u128. Every byte is ASCII, so it passes as a word.
fn gcra_full_state() -> String {
    let mut bytes = vec![1u8, 1];
    for n in [10u64, 100, 10] {
        bytes.extend_from_slice(&n.to_le_bytes());
    }
    bytes.extend_from_slice(&0u128.to_le_bytes());
    String::from_utf8(bytes).unwrap()
}

/// The master's keys and what its replica holds: a key the master gave the replica, with
/// everything else equal (no key created or changed on the replica).
fn assert_replica_mirrors(m: &mut Connection, r: &mut Connection) {
    wait_replica(m);
    assert_eq!(
        snapshot(r),
        snapshot(m),
        "the replica diverged from its master"
    );
}

/// `replica-read-only no` does not make a replica decide: every limiter command (RL.SETSTATE
/// from a normal client too) is refused with an error that says to send it to the master,
/// creates and changes nothing, and the replica keeps applying its master's effects.
#[test]
fn writable_replica_refuses_every_limiter_command() {
    let (_ms, _rs, mut m, mut r) = pair();
    cmd(&mut r, &["CONFIG", "SET", "replica-read-only", "no"]).unwrap();
    assert_eq!(
        rl(
            &mut m,
            &["RL.LEASE", "rr:lease", "10", "60000", "WANT", "5"]
        )[0],
        5
    );
    assert_replica_mirrors(&mut m, &mut r);
    for call in replica_calls(&gcra_full_state()) {
        let e = err(&mut r, &call);
        assert!(
            e.starts_with("READONLY ") && e.contains("master"),
            "{call:?} on a writable replica: {e}"
        );
    }
    assert_eq!(
        dump(&mut r, "rr:new"),
        None,
        "a key was created on the replica"
    );
    assert_replica_mirrors(&mut m, &mut r);
    // Nor from a script or a transaction on the replica.
    let script = "return redis.call('RL.GCRA', KEYS[1], 2, 60000)";
    let scripted = cmd(&mut r, &["EVAL", script, "1", "rr:new"]);
    assert!(
        scripted
            .as_ref()
            .is_err_and(|e| e.to_string().contains("master")),
        "{scripted:?}"
    );
    cmd(&mut r, &["MULTI"]).unwrap();
    let _ = cmd(&mut r, &["RL.GCRA", "rr:new", "2", "60000"]);
    let _ = cmd(&mut r, &["EXEC"]);
    assert_eq!(
        dump(&mut r, "rr:new"),
        None,
        "a key was created on the replica"
    );
    // The split: the master admits 2 of 3, the replica decides nothing.
    for _ in 0..3 {
        rl(&mut m, &["RL.GCRA", "split", "2", "60000"]);
        let e = err(&mut r, &["RL.GCRA", "split", "2", "60000"]);
        assert!(e.starts_with("READONLY "), "{e}");
    }
    // The effects of the master's decisions still apply.
    rl(&mut m, &["RL.REFUND", "rr:lease", "2"]);
    run_workload(&mut m, 1);
    assert_replica_mirrors(&mut m, &mut r);
}

/// With the default `replica-read-only yes` every limiter command is refused too.
#[test]
fn read_only_replica_refuses_every_limiter_command() {
    let (_ms, _rs, mut m, mut r) = pair();
    rl(
        &mut m,
        &["RL.LEASE", "rr:lease", "10", "60000", "WANT", "5"],
    );
    assert_replica_mirrors(&mut m, &mut r);
    for call in replica_calls(&gcra_full_state()) {
        let e = err(&mut r, &call);
        assert!(e.starts_with("READONLY "), "{call:?} on a replica: {e}");
    }
    assert_replica_mirrors(&mut m, &mut r);
}

// ---------------------------------------------------------------------------------------------
// A denial is not a write

/// `WATCH key` on `watcher`, then `words` from `other`, then an empty transaction on
/// `watcher`: true when EXEC ran (the key was not signalled as modified).
fn exec_survives(
    watcher: &mut Connection,
    other: &mut Connection,
    key: &str,
    words: &[&str],
) -> bool {
    cmd(watcher, &["WATCH", key]).unwrap();
    let _ = cmd(other, words);
    cmd(watcher, &["MULTI"]).unwrap();
    cmd(watcher, &["PING"]).unwrap();
    match cmd(watcher, &["EXEC"]).unwrap() {
        Value::Nil => false,
        Value::Array(_) => true,
        v => panic!("EXEC answered {v:?}"),
    }
}

/// Keys for the WATCH and dirty-counter tests: `w` (GCRA, 2 per second, spent), `ws` (a
/// string), `full` (a GCRA limiter at full capacity), `z` (a lease with nothing left).
fn watch_fixture(c: &mut Connection) {
    rl(c, &["RL.GCRA", "w", "2", "1000", "COST", "2"]);
    cmd(c, &["SET", "ws", "x"]).unwrap();
    rl(c, &["RL.GCRA", "full", "10", "1000"]);
    assert_eq!(rl(c, &["RL.REFUND", "full", "5"])[0], 1);
    rl(c, &["RL.LEASE", "z", "1", "60000", "WANT", "1"]);
}

/// Calls that change no limiter: denials, peeks, a WRONGTYPE call, argument errors, a refund
/// that gives nothing back, a lease that grants nothing.
const NOT_WRITES: &[&[&str]] = &[
    &["RL.GCRA", "w", "2", "1000"],
    &["RL.GCRA", "w", "2", "1000", "COST", "0"],
    &["RL.GCRA", "ws", "2", "1000"],
    &["RL.REFUND", "ws", "1"],
    &["RL.GCRA", "w", "abc", "1000"],
    &["RL.GCRA", "w", "2", "1000", "COST", "3"],
    &["RL.REFUND", "full", "5"],
    &["RL.REFUND", "missing", "5"],
    &["RL.GCRA", "missing", "2", "1000", "COST", "0"],
    &["RL.LEASE", "z", "1", "60000", "WANT", "1"],
    &[
        "RL.ALL", "2", "w", "full", "GCRA", "2", "1000", "GCRA", "10", "1000",
    ],
    &[
        "RL.ALL", "2", "full", "w", "GCRA", "10", "1000", "GCRA", "2", "1000",
    ],
    &[
        "RL.ALL", "2", "full", "w", "GCRA", "10", "1000", "COST", "0", "GCRA", "2", "1000", "COST",
        "0",
    ],
];

/// The key a call touches first: `RL.ALL numkeys key …` names it after numkeys.
fn first_key<'a>(words: &[&'a str]) -> &'a str {
    if words[0] == "RL.ALL" {
        words[2]
    } else {
        words[1]
    }
}

#[test]
fn denials_peeks_and_errors_leave_a_watched_key_untouched() {
    let (s, mut c) = server();
    let mut watcher = s.connect();
    watch_fixture(&mut c);
    for words in NOT_WRITES {
        assert!(
            exec_survives(&mut watcher, &mut c, first_key(words), words),
            "{words:?} made a watching EXEC fail"
        );
    }
}

/// Calls that change the stored limiter: an admit, a denied call with a new policy (it stores
/// the policy), a refund that gives back, RL.SETSTATE.
#[test]
fn real_changes_touch_a_watched_key() {
    let (s, mut c) = server();
    let mut watcher = s.connect();
    watch_fixture(&mut c);
    rl(&mut c, &["RL.GCRA", "a", "10", "1000"]);
    for words in [
        &["RL.GCRA", "a", "10", "1000"][..],
        &["RL.GCRA", "w", "2", "60000"],
        &["RL.REFUND", "a", "1"],
        &["RL.SETSTATE", "a", &gcra_full_state()],
        &[
            "RL.ALL", "2", "a", "full", "GCRA", "10", "100", "GCRA", "10", "1000",
        ],
        &[
            "RL.ALL", "2", "full", "a", "GCRA", "10", "1000", "GCRA", "10", "100",
        ],
    ] {
        assert!(
            !exec_survives(&mut watcher, &mut c, first_key(words), words),
            "{words:?} did not signal the watched key"
        );
    }
}

fn changes_since_save(c: &mut Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("persistence").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("rdb_changes_since_last_save")
}

#[test]
fn only_real_changes_count_in_rdb_changes_since_last_save() {
    let (_s, mut c) = server();
    watch_fixture(&mut c);
    let before = changes_since_save(&mut c);
    assert!(before > 0);
    for words in NOT_WRITES {
        let _ = cmd(&mut c, words);
        assert_eq!(
            changes_since_save(&mut c),
            before,
            "{words:?} counted as a change"
        );
    }
    rl(&mut c, &["RL.GCRA", "a", "10", "1000"]);
    let after_admit = changes_since_save(&mut c);
    assert!(after_admit > before, "an admit did not count");
    assert_eq!(rl(&mut c, &["RL.GCRA", "w", "2", "60000"])[0], 0);
    assert!(
        changes_since_save(&mut c) > after_admit,
        "a denied call that stores a new policy did not count"
    );
}

/// Keyspace notifications (`notify-keyspace-events KEA`) for real changes, named after the
/// command (`rl.gcra`, `rl.lease`, `rl.refund`, `rl.setstate`, …), and none for denials, peeks,
/// errors or no-ops.
#[test]
fn keyspace_notifications_mark_real_changes_only() {
    let (s, mut c) = server();
    cmd(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "KEA"]).unwrap();
    let mut sub_conn = s.connect();
    let mut sub = sub_conn.as_pubsub();
    sub.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    sub.psubscribe("__keyspace@0__:n:*").unwrap();
    let steps: &[(&[&str], Option<&str>)] = &[
        (&["RL.GCRA", "n:g", "1", "60000"], Some("rl.gcra")),
        (&["RL.GCRA", "n:g", "1", "60000"], None),
        (&["RL.GCRA", "n:g", "1", "60000", "COST", "0"], None),
        (&["RL.GCRA", "n:fresh", "1", "60000", "COST", "0"], None),
        (&["RL.GCRA", "n:g", "x", "60000"], None),
        (&["RL.GCRA", "n:g", "1", "120000"], Some("rl.gcra")),
        (
            &["RL.TOKENBUCKET", "n:t", "5", "1000"],
            Some("rl.tokenbucket"),
        ),
        (
            &["RL.SLIDINGLOG", "n:l", "5", "1000"],
            Some("rl.slidinglog"),
        ),
        (
            &["RL.SLIDINGCOUNTER", "n:c", "5", "1000"],
            Some("rl.slidingcounter"),
        ),
        (
            &["RL.FIXEDWINDOW", "n:f", "5", "1000"],
            Some("rl.fixedwindow"),
        ),
        (&["RL.FIXEDWINDOW", "n:f", "5", "1000", "COST", "5"], None),
        (&["RL.SHAPE", "n:q", "5", "1000"], Some("rl.shape")),
        (
            &["RL.CONCURRENCY", "n:cc", "1", "1000", "ACQUIRE", "a"],
            Some("rl.concurrency"),
        ),
        (
            &["RL.CONCURRENCY", "n:cc", "1", "1000", "ACQUIRE", "b"],
            None,
        ),
        (&["RL.CONCURRENCY", "n:cc", "1", "1000", "PEEK"], None),
        (
            &["RL.CONCURRENCY", "n:cc", "1", "1000", "RELEASE", "b"],
            None,
        ),
        (
            &["RL.CONCURRENCY", "n:cc", "1", "1000", "RELEASE", "a"],
            Some("rl.concurrency"),
        ),
        (
            &["RL.LEASE", "n:t", "5", "1000", "WANT", "2"],
            Some("rl.lease"),
        ),
        (
            &["RL.LEASE", "n:z", "1", "60000", "WANT", "1"],
            Some("rl.lease"),
        ),
        (&["RL.LEASE", "n:z", "1", "60000", "WANT", "1"], None),
        (&["RL.REFUND", "n:t", "1"], Some("rl.refund")),
        (&["RL.REFUND", "n:t", "100"], Some("rl.refund")),
        (&["RL.REFUND", "n:t", "1"], None),
        (&["RL.REFUND", "n:none", "1"], None),
        (
            &["RL.SETSTATE", "n:s", &gcra_full_state()],
            Some("rl.setstate"),
        ),
        (&["RL.SETSTATE", "n:s", "garbage"], None),
        (
            &[
                "RL.ALL",
                "2",
                "n:a",
                "n:t",
                "GCRA",
                "5",
                "1000",
                "TOKENBUCKET",
                "5",
                "1000",
            ],
            Some("rl.all"),
        ),
        (
            &[
                "RL.ALL",
                "2",
                "n:a",
                "n:t",
                "GCRA",
                "5",
                "1000",
                "COST",
                "5",
                "TOKENBUCKET",
                "5",
                "1000",
            ],
            None,
        ),
    ];
    assert_covers(
        "keyspace_notifications_mark_real_changes_only's steps",
        algorithms(),
        steps
            .iter()
            .filter(|(_, event)| event.is_some())
            .map(|(w, _)| w[0]),
    );
    let mut expected = Vec::new();
    for (words, event) in steps {
        let _ = cmd(&mut c, words);
        if let Some(event) = event {
            // RL.ALL: one event per changed key.
            let keys = match words[0] {
                "RL.ALL" => &words[2..4],
                _ => &words[1..2],
            };
            for key in keys {
                expected.push((key.to_string(), event.to_string()));
            }
        }
    }
    cmd(&mut c, &["SET", "n:end", "x"]).unwrap();
    let mut got = Vec::new();
    loop {
        let msg = sub.get_message().expect("a keyspace event (timed out)");
        let key = msg
            .get_channel_name()
            .trim_start_matches("__keyspace@0__:")
            .to_string();
        let event: String = msg.get_payload().unwrap();
        if key == "n:end" {
            break;
        }
        if event.starts_with("rl.") {
            got.push((key, event));
        }
    }
    // Each command's events in order; RL.ALL's per-key events in any order among themselves.
    got.sort();
    expected.sort();
    assert_eq!(got, expected);
}

// ---------------------------------------------------------------------------------------------
// ACL on Redis 7.0

fn redis_version(c: &mut Connection) -> String {
    let info: String = redis::cmd("INFO").arg("server").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .map(|v| v.trim().to_string())
        .expect("redis_version")
}

/// A connection authenticated as `user` (password `pw`).
fn login(s: &Server, user: &str) -> Connection {
    let mut c = s.connect();
    cmd(&mut c, &["AUTH", user, "pw"]).unwrap();
    c
}

/// On Redis 7.0 module commands have no ACL categories: a category deny-list does not keep a
/// user from RL.SETSTATE or RL.DEBUG. This documents the limitation the README states; newer
/// servers get categories (the server matrix), so the test only runs on 7.0.
#[test]
fn acl_category_deny_lists_do_not_cover_operator_commands_on_7_0() {
    let (s, mut c) = server();
    let version = redis_version(&mut c);
    if !version.starts_with("7.0.") {
        eprintln!("skipped on Redis {version}: module commands have ACL categories there");
        return;
    }
    for category in ["-@dangerous", "-@write", "-@admin"] {
        let user = format!("u{}", category.trim_start_matches("-@"));
        cmd(
            &mut c,
            &[
                "ACL", "SETUSER", &user, "on", ">pw", "+@all", category, "~*", "&*",
            ],
        )
        .unwrap();
        let mut u = login(&s, &user);
        // The command runs (and refuses the garbage state): the ACL let it through.
        let e = err(&mut u, &["RL.SETSTATE", "k", "garbage"]);
        assert!(
            e.starts_with("ERR invalid limiter state"),
            "{category}: {e}"
        );
        let e = cmd(&mut u, &["RL.SETSTATE", "k", &gcra_full_state()]);
        assert!(e.is_ok(), "{category}: {e:?}");
        let clock: redis::RedisResult<i64> =
            redis::cmd("RL.DEBUG").arg("CLOCK").arg("GET").query(&mut u);
        assert!(clock.is_ok(), "{category}: {clock:?}");
    }
}

/// The README's allow-list recipe: a gateway user can call every limiter command on its keys
/// and cannot call RL.SETSTATE or RL.DEBUG.
#[test]
fn acl_allow_list_recipe_keeps_gateways_from_operator_commands() {
    let (s, mut c) = server();
    let mut rules = vec![
        "ACL",
        "SETUSER",
        "gateway",
        "on",
        ">pw",
        "-@all",
        "+rl.gcra",
        "+rl.tokenbucket",
        "+rl.lease",
        "+rl.refund",
        "+rl.slidinglog",
        "+rl.slidingcounter",
        "+rl.fixedwindow",
        "~rl:*",
    ];
    // Read commands the module may add later join the recipe when they exist.
    let mut reads = Vec::new();
    for name in ["rl.peek", "rl.inspect", "rl.all"] {
        if cmd(&mut c, &["COMMAND", "INFO", name]).unwrap() != Value::Array(vec![Value::Nil]) {
            reads.push(format!("+{name}"));
        }
    }
    rules.extend(reads.iter().map(String::as_str));
    cmd(&mut c, &rules).unwrap();
    let mut g = login(&s, "gateway");
    assert_eq!(rl(&mut g, &["RL.GCRA", "rl:a", "10", "1000"])[0], 1);
    assert_eq!(
        rl(&mut g, &["RL.LEASE", "rl:b", "10", "1000", "WANT", "3"])[0],
        3
    );
    assert_eq!(rl(&mut g, &["RL.REFUND", "rl:b", "1"])[0], 1);
    assert_eq!(rl(&mut g, &["RL.FIXEDWINDOW", "rl:c", "10", "1000"])[0], 1);
    for words in [
        &["RL.SETSTATE", "rl:a", &gcra_full_state()][..],
        &["RL.DEBUG", "CLOCK", "GET"],
        &["RL.DEBUG", "CLOCK", "ADVANCE", "1000"],
    ] {
        let e = err(&mut g, words);
        assert!(e.starts_with("NOPERM"), "{words:?}: {e}");
    }
    let e = err(&mut g, &["RL.GCRA", "other", "10", "1000"]);
    assert!(e.starts_with("NOPERM"), "{e}");
}

// ---------------------------------------------------------------------------------------------
// Also

/// Overwrites the first byte (the format version) of `key`'s state in the last `RL.SETSTATE`
/// for it in `file`, keeping the RESP framing valid (same length).
fn corrupt_setstate(file: &std::path::Path, key: &str) {
    let mut bytes = std::fs::read(file).unwrap();
    let header = format!("$11\r\nRL.SETSTATE\r\n${}\r\n{key}\r\n$", key.len());
    let at = bytes
        .windows(header.len())
        .rposition(|w| w == header.as_bytes())
        .unwrap_or_else(|| panic!("no RL.SETSTATE for {key} in {}", file.display()));
    let len_end = at
        + header.len()
        + bytes[at + header.len()..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .unwrap();
    let mut state = len_end + 2;
    // An effect (the incremental file) carries its kind (0xE5: a state) and the key's expiry
    // before the state; the AOF rewrite (the base file) writes the bare state.
    if bytes[state] == 0xE5 {
        state += 9;
    }
    assert_eq!(bytes[state], 1, "format byte");
    bytes[state] = 9;
    std::fs::write(file, bytes).unwrap();
}

fn aof_file(s: &Server, kind: &str) -> std::path::PathBuf {
    std::fs::read_dir(s.dir().join("appendonlydir"))
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().ends_with(kind))
        .unwrap_or_else(|| panic!("no {kind} file"))
        .path()
}

/// A corrupted RL.SETSTATE in the AOF (base or incremental file) drops that key — Redis 7.0
/// keeps loading after a command in the AOF fails — and the log says which key and why, at
/// warning level. The other keys load intact.
#[test]
fn corrupted_setstate_in_the_aof_is_logged_with_the_key() {
    let (mut s, mut c) = {
        let s = Server::with(
            &[
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--aof-use-rdb-preamble",
                "no",
            ],
            &[],
        );
        let mut c = s.connect();
        clock_set(&mut c, T0_MS);
        (s, c)
    };
    rl(
        &mut c,
        &["RL.GCRA", "rl:base-victim", "10", "60000", "COST", "7"],
    );
    rl(&mut c, &["RL.GCRA", "rl:keep", "10", "60000", "COST", "3"]);
    wait_persistence_idle(&mut c);
    cmd(&mut c, &["BGREWRITEAOF"]).unwrap();
    wait_persistence_idle(&mut c);
    rl(&mut c, &["RL.SLIDINGLOG", "rl:incr-victim", "10", "60000"]);
    rl(&mut c, &["RL.FIXEDWINDOW", "rl:keep2", "10", "60000"]);
    let kept = ["rl:keep", "rl:keep2"].map(|k| (dump(&mut c, k), pexpiretime(&mut c, k)));
    corrupt_setstate(&aof_file(&s, ".base.aof"), "rl:base-victim");
    corrupt_setstate(&aof_file(&s, ".incr.aof"), "rl:incr-victim");
    s.restart("NOSAVE");
    let mut c = s.connect();
    for key in ["rl:base-victim", "rl:incr-victim"] {
        assert_eq!(
            dump(&mut c, key),
            None,
            "{key} loaded from a corrupted state"
        );
    }
    assert_eq!(
        ["rl:keep", "rl:keep2"].map(|k| (dump(&mut c, k), pexpiretime(&mut c, k))),
        kept
    );
    let log = s.log();
    for key in ["rl:base-victim", "rl:incr-victim"] {
        assert!(
            log.lines().any(|l| l.contains(" # ")
                && l.contains(key)
                && l.contains("invalid limiter state")),
            "no warning naming {key} and the reason; log:\n{log}"
        );
    }
}

#[test]
fn refund_on_a_string_names_what_the_key_holds() {
    let (_s, mut c) = server();
    cmd(&mut c, &["SET", "s", "x"]).unwrap();
    let e = err(&mut c, &["RL.REFUND", "s", "1"]);
    assert!(e.starts_with("WRONGTYPE the key holds a string"), "{e}");
}

/// Every refusal of `RL.SETSTATE` is logged with the key and the reason: on a replica or in an
/// AOF nobody sees the error reply, and the key then keeps a stale limit or none. Among them an
/// effect whose expiry is out of range (0, or past 10^15 ms) and an effect with extra arguments.
#[test]
fn every_setstate_refusal_logs_the_key_and_the_reason() {
    let (s, mut c) = server();
    let effect = |expire_at_ms: u64| {
        let mut bytes = vec![0xE5u8];
        bytes.extend_from_slice(&expire_at_ms.to_le_bytes());
        bytes.extend_from_slice(gcra_full_state().as_bytes());
        bytes
    };
    let delta = {
        let mut bytes = vec![0xEDu8];
        bytes.extend_from_slice(&(T0_MS + 1000).to_le_bytes());
        bytes.extend_from_slice(&[0u8; 26]);
        bytes
    };
    let cases: Vec<(&str, Vec<Vec<u8>>, &str)> = vec![
        ("ss:zero", vec![effect(0)], "expiry out of range"),
        (
            "ss:far",
            vec![effect(1_000_000_000_000_001)],
            "expiry out of range",
        ),
        (
            "ss:extra",
            vec![effect(T0_MS + 1000), b"PXAT".to_vec(), b"5".to_vec()],
            "",
        ),
        (
            "ss:garbage",
            vec![b"garbage".to_vec()],
            "invalid limiter state",
        ),
        ("ss:delta", vec![delta], "invalid limiter state"),
    ];
    for (key, args, reason) in &cases {
        let mut call = redis::cmd("RL.SETSTATE");
        call.arg(*key);
        for a in args {
            call.arg(a.as_slice());
        }
        let e = call.query::<Value>(&mut c).unwrap_err();
        let line = format!("RL.SETSTATE refused for key '{key}': ");
        let log = s.log();
        let logged = log
            .lines()
            .find(|l| l.contains(&line))
            .unwrap_or_else(|| panic!("{key} ({e}) not logged:\n{log}"));
        assert!(logged.contains(reason), "{logged}");
        let exists: i64 = redis::cmd("EXISTS").arg(*key).query(&mut c).unwrap();
        assert_eq!(exists, 0, "{key}");
    }
    // Accepted with a valid expiry: nothing logged.
    let mut call = redis::cmd("RL.SETSTATE");
    call.arg("ss:ok").arg(effect(T0_MS + 1000).as_slice());
    let _: () = call.query(&mut c).unwrap();
    assert!(!s.log().contains("key 'ss:ok'"));
}

/// The module follows the server's role (a master skips asking Redis for it on every write):
/// a server started as a replica by its configuration refuses from its first command, accepts
/// once promoted (`REPLICAOF NO ONE`), and refuses again once it follows a master anew.
#[test]
fn the_refusal_follows_every_change_of_role() {
    let master = Server::start();
    let port = master.port.to_string();
    let replica = Server::with(&["--replicaof", "127.0.0.1", &port], &[]);
    let mut r = replica.connect();
    let call = ["RL.GCRA", "role:k", "2", "60000"];
    let e = err(&mut r, &call);
    assert!(e.starts_with("READONLY "), "replica by configuration: {e}");
    cmd(&mut r, &["REPLICAOF", "NO", "ONE"]).unwrap();
    assert_eq!(rl(&mut r, &call)[0], 1, "promoted: decides");
    replicate(&mut r, &master);
    let e = err(&mut r, &call);
    assert!(e.starts_with("READONLY "), "a replica again: {e}");
}
