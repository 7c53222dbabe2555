//! Helpers for the property tests of the algorithms, over random request sequences: traces,
//! policies, the bounds each kind of promise allows, runs on a test clock.
//!
//! A trace is a list of (gap before the request in ns, cost). The checks count admitted cost in
//! every interval between two admitted requests, which is where the worst interval starts and ends.
//!
//! The promise each algorithm declares, and the properties every algorithm of the registry
//! keeps, are in `promises` (which names every algorithm; this file names none, so an
//! algorithm's own tests use it).

// The helpers only this crate's own tests use are dead code in a `props` build (for the tests
// of the packages that link the core, which use the exported ones).
#![cfg_attr(not(test), allow(dead_code))]

use super::decision::{Decision, Outcome};
use super::policy::Policy;
use proptest::prelude::*;

pub const T0: u64 = 1_800_000_000_000_000_000;

/// (admitted at, cost) pairs in time order.
pub type Admitted = Vec<(u64, u64)>;

/// Largest admitted cost in any closed interval, compared against `bound(length_ns)`.
/// Returns the first offending (start, end, admitted) if any.
pub fn worst_interval(
    admitted: &[(u64, u64)],
    bound: impl Fn(u64) -> u128,
) -> Option<(u64, u64, u128)> {
    for (i, &(start, _)) in admitted.iter().enumerate() {
        let mut sum = 0u128;
        for &(end, cost) in &admitted[i..] {
            sum += u128::from(cost);
            if sum > bound(end - start) {
                return Some((start, end, sum));
            }
        }
    }
    None
}

/// B + L·d/W as an exact comparison: admitted·W_ns <= B·W_ns + d·L, i.e. admitted <= that / W_ns.
pub fn bucket_bound(p: &Policy) -> impl Fn(u64) -> u128 + '_ {
    move |d| {
        (u128::from(p.capacity()) * p.units_per_token() + u128::from(d) * p.units_per_ns())
            / p.units_per_token()
    }
}

pub fn policy_strategy() -> impl Strategy<Value = Policy> {
    (
        1u64..=20,
        prop_oneof![1u64..=50, Just(1000u64), Just(60_000u64)],
        1u64..=30,
    )
        .prop_map(|(l, w, b)| Policy::new(l, w, b).unwrap())
}

/// A window algorithm's policy: L per W, capacity L.
pub fn window_policy_strategy() -> impl Strategy<Value = Policy> {
    (
        1u64..=20,
        prop_oneof![1u64..=50, Just(1000u64), Just(60_000u64)],
    )
        .prop_map(|(l, w)| Policy::new(l, w, l).unwrap())
}

/// Exactly L in any closed interval shorter than W: a sliding log's promise, extended to longer
/// intervals (each W-long piece holds at most L).
pub fn log_bound(p: &Policy) -> impl Fn(u64) -> u128 + '_ {
    move |d| u128::from(p.limit()) * u128::from(d / p.window_ns() + 1)
}

/// At most 2L in any closed interval shorter than W: such an interval meets at most two aligned
/// windows. Longer: `⌈(d+1)/W⌉ + 1` windows at most.
pub fn two_windows_bound(p: &Policy) -> impl Fn(u64) -> u128 + '_ {
    move |d| {
        let w = u128::from(p.window_ns());
        u128::from(p.limit()) * ((u128::from(d) + w) / w + 1)
    }
}

/// The cost admitted per aligned window, by window start.
pub fn per_window(p: &Policy, admitted: &[(u64, u64)]) -> std::collections::BTreeMap<u64, u64> {
    let mut by_window = std::collections::BTreeMap::new();
    for &(at, cost) in admitted {
        *by_window.entry(p.window_start(at)).or_insert(0) += cost;
    }
    by_window
}

/// Gaps mostly short relative to the window, so limiters are exercised near their limit.
pub fn trace_strategy(max_cost: u64) -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec(
        (
            prop_oneof![
                Just(0u64),
                0u64..1_000_000,
                0u64..100_000_000,
                0u64..2_000_000_000
            ],
            0..=max_cost,
        ),
        1..120,
    )
}

/// One request of a trace as the limiter saw it: when, the state before, the cost, the answer.
pub struct Step<S> {
    pub now: u64,
    pub before: Option<S>,
    pub cost: u64,
    pub decision: Decision,
}

/// Feeds a trace (gap, cost) to `check`, starting at T0; returns what was admitted and every step.
pub fn run<S: Clone>(
    trace: &[(u64, u64)],
    check: impl Fn(Option<&S>, u64, u64) -> Outcome<S>,
) -> (Admitted, Vec<Step<S>>) {
    let (mut now, mut state, mut admitted, mut steps) = (T0, None::<S>, Vec::new(), Vec::new());
    for &(gap, cost) in trace {
        now += gap;
        let out = check(state.as_ref(), now, cost);
        steps.push(Step {
            now,
            before: state.clone(),
            cost,
            decision: out.decision,
        });
        if let Some(next) = out.next {
            admitted.push((now, cost));
            state = Some(next);
        }
    }
    (admitted, steps)
}

/// Runs requests (offset from T0 in ns, cost) through `check`, keeping each admitted state;
/// returns every decision and the final state. Offsets need not grow: the clock may step back.
pub fn run_at<S>(
    reqs: &[(u64, u64)],
    check: impl Fn(Option<&S>, u64, u64) -> Outcome<S>,
) -> (Vec<Decision>, Option<S>) {
    let mut state = None;
    let decisions = reqs
        .iter()
        .map(|&(at, cost)| {
            let out = check(state.as_ref(), T0 + at, cost);
            if out.next.is_some() {
                state = out.next;
            }
            out.decision
        })
        .collect();
    (decisions, state)
}

/// The promise an algorithm keeps, as the property tests check it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Promise {
    /// At most B + L·d/W in any closed interval of length d ([`bucket_bound`]).
    Bucket,
    /// At most L in any interval shorter than W ([`log_bound`]).
    SlidingLog,
    /// At most 2L in any interval shorter than W ([`two_windows_bound`]), and the weighted rule
    /// of `sliding_counter`.
    SlidingCounter,
    /// At most L per aligned window, hence 2L in any interval shorter than W.
    FixedWindow,
}

impl Promise {
    /// The most any closed interval of `d` ns may hold under `p`.
    pub fn bound(self, p: &Policy, d: u64) -> u128 {
        match self {
            Promise::Bucket => bucket_bound(p)(d),
            Promise::SlidingLog => log_bound(p)(d),
            Promise::SlidingCounter | Promise::FixedWindow => two_windows_bound(p)(d),
        }
    }
}

/// Feeds `first` under policy `p1` then `second` under `p2` the way the command layer does: a
/// stored state decided under another policy is rescaled before the check, and stored (with the
/// new policy) only when the request changed it. Returns the admitted (instant, cost, phase 2?).
pub fn run_switch<S: Clone>(
    p1: &Policy,
    p2: &Policy,
    first: &[(u64, u64)],
    second: &[(u64, u64)],
    check: impl Fn(Option<&S>, &Policy, u64, u64) -> Outcome<S>,
    rescale: impl Fn(&S, &Policy, &Policy, u64) -> S,
) -> Vec<(u64, u64, bool)> {
    let (mut now, mut stored, mut admitted) = (T0, None::<(Policy, S)>, Vec::new());
    let phases = [(p1, first, false), (p2, second, true)];
    for (p, trace, late) in phases {
        for &(gap, cost) in trace {
            now += gap;
            let cost = cost.min(p.limit());
            let out = match &stored {
                Some((held, s)) if held == p => check(Some(s), p, now, cost),
                Some((held, s)) => check(Some(&rescale(s, held, p, now)), p, now, cost),
                None => check(None, p, now, cost),
            };
            if let Some(next) = out.next {
                admitted.push((now, cost, late));
                stored = Some((*p, next));
            }
        }
    }
    admitted
}

/// Checks what every algorithm promises of its answers, step by step: a denial's retry_after is
/// exact (denied 1 ns before it, admitted at it), and a peek stores nothing and answers allowed
/// and retry_after like a cost-1 request.
pub fn answers_are_exact<S: Clone>(
    log: &[Step<S>],
    check: impl Fn(Option<&S>, u64, u64) -> Outcome<S>,
) -> Result<(), TestCaseError> {
    for Step {
        now,
        before,
        cost,
        decision,
    } in log
    {
        if let Some(retry) = decision.retry_after_ns {
            prop_assert!(retry > 0);
            let just_before = check(before.as_ref(), now + retry - 1, *cost).decision;
            prop_assert_eq!(just_before.allowed, 0, "at {} + {} - 1", now, retry);
            let at = check(before.as_ref(), now + retry, *cost).decision;
            prop_assert_eq!(at.allowed, 1, "at {} + {}", now, retry);
        }
        let peek = check(before.as_ref(), *now, 0);
        let one = check(before.as_ref(), *now, 1).decision;
        prop_assert!(peek.next.is_none());
        prop_assert_eq!(peek.decision.allowed, one.allowed);
        prop_assert_eq!(peek.decision.retry_after_ns, one.retry_after_ns);
    }
    Ok(())
}
