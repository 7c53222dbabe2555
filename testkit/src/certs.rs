//! Certificates made at test time: a CA, a server certificate for `localhost` and 127.0.0.1, a
//! client certificate, and the bad ones the negative tests need (an expired server certificate,
//! one for another host, and a second CA that signed none of them). Written as PEM files into a
//! directory; nothing in them outlives the test run.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

use crate::place::Scratch;

/// Which certificate a TLS server presents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerCert {
    /// Valid now, for `localhost` and 127.0.0.1, signed by the CA.
    Good,
    /// Signed by the CA, for the right names, but its validity ended in 2020.
    Expired,
    /// Signed by the CA, valid now, but only for `elsewhere.invalid`.
    WrongHost,
}

/// A certificate and its key, as PEM files.
#[derive(Clone, Debug)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The files of one test PKI.
#[derive(Clone, Debug)]
pub struct Pki {
    /// The CA that signed every certificate below.
    pub ca: PathBuf,
    /// A CA that signed nothing here: trusting only it must fail.
    pub other_ca: PathBuf,
    pub server: Pair,
    pub expired: Pair,
    pub wrong_host: Pair,
    /// A client certificate (for mutual TLS) signed by the CA.
    pub client: Pair,
    /// The directory `Pki::new` made, removed with the last clone (when the test passed).
    _dir: Option<Arc<Scratch>>,
}

impl Pki {
    /// Makes the PKI in a scratch directory of its own, which goes with the last clone of it
    /// (servers started with it hold one).
    pub fn new() -> Result<Pki, String> {
        let dir = Scratch::new("pki")?;
        let pki = Pki::create(dir.path())?;
        Ok(Pki {
            _dir: Some(Arc::new(dir)),
            ..pki
        })
    }

    /// Makes the PKI in `dir` (created when missing), which the caller owns.
    pub fn create(dir: &Path) -> Result<Pki, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let err = |e: rcgen::Error| e.to_string();
        let (ca, ca_key) = authority("redis-ratelimit test CA")?;
        let (other, _) = authority("an unrelated CA")?;
        let write = |name: &str, text: &str| -> Result<PathBuf, String> {
            let path = dir.join(name);
            std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(path)
        };
        let leaf = |name: &str,
                    names: &[&str],
                    usage: ExtendedKeyUsagePurpose,
                    expired: bool|
         -> Result<Pair, String> {
            let mut params =
                CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                    .map_err(err)?;
            params.distinguished_name.push(DnType::CommonName, name);
            // A server certificate also authenticates its holder as a client: a replica or a
            // sentinel presents it to a server that requires client certificates.
            params.extended_key_usages = match usage {
                ExtendedKeyUsagePurpose::ServerAuth => {
                    vec![usage, ExtendedKeyUsagePurpose::ClientAuth]
                }
                other => vec![other],
            };
            if expired {
                params.not_before = rcgen::date_time_ymd(2019, 1, 1);
                params.not_after = rcgen::date_time_ymd(2020, 1, 1);
            } else {
                params.not_before = rcgen::date_time_ymd(2020, 1, 1);
                params.not_after = rcgen::date_time_ymd(2090, 1, 1);
            }
            let key = KeyPair::generate().map_err(err)?;
            let cert = params.signed_by(&key, &ca, &ca_key).map_err(err)?;
            Ok(Pair {
                cert: write(&format!("{name}.crt"), &cert.pem())?,
                key: write(&format!("{name}.key"), &key.serialize_pem())?,
            })
        };
        let server_names = ["localhost", "127.0.0.1"];
        Ok(Pki {
            ca: write("ca.crt", &ca.pem())?,
            other_ca: write("other-ca.crt", &other.pem())?,
            server: leaf(
                "server",
                &server_names,
                ExtendedKeyUsagePurpose::ServerAuth,
                false,
            )?,
            expired: leaf(
                "expired",
                &server_names,
                ExtendedKeyUsagePurpose::ServerAuth,
                true,
            )?,
            wrong_host: leaf(
                "wrong-host",
                &["elsewhere.invalid"],
                ExtendedKeyUsagePurpose::ServerAuth,
                false,
            )?,
            client: leaf(
                "client",
                &["client.invalid"],
                ExtendedKeyUsagePurpose::ClientAuth,
                false,
            )?,
            _dir: None,
        })
    }

    /// The pair a server presents.
    pub fn server_pair(&self, which: ServerCert) -> &Pair {
        match which {
            ServerCert::Good => &self.server,
            ServerCert::Expired => &self.expired,
            ServerCert::WrongHost => &self.wrong_host,
        }
    }
}

fn authority(name: &str) -> Result<(rcgen::Certificate, KeyPair), String> {
    let err = |e: rcgen::Error| e.to_string();
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2090, 1, 1);
    let key = KeyPair::generate().map_err(err)?;
    let cert = params.self_signed(&key).map_err(err)?;
    Ok((cert, key))
}
