//! What an operator sees in `INFO ratelimit`: counters of what the commands decided, and exact
//! gauges of the limiters Redis holds.
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
//! Redis has no server event for it (7.0 through 7.4), so a command filter watches for it.

use std::cell::Cell;
use std::ffi::{c_int, CString};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use redis_module::{raw, Context};

use crate::command::{Reply, COMMANDS};
use crate::error::Error;
use crate::state::{Limiter, ALGORITHM_IDS, MAX_TAG};

/// Room for the module's commands, indexed by their position in the command table.
pub const MAX_COMMANDS: usize = 32;
const _: () = assert!(COMMANDS.len() <= MAX_COMMANDS);

/// A gauge slot per stored tag (slot 0 unused).
const SLOTS: usize = MAX_TAG as usize + 1;

/// How INSPECT and INFO name the algorithm with stored tag `tag`.
pub fn algorithm_name(tag: u8) -> &'static str {
    ALGORITHM_IDS
        .iter()
        .find(|&&(t, _)| t == tag)
        .map_or("unknown", |&(_, id)| id)
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
    /// Any other successful call (`RL.REFUND`, `RL.SETSTATE`, `RL.DEBUG`, `RL.ALL`).
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

/// Counts the call of the command at `index` in the command table by its reply: errors as
/// errors; what the handler noted; else a decision by its field 1 (admitted when above 0).
pub fn record(index: usize, reply: &Result<Reply, Error>) {
    let noted = NOTED.take();
    let allowed = |first: Option<&i64>| {
        if first.is_some_and(|&n| n > 0) {
            Outcome::Admitted
        } else {
            Outcome::Denied
        }
    };
    let outcome = match (reply, noted) {
        (Err(_), _) => Outcome::Error,
        (Ok(_), Some(outcome)) => outcome,
        (Ok(Reply::Decision(f) | Reply::Nested(f, _)), None) => allowed(f.first()),
        (Ok(Reply::Integers(v)), None) => allowed(v.first()),
        (Ok(_), None) => Outcome::Call,
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

/// `CONFIG RESETSTAT`: the counters start again from 0; the gauges are facts, not statistics.
pub fn reset_counters() {
    for c in &COUNTERS {
        c.reset();
    }
    for c in [&LEASE_REQUESTED, &LEASE_GRANTED, &REFUNDED] {
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

// ---- Gauges -------------------------------------------------------------------------------

/// Live limiter values per algorithm tag, their memory (what `mem_usage` reports for each) and
/// the sliding-log entries they hold. Signed: a transient negative would show a missed hook
/// rather than wrap to 2^64.
static KEYS: [AtomicI64; SLOTS] = [const { AtomicI64::new(0) }; SLOTS];
static MEMORY: [AtomicI64; SLOTS] = [const { AtomicI64::new(0) }; SLOTS];
static LOG_ENTRIES: AtomicI64 = AtomicI64::new(0);

/// What one limiter value contributes to the gauges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    tag: u8,
    /// `size_of::<Limiter>()` plus its heap bytes: what `MEMORY USAGE` counts for the value.
    bytes: usize,
    /// Sliding-log entries (0 for the other algorithms).
    entries: u64,
}

impl Footprint {
    pub fn of(limiter: &Limiter) -> Footprint {
        Footprint {
            tag: limiter.state.tag(),
            bytes: limiter.value_bytes(),
            entries: limiter.log_entries(),
        }
    }

    fn apply(self, sign: i64) {
        let slot = usize::from(self.tag);
        let bytes = i64::try_from(self.bytes).unwrap_or(i64::MAX);
        let entries = i64::try_from(self.entries).unwrap_or(i64::MAX);
        if let (Some(keys), Some(memory)) = (KEYS.get(slot), MEMORY.get(slot)) {
            keys.fetch_add(sign, Relaxed);
            memory.fetch_add(sign.wrapping_mul(bytes), Relaxed);
        }
        if entries != 0 {
            LOG_ENTRIES.fetch_add(sign.wrapping_mul(entries), Relaxed);
        }
    }
}

/// A limiter value now owned by Redis: stored by a command, loaded, or copied.
pub fn limiter_created(limiter: &Limiter) {
    Footprint::of(limiter).apply(1);
}

/// A limiter value Redis is freeing (any thread).
pub fn limiter_freed(limiter: &Limiter) {
    Footprint::of(limiter).apply(-1);
}

/// A value Redis owns was changed in place; `before` is its footprint before the change.
/// Unchanged footprints (most decisions: the state types have a fixed size) cost nothing.
pub fn limiter_changed(before: Footprint, after: &Limiter) {
    let after = Footprint::of(after);
    if after != before {
        before.apply(-1);
        after.apply(1);
    }
}

/// The gauges of one algorithm: (live keys, value memory in bytes).
pub fn algorithm_gauges(tag: u8) -> (i64, i64) {
    let slot = usize::from(tag);
    match (KEYS.get(slot), MEMORY.get(slot)) {
        (Some(k), Some(m)) => (k.load(Relaxed), m.load(Relaxed)),
        _ => (0, 0),
    }
}

pub fn log_entries() -> i64 {
    LOG_ENTRIES.load(Relaxed)
}

// ---- INFO and CONFIG RESETSTAT ------------------------------------------------------------

/// Registers the INFO callback (replacing the redis-module crate's, which would prefix a section
/// name of its own: `# ratelimit` and `ratelimit_<field>` is what Redis gives a module's own
/// section) and the command filter that sees `CONFIG RESETSTAT`. Called at load.
pub fn register(ctx: &Context) -> Result<(), String> {
    // SAFETY: called from OnLoad with its context; both functions exist since Redis 6.
    let registered = unsafe {
        match (
            raw::RedisModule_RegisterInfoFunc,
            raw::RedisModule_RegisterCommandFilter,
        ) {
            (Some(info), Some(filter)) => {
                info(ctx.ctx, Some(info_callback)) == raw::Status::Ok as c_int
                    && !filter(ctx.ctx, Some(command_filter), 0).is_null()
            }
            _ => false,
        }
    };
    if registered {
        Ok(())
    } else {
        Err("cannot register the INFO section or the CONFIG RESETSTAT filter".into())
    }
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
        "max_log_entries".into(),
        crate::MAX_LOG_ENTRIES.load(Relaxed),
    ));
    for (index, spec) in COMMANDS.iter().enumerate() {
        if !crate::command::throttle::registered(spec) {
            continue;
        }
        let name = spec.name;
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
    }
    fields
}

/// Whether INFO always shows counter `what` of command `name` (a counter that moved is shown
/// anyway): a fixed set per kind of command, so that monitoring sees the same fields every time.
fn shows(name: &str, what: &str) -> bool {
    let kinds: &[&str] = match name {
        "RL.PEEK" | "RL.INSPECT" => &["peeks", "errors"],
        "RL.REFUND" | "RL.SETSTATE" | "RL.DEBUG" => &["calls", "errors"],
        // The limiter commands, and any command added later.
        _ => &["admitted", "denied", "peeks", "errors"],
    };
    kinds.contains(&what)
}

unsafe extern "C" fn info_callback(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    // A panic must not cross into Redis; INFO then simply lacks the section.
    let _ = std::panic::catch_unwind(|| {
        let (Some(section), Some(field)) = (
            raw::RedisModule_InfoAddSection,
            raw::RedisModule_InfoAddFieldLongLong,
        ) else {
            return;
        };
        // An empty name: the section is the module's own, `# ratelimit`.
        if section(ctx, c"".as_ptr().cast_mut()) != raw::Status::Ok as c_int {
            return; // INFO asked for other sections.
        }
        for (name, value) in info_fields() {
            if let Ok(name) = CString::new(name) {
                field(ctx, name.as_ptr().cast_mut(), value);
            }
        }
    });
}

/// Sees every command before Redis runs it (client commands, MULTI's queued commands when they
/// are queued) and resets the counters on `CONFIG RESETSTAT`. Two arguments are compared only
/// when there are exactly two: the cost on any other command is one call and a length check.
unsafe extern "C" fn command_filter(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    let _ = std::panic::catch_unwind(|| {
        let (Some(count), Some(arg), Some(ptr_len)) = (
            raw::RedisModule_CommandFilterArgsCount,
            raw::RedisModule_CommandFilterArgGet,
            raw::RedisModule_StringPtrLen,
        ) else {
            return;
        };
        if count(fctx) != 2 {
            return;
        }
        let bytes = |i: c_int| -> &[u8] {
            let s = arg(fctx, i);
            if s.is_null() {
                return &[];
            }
            let mut len = 0usize;
            let p = ptr_len(s, &mut len);
            if p.is_null() {
                return &[];
            }
            // SAFETY: Redis's string of `len` bytes, alive for this callback.
            std::slice::from_raw_parts(p.cast::<u8>(), len)
        };
        if bytes(0).eq_ignore_ascii_case(b"config") && bytes(1).eq_ignore_ascii_case(b"resetstat") {
            reset_counters();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::{sliding_log::SlidingLog, Algorithm, Policy};
    use crate::state::AlgoState;

    /// The last slot: no command of the table uses it, so no other test moves it.
    const SLOT: usize = MAX_COMMANDS - 1;

    #[test]
    fn calls_are_counted_by_their_reply_and_what_the_handler_noted() {
        let before = command_stats(SLOT);
        record(SLOT, &Ok(Reply::Decision([1, 10, 9, -1, 100])));
        record(SLOT, &Ok(Reply::Decision([0, 10, 0, 100, 1000])));
        record(SLOT, &Ok(Reply::Nested([1, 10, 9, -1, 100], Vec::new())));
        record(SLOT, &Ok(Reply::Integers(vec![0, 1, 0, 5, 5, 0])));
        note(Outcome::Peek);
        record(SLOT, &Ok(Reply::Decision([1, 10, 9, -1, 100])));
        note(Outcome::Peek);
        record(SLOT, &Err(Error::Internal));
        // The note does not outlive the call it was made in.
        record(SLOT, &Ok(Reply::Ok));
        record(SLOT, &Ok(Reply::Null));
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
        record(MAX_COMMANDS + 5, &Ok(Reply::Ok));
    }

    #[test]
    fn gauges_follow_a_value_changed_in_place() {
        let p = Policy::new(10, 1000, 10).unwrap();
        let t0 = crate::algo::props::T0;
        let log = |costs: &[u64]| {
            let mut state: Option<SlidingLog> = None;
            for (i, &c) in costs.iter().enumerate() {
                state = SlidingLog::check(state.as_ref(), &p, t0 + i as u64, c)
                    .next
                    .or(state);
            }
            Limiter {
                policy: p,
                state: AlgoState::SlidingLog(state.unwrap()),
            }
        };
        let tag = 3;
        let (keys, memory) = algorithm_gauges(tag);
        let entries = log_entries();
        let mut l = log(&[1, 1]);
        limiter_created(&l);
        // 48 bytes of Limiter, and the log's heap: 3 header words and a ring of 2 slots.
        assert_eq!(algorithm_gauges(tag), (keys + 1, memory + 48 + 8 * (3 + 2)));
        assert_eq!(log_entries(), entries + 2);
        let before = Footprint::of(&l);
        l = log(&[1, 1, 1, 1]);
        limiter_changed(before, &l);
        assert_eq!(algorithm_gauges(tag), (keys + 1, memory + 48 + 8 * (3 + 4)));
        assert_eq!(log_entries(), entries + 4);
        limiter_freed(&l);
        assert_eq!(algorithm_gauges(tag), (keys, memory));
        assert_eq!(log_entries(), entries);
        assert_eq!(algorithm_name(tag), "sliding_log");
        assert_eq!(algorithm_name(200), "unknown");
    }
}
