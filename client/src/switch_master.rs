//! The sentinels' `+switch-master` announcements, followed: a task subscribed on one sentinel at
//! a time (the next one when a sentinel cannot be reached or its connection closes) hands the
//! master's new address to the connection as soon as a sentinel has promoted a replica. A closed
//! connection and a `READONLY` reply cover a master that died or came back demoted; this covers
//! the master that stops answering without closing its connections (a paused process, a host
//! gone from the network): no reply ever comes from it to say so, and without the announcement
//! every call would keep timing out against it after the sentinels had moved on.

use std::io;
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::PubSub;
use tokio::task::AbortHandle;

use crate::bounded::Bounded;
use crate::connection::Addr;
use crate::dial::Dial;
use crate::sentinel::SentinelRoute;

/// The channel on which a sentinel announces a new master:
/// `<name> <old ip> <old port> <new ip> <new port>`.
pub(crate) const CHANNEL: &str = "+switch-master";

/// How long the watcher waits before subscribing on the next sentinel after one could not be
/// reached or closed the subscription: a sentinel that is down is not dialled in a tight loop.
pub(crate) const RESUBSCRIBE_DELAY: Duration = Duration::from_millis(200);

/// How long the watcher waits for an announcement before it asks its sentinel for the master
/// again: a sentinel that stopped answering (paused, cut off) would otherwise hold the only
/// subscription silently; one that does not answer the question within the connect timeout is
/// left for the next.
pub(crate) const RECHECK_INTERVAL: Duration = Duration::from_secs(5);

/// Starts the watcher; `master_is` is called with the master's address after each announcement
/// for `route.master`, and with the address a sentinel names right after each (re)subscription
/// (an announcement made while no subscription stood). The task runs until aborted.
pub(crate) fn watch<F>(route: SentinelRoute, timeout: Duration, master_is: F) -> AbortHandle
where
    F: Fn(Addr) + Send + 'static,
{
    tokio::spawn(async move {
        loop {
            for sentinel in &route.sentinels {
                if let Ok(pubsub) = subscribe(sentinel, timeout).await {
                    if let Ok(addr) = route.ask(sentinel, timeout).await {
                        master_is(addr);
                    }
                    let mut messages = pubsub.into_on_message();
                    loop {
                        match tokio::time::timeout(RECHECK_INTERVAL, messages.next()).await {
                            Ok(Some(msg)) => {
                                let payload: Result<String, _> = msg.get_payload();
                                if let Some(addr) =
                                    payload.ok().and_then(|p| announced(&route.master, &p))
                                {
                                    log::warn!(
                                        "sentinel {}: the master '{}' is now {addr}",
                                        sentinel.addr,
                                        route.master
                                    );
                                    master_is(addr);
                                }
                            }
                            // The subscription closed: the next sentinel.
                            Ok(None) => break,
                            Err(_) => match route.ask(sentinel, timeout).await {
                                Ok(addr) => master_is(addr),
                                Err(_) => break,
                            },
                        }
                    }
                }
                tokio::time::sleep(RESUBSCRIBE_DELAY).await;
            }
        }
    })
    .abort_handle()
}

/// A subscription to [`CHANNEL`] on one sentinel, with the sentinels' TLS and credentials.
async fn subscribe(sentinel: &Dial, timeout: Duration) -> redis::RedisResult<PubSub> {
    let open = async {
        let Addr::Tcp { host, port } = &sentinel.addr else {
            return Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "a sentinel's address is host:port",
            )));
        };
        let tcp = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
        tcp.set_nodelay(true)?;
        let mut pubsub = match &sentinel.tls {
            Some(tls) => {
                let stream = tls.handshake(host, tcp).await?;
                PubSub::new(&sentinel.redis, Bounded::new(stream)).await?
            }
            None => PubSub::new(&sentinel.redis, Bounded::new(tcp)).await?,
        };
        pubsub.subscribe(CHANNEL).await?;
        Ok(pubsub)
    };
    tokio::time::timeout(timeout, open)
        .await
        .map_err(|_| redis::RedisError::from(io::Error::from(io::ErrorKind::TimedOut)))?
}

/// The new address in an announcement about `master` (a master's name may hold spaces: the
/// four address fields are counted from the end).
fn announced(master: &str, payload: &str) -> Option<Addr> {
    let mut fields = payload.rsplitn(5, ' ');
    let port = fields.next()?.parse::<u16>().ok()?;
    let host = fields.next()?.to_string();
    let _old_port = fields.next()?;
    let _old_host = fields.next()?;
    (fields.next()? == master).then_some(Addr::Tcp { host, port })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announcement_names_the_new_master_of_its_name_only() {
        let tcp = |host: &str, port| Addr::Tcp {
            host: host.into(),
            port,
        };
        assert_eq!(
            announced("mymaster", "mymaster 127.0.0.1 6379 127.0.0.1 6380"),
            Some(tcp("127.0.0.1", 6380))
        );
        assert_eq!(
            announced("my master", "my master 10.0.0.1 6379 10.0.0.2 7000"),
            Some(tcp("10.0.0.2", 7000))
        );
        assert_eq!(
            announced("other", "mymaster 127.0.0.1 6379 127.0.0.1 6380"),
            None
        );
        assert_eq!(announced("mymaster", "mymaster 127.0.0.1 6379"), None);
        assert_eq!(
            announced("mymaster", "mymaster 127.0.0.1 6379 127.0.0.1 port"),
            None
        );
        assert_eq!(announced("mymaster", ""), None);
    }
}
