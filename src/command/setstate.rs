//! `RL.SETSTATE key <state> [PXAT ms]` — stores an encoded limiter state with an absolute expiry.
//!
//! This is how decisions reach replicas and the AOF (as effects, never re-decided), and what the
//! AOF rewrite emits. The state is validated exactly like an RDB load. Clients have no reason to
//! call it; production ACLs should deny it to gateway users (`-rl.setstate`).

use super::args::parse_u64;
use super::{Args, Ctx, Reply};
use crate::error::{echo, Error};
use crate::state::Limiter;

/// The largest PXAT accepted: year 33658, far beyond any limiter's reset.
const MAX_PXAT_MS: u64 = 1_000_000_000_000_000;

pub fn set_state(ctx: &Ctx, mut args: Args<'_>) -> Result<Reply, Error> {
    let name = args.next_string()?;
    let limiter = match Limiter::decode(args.next_bytes()?) {
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
        2 => {
            let option = args.next_bytes()?;
            if !option.eq_ignore_ascii_case(b"PXAT") {
                return Err(Error::Syntax("expected PXAT <unix-time-ms>".into()));
            }
            Some(parse_u64("PXAT", args.next_bytes()?, 1, MAX_PXAT_MS)?)
        }
        _ => return Err(Error::Syntax("expected PXAT <unix-time-ms>".into())),
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
