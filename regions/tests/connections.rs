//! The controller on production connections (testkit's real servers): a region over mutual TLS
//! as an ACL user under docs/operating.md's minimal rule, its password from an environment
//! variable; a region behind a sentinel; a wrong password or CA stops the start naming the cause
//! and never the password.

use std::process::Command;

use testkit::{ClientCerts, Options, Pki, Sentinel, Server, Tls};

const BIN: &str = env!("CARGO_BIN_EXE_redis-ratelimit-regions");
const PASSWORD: &str = "regions-S3cret-pw";

fn secure(pki: &Pki, clients: ClientCerts) -> Options {
    Options {
        module: Some((testkit::module_path().unwrap(), vec![])),
        tls: Some(Tls {
            clients,
            ..Tls::new(pki)
        }),
        acl: Some(
            [
                "user default off".to_string(),
                "user admin on >adminpass ~* &* +@all".to_string(),
                testkit::minimal_regions_acl("regions", PASSWORD, "cli:*"),
                // The rule without RL.SHARE: a missing permission.
                format!("user noshare on >{PASSWORD} ~cli:* resetchannels -@all +command|info +rl.demand +scan"),
                // The rule without RL.DEMAND.
                format!("user nodemand on >{PASSWORD} ~cli:* resetchannels -@all +command|info +rl.share +scan"),
            ]
            .join("\n"),
        ),
        admin: Some(("admin".into(), "adminpass".into())),
        ..Options::default()
    }
}

/// One period with `region` (the TOML lines after `name`): (success, stdout, stderr).
fn once(region: &str, password: &str) -> (bool, String, String) {
    let dir = testkit::Scratch::new("regions").unwrap();
    let config = dir.join("regions.toml");
    let text = format!(
        "[[regions]]\nname = \"a\"\n{region}\n[[keys]]\nkeys = [\"cli:{{1..3}}\"]\n\
         algorithm = \"FIXEDWINDOW\"\nlimit = 100\nwindow_ms = 1000\n"
    );
    std::fs::write(&config, text).unwrap();
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&config)
        .arg("--once")
        .env("REGION_A_PASSWORD", password)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_region_over_mutual_tls_as_an_acl_user_and_the_refusals() {
    let pki = Pki::new().unwrap();
    let server = Server::start(secure(&pki, ClientCerts::Required)).unwrap();
    let region = |ca: &std::path::Path| {
        format!(
            "url = \"rediss://127.0.0.1:{}/\"\nuser = \"regions\"\npassword_env = \"REGION_A_PASSWORD\"\n\
             tls_ca = \"{}\"\ntls_cert = \"{}\"\ntls_key = \"{}\"",
            server.port,
            ca.display(),
            pki.client.cert.display(),
            pki.client.key.display()
        )
    };
    let (ok, out, err) = once(&region(&pki.ca), PASSWORD);
    assert!(ok, "{out}{err}");
    assert!(out.contains("shares_written=3"), "{out}");
    assert!(!format!("{out}{err}").contains(PASSWORD));

    let (ok, out, err) = once(&region(&pki.ca), "wrong-pw");
    assert!(!ok);
    assert!(err.contains("wrong user name or password"), "{err}");
    assert!(!format!("{out}{err}").contains("wrong-pw"));

    let (ok, _, err) = once(&region(&pki.other_ca), PASSWORD);
    assert!(!ok);
    assert!(err.contains("not signed by a trusted CA"), "{err}");
    assert!(!err.contains(PASSWORD));
}

#[test]
fn a_region_behind_a_sentinel() {
    let pki = Pki::new().unwrap();
    let options = secure(&pki, ClientCerts::Optional);
    let master = Server::start(options.clone()).unwrap();
    // The sentinel's password is the store's here: one variable for both.
    let sentinel = Sentinel::start(&master, "mymaster", Some(PASSWORD)).unwrap();
    let region = format!(
        "url = \"rediss+sentinel://regions@127.0.0.1:{}/mymaster\"\npassword_env = \"REGION_A_PASSWORD\"\n\
         tls_ca = \"{}\"\nsentinel_password_env = \"REGION_A_PASSWORD\"",
        sentinel.port,
        pki.ca.display()
    );
    let (ok, out, err) = once(&region, PASSWORD);
    assert!(ok, "{out}{err}");
    assert!(out.contains("shares_written=3"), "{out}");
    assert!(master.cli(&["EXISTS", "cli:1"]).unwrap().contains('1'));
}

/// The password from a file (its first line); a user missing `RL.SHARE` or `RL.DEMAND` stops the start naming
/// the permission, never the password (it was a cause in each period's report, the run going on).
#[test]
fn a_password_file_and_a_missing_permission() {
    let pki = Pki::new().unwrap();
    let server = Server::start(secure(&pki, ClientCerts::Optional)).unwrap();
    let dir = testkit::Scratch::new("regions-secret").unwrap();
    let file = dir.join("password");
    std::fs::write(&file, format!("{PASSWORD}\n")).unwrap();
    let region = |user: &str| {
        format!(
            "url = \"rediss://127.0.0.1:{}/\"\nuser = \"{user}\"\npassword_file = \"{}\"\ntls_ca = \"{}\"",
            server.port,
            file.display(),
            pki.ca.display()
        )
    };
    let (ok, out, err) = once(&region("regions"), "unused");
    assert!(ok, "{out}{err}");
    assert!(out.contains("shares_written=3"), "{out}");
    assert!(!format!("{out}{err}").contains(PASSWORD));

    // The start's access check wrote nothing under the key it named.
    assert!(server.cli(&["EXISTS", "cli:{1..3}"]).unwrap().contains('0'));

    let (ok, out, err) = once(&region("noshare"), "unused");
    assert!(!ok, "{out}{err}");
    assert!(err.to_ascii_lowercase().contains("rl.share"), "{err}");
    assert!(!format!("{out}{err}").contains(PASSWORD));

    let (ok, out, err) = once(&region("nodemand"), "unused");
    assert!(!ok, "{out}{err}");
    assert!(err.to_ascii_lowercase().contains("rl.demand"), "{err}");
    assert!(!format!("{out}{err}").contains(PASSWORD));
}
