//! Leasing: a gateway takes up to `want` whole tokens from the shared token bucket in one call
//! and spends them locally. Granted tokens leave the bucket at once, so a fleet of gateways can
//! never spend more than the bucket hands out; the store is called once per batch instead of once
//! per request.
//!
//! A lease is the token bucket's own decision with the cost chosen by the bucket: `min(want,
//! whole tokens available)`. It is computed with [`token_bucket::check`], so a lease of n leaves
//! exactly the bucket that n single requests at the same instant would leave.

use super::decision::Outcome;
use super::policy::Policy;
use super::token_bucket::{self, TokenBucket};

/// Grants `min(want, available)` tokens at `now_ns` when at least one whole token is available;
/// else grants 0 and answers `retry_after` = the time until one token is. `decision.allowed` is
/// the number granted; `remaining` and `reset_after` describe the bucket after the grant.
/// `want` 0 grants nothing and changes nothing (the command layer never sends it).
pub fn lease(
    state: Option<&TokenBucket>,
    policy: &Policy,
    now_ns: u64,
    want: u64,
) -> Outcome<TokenBucket> {
    if want == 0 {
        let mut peek = token_bucket::check(state, policy, now_ns, 0);
        peek.decision.allowed = 0;
        return peek;
    }
    let balance = state.map_or(u128::MAX, |s| {
        u128::try_from(s.balance(policy, now_ns)).unwrap_or(0)
    });
    let available = balance.min(token_bucket::capacity(policy)) / policy.units_per_token();
    // available <= B <= 10^12 always fits; were it not to, granting 0 only denies.
    let granted = u64::try_from(available.min(u128::from(want))).unwrap_or(0);
    // Cost `granted` (<= available <= B) is admitted; cost 1 on a bucket without a whole token
    // is denied with the exact retry time.
    let mut outcome = token_bucket::check(state, policy, now_ns, granted.max(1));
    outcome.decision.allowed = granted;
    outcome
}

#[cfg(test)]
mod tests {
    use super::super::decision::Decision;
    use super::super::props::{bucket_bound, policy_strategy, run, worst_interval, Step};
    use super::*;
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;
    const T0: u64 = 1_800_000_000_000 * MS;

    fn policy(l: u64, w: u64, b: u64) -> Policy {
        Policy::new(l, w, b).unwrap()
    }

    #[test]
    fn table_of_cases() {
        let p = policy(10, 1000, 10);
        // A fresh bucket grants what is asked, up to its capacity.
        let first = lease(None, &p, T0, 4);
        assert_eq!(
            first.decision,
            Decision {
                allowed: 4,
                capacity: 10,
                remaining: 6,
                retry_after_ns: None,
                reset_after_ns: 400 * MS
            }
        );
        let s = first.next.unwrap();
        // A partial grant: 6 left, 20 wanted.
        let partial = lease(Some(&s), &p, T0, 20);
        assert_eq!(
            (partial.decision.allowed, partial.decision.remaining),
            (6, 0)
        );
        let empty = partial.next.unwrap();
        // Empty: nothing granted, nothing stored, retry when one token is back.
        let denied = lease(Some(&empty), &p, T0 + 30 * MS, 5);
        assert_eq!(
            denied.decision,
            Decision {
                allowed: 0,
                capacity: 10,
                remaining: 0,
                retry_after_ns: Some(70 * MS),
                reset_after_ns: 970 * MS
            }
        );
        assert_eq!(denied.next, None);
        // 250 ms later two whole tokens (and half of a third) are there: two are granted.
        let later = lease(Some(&empty), &p, T0 + 250 * MS, 5);
        assert_eq!((later.decision.allowed, later.decision.remaining), (2, 0));
        assert_eq!(later.decision.reset_after_ns, 950 * MS);
        // WANT above the capacity simply takes what is there.
        assert_eq!(lease(None, &p, T0, 1_000_000_000_000).decision.allowed, 10);
        // WANT 0 changes nothing.
        let zero = lease(Some(&s), &p, T0, 0);
        assert_eq!((zero.decision.allowed, zero.next), (0, None));
    }

    /// Trace of (gap ns, want) pairs, wants up to 40 (above most capacities, to force partials).
    fn lease_trace() -> impl Strategy<Value = Vec<(u64, u64)>> {
        prop::collection::vec(
            (
                prop_oneof![Just(0u64), 0u64..1_000_000, 0u64..200_000_000],
                1u64..=40,
            ),
            1..100,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Never more than the bucket holds: exactly min(want, whole tokens there) is granted.
        #[test]
        fn grants_exactly_what_is_there(p in policy_strategy(), trace in lease_trace()) {
            let (_, log) = run(&trace, |s, now, want| lease(s, &p, now, want));
            for Step { now, before, cost: want, decision } in log {
                let there = token_bucket::check(before.as_ref(), &p, now, 0).decision.remaining;
                prop_assert_eq!(decision.allowed, want.min(there));
                prop_assert!(decision.allowed <= p.capacity());
            }
        }

        /// Leased tokens in any interval of length t: at most B + L·t/W, like admitted requests.
        #[test]
        fn grants_never_exceed_burst_plus_rate(p in policy_strategy(), trace in lease_trace()) {
            let (mut now, mut state, mut granted) = (super::super::props::T0, None, Vec::new());
            for (gap, want) in trace {
                now += gap;
                let out = lease(state.as_ref(), &p, now, want);
                if let Some(next) = out.next {
                    granted.push((now, out.decision.allowed));
                    state = Some(next);
                }
            }
            prop_assert_eq!(worst_interval(&granted, bucket_bound(&p)), None);
        }

        /// A lease of n leaves the bucket that single cost-1 requests at the same instant leave,
        /// and answers what the last of them answers.
        #[test]
        fn lease_equals_single_requests(p in policy_strategy(), trace in lease_trace()) {
            let (_, log) = run(&trace, |s, now, want| lease(s, &p, now, want));
            for Step { now, before, cost: want, decision } in log {
                let leased = lease(before.as_ref(), &p, now, want);
                let (mut state, mut singles, mut last) = (before, 0u64, None);
                while singles < want {
                    let one = token_bucket::check(state.as_ref(), &p, now, 1);
                    let Some(next) = one.next else { break };
                    state = Some(next);
                    singles += 1;
                    last = Some(one.decision);
                }
                prop_assert_eq!(decision.allowed, singles);
                match last {
                    Some(d) => {
                        prop_assert_eq!(leased.next, state);
                        prop_assert_eq!((decision.remaining, decision.reset_after_ns), (d.remaining, d.reset_after_ns));
                    }
                    None => prop_assert_eq!(leased.next, None),
                }
            }
        }

        /// A lease that grants nothing answers the exact time until one token: nothing just
        /// before it, at least one token at it.
        #[test]
        fn retry_after_is_exact(p in policy_strategy(), trace in lease_trace()) {
            let (_, log) = run(&trace, |s, now, want| lease(s, &p, now, want));
            for Step { now, before, cost: want, decision } in log {
                match decision.retry_after_ns {
                    Some(retry) => {
                        prop_assert_eq!(decision.allowed, 0);
                        prop_assert_eq!(lease(before.as_ref(), &p, now + retry - 1, want).decision.allowed, 0);
                        prop_assert!(lease(before.as_ref(), &p, now + retry, want).decision.allowed >= 1);
                    }
                    None => prop_assert!(decision.allowed >= 1),
                }
            }
        }

        /// Leases and single requests on one bucket together keep the bucket's promise.
        #[test]
        fn leases_mixed_with_requests_keep_the_promise(p in policy_strategy(), trace in lease_trace()) {
            let (mut now, mut state, mut spent) = (super::super::props::T0, None, Vec::new());
            for (i, (gap, want)) in trace.into_iter().enumerate() {
                now += gap;
                let out = if i % 2 == 0 {
                    lease(state.as_ref(), &p, now, want)
                } else {
                    token_bucket::check(state.as_ref(), &p, now, want.min(p.capacity()))
                };
                if let Some(next) = out.next {
                    let n = if i % 2 == 0 { out.decision.allowed } else { want.min(p.capacity()) };
                    spent.push((now, n));
                    state = Some(next);
                }
            }
            prop_assert_eq!(worst_interval(&spent, bucket_bound(&p)), None);
        }
    }
}
