//! RL.TOKENBUCKET against a real server: exact replies, and the same decisions as RL.GCRA.
//! Argument errors: tests/arguments.rs.

mod support;
use support::*;

#[test]
fn exact_replies_at_pinned_times() {
    let (_s, mut c) = server();
    let tb = ["RL.TOKENBUCKET", "k", "10", "1000"];
    assert_eq!(rl(&mut c, &tb), [1, 10, 9, -1, 100]);
    assert_eq!(
        rl(&mut c, &["RL.TOKENBUCKET", "k", "10", "1000", "COST", "9"]),
        [1, 10, 0, -1, 1000]
    );
    assert_eq!(rl(&mut c, &tb), [0, 10, 0, 100, 1000]);
    assert_eq!(pexpiretime(&mut c, "k"), (T0_MS + 1000) as i64);
    clock_advance(&mut c, 99);
    assert_eq!(rl(&mut c, &tb), [0, 10, 0, 1, 901]);
    clock_advance(&mut c, 1);
    assert_eq!(rl(&mut c, &tb), [1, 10, 0, -1, 1000]);
    // Peek: like cost 1, spends nothing; on a fresh key creates nothing.
    clock_advance(&mut c, 350);
    assert_eq!(
        rl(&mut c, &["RL.TOKENBUCKET", "k", "10", "1000", "COST", "0"]),
        [1, 10, 3, -1, 650]
    );
    assert_eq!(
        rl(&mut c, &["RL.TOKENBUCKET", "k", "10", "1000", "COST", "0"]),
        [1, 10, 3, -1, 650]
    );
    assert_eq!(
        rl(
            &mut c,
            &["RL.TOKENBUCKET", "new", "10", "1000", "COST", "0"]
        ),
        [1, 10, 10, -1, 0]
    );
    assert_eq!(cmd(&mut c, &["EXISTS", "new"]).unwrap(), Value::Int(0));
}

#[test]
fn burst_larger_than_the_rate() {
    let (_s, mut c) = server();
    let tb = ["RL.TOKENBUCKET", "b", "10", "1000", "BURST", "20"];
    for i in 0..20 {
        assert_eq!(rl(&mut c, &tb)[0], 1, "request {i}");
    }
    assert_eq!(rl(&mut c, &tb), [0, 20, 0, 100, 2000]);
}

/// A long pseudo-random trace of mixed costs, gaps and peeks: both commands answer every request
/// with the same five integers.
#[test]
fn decides_exactly_like_gcra_on_a_long_trace() {
    let (_s, mut c) = server();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for step in 0..3000 {
        let cost = rng.below(6).to_string();
        let gap = rng.pick(&[0, 0, 1, 7, 33, 100, 250, 1500]);
        clock_advance(&mut c, gap);
        let g = rl(
            &mut c,
            &["RL.GCRA", "g", "7", "1000", "BURST", "12", "COST", &cost],
        );
        let t = rl(
            &mut c,
            &[
                "RL.TOKENBUCKET",
                "t",
                "7",
                "1000",
                "BURST",
                "12",
                "COST",
                &cost,
            ],
        );
        assert_eq!(g, t, "step {step}");
    }
}

#[test]
fn a_key_keeps_its_algorithm() {
    let (_s, mut c) = server();
    rl(&mut c, &["RL.GCRA", "g", "10", "1000"]);
    rl(&mut c, &["RL.TOKENBUCKET", "t", "10", "1000"]);
    assert_wrongtype(
        &mut c,
        &["RL.TOKENBUCKET", "g", "10", "1000"],
        "a GCRA limiter",
        "token bucket",
    );
    assert_wrongtype(
        &mut c,
        &["RL.GCRA", "t", "10", "1000", "COST", "0"],
        "a token bucket limiter",
        "GCRA",
    );
}
