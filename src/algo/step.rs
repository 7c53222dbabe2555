//! One request against a stored limiter, whatever the algorithm: which state the decision starts
//! from and what must be stored afterwards.
//!
//! The rule that makes a policy change hold: a request that brings a new policy (L, W or B
//! changed) is decided on the stored state carried over to that policy, and the carried state is
//! stored with the new policy **whether or not the request is admitted**. Were it stored only on
//! admission, a tightening that is denied would be forgotten: the key would keep the old policy's
//! shorter expiry and, once it expired, admit a fresh capacity under the tight policy.
//!
//! A peek (amount 0) stores nothing, even under a new policy: it answers as the new policy would
//! and leaves the key as it was.

use super::{Algorithm, Decision, Outcome, Policy};

/// What a request does to a stored limiter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step<S> {
    pub decision: Decision,
    /// The state to store with the request's policy; None: store nothing.
    pub store: Option<S>,
}

/// Decides one request under `policy` at `now_ns`. `stored` is the key's policy and state, if
/// any; `decide` is the algorithm's decision (its `check`, or a lease) applied to the state the
/// request starts from. `peek` is true for an amount of 0.
pub fn step<S: Algorithm>(
    stored: Option<(&Policy, &S)>,
    policy: &Policy,
    now_ns: u64,
    peek: bool,
    decide: impl FnOnce(Option<&S>) -> Outcome<S>,
) -> Step<S> {
    match stored {
        None => {
            let Outcome { decision, next } = decide(None);
            Step {
                decision,
                store: next,
            }
        }
        Some((held, state)) if held == policy => {
            let Outcome { decision, next } = decide(Some(state));
            Step {
                decision,
                store: next,
            }
        }
        Some((held, state)) => {
            let carried = state.rescale(held, policy, now_ns);
            let Outcome { decision, next } = decide(Some(&carried));
            Step {
                decision,
                store: if peek {
                    None
                } else {
                    Some(next.unwrap_or(carried))
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::props::{policy_strategy, window_policy_strategy};
    use super::super::{
        fixed_window::FixedWindow, gcra::Gcra, ms_ceil, sliding_counter::SlidingCounter,
        sliding_log::SlidingLog, token_bucket::TokenBucket,
    };
    use super::*;
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;
    const T0: u64 = 1_800_000_000_000 * MS;

    /// A key as Redis holds it: the stored policy and state, and the absolute expiry (ms) the
    /// command layer gives it: the reply's reset_after, rounded up. No minimum TTL here, so the
    /// model is as strict as it can be.
    struct Key<S> {
        stored: Option<(Policy, S)>,
        expire_at_ms: u64,
    }

    impl<S: Algorithm> Key<S> {
        /// One command. First Redis expires the key if its TTL has passed (its millisecond
        /// clock past the expiry: `now > when`, now in whole ms); the key must then be
        /// indistinguishable from a fresh one under the policy it holds, else expiry would have
        /// forgotten something the policy still counts.
        fn call(&mut self, p: &Policy, now_ns: u64, cost: u64) -> Result<Decision, TestCaseError> {
            if let Some((held, state)) = &self.stored {
                if now_ns / MS > self.expire_at_ms {
                    let stored = S::check(Some(state), held, now_ns, 0).decision;
                    let fresh = S::check(None, held, now_ns, 0).decision;
                    prop_assert_eq!(
                        stored,
                        fresh,
                        "expired while it still counted, at {}",
                        now_ns
                    );
                    self.stored = None;
                }
            }
            let stored = self.stored.as_ref().map(|(p, s)| (p, s));
            let out = step(stored, p, now_ns, cost == 0, |s| {
                S::check(s, p, now_ns, cost)
            });
            if let Some(next) = out.store {
                self.stored = Some((*p, next));
                self.expire_at_ms = ms_ceil(now_ns) + ms_ceil(out.decision.reset_after_ns);
            }
            if cost > 0 && self.stored.is_some() {
                prop_assert!(
                    u128::from(self.expire_at_ms) * u128::from(MS)
                        >= u128::from(now_ns) + u128::from(out.decision.reset_after_ns),
                    "the key expires before its reset_after {} ns at {}",
                    out.decision.reset_after_ns,
                    now_ns
                );
            }
            Ok(out.decision)
        }
    }

    /// Calls switching between two policies at random: (gap ns, cost, which policy).
    fn switching_trace() -> impl Strategy<Value = Vec<(u64, u64, bool)>> {
        prop::collection::vec(
            (
                prop_oneof![Just(0u64), 0..5 * MS, 0..3_000 * MS],
                0u64..4,
                any::<bool>(),
            ),
            1..60,
        )
    }

    /// Runs `trace` on a key that Redis expires by the TTL the command layer gives it: the key
    /// never expires while its state still counts under the policy it holds, denials and policy
    /// changes included, and its TTL is never shorter than a reply's reset_after.
    fn expiry_forgets_nothing<S: Algorithm>(
        p1: &Policy,
        p2: &Policy,
        trace: &[(u64, u64, bool)],
    ) -> Result<(), TestCaseError> {
        let mut key = Key::<S> {
            stored: None,
            expire_at_ms: 0,
        };
        let mut now = T0;
        for &(gap, cost, second) in trace {
            now += gap;
            let p = if second { p2 } else { p1 };
            key.call(p, now, cost.min(p.capacity()))?;
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn policy_changes_survive_denials_gcra(p1 in policy_strategy(), p2 in policy_strategy(), t in switching_trace()) {
            expiry_forgets_nothing::<Gcra>(&p1, &p2, &t)?;
        }

        #[test]
        fn policy_changes_survive_denials_token_bucket(p1 in policy_strategy(), p2 in policy_strategy(), t in switching_trace()) {
            expiry_forgets_nothing::<TokenBucket>(&p1, &p2, &t)?;
        }

        #[test]
        fn policy_changes_survive_denials_sliding_log(p1 in window_policy_strategy(), p2 in window_policy_strategy(), t in switching_trace()) {
            expiry_forgets_nothing::<SlidingLog>(&p1, &p2, &t)?;
        }

        #[test]
        fn policy_changes_survive_denials_sliding_counter(p1 in window_policy_strategy(), p2 in window_policy_strategy(), t in switching_trace()) {
            expiry_forgets_nothing::<SlidingCounter>(&p1, &p2, &t)?;
        }

        #[test]
        fn policy_changes_survive_denials_shape(p1 in policy_strategy(), p2 in policy_strategy(), t in switching_trace()) {
            expiry_forgets_nothing::<super::super::shape::Shape>(&p1, &p2, &t)?;
        }

        #[test]
        fn policy_changes_survive_denials_fixed_window(p1 in window_policy_strategy(), p2 in window_policy_strategy(), t in switching_trace()) {
            expiry_forgets_nothing::<FixedWindow>(&p1, &p2, &t)?;
        }
    }

    /// A rollout: two gateway configurations call one key with the same W and different L, in
    /// any order. Runs `trace` and returns every admitted request (instant, cost, its policy's L).
    fn rollout<S: Algorithm>(
        w_ms: u64,
        l1: u64,
        l2: u64,
        trace: &[(u64, u64, bool)],
    ) -> Result<Vec<(u64, u64, u64)>, TestCaseError> {
        let (p1, p2) = (
            Policy::new(l1, w_ms, l1).unwrap(),
            Policy::new(l2, w_ms, l2).unwrap(),
        );
        let mut key = Key::<S> {
            stored: None,
            expire_at_ms: 0,
        };
        let (mut now, mut admitted) = (T0, Vec::new());
        for &(gap, cost, second) in trace {
            now += gap;
            let p = if second { &p2 } else { &p1 };
            let cost = cost.min(p.limit());
            if key.call(p, now, cost)?.allowed == 1 && cost > 0 {
                admitted.push((now, cost, p.limit()));
            }
        }
        Ok(admitted)
    }

    /// What the `i`-th admission and those before it admitted in `(from, to]`.
    fn admitted_in(admitted: &[(u64, u64, u64)], i: usize, from: u64, to: u64) -> u64 {
        admitted
            .iter()
            .take(i + 1)
            .filter(|&&(at, _, _)| at > from && at <= to)
            .map(|&(_, cost, _)| cost)
            .sum()
    }

    fn rollout_strategy() -> impl Strategy<Value = (u64, u64, u64, Vec<(u64, u64, bool)>)> {
        (
            prop_oneof![Just(10u64), Just(1000u64), Just(60_000u64)],
            1u64..=20,
            1u64..=20,
            switching_trace(),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// A request admitted under L finds at most L (itself included) in the W before it,
        /// whichever policy admitted the others: lowering L never forgets what was spent, so
        /// alternating calls cannot refill the looser policy.
        #[test]
        fn a_rollout_never_beats_the_policy_in_force_sliding_log((w, l1, l2, t) in rollout_strategy()) {
            let admitted = rollout::<SlidingLog>(w, l1, l2, &t)?;
            for (i, &(at, _, limit)) in admitted.iter().enumerate() {
                let held = admitted_in(&admitted, i, at.saturating_sub(w * MS), at);
                prop_assert!(held <= limit, "{} in the W before {} under L = {}", held, at, limit);
            }
        }

        /// The fixed window's form of it: at most L in the aligned window of each admission.
        #[test]
        fn a_rollout_never_beats_the_policy_in_force_fixed_window((w, l1, l2, t) in rollout_strategy()) {
            let admitted = rollout::<FixedWindow>(w, l1, l2, &t)?;
            for (i, &(at, _, limit)) in admitted.iter().enumerate() {
                let start = at - at % (w * MS);
                let held = admitted_in(&admitted, i, start.saturating_sub(1), at);
                prop_assert!(held <= limit, "{} in the window of {} under L = {}", held, at, limit);
            }
        }

        /// The sliding counter's form of it: its own bound, L plus what the previous window
        /// admitted (at most the larger L), in the W before each admission.
        #[test]
        fn a_rollout_never_beats_the_policy_in_force_sliding_counter((w, l1, l2, t) in rollout_strategy()) {
            let admitted = rollout::<SlidingCounter>(w, l1, l2, &t)?;
            for (i, &(at, _, limit)) in admitted.iter().enumerate() {
                let held = admitted_in(&admitted, i, at.saturating_sub(w * MS), at);
                let bound = limit + l1.max(l2);
                prop_assert!(held <= bound, "{} in the W before {} under L = {}", held, at, limit);
            }
        }
    }

    /// The trace that found it: 100 spent under L = 100, then calls alternating between L = 10
    /// and L = 100 in the same minute. Clamping the count to 10 on each tightening let every
    /// call under 100 through.
    #[test]
    fn alternating_limits_admit_nothing_more() {
        let trace: Vec<(u64, u64, bool)> = std::iter::once((0, 100, false))
            .chain((0..40).map(|i| (MS, 1, i % 2 == 0)))
            .collect();
        let admitted = rollout::<FixedWindow>(60_000, 100, 10, &trace).unwrap();
        assert_eq!(admitted.len(), 1);
        let admitted = rollout::<SlidingLog>(60_000, 100, 10, &trace).unwrap();
        assert_eq!(admitted.len(), 1);
        let admitted = rollout::<SlidingCounter>(60_000, 100, 10, &trace).unwrap();
        assert_eq!(admitted.len(), 1);
    }

    /// The trace: a sliding log spent at 10 per second, tightened to 10 per minute and
    /// denied, then tried again 2 s later. The old rule stored nothing on the denial and the key
    /// expired after 1 s: 10 more were admitted.
    #[test]
    fn a_denied_tightening_holds() {
        let loose = Policy::new(10, 1_000, 10).unwrap();
        let tight = Policy::new(10, 60_000, 10).unwrap();
        let mut key = Key::<SlidingLog> {
            stored: None,
            expire_at_ms: 0,
        };
        assert_eq!(key.call(&loose, T0, 10).unwrap().allowed, 1);
        let denied = key.call(&tight, T0, 1).unwrap();
        assert_eq!(
            (denied.allowed, ms_ceil(denied.reset_after_ns)),
            (0, 60_000)
        );
        assert_eq!(key.expire_at_ms, ms_ceil(T0) + 60_000);
        let later = T0 + 2_000 * MS;
        let admitted = (0..10).filter(|_| key.call(&tight, later, 1).unwrap().allowed == 1);
        assert_eq!(admitted.count(), 0);
    }
}
