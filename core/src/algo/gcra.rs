//! GCRA, the generic cell rate algorithm (ITU-T I.371): a token bucket stored as one instant.
//!
//! Terms, in units (see the parent module):
//! - `emission_interval` (T): the spacing of requests at the long-run rate, W/L. In units it is
//!   exactly one token: `window_ns`.
//! - `tolerance` (τ): how far ahead of the schedule a key may run, (B−1)·T.
//! - `tat`: the theoretical arrival time, the instant at which the key is back to full capacity.
//!   Its distance ahead of `now` is the key's debt; a request of cost n is admitted when
//!   `debt + n·T <= τ + T = B·T`.
//!
//! Admits exactly what a token bucket with the same L, W, B admits (see `token_bucket`).

use super::bytes::{Invalid, Reader};
use super::decision::{Decision, Outcome};
use super::inspect::{inspection, millitokens, relative_ms, Field};
use super::policy::{rescale_units, Policy};

/// Stored state: the theoretical arrival time, in units of the policy it was decided under.
///
/// `repr(C, packed(8))`: the u128 aligned to 8 bytes rather than 16, so the stored limiter has no
/// padding (48 bytes instead of 80, see `state::Limiter`). Read the field by value
/// (`{ g.tat }`); the compiler refuses a reference to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, packed(8))]
pub struct Gcra {
    pub tat: u128,
}

/// Decides a request of `cost` tokens at `now_ns`. `cost` 0 is a peek: answered as a cost-1
/// request would be, with nothing spent. The caller guarantees `cost <= policy.capacity()`.
pub fn check(state: Option<&Gcra>, policy: &Policy, now_ns: u64, cost: u64) -> Outcome<Gcra> {
    let emission_interval = policy.units_per_token();
    let capacity = u128::from(policy.capacity()) * emission_interval;
    let now = policy.units_at(now_ns);
    // A tat in the past means the key is full: debt 0. A tat far ahead (the clock went back)
    // is a larger debt, never a smaller one.
    let debt = state.map_or(0, |s| s.tat.saturating_sub(now));
    let asked = u128::from(cost.max(1)) * emission_interval;
    // Saturating: a debt near u128::MAX (a state carried from a far finer policy) stays a debt.
    let needed = debt.saturating_add(asked);
    let admitted = needed <= capacity;

    let debt_after = if admitted && cost > 0 { needed } else { debt };
    let decision = Decision {
        allowed: u64::from(admitted),
        capacity: policy.capacity(),
        remaining: whole_tokens(capacity.saturating_sub(debt_after), emission_interval),
        retry_after_ns: (!admitted).then(|| policy.ns_ceil(needed - capacity)),
        reset_after_ns: policy.ns_ceil(debt_after),
    };
    let next = (admitted && cost > 0).then_some(Gcra {
        tat: now + debt_after,
    });
    Outcome { decision, next }
}

/// The same debt under a new policy: what was already spent carries over. A debt so large that
/// it would last past the last instant a clock can read (a u64 of ns, the year 2554) denies until
/// then either way: it is kept at [`max_tat`], which a stored state may hold.
pub fn rescale(state: &Gcra, from: &Policy, to: &Policy, now_ns: u64) -> Gcra {
    let debt = state.tat.saturating_sub(from.units_at(now_ns));
    Gcra {
        tat: to
            .units_at(now_ns)
            .saturating_add(rescale_units(debt, from, to, true))
            .min(max_tat(to)),
    }
}

/// The latest arrival time a stored state may hold under `policy`: any instant a u64 of
/// nanoseconds can hold, plus a full bucket of debt. At most about 2^105, so it fits a u128.
pub fn max_tat(policy: &Policy) -> u128 {
    policy.units_at(u64::MAX) + u128::from(policy.capacity()) * policy.units_per_token()
}

/// Gives back `n` unspent tokens at `now_ns`: `tat` moves back by n emission intervals, never
/// before now, so credit never piles up beyond a full key. A key already full stays as it was.
pub fn refund(state: &Gcra, policy: &Policy, now_ns: u64, n: u64) -> Gcra {
    let now = policy.units_at(now_ns);
    let back = u128::from(n).saturating_mul(policy.units_per_token());
    Gcra {
        tat: state.tat.saturating_sub(back).max(now).min(state.tat),
    }
}

/// Spends `n` tokens at `now_ns` whatever the debt (see `Algorithm::charge`): the debt may grow
/// past the capacity, up to [`max_tat`], which denies until the last instant a clock can read.
pub fn charge(state: &Gcra, policy: &Policy, now_ns: u64, n: u64) -> Gcra {
    let spent = u128::from(n).saturating_mul(policy.units_per_token());
    Gcra {
        tat: { state.tat }
            .max(policy.units_at(now_ns))
            .saturating_add(spent)
            .min(max_tat(policy)),
    }
}

/// The debt at `now_ns` in units: how far the arrival time is ahead of now (see
/// `Algorithm::counted`).
pub fn counted(state: &Gcra, policy: &Policy, now_ns: u64) -> u128 {
    { state.tat }.saturating_sub(policy.units_at(now_ns))
}

fn whole_tokens(units: u128, per_token: u128) -> u64 {
    u64::try_from(units / per_token).unwrap_or(u64::MAX)
}

/// `RL.INSPECT`'s fields: `tat_ms`, the theoretical arrival time relative to now (the key is
/// full from then on; negative or 0 when it already is), and `debt_millitokens`, the tokens
/// spent and not yet refilled, in thousandths rounded up.
pub fn inspect(state: &Gcra, policy: &Policy, now_ns: u64) -> Vec<Field> {
    let tat = state.tat;
    let debt = tat.saturating_sub(policy.units_at(now_ns));
    let own = vec![
        (
            "tat_ms",
            relative_ms(tat.div_ceil(policy.units_per_ns()), now_ns),
        ),
        ("debt_millitokens", millitokens(debt, policy, true)),
    ];
    inspection(policy, own, &check(Some(state), policy, now_ns, 0).decision)
}

/// Stored fields: `tat u128` (units of the stored policy), at most [`max_tat`].
pub fn encode(state: &Gcra, out: &mut Vec<u8>) {
    out.extend_from_slice(&{ state.tat }.to_le_bytes());
}

pub fn decode(r: &mut Reader<'_>, policy: &Policy) -> Result<Gcra, Invalid> {
    let tat = r.u128()?;
    if tat > max_tat(policy) {
        return Err("GCRA arrival time out of range");
    }
    Ok(Gcra { tat })
}

super::algorithm::algorithm!(Gcra, name: "GCRA", id: "gcra", tag: 1, burst: true);

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;
    /// 1.8e18 ns: the instant `props::run_at` offsets count from.
    const T0: u64 = super::super::props::T0;

    fn policy(l: u64, w: u64, b: u64) -> Policy {
        Policy::new(l, w, b).unwrap()
    }

    /// Runs requests at the given offsets from T0, returning the decisions.
    fn run(p: &Policy, reqs: &[(u64, u64)]) -> Vec<Decision> {
        super::super::props::run_at(reqs, |s, now, cost| check(s, p, now, cost)).0
    }

    #[test]
    fn inspect_explains_the_debt() {
        // 10 per second, burst 5: T = 100 ms. 5 spent at T0, then 50 ms pass: 4.5 owed.
        let p = policy(10, 1000, 5);
        let s = check(None, &p, T0, 5).next.unwrap();
        let now = T0 + 50 * MS;
        assert_eq!(
            inspect(&s, &p, now),
            vec![
                ("limit", 10),
                ("window_ms", 1000),
                ("burst", 5),
                ("tat_ms", 450),
                ("debt_millitokens", 4500),
                ("remaining", 0),
                ("retry_after_ms", 50),
                ("reset_after_ms", 450),
            ]
        );
        // Long after: the tat is in the past, nothing owed, full.
        let later = inspect(&s, &p, T0 + 2 * SEC + 1);
        assert_eq!(later[3..5], [("tat_ms", -1500), ("debt_millitokens", 0)]);
        assert_eq!(
            later[5..],
            [
                ("remaining", 5),
                ("retry_after_ms", -1),
                ("reset_after_ms", 0)
            ]
        );
        // 3 per second: a third of a token is rounded up, never down.
        let p = policy(3, 1000, 3);
        let s = check(None, &p, T0, 1).next.unwrap();
        assert_eq!(inspect(&s, &p, T0)[4], ("debt_millitokens", 1000));
        assert_eq!(
            inspect(&s, &p, T0 + 1)[3..5],
            [("tat_ms", 334), ("debt_millitokens", 1000)]
        );
        assert_eq!(inspect(&s, &p, T0 + 100 * MS)[4], ("debt_millitokens", 700));
    }

    #[test]
    fn table_of_cases() {
        let p = policy(10, 1000, 10);
        let d = run(&p, &[(0, 1)]);
        assert_eq!(
            d[0],
            Decision {
                allowed: 1,
                capacity: 10,
                remaining: 9,
                retry_after_ns: None,
                reset_after_ns: 100 * MS
            }
        );

        let d = run(&p, &[(0, 10), (0, 1), (100 * MS - 1, 1), (100 * MS, 1)]);
        assert_eq!(
            (d[0].allowed, d[0].remaining, d[0].reset_after_ns),
            (1, 0, 1000 * MS)
        );
        assert_eq!(
            d[1],
            Decision {
                allowed: 0,
                capacity: 10,
                remaining: 0,
                retry_after_ns: Some(100 * MS),
                reset_after_ns: 1000 * MS
            }
        );
        assert_eq!(d[2].allowed, 0);
        assert_eq!(d[2].retry_after_ns, Some(1));
        assert_eq!(d[3].allowed, 1);

        // A peek answers like cost 1 and spends nothing.
        let d = run(&p, &[(0, 9), (0, 0), (0, 0), (0, 1), (0, 0)]);
        assert_eq!(
            (d[1].allowed, d[1].remaining, d[1].reset_after_ns),
            (1, 1, 900 * MS)
        );
        assert_eq!(d[2], d[1]);
        assert_eq!((d[4].allowed, d[4].retry_after_ns), (0, Some(100 * MS)));
    }

    #[test]
    fn burst_and_cost() {
        let p = policy(1, 1000, 5);
        let d = run(&p, &[(0, 5), (0, 1), (3 * SEC, 3), (3 * SEC, 1)]);
        assert_eq!(d[0].allowed, 1);
        assert_eq!((d[1].allowed, d[1].retry_after_ns), (0, Some(SEC)));
        assert_eq!((d[2].allowed, d[2].remaining), (1, 0));
        assert_eq!(d[3].retry_after_ns, Some(SEC));
    }

    #[test]
    fn uneven_interval_is_exact() {
        // 3 per second: T = 333,333,333⅓ ns. Three requests after a full refill of 1 s.
        let p = policy(3, 1000, 3);
        let d = run(&p, &[(0, 3), (SEC, 3), (SEC, 1)]);
        assert_eq!(d[1].allowed, 1);
        assert_eq!(d[2].allowed, 0);
        assert_eq!(d[2].retry_after_ns, Some(333_333_334));
    }

    #[test]
    fn clock_backwards_admits_nothing_extra() {
        let p = policy(10, 1000, 10);
        let d = run(&p, &[(SEC, 10), (0, 1)]);
        assert_eq!(d[1].allowed, 0);
        assert_eq!(d[1].retry_after_ns, Some(1100 * MS));
    }

    #[test]
    fn rescale_carries_the_debt() {
        let from = policy(10, 1000, 10);
        let to = policy(100, 1000, 100);
        let s = check(None, &from, T0, 5).next.unwrap();
        let r = rescale(&s, &from, &to, T0);
        // 5 tokens spent of 100: 95 remain.
        assert_eq!(check(Some(&r), &to, T0, 0).decision.remaining, 95);
    }

    #[test]
    fn refund_moves_tat_back_never_before_now() {
        let p = policy(10, 1000, 10);
        let s = check(None, &p, T0, 6).next.unwrap();
        let back = refund(&s, &p, T0, 2);
        assert_eq!({ back.tat }, { s.tat } - 2 * p.units_per_token());
        assert_eq!(check(Some(&back), &p, T0, 0).decision.remaining, 6);
        // More than was spent: back to now (full), not before it.
        assert_eq!({ refund(&s, &p, T0, 100).tat }, p.units_at(T0));
        // 200 ms later, 2 of the 6 came back by themselves: a refund of 5 fills it.
        assert_eq!(
            { refund(&s, &p, T0 + 200 * MS, 5).tat },
            p.units_at(T0 + 200 * MS)
        );
        // A tat already in the past never moves forward.
        assert_eq!(refund(&s, &p, T0 + 5 * SEC, 1), s);
    }
}
