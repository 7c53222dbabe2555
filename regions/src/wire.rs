//! One server of a region's store, as the controller talks to it: a connection made on
//! demand and dropped on any failure, and a node's calls run as one pipeline. The standalone
//! store (`link`) and each master of a Cluster (`route`) are one of these.

use std::time::Duration;

use redis::{Client, Connection, ConnectionInfo, RedisResult};

/// One server the controller talks to: a standalone store or one master of a cluster.
pub struct Server {
    client: Client,
    connection: Option<Connection>,
    timeout: Duration,
}

impl Server {
    pub fn new(info: ConnectionInfo, timeout: Duration) -> Result<Server, String> {
        let name = info.addr.to_string();
        let client = Client::open(info).map_err(|e| format!("{name}: {e}"))?;
        Ok(Server {
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
    pub fn run<T: redis::FromRedisValue>(&mut self, pipe: &redis::Pipeline) -> Result<T, String> {
        let result = self.connection().and_then(|c| pipe.query::<T>(c));
        if result.is_err() {
            self.connection = None;
        }
        result.map_err(|e| e.to_string())
    }

    /// One command (`CLUSTER SLOTS`); drops the connection on any error.
    pub fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Result<T, String> {
        let result = self.connection().and_then(|c| cmd.query::<T>(c));
        if result.is_err() {
            self.connection = None;
        }
        result.map_err(|e| e.to_string())
    }

    pub fn address(&self) -> String {
        self.client.get_connection_info().addr.to_string()
    }
}

/// The calls for one server: each the indices of its keys.
#[derive(Default)]
pub struct Node {
    pub calls: Vec<Vec<usize>>,
}

/// Adds one call for the keys at these indices to a pipeline.
pub type Add<'a> = &'a (dyn Fn(&mut redis::Pipeline, &[usize]) + Sync);

/// Each key's index with its row.
pub type Rows = Vec<(usize, Vec<u64>)>;

/// Runs a node's calls as one pipeline: each key's index with its row, the calls' rows checked
/// against their keys.
pub fn run_calls(server: &mut Server, node: &Node, add: Add<'_>) -> Result<Rows, String> {
    if node.calls.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    for call in &node.calls {
        add(&mut pipe, call);
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
