//! How one connection is opened: an address, the TLS client (when the store speaks TLS) and
//! the credentials and database the connection authenticates with and selects. Every connection
//! the client opens — a server's, a re-opened one, a Cluster node's, a sentinel's and the
//! master's it names — is a `Dial`, so none skips TLS or AUTH.

use std::sync::{Mutex, OnceLock};

use redis::{ProtocolVersion, RedisConnectionInfo};

use crate::connection::{Addr, Auth, ConnectionSettings};
use crate::tls::TlsClient;

/// One connection's address, TLS and credentials.
#[derive(Clone)]
pub(crate) struct Dial {
    pub(crate) addr: Addr,
    pub(crate) tls: Option<TlsClient>,
    pub(crate) redis: RedisConnectionInfo,
}

impl Dial {
    pub(crate) fn new(addr: Addr, tls: Option<TlsClient>, auth: &Auth, db: i64) -> Dial {
        Dial {
            addr,
            tls,
            redis: RedisConnectionInfo {
                db,
                username: auth.user.clone(),
                password: auth.password.as_ref().map(|p| p.expose().to_string()),
                protocol: ProtocolVersion::RESP2,
            },
        }
    }
}

/// The TLS client of the settings (read from its files once), if they ask for TLS.
pub(crate) fn tls_of(settings: &ConnectionSettings) -> Result<Option<TlsClient>, String> {
    settings.tls.as_ref().map(TlsClient::new).transpose()
}

/// The TLS client of Cluster node connections. The redis crate opens a node's connection from
/// its address and credentials alone (`cluster_async::Connect` has no state), so the TLS of a
/// Cluster is the process's: one per process, set by the first Cluster opened with TLS; a second
/// Cluster with other TLS settings is refused rather than connected with the wrong ones.
pub(crate) fn cluster_tls() -> &'static Mutex<Option<(crate::connection::Tls, TlsClient)>> {
    static TLS: OnceLock<Mutex<Option<(crate::connection::Tls, TlsClient)>>> = OnceLock::new();
    TLS.get_or_init(|| Mutex::new(None))
}

/// Sets the process's Cluster TLS (see [`cluster_tls`]); the same settings again are fine.
pub(crate) fn set_cluster_tls(tls: &crate::connection::Tls) -> Result<(), String> {
    let mut slot = cluster_tls().lock().unwrap_or_else(|p| p.into_inner());
    match &*slot {
        Some((set, _)) if set == tls => Ok(()),
        Some(_) => Err(
            "a second Cluster with other TLS settings in one process: the Cluster TLS is one per process"
                .into(),
        ),
        None => {
            *slot = Some((tls.clone(), TlsClient::new(tls)?));
            Ok(())
        }
    }
}

/// The Cluster TLS client, when one is set.
pub(crate) fn cluster_tls_client() -> Option<TlsClient> {
    cluster_tls()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .map(|(_, c)| c.clone())
}
