//! One region's store, as the controller talks to it: `RL.DEMAND` and `RL.SHARE` in batches,
//! pipelined, under a timeout, through the backend each server answers through (the module's
//! commands, or the library's `rl_demand` and `rl_share` by `FCALL` or `EVALSHA`). The store is
//! a standalone server or a Redis Cluster (see [`crate::route`]). Any failure drops the
//! connection (a reply that may still arrive must never be read as the answer to a later call);
//! the next call connects again.

use std::collections::HashMap;
use std::time::Duration;

use ratelimit_client::{Backend, ConnectionSettings, LoadLibrary};

use crate::config::Policy;
use crate::route::Cluster;
use crate::wire::{run_calls, Add, Node, Server};

/// What `RL.DEMAND` answers for one key: asked and admitted since the last read, the share it
/// holds (0: none) with its expiry, and the L it is decided under now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Demand {
    pub asked: u64,
    pub admitted: u64,
    pub share: u64,
    pub expire_at_ms: u64,
    pub limit: u64,
}

/// What `RL.SHARE` answers for one key: the share and expiry it holds now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub share: u64,
    pub expire_at_ms: u64,
}

enum Store {
    Standalone(Box<Server>),
    Cluster(Box<Cluster>),
}

pub struct Link {
    store: Store,
    /// Where each `SCAN` stands: by server address and pattern (0: a new pass).
    cursors: HashMap<(String, String), u64>,
}

impl Link {
    /// `url`: the store's URL; with `cluster`, the URL of any node of the cluster, from which
    /// the controller learns the others (`CLUSTER SLOTS`).
    ///
    /// The connection is opened now: a refusal no retry fixes (a wrong password, an untrusted
    /// certificate, a `probe` key on which the user may not run `RL.SHARE`) is an error; an
    /// unreachable store is not (it is counted unreachable).
    pub fn new(
        settings: ConnectionSettings,
        cluster: bool,
        timeout: Duration,
        probe: Option<&str>,
        load: LoadLibrary,
    ) -> Result<Link, String> {
        let mut store = if cluster {
            Store::Cluster(Box::new(Cluster::new(settings, timeout, load)?))
        } else {
            Store::Standalone(Box::new(Server::new(settings, timeout, load)?))
        };
        match &mut store {
            Store::Cluster(c) => c.check(probe)?,
            Store::Standalone(s) => s.check(probe)?,
        }
        Ok(Link {
            store,
            cursors: HashMap::new(),
        })
    }

    /// Every call for keys `0..n` (`key(i)` names key i), `batch` keys a call at most, keys of
    /// one call in one hash slot on a cluster: one row per key, in key order.
    fn calls(
        &mut self,
        n: usize,
        key: &dyn Fn(usize) -> String,
        batch: usize,
        add: Add<'_>,
    ) -> Result<Vec<Vec<u64>>, String> {
        match &mut self.store {
            Store::Standalone(server) => {
                let indices: Vec<usize> = (0..n).collect();
                let node = Node {
                    calls: indices
                        .chunks(batch.max(1))
                        .map(<[usize]>::to_vec)
                        .collect(),
                };
                let rows = run_calls(server, &node, add)?;
                Ok(rows.into_iter().map(|(_, row)| row).collect())
            }
            Store::Cluster(cluster) => cluster.calls(n, key, batch, add),
        }
    }

    /// Up to `calls` `SCAN … MATCH pattern COUNT count TYPE ratelimit` calls per pattern on
    /// every server (every master of a cluster), each continuing where the last one stopped (a
    /// pass over the keyspace spans periods): the limiter keys found, with repeats. On the
    /// library a limiter is a string (`TYPE string`): those that its `rl_peek` refuses are not
    /// limiters and are left out.
    pub fn discover(
        &mut self,
        patterns: &[String],
        calls: usize,
        count: usize,
    ) -> Result<Vec<String>, String> {
        let servers: &mut [Server] = match &mut self.store {
            Store::Standalone(server) => std::slice::from_mut(server),
            Store::Cluster(cluster) => cluster.masters()?,
        };
        let mut found = Vec::new();
        for server in servers {
            let backend = server.backend()?;
            let kind = match backend {
                Backend::Module => "ratelimit",
                Backend::Functions | Backend::Scripts => "string",
            };
            let mut candidates = Vec::new();
            for pattern in patterns {
                let at = (server.address(), pattern.clone());
                let mut cursor = self.cursors.get(&at).copied().unwrap_or(0);
                for _ in 0..calls {
                    let cmd = redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(pattern)
                        .arg("COUNT")
                        .arg(count)
                        .arg("TYPE")
                        .arg(kind)
                        .clone();
                    let (next, keys): (u64, Vec<String>) = server.query(&cmd)?;
                    candidates.extend(keys);
                    cursor = next;
                    if cursor == 0 {
                        break;
                    }
                }
                self.cursors.insert(at, cursor);
            }
            if backend == Backend::Module || candidates.is_empty() {
                found.append(&mut candidates);
                continue;
            }
            let mut pipe = redis::pipe();
            for key in &candidates {
                pipe.add_command(backend.command("PEEK", &[key]));
            }
            let replies = server.replies(&pipe)?;
            found.extend(
                candidates
                    .into_iter()
                    .zip(replies)
                    .filter(|(_, r)| matches!(r, redis::Value::Array(_)))
                    .map(|(key, _)| key),
            );
        }
        Ok(found)
    }

    /// `RL.DEMAND` for every key, `batch` keys per call, all calls pipelined.
    pub fn demand(&mut self, keys: &[String], batch: usize) -> Result<Vec<Demand>, String> {
        let add = |pipe: &mut redis::Pipeline, backend: Backend, indices: &[usize]| {
            let names: Vec<&str> = indices
                .iter()
                .map(|&i| keys.get(i).map_or("", String::as_str))
                .collect();
            pipe.add_command(backend.command("DEMAND", &names));
        };
        let key = |i: usize| keys.get(i).cloned().unwrap_or_default();
        let rows = self.calls(keys.len(), &key, batch, &add)?;
        rows.into_iter()
            .map(|r| match r[..] {
                [asked, admitted, share, expire_at_ms, limit] => Ok(Demand {
                    asked,
                    admitted,
                    share,
                    expire_at_ms,
                    limit,
                }),
                _ => Err(format!("RL.DEMAND row {r:?}")),
            })
            .collect()
    }

    /// `RL.SHARE` of `(key, share, expire_at_ms)` under the group's safe policy, `batch` keys per
    /// call, pipelined: what each key holds afterwards.
    pub fn share(
        &mut self,
        policy: &Policy,
        writes: &[(&str, u64, u64)],
        batch: usize,
    ) -> Result<Vec<Held>, String> {
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        let add = |pipe: &mut redis::Pipeline, backend: Backend, indices: &[usize]| {
            let writes: Vec<&(&str, u64, u64)> =
                indices.iter().filter_map(|&i| writes.get(i)).collect();
            let safe = |cmd: &mut redis::Cmd| {
                cmd.arg(&policy.algorithm)
                    .arg(policy.safe)
                    .arg(policy.window_ms)
                    .arg(policy.safe_burst);
            };
            // The module takes each key with its share; the library its keys first (FCALL's
            // and EVALSHA's numkeys), then a share and an expiry per key.
            let cmd = match backend {
                Backend::Module => {
                    let mut cmd = redis::cmd("RL.SHARE");
                    safe(&mut cmd);
                    for (key, share, expire_at_ms) in writes {
                        cmd.arg(*key).arg(*share).arg(*expire_at_ms);
                    }
                    cmd
                }
                Backend::Functions | Backend::Scripts => {
                    let keys: Vec<&str> = writes.iter().map(|w| w.0).collect();
                    let mut cmd = backend.command("SHARE", &keys);
                    safe(&mut cmd);
                    for (_, share, expire_at_ms) in writes {
                        cmd.arg(*share).arg(*expire_at_ms);
                    }
                    cmd
                }
            };
            pipe.add_command(cmd);
        };
        let key = |i: usize| writes.get(i).map_or(String::new(), |w| w.0.to_string());
        let rows = self.calls(writes.len(), &key, batch, &add)?;
        rows.into_iter()
            .map(|r| match r[..] {
                [share, expire_at_ms, _, _] => Ok(Held {
                    share,
                    expire_at_ms,
                }),
                _ => Err(format!("RL.SHARE row {r:?}")),
            })
            .collect()
    }
}
