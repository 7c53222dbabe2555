//! One `redis-server`: plain or TLS-only, with the module (or another module) or none, with
//! ACL users from an aclfile, optionally a replica of another, on the server found first on
//! PATH or a given one. Started on a free loopback port in a scratch directory of its own,
//! killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::certs::{Pki, ServerCert};
use crate::place::Scratch;
use crate::process::{cli, path, server_program, spawn_ready, START_TIMEOUT};

/// How many ports are tried when another process took the chosen one first.
const PORT_ATTEMPTS: u32 = 5;

/// Whether a TLS server asks clients for a certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientCerts {
    /// Verified when presented, not required (`tls-auth-clients optional`).
    Optional,
    /// Required: mutual TLS (`tls-auth-clients yes`).
    Required,
}

/// A TLS listener instead of the plain one (`--port 0 --tls-port P`).
#[derive(Clone, Debug)]
pub struct Tls {
    pub pki: Pki,
    pub cert: ServerCert,
    pub clients: ClientCerts,
}

impl Tls {
    pub fn new(pki: &Pki) -> Tls {
        Tls {
            pki: pki.clone(),
            cert: ServerCert::Good,
            clients: ClientCerts::Optional,
        }
    }

    /// The `redis.conf` directives, as arguments. Replication and the sentinel's own
    /// connections are TLS too, presenting the server certificate as a client certificate.
    pub(crate) fn args(&self, port: u16) -> Vec<String> {
        let pair = self.pki.server_pair(self.cert);
        let auth = match self.clients {
            ClientCerts::Optional => "optional",
            ClientCerts::Required => "yes",
        };
        [
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--tls-cert-file",
            &path(&pair.cert),
            "--tls-key-file",
            &path(&pair.key),
            "--tls-client-cert-file",
            &path(&self.pki.server.cert),
            "--tls-client-key-file",
            &path(&self.pki.server.key),
            "--tls-ca-cert-file",
            &path(&self.pki.ca),
            "--tls-auth-clients",
            auth,
            "--tls-replication",
            "yes",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }
}

/// What a server is started with.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `--loadmodule PATH ARGS…`
    pub module: Option<(PathBuf, Vec<String>)>,
    pub tls: Option<Tls>,
    /// The aclfile's text (`user NAME on >PASSWORD ~keys +commands`, one user a line). The
    /// harness's own commands (`Server::cli`) authenticate as `admin`, as given here.
    pub acl: Option<String>,
    /// `admin`'s user and password for `Server::cli` (when `acl` disables the default user).
    pub admin: Option<(String, String)>,
    /// `--replicaof 127.0.0.1 PORT`
    pub replica_of: Option<u16>,
    /// More `redis.conf` directives as arguments (`--maxmemory 10mb`).
    pub extra: Vec<String>,
    /// Another `redis-server` binary than the one `server_program` picks (an older release).
    pub program: Option<String>,
    /// Environment variables of the server process (`WallClock::env`).
    pub env: Vec<(String, String)>,
    /// A Redis Cluster node (`--cluster-enabled yes`): `Server::start` picks a port whose bus
    /// port is free too and within 65535 (`cluster_port`).
    pub cluster: bool,
}

impl Options {
    /// The module (`module_path`) loaded with its debug clock on (`DEBUG-CLOCK yes`), then
    /// `args`: where a test of a limiter starts. A later `DEBUG-CLOCK` in `args` overrides it.
    pub fn debug_module(args: &[&str]) -> Result<Options, String> {
        let mut load = vec!["DEBUG-CLOCK".to_string(), "yes".to_string()];
        load.extend(args.iter().map(|a| a.to_string()));
        Ok(Options {
            module: Some((crate::rules::module_path()?, load)),
            ..Options::default()
        })
    }

    /// These options with `extra` directives added (`["--appendonly", "yes"]`).
    pub fn extra(mut self, extra: &[&str]) -> Options {
        self.extra.extend(extra.iter().map(|s| s.to_string()));
        self
    }
}

/// A package's own server type on top of [`Server`]: `testkit::server_layer!(pub struct
/// Server);` declares a newtype that dereferences to testkit's, so the package's
/// `tests/support` adds the constructors its suites call (`Server::start()`: the module with
/// its clock pinned) and keeps every method of testkit's.
#[macro_export]
macro_rules! server_layer {
    ($(#[$attr:meta])* $vis:vis struct $name:ident) => {
        $(#[$attr])*
        $vis struct $name(pub $crate::server::Server);

        impl ::std::ops::Deref for $name {
            type Target = $crate::server::Server;
            fn deref(&self) -> &$crate::server::Server {
                &self.0
            }
        }

        impl ::std::ops::DerefMut for $name {
            fn deref_mut(&mut self) -> &mut $crate::server::Server {
                &mut self.0
            }
        }
    };
}

/// A running `redis-server`, killed when dropped.
pub struct Server {
    pub port: u16,
    pub options: Options,
    dir: Scratch,
    child: Option<Child>,
}

impl Server {
    /// Starts a server with `options` on a free port and waits until it accepts connections.
    pub fn start(options: Options) -> Result<Server, String> {
        let mut last = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = if options.cluster {
                crate::place::cluster_port()?
            } else {
                crate::place::free_port()?
            };
            match Server::start_on(port, options.clone()) {
                Err(e) if e.contains("Address already in use") => last = e,
                started => return started,
            }
        }
        Err(last)
    }

    /// Starts a server on the given port, once: cluster nodes pick their ports themselves
    /// (`cluster_port`: the bus port must be free too), and a test of a start that must fail
    /// reads the error (with the server's log).
    pub fn start_on(port: u16, options: Options) -> Result<Server, String> {
        let mut server = Server {
            port,
            options,
            dir: Scratch::new("server")?,
            child: None,
        };
        server.spawn()?;
        if server.options.replica_of.is_some() {
            server.wait_synced()?;
        }
        Ok(server)
    }

    /// Waits (a condition, bounded by [`START_TIMEOUT`]) until a replica's first sync with its
    /// master is done: a failover test must promote a replica that holds the master's data.
    fn wait_synced(&self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let info = self.cli(&["INFO", "replication"]).unwrap_or_default();
            if info.contains("master_link_status:up") {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("the replica did not sync: {info} {}", self.log()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn spawn(&mut self) -> Result<(), String> {
        let dir = self.dir();
        let mut args: Vec<String> = vec![
            "--bind".into(),
            "127.0.0.1".into(),
            "--dir".into(),
            path(dir),
            "--save".into(),
            "".into(),
            "--appendonly".into(),
            "no".into(),
            // DEBUG RELOAD, DEBUG DIGEST-VALUE…: the durability tests' tools (loopback only).
            "--enable-debug-command".into(),
            "yes".into(),
            // A replica's first sync at once, not after the default 5 s wait for more replicas.
            "--repl-diskless-sync-delay".into(),
            "0".into(),
            // By its full path: a test may move `--dir` to another server's files (`extra`),
            // and the log still says here when this one is ready.
            "--logfile".into(),
            path(&dir.join("redis.log")),
        ];
        match &self.options.tls {
            Some(tls) => args.extend(tls.args(self.port)),
            None => args.extend(["--port".into(), self.port.to_string()]),
        }
        if self.options.cluster {
            args.extend(["--cluster-enabled".into(), "yes".into()]);
        }
        if let Some(text) = &self.options.acl {
            let file = dir.join("users.acl");
            std::fs::write(&file, format!("{text}\n")).map_err(|e| e.to_string())?;
            args.extend(["--aclfile".into(), path(&file)]);
        }
        if let Some(master) = self.options.replica_of {
            args.extend(["--replicaof".into(), "127.0.0.1".into(), master.to_string()]);
            if let Some((user, pass)) = &self.options.admin {
                args.extend([
                    "--masteruser".into(),
                    user.clone(),
                    "--masterauth".into(),
                    pass.clone(),
                ]);
            }
        }
        args.extend(self.options.extra.iter().cloned());
        // Last: a module that `extra` loads is loaded before it (a test of a command name that
        // another module took first).
        if let Some((module, margs)) = &self.options.module {
            args.extend(["--loadmodule".into(), path(module)]);
            args.extend(margs.iter().cloned());
        }
        // A restart appends to the log of the runs before (a test may read both): only what
        // this run wrote says whether it is ready.
        let log_from = std::fs::metadata(dir.join("redis.log")).map_or(0, |m| m.len() as usize);
        let program = match &self.options.program {
            Some(program) => program.clone(),
            None => server_program(self.options.tls.is_some()),
        };
        let child = spawn_ready(&program, &args, dir, &self.options.env, log_from)?;
        self.child = Some(child);
        Ok(())
    }

    /// A `redis://` or `rediss://` URL of this server, without credentials.
    pub fn url(&self) -> String {
        let scheme = if self.options.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}/", self.port)
    }

    /// Its directory: `--dir`, the log, RDB and AOF files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The log of every run of this server so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir().join("redis.log")).unwrap_or_default()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// True while the process runs.
    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// One command through `redis-cli` (over TLS with the client certificate, as `admin` when
    /// set): the harness's own access, with no client code of the workspace in between.
    pub fn cli(&self, command: &[&str]) -> Result<String, String> {
        cli(
            self.port,
            self.options.tls.as_ref().map(|t| &t.pki),
            self.options.admin.as_ref(),
            command,
        )
    }

    /// A connection of the `redis` crate to a plain server (as `admin` when set): how a test
    /// sends the commands it checks. A TLS server is reached through the client under test.
    pub fn try_connect(&self) -> redis::RedisResult<redis::Connection> {
        let user = match &self.options.admin {
            Some((name, pass)) => format!("{name}:{pass}@"),
            None => String::new(),
        };
        let url = format!("redis://{user}127.0.0.1:{}/", self.port);
        redis::Client::open(url)?.get_connection_with_timeout(Duration::from_secs(5))
    }

    pub fn connect(&self) -> redis::Connection {
        self.try_connect()
            .unwrap_or_else(|e| panic!("connect to redis-server on port {}: {e}", self.port))
    }

    /// Kills the process at once, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server as an operator would (`SHUTDOWN mode`: `NOSAVE`, `SAVE`) and waits
    /// until the process has exited.
    pub fn shutdown(&mut self, mode: &str) -> Result<(), String> {
        // The connection closes under redis-cli: what it says then is no error.
        let _ = self.cli(&["SHUTDOWN", mode]);
        let mut child = self.child.take().ok_or("the server is not running")?;
        let deadline = Instant::now() + START_TIMEOUT;
        while matches!(child.try_wait(), Ok(None)) {
            if Instant::now() > deadline {
                self.child = Some(child);
                return Err(format!("SHUTDOWN {mode}: still running: {}", self.log()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// Stops the process without closing its connections (`SIGSTOP`), as a host that drops off
    /// the network would: its clients see no reset, only silence. [`Server::resume`] undoes it.
    pub fn pause(&self) -> Result<(), String> {
        self.signal("-STOP")
    }

    /// Lets a paused process run again (`SIGCONT`).
    pub fn resume(&self) -> Result<(), String> {
        self.signal("-CONT")
    }

    fn signal(&self, which: &str) -> Result<(), String> {
        let pid = self.pid().ok_or("the server is not running")?;
        let status = Command::new("kill")
            .args([which, &pid.to_string()])
            .status()
            .map_err(|e| format!("kill: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("kill {which} {pid}: {status}"))
        }
    }

    /// Starts it again on the same port, directory and options (after `kill` or `shutdown`;
    /// a running one is killed first).
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill();
        self.spawn()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // The directory goes with `dir` (kept when the test failed).
        self.kill();
    }
}
