//! Which backend a store answers through, and the library installed where the client may
//! install it: the module when loaded, else the Functions library (loaded where absent, replaced
//! where older, by [`LoadLibrary`]; refused where incompatible), else, where `FUNCTION` is
//! refused or the library is absent and not to be loaded, the scripts backend
//! (crate::scripts). docs/functions.md, backends and versions.

use std::time::Duration;

use redis::{Cmd, Value};

use crate::command::Backend;
use crate::error::Error;
use crate::library::{verdict, LoadLibrary, Verdict, Version, LIBRARY_SOURCE, LOAD_COMMAND};

/// A master of the store: `None` for a standalone server, a Cluster node's host and port.
#[derive(Clone, Debug)]
pub(crate) struct Node(pub(crate) Option<(String, u16)>);

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => write!(f, "the server"),
            Some((host, port)) => write!(f, "{host}:{port}"),
        }
    }
}

/// What installing needs of a store: a command to it, to each master, to one master, and the
/// same store with the deadline of a load.
pub(crate) trait Masters: Sized {
    async fn query(&self, cmd: &Cmd) -> Result<Value, Error>;
    async fn on_masters(&self, cmd: &Cmd) -> Result<Vec<(Node, Value)>, Error>;
    async fn on_node(&self, node: &Node, cmd: &Cmd) -> Result<Value, Error>;
    fn loading(&self) -> Self;
}

/// The deadline of a library load (compiling it takes longer than a decision), and of the
/// `EVAL` that caches a script on a server that lacked it.
pub(crate) const LOAD_DEADLINE: Duration = Duration::from_secs(10);

/// Whether an error says the server refuses `FUNCTION` (renamed away, an older server, or an
/// ACL user without it).
fn function_refused(e: &Error) -> bool {
    match e {
        Error::Unsupported(_) => true,
        Error::Reply(t) | Error::Argument(t) => t.starts_with("NOPERM"),
        // The connection layer reports a NOPERM as a configuration error; here it only says
        // that this user may not run FUNCTION.
        Error::Config(t) => t.contains("NOPERM") && t.to_ascii_lowercase().contains("function"),
        _ => false,
    }
}

/// Each master and whether it holds the library (`FUNCTION LIST LIBRARYNAME ratelimit`).
async fn holders(store: &impl Masters) -> Result<Vec<(Node, bool)>, Error> {
    let list = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg("ratelimit")
        .to_owned();
    Ok(store
        .on_masters(&list)
        .await?
        .into_iter()
        .map(|(node, v)| (node, matches!(v, Value::Array(items) if !items.is_empty())))
        .collect())
}

/// The version a master's library answers; None when it has no `rl_version` (before 1.1).
async fn version_on(store: &impl Masters, node: &Node) -> Result<Option<Version>, Error> {
    let cmd = redis::cmd("FCALL_RO").arg("rl_version").arg(0).to_owned();
    match store.on_node(node, &cmd).await {
        Ok(Value::BulkString(b)) => Ok(std::str::from_utf8(&b).ok().and_then(|s| s.parse().ok())),
        Ok(other) => Err(Error::Reply(format!("rl_version answered {other:?}"))),
        Err(Error::Unsupported(t)) if t.to_ascii_lowercase().contains("function not found") => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

async fn load_on(store: &impl Masters, node: &Node, replace: bool) -> Result<(), Error> {
    let mut cmd = redis::cmd("FUNCTION");
    cmd.arg("LOAD");
    if replace {
        cmd.arg("REPLACE");
    }
    cmd.arg(LIBRARY_SOURCE);
    store.on_node(node, &cmd).await?;
    log::info!(
        "ratelimit library {} {} on {node}",
        Version::carried(),
        if replace { "replaced" } else { "loaded" }
    );
    Ok(())
}

/// The scripts backend: every entry's script cached on every master at connect (`SCRIPT
/// LOAD`), so that no call pays for compiling one within its deadline.
async fn scripts(store: &impl Masters) -> Result<Backend, Error> {
    for entry in crate::scripts::ENTRIES {
        if let Some(script) = crate::scripts::script(entry) {
            let load = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(&script.text)
                .to_owned();
            store.on_masters(&load).await?;
        }
    }
    Ok(Backend::Scripts)
}

/// The backend of a store, installing the library where `load` allows.
pub(crate) async fn detect(store: &impl Masters, load: LoadLibrary) -> Result<Backend, Error> {
    let info = store
        .query(redis::cmd("COMMAND").arg("INFO").arg("rl.gcra"))
        .await?;
    if matches!(&info, Value::Array(items) if items.iter().any(|i| *i != Value::Nil)) {
        return Ok(Backend::Module);
    }
    let nodes = match holders(store).await {
        Ok(nodes) => nodes,
        Err(e) if function_refused(&e) => {
            log::info!("FUNCTION is refused ({e}): the ratelimit library is served through EVALSHA (the scripts backend)");
            return scripts(store).await;
        }
        Err(e) => return Err(e),
    };
    let carried = Version::carried();
    let mut absent = Vec::new();
    for (node, held) in &nodes {
        if !held {
            if load == LoadLibrary::No {
                absent.push(node.to_string());
            } else {
                load_on(store, node, false).await?;
            }
            continue;
        }
        if verdict(version_on(store, node).await?, carried, load)? == Verdict::Replace {
            load_on(store, node, true).await?;
        }
    }
    if absent.is_empty() {
        return Ok(Backend::Functions);
    }
    if absent.len() == nodes.len() {
        log::info!(
            "the ratelimit library is not loaded: served through EVALSHA (the scripts backend); \
             load it with `{LOAD_COMMAND}` or set REDIS_LOAD_LIBRARY=missing for FCALL"
        );
        return scripts(store).await;
    }
    Err(Error::Unsupported(format!(
        "the ratelimit library is loaded on some masters but not on {}: load it there with \
         `{LOAD_COMMAND}`, or set REDIS_LOAD_LIBRARY=missing",
        absent.join(", ")
    )))
}

/// Loads the library on every master that lacks it (one found without it after a failover or
/// a resharding): `FUNCTION LOAD`, never over a library already there.
pub(crate) async fn load_where_absent(store: &impl Masters) -> Result<(), Error> {
    let store = &store.loading();
    for (node, held) in holders(store).await? {
        if !held {
            load_on(store, &node, false).await?;
        }
    }
    Ok(())
}

/// The `EVAL` of an `EVALSHA` of the scripts backend (the same keys and arguments), for a server
/// that answered NOSCRIPT: it runs the call and caches the script there.
pub(crate) fn eval_of(cmd: &Cmd) -> Option<Cmd> {
    let mut args = cmd.args_iter().map(|a| match a {
        redis::Arg::Simple(b) => Some(b),
        redis::Arg::Cursor => None,
    });
    if !args.next()??.eq_ignore_ascii_case(b"EVALSHA") {
        return None;
    }
    let sha = std::str::from_utf8(args.next()??).ok()?;
    let script = crate::scripts::by_sha(sha)?;
    let mut eval = redis::cmd("EVAL");
    eval.arg(&script.text);
    for a in args {
        eval.arg(a?);
    }
    Some(eval)
}
