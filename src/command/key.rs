//! What every command checks of a limiter key: that it holds the algorithm it is called with
//! (WRONGTYPE otherwise, naming the key when a call has several) and that a policy keeps within
//! the log bound; and how a new limiter is stored.

use std::sync::atomic::Ordering;

use crate::algo::{sliding_log::MAX_LOG_LIMIT, Policy};
use crate::error::{echo, Error};
use crate::host::call::{Key, RString};
use crate::state::{Limiter, Stored};

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
/// (read at each call, so `CONFIG SET` applies at once).
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

/// Names the key in a WRONGTYPE error: a call of several keys
/// (`RL.ALL`, `RL.SETTLE`) has several.
pub fn at_key(e: Error, key: RString<'_>) -> Error {
    match e {
        Error::WrongType { holds, wanted, .. } => Error::WrongType {
            holds,
            wanted,
            key: Some(echo(key.bytes())),
        },
        other => other,
    }
}
