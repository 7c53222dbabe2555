//! The one place that reads the time: the server's wall clock, or the debug clock in tests.
//!
//! Commands read `now_ns()` once and pass it down. The debug clock exists only when the module
//! was loaded with `DEBUG-CLOCK yes`; it cannot be switched on at run time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::algo::ms_to_ns;
use crate::error::Error;

static DEBUG_ENABLED: AtomicBool = AtomicBool::new(false);
/// When the debug clock is pinned: the pinned instant in ns. 0 means "follow the server clock".
static PINNED_NS: AtomicU64 = AtomicU64::new(0);

/// Called once at load with the module argument.
pub fn enable_debug_clock() {
    DEBUG_ENABLED.store(true, Ordering::Relaxed);
}

/// Now, in nanoseconds since the Unix epoch.
pub fn now_ns() -> u64 {
    let pinned = PINNED_NS.load(Ordering::Relaxed);
    if pinned != 0 {
        return pinned;
    }
    server_now_ns()
}

/// The server's wall clock: microseconds where the server has them (Redis 7.2+, Valkey), else
/// milliseconds (Redis 7.0). A missing API function is `None`; never unwrap it.
///
/// `CachedMicroseconds` is preferred: it is the time the server read when it started the
/// current top-level command (Redis 7.2.6, 7.4.1 and Valkey 8.0.1 refresh it in `call()` only
/// at execution nesting 0, see `enterExecutionUnit`), so it saves a clock read per command and
/// every limiter call inside one `MULTI`/`EXEC` or script sees the same instant, the one the
/// server also uses for key expiry there. A script running past `busy-reply-threshold` may see
/// it move forwards (the server refreshes it while serving other clients); never backwards.
fn server_now_ns() -> u64 {
    crate::host::call::server_clock_ns()
}

/// Which server clock `now_ns` reads, for the load log line.
pub fn source() -> &'static str {
    match crate::host::call::server_clock_kind() {
        "cached-us" => "µs (CachedMicroseconds)",
        "us" => "µs (Microseconds)",
        _ => "ms (Milliseconds)",
    }
}

/// The latest instant the debug clock can be moved to: 10^13 ms since the epoch (year 2286).
pub const MAX_DEBUG_MS: u64 = 10_000_000_000_000;

/// `RL.DEBUG CLOCK …` actions.
pub enum DebugClock {
    Set { ms: u64 },
    Advance { ms: i64 },
    Real,
}

/// Applies a debug-clock action and returns the clock's new reading in ms.
pub fn debug(action: DebugClock) -> Result<u64, Error> {
    if !DEBUG_ENABLED.load(Ordering::Relaxed) {
        return Err(Error::DebugClockDisabled);
    }
    // Repeated ADVANCEs could otherwise walk the clock towards u64::MAX ns, where instants the
    // algorithms add a window to would no longer fit; a real clock is centuries from that. 0 is
    // kept for "follow the server clock", so a pinned clock is at least 1 ns.
    let bounded = |ns: u64| ns.clamp(1, ms_to_ns(MAX_DEBUG_MS));
    let pinned = match action {
        DebugClock::Set { ms } => bounded(ms_to_ns(ms)),
        DebugClock::Advance { ms } => {
            bounded(now_ns().saturating_add_signed(ms.saturating_mul(1_000_000)))
        }
        DebugClock::Real => 0,
    };
    PINNED_NS.store(pinned, Ordering::Relaxed);
    Ok(now_ns() / 1_000_000)
}

/// The clock's reading in ms, for `RL.DEBUG CLOCK GET`.
pub fn debug_reading() -> Result<u64, Error> {
    if !DEBUG_ENABLED.load(Ordering::Relaxed) {
        return Err(Error::DebugClockDisabled);
    }
    Ok(now_ns() / 1_000_000)
}
