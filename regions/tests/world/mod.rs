//! Three regions on loopback for the controller's tests and bench: a redis-server per region
//! answering through one backend (the module on its debug clock, or without the module the
//! shipped Functions library by `FCALL`, or with `FUNCTION` renamed away its scripts by
//! `EVALSHA`, on a wall clock the test sets: `testkit::WallClock`), a TCP proxy in front of each for the
//! controller's links (latency, dropped connections, partitions), and gateways that call only
//! their own region. `on_every_backend!` runs a test on each backend.
#![allow(dead_code)]

pub mod cluster;
pub mod proxy;

use ratelimit_client::Backend;
use ratelimit_regions::{Config, Controller};
use redis::{Connection, Value};

use testkit::WallClock;

/// Runs each named test function (`fn name(backend: Backend)`) as three tests, one per backend:
/// `module::name`, `functions::name`, `scripts::name`.
#[macro_export]
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        mod module {
            $(#[test]
            fn $name() {
                super::$name(ratelimit_client::Backend::Module)
            })*
        }
        mod functions {
            $(#[test]
            fn $name() {
                super::$name(ratelimit_client::Backend::Functions)
            })*
        }
        mod scripts {
            $(#[test]
            fn $name() {
                super::$name(ratelimit_client::Backend::Scripts)
            })*
        }
    };
}

pub use proxy::Proxy;

pub use testkit::T0_MS;

/// A region's store: testkit's server, answering through `backend`.
pub struct Server {
    pub port: u16,
    server: testkit::Server,
    pub backend: Backend,
    /// The wall clock of a server without the module (None: the module's debug clock).
    clock: Option<WallClock>,
}

impl Server {
    pub fn start() -> Server {
        Server::start_as(Backend::Module, true)
    }

    /// A server answering through `backend`; `install`: the Functions library loaded by the test
    /// (else the controller's `load_library` is to load it).
    pub fn start_as(backend: Backend, install: bool) -> Server {
        Server::launch(backend, install, true, &[], false)
    }

    /// As [`Server::start_as`], with `extra` options; `wall`: without the module, on a wall
    /// clock the test sets (else on the real clock, which a Cluster's nodes need to find each
    /// other: their gossip runs on it); `cluster`: a Cluster node (testkit's `Options::cluster`).
    pub fn launch(
        backend: Backend,
        install: bool,
        wall: bool,
        extra: &[&str],
        cluster: bool,
    ) -> Server {
        let (mut options, clock) = match backend {
            Backend::Module => (
                testkit::Options::debug_module(&[]).expect("the module"),
                None,
            ),
            Backend::Functions | Backend::Scripts => {
                let mut options = testkit::Options::default();
                if backend == Backend::Scripts {
                    // A locked-down service: FUNCTION renamed away.
                    options = options.extra(&["--rename-command", "FUNCTION", ""]);
                }
                let clock = wall.then(|| WallClock::new(T0_MS).expect("the wall clock"));
                options.env = clock.iter().flat_map(WallClock::env).collect();
                (options, clock)
            }
        };
        options.cluster = cluster;
        let server = testkit::Server::start(options.extra(extra)).unwrap_or_else(|e| panic!("{e}"));
        let server = Server {
            port: server.port,
            server,
            backend,
            clock,
        };
        server.install(&mut server.connect().expect("connect"), install);
        server
    }

    /// The library where the backend needs it: the shipped file by `FUNCTION LOAD` when
    /// `install`, and every script the gateways call by `EVALSHA`.
    fn install(&self, c: &mut Connection, install: bool) {
        match self.backend {
            Backend::Module => {}
            Backend::Functions if !install => {}
            Backend::Functions => {
                let _: String = redis::cmd("FUNCTION")
                    .arg("LOAD")
                    .arg(ratelimit_client::LIBRARY_SOURCE)
                    .query(c)
                    .expect("FUNCTION LOAD");
            }
            Backend::Scripts => {
                for entry in ratelimit_client::scripts::ENTRIES {
                    let script = ratelimit_client::scripts::script(entry).expect("a script");
                    let _: String = redis::cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(&script.text)
                        .query(c)
                        .expect("SCRIPT LOAD");
                }
            }
        }
    }

    /// Sets the clock the server decides on (`c`: a connection to it); a server on the real
    /// clock keeps it.
    pub fn set_clock(&self, c: &mut Connection, ms: u64) {
        match &self.clock {
            Some(clock) => clock.set(ms),
            None if self.backend != Backend::Module => {}
            None => {
                let _: Value = redis::cmd("RL.DEBUG")
                    .arg("CLOCK")
                    .arg("SET")
                    .arg(ms)
                    .query(c)
                    .expect("clock");
            }
        }
    }

    /// A command of the limiter's on this server's backend (`GCRA`, `DEMAND` …) on `keys`.
    pub fn command(&self, name: &str, keys: &[&str]) -> redis::Cmd {
        self.backend.command(name, keys)
    }

    /// Kills the server (a node down).
    pub fn kill(&mut self) {
        self.server.kill();
    }

    pub fn connect(&self) -> redis::RedisResult<Connection> {
        self.server.try_connect()
    }
}

/// One key's global policy in the tests: GCRA, L 1000 per second, burst 100; each region's safe
/// share L/3 = 333 (burst 33), floor 5.
pub const KEY: &str = "tenant:1";
pub const L: u64 = 1000;
pub const W_MS: u64 = 1000;
pub const B: u64 = 100;
pub const SAFE: u64 = 333;
pub const SAFE_BURST: u64 = 33;
pub const PERIOD_MS: u64 = 2000;
/// The module clock advances this much per step; gateways call at each step's instant.
pub const STEP_MS: u64 = 50;

pub struct World {
    pub servers: Vec<Server>,
    pub proxies: Vec<Proxy>,
    /// One connection per region, straight to its own server: the gateways.
    gateways: Vec<Connection>,
    /// The test's own look at each store (INSPECT): straight to the server.
    pub looks: Vec<Connection>,
    pub t_ms: u64,
    /// Gateway calls made in each region.
    pub calls: Vec<u64>,
    /// The group's safe share (what the gateways call with), its burst, and its floor.
    pub safe: u64,
    pub safe_burst: u64,
    pub floor: u64,
}

/// What one step saw: admitted per region, and each region's share in force (INSPECT's `limit`).
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub admitted: Vec<u64>,
    pub limit: Vec<u64>,
}

impl World {
    pub fn new(latency_ms: u64) -> World {
        World::on(Backend::Module, latency_ms)
    }

    /// The three regions' stores answering through `backend`.
    pub fn on(backend: Backend, latency_ms: u64) -> World {
        let servers: Vec<Server> = (0..3).map(|_| Server::start_as(backend, true)).collect();
        let proxies = servers
            .iter()
            .map(|s| Proxy::start(s.port, latency_ms))
            .collect();
        let gateways = servers
            .iter()
            .map(|s| s.connect().expect("gateway"))
            .collect();
        let looks = servers.iter().map(|s| s.connect().expect("look")).collect();
        let mut world = World {
            servers,
            proxies,
            gateways,
            looks,
            t_ms: 0,
            calls: vec![0; 3],
            safe: SAFE,
            safe_burst: SAFE_BURST,
            floor: 5,
        };
        world.set_clocks();
        world
    }

    pub fn now_ms(&self) -> u64 {
        T0_MS + self.t_ms
    }

    fn set_clocks(&mut self) {
        let now = self.now_ms();
        for (s, c) in self.servers.iter().zip(self.looks.iter_mut()) {
            s.set_clock(c, now);
        }
    }

    /// The controller's configuration: the three regions through their proxies, `keys` as
    /// the test's policy, the period and a 10 s lifetime.
    pub fn config(&self, keys: &str) -> Config {
        let regions: String = self
            .proxies
            .iter()
            .zip(["a", "b", "c"])
            .map(|(p, name)| {
                format!(
                    "[[regions]]\nname = \"{name}\"\nurl = \"redis://127.0.0.1:{}\"\n",
                    p.port
                )
            })
            .collect();
        let text = format!(
            "period_ms = {PERIOD_MS}\nlifetime_ms = 10000\nclock_margin_ms = 0\ntimeout_ms = 10000\n\
             {regions}\n[[keys]]\nkeys = [{keys}]\nalgorithm = \"GCRA\"\nlimit = {L}\n\
             window_ms = {W_MS}\nburst = {B}\nsafe = {}\nfloor = {}\n",
            self.safe, self.floor
        );
        Config::parse(&text).expect("config")
    }

    pub fn controller(&self) -> Controller {
        Controller::new(self.config(&format!("\"{KEY}\""))).expect("controller")
    }

    /// Advances every clock one step, then each region's gateways ask `demand[r]` requests of
    /// `KEY` at that instant (pipelined); answers what was admitted and the limits in force.
    pub fn step(&mut self, demand: &[u64]) -> Seen {
        self.t_ms += STEP_MS;
        self.set_clocks();
        let mut seen = Seen::default();
        for (r, c) in self.gateways.iter_mut().enumerate() {
            let n = demand.get(r).copied().unwrap_or(0);
            let mut pipe = redis::pipe();
            for _ in 0..n {
                let mut call = self.servers[r].command("GCRA", &[KEY]);
                call.arg(self.safe)
                    .arg(W_MS)
                    .arg("BURST")
                    .arg(self.safe_burst);
                pipe.add_command(call);
            }
            let replies: Vec<Vec<i64>> = if n > 0 {
                pipe.query(c).expect("gateway")
            } else {
                vec![]
            };
            self.calls[r] += n;
            seen.admitted
                .push(replies.iter().filter(|r| r.first() == Some(&1)).count() as u64);
        }
        let now = self.now_ms();
        for (s, c) in self.servers.iter().zip(self.looks.iter_mut()) {
            seen.limit
                .push(limit_now(s.backend, c, KEY, self.safe, now));
        }
        seen
    }

    /// `cmdstat_rl.gcra` calls of each server; None on the library, whose gateway calls and
    /// controller calls are all `FCALL` (or `EVALSHA`).
    pub fn gcra_calls(&mut self) -> Option<Vec<u64>> {
        if self.servers.iter().any(|s| s.backend != Backend::Module) {
            return None;
        }
        let calls = self
            .looks
            .iter_mut()
            .map(|c| {
                let info: String = redis::cmd("INFO")
                    .arg("commandstats")
                    .query(c)
                    .expect("info");
                info.lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("cmdstat_rl.gcra:calls=")
                            .map(String::from)
                    })
                    .and_then(|rest| rest.split(',').next().and_then(|n| n.parse().ok()))
                    .unwrap_or(0)
            })
            .collect();
        Some(calls)
    }
}

/// The L the key is decided under in that store now: its share while in force, else the safe
/// share the gateways call with (also for a missing key). The library holds a share in the
/// key's value, "S share expire_at_ms …" (functions/ratelimit.lua, shares).
pub fn limit_now(backend: Backend, c: &mut Connection, key: &str, safe: u64, now_ms: u64) -> u64 {
    if backend != Backend::Module {
        let value: Option<String> = redis::cmd("GET").arg(key).query(c).unwrap_or_default();
        let mut words = value.as_deref().unwrap_or_default().split(' ');
        if words.next() != Some("S") {
            return safe;
        }
        let mut number = || words.next().and_then(|w| w.parse::<u64>().ok());
        return match (number(), number()) {
            (Some(share), Some(expire_at_ms)) if expire_at_ms > now_ms => share,
            _ => safe,
        };
    }
    let fields: Vec<Value> = redis::cmd("RL.INSPECT")
        .arg(key)
        .query(c)
        .unwrap_or_default();
    let mut share = None;
    let mut share_ttl = 0;
    for pair in fields.chunks(2) {
        if let [name, value] = pair {
            let name: String = redis::from_redis_value(name).unwrap_or_default();
            let value: i64 = redis::from_redis_value(value).unwrap_or(0);
            match name.as_str() {
                "share" => share = Some(value as u64),
                "share_ttl_ms" => share_ttl = value,
                _ => {}
            }
        }
    }
    match share {
        Some(s) if share_ttl > 0 => s,
        _ => safe,
    }
}
