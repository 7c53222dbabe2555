use super::*;
use crate::algo::promises::assert_covers_registry;
use crate::algo::props::{run, trace_strategy, window_policy_strategy, T0};
use crate::algo::MAX_LIMIT;
use crate::algo::{fixed_window, sliding_counter, sliding_log, token_bucket};
use proptest::prelude::*;

fn gcra() -> Limiter {
    Limiter {
        policy: Policy::new(10, 1000, 20).unwrap(),
        state: AlgoState::Gcra(Gcra { tat: 12345 }),
    }
}

#[test]
fn round_trip() {
    let mut buf = Vec::new();
    gcra().encode(&mut buf);
    assert_eq!(buf.len(), 2 + 24 + 16);
    assert_eq!(Limiter::decode(&buf), Ok(gcra()));
}

#[test]
fn rejects_garbage() {
    let mut buf = Vec::new();
    gcra().encode(&mut buf);
    for cut in 0..buf.len() {
        assert!(
            Limiter::decode(&buf[..cut]).is_err(),
            "prefix of {cut} bytes"
        );
    }
    let mut long = buf.clone();
    long.push(0);
    assert_eq!(
        Limiter::decode(&long),
        Err(Error::BadState("trailing bytes"))
    );
    let mut zero_limit = buf.clone();
    zero_limit[2..10].fill(0);
    assert_eq!(
        Limiter::decode(&zero_limit),
        Err(Error::BadState("policy out of range"))
    );
    let mut bad_tag = buf;
    bad_tag[1] = 99;
    assert_eq!(
        Limiter::decode(&bad_tag),
        Err(Error::BadState("unknown algorithm"))
    );
}

/// A GCRA key that remembers two other configurations.
fn remembered() -> Limiter {
    let other = |l: u64, tat: u128| {
        (
            Policy::new(l, 1000, l).unwrap(),
            AlgoState::Gcra(Gcra { tat }),
        )
    };
    Limiter::new(
        Policy::new(10, 1000, 20).unwrap(),
        AlgoState::Remembered(Box::new(Remembered {
            current: AlgoState::Gcra(Gcra { tat: 12345 }),
            others: vec![other(5, 777), other(7, 999)],
        })),
    )
}

#[test]
fn remembered_configurations_round_trip_and_are_validated() {
    let limiter = remembered();
    let mut buf = Vec::new();
    limiter.encode(&mut buf);
    assert_eq!(buf[0], 2);
    assert_eq!(buf.len(), 2 + 24 + 16 + 1 + 2 * (24 + 16));
    assert_eq!(Limiter::decode(&buf), Ok(limiter.clone()));
    assert_eq!(limiter.others().len(), 2);
    assert_eq!(limiter.state.tag(), 1);
    for cut in 0..buf.len() {
        assert!(Limiter::decode(&buf[..cut]).is_err(), "prefix of {cut}");
    }
    let n_at = 2 + 24 + 16;
    let edited = |at: usize, bytes: &[u8]| {
        let mut b = buf.clone();
        b[at..at + bytes.len()].copy_from_slice(bytes);
        b
    };
    for n in [0u8, 3, 4, 255] {
        assert!(Limiter::decode(&edited(n_at, &[n])).is_err(), "n = {n}");
    }
    // The second remembered policy made equal to the first, then the first to the current.
    let policy = |l: u64, w: u64, b: u64| [l, w, b].map(u64::to_le_bytes).concat();
    let first_l = n_at + 1;
    let second_l = first_l + 40;
    for (at, bytes) in [
        (second_l, policy(5, 1000, 5)),
        (first_l, policy(10, 1000, 20)),
    ] {
        assert_eq!(
            Limiter::decode(&edited(at, &bytes)),
            Err(Error::BadState("remembered configuration repeated"))
        );
    }
    // Format 1 with the same bytes has trailing bytes.
    assert_eq!(
        Limiter::decode(&edited(0, &[1])),
        Err(Error::BadState("trailing bytes"))
    );
}

/// A GCRA key holding a region's share: format 3 round-trips (the counters, memory only,
/// are not encoded) and every truncation or out-of-range share is refused.
#[test]
fn shared_round_trips_and_is_validated() {
    let share = Share {
        limit: 7,
        expire_at_ms: 4_000_000_000_000,
    };
    let mut limiter = Limiter::new(
        Policy::new(7, 1000, 14).unwrap(),
        AlgoState::shared(share, AlgoState::Gcra(Gcra { tat: 99 })),
    );
    if let Some(s) = limiter.shared_mut() {
        s.asked = 5;
    }
    let mut buf = Vec::new();
    limiter.encode(&mut buf);
    assert_eq!(buf[0], 3);
    assert_eq!(buf.len(), 2 + 24 + 16 + 16);
    let decoded = Limiter::decode(&buf).unwrap();
    assert_eq!(decoded, limiter);
    assert_eq!(decoded.shared().map(|s| s.asked), Some(0));
    for cut in 0..buf.len() {
        assert!(Limiter::decode(&buf[..cut]).is_err(), "prefix of {cut}");
    }
    let at = 2 + 24 + 16;
    for (offset, n) in [
        (0, 0),
        (0, crate::algo::MAX_LIMIT + 1),
        (8, 0),
        (8, u64::MAX),
    ] {
        let mut bad = buf.clone();
        bad[at + offset..at + offset + 8].copy_from_slice(&n.to_le_bytes());
        assert_eq!(
            Limiter::decode(&bad),
            Err(Error::BadState("share out of range"))
        );
    }
    // Version 1's bytes still load as they did.
    let mut plain = Vec::new();
    gcra().encode(&mut plain);
    assert_eq!(plain[0], 1);
    assert_eq!(Limiter::decode(&plain), Ok(gcra()));
}

fn window(l: u64, w: u64) -> Policy {
    Policy::new(l, w, l).unwrap()
}

const NS: u64 = 1_800_000_000_000_000_000;

/// One limiter of each window algorithm, as their own `check` leaves them.
fn window_limiters() -> Vec<Limiter> {
    let p = window(10, 1000);
    let log = sliding_log::check(None, &p, NS, 3).next.unwrap();
    let log = sliding_log::check(Some(&log), &p, NS + 7, 2).next.unwrap();
    vec![
        Limiter {
            policy: p,
            state: AlgoState::SlidingLog(log),
        },
        Limiter {
            policy: p,
            state: AlgoState::SlidingCounter(SlidingCounter {
                start_ns: NS,
                prev: 10,
                curr: 4,
            }),
        },
        Limiter {
            policy: p,
            state: AlgoState::FixedWindow(FixedWindow {
                start_ns: NS,
                count: 7,
            }),
        },
    ]
}

#[test]
fn window_algorithms_round_trip() {
    let sizes = [2 + 24 + 8 + 4 + 2 * 8, 2 + 24 + 24, 2 + 24 + 16];
    for (limiter, size) in window_limiters().into_iter().zip(sizes) {
        let mut buf = Vec::new();
        limiter.encode(&mut buf);
        assert_eq!(buf.len(), size, "{}", limiter.state.name());
        assert_eq!(Limiter::decode(&buf), Ok(limiter.clone()));
        for cut in 0..buf.len() {
            assert!(Limiter::decode(&buf[..cut]).is_err(), "prefix of {cut}");
        }
        let mut long = buf.clone();
        long.extend_from_slice(&[0; 8]);
        assert!(Limiter::decode(&long).is_err(), "trailing bytes");
    }
}

#[test]
fn window_algorithms_reject_nonsense() {
    let [log, counter, fixed] = <[Limiter; 3]>::try_from(window_limiters()).unwrap();
    // The encoding of `l` with the bytes at `at` replaced. The algorithm's fields start after
    // [format][tag][L][W][B], at 26.
    let edited = |l: &Limiter, at: usize, bytes: &[u8]| {
        let mut buf = Vec::new();
        l.encode(&mut buf);
        buf[at..at + bytes.len()].copy_from_slice(bytes);
        buf
    };
    let n = |n: u64| n.to_le_bytes();
    let mut first_entry_count_0 = edited(&log, 34, &1u32.to_le_bytes());
    first_entry_count_0.truncate(first_entry_count_0.len() - 8);
    first_entry_count_0[38..46].copy_from_slice(&n(0));
    let second_entry_first = {
        let mut buf = Vec::new();
        log.encode(&mut buf);
        buf.copy_within(46..54, 38);
        buf
    };
    let cases = [
        (edited(&fixed, 18, &n(11)), "window limiter with a burst"),
        (edited(&fixed, 26, &n(NS + 1)), "fixed window not aligned"),
        (
            edited(&fixed, 34, &n(MAX_LIMIT + 1)),
            "fixed window count out of range",
        ),
        (
            edited(&counter, 26, &n(NS + 5)),
            "sliding counter window not aligned",
        ),
        (
            edited(&counter, 34, &n(MAX_LIMIT + 1)),
            "sliding counter count out of range",
        ),
        (
            edited(&counter, 42, &n(MAX_LIMIT + 1)),
            "sliding counter count out of range",
        ),
        (
            edited(&log, 34, &11u32.to_le_bytes()),
            "sliding log entry count out of range",
        ),
        (
            edited(&log, 34, &u32::MAX.to_le_bytes()),
            "sliding log entry count out of range",
        ),
        (
            edited(&log, 38, &n((1 << 20) - 1)),
            "sliding log total out of range",
        ),
        (first_entry_count_0, "sliding log entry with count 0"),
        (second_entry_first, "sliding log entries out of order"),
    ];
    for (bytes, why) in cases {
        assert_eq!(Limiter::decode(&bytes), Err(Error::BadState(why)), "{why}");
    }
}

/// A shaper as `RL.SHAPE` leaves it: 1 per second, queue 5, DELAY 2, three queued.
fn shaper() -> Limiter {
    let p = Policy::new(1, 1000, 6).unwrap();
    let s = crate::algo::shape::check(Some(&Shape::configured(None, 2)), &p, NS, 3);
    Limiter {
        policy: p,
        state: AlgoState::Shape(s.outcome.next.unwrap()),
    }
}

#[test]
fn shaper_round_trips_and_rejects_nonsense() {
    let limiter = shaper();
    let mut buf = Vec::new();
    limiter.encode(&mut buf);
    assert_eq!(buf.len(), 2 + 24 + 16 + 8);
    assert_eq!(buf[1], 6);
    assert_eq!(Limiter::decode(&buf), Ok(limiter));
    for cut in 0..buf.len() {
        assert!(Limiter::decode(&buf[..cut]).is_err(), "prefix of {cut}");
    }
    let mut long = buf.clone();
    long.push(0);
    assert_eq!(
        Limiter::decode(&long),
        Err(Error::BadState("trailing bytes"))
    );
    let edited = |at: usize, bytes: &[u8]| {
        let mut b = buf.clone();
        b[at..at + bytes.len()].copy_from_slice(bytes);
        b
    };
    // d = 6 with a queue of 5 (capacity 6); the largest valid d is 5.
    assert_eq!(
        Limiter::decode(&edited(42, &6u64.to_le_bytes())),
        Err(Error::BadState("leaky bucket DELAY above its queue"))
    );
    assert!(Limiter::decode(&edited(42, &5u64.to_le_bytes())).is_ok());
    assert_eq!(
        Limiter::decode(&edited(26, &u128::MAX.to_le_bytes())),
        Err(Error::BadState("leaky bucket arrival time out of range"))
    );
    // A capacity of 1 (no queue) leaves no room for any d but 0.
    assert_eq!(
        Limiter::decode(&edited(18, &1u64.to_le_bytes())),
        Err(Error::BadState("leaky bucket DELAY above its queue"))
    );
}

/// One limiter of every algorithm of the registry, as their own `check` leaves them.
fn one_of_each() -> Vec<Limiter> {
    let p = Policy::new(10, 1000, 20).unwrap();
    let bucket = Limiter {
        policy: p,
        state: AlgoState::TokenBucket(token_bucket::check(None, &p, NS, 3).next.unwrap()),
    };
    let mut limiters = vec![gcra(), bucket];
    limiters.extend(window_limiters());
    limiters.push(shaper());
    let n = Policy::new(3, 1000, 3).unwrap();
    let holding = crate::algo::concurrency::check(None, &n, NS, 2)
        .next
        .unwrap();
    limiters.push(Limiter::new(n, AlgoState::Concurrency(holding)));
    limiters
}

#[test]
fn one_of_each_covers_the_registry() {
    let tags: Vec<u8> = one_of_each().iter().map(|l| l.state.tag()).collect();
    assert_covers_registry("one_of_each()", &tags);
}

/// The inline size of the enum: the window algorithms do not make every limiter bigger.
#[test]
fn state_stays_small() {
    assert!(std::mem::size_of::<SlidingLog>() <= 24);
    // The tag takes one alignment unit (8 bytes since the u128 states are packed(8)).
    assert_eq!(
        std::mem::size_of::<AlgoState>(),
        std::mem::size_of::<TokenBucket>() + std::mem::align_of::<AlgoState>()
    );
}

/// Encodes, decodes, and checks the bytes are the only encoding of that state.
fn round_trips(limiter: Limiter) -> Result<(), TestCaseError> {
    let mut buf = Vec::new();
    limiter.encode(&mut buf);
    prop_assert_eq!(Limiter::decode(&buf), Ok(limiter));
    Ok(())
}

proptest! {
    /// Every state the window algorithms store, and every state a policy change carries
    /// over, passes validation and round-trips.
    #[test]
    fn window_states_round_trip(
        p in window_policy_strategy(),
        p2 in window_policy_strategy(),
        trace in trace_strategy(20),
    ) {
        let trace: Vec<_> = trace.into_iter().map(|(g, c)| (g, c.min(p.limit()))).collect();
        let end = T0 + trace.iter().map(|t| t.0).sum::<u64>();
        let (_, steps) = run(&trace, |s, now, cost| sliding_log::check(s, &p, now, cost));
        for log in steps.into_iter().filter_map(|s| s.before) {
            let moved = sliding_log::rescale(&log, &p, &p2, end);
            round_trips(Limiter { policy: p2, state: AlgoState::SlidingLog(moved) })?;
            let refunded = sliding_log::refund(&log, &p, end, 2);
            round_trips(Limiter { policy: p, state: AlgoState::SlidingLog(refunded) })?;
            round_trips(Limiter { policy: p, state: AlgoState::SlidingLog(log) })?;
        }
        let (_, steps) = run(&trace, |s, now, cost| sliding_counter::check(s, &p, now, cost));
        for c in steps.into_iter().filter_map(|s| s.before) {
            let moved = sliding_counter::rescale(&c, &p, &p2, end);
            round_trips(Limiter { policy: p2, state: AlgoState::SlidingCounter(moved) })?;
            let refunded = sliding_counter::refund(&c, &p, end, 2);
            round_trips(Limiter { policy: p, state: AlgoState::SlidingCounter(refunded) })?;
            round_trips(Limiter { policy: p, state: AlgoState::SlidingCounter(c) })?;
        }
        let (_, steps) = run(&trace, |s, now, cost| fixed_window::check(s, &p, now, cost));
        for f in steps.into_iter().filter_map(|s| s.before) {
            let moved = fixed_window::rescale(&f, &p, &p2, end);
            round_trips(Limiter { policy: p2, state: AlgoState::FixedWindow(moved) })?;
            let refunded = fixed_window::refund(&f, &p, end, 2);
            round_trips(Limiter { policy: p, state: AlgoState::FixedWindow(refunded) })?;
            round_trips(Limiter { policy: p, state: AlgoState::FixedWindow(f) })?;
        }
    }

    /// A mutated valid encoding either fails to decode or decodes to a state whose encoding
    /// is exactly those bytes (one encoding per state: replicas compare bytes).
    #[test]
    fn mutated_encodings_are_refused_or_canonical(
        which in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let mut limiters = one_of_each();
        let limiter = limiters.swap_remove(which.index(limiters.len()));
        let mut buf = Vec::new();
        limiter.encode(&mut buf);
        let i = at.index(buf.len());
        buf[i] = byte;
        if let Ok(decoded) = Limiter::decode(&buf) {
            let mut again = Vec::new();
            decoded.encode(&mut again);
            prop_assert_eq!(again, buf);
        }
    }

    #[test]
    fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..120)) {
        let _ = Limiter::decode(&bytes);
    }
}
