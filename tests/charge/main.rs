//! RL.CHARGE against a real server, for every limiter of the registry: an overage charged into
//! debt, the next requests denied until it is paid with an exact retry_after, a refund of the
//! same amount undoing it, a bounded debt that saturates and says so, a missing key created in
//! debt under the policy given; the debt through a replica, DEBUG RELOAD, an AOF rewrite and
//! RESTORE, byte for byte. Argument errors: tests/arguments.rs.
//!
//! The files: this one holds what they share (`charge`, `limiter`, `peek`); `debt.rs` the debt
//! and how it is paid, refunded, bounded and shown; `durability.rs` the debt through a replica,
//! a reload, RESTORE and the AOF; `settle.rs` RL.SETTLE and the keys Redis finds.

#[path = "../support/mod.rs"]
mod support;

mod debt;
mod durability;
mod settle;

use support::registry::Algorithm;
use support::*;

fn charge(c: &mut Connection, key: &str, n: &str) -> [i64; 5] {
    rl(c, &["RL.CHARGE", key, n])
}

/// `L W` of 10 per second for `a` (BURST 10 where it takes one), with `extra` after.
fn limiter<'a>(a: &'a Algorithm, key: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    with(&[a.command.as_str(), key, "10", "1000"], extra)
}

/// The key's peek: what a cost-1 request would get now, spending nothing.
fn peek(c: &mut Connection, a: &Algorithm, key: &str) -> [i64; 5] {
    rl(c, &limiter(a, key, &["COST", "0"]))
}
