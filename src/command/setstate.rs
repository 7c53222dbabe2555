//! `RL.SETSTATE key <state> [PXAT ms]` — stores an encoded limiter state with an absolute expiry.
//! `RL.SETSTATE key DELTA <delta> PXAT ms` — applies a sliding log's delta to the state the key
//! holds (see `state::delta`), or refuses it, the key untouched, if that is not the state the
//! delta was made on.
//!
//! This is how decisions reach replicas and the AOF (as effects, never re-decided), and what the
//! AOF rewrite emits. The state is validated exactly like an RDB load. Clients have no reason to
//! call it; production ACLs should deny it to gateway users (`-rl.setstate`).
//!
//! The delta is a form of this command rather than a command of its own so that the one ACL rule
//! operators already have (`-rl.setstate`) covers it, and the replication stream keeps one
//! internal command; a state's first byte (its format version) can never be the word `DELTA`.

use super::args::parse_u64;
use super::{Args, Ctx, RString, Reply};
use crate::error::{echo, Error};
use crate::state::delta::Delta;
use crate::state::Limiter;

/// The largest PXAT accepted: year 33658, far beyond any limiter's reset.
const MAX_PXAT_MS: u64 = 1_000_000_000_000_000;

pub fn set_state(ctx: &Ctx, mut args: Args<'_>) -> Result<Reply, Error> {
    let name = args.next_string()?;
    let state = args.next_bytes()?;
    if state.eq_ignore_ascii_case(b"DELTA") {
        return set_delta(ctx, name, args);
    }
    let limiter = match Limiter::decode(state) {
        Ok(limiter) => limiter,
        Err(e) => {
            // In an AOF being loaded, a refused line drops that key's limit: say which and why.
            ctx.log_warning(&format!(
                "RL.SETSTATE refused for key '{}': {e}",
                echo(name.bytes())
            ));
            return Err(e);
        }
    };
    let expire_at = match args.remaining() {
        0 => None,
        _ => Some(pxat(&mut args)?),
    };
    args.done()?;
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

/// `RL.SETSTATE key DELTA <delta> PXAT ms`: the delta applies to the sliding log the key holds,
/// or is refused with the key untouched (missing key, another algorithm or type, another state,
/// a change that does not fit). A refusal is logged: on a replica or an AOF load it means that
/// key no longer matches the master's, until its next full state.
fn set_delta(ctx: &Ctx, name: RString<'_>, mut args: Args<'_>) -> Result<Reply, Error> {
    let delta = args.next_bytes()?;
    let expire_at = pxat(&mut args)?;
    args.done()?;
    let mut key = ctx.open(name, true);
    let applied = Delta::decode(delta).and_then(|delta| match key.limiter("sliding log")? {
        Some(limiter) => delta.apply(limiter),
        None => Err(Error::BadState("delta for a missing key")),
    });
    if let Err(e) = applied {
        ctx.log_warning(&format!(
            "RL.SETSTATE DELTA refused for key '{}': {e}",
            echo(name.bytes())
        ));
        return Err(e);
    }
    key.expire_at(Some(expire_at));
    ctx.replicate_verbatim();
    ctx.changed(name);
    Ok(Reply::Ok)
}
