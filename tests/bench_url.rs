//! `scripts/bench --url URL` (scripts/benchkit/store.py): the client's URL forms translated into
//! redis-benchmark's flags, and the forms it refuses with their reason. A table of cases, each
//! failing by its URL. No server, no redis-benchmark: python3 alone, as CI has.

use std::path::Path;
use std::process::Command;

/// The translation of each URL, as store.py prints it: the flags joined by spaces, or the
/// refusal's text.
fn translate(urls: &[&str]) -> Vec<String> {
    let out = Command::new("python3")
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts"))
        .args([
            "-B",
            "-c",
            "import sys\n\
             from benchkit import store\n\
             for url in sys.argv[1:]:\n\
             \x20   try:\n\
             \x20       print(' '.join(store.benchmark_flags(store.parse(url))))\n\
             \x20   except SystemExit as e:\n\
             \x20       print(e)\n",
        ])
        .args(urls)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "scripts/benchkit/store.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn each_url_form_becomes_redis_benchmarks_flags() {
    let cases = [
        ("redis://127.0.0.1", "-h 127.0.0.1 -p 6379"),
        ("redis://127.0.0.1:7000/3", "-h 127.0.0.1 -p 7000 --dbnum 3"),
        (
            "rediss://rl:p%40ss@127.0.0.1:6390/?ca=ca.pem",
            "-h 127.0.0.1 -p 6390 --tls --sni 127.0.0.1 --cacert ca.pem --user rl -a p@ss",
        ),
        (
            "rediss://:pw@host:1/?ca=ca.pem&cert=c.pem&key=k.pem&db=2",
            "-h host -p 1 --tls --sni host --cacert ca.pem --cert c.pem --key k.pem -a pw --dbnum 2",
        ),
        ("redis://[::1]:7001", "-h ::1 -p 7001"),
        (
            "unix:///run/redis.sock?user=u&password=pw",
            "-s /run/redis.sock --user u -a pw",
        ),
    ];
    let urls: Vec<&str> = cases.iter().map(|(u, _)| *u).collect();
    for ((url, want), got) in cases.iter().zip(translate(&urls)) {
        assert_eq!(&got, want, "{url}");
    }
}

#[test]
fn what_redis_benchmark_cannot_reach_is_refused_without_the_password() {
    let cases = [
        ("redis+sentinel://h:26379/mymaster", "drives one server"),
        ("rediss+cluster://u:secret@a:1,b:2", "drives one server"),
        ("redis://u:secret@a:1,b:2", "several hosts"),
        ("redis://u:secret@h:1/?ca=ca.pem", "need rediss://"),
        ("rediss://u:secret@h:1/?cert=c.pem", "go together"),
        ("rediss://u@h:1/", "has no password"),
        ("redis://u:secret@h:port", "not a number"),
    ];
    let urls: Vec<&str> = cases.iter().map(|(u, _)| *u).collect();
    for ((url, want), got) in cases.iter().zip(translate(&urls)) {
        assert!(got.contains(want), "{url}: {got}");
        assert!(
            !got.contains("secret"),
            "{url}: the refusal shows the password"
        );
    }
}
