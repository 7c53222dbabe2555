//! RL.SETTLE: every limiter settled by its own difference, all or nothing; Redis finds its keys
//! (and RL.CHARGE's).

use super::*;

/// `RL.SETTLE`: a request reserved over its key, its tenant and the model-wide limit is
/// settled over all three in one call, each by its own difference.
#[test]
fn rl_settle_settles_every_limiter_by_its_own_difference() {
    let (_s, mut c) = server();
    let keys = ["3", "{t}:key", "{t}:tenant", "{t}:model"];
    let reserve = with(
        &keys,
        &[
            "TOKENBUCKET",
            "100",
            "60000",
            "COST",
            "50",
            "GCRA",
            "1000",
            "60000",
            "COST",
            "50",
            "SLIDINGLOG",
            "100",
            "60000",
            "COST",
            "1",
        ],
    );
    let all = |c: &mut Connection, words: &[&str]| -> Vec<Vec<i64>> {
        let name = if words.contains(&"BY") {
            "RL.SETTLE"
        } else {
            "RL.ALL"
        };
        let mut command = redis::cmd(name);
        for w in words {
            command.arg(*w);
        }
        command
            .query(c)
            .unwrap_or_else(|e| panic!("{words:?}: {e}"))
    };
    assert_eq!(all(&mut c, &reserve)[0][0], 1);
    // The response cost 120 tokens: 70 more on the key and the tenant; the model-wide limiter
    // counts requests, so its difference is 0. A second response cost 30: 20 back.
    let settle = |c: &mut Connection, key: &str, tenant: &str, model: &str| {
        all(
            c,
            &with(
                &keys,
                &[
                    "TOKENBUCKET",
                    "100",
                    "60000",
                    "BY",
                    key,
                    "GCRA",
                    "1000",
                    "60000",
                    "BY",
                    tenant,
                    "SLIDINGLOG",
                    "100",
                    "60000",
                    "BY",
                    model,
                ],
            ),
        )
    };
    let settled = settle(&mut c, "70", "70", "0");
    assert_eq!(settled[1], [70, 100, 0, 12600, 72000]);
    assert_eq!(settled[2][..3], [70, 1000, 880]);
    assert_eq!(settled[3][..3], [0, 100, 99]);
    // Combined: all counted in full; the key is the tightest and the longest to wait.
    assert_eq!(settled[0], [1, 100, 0, 12600, 72000]);
    let given = settle(&mut c, "-20", "-20", "0");
    assert_eq!(given[1][..3], [20, 100, 0]);
    assert_eq!(given[2][..3], [20, 1000, 900]);
    // Every limiter moved by exactly what it was asked: the key owes 100 of 100 now.
    assert_eq!(
        rl(
            &mut c,
            &["RL.TOKENBUCKET", "{t}:key", "100", "60000", "COST", "0"]
        )[3],
        600
    );
}

#[test]
fn rl_settle_is_all_or_nothing() {
    let (_s, mut c) = server();
    rl(&mut c, &["RL.GCRA", "{u}:a", "10", "1000", "COST", "5"]);
    cmd(&mut c, &["SET", "{u}:b", "x"]).unwrap();
    rl(&mut c, &["RL.FIXEDWINDOW", "{u}:c", "10", "1000"]);
    assert_errors_change_nothing(
        &mut c,
        [
            (
                vec![
                    "RL.SETTLE",
                    "2",
                    "{u}:a",
                    "{u}:b",
                    "GCRA",
                    "10",
                    "1000",
                    "BY",
                    "5",
                    "GCRA",
                    "10",
                    "1000",
                    "BY",
                    "5",
                ],
                "WRONGTYPE the key '{u}:b' holds a string",
            ),
            (
                vec![
                    "RL.SETTLE",
                    "2",
                    "{u}:a",
                    "{u}:c",
                    "GCRA",
                    "10",
                    "1000",
                    "BY",
                    "5",
                    "GCRA",
                    "10",
                    "1000",
                    "BY",
                    "5",
                ],
                "WRONGTYPE the key '{u}:c' holds a fixed window limiter",
            ),
            (
                vec![
                    "RL.SETTLE",
                    "2",
                    "{u}:a",
                    "{u}:d",
                    "GCRA",
                    "10",
                    "1000",
                    "BY",
                    "5",
                    "GCRA",
                    "10",
                    "1000",
                ],
                "ERR no BY d for key '{u}:d': every limiter is settled by its own difference",
            ),
            (
                vec![
                    "RL.SETTLE",
                    "1",
                    "{u}:a",
                    "GCRA",
                    "10",
                    "1000",
                    "COST",
                    "2",
                    "BY",
                    "5",
                ],
                "ERR RL.SETTLE takes BY d, not COST: the request was already decided",
            ),
            (
                vec![
                    "RL.SETTLE",
                    "1",
                    "{u}:a",
                    "GCRA",
                    "10",
                    "1000",
                    "BURST",
                    "5",
                    "BY",
                ],
                "ERR option BY needs a value",
            ),
            (
                vec!["RL.SETTLE", "1", "{u}:a", "GCRA", "10", "1000", "BY", "1.5"],
                "ERR invalid BY '1.5': expected an integer from -1000000000000 to 1000000000000",
            ),
        ],
    );
    // A missing key is created in debt by a charge, and left missing by a refund.
    let created: Vec<Vec<i64>> = redis::cmd("RL.SETTLE")
        .arg(&[
            "2", "{u}:new", "{u}:gone", "GCRA", "10", "1000", "BY", "15", "GCRA", "10", "1000",
            "BY", "-4",
        ])
        .query(&mut c)
        .unwrap();
    assert_eq!(
        created,
        vec![
            vec![1, 10, 0, 600, 1500],
            vec![15, 10, 0, 600, 1500],
            vec![0, 10, 10, -1, 0]
        ]
    );
    assert_eq!(cmd(&mut c, &["EXISTS", "{u}:gone"]).unwrap(), Value::Int(0));
}

/// Redis finds RL.SETTLE's keys as it finds RL.ALL's (key specs, `COMMAND GETKEYS`, cluster
/// routing), and RL.CHARGE's as RL.REFUND's.
#[test]
fn keys_are_declared() {
    let (_s, mut c) = server();
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg(&[
            "RL.SETTLE",
            "2",
            "a",
            "b",
            "GCRA",
            "1",
            "1",
            "BY",
            "1",
            "GCRA",
            "1",
            "1",
            "BY",
            "-1",
        ])
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["a", "b"]);
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg("GETKEYS")
        .arg(&["RL.CHARGE", "k", "5"])
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, ["k"]);
}
