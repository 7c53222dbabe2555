//! gRPC over TLS as the peer serves it: GRPC_SERVER_TLS_CERT and _KEY (PEM) are the server's
//! identity; with GRPC_CLIENT_TLS_CACERT a client must present a certificate signed by that CA
//! (mutual TLS), and with GRPC_CLIENT_TLS_SAN that certificate must also name it among its
//! subject alternative names. A connection whose handshake or name check fails is closed and
//! logged; the others are handed to tonic.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::settings::Settings;

/// Connections accepted but not yet taken by the server, at most.
const PENDING_CONNECTIONS: usize = 64;

#[derive(Clone)]
pub struct Acceptor {
    tls: tokio_rustls::TlsAcceptor,
    /// GRPC_CLIENT_TLS_SAN.
    san: Option<String>,
}

fn certificates(path: &str, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{what} {path}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{what} {path}: no certificate in the file"));
    }
    Ok(certs)
}

impl Acceptor {
    pub fn from_settings(s: &Settings) -> Result<Acceptor, String> {
        if s.grpc_tls_cert.is_empty() || s.grpc_tls_key.is_empty() {
            return Err(
                "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"
                    .into(),
            );
        }
        let certs = certificates(&s.grpc_tls_cert, "GRPC_SERVER_TLS_CERT")?;
        let key = PrivateKeyDer::from_pem_file(&s.grpc_tls_key)
            .map_err(|e| format!("GRPC_SERVER_TLS_KEY {}: {e}", s.grpc_tls_key))?;
        let provider = Arc::new(ring_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?;
        let builder = if s.grpc_client_ca.is_empty() {
            if !s.grpc_client_san.is_empty() {
                return Err("GRPC_CLIENT_TLS_SAN needs GRPC_CLIENT_TLS_CACERT (mutual TLS)".into());
            }
            builder.with_no_client_auth()
        } else {
            let mut roots = RootCertStore::empty();
            for ca in certificates(&s.grpc_client_ca, "GRPC_CLIENT_TLS_CACERT")? {
                roots
                    .add(ca)
                    .map_err(|e| format!("GRPC_CLIENT_TLS_CACERT {}: {e}", s.grpc_client_ca))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("GRPC_CLIENT_TLS_CACERT {}: {e}", s.grpc_client_ca))?;
            builder.with_client_cert_verifier(verifier)
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .map_err(|e| format!("GRPC_SERVER_TLS_CERT/_KEY: {e}"))?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Acceptor {
            tls: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            san: (!s.grpc_client_san.is_empty()).then(|| s.grpc_client_san.clone()),
        })
    }

    /// The TLS connections of `listener`, each handshake on its own task (a slow client holds
    /// up no other). Ends when the server drops the stream.
    pub fn incoming(self, listener: TcpListener) -> ReceiverStream<io::Result<Conn>> {
        let (tx, rx) = tokio::sync::mpsc::channel(PENDING_CONNECTIONS);
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = tx.closed() => return,
                    a = listener.accept() => a,
                };
                let Ok((tcp, peer)) = accepted else { continue };
                // As on plain TCP: no reply's last small record may wait for a delayed ACK.
                let _ = tcp.set_nodelay(true);
                let (this, tx) = (self.clone(), tx.clone());
                tokio::spawn(async move {
                    match this.handshake(tcp).await {
                        Ok(conn) => {
                            let _ = tx.send(Ok(conn)).await;
                        }
                        Err(e) => log::warn!("gRPC TLS connection from {peer} refused: {e}"),
                    }
                });
            }
        });
        ReceiverStream::new(rx)
    }

    async fn handshake(&self, tcp: TcpStream) -> Result<Conn, String> {
        let stream = self.tls.accept(tcp).await.map_err(|e| e.to_string())?;
        if let Some(san) = &self.san {
            let cert = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .ok_or("no client certificate")?;
            let name = ServerName::try_from(san.as_str())
                .map_err(|e| format!("GRPC_CLIENT_TLS_SAN {san}: {e}"))?;
            webpki::EndEntityCert::try_from(cert)
                .map_err(|e| e.to_string())?
                .verify_is_valid_for_subject_name(&name)
                .map_err(|_| format!("the client certificate does not name {san}"))?;
        }
        Ok(Conn(stream))
    }
}

/// rustls's ring provider: ring builds with a C compiler alone, where aws-lc needs cmake; its
/// deprecation is about post-quantum key exchange, which the peer's Go TLS does not offer
/// either on this hop.
#[allow(deprecated)]
fn ring_provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// One TLS connection, as tonic takes it.
pub struct Conn(TlsStream<TcpStream>);

impl Connected for Conn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.0.get_ref().0.connect_info()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
