//! `RL.SETSTATE key <effect>` — applies an effect: a limiter state, or a sliding log's delta,
//! with the key's absolute expiry, in one argument (see `state::delta`'s effect envelope). A
//! delta applies to the state the key holds, or is refused, the key untouched, if that is not the
//! state it was made on.
//! `RL.SETSTATE key <state> [PXAT ms]` — stores an encoded limiter state with an absolute expiry
//! (or none): what the AOF rewrite emits, and the effect of earlier versions.
//!
//! This is how decisions reach replicas and the AOF (as effects, never re-decided). The state is
//! validated exactly like an RDB load. Clients have no reason to call it; production ACLs should
//! deny it to gateway users (`-rl.setstate`). Deltas are a form of this command rather than one
//! of their own so that this one ACL rule covers them.

use super::args::parse_u64;
use super::reply::Reply;
use crate::error::{echo, Error};
use crate::host::call::{Args, Ctx, RString};
use crate::metrics;
use crate::state::effect::Effect;
use crate::state::replay::apply_delta;
use crate::state::Limiter;

/// The largest PXAT accepted: year 33658, far beyond any limiter's reset.
const MAX_PXAT_MS: u64 = 1_000_000_000_000_000;

/// Every refusal is logged with the key and the reason: in an AOF being loaded or on a replica,
/// a refused line drops or keeps stale that key's limit, and nobody sees the error reply.
pub fn set_state(ctx: &Ctx, mut args: Args<'_>) -> Result<Reply, Error> {
    let name = args.next_string()?;
    set(ctx, name, args).inspect_err(|e| {
        ctx.log_warning(&format!(
            "RL.SETSTATE refused for key '{}': {e}",
            echo(name.bytes())
        ));
    })
}

fn set(ctx: &Ctx, name: RString<'_>, mut args: Args<'_>) -> Result<Reply, Error> {
    let bytes = args.next_bytes()?;
    match Effect::parse(bytes) {
        Some(Effect::State {
            state,
            expire_at_ms,
        }) => {
            let limiter = decode(state)?;
            args.done()?;
            store(ctx, name, limiter, Some(in_range(expire_at_ms)?))
        }
        Some(Effect::Delta {
            delta,
            expire_at_ms,
        }) => {
            args.done()?;
            set_delta(ctx, name, delta, in_range(expire_at_ms)?)
        }
        None => {
            let limiter = decode(bytes)?;
            let expire_at = match args.remaining() {
                0 => None,
                _ => Some(pxat(&mut args)?),
            };
            args.done()?;
            store(ctx, name, limiter, expire_at)
        }
    }
}

/// Decodes a state (a refusal is logged by [`set_state`]).
fn decode(state: &[u8]) -> Result<Limiter, Error> {
    Limiter::decode(state)
}

fn store(
    ctx: &Ctx,
    name: RString<'_>,
    limiter: Limiter,
    expire_at: Option<u64>,
) -> Result<Reply, Error> {
    let mut key = ctx.open(name, true);
    // Replaces a limiter of any algorithm, never a value of another type.
    key.limiter("")?;
    key.store(limiter)?;
    key.expire_at(expire_at);
    // Deterministic (absolute expiry): safe to pass on as it came.
    ctx.replicate_verbatim();
    ctx.changed(name);
    Ok(Reply::Ok)
}

/// `PXAT <ms>`, the last two arguments.
fn pxat(args: &mut Args<'_>) -> Result<u64, Error> {
    if args.remaining() != 2 {
        return Err(Error::Syntax("expected PXAT <unix-time-ms>".into()));
    }
    let option = args.next_bytes()?;
    if !option.eq_ignore_ascii_case(b"PXAT") {
        return Err(Error::Syntax("expected PXAT <unix-time-ms>".into()));
    }
    parse_u64("PXAT", args.next_bytes()?, 1, MAX_PXAT_MS)
}

/// An effect's expiry, within the bounds `PXAT` has.
fn in_range(expire_at_ms: u64) -> Result<u64, Error> {
    if (1..=MAX_PXAT_MS).contains(&expire_at_ms) {
        Ok(expire_at_ms)
    } else {
        Err(Error::BadState("effect expiry out of range"))
    }
}

/// A delta applies to the sliding log the key holds, or is refused with the key untouched
/// (missing key, another algorithm or type, another state, a change that does not fit).
fn set_delta(ctx: &Ctx, name: RString<'_>, delta: &[u8], expire_at: u64) -> Result<Reply, Error> {
    let mut key = ctx.open(name, true);
    let applied = match key.limiter("sliding log") {
        Err(e) => Err(e),
        Ok(Some(limiter)) => {
            let before = metrics::Footprint::of(limiter);
            apply_delta(delta, limiter)?;
            metrics::limiter_changed(before, limiter);
            Ok(())
        }
        Ok(None) => Err(Error::BadState("delta for a missing key")),
    };
    // A refusal (logged by `set_state`): on a replica or an AOF load that key no longer
    // matches the master's, until its next full state.
    applied?;
    key.expire_at(Some(expire_at));
    ctx.replicate_verbatim();
    ctx.changed(name);
    Ok(Reply::Ok)
}
