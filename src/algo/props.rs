//! Property tests of each algorithm's promise, over random request sequences.
//!
//! A trace is a list of (gap before the request in ns, cost). The checks count admitted cost in
//! every interval between two admitted requests, which is where the worst interval starts and ends.

use super::{gcra, token_bucket, Decision, Outcome, Policy};
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
        (u128::from(p.burst()) * p.units_per_token() + u128::from(d) * p.units_per_ns())
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

fn run_gcra(p: &Policy, trace: &[(u64, u64)]) -> (Admitted, Vec<Step<gcra::Gcra>>) {
    run(trace, |s, now, cost| gcra::check(s, p, now, cost))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn gcra_never_exceeds_burst_plus_rate(p in policy_strategy(), trace in trace_strategy(30)) {
        let trace: Vec<_> = trace.into_iter().map(|(g, c)| (g, c.min(p.burst()))).collect();
        let (admitted, _) = run_gcra(&p, &trace);
        prop_assert_eq!(worst_interval(&admitted, bucket_bound(&p)), None);
    }

    #[test]
    fn gcra_retry_after_is_exact(p in policy_strategy(), trace in trace_strategy(30)) {
        let trace: Vec<_> = trace.into_iter().map(|(g, c)| (g, c.min(p.burst()))).collect();
        let (_, log) = run_gcra(&p, &trace);
        for Step { now, before, cost, decision } in log {
            if let Some(retry) = decision.retry_after_ns {
                prop_assert!(retry > 0);
                prop_assert_eq!(gcra::check(before.as_ref(), &p, now + retry - 1, cost).decision.allowed, 0);
                prop_assert_eq!(gcra::check(before.as_ref(), &p, now + retry, cost).decision.allowed, 1);
            }
        }
    }

    #[test]
    fn gcra_peek_changes_nothing_and_answers_like_cost_one(p in policy_strategy(), trace in trace_strategy(30)) {
        let trace: Vec<_> = trace.into_iter().map(|(g, c)| (g, c.min(p.burst()))).collect();
        let (_, log) = run_gcra(&p, &trace);
        for Step { now, before, .. } in log {
            let peek = gcra::check(before.as_ref(), &p, now, 0);
            let one = gcra::check(before.as_ref(), &p, now, 1).decision;
            prop_assert_eq!(peek.next, None);
            prop_assert_eq!(peek.decision.allowed, one.allowed);
            prop_assert_eq!(peek.decision.retry_after_ns, one.retry_after_ns);
        }
    }

    /// A clock that steps backwards never admits extra: true time moves forward by `gap`, the
    /// clock the limiter reads is sometimes stepped back by `back`, and the admitted requests,
    /// placed at their true instants, still keep the promise.
    #[test]
    fn gcra_backwards_clock_admits_nothing_extra(
        p in policy_strategy(),
        steps in prop::collection::vec((0u64..1_000_000_000, prop_oneof![Just(0u64), 0u64..3_000_000_000], 0u64..=30), 1..120),
    ) {
        let (mut truth, mut behind, mut state, mut admitted) = (T0, 0u64, None, Vec::new());
        for (gap, back, cost) in steps {
            truth += gap;
            behind += back;
            let out = gcra::check(state.as_ref(), &p, truth - behind, cost.min(p.burst()));
            if let Some(next) = out.next {
                admitted.push((truth, cost.min(p.burst())));
                state = Some(next);
            }
        }
        prop_assert_eq!(worst_interval(&admitted, bucket_bound(&p)), None);
    }

    #[test]
    fn token_bucket_never_exceeds_burst_plus_rate(p in policy_strategy(), trace in trace_strategy(30)) {
        let trace: Vec<_> = trace.into_iter().map(|(g, c)| (g, c.min(p.burst()))).collect();
        let (admitted, _) = run(&trace, |s, now, cost| token_bucket::check(s, &p, now, cost));
        prop_assert_eq!(worst_interval(&admitted, bucket_bound(&p)), None);
    }

    /// The seed's "Try it" 1: GCRA and the token bucket with the same L, W, B give the same
    /// answer to every request, field for field.
    #[test]
    fn token_bucket_decides_exactly_like_gcra(p in policy_strategy(), trace in trace_strategy(30)) {
        let trace: Vec<_> = trace.into_iter().map(|(g, c)| (g, c.min(p.burst()))).collect();
        let (_, tb) = run(&trace, |s, now, cost| token_bucket::check(s, &p, now, cost));
        let (_, gc) = run_gcra(&p, &trace);
        for (a, b) in tb.iter().zip(&gc) {
            prop_assert_eq!(a.decision, b.decision);
        }
    }

    #[test]
    fn token_bucket_retry_after_is_exact(p in policy_strategy(), trace in trace_strategy(30)) {
        let trace: Vec<_> = trace.into_iter().map(|(g, c)| (g, c.min(p.burst()))).collect();
        let (_, log) = run(&trace, |s, now, cost| token_bucket::check(s, &p, now, cost));
        for Step { now, before, cost, decision } in log {
            if let Some(retry) = decision.retry_after_ns {
                prop_assert_eq!(token_bucket::check(before.as_ref(), &p, now + retry - 1, cost).decision.allowed, 0);
                prop_assert_eq!(token_bucket::check(before.as_ref(), &p, now + retry, cost).decision.allowed, 1);
            }
            let peek = token_bucket::check(before.as_ref(), &p, now, 0);
            prop_assert_eq!(peek.next, None);
        }
    }

    #[test]
    fn token_bucket_backwards_clock_admits_nothing_extra(
        p in policy_strategy(),
        steps in prop::collection::vec((0u64..1_000_000_000, prop_oneof![Just(0u64), 0u64..3_000_000_000], 0u64..=30), 1..120),
    ) {
        let (mut truth, mut behind, mut state, mut admitted) = (T0, 0u64, None, Vec::new());
        for (gap, back, cost) in steps {
            truth += gap;
            behind += back;
            let out = token_bucket::check(state.as_ref(), &p, truth - behind, cost.min(p.burst()));
            if let Some(next) = out.next {
                admitted.push((truth, cost.min(p.burst())));
                state = Some(next);
            }
        }
        prop_assert_eq!(worst_interval(&admitted, bucket_bound(&p)), None);
    }
}
