//! The sliding log's delta effects (`RL.SETSTATE key <effect>` with a delta and the key's expiry,
//! see `core/src/state/delta.rs`): a replica and an AOF replay under a random sliding-log workload with
//! policy changes and refunds end digest-identical to the master; an admit on a long log
//! propagates a few dozen bytes, not the log; and a delta for another state than the key's is
//! refused with the key left as it was.

mod support;
use support::*;

/// xorshift64*: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const POLICIES: &[(&str, &str)] = &[
    ("20", "1000"),
    ("20", "1000"),
    ("20", "1000"),
    ("25", "1000"),
    ("12", "1500"),
    ("300", "2000"),
];

/// `steps` random requests over four keys: mostly admits and denials under one policy, some
/// under others (a policy change), peeks, costs up to 4, refunds; the clock moves 0–150 ms.
fn random_workload(c: &mut Connection, rng: &mut Rng, steps: usize) {
    for _ in 0..steps {
        let key = format!("sl:{}", rng.below(4));
        match rng.below(20) {
            0 => {
                let n = (1 + rng.below(4)).to_string();
                cmd(c, &["RL.REFUND", &key, &n]).unwrap();
            }
            _ => {
                // Keys sl:0..3 are called under every policy (each remembers several
                // configurations: full states, see algo::step); sl:one keeps one policy, so its
                // admits propagate deltas.
                let (key, which) = if rng.below(3) == 0 {
                    ("sl:one".to_string(), 0)
                } else {
                    (key, rng.below(POLICIES.len() as u64) as usize)
                };
                let (l, w) = POLICIES[which];
                let cost = rng.below(5).to_string();
                rl(c, &["RL.SLIDINGLOG", &key, l, w, "COST", &cost]);
            }
        }
        clock_advance(c, rng.below(150) as i64);
    }
}

fn digest(c: &mut Connection) -> String {
    redis::cmd("DEBUG").arg("DIGEST").query(c).unwrap()
}

fn repl_offset(c: &mut Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("replication").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("master_repl_offset:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("master_repl_offset")
}

/// A master and a replica (the replica's clock an hour ahead, to show it never decides).
fn pair() -> (Server, Server, Connection, Connection) {
    let master = Server::start();
    let replica = Server::start();
    let (mut m, mut r) = (master.connect(), replica.connect());
    clock_set(&mut m, T0_MS);
    clock_set(&mut r, T0_MS + 3_600_000);
    replicate(&mut r, &master);
    (master, replica, m, r)
}

#[test]
fn replica_under_a_random_workload_ends_digest_identical() {
    let (_ms, rs, mut m, mut r) = pair();
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    random_workload(&mut m, &mut rng, 1500);
    wait_replica(&mut m);
    assert!(snapshot(&mut m).len() >= 3);
    assert_eq!(snapshot(&mut m), snapshot(&mut r));
    assert_eq!(digest(&mut m), digest(&mut r));
    // Nothing was refused on the way (a refused delta leaves the replica's key behind and logs
    // the error).
    assert!(!rs.log().contains("refused"), "{}", rs.log());
}

/// A replica that attaches while the logs exist gets them by RDB (their canonical form, a fresh
/// ring): the deltas that follow still apply, as the fingerprint is of the entries, not of how
/// the ring lies in memory.
#[test]
fn a_replica_attached_late_applies_the_deltas_that_follow() {
    let master = Server::start();
    let mut m = master.connect();
    clock_set(&mut m, T0_MS);
    let mut rng = Rng(0x5eed_1234_abcd_0003);
    random_workload(&mut m, &mut rng, 600);
    let replica = Server::start();
    let mut r = replica.connect();
    replicate(&mut r, &master);
    random_workload(&mut m, &mut rng, 600);
    wait_replica(&mut m);
    assert_eq!(snapshot(&mut m), snapshot(&mut r));
    assert_eq!(digest(&mut m), digest(&mut r));
    assert!(!replica.log().contains("refused"), "{}", replica.log());
}

#[test]
fn an_admit_on_a_long_log_propagates_a_delta_not_the_log() {
    let (_ms, _rs, mut m, mut r) = pair();
    // 1000 entries 1 ms apart in a 1 s window: full; each admit then drops one and adds one.
    for _ in 0..1000 {
        clock_advance(&mut m, 1);
        assert_eq!(rl(&mut m, &["RL.SLIDINGLOG", "long", "1000", "1000"])[0], 1);
    }
    wait_replica(&mut m);
    let before = repl_offset(&mut m);
    for _ in 0..100 {
        clock_advance(&mut m, 1);
        assert_eq!(rl(&mut m, &["RL.SLIDINGLOG", "long", "1000", "1000"])[0], 1);
    }
    let per_admit = (repl_offset(&mut m) - before) / 100;
    // The full state would be 8 KB.
    assert!(per_admit < 120, "{per_admit} bytes per admit");
    wait_replica(&mut m);
    assert_eq!(dump(&mut m, "long"), dump(&mut r, "long"));
    assert_eq!(digest(&mut m), digest(&mut r));
}

/// The incremental AOF files' contents, concatenated.
fn incr_aof(s: &Server) -> Vec<u8> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(s.dir().join("appendonlydir")).unwrap() {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().contains(".incr.aof") {
            out.extend(std::fs::read(e.path()).unwrap());
        }
    }
    out
}

fn aof_server() -> (Server, Connection) {
    let s = Server::with(&["--appendonly", "yes", "--appendfsync", "always"], &[]);
    let mut c = s.connect();
    clock_set(&mut c, T0_MS);
    wait_persistence_idle(&mut c);
    (s, c)
}

#[test]
fn aof_replay_with_deltas_ends_digest_identical() {
    let (mut s, mut c) = aof_server();
    let mut rng = Rng(0x5eed_1234_abcd_0002);
    random_workload(&mut c, &mut rng, 800);
    // A rewrite (full states in the base), then more deltas on top of it.
    cmd(&mut c, &["BGREWRITEAOF"]).unwrap();
    wait_persistence_idle(&mut c);
    random_workload(&mut c, &mut rng, 800);
    assert!(
        incr_aof(&s)
            .windows(DELTA_MARKER.len())
            .any(|w| w == DELTA_MARKER),
        "the AOF holds deltas"
    );
    let (before, digest_before) = (snapshot(&mut c), digest(&mut c));
    assert!(before.len() >= 3);
    s.restart("NOSAVE");
    let mut c = s.connect();
    assert_eq!(snapshot(&mut c), before);
    assert_eq!(digest(&mut c), digest_before);
    assert!(!s.log().contains("refused"), "{}", s.log());
}

/// A delta effect as the AOF holds it: a 35-byte argument, kind 0xED, then the expiry and the
/// 26-byte delta.
const DELTA_MARKER: &[u8] = b"$35\r\n\xED";

/// The last delta in the AOF: the 26 bytes after the effect's kind and expiry.
fn last_delta(s: &Server) -> Vec<u8> {
    let aof = incr_aof(s);
    let at = aof
        .windows(DELTA_MARKER.len())
        .rposition(|w| w == DELTA_MARKER)
        .expect("a delta in the AOF")
        + DELTA_MARKER.len()
        + 8;
    aof[at..at + 26].to_vec()
}

/// Sends a delta effect (the delta with an expiry); the error it is refused with.
fn setdelta(c: &mut Connection, key: &str, delta: &[u8]) -> String {
    let mut effect = vec![0xED];
    effect.extend_from_slice(&(T0_MS + 100_000).to_le_bytes());
    effect.extend_from_slice(delta);
    redis::cmd("RL.SETSTATE")
        .arg(key)
        .arg(effect)
        .query::<()>(c)
        .unwrap_err()
        .to_string()
}

#[test]
fn a_delta_for_another_state_is_refused_and_the_key_unchanged() {
    let (s, mut c) = aof_server();
    for _ in 0..5 {
        rl(&mut c, &["RL.SLIDINGLOG", "k", "10", "1000"]);
        clock_advance(&mut c, 10);
    }
    // A real delta, replayed: the key has moved past the state it was made on.
    let delta = last_delta(&s);
    let (before, at) = (dump(&mut c, "k"), pexpiretime(&mut c, "k"));
    let e = setdelta(&mut c, "k", &delta);
    assert!(e.contains("another state"), "{e}");
    assert_eq!(
        (dump(&mut c, "k"), pexpiretime(&mut c, "k")),
        (before.clone(), at)
    );
    // A forged fingerprint.
    let mut forged = delta.clone();
    forged[2] ^= 1;
    let e = setdelta(&mut c, "k", &forged);
    assert!(e.contains("another state"), "{e}");
    assert_eq!((dump(&mut c, "k"), pexpiretime(&mut c, "k")), (before, at));
    // On a missing key: refused, nothing created. On another algorithm: refused.
    let e = setdelta(&mut c, "missing", &delta);
    assert!(e.contains("invalid limiter state"), "{e}");
    assert_eq!(dump(&mut c, "missing"), None);
    rl(&mut c, &["RL.GCRA", "g", "10", "1000"]);
    let g = dump(&mut c, "g");
    let e = setdelta(&mut c, "g", &delta);
    assert!(e.contains("invalid limiter state"), "{e}");
    assert_eq!(dump(&mut c, "g"), g);
    // Malformed: truncated, trailing, wrong version.
    for bad in [
        &delta[..25],
        &[&delta[..], &[0]].concat()[..],
        &[&[9], &delta[1..]].concat()[..],
    ] {
        let e = setdelta(&mut c, "k", bad);
        assert!(e.contains("invalid limiter state"), "{e}");
    }
    // A string key is not touched either.
    cmd(&mut c, &["SET", "str", "v"]).unwrap();
    let e = setdelta(&mut c, "str", &delta);
    assert!(e.starts_with("WRONGTYPE") || e.contains("invalid"), "{e}");
    let v: String = redis::cmd("GET").arg("str").query(&mut c).unwrap();
    assert_eq!(v, "v");
}
