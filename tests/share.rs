//! A region's share of a global limit (issue 30, docs/regions.md): `RL.SHARE` stores it with the
//! key, the limiter commands decide under the caller's policy scaled to it (the spend carried,
//! no remembered configuration), the safe policy again after the share's expiry, `RL.DEMAND`
//! reads and resets what was asked and admitted. The share persists and replicates.

mod support;

use redis::Connection;
use support::registry::limiter_algorithms;
use support::*;

fn at(c: &mut Connection, t_ms: u64) {
    clock_set(c, T0_MS + t_ms);
}

fn expiry(t_ms: u64) -> String {
    (T0_MS + t_ms).to_string()
}

/// `RL.SHARE GCRA 10 1000 10` (the region's safe policy: 10 per second) for `keys` with their
/// shares, all expiring at `until_ms`: the rows answered.
fn share(
    c: &mut Connection,
    algorithm: &str,
    keys: &[(&str, u64)],
    until_ms: u64,
) -> Vec<Vec<i64>> {
    let mut command = redis::cmd("RL.SHARE");
    command.arg(algorithm).arg(10).arg(1000).arg(10);
    for (key, share) in keys {
        command.arg(*key).arg(*share).arg(if *share == 0 {
            "0".to_string()
        } else {
            expiry(until_ms)
        });
    }
    command.query(c).unwrap()
}

fn demand(c: &mut Connection, keys: &[&str]) -> Vec<Vec<i64>> {
    let mut command = redis::cmd("RL.DEMAND");
    for key in keys {
        command.arg(*key);
    }
    command.query(c).unwrap()
}

/// Requests of cost 1 under `algorithm` with the safe policy: how many were admitted.
fn admit(c: &mut Connection, algorithm: &str, key: &str, n: usize) -> i64 {
    (0..n)
        .map(|_| rl(c, &[algorithm, key, "10", "1000"])[0])
        .sum()
}

#[test]
fn a_share_scales_the_callers_policy_and_the_spend_carries() {
    let (_s, mut c) = server();
    at(&mut c, 0);
    for algorithm in limiter_algorithms().map(|a| a.word.as_str()) {
        let key = format!("k:{algorithm}");
        let command = format!("RL.{algorithm}");
        // Created (missing), full, under L = 20: [share, expiry, L, B].
        let rows = share(&mut c, algorithm, &[(&key, 20)], 5000);
        assert_eq!(rows, vec![vec![20, (T0_MS + 5000) as i64, 20, 20]]);
        assert_eq!(
            rl(&mut c, &[&command, &key, "10", "1000"])[1],
            20,
            "{algorithm}"
        );
        assert_eq!(admit(&mut c, &command, &key, 9), 9, "{algorithm}");
        // Lowered to 5 after 10 spent: nothing more in this window.
        share(&mut c, algorithm, &[(&key, 5)], 5000);
        assert_eq!(admit(&mut c, &command, &key, 5), 0, "{algorithm}");
        // Raised to 30: at most 20 more (30 − the 10 spent); the algorithms that keep a debt
        // or a count give exactly that, the token bucket (whose balance stops at 0) none.
        share(&mut c, algorithm, &[(&key, 30)], 5000);
        let more = admit(&mut c, &command, &key, 25);
        let exact = ["GCRA", "SLIDINGLOG", "FIXEDWINDOW"].contains(&algorithm);
        assert!(more <= 20 && (!exact || more == 20), "{algorithm}: {more}");
        let rows = demand(&mut c, &[&key]);
        let expected = vec![40, 10 + more, 30, (T0_MS + 5000) as i64, 30];
        assert_eq!(rows, vec![expected], "{algorithm}");
        // Read and reset.
        assert_eq!(demand(&mut c, &[&key])[0][..2], [0, 0]);
    }
    assert_eq!(demand(&mut c, &["missing"]), vec![vec![0; 5]]);
}

/// A lease takes from the share: at most its capacity, its WANT counted as asked.
#[test]
fn a_lease_takes_from_the_share() {
    let (_s, mut c) = server();
    at(&mut c, 0);
    share(&mut c, "TOKENBUCKET", &[("k", 4)], 60_000);
    let lease = |c: &mut Connection| rl(c, &["RL.LEASE", "k", "10", "1000", "WANT", "6"])[0];
    assert_eq!(lease(&mut c), 4);
    assert_eq!(lease(&mut c), 0);
    assert_eq!(demand(&mut c, &["k"])[0][..2], [12, 4]);
}

#[test]
fn after_its_expiry_the_safe_policy_holds_and_the_key_lives_until_then() {
    let (_s, mut c) = server();
    at(&mut c, 0);
    share(&mut c, "GCRA", &[("k", 3)], 60_000);
    assert_eq!(pexpiretime(&mut c, "k"), (T0_MS + 60_000) as i64);
    assert_eq!(admit(&mut c, "RL.GCRA", "k", 10), 3);
    // A denial spends nothing, the TTL stays at the share's expiry.
    assert_eq!(pexpiretime(&mut c, "k"), (T0_MS + 60_000) as i64);
    at(&mut c, 60_000);
    let reply = rl(&mut c, &["RL.GCRA", "k", "10", "1000"]);
    assert_eq!(reply[..2], [1, 10]);
    let inspect: Vec<redis::Value> = redis::cmd("RL.INSPECT").arg("k").query(&mut c).unwrap();
    let text = format!("{inspect:?}");
    assert!(text.contains("share") && text.contains("asked"), "{text}");
}

#[test]
fn removing_a_share_returns_the_key_to_the_callers_policy() {
    let (_s, mut c) = server();
    at(&mut c, 0);
    share(&mut c, "FIXEDWINDOW", &[("k", 4)], 60_000);
    assert_eq!(admit(&mut c, "RL.FIXEDWINDOW", "k", 10), 4);
    assert_eq!(
        share(&mut c, "FIXEDWINDOW", &[("k", 0)], 0),
        vec![vec![0, 0, 10, 10]]
    );
    // The four spent stay spent under L = 10.
    assert_eq!(admit(&mut c, "RL.FIXEDWINDOW", "k", 10), 6);
    assert_eq!(demand(&mut c, &["k"]), vec![vec![0, 0, 0, 0, 10]]);
}

/// Shares moving every period never become remembered configurations: the key stays one
/// configuration (format 3), however many moves, and every move keeps the promise of the share
/// in force.
#[test]
fn many_moves_stay_one_configuration() {
    let (_s, mut c) = server();
    let mut admitted = 0;
    for second in 0..40u64 {
        at(&mut c, second * 1000);
        let s = 1 + (second * 7) % 13;
        share(&mut c, "SLIDINGLOG", &[("k", s)], second * 1000 + 999);
        let got = admit(&mut c, "RL.SLIDINGLOG", "k", 15);
        assert!(
            got <= s as i64,
            "second {second}: {got} under a share of {s}"
        );
        admitted += got;
    }
    assert!(admitted > 0);
    cmd(&mut c, &["DEBUG", "RELOAD"]).unwrap();
    // Second 39 stored 1 + 273 % 13 = 1.
    assert_eq!(demand(&mut c, &["k"])[0][2], 1);
}

#[test]
fn the_share_persists_and_replicates() {
    let (master, mut m) = server();
    let (_replica_server, mut r) = server();
    replicate(&mut r, &master);
    at(&mut m, 0);
    at(&mut r, 0);
    share(&mut m, "TOKENBUCKET", &[("a", 7), ("b", 2)], 30_000);
    admit(&mut m, "RL.TOKENBUCKET", "a", 3);
    admit(&mut m, "RL.TOKENBUCKET", "b", 3);
    // RL.ALL over a shared key and an unshared one, the shared one carried to a caller's
    // policy it did not hold (BURST 20: the share's B becomes 10), then admitted under it; and
    // a shared sliding log, admitted in place (a delta).
    share(&mut m, "TOKENBUCKET", &[("c", 5)], 30_000);
    share(&mut m, "SLIDINGLOG", &[("e", 5)], 30_000);
    for _ in 0..2 {
        let words = [
            "RL.ALL",
            "2",
            "e",
            "f",
            "SLIDINGLOG",
            "10",
            "1000",
            "SLIDINGLOG",
            "10",
            "1000",
        ];
        assert_eq!(nested(&mut m, &words)[0][0], 1);
    }
    // The single-key command sends a shared log's delta too.
    assert_eq!(admit(&mut m, "RL.SLIDINGLOG", "e", 1), 1);
    for _ in 0..2 {
        let words = [
            "RL.ALL",
            "2",
            "c",
            "d",
            "TOKENBUCKET",
            "10",
            "1000",
            "BURST",
            "20",
            "TOKENBUCKET",
            "10",
            "1000",
        ];
        assert_eq!(nested(&mut m, &words)[0][0], 1);
    }
    wait_replica(&mut m);
    for key in ["c", "d", "e", "f"] {
        let digest = |c: &mut Connection| -> Vec<String> {
            redis::cmd("DEBUG")
                .arg("DIGEST-VALUE")
                .arg(key)
                .query(c)
                .unwrap()
        };
        assert_eq!(digest(&mut m), digest(&mut r), "{key}");
    }
    assert_eq!(pexpiretime(&mut r, "c"), (T0_MS + 30_000) as i64);
    for key in ["a", "b"] {
        let digest = |c: &mut Connection| -> Vec<String> {
            redis::cmd("DEBUG")
                .arg("DIGEST-VALUE")
                .arg(key)
                .query(c)
                .unwrap()
        };
        assert_eq!(digest(&mut m), digest(&mut r), "{key}");
        assert_eq!(pexpiretime(&mut r, key), (T0_MS + 30_000) as i64);
    }
    // The replica holds the share but not the counters (the master's, in memory only); it
    // refuses RL.DEMAND and RL.SHARE like every write.
    assert!(err(&mut r, &["RL.DEMAND", "a"]).contains("READONLY"));
    cmd(&mut m, &["DEBUG", "RELOAD"]).unwrap();
    assert_eq!(
        demand(&mut m, &["a"]),
        vec![vec![0, 0, 7, (T0_MS + 30_000) as i64, 7]]
    );
    assert_eq!(admit(&mut m, "RL.TOKENBUCKET", "a", 10), 4);
}

#[test]
fn bad_arguments_are_refused_with_the_argument_named() {
    let (_s, mut c) = server();
    at(&mut c, 0);
    cmd(&mut c, &["SET", "s", "x"]).unwrap();
    let t = expiry(1000);
    for (words, expected) in [
        (
            vec!["RL.SHARE", "SHAPE", "1", "1", "1", "k", "1", &t],
            "unknown algorithm 'SHAPE'",
        ),
        (
            vec!["RL.SHARE", "FIXEDWINDOW", "2", "1", "1", "k", "1", &t],
            "B must equal L",
        ),
        (
            vec!["RL.SHARE", "GCRA", "0", "1", "1", "k", "1", &t],
            "invalid L",
        ),
        (
            vec!["RL.SHARE", "GCRA", "1", "1", "1", "k", "1", "0"],
            "needs an expiry",
        ),
        (
            vec!["RL.SHARE", "GCRA", "1", "1", "1", "k", "x", &t],
            "invalid share",
        ),
        (
            vec!["RL.SHARE", "GCRA", "1", "1", "1", "k", "1", &t, "k2"],
            "wrong number",
        ),
        (
            vec!["RL.SHARE", "GCRA", "1", "1", "1", "s", "1", &t],
            "WRONGTYPE",
        ),
    ] {
        let e = err(&mut c, &words);
        assert!(e.contains(expected), "{words:?}: {e}");
    }
    // A sliding log's share is held to the log bound like any L.
    cmd(
        &mut c,
        &["CONFIG", "SET", "ratelimit.max-log-entries", "100"],
    )
    .unwrap();
    let e = err(
        &mut c,
        &["RL.SHARE", "SLIDINGLOG", "10", "1000", "10", "k", "500", &t],
    );
    assert!(
        e.contains("L 500 is above ratelimit.max-log-entries"),
        "{e}"
    );
    assert_eq!(cmd(&mut c, &["EXISTS", "k"]).unwrap(), redis::Value::Int(0));
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg("RL.SHARE")
        .arg("GCRA")
        .arg(1)
        .arg(1)
        .arg(1)
        .arg("a")
        .arg(1)
        .arg(&t)
        .arg("b")
        .arg(1)
        .arg(&t)
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["a", "b"]);
}

/// A call answered with rows (`RL.ALL`, `RL.SETTLE`: the combined answer, then one per key).
fn nested(c: &mut Connection, words: &[&str]) -> Vec<Vec<i64>> {
    let mut command = redis::cmd(words[0]);
    for w in &words[1..] {
        command.arg(*w);
    }
    command
        .query(c)
        .unwrap_or_else(|e| panic!("{words:?}: {e}"))
}

/// `RL.ALL` (the Envoy RLS's call for every multi-descriptor request) decides a key holding a
/// share as the single-key commands do: under the caller's policy scaled to the share, counting
/// what it was asked and admitted, and keeps the share (never a remembered configuration).
#[test]
fn rl_all_decides_a_shared_key_under_its_share_and_keeps_it() {
    let (_s, mut c) = server();
    at(&mut c, 0);
    for algorithm in limiter_algorithms().map(|a| a.word.as_str()) {
        let (a, b) = (format!("a:{algorithm}"), format!("b:{algorithm}"));
        share(&mut c, algorithm, &[(&a, 3)], 60_000);
        let all = |c: &mut Connection| -> (Vec<i64>, Vec<i64>, Vec<i64>) {
            let words = ["RL.ALL", "2", &a, &b, algorithm, "10", "1000"];
            let rows = nested(c, &[&words[..], &[algorithm, "10", "1000"]].concat());
            (rows[0].clone(), rows[1].clone(), rows[2].clone())
        };
        let mut admitted = 0;
        for _ in 0..5 {
            let (combined, shared, unshared) = all(&mut c);
            // The shared key answers with its share's capacity, the other with the caller's.
            assert_eq!((shared[1], unshared[1]), (3, 10), "{algorithm}");
            admitted += combined[0];
        }
        assert_eq!(admitted, 3, "{algorithm}");
        let rows = demand(&mut c, &[&a]);
        assert_eq!(
            rows,
            vec![vec![5, 3, 3, (T0_MS + 60_000) as i64, 3]],
            "{algorithm}"
        );
        // The unshared key was charged only what the call admitted, and holds no share.
        assert_eq!(
            rl(
                &mut c,
                &[&format!("RL.{algorithm}"), &b, "10", "1000", "COST", "0"]
            )[2],
            7
        );
        assert_eq!(demand(&mut c, &[&b]), vec![vec![0, 0, 0, 0, 10]]);
        // Raised to 5 by the controller: RL.ALL carries the spend (3 spent, 2 more), the share
        // still one configuration.
        share(&mut c, algorithm, &[(&a, 5)], 60_000);
        let more: i64 = (0..4).map(|_| all(&mut c).0[0]).sum();
        let exact = ["GCRA", "SLIDINGLOG", "FIXEDWINDOW"].contains(&algorithm);
        assert!(more <= 2 && (!exact || more == 2), "{algorithm}: {more}");
        let inspect: Vec<redis::Value> = redis::cmd("RL.INSPECT").arg(&a).query(&mut c).unwrap();
        let text = format!("{inspect:?}");
        assert!(
            text.contains("share") && !text.contains("configurations"),
            "{algorithm}: {text}"
        );
        assert_eq!(demand(&mut c, &[&a])[0][..3], [4, more, 5], "{algorithm}");
    }
}

/// A shared key denied by another limiter of the call was still asked: its demand counts the
/// request, its share is not charged. A cost above the share's capacity waits for the share.
#[test]
fn rl_all_counts_a_shared_key_held_back_by_another_limiter() {
    let (_s, mut c) = server();
    at(&mut c, 0);
    share(&mut c, "GCRA", &[("a", 4)], 60_000);
    let all = |c: &mut Connection, cost: &str| -> Vec<i64> {
        let words = [
            "RL.ALL", "2", "a", "tight", "GCRA", "10", "1000", "COST", cost, "GCRA", "1", "1000",
        ];
        nested(c, &words)[0].clone()
    };
    assert_eq!(all(&mut c, "1")[0], 1);
    assert_eq!(all(&mut c, "1")[0], 0);
    // COST 5 is within the caller's B of 10 but above the share's 4: denied until the share
    // expires (retry_after_ms), asked all the same.
    let over = all(&mut c, "5");
    assert_eq!(over[0], 0);
    assert_eq!(over[3], 60_000);
    assert_eq!(
        demand(&mut c, &["a"]),
        vec![vec![7, 1, 4, (T0_MS + 60_000) as i64, 4]]
    );
    // The share's 3 left are still there for the single-key command.
    assert_eq!(admit(&mut c, "RL.GCRA", "a", 5), 3);
    // After the share's expiry RL.ALL decides under the caller's safe policy.
    at(&mut c, 60_000);
    let rows = nested(&mut c, &["RL.ALL", "1", "a", "GCRA", "10", "1000"]);
    assert_eq!(rows[1][..2], [1, 10]);
}

/// The settles decide nothing but spend and give back: on a key holding a share they act under
/// the share's policy, count into its demand, keep the share and the key's life to its expiry.
#[test]
fn settles_charge_and_refund_a_shared_key_under_its_share() {
    let (_s, mut c) = server();
    at(&mut c, 0);
    share(&mut c, "GCRA", &[("a", 4)], 60_000);
    // RL.CHARGE of 2: under the share (L 4), two of its four spent.
    let charged = rl(
        &mut c,
        &["RL.CHARGE", "a", "2", "POLICY", "GCRA", "10", "1000"],
    );
    assert_eq!(charged[..3], [2, 4, 2]);
    let charged = rl(&mut c, &["RL.CHARGE", "a", "1"]);
    assert_eq!(charged[..3], [1, 4, 1]);
    // RL.SETTLE charges one more, then gives two back.
    let settle = |c: &mut Connection, by: &str| -> Vec<i64> {
        nested(c, &["RL.SETTLE", "1", "a", "GCRA", "10", "1000", "BY", by])[0].clone()
    };
    assert_eq!(settle(&mut c, "1")[..3], [1, 4, 0]);
    assert_eq!(settle(&mut c, "-2")[..3], [1, 4, 2]);
    // RL.REFUND gives one back: 3 of 4 left.
    assert_eq!(rl(&mut c, &["RL.REFUND", "a", "1"])[..3], [1, 4, 3]);
    // Asked 2 + 1 + 1 and admitted as much; 2 + 1 given back from both.
    assert_eq!(
        demand(&mut c, &["a"]),
        vec![vec![1, 1, 4, (T0_MS + 60_000) as i64, 4]]
    );
    assert_eq!(pexpiretime(&mut c, "a"), (T0_MS + 60_000) as i64);
    // After the share's expiry RL.SETTLE acts under the caller's policy (the spend carried),
    // and the key still holds its share row (expired) rather than another configuration.
    at(&mut c, 60_000);
    assert_eq!(settle(&mut c, "1")[..3], [1, 10, 9]);
    let inspect: Vec<redis::Value> = redis::cmd("RL.INSPECT").arg("a").query(&mut c).unwrap();
    let text = format!("{inspect:?}");
    assert!(!text.contains("configurations"), "{text}");
}
