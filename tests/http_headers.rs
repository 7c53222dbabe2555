//! The HTTP mapping of examples/http_headers.rs (included here): the worked table of docs/http.md comes
//! out of it for the replies a server gives, and it is right for any L, W and B.

#[path = "../examples/http_headers.rs"]
#[allow(dead_code)]
mod http_headers;
mod support;

use http_headers::{quota, response, Policy, Response};
use support::*;

/// A table row of docs/http.md: its first cell, the commands run in order (the last one's reply is the
/// row's), and the policy.
struct Row {
    label: &'static str,
    commands: &'static [&'static [&'static str]],
    policy: Policy,
}

const fn policy(limit: u64, window_ms: u64, burst: u64) -> Policy {
    Policy {
        limit,
        window_ms,
        burst,
    }
}

const ROWS: &[Row] = &[
    Row {
        label: "`RL.GCRA http:a 10 100` (100/s)",
        commands: &[&["RL.GCRA", "http:a", "10", "100"]],
        policy: policy(10, 100, 10),
    },
    Row {
        label: "`RL.GCRA http:b 30 1500` (20/s)",
        commands: &[&["RL.GCRA", "http:b", "30", "1500"]],
        policy: policy(30, 1500, 30),
    },
    Row {
        label: "`RL.GCRA http:c 100 1000 BURST 200`",
        commands: &[&["RL.GCRA", "http:c", "100", "1000", "BURST", "200"]],
        policy: policy(100, 1000, 200),
    },
    Row {
        label: "`RL.GCRA http:d 1 1500`, again",
        commands: &[
            &["RL.GCRA", "http:d", "1", "1500"],
            &["RL.GCRA", "http:d", "1", "1500"],
        ],
        policy: policy(1, 1500, 1),
    },
];

/// The row as docs/http.md prints it, up to the "was" column.
fn row_text(row: &Row, reply: [i64; 5], r: &Response) -> String {
    let header = |name: &str| {
        r.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let state = match r.status {
        200 => format!("`{}`", header("RateLimit")),
        status => format!(
            "{status}, `Retry-After: {}`, `{}`",
            header("Retry-After"),
            header("RateLimit")
        ),
    };
    let reply: Vec<String> = reply.iter().map(i64::to_string).collect();
    format!(
        "| {} | {} | `{}` | {state} |",
        row.label,
        reply.join(" "),
        header("RateLimit-Policy")
    )
}

#[test]
fn the_documented_table_is_what_the_mapping_gives() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/http.md"))
        .expect("docs/http.md");
    let (_s, mut c) = server();
    for row in ROWS {
        let mut reply = [0; 5];
        for words in row.commands {
            reply = rl(&mut c, words);
        }
        let text = row_text(row, reply, &response("default", row.policy, reply, 0));
        assert!(
            readme.contains(&text),
            "docs/http.md lacks the row, or it drifted:\n{text}"
        );
    }
}

#[test]
fn q_over_w_is_the_real_rate_in_whole_windows() {
    let windows = [
        1,
        7,
        100,
        250,
        999,
        1000,
        1001,
        1500,
        2500,
        60_000,
        86_400_000,
        1_000_000_000_000,
    ];
    for window_ms in windows {
        for limit in [1, 3, 10, 100, 999_999_999_999] {
            let (q, w) = quota(policy(limit, window_ms, limit));
            assert!(w >= 1, "L={limit} W={window_ms}");
            // q/w = 1000·L/W, exactly.
            assert_eq!(
                u128::from(q) * u128::from(window_ms),
                1000 * u128::from(limit) * u128::from(w),
                "L={limit} W={window_ms}"
            );
            // w is a whole number of windows, and the fewest that make whole seconds.
            let k = w * 1000 / window_ms;
            assert_eq!(k * window_ms, w * 1000, "L={limit} W={window_ms}");
            assert!(
                (1..k).all(|j| j * window_ms % 1000 != 0),
                "L={limit} W={window_ms}"
            );
        }
    }
    // W a multiple of a second: q = L, w = W/1000.
    assert_eq!(quota(policy(100, 60_000, 100)), (100, 60));
    // A q beyond a structured-field Integer (15 digits) is cut to the largest one.
    let max = 1_000_000_000_000;
    assert_eq!(quota(policy(max, 1001, max)), (999_999_999_999_999, 1001));
}

#[test]
fn r_never_exceeds_q_and_a_denial_waits_as_long_as_t() {
    let bursty = policy(100, 1000, 200);
    // A full bucket of 200 announces at most the quota of 100.
    let full = response("default", bursty, [1, 200, 199, -1, 10], 0);
    assert_eq!(full.headers[1].1, "\"default\";r=100;t=1");
    assert_eq!(full.headers[0].1, "\"default\";q=100;w=1;acme-burst=200");
    // A denial: Retry-After rounds up, jitter adds whole seconds, and t follows it.
    let denied = response("default", bursty, [0, 200, 0, 1001, 2000], 1);
    assert_eq!(denied.status, 429);
    assert_eq!(
        denied.headers[1..],
        [
            ("Retry-After", "3".to_string()),
            ("RateLimit", "\"default\";r=0;t=3".to_string())
        ]
    );
}

/// `PORT=… make run` reaches everything that talks to the server: `scripts/dev-server` starts on
/// that port and prints the exact `redis-cli` line, and the example, run as the server suggests
/// (`PORT=… cargo run --example http_headers -- …`), calls that port.
#[test]
fn make_run_port_reaches_redis_cli_and_the_example() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let port = free_port().to_string();
    /// Stops the dev server (SIGTERM: it stops its redis-server and removes its directory),
    /// also when an assertion fails.
    struct Dev(std::process::Child);
    impl Drop for Dev {
        fn drop(&mut self) {
            let _ = Command::new("kill").arg(self.0.id().to_string()).status();
            let _ = self.0.wait();
        }
    }
    let mut dev = Command::new(root.join("scripts/dev-server"))
        .args(["DEBUG-CLOCK", "yes"])
        .env("PORT", &port)
        .env("MODULE", module_path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map(Dev)
        .expect("scripts/dev-server");
    let mut lines = BufReader::new(dev.0.stdout.take().expect("stdout")).lines();
    let mut next = || lines.next().expect("a line").expect("utf-8");
    let (_, cli, example) = (next(), next(), next());
    assert_eq!(
        cli,
        format!("dev-server: in another terminal: redis-cli -p {port}")
    );
    assert_eq!(
        example,
        format!("dev-server: or: PORT={port} cargo run --example http_headers -- KEY L W [B]")
    );
    wait_for("the dev server", || {
        std::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).is_ok()
    });
    // The printed redis-cli line, as printed.
    let words: Vec<&str> = cli.rsplit(": ").next().unwrap().split(' ').collect();
    let out = Command::new(words[0])
        .args(&words[1..])
        .arg("PING")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "PONG");
    // The example as `cargo test` built it, with PORT as the server printed it.
    let examples = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|deps| deps.parent())
        .map(|debug| debug.join("examples/http_headers"))
        .unwrap();
    if !examples.exists() {
        // `cargo test --test http_headers` alone does not build the examples.
        let built = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--example", "http_headers", "--manifest-path"])
            .arg(root.join("Cargo.toml"))
            .status()
            .unwrap();
        assert!(built.success());
    }
    let out = Command::new(&examples)
        .args(["http:port", "10", "1000"])
        .env("PORT", &port)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    drop(dev);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("HTTP/1.1 200 OK"), "{text}");
    // HOST PORT arguments still win over PORT.
    let (host, p) = http_headers::server(&["10.0.0.1".into(), "7000".into()], Some(port.clone()));
    assert_eq!((host.as_str(), p.as_str()), ("10.0.0.1", "7000"));
    let (_, p) = http_headers::server(&[], None);
    assert_eq!(p, "6379");
}

/// docs/http.md's worked `RL.ALL` call: the headers `response_all` gives for the server's replies
/// are the ones the page prints; a limiter that would have admitted the denied call shows its
/// state; with one limiter the recipe is the one-policy recipe, jitter included.
#[test]
fn the_rl_all_recipe_gives_the_documented_headers() {
    use http_headers::{response_all, Limiter};
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/http.md"))
        .expect("docs/http.md");
    let (_s, mut c) = server();
    let limiters = |cost| {
        [
            Limiter {
                name: "second",
                policy: policy(5, 1000, 5),
                cost,
            },
            Limiter {
                name: "hour",
                policy: policy(100, 3_600_000, 100),
                cost,
            },
        ]
    };
    let call = |c: &mut Connection, cost: &str| -> ([i64; 5], Vec<[i64; 5]>) {
        let reply: Vec<Vec<i64>> = redis::cmd("RL.ALL")
            .arg(&[
                "2",
                "api:{alice}:s",
                "api:{alice}:h",
                "GCRA",
                "5",
                "1000",
                "COST",
                cost,
                "TOKENBUCKET",
                "100",
                "3600000",
                "COST",
                cost,
            ])
            .query(c)
            .unwrap();
        let mut arrays = reply.into_iter().map(|v| <[i64; 5]>::try_from(v).unwrap());
        (arrays.next().unwrap(), arrays.collect())
    };
    let mut texts = Vec::new();
    for cost in [1, 5] {
        let (combined, each) = call(&mut c, &cost.to_string());
        let r = response_all(&limiters(cost), combined, &each, 0);
        let reason = if r.status == 200 {
            "OK"
        } else {
            "Too Many Requests"
        };
        let mut text = format!("HTTP/1.1 {} {reason}\n", r.status);
        for (name, value) in &r.headers {
            text += &format!("{name}: {value}\n");
        }
        texts.push(text);
    }
    assert_eq!(
        texts[1].lines().nth(3),
        Some("RateLimit: \"second\";r=0;t=1, \"hour\";r=99;t=36")
    );
    let block = texts.join("\n");
    assert!(doc.contains(&block), "docs/http.md drifted:\n{block}");

    // One limiter: the one-policy recipe, on a 200 and on a 429 with jitter.
    for words in [
        &["RL.ALL", "1", "one", "GCRA", "1", "1500"][..],
        &["RL.ALL", "1", "one", "GCRA", "1", "1500"],
    ] {
        let (combined, each) = {
            let reply: Vec<Vec<i64>> = redis::cmd(words[0]).arg(&words[1..]).query(&mut c).unwrap();
            let mut arrays = reply.into_iter().map(|v| <[i64; 5]>::try_from(v).unwrap());
            (arrays.next().unwrap(), arrays.collect::<Vec<_>>())
        };
        let p = policy(1, 1500, 1);
        let one = [Limiter {
            name: "default",
            policy: p,
            cost: 1,
        }];
        assert_eq!(
            response_all(&one, combined, &each, 1),
            response("default", p, combined, 1)
        );
    }
}
