//! The binary: `--help`, a configuration it refuses, and one period against a real store.

mod world;

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_redis-ratelimit-regions");

#[test]
fn help_and_refusals() {
    let out = Command::new(BIN).arg("--help").output().expect("run");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("--config FILE"), "{text}");
    let dir = testkit::Scratch::new("regions").expect("dir");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "period_ms = 2000\nregions = []\nkeys = []\n").expect("write");
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&bad)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no regions"));
    // Issue 36: one key in two groups (the stricter L was ignored), and five ranges of ten
    // million keys (6.5 GB before they were refused): refused by name, at once.
    let region = "[[regions]]\nname = \"a\"\nurl = \"redis://127.0.0.1:1\"\n";
    let group = |keys: &str, limit: u64| {
        format!(
            "[[keys]]\nkeys = [{keys}]\nalgorithm = \"GCRA\"\nlimit = {limit}\nwindow_ms = 1000\n"
        )
    };
    let ranges = "\"a{1..9999999}\", \"b{1..9999999}\", \"c{1..9999999}\", \"d{1..9999999}\", \"e{1..9999999}\"";
    for (text, want) in [
        (
            format!("{region}{}{}", group("\"k\"", 1000), group("\"k\"", 30)),
            "key 'k' is listed twice (one key, one group)",
        ),
        (
            format!("{region}{}", group(ranges, 1000)),
            "49999995 keys once ranges are expanded: at most max_keys = 250000",
        ),
    ] {
        std::fs::write(&bad, text).expect("write");
        let out = Command::new(BIN)
            .arg("--config")
            .arg(&bad)
            .arg("--once")
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{err}");
    }
}

#[test]
fn one_period_against_a_real_store() {
    let server = world::Server::start();
    let dir = testkit::Scratch::new("regions-once").expect("dir");
    let config = dir.join("regions.toml");
    let text = format!(
        "[[regions]]\nname = \"a\"\nurl = \"redis://127.0.0.1:{}\"\n[[keys]]\nkeys = [\"cli:{{1..3}}\"]\n\
         algorithm = \"FIXEDWINDOW\"\nlimit = 100\nwindow_ms = 1000\n",
        server.port
    );
    std::fs::write(&config, text).expect("write");
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .arg("--once")
        .output()
        .expect("run");
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{line}");
    // The first period writes every key's safe share (the keys did not exist).
    assert!(line.contains("keys_refreshed=3 shares_written=3"), "{line}");
    let mut c = server.connect().expect("connect");
    let rows: Vec<Vec<i64>> = redis::cmd("RL.DEMAND")
        .arg("cli:2")
        .query(&mut c)
        .expect("demand");
    assert_eq!(rows[0][2], 100);
}

/// A region that cannot be reached is reported with the cause (here a key of another type that
/// the store refuses to share), never its URL's password.
#[test]
fn an_unreachable_region_is_reported_with_its_cause() {
    let server = world::Server::start();
    let mut c = server.connect().expect("connect");
    let _: () = redis::cmd("SET")
        .arg("garbage:1")
        .arg("x")
        .query(&mut c)
        .expect("set");
    let dir = testkit::Scratch::new("regions-cause").expect("dir");
    let config = dir.join("regions.toml");
    let text = format!(
        "[[regions]]\nname = \"a\"\nurl = \"redis://127.0.0.1:{}\"\n[[keys]]\nkeys = [\"garbage:1\"]\n\
         algorithm = \"GCRA\"\nlimit = 100\nwindow_ms = 1000\n",
        server.port
    );
    std::fs::write(&config, text).expect("write");
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .arg("--once")
        .output()
        .expect("run");
    let (line, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(line.contains("unreachable=a"), "{line}");
    assert!(err.contains("unreachable: a: "), "{err}");
}
