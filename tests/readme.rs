//! Every `redis-cli` session of README.md and docs/*.md, run verbatim through the real
//! `redis-cli` against a fresh server: the documentation cannot drift from the module.
//!
//! The convention: a fenced block opened with ```` ```console ```` is a session. A line that
//! starts with `127.0.0.1:6379> ` is a command, typed as it follows the prompt; the lines up to
//! the next command (or the end of the block) are exactly what `redis-cli` prints for it, one
//! reply element per line (`1) (integer) 1`, `(error) ERR …`, `(nil)`). Other fences (```` ``` ````,
//! ```` ```sh ````, ```` ```text ````) are not run.
//!
//! Each session runs on a server of its own, loaded with `DEBUG-CLOCK yes` as
//! `make run ARGS="DEBUG-CLOCK yes"` loads it; sessions pin the clock themselves. A second test
//! runs all of them one after another on one server, as a reader pasting them in order would,
//! and then all of them again: sessions that shared a key, or left one behind, would then
//! disagree.
//!
//! Each command goes to its own `redis-cli` process, in order, on the session's server (as
//! `echo CMD | redis-cli`): a drift is then reported against the command that caused it.
//! `redis-cli` prints replies this way on a terminal; with its output piped it would print raw
//! values, so the test passes `--no-raw`, which keeps the terminal format.

mod support;
use support::Server;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const PROMPT: &str = "127.0.0.1:6379> ";

/// One ```` ```console ```` block.
struct Session {
    /// Where it is: `README.md:123` (the line of the opening fence).
    at: String,
    /// The commands in order, each with what redis-cli prints for it, line by line.
    steps: Vec<(String, Vec<String>)>,
}

/// README.md, then docs/*.md in name order.
fn documents() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .map(|dir| {
            dir.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "md"))
                .collect()
        })
        .unwrap_or_default();
    docs.sort();
    docs.insert(0, root.join("README.md"));
    docs
}

fn sessions_in(path: &Path) -> Vec<Session> {
    let name = path
        .strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(path)
        .display()
        .to_string();
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut sessions = Vec::new();
    let mut current: Option<Session> = None;
    for (i, line) in text.lines().enumerate() {
        match current.as_mut() {
            None if line.trim_end() == "```console" => {
                current = Some(Session {
                    at: format!("{name}:{}", i + 1),
                    steps: Vec::new(),
                });
            }
            None => {}
            Some(_) if line.starts_with("```") => {
                let session = current.take().expect("inside a block");
                assert!(
                    !session.steps.is_empty(),
                    "{}: a console block without a `{PROMPT}` line",
                    session.at
                );
                sessions.push(session);
            }
            Some(session) => {
                if let Some(command) = line.strip_prefix(PROMPT) {
                    session.steps.push((command.to_string(), Vec::new()));
                } else {
                    let at = &session.at;
                    let (_, output) = session.steps.last_mut().unwrap_or_else(|| {
                        panic!(
                            "{at}: a console block must start with a `{PROMPT}` line, not {line:?}"
                        )
                    });
                    output.push(line.to_string());
                }
            }
        }
    }
    assert!(current.is_none(), "{name}: a console block is not closed");
    sessions
}

fn all_sessions() -> Vec<Session> {
    let sessions: Vec<Session> = documents().iter().flat_map(|p| sessions_in(p)).collect();
    // A broken fence convention must not pass by finding nothing.
    assert!(
        sessions.len() >= 10,
        "only {} console sessions found",
        sessions.len()
    );
    sessions
}

/// What `redis-cli` prints when the command is typed into it.
fn redis_cli(port: u16, command: &str) -> Vec<String> {
    let mut child = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "--no-raw"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("redis-cli not found: run scripts/install-deps (apt-get install redis-tools)");
    let input = format!("{command}\n");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write to redis-cli");
    let out = child.wait_with_output().expect("redis-cli output");
    assert!(
        out.status.success(),
        "redis-cli failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !is_latency_line(l))
        .map(str::to_string)
        .collect()
}

/// The line redis-cli adds after a command that took longer than half a second, `(0.80s)`: it
/// says how loaded the machine was, not what the command answered, so it is never compared.
fn is_latency_line(line: &str) -> bool {
    line.strip_prefix('(')
        .and_then(|l| l.strip_suffix("s)"))
        .and_then(|secs| secs.split_once('.'))
        .is_some_and(|(whole, frac)| {
            !whole.is_empty()
                && !frac.is_empty()
                && whole
                    .bytes()
                    .chain(frac.bytes())
                    .all(|b| b.is_ascii_digit())
        })
}

#[test]
fn latency_lines_are_not_output() {
    for line in ["(0.80s)", "(12.05s)"] {
        assert!(is_latency_line(line), "{line}");
    }
    for line in [
        "(integer) 1",
        "(nil)",
        "(0.80)",
        "(s)",
        "(.5s)",
        "1) (0.80s)",
        "(error) x",
    ] {
        assert!(!is_latency_line(line), "{line}");
    }
}

/// A line diff (longest common subsequence): ` ` both, `-` only in the document, `+` only in
/// what redis-cli printed.
fn diff(expected: &[String], actual: &[String]) -> String {
    let (n, m) = (expected.len(), actual.len());
    let mut lcs = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if expected[i] == actual[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < n || j < m {
        if i < n && j < m && expected[i] == actual[j] {
            out += &format!("  {}\n", expected[i]);
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            out += &format!("- {}\n", expected[i]);
            i += 1;
        } else {
            out += &format!("+ {}\n", actual[j]);
            j += 1;
        }
    }
    out
}

/// The session as the document prints it: each prompt and command, then its output.
fn transcript<'a>(steps: impl IntoIterator<Item = (&'a String, &'a Vec<String>)>) -> Vec<String> {
    let mut lines = Vec::new();
    for (command, output) in steps {
        lines.push(format!("{PROMPT}{command}"));
        lines.extend(output.iter().cloned());
    }
    lines
}

/// Runs a session on the server, one `redis-cli` per command in order, and returns a
/// description of the drift, if any.
fn check(server: &Server, session: &Session) -> Option<String> {
    let outputs: Vec<Vec<String>> = session
        .steps
        .iter()
        .map(|(command, _)| redis_cli(server.port, command))
        .collect();
    let expected = transcript(session.steps.iter().map(|(c, o)| (c, o)));
    let actual = transcript(session.steps.iter().map(|(c, _)| c).zip(&outputs));
    (actual != expected).then(|| {
        format!(
            "{}: the session drifted (- document, + redis-cli):\n{}",
            session.at,
            diff(&expected, &actual)
        )
    })
}

#[test]
fn every_session_reproduces_on_a_fresh_server() {
    let drifted: Vec<String> = all_sessions()
        .iter()
        .filter_map(|session| check(&Server::start(), session))
        .collect();
    assert!(drifted.is_empty(), "\n{}", drifted.join("\n"));
}

/// All sessions in order on one server, then all of them again: a reader pasting a session a
/// second time sees what the document shows, because each session leaves no key behind.
#[test]
fn all_sessions_in_order_on_one_server_agree_and_again() {
    let server = Server::start();
    let sessions = all_sessions();
    for paste in ["first", "second"] {
        let drifted: Vec<String> = sessions
            .iter()
            .filter_map(|session| check(&server, session))
            .map(|d| format!("{paste} paste: {d}"))
            .collect();
        assert!(drifted.is_empty(), "\n{}", drifted.join("\n"));
    }
}

#[test]
fn the_diff_marks_what_drifted() {
    let lines = |s: &str| s.lines().map(str::to_string).collect::<Vec<_>>();
    assert_eq!(
        diff(&lines("a\nb\nc"), &lines("a\nx\nc")),
        "  a\n- b\n+ x\n  c\n"
    );
}

/// The ACL recipe of README.md, pasted as it is, grants what the text
/// says: `gateway` calls the limiters (refunds included) on `rl:*` and nothing operator-only;
/// `guard` spends and reads the security limits (`login:*`, `otp:*`) but cannot give tokens
/// back (one `RL.REFUND` would reopen an exhausted `login:bob`); `dashboard` only reads.
#[test]
fn the_acl_recipes_grant_what_they_say() {
    let sessions: Vec<Session> = all_sessions()
        .into_iter()
        .filter(|s| s.steps.iter().any(|(c, _)| c.starts_with("ACL SETUSER")))
        .collect();
    assert!(
        !sessions.is_empty(),
        "the ACL recipes are not console sessions"
    );
    for session in &sessions {
        let server = Server::start();
        if let Some(drift) = check(&server, session) {
            panic!("{drift}");
        }
        let mut admin = server.connect();
        let users: Vec<String> = redis::cmd("ACL").arg("USERS").query(&mut admin).unwrap();
        let as_user = |user: &str| {
            let mut c = server.connect();
            let _: () = redis::cmd("AUTH")
                .arg(user)
                .arg("secret")
                .query(&mut c)
                .unwrap();
            c
        };
        let allowed = |c: &mut redis::Connection, words: &[&str]| {
            if let Err(e) = support::cmd(c, words) {
                assert!(!e.to_string().contains("NOPERM"), "{words:?}: {e}");
            }
        };
        let refused = |c: &mut redis::Connection, words: &[&str]| {
            let e = support::cmd(c, words).expect_err("allowed");
            assert!(e.to_string().contains("NOPERM"), "{words:?}: {e}");
        };
        if users.iter().any(|u| u == "gateway") {
            let mut c = as_user("gateway");
            allowed(&mut c, &["RL.GCRA", "rl:api", "10", "1000"]);
            allowed(&mut c, &["RL.LEASE", "rl:batch", "10", "1000", "WANT", "5"]);
            allowed(&mut c, &["RL.REFUND", "rl:batch", "2"]);
            allowed(&mut c, &["RL.THROTTLE", "rl:cell", "4", "1", "1"]);
            allowed(
                &mut c,
                &["RL.CONCURRENCY", "rl:jobs", "2", "1000", "ACQUIRE", "a"],
            );
            allowed(
                &mut c,
                &[
                    "RL.ALL",
                    "2",
                    "rl:a",
                    "rl:b",
                    "GCRA",
                    "1",
                    "1000",
                    "FIXEDWINDOW",
                    "1",
                    "1000",
                ],
            );
            refused(&mut c, &["RL.SETSTATE", "rl:api", "x"]);
            refused(&mut c, &["RL.DEBUG", "CLOCK", "SET", "1"]);
            refused(&mut c, &["RL.GCRA", "login:bob", "5", "60000"]);
            refused(&mut c, &["GET", "rl:api"]);
        }
        if users.iter().any(|u| u == "guard") {
            let mut c = as_user("guard");
            for _ in 0..6 {
                allowed(&mut c, &["RL.GCRA", "login:bob", "5", "60000"]);
            }
            allowed(
                &mut c,
                &[
                    "RL.ALL",
                    "2",
                    "login:acct:bob",
                    "otp:bob",
                    "GCRA",
                    "5",
                    "60000",
                    "SLIDINGLOG",
                    "3",
                    "60000",
                ],
            );
            refused(&mut c, &["RL.REFUND", "login:bob", "5"]);
            refused(&mut c, &["RL.SETSTATE", "login:bob", "x"]);
            refused(&mut c, &["RL.GCRA", "rl:api", "10", "1000"]);
            let exhausted = support::rl(
                &mut admin,
                &["RL.GCRA", "login:bob", "5", "60000", "COST", "0"],
            );
            assert_eq!(exhausted[0], 0, "login:bob is still exhausted");
        }
        if users.iter().any(|u| u == "dashboard") {
            let mut c = as_user("dashboard");
            allowed(&mut c, &["RL.PEEK", "rl:api"]);
            allowed(&mut c, &["RL.INSPECT", "rl:api"]);
            allowed(&mut c, &["INFO", "ratelimit"]);
            refused(&mut c, &["RL.GCRA", "rl:api", "10", "1000"]);
            refused(&mut c, &["RL.REFUND", "rl:api", "1"]);
        }
    }
}
