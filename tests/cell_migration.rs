//! Migrating from the real redis-cell (built from source, see `support::cell`), driven side by
//! side with this module on one frozen wall clock: what docs/migrating-from-redis-cell.md
//! promises, call for call. Each test skips, saying why, when redis-cell cannot be built here
//! (no registry and nothing cached) or gcc is missing.

mod support;

use std::path::{Path, PathBuf};

use support::cell::redis_cell;
use support::*;
use testkit::WallClock;

/// 2030-03-17, in ms: the instant both servers' wall clock starts at.
const START_MS: u64 = 1_900_000_000_000;

/// redis-cell's module and a clock at `START_MS`, or None after saying why the test skips.
fn setup(test: &str) -> Option<(PathBuf, WallClock)> {
    let cell = match redis_cell() {
        Ok(path) => path,
        Err(e) => {
            eprintln!("SKIPPED {test}: redis-cell cannot be built here: {e}");
            return None;
        }
    };
    match WallClock::new(START_MS) {
        Ok(clock) => Some((cell, clock)),
        Err(e) => {
            eprintln!("SKIPPED {test}: the clock shim cannot be built: {e}");
            None
        }
    }
}

fn start(clock: &WallClock, extra: &[&str], module: Option<&Path>, args: &[&str]) -> Server {
    Server::custom(extra, module, args, &clock.env())
}

const COMPAT: &[&str] = &["CELL-COMPAT", "yes"];

/// Policies as `max_burst count period`, each with an emission interval of whole milliseconds:
/// every instant and TTL is then whole ms on both sides, where redis-cell's own rounding (ns
/// truncated, TTL in whole ms) cannot differ from ours.
const POLICIES: &[[&str; 3]] = &[
    ["4", "1", "1"],
    ["9", "10", "3600"],
    ["0", "5", "1"],
    ["2", "2", "1"],
    ["19", "20", "60"],
    ["5", "4", "10"],
    ["0", "1", "60"],
    ["99", "100", "1"],
];

/// One call of a trace: move the shared clock by `advance_ms`, then `CL.THROTTLE words…`.
struct Call {
    advance_ms: u64,
    words: Vec<String>,
}

/// Random calls on `keys` keys (named `prefix:N`): each key mostly under its own policy, one
/// call in `change_every` under another (0: never), quantities 0 to capacity + 1, the clock
/// moving 0 to 1.5 s between calls and now and then an hour.
fn trace(seed: u64, prefix: &str, keys: u64, calls: usize, change_every: u64) -> Vec<Call> {
    let mut rng = Rng(seed);
    (0..calls)
        .map(|_| {
            let k = rng.below(keys);
            let home = POLICIES[(k as usize) % POLICIES.len()];
            let policy = if change_every > 0 && rng.below(change_every) == 0 {
                rng.pick(POLICIES)
            } else {
                home
            };
            let capacity: u64 = policy[0].parse::<u64>().unwrap() + 1;
            let quantity = match rng.below(10) {
                0 => 0,
                1 => capacity + 1,
                2 => capacity,
                _ => 1 + rng.below(3).min(capacity - 1),
            };
            let advance_ms = match rng.below(40) {
                0 => 3_600_000,
                1..=8 => 0,
                _ => rng.below(1_500),
            };
            let mut words = vec!["CL.THROTTLE".to_string(), format!("{prefix}:{k}")];
            words.extend(policy.iter().map(|s| s.to_string()));
            words.push(quantity.to_string());
            Call { advance_ms, words }
        })
        .collect()
}

/// Runs `calls` on every connection at the same instants; returns each call's replies, one
/// per connection.
fn drive(
    clock: &WallClock,
    now: &mut u64,
    cs: &mut [&mut Connection],
    calls: &[Call],
) -> Vec<Vec<[i64; 5]>> {
    calls
        .iter()
        .map(|call| {
            *now += call.advance_ms;
            clock.set(*now);
            let words: Vec<&str> = call.words.iter().map(String::as_str).collect();
            cs.iter_mut().map(|c| rl(c, &words)).collect()
        })
        .collect()
}

/// Asserts that every call got the same reply from every connection, listing the first
/// differences.
fn assert_same(what: &str, calls: &[Call], replies: &[Vec<[i64; 5]>]) {
    let diffs: Vec<String> = calls
        .iter()
        .zip(replies)
        .filter(|(_, r)| r.iter().any(|x| x != &r[0]))
        .map(|(c, r)| format!("{}: {:?}", c.words.join(" "), r))
        .collect();
    assert!(
        diffs.is_empty(),
        "{what}: {} of {} replies differ (redis-cell first), e.g.:\n{}",
        diffs.len(),
        calls.len(),
        diffs[..diffs.len().min(10)].join("\n")
    );
}

/// Every key's value (a string while redis-cell's, DUMP otherwise) and absolute expiry.
fn strings(c: &mut Connection) -> std::collections::BTreeMap<String, (Vec<u8>, i64)> {
    snapshot(c)
}

fn info(c: &mut Connection, section: &str) -> String {
    redis::cmd("INFO").arg(section).query(c).unwrap()
}

/// The switch at a restart (redis-cell's RDB loaded by this module with `CELL-COMPAT yes`):
/// every key continues exactly as redis-cell would go on, called under the policy it was
/// written with or under another (redis-cell judges its one TAT by the call's policy; so does
/// CL.THROTTLE here, for adopted keys and for keys it already converted).
#[test]
fn a_switch_at_a_restart_continues_exactly_with_policy_changes() {
    let Some((cell, clock)) = setup("a_switch_at_a_restart_continues_exactly_with_policy_changes")
    else {
        return;
    };
    let reference = start(&clock, &[], Some(&cell), &[]);
    let mut switched = start(&clock, &[], Some(&cell), &[]);
    let (mut r, mut s) = (reference.connect(), switched.connect());
    let mut now = START_MS;
    let before = trace(11, "rdb", 24, 600, 5);
    let replies = drive(&clock, &mut now, &mut [&mut r, &mut s], &before);
    assert_same("redis-cell against itself", &before, &replies);

    switched.reload("SAVE", None, COMPAT);
    let mut s = switched.connect();
    let after = trace(12, "rdb", 24, 1_200, 5);
    let replies = drive(&clock, &mut now, &mut [&mut r, &mut s], &after);
    assert_same("after the switch", &after, &replies);
}

/// The cases, one by one: a key written exhausted under `9 10 3600` (3,600 s of debt)
/// and first called after the switch under `0 3 1` keeps the debt redis-cell sees (3,597 s, not
/// one emission interval); a hot key changed to a tight policy likewise; a peek on a key in debt
/// past its capacity is limited in both.
#[test]
fn adoption_carries_the_tat_debt_under_another_policy() {
    let Some((cell, clock)) = setup("adoption_carries_the_tat_debt_under_another_policy") else {
        return;
    };
    let reference = start(&clock, &[], Some(&cell), &[]);
    let mut switched = start(&clock, &[], Some(&cell), &[]);
    let (mut r, mut s) = (reference.connect(), switched.connect());
    let mut now = START_MS;
    let mut calls = vec![];
    for _ in 0..10 {
        calls.push(call(0, "chg:p6 9 10 3600"));
    }
    for _ in 0..40 {
        calls.push(call(1, "p6:hot 99 100 1"));
    }
    drive(&clock, &mut now, &mut [&mut r, &mut s], &calls);
    switched.reload("SAVE", None, COMPAT);
    let mut s = switched.connect();
    let after = [
        call(3_000, "chg:p6 0 3 1 1"),
        call(0, "chg:p6 0 3 1 0"),
        call(0, "p6:hot 0 3 1 1"),
        call(0, "p6:hot 0 3 1 0"),
        call(100, "p6:hot 0 3 1 1"),
        call(0, "chg:p6 9 10 3600 1"),
        call(1_000, "chg:p6 0 3 1 2"),
        call(3_600_000, "chg:p6 0 3 1 1"),
        call(0, "p6:hot 99 100 1 50"),
    ];
    let replies = drive(&clock, &mut now, &mut [&mut r, &mut s], &after);
    assert_eq!(replies[0][1], [1, 1, 0, 3597, 3597], "the issue's chg:p6");
    assert_eq!(
        replies[1][0][0], 1,
        "a peek past capacity is limited in redis-cell"
    );
    assert_same("the issue's cases", &after, &replies);
}

fn call(advance_ms: u64, args: &str) -> Call {
    let mut words = vec!["CL.THROTTLE".to_string()];
    words.extend(args.split(' ').map(str::to_string));
    Call { advance_ms, words }
}

/// A replica with `CELL-COMPAT yes` of a redis-cell master receives `CL.THROTTLE` (redis-cell
/// replicates the command): it applies nothing (deciding again on its own clock would end off
/// the master), says so in its log, and the documented failover path — writes paused on the
/// master, a full resync, promotion — ends with the master's keys byte for byte; from there
/// the promoted replica answers as redis-cell goes on answering.
#[test]
fn a_replica_of_redis_cell_applies_nothing_and_fails_over_identical() {
    let Some((cell, clock)) =
        setup("a_replica_of_redis_cell_applies_nothing_and_fails_over_identical")
    else {
        return;
    };
    let master = start(&clock, &[], Some(&cell), &[]);
    let replica = start(&clock, &[], None, COMPAT);
    let (mut m, mut r) = (master.connect(), replica.connect());
    replicate(&mut r, &master);
    let mut now = START_MS;
    let before = trace(21, "repl", 24, 500, 5);
    drive(&clock, &mut now, &mut [&mut m], &before);
    wait_replica(&mut m);
    let keys: i64 = redis::cmd("DBSIZE").query(&mut r).unwrap();
    assert_eq!(
        keys, 0,
        "the replica applied redis-cell's CL.THROTTLE itself"
    );
    assert!(
        replica
            .log()
            .contains("came from the master or the AOF (redis-cell's stream): applied nothing"),
        "{}",
        replica.log()
    );

    // The failover path of docs/migrating-from-redis-cell.md.
    let full_before = info(&mut m, "stats");
    cmd(&mut m, &["CLIENT", "PAUSE", "60000", "WRITE"]).unwrap();
    cmd(&mut r, &["REPLICAOF", "NO", "ONE"]).unwrap();
    replicate(&mut r, &master);
    wait_for("the full resync", || {
        info(&mut r, "replication").contains("master_sync_in_progress:0")
            && info(&mut r, "persistence").contains("loading:0")
    });
    assert_ne!(
        stat(&full_before, "sync_full"),
        stat(&info(&mut m, "stats"), "sync_full"),
        "the resync was partial: the replica would not hold the master's keys"
    );
    assert_eq!(
        strings(&mut r),
        strings(&mut m),
        "the replica's keys are not the master's"
    );
    cmd(&mut r, &["REPLICAOF", "NO", "ONE"]).unwrap();
    cmd(&mut m, &["CLIENT", "UNPAUSE"]).unwrap();

    let after = trace(22, "repl", 24, 1_000, 5);
    let replies = drive(&clock, &mut now, &mut [&mut m, &mut r], &after);
    assert_same("after the failover", &after, &replies);
}

fn stat(info: &str, name: &str) -> String {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .unwrap_or("")
        .trim()
        .to_string()
}

/// redis-cell's AOF holds `CL.THROTTLE` commands. Rewritten (`BGREWRITEAOF`) under redis-cell
/// before the switch, it holds the keys as data, and this module continues them exactly.
#[test]
fn a_redis_cell_aof_rewritten_before_the_switch_continues_exactly() {
    let Some((cell, clock)) =
        setup("a_redis_cell_aof_rewritten_before_the_switch_continues_exactly")
    else {
        return;
    };
    let reference = start(&clock, &[], Some(&cell), &[]);
    let mut switched = start(&clock, &["--appendonly", "yes"], Some(&cell), &[]);
    let (mut r, mut s) = (reference.connect(), switched.connect());
    let mut now = START_MS;
    let before = trace(31, "aof", 24, 600, 5);
    drive(&clock, &mut now, &mut [&mut r, &mut s], &before);
    cmd(&mut s, &["BGREWRITEAOF"]).unwrap();
    wait_persistence_idle(&mut s);
    switched.reload("NOSAVE", None, COMPAT);
    let mut s = switched.connect();
    assert_eq!(
        strings(&mut s),
        strings(&mut r),
        "the rewritten AOF lost keys"
    );
    let after = trace(32, "aof", 24, 1_200, 5);
    let replies = drive(&clock, &mut now, &mut [&mut r, &mut s], &after);
    assert_same("after the switch from a rewritten AOF", &after, &replies);
}

/// Not rewritten, the AOF's `CL.THROTTLE` commands would be decided again at load, on the
/// clock of the restart: this module applies none of them and logs why; the doc says to
/// rewrite first.
#[test]
fn a_redis_cell_aof_not_rewritten_applies_nothing_and_says_so() {
    let Some((cell, clock)) = setup("a_redis_cell_aof_not_rewritten_applies_nothing_and_says_so")
    else {
        return;
    };
    let mut switched = start(&clock, &["--appendonly", "yes"], Some(&cell), &[]);
    let mut s = switched.connect();
    let mut now = START_MS;
    drive(
        &clock,
        &mut now,
        &mut [&mut s],
        &trace(41, "aof", 8, 100, 0),
    );
    let keys: i64 = redis::cmd("DBSIZE").query(&mut s).unwrap();
    assert!(keys > 0);
    switched.reload("NOSAVE", None, COMPAT);
    let mut s = switched.connect();
    let keys: i64 = redis::cmd("DBSIZE").query(&mut s).unwrap();
    assert_eq!(
        keys, 0,
        "CL.THROTTLE from the AOF was decided again at load"
    );
    assert!(
        switched.log().contains("applied nothing"),
        "{}",
        switched.log()
    );
}
