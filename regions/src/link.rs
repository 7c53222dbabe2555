//! One region's store, as the controller talks to it: `RL.DEMAND` and `RL.SHARE` in batches,
//! pipelined, under a timeout. Any failure drops the connection (a reply that may still arrive
//! must never be read as the answer to a later call); the next call connects again.

use std::time::Duration;

use redis::{Client, Connection, RedisResult};

use crate::config::Policy;

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

pub struct Link {
    client: Client,
    connection: Option<Connection>,
    timeout: Duration,
}

impl Link {
    pub fn new(url: &str, timeout: Duration) -> Result<Link, String> {
        let client = Client::open(url).map_err(|e| format!("{url}: {e}"))?;
        Ok(Link {
            client,
            connection: None,
            timeout,
        })
    }

    fn connection(&mut self) -> RedisResult<&mut Connection> {
        if self.connection.is_none() {
            let c = self.client.get_connection_with_timeout(self.timeout)?;
            c.set_read_timeout(Some(self.timeout))?;
            c.set_write_timeout(Some(self.timeout))?;
            self.connection = Some(c);
        }
        match self.connection.as_mut() {
            Some(c) => Ok(c),
            None => Err((redis::ErrorKind::IoError, "not connected").into()),
        }
    }

    /// Runs `pipe`; drops the connection on any error.
    fn run<T: redis::FromRedisValue>(&mut self, pipe: &redis::Pipeline) -> Result<T, String> {
        let result = self.connection().and_then(|c| pipe.query::<T>(c));
        if result.is_err() {
            self.connection = None;
        }
        result.map_err(|e| e.to_string())
    }

    /// `RL.DEMAND` for every key, `batch` keys per call, all calls pipelined.
    pub fn demand(&mut self, keys: &[String], batch: usize) -> Result<Vec<Demand>, String> {
        let mut pipe = redis::pipe();
        for chunk in keys.chunks(batch.max(1)) {
            pipe.cmd("RL.DEMAND").arg(chunk);
        }
        let calls: Vec<Vec<Vec<u64>>> = self.run(&pipe)?;
        let rows: Vec<Demand> = calls
            .into_iter()
            .flatten()
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
            .collect::<Result<_, _>>()?;
        if rows.len() != keys.len() {
            return Err(format!(
                "RL.DEMAND: {} rows for {} keys",
                rows.len(),
                keys.len()
            ));
        }
        Ok(rows)
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
        let mut pipe = redis::pipe();
        for chunk in writes.chunks(batch.max(1)) {
            let cmd = pipe
                .cmd("RL.SHARE")
                .arg(&policy.algorithm)
                .arg(policy.safe)
                .arg(policy.window_ms)
                .arg(policy.safe_burst);
            for (key, share, expire_at_ms) in chunk {
                cmd.arg(*key).arg(*share).arg(*expire_at_ms);
            }
        }
        let calls: Vec<Vec<Vec<u64>>> = self.run(&pipe)?;
        let rows: Vec<Held> = calls
            .into_iter()
            .flatten()
            .map(|r| match r[..] {
                [share, expire_at_ms, _, _] => Ok(Held {
                    share,
                    expire_at_ms,
                }),
                _ => Err(format!("RL.SHARE row {r:?}")),
            })
            .collect::<Result<_, _>>()?;
        if rows.len() != writes.len() {
            return Err(format!(
                "RL.SHARE: {} rows for {} keys",
                rows.len(),
                writes.len()
            ));
        }
        Ok(rows)
    }
}
