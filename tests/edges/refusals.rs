//! Refused states, each naming the key: a corrupted `RL.SETSTATE` in an AOF is dropped with a
//! warning, every `RL.SETSTATE` refusal is logged with its reason, and a refund on a string says
//! what the key holds.

use super::*;

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
