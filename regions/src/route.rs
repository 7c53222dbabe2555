//! A region whose store is a Redis Cluster: the controller learns which master serves each hash
//! slot (`CLUSTER SLOTS`, asked of any node it knows, the configured one last), sends each
//! master the calls for its keys, one slot per call (a multi-key command must stay in one slot),
//! `batch` keys a call at most, pipelined, all masters at once. Any failure (a node down, a
//! `MOVED` while slots migrate, a timeout) fails the whole step for the region, as for a
//! standalone store: the controller then counts the region unreachable for the period (its
//! writes may have landed, so they are counted until they expire), and learns the slots again
//! at the next call.

use std::collections::BTreeMap;
use std::time::Duration;

use ratelimit_client::{Addr, ConnectionSettings, LoadLibrary, Target};
use redis::cluster_routing::get_slot;
use redis::Value;

use crate::wire::{run_calls, Add, Node, Rows, Server};

const SLOTS: usize = 16_384;

pub struct Cluster {
    /// The configured node: asked for the slots when no known master answers.
    seed: Server,
    seed_info: ConnectionSettings,
    timeout: Duration,
    load: LoadLibrary,
    /// The masters, as `CLUSTER SLOTS` last named them.
    masters: Vec<Server>,
    /// For each slot, its master's index in `masters`; None until learned (or after a failure).
    slots: Option<Vec<Option<usize>>>,
}

impl Cluster {
    /// The configured node's connection, opened now (see `Server::check`).
    pub fn check(&mut self, probe: Option<&str>) -> Result<(), String> {
        self.seed.check(probe)
    }

    pub fn new(
        seed_info: ConnectionSettings,
        timeout: Duration,
        load: LoadLibrary,
    ) -> Result<Cluster, String> {
        Ok(Cluster {
            seed: Server::new(seed_info.clone(), timeout, load)?,
            seed_info,
            timeout,
            load,
            masters: Vec::new(),
            slots: None,
        })
    }

    /// The masters, learned first if need be.
    pub fn masters(&mut self) -> Result<&mut [Server], String> {
        if self.slots.is_none() {
            self.learn()?;
        }
        Ok(&mut self.masters)
    }

    /// See [`crate::link::Link`]'s `calls`: here grouped by slot and by master.
    pub fn calls(
        &mut self,
        n: usize,
        key: &dyn Fn(usize) -> String,
        batch: usize,
        add: Add<'_>,
    ) -> Result<Vec<Vec<u64>>, String> {
        let result = self.try_calls(n, key, batch, add);
        if result.is_err() {
            self.slots = None;
        }
        result
    }

    fn try_calls(
        &mut self,
        n: usize,
        key: &dyn Fn(usize) -> String,
        batch: usize,
        add: Add<'_>,
    ) -> Result<Vec<Vec<u64>>, String> {
        if self.slots.is_none() {
            self.learn()?;
        }
        let Some(slots) = &self.slots else {
            return Err("cluster slots unknown".into());
        };
        // Per master, per slot (in slot order), the keys' indices.
        let mut by_master: Vec<BTreeMap<u16, Vec<usize>>> =
            vec![BTreeMap::new(); self.masters.len()];
        for i in 0..n {
            let slot = get_slot(key(i).as_bytes());
            let master = slots
                .get(usize::from(slot))
                .copied()
                .flatten()
                .and_then(|m| by_master.get_mut(m))
                .ok_or_else(|| format!("slot {slot} has no master"))?;
            master.entry(slot).or_default().push(i);
        }
        let nodes: Vec<Node> = by_master
            .into_iter()
            .map(|slots| Node {
                calls: slots
                    .into_values()
                    .flat_map(|keys| {
                        keys.chunks(batch.max(1))
                            .map(<[usize]>::to_vec)
                            .collect::<Vec<_>>()
                    })
                    .collect(),
            })
            .collect();
        // Every master at once: a step takes the slowest master's time, not the sum.
        let answers: Vec<Result<Rows, String>> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .masters
                .iter_mut()
                .zip(&nodes)
                .map(|(server, node)| s.spawn(move || run_calls(server, node, add)))
                .collect();
            handles
                .into_iter()
                .map(|h| match h.join() {
                    Ok(answer) => answer,
                    Err(panic) => std::panic::resume_unwind(panic),
                })
                .collect()
        });
        let mut rows: Vec<Option<Vec<u64>>> = vec![None; n];
        for answer in answers {
            for (i, row) in answer? {
                if let Some(slot) = rows.get_mut(i) {
                    *slot = Some(row);
                }
            }
        }
        rows.into_iter()
            .map(|r| r.ok_or_else(|| "a key without an answer".to_string()))
            .collect()
    }

    /// Asks the known masters, then the configured node, which master serves each slot.
    fn learn(&mut self) -> Result<(), String> {
        let cmd = redis::cmd("CLUSTER").arg("SLOTS").clone();
        let mut last = String::from("no node answered");
        let mut ranges = None;
        for server in self
            .masters
            .iter_mut()
            .chain(std::iter::once(&mut self.seed))
        {
            let asked = host_of(&server.address());
            match server.query::<Value>(&cmd).and_then(|v| parse(v, &asked)) {
                Ok(r) => {
                    ranges = Some(r);
                    break;
                }
                Err(e) => last = format!("{}: {e}", server.address()),
            }
        }
        let Some(ranges) = ranges else {
            return Err(last);
        };
        let mut masters: Vec<Server> = Vec::new();
        let mut known = std::mem::take(&mut self.masters);
        let mut slots = vec![None; SLOTS];
        for (start, end, host, port) in ranges {
            let address = format!("{host}:{port}");
            let index = match masters.iter().position(|m| m.address() == address) {
                Some(i) => i,
                None => {
                    // Keep the connection of a master already known.
                    let server = match known.iter().position(|m| m.address() == address) {
                        Some(i) => known.swap_remove(i),
                        None => Server::new(
                            // The seed's TLS and credentials, the master's address.
                            ConnectionSettings {
                                target: Target::Server(Addr::Tcp { host, port }),
                                ..self.seed_info.clone()
                            },
                            self.timeout,
                            self.load,
                        )?,
                    };
                    masters.push(server);
                    masters.len() - 1
                }
            };
            for slot in slots
                .iter_mut()
                .take(usize::from(end) + 1)
                .skip(usize::from(start))
            {
                *slot = Some(index);
            }
        }
        self.masters = masters;
        self.slots = Some(slots);
        Ok(())
    }
}

/// The host of a `host:port` address.
fn host_of(address: &str) -> String {
    address
        .rsplit_once(':')
        .map_or(address, |(host, _)| host)
        .to_string()
}

/// `CLUSTER SLOTS`: each range's first and last slot and its master's host and port (an empty
/// or unknown host is the node asked).
fn parse(value: Value, asked: &str) -> Result<Vec<(u16, u16, String, u16)>, String> {
    let bad = || "CLUSTER SLOTS: unexpected reply".to_string();
    let Value::Array(ranges) = value else {
        return Err(bad());
    };
    let mut out = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(fields) = range else {
            return Err(bad());
        };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            return Err(bad());
        };
        let host = match master.first() {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::SimpleString(s)) => s.clone(),
            _ => return Err(bad()),
        };
        let host = if host.is_empty() || host == "?" {
            asked.to_string()
        } else {
            host
        };
        let Some(Value::Int(port)) = master.get(1) else {
            return Err(bad());
        };
        let slot = |n: i64| u16::try_from(n).ok().filter(|&s| usize::from(s) < SLOTS);
        match (slot(*start), slot(*end), u16::try_from(*port)) {
            (Some(start), Some(end), Ok(port)) if start <= end => {
                out.push((start, end, host, port));
            }
            _ => return Err(bad()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cluster_slots() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("10.0.0.1", 7000),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                node("", 7001),
                node("10.0.0.3", 7002),
            ]),
        ]);
        assert_eq!(
            parse(reply, "10.0.0.9").unwrap(),
            [
                (0, 5460, "10.0.0.1".to_string(), 7000),
                (5461, 16383, "10.0.0.9".to_string(), 7001)
            ]
        );
        let bad = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(16384),
            node("h", 1),
        ])]);
        assert!(parse(bad, "h").is_err());
        assert_eq!(host_of("127.0.0.1:7000"), "127.0.0.1");
    }
}
