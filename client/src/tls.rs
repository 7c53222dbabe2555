//! TLS to the store through rustls (ring; no OpenSSL): the trusted roots (the system's, plus a
//! CA bundle file), a client certificate for mutual TLS, SNI, and hostname verification unless
//! the settings skip it by name. Built once per set of settings; every connection (re-opened
//! ones, Cluster nodes, sentinels and the master they name) handshakes with the same config.

use std::io;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::connection::Tls;

/// A TLS client configuration, ready to handshake.
#[derive(Clone)]
pub struct TlsClient {
    connector: TlsConnector,
}

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsClient")
    }
}

impl TlsClient {
    /// Reads the files the settings name; an error names the file and what is wrong with it.
    pub fn new(settings: &Tls) -> Result<TlsClient, String> {
        // ring, not aws-lc-rs: no C build with cmake. Deprecated for lacking post-quantum key
        // exchange, which Redis's OpenSSL 3.0 does not offer either.
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        // The system's roots, as a managed service's certificate needs; a bundle that cannot be
        // read is skipped (rustls-native-certs reports each), a CA file below still counts.
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        if let Some(file) = &settings.ca_file {
            let certs = read_certs(file)?;
            if certs.is_empty() {
                return Err(format!(
                    "{}: no PEM certificate in the CA file",
                    file.display()
                ));
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| format!("{}: not a CA certificate: {e}", file.display()))?;
            }
        }
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| format!("no trusted root to verify the server with: {e}"))?;
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let builder = if settings.skip_hostname_verification {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(ChainOnly(webpki)))
        } else {
            builder.with_webpki_verifier(webpki)
        };
        let config = match (&settings.client_cert, &settings.client_key) {
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert)?;
                if chain.is_empty() {
                    return Err(format!("{}: no PEM certificate", cert.display()));
                }
                let key_der = read_key(key)?;
                builder.with_client_auth_cert(chain, key_der).map_err(|e| {
                    format!(
                        "{} / {}: the client certificate and key do not go together: {e}",
                        cert.display(),
                        key.display()
                    )
                })?
            }
            _ => builder.with_no_client_auth(),
        };
        Ok(TlsClient {
            connector: TlsConnector::from(Arc::new(config)),
        })
    }

    /// The handshake over `stream` with `host` (SNI for a name; an IP address is verified
    /// against the certificate's IP names). Its error says why the server was not trusted.
    pub async fn handshake(
        &self,
        host: &str,
        stream: TcpStream,
    ) -> io::Result<TlsStream<TcpStream>> {
        let name = ServerName::try_from(host.to_string()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("'{host}': not a host name for TLS"),
            )
        })?;
        self.connector
            .connect(name, stream)
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("TLS with {host}: {}", explain(&e))))
    }
}

/// The handshake failure in an operator's words (the cause, then rustls's own).
fn explain(e: &io::Error) -> String {
    let cause = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .map(|r| match r {
            rustls::Error::InvalidCertificate(c) => match c {
                CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                    "the server's certificate is not signed by a trusted CA (set the CA file)"
                }
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    "the server's certificate has expired"
                }
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    "the server's certificate is not valid yet"
                }
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => {
                    "the server's certificate does not name this host (wrong hostname; \
                     skip_hostname_verification trusts any name the CA signed)"
                }
                _ => "the server's certificate was refused",
            },
            rustls::Error::AlertReceived(_) => {
                "the server refused the handshake (does it require a client certificate?)"
            }
            _ => "the TLS handshake failed",
        })
        .unwrap_or("the TLS handshake failed");
    format!("{cause}: {e}")
}

fn read_certs(file: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
    rustls_pemfile::certs(&mut bytes.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: not PEM: {e}", file.display()))
}

fn read_key(file: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let bytes = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
    rustls_pemfile::private_key(&mut bytes.as_slice())
        .map_err(|e| format!("{}: not PEM: {e}", file.display()))?
        .ok_or_else(|| format!("{}: no PEM private key", file.display()))
}

/// Verifies the chain up to a trusted root, its dates and signatures, but accepts a
/// certificate that does not name the host (`skip_hostname_verification`).
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            // The name is checked after the chain: this error means the chain was good.
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
