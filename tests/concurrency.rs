//! RL.CONCURRENCY against real servers: exact replies at pinned times, many clients acquiring
//! and releasing at random never holding more than N (from the replies and from RL.INSPECT
//! sampled throughout), a holder that never releases freed at TTL, a promoted replica admitting
//! no more than N, AOF rewrite and restart keeping holders, memory per holder, corrupted
//! payloads refused. Argument errors: tests/arguments.rs.

mod support;
use support::*;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

/// N = 2, TTL = 1 s.
fn call<'a>(key: &'a str, op: &'a [&'a str]) -> Vec<&'a str> {
    with(&["RL.CONCURRENCY", key, "2", "1000"], op)
}

fn inspect(c: &mut Connection, key: &str) -> Vec<(String, i64)> {
    let v: Vec<Value> = redis::cmd("RL.INSPECT").arg(key).query(c).unwrap();
    v.chunks(2)
        .filter_map(|kv| match kv {
            [Value::BulkString(k), Value::Int(n)] => Some((String::from_utf8_lossy(k).into(), *n)),
            _ => None,
        })
        .collect()
}

fn field(fields: &[(String, i64)], name: &str) -> i64 {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .map(|f| f.1)
        .unwrap_or_else(|| panic!("no {name} in {fields:?}"))
}

#[test]
fn exact_replies_at_pinned_times() {
    let (_s, mut c) = server();
    let k = "jobs";
    assert_eq!(rl(&mut c, &call(k, &["PEEK"])), [1, 2, 2, -1, 0]);
    assert_eq!(dump(&mut c, k), None, "a peek creates nothing");
    assert_eq!(rl(&mut c, &call(k, &["ACQUIRE", "a"])), [1, 2, 1, -1, 1000]);
    clock_advance(&mut c, 100);
    // A second ACQUIRE by a renews it: still one slot.
    assert_eq!(rl(&mut c, &call(k, &["acquire", "a"])), [1, 2, 1, -1, 1000]);
    clock_advance(&mut c, 100);
    assert_eq!(rl(&mut c, &call(k, &["ACQUIRE", "b"])), [1, 2, 0, -1, 1000]);
    assert_eq!(pexpiretime(&mut c, k), (T0_MS + 1200) as i64);
    clock_advance(&mut c, 100);
    // Full: c waits for a, whose slot frees at T0 + 1100 (denied at T0 + 300 to T0 + 350).
    assert_denial_writes_nothing(&mut c, &call(k, &["ACQUIRE", "c"]));
    assert_eq!(rl(&mut c, &call(k, &["ACQUIRE", "c"])), [0, 2, 0, 750, 850]);
    assert_peeks_change_nothing(&mut c, &call(k, &["PEEK"]), [0, 2, 0, 750, 850]);
    assert_eq!(rl(&mut c, &["RL.PEEK", k]), [0, 2, 0, 750, 850]);
    let fields = inspect(&mut c, k);
    assert_eq!(field(&fields, "holders"), 2);
    assert_eq!(field(&fields, "next_expiry_ms"), 750);
    assert_eq!(field(&fields, "limit"), 2);
    assert_eq!(field(&fields, "window_ms"), 1000);
    // a released; released again, or an unknown id: nothing, never a negative count.
    assert_eq!(rl(&mut c, &call(k, &["RELEASE", "a"])), [1, 2, 1, -1, 850]);
    assert_eq!(rl(&mut c, &call(k, &["RELEASE", "a"])), [0, 2, 1, 0, 850]);
    assert_eq!(
        rl(&mut c, &call(k, &["RELEASE", "nobody"])),
        [0, 2, 1, 0, 850]
    );
    assert_eq!(rl(&mut c, &call(k, &["RENEW", "a"])), [0, 2, 1, 0, 850]);
    assert_eq!(rl(&mut c, &call(k, &["RENEW", "b"])), [1, 2, 1, -1, 1000]);
    // b never comes back: its slot frees 1 s after its last RENEW, at T0 + 1350.
    clock_advance(&mut c, 999);
    assert_eq!(rl(&mut c, &call(k, &["PEEK"])), [1, 2, 1, -1, 1]);
    clock_advance(&mut c, 1);
    assert_eq!(rl(&mut c, &call(k, &["PEEK"])), [1, 2, 2, -1, 0]);
    assert_eq!(rl(&mut c, &call(k, &["RENEW", "b"])), [0, 2, 2, 0, 0]);
    assert_eq!(rl(&mut c, &call(k, &["RELEASE", "b"])), [0, 2, 2, 0, 0]);
}

#[test]
fn wrongtype_both_ways() {
    let (_s, mut c) = server();
    rl(&mut c, &["RL.GCRA", "g", "10", "1000"]);
    assert_wrongtype(
        &mut c,
        &call("g", &["ACQUIRE", "a"]),
        "a GCRA limiter",
        "concurrency",
    );
    rl(&mut c, &call("k", &["ACQUIRE", "a"]));
    assert_wrongtype(
        &mut c,
        &["RL.GCRA", "k", "10", "1000"],
        "a concurrency limiter",
        "GCRA",
    );
}

/// Clients acquire and release at random, with the clock pinned (no holder expires): the
/// holders the clients know they hold never exceed N (each is live on the server, so the server
/// admitted at most N), and RL.INSPECT, sampled by another client throughout, never shows more.
#[test]
fn many_clients_never_hold_more_than_n() {
    const N: i64 = 3;
    const CLIENTS: u64 = 6;
    let (s, _c) = server();
    let held = Arc::new(AtomicI64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (done, mut c) = (done.clone(), s.connect());
        std::thread::spawn(move || {
            let mut samples = 0;
            while !done.load(Ordering::Relaxed) {
                let v: Value = redis::cmd("RL.INSPECT").arg("k").query(&mut c).unwrap();
                if v != Value::Nil {
                    let fields = inspect(&mut c, "k");
                    assert!(field(&fields, "holders") <= N, "{fields:?}");
                    assert_eq!(field(&fields, "holders") + field(&fields, "remaining"), N);
                    samples += 1;
                }
            }
            samples
        })
    };
    let workers: Vec<_> = (0..CLIENTS)
        .map(|w| {
            let (held, mut c) = (held.clone(), s.connect());
            std::thread::spawn(move || {
                let mut rng = Rng(w + 1);
                let mut mine: Vec<String> = Vec::new();
                let mut admitted = 0;
                for i in 0..300 {
                    let n = N.to_string();
                    let base = ["RL.CONCURRENCY", "k", n.as_str(), "60000"];
                    if !mine.is_empty() && rng.below(2) == 0 {
                        let id = mine.swap_remove(rng.below(mine.len() as u64) as usize);
                        // Given up before it is sent: what the clients count never falls
                        // behind what the server holds.
                        held.fetch_sub(1, Ordering::SeqCst);
                        assert_eq!(rl(&mut c, &with(&base, &["RELEASE", &id]))[0], 1);
                    } else if !mine.is_empty() && rng.below(3) == 0 {
                        let id = mine[0].clone();
                        assert_eq!(rl(&mut c, &with(&base, &["RENEW", &id]))[0], 1);
                    } else {
                        let id = format!("w{w}-{i}");
                        let reply = rl(&mut c, &with(&base, &["ACQUIRE", &id]));
                        assert!(reply[2] >= 0 && reply[2] <= N, "{reply:?}");
                        if reply[0] == 1 {
                            let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                            assert!(now <= N, "{now} holders");
                            mine.push(id);
                            admitted += 1;
                        } else {
                            assert_eq!(reply[2], 0, "denied with free slots: {reply:?}");
                        }
                    }
                }
                for id in mine {
                    held.fetch_sub(1, Ordering::SeqCst);
                    let base = ["RL.CONCURRENCY", "k", "3", "60000"];
                    assert_eq!(rl(&mut c, &with(&base, &["RELEASE", &id]))[0], 1);
                }
                admitted
            })
        })
        .collect();
    let admitted: i64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    done.store(true, Ordering::Relaxed);
    let samples = sampler.join().unwrap();
    println!("{admitted} acquires admitted, {samples} RL.INSPECT samples");
    assert!(admitted > N);
    let mut c = s.connect();
    assert_eq!(rl(&mut c, &["RL.PEEK", "k"]), [1, N, N, -1, 0]);
}

/// Workers that die mid-request never release: every slot comes back TTL after its holder's
/// last ACQUIRE or RENEW, and the key goes with the last one.
#[test]
fn slots_of_dead_holders_come_back_at_ttl() {
    let (_s, mut c) = server();
    let base = ["RL.CONCURRENCY", "k", "3", "5000"];
    for id in ["a", "b", "c"] {
        assert_eq!(rl(&mut c, &with(&base, &["ACQUIRE", id]))[0], 1);
        clock_advance(&mut c, 1000);
    }
    assert_eq!(
        rl(&mut c, &with(&base, &["ACQUIRE", "d"])),
        [0, 3, 0, 2000, 4000]
    );
    // a expires at T0 + 5000: d gets in then, not a millisecond earlier.
    clock_set(&mut c, T0_MS + 4999);
    assert_eq!(rl(&mut c, &with(&base, &["ACQUIRE", "d"]))[0], 0);
    clock_set(&mut c, T0_MS + 5000);
    assert_eq!(
        rl(&mut c, &with(&base, &["ACQUIRE", "d"])),
        [1, 3, 0, -1, 5000]
    );
    clock_set(&mut c, T0_MS + 10_000);
    assert_eq!(rl(&mut c, &with(&base, &["PEEK"])), [1, 3, 3, -1, 0]);
    // The key expires with its last holder (d at T0 + 10000); its TTL is at least 1 s.
    assert_eq!(pexpiretime(&mut c, "k"), (T0_MS + 10_000) as i64);
    let fields = inspect(&mut c, "k");
    assert_eq!(field(&fields, "holders"), 0);
}

/// The replica's clock is hours ahead: it holds the master's holders byte for byte with the
/// same absolute expiries, refuses the command, and once promoted admits no more than N.
#[test]
fn a_promoted_replica_admits_no_more_than_n() {
    let (_master, _replica, mut m, mut r) = replica_hours_ahead();
    let base = ["RL.CONCURRENCY", "k", "3", "60000"];
    rl(&mut m, &with(&base, &["ACQUIRE", "a"]));
    clock_advance(&mut m, 10);
    rl(&mut m, &with(&base, &["ACQUIRE", "b"]));
    rl(&mut m, &with(&base, &["ACQUIRE", "c"]));
    rl(&mut m, &with(&base, &["RELEASE", "c"]));
    wait_replica(&mut m);
    assert_eq!(dump(&mut r, "k"), dump(&mut m, "k"));
    assert_eq!(pexpiretime(&mut r, "k"), pexpiretime(&mut m, "k"));
    let e = err(&mut r, &with(&base, &["ACQUIRE", "x"]));
    assert!(e.starts_with("READONLY"), "{e}");
    // Promoted, on the master's time: a and b still hold their slots.
    cmd(&mut r, &["REPLICAOF", "NO", "ONE"]).unwrap();
    clock_set(&mut r, T0_MS + 20);
    assert_eq!(
        rl(&mut r, &with(&base, &["ACQUIRE", "x"])),
        [1, 3, 0, -1, 60_000]
    );
    assert_eq!(
        rl(&mut r, &with(&base, &["ACQUIRE", "y"])),
        [0, 3, 0, 59_980, 60_000]
    );
    assert_eq!(rl(&mut r, &with(&base, &["RELEASE", "a"]))[0], 1);
    // b expires where the master said: T0 + 60010.
    clock_set(&mut r, T0_MS + 60_010);
    assert_eq!(rl(&mut r, &with(&base, &["PEEK"])), [1, 3, 2, -1, 10]);
}

/// A RELEASE reaches the replica as itself (a fifth of a pair's cost less than an effect) and
/// is the same change there on a clock 3 hours ahead, where every holder has expired: a live
/// holder released, an expired one's record dropped, the other expired holders kept, the key's
/// expiry unmoved. The replica ends byte-identical with the same expiry.
#[test]
fn a_release_replicated_as_itself_is_the_masters_change() {
    let (_master, _replica, mut m, mut r) = replica_hours_ahead();
    let base = ["RL.CONCURRENCY", "k", "3", "1000"];
    for id in ["a", "b", "c"] {
        rl(&mut m, &with(&base, &["ACQUIRE", id]));
    }
    clock_advance(&mut m, 500);
    rl(&mut m, &with(&base, &["RENEW", "c"]));
    let expiry = pexpiretime(&mut m, "k");
    // a, b expired on the master's clock; c live until T0 + 1500.
    clock_advance(&mut m, 600);
    assert_eq!(
        rl(&mut m, &with(&base, &["RELEASE", "c"])),
        [1, 3, 3, -1, 0]
    );
    assert_eq!(rl(&mut m, &with(&base, &["RELEASE", "a"])), [0, 3, 3, 0, 0]);
    assert_eq!(pexpiretime(&mut m, "k"), expiry);
    wait_replica(&mut m);
    assert_eq!(dump(&mut r, "k"), dump(&mut m, "k"));
    assert_eq!(pexpiretime(&mut r, "k"), expiry);
    let ran: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut r)
        .unwrap();
    let line = ran.lines().find(|l| {
        l.to_ascii_lowercase()
            .starts_with("cmdstat_rl.concurrency:")
    });
    assert!(line.is_some_and(|l| l.contains("calls=2,")), "{ran}");
    // b's record is still stored (dropped by the next ACQUIRE), on both.
    let digest = |c: &mut Connection| -> Vec<String> {
        redis::cmd("DEBUG")
            .arg("DIGEST-VALUE")
            .arg("k")
            .query(c)
            .unwrap()
    };
    assert_eq!(digest(&mut r), digest(&mut m));
    rl(&mut m, &with(&base, &["ACQUIRE", "d"]));
    wait_replica(&mut m);
    assert_eq!(dump(&mut r, "k"), dump(&mut m, "k"));
}

/// Holders survive an AOF rewrite (RL.SETSTATE lines) plus incremental effects and a restart,
/// and can still be released by their ids.
#[test]
fn aof_rewrite_and_restart_keep_holders() {
    let mut s = Server::with(&["--appendonly", "yes", "--appendfsync", "always"], &[]);
    let mut c = s.connect();
    clock_set(&mut c, T0_MS);
    let base = ["RL.CONCURRENCY", "k", "3", "60000"];
    rl(&mut c, &with(&base, &["ACQUIRE", "a"]));
    rl(&mut c, &with(&base, &["ACQUIRE", "b"]));
    wait_persistence_idle(&mut c);
    cmd(&mut c, &["BGREWRITEAOF"]).unwrap();
    wait_persistence_idle(&mut c);
    rl(&mut c, &with(&base, &["ACQUIRE", "c"]));
    rl(&mut c, &with(&base, &["RELEASE", "b"]));
    let before = snapshot(&mut c);
    s.restart("NOSAVE");
    let mut c = s.connect();
    assert_eq!(snapshot(&mut c), before);
    clock_set(&mut c, T0_MS);
    assert_eq!(rl(&mut c, &with(&base, &["PEEK"])), [1, 3, 1, -1, 60_000]);
    assert_eq!(rl(&mut c, &with(&base, &["RELEASE", "a"]))[0], 1);
    assert_eq!(rl(&mut c, &with(&base, &["RELEASE", "b"]))[0], 0);
    assert_eq!(rl(&mut c, &with(&base, &["RELEASE", "c"]))[0], 1);
}

/// A holder costs 16 bytes of the value (its id's digest and expiry), however long the id.
#[test]
fn memory_per_holder() {
    let (_s, mut c) = server();
    let usage = |c: &mut Connection| -> i64 {
        redis::cmd("MEMORY").arg("USAGE").arg("k").query(c).unwrap()
    };
    let base = ["RL.CONCURRENCY", "k", "1000", "60000"];
    rl(&mut c, &with(&base, &["ACQUIRE", "first"]));
    let one = usage(&mut c);
    for i in 1..1000 {
        let id = format!("{i:0>200}");
        assert_eq!(rl(&mut c, &with(&base, &["ACQUIRE", &id]))[0], 1);
    }
    let full = usage(&mut c);
    println!("MEMORY USAGE at N=1000: 1 holder {one} B, 1000 holders {full} B");
    assert_eq!(full - one, 999 * 16, "{one} then {full}");
    assert_eq!(rl(&mut c, &with(&base, &["ACQUIRE", "one-more"]))[0], 0);
    let info: String = redis::cmd("INFO").arg("ratelimit").query(&mut c).unwrap();
    assert!(
        info.contains("ratelimit_concurrency_holders:1000"),
        "{info}"
    );
    assert!(info.contains("ratelimit_concurrency_keys:1"), "{info}");
    assert!(
        info.contains("ratelimit_rl_concurrency_admitted:1000"),
        "{info}"
    );
    assert!(info.contains("ratelimit_rl_concurrency_denied:1"), "{info}");
}

/// A RESTORE of a payload whose holders are out of order, or more than the cap, is refused.
#[test]
fn corrupted_payloads_are_refused() {
    let (_s, mut c) = server();
    let base = ["RL.CONCURRENCY", "k", "3", "60000"];
    rl(&mut c, &with(&base, &["ACQUIRE", "a"]));
    rl(&mut c, &with(&base, &["ACQUIRE", "b"]));
    let original = dump(&mut c, "k").unwrap();
    // The holders are the state's last 32 bytes, the count the 4 before them; the state ends
    // one byte (the module value's end marker) before the version and CRC.
    let end = original.len() - 11;
    let swap = forge_dump(&original, |b| {
        let (first, second) = (b[end - 32..end - 16].to_vec(), b[end - 16..end].to_vec());
        b[end - 32..end - 16].copy_from_slice(&second);
        b[end - 16..end].copy_from_slice(&first);
    });
    let count = forge_dump(&original, |b| {
        b[end - 36..end - 32].copy_from_slice(&[0xff; 4])
    });
    for payload in [swap, count] {
        let restored: redis::RedisResult<()> = redis::cmd("RESTORE")
            .arg("victim")
            .arg(0)
            .arg(payload.as_slice())
            .query(&mut c);
        assert!(restored.is_err());
    }
    assert_eq!(rl(&mut c, &with(&base, &["PEEK"]))[2], 1);
}

/// In RL.ALL, a concurrency slot beside a rate limit: a request denied by either takes neither.
#[test]
fn rl_all_takes_a_slot_only_with_the_rate_limits() {
    let (_s, mut c) = server();
    let all = |c: &mut Connection, id: &str| -> Vec<Vec<i64>> {
        redis::cmd("RL.ALL")
            .arg(&[
                "2",
                "rate",
                "slots",
                "GCRA",
                "2",
                "60000",
                "CONCURRENCY",
                "2",
                "60000",
            ])
            .arg(&["ACQUIRE", id])
            .query(c)
            .unwrap()
    };
    let slots = ["RL.CONCURRENCY", "slots", "2", "60000"];
    let rate = ["RL.GCRA", "rate", "2", "60000", "COST", "0"];
    assert_eq!(all(&mut c, "a")[0][0], 1);
    assert_eq!(rl(&mut c, &with(&slots, &["PEEK"]))[2], 1);
    assert_eq!(all(&mut c, "b")[0][0], 1);
    // The rate limit denies c: c takes no slot (a and b hold both), and the rate is not charged.
    assert_eq!(rl(&mut c, &with(&slots, &["RELEASE", "b"]))[0], 1);
    let denied = all(&mut c, "c");
    assert_eq!(denied[0][0], 0);
    assert_eq!(denied[1][0], 0, "the rate limit denies");
    assert_eq!(
        denied[2][..3],
        [1, 2, 1],
        "the slot would admit; it is not taken"
    );
    assert_eq!(rl(&mut c, &with(&slots, &["RELEASE", "c"]))[0], 0);
    assert_eq!(rl(&mut c, &with(&slots, &["PEEK"]))[2], 1);
    // The slots deny d (fresh rate key): the rate is not charged.
    let fresh = |c: &mut Connection, id: &str| -> i64 {
        let v: Vec<Vec<i64>> = redis::cmd("RL.ALL")
            .arg(&[
                "2",
                "rate2",
                "slots",
                "GCRA",
                "2",
                "60000",
                "CONCURRENCY",
                "1",
                "60000",
            ])
            .arg(&["ACQUIRE", id])
            .query(c)
            .unwrap();
        v[0][0]
    };
    assert_eq!(fresh(&mut c, "d"), 0);
    assert_eq!(
        dump(&mut c, "rate2"),
        None,
        "a denied RL.ALL charged the rate"
    );
    assert_eq!(rl(&mut c, &rate)[2], 0);
    // PEEK looks without taking; RENEW and RELEASE are RL.CONCURRENCY's alone.
    let peek: Value = redis::cmd("RL.ALL")
        .arg(&["1", "slots", "CONCURRENCY", "2", "60000", "PEEK"])
        .query(&mut c)
        .unwrap();
    assert!(matches!(peek, Value::Array(_)));
    assert_eq!(rl(&mut c, &with(&slots, &["PEEK"]))[2], 1);
    let e = err(
        &mut c,
        &[
            "RL.ALL",
            "1",
            "slots",
            "CONCURRENCY",
            "2",
            "60000",
            "RELEASE",
            "a",
        ],
    );
    assert_eq!(
        e,
        "ERR RL.ALL takes CONCURRENCY N TTL ACQUIRE id or PEEK; RENEW and RELEASE are RL.CONCURRENCY's"
    );
    let e = err(
        &mut c,
        &[
            "RL.ALL",
            "1",
            "rate",
            "CONCURRENCY",
            "2",
            "60000",
            "ACQUIRE",
            "a",
        ],
    );
    assert!(
        e.starts_with("WRONGTYPE the key 'rate' holds a GCRA limiter"),
        "{e}"
    );
}

/// Worker processes take slots and are killed with SIGKILL mid-request (their RELEASE never
/// comes): every slot comes back at its TTL on the server's clock, not a millisecond earlier.
#[test]
fn workers_killed_mid_request_free_their_slots_at_ttl() {
    let (s, mut c) = server();
    let port = s.port.to_string();
    let mut workers: Vec<std::process::Child> = (0..3)
        .map(|w| {
            let script = format!(
                "redis-cli -p {port} RL.CONCURRENCY k 3 5000 ACQUIRE worker-{w} >/dev/null; \
                 exec sleep 600"
            );
            std::process::Command::new("sh")
                .args(["-c", &script])
                .spawn()
                .unwrap()
        })
        .collect();
    let peek = ["RL.CONCURRENCY", "k", "3", "5000", "PEEK"];
    wait_for("three workers holding slots", || rl(&mut c, &peek)[2] == 0);
    for w in &mut workers {
        w.kill().unwrap();
        w.wait().unwrap();
    }
    assert_eq!(rl(&mut c, &with(&peek[..4], &["ACQUIRE", "new"]))[0], 0);
    clock_advance(&mut c, 4999);
    assert_eq!(rl(&mut c, &peek)[..3], [0, 3, 0]);
    clock_advance(&mut c, 1);
    assert_eq!(rl(&mut c, &peek), [1, 3, 3, -1, 0]);
}
