//! Real parts for the RLS tests: a `redis-server` with the module (its debug clock pinned), or
//! without it for the library's backends (`Redis::on`: the shipped library by FCALL, or with
//! FUNCTION renamed away its scripts by EVALSHA, on a wall clock the test sets), the RLS started
//! in this process on free loopback ports with a config directory of its own, and Envoy's gRPC
//! client talking to it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
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
use testkit::Options;
use tonic::transport::Channel;

/// The debug clock's pinned instant (2096, a multiple of every unit up to a day).
pub const T0_MS: u64 = 4_000_000_000_000 - 4_000_000_000_000 % 86_400_000;

/// A free loopback port (testkit's: above the kernel's ephemeral range, one per call).
pub fn free_port() -> u16 {
    testkit::free_port().unwrap_or_else(|e| panic!("{e}"))
}

/// A new directory of this test (`rl-testkit-rls-<what>-…` in the temporary directory), removed
/// when dropped unless the test failed.
pub fn scratch(what: &str) -> testkit::Scratch {
    testkit::Scratch::new(&format!("rls-{what}")).unwrap_or_else(|e| panic!("{e}"))
}

/// A store: testkit's server, answering through `backend`.
pub struct Redis {
    pub port: u16,
    server: testkit::Server,
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

impl Redis {
    /// A server with the module, its clock pinned at `T0_MS`.
    pub fn start() -> Redis {
        Redis::start_args(&[])
    }

    /// A server answering through `backend`, its clock at `T0_MS`: the module (debug clock), or
    /// without it the shipped library loaded (Functions) or `FUNCTION` renamed away (Scripts:
    /// the RLS serves the library through EVALSHA), on a wall clock the test moves.
    pub fn on(backend: Backend) -> Redis {
        if backend == Backend::Module {
            return Redis::start();
        }
        let mut options = Options::default();
        if backend == Backend::Scripts {
            options = options.extra(&["--rename-command", "FUNCTION", ""]);
        }
        let wall = testkit::WallClock::new(T0_MS).expect("the wall clock");
        options.env = wall.env().to_vec();
        let mut r = Redis::started(options, None, backend);
        r.wall = Some((wall, AtomicU64::new(T0_MS)));
        if backend == Backend::Functions {
            let _: String = r.cmd(
                redis::cmd("FUNCTION")
                    .arg("LOAD")
                    .arg(ratelimit_client::LIBRARY_SOURCE),
            );
        }
        r
    }

    /// A server with the module and these arguments too (`--unixsocket …`).
    pub fn start_args(extra: &[&str]) -> Redis {
        Redis::with_module(module().extra(extra), None)
    }

    /// A scratch path for this server (a unix socket, a file).
    pub fn path(&self, name: &str) -> PathBuf {
        self.server.dir().join(name)
    }

    /// A Cluster node (not yet part of a cluster).
    pub fn cluster_node() -> Redis {
        Redis::with_module(cluster(module()), None)
    }

    /// A server on a port chosen beforehand (a store that comes up after the RLS).
    pub fn start_at(port: u16) -> Redis {
        Redis::with_module(module(), Some(port))
    }

    /// A Cluster node without the module (not yet part of a cluster).
    pub fn plain_cluster_node() -> Redis {
        Redis::started(cluster(Options::default()), None, Backend::Functions)
    }

    /// A server without the module, on the real clock, with more configuration
    /// (`--rename-command FUNCTION ""`): the library's backends.
    pub fn plain(extra: &[&str]) -> Redis {
        Redis::started(Options::default().extra(extra), None, Backend::Functions)
    }

    /// A server with the module, its debug clock pinned at `T0_MS`.
    fn with_module(options: Options, port: Option<u16>) -> Redis {
        let r = Redis::started(options, port, Backend::Module);
        r.clock_set(T0_MS);
        r
    }

    /// Started on `port`, or on a free one.
    fn started(options: Options, port: Option<u16>, backend: Backend) -> Redis {
        let server = match port {
            Some(port) => testkit::Server::start_on(port, options),
            None => testkit::Server::start(options),
        }
        .unwrap_or_else(|e| panic!("{e}"));
        Redis {
            port: server.port,
            server,
            backend,
            wall: None,
        }
    }

    /// A scratch directory of this test (removed with the server).
    pub fn scratch(&self, what: &str) -> PathBuf {
        let dir = self.server.dir().join(what);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    pub fn url(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn conn(&self) -> redis::RedisResult<redis::Connection> {
        self.server.try_connect()
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
        testkit::clock_set(&mut self.conn().unwrap(), ms);
    }

    pub fn clock_advance(&self, ms: u64) {
        if let Some((wall, now)) = &self.wall {
            wall.set(now.fetch_add(ms, Ordering::SeqCst) + ms);
            return;
        }
        let ms = i64::try_from(ms).expect("a step of the clock within i64");
        testkit::clock_advance(&mut self.conn().unwrap(), ms);
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

    /// SIGSTOP: connections stay open, nothing is answered.
    pub fn freeze(&self) {
        let _ = self.server.pause();
    }

    pub fn thaw(&self) {
        let _ = self.server.resume();
    }

    pub fn kill(&mut self) {
        self.server.kill();
    }
}

/// The module with its debug clock.
fn module() -> Options {
    Options::debug_module(&[]).unwrap_or_else(|e| panic!("{e}"))
}

/// A Cluster node (its bus port free too), not yet part of a cluster.
fn cluster(options: Options) -> Options {
    Options {
        cluster: true,
        ..options.extra(&["--cluster-config-file", "nodes.conf"])
    }
}

/// The RLS in this process: its settings, config directory and hand-moved clock.
pub struct Rls {
    pub running: Option<Running>,
    pub root: testkit::Scratch,
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
        // Long enough that a healthy store on a loaded machine answers in time (a call
        // past it is decided by its class, and the test's counts would be off); a frozen store
        // still costs at most this per call, and three timeouts open the circuit.
        ("RLS_DEADLINE_MS", "2000"),
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

    pub async fn start_in(root: testkit::Scratch, redis: &Redis, extra: &[(&str, &str)]) -> Rls {
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
