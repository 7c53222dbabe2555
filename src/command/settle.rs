//! `RL.SETTLE numkeys key [key ...] <limiter> [<limiter> ...]`, `<limiter>` = `ALGORITHM L W
//! [BURST B] BY d` (RL.ALL's keys and limiters, `BY d` in place of `COST n`): settles one served
//! request over all its limiters at once, each by its own signed difference between what it
//! cost and what was reserved — a charge when d > 0 (as `RL.CHARGE`, into debt if need be), a
//! refund when d < 0 (as `RL.REFUND`), nothing at 0 — under the policy each key holds, in one
//! atomic call. Never denied. A missing key is created under its limiter's policy when d > 0
//! (nothing to give back otherwise); on an existing key the policy only names the algorithm it
//! must hold. A command of its own rather than a form of `RL.ALL`: it refunds, and an ACL that
//! grants deciding (`RL.ALL`) without refunds (`RL.REFUND`) must be able to leave it out.
//!
//! All or nothing: every key is checked (type, algorithm, a creatable policy) before any is
//! changed, so an error leaves every key as it was.
//!
//! Reply: the combined answer, then one five-integer array per limiter in argument order, field
//! 1 = tokens it moved (charged or given back), fields 2–5 its peek after the settle. Combined:
//! field 1 = 1 when every charge was counted in full, 0 when a debt reached its bound; limit and
//! remaining of the limiter with the fewest remaining; retry_after_ms = when every limiter would
//! admit a cost-1 request (-1: now); reset_after_ms = the largest.

use super::charge::{settle_key, Given};
use super::key::at_key;
use super::reply::{fields, Reply};
use super::share;
use crate::algo::Decision;
use crate::clock;
use crate::error::Error;
use crate::host::call::{Ctx, Key, RString};
use crate::metrics;

/// One limiter of a settle.
pub struct Limiter<'a> {
    pub key: RString<'a>,
    pub given: Given,
    /// Tokens to charge (> 0) or give back (< 0).
    pub by: i64,
}

pub fn all(ctx: &Ctx, limiters: &[Limiter<'_>]) -> Result<Reply, Error> {
    let now_ns = clock::now_ns();
    metrics::note(metrics::Outcome::Call);
    let mut keys: Vec<Key<'_>> = limiters.iter().map(|l| ctx.open(l.key, true)).collect();
    for (limiter, key) in limiters.iter().zip(keys.iter_mut()) {
        check(key, limiter, now_ns).map_err(|e| at_key(e, limiter.key))?;
    }
    let mut each = Vec::with_capacity(limiters.len());
    let mut in_full = true;
    for (limiter, key) in limiters.iter().zip(keys.iter_mut()) {
        let settled = settle_key(
            ctx,
            key,
            limiter.key,
            Some(&limiter.given),
            now_ns,
            limiter.by,
        )
        .map_err(|e| at_key(e, limiter.key))?;
        // Given a policy, a missing key is settled as a fresh limiter: never None.
        let Some(settled) = settled else {
            return Err(Error::Internal);
        };
        in_full &= limiter.by <= 0 || settled.moved == limiter.by.unsigned_abs();
        each.push(Decision {
            allowed: settled.moved,
            ..settled.after
        });
    }
    Ok(Reply::Nested(
        fields(&combine(in_full, &each)),
        each.iter().map(fields).collect(),
    ))
}

/// What `settle_key` would refuse, found before any key changes.
fn check(key: &mut Key<'_>, limiter: &Limiter<'_>, now_ns: u64) -> Result<(), Error> {
    let given = &limiter.given;
    match key.limiter(given.rule.name)? {
        Some(held) => {
            given.same_algorithm(held)?;
            // A key holding a share is carried to its share's policy: the log bound must accept
            // it.
            share::carry_for_settle(held, Some(&given.policy), now_ns, false).map(|_| ())
        }
        None => given.fresh(now_ns).map(|_| ()),
    }
}

/// The combined answer: `in_full` as field 1, the tightest limiter's limit and remaining, the
/// latest retry and reset.
fn combine(in_full: bool, each: &[Decision]) -> Decision {
    let tightest = each.iter().min_by_key(|d| d.remaining);
    Decision {
        allowed: u64::from(in_full),
        capacity: tightest.map_or(0, |d| d.capacity),
        remaining: tightest.map_or(0, |d| d.remaining),
        retry_after_ns: each.iter().filter_map(|d| d.retry_after_ns).max(),
        reset_after_ns: each.iter().map(|d| d.reset_after_ns).max().unwrap_or(0),
    }
}
