//! One `redis-server`: plain or TLS-only, with the module or not, with ACL users from an
//! aclfile, optionally a replica of another. Started on a free loopback port, killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::certs::{Pki, ServerCert};

/// How long a server may take to say it is ready before the start is a failure.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
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
}

/// A running `redis-server`, killed when dropped.
pub struct Server {
    pub port: u16,
    pub options: Options,
    dir: PathBuf,
    child: Option<Child>,
}

impl Server {
    /// Starts a server with `options` on a free port and waits until it accepts connections.
    pub fn start(options: Options) -> Result<Server, String> {
        let dir = crate::place::scratch_dir("server")?;
        let mut last = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let mut server = Server {
                port: crate::place::free_port()?,
                options: options.clone(),
                dir: dir.clone(),
                child: None,
            };
            match server.spawn() {
                Ok(()) if options.replica_of.is_some() => {
                    server.wait_synced()?;
                    return Ok(server);
                }
                Ok(()) => return Ok(server),
                Err(e) if e.contains("Address already in use") => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
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
        let mut args: Vec<String> = vec![
            "--bind".into(),
            "127.0.0.1".into(),
            "--dir".into(),
            path(&self.dir),
            "--save".into(),
            "".into(),
            "--appendonly".into(),
            "no".into(),
            // A replica's first sync at once, not after the default 5 s wait for more replicas.
            "--repl-diskless-sync-delay".into(),
            "0".into(),
            "--logfile".into(),
            "redis.log".into(),
        ];
        match &self.options.tls {
            Some(tls) => args.extend(tls.args(self.port)),
            None => args.extend(["--port".into(), self.port.to_string()]),
        }
        if let Some(text) = &self.options.acl {
            let file = self.dir.join("users.acl");
            std::fs::write(&file, format!("{text}\n")).map_err(|e| e.to_string())?;
            args.extend(["--aclfile".into(), path(&file)]);
        }
        if let Some((module, margs)) = &self.options.module {
            args.extend(["--loadmodule".into(), path(module)]);
            args.extend(margs.iter().cloned());
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
        let _ = std::fs::remove_file(self.dir.join("redis.log"));
        let program = server_program(self.options.tls.is_some());
        self.child = Some(spawn_ready(&program, &args, &self.dir)?);
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

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
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

    /// Kills the process at once, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
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

    /// Starts it again on the same port with the same options (after `kill`).
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill();
        self.spawn()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(crate) fn path(p: &Path) -> String {
    p.display().to_string()
}

/// Starts `program args` in `dir` and waits until its log (`dir/redis.log`, or `sentinel.log`)
/// says it accepts connections; its exit or the timeout is an error carrying the log.
/// The `redis-server` to run: the first on PATH, except for a TLS server, which runs Debian's
/// (`/usr/bin/redis-server`, built with TLS) when it is there: the matrix's servers
/// (`make test-servers`) are built offline without TLS, and what a TLS test checks is our
/// client's side, not the server's. `RL_TLS_REDIS_SERVER` names another.
pub(crate) fn server_program(tls: bool) -> String {
    if tls {
        if let Ok(program) = std::env::var("RL_TLS_REDIS_SERVER") {
            return program;
        }
        if Path::new("/usr/bin/redis-server").exists() {
            return "/usr/bin/redis-server".into();
        }
    }
    "redis-server".into()
}

pub(crate) fn spawn_ready(program: &str, args: &[String], dir: &Path) -> Result<Child, String> {
    let mut child = Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{program}: {e}"))?;
    let log = || {
        ["redis.log", "sentinel.log"]
            .iter()
            .map(|f| std::fs::read_to_string(dir.join(f)).unwrap_or_default())
            .collect::<String>()
    };
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let text = log();
        if text.contains("Ready to accept connections") || text.contains("Sentinel ID is") {
            return Ok(child);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("{program} {args:?} exited ({status}): {text}"));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{program} did not start: {text}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `redis-cli` against a loopback port.
pub(crate) fn cli(
    port: u16,
    pki: Option<&Pki>,
    user: Option<&(String, String)>,
    command: &[&str],
) -> Result<String, String> {
    let mut args: Vec<String> = vec![
        "-h".into(),
        "127.0.0.1".into(),
        "-p".into(),
        port.to_string(),
    ];
    if let Some(pki) = pki {
        args.extend([
            "--tls".into(),
            "--cacert".into(),
            path(&pki.ca),
            "--cert".into(),
            path(&pki.client.cert),
            "--key".into(),
            path(&pki.client.key),
        ]);
    }
    if let Some((name, pass)) = user {
        args.extend(["--user".into(), name.clone(), "--pass".into(), pass.clone()]);
    }
    // A TLS server's redis-cli is the one beside its redis-server (see `server_program`).
    let program = server_program(pki.is_some()).replace("redis-server", "redis-cli");
    let out = Command::new(program)
        .args(&args)
        .arg("--no-auth-warning")
        .args(command)
        .output()
        .map_err(|e| format!("redis-cli: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() || text.starts_with("ERR") || text.starts_with("(error)") {
        return Err(format!(
            "redis-cli {command:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(text)
}
