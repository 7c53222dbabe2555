//! `RL.SLIDINGLOG key L W [COST n]` — sliding log: the exact rolling window, never more than L in
//! any interval of W ms. Memory grows with L (8 bytes per distinct arrival instant), so L is
//! bounded by `ratelimit.max-log-entries`.

use std::sync::atomic::Ordering;

use super::decide::limiter_command;
use crate::algo::{sliding_log::MAX_LOG_LIMIT, Policy};
use crate::error::Error;

limiter_command!(
    RlSlidingLog, "RL.SLIDINGLOG", "Decides one request with a sliding log: never more than L in any W ms",
    algorithm: "sliding log", burst: false,
    state: SlidingLog(sliding_log::SlidingLog),
    accepts: within_max_log_entries
);

/// L at most `ratelimit.max-log-entries`, read at each call so `CONFIG SET` applies at once.
fn within_max_log_entries(policy: &Policy) -> Result<(), Error> {
    let config = crate::MAX_LOG_ENTRIES.load(Ordering::Relaxed);
    let max = u64::try_from(config).unwrap_or(0).min(MAX_LOG_LIMIT);
    if policy.limit() > max {
        return Err(Error::LogTooLong {
            limit: policy.limit(),
            max,
        });
    }
    Ok(())
}
