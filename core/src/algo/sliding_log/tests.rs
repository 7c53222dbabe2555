use super::*;

const MS: u64 = 1_000_000;
/// 1.8e18 ns: the instant `props::run_at` offsets count from.
const T0: u64 = super::super::props::T0;

fn policy(l: u64, w: u64) -> Policy {
    Policy::new(l, w, l).unwrap()
}

/// Runs requests at the given offsets from T0; returns the decisions and the final log.
fn run(p: &Policy, reqs: &[(u64, u64)]) -> (Vec<Decision>, Option<SlidingLog>) {
    super::super::props::run_at(reqs, |s, now, cost| check(s, p, now, cost))
}

fn entries(log: &SlidingLog, p: &Policy) -> Vec<(u64, u64)> {
    log.entries(tick_shift(p))
        .map(|(at, c)| (at - T0, c))
        .collect()
}

#[test]
fn inspect_shows_the_log() {
    let p = policy(5, 1000);
    let (_, log) = run(&p, &[(0, 2), (300 * MS, 1), (300 * MS, 2)]);
    let log = log.unwrap();
    assert_eq!(
        inspect(&log, &p, T0 + 700 * MS),
        vec![
            ("limit", 5),
            ("window_ms", 1000),
            ("burst", 5),
            ("entries", 2),
            ("oldest_ms", -700),
            ("newest_ms", -400),
            ("count", 5),
            ("remaining", 0),
            ("retry_after_ms", 300),
            ("reset_after_ms", 600),
        ]
    );
    // The oldest entry left the window but stays stored until the next admitted request.
    let f = inspect(&log, &p, T0 + 1000 * MS);
    assert_eq!(
        f[3..7],
        [
            ("entries", 2),
            ("oldest_ms", -1000),
            ("newest_ms", -700),
            ("count", 3)
        ]
    );
    assert_eq!(
        f[7..],
        [
            ("remaining", 2),
            ("retry_after_ms", -1),
            ("reset_after_ms", 300)
        ]
    );
    // Empty (everything refunded): no instants to show.
    let empty = refund(&log, &p, T0 + 700 * MS, 5);
    assert_eq!(
        inspect(&empty, &p, T0 + 700 * MS)[3..],
        [
            ("entries", 0),
            ("count", 0),
            ("remaining", 5),
            ("retry_after_ms", -1),
            ("reset_after_ms", 0)
        ]
    );
}

#[test]
fn table_of_cases() {
    let p = policy(10, 1000);
    let (d, log) = run(
        &p,
        &[
            (0, 3),
            (100 * MS, 5),
            (100 * MS, 1),
            (200 * MS, 2),
            (200 * MS, 0),
            (1000 * MS - 1, 1),
            (1000 * MS, 1),
        ],
    );
    assert_eq!(
        d[0],
        Decision {
            allowed: 1,
            capacity: 10,
            remaining: 7,
            retry_after_ns: None,
            reset_after_ns: 1000 * MS
        }
    );
    assert_eq!((d[2].allowed, d[2].remaining), (1, 1));
    // 9 in the window: cost 2 waits for the 3 at T0 to leave, at 1000 ms.
    assert_eq!(
        d[3],
        Decision {
            allowed: 0,
            capacity: 10,
            remaining: 1,
            retry_after_ns: Some(800 * MS),
            reset_after_ns: 900 * MS
        }
    );
    assert_eq!((d[4].allowed, d[4].remaining), (1, 1), "a peek is cost 1");
    assert_eq!((d[5].allowed, d[5].remaining), (1, 0));
    assert_eq!((d[6].allowed, d[6].remaining), (1, 2));
    // Run-length: the COST 5 and the 1 at 100 ms are one entry; the 3 at T0 is trimmed.
    let log = log.unwrap();
    assert_eq!(
        entries(&log, &p),
        [(100 * MS, 6), (1000 * MS - 1, 1), (1000 * MS, 1)]
    );
    let (base_ns, words) = log.canonical();
    assert_eq!(base_ns, T0 + 100 * MS);
    assert_eq!(words.collect::<Vec<_>>()[0], 6);
}

#[test]
fn retry_after_is_when_the_oldest_entries_leave() {
    let p = policy(5, 1000);
    let (d, _) = run(&p, &[(0, 1), (10, 1), (20, 3), (30, 2), (30, 5)]);
    // 5 in the window; cost 2 waits for the first two entries (2 requests): 1000 ms + 10 ns.
    assert_eq!(d[3].retry_after_ns, Some(1000 * MS - 20));
    assert_eq!(d[4].retry_after_ns, Some(1000 * MS - 10));
}

#[test]
fn clock_backwards_records_with_the_newest_entry() {
    let p = policy(3, 1000);
    let (d, log) = run(&p, &[(2000 * MS, 1), (500 * MS, 1), (0, 1), (0, 1)]);
    assert_eq!(d[1].allowed, 1);
    assert_eq!(d[2].allowed, 1);
    assert_eq!(d[3].allowed, 0);
    // The entries from a clock behind sit with the newest: they leave with it, not earlier.
    assert_eq!(entries(&log.unwrap(), &p), [(2000 * MS, 3)]);
    assert_eq!(d[3].retry_after_ns, Some(3000 * MS));
}

#[test]
fn long_windows_round_instants_up_to_a_tick() {
    // A day: 8.64e13 ns needs 47 bits, so the tick is 2^4 ns.
    let p = policy(2, 86_400_000);
    assert_eq!(tick_shift(&p), 4);
    assert_eq!(tick_shift(&policy(2, 8_796)), 0);
    assert_eq!(tick_shift(&policy(2, 1_000_000_000_000)), 17);
    let (d, log) = run(&p, &[(1, 1), (17, 1), (18, 1)]);
    let log = log.unwrap();
    assert_eq!(entries(&log, &p), [(16, 1), (32, 1)]);
    // Denied until the entry stored at 16 (arrived at 1) leaves: at most a tick late.
    assert_eq!(d[2].retry_after_ns, Some(86_400_000 * MS + 16 - 18));
}

#[test]
fn rescale_keeps_the_instants_and_at_most_the_new_limit() {
    let from = policy(10, 1000);
    let (_, log) = run(&from, &[(0, 2), (300 * MS, 3), (600 * MS, 4)]);
    let log = log.unwrap();
    // A higher limit: the same entries.
    let to = policy(20, 1000);
    let r = rescale(&log, &from, &to, T0 + 700 * MS);
    assert_eq!(r, log);
    // A shorter window: only what lies in it.
    let to = policy(20, 500);
    let r = rescale(&log, &from, &to, T0 + 700 * MS);
    assert_eq!(entries(&r, &to), [(300 * MS, 3), (600 * MS, 4)]);
    // A lower limit: every request still counts (9 above L = 5), in at most L entries.
    let to = policy(5, 1000);
    let r = rescale(&log, &from, &to, T0 + 700 * MS);
    assert_eq!(r, log);
    // L = 2 below the 3 entries: the two oldest merge at the later instant, and decide
    // exactly as the unmerged log would under the new policy.
    let to = policy(2, 1000);
    let r = rescale(&log, &from, &to, T0 + 700 * MS);
    assert_eq!(entries(&r, &to), [(300 * MS, 5), (600 * MS, 4)]);
    for at in [700, 1000, 1299, 1300, 1599, 1600] {
        let now = T0 + at * MS;
        let merged = check(Some(&r), &to, now, 1).decision;
        assert_eq!(
            merged,
            check(Some(&log), &to, now, 1).decision,
            "at {at} ms"
        );
    }
    // Back to the old policy: all 9 still count.
    let back = rescale(&r, &to, &from, T0 + 700 * MS);
    assert_eq!(
        check(Some(&back), &from, T0 + 700 * MS, 0)
            .decision
            .remaining,
        1
    );
    // A window so long that the tick grows: instants round up.
    let to = policy(10, 1_000_000_000);
    let r = rescale(&log, &from, &to, T0 + 700 * MS);
    let shift = tick_shift(&to);
    assert!(entries(&r, &to)
        .iter()
        .zip([0, 300 * MS, 600 * MS])
        .all(|(&(at, _), was)| at >= was && at - was < 1 << shift));
}

#[test]
fn refund_takes_the_newest_first() {
    let p = policy(10, 1000);
    let (_, log) = run(&p, &[(0, 2), (300 * MS, 3), (600 * MS, 4)]);
    let log = log.unwrap();
    let r = refund(&log, &p, T0 + 700 * MS, 5);
    assert_eq!(entries(&r, &p), [(0, 2), (300 * MS, 2)]);
    let r = refund(&log, &p, T0 + 1100 * MS, 1);
    assert_eq!(entries(&r, &p), [(300 * MS, 3), (600 * MS, 3)]);
    assert_eq!(refund(&log, &p, T0, 100), SlidingLog::default());
    let r = refund(&log, &p, T0 + 700 * MS, 9);
    assert_eq!(check(Some(&r), &p, T0 + 700 * MS, 10).decision.allowed, 1);
}

#[test]
fn stored_parts_are_validated() {
    let p = policy(10, 1000);
    let (_, log) = run(&p, &[(0, 2), (300 * MS, 3)]);
    let log = log.unwrap();
    let (base_ns, words) = log.canonical();
    let w: Vec<u64> = words.collect();
    let ok = SlidingLog::from_parts(&p, base_ns, w.clone());
    assert_eq!(ok, Ok(log.clone()));
    let bad = |base: u64, words: Vec<u64>| SlidingLog::from_parts(&p, base, words).is_err();
    assert!(bad(base_ns, vec![w[1], w[0]]), "out of order");
    assert!(bad(base_ns, vec![w[0], w[0]]), "repeated instant");
    assert!(bad(base_ns, vec![w[1]]), "first offset not 0");
    assert!(bad(base_ns, vec![w[0] & !COUNT_MASK, w[1]]), "count 0");
    assert!(
        !bad(base_ns, vec![w[0] | 9, w[1]]),
        "total above L, after a lowered policy"
    );
    assert!(
        bad(base_ns, vec![w[0] | COUNT_MASK, w[1]]),
        "total above MAX_LOG_LIMIT"
    );
    assert!(bad(5, vec![]), "empty with a base");
    assert!(bad(u64::MAX, vec![0, w[1]]), "instant beyond u64");
    assert!(bad(0, vec![1; 11]), "more entries than L");
    let huge = policy(MAX_LOG_LIMIT + 1, 1000);
    assert!(SlidingLog::from_parts(&huge, 0, vec![]).is_err());
    let long = policy(1, 1_000_000_000);
    assert!(
        SlidingLog::from_parts(&long, 1, vec![1]).is_err(),
        "base off the tick"
    );
}

#[test]
fn inline_size_stays_small() {
    assert!(std::mem::size_of::<SlidingLog>() <= 24);
}

/// The header (total, hash, newest) matches the entries, the canonical form round-trips,
/// and the ring never holds more than L words.
fn consistent(log: &SlidingLog, p: &Policy) -> Result<(), TestCaseError> {
    let shift = tick_shift(p);
    let entries: Vec<(u64, u64)> = log.entries(shift).collect();
    prop_assert_eq!(log.total(), entries.iter().map(|e| e.1).sum::<u64>());
    let hash = entries
        .iter()
        .fold(0u64, |h, &(at, c)| h.wrapping_add(entry_hash(at, c)));
    prop_assert_eq!(log.hash(), hash);
    prop_assert_eq!(log.newest_ns(), entries.last().map_or(0, |e| e.0));
    prop_assert!(log.capacity() as u64 <= p.limit().max(4));
    let (base, words) = log.canonical();
    let again = SlidingLog::from_parts(p, base, words.collect());
    prop_assert_eq!(again.as_ref(), Ok(log));
    prop_assert_eq!(again.map(|l| l.hash()), Ok(log.hash()));
    Ok(())
}

use proptest::prelude::*;

proptest! {
    /// A charge in place is the charge: `charge_change` applied gives exactly `charge`'s
    /// log and passes `check_charge` (None only under L = 1 or at saturation).
    #[test]
    fn charge_in_place_is_the_charge(
        l in 1u64..12,
        w in 1u64..50,
        steps in prop::collection::vec((0u64..30, 0u64..20, any::<bool>()), 1..120),
    ) {
        let p = policy(l, w);
        let mut log = SlidingLog::default();
        let mut now = T0;
        for (gap_ms, n, admit) in steps {
            now += gap_ms * MS / 4;
            if admit {
                if let (_, Some(change)) = decide(Some(&log), &p, now, n.clamp(1, l)) {
                    log.apply(&p, &change);
                }
                continue;
            }
            let whole = charge(&log, &p, now, n);
            match log.charge_change(&p, now, n) {
                Some(change) => {
                    prop_assert_eq!(log.check_charge(&p, &change), Ok(()));
                    log.apply_charge(&p, &change);
                    consistent(&log, &p)?;
                    prop_assert_eq!(&log, &whole);
                }
                None => log = whole,
            }
        }
    }
}

proptest! {
    /// Applied in place over long runs (the ring wraps, grows and shrinks), a log stays
    /// consistent and equal to the log rebuilt from its entries; the same decisions as
    /// `check`'s copies.
    #[test]
    fn ring_stays_consistent(
        l in 1u64..40,
        w in 1u64..50,
        steps in prop::collection::vec((0u64..30, 0u64..6), 1..300),
    ) {
        let p = policy(l, w);
        let mut log: Option<SlidingLog> = None;
        // The reference: the entries in a plain list, trimmed and appended the naive way.
        let mut reference: Vec<(u64, u64)> = Vec::new();
        let mut now = T0;
        for (gap_ms, cost) in steps {
            now += gap_ms * MS / 4;
            let cost = cost.min(l);
            let live: Vec<(u64, u64)> = reference
                .iter()
                .copied()
                .filter(|&(at, _)| at + p.window_ns() > now)
                .collect();
            if cost > 0 && live.iter().map(|e| e.1).sum::<u64>() + cost <= l {
                reference = live;
                match reference.last_mut() {
                    Some(last) if last.0 == now => last.1 += cost,
                    _ => reference.push((now, cost)),
                }
            }
            let copy = check(log.as_ref(), &p, now, cost);
            let (decision, change) = decide(log.as_ref(), &p, now, cost);
            prop_assert_eq!(decision, copy.decision);
            if let Some(change) = change {
                let log = log.get_or_insert_with(SlidingLog::default);
                prop_assert_eq!(log.check_change(&p, &change).is_ok(), true);
                log.apply(&p, &change);
                consistent(log, &p)?;
                prop_assert_eq!(Some(&*log), copy.next.as_ref());
            }
            let held: Vec<(u64, u64)> =
                log.iter().flat_map(|log| log.entries(tick_shift(&p))).collect();
            prop_assert_eq!(&held, &reference);
        }
    }
}
