//! Replicas and the AOF receive effects, never decisions: a replica whose clock is hours away
//! from the master's ends with byte-identical state and the same absolute expiry, and a denial or
//! a peek sends nothing down the replication stream.

mod support;
use support::*;

fn offset(c: &mut Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("replication").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("master_repl_offset:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("master_repl_offset")
}

#[test]
fn replica_on_another_clock_ends_byte_identical() {
    let (_ms, _rs, mut m, mut r) = replica_hours_ahead();
    run_workload(&mut m, 4);
    wait_replica(&mut m);
    let (on_master, on_replica) = (snapshot(&mut m), snapshot(&mut r));
    assert!(on_master.len() >= 4);
    assert_eq!(on_master, on_replica);
    let digest =
        |c: &mut Connection| -> String { redis::cmd("DEBUG").arg("DIGEST").query(c).unwrap() };
    assert_eq!(digest(&mut m), digest(&mut r));
}

#[test]
fn replica_refuses_limiter_commands() {
    let (_ms, _rs, _m, mut r) = replica_hours_ahead();
    let e = err(&mut r, &["RL.GCRA", "k", "10", "1000"]);
    assert!(e.starts_with("READONLY"), "{e}");
}

#[test]
fn denials_and_peeks_propagate_nothing() {
    let (_ms, _rs, mut m, _r) = replica_hours_ahead();
    rl(&mut m, &["RL.GCRA", "d", "1", "60000"]);
    wait_replica(&mut m);
    let before = offset(&mut m);
    for words in [
        &["RL.GCRA", "d", "1", "60000"][..],
        &["RL.GCRA", "d", "1", "60000", "COST", "0"],
        &["RL.GCRA", "fresh", "1", "60000", "COST", "0"],
    ] {
        assert_eq!(
            rl(&mut m, words)[0],
            i64::from(words.len() > 4 && words[1] == "fresh")
        );
    }
    assert_eq!(
        offset(&mut m),
        before,
        "a denial or a peek reached the replication stream"
    );
    // An admitted request does propagate.
    rl(&mut m, &["RL.GCRA", "e", "1", "60000"]);
    assert!(offset(&mut m) > before);
}

#[test]
fn the_stream_carries_state_with_an_absolute_expiry() {
    let (_ms, _rs, mut m, mut r) = replica_hours_ahead();
    // reset_after 2000 ms, above the 1 s minimum TTL: the expiry is the master's clock + 2000.
    rl(
        &mut m,
        &["RL.GCRA", "s", "1", "1000", "BURST", "2", "COST", "2"],
    );
    wait_replica(&mut m);
    assert_eq!(pexpiretime(&mut r, "s"), (T0_MS + 2000) as i64);
    assert_eq!(dump(&mut r, "s"), dump(&mut m, "s"));
}

#[test]
fn zero_grants_and_refunds_that_change_nothing_propagate_nothing() {
    let (_ms, _rs, mut m, mut r) = replica_hours_ahead();
    assert_eq!(
        rl(&mut m, &["RL.LEASE", "z", "1", "60000", "WANT", "5"])[0],
        1
    );
    rl(&mut m, &["RL.GCRA", "full", "10", "1000"]);
    assert_eq!(rl(&mut m, &["RL.REFUND", "full", "5"])[0], 1);
    wait_replica(&mut m);
    let before = offset(&mut m);
    assert_eq!(
        rl(&mut m, &["RL.LEASE", "z", "1", "60000", "WANT", "5"])[0],
        0
    );
    assert_eq!(rl(&mut m, &["RL.REFUND", "full", "5"])[0], 0);
    assert_eq!(
        cmd(&mut m, &["RL.REFUND", "missing", "5"]).unwrap(),
        Value::Nil
    );
    assert_eq!(
        offset(&mut m),
        before,
        "a no-op reached the replication stream"
    );
    // A refund that gives back does propagate: state and absolute expiry, not the command.
    assert_eq!(rl(&mut m, &["RL.REFUND", "z", "1"]), [1, 1, 1, -1, 0]);
    assert!(offset(&mut m) > before);
    wait_replica(&mut m);
    assert_eq!(dump(&mut r, "z"), dump(&mut m, "z"));
    assert_eq!(pexpiretime(&mut r, "z"), (T0_MS + 1000) as i64);
}

/// For every algorithm of the registry, each on its own key (named after its command).
#[test]
fn denials_and_peeks_of_every_algorithm_propagate_nothing() {
    let (_ms, _rs, mut m, mut r) = replica_hours_ahead();
    let commands: Vec<&str> = algorithms().iter().map(|a| a.command.as_str()).collect();
    for a in algorithms() {
        let command = a.command.as_str();
        decide(
            &mut m,
            &with(&[command, command, "1", "60000"], a.operation()),
        );
    }
    wait_replica(&mut m);
    let before = offset(&mut m);
    for a in algorithms() {
        let command = a.command.as_str();
        // RL.CONCURRENCY: another holder is denied, a RELEASE of no holder changes nothing.
        let (other, peek): (&[&str], &[&str]) = if a.kind == "concurrency" {
            (&["ACQUIRE", "other"], &["PEEK"])
        } else {
            (&[], &["COST", "0"])
        };
        assert_eq!(
            decide(&mut m, &with(&[command, command, "1", "60000"], other))[0],
            0
        );
        assert_eq!(
            decide(&mut m, &with(&[command, command, "1", "60000"], peek))[0],
            0
        );
        assert_eq!(
            decide(&mut m, &with(&[command, "fresh", "1", "60000"], peek))[0],
            1
        );
        if a.kind == "concurrency" {
            let release = with(&[command, command, "1", "60000"], &["RELEASE", "other"]);
            assert_eq!(decide(&mut m, &release)[0], 0);
        }
    }
    assert_eq!(
        offset(&mut m),
        before,
        "a denial or a peek reached the replica"
    );
    for command in commands {
        assert_eq!(dump(&mut r, command), dump(&mut m, command), "{command}");
    }
}

/// Inside MULTI and Lua scripts the commands decide as anywhere else, and what reaches the
/// replica is still the effect: it ends byte-identical, on its own clock hours away.
#[test]
fn transactions_and_scripts_replicate_effects() {
    let (_ms, _rs, mut m, mut r) = replica_hours_ahead();
    let replies: Vec<Vec<i64>> = redis::pipe()
        .atomic()
        .cmd("RL.GCRA")
        .arg("tx:g")
        .arg(2)
        .arg(1000)
        .cmd("RL.GCRA")
        .arg("tx:g")
        .arg(2)
        .arg(1000)
        .cmd("RL.GCRA")
        .arg("tx:g")
        .arg(2)
        .arg(1000)
        .cmd("RL.SLIDINGLOG")
        .arg("tx:l")
        .arg(5)
        .arg(60000)
        .arg("COST")
        .arg(3)
        .cmd("RL.LEASE")
        .arg("tx:t")
        .arg(10)
        .arg(1000)
        .arg("WANT")
        .arg(4)
        .query(&mut m)
        .unwrap();
    let allowed: Vec<i64> = replies.iter().map(|r| r[0]).collect();
    assert_eq!(allowed, [1, 1, 0, 1, 4]);
    let script = "local a = redis.call('RL.FIXEDWINDOW', KEYS[1], 1, 60000) \
                  local b = redis.call('RL.FIXEDWINDOW', KEYS[1], 1, 60000) \
                  return {a[1], b[1]}";
    let got: Vec<i64> = redis::cmd("EVAL")
        .arg(script)
        .arg(1)
        .arg("lua:f")
        .query(&mut m)
        .unwrap();
    assert_eq!(got, [1, 0]);
    wait_replica(&mut m);
    assert_eq!(snapshot(&mut m), snapshot(&mut r));
}
