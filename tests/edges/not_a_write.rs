//! A denial is not a write: denials, peeks and errors leave a watched key untouched, count no
//! change in `rdb_changes_since_last_save` and send no keyspace notification; real changes do.

use std::time::Duration;

use super::*;

/// `WATCH key` on `watcher`, then `words` from `other`, then an empty transaction on
/// `watcher`: true when EXEC ran (the key was not signalled as modified).
fn exec_survives(
    watcher: &mut Connection,
    other: &mut Connection,
    key: &str,
    words: &[&str],
) -> bool {
    cmd(watcher, &["WATCH", key]).unwrap();
    let _ = cmd(other, words);
    cmd(watcher, &["MULTI"]).unwrap();
    cmd(watcher, &["PING"]).unwrap();
    match cmd(watcher, &["EXEC"]).unwrap() {
        Value::Nil => false,
        Value::Array(_) => true,
        v => panic!("EXEC answered {v:?}"),
    }
}

/// Keys for the WATCH and dirty-counter tests: `w` (GCRA, 2 per second, spent), `ws` (a
/// string), `full` (a GCRA limiter at full capacity), `z` (a lease with nothing left).
fn watch_fixture(c: &mut Connection) {
    rl(c, &["RL.GCRA", "w", "2", "1000", "COST", "2"]);
    cmd(c, &["SET", "ws", "x"]).unwrap();
    rl(c, &["RL.GCRA", "full", "10", "1000"]);
    assert_eq!(rl(c, &["RL.REFUND", "full", "5"])[0], 1);
    rl(c, &["RL.LEASE", "z", "1", "60000", "WANT", "1"]);
}

/// Calls that change no limiter: denials, peeks, a WRONGTYPE call, argument errors, a refund
/// that gives nothing back, a lease that grants nothing.
const NOT_WRITES: &[&[&str]] = &[
    &["RL.GCRA", "w", "2", "1000"],
    &["RL.GCRA", "w", "2", "1000", "COST", "0"],
    &["RL.GCRA", "ws", "2", "1000"],
    &["RL.REFUND", "ws", "1"],
    &["RL.GCRA", "w", "abc", "1000"],
    &["RL.GCRA", "w", "2", "1000", "COST", "3"],
    &["RL.REFUND", "full", "5"],
    &["RL.REFUND", "missing", "5"],
    &["RL.GCRA", "missing", "2", "1000", "COST", "0"],
    &["RL.LEASE", "z", "1", "60000", "WANT", "1"],
    &[
        "RL.ALL", "2", "w", "full", "GCRA", "2", "1000", "GCRA", "10", "1000",
    ],
    &[
        "RL.ALL", "2", "full", "w", "GCRA", "10", "1000", "GCRA", "2", "1000",
    ],
    &[
        "RL.ALL", "2", "full", "w", "GCRA", "10", "1000", "COST", "0", "GCRA", "2", "1000", "COST",
        "0",
    ],
];

/// The key a call touches first: `RL.ALL numkeys key …` names it after numkeys.
fn first_key<'a>(words: &[&'a str]) -> &'a str {
    if words[0] == "RL.ALL" {
        words[2]
    } else {
        words[1]
    }
}

#[test]
fn denials_peeks_and_errors_leave_a_watched_key_untouched() {
    let (s, mut c) = server();
    let mut watcher = s.connect();
    watch_fixture(&mut c);
    for words in NOT_WRITES {
        assert!(
            exec_survives(&mut watcher, &mut c, first_key(words), words),
            "{words:?} made a watching EXEC fail"
        );
    }
}

/// Calls that change the stored limiter: an admit, a denied call with a new policy (it stores
/// the policy), a refund that gives back, RL.SETSTATE.
#[test]
fn real_changes_touch_a_watched_key() {
    let (s, mut c) = server();
    let mut watcher = s.connect();
    watch_fixture(&mut c);
    rl(&mut c, &["RL.GCRA", "a", "10", "1000"]);
    for words in [
        &["RL.GCRA", "a", "10", "1000"][..],
        &["RL.GCRA", "w", "2", "60000"],
        &["RL.REFUND", "a", "1"],
        &["RL.SETSTATE", "a", &gcra_full_state()],
        &[
            "RL.ALL", "2", "a", "full", "GCRA", "10", "100", "GCRA", "10", "1000",
        ],
        &[
            "RL.ALL", "2", "full", "a", "GCRA", "10", "1000", "GCRA", "10", "100",
        ],
    ] {
        assert!(
            !exec_survives(&mut watcher, &mut c, first_key(words), words),
            "{words:?} did not signal the watched key"
        );
    }
}

fn changes_since_save(c: &mut Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("persistence").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("rdb_changes_since_last_save")
}

#[test]
fn only_real_changes_count_in_rdb_changes_since_last_save() {
    let (_s, mut c) = server();
    watch_fixture(&mut c);
    let before = changes_since_save(&mut c);
    assert!(before > 0);
    for words in NOT_WRITES {
        let _ = cmd(&mut c, words);
        assert_eq!(
            changes_since_save(&mut c),
            before,
            "{words:?} counted as a change"
        );
    }
    rl(&mut c, &["RL.GCRA", "a", "10", "1000"]);
    let after_admit = changes_since_save(&mut c);
    assert!(after_admit > before, "an admit did not count");
    assert_eq!(rl(&mut c, &["RL.GCRA", "w", "2", "60000"])[0], 0);
    assert!(
        changes_since_save(&mut c) > after_admit,
        "a denied call that stores a new policy did not count"
    );
}

/// Keyspace notifications (`notify-keyspace-events KEA`) for real changes, named after the
/// command (`rl.gcra`, `rl.lease`, `rl.refund`, `rl.setstate`, …), and none for denials, peeks,
/// errors or no-ops.
#[test]
fn keyspace_notifications_mark_real_changes_only() {
    let (s, mut c) = server();
    cmd(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "KEA"]).unwrap();
    let mut sub_conn = s.connect();
    let mut sub = sub_conn.as_pubsub();
    sub.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    sub.psubscribe("__keyspace@0__:n:*").unwrap();
    let steps: &[(&[&str], Option<&str>)] = &[
        (&["RL.GCRA", "n:g", "1", "60000"], Some("rl.gcra")),
        (&["RL.GCRA", "n:g", "1", "60000"], None),
        (&["RL.GCRA", "n:g", "1", "60000", "COST", "0"], None),
        (&["RL.GCRA", "n:fresh", "1", "60000", "COST", "0"], None),
        (&["RL.GCRA", "n:g", "x", "60000"], None),
        (&["RL.GCRA", "n:g", "1", "120000"], Some("rl.gcra")),
        (
            &["RL.TOKENBUCKET", "n:t", "5", "1000"],
            Some("rl.tokenbucket"),
        ),
        (
            &["RL.SLIDINGLOG", "n:l", "5", "1000"],
            Some("rl.slidinglog"),
        ),
        (
            &["RL.SLIDINGCOUNTER", "n:c", "5", "1000"],
            Some("rl.slidingcounter"),
        ),
        (
            &["RL.FIXEDWINDOW", "n:f", "5", "1000"],
            Some("rl.fixedwindow"),
        ),
        (&["RL.FIXEDWINDOW", "n:f", "5", "1000", "COST", "5"], None),
        (&["RL.SHAPE", "n:q", "5", "1000"], Some("rl.shape")),
        (
            &["RL.CONCURRENCY", "n:cc", "1", "1000", "ACQUIRE", "a"],
            Some("rl.concurrency"),
        ),
        (
            &["RL.CONCURRENCY", "n:cc", "1", "1000", "ACQUIRE", "b"],
            None,
        ),
        (&["RL.CONCURRENCY", "n:cc", "1", "1000", "PEEK"], None),
        (
            &["RL.CONCURRENCY", "n:cc", "1", "1000", "RELEASE", "b"],
            None,
        ),
        (
            &["RL.CONCURRENCY", "n:cc", "1", "1000", "RELEASE", "a"],
            Some("rl.concurrency"),
        ),
        (
            &["RL.LEASE", "n:t", "5", "1000", "WANT", "2"],
            Some("rl.lease"),
        ),
        (
            &["RL.LEASE", "n:z", "1", "60000", "WANT", "1"],
            Some("rl.lease"),
        ),
        (&["RL.LEASE", "n:z", "1", "60000", "WANT", "1"], None),
        (&["RL.REFUND", "n:t", "1"], Some("rl.refund")),
        (&["RL.REFUND", "n:t", "100"], Some("rl.refund")),
        (&["RL.REFUND", "n:t", "1"], None),
        (&["RL.REFUND", "n:none", "1"], None),
        (
            &["RL.SETSTATE", "n:s", &gcra_full_state()],
            Some("rl.setstate"),
        ),
        (&["RL.SETSTATE", "n:s", "garbage"], None),
        (
            &[
                "RL.ALL",
                "2",
                "n:a",
                "n:t",
                "GCRA",
                "5",
                "1000",
                "TOKENBUCKET",
                "5",
                "1000",
            ],
            Some("rl.all"),
        ),
        (
            &[
                "RL.ALL",
                "2",
                "n:a",
                "n:t",
                "GCRA",
                "5",
                "1000",
                "COST",
                "5",
                "TOKENBUCKET",
                "5",
                "1000",
            ],
            None,
        ),
    ];
    assert_covers(
        "keyspace_notifications_mark_real_changes_only's steps",
        algorithms(),
        steps
            .iter()
            .filter(|(_, event)| event.is_some())
            .map(|(w, _)| w[0]),
    );
    let mut expected = Vec::new();
    for (words, event) in steps {
        let _ = cmd(&mut c, words);
        if let Some(event) = event {
            // RL.ALL: one event per changed key.
            let keys = match words[0] {
                "RL.ALL" => &words[2..4],
                _ => &words[1..2],
            };
            for key in keys {
                expected.push((key.to_string(), event.to_string()));
            }
        }
    }
    cmd(&mut c, &["SET", "n:end", "x"]).unwrap();
    let mut got = Vec::new();
    loop {
        let msg = sub.get_message().expect("a keyspace event (timed out)");
        let key = msg
            .get_channel_name()
            .trim_start_matches("__keyspace@0__:")
            .to_string();
        let event: String = msg.get_payload().unwrap();
        if key == "n:end" {
            break;
        }
        if event.starts_with("rl.") {
            got.push((key, event));
        }
    }
    // Each command's events in order; RL.ALL's per-key events in any order among themselves.
    got.sort();
    expected.sort();
    assert_eq!(got, expected);
}
