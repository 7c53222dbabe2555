//! Replicas: a state carried past the end of time or through a rollout reaches them as stored; a
//! denied tightening is an effect; a writable or read-only replica refuses every limiter command,
//! and the refusal follows every change of role.

use super::*;

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
