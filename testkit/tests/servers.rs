//! The harness's servers start and answer: TLS (with and without client certificates), ACL
//! users, a replica, and a sentinel that fails the master over to it.

use testkit::{ClientCerts, Options, Pki, Sentinel, Server, Tls};

fn pki() -> Pki {
    Pki::new().unwrap()
}

#[test]
fn tls_server_with_mutual_tls_and_acl_users() {
    let pki = pki();
    let mut tls = Tls::new(&pki);
    tls.clients = ClientCerts::Required;
    let server = Server::start(Options {
        tls: Some(tls),
        acl: Some("user default off\nuser admin on >adminpass ~* &* +@all".into()),
        admin: Some(("admin".into(), "adminpass".into())),
        ..Options::default()
    })
    .unwrap();
    assert!(server.url().starts_with("rediss://127.0.0.1:"));
    assert_eq!(server.cli(&["PING"]).unwrap().trim(), "PONG");
    assert!(server.cli(&["ACL", "WHOAMI"]).unwrap().contains("admin"));
}

#[test]
fn sentinel_fails_a_tls_master_over_to_its_replica() {
    let pki = pki();
    let options = Options {
        tls: Some(Tls::new(&pki)),
        ..Options::default()
    };
    let mut master = Server::start(options.clone()).unwrap();
    let replica = Server::start(Options {
        replica_of: Some(master.port),
        ..options
    })
    .unwrap();
    let sentinel = Sentinel::start(&master, "mymaster", Some("sentinelpass")).unwrap();
    assert_eq!(sentinel.master_port().unwrap(), master.port);
    sentinel.wait_for_replicas(1).unwrap();
    let old = master.port;
    master.kill();
    assert_eq!(sentinel.wait_for_new_master(old).unwrap(), replica.port);
}
