//! The module's test helpers on testkit's servers: a real `redis-server` per test, with the
//! module loaded, on a free loopback port; killed on drop. Time is driven through the module's
//! debug clock, never by sleeping.
#![allow(dead_code)]

use std::time::{Duration, Instant};

pub use redis::{Connection, Value};

pub mod cell;
pub mod cluster;
pub mod limiters;
pub mod registry;
pub mod server;

// Not every suite uses each of them.
#[allow(unused_imports)]
pub use registry::{algorithm, algorithms, assert_covers, limiter_algorithms, module_commands};
// Every suite takes the server through `use support::*`; not every suite uses each name.
#[allow(unused_imports)]
pub use server::{free_port, module_path, Server, OLD_SERVER, SERVER};
#[allow(unused_imports)]
pub use testkit::{clock_advance, clock_set, Scratch, T0_MS};

/// A server with its module clock pinned at `T0_MS`, and a connection to it: where most tests
/// start.
pub fn server() -> (Server, Connection) {
    let s = Server::start();
    let mut c = s.connect();
    clock_set(&mut c, T0_MS);
    (s, c)
}

/// Sends a command given as words; panics on a connection error, returns Redis errors.
pub fn cmd(c: &mut Connection, words: &[&str]) -> redis::RedisResult<Value> {
    let mut command = redis::cmd(words[0]);
    for w in &words[1..] {
        command.arg(*w);
    }
    command.query(c)
}

/// A limiter command's five-integer reply.
pub fn rl(c: &mut Connection, words: &[&str]) -> [i64; 5] {
    ints(c, words)
}

/// A reply of exactly N integers (five for the limiters, six for `RL.SHAPE`).
pub fn ints<const N: usize>(c: &mut Connection, words: &[&str]) -> [i64; N] {
    let mut command = redis::cmd(words[0]);
    for w in &words[1..] {
        command.arg(*w);
    }
    let v: Vec<i64> = command
        .query(c)
        .unwrap_or_else(|e| panic!("{words:?}: {e}"));
    v.try_into()
        .unwrap_or_else(|v| panic!("{words:?}: reply {v:?}"))
}

/// The error text of a command that must fail.
pub fn err(c: &mut Connection, words: &[&str]) -> String {
    match cmd(c, words) {
        // As the server wrote it: "ERR …", "WRONGTYPE …".
        Err(e) => format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or("")),
        Ok(v) => panic!("{words:?} should fail, got {v:?}"),
    }
}

/// `base` followed by `extra`: a limiter command with options added.
pub fn with<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    base.iter().chain(extra).copied().collect()
}

/// The peek `words` (COST 0) answers `expected` three times over, and changes neither the key's
/// DUMP nor its expiry.
pub fn assert_peeks_change_nothing(c: &mut Connection, words: &[&str], expected: [i64; 5]) {
    let key = words[1];
    let (before, at) = (dump(c, key), pexpiretime(c, key));
    for _ in 0..3 {
        assert_eq!(rl(c, words), expected, "{words:?}");
    }
    assert_eq!(dump(c, key), before, "{words:?} changed the key");
    assert_eq!(pexpiretime(c, key), at, "{words:?} changed the expiry");
}

/// The limiter command `words`, whose key (`words[1]`) the caller has filled, is denied now and
/// after each of five 10 ms steps, and those denials change neither the key's DUMP nor its
/// expiry.
pub fn assert_denial_writes_nothing(c: &mut Connection, words: &[&str]) {
    let key = words[1];
    let (before, at) = (dump(c, key), pexpiretime(c, key));
    assert_eq!(rl(c, words)[0], 0, "{words:?}");
    for _ in 0..5 {
        clock_advance(c, 10);
        assert_eq!(rl(c, words)[0], 0, "{words:?}");
    }
    assert_eq!(dump(c, key), before, "{words:?} changed the key");
    assert_eq!(pexpiretime(c, key), at, "{words:?} changed the expiry");
}

/// The limiter command `words` fails on a key that holds something else, with exactly the
/// WRONGTYPE text naming both (`holds`: "a GCRA limiter", "a string"; `wanted`: "GCRA").
pub fn assert_wrongtype(c: &mut Connection, words: &[&str], holds: &str, wanted: &str) {
    assert_eq!(
        err(c, words),
        format!(
            "WRONGTYPE the key holds {holds}, not a {wanted} limiter; use another key or DEL it"
        ),
        "{words:?}"
    );
}

/// Every command fails with an error containing its expected text, and none of them changes
/// any key (names, DUMPs and expiries are compared after each).
pub fn assert_errors_change_nothing<'a, W, E>(
    c: &mut Connection,
    cases: impl IntoIterator<Item = (W, E)>,
) where
    W: AsRef<[&'a str]>,
    E: AsRef<str>,
{
    let before = snapshot(c);
    for (words, expected) in cases {
        let (words, expected) = (words.as_ref(), expected.as_ref());
        let e = err(c, words);
        assert!(
            e.contains(expected),
            "{words:?}: got {e:?}, expected {expected:?}"
        );
        assert_eq!(snapshot(c), before, "{words:?} changed a key");
    }
}

/// A deterministic pseudo-random generator for test traces (xorshift64*): a fixed seed gives the
/// same trace on every run, so a failure reproduces. The seed must not be 0.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number from 0 to `n` − 1.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// One of `from`, which must not be empty.
    pub fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len() as u64) as usize]
    }
}

/// `DUMP key` bytes (None for a missing key).
pub fn dump(c: &mut Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("DUMP").arg(key).query(c).unwrap()
}

pub fn pexpiretime(c: &mut Connection, key: &str) -> i64 {
    redis::cmd("PEXPIRETIME").arg(key).query(c).unwrap()
}

/// Waits (bounded) until `f` holds, polling: for replication and background saves.
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `CONFIG GET ratelimit.max-log-entries`.
pub fn max_log_entries(c: &mut Connection) -> String {
    let v: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("ratelimit.max-log-entries")
        .query(c)
        .unwrap();
    assert_eq!(v[0], "ratelimit.max-log-entries");
    v[1].clone()
}

/// Makes the server behind `replica` replicate `master`, and waits until the link is up.
pub fn replicate(replica: &mut Connection, master: &Server) {
    cmd(
        replica,
        &["REPLICAOF", "127.0.0.1", &master.port.to_string()],
    )
    .unwrap();
    wait_for("replica link up", || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(replica)
            .unwrap();
        info.contains("master_link_status:up")
    });
}

/// A master and its replica (both with the module, the link up), the master's clock at T0 and
/// the replica's 3 hours ahead: a replica never decides, so nothing it stores may depend on its
/// own clock. Returns both servers (they stop when dropped) and a connection to each.
pub fn replica_hours_ahead() -> (Server, Server, Connection, Connection) {
    let master = Server::start();
    let replica = Server::start();
    let (mut m, mut r) = (master.connect(), replica.connect());
    clock_set(&mut m, T0_MS);
    clock_set(&mut r, T0_MS + 3 * 3_600_000);
    replicate(&mut r, &master);
    (master, replica, m, r)
}

/// Waits until one replica acknowledged everything the master behind `master` sent.
pub fn wait_replica(master: &mut Connection) {
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(30_000).query(master).unwrap();
    if acked != 1 {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(master)
            .unwrap_or_default();
        panic!("the replica did not acknowledge within 30 s; the master says:\n{info}");
    }
}

/// Redis's CRC-64 (Jones polynomial, reflected), as `DUMP` payloads carry it: lets a test
/// forge a payload whose checksum is right but whose contents are garbage.
pub fn crc64(data: &[u8]) -> u64 {
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5; // 0xad93d23594c935a9 bit-reversed
    let mut crc = 0u64;
    for &byte in data {
        crc ^= u64::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// Replaces the payload part of a DUMP (everything before the 2-byte version and 8-byte CRC)
/// and recomputes the checksum.
pub fn forge_dump(original: &[u8], edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let body_len = original.len() - 10;
    let mut body = original[..body_len].to_vec();
    edit(&mut body);
    body.extend_from_slice(&original[body_len..body_len + 2]);
    let crc = crc64(&body);
    body.extend_from_slice(&crc.to_le_bytes());
    body
}

/// A mixed workload over every command family: admits, denials, peeks, cost, policy changes.
/// Each algorithm and command family adds its commands here so that durability, replication and
/// the cross-server tests cover it (`run_workload` fails for an algorithm without a row).
pub const WORKLOAD: &[&[&str]] = &[
    &["RL.GCRA", "gcra:a", "10", "1000"],
    &["RL.GCRA", "gcra:a", "10", "1000", "COST", "5"],
    &["RL.GCRA", "gcra:a", "10", "1000", "COST", "5"],
    &["RL.GCRA", "gcra:a", "10", "1000", "COST", "0"],
    &["RL.GCRA", "gcra:b", "3", "1000", "BURST", "7", "COST", "2"],
    &["RL.GCRA", "gcra:b", "3", "1000", "BURST", "7"],
    &["RL.GCRA", "gcra:c", "1", "3600000"],
    &["RL.GCRA", "gcra:c", "1", "3600000"],
    &[
        "RL.GCRA", "gcra:d", "1000", "1", "BURST", "50", "COST", "49",
    ],
    &["RL.GCRA", "gcra:a", "20", "1000"],
    &["RL.TOKENBUCKET", "tb:a", "10", "1000"],
    &["RL.TOKENBUCKET", "tb:a", "10", "1000", "COST", "4"],
    &["RL.TOKENBUCKET", "tb:a", "10", "1000", "COST", "0"],
    &["RL.TOKENBUCKET", "tb:b", "7", "60000", "BURST", "2"],
    &["RL.TOKENBUCKET", "tb:b", "7", "60000", "BURST", "2"],
    &["RL.TOKENBUCKET", "tb:b", "7", "60000", "BURST", "2"],
    &["RL.TOKENBUCKET", "tb:a", "5", "1000", "BURST", "20"],
    &["RL.SLIDINGLOG", "sl:a", "10", "1000"],
    &["RL.SLIDINGLOG", "sl:a", "10", "1000", "COST", "4"],
    &["RL.SLIDINGLOG", "sl:a", "10", "1000", "COST", "0"],
    &["RL.SLIDINGLOG", "sl:b", "3", "60000", "COST", "2"],
    &["RL.SLIDINGLOG", "sl:b", "3", "60000"],
    &["RL.SLIDINGLOG", "sl:c", "1000", "86400000", "COST", "7"],
    &["RL.SLIDINGLOG", "sl:a", "8", "500"],
    // Called once under another W, then admitted under its own: a charged delta (format 2).
    &["RL.SLIDINGLOG", "sl:d", "5", "60001"],
    &["RL.SLIDINGLOG", "sl:d", "5", "60000"],
    &["RL.SLIDINGLOG", "sl:d", "5", "60000"],
    &["RL.SLIDINGCOUNTER", "sc:a", "10", "1000"],
    &["RL.SLIDINGCOUNTER", "sc:a", "10", "1000", "COST", "3"],
    &["RL.SLIDINGCOUNTER", "sc:a", "10", "1000", "COST", "0"],
    &["RL.SLIDINGCOUNTER", "sc:b", "2", "60000"],
    &["RL.SLIDINGCOUNTER", "sc:b", "2", "60000"],
    &["RL.SLIDINGCOUNTER", "sc:a", "20", "2000"],
    &["RL.FIXEDWINDOW", "fw:a", "10", "1000"],
    &["RL.FIXEDWINDOW", "fw:a", "10", "1000", "COST", "6"],
    &["RL.FIXEDWINDOW", "fw:a", "10", "1000", "COST", "0"],
    &["RL.FIXEDWINDOW", "fw:b", "1", "60000"],
    &["RL.FIXEDWINDOW", "fw:b", "1", "60000"],
    &["RL.FIXEDWINDOW", "fw:a", "4", "100"],
    &["RL.LEASE", "lease:a", "10", "1000", "WANT", "4"],
    &[
        "RL.LEASE", "lease:a", "10", "1000", "BURST", "12", "WANT", "9",
    ],
    &[
        "RL.LEASE", "lease:a", "10", "1000", "BURST", "12", "WANT", "9",
    ],
    &["RL.REFUND", "lease:a", "3"],
    &["RL.LEASE", "tb:a", "5", "1000", "BURST", "20", "WANT", "6"],
    &["RL.REFUND", "tb:b", "1"],
    &["RL.REFUND", "gcra:b", "2"],
    &["RL.REFUND", "fw:a", "2"],
    &["RL.REFUND", "sl:a", "1"],
    &["RL.REFUND", "sc:a", "1"],
    &["RL.SHAPE", "sh:a", "10", "1000", "QUEUE", "5"],
    &["RL.SHAPE", "sh:a", "10", "1000", "QUEUE", "5", "COST", "4"],
    &["RL.SHAPE", "sh:a", "10", "1000", "QUEUE", "5", "COST", "0"],
    &["RL.SHAPE", "sh:b", "1", "60000", "QUEUE", "2", "DELAY", "1"],
    &["RL.SHAPE", "sh:b", "1", "60000", "QUEUE", "2", "DELAY", "1"],
    &["RL.SHAPE", "sh:b", "1", "60000", "QUEUE", "2", "DELAY", "1"],
    &["RL.SHAPE", "sh:b", "1", "60000", "QUEUE", "2", "DELAY", "1"],
    &["RL.SHAPE", "sh:a", "20", "1000", "QUEUE", "8"],
    &["RL.REFUND", "sh:a", "2"],
    &["RL.CONCURRENCY", "cc:a", "3", "1000", "ACQUIRE", "a"],
    &["RL.CONCURRENCY", "cc:a", "3", "1000", "ACQUIRE", "b"],
    &["RL.CONCURRENCY", "cc:a", "3", "1000", "PEEK"],
    &["RL.CONCURRENCY", "cc:a", "3", "1000", "RENEW", "a"],
    &["RL.CONCURRENCY", "cc:a", "3", "1000", "RELEASE", "b"],
    &["RL.CONCURRENCY", "cc:b", "1", "60000", "ACQUIRE", "only"],
    &["RL.CONCURRENCY", "cc:b", "1", "60000", "ACQUIRE", "denied"],
    // Settles: overages charged into debt, and one given back (tests/charge/ creates keys).
    &["RL.CHARGE", "gcra:a", "25"],
    &["RL.CHARGE", "tb:a", "30"],
    &["RL.CHARGE", "sl:a", "12"],
    &["RL.CHARGE", "sc:a", "15"],
    &["RL.CHARGE", "fw:a", "14"],
    &["RL.CHARGE", "sh:a", "9"],
    &["RL.REFUND", "gcra:a", "10"],
];

/// Runs the workload `rounds` times, moving the debug clock 7 ms between commands.
pub fn run_workload(c: &mut Connection, rounds: usize) {
    assert_covers(
        "support::WORKLOAD",
        algorithms(),
        WORKLOAD.iter().map(|w| w[0]),
    );
    for _ in 0..rounds {
        for words in WORKLOAD {
            decide(c, words);
            clock_advance(c, 7);
        }
    }
}

/// The reply of a limiter, `RL.SHAPE` or `RL.REFUND` call: five integers, or six for a shaper
/// (the sixth is its delay).
pub fn decide(c: &mut Connection, words: &[&str]) -> Vec<i64> {
    let v: Vec<i64> = cmd(c, words)
        .and_then(|v| redis::from_redis_value(&v))
        .unwrap_or_else(|e| panic!("{words:?}: {e}"));
    assert!(matches!(v.len(), 5 | 6), "{words:?}: reply {v:?}");
    v
}

/// Every key's DUMP and absolute expiry, by name.
pub fn snapshot(c: &mut Connection) -> std::collections::BTreeMap<String, (Vec<u8>, i64)> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(c).unwrap();
    keys.into_iter()
        .map(|k| {
            let d = dump(c, &k).unwrap_or_default();
            let at = pexpiretime(c, &k);
            (k, (d, at))
        })
        .collect()
}

/// Waits until no RDB save or AOF rewrite is running or scheduled.
pub fn wait_persistence_idle(c: &mut Connection) {
    wait_for("background save/rewrite", || {
        let info: String = redis::cmd("INFO").arg("persistence").query(c).unwrap();
        [
            "rdb_bgsave_in_progress:0",
            "aof_rewrite_in_progress:0",
            "aof_rewrite_scheduled:0",
        ]
        .iter()
        .all(|s| info.contains(s))
    });
}
