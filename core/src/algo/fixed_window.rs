//! Fixed window: a count per window; a request of cost n is admitted when the window's count plus
//! n is at most L.
//!
//! Terms:
//! - `window`: the interval `[start, start + W)`, aligned to the Unix epoch
//!   (`start = now − now mod W`), so every shard and replica agrees on the boundaries.
//! - `count`: the cost admitted in the window so far; it starts again from 0 at the next
//!   boundary.
//!
//! The promise: at most L per aligned window, hence at most 2L in any interval of length W (L at
//! the end of one window, L at the start of the next). A clock that steps back into an earlier
//! window keeps the stored window and its count: a window never restarts because time ran
//! backwards.

use super::bytes::{Invalid, Reader};
use super::decision::{Decision, Outcome};
use super::inspect::{inspection, relative_ms, Field};
use super::policy::{Policy, MAX_LIMIT};

/// Stored state: the window the count belongs to, and the count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedWindow {
    /// Start of the window, ns; a multiple of the window length.
    pub start_ns: u64,
    /// Cost admitted in that window; at most L.
    pub count: u64,
}

impl FixedWindow {
    /// The window in force at `now_ns`: the stored one while it lasts (or while the clock reads
    /// before it), else a fresh one.
    fn current(state: Option<&FixedWindow>, policy: &Policy, now_ns: u64) -> FixedWindow {
        let start_ns = policy.window_start(now_ns);
        match state {
            Some(s) if s.start_ns >= start_ns => *s,
            _ => FixedWindow { start_ns, count: 0 },
        }
    }

    /// The first instant of the next window, ns (wider than u64 so it cannot overflow).
    fn end(&self, policy: &Policy) -> u128 {
        u128::from(self.start_ns) + u128::from(policy.window_ns())
    }
}

/// `at − now`, in ns, saturating (both ends are instants; `at` is never before `now` here).
fn until(at: u128, now_ns: u64) -> u64 {
    u64::try_from(at.saturating_sub(u128::from(now_ns))).unwrap_or(u64::MAX)
}

/// Decides a request of `cost` at `now_ns`; `cost` 0 peeks (answered as cost 1, nothing stored).
/// The caller guarantees `cost <= policy.limit()`.
pub fn check(
    state: Option<&FixedWindow>,
    policy: &Policy,
    now_ns: u64,
    cost: u64,
) -> Outcome<FixedWindow> {
    let window = FixedWindow::current(state, policy, now_ns);
    let limit = policy.limit();
    let admitted = window.count.saturating_add(cost.max(1)) <= limit;
    let count = if admitted {
        window.count + cost
    } else {
        window.count
    };
    // The next window starts empty: that is when a denied request passes (cost <= L), and when
    // the limiter is indistinguishable from a fresh one.
    let until_end = until(window.end(policy), now_ns);
    let decision = Decision {
        allowed: u64::from(admitted),
        capacity: limit,
        remaining: limit.saturating_sub(count),
        retry_after_ns: (!admitted).then_some(until_end),
        reset_after_ns: if count == 0 { 0 } else { until_end },
    };
    let next = (admitted && cost > 0).then_some(FixedWindow { count, ..window });
    Outcome { decision, next }
}

/// The window under a new policy. What was counted arrived between the window's start and now,
/// so all of it may lie in the new policy's current window: it is all counted there, even above
/// a lower L (a key tightened from 100 to 10 and called again under 100, as two gateway
/// configurations do during a rollout, must still count the 100). The new window is the one
/// holding the later of now and the stored start, so a clock that went back does not restart it.
pub fn rescale(state: &FixedWindow, from: &Policy, to: &Policy, now_ns: u64) -> FixedWindow {
    let window = FixedWindow::current(Some(state), from, now_ns);
    FixedWindow {
        start_ns: to.window_start(now_ns.max(window.start_ns)),
        count: window.count,
    }
}

/// Gives back `n` of the current window's count (a request that was not served), never below 0.
pub fn refund(state: &FixedWindow, policy: &Policy, now_ns: u64, n: u64) -> FixedWindow {
    let window = FixedWindow::current(Some(state), policy, now_ns);
    FixedWindow {
        count: window.count.saturating_sub(n),
        ..window
    }
}

/// Counts `n` in the current window whatever it holds (see `Algorithm::charge`), up to
/// `MAX_LIMIT`, which fills a window under any policy.
pub fn charge(state: &FixedWindow, policy: &Policy, now_ns: u64, n: u64) -> FixedWindow {
    let window = FixedWindow::current(Some(state), policy, now_ns);
    FixedWindow {
        count: window.count.saturating_add(n).min(MAX_LIMIT),
        ..window
    }
}

/// The current window's count, in units (see `Algorithm::counted`).
pub fn counted(state: &FixedWindow, policy: &Policy, now_ns: u64) -> u128 {
    let window = FixedWindow::current(Some(state), policy, now_ns);
    u128::from(window.count) * policy.units_per_token()
}

/// `RL.INSPECT`'s fields, as of now (a fresh window if the stored one ended):
/// `window_start_ms`, the window's start relative to now, and `count`, the cost it holds.
pub fn inspect(state: &FixedWindow, policy: &Policy, now_ns: u64) -> Vec<Field> {
    let window = FixedWindow::current(Some(state), policy, now_ns);
    let own = vec![
        (
            "window_start_ms",
            relative_ms(window.start_ns.into(), now_ns),
        ),
        ("count", i64::try_from(window.count).unwrap_or(i64::MAX)),
    ];
    inspection(policy, own, &check(Some(state), policy, now_ns, 0).decision)
}

/// Stored fields: `start_ns u64` (a multiple of W), `count u64` (<= L, or <= `MAX_LIMIT` after a
/// policy was lowered or another configuration charged it).
pub fn encode(state: &FixedWindow, out: &mut Vec<u8>) {
    out.extend_from_slice(&state.start_ns.to_le_bytes());
    out.extend_from_slice(&state.count.to_le_bytes());
}

pub fn decode(r: &mut Reader<'_>, policy: &Policy) -> Result<FixedWindow, Invalid> {
    let (start_ns, count) = (r.u64()?, r.u64()?);
    if !start_ns.is_multiple_of(policy.window_ns()) {
        return Err("fixed window not aligned");
    }
    // Above L only after a policy was lowered; never above the most any policy allows.
    if count > MAX_LIMIT {
        return Err("fixed window count out of range");
    }
    Ok(FixedWindow { start_ns, count })
}

super::algorithm::algorithm!(FixedWindow, name: "fixed window", id: "fixed_window", tag: 5, burst: false);

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    /// 1.8e18 ns, a window boundary for W = 1000 ms: the instant `props::run_at` offsets count
    /// from.
    const T0: u64 = super::super::props::T0;

    fn policy(l: u64, w: u64) -> Policy {
        Policy::new(l, w, l).unwrap()
    }

    /// Runs requests at the given offsets from T0, returning the decisions and the final state.
    fn run(p: &Policy, reqs: &[(u64, u64)]) -> (Vec<Decision>, Option<FixedWindow>) {
        super::super::props::run_at(reqs, |s, now, cost| check(s, p, now, cost))
    }

    #[test]
    fn inspect_shows_the_window() {
        let p = policy(10, 1000);
        let (_, s) = run(&p, &[(100 * MS, 10)]);
        let s = s.unwrap();
        assert_eq!(
            inspect(&s, &p, T0 + 400 * MS),
            vec![
                ("limit", 10),
                ("window_ms", 1000),
                ("burst", 10),
                ("window_start_ms", -400),
                ("count", 10),
                ("remaining", 0),
                ("retry_after_ms", 600),
                ("reset_after_ms", 600),
            ]
        );
        // The next window: fresh.
        assert_eq!(
            inspect(&s, &p, T0 + 1100 * MS)[3..],
            [
                ("window_start_ms", -100),
                ("count", 0),
                ("remaining", 10),
                ("retry_after_ms", -1),
                ("reset_after_ms", 0)
            ]
        );
    }

    #[test]
    fn table_of_cases() {
        let p = policy(10, 1000);
        let (d, _) = run(&p, &[(250 * MS, 1)]);
        assert_eq!(
            d[0],
            Decision {
                allowed: 1,
                capacity: 10,
                remaining: 9,
                retry_after_ns: None,
                reset_after_ns: 750 * MS
            }
        );
        let (d, s) = run(
            &p,
            &[
                (0, 4),
                (100 * MS, 6),
                (200 * MS, 1),
                (200 * MS, 0),
                (1000 * MS - 1, 1),
                (1000 * MS, 1),
            ],
        );
        assert_eq!((d[1].allowed, d[1].remaining), (1, 0));
        assert_eq!(
            d[2],
            Decision {
                allowed: 0,
                capacity: 10,
                remaining: 0,
                retry_after_ns: Some(800 * MS),
                reset_after_ns: 800 * MS
            }
        );
        assert_eq!(d[3], d[2], "a peek answers like cost 1");
        assert_eq!((d[4].allowed, d[4].retry_after_ns), (0, Some(1)));
        assert_eq!((d[5].allowed, d[5].remaining), (1, 9));
        assert_eq!(
            s,
            Some(FixedWindow {
                start_ns: T0 + 1000 * MS,
                count: 1
            })
        );
        // A peek on nothing: full, nothing to reset.
        let (d, s) = run(&p, &[(5, 0)]);
        assert_eq!(
            (d[0].allowed, d[0].remaining, d[0].reset_after_ns),
            (1, 10, 0)
        );
        assert_eq!(s, None);
    }

    #[test]
    fn windows_are_aligned_to_the_epoch() {
        let p = policy(1, 60_000);
        let now = T0 + 12_345 * MS;
        let s = check(None, &p, now, 1).next.unwrap();
        assert_eq!(s.start_ns % (60_000 * MS), 0);
        assert!(s.start_ns <= now && now < s.start_ns + 60_000 * MS);
    }

    #[test]
    fn clock_backwards_keeps_the_window() {
        let p = policy(10, 1000);
        let (d, s) = run(&p, &[(1500 * MS, 10), (200 * MS, 1)]);
        // Back in the previous window: still the stored one, full until its end.
        assert_eq!(d[1].allowed, 0);
        assert_eq!(d[1].retry_after_ns, Some(1800 * MS));
        assert_eq!(s.unwrap().start_ns, T0 + 1000 * MS);
    }

    #[test]
    fn rescale_carries_the_count() {
        let from = policy(10, 1000);
        let s = check(None, &from, T0 + 700 * MS, 4).next.unwrap();
        // Same window length, higher limit: 4 of 100 spent.
        let to = policy(100, 1000);
        let r = rescale(&s, &from, &to, T0 + 800 * MS);
        assert_eq!(
            r,
            FixedWindow {
                start_ns: T0,
                count: 4
            }
        );
        // A shorter window: the 4 may all lie in the new one, so they count there.
        let to = policy(5, 100);
        let r = rescale(&s, &from, &to, T0 + 850 * MS);
        assert_eq!(
            r,
            FixedWindow {
                start_ns: T0 + 800 * MS,
                count: 4
            }
        );
        // A lower limit than what was spent: all 4 still count (full), so that going back to
        // the old policy in the same window counts them too.
        let to = policy(2, 1000);
        let lowered = rescale(&s, &from, &to, T0 + 800 * MS);
        assert_eq!(lowered.count, 4);
        assert_eq!(
            check(Some(&lowered), &to, T0 + 800 * MS, 1)
                .decision
                .allowed,
            0
        );
        let back = rescale(&lowered, &to, &from, T0 + 800 * MS);
        assert_eq!(
            check(Some(&back), &from, T0 + 800 * MS, 0)
                .decision
                .remaining,
            6
        );
        // A stale window carries nothing.
        assert_eq!(rescale(&s, &from, &to, T0 + 1000 * MS).count, 0);
    }

    #[test]
    fn refund_lowers_the_current_count() {
        let p = policy(10, 1000);
        let s = check(None, &p, T0, 6).next.unwrap();
        assert_eq!(refund(&s, &p, T0 + 5, 2).count, 4);
        assert_eq!(refund(&s, &p, T0 + 5, 50).count, 0);
        // The window is over: nothing left to give back, and the new window is empty.
        assert_eq!(
            refund(&s, &p, T0 + 1000 * MS, 2),
            FixedWindow {
                start_ns: T0 + 1000 * MS,
                count: 0
            }
        );
        let r = refund(&s, &p, T0, 6);
        assert_eq!(check(Some(&r), &p, T0, 10).decision.allowed, 1);
    }
}
