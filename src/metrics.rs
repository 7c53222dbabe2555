//! What an operator sees in `INFO ratelimit`: counters of what the commands decided, and the
//! gauges of the limiters Redis holds (kept by `state::gauges`, read here).
//!
//! Counters (admitted, denied, peeks, errors per command; tokens leased and refunded) move on
//! the main thread, where commands run. Gauges (keys and value memory per algorithm, sliding-log
//! entries) follow every limiter value through the data type's lifecycle: a value enters when a
//! command stores a new one, when Redis loads one (`rdb_load`: RDB, `DEBUG RELOAD`, `RESTORE`, a
//! replica's full sync, a diskless load into a temporary database) or copies one (`COPY`), and
//! leaves through the `free` callback (`DEL`, overwrite, expiry, eviction, `FLUSHALL`, a discarded
//! temporary database). `free` runs on a background thread for `FLUSHALL ASYNC` and other lazy
//! frees, so everything here is an atomic; `Relaxed` is enough for independent statistics.
//! `rdb_save` and the AOF rewrite run in a fork child: nothing there touches the parent's numbers.
//!
//! `CONFIG RESETSTAT` resets the counters, not the gauges, as Redis does for its own statistics.
//! Redis has no server event for it (7.0 through 7.4), so a command filter watches for it
//! (`host::load::register_info`).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use redis_module::Context;

pub use crate::state::gauges::{
    algorithm_gauges, algorithm_name, limiter_changed, limiter_created, limiter_freed, log_entries,
    Footprint,
};
use crate::state::ALGORITHM_IDS;
use std::sync::OnceLock;

/// Room for the module's commands, indexed by their position in the command table.
pub const MAX_COMMANDS: usize = 32;

/// The commands registered at load, as (position in the command table, name): what INFO shows
/// counters for. Set once by the command layer (`command::register_all`).
static COMMANDS: OnceLock<Vec<(usize, &'static str)>> = OnceLock::new();

/// The commands INFO shows, set once at load.
pub fn set_commands(commands: Vec<(usize, &'static str)>) {
    let _ = COMMANDS.set(commands);
}

/// What one command call came to, for its counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A request admitted (for `RL.LEASE`: at least one token granted).
    Admitted,
    /// A request denied.
    Denied,
    /// A peek: `COST 0`, `RL.PEEK`, `RL.INSPECT`.
    Peek,
    /// Any other successful call (`RL.REFUND`, `RL.CHARGE`, `RL.SETSTATE`, `RL.DEBUG`, `RL.ALL`).
    Call,
    /// An error reply.
    Error,
}

struct CommandCounters {
    admitted: AtomicU64,
    denied: AtomicU64,
    peeks: AtomicU64,
    calls: AtomicU64,
    errors: AtomicU64,
}

impl CommandCounters {
    const fn new() -> CommandCounters {
        CommandCounters {
            admitted: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            peeks: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }

    fn counter(&self, outcome: Outcome) -> &AtomicU64 {
        match outcome {
            Outcome::Admitted => &self.admitted,
            Outcome::Denied => &self.denied,
            Outcome::Peek => &self.peeks,
            Outcome::Call => &self.calls,
            Outcome::Error => &self.errors,
        }
    }

    fn reset(&self) {
        for c in [
            &self.admitted,
            &self.denied,
            &self.peeks,
            &self.calls,
            &self.errors,
        ] {
            c.store(0, Relaxed);
        }
    }
}

static COUNTERS: [CommandCounters; MAX_COMMANDS] = [const { CommandCounters::new() }; MAX_COMMANDS];
static LEASE_REQUESTED: AtomicU64 = AtomicU64::new(0);
static LEASE_GRANTED: AtomicU64 = AtomicU64::new(0);
static REFUNDED: AtomicU64 = AtomicU64::new(0);
static CHARGED: AtomicU64 = AtomicU64::new(0);

/// Counts one call of the command at `index` in the command table (out of range: ignored).
fn count(index: usize, outcome: Outcome) {
    if let Some(c) = COUNTERS.get(index) {
        c.counter(outcome).fetch_add(1, Relaxed);
    }
}

thread_local! {
    /// What the running command said it was, when its reply alone does not tell (a peek answers
    /// the same five integers as a decision; a refund's field 1 is tokens given back).
    static NOTED: Cell<Option<Outcome>> = const { Cell::new(None) };
}

/// Called by a handler: this call is `outcome` (unless it ends in an error).
pub fn note(outcome: Outcome) {
    NOTED.set(Some(outcome));
}

/// Counts the call of the command at `index` in the command table: an error as an error;
/// otherwise what the handler noted, else `by_reply` (what its reply says: a decision by its
/// field 1, any other reply a call; see `command::reply::Reply::outcome`).
pub fn record(index: usize, by_reply: Outcome) {
    let noted = NOTED.take();
    let outcome = match (by_reply, noted) {
        (Outcome::Error, _) => Outcome::Error,
        (_, Some(outcome)) => outcome,
        (outcome, None) => outcome,
    };
    count(index, outcome);
}

/// A lease asked for `requested` tokens and was granted `granted`.
pub fn leased(requested: u64, granted: u64) {
    LEASE_REQUESTED.fetch_add(requested, Relaxed);
    LEASE_GRANTED.fetch_add(granted, Relaxed);
}

/// A refund gave `given` tokens back.
pub fn refunded(given: u64) {
    REFUNDED.fetch_add(given, Relaxed);
}

/// A charge (`RL.CHARGE`) counted `n` tokens.
pub fn charged(n: u64) {
    CHARGED.fetch_add(n, Relaxed);
}

/// `CONFIG RESETSTAT`: the counters start again from 0; the gauges are facts, not statistics.
pub fn reset_counters() {
    for c in &COUNTERS {
        c.reset();
    }
    for c in [&LEASE_REQUESTED, &LEASE_GRANTED, &REFUNDED, &CHARGED] {
        c.store(0, Relaxed);
    }
}

/// One command's counters, as INFO shows them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommandStats {
    pub admitted: u64,
    pub denied: u64,
    pub peeks: u64,
    pub calls: u64,
    pub errors: u64,
}

pub fn command_stats(index: usize) -> CommandStats {
    COUNTERS
        .get(index)
        .map_or_else(CommandStats::default, |c| CommandStats {
            admitted: c.admitted.load(Relaxed),
            denied: c.denied.load(Relaxed),
            peeks: c.peeks.load(Relaxed),
            calls: c.calls.load(Relaxed),
            errors: c.errors.load(Relaxed),
        })
}

// ---- INFO and CONFIG RESETSTAT ------------------------------------------------------------

/// Registers `INFO ratelimit` and the `CONFIG RESETSTAT` hook (see `host::load::register_info`).
pub fn register(ctx: &Context) -> Result<(), String> {
    crate::host::load::register_info(ctx, info_fields, reset_counters)
}

/// The INFO field prefix of a command: `RL.TOKENBUCKET` → `rl_tokenbucket`.
fn field_prefix(command: &str) -> String {
    command.to_ascii_lowercase().replace('.', "_")
}

/// The lines of `INFO ratelimit`, as (field without the `ratelimit_` prefix, value).
pub fn info_fields() -> Vec<(String, i64)> {
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let mut fields = Vec::with_capacity(64);
    let (mut keys, mut memory) = (0i64, 0i64);
    for &(tag, name) in ALGORITHM_IDS {
        let (k, m) = algorithm_gauges(tag);
        keys = keys.saturating_add(k);
        memory = memory.saturating_add(m);
        fields.push((format!("{name}_keys"), k));
        fields.push((format!("{name}_memory"), m));
    }
    fields.insert(0, ("keys".into(), keys));
    fields.insert(1, ("memory".into(), memory));
    fields.push(("sliding_log_entries".into(), log_entries()));
    fields.push((
        "concurrency_holders".into(),
        crate::state::gauges::entries(
            <crate::algo::concurrency::Concurrency as crate::algo::Algorithm>::TAG,
        ),
    ));
    fields.push((
        "keys_with_several_configurations".into(),
        crate::state::gauges::remembering_keys(),
    ));
    fields.push((
        "max_log_entries".into(),
        crate::config::MAX_LOG_ENTRIES.load(Relaxed),
    ));
    for &(index, name) in COMMANDS.get().map_or(&[][..], Vec::as_slice) {
        let prefix = field_prefix(name);
        let s = command_stats(index);
        for (what, n) in [
            ("admitted", s.admitted),
            ("denied", s.denied),
            ("peeks", s.peeks),
            ("calls", s.calls),
            ("errors", s.errors),
        ] {
            if n > 0 || shows(name, what) {
                fields.push((format!("{prefix}_{what}"), int(n)));
            }
        }
        if name.eq_ignore_ascii_case("RL.LEASE") {
            fields.push((
                format!("{prefix}_tokens_requested"),
                int(LEASE_REQUESTED.load(Relaxed)),
            ));
            fields.push((
                format!("{prefix}_tokens_granted"),
                int(LEASE_GRANTED.load(Relaxed)),
            ));
        }
        if name.eq_ignore_ascii_case("RL.REFUND") {
            fields.push((format!("{prefix}_tokens"), int(REFUNDED.load(Relaxed))));
        }
        if name.eq_ignore_ascii_case("RL.CHARGE") {
            fields.push((format!("{prefix}_tokens"), int(CHARGED.load(Relaxed))));
        }
    }
    fields
}

/// Whether INFO always shows counter `what` of command `name` (a counter that moved is shown
/// anyway): a fixed set per kind of command, so that monitoring sees the same fields every time.
fn shows(name: &str, what: &str) -> bool {
    let kinds: &[&str] = match name {
        "RL.PEEK" | "RL.INSPECT" => &["peeks", "errors"],
        "RL.REFUND" | "RL.CHARGE" | "RL.SETTLE" | "RL.SETSTATE" | "RL.DEBUG" => {
            &["calls", "errors"]
        }
        // The limiter commands, and any command added later.
        _ => &["admitted", "denied", "peeks", "errors"],
    };
    kinds.contains(&what)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The last slot: no command of the table uses it, so no other test moves it.
    const SLOT: usize = MAX_COMMANDS - 1;

    #[test]
    fn calls_are_counted_by_their_reply_and_what_the_handler_noted() {
        let before = command_stats(SLOT);
        record(SLOT, Outcome::Admitted);
        record(SLOT, Outcome::Denied);
        record(SLOT, Outcome::Admitted);
        record(SLOT, Outcome::Denied);
        note(Outcome::Peek);
        record(SLOT, Outcome::Admitted);
        note(Outcome::Peek);
        record(SLOT, Outcome::Error);
        // The note does not outlive the call it was made in.
        record(SLOT, Outcome::Call);
        record(SLOT, Outcome::Call);
        let after = command_stats(SLOT);
        assert_eq!(
            (
                after.admitted - before.admitted,
                after.denied - before.denied,
                after.peeks - before.peeks,
                after.calls - before.calls,
                after.errors - before.errors
            ),
            (2, 2, 1, 2, 1)
        );
        // Out of range: ignored, never a panic.
        record(MAX_COMMANDS + 5, Outcome::Call);
    }
}
