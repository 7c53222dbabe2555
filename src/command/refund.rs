//! `RL.REFUND key n` — gives back n unspent tokens (a lease that lapsed unspent, a reservation
//! settled for less) under the policy stored in the key, never above its capacity.
//!
//! Reply: nil when the key does not exist (nothing to give back to; nothing is created).
//! Otherwise the five integers, field 1 = tokens actually given back (how much `remaining` rose:
//! at most n, less when the limiter filled up), fields 2–5 as a peek (`COST 0`) answers after the
//! refund. A refund that changes the state propagates it as an effect with its absolute expiry;
//! one that changes nothing (the limiter was already full) writes and propagates nothing.

use super::args::Args;
use super::decide::{persist_effect, Algorithm};
use super::fixed_window::RlFixedWindow;
use super::gcra::RlGcra;
use super::key::Key;
use super::sliding_counter::RlSlidingCounter;
use super::sliding_log::RlSlidingLog;
use super::token_bucket::RlTokenBucket;
use super::{Command, Ctx, KeyAccess, Reply};
use crate::algo::{
    fixed_window, gcra, sliding_counter, sliding_log, token_bucket, Decision, Policy, MAX_LIMIT,
};
use crate::clock;
use crate::error::Error;
use crate::state::AlgoState;

pub struct RlRefund;

impl Command for RlRefund {
    const NAME: &'static str = "RL.REFUND";
    const FLAGS: &'static str = "write deny-oom fast";
    const ARITY: i32 = 3;
    const KEY: KeyAccess = KeyAccess::ReadWrite;
    const SUMMARY: &'static str =
        "Gives back n unspent tokens to the limiter at key, never above its capacity";

    fn run(ctx: Ctx, mut args: Args<'_>) -> Result<Reply, Error> {
        let name = args.next_string()?;
        let n = args.next_u64("n", 1, MAX_LIMIT)?;
        args.done()?;
        let now_ns = clock::now_ns();
        let mut key = Key::open(ctx, name, true);
        let Some(limiter) = key.limiter("rate")? else {
            return Ok(Reply::Null);
        };
        let policy = limiter.policy;
        let refunded = match &mut limiter.state {
            AlgoState::Gcra(s) => settle::<RlGcra>(s, &policy, now_ns, n, gcra::refund),
            AlgoState::TokenBucket(s) => {
                settle::<RlTokenBucket>(s, &policy, now_ns, n, token_bucket::refund)
            }
            AlgoState::FixedWindow(s) => {
                settle::<RlFixedWindow>(s, &policy, now_ns, n, fixed_window::refund)
            }
            AlgoState::SlidingCounter(s) => {
                settle::<RlSlidingCounter>(s, &policy, now_ns, n, sliding_counter::refund)
            }
            AlgoState::SlidingLog(s) => {
                settle::<RlSlidingLog>(s, &policy, now_ns, n, sliding_log::refund)
            }
        };
        if refunded.changed {
            persist_effect(ctx, &mut key, name, now_ns, &refunded.after)?;
        }
        Ok(Reply::decision(&Decision {
            allowed: refunded.given,
            ..refunded.after
        }))
    }
}

/// What a refund did.
struct Refunded {
    /// How much `remaining` rose: the tokens actually given back.
    given: u64,
    /// A peek after the refund.
    after: Decision,
    changed: bool,
}

/// Applies one algorithm's pure `refund` to the stored state, judged by the algorithm's own
/// peek before and after, so every algorithm reports "given back" the same way.
fn settle<A: Algorithm>(
    state: &mut A::State,
    policy: &Policy,
    now_ns: u64,
    n: u64,
    refund: fn(&A::State, &Policy, u64, u64) -> A::State,
) -> Refunded
where
    A::State: PartialEq,
{
    let before = A::check(Some(state), policy, now_ns, 0).decision.remaining;
    let next = refund(state, policy, now_ns, n);
    let after = A::check(Some(&next), policy, now_ns, 0).decision;
    let changed = next != *state;
    if changed {
        *state = next;
    }
    Refunded {
        given: after.remaining.saturating_sub(before).min(n),
        after,
        changed,
    }
}
