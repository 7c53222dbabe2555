//! The server the tests start: a `redis-server` with the module loaded, on a free loopback
//! port, in a directory of its own. Apart from the harness's helpers (`support`), so that what
//! needs a server (`support::registry`) names this file and not the harness that re-exports it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use redis::Connection;

/// The module under test: `$RL_MODULE`, else the debug build next to the test binary.
pub fn module_path() -> PathBuf {
    if let Ok(path) = std::env::var("RL_MODULE") {
        return PathBuf::from(path);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let debug = root.join("target/debug/libredis_ratelimit.so");
    assert!(
        debug.exists(),
        "{} is missing: run `cargo build` first",
        debug.display()
    );
    debug
}

/// A port for a test server, from [61000, 65535]: above the kernel's usual ephemeral range
/// (32768–60999), where outgoing connections and `bind(0)` take theirs, and apart from the
/// cluster nodes' range (`support::cluster`). Each call of a process takes the next port, so
/// the threads of one test binary never pick the same one; a port another process holds is
/// skipped, and a server that still loses its port is started again elsewhere (`Server::using`).
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const FIRST: u32 = 61_000;
    const SPAN: u32 = 4_536;
    let start = std::process::id().wrapping_mul(7919);
    for _ in 0..SPAN {
        let n = start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed));
        let port = (FIRST + n % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free loopback port")
}

/// The server the tests start: the first `redis-server` on PATH. `scripts/test-servers` runs
/// the suite with each server it built first on PATH (Valkey's under that name too).
pub const SERVER: &str = "redis-server";

/// Debian's packaged server (7.0.15): the "old" side of the cross-version tests.
pub const OLD_SERVER: &str = "/usr/bin/redis-server";

pub struct Server {
    pub port: u16,
    pub program: String,
    pub dir: tempdir::Dir,
    pub extra: Vec<String>,
    pub module_args: Vec<String>,
    /// Another module loaded instead of ours (redis-cell), with `module_args` as its arguments.
    pub module: Option<PathBuf>,
    /// Environment variables for the server process (LD_PRELOAD of a clock shim).
    pub env: Vec<(String, String)>,
    pub child: Option<Child>,
}

impl Server {
    /// A server with the module loaded with `DEBUG-CLOCK yes`.
    pub fn start() -> Server {
        Server::with(&[], &[])
    }

    /// `extra` are redis-server options (`["--appendonly", "yes"]`); `module_args` are appended
    /// to the module's load arguments.
    pub fn with(extra: &[&str], module_args: &[&str]) -> Server {
        Server::using(SERVER, extra, module_args)
    }

    /// A server on the given port; `Err` (with the log) when it did not start, e.g. because
    /// another process took the port meanwhile (cluster nodes pick their ports themselves: the
    /// cluster bus needs port+10000 too).
    pub fn on_port(port: u16, extra: &[&str], module_args: &[&str]) -> Result<Server, String> {
        Server::program_on_port(SERVER, port, extra, module_args)
    }

    /// Like `with`, but running the given redis-server binary (e.g. `OLD_SERVER`).
    /// A port found free can be taken by another process before the server binds it (many
    /// test processes share the machine): then it tries another, up to 5 times.
    pub fn using(program: &str, extra: &[&str], module_args: &[&str]) -> Server {
        let mut attempt = 0;
        loop {
            match Server::program_on_port(program, free_port(), extra, module_args) {
                Ok(server) => return server,
                Err(e) if attempt < 4 && e.contains("Address already in use") => attempt += 1,
                Err(e) => panic!("{e}"),
            }
        }
    }

    pub fn program_on_port(
        program: &str,
        port: u16,
        extra: &[&str],
        module_args: &[&str],
    ) -> Result<Server, String> {
        let mut server = Server {
            port,
            program: program.to_string(),
            dir: tempdir::Dir::new(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            module_args: module_args.iter().map(|s| s.to_string()).collect(),
            module: None,
            env: Vec::new(),
            child: None,
        };
        server.spawn()?;
        Ok(server)
    }

    /// A server loading `module` (None: ours, with `DEBUG-CLOCK yes` before `module_args`),
    /// with `env` set for its process.
    pub fn custom(
        extra: &[&str],
        module: Option<&Path>,
        module_args: &[&str],
        env: &[(&str, &str)],
    ) -> Server {
        let mut attempt = 0;
        loop {
            let mut server = Server {
                port: free_port(),
                program: SERVER.to_string(),
                dir: tempdir::Dir::new(),
                extra: extra.iter().map(|s| s.to_string()).collect(),
                module_args: module_args.iter().map(|s| s.to_string()).collect(),
                module: module.map(Path::to_path_buf),
                env: env
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                child: None,
            };
            match server.spawn() {
                Ok(()) => return server,
                Err(e) if attempt < 4 && e.contains("Address already in use") => attempt += 1,
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// Shuts the server down (SHUTDOWN `shutdown`) and starts it again on the same port,
    /// directory, options and environment, loading `module` (None: ours) with `module_args`:
    /// the switch from redis-cell at a restart.
    pub fn reload(&mut self, shutdown: &str, module: Option<&Path>, module_args: &[&str]) {
        self.module = module.map(Path::to_path_buf);
        self.module_args = module_args.iter().map(|s| s.to_string()).collect();
        self.restart(shutdown);
    }

    pub fn spawn(&mut self) -> Result<(), String> {
        let mut args: Vec<String> = vec![
            "--port".into(),
            self.port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--dir".into(),
            self.dir.path().display().to_string(),
            "--save".into(),
            "".into(),
            "--appendonly".into(),
            "no".into(),
            "--enable-debug-command".into(),
            "yes".into(),
            "--logfile".into(),
            "redis.log".into(),
            // A replica's first sync starts at once instead of after the default 5 s wait for
            // more replicas to share it.
            "--repl-diskless-sync-delay".into(),
            "0".into(),
        ];
        args.extend(self.extra.iter().cloned());
        // Each load argument is its own word; a later DEBUG-CLOCK overrides the first.
        args.push("--loadmodule".into());
        match &self.module {
            Some(other) => args.push(other.display().to_string()),
            None => {
                args.push(module_path().display().to_string());
                args.extend(["DEBUG-CLOCK".to_string(), "yes".to_string()]);
            }
        }
        args.extend(self.module_args.iter().cloned());
        let child = Command::new(&self.program)
            .args(&args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{}: {e}; run scripts/install-deps (apt-get install redis-server)",
                    self.program
                )
            });
        self.child = Some(child);
        self.wait_ready()
    }

    pub fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(mut c) = self.try_connect() {
                let loading: Result<String, _> = redis::cmd("PING").query(&mut c);
                if loading.is_ok() {
                    // Another test's server may hold the port this one failed to bind (a port
                    // found free can be taken meanwhile): only our own child counts as ready.
                    if self.answers_as_our_child(&mut c) {
                        return Ok(());
                    }
                    if let Some(mut child) = self.child.take() {
                        let _ = child.kill();
                        let _ = child.wait();
                    }
                    return Err(format!(
                        "port {} answered by another process: Address already in use",
                        self.port
                    ));
                }
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!(
                        "redis-server exited ({status}); log:\n{}",
                        self.log()
                    ));
                }
            }
            if Instant::now() >= deadline {
                return Err(format!("redis-server did not start; log:\n{}", self.log()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn answers_as_our_child(&self, c: &mut Connection) -> bool {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(c)
            .unwrap_or_default();
        let pid = info
            .lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|v| v.trim().parse::<u32>().ok());
        pid.is_some() && pid == self.child.as_ref().map(Child::id)
    }

    pub fn try_connect(&self) -> redis::RedisResult<Connection> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?;
        client.get_connection_with_timeout(Duration::from_secs(5))
    }

    pub fn connect(&self) -> Connection {
        self.try_connect().expect("connect to redis-server")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }

    /// Stops the server (SHUTDOWN with the given mode, e.g. "NOSAVE" or "SAVE") and starts it
    /// again on the same port and directory with the same options.
    pub fn restart(&mut self, shutdown: &str) {
        let mut c = self.connect();
        let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").arg(shutdown).query(&mut c);
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
        self.spawn().unwrap_or_else(|e| panic!("{e}"));
    }

    /// Kills the server at once (no save), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// True while the process is alive.
    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

pub mod tempdir {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A directory under the system temp dir, removed on drop.
    pub struct Dir(PathBuf);

    impl Dir {
        pub fn new() -> Dir {
            static N: AtomicU32 = AtomicU32::new(0);
            let path = std::env::temp_dir().join(format!(
                "rl-test-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&path).expect("create temp dir");
            Dir(path)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
