//! A standalone server's or a sentinel-named master's connection, opened again on the next call
//! after it broke (one attempt per call; the limiter's circuit decides when calls are made).
//! Behind sentinels, opening again means asking them again, and a `READONLY` reply (the master
//! this connection reached is a replica now) drops the connection as a broken one does.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, Value};
use tokio::sync::Notify;

use crate::bounded::BoundedConnection;
use crate::dial::Dial;
use crate::sentinel::SentinelRoute;

/// Where a connection is opened.
#[derive(Clone)]
pub(crate) enum Route {
    Direct(Dial),
    Sentinel(SentinelRoute),
}

impl Route {
    async fn open(&self, timeout: Duration) -> redis::RedisResult<BoundedConnection> {
        match self {
            Route::Direct(dial) => BoundedConnection::open(dial, timeout).await,
            Route::Sentinel(route) => route.connect(timeout).await.map(|(c, _)| c),
        }
    }
}

pub(crate) struct Reconnecting {
    route: Route,
    timeout: Duration,
    slot: Mutex<Slot>,
    /// Woken when an opening ends, whether it succeeded or not.
    opened: Notify,
}

#[derive(Default)]
struct Slot {
    conn: Option<BoundedConnection>,
    /// An opening runs in the background: calls wait for it rather than start another.
    opening: bool,
    /// Why the last opening failed.
    failed: Option<String>,
}

impl Reconnecting {
    /// Opens the first connection here, so that a refusal at start keeps its kind (a wrong
    /// password, an untrusted certificate).
    pub(crate) async fn open(route: Route, timeout: Duration) -> redis::RedisResult<Reconnecting> {
        let conn = route.open(timeout).await?;
        Ok(Reconnecting {
            route,
            timeout,
            slot: Mutex::new(Slot {
                conn: Some(conn),
                ..Slot::default()
            }),
            opened: Notify::new(),
        })
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection, opening it again when it broke. The opening runs in a task of its own,
    /// bounded by the connect timeout and not by the calls' deadlines: behind sentinels it is a
    /// TLS handshake with a sentinel and another with the master, longer than a 5 ms deadline,
    /// and a call that stops waiting must not cancel it (else no call would ever reconnect).
    async fn connection(self: &Arc<Self>) -> redis::RedisResult<BoundedConnection> {
        let opened = self.opened.notified();
        tokio::pin!(opened);
        opened.as_mut().enable();
        {
            let mut slot = self.slot();
            if let Some(c) = &slot.conn {
                return Ok(c.clone());
            }
            if !slot.opening {
                slot.opening = true;
                let me = Arc::clone(self);
                tokio::spawn(async move {
                    let result = me.route.open(me.timeout).await;
                    let mut slot = me.slot();
                    slot.opening = false;
                    match result {
                        Ok(c) => {
                            slot.conn = Some(c);
                            slot.failed = None;
                        }
                        Err(e) => slot.failed = Some(e.to_string()),
                    }
                    drop(slot);
                    me.opened.notify_waiters();
                });
            }
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
            self.slot().conn = None;
        }
    }
}

fn readonly(v: &Value) -> bool {
    matches!(v, Value::ServerError(e) if e.code() == "READONLY")
}
