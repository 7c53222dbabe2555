//! A connection to the store (a standalone server or a Cluster) with the typed calls, each bounded
//! by a deadline. No fallback here: a call either decides or says why not ([`Error`]).

use std::time::Duration;

use std::sync::Arc;

use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, IntoConnectionInfo, Value};

use crate::bounded::{BoundedConnection, Reconnecting};

use crate::command::{ints, AllDecision, Backend, Decision, Policy, Shape, ShapeDelay, Shaped};
use crate::error::Error;
use crate::install::{Masters, Node, LOAD_DEADLINE};
use crate::library::LoadLibrary;

/// What an `RL.CONCURRENCY` call does with a slot, and the holder's id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotOp<'a> {
    Acquire(&'a str),
    Renew(&'a str),
    Release(&'a str),
    Peek,
}

/// The default deadline of one store call: a few milliseconds, so that a slow store costs a
/// request at most this much before its class's fallback decides.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(5);

#[derive(Clone)]
enum Conn {
    Standalone(Arc<Reconnecting>),
    Cluster(ClusterConnection<BoundedConnection>),
}

/// The store: a connection (multiplexed, reconnecting), the backend found on the server, and the
/// deadline of each call. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct Store {
    conn: Conn,
    backend: Backend,
    deadline: Duration,
    load: LoadLibrary,
}

impl Store {
    /// Connects to a standalone server (`redis://127.0.0.1:6379/`) and detects its backend.
    /// The connection is opened again by the next call after it broke (the server restarted),
    /// and closed when a reply is larger than any rate-limit reply (`bounded::MAX_REPLY_BYTES`).
    pub async fn connect(url: &str) -> Result<Store, Error> {
        Store::connect_with(url, LoadLibrary::No).await
    }

    /// As [`Store::connect`], loading the Functions library where `load` allows
    /// (REDIS_LOAD_LIBRARY, docs/functions.md).
    pub async fn connect_with(url: &str, load: LoadLibrary) -> Result<Store, Error> {
        let info = url
            .into_connection_info()
            .map_err(|e| Error::Unreachable(e.to_string()))?;
        // One connection attempt per call, no backoff of its own: the limiter's circuit decides
        // when the store is tried again.
        let conn = Reconnecting::open(info, Duration::from_millis(500)).await?;
        Store::with_connection(Conn::Standalone(Arc::new(conn)), load).await
    }

    /// Connects to a Redis Cluster through any of its nodes and detects the backend.
    pub async fn connect_cluster(nodes: &[&str]) -> Result<Store, Error> {
        Store::connect_cluster_with(nodes, LoadLibrary::No).await
    }

    /// As [`Store::connect_cluster`], loading the Functions library on every master where
    /// `load` allows, and later on a master found without it.
    pub async fn connect_cluster_with(nodes: &[&str], load: LoadLibrary) -> Result<Store, Error> {
        let client = redis::cluster::ClusterClient::builder(nodes.iter().copied())
            .connection_timeout(Duration::from_millis(500))
            .retries(1)
            .build()
            .map_err(|e| Error::Unreachable(e.to_string()))?;
        let conn = client
            .get_async_generic_connection::<BoundedConnection>()
            .await?;
        Store::with_connection(Conn::Cluster(conn), load).await
    }

    async fn with_connection(conn: Conn, load: LoadLibrary) -> Result<Store, Error> {
        let mut store = Store {
            conn,
            backend: Backend::Module,
            deadline: LOAD_DEADLINE,
            load,
        };
        store.backend = crate::install::detect(&store, load).await?;
        log::info!("ratelimit store backend: {}", store.backend.name());
        store.deadline = DEFAULT_DEADLINE;
        Ok(store)
    }

    /// The same store with another deadline per call.
    pub fn with_deadline(mut self, deadline: Duration) -> Store {
        self.deadline = deadline;
        self
    }

    /// The same store through another backend (when both are installed).
    pub fn with_backend(mut self, backend: Backend) -> Store {
        self.backend = backend;
        self
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Sends one command and waits at most the deadline for its reply. The scripts backend's
    /// call on a server without its script (NOSCRIPT) is sent again as `EVAL`; the Functions
    /// backend's on a master without the library, when the store may load it, again after the
    /// library is loaded there: each within a deadline of its own.
    pub async fn query(&self, cmd: &Cmd) -> Result<Value, Error> {
        match self.query_once(cmd).await {
            Err(Error::Unsupported(t))
                if self.backend == Backend::Scripts && t.starts_with("NOSCRIPT") =>
            {
                match crate::install::eval_of(cmd) {
                    Some(eval) => {
                        let slow = self.clone().with_deadline(LOAD_DEADLINE);
                        slow.query_once(&eval).await
                    }
                    None => Err(Error::Unsupported(t)),
                }
            }
            Err(Error::Unsupported(t))
                if self.backend == Backend::Functions
                    && self.load != LoadLibrary::No
                    && t.to_ascii_lowercase().contains("function not found") =>
            {
                crate::install::load_where_absent(self).await?;
                self.query_once(cmd).await
            }
            other => other,
        }
    }

    async fn query_once(&self, cmd: &Cmd) -> Result<Value, Error> {
        let send = async {
            let mut retried = false;
            loop {
                let reply = match &self.conn {
                    Conn::Standalone(c) => c.req(cmd).await,
                    Conn::Cluster(c) => c.clone().req_packed_command(cmd).await,
                };
                match reply {
                    // A connection found broken (the server restarted, a proxy dropped it) has
                    // started its reconnect: one more try, within the same deadline.
                    Err(e) if !retried && matches!(Error::classify(&e), Error::Unreachable(_)) => {
                        retried = true;
                    }
                    other => return other,
                }
            }
        };
        match tokio::time::timeout(self.deadline, send).await {
            Ok(reply) => Ok(reply?.extract_error()?),
            Err(_) => Err(Error::Timeout),
        }
    }

    /// `RL.GCRA` / `RL.TOKENBUCKET` / `RL.SLIDINGLOG` / `RL.SLIDINGCOUNTER` / `RL.FIXEDWINDOW
    /// key L W [BURST B] COST cost`, by the policy's algorithm. `cost` 0 is a peek.
    pub async fn decide(&self, key: &str, policy: &Policy, cost: u64) -> Result<Decision, Error> {
        let mut cmd = self.backend.command(policy.algorithm.name(), &[key]);
        policy.args(&mut cmd);
        cmd.arg("COST").arg(cost);
        Decision::from_value(&self.query(&cmd).await?)
    }

    /// `RL.GCRA key L W [BURST B] [COST n]`.
    pub async fn gcra(&self, key: &str, policy: Policy, cost: u64) -> Result<Decision, Error> {
        self.decide(
            key,
            &Policy {
                algorithm: crate::command::Algorithm::Gcra,
                ..policy
            },
            cost,
        )
        .await
    }

    /// `RL.TOKENBUCKET key L W [BURST B] [COST n]`.
    pub async fn token_bucket(
        &self,
        key: &str,
        policy: Policy,
        cost: u64,
    ) -> Result<Decision, Error> {
        let policy = Policy {
            algorithm: crate::command::Algorithm::TokenBucket,
            ..policy
        };
        self.decide(key, &policy, cost).await
    }

    /// `RL.LEASE key L W [BURST B] WANT n`: up to n tokens of the token bucket at `key`;
    /// `granted` is how many.
    pub async fn lease(&self, key: &str, policy: &Policy, want: u64) -> Result<Decision, Error> {
        let mut cmd = self.backend.command("LEASE", &[key]);
        policy.args(&mut cmd);
        cmd.arg("WANT").arg(want);
        Decision::from_value(&self.query(&cmd).await?)
    }

    /// `RL.REFUND key n`: gives back n unspent tokens; `None` for a missing key. `granted` is
    /// the tokens given back, the rest is what a peek answers after it.
    pub async fn refund(&self, key: &str, tokens: u64) -> Result<Option<Decision>, Error> {
        let mut cmd = self.backend.command("REFUND", &[key]);
        cmd.arg(tokens);
        match self.query(&cmd).await? {
            Value::Nil => Ok(None),
            v => Decision::from_value(&v).map(Some),
        }
    }

    /// `RL.PEEK key`: what a cost-1 request would get now; `None` for a missing key.
    pub async fn peek(&self, key: &str) -> Result<Option<Decision>, Error> {
        let cmd = self.backend.command("PEEK", &[key]);
        match self.query(&cmd).await? {
            Value::Nil => Ok(None),
            v => Decision::from_value(&v).map(Some),
        }
    }

    /// `RL.SHAPE key L W [QUEUE q] [DELAY d | NODELAY] [COST n]`.
    pub async fn shape(&self, key: &str, shape: &Shape, cost: u64) -> Result<Shaped, Error> {
        let mut cmd = self.backend.command("SHAPE", &[key]);
        cmd.arg(shape.limit).arg(shape.window_ms);
        if let Some(q) = shape.queue {
            cmd.arg("QUEUE").arg(q);
        }
        match shape.delay {
            ShapeDelay::Default => {}
            ShapeDelay::Delay(d) => {
                cmd.arg("DELAY").arg(d);
            }
            ShapeDelay::NoDelay => {
                cmd.arg("NODELAY");
            }
        }
        cmd.arg("COST").arg(cost);
        let [a, b, c, d, e, delay] = ints::<6>(&self.query(&cmd).await?)?;
        Ok(Shaped {
            decision: Decision::from_reply([a, b, c, d, e])?,
            delay_ms: u64::try_from(delay).map_err(|_| Error::Reply("negative delay".into()))?,
        })
    }

    /// `RL.CONCURRENCY key N TTL ACQUIRE id | RENEW id | RELEASE id | PEEK` (`FCALL
    /// rl_concurrency` on the Functions library): `allowed` is whether the slot was taken,
    /// renewed or given back (for PEEK: whether an ACQUIRE would be admitted).
    pub async fn concurrency(
        &self,
        key: &str,
        limit: u64,
        ttl_ms: u64,
        op: SlotOp<'_>,
    ) -> Result<Decision, Error> {
        let mut cmd = self.backend.command("CONCURRENCY", &[key]);
        cmd.arg(limit).arg(ttl_ms);
        match op {
            SlotOp::Acquire(id) => cmd.arg("ACQUIRE").arg(id),
            SlotOp::Renew(id) => cmd.arg("RENEW").arg(id),
            SlotOp::Release(id) => cmd.arg("RELEASE").arg(id),
            SlotOp::Peek => cmd.arg("PEEK"),
        };
        Decision::from_value(&self.query(&cmd).await?)
    }

    /// `RL.ALL numkeys key … limiter …`: one atomic decision over several limiters (all keys in
    /// one hash slot on a Cluster).
    pub async fn all(&self, limiters: &[(&str, Policy, u64)]) -> Result<AllDecision, Error> {
        let keys: Vec<&str> = limiters.iter().map(|(k, _, _)| *k).collect();
        let mut cmd = self.backend.command("ALL", &keys);
        for (_, policy, cost) in limiters {
            cmd.arg(policy.algorithm.name());
            policy.args(&mut cmd);
            cmd.arg("COST").arg(*cost);
        }
        match self.query(&cmd).await? {
            Value::Array(items) if items.len() == limiters.len() + 1 => {
                let mut decisions = items.iter().map(Decision::from_value);
                let combined = decisions
                    .next()
                    .ok_or_else(|| Error::Reply("empty RL.ALL reply".into()))??;
                Ok(AllDecision {
                    combined,
                    limiters: decisions.collect::<Result<_, _>>()?,
                })
            }
            other => Err(Error::Reply(format!("RL.ALL reply {other:?}"))),
        }
    }
}

impl Masters for Store {
    async fn query(&self, cmd: &Cmd) -> Result<Value, Error> {
        Store::query(self, cmd).await
    }

    /// A command on every master: each one's reply (a standalone server is its one master).
    async fn on_masters(&self, cmd: &Cmd) -> Result<Vec<(Node, Value)>, Error> {
        use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
        match &self.conn {
            Conn::Standalone(_) => Ok(vec![(Node(None), self.query_once(cmd).await?)]),
            Conn::Cluster(c) => {
                let all = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                let reply = tokio::time::timeout(self.deadline, c.clone().route_command(cmd, all))
                    .await
                    .map_err(|_| Error::Timeout)??;
                let Value::Map(replies) = reply else {
                    return Err(Error::Reply(format!("per-node replies {reply:?}")));
                };
                let mut out = Vec::new();
                for (addr, v) in replies {
                    let addr = match addr {
                        Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
                        other => return Err(Error::Reply(format!("node address {other:?}"))),
                    };
                    let (host, port) = addr
                        .rsplit_once(':')
                        .and_then(|(h, p)| Some((h.to_string(), p.parse().ok()?)))
                        .ok_or_else(|| Error::Reply(format!("node address {addr}")))?;
                    out.push((Node(Some((host, port))), v.extract_error()?));
                }
                Ok(out)
            }
        }
    }

    /// A command on one master.
    async fn on_node(&self, node: &Node, cmd: &Cmd) -> Result<Value, Error> {
        use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
        match (&self.conn, &node.0) {
            (Conn::Cluster(c), Some((host, port))) => {
                let to = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: host.clone(),
                    port: *port,
                });
                let reply = tokio::time::timeout(self.deadline, c.clone().route_command(cmd, to))
                    .await
                    .map_err(|_| Error::Timeout)??;
                Ok(reply.extract_error()?)
            }
            _ => self.query_once(cmd).await,
        }
    }

    fn loading(&self) -> Store {
        self.clone().with_deadline(LOAD_DEADLINE)
    }
}
