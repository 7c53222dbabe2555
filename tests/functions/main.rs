//! The Redis Functions library (`functions/ratelimit.lua`) against the module: the same random
//! traces on the same server at the same instants, every reply and every key's absolute expiry
//! equal (docs/functions.md lists what differs, and why). Also: argument errors, effects
//! replication to a replica that never runs a function, memory per key beside the module's, and
//! a cluster with the library loaded on every node.
//!
//! The library reads the server's `TIME`; the copy these tests load reads a clock the test sets
//! instead (`rl_test_clock`), so that both sides decide at the module's debug-clock instant.
//!
//! The files, by what a reader looks for: this one loads the library beside the module and
//! calls both sides (`both`, `at`, `reply`, the `ALGORITHMS` table); `calls.rs` the random calls
//! of a trace and `run_trace`; `traces.rs` the differential traces (requests, large and edge
//! policies, shaping, concurrency); `policy_changes.rs` keys under several configurations and
//! rollouts; `charges.rs` RL.CHARGE and RL.SETTLE; `shares.rs` RL.SHARE and RL.DEMAND;
//! `errors.rs` argument errors and foreign values; `hostile.rs` planted values answered in
//! bounded work; `shipped.rs` the file as shipped (its clock, its functions, its version);
//! `deployment.rs` replicas, memory per key and a cluster.

#[path = "../support/mod.rs"]
mod support;

mod calls;
mod charges;
mod deployment;
mod errors;
mod hostile;
mod policy_changes;
mod shares;
mod shipped;
mod traces;

use support::cluster::*;
use support::*;

const LIBRARY: &str = include_str!("../../functions/ratelimit.lua");

/// The clock of the scripts under test: a script keeps nothing between calls, so it reads the
/// instant the test set in the key `rl-test-clock`.
const CLOCK_FROM_KEY: &str =
    "local function now_ms() return tonumber(redis.call('GET', 'rl-test-clock')) end";

/// The library with its one line that reads `TIME` (`local function now_ms(…`) replaced by
/// `clock`.
fn with_clock(clock: &str) -> String {
    let line = LIBRARY
        .lines()
        .find(|l| l.starts_with("local function now_ms("))
        .expect("the clock line");
    LIBRARY.replacen(line, clock, 1)
}

/// The SHA of every function's script on the scripts backend (by function name), loaded on `c`,
/// its clock read from the key `rl-test-clock` (a script keeps nothing between calls).
fn scripts_on_key_clock(c: &mut Connection) -> std::collections::HashMap<String, String> {
    let source = with_clock(CLOCK_FROM_KEY);
    ratelimit_client::scripts::ENTRIES
        .into_iter()
        .map(|entry| {
            let script = ratelimit_client::scripts::generate(&source, entry).expect("the marks");
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(&script)
                .query(c)
                .unwrap();
            (entry.to_string(), sha)
        })
        .collect()
}

/// The library as shipped, with the one line that reads `TIME` replaced by a clock that the
/// extra function `rl_test_clock` sets: what the differential tests load.
fn test_library() -> String {
    let replaced = with_clock("local test_now = 0 local function now_ms() return test_now end");
    format!(
        "{replaced}\nredis.register_function{{function_name = 'rl_test_clock', \
         flags = {{ 'no-writes' }}, callback = function(_, args) \
         test_now = tonumber(args[1]) return test_now end}}\n"
    )
}

fn load(c: &mut Connection, code: &str) {
    let name: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(code)
        .query(c)
        .unwrap();
    assert_eq!(name, "ratelimit");
}

/// A server with the module (debug clock) and the test copy of the library, both at `ms`.
fn both() -> (Server, Connection) {
    let s = Server::start();
    let mut c = s.connect();
    load(&mut c, &test_library());
    at(&mut c, T0_MS);
    (s, c)
}

/// Sets both clocks.
fn at(c: &mut Connection, ms: u64) {
    clock_set(c, ms);
    let _: i64 = redis::cmd("FCALL")
        .arg("rl_test_clock")
        .arg(0)
        .arg(ms)
        .query(c)
        .unwrap();
}

/// The reply of a command, errors included (as text), so that both sides compare whole.
fn reply(c: &mut Connection, words: &[String]) -> Result<Value, String> {
    let mut command = redis::cmd(&words[0]);
    for w in &words[1..] {
        command.arg(w);
    }
    command.query(c).map_err(|e| {
        format!(
            "{} {}",
            e.code().unwrap_or("?"),
            e.detail().unwrap_or_default()
        )
    })
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
}

/// The module's command for an algorithm, and the library's function: the library has one per
/// limiter of the registry (`traces_agree_with_the_module` fails for a limiter without a row).
const ALGORITHMS: [(&str, &str, &str, bool); 5] = [
    ("RL.GCRA", "rl_gcra", "GCRA", true),
    ("RL.TOKENBUCKET", "rl_tokenbucket", "TOKENBUCKET", true),
    ("RL.SLIDINGLOG", "rl_slidinglog", "SLIDINGLOG", false),
    (
        "RL.SLIDINGCOUNTER",
        "rl_slidingcounter",
        "SLIDINGCOUNTER",
        false,
    ),
    ("RL.FIXEDWINDOW", "rl_fixedwindow", "FIXEDWINDOW", false),
];
