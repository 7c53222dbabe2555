//! Exact replies: a key nested under its tenant (the tenant denies, or the key), mixed
//! algorithms each with its cost, a peek over all limiters that writes nothing, eight and
//! thirty-two limiters, and a COST 0 limiter that does not set the combined retry.

use super::*;

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
