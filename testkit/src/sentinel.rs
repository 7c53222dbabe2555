//! One `redis-sentinel` watching a master (and, through it, its replicas): TLS when the master
//! is, authenticating to the master as its `admin`, with a password of its own when asked.
//! Quick to decide: a master unreachable for [`DOWN_AFTER_MS`] is failed over.

use std::process::Child;
use std::time::{Duration, Instant};

use crate::place::Scratch;
use crate::process::{cli, path, server_program, spawn_ready, START_TIMEOUT};
use crate::server::Server;

/// `sentinel down-after-milliseconds`: short, so a failover test waits little.
pub const DOWN_AFTER_MS: u64 = 500;
/// `sentinel failover-timeout`.
pub const FAILOVER_TIMEOUT_MS: u64 = 5_000;
/// How long `wait_for_new_master` waits at most.
pub const FAILOVER_WAIT: Duration = Duration::from_secs(60);

/// A running sentinel, killed when dropped.
pub struct Sentinel {
    pub port: u16,
    /// The master's name (`mymaster`).
    pub name: String,
    /// `requirepass` of the sentinel itself, when set.
    pub password: Option<String>,
    tls: Option<crate::certs::Pki>,
    dir: Scratch,
    child: Option<Child>,
}

impl Sentinel {
    /// A sentinel for `master` under `name`, quorum 1 (a test runs one).
    pub fn start(master: &Server, name: &str, password: Option<&str>) -> Result<Sentinel, String> {
        let dir = Scratch::new("sentinel")?;
        let dir_path = dir.path().to_path_buf();
        let mut last = String::new();
        for _ in 0..3 {
            let port = crate::place::free_port()?;
            let mut conf = vec![
                "bind 127.0.0.1".to_string(),
                format!("dir {}", path(&dir_path)),
            ];
            conf.push("logfile sentinel.log".into());
            match &master.options.tls {
                Some(tls) => {
                    let mut args = tls.args(port).into_iter();
                    while let (Some(k), Some(v)) = (args.next(), args.next()) {
                        conf.push(format!("{} {}", k.trim_start_matches("--"), v));
                    }
                }
                None => conf.push(format!("port {port}")),
            }
            if let Some(p) = password {
                conf.push(format!("requirepass {p}"));
            }
            conf.push(format!(
                "sentinel monitor {name} 127.0.0.1 {} 1",
                master.port
            ));
            conf.push(format!(
                "sentinel down-after-milliseconds {name} {DOWN_AFTER_MS}"
            ));
            conf.push(format!(
                "sentinel failover-timeout {name} {FAILOVER_TIMEOUT_MS}"
            ));
            if let Some((user, pass)) = &master.options.admin {
                conf.push(format!("sentinel auth-user {name} {user}"));
                conf.push(format!("sentinel auth-pass {name} {pass}"));
            }
            let file = dir_path.join("sentinel.conf");
            std::fs::write(&file, conf.join("\n") + "\n").map_err(|e| e.to_string())?;
            let _ = std::fs::remove_file(dir_path.join("sentinel.log"));
            let args = vec![path(&file), "--sentinel".to_string()];
            // `redis-server --sentinel` is what the `redis-sentinel` command runs.
            let program = server_program(master.options.tls.is_some());
            match spawn_ready(&program, &args, &dir_path, &[], 0) {
                Ok(child) => {
                    return Ok(Sentinel {
                        port,
                        name: name.to_string(),
                        password: password.map(str::to_string),
                        tls: master.options.tls.as_ref().map(|t| t.pki.clone()),
                        dir,
                        child: Some(child),
                    })
                }
                Err(e) if e.contains("Address already in use") => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// One command to the sentinel through `redis-cli`.
    pub fn cli(&self, command: &[&str]) -> Result<String, String> {
        let auth = self
            .password
            .as_ref()
            .map(|p| ("default".to_string(), p.clone()));
        cli(self.port, self.tls.as_ref(), auth.as_ref(), command)
    }

    /// The port of the master the sentinel names now.
    pub fn master_port(&self) -> Result<u16, String> {
        let out = self.cli(&["SENTINEL", "get-master-addr-by-name", &self.name])?;
        out.lines()
            .nth(1)
            .and_then(|p| p.trim().parse().ok())
            .ok_or_else(|| format!("no master named: {out}"))
    }

    /// Waits (a condition, bounded by [`FAILOVER_WAIT`]) until the sentinel names a master
    /// other than the one on `old_port`, and returns its port.
    pub fn wait_for_new_master(&self, old_port: u16) -> Result<u16, String> {
        let deadline = Instant::now() + FAILOVER_WAIT;
        loop {
            if let Ok(port) = self.master_port() {
                if port != old_port {
                    return Ok(port);
                }
            }
            if Instant::now() > deadline {
                return Err(format!("no failover: {}", self.log()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the sentinel knows `count` replicas of its master (it learns them from the
    /// master's INFO, every few seconds).
    pub fn wait_for_replicas(&self, count: usize) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let out = self.cli(&["SENTINEL", "replicas", &self.name])?;
            if out.matches("flags").count() >= count {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("sentinel knows no replica: {out}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sentinel.log")).unwrap_or_default()
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
