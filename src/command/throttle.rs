//! `RL.THROTTLE key max_burst count_per_period period [quantity]`: redis-cell's `CL.THROTTLE`,
//! arguments and reply, decided by our GCRA. This file is the pure part: arguments → policy and
//! cost, decision → redis-cell's reply, and the adoption of a key redis-cell wrote.
//!
//! The mapping: `RL.THROTTLE k MB N P [Q]` decides exactly as `RL.GCRA k N P·1000 BURST MB+1
//! COST Q`, on the same key type (a GCRA limiter), and replies
//! `[limited, limit, remaining, retry_after_s, reset_after_s]`: `limited` is 1 − allowed,
//! `limit` is MB + 1, times are whole seconds rounded up, `retry_after_s` is −1 unless limited.
//!
//! redis-cell's edges, as redis-cell's source (`redis-cell/src/lib.rs`, `redis-cell-impl`)
//! decides them, and what we do:
//! - `quantity` 0: redis-cell peeks: limited only when the key's debt runs past the capacity
//!   (a key written under another policy), with the time past it as retry; else `limited` 0,
//!   retry −1. Same here, nothing written. (`RL.GCRA … COST 0` instead answers whether a cost-1
//!   request would pass.)
//! - A policy change: redis-cell keeps one TAT and judges it by the call's policy; so do
//!   `RL.THROTTLE`/`CL.THROTTLE` (see [`carry_tat`]), unlike `RL.GCRA`, which carries tokens.
//! - `quantity` > max_burst + 1: redis-cell answers limited with retry −1 ("never"). Same here
//!   (`RL.GCRA` refuses such a COST with an error).
//! - Negative quantity: redis-cell moves the arrival time back, handing out credit. Refused.
//! - max_burst 0: a capacity of 1, no burst; the same. Negative: redis-cell computes a zero or
//!   negative tolerance and limits every request (or worse). Refused: max_burst is 0..10^12−1.
//! - count or period 0: redis-cell fails with "Zero rates are not supported". Refused here
//!   too, with an error that names the argument; negative ones also (redis-cell's answers for
//!   those are meaningless).
//! - Fractional period ("1.5"): redis-cell fails to parse it as an integer; so do we.
//!   `RL.GCRA` takes W in milliseconds for finer periods.
//! - Huge rates: redis-cell computes the emission interval in f64 ns truncated to an integer, so
//!   more than one request per ns becomes a zero rate (an error) and uneven intervals drift by
//!   up to 1 ns per request. Ours is exact for any count ≤ 10^12 and period ≤ 10^9 s, with the
//!   same bound as every command: (max_burst+1) × period / count ≤ 10^9 s.
//! - Rounding: current redis-cell rounds a time up only when its sub-second part holds at
//!   least a whole millisecond (older releases truncate), so `retry_after` 1.0004 s is 1 s
//!   there: a client that waits it is early and denied again. Here every fraction rounds up.
//! - Remaining: redis-cell divides microseconds in f64 and truncates; here it is exact whole
//!   requests. They agree except when a float rounding lands on an integer boundary.

use std::sync::atomic::{AtomicBool, Ordering};

use super::args::parse_u64;
use super::effect;
use super::key::{of, store};
use super::reply::Reply;
use crate::algo::gcra::{self, Gcra};
use crate::algo::{Algorithm, Amount, Decision, Policy, MAX_LIMIT, MAX_WINDOW_MS};
use crate::clock;
use crate::error::Error;
use crate::host::call::Held;
use crate::host::call::{Args, Ctx, RString};
use crate::metrics;

/// The redis-cell name, registered only under `CELL-COMPAT yes`.
pub const CL_THROTTLE: &str = "CL.THROTTLE";

/// Set at load by `CELL-COMPAT yes`: registers `CL.THROTTLE`, and lets `RL.THROTTLE`/`CL.THROTTLE`
/// adopt the keys redis-cell wrote.
pub static CELL_COMPAT: AtomicBool = AtomicBool::new(false);

pub fn cell_compat() -> bool {
    CELL_COMPAT.load(Ordering::Relaxed)
}

/// Whether a row of the command table is registered: all but `CL.THROTTLE` outside compat mode.
/// Why `CL.THROTTLE` could not be registered: the likely cause is another module.
pub fn explain(e: String) -> String {
    format!("{e}: CELL-COMPAT yes needs the name CL.THROTTLE, and another module (redis-cell?) already owns it; unload it, or load this module without CELL-COMPAT and call RL.THROTTLE")
}

/// `RL.THROTTLE` and, in compat mode, `CL.THROTTLE`.
pub fn throttle(ctx: &Ctx, mut args: Args<'_>) -> Result<Reply, Error> {
    if !(4..=5).contains(&args.remaining()) {
        return Err(Error::WrongArity);
    }
    let key = args.next_string()?;
    let (max_burst, count, period) = (args.next_bytes()?, args.next_bytes()?, args.next_bytes()?);
    let quantity = match args.remaining() {
        0 => None,
        _ => Some(args.next_bytes()?),
    };
    let Throttle { policy, quantity } = parse(max_burst, count, period, quantity)?;
    if ctx.from_stream() {
        return Ok(from_stream(ctx, key.bytes(), &policy));
    }
    let fields = decide(ctx, key, policy, quantity)?;
    Ok(counted(quantity, fields))
}

/// Load, carry, decide, persist and propagate, on one opening of the key. The state the request
/// is decided on: the key's GCRA limiter under the request's policy; under another policy, the
/// same theoretical arrival time judged by the new one ([`carry_tat`], redis-cell's rule, not
/// `RL.GCRA`'s); with `CELL-COMPAT yes`, redis-cell's string adopted the same way
/// ([`adopt_cell_value`]). A carried or adopted state is stored with the request's policy
/// whether or not the request is admitted (a string is first `DEL`eted: a replica holds it
/// too); a peek, or a quantity that can never pass, writes nothing.
fn decide(
    ctx: &Ctx,
    name: RString<'_>,
    policy: Policy,
    quantity: Quantity,
) -> Result<[i64; 5], Error> {
    let amount = quantity.amount();
    let now_ns = clock::now_ns();
    let mut key = ctx.open(name, !amount.peeks());
    // (the state to decide on, whether it was carried, whether from redis-cell's string)
    let (state, carried, string) = match key.held() {
        Held::Empty => (None, false, false),
        Held::Limiter(limiter) => {
            let held = *of::<Gcra>(limiter)?;
            if limiter.policy == policy {
                (Some(held), false, false)
            } else {
                (
                    Some(carry_tat(&held, &limiter.policy, &policy)),
                    true,
                    false,
                )
            }
        }
        Held::Other(holds) => {
            let adopted = match cell_compat() {
                true => key
                    .string_value()
                    .and_then(|value| adopt_cell_value(&value, &policy, now_ns)),
                false => None,
            };
            match adopted {
                Some(state) => (Some(state), true, true),
                None => {
                    return Err(Error::WrongType {
                        holds: holds.into(),
                        wanted: Gcra::NAME,
                        key: None,
                    })
                }
            }
        }
    };
    let outcome = Gcra::decide(state.as_ref(), &policy, now_ns, amount).outcome;
    let over = over_capacity(state.as_ref(), &policy, now_ns);
    let store_state = match (amount, outcome.next) {
        (Amount::Peek, _) => None,
        (_, Some(next)) => Some(next),
        (_, None) => state.filter(|_| carried),
    };
    if let Some(next) = store_state {
        if string {
            ctx.replicate_del(name);
        }
        let limiter = store(&mut key, policy, next)?;
        let expire_at_ms = effect::commit(
            ctx,
            name,
            effect::Commit::State(limiter),
            now_ns,
            outcome.decision.reset_after_ns,
        );
        key.expire_at(Some(expire_at_ms));
    }
    Ok(reply(quantity, &outcome.decision, over))
}

/// `RL.THROTTLE`/`CL.THROTTLE` replicated from a master or read from the AOF: only redis-cell
/// sends them (this module replicates the effects of its own calls, never the command). Applying
/// one would mean deciding again on this server's clock, where redis-cell's master decided on
/// its own: this server would end milliseconds off the master, or admit what the master denied.
/// So nothing is applied; the master's keys reach this server as data by a full resync (or an
/// AOF rewritten before the switch): see docs/migrating-from-redis-cell.md. Logged once per
/// process, with the first key. The reply goes nowhere (a master link or the AOF loader).
fn from_stream(ctx: &Ctx, key: &[u8], policy: &Policy) -> Reply {
    static WARNED: AtomicBool = AtomicBool::new(false);
    metrics::note(metrics::Outcome::Peek);
    if !WARNED.swap(true, Ordering::Relaxed) {
        ctx.log_warning(&format!(
            "{} for key '{}' came from the master or the AOF (redis-cell's stream): applied nothing, as for every later one; resync this server from the master (or rewrite the AOF under redis-cell) before switching, see docs/migrating-from-redis-cell.md",
            ctx.name(),
            String::from_utf8_lossy(key)
        ));
    }
    let capacity = i64::try_from(policy.capacity()).unwrap_or(i64::MAX);
    Reply::Decision([0, capacity, capacity, -1, 0])
}

/// The reply, noted for `INFO ratelimit`: redis-cell's field 1 is "limited", the opposite of
/// the other commands' "allowed", and a quantity that can never pass is a denial, not a peek.
fn counted(quantity: Quantity, fields: [i64; 5]) -> Reply {
    metrics::note(match (quantity, fields[0]) {
        (Quantity::Peek, _) => metrics::Outcome::Peek,
        (_, 0) => metrics::Outcome::Admitted,
        _ => metrics::Outcome::Denied,
    });
    Reply::Decision(fields)
}

/// redis-cell's reinterpretation of a key under a new policy: it stores only the theoretical
/// arrival time (TAT) and judges it by the emission interval and burst of the call at hand, so
/// the debt carries over in time, not in tokens, and is not capped: `CL.THROTTLE k 9 10 3600`
/// spent to the full leaves 3,600 s of debt, and `CL.THROTTLE k 0 3 1` then waits those out
/// (1,800 requests' worth at 3 per second), where `RL.GCRA` would carry the 10 requests spent.
/// The TAT moves by less than a nanosecond (rounded up: a debt never shrinks).
pub fn carry_tat(state: &Gcra, from: &Policy, to: &Policy) -> Gcra {
    let tat = { state.tat };
    let tat_ns = tat.div_ceil(from.units_per_ns());
    Gcra {
        tat: tat_ns
            .saturating_mul(to.units_per_ns())
            .min(gcra::max_tat(to)),
    }
}

/// How far a key's debt runs past its policy's capacity, in ns rounded up: only a carried TAT
/// (a key converted from another policy, or adopted from redis-cell) can. redis-cell then
/// answers even a quantity of 0 as limited, for that long. None: within capacity.
fn over_capacity(state: Option<&Gcra>, policy: &Policy, now_ns: u64) -> Option<u64> {
    let tat = state.map(|s| s.tat)?;
    let debt = tat.saturating_sub(policy.units_at(now_ns));
    let capacity = u128::from(policy.capacity()) * policy.units_per_token();
    (debt > capacity).then(|| policy.ns_ceil(debt - capacity))
}

const NS_PER_SEC: u64 = 1_000_000_000;

/// Largest period, in seconds: the longest window any command accepts.
pub const MAX_PERIOD_S: u64 = MAX_WINDOW_MS / 1000;

/// What a `quantity` asks of the GCRA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quantity {
    /// Spend n (1 ≤ n ≤ max_burst + 1).
    Spend(u64),
    /// 0: look, never limited, write nothing.
    Peek,
    /// More than max_burst + 1: can never pass; answered limited with retry −1.
    Never,
}

impl Quantity {
    /// The amount the GCRA decides: a peek for what spends nothing.
    pub fn amount(self) -> Amount {
        match self {
            Quantity::Spend(n) => Amount::Cost(n),
            Quantity::Peek | Quantity::Never => Amount::Peek,
        }
    }
}

/// A parsed `RL.THROTTLE`: the GCRA policy (L = count, W = period s × 1000, B = max_burst + 1)
/// and what the quantity asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Throttle {
    pub policy: Policy,
    pub quantity: Quantity,
}

/// Parses redis-cell's arguments (after the key): `max_burst count_per_period period
/// [quantity]`.
pub fn parse(
    max_burst: &[u8],
    count: &[u8],
    period: &[u8],
    quantity: Option<&[u8]>,
) -> Result<Throttle, Error> {
    let max_burst = parse_u64("max_burst", max_burst, 0, MAX_LIMIT - 1)?;
    let count = parse_u64("count_per_period", count, 1, MAX_LIMIT)?;
    let period_s = parse_u64("period", period, 1, MAX_PERIOD_S)?;
    let quantity = match quantity {
        Some(q) => parse_u64("quantity", q, 0, MAX_LIMIT)?,
        None => 1,
    };
    let (window_ms, capacity) = (period_s * 1000, max_burst + 1);
    let policy = super::args::policy(count, window_ms, capacity)?;
    let quantity = match quantity {
        0 => Quantity::Peek,
        n if n > capacity => Quantity::Never,
        n => Quantity::Spend(n),
    };
    Ok(Throttle { policy, quantity })
}

/// Nanoseconds as whole seconds, rounded up: a client that waits this long is never early.
pub fn secs_ceil(ns: u64) -> u64 {
    ns.div_ceil(NS_PER_SEC)
}

/// redis-cell's reply, `[limited, limit, remaining, retry_after_s, reset_after_s]`, from the
/// GCRA's decision on `quantity.amount()`. `over`: how far the debt runs past the capacity (see
/// [`over_capacity`]), which makes even a peek limited, for that long, as in redis-cell.
pub fn reply(quantity: Quantity, d: &Decision, over: Option<u64>) -> [i64; 5] {
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let limited = match quantity {
        Quantity::Spend(_) => d.allowed == 0,
        Quantity::Peek => over.is_some(),
        Quantity::Never => true,
    };
    let retry = match (quantity, d.retry_after_ns, over) {
        (Quantity::Spend(_), Some(ns), _) => int(secs_ceil(ns)),
        (Quantity::Peek, _, Some(ns)) => int(secs_ceil(ns)),
        _ => -1,
    };
    [
        i64::from(limited),
        int(d.capacity),
        int(d.remaining),
        retry,
        int(secs_ceil(d.reset_after_ns)),
    ]
}

/// A redis-cell key's value — the theoretical arrival time as a decimal i64 of nanoseconds since
/// the epoch, as `CL.THROTTLE` writes it — as our GCRA state under `policy` at `now_ns`: the
/// same instant, so the debt carries over in time, whole, as redis-cell would judge it under
/// `policy` (a key written under a larger policy stays in debt past this policy's capacity,
/// and is denied until the time is served). An instant in the past is a full key. None: not
/// such a value.
pub fn adopt_cell_value(value: &[u8], policy: &Policy, now_ns: u64) -> Option<Gcra> {
    let (negative, digits) = match value.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, value),
    };
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let tat_ns = digits.iter().try_fold(0u64, |acc, &d| {
        acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })?;
    // redis-cell's value is an i64; a negative one is an arrival time long past.
    if tat_ns > i64::MAX as u64 {
        return None;
    }
    let tat_ns = if negative { now_ns } else { tat_ns.max(now_ns) };
    Some(Gcra {
        tat: policy.units_at(tat_ns).min(gcra::max_tat(policy)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::gcra;
    use crate::algo::props::T0;

    const SEC: u64 = NS_PER_SEC;

    fn ok(mb: &str, n: &str, p: &str, q: Option<&str>) -> Throttle {
        parse(
            mb.as_bytes(),
            n.as_bytes(),
            p.as_bytes(),
            q.map(str::as_bytes),
        )
        .unwrap()
    }

    fn err(mb: &str, n: &str, p: &str, q: Option<&str>) -> String {
        parse(
            mb.as_bytes(),
            n.as_bytes(),
            p.as_bytes(),
            q.map(str::as_bytes),
        )
        .unwrap_err()
        .to_string()
    }

    #[test]
    fn maps_to_gcra_policy_and_cost() {
        let t = ok("15", "30", "60", None);
        assert_eq!(t.policy, Policy::new(30, 60_000, 16).unwrap());
        assert_eq!(t.quantity, Quantity::Spend(1));
        assert_eq!(ok("0", "1", "1", Some("1")).policy.capacity(), 1);
        assert_eq!(ok("15", "30", "60", Some("0")).quantity, Quantity::Peek);
        assert_eq!(
            ok("15", "30", "60", Some("16")).quantity,
            Quantity::Spend(16)
        );
        assert_eq!(ok("15", "30", "60", Some("17")).quantity, Quantity::Never);
        assert_eq!(Quantity::Never.amount(), Amount::Peek);
    }

    #[test]
    fn refuses_what_redis_cell_gets_wrong() {
        for (args, name) in [
            (("-1", "30", "60", None), "max_burst"),
            (("15", "0", "60", None), "count_per_period"),
            (("15", "-30", "60", None), "count_per_period"),
            (("15", "30", "0", None), "period"),
            (("15", "30", "1.5", None), "period"),
            (("15", "30", "-60", None), "period"),
            (("15", "30", "60", Some("-1")), "quantity"),
            (("15", "30", "1000000001", None), "period"),
            (("1000000000000", "30", "60", None), "max_burst"),
        ] {
            let e = err(args.0, args.1, args.2, args.3);
            assert!(e.starts_with(&format!("ERR invalid {name} ")), "{e}");
        }
        // (max_burst+1) × period / count beyond 10^9 s.
        assert!(err("999999", "1", "1000000000", None).starts_with("ERR"));
    }

    /// redis-cell's own table of cases (its `it_rate_limits` test: max_burst 4, 1 per second),
    /// in seconds; where redis-cell's ms times are not whole seconds we round up.
    #[test]
    fn redis_cell_table_of_cases() {
        let t = ok("4", "1", "1", None);
        let p = t.policy;
        let mut state: Option<Gcra> = None;
        let mut call = |at: u64, q: &str| {
            let t = ok("4", "1", "1", Some(q));
            let out = Gcra::decide(state.as_ref(), &p, T0 + at, t.quantity.amount()).outcome;
            if let (Quantity::Spend(_), Some(next)) = (t.quantity, out.next) {
                state = Some(next);
            }
            reply(t.quantity, &out.decision, None)
        };
        // (at ms, quantity) → [limited, limit, remaining, retry, reset]
        let cases: [(u64, &str, [i64; 5]); 15] = [
            (0, "6", [1, 5, 5, -1, 0]),
            (0, "1", [0, 5, 4, -1, 1]),
            (0, "1", [0, 5, 3, -1, 2]),
            (0, "1", [0, 5, 2, -1, 3]),
            (0, "1", [0, 5, 1, -1, 4]),
            (0, "1", [0, 5, 0, -1, 5]),
            (0, "1", [1, 5, 0, 1, 5]),
            (3000, "1", [0, 5, 2, -1, 3]),
            // redis-cell: reset 3.9 s, which current redis-cell rounds to 4 (older truncates to 3).
            (3100, "1", [0, 5, 1, -1, 4]),
            (4000, "1", [0, 5, 1, -1, 4]),
            (8000, "1", [0, 5, 4, -1, 1]),
            (9500, "1", [0, 5, 4, -1, 1]),
            (9500, "0", [0, 5, 4, -1, 1]),
            (9500, "2", [0, 5, 2, -1, 3]),
            (9500, "5", [1, 5, 2, 3, 3]),
        ];
        for (i, (at, q, want)) in cases.into_iter().enumerate() {
            assert_eq!(call(at * 1_000_000, q), want, "case {i}");
        }
    }

    #[test]
    fn peek_is_never_limited() {
        let t = ok("0", "1", "10", Some("0"));
        let spent = gcra::check(None, &t.policy, T0, 1).next.unwrap();
        let d = gcra::check(Some(&spent), &t.policy, T0, 0).decision;
        assert_eq!(d.allowed, 0);
        assert_eq!(reply(t.quantity, &d, None), [0, 1, 0, -1, 10]);
    }

    #[test]
    fn seconds_round_up() {
        assert_eq!(secs_ceil(0), 0);
        assert_eq!(secs_ceil(1), 1);
        assert_eq!(secs_ceil(SEC), 1);
        assert_eq!(secs_ceil(SEC + 400_000), 2);
    }

    #[test]
    fn adopts_redis_cell_values() {
        let p = Policy::new(1, 1000, 5).unwrap();
        // 3 s of debt: 2 of 5 left, full again in 3 s.
        let tat = (T0 + 3 * SEC).to_string();
        let g = adopt_cell_value(tat.as_bytes(), &p, T0).unwrap();
        let d = gcra::check(Some(&g), &p, T0, 0).decision;
        assert_eq!((d.remaining, d.reset_after_ns), (2, 3 * SEC));
        // Past or negative: full. Far future: empty, not deeper.
        for past in [T0 - 1, 0] {
            let g = adopt_cell_value(past.to_string().as_bytes(), &p, T0).unwrap();
            assert_eq!(gcra::check(Some(&g), &p, T0, 0).decision.remaining, 5);
        }
        let g = adopt_cell_value(b"-5", &p, T0).unwrap();
        assert_eq!(gcra::check(Some(&g), &p, T0, 0).decision.remaining, 5);
        // Far future: the whole debt, not capped at a full bucket (redis-cell judges the TAT
        // as it is).
        let g = adopt_cell_value(i64::MAX.to_string().as_bytes(), &p, T0).unwrap();
        let d = gcra::check(Some(&g), &p, T0, 0).decision;
        assert_eq!((d.remaining, d.reset_after_ns), (0, i64::MAX as u64 - T0));
        // The chg:p6: written exhausted under 9 10 3600 (3,600 s of debt), 3 s later
        // read under 0 3 1: redis-cell answers [1, 1, 0, 3597, 3597].
        let cell = ok("9", "10", "3600", None).policy;
        let spent = gcra::check(None, &cell, T0, 10).next.unwrap();
        let tat_ns = spent.tat / cell.units_per_ns();
        let t = ok("0", "3", "1", Some("1"));
        let now = T0 + 3 * SEC;
        let g = adopt_cell_value(tat_ns.to_string().as_bytes(), &t.policy, now).unwrap();
        let d = gcra::check(Some(&g), &t.policy, now, 1).decision;
        assert_eq!(reply(t.quantity, &d, None), [1, 1, 0, 3597, 3597]);
        // The same key held as our limiter and changed by RL.THROTTLE: the same answer.
        let carried = carry_tat(&spent, &cell, &t.policy);
        assert_eq!(carried, g);
        // A peek on it is limited too, for the time past the capacity (3597 - 1/3 s).
        let over = over_capacity(Some(&carried), &t.policy, now);
        let d = gcra::check(Some(&carried), &t.policy, now, 0).decision;
        assert_eq!(reply(Quantity::Peek, &d, over), [1, 1, 0, 3597, 3597]);
        for bad in [
            &b""[..],
            b"-",
            b"abc",
            b"1.5",
            b" 1",
            b"+1",
            b"9223372036854775808",
            b"99999999999999999999",
        ] {
            assert_eq!(adopt_cell_value(bad, &p, T0), None, "{bad:?}");
        }
    }
}
