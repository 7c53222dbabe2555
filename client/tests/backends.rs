//! The backends without the module (docs/functions.md, backends and versions): one decision
//! table run through the Functions library (FCALL) and through the scripts backend (EVALSHA of
//! the scripts generated from the same library, on a server where `FUNCTION` is renamed away or
//! denied by ACL), answering alike; NOSCRIPT answered by sending the script again; the library
//! loaded where absent, replaced where older, refused where incompatible.

mod support;

use std::time::Duration;

use ratelimit_client::library::{LIBRARY_SOURCE, LOAD_COMMAND};
use ratelimit_client::{Backend, LoadLibrary, Policy, Shape, ShapeDelay, Store, Version};

use support::Server;

/// The decision table: every typed call the client makes, on fresh keys, as five (or six)
/// integers each.
async fn table(store: &Store) -> Vec<Vec<i64>> {
    let mut out = Vec::new();
    let policies = [
        Policy::gcra(10, 60_000).burst(20),
        Policy::token_bucket(10, 60_000),
        Policy::sliding_log(10, 60_000),
        Policy::sliding_counter(10, 60_000),
        Policy::fixed_window(10, 86_400_000),
    ];
    for (n, p) in policies.iter().enumerate() {
        for cost in [1, 4, 0, 3, 9, 9] {
            let d = store.decide(&format!("t:{n}"), p, cost).await.unwrap();
            out.push(d.reply().to_vec());
        }
        let d = store.peek(&format!("t:{n}")).await.unwrap().unwrap();
        out.push(d.reply().to_vec());
    }
    let shape = Shape {
        limit: 1,
        window_ms: 60_000,
        queue: Some(5),
        delay: ShapeDelay::Delay(1),
    };
    for _ in 0..3 {
        out.push(
            store
                .shape("t:shape", &shape, 1)
                .await
                .unwrap()
                .reply()
                .to_vec(),
        );
    }
    let p = Policy::token_bucket(100, 60_000);
    out.push(
        store
            .lease("t:lease", &p, 30)
            .await
            .unwrap()
            .reply()
            .to_vec(),
    );
    out.push(
        store
            .refund("t:lease", 5)
            .await
            .unwrap()
            .unwrap()
            .reply()
            .to_vec(),
    );
    assert!(store.refund("t:none", 5).await.unwrap().is_none());
    for _ in 0..4 {
        let all = store
            .all(&[
                ("t:{a}:1", Policy::gcra(5, 60_000), 1),
                ("t:{a}:2", Policy::fixed_window(3, 86_400_000), 1),
            ])
            .await
            .unwrap();
        out.push(all.combined.reply().to_vec());
        for l in &all.limiters {
            out.push(l.reply().to_vec());
        }
    }
    // A post-response settle: one limiter charged 3 more, the other given 1 back.
    let settled = store
        .settle(&[
            ("t:{a}:1", Policy::gcra(5, 60_000), 3),
            ("t:{a}:2", Policy::fixed_window(3, 86_400_000), -1),
        ])
        .await
        .unwrap();
    for l in &settled.limiters {
        out.push(l.reply().to_vec());
    }
    out
}

/// Equal but for the times (fields 4 and 5, the sixth a delay), which may differ by the
/// milliseconds between the two runs (a loaded machine: up to 2 s).
fn alike(a: &[Vec<i64>], b: &[Vec<i64>]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x[..3], y[..3], "{a:?}\nvs\n{b:?}");
        for i in 3..x.len() {
            assert!((x[i] - y[i]).abs() <= 2_000, "{x:?} vs {y:?}");
        }
    }
}

fn library_on(s: &Server, source: &str, replace: bool) {
    let mut cmd = redis::cmd("FUNCTION");
    cmd.arg("LOAD");
    if replace {
        cmd.arg("REPLACE");
    }
    let _: String = cmd.arg(source).query(&mut s.connect()).unwrap();
}

fn version_on(s: &Server) -> String {
    redis::cmd("FCALL_RO")
        .arg("rl_version")
        .arg(0)
        .query(&mut s.connect())
        .unwrap()
}

/// The carried library declaring another version.
fn versioned(v: &str) -> String {
    let carried = format!("local LIBRARY_VERSION = '{}'", Version::carried());
    assert!(LIBRARY_SOURCE.contains(&carried));
    LIBRARY_SOURCE.replacen(&carried, &format!("local LIBRARY_VERSION = '{v}'"), 1)
}

async fn connect(s: &Server, load: LoadLibrary) -> Result<Store, ratelimit_client::Error> {
    Ok(Store::connect_with(&s.url(), load)
        .await?
        .with_deadline(Duration::from_secs(5)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_decision_table_on_functions_and_scripts() {
    let functions = Server::plain();
    library_on(&functions, LIBRARY_SOURCE, false);
    let fcall = connect(&functions, LoadLibrary::No).await.unwrap();
    assert_eq!(fcall.backend(), Backend::Functions);

    // A locked-down service: FUNCTION renamed away.
    let renamed = Server::plain_with(&["--rename-command", "FUNCTION", ""]);
    let scripts = connect(&renamed, LoadLibrary::Replace).await.unwrap();
    assert_eq!(scripts.backend(), Backend::Scripts);

    let a = table(&fcall).await;
    let b = table(&scripts).await;
    alike(&a, &b);
    assert!(renamed.calls("evalsha") > 0);

    // The scripts gone (a restart, a failover): NOSCRIPT, answered by sending the script again.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut renamed.connect())
        .unwrap();
    let d = scripts
        .decide("t:after-flush", &Policy::gcra(10, 60_000), 1)
        .await
        .unwrap();
    assert!(d.allowed);
    let d = scripts
        .decide("t:after-flush", &Policy::gcra(10, 60_000), 1)
        .await
        .unwrap();
    assert_eq!(d.remaining, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_without_function_gets_the_scripts_backend() {
    let s = Server::plain();
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "gateway",
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-function",
        ])
        .query(&mut s.connect())
        .unwrap();
    let url = s.url().replace("redis://", "redis://gateway:pw@");
    let store = Store::connect_with(&url, LoadLibrary::Missing)
        .await
        .unwrap();
    assert_eq!(store.backend(), Backend::Scripts);
    let store = store.with_deadline(Duration::from_secs(5));
    let d = store
        .decide("k", &Policy::gcra(2, 60_000), 1)
        .await
        .unwrap();
    assert!(d.allowed && d.remaining == 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_library_is_loaded_replaced_or_refused() {
    // Absent: served through scripts unless the client may load it.
    let s = Server::plain();
    assert_eq!(
        connect(&s, LoadLibrary::No).await.unwrap().backend(),
        Backend::Scripts
    );
    let store = connect(&s, LoadLibrary::Missing).await.unwrap();
    assert_eq!(store.backend(), Backend::Functions);
    assert_eq!(version_on(&s), Version::carried().to_string());
    assert!(
        store
            .decide("k", &Policy::gcra(2, 60_000), 1)
            .await
            .unwrap()
            .allowed
    );

    // Older: refused, naming both versions and the command, unless told to replace.
    library_on(&s, &versioned("1.0"), true);
    for load in [LoadLibrary::No, LoadLibrary::Missing] {
        let e = connect(&s, load).await.err().expect("refused").to_string();
        assert!(
            e.contains("version 1.0")
                && e.contains(&format!("needs {}", Version::carried()))
                && e.contains(LOAD_COMMAND)
                && e.contains("REDIS_LOAD_LIBRARY=replace"),
            "{e}"
        );
    }
    let store = connect(&s, LoadLibrary::Replace).await.unwrap();
    assert_eq!(store.backend(), Backend::Functions);
    assert_eq!(version_on(&s), Version::carried().to_string());

    // Newer and incompatible: refused even when told to replace; never downgraded.
    library_on(&s, &versioned("9.0"), true);
    let e = connect(&s, LoadLibrary::Replace)
        .await
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.contains("9.0") && e.contains(&Version::carried().to_string()),
        "{e}"
    );
    assert_eq!(version_on(&s), "9.0");

    // Found without it later (a node replaced after a failover): loaded again by the call.
    library_on(&s, LIBRARY_SOURCE, true);
    let store = connect(&s, LoadLibrary::Missing).await.unwrap();
    let _: String = redis::cmd("FUNCTION")
        .arg("DELETE")
        .arg("ratelimit")
        .query(&mut s.connect())
        .unwrap();
    let d = store
        .decide("k2", &Policy::gcra(2, 60_000), 1)
        .await
        .unwrap();
    assert!(d.allowed);
    assert_eq!(version_on(&s), Version::carried().to_string());
}

/// A slot given back on the library's backends is a bare `ZREM key id` (the holders are a sorted
/// set scored by expiry), on FCALL and on the scripts backend alike: it answers whether the id
/// held a slot, frees it for the next ACQUIRE, leaves the key's expiry as it was (the key goes
/// by itself at the last holder's expiry) and takes the set with its last holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_goes_back_by_a_bare_zrem_on_functions_and_scripts() {
    use ratelimit_client::SlotOp;
    let functions = Server::plain();
    library_on(&functions, LIBRARY_SOURCE, false);
    let renamed = Server::plain_with(&["--rename-command", "FUNCTION", ""]);
    for (s, load, backend) in [
        (&functions, LoadLibrary::No, Backend::Functions),
        (&renamed, LoadLibrary::Replace, Backend::Scripts),
    ] {
        let store = connect(s, load).await.unwrap();
        assert_eq!(store.backend(), backend);
        let acquire = |id| store.concurrency("jobs", 2, 60_000, SlotOp::Acquire(id));
        assert!(acquire("a").await.unwrap().allowed);
        assert!(acquire("b").await.unwrap().allowed);
        assert!(!acquire("c").await.unwrap().allowed);
        let pexpiretime = || -> i64 {
            redis::cmd("PEXPIRETIME")
                .arg("jobs")
                .query(&mut s.connect())
                .unwrap()
        };
        let expiry = pexpiretime();
        let zrems = s.calls("zrem");
        assert!(store.release_slot("jobs", 2, 60_000, "b").await.unwrap());
        assert_eq!(s.calls("zrem"), zrems + 1, "{backend:?}: one bare ZREM");
        assert!(!store.release_slot("jobs", 2, 60_000, "b").await.unwrap());
        assert_eq!(pexpiretime(), expiry, "{backend:?}: the expiry as it was");
        let c = acquire("c").await.unwrap();
        assert!(c.allowed && c.remaining == 0, "{backend:?}: {c:?}");
        assert!(store.release_slot("jobs", 2, 60_000, "a").await.unwrap());
        assert!(store.release_slot("jobs", 2, 60_000, "c").await.unwrap());
        let exists: i64 = redis::cmd("EXISTS")
            .arg("jobs")
            .query(&mut s.connect())
            .unwrap();
        assert_eq!(exists, 0, "{backend:?}: the set goes with its last holder");
    }
}
