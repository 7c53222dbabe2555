//! One server of a region's store, as the controller talks to it: a connection through the
//! client's connection layer (TLS, the ACL user, the master that sentinels name, and the
//! backend it answers through: the module, the Functions library or the scripts backend, the
//! library loaded where `load_library` allows), opened on demand and dropped on any failure, and
//! a node's calls run as one pipeline. The standalone
//! store (`link`) and each master of a Cluster (`route`) are one of these. The controller is
//! synchronous; each server drives its connection on a runtime of its own, only while a call
//! waits.

use std::time::Duration;

use ratelimit_client::{Backend, ConnectionSettings, Error, LoadLibrary, Store};
use redis::{FromRedisValue, Value};

/// The algorithm of the start's access check: no limiter has this name, so `RL.SHARE` refuses
/// it before it touches the key.
const ACCESS_PROBE_ALGORITHM: &str = "ACCESS-CHECK";

/// The module's keys per `RL.DEMAND` call, at most (`src/command/share.rs`'s `MAX_KEYS`): the
/// start's access check names one more, so the module refuses the call before it reads or resets
/// any key, and only the ACL, checked first, can answer otherwise.
const DEMAND_MAX_KEYS: usize = 10_000;

/// One server the controller talks to: a standalone store or one master of a cluster.
pub struct Server {
    settings: ConnectionSettings,
    runtime: tokio::runtime::Runtime,
    store: Option<Store>,
    timeout: Duration,
    load: LoadLibrary,
}

impl Server {
    pub fn new(
        settings: ConnectionSettings,
        timeout: Duration,
        load: LoadLibrary,
    ) -> Result<Server, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("{settings}: {e}"))?;
        Ok(Server {
            settings,
            runtime,
            store: None,
            timeout,
            load,
        })
    }

    /// Opens the connection now: a refusal no retry fixes (a wrong password, an untrusted
    /// certificate, a file that cannot be read) is an error; an unreachable server is not (the
    /// controller counts it unreachable and tries again next period). With a `probe` key (one
    /// of the config's), also checks that the user may run `RL.SHARE` and `RL.DEMAND` on it, by
    /// calls the module refuses before they write or reset anything (an algorithm of no name;
    /// one key more than a call may name): Redis checks the ACL before the command runs, so a
    /// `NOPERM` is the only answer that says no.
    pub fn check(&mut self, probe: Option<&str>) -> Result<(), String> {
        let store = match self.store() {
            Err(Error::Config(why)) => return Err(why),
            Err(_) => return Ok(()),
            Ok(store) => store,
        };
        let Some(key) = probe else {
            return Ok(());
        };
        let mut cmd = redis::cmd("RL.SHARE");
        cmd.arg(ACCESS_PROBE_ALGORITHM)
            .arg(&[1, 1, 1])
            .arg(key)
            .arg(&[0, 0]);
        let mut demand = redis::cmd("RL.DEMAND");
        for _ in 0..=DEMAND_MAX_KEYS {
            demand.arg(key);
        }
        for (name, cmd) in [("RL.SHARE", cmd), ("RL.DEMAND", demand)] {
            if let Err(Error::Config(why)) = self.runtime.block_on(store.query(&cmd)) {
                return Err(format!(
                    "{}: {name} on '{key}': {why} (docs/operating.md, the minimal ACL rules)",
                    self.address()
                ));
            }
        }
        Ok(())
    }

    fn store(&mut self) -> Result<Store, Error> {
        if let Some(s) = &self.store {
            return Ok(s.clone());
        }
        let (timeout, settings, load) = (self.timeout, &self.settings, self.load);
        let open =
            async move { tokio::time::timeout(timeout, Store::open_with(settings, load)).await };
        let store = match self.runtime.block_on(open) {
            Ok(result) => result?.with_deadline(self.timeout),
            Err(_) => return Err(Error::Timeout),
        };
        self.store = Some(store.clone());
        Ok(store)
    }

    /// The backend the server answers through (the connection opened first if need be): a
    /// server's NOSCRIPT (a restart lost the scripts) fails the step, and the connection opened
    /// again at the next one loads them again.
    pub fn backend(&mut self) -> Result<Backend, String> {
        let result = self.store().map(|s| s.backend());
        self.after(result)
    }

    /// Runs `pipe`, each reply as it came (an error reply as a value); drops the connection
    /// when the pipeline fails.
    pub fn replies(&mut self, pipe: &redis::Pipeline) -> Result<Vec<Value>, String> {
        let result = self
            .store()
            .and_then(|store| self.runtime.block_on(store.pipeline(pipe)));
        self.after(result)
    }

    /// Runs `pipe` (its replies read as one `T`); drops the connection on any error.
    pub fn run<T: FromRedisValue>(&mut self, pipe: &redis::Pipeline) -> Result<T, String> {
        let result = self.store().and_then(|store| {
            let values = self.runtime.block_on(store.pipeline(pipe))?;
            if let Some(e) = values.iter().find_map(|v| match v {
                Value::ServerError(e) => Some(format!("{e:?}")),
                _ => None,
            }) {
                return Err(Error::Reply(e));
            }
            T::from_redis_value(&Value::Array(values)).map_err(Error::from)
        });
        self.after(result)
    }

    /// One command (`CLUSTER SLOTS`, `SCAN`); drops the connection on any error.
    pub fn query<T: FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Result<T, String> {
        let result = self.store().and_then(|store| {
            let value = self.runtime.block_on(store.query(cmd))?;
            T::from_redis_value(&value).map_err(Error::from)
        });
        self.after(result)
    }

    fn after<T>(&mut self, result: Result<T, Error>) -> Result<T, String> {
        if result.is_err() {
            self.store = None;
        }
        result.map_err(|e| format!("{}: {e}", self.address()))
    }

    /// `host:port` (or the sentinels' master name): the server's name in errors and cursors.
    pub fn address(&self) -> String {
        match &self.settings.target {
            ratelimit_client::Target::Server(a) => a.to_string(),
            _ => self.settings.to_string(),
        }
    }

    /// The settings the server was opened with (a Cluster's masters share them but the address).
    pub fn settings(&self) -> &ConnectionSettings {
        &self.settings
    }
}

/// The calls for one server: each the indices of its keys.
#[derive(Default)]
pub struct Node {
    pub calls: Vec<Vec<usize>>,
}

/// Adds one call for the keys at these indices to a pipeline, spelled for the server's backend.
pub type Add<'a> = &'a (dyn Fn(&mut redis::Pipeline, Backend, &[usize]) + Sync);

/// Each key's index with its row.
pub type Rows = Vec<(usize, Vec<u64>)>;

/// Runs a node's calls as one pipeline: each key's index with its row, the calls' rows checked
/// against their keys.
pub fn run_calls(server: &mut Server, node: &Node, add: Add<'_>) -> Result<Rows, String> {
    if node.calls.is_empty() {
        return Ok(Vec::new());
    }
    let backend = server.backend()?;
    let mut pipe = redis::pipe();
    for call in &node.calls {
        add(&mut pipe, backend, call);
    }
    let answers: Vec<Vec<Vec<u64>>> = server.run(&pipe)?;
    if answers.len() != node.calls.len() {
        return Err(format!(
            "{}: {} answers for {} calls",
            server.address(),
            answers.len(),
            node.calls.len()
        ));
    }
    let mut out = Vec::with_capacity(node.calls.iter().map(Vec::len).sum());
    for (call, rows) in node.calls.iter().zip(answers) {
        if rows.len() != call.len() {
            return Err(format!(
                "{}: {} rows for {} keys",
                server.address(),
                rows.len(),
                call.len()
            ));
        }
        out.extend(call.iter().copied().zip(rows));
    }
    Ok(out)
}
