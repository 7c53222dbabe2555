//! `RL.ALL numkeys key [key ...] <limiter> [<limiter> ...]`: one decision over several limiters
//! at one `now`, all or nothing. Exact replies for a key nested under its tenant and for mixed
//! algorithms, errors that change nothing, many connections at once, a property test against the
//! single-key commands run one by one on copies of the keys, replication (one MULTI/EXEC of
//! effects, changed keys only), an AOF restart, and a 3-master cluster.

mod support;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use support::cluster::{slot, Cluster};
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

// ---------------------------------------------------------------------------------------------
// Exact replies.

/// A key nested under its tenant: the tenant's 3 per day run out while the key still has
/// tokens; every later call is denied and spends none of the key's tokens.
#[test]
fn the_tenant_denies_and_the_key_keeps_its_tokens() {
    let (_s, mut c) = at_midnight();
    let (key, tenant) = ("rl:{tenant:7}:key:abc", "rl:{tenant:7}:tenant");
    let words = [
        "RL.ALL",
        "2",
        key,
        tenant,
        "GCRA",
        "5",
        "1000",
        "FIXEDWINDOW",
        "3",
        "86400000",
    ];
    let expected = [
        // (combined, key, tenant): the tightest is the tenant.
        ([1, 3, 2, -1, DAY], [1, 5, 4, -1, 200], [1, 3, 2, -1, DAY]),
        ([1, 3, 1, -1, DAY], [1, 5, 3, -1, 400], [1, 3, 1, -1, DAY]),
        ([1, 3, 0, -1, DAY], [1, 5, 2, -1, 600], [1, 3, 0, -1, DAY]),
    ];
    for (combined, k, t) in expected {
        assert_eq!(all(&mut c, &words), (combined, vec![k, t]));
    }
    // The tenant denies (until midnight); the key would admit and is shown as it stands.
    assert_changes_nothing(
        &mut c,
        &words,
        [0, 3, 0, DAY, DAY],
        &[[1, 5, 2, -1, 600], [0, 3, 0, DAY, DAY]],
    );
    // The key kept its two tokens: a single-key request for both is admitted.
    assert_eq!(
        rl(&mut c, &["RL.GCRA", key, "5", "1000", "COST", "2"]),
        [1, 5, 0, -1, 1000]
    );
}

/// The key's 2 run out while the tenant has plenty: the denials spend none of the tenant's
/// tokens (it is charged exactly once per admitted call).
#[test]
fn the_key_denies_and_the_tenant_keeps_its_tokens() {
    let (_s, mut c) = at_midnight();
    let (key, tenant) = ("rl:{tenant:8}:key:abc", "rl:{tenant:8}:tenant");
    let words = [
        "RL.ALL",
        "2",
        key,
        tenant,
        "GCRA",
        "2",
        "1000",
        "TOKENBUCKET",
        "10",
        "60000",
    ];
    assert_eq!(
        all(&mut c, &words),
        (
            [1, 2, 1, -1, 6000],
            vec![[1, 2, 1, -1, 500], [1, 10, 9, -1, 6000]]
        )
    );
    assert_eq!(
        all(&mut c, &words),
        (
            [1, 2, 0, -1, 12000],
            vec![[1, 2, 0, -1, 1000], [1, 10, 8, -1, 12000]]
        )
    );
    assert_changes_nothing(
        &mut c,
        &words,
        [0, 2, 0, 500, 12000],
        &[[0, 2, 0, 500, 1000], [1, 10, 8, -1, 12000]],
    );
    assert_eq!(
        rl(
            &mut c,
            &["RL.TOKENBUCKET", tenant, "10", "60000", "COST", "0"]
        ),
        [1, 10, 8, -1, 12000]
    );
    // 500 ms later the key admits again; the tenant has spent exactly 3 tokens in all
    // (2.9167 after 500 ms of refill at one per 6 s).
    clock_advance(&mut c, 500);
    assert_eq!(
        all(&mut c, &words),
        (
            [1, 2, 0, -1, 17500],
            vec![[1, 2, 0, -1, 1000], [1, 10, 7, -1, 17500]]
        )
    );
}

/// Every algorithm side by side, each with its own cost: the report endpoint's 20 from the key's
/// bucket and 1 from the tenant's daily quota, among others. When the sliding log runs out, the
/// call is denied and no limiter is charged.
#[test]
fn mixed_algorithms_each_with_its_cost() {
    let (_s, mut c) = at_midnight();
    let words = [
        "RL.ALL",
        "5",
        "m:gcra",
        "m:bucket",
        "m:log",
        "m:counter",
        "m:day",
        "GCRA",
        "10",
        "1000",
        "BURST",
        "20",
        "COST",
        "5",
        "TOKENBUCKET",
        "100",
        "60000",
        "COST",
        "20",
        "SLIDINGLOG",
        "3",
        "1000",
        "SLIDINGCOUNTER",
        "50",
        "1000",
        "COST",
        "2",
        "FIXEDWINDOW",
        "1000",
        "86400000",
    ];
    let expected: [([i64; 5], [[i64; 5]; 5]); 3] = [
        (
            [1, 3, 2, -1, DAY],
            [
                [1, 20, 15, -1, 500],
                [1, 100, 80, -1, 12000],
                [1, 3, 2, -1, 1000],
                [1, 50, 48, -1, 2000],
                [1, 1000, 999, -1, DAY],
            ],
        ),
        (
            [1, 3, 1, -1, DAY],
            [
                [1, 20, 10, -1, 1000],
                [1, 100, 60, -1, 24000],
                [1, 3, 1, -1, 1000],
                [1, 50, 46, -1, 2000],
                [1, 1000, 998, -1, DAY],
            ],
        ),
        (
            [1, 3, 0, -1, DAY],
            [
                [1, 20, 5, -1, 1500],
                [1, 100, 40, -1, 36000],
                [1, 3, 0, -1, 1000],
                [1, 50, 44, -1, 2000],
                [1, 1000, 997, -1, DAY],
            ],
        ),
    ];
    for (combined, each) in expected {
        assert_eq!(all(&mut c, &words), (combined, each.to_vec()));
    }
    // The log is full: denied, retry when it admits (1 s), the others shown as they stand.
    assert_changes_nothing(
        &mut c,
        &words,
        [0, 3, 0, 1000, DAY],
        &[
            [1, 20, 5, -1, 1500],
            [1, 100, 40, -1, 36000],
            [0, 3, 0, 1000, 1000],
            [1, 50, 44, -1, 2000],
            [1, 1000, 997, -1, DAY],
        ],
    );
    // The bucket then holds 40 + 1000 ms of refill: the next call takes its 20.
    clock_advance(&mut c, 1000);
    let (combined, each) = all(&mut c, &words);
    assert_eq!(combined[0], 1);
    assert_eq!(each[1], [1, 100, 21, -1, 47000]);
    assert_eq!(each[4], [1, 1000, 996, -1, DAY - 1000]);
}

/// All COST 0: a peek over every limiter. It creates no key and changes none, also under a new
/// policy; a COST 0 limiter among charged ones is shown but neither charged nor holding back.
#[test]
fn a_peek_over_all_limiters_writes_nothing() {
    let (_s, mut c) = at_midnight();
    let peek = [
        "RL.ALL",
        "2",
        "p:a",
        "p:b",
        "GCRA",
        "5",
        "1000",
        "COST",
        "0",
        "SLIDINGLOG",
        "2",
        "1000",
        "COST",
        "0",
    ];
    assert_changes_nothing(
        &mut c,
        &peek,
        [1, 2, 2, -1, 0],
        &[[1, 5, 5, -1, 0], [1, 2, 2, -1, 0]],
    );
    assert_eq!(dbsize(&mut c), 0, "a peek created a key");
    for _ in 0..2 {
        rl(&mut c, &["RL.SLIDINGLOG", "p:b", "2", "1000"]);
    }
    assert_changes_nothing(
        &mut c,
        &peek,
        [0, 2, 0, 1000, 1000],
        &[[1, 5, 5, -1, 0], [0, 2, 0, 1000, 1000]],
    );
    // Under a new policy a peek answers as that policy would, and stores nothing.
    let mut wider = peek;
    wider[10] = "4";
    assert_changes_nothing(
        &mut c,
        &wider,
        [1, 4, 2, -1, 1000],
        &[[1, 5, 5, -1, 0], [1, 4, 2, -1, 1000]],
    );
    assert_eq!(dbsize(&mut c), 1);
    // p:a is charged; p:b (COST 0, full) is shown, not charged, and does not deny the call.
    let b = dump(&mut c, "p:b");
    let mut charge_a = peek;
    charge_a[8] = "1";
    assert_eq!(
        all(&mut c, &charge_a),
        (
            [1, 2, 0, -1, 1000],
            vec![[1, 5, 4, -1, 200], [0, 2, 0, 1000, 1000]]
        )
    );
    assert_eq!(dump(&mut c, "p:b"), b);
}

/// Eight limiters, each reply exact; then one of them denies and nothing is charged.
#[test]
fn eight_limiters() {
    let (_s, mut c) = at_midnight();
    let words: Vec<&str> = [
        &["RL.ALL", "8"][..],
        &["e:1", "e:2", "e:3", "e:4", "e:5", "e:6", "e:7", "e:8"],
        &["GCRA", "10", "1000"],
        &["TOKENBUCKET", "10", "1000"],
        &["SLIDINGLOG", "10", "1000"],
        &["SLIDINGCOUNTER", "10", "1000"],
        &["FIXEDWINDOW", "10", "1000"],
        &["gcra", "2", "1000", "burst", "4", "cost", "3"],
        &["TOKENBUCKET", "100", "60000", "BURST", "200", "COST", "50"],
        &["FixedWindow", "1000", "86400000"],
    ]
    .concat();
    let first = vec![
        [1, 10, 9, -1, 100],
        [1, 10, 9, -1, 100],
        [1, 10, 9, -1, 1000],
        [1, 10, 9, -1, 2000],
        [1, 10, 9, -1, 1000],
        [1, 4, 1, -1, 1500],
        [1, 200, 150, -1, 30000],
        [1, 1000, 999, -1, DAY],
    ];
    assert_eq!(all(&mut c, &words), ([1, 4, 1, -1, DAY], first.clone()));
    assert_eq!(dbsize(&mut c), 8);
    // e:6 has 1 token left and asks for 3: it denies (retry when its debt allows 3: 1 s).
    let mut second = first;
    second[5] = [0, 4, 1, 1000, 1500];
    assert_changes_nothing(&mut c, &words, [0, 4, 1, 1000, DAY], &second);
}

/// 32 limiters in one call (the most), and 33 refused.
#[test]
fn thirty_two_limiters() {
    let (_s, mut c) = server();
    let keys: Vec<String> = (0..33).map(|i| format!("k:{i}")).collect();
    let call = |n: usize| -> Vec<String> {
        let mut words = vec!["RL.ALL".to_string(), n.to_string()];
        words.extend(keys[..n].iter().cloned());
        for _ in 0..n {
            words.extend(["GCRA", "1", "60000"].map(String::from));
        }
        words
    };
    let words = call(32);
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    assert_eq!(
        all(&mut c, &words),
        ([1, 1, 0, -1, 60000], vec![[1, 1, 0, -1, 60000]; 32])
    );
    assert_eq!(dbsize(&mut c), 32);
    assert_changes_nothing(
        &mut c,
        &words,
        [0, 1, 0, 60000, 60000],
        &[[0, 1, 0, 60000, 60000]; 32],
    );
    let words = call(33);
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    assert_errors_change_nothing(
        &mut c,
        [(
            words,
            "ERR invalid numkeys '33': expected an integer from 1 to 32",
        )],
    );
}

// ---------------------------------------------------------------------------------------------
// Errors.

#[test]
fn errors_change_nothing() {
    let (_s, mut c) = server();
    rl(&mut c, &["RL.TOKENBUCKET", "tb", "10", "1000"]);
    cmd(&mut c, &["SET", "s", "x"]).unwrap();
    // `fresh` comes first and would be admitted: an error later in the call must not write it.
    let g = ["GCRA", "1", "1000"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            with(&["RL.ALL", "2", "fresh", "fresh"], &[g, g].concat()),
            "ERR key 'fresh' is named twice; each key has one limiter",
        ),
        (
            with(&["RL.ALL", "0", "fresh"], &g),
            "ERR invalid numkeys '0': expected an integer from 1 to 32",
        ),
        (
            with(&["RL.ALL", "33", "fresh"], &g),
            "ERR invalid numkeys '33': expected an integer from 1 to 32",
        ),
        (
            with(&["RL.ALL", "two", "fresh"], &g),
            "ERR invalid numkeys 'two': expected an integer from 1 to 32",
        ),
        (
            with(&["RL.ALL", "-1", "fresh"], &g),
            "ERR invalid numkeys '-1'",
        ),
        (
            with(&["RL.ALL", "2", "fresh", "other"], &g),
            "ERR no limiter for key 'other': expected 2 limiters, one per key",
        ),
        (
            with(&["RL.ALL", "1", "fresh"], &[g, g].concat()),
            "ERR more limiters than keys: numkeys is 1",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "LEAKYBUCKET", "1", "1000"],
            "ERR unknown algorithm 'LEAKYBUCKET'; expected GCRA, TOKENBUCKET, SLIDINGLOG, SLIDINGCOUNTER or FIXEDWINDOW",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "RL.GCRA", "1", "1000"],
            "ERR unknown algorithm 'RL.GCRA'",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "LEASE", "1", "1000"],
            "ERR unknown algorithm 'LEASE'",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "TOKENBUCKET", "5", "1000", "WANT", "2"],
            "ERR unknown option 'WANT'; expected BURST or COST",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "SLIDINGLOG", "5", "1000", "BURST", "9"],
            "ERR unknown option 'BURST'; expected COST",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "SLIDINGCOUNTER", "5", "1000", "BURST", "9"],
            "ERR unknown option 'BURST'; expected COST",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "FIXEDWINDOW", "5", "1000", "BURST", "9"],
            "ERR unknown option 'BURST'; expected COST",
        ),
        (
            with(
                &["RL.ALL", "2", "fresh", "other"],
                &[&g[..], &["FIXEDWINDOW", "3", "1000", "COST", "4"]].concat(),
            ),
            "ERR COST 4 can never be admitted: it exceeds the capacity 3",
        ),
        (
            with(
                &["RL.ALL", "2", "fresh", "other"],
                &[&g[..], &["GCRA", "5", "1000", "BURST", "8", "COST", "9"]].concat(),
            ),
            "ERR COST 9 can never be admitted: it exceeds the capacity 8",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "GCRA", "0", "1000"],
            "ERR invalid L '0': expected an integer from 1 to 1000000000000",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "GCRA", "1", "1000", "COST", "1", "COST", "1"],
            "ERR option COST given more than once",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "GCRA", "1", "1000", "COST"],
            "ERR option COST needs a value",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "SLIDINGLOG", "100000", "1000"],
            "above ratelimit.max-log-entries",
        ),
        (
            vec!["RL.ALL", "1", "fresh", "GCRA", "1"],
            "wrong number of arguments",
        ),
        (
            with(&["RL.ALL", "2", "fresh", "other"], &[&g[..], &["GCRA", "1"]].concat()),
            "wrong number of arguments",
        ),
    ];
    assert_errors_change_nothing(&mut c, cases);
    // WRONGTYPE names the key, on any position of the call.
    let before = snapshot(&mut c);
    assert_eq!(
        err(&mut c, &with(&["RL.ALL", "2", "fresh", "tb"], &[g, g].concat())),
        "WRONGTYPE the key 'tb' holds a token bucket limiter, not a GCRA limiter; use another key or DEL it"
    );
    assert_eq!(
        err(
            &mut c,
            &with(&["RL.ALL", "2", "s", "fresh"], &[g, g].concat())
        ),
        "WRONGTYPE the key 's' holds a string, not a GCRA limiter; use another key or DEL it"
    );
    assert_eq!(snapshot(&mut c), before);
    assert_eq!(dump(&mut c, "fresh"), None);
}

/// The keys are found from `numkeys`, by Redis itself: `COMMAND GETKEYS` lists them, and an ACL
/// user limited to `rl:*` cannot name another key in any position.
#[test]
fn getkeys_and_acl_key_patterns_see_every_key() {
    let (s, mut c) = server();
    let words = [
        "RL.ALL", "2", "rl:a", "other:b", "GCRA", "1", "1000", "GCRA", "1", "1000",
    ];
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg(&words[..])
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["rl:a", "other:b"]);
    cmd(
        &mut c,
        &["ACL", "SETUSER", "gw", "on", ">pw", "~rl:*", "+@all"],
    )
    .unwrap();
    let mut gw = s.connect();
    cmd(&mut gw, &["AUTH", "gw", "pw"]).unwrap();
    let e = err(&mut gw, &words);
    assert!(e.starts_with("NOPERM"), "{e}");
    assert_eq!(dbsize(&mut c), 0);
    let mut allowed = words;
    allowed[3] = "rl:b";
    assert_eq!(all(&mut gw, &allowed).0[0], 1);
}

// ---------------------------------------------------------------------------------------------
// Many connections at once.

/// 16 connections, 50 keys under one tenant, the clock frozen: the tenant admits exactly its
/// 100 in total, no key more than its 5, and no denial spends a token anywhere.
#[test]
fn sixteen_connections_fifty_keys_one_tenant() {
    const KEYS: usize = 50;
    const THREADS: usize = 16;
    let (s, _c) = server();
    let barrier = Arc::new(Barrier::new(THREADS));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let mut c = s.connect();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let mut admitted = vec![0i64; KEYS];
                barrier.wait();
                // Every thread walks all keys twice, each from its own starting point.
                for i in 0..2 * KEYS {
                    let k = (t * 7 + i * 3) % KEYS;
                    let key = format!("rl:{{tenant:1}}:key:{k}");
                    let (combined, each) = all(
                        &mut c,
                        &[
                            "RL.ALL",
                            "2",
                            &key,
                            "rl:{tenant:1}:tenant",
                            "TOKENBUCKET",
                            "5",
                            "60000",
                            "FIXEDWINDOW",
                            "100",
                            "86400000",
                        ],
                    );
                    assert_eq!(combined[0], each[0][0].min(each[1][0]));
                    admitted[k] += combined[0];
                }
                admitted
            })
        })
        .collect();
    let mut per_key = vec![0i64; KEYS];
    for w in workers {
        for (total, n) in per_key.iter_mut().zip(w.join().unwrap()) {
            *total += n;
        }
    }
    assert_eq!(per_key.iter().sum::<i64>(), 100, "{per_key:?}");
    let mut c = s.connect();
    for (k, &n) in per_key.iter().enumerate() {
        assert!(n <= 5, "key {k} admitted {n}");
        let key = format!("rl:{{tenant:1}}:key:{k}");
        let (_, each) = all(
            &mut c,
            &[
                "RL.ALL",
                "2",
                &key,
                "rl:{tenant:1}:tenant",
                "TOKENBUCKET",
                "5",
                "60000",
                "COST",
                "0",
                "FIXEDWINDOW",
                "100",
                "86400000",
                "COST",
                "0",
            ],
        );
        assert_eq!(each[0][2], 5 - n, "key {k}: a denial spent its tokens");
        assert_eq!(each[1][2], 0, "the tenant");
    }
}

// ---------------------------------------------------------------------------------------------
// Property: RL.ALL is the single-key commands, all or nothing.

/// The algorithms `RL.ALL` takes: every limiter of the registry, by index.
fn in_all() -> Vec<&'static support::registry::Algorithm> {
    limiter_algorithms().collect()
}
const KEY_SLOTS: usize = 6;

#[derive(Clone, Copy, Debug)]
struct Pol {
    limit: u64,
    window_ms: u64,
    burst: Option<u64>,
}

impl Pol {
    fn capacity(&self) -> u64 {
        self.burst.unwrap_or(self.limit)
    }

    fn words(&self, cost: u64) -> Vec<String> {
        let mut w = vec![self.limit.to_string(), self.window_ms.to_string()];
        if let Some(b) = self.burst {
            w.extend(["BURST".to_string(), b.to_string()]);
        }
        w.extend(["COST".to_string(), cost.to_string()]);
        w
    }
}

/// One limiter of a call: (key slot, which of its two policies, cost).
type Lim = (usize, bool, u64);

/// A case: for each key slot an algorithm and two policies; then steps of (clock gap in ms,
/// the call's limiters).
#[derive(Clone, Debug)]
struct Case {
    keys: Vec<(usize, [Pol; 2])>,
    steps: Vec<(u64, Vec<Lim>)>,
}

fn pol(algorithm: usize) -> impl Strategy<Value = Pol> {
    let burst = in_all()[algorithm].burst;
    (
        1u64..=5,
        prop::sample::select(vec![1000u64, 3000, 60000]),
        0u64..=3,
        any::<bool>(),
    )
        .prop_map(move |(limit, window_ms, extra, with_burst)| Pol {
            limit,
            window_ms,
            burst: (burst && with_burst).then_some(limit + extra),
        })
}

fn case() -> impl Strategy<Value = Case> {
    let key = (0..in_all().len()).prop_flat_map(|a| (Just(a), [pol(a), pol(a)]));
    let limiter = (0..KEY_SLOTS, any::<bool>(), 0u64..=3);
    let gap = prop_oneof![3 => Just(0u64), 2 => 1u64..500, 1 => 500u64..5000];
    let step = (gap, prop::collection::vec(limiter, 1..=4));
    (
        prop::collection::vec(key, KEY_SLOTS),
        prop::collection::vec(step, 1..=15),
    )
        .prop_map(|(keys, steps)| Case { keys, steps })
}

/// Copies `from` (DUMP and absolute expiry, or its absence) to `to`.
fn copy(c: &mut Connection, state: &(Option<Vec<u8>>, i64), to: &str) {
    let _: () = redis::cmd("DEL").arg(to).query(c).unwrap();
    if let Some(payload) = &state.0 {
        let _: () = redis::cmd("RESTORE")
            .arg(to)
            .arg(0)
            .arg(payload.as_slice())
            .arg("REPLACE")
            .query(c)
            .unwrap();
        if state.1 >= 0 {
            let _: i64 = redis::cmd("PEXPIREAT")
                .arg(to)
                .arg(state.1)
                .query(c)
                .unwrap();
        }
    }
}

fn key_state(c: &mut Connection, key: &str) -> (Option<Vec<u8>>, i64) {
    (dump(c, key), pexpiretime(c, key))
}

/// The single-key command of `algorithm` on `key`.
fn single(c: &mut Connection, algorithm: usize, key: &str, p: &Pol, cost: u64) -> [i64; 5] {
    let command = &in_all()[algorithm].command;
    let mut words = vec![command.clone(), key.to_string()];
    words.extend(p.words(cost));
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    rl(c, &words)
}

fn run_case(c: &mut Connection, case: &Case) -> Result<(), TestCaseError> {
    let _: () = redis::cmd("FLUSHALL").query(c).unwrap();
    clock_set(c, T0_MS);
    // The policy each real key holds, as far as this test has seen it stored.
    let mut held: BTreeMap<usize, (u64, u64, u64)> = BTreeMap::new();
    for (n, (gap, limiters)) in case.steps.iter().enumerate() {
        clock_advance(c, i64::try_from(*gap).unwrap());
        let mut seen = [false; KEY_SLOTS];
        let limiters: Vec<(usize, usize, u64)> = limiters
            .iter()
            .filter(|(k, _, _)| !std::mem::replace(&mut seen[*k], true))
            .map(|&(k, second, cost)| {
                let choice = usize::from(second);
                (k, choice, cost.min(case.keys[k].1[choice].capacity()))
            })
            .collect();
        // On a copy of each key: a peek, then the single-key command.
        let mut pre = Vec::new();
        let mut peeks = Vec::new();
        let mut singles = Vec::new();
        let mut shadows = Vec::new();
        for &(k, choice, cost) in &limiters {
            let (algorithm, policies) = &case.keys[k];
            let p = &policies[choice];
            let state = key_state(c, &format!("k{k}"));
            let shadow = format!("s{k}");
            copy(c, &state, &shadow);
            peeks.push(single(c, *algorithm, &shadow, p, 0));
            singles.push(single(c, *algorithm, &shadow, p, cost));
            shadows.push(key_state(c, &shadow));
            pre.push(state);
        }
        let mut words = vec!["RL.ALL".to_string(), limiters.len().to_string()];
        words.extend(limiters.iter().map(|(k, _, _)| format!("k{k}")));
        for &(k, choice, cost) in &limiters {
            let (algorithm, policies) = &case.keys[k];
            words.push(in_all()[*algorithm].word.clone());
            words.extend(policies[choice].words(cost));
        }
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        let (combined, each) = all(c, &words);
        let charged = limiters.iter().any(|l| l.2 > 0);
        let admits = limiters
            .iter()
            .zip(&singles)
            .all(|(l, s)| s[0] == 1 || (charged && l.2 == 0));
        prop_assert_eq!(combined[0], i64::from(admits), "step {}: {:?}", n, words);
        for (i, &(k, choice, cost)) in limiters.iter().enumerate() {
            let real = format!("k{k}");
            let after = key_state(c, &real);
            let (algorithm, policies) = &case.keys[k];
            let p = &policies[choice];
            let policy = (p.limit, p.window_ms, p.capacity());
            let policy_changed = pre[i].0.is_some() && held.get(&k) != Some(&policy);
            if admits {
                prop_assert_eq!(each[i], singles[i], "step {}: {:?} limiter {}", n, words, i);
                prop_assert_eq!(&after, &shadows[i], "step {}: {:?} key {}", n, words, real);
            } else {
                let expected = if singles[i][0] == 1 && cost > 0 {
                    peeks[i]
                } else {
                    singles[i]
                };
                prop_assert_eq!(each[i], expected, "step {}: {:?} limiter {}", n, words, i);
                if cost > 0 && policy_changed {
                    // Stored as a single-key denial stores it: the state carried to the new
                    // policy. A request for one more than remains is such a denial.
                    let (capacity, remaining) = (peeks[i][1], peeks[i][2]);
                    if remaining < capacity {
                        let t = format!("t{k}");
                        copy(c, &pre[i], &t);
                        let more = u64::try_from(remaining + 1).unwrap();
                        prop_assert_eq!(single(c, *algorithm, &t, p, more)[0], 0);
                        prop_assert_eq!(&after, &key_state(c, &t), "step {}: {:?}", n, words);
                    } else {
                        // Full under the new policy: the key now holds it, and the single-key
                        // command goes on from it exactly as from the old state.
                        prop_assert_ne!(&after.0, &pre[i].0, "step {}: policy not stored", n);
                        let u = format!("u{k}");
                        copy(c, &after, &u);
                        prop_assert_eq!(single(c, *algorithm, &u, p, cost), singles[i]);
                        prop_assert_eq!(&key_state(c, &u), &shadows[i], "step {}", n);
                    }
                } else {
                    prop_assert_eq!(&after, &pre[i], "step {}: {:?} key {}", n, words, real);
                }
            }
            if after.0 != pre[i].0 {
                held.insert(k, policy);
            }
        }
        // The combined fields: the tightest limiter (first of the fewest remaining), the
        // latest retry of the charged limiters (of all when none is: a peek), the latest reset.
        let tightest = each
            .iter()
            .min_by_key(|d| d[2])
            .copied()
            .unwrap_or_default();
        let retry = if admits {
            -1
        } else {
            each.iter()
                .zip(&limiters)
                .filter(|(_, l)| l.2 > 0 || !charged)
                .map(|(d, _)| d[3].max(0))
                .max()
                .unwrap_or(0)
        };
        let reset = each.iter().map(|d| d[4]).max().unwrap_or(0);
        prop_assert_eq!(
            combined,
            [i64::from(admits), tightest[1], tightest[2], retry, reset],
            "step {}: {:?}",
            n,
            words
        );
    }
    Ok(())
}

/// RL.ALL admits exactly when every charged limiter's single-key command would (every limiter's,
/// for a peek over all), and leaves each key exactly as that command leaves a copy of it; when
/// it denies, each key is left as it was, or as a single-key denial leaves it when the policy
/// changed.
#[test]
fn all_is_the_single_key_commands_all_or_nothing() {
    let (_s, c) = server();
    let c = RefCell::new(c);
    let mut runner = TestRunner::new(Config::with_cases(32));
    runner
        .run(&case(), |case| run_case(&mut c.borrow_mut(), &case))
        .unwrap();
}

// ---------------------------------------------------------------------------------------------
// Replication, AOF, cluster.

/// A master and a replica, the replica's clock 3 hours ahead.
fn pair() -> (Server, Server, Connection, Connection) {
    // No 5 s wait before the first sync; no PING from the master moving its offset meanwhile.
    let master = Server::with(
        &[
            "--repl-diskless-sync-delay",
            "0",
            "--repl-ping-replica-period",
            "3600",
        ],
        &[],
    );
    let replica = Server::with(&["--replicaof", "127.0.0.1", &master.port.to_string()], &[]);
    let (mut m, mut r) = (master.connect(), replica.connect());
    clock_set(&mut m, T0_MS);
    clock_set(&mut r, T0_MS + 3 * 3_600_000);
    wait_for("replica link up", || {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut r).unwrap();
        info.contains("master_link_status:up")
    });
    (master, replica, m, r)
}

fn offset(c: &mut Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("replication").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("master_repl_offset:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("master_repl_offset")
}

/// A workload of RL.ALL calls: admits, denials, peeks, costs, policy changes.
const ALL_WORKLOAD: &[&[&str]] = &[
    &[
        "RL.ALL",
        "2",
        "w:{t}:k1",
        "w:{t}:t",
        "GCRA",
        "3",
        "1000",
        "FIXEDWINDOW",
        "20",
        "60000",
    ],
    &[
        "RL.ALL",
        "2",
        "w:{t}:k2",
        "w:{t}:t",
        "TOKENBUCKET",
        "5",
        "1000",
        "COST",
        "3",
        "FIXEDWINDOW",
        "20",
        "60000",
    ],
    &[
        "RL.ALL",
        "3",
        "w:{t}:k1",
        "w:{t}:k2",
        "w:{t}:log",
        "GCRA",
        "3",
        "1000",
        "COST",
        "0",
        "TOKENBUCKET",
        "5",
        "1000",
        "SLIDINGLOG",
        "4",
        "2000",
        "COST",
        "2",
    ],
    &[
        "RL.ALL",
        "2",
        "w:{t}:ctr",
        "w:{t}:t",
        "SLIDINGCOUNTER",
        "6",
        "1000",
        "COST",
        "2",
        "FIXEDWINDOW",
        "20",
        "60000",
    ],
    &[
        "RL.ALL",
        "2",
        "w:{t}:k1",
        "w:{t}:t",
        "GCRA",
        "3",
        "1000",
        "BURST",
        "5",
        "FIXEDWINDOW",
        "20",
        "60000",
    ],
    &[
        "RL.ALL",
        "2",
        "w:{t}:k1",
        "w:{t}:t",
        "GCRA",
        "3",
        "1000",
        "COST",
        "0",
        "FIXEDWINDOW",
        "20",
        "60000",
        "COST",
        "0",
    ],
    &[
        "RL.ALL",
        "2",
        "w:{t}:log",
        "w:{t}:t",
        "SLIDINGLOG",
        "2",
        "2000",
        "COST",
        "2",
        "FIXEDWINDOW",
        "25",
        "60000",
    ],
];

#[test]
fn a_replica_on_another_clock_ends_digest_identical() {
    assert_covers(
        "ALL_WORKLOAD",
        limiter_algorithms(),
        ALL_WORKLOAD.iter().flat_map(|words| words.iter()),
    );
    let (_ms, _rs, mut m, mut r) = pair();
    for _ in 0..6 {
        for words in ALL_WORKLOAD {
            all(&mut m, words);
            clock_advance(&mut m, 137);
        }
    }
    wait_replica(&mut m);
    let (on_master, on_replica) = (snapshot(&mut m), snapshot(&mut r));
    assert_eq!(on_master.len(), 5);
    assert_eq!(on_master, on_replica);
    let digest =
        |c: &mut Connection| -> String { redis::cmd("DEBUG").arg("DIGEST").query(c).unwrap() };
    assert_eq!(digest(&mut m), digest(&mut r));
}

/// What a replica receives, as MONITOR shows it: (command, key) for MULTI, EXEC, RL.SETSTATE
/// and SET, up to `SET marker`.
fn stream_until_marker(monitor: &mut BufReader<TcpStream>) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    loop {
        let mut line = String::new();
        let n = monitor.read_line(&mut line).expect("MONITOR line");
        assert!(n > 0, "MONITOR closed");
        // +1700000000.000000 [0 127.0.0.1:port] "CMD" "key" ...
        let Some((_, words)) = line.split_once("] ") else {
            continue;
        };
        let mut quoted = words.split('"').skip(1).step_by(2);
        let command = quoted.next().unwrap_or_default().to_uppercase();
        let key = quoted.next().unwrap_or_default().to_string();
        if !["MULTI", "EXEC", "RL.SETSTATE", "SET"].contains(&command.as_str()) {
            continue;
        }
        let done = command == "SET" && key == "marker";
        seen.push((command, key));
        if done {
            return seen;
        }
    }
}

/// The effects of one call reach the replica in one MULTI/EXEC, one RL.SETSTATE per changed key
/// only; a denial or a peek sends nothing, a denial that changes a policy sends that key.
#[test]
fn effects_of_one_call_arrive_together_changed_keys_only() {
    let (_ms, rs, mut m, _r) = pair();
    let mut monitor = TcpStream::connect(("127.0.0.1", rs.port)).unwrap();
    monitor
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    monitor.write_all(b"MONITOR\r\n").unwrap();
    let mut monitor = BufReader::new(monitor);
    let mut ok = String::new();
    monitor.read_line(&mut ok).unwrap();
    assert_eq!(ok.trim(), "+OK");

    let admit_both = [
        "RL.ALL", "2", "r:a", "r:b", "GCRA", "2", "60000", "GCRA", "5", "60000",
    ];
    assert_eq!(all(&mut m, &admit_both).0[0], 1);
    // r:b looked at (COST 0): only r:a and r:c change.
    let c_not_b = [
        "RL.ALL", "3", "r:a", "r:b", "r:c", "GCRA", "2", "60000", "GCRA", "5", "60000", "COST",
        "0", "GCRA", "1", "60000",
    ];
    assert_eq!(all(&mut m, &c_not_b).0[0], 1);
    wait_replica(&mut m);
    let before = offset(&mut m);
    // r:a is spent: denied; then peeks, over stored and over fresh keys.
    assert_eq!(all(&mut m, &admit_both).0[0], 0);
    let peek = [
        "RL.ALL", "2", "r:a", "r:new", "GCRA", "2", "60000", "COST", "0", "GCRA", "5", "60000",
        "COST", "0",
    ];
    assert_eq!(all(&mut m, &peek).0[0], 0);
    let fresh_peek = [
        "RL.ALL", "2", "r:x", "r:y", "GCRA", "2", "60000", "COST", "0", "GCRA", "5", "60000",
        "COST", "0",
    ];
    assert_eq!(all(&mut m, &fresh_peek).0[0], 1);
    assert_eq!(offset(&mut m), before, "a denial or a peek was propagated");
    // Denied by r:a, but r:b's policy changes (5 -> 6 per minute): r:b alone is sent.
    let new_policy = [
        "RL.ALL", "2", "r:a", "r:b", "GCRA", "2", "60000", "GCRA", "6", "60000",
    ];
    assert_eq!(all(&mut m, &new_policy).0[0], 0);
    assert!(offset(&mut m) > before);
    cmd(&mut m, &["SET", "marker", "1"]).unwrap();
    let pair = |c: &str, k: &str| (c.to_string(), k.to_string());
    assert_eq!(
        stream_until_marker(&mut monitor),
        [
            pair("MULTI", ""),
            pair("RL.SETSTATE", "r:a"),
            pair("RL.SETSTATE", "r:b"),
            pair("EXEC", ""),
            pair("MULTI", ""),
            pair("RL.SETSTATE", "r:a"),
            pair("RL.SETSTATE", "r:c"),
            pair("EXEC", ""),
            pair("RL.SETSTATE", "r:b"),
            pair("SET", "marker"),
        ]
    );
}

#[test]
fn aof_restart_keeps_the_states() {
    let mut s = Server::with(&["--appendonly", "yes", "--appendfsync", "always"], &[]);
    let mut c = s.connect();
    clock_set(&mut c, T0_MS);
    wait_persistence_idle(&mut c);
    for _ in 0..4 {
        for words in ALL_WORKLOAD {
            all(&mut c, words);
            clock_advance(&mut c, 91);
        }
    }
    let before = snapshot(&mut c);
    assert_eq!(before.len(), 5);
    s.restart("NOSAVE");
    let mut c = s.connect();
    assert_eq!(snapshot(&mut c), before);
    // And the limiters go on from there.
    clock_set(&mut c, T0_MS + 28 * 91);
    assert_eq!(all(&mut c, ALL_WORKLOAD[0]).1[1][1], 20);
}

/// On a 3-master cluster, a tenant's keys under one hash tag are decided together on the master
/// of their slot (a cluster client finds it; another master answers MOVED); keys in two slots
/// get Redis's CROSSSLOT.
#[test]
fn cluster_same_slot_works_cross_slot_is_refused() {
    let cluster = Cluster::start(5000);
    let (tenant, key) = ("rl:{tenant:7}:tenant", "rl:{tenant:7}:key:abc");
    assert_eq!(slot(tenant), slot(key));
    let words = [
        "RL.ALL",
        "2",
        key,
        tenant,
        "TOKENBUCKET",
        "100",
        "60000",
        "COST",
        "20",
        "FIXEDWINDOW",
        "1000",
        "86400000",
    ];
    let to_cmd = |words: &[&str]| {
        let mut command = redis::cmd(words[0]);
        for w in &words[1..] {
            command.arg(*w);
        }
        command
    };
    let mut client = cluster.client();
    for i in 0..5 {
        let reply: Vec<Vec<i64>> = to_cmd(&words).query(&mut client).unwrap();
        assert_eq!(reply[1], [1, 100, 80 - 20 * i, -1, 12000 * (i + 1)]);
        assert_eq!(reply[2][2], 999 - i);
    }
    let reply: Vec<Vec<i64>> = to_cmd(&words).query(&mut client).unwrap();
    assert_eq!(reply[0][0], 0, "the key's bucket is spent");
    assert_eq!(reply[2][2], 995, "the tenant kept its tokens");

    let owner = cluster.owner(slot(tenant));
    let mut on_owner = cluster.connect(owner);
    let count: i64 = redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot(tenant))
        .query(&mut on_owner)
        .unwrap();
    assert_eq!(count, 2);
    let other = cluster
        .masters()
        .into_iter()
        .find(|&m| m != owner)
        .expect("another master");
    let e = err(&mut cluster.connect(other), &words);
    assert!(e.starts_with("MOVED"), "{e}");

    let elsewhere = "rl:{tenant:8}:key:abc";
    assert_ne!(slot(elsewhere), slot(tenant));
    let mut cross = words;
    cross[2] = elsewhere;
    for node in cluster.masters() {
        let e = err(&mut cluster.connect(node), &cross);
        assert!(e.starts_with("CROSSSLOT"), "{e}");
    }
    let e = to_cmd(&cross)
        .query::<Value>(&mut client)
        .expect_err("cross-slot keys");
    assert!(
        e.to_string().contains("CROSSSLOT") || e.to_string().contains("slot"),
        "{e}"
    );
    // Nothing was written anywhere but the tenant's two keys on their master.
    let sizes: Vec<i64> = cluster
        .masters()
        .into_iter()
        .map(|m| dbsize(&mut cluster.connect(m)))
        .collect();
    assert_eq!(sizes.iter().sum::<i64>(), 2, "{sizes:?}");
    assert_eq!(dbsize(&mut on_owner), 2);
}

/// A sliding log admitted by `RL.ALL` under the policy it holds goes out as a delta, as from
/// `RL.SLIDINGLOG`: the bytes propagated per call do not grow with the log (a full state of
/// 1,000 entries is about 8 KB), and the replica ends digest-identical, the log of a denied call
/// untouched.
#[test]
fn a_sliding_log_charged_by_rl_all_propagates_a_delta() {
    let (_ms, _rs, mut m, mut r) = pair();
    let admit = [
        "RL.ALL",
        "2",
        "d:{t}:log",
        "d:{t}:day",
        "SLIDINGLOG",
        "5000",
        "60000",
        "FIXEDWINDOW",
        "100000",
        "86400000",
    ];
    for _ in 0..1000 {
        assert_eq!(all(&mut m, &admit).0[0], 1);
        clock_advance(&mut m, 1);
    }
    wait_replica(&mut m);
    let before = offset(&mut m);
    for _ in 0..10 {
        assert_eq!(all(&mut m, &admit).0[0], 1);
        clock_advance(&mut m, 1);
    }
    let per_call = (offset(&mut m) - before) / 10;
    assert!(
        per_call < 400,
        "{per_call} bytes propagated per call on a 1,000-entry log"
    );
    // The day's quota denies a call that the log admits: the log is not charged.
    let log_before = dump(&mut m, "d:{t}:log");
    let denied = [&admit[..], &["COST", "100000"]].concat();
    assert_eq!(all(&mut m, &denied).0[0], 0);
    assert_eq!(dump(&mut m, "d:{t}:log"), log_before);
    wait_replica(&mut m);
    let digest =
        |c: &mut Connection| -> String { redis::cmd("DEBUG").arg("DIGEST").query(c).unwrap() };
    assert_eq!(digest(&mut m), digest(&mut r));
    assert_eq!(snapshot(&mut m), snapshot(&mut r));
    // The in-place change keeps the entry gauge exact, on both sides.
    for c in [&mut m, &mut r] {
        let inspected: Vec<Value> = redis::cmd("RL.INSPECT").arg("d:{t}:log").query(c).unwrap();
        let entries = inspected
            .chunks(2)
            .find(|kv| kv[0] == Value::BulkString(b"entries".to_vec()))
            .map(|kv| redis::from_redis_value::<i64>(&kv[1]).unwrap());
        let info: String = redis::cmd("INFO").arg("ratelimit").query(c).unwrap();
        let gauge = info
            .lines()
            .find_map(|l| l.strip_prefix("ratelimit_sliding_log_entries:"))
            .and_then(|v| v.trim().parse::<i64>().ok());
        assert_eq!(gauge, entries);
    }
}

/// A misspelt algorithm after the first limiter is named as an algorithm, as docs/rl-all.md
/// says (it used to be read as an option of the limiter before it).
#[test]
fn an_unknown_algorithm_after_the_first_limiter_is_named_as_one() {
    let (_s, mut c) = server();
    for words in [
        &[
            "RL.ALL", "2", "a", "b", "GCRA", "10", "1000", "LEAKY", "10", "1000",
        ][..],
        &[
            "RL.ALL",
            "3",
            "a",
            "b",
            "c",
            "GCRA",
            "10",
            "1000",
            "COST",
            "2",
            "TOKENBUCKET",
            "5",
            "1000",
            "LEAKY",
            "1",
            "1000",
        ],
    ] {
        assert_eq!(
            err(&mut c, words),
            "ERR unknown algorithm 'LEAKY'; expected GCRA, TOKENBUCKET, SLIDINGLOG, SLIDINGCOUNTER or FIXEDWINDOW"
        );
    }
    // The last limiter still names a wrong option as an option.
    assert_eq!(
        err(
            &mut c,
            &["RL.ALL", "2", "a", "b", "GCRA", "10", "1000", "GCRA", "1", "1000", "LEAKY", "1"]
        ),
        "ERR unknown option 'LEAKY'; expected BURST or COST"
    );
    let keys: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(keys, 0);
}

/// On a denied call, a limiter at COST 0 (looked at, never charged) does not set the combined
/// retry_after, even when it would deny for longer: only the charged limiters hold the request
/// back. All at COST 0 (a peek), the latest retry counts.
#[test]
fn a_cost_0_limiter_does_not_set_the_combined_retry() {
    let (_s, mut c) = server();
    rl(&mut c, &["RL.GCRA", "fast", "1", "1000"]);
    rl(&mut c, &["RL.GCRA", "slow", "1", "60000"]);
    let (combined, each) = all(
        &mut c,
        &[
            "RL.ALL", "2", "fast", "slow", "GCRA", "1", "1000", "GCRA", "1", "60000", "COST", "0",
        ],
    );
    assert_eq!(each[1][3], 60_000, "the COST 0 limiter would deny for 60 s");
    assert_eq!(combined, [0, 1, 0, 1000, 60_000]);
    let (combined, _) = all(
        &mut c,
        &[
            "RL.ALL", "2", "fast", "slow", "GCRA", "1", "1000", "COST", "0", "GCRA", "1", "60000",
            "COST", "0",
        ],
    );
    assert_eq!(combined[3], 60_000);
}
