//! The debt kept byte for byte: through a replica (a saturated charge sends nothing), DEBUG
//! RELOAD and RESTORE, an AOF rewrite and a restart.

use super::*;

/// Keys in debt of every algorithm, one created by the charge.
fn indebted(c: &mut Connection) {
    for a in limiter_algorithms() {
        let key = a.id.as_str();
        rl(c, &limiter(a, key, &["COST", "7"]));
        clock_advance(c, 3);
        charge(c, key, "19");
    }
    ints::<6>(
        c,
        &["RL.SHAPE", "shape", "10", "1000", "QUEUE", "4", "COST", "3"],
    );
    charge(c, "shape", "11");
    cmd(
        c,
        &[
            "RL.SETTLE",
            "2",
            "{s}:a",
            "{s}:b",
            "GCRA",
            "10",
            "1000",
            "BY",
            "17",
            "SLIDINGLOG",
            "10",
            "1000",
            "BY",
            "4",
        ],
    )
    .unwrap();
    rl(
        c,
        &[
            "RL.CHARGE",
            "created",
            "40",
            "POLICY",
            "TOKENBUCKET",
            "10",
            "1000",
            "BURST",
            "5",
        ],
    );
}

fn digest(c: &mut Connection) -> String {
    redis::cmd("DEBUG").arg("DIGEST").query(c).unwrap()
}

#[test]
fn the_debt_reaches_a_replica_byte_for_byte_and_a_saturated_charge_sends_nothing() {
    let (_master, _replica, mut m, mut r) = replica_hours_ahead();
    indebted(&mut m);
    wait_replica(&mut m);
    assert_eq!(snapshot(&mut m), snapshot(&mut r));
    assert_eq!(digest(&mut m), digest(&mut r));
    // Replicas never decide, nor charge.
    assert!(err(&mut r, &["RL.CHARGE", "gcra", "1"]).contains("READONLY"));
    // At the bound: nothing changes, nothing is sent.
    rl(
        &mut m,
        &[
            "RL.CHARGE",
            "g",
            "1000000000000",
            "POLICY",
            "GCRA",
            "1",
            "1000000000000",
        ],
    );
    wait_replica(&mut m);
    let offset = |c: &mut Connection| -> String {
        let info: String = redis::cmd("INFO").arg("replication").query(c).unwrap();
        info.lines()
            .find(|l| l.starts_with("master_repl_offset:"))
            .unwrap_or_default()
            .to_string()
    };
    let before = offset(&mut m);
    assert_eq!(charge(&mut m, "g", "9")[0], 0);
    assert_eq!(offset(&mut m), before);
}

#[test]
fn the_debt_survives_debug_reload_and_restore() {
    let (_s, mut c) = server();
    indebted(&mut c);
    let (before, d) = (snapshot(&mut c), digest(&mut c));
    cmd(&mut c, &["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(snapshot(&mut c), before);
    assert_eq!(digest(&mut c), d);
    for (key, (payload, at)) in &before {
        let copy = format!("{key}:restored");
        redis::cmd("RESTORE")
            .arg(&copy)
            .arg(*at)
            .arg(payload.as_slice())
            .arg("ABSTTL")
            .query::<()>(&mut c)
            .unwrap();
        assert_eq!(dump(&mut c, &copy).as_ref(), Some(payload));
        // The restored key owes what the original owes.
        assert_eq!(
            rl(&mut c, &["RL.REFUND", &copy, "1"]),
            rl(&mut c, &["RL.REFUND", key, "1"]),
            "{key}"
        );
    }
}

#[test]
fn the_debt_survives_an_aof_rewrite_and_a_restart() {
    let mut s = Server::with(
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
    indebted(&mut c);
    wait_persistence_idle(&mut c);
    cmd(&mut c, &["BGREWRITEAOF"]).unwrap();
    wait_persistence_idle(&mut c);
    // Charged after the rewrite: lands in the new incremental file.
    charge(&mut c, "gcra", "3");
    let before = snapshot(&mut c);
    s.restart("NOSAVE");
    let mut c = s.connect();
    assert_eq!(snapshot(&mut c), before);
}
