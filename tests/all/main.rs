//! `RL.ALL numkeys key [key ...] <limiter> [<limiter> ...]`: one decision over several limiters
//! at one `now`, all or nothing. Exact replies for a key nested under its tenant and for mixed
//! algorithms, errors that change nothing, many connections at once, a property test against the
//! single-key commands run one by one on copies of the keys, replication (one MULTI/EXEC of
//! effects, changed keys only), an AOF restart, and a 3-master cluster.
//!
//! The files: this one holds what they share (a server at midnight, an `RL.ALL` reply,
//! `assert_changes_nothing`); `replies.rs` the exact replies; `errors.rs` errors that change
//! nothing; `connections.rs` many connections at once; `property.rs` RL.ALL against the
//! single-key commands; `replication.rs` replicas, the AOF and a cluster (`ALL_WORKLOAD`).

#[path = "../support/mod.rs"]
mod support;

mod connections;
mod errors;
mod property;
mod replication;
mod replies;

use support::*;

const DAY_MS: u64 = 86_400_000;
/// The first midnight (UTC) after `T0_MS`: a daily FIXEDWINDOW starts there, so its reset is
/// exactly one day.
const DAY0_MS: u64 = (T0_MS / DAY_MS + 1) * DAY_MS;
const DAY: i64 = DAY_MS as i64;

/// A server with the clock at `DAY0_MS`.
fn at_midnight() -> (Server, Connection) {
    let (s, mut c) = server();
    clock_set(&mut c, DAY0_MS);
    (s, c)
}

/// An `RL.ALL` reply: the combined five fields, then one five-field array per limiter.
fn all(c: &mut Connection, words: &[&str]) -> ([i64; 5], Vec<[i64; 5]>) {
    let mut command = redis::cmd(words[0]);
    for w in &words[1..] {
        command.arg(*w);
    }
    let reply: Vec<Vec<i64>> = command
        .query(c)
        .unwrap_or_else(|e| panic!("{words:?}: {e}"));
    let mut arrays = reply.into_iter().map(|v| {
        <[i64; 5]>::try_from(v).unwrap_or_else(|v| panic!("{words:?}: not five fields: {v:?}"))
    });
    let combined = arrays.next().unwrap_or_else(|| panic!("{words:?}: empty"));
    (combined, arrays.collect())
}

/// The call is answered `combined` and `each`, and leaves every key as it was (DUMP and expiry):
/// what a denial (no policy change) or a peek must do.
fn assert_changes_nothing(
    c: &mut Connection,
    words: &[&str],
    combined: [i64; 5],
    each: &[[i64; 5]],
) {
    let before = snapshot(c);
    for _ in 0..3 {
        assert_eq!(all(c, words), (combined, each.to_vec()), "{words:?}");
    }
    assert_eq!(snapshot(c), before, "{words:?} changed a key");
}

fn dbsize(c: &mut Connection) -> i64 {
    redis::cmd("DBSIZE").query(c).unwrap()
}
