//! The server the module's tests start: testkit's `redis-server` with the module loaded and its
//! debug clock on, in the shapes these suites ask for (more options, more load arguments,
//! another binary, another module, a restart through `SHUTDOWN`). Apart from the harness's
//! helpers (`support`), so that what needs a server (`support::registry`) names this file and
//! not the harness that re-exports it.

use std::path::{Path, PathBuf};

use testkit::Options;

/// The module under test: `$RL_MODULE`, else the workspace's debug build (`make build`).
pub fn module_path() -> PathBuf {
    testkit::module_path().unwrap_or_else(|e| panic!("{e}"))
}

/// A free loopback port (testkit's: above the kernel's ephemeral range, one per call).
pub fn free_port() -> u16 {
    testkit::free_port().unwrap_or_else(|e| panic!("{e}"))
}

/// The server the tests start: the first `redis-server` on PATH. `scripts/test-servers` runs
/// the suite with each server it built first on PATH (Valkey's under that name too).
pub const SERVER: &str = "redis-server";

/// Debian's packaged server (7.0.15): the "old" side of the cross-version tests.
pub const OLD_SERVER: &str = "/usr/bin/redis-server";

testkit::server_layer!(
    /// A running server (testkit's, which it derefs to), killed on drop.
    pub struct Server
);

/// The module with `DEBUG-CLOCK yes`, then `module_args`, and `extra` redis-server options.
fn module_options(extra: &[&str], module_args: &[&str]) -> Options {
    Options::debug_module(module_args)
        .unwrap_or_else(|e| panic!("{e}"))
        .extra(extra)
}

/// What `--loadmodule` loads: `module` with `module_args`, or (None) ours as `module_options`
/// loads it.
fn load(module: Option<&Path>, module_args: &[&str]) -> Option<(PathBuf, Vec<String>)> {
    match module {
        Some(other) => Some((
            other.to_path_buf(),
            module_args.iter().map(|s| s.to_string()).collect(),
        )),
        None => module_options(&[], module_args).module,
    }
}

impl Server {
    /// A server with the module loaded with `DEBUG-CLOCK yes`.
    pub fn start() -> Server {
        Server::with(&[], &[])
    }

    /// `extra` are redis-server options (`["--appendonly", "yes"]`); `module_args` are appended
    /// to the module's load arguments.
    pub fn with(extra: &[&str], module_args: &[&str]) -> Server {
        Server::started(module_options(extra, module_args))
    }

    /// A server on the given port; `Err` (with the log) when it did not start: a load that must
    /// fail, or a port another process took meanwhile (cluster nodes pick their ports
    /// themselves: the cluster bus needs port+10000 too).
    pub fn on_port(port: u16, extra: &[&str], module_args: &[&str]) -> Result<Server, String> {
        testkit::Server::start_on(port, module_options(extra, module_args)).map(Server)
    }

    /// Like `with`, but running the given redis-server binary (e.g. `OLD_SERVER`).
    pub fn using(program: &str, extra: &[&str], module_args: &[&str]) -> Server {
        Server::started(Options {
            program: Some(program.to_string()),
            ..module_options(extra, module_args)
        })
    }

    /// A server loading `module` (None: ours, with `DEBUG-CLOCK yes` before `module_args`),
    /// with `env` set for its process.
    pub fn custom(
        extra: &[&str],
        module: Option<&Path>,
        module_args: &[&str],
        env: &[(String, String)],
    ) -> Server {
        Server::started(Options {
            module: load(module, module_args),
            env: env.to_vec(),
            ..module_options(extra, module_args)
        })
    }

    fn started(options: Options) -> Server {
        Server(testkit::Server::start(options).unwrap_or_else(|e| panic!("{e}")))
    }

    /// Shuts the server down (SHUTDOWN `shutdown`) and starts it again on the same port,
    /// directory, options and environment, loading `module` (None: ours) with `module_args`:
    /// the switch from redis-cell at a restart.
    pub fn reload(&mut self, shutdown: &str, module: Option<&Path>, module_args: &[&str]) {
        self.0.options.module = load(module, module_args);
        self.restart(shutdown);
    }

    /// Stops the server (SHUTDOWN with the given mode, e.g. "NOSAVE" or "SAVE") and starts it
    /// again on the same port and directory with the same options.
    pub fn restart(&mut self, shutdown: &str) {
        self.0.shutdown(shutdown).unwrap_or_else(|e| panic!("{e}"));
        self.0.restart().unwrap_or_else(|e| panic!("{e}"));
    }
}
