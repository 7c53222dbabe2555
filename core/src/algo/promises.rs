//! The promise each algorithm of the registry declares, and the property tests every one of
//! them keeps (held to its [`Promise`]): a new algorithm of the registry does not compile the
//! tests until it declares one, and is then tested like the others.

#![cfg_attr(not(test), allow(dead_code))]

use super::algorithm::Algorithm;
use super::decision::Outcome;
use super::inspect::inspection;
use super::policy::Policy;
use super::props::*;
use super::{concurrency, fixed_window, gcra, shape, sliding_counter, sliding_log, token_bucket};
use proptest::prelude::*;

/// An algorithm with the promise its property tests hold it to. Every algorithm of the registry
/// has one: [`for_each_algorithm`] does not compile for an algorithm without it.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is in the registry (`algo::registry!`) but declares no promise",
    note = "add `impl Promised for {Self}` in core/src/algo/promises.rs (docs/development.md, Adding an algorithm)"
)]
pub trait Promised: Algorithm {
    const PROMISE: Promise;
}

impl Promised for gcra::Gcra {
    const PROMISE: Promise = Promise::Bucket;
}

impl Promised for token_bucket::TokenBucket {
    const PROMISE: Promise = Promise::Bucket;
}

impl Promised for sliding_log::SlidingLog {
    const PROMISE: Promise = Promise::SlidingLog;
}

impl Promised for sliding_counter::SlidingCounter {
    const PROMISE: Promise = Promise::SlidingCounter;
}

impl Promised for fixed_window::FixedWindow {
    const PROMISE: Promise = Promise::FixedWindow;
}

/// The leaky bucket admits like GCRA with capacity queue + 1 (see `shape`'s tests).
impl Promised for shape::Shape {
    const PROMISE: Promise = Promise::Bucket;
}

/// Anonymous holders (a request of cost n through the trait) each hold a slot exactly TTL: a
/// sliding log of L = N, W = TTL (see `concurrency`).
impl Promised for concurrency::Concurrency {
    const PROMISE: Promise = Promise::SlidingLog;
}

/// Work a test does on each algorithm of the registry (see [`for_each_algorithm`]).
pub trait EachAlgorithm {
    fn run<A: Promised>(&mut self) -> Result<(), TestCaseError>;
}

/// A failure of `A`'s run, named after it.
fn named<A: Algorithm>(result: Result<(), TestCaseError>) -> Result<(), TestCaseError> {
    result.map_err(|e| match e {
        TestCaseError::Fail(why) => TestCaseError::fail(format!("{}: {why}", A::ID)),
        reject => reject,
    })
}

macro_rules! each_algorithm {
    ($($module:ident::$variant:ident, $word:literal, $event:literal, $kind:ident, $summary:literal;)*) => {
        /// Runs `work` on every algorithm of the registry (`algo::registry!`), in its order; a
        /// failure names the algorithm.
        pub fn for_each_algorithm(work: &mut impl EachAlgorithm) -> Result<(), TestCaseError> {
            $(named::<super::$module::$variant>(work.run::<super::$module::$variant>())?;)*
            Ok(())
        }
    };
}
crate::registry!(each_algorithm);

/// Of the two policies a test draws, the one `A` is tested under: any B for the algorithms
/// that take BURST, capacity L for the window algorithms.
pub fn policy_of<'a, A: Algorithm>(bucket: &'a Policy, window: &'a Policy) -> &'a Policy {
    if A::BURST {
        bucket
    } else {
        window
    }
}

/// The registry's stored tags, in its order.
pub fn registry_tags() -> Vec<u8> {
    super::listed::ALGORITHM_IDS
        .iter()
        .map(|&(tag, _)| tag)
        .collect()
}

/// Panics unless the stored tags `covered` (a test's list of algorithms) hold every algorithm
/// of the registry, naming the missing ones: a list that must cover every algorithm checks
/// itself with this.
pub fn assert_covers_registry(list: &str, covered: &[u8]) {
    let missing: Vec<&str> = super::listed::ALGORITHM_IDS
        .iter()
        .filter(|(tag, _)| !covered.contains(tag))
        .map(|&(_, id)| id)
        .collect();
    assert!(
        missing.is_empty(),
        "{list} lacks {missing:?}: every algorithm of the registry (algo::registry!) needs its \
         row (docs/development.md, Adding an algorithm)"
    );
}

/// `trace` with every cost capped at the capacity (what `check` requires).
fn within_capacity(p: &Policy, trace: &[(u64, u64)]) -> Vec<(u64, u64)> {
    trace
        .iter()
        .map(|&(g, c)| (g, c.min(p.capacity())))
        .collect()
}

/// Any trace keeps the promise, a denial's retry_after is exact and a peek stores nothing.
struct KeepsItsPromise<'a> {
    bucket: &'a Policy,
    window: &'a Policy,
    trace: &'a [(u64, u64)],
}

impl EachAlgorithm for KeepsItsPromise<'_> {
    fn run<A: Promised>(&mut self) -> Result<(), TestCaseError> {
        let p = policy_of::<A>(self.bucket, self.window);
        let trace = within_capacity(p, self.trace);
        let check = |s: Option<&A>, now, cost| A::check(s, p, now, cost);
        let (admitted, log) = run(&trace, check);
        prop_assert_eq!(worst_interval(&admitted, |d| A::PROMISE.bound(p, d)), None);
        answers_are_exact(&log, check)
    }
}

/// A clock that falls behind the truth admits nothing beyond the promise.
struct BackwardsClock<'a> {
    bucket: &'a Policy,
    window: &'a Policy,
    steps: &'a [(u64, u64, u64)],
}

impl EachAlgorithm for BackwardsClock<'_> {
    fn run<A: Promised>(&mut self) -> Result<(), TestCaseError> {
        let p = policy_of::<A>(self.bucket, self.window);
        let steps: Vec<_> = self
            .steps
            .iter()
            .map(|&(g, b, c)| (g, b, c.min(p.capacity())))
            .collect();
        let admitted = run_backwards(&steps, |s: Option<&A>, now, cost| A::check(s, p, now, cost));
        prop_assert_eq!(worst_interval(&admitted, |d| A::PROMISE.bound(p, d)), None);
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Every algorithm never admits more than its promise, its retry_after is exact, and a peek
    /// changes nothing and answers like cost 1.
    #[test]
    fn every_algorithm_keeps_its_promise_and_answers_exactly(
        p in policy_strategy(), w in window_policy_strategy(), trace in trace_strategy(30),
    ) {
        for_each_algorithm(&mut KeepsItsPromise { bucket: &p, window: &w, trace: &trace })?;
    }

    /// A clock that steps backwards never admits extra: true time moves forward by `gap`, the
    /// clock the limiter reads is sometimes stepped back by `back`, and the admitted requests,
    /// placed at their true instants, still keep the promise.
    #[test]
    fn a_backwards_clock_admits_nothing_extra_for_any_algorithm(
        p in policy_strategy(), w in window_policy_strategy(), steps in backwards_strategy(30),
    ) {
        for_each_algorithm(&mut BackwardsClock { bucket: &p, window: &w, steps: &steps })?;
    }
}

fn run_gcra(p: &Policy, trace: &[(u64, u64)]) -> (Admitted, Vec<Step<gcra::Gcra>>) {
    run(trace, |s, now, cost| gcra::check(s, p, now, cost))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// GCRA and the token bucket with the same L, W, B give the same
    /// answer to every request, field for field.
    #[test]
    fn token_bucket_decides_exactly_like_gcra(p in policy_strategy(), trace in trace_strategy(30)) {
        let trace: Vec<_> = trace.into_iter().map(|(g, c)| (g, c.min(p.capacity()))).collect();
        let (_, tb) = run(&trace, |s, now, cost| token_bucket::check(s, &p, now, cost));
        let (_, gc) = run_gcra(&p, &trace);
        for (a, b) in tb.iter().zip(&gc) {
            prop_assert_eq!(a.decision, b.decision);
        }
    }

}

/// Runs `steps` (true gap, how far the clock steps back, cost) against a limiter whose clock
/// falls behind the truth, and returns the admitted requests at their true instants.
fn run_backwards<S>(
    steps: &[(u64, u64, u64)],
    check: impl Fn(Option<&S>, u64, u64) -> Outcome<S>,
) -> Admitted {
    let (mut truth, mut behind, mut state, mut admitted) = (T0, 0u64, None, Vec::new());
    for &(gap, back, cost) in steps {
        truth += gap;
        behind += back;
        let out = check(state.as_ref(), truth - behind, cost);
        if let Some(next) = out.next {
            admitted.push((truth, cost));
            state = Some(next);
        }
    }
    admitted
}

/// Steps for `run_backwards`: gaps under 1 s, the clock stepped back up to 3 s about half the
/// time, costs up to `max_cost`.
fn backwards_strategy(max_cost: u64) -> impl Strategy<Value = Vec<(u64, u64, u64)>> {
    prop::collection::vec(
        (
            0u64..1_000_000_000,
            prop_oneof![Just(0u64), 0u64..3_000_000_000],
            0u64..=max_cost,
        ),
        1..120,
    )
}

/// A second policy for a switch: another L, and the same window or one that divides it (a
/// fixed window carries only its current window's count, which covers the new window only then).
fn nested_policy(p: &Policy, l: u64, divisor: u64) -> Policy {
    let w = p.window_ms();
    let w = if w.is_multiple_of(divisor) {
        w / divisor
    } else {
        w
    };
    Policy::new(l, w, l).unwrap()
}

/// Every window of `p2` that holds a request admitted after the switch (see `run_switch`) holds at
/// most its L in all, counting what was admitted before the switch.
fn new_windows_hold_at_most_l(
    p2: &Policy,
    admitted: &[(u64, u64, bool)],
) -> Result<(), TestCaseError> {
    let late: Vec<_> = admitted
        .iter()
        .filter(|a| a.2)
        .map(|a| p2.window_start(a.0))
        .collect();
    for start in late {
        let total: u64 = admitted
            .iter()
            .filter(|a| p2.window_start(a.0) == start)
            .map(|a| a.1)
            .sum();
        prop_assert!(total <= p2.limit(), "{} in the window at {}", total, start);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn fixed_window_at_most_l_per_window_and_2l_per_w(p in window_policy_strategy(), trace in trace_strategy(20)) {
        let trace = within_capacity(&p, &trace);
        let (admitted, log) = run(&trace, |s, now, cost| fixed_window::check(s, &p, now, cost));
        for (start, cost) in per_window(&p, &admitted) {
            prop_assert!(cost <= p.limit(), "{} in the window at {}", cost, start);
        }
        prop_assert_eq!(worst_interval(&admitted, two_windows_bound(&p)), None);
        answers_are_exact(&log, |s, now, cost| fixed_window::check(s, &p, now, cost))?;
    }

    /// After a policy change, a window of the new policy holds at most its L, counting what was
    /// admitted before the change.
    #[test]
    fn fixed_window_policy_change_carries_the_count(
        p1 in window_policy_strategy(), l2 in 1u64..=20, divisor in 1u64..=4,
        first in trace_strategy(20), second in trace_strategy(20),
    ) {
        let p2 = nested_policy(&p1, l2, divisor);
        let admitted = run_switch(&p1, &p2, &first, &second, fixed_window::check, fixed_window::rescale);
        new_windows_hold_at_most_l(&p2, &admitted)?;
    }

    #[test]
    fn sliding_log_never_exceeds_l_per_w(p in window_policy_strategy(), trace in trace_strategy(20)) {
        let trace = within_capacity(&p, &trace);
        let (admitted, log) = run(&trace, |s, now, cost| sliding_log::check(s, &p, now, cost));
        prop_assert_eq!(worst_interval(&admitted, log_bound(&p)), None);
        answers_are_exact(&log, |s, now, cost| sliding_log::check(s, &p, now, cost))?;
    }

    /// After a policy change, any interval shorter than the new W that holds a request admitted
    /// under the new policy holds at most the new L, counting what was admitted before. Not when
    /// the window grows: the log has already forgotten what left the shorter window.
    #[test]
    fn sliding_log_policy_change_carries_the_entries(
        p1 in window_policy_strategy(), p2 in window_policy_strategy(),
        first in trace_strategy(20), second in trace_strategy(20),
    ) {
        prop_assume!(p2.window_ms() <= p1.window_ms());
        let admitted = run_switch(&p1, &p2, &first, &second, sliding_log::check, sliding_log::rescale);
        for (i, &(start, ..)) in admitted.iter().enumerate() {
            let (mut total, mut late) = (0, false);
            for &(at, cost, phase2) in &admitted[i..] {
                if at - start >= p2.window_ns() {
                    break;
                }
                total += cost;
                late |= phase2;
                prop_assert!(!late || total <= p2.limit(), "{} in [{}, {}]", total, start, at);
            }
        }
    }

    /// The overshoot bound (see `sliding_counter`): an interval shorter than W starting δ into an
    /// aligned window whose count is p holds fewer than L + 1 + p·δ/W; so at most 2L.
    #[test]
    fn sliding_counter_overshoot_is_bounded(p in window_policy_strategy(), trace in trace_strategy(20)) {
        let trace = within_capacity(&p, &trace);
        let (admitted, log) = run(&trace, |s, now, cost| sliding_counter::check(s, &p, now, cost));
        let counts = per_window(&p, &admitted);
        let (w, l) = (u128::from(p.window_ns()), u128::from(p.limit()));
        for (i, &(start, _)) in admitted.iter().enumerate() {
            let window = p.window_start(start);
            let (prev, delta) = (u128::from(counts[&window]), u128::from(start - window));
            let mut total = 0u128;
            for &(at, cost) in &admitted[i..] {
                if at - start >= p.window_ns() {
                    break;
                }
                total += u128::from(cost);
                prop_assert!(total * w < (l + 1) * w + prev * delta, "{} in [{}, {}]", total, start, at);
            }
        }
        prop_assert_eq!(worst_interval(&admitted, two_windows_bound(&p)), None);
        answers_are_exact(&log, |s, now, cost| sliding_counter::check(s, &p, now, cost))?;
    }

    #[test]
    fn sliding_counter_policy_change_carries_the_counts(
        p1 in window_policy_strategy(), l2 in 1u64..=20, divisor in 1u64..=4,
        first in trace_strategy(20), second in trace_strategy(20),
    ) {
        let p2 = nested_policy(&p1, l2, divisor);
        let admitted = run_switch(&p1, &p2, &first, &second, sliding_counter::check, sliding_counter::rescale);
        new_windows_hold_at_most_l(&p2, &admitted)?;
    }
}

// ---- RL.INSPECT agrees with a peek, for every algorithm -----------------------------------

/// Every state a trace leaves, inspected now, later and after the clock stepped back: the
/// policy comes first, the last three fields are exactly the peek's answer, nothing panics.
fn inspect_agrees<A: Algorithm>(p: &Policy, trace: &[(u64, u64)]) -> Result<(), TestCaseError> {
    let trace: Vec<_> = trace
        .iter()
        .map(|&(g, c)| (g, c.min(p.capacity())))
        .collect();
    let (_, steps) = run(&trace, |s: Option<&A>, now, cost| A::check(s, p, now, cost));
    for step in steps {
        let Some(state) = step.before else { continue };
        for at in [
            step.now,
            step.now + 3 * p.window_ns(),
            step.now - 1_000_000_000,
        ] {
            let fields = state.inspect(p, at);
            let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
            prop_assert_eq!(
                &fields[..3],
                &[
                    ("limit", int(p.limit())),
                    ("window_ms", int(p.window_ms())),
                    ("burst", int(p.capacity()))
                ]
            );
            let peek = A::check(Some(&state), p, at, 0).decision;
            let tail = inspection(p, Vec::new(), &peek);
            prop_assert_eq!(&fields[fields.len() - 3..], &tail[3..]);
        }
    }
    Ok(())
}

/// [`inspect_agrees`] for each algorithm, under the policy of its kind.
struct InspectAgrees<'a> {
    bucket: &'a Policy,
    window: &'a Policy,
    trace: &'a [(u64, u64)],
}

impl EachAlgorithm for InspectAgrees<'_> {
    fn run<A: Promised>(&mut self) -> Result<(), TestCaseError> {
        inspect_agrees::<A>(policy_of::<A>(self.bucket, self.window), self.trace)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// For every algorithm of the registry.
    #[test]
    fn inspect_agrees_with_the_peek(
        p in policy_strategy(),
        w in window_policy_strategy(),
        trace in trace_strategy(20),
    ) {
        for_each_algorithm(&mut InspectAgrees { bucket: &p, window: &w, trace: &trace })?;
    }
}
