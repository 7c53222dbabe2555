//! The client's test helpers on testkit's servers: a real `redis-server` with the module (its
//! debug clock pinned) or without it (the Functions library's), on loopback, killed on drop;
//! commands sent through a fresh blocking connection; and a TCP proxy that injects latency,
//! drops and half-open connections (`proxy`).
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use testkit::Options;
pub use testkit::T0_MS;

pub mod proxy;

/// A free loopback port (testkit's: above the kernel's ephemeral range, one per call).
pub fn free_port() -> u16 {
    testkit::free_port().unwrap_or_else(|e| panic!("{e}"))
}

testkit::server_layer!(
    /// A running server (testkit's, which it derefs to), killed on drop.
    pub struct Server
);

impl Server {
    /// A server with the module (`DEBUG-CLOCK yes`), its clock pinned at `T0_MS`.
    pub fn start() -> Server {
        Server::with(&[])
    }

    pub fn with(extra: &[&str]) -> Server {
        let options = Options::debug_module(&[]).unwrap_or_else(|e| panic!("{e}"));
        let s = Server::started(options.extra(extra));
        s.clock_set(T0_MS);
        s
    }

    /// A server without the module (for the Functions library), on the real clock.
    pub fn plain() -> Server {
        Server::plain_with(&[])
    }

    /// A server without the module, with more configuration (`--rename-command FUNCTION ""`).
    pub fn plain_with(extra: &[&str]) -> Server {
        Server::started(Options::default().extra(extra))
    }

    fn started(options: Options) -> Server {
        Server(testkit::Server::start(options).unwrap_or_else(|e| panic!("{e}")))
    }

    /// SIGSTOP: the process holds its connections but answers nothing.
    pub fn stop(&self) {
        self.0.pause().unwrap_or_else(|e| panic!("{e}"));
    }

    /// SIGCONT after `stop`.
    pub fn resume(&self) {
        self.0.resume().unwrap_or_else(|e| panic!("{e}"));
    }

    /// Starts it again on the same port (after `kill`); the module clock is pinned again.
    /// A start that fails is tried again for up to 10 s.
    pub fn restart(&mut self, clock_ms: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.0.restart() {
                Ok(()) => break,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("{e}"),
            }
        }
        self.clock_set(clock_ms);
    }

    pub fn clock_set(&self, ms: u64) {
        testkit::clock_set(&mut self.connect(), ms);
    }

    pub fn clock_advance(&self, ms: u64) {
        let ms = i64::try_from(ms).expect("a step of the clock within i64");
        testkit::clock_advance(&mut self.connect(), ms);
    }

    /// A command's reply as integers, through a fresh blocking connection.
    pub fn ints(&self, words: &[&str]) -> Vec<i64> {
        self.value(words)
            .and_then(|v| redis::from_redis_value(&v))
            .unwrap_or_else(|e| panic!("{words:?}: {e}"))
    }

    pub fn value(&self, words: &[&str]) -> redis::RedisResult<redis::Value> {
        let mut cmd = redis::cmd(words[0]);
        for w in &words[1..] {
            cmd.arg(*w);
        }
        cmd.query(&mut self.connect())
    }

    /// How many times the server ran `command` (as INFO spells it, e.g. "RL.LEASE"), from INFO
    /// commandstats.
    pub fn calls(&self, command: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.connect())
            .unwrap();
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

/// A clock the tests move by hand (the client's local time: leases, circuit backoff, local
/// buckets), shared with the limiter under test.
pub fn manual_clock() -> Arc<ratelimit_client::ManualClock> {
    Arc::new(ratelimit_client::ManualClock::new(1_000_000_000))
}

/// A limiter on `s` with the test's clock and a deadline of 5 s: for tests that count on the
/// store answering, so that a stalled test machine does not turn a slow reply into a fallback.
pub async fn limiter(
    s: &Server,
    clock: &Arc<ratelimit_client::ManualClock>,
) -> ratelimit_client::Limiter {
    let store = ratelimit_client::Store::connect(&s.url()).await.unwrap();
    ratelimit_client::Limiter::new(
        store,
        ratelimit_client::Config {
            deadline: Duration::from_secs(5),
            clock: clock.clone(),
            ..ratelimit_client::Config::default()
        },
    )
}

/// A GCRA key's debt in tokens (`RL.INSPECT`'s `debt_millitokens` / 1000): with the server's
/// clock pinned nothing refills, so it is everything counted so far.
pub fn counted(s: &Server, key: &str) -> u64 {
    let fields: Vec<redis::Value> = redis::cmd("RL.INSPECT")
        .arg(key)
        .query(&mut s.connect())
        .unwrap();
    let debt = fields.chunks(2).find_map(|pair| match pair {
        [redis::Value::BulkString(name), redis::Value::Int(v)] if name == b"debt_millitokens" => {
            Some(*v)
        }
        _ => None,
    });
    u64::try_from(debt.expect("a GCRA key")).unwrap() / 1000
}
