//! `RL.DEBUG CLOCK SET <ms> | ADVANCE <ms> | REAL | GET` — pins or moves the module's clock.
//! `RL.DEBUG PANIC` — panics inside the handler, to test the panic guard.
//! Refused unless the module was loaded with `DEBUG-CLOCK yes`. Replies with the clock in ms.

use super::args::{parse_i64, parse_u64};
use super::reply::Reply;
use crate::clock::{self, DebugClock};
use crate::error::{echo, Error};
use crate::host::call::{Args, Ctx};

/// Bound on SET and on one ADVANCE step; the clock itself stays at or below it too.
const MAX_MS: u64 = clock::MAX_DEBUG_MS;

pub fn debug(_ctx: &Ctx, mut args: Args<'_>) -> Result<Reply, Error> {
    let subcommand = args.next_bytes()?;
    if subcommand.eq_ignore_ascii_case(b"PANIC") {
        // Proves the panic guard end to end: the server must answer an error and live on.
        clock::debug_reading()?;
        panic!("RL.DEBUG PANIC");
    }
    if !subcommand.eq_ignore_ascii_case(b"CLOCK") {
        return Err(Error::Syntax(format!(
            "unknown subcommand '{}'; expected CLOCK or PANIC",
            echo(subcommand)
        )));
    }
    let action = args.next_bytes()?;
    let action = if action.eq_ignore_ascii_case(b"SET") {
        Some(DebugClock::Set {
            ms: parse_u64("ms", args.next_bytes()?, 1, MAX_MS)?,
        })
    } else if action.eq_ignore_ascii_case(b"ADVANCE") {
        Some(DebugClock::Advance {
            ms: parse_i64("ms", args.next_bytes()?, MAX_MS)?,
        })
    } else if action.eq_ignore_ascii_case(b"REAL") {
        Some(DebugClock::Real)
    } else if action.eq_ignore_ascii_case(b"GET") {
        None
    } else {
        return Err(Error::Syntax(format!(
            "unknown CLOCK action '{}'; expected SET, ADVANCE, REAL or GET",
            echo(action)
        )));
    };
    args.done()?;
    let ms = match action {
        Some(action) => clock::debug(action)?,
        None => clock::debug_reading()?,
    };
    Ok(Reply::Integer(i64::try_from(ms).unwrap_or(i64::MAX)))
}
