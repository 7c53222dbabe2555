//! Sliding counter: two fixed-window counts, the previous window's weighted by how much of it a
//! window of length W ending now still overlaps, as an estimate of a rolling window.
//!
//! Terms:
//! - `window`: `[start, start + W)`, aligned to the Unix epoch as in `fixed_window`.
//! - `curr`, `prev`: the cost admitted in the current window, and in the one just before it.
//! - `elapsed` (e): how far `now` is into the current window.
//! - `estimate`: `prev·(W − e)/W + curr`. A request of cost n is admitted when the estimate plus
//!   n − 1 is below L, i.e. `prev·(W − e) + (curr + n − 1)·W < L·W` in integers: the classic rule
//!   (the estimate before a request is below L), extended so that a cost-n request passes exactly
//!   when n cost-1 requests at the same instant would.
//!
//! The overshoot bound: any interval of length W starting δ after a window boundary admits fewer
//! than `L + 1 + p·δ/W`, where p is what the window containing its start admitted. The head of
//! the interval holds at most p; the tail, in the next window, stopped being admitted once
//! `p·(W − δ)/W + curr` reached L. Since p ≤ L, that is at most 2L, the fixed window's worst case,
//! but only when the previous window's requests were bunched at its end; an interval that starts
//! at a boundary, or follows a quiet window, gets at most L.

use super::bytes::{Invalid, Reader};
use super::decision::{Decision, Outcome};
use super::inspect::{inspection, relative_ms, Field};
use super::policy::{Policy, MAX_LIMIT};

/// Stored state: the current window's start and the two counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingCounter {
    /// Start of the current window, ns; a multiple of the window length.
    pub start_ns: u64,
    /// Cost admitted in `[start − W, start)`; at most L.
    pub prev: u64,
    /// Cost admitted in `[start, start + W)`; at most L.
    pub curr: u64,
}

impl SlidingCounter {
    /// The counts in force at `now_ns`: the stored window while it lasts (or while the clock
    /// reads before it), else rolled forward: the stored count becomes `prev` when its window is
    /// the one just before now's, and is forgotten when it is older.
    fn current(state: Option<&SlidingCounter>, policy: &Policy, now_ns: u64) -> SlidingCounter {
        let start_ns = policy.window_start(now_ns);
        let fresh = SlidingCounter {
            start_ns,
            prev: 0,
            curr: 0,
        };
        match state {
            Some(s) if s.start_ns >= start_ns => *s,
            Some(s)
                if u128::from(s.start_ns) + u128::from(policy.window_ns()) == start_ns.into() =>
            {
                SlidingCounter {
                    prev: s.curr,
                    ..fresh
                }
            }
            _ => fresh,
        }
    }

    /// `prev·(W − e) + curr·W`: the estimate times W at `elapsed` ns into the window.
    fn weighted(&self, window: u128, elapsed: u128) -> u128 {
        // elapsed < window (`current` keeps now inside the window or before it).
        u128::from(self.prev) * window.saturating_sub(elapsed) + u128::from(self.curr) * window
    }

    /// The first instant at which a request of `asked` passes, nothing else being admitted
    /// before: solved in this window, else in the next (where `prev` is today's `curr`), else
    /// the one after (where both counts are gone). Wider than u64 so it cannot overflow.
    fn admissible_at(&self, policy: &Policy, asked: u64) -> u128 {
        let (window, limit) = (u128::from(policy.window_ns()), u128::from(policy.limit()));
        let start = u128::from(self.start_ns);
        // Within a window with counts (p, c): p·(W − e) < (L + 1 − c − n)·W = room. For p > 0
        // that is W − e <= ⌈room/p⌉ − 1, so e >= W + 1 − ⌈room/p⌉.
        let earliest = |p: u64, c: u64| -> Option<u128> {
            let room = (limit + 1).checked_sub(u128::from(c) + u128::from(asked))? * window;
            if room == 0 {
                return None;
            }
            let e = match p {
                0 => 0,
                p => (window + 1).saturating_sub(room.div_ceil(u128::from(p))),
            };
            (e < window).then_some(e)
        };
        if let Some(e) = earliest(self.prev, self.curr) {
            return start + e;
        }
        if let Some(e) = earliest(self.curr, 0) {
            return start + window + e;
        }
        start + 2 * window
    }
}

/// `at − now`, in ns, saturating.
fn until(at: u128, now_ns: u64) -> u64 {
    u64::try_from(at.saturating_sub(u128::from(now_ns))).unwrap_or(u64::MAX)
}

/// Decides a request of `cost` at `now_ns`; `cost` 0 peeks (answered as cost 1, nothing stored).
/// The caller guarantees `cost <= policy.limit()`.
pub fn check(
    state: Option<&SlidingCounter>,
    policy: &Policy,
    now_ns: u64,
    cost: u64,
) -> Outcome<SlidingCounter> {
    let counter = SlidingCounter::current(state, policy, now_ns);
    let (window, limit) = (u128::from(policy.window_ns()), u128::from(policy.limit()));
    // A clock reading before the stored window counts as its first instant: the previous
    // window then weighs the most it can.
    let elapsed = u128::from(now_ns.saturating_sub(counter.start_ns));
    let asked = cost.max(1);
    let admitted =
        counter.weighted(window, elapsed) + u128::from(asked - 1) * window < limit * window;
    let after = if admitted {
        SlidingCounter {
            curr: counter.curr + cost,
            ..counter
        }
    } else {
        counter
    };
    // Cost-1 requests admitted one after another now: while weighted + k·W < L·W.
    let room = (limit * window).saturating_sub(after.weighted(window, elapsed));
    let start = u128::from(after.start_ns);
    // Indistinguishable from fresh once both counts have left: `curr` is `prev` for one more
    // window.
    let fresh_at = if after.curr > 0 {
        start + 2 * window
    } else if after.prev > 0 {
        start + window
    } else {
        0
    };
    let decision = Decision {
        allowed: u64::from(admitted),
        capacity: policy.limit(),
        remaining: u64::try_from(room.div_ceil(window)).unwrap_or(u64::MAX),
        retry_after_ns: (!admitted).then(|| until(counter.admissible_at(policy, asked), now_ns)),
        reset_after_ns: until(fresh_at, now_ns),
    };
    let next = (admitted && cost > 0).then_some(after);
    Outcome { decision, next }
}

/// The counts under a new policy, each placed where it weighs the most it could: `curr` arrived
/// between the stored window's start and now, so it may all lie in the new current window and is
/// counted there; `prev` arrived in the window before, so it counts in the new current window if
/// that window may reach back into it, else in the new previous window if that one may, else
/// nowhere. Counts above a lower L are kept whole (what was spent is never forgotten: a key called
/// alternately under two L during a rollout must count all of it). A clock that went back does not
/// restart the window (as in `fixed_window::rescale`).
pub fn rescale(state: &SlidingCounter, from: &Policy, to: &Policy, now_ns: u64) -> SlidingCounter {
    let old = SlidingCounter::current(Some(state), from, now_ns);
    let start_ns = to.window_start(now_ns.max(old.start_ns));
    let (mut prev, mut curr) = (0, old.curr);
    if old.start_ns > start_ns {
        curr = curr.saturating_add(old.prev);
    } else if u128::from(old.start_ns) + u128::from(to.window_ns()) > u128::from(start_ns) {
        prev = old.prev;
    }
    SlidingCounter {
        start_ns,
        // A count of MAX_LIMIT fills a window under any policy: saturating there forgets nothing.
        prev: prev.min(MAX_LIMIT),
        curr: curr.min(MAX_LIMIT),
    }
}

/// Counts `n` in the current window whatever it holds (see `Algorithm::charge`), up to
/// `MAX_LIMIT`, which fills a window under any policy.
pub fn charge(state: &SlidingCounter, policy: &Policy, now_ns: u64, n: u64) -> SlidingCounter {
    let counter = SlidingCounter::current(Some(state), policy, now_ns);
    SlidingCounter {
        curr: counter.curr.saturating_add(n).min(MAX_LIMIT),
        ..counter
    }
}

/// The current window's count, in units: where a charge lands (see `Algorithm::counted`).
pub fn counted(state: &SlidingCounter, policy: &Policy, now_ns: u64) -> u128 {
    let counter = SlidingCounter::current(Some(state), policy, now_ns);
    u128::from(counter.curr) * policy.units_per_token()
}

/// Gives back `n` of the current window's count (a request that was not served), never below 0.
pub fn refund(state: &SlidingCounter, policy: &Policy, now_ns: u64, n: u64) -> SlidingCounter {
    let counter = SlidingCounter::current(Some(state), policy, now_ns);
    SlidingCounter {
        curr: counter.curr.saturating_sub(n),
        ..counter
    }
}

/// `RL.INSPECT`'s fields, as of now (the stored counts rolled forward if a window boundary
/// passed): `window_start_ms`, the current window's start relative to now; `previous_count`
/// and `current_count`; and `estimate_millirequests`, the weighted estimate
/// `prev·(W − e)/W + curr` in thousandths, rounded down (a request of cost n passes while the
/// estimate plus n − 1 is below L).
pub fn inspect(state: &SlidingCounter, policy: &Policy, now_ns: u64) -> Vec<Field> {
    let counter = SlidingCounter::current(Some(state), policy, now_ns);
    let window = u128::from(policy.window_ns());
    let elapsed = u128::from(now_ns.saturating_sub(counter.start_ns));
    let estimate = counter.weighted(window, elapsed) * 1000 / window;
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let own = vec![
        (
            "window_start_ms",
            relative_ms(counter.start_ns.into(), now_ns),
        ),
        ("previous_count", int(counter.prev)),
        ("current_count", int(counter.curr)),
        (
            "estimate_millirequests",
            i64::try_from(estimate).unwrap_or(i64::MAX),
        ),
    ];
    inspection(policy, own, &check(Some(state), policy, now_ns, 0).decision)
}

/// Stored fields: `start_ns u64` (a multiple of W), `prev u64`, `curr u64` (each <= L, or <=
/// `MAX_LIMIT` after a policy was lowered or another configuration charged it).
pub fn encode(state: &SlidingCounter, out: &mut Vec<u8>) {
    for n in [state.start_ns, state.prev, state.curr] {
        out.extend_from_slice(&n.to_le_bytes());
    }
}

pub fn decode(r: &mut Reader<'_>, policy: &Policy) -> Result<SlidingCounter, Invalid> {
    let (start_ns, prev, curr) = (r.u64()?, r.u64()?, r.u64()?);
    if !start_ns.is_multiple_of(policy.window_ns()) {
        return Err("sliding counter window not aligned");
    }
    // Above L only after a policy was lowered; never above the most any policy allows.
    if prev > MAX_LIMIT || curr > MAX_LIMIT {
        return Err("sliding counter count out of range");
    }
    Ok(SlidingCounter {
        start_ns,
        prev,
        curr,
    })
}

super::algorithm::algorithm!(SlidingCounter, name: "sliding counter", id: "sliding_counter", tag: 4, burst: false);

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    /// A window boundary for W = 1000 ms.
    const T0: u64 = 1_800_000_000_000 * MS;

    fn policy(l: u64, w: u64) -> Policy {
        Policy::new(l, w, l).unwrap()
    }

    fn state(start_ns: u64, prev: u64, curr: u64) -> SlidingCounter {
        SlidingCounter {
            start_ns,
            prev,
            curr,
        }
    }

    #[test]
    fn inspect_shows_the_estimate() {
        let p = policy(10, 1000);
        // 8 in the previous window, 3 in this one, 250 ms in: 8·0.75 + 3 = 9.
        let s = state(T0, 8, 3);
        assert_eq!(
            inspect(&s, &p, T0 + 250 * MS),
            vec![
                ("limit", 10),
                ("window_ms", 1000),
                ("burst", 10),
                ("window_start_ms", -250),
                ("previous_count", 8),
                ("current_count", 3),
                ("estimate_millirequests", 9000),
                ("remaining", 1),
                ("retry_after_ms", -1),
                ("reset_after_ms", 1750),
            ]
        );
        // A boundary later the counts roll: 3 become the previous window's, 1.2 s in: 3·0.8.
        let f = inspect(&s, &p, T0 + 1200 * MS);
        assert_eq!(
            f[3..7],
            [
                ("window_start_ms", -200),
                ("previous_count", 3),
                ("current_count", 0),
                ("estimate_millirequests", 2400)
            ]
        );
        // Two boundaries later, nothing is left.
        assert_eq!(
            inspect(&s, &p, T0 + 2500 * MS)[4..7],
            [
                ("previous_count", 0),
                ("current_count", 0),
                ("estimate_millirequests", 0)
            ]
        );
    }

    #[test]
    fn table_of_cases() {
        let p = policy(10, 1000);
        let first = check(None, &p, T0 + 300 * MS, 1);
        assert_eq!(
            first.decision,
            Decision {
                allowed: 1,
                capacity: 10,
                remaining: 9,
                retry_after_ns: None,
                reset_after_ns: 1700 * MS
            }
        );
        assert_eq!(first.next, Some(state(T0, 0, 1)));

        // The boundary edge: 10 at the end of a window, then the next window's estimate starts at
        // 10 and falls by one every 100 ms.
        let full = state(T0, 0, 10);
        let at = |ms: u64, cost: u64| check(Some(&full), &p, T0 + ms * MS, cost);
        let d = at(1000, 1).decision;
        assert_eq!(
            d,
            Decision {
                allowed: 0,
                capacity: 10,
                remaining: 0,
                retry_after_ns: Some(1),
                reset_after_ns: 1000 * MS
            }
        );
        assert_eq!(at(1000, 0).decision, d, "a peek answers like cost 1");
        assert_eq!(at(1000, 0).next, None);
        let d = at(1250, 1).decision;
        assert_eq!((d.allowed, d.remaining), (1, 2));
        assert_eq!(at(1250, 1).next, Some(state(T0 + 1000 * MS, 10, 1)));
        // Cost 3 at 250 ms in: estimate 7.5, 7.5 + 2 < 10: admitted; cost 4 is not, until the
        // estimate is below 7, 300 ms + 1 ns in.
        assert_eq!(at(1250, 3).decision.allowed, 1);
        let d = at(1250, 4).decision;
        assert_eq!((d.allowed, d.retry_after_ns), (0, Some(50 * MS + 1)));
        assert_eq!(at(1300, 4).decision.allowed, 0);
        assert_eq!(at(1300, 4).decision.retry_after_ns, Some(1));
        let d = check(Some(&full), &p, T0 + 1300 * MS + 1, 4).decision;
        assert_eq!((d.allowed, d.remaining), (1, 0));
    }

    #[test]
    fn retry_after_spans_windows() {
        let p = policy(10, 1000);
        // Current window full: wait for the next; there prev = 10 weighs 10 at its start, so a
        // cost-1 request passes 1 ns after it.
        let s = state(T0, 3, 10);
        let d = check(Some(&s), &p, T0 + 400 * MS, 1).decision;
        assert_eq!(d.retry_after_ns, Some(600 * MS + 1));
        // Cost 10 needs the carried 10 to weigh less than 1: 900 ms + 1 ns into the next window.
        let d = check(Some(&s), &p, T0 + 400 * MS, 10).decision;
        assert_eq!(d.retry_after_ns, Some(1500 * MS + 1));
        assert_eq!(d.reset_after_ns, 1600 * MS);
    }

    #[test]
    fn clock_backwards_keeps_the_window() {
        let p = policy(10, 1000);
        let s = state(T0 + 1000 * MS, 10, 5);
        // Before the stored window: treated as its first instant (prev weighs fully).
        let d = check(Some(&s), &p, T0 + 500 * MS, 1).decision;
        assert_eq!(d.allowed, 0);
        let at_start = check(Some(&s), &p, T0 + 1000 * MS, 1).decision;
        assert_eq!(
            d.retry_after_ns.unwrap(),
            at_start.retry_after_ns.unwrap() + 500 * MS
        );
    }

    #[test]
    fn rescale_places_each_count_where_it_weighs_most() {
        let from = policy(10, 1000);
        let s = state(T0, 4, 3);
        // Only L changes: the same windows, the same counts.
        assert_eq!(rescale(&s, &from, &policy(20, 1000), T0 + 5), s);
        // A longer window that contains the old previous window: prev weighs fully now.
        let to = policy(20, 2000);
        let later = state(T0 + 1000 * MS, 4, 3);
        assert_eq!(rescale(&later, &from, &to, T0 + 1500 * MS), state(T0, 0, 7));
        // A longer window whose previous window contains the old previous one.
        assert_eq!(rescale(&s, &from, &to, T0 + 5), state(T0, 4, 3));
        // A shorter window: curr counts in it, prev in its previous window only if adjacent.
        let to = policy(20, 100);
        assert_eq!(
            rescale(&s, &from, &to, T0 + 50 * MS),
            state(T0, 4, 3),
            "the new previous window [T0 − 100 ms, T0) overlaps the old one"
        );
        assert_eq!(
            rescale(&s, &from, &to, T0 + 250 * MS),
            state(T0 + 200 * MS, 0, 3)
        );
        // Counts above the new L are kept: a full window now, and all of it counts again if the
        // old policy comes back.
        assert_eq!(rescale(&s, &from, &policy(2, 1000), T0), state(T0, 4, 3));
        // Merged counts saturate at the most any policy allows.
        let huge = state(T0 + 1000 * MS, MAX_LIMIT, MAX_LIMIT);
        let r = rescale(
            &huge,
            &policy(MAX_LIMIT, 1000),
            &policy(MAX_LIMIT, 2000),
            T0 + 1500 * MS,
        );
        assert_eq!(r, state(T0, 0, MAX_LIMIT));
    }

    #[test]
    fn refund_lowers_the_current_count() {
        let p = policy(10, 1000);
        let s = state(T0, 7, 6);
        assert_eq!(refund(&s, &p, T0 + 5, 2), state(T0, 7, 4));
        assert_eq!(refund(&s, &p, T0 + 5, 60), state(T0, 7, 0));
        // In the next window, the current count is 0 and 6 became prev.
        assert_eq!(
            refund(&s, &p, T0 + 1000 * MS, 1),
            state(T0 + 1000 * MS, 6, 0)
        );
    }
}
