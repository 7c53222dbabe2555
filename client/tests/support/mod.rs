//! Real `redis-server` processes with the module loaded, on loopback, killed on drop, and a TCP
//! proxy that injects latency, drops and half-open connections. Ports as the module's own
//! tests/support picks them (61000-65535, one per call, skipping taken ones).
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub mod proxy;

/// The debug clock's pinned instant (2096): no key expires by the real clock during a test.
pub const T0_MS: u64 = 4_000_000_000_000;

/// `$RL_MODULE`, else the workspace's debug build.
pub fn module_path() -> PathBuf {
    if let Ok(path) = std::env::var("RL_MODULE") {
        return PathBuf::from(path);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let debug = root.join("target/debug/libredis_ratelimit.so");
    assert!(
        debug.exists(),
        "{} is missing: run `cargo build` (or `make build`) first",
        debug.display()
    );
    debug
}

pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const FIRST: u32 = 61_000;
    const SPAN: u32 = 4_536;
    // Another salt than the module's suites, which run in parallel processes.
    let start = std::process::id().wrapping_mul(104_729);
    for _ in 0..SPAN {
        let n = start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed));
        let port = (FIRST + n % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port");
}

pub struct Server {
    pub port: u16,
    /// Loads the module (with its debug clock); false: a plain server.
    module: bool,
    dir: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
}

impl Server {
    /// A server with the module (`DEBUG-CLOCK yes`), its clock pinned at `T0_MS`.
    pub fn start() -> Server {
        Server::with(&[])
    }

    pub fn with(extra: &[&str]) -> Server {
        Server::spawned(extra, true)
    }

    /// A server without the module (for the Functions library), on the real clock.
    pub fn plain() -> Server {
        Server::spawned(&[], false)
    }

    /// A server without the module, with more configuration (`--rename-command FUNCTION ""`).
    pub fn plain_with(extra: &[&str]) -> Server {
        Server::spawned(extra, false)
    }

    fn spawned(extra: &[&str], module: bool) -> Server {
        for _ in 0..5 {
            let port = free_port();
            static N: AtomicU32 = AtomicU32::new(0);
            let dir = std::env::temp_dir().join(format!(
                "rl-client-test-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&dir).unwrap();
            let mut s = Server {
                port,
                module,
                dir,
                extra: extra.iter().map(|s| s.to_string()).collect(),
                child: None,
            };
            match s.spawn() {
                Ok(()) => {
                    if module {
                        s.clock_set(T0_MS);
                    }
                    return s;
                }
                Err(e) if e.contains("Address already in use") => continue,
                Err(e) => panic!("{e}"),
            }
        }
        panic!("no port for redis-server");
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut args: Vec<String> = [
            "--port",
            &self.port.to_string(),
            "--bind",
            "127.0.0.1",
            "--dir",
            &self.dir.display().to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            "redis.log",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if self.module {
            let module = module_path().display().to_string();
            args.extend([
                "--loadmodule".into(),
                module,
                "DEBUG-CLOCK".into(),
                "yes".into(),
            ]);
        }
        args.extend(self.extra.iter().cloned());
        let child = Command::new("redis-server")
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("redis-server: {e}"))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut c) = self.try_connect() {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return Ok(());
                }
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                return Err(format!(
                    "redis-server {args:?} exited ({status}): {}",
                    self.log()
                ));
            }
            if Instant::now() > deadline {
                return Err(format!("redis-server did not start: {}", self.log()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn try_connect(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(self.url())?.get_connection_with_timeout(Duration::from_secs(2))
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn connect(&self) -> redis::Connection {
        self.try_connect().expect("connect")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).expect("running")
    }

    /// SIGSTOP: the process holds its connections but answers nothing.
    pub fn stop(&self) {
        signal(self.pid(), "-STOP");
    }

    /// SIGCONT after `stop`.
    pub fn resume(&self) {
        signal(self.pid(), "-CONT");
    }

    /// Kills the process at once, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port (after `kill`); the module clock is pinned again.
    pub fn restart(&mut self, clock_ms: u64) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn() {
                Ok(()) => break,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("{e}"),
            }
        }
        self.clock_set(clock_ms);
    }

    pub fn clock_set(&self, ms: u64) {
        let _: i64 = redis::cmd("RL.DEBUG")
            .arg("CLOCK")
            .arg("SET")
            .arg(ms)
            .query(&mut self.connect())
            .unwrap();
    }

    pub fn clock_advance(&self, ms: u64) {
        let _: i64 = redis::cmd("RL.DEBUG")
            .arg("CLOCK")
            .arg("ADVANCE")
            .arg(ms)
            .query(&mut self.connect())
            .unwrap();
    }

    /// A command's reply as integers, through a fresh blocking connection.
    pub fn ints(&self, words: &[&str]) -> Vec<i64> {
        let mut cmd = redis::cmd(words[0]);
        for w in &words[1..] {
            cmd.arg(*w);
        }
        cmd.query(&mut self.connect())
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

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_ref() {
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(child.id().to_string())
                .status();
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "kill {sig} {pid}");
}

/// A clock the tests move by hand (the client's local time: leases, circuit backoff, local
/// buckets), shared with the limiter under test.
pub fn manual_clock() -> Arc<ratelimit_client::ManualClock> {
    Arc::new(ratelimit_client::ManualClock::new(1_000_000_000))
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
