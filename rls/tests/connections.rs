//! The RLS on production connections, with envoyproxy/ratelimit's settings, over real gRPC and
//! real servers (testkit): TLS with mutual TLS and an ACL user under docs/operating.md's
//! minimal rule; each refusal (a CA that did not sign, an expired certificate, a wrong host, a
//! wrong password, a missing permission) stops the start naming its cause; the binary's logs
//! and /metrics never show the password; `REDIS_PERSECOND*` sends per-second rules to a second
//! store; `REDIS_TYPE=SENTINEL` follows a failover.

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelimit_client::ManualClock;
use ratelimit_rls::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use ratelimit_rls::server;
use ratelimit_rls::settings::Settings;
use support::{simple, write_config, OK};
use testkit::{ClientCerts, Options, Pki, Sentinel, Server, ServerCert, Tls};

const PASSWORD: &str = "rls-S3cret-pw";

const YAML: &str = "
domain: shop
descriptors:
  - key: second
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: minute
    rate_limit: {unit: minute, requests_per_unit: 1000000}
";

fn pki() -> Pki {
    Pki::new().unwrap()
}

fn module(mut o: Options) -> Options {
    o.module = Some((testkit::module_path().unwrap(), vec![]));
    o
}

/// The aclfile: no default user, an admin for the harness, `gw` under the minimal rule (keys
/// `rls:*`, the RLS's without CACHE_KEY_PREFIX) and `nocmd` with no limiter command.
fn acl() -> String {
    [
        "user default off".to_string(),
        "user admin on >adminpass ~* &* +@all".to_string(),
        testkit::minimal_module_acl("gw", PASSWORD, "rls:*"),
        format!("user nocmd on >{PASSWORD} ~rls:* -@all +command|info"),
    ]
    .join("\n")
}

fn secure(pki: &Pki, cert: ServerCert, clients: ClientCerts) -> Server {
    Server::start(module(Options {
        tls: Some(Tls {
            pki: pki.clone(),
            cert,
            clients,
        }),
        acl: Some(acl()),
        admin: Some(("admin".into(), "adminpass".into())),
        ..Options::default()
    }))
    .unwrap()
}

fn config_root() -> testkit::Scratch {
    let root = testkit::Scratch::new("rls").unwrap();
    write_config(&root, "config.yaml", YAML);
    root
}

fn vars(root: &Path, redis: &[(&str, String)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = [
        ("HOST", "127.0.0.1"),
        ("PORT", "0"),
        ("GRPC_HOST", "127.0.0.1"),
        ("GRPC_PORT", "0"),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("RLS_DEADLINE_MS", "50"),
        ("USE_STATSD", "false"),
        ("DEBUG_PORT", "0"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    v.push(("RUNTIME_ROOT".into(), root.display().to_string()));
    v.extend(redis.iter().map(|(k, val)| (k.to_string(), val.clone())));
    v
}

fn tls_vars(server: &Server, pki: &Pki, auth: &str) -> Vec<(&'static str, String)> {
    vec![
        ("REDIS_URL", format!("127.0.0.1:{}", server.port)),
        ("REDIS_TLS", "true".into()),
        ("REDIS_TLS_CACERT", pki.ca.display().to_string()),
        (
            "REDIS_TLS_CLIENT_CERT",
            pki.client.cert.display().to_string(),
        ),
        ("REDIS_TLS_CLIENT_KEY", pki.client.key.display().to_string()),
        ("REDIS_AUTH", auth.to_string()),
    ]
}

async fn start(vars: &[(String, String)]) -> Result<server::Running, String> {
    server::start_with_clock(settings(vars)?, Arc::new(ManualClock::new(1_000_000_000))).await
}

fn settings(vars: &[(String, String)]) -> Result<Settings, String> {
    Settings::from_lookup(|k| {
        vars.iter()
            .rev()
            .find(|(name, _)| name == k)
            .map(|(_, v)| v.clone())
    })
}

async fn client(r: &server::Running) -> RateLimitServiceClient<tonic::transport::Channel> {
    RateLimitServiceClient::connect(format!("http://{}", r.grpc_addr))
        .await
        .unwrap()
}

/// Calls of the `rl.*` decision commands in the server's commandstats (not `RL.SETSTATE`, the
/// effect a replica applies); 0 while the server does not answer (a replica being promoted).
fn rl_calls(server: &Server) -> u64 {
    let info = server.cli(&["INFO", "commandstats"]).unwrap_or_default();
    info.lines()
        .map(str::to_ascii_lowercase)
        .filter(|l| l.starts_with("cmdstat_rl.") && !l.starts_with("cmdstat_rl.setstate"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decides_over_mutual_tls_as_an_acl_user_under_the_minimal_rule() {
    let pki = pki();
    let redis = secure(&pki, ServerCert::Good, ClientCerts::Required);
    let root = config_root();
    let running = start(&vars(
        &root,
        &tls_vars(&redis, &pki, &format!("gw:{PASSWORD}")),
    ))
    .await
    .unwrap();
    let mut grpc = client(&running).await;
    for _ in 0..3 {
        let r = grpc
            .should_rate_limit(simple("shop", &[&[("minute", "a")], &[("second", "b")]]))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.overall_code, OK);
    }
    running.stop().await;
}

/// The Functions backend (a server without the module, the library loaded by an admin) under
/// exactly docs/operating.md's rule: the start's access check and the decisions pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decides_on_the_functions_backend_under_its_minimal_rule() {
    let redis = Server::start(Options {
        acl: Some(
            [
                "user default off".to_string(),
                "user admin on >adminpass ~* &* +@all".to_string(),
                testkit::minimal_functions_acl("gw", PASSWORD, "rls:*"),
            ]
            .join("\n"),
        ),
        admin: Some(("admin".into(), "adminpass".into())),
        ..Options::default()
    })
    .unwrap();
    ratelimit_client::Store::connect_with(
        &format!("redis://admin:adminpass@127.0.0.1:{}/", redis.port),
        ratelimit_client::LoadLibrary::Missing,
    )
    .await
    .unwrap();
    let root = config_root();
    let running = start(&vars(
        &root,
        &[
            ("REDIS_URL", format!("127.0.0.1:{}", redis.port)),
            ("REDIS_AUTH", format!("gw:{PASSWORD}")),
        ],
    ))
    .await
    .unwrap();
    let mut grpc = client(&running).await;
    for _ in 0..3 {
        let r = grpc
            .should_rate_limit(simple("shop", &[&[("minute", "a")], &[("second", "b")]]))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.overall_code, OK);
    }
    assert!(redis
        .cli(&["INFO", "commandstats"])
        .unwrap()
        .contains("cmdstat_fcall"));
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_stops_the_start_naming_its_cause() {
    let pki = pki();
    let good = secure(&pki, ServerCert::Good, ClientCerts::Optional);
    let expired = secure(&pki, ServerCert::Expired, ClientCerts::Optional);
    let elsewhere = secure(&pki, ServerCert::WrongHost, ClientCerts::Optional);
    let root = config_root();
    let auth = format!("gw:{PASSWORD}");
    let mut wrong_ca = tls_vars(&good, &pki, &auth);
    wrong_ca.push(("REDIS_TLS_CACERT", pki.other_ca.display().to_string()));
    let mut skip = tls_vars(&elsewhere, &pki, &auth);
    skip.push(("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true".into()));
    let cases = [
        (wrong_ca, "not signed by a trusted CA"),
        (tls_vars(&expired, &pki, &auth), "expired"),
        (tls_vars(&elsewhere, &pki, &auth), "does not name this host"),
        (
            tls_vars(&good, &pki, "gw:not-the-password"),
            "wrong user name or password",
        ),
        (
            tls_vars(&good, &pki, &format!("nocmd:{PASSWORD}")),
            "FIXEDWINDOW",
        ),
    ];
    for (redis, cause) in cases {
        let why = match start(&vars(&root, &redis)).await {
            Err(why) => why,
            Ok(r) => {
                r.stop().await;
                panic!("started with {redis:?}");
            }
        };
        assert!(why.contains(cause), "{cause}: {why}");
        assert!(!why.contains(PASSWORD), "{why}");
    }
    // The named switch lets the wrong-host certificate through (its chain is the CA's).
    start(&vars(&root, &skip)).await.unwrap().stop().await;
}

/// The binary, as an operator runs it: its log lines (LOG_LEVEL=debug) and /metrics never show
/// the password; a wrong password ends it with the cause.
#[test]
fn the_binary_shows_no_password_in_logs_errors_or_metrics() {
    let pki = pki();
    let redis = secure(&pki, ServerCert::Good, ClientCerts::Optional);
    let root = config_root();
    let run = |auth: &str| {
        let mut env = vars(&root, &tls_vars(&redis, &pki, auth));
        env.push(("LOG_LEVEL".into(), "debug".into()));
        Command::new(env!("CARGO_BIN_EXE_redis-ratelimit-rls"))
            .envs(env)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let refused = run("gw:wrong-pw").wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(!refused.status.success());
    assert!(said.contains("wrong user name or password"), "{said}");
    assert!(!said.contains("wrong-pw"), "{said}");

    let mut child = run(&format!("gw:{PASSWORD}"));
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut log = String::new();
    let http = loop {
        let Some(Ok(line)) = lines.next() else {
            panic!("the RLS ended: {log}")
        };
        log += &line;
        log.push('\n');
        if let Some(at) = line.find("HTTP on ") {
            let addr = line[at + 8..].split_whitespace().next().unwrap();
            break addr.trim_matches(|c| c == '"' || c == ',').to_string();
        }
    };
    let mut conn = std::net::TcpStream::connect(&http).unwrap();
    write!(conn, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut metrics = String::new();
    conn.read_to_string(&mut metrics).unwrap();
    assert!(metrics.contains("200"), "{metrics}");
    let _ = child.kill();
    let _ = child.wait();
    for line in lines.map_while(Result::ok) {
        log += &line;
    }
    for text in [&log, &metrics] {
        assert!(!text.contains(PASSWORD), "{text}");
    }
    assert!(log.contains("127.0.0.1"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_second_rules_go_to_the_second_store() {
    let main = Server::start(module(Options::default())).unwrap();
    let second = Server::start(module(Options::default())).unwrap();
    let root = config_root();
    let running = start(&vars(
        &root,
        &[
            ("REDIS_URL", format!("127.0.0.1:{}", main.port)),
            ("REDIS_PERSECOND", "true".into()),
            ("REDIS_PERSECOND_SOCKET_TYPE", "tcp".into()),
            ("REDIS_PERSECOND_URL", format!("127.0.0.1:{}", second.port)),
        ],
    ))
    .await
    .unwrap();
    let (main_before, second_before) = (rl_calls(&main), rl_calls(&second));
    let mut grpc = client(&running).await;
    let ask = |d: &'static [&'static [(&'static str, &'static str)]]| simple("shop", d);
    for _ in 0..3 {
        let r = grpc
            .should_rate_limit(ask(&[&[("second", "a")]]))
            .await
            .unwrap();
        assert_eq!(r.into_inner().overall_code, OK);
    }
    for _ in 0..2 {
        let r = grpc
            .should_rate_limit(ask(&[&[("minute", "a")]]))
            .await
            .unwrap();
        assert_eq!(r.into_inner().overall_code, OK);
    }
    // Both in one request: each store decides its own.
    let r = grpc
        .should_rate_limit(ask(&[&[("minute", "b")], &[("second", "b")]]))
        .await
        .unwrap();
    assert_eq!(r.into_inner().overall_code, OK);
    assert_eq!(rl_calls(&second) - second_before, 4);
    assert_eq!(rl_calls(&main) - main_before, 3);
    running.stop().await;
}

/// How the master is broken under load.
#[derive(Clone, Copy, Debug)]
enum Break {
    /// Killed: its connections close.
    Kill,
    /// Paused: silent, its connections open; only the sentinel's `+switch-master` says so.
    Pause,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_is_followed_under_load() {
    follows_the_failover(Break::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_master_is_left_for_the_one_the_sentinel_announces() {
    follows_the_failover(Break::Pause).await;
}

async fn follows_the_failover(how: Break) {
    let pki = pki();
    let options = module(Options {
        tls: Some(Tls::new(&pki)),
        acl: Some(acl()),
        admin: Some(("admin".into(), "adminpass".into())),
        ..Options::default()
    });
    let mut master = Server::start(options.clone()).unwrap();
    let replica = Server::start(Options {
        replica_of: Some(master.port),
        ..options
    })
    .unwrap();
    let sentinel = Sentinel::start(&master, "mymaster", Some("sentinel-pw")).unwrap();
    sentinel.wait_for_replicas(1).unwrap();
    let root = config_root();
    // The system clock: the circuit's backoff runs on it, and must elapse for the probe that
    // finds the new master.
    let running = server::start(
        settings(&vars(
            &root,
            &[
                ("REDIS_TYPE", "SENTINEL".into()),
                ("REDIS_URL", format!("mymaster,127.0.0.1:{}", sentinel.port)),
                ("REDIS_AUTH", format!("gw:{PASSWORD}")),
                ("REDIS_SENTINEL_AUTH", "sentinel-pw".into()),
                ("REDIS_TLS", "true".into()),
                ("REDIS_TLS_CACERT", pki.ca.display().to_string()),
            ],
        ))
        .unwrap(),
    )
    .await
    .unwrap();
    let mut grpc = client(&running).await;
    let request = || simple("shop", &[&[("minute", "load")]]);
    assert_eq!(
        grpc.should_rate_limit(request())
            .await
            .unwrap()
            .into_inner()
            .overall_code,
        OK
    );
    match how {
        Break::Kill => master.kill(),
        Break::Pause => master.pause().unwrap(),
    }
    let killed = Instant::now();
    let mut answers: BTreeMap<String, u64> = BTreeMap::new();
    let mut hung = 0;
    let give_up = Instant::now() + Duration::from_secs(90);
    let mut back = None;
    while back.is_none() && Instant::now() < give_up {
        let started = Instant::now();
        let answer = match grpc.should_rate_limit(request()).await {
            Ok(r) => format!("code {}", r.into_inner().overall_code),
            Err(status) => format!("grpc {:?}", status.code()),
        };
        if started.elapsed() > Duration::from_secs(2) {
            hung += 1;
        }
        *answers.entry(answer).or_default() += 1;
        if rl_calls(&replica) > 0 {
            back = Some(killed.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    eprintln!(
        "{how:?}: answers during the switch: {answers:?}; the new master decides after {back:?}"
    );
    if back.is_none() {
        eprintln!(
            "sentinel: {:?}; replica: {:?}; stats {:?}",
            sentinel.master_port(),
            replica.cli(&["INFO", "commandstats"]),
            running.service.limiter().stats()
        );
    }
    assert!(back.is_some(), "{answers:?}");
    assert_eq!(hung, 0);
    // The contract class (the default) falls back to its local bucket: every request answered.
    assert_eq!(answers.keys().collect::<Vec<_>>(), ["code 1"]);
    if let Break::Pause = how {
        master.resume().unwrap();
    }
    running.stop().await;
}
