//! The guard's default clock: nanoseconds since the Unix epoch, because a device token's expiry
//! must mean the same instant to every gateway and after a restart (a monotonic clock's origin is
//! the process's start).

use std::time::{SystemTime, UNIX_EPOCH};

use crate::clock::Clock;

/// Wall-clock time since the Unix epoch (0 for a clock set before 1970).
#[derive(Clone, Copy, Debug, Default)]
pub struct UnixClock;

impl Clock for UnixClock {
    fn now_ns(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}
