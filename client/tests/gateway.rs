//! The example gateway as a process: it answers, and SIGTERM (systemd, Kubernetes) and SIGINT
//! (Ctrl-C) both end it through `shutdown()`.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use support::Server;

/// `target/<profile>/examples/gateway`, built by `cargo test` with the tests (alone:
/// `cargo build -p redis-ratelimit-client --example gateway` first).
fn gateway_binary() -> PathBuf {
    let deps = std::env::current_exe().unwrap();
    deps.parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/gateway")
}

fn get(port: u16, xff: &str) -> String {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        c,
        "GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: {xff}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn sigterm_and_sigint_both_shut_the_gateway_down_cleanly() {
    let s = Server::start();
    for signal in ["-TERM", "-INT"] {
        let port = support::free_port();
        let mut child = Command::new(gateway_binary())
            .args([s.url(), format!("127.0.0.1:{port}"), "127.0.0.1".into()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the example is built with the tests");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert!(line.starts_with("listening"), "{line}");
        // Keyed per IPv6 /64: addresses rotating inside one /64 share one key and are denied
        // once its burst is spent.
        let net = format!("2001:db8:{}:1", signal.len());
        let mut admitted = 0;
        for i in 0..40 {
            let reply = get(port, &format!("{net}::{i:x}"));
            let status = reply.lines().next().unwrap_or_default().to_string();
            if status.contains(" 429 ") {
                break;
            }
            assert!(status.contains(" 200 "), "{status}");
            admitted += 1;
        }
        assert!(admitted < 40, "never denied");
        let key = format!("rl:ip:{net}::/64");
        assert_eq!(s.ints(&["RL.PEEK", &key])[2], 0, "{key}");
        let ok = Command::new("kill")
            .arg(signal)
            .arg(child.id().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let status = child.wait().unwrap();
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        assert!(status.success(), "{signal}: {status}");
        assert!(
            rest.contains("shutdown: ShutdownReport"),
            "{signal}: {rest}"
        );
    }
}
