//! The processes behind the servers: which `redis-server` runs, starting one and waiting until
//! its log says it is ready, and `redis-cli` for the harness's own commands.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::certs::Pki;

/// How long a server may take to say it is ready before the start is a failure.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);

pub(crate) fn path(p: &Path) -> String {
    p.display().to_string()
}

/// The `redis-server` to run: the first on PATH (`make test-servers` puts each server of its
/// matrix first), except for a TLS server, which runs Debian's (`/usr/bin/redis-server`, built
/// with TLS) when it is there: the matrix's servers are built offline without TLS, and what a
/// TLS test checks is our client's side, not the server's. `RL_TLS_REDIS_SERVER` names another.
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

/// Starts `program args` in `dir` with `env` added and waits until its log (`dir/redis.log`, or
/// `sentinel.log`), read from byte `log_from` on (a restart appends to the log of the runs
/// before), says it accepts connections; its exit or the timeout is an error carrying the log.
pub(crate) fn spawn_ready(
    program: &str,
    args: &[String],
    dir: &Path,
    env: &[(String, String)],
    log_from: usize,
) -> Result<Child, String> {
    let mut child = Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{program}: {e}; scripts/install-deps installs redis-server"))?;
    let log = || {
        ["redis.log", "sentinel.log"]
            .iter()
            .map(|f| std::fs::read(dir.join(f)).unwrap_or_default())
            .map(|bytes| String::from_utf8_lossy(bytes.get(log_from..).unwrap_or(&[])).into_owned())
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
