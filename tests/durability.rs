//! State survives every way Redis persists and reloads it, byte for byte, with the same
//! absolute expiry; garbage fed to the loader is refused and the server keeps running.

mod support;
use support::*;

fn loaded(extra: &[&str]) -> (Server, Connection) {
    let s = Server::with(extra, &[]);
    let mut c = s.connect();
    clock_set(&mut c, T0_MS);
    run_workload(&mut c, 3);
    (s, c)
}

fn digest(c: &mut Connection) -> String {
    redis::cmd("DEBUG").arg("DIGEST").query(c).unwrap()
}

#[test]
fn debug_reload_keeps_state_and_expiry() {
    let (_s, mut c) = loaded(&[]);
    let (before, d) = (snapshot(&mut c), digest(&mut c));
    assert!(before.len() >= 4);
    cmd(&mut c, &["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(snapshot(&mut c), before);
    assert_eq!(digest(&mut c), d);
}

#[test]
fn restart_from_rdb_keeps_state_and_expiry() {
    let (mut s, mut c) = loaded(&[]);
    let before = snapshot(&mut c);
    cmd(&mut c, &["SAVE"]).unwrap();
    s.restart("NOSAVE");
    let mut c = s.connect();
    assert_eq!(snapshot(&mut c), before);
}

fn aof_restart(preamble: &str, rewrite: bool) {
    let (mut s, mut c) = loaded(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--aof-use-rdb-preamble",
        preamble,
    ]);
    wait_persistence_idle(&mut c);
    if rewrite {
        cmd(&mut c, &["BGREWRITEAOF"]).unwrap();
        wait_persistence_idle(&mut c);
        // Decisions after the rewrite land in the new incremental file.
        run_workload(&mut c, 1);
    }
    let before = snapshot(&mut c);
    if rewrite && preamble == "no" {
        let base = std::fs::read_dir(s.dir().join("appendonlydir"))
            .unwrap()
            .filter_map(|e| e.ok())
            .find(|e| e.file_name().to_string_lossy().contains(".base.aof"))
            .expect("a base AOF file");
        let text = String::from_utf8_lossy(&std::fs::read(base.path()).unwrap()).into_owned();
        assert!(
            text.contains("RL.SETSTATE") && text.contains("PEXPIREAT"),
            "{text}"
        );
    }
    s.restart("NOSAVE");
    let mut c = s.connect();
    assert_eq!(snapshot(&mut c), before);
}

#[test]
fn restart_from_aof_keeps_state_and_expiry() {
    aof_restart("yes", false);
}

#[test]
fn restart_after_bgrewriteaof_keeps_state_and_expiry() {
    aof_restart("yes", true);
}

#[test]
fn restart_after_plain_aof_rewrite_keeps_state_and_expiry() {
    // Without the RDB preamble the rewrite is made of the type's own RL.SETSTATE commands.
    aof_restart("no", true);
}

#[test]
fn dump_restore_and_copy_round_trip() {
    let (_s, mut c) = loaded(&[]);
    let before = snapshot(&mut c);
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
        assert_eq!(pexpiretime(&mut c, &copy), *at);
        let copied = format!("{key}:copied");
        cmd(&mut c, &["COPY", key, &copied]).unwrap();
        assert_eq!(dump(&mut c, &copied).as_ref(), Some(payload));
        assert_eq!(pexpiretime(&mut c, &copied), *at);
        let usage: i64 = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(key)
            .query(&mut c)
            .unwrap();
        assert!(usage > 0);
    }
}

/// Feeds `RESTORE` every single-byte corruption (0x00, 0xff, 0x80) and every truncation of
/// `key`'s DUMP payload, each with a valid checksum; most must be refused, a mutation that still
/// decodes must be a usable limiter (`probe` runs a command on it), and the server must live.
fn corruptions_are_refused(s: &mut Server, c: &mut Connection, key: &str, probe: &[&str]) {
    let original = dump(c, key).unwrap();
    assert_eq!(
        forge_dump(&original, |_| {}),
        original,
        "the test's CRC-64 matches Redis's"
    );
    let body = original.len() - 10;
    let mut refused = 0;
    let mut attempts: Vec<Vec<u8>> = Vec::new();
    for i in 1..body {
        for value in [0x00u8, 0xff, 0x80] {
            attempts.push(forge_dump(&original, |b| b[i] = value));
        }
        attempts.push(forge_dump(&original, |b| b.truncate(i)));
    }
    attempts.push(forge_dump(&original, |b| b.extend_from_slice(&[0; 40])));
    for payload in &attempts {
        let restored: redis::RedisResult<()> = redis::cmd("RESTORE")
            .arg("victim")
            .arg(0)
            .arg(payload.as_slice())
            .arg("REPLACE")
            .query(c);
        match restored {
            Err(_) => refused += 1,
            // A mutation may still be a valid state (a different count); it must then be usable.
            Ok(()) => {
                let _ = cmd(c, probe);
                cmd(c, &["DEL", "victim"]).unwrap();
            }
        }
        assert_eq!(
            cmd(c, &["PING"]).unwrap(),
            Value::SimpleString("PONG".into())
        );
    }
    assert!(
        refused > attempts.len() / 2,
        "{key}: refused {refused} of {}",
        attempts.len()
    );
    assert!(s.alive());
}

#[test]
fn corrupted_restore_payloads_are_refused_and_the_server_survives() {
    let (mut s, mut c) = loaded(&[]);
    corruptions_are_refused(
        &mut s,
        &mut c,
        "gcra:a",
        &["RL.GCRA", "victim", "10", "1000", "COST", "0"],
    );
}

/// Every key the workload creates with an algorithm's own command (it has some of every
/// algorithm), corrupted in turn.
#[test]
fn corrupted_payloads_of_every_algorithm_are_refused() {
    let (mut s, mut c) = loaded(&[]);
    for algorithm in algorithms() {
        let command = algorithm.command.as_str();
        let mut keys: Vec<&str> = WORKLOAD
            .iter()
            .filter(|words| words[0] == command)
            .map(|words| words[1])
            .collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            corruptions_are_refused(&mut s, &mut c, key, &[command, "victim", "10", "1000"]);
        }
    }
}

#[test]
fn setstate_validates_like_the_loader() {
    let (_s, mut c) = loaded(&[]);
    let e = err(&mut c, &["RL.SETSTATE", "x", "\u{1}\u{1}"]);
    assert!(e.starts_with("ERR invalid limiter state"), "{e}");
    let e = err(&mut c, &["RL.SETSTATE", "x", "\u{1}", "PXAT"]);
    assert!(e.starts_with("ERR"), "{e}");
    assert_eq!(cmd(&mut c, &["EXISTS", "x"]).unwrap(), Value::Int(0));
}

#[test]
fn corrupted_shaper_payloads_are_refused() {
    let (mut s, mut c) = loaded(&[]);
    let shape = [
        "RL.SHAPE", "shape:a", "1", "1000", "QUEUE", "5", "DELAY", "2",
    ];
    for _ in 0..3 {
        cmd(&mut c, &shape).unwrap();
    }
    corruptions_are_refused(
        &mut s,
        &mut c,
        "shape:a",
        &["RL.SHAPE", "victim", "1", "1000", "QUEUE", "5", "COST", "0"],
    );
}
