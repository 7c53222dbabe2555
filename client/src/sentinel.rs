//! The master that sentinels name: each sentinel is asked in turn (`SENTINEL
//! get-master-addr-by-name`, over the sentinels' TLS and with their own credentials), and the
//! first answer is dialled with the store's TLS and credentials. A failover is followed by asking
//! again: the reconnecting connection drops its master on a closed connection or a `READONLY`
//! reply (the old master came back as a replica), and the next call asks the sentinels.

use std::io;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::Value;

use crate::bounded::BoundedConnection;
use crate::connection::{Addr, Auth};
use crate::dial::Dial;
use crate::tls::TlsClient;

/// A master name and how to reach the sentinels and the master.
#[derive(Clone)]
pub(crate) struct SentinelRoute {
    pub(crate) master: String,
    pub(crate) sentinels: Vec<Dial>,
    pub(crate) tls: Option<TlsClient>,
    pub(crate) auth: Auth,
    pub(crate) db: i64,
}

impl SentinelRoute {
    /// A connection to the master the first answering sentinel names, and its address.
    pub(crate) async fn connect(
        &self,
        timeout: Duration,
    ) -> redis::RedisResult<(BoundedConnection, Addr)> {
        let mut why = Vec::new();
        for sentinel in &self.sentinels {
            match self.ask(sentinel, timeout).await {
                Ok(addr) => {
                    let dial = Dial::new(addr.clone(), self.tls.clone(), &self.auth, self.db);
                    return BoundedConnection::open(&dial, timeout)
                        .await
                        .map(|c| (c, addr));
                }
                Err(e) => why.push(format!("sentinel {}: {e}", sentinel.addr)),
            }
        }
        Err(redis::RedisError::from(io::Error::new(
            io::ErrorKind::NotConnected,
            format!(
                "no sentinel named the master '{}': {}",
                self.master,
                why.join("; ")
            ),
        )))
    }

    /// The master's address as `sentinel` names it now.
    pub(crate) async fn ask(&self, sentinel: &Dial, timeout: Duration) -> redis::RedisResult<Addr> {
        let mut conn = BoundedConnection::open(sentinel, timeout).await?;
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("get-master-addr-by-name").arg(&self.master);
        let reply = tokio::time::timeout(timeout, conn.req_packed_command(&cmd))
            .await
            .map_err(|_| redis::RedisError::from(io::Error::from(io::ErrorKind::TimedOut)))??
            .extract_error()?;
        let text = |v: &Value| match v {
            Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
            Value::SimpleString(s) => Some(s.clone()),
            _ => None,
        };
        match &reply {
            Value::Array(items) => {
                if let [host, port] = items.as_slice() {
                    let host = text(host);
                    let port = text(port).and_then(|p| p.parse::<u16>().ok());
                    if let (Some(host), Some(port)) = (host, port) {
                        return Ok(Addr::Tcp { host, port });
                    }
                }
            }
            Value::Nil => {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "the sentinel watches no master of that name",
                    self.master.clone(),
                )))
            }
            _ => {}
        }
        Err(redis::RedisError::from((
            redis::ErrorKind::TypeError,
            "SENTINEL get-master-addr-by-name answered",
            format!("{reply:?}"),
        )))
    }
}
