//! Connections whose replies are bounded: every byte from the server passes a RESP scanner that
//! closes the connection (an I/O error: the store is unreachable, the class falls back) as soon as
//! a reply declares or reaches more than [`MAX_REPLY_BYTES`], nests deeper than [`MAX_DEPTH`], or
//! is not RESP at all. A hostile or broken store (`$536870911` and then 300 MB) costs one
//! connection, not the gateway's memory: the `redis` crate would buffer the whole reply first.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, ConnectionAddr, IntoConnectionInfo, Pipeline, RedisFuture, Value};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::connection::Addr;
use crate::dial::{cluster_tls_client, Dial};

/// The largest reply a connection takes. An `RL.*` reply is a few dozen bytes, `RL.ALL`'s about
/// 40 per limiter; `COMMAND INFO` and `FUNCTION LIST` at connect, and `INFO` through
/// `Store::query`, stay far below.
pub const MAX_REPLY_BYTES: u64 = 1 << 20;
/// The deepest nesting of aggregates in a reply (`RL.ALL` has 2, `COMMAND INFO` about 4).
pub const MAX_DEPTH: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// The next byte is a type byte.
    Type,
    /// Reading a header or a simple value up to its `\n`.
    Line(u8),
    /// This many bytes of a bulk value (and its `\r\n`) still to come.
    Bulk(u64),
}

/// Follows the reply stream one byte at a time; knows where each top-level reply ends.
#[derive(Debug)]
pub(crate) struct Scanner {
    state: State,
    line: Vec<u8>,
    /// Elements still expected by each open aggregate, innermost last.
    open: Vec<u64>,
    /// Bytes of the current top-level reply, counting what its headers declare.
    reply: u64,
}

impl Scanner {
    pub(crate) fn new() -> Scanner {
        Scanner {
            state: State::Type,
            line: Vec::new(),
            open: Vec::new(),
            reply: 0,
        }
    }

    /// Scans the next bytes from the server; `Err` when the reply is out of bounds.
    pub(crate) fn feed(&mut self, mut bytes: &[u8]) -> Result<(), &'static str> {
        while let Some((&b, rest)) = bytes.split_first() {
            match self.state {
                State::Bulk(left) => {
                    let n = left.min(bytes.len() as u64);
                    bytes = bytes.get(n as usize..).unwrap_or_default();
                    self.state = State::Bulk(left - n);
                    if left == n {
                        self.element_done();
                    }
                    continue;
                }
                State::Type => {
                    self.count(1)?;
                    self.state = State::Line(b);
                    self.line.clear();
                }
                State::Line(kind) => {
                    self.count(1)?;
                    if b != b'\n' {
                        self.line.push(b);
                    } else {
                        self.header(kind)?;
                    }
                }
            }
            bytes = rest;
        }
        Ok(())
    }

    fn count(&mut self, n: u64) -> Result<(), &'static str> {
        self.reply = self.reply.saturating_add(n);
        if self.reply > MAX_REPLY_BYTES {
            return Err("a reply larger than any rate-limit reply");
        }
        Ok(())
    }

    /// A complete line of type `kind` (without its `\n`).
    fn header(&mut self, kind: u8) -> Result<(), &'static str> {
        let text = self.line.strip_suffix(b"\r").unwrap_or(&self.line);
        let number = || -> Result<i64, &'static str> {
            std::str::from_utf8(text)
                .ok()
                .and_then(|t| t.parse().ok())
                .ok_or("a reply header that is not a number")
        };
        match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => self.element_done(),
            b'$' | b'=' | b'!' => match u64::try_from(number()?) {
                Err(_) => self.element_done(),
                Ok(len) => {
                    let with_crlf = len.saturating_add(2);
                    // Counted as declared: a huge length is refused before its bytes come.
                    self.count(with_crlf)?;
                    self.state = State::Bulk(with_crlf);
                }
            },
            b'*' | b'~' | b'>' | b'%' | b'|' => match u64::try_from(number()?) {
                Ok(n) if n > 0 => {
                    let n = if matches!(kind, b'%' | b'|') {
                        n.saturating_mul(2)
                    } else {
                        n
                    };
                    // Each element takes at least 3 bytes (`:0\r\n` has 4): refused before
                    // they come when they cannot fit.
                    if self.reply.saturating_add(n.saturating_mul(3)) > MAX_REPLY_BYTES {
                        return Err("a reply larger than any rate-limit reply");
                    }
                    if self.open.len() >= MAX_DEPTH {
                        return Err("a reply nested deeper than any rate-limit reply");
                    }
                    self.open.push(n);
                    self.state = State::Type;
                }
                _ => self.element_done(),
            },
            _ => return Err("not a RESP reply"),
        }
        Ok(())
    }

    /// One value is complete: the aggregates it closes are complete too; at the top, the reply.
    fn element_done(&mut self) {
        self.state = State::Type;
        while let Some(left) = self.open.last_mut() {
            *left -= 1;
            if *left > 0 {
                return;
            }
            self.open.pop();
        }
        self.reply = 0;
    }
}

/// A stream whose reads pass the scanner.
pub(crate) struct Bounded<S> {
    inner: S,
    scanner: Scanner,
}

impl<S> Bounded<S> {
    pub(crate) fn new(inner: S) -> Bounded<S> {
        Bounded {
            inner,
            scanner: Scanner::new(),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Bounded<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let me = &mut *self;
        match Pin::new(&mut me.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let new = buf.filled().get(before..).unwrap_or_default();
                match me.scanner.feed(new) {
                    Ok(()) => Poll::Ready(Ok(())),
                    Err(why) => Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, why))),
                }
            }
            other => other,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Bounded<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A multiplexed connection over a bounded stream (TCP, TLS over TCP, or a Unix socket).
#[derive(Clone)]
pub(crate) struct BoundedConnection(MultiplexedConnection);

impl BoundedConnection {
    /// Opens, handshakes (TLS), authenticates and selects the database, within `timeout`.
    pub(crate) async fn open(dial: &Dial, timeout: Duration) -> redis::RedisResult<Self> {
        let connect = async {
            let conn = match &dial.addr {
                Addr::Tcp { host, port } => {
                    let s = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                    s.set_nodelay(true)?;
                    match &dial.tls {
                        Some(tls) => spawned(&dial.redis, tls.handshake(host, s).await?).await?,
                        None => spawned(&dial.redis, s).await?,
                    }
                }
                #[cfg(unix)]
                Addr::Unix(path) => {
                    let s = tokio::net::UnixStream::connect(path).await?;
                    spawned(&dial.redis, s).await?
                }
                #[cfg(not(unix))]
                Addr::Unix(_) => {
                    return Err(redis::RedisError::from((
                        redis::ErrorKind::InvalidClientConfig,
                        "no Unix sockets on this platform",
                    )))
                }
            };
            Ok(BoundedConnection(conn))
        };
        match tokio::time::timeout(timeout, connect).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::from(io::ErrorKind::TimedOut).into()),
        }
    }
}

async fn spawned<S>(
    info: &redis::RedisConnectionInfo,
    stream: S,
) -> redis::RedisResult<MultiplexedConnection>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (conn, driver) = MultiplexedConnection::new(info, Bounded::new(stream)).await?;
    tokio::spawn(driver);
    Ok(conn)
}

impl ConnectionLike for BoundedConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.0.req_packed_command(cmd)
    }
    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.0.req_packed_commands(cmd, offset, count)
    }
    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}

impl redis::cluster_async::Connect for BoundedConnection {
    fn connect<'a, T>(
        info: T,
        _response_timeout: Duration,
        connection_timeout: Duration,
    ) -> RedisFuture<'a, Self>
    where
        T: IntoConnectionInfo + Send + 'a,
    {
        Box::pin(async move {
            let info = info.into_connection_info()?;
            let addr = match info.addr {
                ConnectionAddr::Tcp(host, port) => Addr::Tcp { host, port },
                other => {
                    return Err(redis::RedisError::from((
                        redis::ErrorKind::InvalidClientConfig,
                        "a Cluster node's address is host:port",
                        format!("{other:?}"),
                    )))
                }
            };
            let dial = Dial {
                addr,
                tls: cluster_tls_client(),
                redis: info.redis,
            };
            BoundedConnection::open(&dial, connection_timeout).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(chunks: &[&[u8]]) -> Result<Scanner, &'static str> {
        let mut s = Scanner::new();
        for c in chunks {
            s.feed(c)?;
        }
        Ok(s)
    }

    #[test]
    fn rate_limit_replies_pass_in_any_chunking() {
        let reply =
            b"*5\r\n:1\r\n:10\r\n:9\r\n:-1\r\n:100\r\n+OK\r\n$3\r\nabc\r\n$-1\r\n*0\r\n-ERR x\r\n";
        for cut in 0..reply.len() {
            let (a, b) = reply.split_at(cut);
            let s = scan(&[a, b]).unwrap();
            assert_eq!(
                (s.state, s.open.len(), s.reply),
                (State::Type, 0, 0),
                "{cut}"
            );
        }
        let all = b"*3\r\n*5\r\n:1\r\n:2\r\n:3\r\n:4\r\n:5\r\n*5\r\n:1\r\n:2\r\n:3\r\n:4\r\n:5\r\n*1\r\n%1\r\n+a\r\n:1\r\n";
        assert!(scan(&[all]).unwrap().open.is_empty());
    }

    #[test]
    fn oversized_deep_or_garbage_replies_are_refused() {
        assert!(scan(&[b"$536870911\r\n"]).is_err());
        assert!(scan(&[b"*1000000000\r\n"]).is_err());
        assert!(scan(&[&b"*1\r\n".repeat(MAX_DEPTH + 1)]).is_err());
        assert!(scan(&[b"hello\r\n"]).is_err());
        assert!(scan(&[b"$abc\r\n"]).is_err());
        // A simple string that never ends.
        let mut s = Scanner::new();
        let junk = vec![b'x'; 64 * 1024];
        s.feed(b"+").unwrap();
        let refused = (0..20).any(|_| s.feed(&junk).is_err());
        assert!(refused);
        // Many small replies in a row are fine: each is counted on its own.
        let mut s = Scanner::new();
        for _ in 0..100_000 {
            s.feed(b"*5\r\n:1\r\n:10\r\n:9\r\n:-1\r\n:100\r\n").unwrap();
        }
    }
}
