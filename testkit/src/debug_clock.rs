//! The module's debug clock (loaded with `DEBUG-CLOCK yes`, `Options::debug_module`): a test
//! pins and moves the server's time with `RL.DEBUG CLOCK`, never by sleeping.

use redis::Connection;

/// A far-future instant for the debug clock (2096): keys' absolute expiries then lie beyond
/// the server's real clock, so Redis never expires them during a test.
pub const T0_MS: u64 = 4_000_000_000_000;

/// `RL.DEBUG CLOCK SET ms`: the module reads `ms` until it is moved again.
pub fn clock_set(c: &mut Connection, ms: u64) {
    debug_clock(c, "SET", ms.to_string());
}

/// `RL.DEBUG CLOCK ADVANCE ms` (backwards when negative).
pub fn clock_advance(c: &mut Connection, ms: i64) {
    debug_clock(c, "ADVANCE", ms.to_string());
}

fn debug_clock(c: &mut Connection, how: &str, ms: String) {
    let _: i64 = redis::cmd("RL.DEBUG")
        .arg("CLOCK")
        .arg(how)
        .arg(&ms)
        .query(c)
        .unwrap_or_else(|e| panic!("RL.DEBUG CLOCK {how} {ms}: {e}"));
}
