//! The gRPC server as the peer serves it: TLS (GRPC_SERVER_USE_TLS with its certificate and
//! key), mutual TLS (GRPC_CLIENT_TLS_CACERT), the client certificate's name
//! (GRPC_CLIENT_TLS_SAN), a Unix socket (GRPC_UDS), each with certificates generated here and
//! a real client.

mod support;

use std::path::Path;

use ratelimit_rls::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use support::*;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

const GOOD: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n";

/// A CA, a server certificate for `localhost` and two client certificates, as PEM files.
struct Pki {
    ca: String,
    clients: Vec<(String, String)>,
}

fn pki(dir: &Path) -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issue = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = issue("localhost");
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("server.pem"), server_cert).unwrap();
    std::fs::write(dir.join("server.key"), server_key).unwrap();
    Pki {
        ca: ca.pem(),
        clients: vec![issue("client.example"), issue("other.example")],
    }
}

async fn tls_client(
    port: u16,
    ca: &str,
    identity: Option<&(String, String)>,
) -> Result<RateLimitServiceClient<Channel>, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name("localhost");
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    let channel = Endpoint::from_shared(format!("https://127.0.0.1:{port}"))
        .unwrap()
        .tls_config(tls)?
        .connect()
        .await?;
    Ok(RateLimitServiceClient::new(channel))
}

/// Whether one request over `client` is answered.
async fn answered(
    client: Result<RateLimitServiceClient<Channel>, tonic::transport::Error>,
) -> bool {
    match client {
        Err(_) => false,
        Ok(mut c) => c
            .should_rate_limit(simple("d", &[&[("k", "v")]]))
            .await
            .is_ok(),
    }
}

/// The RLS over TLS, its port, and its config directory (removed when dropped: the RLS watches
/// it, so the caller keeps it while the RLS runs).
async fn start_tls(
    redis: &Redis,
    extra: &[(&str, &str)],
) -> (ratelimit_rls::server::Running, u16, testkit::Scratch) {
    let root = scratch("tls");
    write_config(&root, "config.yaml", GOOD);
    let running = ratelimit_rls::server::start(settings(&root, redis, extra))
        .await
        .unwrap();
    let port = match &running.grpc_addr {
        ratelimit_rls::listen::GrpcAddr::Tcp(a) => a.port(),
        other => panic!("{other}"),
    };
    (running, port, root)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_mutual_tls_and_the_client_name() {
    let redis = Redis::start();
    let dir = redis.scratch("pki");
    let p = pki(&dir);
    let file = |n: &str| dir.join(n).display().to_string();
    let (cert, key, ca) = (file("server.pem"), file("server.key"), file("ca.pem"));
    let server_tls = [
        ("GRPC_SERVER_USE_TLS", "true"),
        ("GRPC_SERVER_TLS_CERT", cert.as_str()),
        ("GRPC_SERVER_TLS_KEY", key.as_str()),
    ];

    // TLS: a client trusting the CA is answered; one speaking plaintext is not.
    let (running, port, _root) = start_tls(&redis, &server_tls).await;
    assert!(answered(tls_client(port, &p.ca, None).await).await, "TLS");
    let plain = RateLimitServiceClient::connect(format!("http://127.0.0.1:{port}")).await;
    assert!(!answered(plain).await, "plaintext against TLS");
    running.stop().await;

    // Mutual TLS: a client certificate from the CA is required.
    let mut mtls = server_tls.to_vec();
    mtls.push(("GRPC_CLIENT_TLS_CACERT", ca.as_str()));
    let (running, port, _root) = start_tls(&redis, &mtls).await;
    assert!(
        !answered(tls_client(port, &p.ca, None).await).await,
        "no client certificate"
    );
    assert!(
        answered(tls_client(port, &p.ca, p.clients.first()).await).await,
        "mTLS"
    );
    running.stop().await;

    // And the name it must carry.
    mtls.push(("GRPC_CLIENT_TLS_SAN", "client.example"));
    let (running, port, _root) = start_tls(&redis, &mtls).await;
    assert!(
        answered(tls_client(port, &p.ca, p.clients.first()).await).await,
        "the right name"
    );
    assert!(
        !answered(tls_client(port, &p.ca, p.clients.get(1)).await).await,
        "another name"
    );
    running.stop().await;

    // Refused at start by name: TLS without its files.
    let root = scratch("tls-bad");
    write_config(&root, "config.yaml", GOOD);
    let err =
        ratelimit_rls::server::start(settings(&root, &redis, &[("GRPC_SERVER_USE_TLS", "true")]))
            .await
            .err()
            .expect("refused");
    assert!(err.contains("GRPC_SERVER_TLS_CERT"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_on_a_unix_socket() {
    let redis = Redis::start();
    let socket = redis.scratch("uds").join("rls.sock");
    let path = socket.display().to_string();
    // The config directory lives as long as the RLS that watches it.
    let root = scratch("uds");
    write_config(&root, "config.yaml", GOOD);
    let running = ratelimit_rls::server::start(settings(&root, &redis, &[("GRPC_UDS", &path)]))
        .await
        .unwrap();
    assert_eq!(running.grpc_addr.to_string(), format!("unix:{path}"));
    let target = socket.clone();
    let channel = Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let target = target.clone();
            async move {
                let s = tokio::net::UnixStream::connect(target).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
            }
        }))
        .await
        .unwrap();
    let mut client = RateLimitServiceClient::new(channel);
    let r = client
        .should_rate_limit(simple("d", &[&[("k", "v")]]))
        .await
        .unwrap();
    assert_eq!(codes(&r.into_inner()), (OK, vec![(OK, 4)]));
    running.stop().await;
    assert!(!socket.exists(), "the socket is removed at stop");
}
