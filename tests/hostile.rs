//! Every command, fed thousands of pseudo-random argument lists and a clock that jumps both ways:
//! each call answers a decision, nil or a clear error — never `ERR internal error` (a caught
//! panic) — and the server stays up and keeps its other data.

mod support;
use support::*;

/// Words a hostile or confused client might send, edge values first.
const WORDS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "7",
    "10",
    "100",
    "1000",
    "60000",
    "-1",
    "-0",
    "+1",
    "01",
    "1.5",
    "1e3",
    " 1",
    "",
    "abc",
    "0x10",
    "999999999999",
    "1000000000000",
    "1000000000001",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999",
    "BURST",
    "burst",
    "COST",
    "cost",
    "WANT",
    "want",
    "PXAT",
    "CLOCK",
    "k",
    "{k}",
    "other",
    "str",
    "\r\n",
    "\0",
];

/// Sensible values for L, W, BURST, COST and WANT.
const GOOD: &[&str] = &[
    "1", "2", "3", "5", "10", "30", "100", "250", "1000", "60000",
];

/// The commands that are not an algorithm's own (those come from the registry). `RL.DEBUG` is
/// left out: the test moves the clock itself.
const OTHER_COMMANDS: &[&str] = &[
    "RL.LEASE",
    "RL.REFUND",
    "RL.CHARGE",
    "RL.SETTLE",
    "RL.SETSTATE",
    "RL.THROTTLE",
    "RL.ALL",
    "RL.PEEK",
    "RL.INSPECT",
    "RL.SHARE",
    "RL.DEMAND",
];

/// Every command of the module but `RL.DEBUG`: each algorithm's of the registry, then the others.
fn commands() -> Vec<&'static str> {
    let commands: Vec<&str> = algorithms()
        .iter()
        .map(|a| a.command.as_str())
        .chain(OTHER_COMMANDS.iter().copied())
        .collect();
    let missing: Vec<&String> = module_commands()
        .iter()
        .filter(|c| *c != "RL.DEBUG" && !commands.contains(&c.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "the test sends no {missing:?}: add it to OTHER_COMMANDS and its arguments to well_formed"
    );
    commands
}

/// Whether `command` is the registry's shaper (`RL.SHAPE`: six integers).
fn shaper(command: &str) -> bool {
    algorithms()
        .iter()
        .any(|a| a.command == command && a.kind == "shaper")
}

/// Whether `command` is the registry's concurrency limiter (`RL.CONCURRENCY`).
fn concurrency(command: &str) -> bool {
    algorithms()
        .iter()
        .any(|a| a.command == command && a.kind == "concurrency")
}

/// A valid encoded GCRA state, then mangled: random bytes, truncations and edits.
fn state_blob(rng: &mut Rng) -> Vec<u8> {
    let mut blob = vec![1u8, 1];
    for n in [10u64, 1000, 10] {
        blob.extend_from_slice(&n.to_le_bytes());
    }
    blob.extend_from_slice(&(40_000_000_000_000_000_000u128).to_le_bytes());
    match rng.next() % 4 {
        0 => blob,
        1 => {
            let cut = (rng.next() % blob.len() as u64) as usize;
            blob.truncate(cut);
            blob
        }
        2 => {
            let i = (rng.next() % blob.len() as u64) as usize;
            blob[i] = rng.next() as u8;
            // The registry's tags (1 to 6 today), tags it may add, and 0.
            blob[1] = (rng.next() % 16) as u8;
            blob
        }
        _ => (0..rng.next() % 80).map(|_| rng.next() as u8).collect(),
    }
}

/// Arguments in the command's own shape, with sensible values and now and then a wrong one.
/// `in_all` are the algorithm names `RL.ALL` picks from.
fn well_formed(call: &mut redis::Cmd, command: &str, in_all: &[&str], rng: &mut Rng) {
    let value = |rng: &mut Rng| {
        let values = if rng.next().is_multiple_of(8) {
            WORDS
        } else {
            GOOD
        };
        rng.pick(values)
    };
    match command {
        "RL.PEEK" | "RL.INSPECT" => {}
        "RL.DEMAND" => {
            for _ in 0..rng.next() % 3 {
                call.arg(rng.pick(&["k", "str", "fresh", "RL.GCRA:1"]));
            }
        }
        "RL.SHARE" => {
            // The key's share and expiry (far ahead, or a value that may have passed), and now
            // and then another key's.
            for more in 0..1 + rng.next() % 2 {
                if more > 0 {
                    call.arg(rng.pick(&["k", "fresh", "RL.GCRA:1", "RL.TOKENBUCKET:2"]));
                }
                call.arg(value(rng));
                call.arg(rng.pick(&["9000000000000", "4000000001000", "0", "1"]));
            }
        }
        "RL.ALL" | "RL.SETTLE" => {
            // A second key (numkeys 2 wants it), then one limiter per key, now and then one more.
            if rng.next().is_multiple_of(2) {
                call.arg("RL.ALL:other");
            }
            for _ in 0..1 + rng.next() % 3 {
                let algorithm = rng.pick(in_all);
                call.arg(algorithm).arg(value(rng)).arg(value(rng));
                if rng.next().is_multiple_of(3) {
                    call.arg("BURST").arg(value(rng));
                }
                if command == "RL.SETTLE" {
                    let by = value(rng);
                    let sign = if rng.next().is_multiple_of(2) {
                        "-"
                    } else {
                        ""
                    };
                    call.arg("BY").arg(format!("{sign}{by}"));
                } else if rng.next().is_multiple_of(2) {
                    call.arg("COST").arg(value(rng));
                }
            }
        }
        "RL.REFUND" => {
            call.arg(value(rng));
        }
        "RL.CHARGE" => {
            call.arg(value(rng));
            if rng.next().is_multiple_of(2) {
                call.arg("POLICY").arg(rng.pick(in_all));
                call.arg(value(rng)).arg(value(rng));
                if rng.next().is_multiple_of(3) {
                    call.arg("BURST").arg(value(rng));
                }
            }
        }
        "RL.SETSTATE" => {
            if rng.next().is_multiple_of(2) {
                call.arg("PXAT").arg(value(rng));
            }
        }
        "RL.THROTTLE" => {
            call.arg(value(rng)).arg(value(rng)).arg(value(rng));
            if rng.next().is_multiple_of(2) {
                call.arg(value(rng));
            }
        }
        "RL.LEASE" => {
            call.arg(value(rng)).arg(value(rng));
            if rng.next().is_multiple_of(2) {
                call.arg("BURST").arg(value(rng));
            }
            call.arg("WANT").arg(value(rng));
        }
        _ if shaper(command) => {
            call.arg(value(rng)).arg(value(rng));
            if rng.next().is_multiple_of(2) {
                call.arg("QUEUE").arg(value(rng));
            }
            match rng.next() % 3 {
                0 => {
                    call.arg("DELAY").arg(value(rng));
                }
                1 => {
                    call.arg("NODELAY");
                }
                _ => {}
            }
            if rng.next().is_multiple_of(2) {
                call.arg("COST").arg(value(rng));
            }
        }
        _ if concurrency(command) => {
            call.arg(value(rng)).arg(value(rng));
            let op = rng.pick(&["ACQUIRE", "RENEW", "RELEASE", "PEEK", "acquire", "GRAB"]);
            call.arg(op);
            if op != "PEEK" || rng.next().is_multiple_of(4) {
                call.arg(rng.pick(&["a", "b", "", "request-1", "9999999999"]));
            }
        }
        // A limiter of the registry (`algorithm` panics for any other command).
        _ => {
            call.arg(value(rng)).arg(value(rng));
            if algorithm(command).burst && rng.next().is_multiple_of(2) {
                call.arg("BURST").arg(value(rng));
            }
            if rng.next().is_multiple_of(2) {
                call.arg("COST").arg(value(rng));
            }
        }
    }
}

#[test]
fn random_arguments_never_panic_or_crash() {
    let (mut s, mut c) = server();
    cmd(&mut c, &["SET", "str", "keep me"]).unwrap();
    let commands = commands();
    // Every limiter, a lower-case name and an unknown one.
    let in_all: Vec<&str> = limiter_algorithms()
        .map(|a| a.word.as_str())
        .chain(["gcra", "LEAKY"])
        .collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut decisions, mut errors) = (0, 0);
    for step in 0..6000 {
        if step % 7 == 0 {
            let jump = (rng.next() % 4000) as i64 - 1500;
            clock_advance(&mut c, jump);
        }
        let command = rng.pick(&commands);
        let mut call = redis::cmd(command);
        if command == "RL.ALL" {
            call.arg(rng.pick(&["1", "2", "2", "0", "33", "x"]));
        }
        if command == "RL.SHARE" {
            // The safe policy before the keys: an algorithm, L, W and B.
            call.arg(rng.pick(&in_all));
            for _ in 0..3 {
                call.arg(rng.pick(GOOD));
            }
        }
        // Mostly a key of the command's own, sometimes one shared by every command (WRONGTYPE).
        let key = match rng.next() % 5 {
            0 => rng.pick(&["k", "str", "fresh"]).to_string(),
            n => format!("{command}:{n}"),
        };
        call.arg(&key);
        if command == "RL.SETSTATE" {
            call.arg(state_blob(&mut rng));
        }
        if !rng.next().is_multiple_of(3) {
            well_formed(&mut call, command, &in_all, &mut rng);
        } else {
            for _ in 0..rng.next() % 7 {
                call.arg(rng.pick(WORDS));
            }
        }
        match call.query::<Value>(&mut c) {
            Ok(Value::Array(fields)) => {
                match command {
                    // The combined decision, then one per limiter.
                    "RL.ALL" | "RL.SETTLE" => assert!(fields.len() >= 2, "{command}: {fields:?}"),
                    // Field names and values.
                    "RL.INSPECT" => assert!(fields.len() > 10, "{command}: {fields:?}"),
                    // One row per key: four integers (RL.SHARE) or five (RL.DEMAND).
                    "RL.SHARE" | "RL.DEMAND" => {
                        let width = if command == "RL.SHARE" { 4 } else { 5 };
                        for row in &fields {
                            assert!(
                                matches!(row, Value::Array(r) if r.len() == width),
                                "{command}: {fields:?}"
                            );
                        }
                    }
                    _ if shaper(command) => assert_eq!(fields.len(), 6, "{command}: {fields:?}"),
                    _ => assert_eq!(fields.len(), 5, "{command}: {fields:?}"),
                }
                decisions += 1;
            }
            Ok(Value::Nil) => assert!(
                ["RL.REFUND", "RL.CHARGE", "RL.PEEK", "RL.INSPECT"].contains(&command),
                "{command}: nil"
            ),
            Ok(Value::Okay) | Ok(Value::SimpleString(_)) => assert_eq!(command, "RL.SETSTATE"),
            Ok(other) => panic!("{command}: unexpected reply {other:?}"),
            Err(e) => {
                let text = format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or(""));
                assert!(
                    !text.contains("internal error"),
                    "step {step}, {command}: {text}"
                );
                assert!(
                    text.starts_with("ERR") || text.starts_with("WRONGTYPE"),
                    "step {step}, {command}: {text}"
                );
                errors += 1;
            }
        }
    }
    assert!(
        decisions > 500 && errors > 500,
        "decisions {decisions}, errors {errors}"
    );
    assert!(s.alive());
    assert_eq!(
        cmd(&mut c, &["GET", "str"]).unwrap(),
        Value::BulkString(b"keep me".to_vec())
    );
    // Whatever was stored is a valid limiter: it survives a reload byte for byte.
    let before = snapshot(&mut c);
    cmd(&mut c, &["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(snapshot(&mut c), before);
    assert!(
        !s.log().contains("panic caught"),
        "a handler panicked:\n{}",
        s.log()
    );
    let _ = &mut s;
}
