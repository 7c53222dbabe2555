//! Production connections against real servers (testkit): TLS with the harness's CA, mutual
//! TLS, an ACL user under exactly docs/operating.md's minimal rule, and the master that a
//! sentinel names, followed through a failover under load. Every refusal — a CA that did not
//! sign the server's certificate, an expired certificate, a wrong hostname, a wrong password, a
//! missing permission — is a configuration error naming its cause, and never shows the password.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ratelimit_client::{
    Class, Config, ConnectionSettings, Error, Limit, Limiter, Policy, Source, Store,
};
use testkit::{ClientCerts, Options, Pki, Sentinel, Server, ServerCert, Tls};

const PASSWORD: &str = "gw-S3cret!pw";

fn pki() -> Pki {
    Pki::new().unwrap()
}

fn with_module(mut options: Options) -> Options {
    options.module = Some((testkit::module_path().unwrap(), vec![]));
    options
}

fn tls_server(pki: &Pki, cert: ServerCert, clients: ClientCerts) -> Server {
    Server::start(with_module(Options {
        tls: Some(Tls {
            pki: pki.clone(),
            cert,
            clients,
        }),
        ..Options::default()
    }))
    .unwrap()
}

/// `rediss://127.0.0.1:P/?ca=…` plus more parameters.
fn url(server: &Server, pki: &Pki, more: &str) -> String {
    format!(
        "rediss://127.0.0.1:{}/?ca={}{more}",
        server.port,
        pki.ca.display()
    )
}

async fn decides(store: &Store) {
    // A long deadline: a loaded test host must not turn a decision into a timeout.
    let d = store
        .clone()
        .with_deadline(Duration::from_secs(2))
        .decide("rl:conn", &Policy::gcra(10, 60_000), 1)
        .await
        .unwrap();
    assert!(d.allowed);
}

async fn refused(url: &str) -> String {
    match Store::connect(url).await {
        Err(Error::Config(why)) => why,
        Err(other) => panic!("{url}: not a configuration error: {other:?}"),
        Ok(_) => panic!("{url}: connected"),
    }
}

#[tokio::test]
async fn tls_with_the_ca_decides_and_every_bad_certificate_is_named() {
    let pki = pki();
    let good = tls_server(&pki, ServerCert::Good, ClientCerts::Optional);
    decides(&Store::connect(&url(&good, &pki, "")).await.unwrap()).await;
    let by_name = format!("rediss://localhost:{}/?ca={}", good.port, pki.ca.display());
    decides(&Store::connect(&by_name).await.unwrap()).await;

    let wrong_ca = format!(
        "rediss://127.0.0.1:{}/?ca={}",
        good.port,
        pki.other_ca.display()
    );
    assert!(refused(&wrong_ca)
        .await
        .contains("not signed by a trusted CA"));

    let expired = tls_server(&pki, ServerCert::Expired, ClientCerts::Optional);
    assert!(refused(&url(&expired, &pki, "")).await.contains("expired"));

    let elsewhere = tls_server(&pki, ServerCert::WrongHost, ClientCerts::Optional);
    let why = refused(&url(&elsewhere, &pki, "")).await;
    assert!(why.contains("does not name this host"), "{why}");
    // The named switch: the chain is still verified, the name is not.
    let skip = url(&elsewhere, &pki, "&skip_hostname_verification=true");
    decides(&Store::connect(&skip).await.unwrap()).await;
    let skip_wrong_ca = format!(
        "rediss://127.0.0.1:{}/?ca={}&skip_hostname_verification=true",
        elsewhere.port,
        pki.other_ca.display()
    );
    assert!(refused(&skip_wrong_ca)
        .await
        .contains("not signed by a trusted CA"));
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let pki = pki();
    let server = tls_server(&pki, ServerCert::Good, ClientCerts::Required);
    let with_cert = url(
        &server,
        &pki,
        &format!(
            "&cert={}&key={}",
            pki.client.cert.display(),
            pki.client.key.display()
        ),
    );
    decides(&Store::connect(&with_cert).await.unwrap()).await;
    match Store::connect(&url(&server, &pki, "")).await {
        // TLS 1.3: the server's refusal of a missing certificate reaches the client after the
        // handshake, as a closed connection (or an alert, when it arrives in time).
        Err(Error::Config(why)) | Err(Error::Unreachable(why)) => {
            assert!(why.contains("127.0.0.1"), "{why}")
        }
        other => panic!("connected without a client certificate: {:?}", other.err()),
    }
    let missing_key = url(
        &server,
        &pki,
        &format!("&cert={}", pki.client.cert.display()),
    );
    assert!(refused(&missing_key).await.contains("needs its key"));
}

#[tokio::test]
async fn an_acl_user_under_the_minimal_rule_decides_and_refusals_name_the_cause() {
    let pki = pki();
    let acl = [
        "user default off".to_string(),
        "user admin on >adminpass ~* &* +@all".to_string(),
        testkit::minimal_module_acl("gw", PASSWORD, "rl:*"),
        // The minimal rule less one command.
        testkit::minimal_module_acl("nogcra", PASSWORD, "rl:*").replace(" +rl.gcra", ""),
    ]
    .join("\n");
    let server = Server::start(with_module(Options {
        tls: Some(Tls::new(&pki)),
        acl: Some(acl),
        admin: Some(("admin".into(), "adminpass".into())),
        ..Options::default()
    }))
    .unwrap();
    // Percent-encoded in the URL: `!` is fine as it is, the decoder takes both.
    let as_user = |user: &str, pass: &str| {
        format!(
            "rediss://{user}:{pass}@127.0.0.1:{}/?ca={}",
            server.port,
            pki.ca.display()
        )
    };
    let store = Store::connect(&as_user("gw", "gw-S3cret%21pw"))
        .await
        .unwrap();
    decides(&store).await;
    store
        .check_access("rl:probe", &Policy::gcra(1, 1000))
        .await
        .unwrap();
    let mut said = Vec::new();

    let why = refused(&as_user("gw", "wrong")).await;
    assert!(why.contains("wrong user name or password"), "{why}");
    assert!(why.contains("user 'gw'"), "{why}");
    said.push(why);

    let limited = Store::connect(&as_user("nogcra", PASSWORD)).await.unwrap();
    let why = match limited
        .check_access("rl:probe", &Policy::gcra(1, 1000))
        .await
    {
        Err(Error::Config(why)) => why,
        other => panic!("{other:?}"),
    };
    assert!(why.contains("GCRA") && why.contains("rl:probe"), "{why}");
    said.push(why);
    // A key outside the user's pattern.
    let why = format!(
        "{:?}",
        store.check_access("other:x", &Policy::gcra(1, 1000)).await
    );
    assert!(why.contains("NOPERM"), "{why}");
    said.push(why);
    // And a request after start: a configuration error, never a fallback.
    let e = store
        .clone()
        .with_deadline(Duration::from_secs(2))
        .decide("other:x", &Policy::gcra(1, 1000), 1)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Config(_)) && !e.store_down(), "{e:?}");

    let settings = ConnectionSettings::parse(&as_user("gw", PASSWORD)).unwrap();
    said.push(format!("{settings} {settings:?}"));
    for text in said {
        assert!(
            !text.contains(PASSWORD) && !text.contains("S3cret"),
            "{text}"
        );
    }
}

/// A master and a replica, both with the module, TLS and ACL users; a sentinel with a password
/// of its own, over TLS too.
struct Replicated {
    master: Server,
    replica: Server,
    sentinel: Sentinel,
    pki: Pki,
}

fn replicated() -> Replicated {
    let pki = pki();
    let acl = [
        "user default off".to_string(),
        "user admin on >adminpass ~* &* +@all".to_string(),
        testkit::minimal_module_acl("gw", PASSWORD, "rl:*"),
    ]
    .join("\n");
    let options = with_module(Options {
        tls: Some(Tls::new(&pki)),
        acl: Some(acl),
        admin: Some(("admin".into(), "adminpass".into())),
        ..Options::default()
    });
    let master = Server::start(options.clone()).unwrap();
    let replica = Server::start(Options {
        replica_of: Some(master.port),
        ..options
    })
    .unwrap();
    let sentinel = Sentinel::start(&master, "mymaster", Some("sentinel-pw")).unwrap();
    sentinel.wait_for_replicas(1).unwrap();
    Replicated {
        master,
        replica,
        sentinel,
        pki,
    }
}

impl Replicated {
    fn url(&self) -> String {
        format!(
            "rediss+sentinel://gw:{PASSWORD}@127.0.0.1:{}/mymaster?ca={}&sentinel_password=sentinel-pw",
            self.sentinel.port,
            self.pki.ca.display()
        )
    }
}

/// A limiter over the sentinels' master with a limit of each class that falls back, each of
/// which the store decides before the test breaks the master.
async fn loaded(r: &Replicated) -> (Limiter, [Limit; 3]) {
    let store = Store::connect(&r.url()).await.unwrap();
    decides(&store).await;
    let config = Config {
        deadline: Duration::from_millis(20),
        max_deadline: Duration::from_millis(100),
        gateways: Some(2),
        ..Config::default()
    };
    let limiter = Limiter::new(store, config);
    let limits = [
        Limit::new("login", Policy::gcra(1_000_000, 1000), Class::Security),
        Limit::new("api", Policy::gcra(1_000_000, 1000), Class::Contract),
        Limit::new(
            "quota",
            Policy::fixed_window(1_000_000, 60_000),
            Class::Billing,
        ),
    ];
    // Before: the store decides (a loaded host may make one call miss its deadline).
    for limit in &limits {
        let mut by_store = false;
        for _ in 0..100 {
            let key = format!("rl:{}", limit.name());
            if limiter.check(limit, &key).await.unwrap().source == Source::Store {
                by_store = true;
                break;
            }
        }
        assert!(by_store, "{}", limit.name());
    }
    (limiter, limits)
}

/// Checks each limit in turn from the moment the master broke until every class is decided by
/// the store again, counting per class and source; asserts that every check was decided (by
/// the store or its class's fallback), none long past its deadline, and the promoted replica
/// decides now. Prints the counts and the gap.
async fn through_the_switch(r: &Replicated, limiter: &Limiter, limits: &[Limit], old: u16) {
    let broken = Instant::now();
    let mut counts: BTreeMap<(&str, String), u64> = BTreeMap::new();
    let mut hung = 0;
    let mut back: Option<Duration> = None;
    let mut errors = Vec::new();
    let give_up = Instant::now() + Duration::from_secs(90);
    while back.is_none() && Instant::now() < give_up {
        let mut all_store = true;
        for limit in limits {
            let started = Instant::now();
            let result = limiter.check(limit, &format!("rl:{}", limit.name())).await;
            // Far beyond the 100 ms deadline: a call that took this long waited on something
            // no deadline bounded.
            if started.elapsed() > Duration::from_secs(2) {
                hung += 1;
            }
            let source = match result {
                Ok(d) => format!("{:?}", d.source),
                Err(e) => {
                    errors.push(e.to_string());
                    format!("error:{}", e.kind())
                }
            };
            all_store &= source == "Store";
            *counts.entry((limit.name(), source)).or_default() += 1;
        }
        if all_store {
            back = Some(broken.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    eprintln!("decisions during the switch: {counts:?}; store decisions again after {back:?}");
    assert!(
        back.is_some(),
        "no store decision after the failover: {counts:?} {errors:?}"
    );
    assert_eq!(hung, 0);
    assert_eq!(r.sentinel.master_port().unwrap(), r.replica.port);
    assert_ne!(r.replica.port, old);
    // The client writes to the promoted replica now. Not read off the checks above: their keys
    // live a millisecond, and in a manual failover the old master answers until the sentinel
    // demotes it (its writes are then lost to the resync), so the client moves on its
    // `READONLY`, a little later. A key that lives a minute shows the move once it is made.
    let moved = Limit::new("moved", Policy::gcra(10, 60_000), Class::Contract);
    while !r
        .replica
        .cli(&["EXISTS", "rl:moved"])
        .unwrap()
        .contains('1')
    {
        assert!(
            Instant::now() < give_up,
            "the client never wrote to the promoted replica"
        );
        let _ = limiter.check(&moved, "rl:moved").await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Every check during the switch was decided: by the store or by its class's fallback.
    assert!(errors.is_empty(), "{errors:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_master_a_sentinel_names_is_followed_through_a_failover_under_load() {
    let mut r = replicated();
    let (limiter, limits) = loaded(&r).await;
    let old = r.master.port;
    r.master.kill();
    through_the_switch(&r, &limiter, &limits, old).await;
    limiter.shutdown().await;
}

/// A master that stops answering without closing its connections (paused: a host cut off the
/// network) sends no reset and no `READONLY`: only the sentinel's `+switch-master` tells the
/// client to move, and it moves while the old master is still silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_master_is_left_when_the_sentinel_announces_the_new_one() {
    let r = replicated();
    let (limiter, limits) = loaded(&r).await;
    let old = r.master.port;
    r.master.pause().unwrap();
    through_the_switch(&r, &limiter, &limits, old).await;
    r.master.resume().unwrap();
    limiter.shutdown().await;
}

/// A manual failover (`SENTINEL FAILOVER`): the old master stays up and is demoted; the client
/// moves to the promoted replica (announced, or told by `READONLY`), every check decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_failover_moves_the_client_to_the_promoted_replica() {
    let r = replicated();
    let (limiter, limits) = loaded(&r).await;
    let old = r.master.port;
    let give_up = Instant::now() + Duration::from_secs(60);
    // NOGOODSLAVE until the sentinel has fresh news of the replica (its INFO every few seconds).
    loop {
        let said = r
            .sentinel
            .cli(&["SENTINEL", "FAILOVER", "mymaster"])
            .unwrap();
        if said.contains("OK") {
            break;
        }
        assert!(Instant::now() < give_up, "{said}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Under load until the sentinel names the replica (the old master decides meanwhile).
    while r.sentinel.master_port().ok() != Some(r.replica.port) {
        assert!(
            Instant::now() < give_up,
            "no failover: {}",
            r.sentinel.log()
        );
        for limit in &limits {
            limiter
                .check(limit, &format!("rl:{}", limit.name()))
                .await
                .unwrap();
        }
    }
    through_the_switch(&r, &limiter, &limits, old).await;
    // The promoted replica decides calls sent to it (`RL.GCRA`; what a master replicates to
    // it is `RL.SETSTATE`), every check decided meanwhile.
    while !r
        .replica
        .cli(&["INFO", "commandstats"])
        .unwrap()
        .to_ascii_lowercase()
        .contains("cmdstat_rl.gcra")
    {
        assert!(
            Instant::now() < give_up,
            "the client stayed on the old master"
        );
        for limit in &limits {
            limiter
                .check(limit, &format!("rl:{}", limit.name()))
                .await
                .unwrap();
        }
    }
    limiter.shutdown().await;
}

/// The rules the tests run under are the ones docs/operating.md gives, word for word.
#[test]
fn the_documented_minimal_acl_rules_are_the_tested_ones() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operating.md"))
        .unwrap();
    let module = testkit::minimal_module_acl("gateway", "PASSWORD", "rls:*");
    let functions = testkit::minimal_functions_acl("gateway", "PASSWORD", "rls:*");
    let regions = testkit::minimal_regions_acl("regions", "PASSWORD", "KEYS*");
    for rule in [module, functions, regions] {
        assert!(doc.lines().any(|l| l == rule), "{rule}");
    }
}

/// The Functions backend under exactly docs/operating.md's rule: a server without the module,
/// the library loaded by an admin; the user finds the library and decides through `FCALL`,
/// every algorithm the client calls included, and its password shows nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_functions_backend_decides_under_the_minimal_rule() {
    let acl = [
        "user default off".to_string(),
        "user admin on >adminpass ~* &* +@all".to_string(),
        testkit::minimal_functions_acl("gw", PASSWORD, "rl:*"),
    ]
    .join("\n");
    let server = Server::start(Options {
        acl: Some(acl),
        admin: Some(("admin".into(), "adminpass".into())),
        ..Options::default()
    })
    .unwrap();
    let admin = format!("redis://admin:adminpass@127.0.0.1:{}/", server.port);
    Store::connect_with(&admin, ratelimit_client::LoadLibrary::Missing)
        .await
        .unwrap();
    let store = Store::connect(&format!("redis://gw:{PASSWORD}@127.0.0.1:{}/", server.port))
        .await
        .unwrap();
    assert_eq!(store.backend().name(), "functions");
    decides(&store).await;
    let store = store.with_deadline(Duration::from_secs(2));
    for (key, policy) in [
        ("rl:tb", Policy::token_bucket(10, 1000)),
        ("rl:fw", Policy::fixed_window(10, 1000)),
        ("rl:sl", Policy::sliding_log(10, 1000)),
    ] {
        assert!(store.decide(key, &policy, 1).await.unwrap().allowed);
    }
    // A key outside the pattern is refused by name, a configuration error, never a fallback.
    match store.decide("other:fn", &Policy::gcra(10, 1000), 1).await {
        Err(Error::Config(why)) => assert!(!why.contains(PASSWORD), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// A Cluster of three TLS masters (`tls-cluster yes`): the client reaches every node over TLS
/// with the CA and an ACL user, and decides keys of every slot range.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_every_node_of_a_cluster() {
    let pki = pki();
    let acl = [
        "user default off".to_string(),
        "user admin on >adminpass ~* &* +@all".to_string(),
        testkit::minimal_module_acl("gw", PASSWORD, "rl:*") + " +cluster|slots +ping",
    ]
    .join("\n");
    let options = with_module(Options {
        tls: Some(Tls::new(&pki)),
        acl: Some(acl),
        admin: Some(("admin".into(), "adminpass".into())),
        cluster: true,
        extra: vec!["--tls-cluster".into(), "yes".into()],
        ..Options::default()
    });
    let nodes: Vec<Server> = (0..3)
        .map(|_| Server::start(options.clone()).unwrap())
        .collect();
    let mut create = vec!["--cluster".to_string(), "create".to_string()];
    create.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)));
    create.push("--cluster-yes".into());
    let create: Vec<&str> = create.iter().map(String::as_str).collect();
    nodes[0].cli(&create).unwrap();
    let give_up = Instant::now() + Duration::from_secs(30);
    while !nodes.iter().all(|n| {
        n.cli(&["CLUSTER", "INFO"])
            .unwrap_or_default()
            .contains("cluster_state:ok")
    }) {
        assert!(Instant::now() < give_up, "the cluster did not form");
        std::thread::sleep(Duration::from_millis(50));
    }
    let url = format!(
        "rediss+cluster://gw:{PASSWORD}@127.0.0.1:{}/?ca={}",
        nodes[0].port,
        pki.ca.display()
    );
    let store = Store::connect(&url)
        .await
        .unwrap()
        .with_deadline(Duration::from_secs(2));
    for i in 0..30 {
        let d = store
            .decide(&format!("rl:{i}"), &Policy::gcra(10, 60_000), 1)
            .await
            .unwrap();
        assert!(d.allowed);
    }
    // Every master decided some of them.
    for n in &nodes {
        let keys = n.cli(&["DBSIZE"]).unwrap();
        assert_ne!(keys.trim(), "0", "{}", n.port);
    }
}
