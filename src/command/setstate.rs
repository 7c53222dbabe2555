//! `RL.SETSTATE key <state> [PXAT ms]` — stores an encoded limiter state with an absolute expiry.
//!
//! This is how decisions reach replicas and the AOF (as effects, never re-decided), and what the
//! AOF rewrite emits. The state is validated exactly like an RDB load. Clients have no reason to
//! call it; production ACLs should deny it to gateway users (`-rl.setstate`).

use super::args::{parse_u64, Args};
use super::key::Key;
use super::{Command, Ctx, KeyAccess, Reply};
use crate::error::Error;
use crate::state::Limiter;

/// The largest PXAT accepted: year 33658, far beyond any limiter's reset.
const MAX_PXAT_MS: u64 = 1_000_000_000_000_000;

pub struct RlSetState;

impl Command for RlSetState {
    const NAME: &'static str = "RL.SETSTATE";
    const FLAGS: &'static str = "write deny-oom";
    const ARITY: i32 = -3;
    const KEY: KeyAccess = KeyAccess::Overwrite;
    const SUMMARY: &'static str = "Internal: stores a limiter state (replication and AOF effects)";

    fn run(ctx: Ctx, mut args: Args<'_>) -> Result<Reply, Error> {
        let name = args.next_string()?;
        let limiter = Limiter::decode(args.next_bytes()?)?;
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
        let mut key = Key::open(ctx, name, true);
        key.store(limiter)?;
        key.expire_at(expire_at);
        // Deterministic (absolute expiry): safe to pass on as it came.
        // SAFETY: ctx is the live context of this command.
        unsafe {
            if let Some(verbatim) = redis_module::raw::RedisModule_ReplicateVerbatim {
                verbatim(ctx.0);
            }
        }
        Ok(Reply::Ok)
    }
}
