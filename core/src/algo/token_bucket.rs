//! Token bucket: a balance of tokens that refills at L per W up to the capacity B; a request of
//! cost n is admitted when n tokens are there, and spends them.
//!
//! Counted in units (see the parent module), so the refill is exact: `elapsed_ns × L` units are
//! added, and a token is `window_ns` units. With the same L, W, B it admits exactly what GCRA
//! admits (a property test checks it); it stores a balance and an instant instead of one instant.

use super::amount::Amount;
use super::bytes::{Invalid, Reader};
use super::decision::{Decided, Decision, Outcome};
use super::inspect::{inspection, millitokens, relative_ms, Field};
use super::policy::{rescale_units, Policy};

/// Stored state: the balance at the last refill, and when that was.
///
/// The balance at any instant t is `tokens + (t − last_ns)·L` units, at most the capacity: an
/// instant before `last_ns` (a clock that stepped back, or a debt another configuration of the
/// key left, see [`charge`]) holds less, and may be below empty. So the bucket is a function of
/// absolute time, as GCRA's arrival time is, and the two still admit exactly the same requests.
///
/// `repr(C, packed(8))`: the u128 aligned to 8 bytes rather than 16, so this is 24 bytes, not 32,
/// and the stored limiter has no padding (see `state::Limiter`). Read the fields by value
/// (`{ t.tokens }`); the compiler refuses a reference to `tokens`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, packed(8))]
pub struct TokenBucket {
    /// Balance at `last_ns`, in units of the stored policy; never above its capacity.
    pub tokens: u128,
    /// The instant of the last refill, ns.
    pub last_ns: u64,
}

impl TokenBucket {
    /// A full bucket at `now_ns`.
    pub fn full(policy: &Policy, now_ns: u64) -> TokenBucket {
        TokenBucket {
            tokens: capacity(policy),
            last_ns: now_ns,
        }
    }

    /// The balance at `now_ns` in units, at most the capacity; negative when the bucket owes
    /// tokens (see the type's comment). Every term is below 2^105: an i128 holds it exactly.
    pub fn balance(&self, policy: &Policy, now_ns: u64) -> i128 {
        let (tokens, last_ns) = ({ self.tokens }, self.last_ns);
        let rate = policy.units_per_ns();
        let balance = if now_ns >= last_ns {
            tokens.saturating_add(u128::from(now_ns - last_ns) * rate)
        } else {
            return signed(tokens) - signed(u128::from(last_ns - now_ns) * rate);
        };
        signed(balance.min(capacity(policy)))
    }

    /// The bucket that holds `balance` units at `now_ns` (at most the capacity). A negative
    /// balance is stored as a refill that starts later: the whole nanoseconds the debt takes to
    /// repay, rounded up, and what is left over of the last one, so the balance at every instant
    /// is exact (or lower, where the leftover is above a tiny capacity).
    pub fn holding(balance: i128, policy: &Policy, now_ns: u64) -> TokenBucket {
        let cap = capacity(policy);
        match u128::try_from(balance) {
            Ok(tokens) => TokenBucket {
                tokens: tokens.min(cap),
                last_ns: now_ns,
            },
            Err(_) => {
                let owed = balance.unsigned_abs();
                let rate = policy.units_per_ns();
                let wait_ns = owed.div_ceil(rate);
                TokenBucket {
                    tokens: (wait_ns * rate - owed).min(cap),
                    last_ns: u64::try_from(wait_ns)
                        .ok()
                        .and_then(|w| now_ns.checked_add(w))
                        .unwrap_or(u64::MAX),
                }
            }
        }
    }
}

/// A unit count as signed; every count here is below 2^110.
fn signed(units: u128) -> i128 {
    i128::try_from(units).unwrap_or(i128::MAX)
}

/// The capacity in units: B tokens.
pub fn capacity(policy: &Policy) -> u128 {
    u128::from(policy.capacity()) * policy.units_per_token()
}

/// Decides a request of `cost` tokens at `now_ns`; `cost` 0 peeks (answered as cost 1, nothing
/// spent). The caller guarantees `cost <= policy.capacity()`.
pub fn check(
    state: Option<&TokenBucket>,
    policy: &Policy,
    now_ns: u64,
    cost: u64,
) -> Outcome<TokenBucket> {
    let cap = capacity(policy);
    let balance = state.map_or(signed(cap), |s| s.balance(policy, now_ns));
    let token = policy.units_per_token();
    let asked = signed(u128::from(cost.max(1)) * token);
    let admitted = balance >= asked;
    let after = if admitted && cost > 0 {
        balance - asked
    } else {
        balance
    };
    let positive = u128::try_from(after).unwrap_or(0);
    let decision = Decision {
        allowed: u64::from(admitted),
        capacity: policy.capacity(),
        remaining: u64::try_from(positive / token).unwrap_or(u64::MAX),
        retry_after_ns: (!admitted).then(|| policy.ns_ceil((asked - balance).unsigned_abs())),
        reset_after_ns: policy.ns_ceil((signed(cap) - after).unsigned_abs()),
    };
    let next = (admitted && cost > 0).then_some(TokenBucket {
        tokens: positive,
        last_ns: now_ns,
    });
    Outcome { decision, next }
}

/// The bucket under a new policy, as the stricter of two readings of what it holds now
/// (refilled under the old policy): its balance carried over as the same number of tokens,
/// rounded down, and what it owes (the capacity less the balance) carried over, rounded up, and
/// owed under the new capacity. A larger bucket starts with no more tokens than the old one had;
/// a smaller one may start below empty, so what was spent stays spent either way.
pub fn rescale(state: &TokenBucket, from: &Policy, to: &Policy, now_ns: u64) -> TokenBucket {
    let balance = state.balance(from, now_ns);
    let owed = (signed(capacity(from)) - balance).unsigned_abs();
    let after_debt =
        signed(capacity(to)).saturating_sub(signed(rescale_units(owed, from, to, true)));
    let kept = match u128::try_from(balance) {
        Ok(tokens) => signed(rescale_units(tokens, from, to, false)),
        Err(_) => -signed(rescale_units(balance.unsigned_abs(), from, to, true)),
    };
    TokenBucket::holding(kept.min(after_debt), to, now_ns)
}

/// Gives back `n` unspent tokens at `now_ns` (a lease that lapsed, a reservation settled for
/// less): the balance now plus n tokens, never above the capacity. A bucket that is already
/// full comes back as it was, so there is nothing to store.
pub fn refund(state: &TokenBucket, policy: &Policy, now_ns: u64, n: u64) -> TokenBucket {
    let balance = state.balance(policy, now_ns);
    if balance >= signed(capacity(policy)) {
        return *state;
    }
    let back = signed(u128::from(n).saturating_mul(policy.units_per_token()));
    TokenBucket::holding(balance.saturating_add(back), policy, now_ns)
}

/// Spends `n` tokens at `now_ns` whatever the balance (see `Algorithm::charge`): below empty it
/// becomes a debt, repaid by the refill before the bucket admits again.
pub fn charge(state: &TokenBucket, policy: &Policy, now_ns: u64, n: u64) -> TokenBucket {
    let spent = signed(u128::from(n).saturating_mul(policy.units_per_token()));
    TokenBucket::holding(
        state.balance(policy, now_ns).saturating_sub(spent),
        policy,
        now_ns,
    )
}

/// The debt at `now_ns` in units: the capacity less the balance, more than the capacity when
/// the bucket is below empty (see `Algorithm::counted`).
pub fn counted(state: &TokenBucket, policy: &Policy, now_ns: u64) -> u128 {
    (signed(capacity(policy)) - state.balance(policy, now_ns)).unsigned_abs()
}

/// `RL.INSPECT`'s fields: `millitokens`, the balance now (refilled up to now) in thousandths of
/// a token, rounded down (negative when the bucket owes: a debt `RL.CHARGE` left); `stored_millitokens`, the balance stored at the last refill; and
/// `last_refill_ms`, when that was, relative to now (negative: in the past).
pub fn inspect(state: &TokenBucket, policy: &Policy, now_ns: u64) -> Vec<Field> {
    let own = vec![
        (
            "millitokens",
            signed_millitokens(state.balance(policy, now_ns), policy),
        ),
        (
            "stored_millitokens",
            millitokens(state.tokens, policy, false),
        ),
        ("last_refill_ms", relative_ms(state.last_ns.into(), now_ns)),
    ];
    inspection(policy, own, &check(Some(state), policy, now_ns, 0).decision)
}

/// A balance in thousandths of a token, rounded down (a debt rounded up), saturating.
fn signed_millitokens(balance: i128, policy: &Policy) -> i64 {
    match u128::try_from(balance) {
        Ok(tokens) => millitokens(tokens, policy, false),
        Err(_) => millitokens(balance.unsigned_abs(), policy, true).saturating_neg(),
    }
}

/// Stored fields: `tokens u128` (units, at most the capacity), `last_ns u64`.
pub fn encode(state: &TokenBucket, out: &mut Vec<u8>) {
    out.extend_from_slice(&{ state.tokens }.to_le_bytes());
    out.extend_from_slice(&{ state.last_ns }.to_le_bytes());
}

pub fn decode(r: &mut Reader<'_>, policy: &Policy) -> Result<TokenBucket, Invalid> {
    let (tokens, last_ns) = (r.u128()?, r.u64()?);
    if tokens > capacity(policy) {
        return Err("token bucket balance above its capacity");
    }
    Ok(TokenBucket { tokens, last_ns })
}

/// Leasing: a gateway takes up to `want` whole tokens from the shared bucket in one call and
/// spends them locally. Granted tokens leave the bucket at once, so a fleet of gateways can never
/// spend more than the bucket hands out; the store is called once per batch instead of once per
/// request. A lease is the bucket's own decision with the cost chosen by the bucket: `min(want,
/// whole tokens available)`, computed with [`check`], so a lease of n leaves exactly the bucket
/// that n single requests at the same instant would leave.
///
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
        let mut peek = check(state, policy, now_ns, 0);
        peek.decision.allowed = 0;
        return peek;
    }
    let balance = state.map_or(u128::MAX, |s| {
        u128::try_from(s.balance(policy, now_ns)).unwrap_or(0)
    });
    let available = balance.min(capacity(policy)) / policy.units_per_token();
    // available <= B <= 10^12 always fits; were it not to, granting 0 only denies.
    let granted = u64::try_from(available.min(u128::from(want))).unwrap_or(0);
    // Cost `granted` (<= available <= B) is admitted; cost 1 on a bucket without a whole token
    // is denied with the exact retry time.
    let mut outcome = check(state, policy, now_ns, granted.max(1));
    outcome.decision.allowed = granted;
    outcome
}

super::algorithm::algorithm!(TokenBucket, name: "token bucket", id: "token_bucket", tag: 2, burst: true,
    type Change = ();

    /// A cost or a peek is [`check`]; a lease is [`lease`].
    #[inline(always)]
    fn decide(state: Option<&Self>, policy: &Policy, now_ns: u64, amount: Amount) -> Decided<Self> {
        Decided::now(match amount {
            Amount::Lease(want) => lease(state, policy, now_ns, want),
            other => check(state, policy, now_ns, other.asked()),
        })
    }
);

#[cfg(test)]
mod tests {
    use super::super::gcra;
    use super::super::props::{policy_strategy, run, trace_strategy, Step};
    use super::*;
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;
    const T0: u64 = 1_800_000_000_000 * MS;

    #[test]
    fn inspect_shows_the_balance() {
        // 10 per second, burst 5: 5 spent at T0, 250 ms later 2.5 tokens are back.
        let p = Policy::new(10, 1000, 5).unwrap();
        let s = check(None, &p, T0, 5).next.unwrap();
        assert_eq!(
            inspect(&s, &p, T0 + 250 * MS),
            vec![
                ("limit", 10),
                ("window_ms", 1000),
                ("burst", 5),
                ("millitokens", 2500),
                ("stored_millitokens", 0),
                ("last_refill_ms", -250),
                ("remaining", 2),
                ("retry_after_ms", -1),
                ("reset_after_ms", 250),
            ]
        );
        let s = check(Some(&s), &p, T0 + 250 * MS, 2).next.unwrap();
        let f = inspect(&s, &p, T0 + 250 * MS);
        assert_eq!(
            f[3..6],
            [
                ("millitokens", 500),
                ("stored_millitokens", 500),
                ("last_refill_ms", 0)
            ]
        );
        assert_eq!(
            f[6..],
            [
                ("remaining", 0),
                ("retry_after_ms", 50),
                ("reset_after_ms", 450)
            ]
        );
        // The clock read before the last refill: the balance 250 ms earlier, 2.5 tokens lower
        // (owed: below empty), as GCRA's debt would be.
        assert_eq!(
            inspect(&s, &p, T0)[3..6],
            [
                ("millitokens", -2000),
                ("stored_millitokens", 500),
                ("last_refill_ms", 250)
            ]
        );
    }

    #[test]
    fn table_of_cases() {
        let p = Policy::new(10, 1000, 10).unwrap();
        let first = check(None, &p, T0, 1);
        assert_eq!(
            first.decision,
            Decision {
                allowed: 1,
                capacity: 10,
                remaining: 9,
                retry_after_ns: None,
                reset_after_ns: 100 * MS
            }
        );
        let empty = check(None, &p, T0, 10).next.unwrap();
        let denied = check(Some(&empty), &p, T0, 1);
        assert_eq!(
            denied.decision,
            Decision {
                allowed: 0,
                capacity: 10,
                remaining: 0,
                retry_after_ns: Some(100 * MS),
                reset_after_ns: 1000 * MS
            }
        );
        assert_eq!(denied.next, None);
        assert_eq!(
            check(Some(&empty), &p, T0 + 100 * MS - 1, 1)
                .decision
                .allowed,
            0
        );
        assert_eq!(
            check(Some(&empty), &p, T0 + 100 * MS, 1).decision.allowed,
            1
        );
        // Going back in time refills nothing, and owes the time it went back: 5 s earlier the
        // bucket is 50 tokens short, exactly as GCRA's arrival time would say.
        assert_eq!(
            check(Some(&empty), &p, T0 - 5000 * MS, 1)
                .decision
                .retry_after_ns,
            Some(5100 * MS)
        );
    }

    #[test]
    fn rescale_carries_what_is_owed() {
        let from = Policy::new(10, 1000, 10).unwrap();
        let to = Policy::new(100, 1000, 100).unwrap();
        let s = check(None, &from, T0, 4).next.unwrap();
        let r = rescale(&s, &from, &to, T0);
        // A larger bucket starts with the 6 tokens there were.
        assert_eq!(check(Some(&r), &to, T0, 0).decision.remaining, 6);
        // And in a smaller one, below empty: 4 owed in a bucket of 2.
        let small = Policy::new(10, 1000, 2).unwrap();
        let r = rescale(&s, &from, &small, T0);
        let d = check(Some(&r), &small, T0, 0).decision;
        assert_eq!((d.remaining, d.retry_after_ns), (0, Some(300 * MS)));
    }

    #[test]
    fn refund_caps_at_the_capacity() {
        let p = Policy::new(10, 1000, 10).unwrap();
        let s = check(None, &p, T0, 6).next.unwrap();
        let back = refund(&s, &p, T0, 2);
        assert_eq!(check(Some(&back), &p, T0, 0).decision.remaining, 6);
        let full = refund(&s, &p, T0 + 50 * MS, 100);
        assert_eq!({ full.tokens }, capacity(&p));
        assert_eq!(full.last_ns, T0 + 50 * MS);
        // Already full (here by refill): nothing changes, nothing to store.
        assert_eq!(refund(&s, &p, T0 + 600 * MS, 1), s);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// After any trace, a refund of n raises `remaining` by min(n, room), never past the
        /// capacity, and GCRA's refund answers exactly like the token bucket's afterwards.
        #[test]
        fn refund_is_capped_and_matches_gcra(
            p in policy_strategy(),
            trace in trace_strategy(30),
            n in prop_oneof![1u64..=40, Just(1_000_000_000_000u64)],
        ) {
            let trace: Vec<_> = trace.into_iter().map(|(g, c)| (g, c.min(p.capacity()))).collect();
            let (_, tb) = run(&trace, |s, now, cost| check(s, &p, now, cost));
            let (_, gc) = run(&trace, |s, now, cost| gcra::check(s, &p, now, cost));
            for (Step { now, before, .. }, g) in tb.iter().zip(&gc) {
                let (Some(t), Some(c)) = (before, &g.before) else { continue };
                let was = check(Some(t), &p, *now, 0).decision.remaining;
                let t2 = refund(t, &p, *now, n);
                prop_assert!(t2.tokens <= capacity(&p));
                let after = check(Some(&t2), &p, *now, 0).decision;
                prop_assert_eq!(after.remaining, was.saturating_add(n).min(p.capacity()));
                let c2 = gcra::refund(c, &p, *now, n);
                prop_assert_eq!(gcra::check(Some(&c2), &p, *now, 0).decision, after);
            }
        }
    }

    /// The lease (`lease`): what it grants, and the bucket's promise kept with leases.
    mod lease {
        use super::*;
        use crate::algo::decision::Decision;
        use crate::algo::props::{
            bucket_bound, policy_strategy, run, worst_interval, Step, T0 as PROPS_T0,
        };

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
                    let there = crate::algo::token_bucket::check(before.as_ref(), &p, now, 0).decision.remaining;
                    prop_assert_eq!(decision.allowed, want.min(there));
                    prop_assert!(decision.allowed <= p.capacity());
                }
            }

            /// Leased tokens in any interval of length t: at most B + L·t/W, like admitted requests.
            #[test]
            fn grants_never_exceed_burst_plus_rate(p in policy_strategy(), trace in lease_trace()) {
                let (mut now, mut state, mut granted) = (PROPS_T0, None, Vec::new());
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
                        let one = crate::algo::token_bucket::check(state.as_ref(), &p, now, 1);
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
                let (mut now, mut state, mut spent) = (PROPS_T0, None, Vec::new());
                for (i, (gap, want)) in trace.into_iter().enumerate() {
                    now += gap;
                    let out = if i % 2 == 0 {
                        lease(state.as_ref(), &p, now, want)
                    } else {
                        crate::algo::token_bucket::check(state.as_ref(), &p, now, want.min(p.capacity()))
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
}
