//! Real parts for the RLS tests: a `redis-server` with the module (its debug clock pinned), or
//! without it for the library's backends (`Redis::on`: the shipped library by FCALL, or with
//! FUNCTION renamed away its scripts by EVALSHA, on a wall clock the test sets), the RLS started
//! in this process on free loopback ports with a config directory of its own, and Envoy's gRPC
//! client talking to it.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelimit_client::{Backend, ManualClock};
use ratelimit_rls::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use ratelimit_rls::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use ratelimit_rls::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use ratelimit_rls::pb::google::protobuf::UInt64Value;
use ratelimit_rls::server::{self, Running};
use ratelimit_rls::settings::Settings;
use tonic::transport::Channel;

/// The debug clock's pinned instant (2096, a multiple of every unit up to a day).
pub const T0_MS: u64 = 4_000_000_000_000 - 4_000_000_000_000 % 86_400_000;

pub fn module_path() -> PathBuf {
    if let Ok(path) = std::env::var("RL_MODULE") {
        return PathBuf::from(path);
    }
    let debug = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/libredis_ratelimit.so");
    assert!(
        debug.exists(),
        "{} is missing: run `cargo build` first",
        debug.display()
    );
    debug
}

pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(7919);
    for _ in 0..4_000 {
        let n = start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed));
        let port = (57_000 + n % 4_000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port");
}

pub fn scratch(what: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "rl-rls-{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub struct Redis {
    pub port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
    /// Whether the module is loaded (else a managed service's server, for the library).
    module: bool,
    /// What the RLS answers through on it.
    pub backend: Backend,
    /// The wall clock of a server without the module that a test moves (`Redis::on`), and
    /// the instant it reads.
    wall: Option<(testkit::WallClock, AtomicU64)>,
}

/// Runs each named test function (`async fn name(backend: Backend)`) as three tests, one per
/// backend: `module::name`, `functions::name`, `scripts::name`.
#[macro_export]
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        mod module {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name(ratelimit_client::Backend::Module).await
            })*
        }
        mod functions {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name(ratelimit_client::Backend::Functions).await
            })*
        }
        mod scripts {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name(ratelimit_client::Backend::Scripts).await
            })*
        }
    };
}

/// A port for a Cluster node: its bus port (+10000) free too and below 65536.
fn cluster_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(104_729);
    for _ in 0..10_000 {
        let n = start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed));
        let port = (20_000 + n % 10_000) as u16;
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + 10_000) {
            return port;
        }
    }
    panic!("no free port pair for a cluster node");
}

impl Redis {
    /// A server with the module, its clock pinned at `T0_MS`.
    pub fn start() -> Redis {
        Redis::start_with(&[], free_port)
    }

    /// A server answering through `backend`, its clock at `T0_MS`: the module (debug clock), or
    /// without it the shipped library loaded (Functions) or `FUNCTION` renamed away (Scripts:
    /// the RLS serves the library through EVALSHA), on a wall clock the test moves.
    pub fn on(backend: Backend) -> Redis {
        if backend == Backend::Module {
            return Redis::start();
        }
        let extra: &[&str] = match backend {
            Backend::Scripts => &["--rename-command", "FUNCTION", ""],
            _ => &[],
        };
        for _ in 0..5 {
            let mut r = Redis {
                port: free_port(),
                dir: scratch("redis"),
                extra: extra.iter().map(|s| s.to_string()).collect(),
                child: None,
                module: false,
                backend,
                wall: None,
            };
            let wall = testkit::WallClock::new(T0_MS).expect("the wall clock");
            r.wall = Some((wall, AtomicU64::new(T0_MS)));
            if r.spawn() {
                if backend == Backend::Functions {
                    let _: String = r.cmd(
                        redis::cmd("FUNCTION")
                            .arg("LOAD")
                            .arg(ratelimit_client::LIBRARY_SOURCE),
                    );
                }
                return r;
            }
        }
        panic!("redis-server did not start");
    }

    /// A server with the module and these arguments too (`--unixsocket …`).
    pub fn start_args(extra: &[&str]) -> Redis {
        Redis::start_with(extra, free_port)
    }

    /// A scratch path for this server (a unix socket, a file).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A Cluster node (not yet part of a cluster).
    pub fn cluster_node() -> Redis {
        Redis::start_with(
            &[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
            ],
            cluster_port,
        )
    }

    /// A server on a port chosen beforehand (a store that comes up after the RLS).
    pub fn start_at(port: u16) -> Redis {
        Redis::start_with(&[], move || port)
    }

    /// A Cluster node without the module (not yet part of a cluster).
    pub fn plain_cluster_node() -> Redis {
        Redis::spawned(
            &[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
            ],
            cluster_port,
            false,
        )
    }

    /// A server without the module, on the real clock, with more configuration
    /// (`--rename-command FUNCTION ""`): the library's backends.
    pub fn plain(extra: &[&str]) -> Redis {
        Redis::spawned(extra, free_port, false)
    }

    fn start_with(extra: &[&str], port: impl Fn() -> u16) -> Redis {
        Redis::spawned(extra, port, true)
    }

    fn spawned(extra: &[&str], port: impl Fn() -> u16, module: bool) -> Redis {
        for _ in 0..5 {
            let mut r = Redis {
                port: port(),
                dir: scratch("redis"),
                extra: extra.iter().map(|s| s.to_string()).collect(),
                child: None,
                module,
                backend: if module {
                    Backend::Module
                } else {
                    Backend::Functions
                },
                wall: None,
            };
            if r.spawn() {
                if module {
                    r.clock_set(T0_MS);
                }
                return r;
            }
        }
        panic!("redis-server did not start");
    }

    fn spawn(&mut self) -> bool {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--dir", &self.dir.display().to_string(), "--save", ""])
            .args(["--appendonly", "no", "--logfile", "redis.log"])
            .args(if self.module {
                vec![
                    "--loadmodule".to_string(),
                    module_path().display().to_string(),
                    "DEBUG-CLOCK".to_string(),
                    "yes".to_string(),
                ]
            } else {
                Vec::new()
            })
            .args(&self.extra)
            .envs(self.wall.iter().flat_map(|(w, _)| w.env()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(mut c) = self.conn() {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return true;
                }
            }
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// A scratch directory of this test (removed with the server).
    pub fn scratch(&self, what: &str) -> PathBuf {
        let dir = self.dir.join(what);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    pub fn url(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn conn(&self) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?;
        client.get_connection_with_timeout(Duration::from_secs(2))
    }

    pub fn cmd<T: redis::FromRedisValue>(&self, cmd: &mut redis::Cmd) -> T {
        cmd.query(&mut self.conn().unwrap()).unwrap()
    }

    pub fn clock_set(&self, ms: u64) {
        if let Some((wall, now)) = &self.wall {
            now.store(ms, Ordering::SeqCst);
            wall.set(ms);
            return;
        }
        let _: i64 = self.cmd(redis::cmd("RL.DEBUG").arg("CLOCK").arg("SET").arg(ms));
    }

    pub fn clock_advance(&self, ms: u64) {
        if let Some((wall, now)) = &self.wall {
            wall.set(now.fetch_add(ms, Ordering::SeqCst) + ms);
            return;
        }
        let _: i64 = self.cmd(redis::cmd("RL.DEBUG").arg("CLOCK").arg("ADVANCE").arg(ms));
    }

    /// How many times `command` ran (INFO commandstats; the module's names are upper case).
    pub fn calls(&self, command: &str) -> u64 {
        let info: String = self.cmd(redis::cmd("INFO").arg("commandstats"));
        let prefix = format!("cmdstat_{command}:calls=").to_ascii_lowercase();
        info.lines()
            .find_map(|l| {
                let lower = l.to_ascii_lowercase();
                lower.strip_prefix(&prefix).map(str::to_string)
            })
            .and_then(|rest| rest.split(',').next().and_then(|n| n.parse().ok()))
            .unwrap_or(0)
    }

    /// The store's command `name` (`PEEK` …) on `keys`, spelled for its backend.
    pub fn command(&self, name: &str, keys: &[&str]) -> redis::Cmd {
        self.backend.command(name, keys)
    }

    /// How many times the RLS called the store's `name` (`FIXEDWINDOW`, `ALL`, `LEASE` …) on
    /// its backend: `RL.<name>` on the module; on the library every call is an `FCALL` (or an
    /// `EVALSHA`), so a test counts the calls of one kind there by the difference.
    pub fn store_calls(&self, name: &str) -> u64 {
        match self.backend {
            Backend::Module => self.calls(&format!("rl.{name}")),
            Backend::Functions => self.calls("fcall"),
            Backend::Scripts => self.calls("evalsha") + self.calls("eval"),
        }
    }

    fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .args([sig, &c.id().to_string()])
                .status();
        }
    }

    /// SIGSTOP: connections stay open, nothing is answered.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    pub fn kill(&mut self) {
        self.signal("-CONT");
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The RLS in this process: its settings, config directory and hand-moved clock.
pub struct Rls {
    pub running: Option<Running>,
    pub root: PathBuf,
    pub clock: Arc<ManualClock>,
    pub client: RateLimitServiceClient<Channel>,
}

/// Settings for a test: loopback, any free port, the peer's layout under `root`.
pub fn settings(root: &Path, redis: &Redis, extra: &[(&str, &str)]) -> Settings {
    let root = root.display().to_string();
    let url = redis.url();
    let mut vars: Vec<(&str, &str)> = vec![
        ("HOST", "127.0.0.1"),
        ("PORT", "0"),
        ("GRPC_HOST", "127.0.0.1"),
        ("GRPC_PORT", "0"),
        ("RUNTIME_ROOT", &root),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", &url),
        ("RLS_RELOAD_INTERVAL_MS", "20"),
        ("RLS_DEADLINE_MS", "50"),
        // Our atomic mode unless a test asks for the peer's (`peer_sequences.rs`).
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
        // No statsd datagrams unless a test listens for them (`metrics.rs`).
        ("USE_STATSD", "false"),
        ("DEBUG_HOST", "127.0.0.1"),
        ("DEBUG_PORT", "0"),
    ];
    vars.extend_from_slice(extra);
    Settings::from_lookup(|k| {
        vars.iter()
            .rev()
            .find(|(name, _)| *name == k)
            .map(|(_, v)| v.to_string())
    })
    .unwrap()
}

/// Writes `config/<name>` under the root's subdirectory.
pub fn write_config(root: &Path, name: &str, yaml: &str) {
    let dir = root.join("ratelimit/config");
    std::fs::create_dir_all(&dir).unwrap();
    // Written aside and renamed: the watcher never reads half a file.
    let tmp = root.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, yaml).unwrap();
    std::fs::rename(tmp, dir.join(name)).unwrap();
}

impl Rls {
    pub async fn start(redis: &Redis, yaml: &str, extra: &[(&str, &str)]) -> Rls {
        let root = scratch("rls");
        write_config(&root, "config.yaml", yaml);
        Rls::start_in(root, redis, extra).await
    }

    pub async fn start_in(root: PathBuf, redis: &Redis, extra: &[(&str, &str)]) -> Rls {
        let clock = Arc::new(ManualClock::new(1_000_000_000));
        let running = server::start_with_clock(settings(&root, redis, extra), clock.clone())
            .await
            .unwrap();
        let client = RateLimitServiceClient::connect(format!("http://{}", running.grpc_addr))
            .await
            .unwrap();
        Rls {
            running: Some(running),
            root,
            clock,
            client,
        }
    }

    pub fn running(&self) -> &Running {
        self.running.as_ref().unwrap()
    }

    pub async fn ask(&mut self, req: RateLimitRequest) -> RateLimitResponse {
        self.client
            .should_rate_limit(req)
            .await
            .unwrap()
            .into_inner()
    }

    /// Moves the store's clock and the RLS's together (the denial cache reads the latter).
    pub fn advance(&self, redis: &Redis, ms: u64) {
        redis.clock_advance(ms);
        self.clock.advance(Duration::from_millis(ms));
    }

    pub fn write(&self, name: &str, yaml: &str) {
        write_config(&self.root, name, yaml);
    }
}

/// `GET path` on the HTTP port: (status, body).
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

/// Waits (without a fixed sleep) until `f` holds, for at most 20 s.
pub async fn until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One descriptor: its entries, and its own hits_addend when given.
pub fn descriptor(entries: &[(&str, &str)], hits: Option<u64>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        hits_addend: hits.map(|value| UInt64Value { value }),
        ..RateLimitDescriptor::default()
    }
}

pub fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_string(),
        descriptors,
        hits_addend: hits,
    }
}

/// A request of one descriptor per entry list, hits_addend 0 (= 1).
pub fn simple(domain: &str, descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
    request(
        domain,
        descriptors.iter().map(|e| descriptor(e, None)).collect(),
        0,
    )
}

pub const OK: i32 = 1;
pub const OVER_LIMIT: i32 = 2;

/// (code, remaining) per descriptor, and the overall code.
pub fn codes(r: &RateLimitResponse) -> (i32, Vec<(i32, u32)>) {
    (
        r.overall_code,
        r.statuses
            .iter()
            .map(|s| (s.code, s.limit_remaining))
            .collect(),
    )
}

/// Makes the nodes one Cluster of masters (no replicas, every slot covered) and waits until
/// every node says it is up.
pub fn create_cluster(nodes: Vec<Redis>) -> Vec<Redis> {
    let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
    args.extend(nodes.iter().map(Redis::url));
    args.extend([
        "--cluster-replicas".into(),
        "0".into(),
        "--cluster-yes".into(),
    ]);
    let out = Command::new("redis-cli")
        .args(&args)
        .output()
        .expect("redis-cli");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    for n in &nodes {
        loop {
            let info: String = n.cmd(redis::cmd("CLUSTER").arg("INFO"));
            if info.contains("cluster_state:ok") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster did not come up: {info}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    nodes
}
