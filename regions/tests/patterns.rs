//! Key patterns: the controller finds the limiter keys matching a group's pattern in any region
//! (`SCAN … MATCH … TYPE ratelimit`; on the library `TYPE string`, less what its `rl_peek`
//! refuses; a part of a pass per period), splits their limits like the listed keys', and forgets
//! a found key once nobody asked for it in a lifetime and its shares are over (three standalone
//! stores on loopback, on each backend: the module on its debug clock; the library, which the
//! controller loads itself (`load_library = "missing"`), or its scripts, on a clock the test sets).

mod world;

use ratelimit_client::Backend;
use ratelimit_regions::{Config, Controller};
use redis::{Connection, Value};
use world::{Server, T0_MS};

const LIFETIME_MS: u64 = 10_000;

on_every_backend!(keys_of_a_pattern_are_found_shared_and_forgotten);

fn clock(servers: &[Server], looks: &mut [Connection], now_ms: u64) {
    for (s, c) in servers.iter().zip(looks) {
        s.set_clock(c, now_ms);
    }
}

/// `RL.DEMAND`'s row for a key: asked, admitted, share, expiry, limit.
fn row(s: &Server, c: &mut Connection, key: &str) -> Vec<u64> {
    let rows: Vec<Vec<u64>> = s.command("DEMAND", &[key]).query(c).expect("RL.DEMAND");
    rows[0].clone()
}

fn ask(s: &Server, c: &mut Connection, key: &str, n: usize) {
    let mut pipe = redis::pipe();
    for _ in 0..n {
        let mut call = s.command("GCRA", &[key]);
        call.arg(333).arg(1000).arg("BURST").arg(33);
        pipe.add_command(call);
    }
    let _: Vec<Value> = pipe.query(c).expect("gateway");
}

fn keys_of_a_pattern_are_found_shared_and_forgotten(backend: Backend) {
    let servers = [0, 1, 2].map(|_| Server::start_as(backend, false));
    let mut looks: Vec<Connection> = servers
        .iter()
        .map(|s| s.connect().expect("connect"))
        .collect();
    let regions: String = servers
        .iter()
        .zip(["a", "b", "c"])
        .map(|(s, name)| {
            format!(
                "[[regions]]\nname = \"{name}\"\nurl = \"redis://127.0.0.1:{}\"\n",
                s.port
            )
        })
        .collect();
    let text = format!(
        "period_ms = 2000\nlifetime_ms = {LIFETIME_MS}\nclock_margin_ms = 0\ntimeout_ms = 10000\n\
         batch = 100\nscan_calls = 2\nload_library = \"missing\"\n{regions}\
         [[keys]]\npatterns = [\"pat:*\"]\nalgorithm = \"GCRA\"\nlimit = 1000\nwindow_ms = 1000\n\
         burst = 100\nfloor = 5\n"
    );
    let mut controller = Controller::new(Config::parse(&text).expect("config")).expect("new");
    let mut now = T0_MS;
    clock(&servers, &mut looks, now);
    // Region b's gateways created five limiter keys of the pattern; a string and a key of
    // another name are left alone.
    for i in 1..=5 {
        ask(&servers[1], &mut looks[1], &format!("pat:{i}"), 1);
    }
    ask(&servers[1], &mut looks[1], "other:1", 1);
    let _: Value = redis::cmd("SET")
        .arg("pat:string")
        .arg("x")
        .query(&mut looks[1])
        .expect("SET");
    let report = controller.period(now);
    assert_eq!(
        (report.keys_found, report.shares_written),
        (5, 15),
        "{report:?}"
    );
    assert_eq!(row(&servers[0], &mut looks[0], "pat:3")[2], 333);
    assert_eq!(row(&servers[0], &mut looks[0], "other:1"), [0; 5]);

    // Demand for pat:1 in b: its share moves there.
    for _ in 0..3 {
        now += 100;
        clock(&servers, &mut looks, now);
        ask(&servers[1], &mut looks[1], "pat:1", 60);
        now += 1900;
        clock(&servers, &mut looks, now);
        let report = controller.period(now);
        assert_eq!(report.keys_found, 0, "{report:?}");
    }
    let shares: Vec<u64> = servers
        .iter()
        .zip(looks.iter_mut())
        .map(|(s, c)| row(s, c, "pat:1")[2])
        .collect();
    assert!(
        shares[1] > 900 && shares.iter().sum::<u64>() <= 1000,
        "{shares:?}"
    );

    // Nobody asks any more. The controller stops writing the keys a lifetime after their last
    // demand; each store drops a key at its share's expiry (what Redis does on its own clock,
    // which the test's debug clock does not move); the controller then forgets them all, and
    // finds nothing again.
    let (mut forgotten, mut found) = (0, 0);
    while now < T0_MS + 60_000 && forgotten < 5 {
        now += 2000;
        clock(&servers, &mut looks, now);
        for (s, c) in servers.iter().zip(looks.iter_mut()) {
            for i in 1..=5 {
                let key = format!("pat:{i}");
                let r = row(s, c, &key);
                if r[3] > 0 && r[3] <= now {
                    let _: Value = redis::cmd("DEL").arg(&key).query(c).expect("DEL");
                }
            }
        }
        let report = controller.period(now);
        forgotten += report.keys_forgotten;
        found += report.keys_found;
    }
    assert_eq!((forgotten, found), (5, 0));
    assert!(controller.groups()[0].keys.is_empty());
}
