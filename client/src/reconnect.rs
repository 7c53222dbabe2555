//! A standalone server's or a sentinel-named master's connection, opened again on the next call
//! after it broke (one attempt per call; the limiter's circuit decides when calls are made).
//! Behind sentinels, opening again means asking them again; a `READONLY` reply (the master this
//! connection reached is a replica now) drops the connection as a broken one does, and so does a
//! sentinel's `+switch-master` naming another master (switch_master.rs), which also starts the
//! opening of the new one at once.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, Value};
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use crate::bounded::BoundedConnection;
use crate::connection::Addr;
use crate::dial::Dial;
use crate::sentinel::SentinelRoute;

/// Where a connection is opened.
#[derive(Clone)]
pub(crate) enum Route {
    Direct(Dial),
    Sentinel(SentinelRoute),
}

impl Route {
    /// A connection, and the master's address behind sentinels.
    async fn open(
        &self,
        timeout: Duration,
    ) -> redis::RedisResult<(BoundedConnection, Option<Addr>)> {
        match self {
            Route::Direct(dial) => Ok((BoundedConnection::open(dial, timeout).await?, None)),
            Route::Sentinel(route) => route.connect(timeout).await.map(|(c, a)| (c, Some(a))),
        }
    }
}

pub(crate) struct Reconnecting {
    route: Route,
    timeout: Duration,
    slot: Mutex<Slot>,
    /// Woken when an opening ends, whether it succeeded or not.
    opened: Notify,
    /// The `+switch-master` watcher, behind sentinels; stopped with the connection.
    watcher: Mutex<Option<AbortHandle>>,
}

#[derive(Default)]
struct Slot {
    conn: Option<BoundedConnection>,
    /// The master `conn` reached, behind sentinels.
    addr: Option<Addr>,
    /// The master the sentinels announced last, and how many announcements of a new one came:
    /// an opening that began before an announcement and reached another master is not kept.
    announced: Option<Addr>,
    switches: u64,
    /// An opening runs in the background: calls wait for it rather than start another.
    opening: bool,
    /// Why the last opening failed.
    failed: Option<String>,
}

impl Reconnecting {
    /// Opens the first connection here, within `first`, so that a refusal at start keeps its
    /// kind (a wrong password, an untrusted certificate); later openings take `timeout`.
    /// Behind sentinels, the `+switch-master` watcher starts here too.
    pub(crate) async fn open(
        route: Route,
        first: Duration,
        timeout: Duration,
    ) -> redis::RedisResult<Arc<Reconnecting>> {
        let (conn, addr) = route.open(first).await?;
        let me = Arc::new(Reconnecting {
            route,
            timeout,
            slot: Mutex::new(Slot {
                conn: Some(conn),
                addr,
                ..Slot::default()
            }),
            opened: Notify::new(),
            watcher: Mutex::new(None),
        });
        if let Route::Sentinel(sentinels) = &me.route {
            let weak = Arc::downgrade(&me);
            let watcher = crate::switch_master::watch(sentinels.clone(), timeout, move |addr| {
                if let Some(me) = weak.upgrade() {
                    me.master_is(addr);
                }
            });
            *me.watcher.lock().unwrap_or_else(|p| p.into_inner()) = Some(watcher);
        }
        Ok(me)
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection, opening it again when it broke. Calls wait for the opening rather than
    /// start another (see [`Reconnecting::begin_opening`]).
    async fn connection(self: &Arc<Self>) -> redis::RedisResult<BoundedConnection> {
        let opened = self.opened.notified();
        tokio::pin!(opened);
        opened.as_mut().enable();
        {
            let mut slot = self.slot();
            if let Some(c) = &slot.conn {
                return Ok(c.clone());
            }
            self.begin_opening(&mut slot);
        }
        opened.await;
        let slot = self.slot();
        match (&slot.conn, &slot.failed) {
            (Some(c), _) => Ok(c.clone()),
            (None, why) => Err(redis::RedisError::from(io::Error::new(
                io::ErrorKind::NotConnected,
                why.clone().unwrap_or_else(|| "not connected".into()),
            ))),
        }
    }

    /// Opens the connection again unless an opening is under way. The opening runs in a task of
    /// its own, bounded by the connect timeout and not by the calls' deadlines: behind sentinels
    /// it is a TLS handshake with a sentinel and another with the master, longer than a 5 ms
    /// deadline, and a call that stops waiting must not cancel it (else no call would ever
    /// reconnect).
    fn begin_opening(self: &Arc<Self>, slot: &mut Slot) {
        if slot.opening {
            return;
        }
        slot.opening = true;
        let switches = slot.switches;
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let result = me.route.open(me.timeout).await;
            let mut slot = me.slot();
            slot.opening = false;
            match result {
                // A sentinel asked before an announcement named the old master.
                Ok((_, addr)) if slot.switches != switches && addr != slot.announced => {
                    slot.failed = Some("the master changed while connecting".into());
                    me.begin_opening(&mut slot);
                    return;
                }
                Ok((c, addr)) => {
                    slot.conn = Some(c);
                    slot.addr = addr;
                    slot.failed = None;
                }
                Err(e) => slot.failed = Some(e.to_string()),
            }
            drop(slot);
            me.opened.notify_waiters();
        });
    }

    /// The sentinels name `addr` as the master: a connection to another one is dropped and the
    /// new master opened at once, before any call needs it.
    fn master_is(self: &Arc<Self>, addr: Addr) {
        let mut slot = self.slot();
        let new = slot.announced.as_ref() != Some(&addr);
        if new {
            slot.announced = Some(addr.clone());
            slot.switches += 1;
        }
        let elsewhere = slot.conn.is_some() && slot.addr.as_ref() != Some(&addr);
        if elsewhere {
            slot.conn = None;
            slot.addr = None;
        }
        if elsewhere || (new && slot.conn.is_none()) {
            self.begin_opening(&mut slot);
        }
    }

    pub(crate) async fn req(self: &Arc<Self>, cmd: &Cmd) -> redis::RedisResult<Value> {
        let mut conn = self.connection().await?;
        let reply = conn.req_packed_command(cmd).await;
        match &reply {
            Err(e) => self.after(Some(e), false),
            Ok(v) => self.after(None, readonly(v)),
        }
        reply
    }

    /// A pipeline of `n` commands: their replies, errors as values.
    pub(crate) async fn req_pipeline(
        self: &Arc<Self>,
        pipe: &Pipeline,
        n: usize,
    ) -> redis::RedisResult<Vec<Value>> {
        let mut conn = self.connection().await?;
        let reply = conn.req_packed_commands(pipe, 0, n).await;
        match &reply {
            Err(e) => self.after(Some(e), false),
            Ok(values) => self.after(None, values.iter().any(readonly)),
        }
        reply
    }

    /// Drops the connection after an error that says it is broken, or a `READONLY` reply (the
    /// server is no longer the master): the next call opens a new one (asking the sentinels
    /// again, behind sentinels).
    fn after(&self, error: Option<&redis::RedisError>, readonly: bool) {
        let broken = error.is_some_and(|e| {
            e.is_io_error()
                || e.is_connection_dropped()
                || e.is_unrecoverable_error()
                || e.code() == Some("READONLY")
        });
        if broken || readonly {
            let mut slot = self.slot();
            slot.conn = None;
            slot.addr = None;
        }
    }
}

impl Drop for Reconnecting {
    fn drop(&mut self) {
        if let Some(watcher) = self
            .watcher
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            watcher.abort();
        }
    }
}

fn readonly(v: &Value) -> bool {
    matches!(v, Value::ServerError(e) if e.code() == "READONLY")
}
