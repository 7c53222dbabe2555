//! RL.LEASE against a real server: partial grants, an empty bucket, one bucket shared with
//! RL.TOKENBUCKET, and many clients leasing from one key at once. Argument errors:
//! tests/arguments.rs.

mod support;
use support::*;

#[test]
fn partial_grants_and_an_empty_bucket() {
    let (_s, mut c) = server();
    assert_eq!(
        rl(&mut c, &["RL.LEASE", "k", "10", "1000", "WANT", "4"]),
        [4, 10, 6, -1, 400]
    );
    // reset_after 400 ms: the key lives the minimum TTL, 1 s.
    assert_eq!(pexpiretime(&mut c, "k"), (T0_MS + 1000) as i64);
    // Only 6 are there: 6 are granted.
    assert_eq!(
        rl(&mut c, &["RL.LEASE", "k", "10", "1000", "WANT", "20"]),
        [6, 10, 0, -1, 1000]
    );
    // Empty: 0 granted, one token is back in 100 ms; nothing is written.
    let before = (dump(&mut c, "k"), pexpiretime(&mut c, "k"));
    clock_advance(&mut c, 30);
    assert_eq!(
        rl(&mut c, &["RL.LEASE", "k", "10", "1000", "WANT", "5"]),
        [0, 10, 0, 70, 970]
    );
    assert_eq!((dump(&mut c, "k"), pexpiretime(&mut c, "k")), before);
    clock_advance(&mut c, 69);
    assert_eq!(
        rl(&mut c, &["RL.LEASE", "k", "10", "1000", "WANT", "5"])[..4],
        [0, 10, 0, 1]
    );
    clock_advance(&mut c, 1);
    assert_eq!(
        rl(&mut c, &["RL.LEASE", "k", "10", "1000", "WANT", "5"]),
        [1, 10, 0, -1, 1000]
    );
    // 250 ms later two and a half tokens are back: two are granted.
    clock_advance(&mut c, 250);
    assert_eq!(
        rl(&mut c, &["RL.LEASE", "k", "10", "1000", "WANT", "5"]),
        [2, 10, 0, -1, 950]
    );
    // WANT above the capacity takes what is there.
    assert_eq!(
        rl(
            &mut c,
            &[
                "RL.LEASE",
                "f",
                "10",
                "1000",
                "BURST",
                "30",
                "want",
                "1000000000000"
            ]
        ),
        [30, 30, 0, -1, 3000]
    );
}

fn tb(c: &mut Connection, key: &str) -> [i64; 5] {
    rl(c, &["RL.TOKENBUCKET", key, "7", "1000", "BURST", "12"])
}

fn lease(c: &mut Connection, key: &str, want: u64) -> [i64; 5] {
    rl(
        c,
        &[
            "RL.LEASE",
            key,
            "7",
            "1000",
            "BURST",
            "12",
            "WANT",
            &want.to_string(),
        ],
    )
}

/// Leasing and single requests share one bucket: a lease of n leaves what n requests leave.
#[test]
fn leases_and_tokenbucket_share_one_bucket() {
    let (_s, mut c) = server();
    assert_eq!(lease(&mut c, "a", 5)[..3], [5, 12, 7]);
    // RL.TOKENBUCKET sees the 5 gone, and its spending is seen by the next lease.
    assert_eq!(tb(&mut c, "a")[..3], [1, 12, 6]);
    assert_eq!(lease(&mut c, "a", 100)[..3], [6, 12, 0]);
    assert_eq!(tb(&mut c, "a")[..4], [0, 12, 0, 143]);
    // The same bucket spent by single requests only ends byte-identical.
    for _ in 0..12 {
        tb(&mut c, "b");
    }
    assert_eq!(dump(&mut c, "a"), dump(&mut c, "b"));
    assert_eq!(pexpiretime(&mut c, "a"), pexpiretime(&mut c, "b"));
    // A long trace: leases of n and runs of up to n single requests keep two keys identical.
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for step in 0..300 {
        clock_advance(&mut c, rng.pick(&[0, 1, 13, 140, 600]));
        let want = 1 + rng.below(15);
        let granted = lease(&mut c, "x", want)[0];
        let mut singles = 0;
        while singles < want && tb(&mut c, "y")[0] == 1 {
            singles += 1;
        }
        assert_eq!(granted as u64, singles, "step {step}");
        assert_eq!(dump(&mut c, "x"), dump(&mut c, "y"), "step {step}");
    }
}

#[test]
fn a_new_policy_carries_over_what_was_leased() {
    let (_s, mut c) = server();
    rl(&mut c, &["RL.LEASE", "p", "10", "1000", "WANT", "8"]);
    // Capacity 100 now: the 2 tokens left carry over, not a fresh 100.
    assert_eq!(
        rl(&mut c, &["RL.LEASE", "p", "100", "1000", "WANT", "50"])[..3],
        [2, 100, 0]
    );
}

#[test]
fn a_key_keeps_its_algorithm() {
    let (_s, mut c) = server();
    cmd(&mut c, &["SET", "s", "x"]).unwrap();
    rl(&mut c, &["RL.GCRA", "g", "10", "1000"]);
    assert_wrongtype(
        &mut c,
        &["RL.LEASE", "s", "10", "1000", "WANT", "1"],
        "a string",
        "token bucket",
    );
    assert_wrongtype(
        &mut c,
        &["RL.LEASE", "g", "10", "1000", "WANT", "1"],
        "a GCRA limiter",
        "token bucket",
    );
}

/// Many clients, one connection each, lease from one key at once with the clock frozen: the
/// bucket is handed out exactly once, never more.
#[test]
fn concurrent_leases_hand_out_exactly_the_bucket() {
    let (s, _c) = server();
    const CLIENTS: u64 = 16;
    const CAPACITY: i64 = 5000;
    let start = std::sync::Arc::new(std::sync::Barrier::new(CLIENTS as usize));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let mut c = s.connect();
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                let (mut total, mut calls) = (0i64, 0u64);
                loop {
                    let want = (1 + (i + calls) % 7).to_string();
                    calls += 1;
                    let r = rl(
                        &mut c,
                        &[
                            "RL.LEASE", "hot", "1", "3600000", "BURST", "5000", "WANT", &want,
                        ],
                    );
                    assert!(r[0] >= 0 && r[0] <= 7 && r[2] >= 0, "{r:?}");
                    if r[0] == 0 {
                        assert_eq!(r[2], 0, "denied with tokens left: {r:?}");
                        return total;
                    }
                    total += r[0];
                }
            })
        })
        .collect();
    let granted: i64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(granted, CAPACITY);
    let mut c = s.connect();
    assert_eq!(
        rl(
            &mut c,
            &[
                "RL.TOKENBUCKET",
                "hot",
                "1",
                "3600000",
                "BURST",
                "5000",
                "COST",
                "0"
            ]
        )[..3],
        [0, 5000, 0]
    );
}
