//! A connection to the store (a standalone server or a Cluster) with the typed calls, each bounded
//! by a deadline. No fallback here: a call either decides or says why not ([`Error`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Value};

use crate::bounded::BoundedConnection;
use crate::connection::{Addr, ConnectionSettings, Target};
use crate::dial::{set_cluster_tls, tls_of, Dial};
use crate::reconnect::{Reconnecting, Route};
use crate::sentinel::SentinelRoute;

use crate::command::{ints, AllDecision, Backend, Decision, Policy, Shape, ShapeDelay, Shaped};
pub use crate::entries::{AllEntry, SlotEntry, SlotOp};
use crate::error::Error;
use crate::install::{Masters, Node, LOAD_DEADLINE};
use crate::library::LoadLibrary;

/// How long opening one connection (TCP, TLS, AUTH) may take, once started: a reconnect runs
/// beside the requests, which their class's fallback decides meanwhile.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// How long the first connection and the calls made while opening the store (detecting the
/// backend, checking access) may take: a start is not a request, and a loaded host must not
/// fail it.
pub const START_DEADLINE: Duration = Duration::from_secs(2);

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
    /// Commands sent again after their connection broke, shared by every clone (`resent`).
    resent: Arc<AtomicU64>,
}

impl Store {
    /// Connects to the store the URL names (connection.rs lists the forms: `redis://`,
    /// `rediss://`, `unix://`, `redis+cluster://`, `redis+sentinel://`) and detects its backend.
    /// A connection is opened again by the next call after it broke (the server restarted; behind
    /// sentinels, after a failover), and closed when a reply is larger than any rate-limit reply
    /// (`bounded::MAX_REPLY_BYTES`).
    pub async fn connect(url: &str) -> Result<Store, Error> {
        Store::connect_with(url, LoadLibrary::No).await
    }

    /// As [`Store::connect`], loading the Functions library where `load` allows
    /// (REDIS_LOAD_LIBRARY, docs/functions.md).
    pub async fn connect_with(url: &str, load: LoadLibrary) -> Result<Store, Error> {
        Store::open_with(
            &ConnectionSettings::parse(url).map_err(Error::Config)?,
            load,
        )
        .await
    }

    /// Connects to a Redis Cluster through any of its nodes (`host:port` or `redis://` URLs).
    pub async fn connect_cluster(nodes: &[&str]) -> Result<Store, Error> {
        Store::connect_cluster_with(nodes, LoadLibrary::No).await
    }

    /// As [`Store::connect_cluster`], loading the Functions library on every master where
    /// `load` allows, and later on a master found without it.
    pub async fn connect_cluster_with(nodes: &[&str], load: LoadLibrary) -> Result<Store, Error> {
        let mut addrs = Vec::new();
        for node in nodes {
            let url = if node.contains("://") {
                node.to_string()
            } else {
                format!("redis://{node}")
            };
            match ConnectionSettings::parse(&url)
                .map_err(Error::Config)?
                .target
            {
                Target::Server(addr) => addrs.push(addr),
                _ => return Err(Error::Config(format!("{node}: not one node's address"))),
            }
        }
        let settings = ConnectionSettings {
            target: Target::Cluster(addrs),
            ..ConnectionSettings::server(Addr::Unix(Default::default()))
        };
        Store::open_with(&settings, load).await
    }

    /// Connects as the settings say: TLS, credentials, a server, a Cluster or the master the
    /// sentinels name. A refusal that no retry can fix (a wrong password, a certificate not
    /// trusted, a missing permission, a file that cannot be read) is [`Error::Config`] naming
    /// its cause; an unreachable store is [`Error::Unreachable`].
    pub async fn open(settings: &ConnectionSettings) -> Result<Store, Error> {
        Store::open_with(settings, LoadLibrary::No).await
    }

    /// As [`Store::open`], loading the Functions library where `load` allows.
    pub async fn open_with(
        settings: &ConnectionSettings,
        load: LoadLibrary,
    ) -> Result<Store, Error> {
        settings.check().map_err(Error::Config)?;
        let tls = tls_of(settings).map_err(Error::Config)?;
        let place = settings.to_string();
        let refused = |e: redis::RedisError| at_start(&place, settings, e);
        let conn = match &settings.target {
            Target::Server(addr) => {
                let dial = Dial::new(addr.clone(), tls, &settings.auth, settings.db);
                // One connection attempt per call, no backoff of its own: the limiter's
                // circuit decides when the store is tried again.
                let conn = Reconnecting::open(Route::Direct(dial), START_DEADLINE, CONNECT_TIMEOUT)
                    .await
                    .map_err(refused)?;
                Conn::Standalone(conn)
            }
            Target::Sentinel { master, sentinels } => {
                let route = SentinelRoute {
                    master: master.clone(),
                    sentinels: sentinels
                        .iter()
                        .map(|a| Dial::new(a.clone(), tls.clone(), &settings.sentinel_auth, 0))
                        .collect(),
                    tls,
                    auth: settings.auth.clone(),
                    db: settings.db,
                };
                let conn =
                    Reconnecting::open(Route::Sentinel(route), START_DEADLINE, CONNECT_TIMEOUT)
                        .await
                        .map_err(refused)?;
                Conn::Standalone(conn)
            }
            Target::Cluster(nodes) => {
                if let Some(t) = &settings.tls {
                    set_cluster_tls(t).map_err(Error::Config)?;
                }
                let urls = nodes.iter().map(|a| format!("redis://{a}/"));
                let mut builder = redis::cluster::ClusterClient::builder(urls)
                    .connection_timeout(CONNECT_TIMEOUT)
                    .retries(1);
                if let Some(user) = &settings.auth.user {
                    builder = builder.username(user.clone());
                }
                if let Some(pass) = &settings.auth.password {
                    builder = builder.password(pass.expose().to_string());
                }
                let client = builder.build().map_err(refused)?;
                let conn = client
                    .get_async_generic_connection::<BoundedConnection>()
                    .await
                    .map_err(refused)?;
                Conn::Cluster(conn)
            }
        };
        Store::with_connection(conn, load)
            .await
            .map_err(|e| match e {
                Error::Config(why) => {
                    Error::Config(format!("{place} as {}: {why}", settings.auth.who()))
                }
                other => other,
            })
    }

    async fn with_connection(conn: Conn, load: LoadLibrary) -> Result<Store, Error> {
        let mut store = Store {
            conn,
            backend: Backend::Module,
            deadline: START_DEADLINE.max(LOAD_DEADLINE),
            load,
            resent: Arc::new(AtomicU64::new(0)),
        };
        store.backend = crate::install::detect(&store, load).await?;
        log::info!("ratelimit store backend: {}", store.backend.name());
        store.deadline = DEFAULT_DEADLINE;
        Ok(store)
    }

    /// Checks at start that the ACL user may run `policy`'s command on `key` (a key of the
    /// pattern the limiter uses): a peek (`COST 0`), which writes nothing and creates no key.
    /// A `NOPERM` is [`Error::Config`] naming the command and the key.
    pub async fn check_access(&self, key: &str, policy: &Policy) -> Result<(), Error> {
        let store = self.clone().with_deadline(START_DEADLINE);
        match store.decide(key, policy, 0).await {
            Err(Error::Config(why)) => Err(Error::Config(format!(
                "{} on key '{key}' ({:?} backend) refused: {why} (docs/operating.md gives the \
                 minimal ACL rule)",
                policy.algorithm.name(),
                self.backend
            ))),
            Err(e) => Err(e),
            Ok(_) => Ok(()),
        }
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

    /// Commands sent again on a new connection after theirs broke: a break after the server read
    /// one leaves it applied, so each may have counted twice (see [`crate::Stats::resent`]).
    pub fn resent(&self) -> u64 {
        self.resent.load(Ordering::Relaxed)
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
                        self.resent.fetch_add(1, Ordering::Relaxed);
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

    /// Sends a pipeline and waits at most the deadline for its replies (one value per command,
    /// errors as values): the regions controller's batched calls.
    pub async fn pipeline(&self, pipe: &redis::Pipeline) -> Result<Vec<Value>, Error> {
        let n = pipe.cmd_iter().count();
        let send = async {
            match &self.conn {
                Conn::Standalone(c) => c.req_pipeline(pipe, n).await,
                Conn::Cluster(c) => c.clone().req_packed_commands(pipe, 0, n).await,
            }
        };
        match tokio::time::timeout(self.deadline, send).await {
            Ok(reply) => Ok(reply?),
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
        op.args(&mut cmd);
        Decision::from_value(&self.query(&cmd).await?)
    }

    /// Gives back `id`'s slot of `key`: whether the store held it. The module answers
    /// `RL.CONCURRENCY key N TTL RELEASE id`; the Functions library's holders are a plain sorted
    /// set scored by expiry (functions/ratelimit.lua), so there, as on the scripts backend, a bare
    /// `ZREM key id` gives the slot back, as the sorted-set recipe's caller does, at a fraction of
    /// `FCALL rl_concurrency … RELEASE`'s cost (scripts/bench concurrency). It leaves the key's
    /// expiry as it was (the key still goes by itself at the last holder's expiry), and a holder
    /// that expired but was not dropped yet counts as held: 1 where RELEASE answers 0.
    pub async fn release_slot(
        &self,
        key: &str,
        limit: u64,
        ttl_ms: u64,
        id: &str,
    ) -> Result<bool, Error> {
        if self.backend == Backend::Module {
            return Ok(self
                .concurrency(key, limit, ttl_ms, SlotOp::Release(id))
                .await?
                .allowed);
        }
        let mut cmd = redis::cmd("ZREM");
        cmd.arg(key).arg(id);
        match self.query(&cmd).await? {
            Value::Int(n) => Ok(n == 1),
            other => Err(Error::Reply(format!("ZREM reply {other:?}"))),
        }
    }

    /// `RL.ALL numkeys key … limiter …`: one atomic decision over several limiters (all keys in
    /// one hash slot on a Cluster).
    pub async fn all(&self, limiters: &[(&str, Policy, u64)]) -> Result<AllDecision, Error> {
        let entries: Vec<(&str, AllEntry<'_>)> = limiters
            .iter()
            .map(|(k, p, c)| (*k, AllEntry::Rate(*p, *c)))
            .collect();
        self.all_entries(&entries).await
    }

    /// `RL.ALL` over rate checks and concurrency slots (`CONCURRENCY N TTL ACQUIRE id | PEEK`):
    /// a request denied by any takes nothing from the others. The module's alone: the Functions
    /// library's `rl_all` takes no concurrency keys.
    pub async fn all_entries(
        &self,
        entries: &[(&str, AllEntry<'_>)],
    ) -> Result<AllDecision, Error> {
        let keys: Vec<&str> = entries.iter().map(|(k, _)| *k).collect();
        let mut cmd = self.backend.command("ALL", &keys);
        for (_, entry) in entries {
            match entry {
                AllEntry::Rate(policy, cost) => {
                    cmd.arg(policy.algorithm.name());
                    policy.args(&mut cmd);
                    cmd.arg("COST").arg(*cost);
                }
                AllEntry::Slot(slot) => {
                    cmd.arg("CONCURRENCY").arg(slot.limit).arg(slot.ttl_ms);
                    slot.op.args(&mut cmd);
                }
            }
        }
        match self.query(&cmd).await? {
            Value::Array(items) if items.len() == entries.len() + 1 => {
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

/// A refusal while opening the store, in an operator's words: what was refused and why.
fn at_start(place: &str, settings: &ConnectionSettings, e: redis::RedisError) -> Error {
    let who = settings.auth.who();
    let text = e.to_string();
    if e.kind() == redis::ErrorKind::AuthenticationFailed || e.code() == Some("WRONGPASS") {
        return Error::Config(format!(
            "{place}: {who} was refused: wrong user name or password (WRONGPASS)"
        ));
    }
    if e.code() == Some("NOPERM") {
        return Error::Config(format!("{place}: {who} lacks a permission: {text}"));
    }
    if text.contains("TLS with") || e.kind() == redis::ErrorKind::InvalidClientConfig {
        return Error::Config(format!("{place}: {text}"));
    }
    match Error::classify(&e) {
        Error::Unreachable(why) => Error::Unreachable(format!("{place}: {why}")),
        other => other,
    }
}
