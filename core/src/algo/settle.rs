//! Settling a request whose cost is known only once it was served (model tokens: the response's
//! length): a gateway reserves an estimate, then charges the overage or refunds the unused part.
//! What `RL.CHARGE`, `RL.REFUND` and `RL.ALL … SETTLE` do to one state, measured by
//! [`Algorithm::counted`] so every algorithm reports what moved the same way.
//!
//! A charge spends whatever the state holds (`Algorithm::charge`): the key goes into debt that the
//! next requests pay — GCRA's arrival time ahead of now by more than the capacity, a token bucket
//! below empty, a window's count above L, a sliding log's entries beyond L. The debt is bounded
//! where a stored state must stop, and a charge beyond the bound counts only what fits (its
//! `moved` is then less than asked):
//! - GCRA, token bucket, leaky bucket: a debt that lasts until the last instant a clock can read
//!   (a u64 of nanoseconds, the year 2554);
//! - fixed window and sliding counter: a window's count of 10^12 (`MAX_LIMIT`);
//! - sliding log: a window's total of 10^6 (`MAX_LOG_LIMIT`).
//!
//! The bucket algorithms carry a debt until the refill repays it; the window algorithms count a
//! charge in the window it lands in, and forget it as they forget any admitted request (the
//! fixed window at its boundary, the sliding log W after, the sliding counter weighted through
//! the next window).

use super::algorithm::Algorithm;
use super::policy::Policy;

/// A state after a charge or a refund, and how many tokens it moved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settled<A> {
    pub state: A,
    /// Tokens counted (a charge: `n` unless the debt saturated) or taken off (a refund: at most
    /// `n`, less when the limiter reached full).
    pub moved: u64,
}

/// Whole tokens in `units`, rounded down, saturating.
fn whole(units: u128, policy: &Policy) -> u64 {
    u64::try_from(units / policy.units_per_token()).unwrap_or(u64::MAX)
}

/// Charges `n` at `now_ns` whatever the state holds (see the module comment).
pub fn charge<A: Algorithm>(state: &A, policy: &Policy, now_ns: u64, n: u64) -> Settled<A> {
    let before = state.counted(policy, now_ns);
    let next = state.charge(policy, now_ns, n);
    let after = next.counted(policy, now_ns);
    Settled {
        moved: whole(after.saturating_sub(before), policy).min(n),
        state: next,
    }
}

/// Gives back `n` at `now_ns` (`Algorithm::refund`): a debt shrinks first, and a limiter never
/// rises above full.
pub fn refund<A: Algorithm>(state: &A, policy: &Policy, now_ns: u64, n: u64) -> Settled<A> {
    let before = state.counted(policy, now_ns);
    let next = state.refund(policy, now_ns, n);
    let after = next.counted(policy, now_ns);
    Settled {
        moved: whole(before.saturating_sub(after), policy).min(n),
        state: next,
    }
}

/// Settles by `by` tokens: a charge when positive, a refund when negative, nothing at 0 (the
/// estimate was exact).
pub fn settle<A: Algorithm>(state: &A, policy: &Policy, now_ns: u64, by: i64) -> Settled<A> {
    match by {
        0 => Settled {
            state: state.clone(),
            moved: 0,
        },
        1.. => charge(state, policy, now_ns, by.unsigned_abs()),
        _ => refund(state, policy, now_ns, by.unsigned_abs()),
    }
}

/// The state of a limiter that has spent nothing at `now_ns`, for a key that does not exist yet
/// (a response that finished after its key expired): a cost-1 request's state given back.
pub fn fresh<A: Algorithm>(policy: &Policy, now_ns: u64) -> Option<A> {
    let spent = A::check(None, policy, now_ns, 1).next?;
    Some(spent.refund(policy, now_ns, 1))
}

#[cfg(test)]
mod tests {
    use super::super::bytes::Reader;
    use super::super::policy::MAX_LIMIT;
    use super::super::promises::{for_each_algorithm, policy_of, EachAlgorithm, Promised};
    use super::super::props::{
        answers_are_exact, bucket_bound, policy_strategy, run, trace_strategy,
        window_policy_strategy, Promise, Step, T0,
    };
    use super::*;
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;

    /// Charges into debt and the next request waits exactly until it is repaid; a refund of the
    /// same amount undoes it.
    #[test]
    fn gcra_debt_is_paid_by_the_refill() {
        type A = super::super::gcra::Gcra;
        let p = Policy::new(10, 1000, 10).unwrap();
        let s: A = fresh(&p, T0).unwrap();
        let owed = charge(&s, &p, T0, 25);
        assert_eq!(owed.moved, 25);
        let d = A::check(Some(&owed.state), &p, T0, 1).decision;
        // 25 spent of 10: 16 tokens must come back before one passes, 100 ms each.
        assert_eq!((d.allowed, d.remaining), (0, 0));
        assert_eq!(d.retry_after_ns, Some(1600 * MS));
        assert_eq!(d.reset_after_ns, 2500 * MS);
        let back = refund(&owed.state, &p, T0, 25);
        assert_eq!(back.moved, 25);
        assert_eq!(
            A::check(Some(&back.state), &p, T0, 0).decision.remaining,
            10
        );
    }

    /// A charge beyond the bound counts only what fits, and the state stays one a loader accepts.
    #[test]
    fn a_charge_beyond_the_bound_saturates() {
        let p = Policy::new(1, 1_000_000_000, 1).unwrap();
        let s: super::super::gcra::Gcra = fresh(&p, T0).unwrap();
        let first = charge(&s, &p, T0, MAX_LIMIT);
        assert!(first.moved < MAX_LIMIT);
        let again = charge(&first.state, &p, T0, 1);
        assert_eq!(again.moved, 0);
        assert_eq!(again.state, first.state);
    }

    /// One operation of a settle trace: a request of a cost (`check`), or a charge of an overage.
    #[derive(Clone, Copy, Debug)]
    enum Op {
        Request(u64),
        Charge(u64),
    }

    fn ops_strategy() -> impl Strategy<Value = Vec<(u64, Op)>> {
        let op = prop_oneof![
            4 => (0u64..=30).prop_map(Op::Request),
            2 => prop_oneof![1u64..=40, Just(200u64)].prop_map(Op::Charge),
        ];
        prop::collection::vec(
            (
                prop_oneof![
                    Just(0u64),
                    0u64..1_000_000,
                    0u64..100_000_000,
                    0u64..2_000_000_000
                ],
                op,
            ),
            1..100,
        )
    }

    /// What a settle trace did: (at, cost, admitted request?) for everything spent, and every
    /// request's step for `answers_are_exact`.
    type Spent = Vec<(u64, u64, bool)>;

    fn run_ops<A: Algorithm>(p: &Policy, ops: &[(u64, Op)]) -> (Spent, Vec<Step<A>>) {
        let (mut now, mut state, mut spent, mut steps) = (T0, None::<A>, Vec::new(), Vec::new());
        for &(gap, op) in ops {
            now += gap;
            match op {
                Op::Request(cost) => {
                    let cost = cost.min(p.capacity());
                    let out = A::check(state.as_ref(), p, now, cost);
                    steps.push(Step {
                        now,
                        before: state.clone(),
                        cost,
                        decision: out.decision,
                    });
                    if let Some(next) = out.next {
                        spent.push((now, cost, true));
                        state = Some(next);
                    }
                }
                Op::Charge(n) => {
                    let held = match state.take() {
                        Some(s) => s,
                        None => fresh::<A>(p, now).unwrap(),
                    };
                    let charged = charge(&held, p, now, n);
                    assert!(charged.moved <= n, "charged more than asked");
                    spent.push((now, charged.moved, false));
                    state = Some(charged.state);
                }
            }
        }
        (spent, steps)
    }

    /// The promise restated with charges: over any interval, what was admitted and charged is at
    /// most the algorithm's own bound plus the charges that came after the interval's last
    /// admitted request (a charge before it was already paid for: the request was admitted on
    /// the state it left). For the bucket algorithms over any interval; for the sliding log over
    /// intervals shorter than W; for the fixed window per aligned window.
    fn keeps_the_restated_promise<A: Promised>(
        p: &Policy,
        spent: &[(u64, u64, bool)],
    ) -> Result<(), TestCaseError> {
        let bound = |d: u64| -> Option<u128> {
            match A::PROMISE {
                Promise::Bucket => Some(bucket_bound(p)(d)),
                Promise::SlidingLog => (d < p.window_ns()).then_some(u128::from(p.limit())),
                Promise::FixedWindow | Promise::SlidingCounter => None,
            }
        };
        for (i, &(start, ..)) in spent.iter().enumerate() {
            for j in i..spent.len() {
                let (end, ..) = spent[j];
                let inside = &spent[i..=j];
                let allowed = match A::PROMISE {
                    Promise::FixedWindow if p.window_start(start) == p.window_start(end) => {
                        Some(u128::from(p.limit()))
                    }
                    _ => bound(end - start),
                };
                let Some(allowed) = allowed else { continue };
                let last_admit = inside.iter().rposition(|s| s.2);
                let after: u128 = inside
                    .iter()
                    .skip(last_admit.map_or(0, |k| k + 1))
                    .map(|s| u128::from(s.1))
                    .sum();
                let total: u128 = inside.iter().map(|s| u128::from(s.1)).sum();
                prop_assert!(
                    total <= allowed + after,
                    "{} in [{}, {}]: allowed {} + {} charged after the last admission",
                    total,
                    start,
                    end,
                    allowed,
                    after
                );
            }
        }
        Ok(())
    }

    struct Restated<'a> {
        bucket: &'a Policy,
        window: &'a Policy,
        ops: &'a [(u64, Op)],
    }

    impl EachAlgorithm for Restated<'_> {
        fn run<A: Promised>(&mut self) -> Result<(), TestCaseError> {
            let p = policy_of::<A>(self.bucket, self.window);
            let (spent, steps) = run_ops::<A>(p, self.ops);
            keeps_the_restated_promise::<A>(p, &spent)?;
            // A debt's retry_after is exact too: denied 1 ns before it, admitted at it.
            answers_are_exact(&steps, |s: Option<&A>, now, cost| A::check(s, p, now, cost))
        }
    }

    /// After any trace: charging n and refunding n gives back the counted cost exactly (and for
    /// the fixed-size states the same answers); settling a reserved estimate e at an actual a
    /// counts a, as a charge of a would.
    struct Symmetric<'a> {
        bucket: &'a Policy,
        window: &'a Policy,
        trace: &'a [(u64, u64)],
        n: u64,
        estimate: u64,
        actual: u64,
    }

    impl EachAlgorithm for Symmetric<'_> {
        fn run<A: Promised>(&mut self) -> Result<(), TestCaseError> {
            let p = policy_of::<A>(self.bucket, self.window);
            let trace: Vec<_> = self
                .trace
                .iter()
                .map(|&(g, c)| (g, c.min(p.capacity())))
                .collect();
            let (_, steps) = run(&trace, |s: Option<&A>, now, cost| A::check(s, p, now, cost));
            for step in steps {
                let now = step.now;
                let s = match step.before {
                    Some(s) => s,
                    None => fresh::<A>(p, now).unwrap(),
                };
                let was = s.counted(p, now);
                let charged = charge(&s, p, now, self.n);
                prop_assert_eq!(charged.moved, self.n);
                let back = refund(&charged.state, p, now, self.n);
                prop_assert_eq!(back.moved, self.n);
                prop_assert_eq!(back.state.counted(p, now), was);
                if A::entries(p) == 0 {
                    prop_assert_eq!(
                        A::check(Some(&back.state), p, now, 0).decision,
                        A::check(Some(&s), p, now, 0).decision
                    );
                }
                // Reserve e (when admitted), then settle by a − e: a is what is counted.
                let e = self.estimate.min(p.capacity());
                let Some(reserved) = A::check(Some(&s), p, now, e).next else {
                    continue;
                };
                let by = i64::try_from(self.actual).unwrap() - i64::try_from(e).unwrap();
                let settled = settle(&reserved, p, now, by);
                prop_assert_eq!(settled.moved, by.unsigned_abs());
                let direct = charge(&s, p, now, self.actual);
                let unit = p.units_per_token();
                prop_assert_eq!(
                    settled.state.counted(p, now),
                    was + u128::from(self.actual) * unit
                );
                prop_assert_eq!(
                    direct.state.counted(p, now),
                    was + u128::from(self.actual) * unit
                );
            }
            Ok(())
        }
    }

    /// Charges up to 10^12 at once, again and again: each counts at most what it asked, the
    /// state stays one its loader accepts, and once a charge saturates the key denies.
    struct Bounded<'a> {
        bucket: &'a Policy,
        window: &'a Policy,
        charges: &'a [(u64, u64)],
    }

    impl EachAlgorithm for Bounded<'_> {
        fn run<A: Promised>(&mut self) -> Result<(), TestCaseError> {
            let p = policy_of::<A>(self.bucket, self.window);
            let mut now = T0;
            let mut state = fresh::<A>(p, now).unwrap();
            for &(gap, n) in self.charges {
                now += gap;
                let charged = charge(&state, p, now, n);
                prop_assert!(charged.moved <= n);
                let mut bytes = Vec::new();
                charged.state.encode(&mut bytes);
                let decoded = A::decode(&mut Reader(&bytes), p);
                prop_assert_eq!(decoded.as_ref(), Ok(&charged.state));
                if charged.moved < n {
                    prop_assert_eq!(
                        A::check(Some(&charged.state), p, now, 1).decision.allowed,
                        0
                    );
                }
                state = charged.state;
            }
            Ok(())
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn charges_keep_the_restated_promise(
            p in policy_strategy(), w in window_policy_strategy(), ops in ops_strategy(),
        ) {
            for_each_algorithm(&mut Restated { bucket: &p, window: &w, ops: &ops })?;
        }

        #[test]
        fn settle_is_the_cost_of_the_difference(
            p in policy_strategy(), w in window_policy_strategy(), trace in trace_strategy(30),
            n in 1u64..=50, estimate in 1u64..=30, actual in 0u64..=80,
        ) {
            for_each_algorithm(&mut Symmetric {
                bucket: &p, window: &w, trace: &trace, n, estimate, actual,
            })?;
        }

        #[test]
        fn the_debt_is_bounded(
            p in policy_strategy(), w in window_policy_strategy(),
            charges in prop::collection::vec(
                (0u64..2_000_000_000, prop_oneof![1u64..=100, Just(MAX_LIMIT), 1u64..=MAX_LIMIT]),
                1..20,
            ),
        ) {
            for_each_algorithm(&mut Bounded { bucket: &p, window: &w, charges: &charges })?;
        }
    }
}
