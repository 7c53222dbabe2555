//! The limiter commands. `RL.<ALGORITHM> key L W [BURST B] [COST n]` decides one request with
//! that algorithm; `RL.LEASE key L W [BURST B] WANT n` is the token bucket with another
//! decision: it grants `min(n, available)` tokens for a gateway to spend locally (0 and the time
//! until one token is there when the bucket is empty).

use std::sync::atomic::Ordering;

use super::args::{parse_request, Amount, Options, Request};
use super::effect;
use super::reply::Reply;
use super::share;
use crate::algo::step::{step, Held, Step};
use crate::algo::{
    lease, sliding_log::MAX_LOG_LIMIT, token_bucket::TokenBucket, Decision, Outcome, Policy,
};
use crate::clock;
use crate::error::Error;
use crate::host::call::{Args, Ctx, Key, RString};
use crate::metrics;
use crate::state::{Limiter, Stored};

/// `RL.GCRA`, `RL.TOKENBUCKET`, `RL.SLIDINGLOG`, `RL.SLIDINGCOUNTER`, `RL.FIXEDWINDOW`.
pub fn request<A: Stored>(ctx: &Ctx, args: Args<'_>) -> Result<Reply, Error> {
    let options = Options {
        burst: A::BURST,
        amount: Amount::Cost,
    };
    let request = parse_request(args, options)?;
    let cost = request.amount;
    let decision = decide::<A>(
        ctx,
        &request,
        true,
        |state, policy, now_ns| A::check(state, policy, now_ns, cost),
        |d| admitted_cost(d, cost),
    )?;
    Ok(Reply::decision(&decision))
}

/// `RL.LEASE key L W [BURST B] WANT n`: field 1 of the reply is the number of tokens granted.
pub fn lease(ctx: &Ctx, args: Args<'_>) -> Result<Reply, Error> {
    let options = Options {
        burst: true,
        amount: Amount::Want,
    };
    let request = parse_request(args, options)?;
    let want = request.amount;
    let decision = decide::<TokenBucket>(
        ctx,
        &request,
        false,
        |state, policy, now_ns| lease::lease(state, policy, now_ns, want),
        |d| d.allowed,
    )?;
    metrics::leased(want, decision.allowed);
    Ok(Reply::decision(&decision))
}

/// Load, decide, persist and propagate: the steps every limiter command shares. `decision` is
/// the algorithm's decision on the state the request starts from (see `algo::step` for which
/// state that is, and when a denied request still stores a new policy). `check` says that
/// `decision` is the algorithm's `check` with the request's amount as its cost, so that
/// [`Stored::check_in_place`] may stand in for it. What a decision spent is charged to the
/// other configurations the key remembers: its `allowed` for a lease (the tokens granted), the
/// request's amount for an admitted request.
///
/// A key holding a region's share (`share::prepare`) is decided under the request's policy
/// scaled to the share, its state carried over, and counts what it was asked and admitted.
pub fn decide<A: Stored>(
    ctx: &Ctx,
    request: &Request<'_>,
    check: bool,
    decision: impl FnOnce(Option<&A>, &Policy, u64) -> Outcome<A>,
    spent: impl Fn(&Decision) -> u64,
) -> Result<Decision, Error> {
    accepts::<A>(&request.policy)?;
    let now_ns = clock::now_ns();
    let peek = request.amount == 0;
    if peek {
        metrics::note(metrics::Outcome::Peek);
    }
    // A peek opens read-only: it can neither create nor change the key.
    let mut key = ctx.open(request.key, !peek);
    let mut stored = key.limiter(A::NAME)?;
    let (policy, moved) = match stored.as_deref_mut() {
        Some(limiter) => share::prepare::<A>(limiter, &request.policy, now_ns, peek)?,
        None => (request.policy, false),
    };
    if policy != request.policy {
        // A share larger than the caller's L: the log bound holds for it too.
        accepts::<A>(&policy)?;
    }
    // A request under the policy the key already holds, with no other configuration: `step`
    // would start from this state and store its successor with the decision's reset_after as
    // the key's life, so the successor is written where the state is (no new value, no second
    // look at the key). An algorithm that decides in place (the sliding log) changes only what
    // the request touches and sends a delta, in time and bytes independent of the log's length;
    // the others send their state whole. Everything else (a first write, a policy change, a
    // peek) takes the general path below.
    if let Some(limiter) = stored.as_deref_mut() {
        if !peek && limiter.others().is_empty() && limiter.policy == policy {
            let before = metrics::Footprint::of(limiter);
            let share_ns = share::keep_ns(limiter, now_ns);
            let Some(state) = A::of_mut(&mut limiter.state) else {
                return Err(wrong_type::<A>(limiter));
            };
            // Only under a share: a cost above the share's capacity waits for the share to move.
            let (decision, changed) = if check && request.amount > policy.capacity() {
                let peeked = A::check(Some(state), &policy, now_ns, 0).decision;
                let denied = Decision {
                    allowed: 0,
                    retry_after_ns: Some(share_ns.max(1)),
                    ..peeked
                };
                (denied, false)
            } else if let Some((decision, delta)) = check
                .then(|| state.check_in_place(&policy, now_ns, request.amount))
                .flatten()
            {
                match delta {
                    Some(delta) if !moved => {
                        metrics::limiter_changed(before, limiter);
                        let keep = decision.reset_after_ns.max(share_ns);
                        let what = effect::Commit::Delta(&delta);
                        let at = effect::commit(ctx, request.key, what, now_ns, keep);
                        share::count(limiter, request.amount, spent(&decision));
                        key.expire_at(Some(at));
                        return Ok(decision);
                    }
                    delta => (decision, delta.is_some()),
                }
            } else {
                let Outcome { decision, next } = decision(Some(state), &policy, now_ns);
                let changed = next.is_some();
                if let Some(next) = next {
                    *state = next;
                }
                (decision, changed)
            };
            share::count(limiter, request.amount, spent(&decision));
            if changed || moved {
                metrics::limiter_changed(before, limiter);
                let keep = decision.reset_after_ns.max(share_ns);
                let what = effect::Commit::State(limiter);
                let at = effect::commit(ctx, request.key, what, now_ns, keep);
                key.expire_at(Some(at));
            }
            return Ok(decision);
        }
    }
    // A key that remembers other configurations, admitted under the one it holds as current:
    // in place too where its algorithm has that path (see [`admit_remembering`]).
    if let Some(limiter) = stored.as_deref_mut() {
        let remembering = !limiter.others().is_empty() && A::of(&limiter.state).is_some();
        if check && !peek && limiter.policy == request.policy && remembering {
            let (name, amount) = (request.key, request.amount);
            if let Some((decision, at)) = admit_remembering::<A>(ctx, limiter, name, now_ns, amount)
            {
                if at.is_some() {
                    key.expire_at(at);
                }
                return Ok(decision);
            }
        }
    }
    let others = stored.as_deref().map(Limiter::others_of::<A>);
    let held = match &stored {
        Some(limiter) => Some((limiter.policy, of::<A>(limiter)?)),
        None => None,
    };
    let Step {
        decision,
        store: kept,
    } = step(
        held.as_ref().map(|(policy, state)| Held {
            policy,
            state: *state,
            others: others.as_deref().unwrap_or(&[]),
        }),
        &policy,
        now_ns,
        peek,
        |state| decision(state, &policy, now_ns),
        spent,
    );
    if let Some(kept) = kept {
        let keep_ns = kept.keep_ns;
        let limiter = key.store(Limiter::kept(kept))?;
        let what = effect::Commit::State(limiter);
        let expire_at_ms = effect::commit(ctx, request.key, what, now_ns, keep_ns);
        key.expire_at(Some(expire_at_ms));
    }
    Ok(decision)
}

/// A request of `cost` under the policy a key that remembers other configurations holds as
/// current, in place: every configuration charged and one delta sent for all of them (see
/// [`Stored::admit_remembered`], the sliding log's), where `step` would copy and send every log.
/// None where that path does not apply (`step` decides); else the decision and, when admitted,
/// the key's new expiry. Out of line: the admit of a key with one configuration does not carry
/// it.
#[inline(never)]
fn admit_remembering<A: Stored>(
    ctx: &Ctx,
    limiter: &mut Limiter,
    name: RString<'_>,
    now_ns: u64,
    cost: u64,
) -> Option<(Decision, Option<u64>)> {
    let before = metrics::Footprint::of(limiter);
    let (decision, admitted) = A::admit_remembered(limiter, now_ns, cost)?;
    let at = admitted.map(|(delta, keep_ns)| {
        metrics::limiter_changed(before, limiter);
        effect::commit(ctx, name, effect::Commit::Charged(&delta), now_ns, keep_ns)
    });
    Some((decision, at))
}

/// What an admitted request of `cost` spent (nothing when denied): `decide`'s `spent` for
/// every command whose `allowed` is 1 or 0.
pub fn admitted_cost(decision: &Decision, cost: u64) -> u64 {
    if decision.allowed == 0 {
        0
    } else {
        cost
    }
}

/// The state of algorithm `A` in a stored limiter; WRONGTYPE naming what it holds otherwise.
pub fn of<A: Stored>(limiter: &Limiter) -> Result<&A, Error> {
    A::of(&limiter.state).ok_or_else(|| wrong_type::<A>(limiter))
}

pub fn wrong_type<A: Stored>(limiter: &Limiter) -> Error {
    Error::WrongType {
        holds: format!("a {} limiter", limiter.state.name()),
        wanted: A::NAME,
        key: None,
    }
}

/// Stores `state` with `policy` in the key.
pub fn store<'k, A: Stored>(
    key: &'k mut Key<'_>,
    policy: Policy,
    state: A,
) -> Result<&'k mut Limiter, Error> {
    key.store(Limiter::new(policy, state.wrap()))
}

/// Refuses a policy whose stored state would hold more entries than `ratelimit.max-log-entries`
/// (read at each call, so `CONFIG SET` applies at once). Checked before the key is opened.
pub fn accepts<A: Stored>(policy: &Policy) -> Result<(), Error> {
    let entries = A::entries(policy);
    if entries == 0 {
        return Ok(());
    }
    let config = crate::config::MAX_LOG_ENTRIES.load(Ordering::Relaxed);
    let max = u64::try_from(config).unwrap_or(0).min(MAX_LOG_LIMIT);
    if entries > max {
        return Err(Error::LogTooLong {
            limit: policy.limit(),
            max,
        });
    }
    Ok(())
}
