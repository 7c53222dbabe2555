//! The limiter commands. `RL.<ALGORITHM> key L W [BURST B] [COST n]` decides one request with
//! that algorithm; `RL.LEASE key L W [BURST B] WANT n` is the token bucket with another
//! decision: it grants `min(n, available)` tokens for a gateway to spend locally (0 and the time
//! until one token is there when the bucket is empty).

use std::sync::atomic::Ordering;

use super::args::{parse_request, Amount, Options, Request};
use super::effect;
use super::reply::Reply;
use crate::algo::step::{step, Held, Step};
use crate::algo::{
    lease, sliding_log::MAX_LOG_LIMIT, token_bucket::TokenBucket, Decision, Outcome, Policy,
};
use crate::clock;
use crate::error::Error;
use crate::host::call::Key;
use crate::host::call::{Args, Ctx};
use crate::metrics;
use crate::state::{Limiter, Stored};

/// `RL.GCRA`, `RL.TOKENBUCKET`, `RL.SLIDINGLOG`, `RL.SLIDINGCOUNTER`, `RL.FIXEDWINDOW`.
pub fn request<A: Stored>(ctx: &Ctx, args: Args<'_>) -> Result<Reply, Error> {
    let options = Options {
        burst: A::BURST,
        amount: Amount::Cost,
    };
    let request = parse_request(args, options)?;
    let (policy, cost) = (request.policy, request.amount);
    let decision = decide::<A>(
        ctx,
        &request,
        true,
        |state, now_ns| A::check(state, &policy, now_ns, cost),
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
    let (policy, want) = (request.policy, request.amount);
    let decision = decide::<TokenBucket>(
        ctx,
        &request,
        false,
        |state, now_ns| lease::lease(state, &policy, now_ns, want),
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
pub fn decide<A: Stored>(
    ctx: &Ctx,
    request: &Request<'_>,
    check: bool,
    decision: impl FnOnce(Option<&A>, u64) -> Outcome<A>,
    spent: impl FnOnce(&Decision) -> u64,
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
    // A request under the policy the key already holds, with no other configuration: `step`
    // would start from this state and store its successor with the decision's reset_after as
    // the key's life, so the successor is written where the state is (no new value, no second
    // look at the key). An algorithm that decides in place (the sliding log) changes only what
    // the request touches and sends a delta, in time and bytes independent of the log's length;
    // the others send their state whole. Everything else (a first write, a policy change, a
    // peek) takes the general path below.
    if let Some(limiter) = stored.as_deref_mut() {
        if !peek && limiter.others().is_empty() && limiter.policy == request.policy {
            let (policy, before) = (limiter.policy, metrics::Footprint::of(limiter));
            let Some(state) = A::of_mut(&mut limiter.state) else {
                return Err(wrong_type::<A>(limiter));
            };
            if check {
                if let Some((decision, delta)) =
                    state.check_in_place(&policy, now_ns, request.amount)
                {
                    if let Some(delta) = delta {
                        metrics::limiter_changed(before, limiter);
                        let at =
                            effect::propagate_delta(ctx, request.key, &delta, now_ns, &decision);
                        key.expire_at(Some(at));
                    }
                    return Ok(decision);
                }
            }
            let Outcome { decision, next } = decision(Some(state), now_ns);
            if let Some(next) = next {
                *state = next;
                metrics::limiter_changed(before, limiter);
                let at =
                    effect::propagate(ctx, request.key, limiter, now_ns, decision.reset_after_ns);
                key.expire_at(Some(at));
            }
            return Ok(decision);
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
        &request.policy,
        now_ns,
        peek,
        |state| decision(state, now_ns),
        spent,
    );
    if let Some(kept) = kept {
        let keep_ns = kept.keep_ns;
        let limiter = key.store(Limiter::kept(request.policy, kept))?;
        let expire_at_ms = effect::propagate(ctx, request.key, limiter, now_ns, keep_ns);
        key.expire_at(Some(expire_at_ms));
    }
    Ok(decision)
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

fn wrong_type<A: Stored>(limiter: &Limiter) -> Error {
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
