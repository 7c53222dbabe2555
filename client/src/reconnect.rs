//! A standalone server's or a sentinel-named master's connection, opened again on the next call
//! after it broke (one attempt per call; the limiter's circuit decides when calls are made).
//! Behind sentinels, opening again means asking them again, and a `READONLY` reply (the master
//! this connection reached is a replica now) drops the connection as a broken one does.

use std::sync::Mutex;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, Value};

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
    conn: Mutex<Option<BoundedConnection>>,
}

impl Reconnecting {
    pub(crate) async fn open(route: Route, timeout: Duration) -> redis::RedisResult<Reconnecting> {
        let conn = route.open(timeout).await?;
        Ok(Reconnecting {
            route,
            timeout,
            conn: Mutex::new(Some(conn)),
        })
    }

    fn current(&self) -> Option<BoundedConnection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) async fn req(&self, cmd: &Cmd) -> redis::RedisResult<Value> {
        let mut conn = match self.current() {
            Some(c) => c,
            None => {
                let c = self.route.open(self.timeout).await?;
                *self.conn.lock().unwrap_or_else(|p| p.into_inner()) = Some(c.clone());
                c
            }
        };
        let reply = conn.req_packed_command(cmd).await;
        let broken = match &reply {
            Err(e) => {
                e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_unrecoverable_error()
                    || e.code() == Some("READONLY")
            }
            Ok(Value::ServerError(e)) => e.code() == "READONLY",
            Ok(_) => false,
        };
        if broken {
            // The next call opens a new one (asking the sentinels again, behind sentinels).
            *self.conn.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        reply
    }
}
