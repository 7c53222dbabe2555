//! `RL.CONCURRENCY key N TTL ACQUIRE id | RENEW id | RELEASE id | PEEK` — at most N requests
//! in flight per key (see `algo::concurrency` and docs/concurrency.md). N from 1 to
//! `MAX_HOLDERS`; TTL in milliseconds, like W; `id` the caller's name for the request (a
//! request id), 1 to `MAX_ID_BYTES` bytes.
//!
//! Reply: the five integers of every limiter command. `allowed`: 1 when ACQUIRE took or renewed
//! a slot, RENEW renewed one, RELEASE gave one back, or PEEK would be admitted; 0 otherwise.
//! `limit` N, `remaining` the free slots after the call, `retry_after_ms` -1 when allowed, else
//! the time until an ACQUIRE by a new id would be admitted (0: now, for a RENEW or RELEASE of an
//! id that holds nothing), `reset_after_ms` until every slot is free.
//!
//! A call that changes the holders stores them with the call's N and TTL (a key shows the
//! policy of its last change). An ACQUIRE or RENEW propagates them whole, with their absolute
//! expiries; a RELEASE, the same change on any clock, propagates itself. PEEK, a denial and a
//! RENEW or RELEASE that finds nothing write nothing. The key lives until its last holder
//! expires (at least `effect::MIN_TTL_MS`); a RELEASE leaves its expiry as it is.
//!
//! `RL.ALL` takes `CONCURRENCY N TTL ACQUIRE id` (or `PEEK`) as one of its limiters: [`plan`]
//! and [`commit`] are its steps.

use super::args::policy;
use super::effect::{self, Commit};
use super::key::of;
use super::reply::Reply;
use crate::algo::concurrency::{holder_id, operate, Concurrency, Op, MAX_HOLDERS, MAX_ID_BYTES};
use crate::algo::{Algorithm, Decision, Outcome, Policy, MAX_WINDOW_MS};
use crate::clock;
use crate::error::{echo, Error};
use crate::host::call::{Args, Ctx, Key, RString};
use crate::metrics;
use crate::state::{Limiter, Stored};

pub fn concurrency(ctx: &Ctx, mut args: Args<'_>) -> Result<Reply, Error> {
    let name = args.next_string()?;
    let (policy, op) = parse(&mut args)?;
    args.done()?;
    let now_ns = clock::now_ns();
    match op {
        Op::Peek => metrics::note(metrics::Outcome::Peek),
        Op::Renew(_) | Op::Release(_) => metrics::note(metrics::Outcome::Call),
        Op::Acquire(_) => {}
    }
    let mut key = ctx.open(name, op != Op::Peek);
    let Some(limiter) = key.limiter(Concurrency::NAME)? else {
        let planned = plan(None, &policy, now_ns, op)?;
        return Ok(Reply::decision(&commit(
            ctx, &mut key, name, planned, true, now_ns,
        )?));
    };
    // The key's own holders, changed where they are: no new value, one allocation at most.
    let before = metrics::Footprint::of(limiter);
    of::<Concurrency>(limiter)?;
    let state = Concurrency::of_mut(&mut limiter.state).ok_or(Error::Internal)?;
    let (decision, changed) = state.apply(&policy, now_ns, op);
    if changed {
        limiter.policy = policy;
        metrics::limiter_changed(before, limiter);
        if let Op::Release(_) = op {
            // The same change on any clock (`Concurrency::release`, the policy from the
            // arguments): replicas and the AOF run this RELEASE themselves, which costs about
            // 3,500 instructions less than an effect, a fifth of an ACQUIRE + RELEASE pair
            // (`RM_Replicate` looks its command up by name on every call). The key's expiry
            // stays: it already outlives every holder.
            ctx.replicate_verbatim();
            ctx.changed(name);
        } else {
            // The holders carry absolute expiries: a replica or an AOF replay frees each slot
            // at the same instant as the master.
            let keep_ns = decision.reset_after_ns;
            let at = effect::commit(ctx, name, Commit::State(limiter), now_ns, keep_ns);
            key.expire_at(Some(at));
        }
    }
    Ok(Reply::decision(&decision))
}

/// `N TTL ACQUIRE id | RENEW id | RELEASE id | PEEK`, after the key: the policy (N, TTL, N) and
/// the operation, the id as its digest. Stops after the operation (the caller checks the rest).
pub fn parse(args: &mut Args<'_>) -> Result<(Policy, Op), Error> {
    let n = args.next_u64("N", 1, MAX_HOLDERS)?;
    let ttl_ms = args.next_u64("TTL", 1, MAX_WINDOW_MS)?;
    let policy = policy(n, ttl_ms, n)?;
    if args.remaining() == 0 {
        return Err(Error::Syntax(
            "expected ACQUIRE id, RENEW id, RELEASE id or PEEK after TTL".into(),
        ));
    }
    // Each argument's bytes asked for once: this is on every call's path.
    let word = args.next_bytes()?;
    if word.eq_ignore_ascii_case(b"PEEK") {
        return Ok((policy, Op::Peek));
    }
    let make: fn(u64) -> Op = if word.eq_ignore_ascii_case(b"ACQUIRE") {
        Op::Acquire
    } else if word.eq_ignore_ascii_case(b"RENEW") {
        Op::Renew
    } else if word.eq_ignore_ascii_case(b"RELEASE") {
        Op::Release
    } else {
        return Err(Error::Syntax(format!(
            "unknown operation '{}'; expected ACQUIRE, RENEW, RELEASE or PEEK",
            echo(word)
        )));
    };
    if args.remaining() == 0 {
        return Err(Error::Syntax(format!(
            "{} needs the holder's id",
            String::from_utf8_lossy(word).to_ascii_uppercase()
        )));
    }
    let id = args.next_bytes()?;
    if id.is_empty() || id.len() > MAX_ID_BYTES {
        return Err(Error::Syntax(format!(
            "invalid id of {} bytes: expected 1 to {MAX_ID_BYTES} bytes",
            id.len()
        )));
    }
    Ok((policy, make(holder_id(id))))
}

/// What one call would do to one concurrency key, before anything is written.
pub struct Plan {
    pub decision: Decision,
    /// The answer when the call is not carried out (`RL.ALL`, another limiter denied): the key
    /// as it stands, `allowed` whether this call would have been.
    uncharged: Decision,
    /// The limiter to store when it is (None: the call changes nothing).
    next: Option<Limiter>,
}

/// Decides `op` on the holders the key holds (WRONGTYPE for another algorithm), under the
/// caller's N and TTL, writing nothing.
pub fn plan(stored: Option<&Limiter>, policy: &Policy, now_ns: u64, op: Op) -> Result<Plan, Error> {
    let state = stored.map(of::<Concurrency>).transpose()?;
    let Outcome { decision, next } = operate(state, policy, now_ns, op);
    let uncharged = match next {
        Some(_) => Decision {
            allowed: decision.allowed,
            retry_after_ns: None,
            ..operate(state, policy, now_ns, Op::Peek).decision
        },
        None => decision,
    };
    Ok(Plan {
        decision,
        uncharged,
        next: next.map(|s| Limiter::new(*policy, s.wrap())),
    })
}

/// Stores and propagates what `plan`, made on `key` (named `name`) in this call, says when
/// `carry` (the call goes ahead); answers its decision, or, when not carried, the uncharged one.
pub fn commit(
    ctx: &Ctx,
    key: &mut Key<'_>,
    name: RString<'_>,
    plan: Plan,
    carry: bool,
    now_ns: u64,
) -> Result<Decision, Error> {
    let Plan {
        decision,
        uncharged,
        next,
    } = plan;
    if !carry {
        return Ok(uncharged);
    }
    if let Some(limiter) = next {
        let stored = key.store(limiter)?;
        // The key lives until its last holder expires: the holders carry absolute expiries, so
        // a replica or an AOF replay frees each slot at the same instant as the master.
        let at = effect::commit(
            ctx,
            name,
            Commit::State(stored),
            now_ns,
            decision.reset_after_ns,
        );
        key.expire_at(Some(at));
    }
    Ok(decision)
}
