//! `RL.INSPECT`'s fields: the policy, an algorithm's own state in human units, and what a
//! cost-1 request would be answered now.

use super::decision::Decision;
use super::policy::{ms_ceil, Policy, NS_PER_MS};

/// One field of `RL.INSPECT`: its name and an integer in human units (milliseconds, tokens,
/// requests). Instants are given relative to now: positive in the future, negative in the past.
pub type Field = (&'static str, i64);

/// `at_ns − now_ns` in milliseconds, rounded up (toward the future), saturating.
pub fn relative_ms(at_ns: u128, now_ns: u64) -> i64 {
    let diff = i128::try_from(at_ns)
        .unwrap_or(i128::MAX)
        .saturating_sub(i128::from(now_ns));
    let ms = NS_PER_MS as i128;
    // Division truncates toward zero: that is already up for a negative difference.
    let up = diff / ms + i128::from(diff % ms > 0);
    i64::try_from(up).unwrap_or(if up < 0 { i64::MIN } else { i64::MAX })
}

/// `units` in thousandths of a token, rounded up when `round_up`, saturating.
pub fn millitokens(units: u128, policy: &Policy, round_up: bool) -> i64 {
    let scaled = units.saturating_mul(1000);
    let per_token = policy.units_per_token();
    let milli = if round_up {
        scaled.div_ceil(per_token)
    } else {
        scaled / per_token
    };
    i64::try_from(milli).unwrap_or(i64::MAX)
}

/// An inspection: the policy, the algorithm's own `state` fields, then what a cost-1 request
/// would be answered now (`peek`: the algorithm's `check` with cost 0).
pub fn inspection(policy: &Policy, state: Vec<Field>, peek: &Decision) -> Vec<Field> {
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let mut fields = vec![
        ("limit", int(policy.limit())),
        ("window_ms", int(policy.window_ms())),
        ("burst", int(policy.capacity())),
    ];
    fields.extend(state);
    fields.extend([
        ("remaining", int(peek.remaining)),
        (
            "retry_after_ms",
            peek.retry_after_ns.map_or(-1, |ns| int(ms_ceil(ns))),
        ),
        ("reset_after_ms", int(ms_ceil(peek.reset_after_ns))),
    ]);
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_ms_rounds_toward_the_future() {
        let now = 10 * NS_PER_MS;
        assert_eq!(relative_ms(u128::from(now), now), 0);
        assert_eq!(relative_ms(u128::from(now + 1), now), 1);
        assert_eq!(relative_ms(u128::from(now + NS_PER_MS), now), 1);
        assert_eq!(relative_ms(u128::from(now - 1), now), 0);
        assert_eq!(relative_ms(u128::from(now - NS_PER_MS - 1), now), -1);
        assert_eq!(relative_ms(u128::MAX, now), i64::MAX);
        assert_eq!(relative_ms(0, u64::MAX), -18_446_744_073_709);
    }

    #[test]
    fn millitokens_round_as_asked() {
        let p = Policy::new(3, 1000, 3).unwrap();
        let third = p.units_per_token() / 3;
        assert_eq!(millitokens(third, &p, false), 333);
        assert_eq!(millitokens(third, &p, true), 334);
        assert_eq!(millitokens(3 * p.units_per_token(), &p, false), 3000);
        assert_eq!(millitokens(u128::MAX, &p, false), i64::MAX);
    }
}
