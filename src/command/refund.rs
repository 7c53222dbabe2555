//! `RL.REFUND key n` — gives back n unspent tokens (a lease that lapsed unspent, a reservation
//! settled for less) under the policy stored in the key, never above its capacity.
//!
//! Reply: nil when the key does not exist (nothing to give back to; nothing is created).
//! Otherwise the five integers, field 1 = tokens actually given back (how much `remaining` rose:
//! at most n, less when the limiter filled up), fields 2–5 as a peek (`COST 0`) answers after the
//! refund. A refund that changes the state propagates it as an effect with its absolute expiry;
//! one that changes nothing (the limiter was already full) writes and propagates nothing.

use super::effect;
use super::reply::Reply;
use crate::algo::{settle, Decision, Policy, MAX_LIMIT};
use crate::clock;
use crate::error::Error;
use crate::host::call::{Args, Ctx};
use crate::metrics;
use crate::state::{AlgoState, Stored, Visit};

pub fn refund(ctx: &Ctx, mut args: Args<'_>) -> Result<Reply, Error> {
    let name = args.next_string()?;
    let n = args.next_u64("n", 1, MAX_LIMIT)?;
    args.done()?;
    let now_ns = clock::now_ns();
    let mut key = ctx.open(name, true);
    let Some(limiter) = key.limiter("")? else {
        metrics::note(metrics::Outcome::Call);
        return Ok(Reply::Null);
    };
    // A key holding a share is refunded under the policy it is decided under now.
    let moved = super::share::carry_for_settle(limiter, None, now_ns, true)?;
    let policy = limiter.policy;
    let before = metrics::Footprint::of(limiter);
    let refunded = limiter.state.visit(Settle { policy, now_ns, n });
    // Every configuration the key remembers was charged what is given back: each takes it back
    // by its own rule, and the key lives as long as the longest of them needs.
    let (mut changed, mut keep_ns) = (refunded.changed, refunded.after.reset_after_ns);
    if let AlgoState::Remembered(remembered) = &mut limiter.state {
        for (policy, state) in remembered.others.iter_mut() {
            let policy = *policy;
            let other = state.visit(Settle { policy, now_ns, n });
            changed |= other.changed;
            keep_ns = keep_ns.max(other.after.reset_after_ns);
        }
    }
    // A key holding a region's share lives until the share's expiry.
    keep_ns = keep_ns.max(super::share::keep_ns(limiter, now_ns));
    metrics::note(metrics::Outcome::Call);
    metrics::refunded(refunded.given);
    super::share::count_settled(limiter, -1, refunded.given);
    if changed || moved {
        // Changed in place (a sliding log shrinks): the gauges follow.
        metrics::limiter_changed(before, limiter);
        let expire_at_ms =
            effect::commit(ctx, name, effect::Commit::State(limiter), now_ns, keep_ns);
        key.expire_at(Some(expire_at_ms));
    }
    Ok(Reply::decision(&Decision {
        allowed: refunded.given,
        ..refunded.after
    }))
}

/// What a refund did.
struct Refunded {
    /// How much `remaining` rose: the tokens actually given back.
    given: u64,
    /// A peek after the refund.
    after: Decision,
    changed: bool,
}

/// Applies the algorithm's pure `refund` to the stored state, judged by the algorithm's own
/// peek before and after (and by what the debt shrank, `algo::settle`), so every algorithm
/// reports "given back" the same way.
struct Settle {
    policy: Policy,
    now_ns: u64,
    n: u64,
}

impl Visit for Settle {
    type Out = Refunded;

    fn visit<A: Stored>(self, state: &mut A) -> Refunded {
        let Settle { policy, now_ns, n } = self;
        let before = A::check(Some(state), &policy, now_ns, 0).decision.remaining;
        let next = settle::refund(state, &policy, now_ns, n);
        let after = A::check(Some(&next.state), &policy, now_ns, 0).decision;
        let changed = next.state != *state;
        if changed {
            *state = next.state;
        }
        // A debt (after `RL.CHARGE`) shrinks while `remaining` stays 0: what it moved counts.
        Refunded {
            given: after
                .remaining
                .saturating_sub(before)
                .max(next.moved)
                .min(n),
            after,
            changed,
        }
    }
}
