//! Replicas refuse every limiter command, whatever routes it to them.

use super::*;

#[test]
fn replicas_refuse_every_limiter_command() {
    // A plain replica answers Redis's own READONLY error, before the module runs.
    let master = Server::with(&["--repl-diskless-sync-delay", "0"], &[]);
    let mut replica = Server::start();
    let mut r = replica.connect();
    cmd(
        &mut r,
        &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
    )
    .unwrap();
    wait_for("replica link up", || {
        let text: String = redis::cmd("INFO").arg("replication").query(&mut r).unwrap();
        info_field(&text, "master_link_status").as_deref() == Some("up")
    });
    clock_set(&mut r, T0_MS);
    let mut refused: Vec<Vec<String>> = all_limiters()
        .iter()
        .flat_map(|l| l.session.iter().map(|w| call(w, "k")))
        .collect();
    refused.push(call(&["RL.GCRA", KEY, "10", "1000", "COST", "0"], "k"));
    refused.push(call(&["RL.SETSTATE", KEY, "state", "PXAT", "5"], "k"));
    const READONLY: &str = "READONLY You can't write against a read only replica.";
    for words in &refused {
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        assert_eq!(err(&mut r, &words), READONLY, "{words:?}");
        // Nor through a script or a transaction.
        let mut script = vec!["EVAL", "return redis.call(unpack(ARGV))", "1", "k"];
        script.extend(&words);
        let e = err(&mut r, &script);
        assert!(e.starts_with(READONLY), "{words:?} in a script: {e}");
        cmd(&mut r, &["MULTI"]).unwrap();
        assert_eq!(err(&mut r, &words), READONLY, "{words:?} in MULTI");
        let e = err(&mut r, &["EXEC"]);
        assert!(e.starts_with("EXECABORT"), "{e}");
    }
    let size: i64 = redis::cmd("DBSIZE").query(&mut r).unwrap();
    assert_eq!(size, 0);
    assert!(replica.alive());
    // The key-less debug command still runs there (how the tests pin replicas' clocks).
    let now: i64 = redis::cmd("RL.DEBUG")
        .arg("CLOCK")
        .arg("GET")
        .query(&mut r)
        .unwrap();
    assert_eq!(now, T0_MS as i64);

    // In a cluster, a replica redirects them to its master (MOVED), also after READONLY,
    // which lets a connection read from a replica but never write.
    let mut cluster = Cluster::start(CALM_NODE_TIMEOUT_MS);
    let tags = tags_for_all_slots();
    for master in cluster.masters() {
        let (slot, tag) = slot_on(&cluster, master, &tags);
        let moved = format!("MOVED {slot} 127.0.0.1:{}", cluster.nodes[master].port);
        let mut rc = cluster.connect(cluster.replica_of(master));
        for readonly in [false, true] {
            if readonly {
                cmd(&mut rc, &["READONLY"]).unwrap();
            }
            for (limiter, key) in tagged_keys(&tag) {
                for words in limiter.session {
                    let words = call(words, &key);
                    let words: Vec<&str> = words.iter().map(String::as_str).collect();
                    assert_eq!(err(&mut rc, &words), moved, "{words:?}");
                }
            }
        }
    }
    assert!(cluster.none_crashed());
}
