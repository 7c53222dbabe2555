//! The service on a store without the module (docs/functions.md, backends): the Functions
//! library (loaded beforehand, or by the service with REDIS_LOAD_LIBRARY=missing) and the
//! scripts backend (FUNCTION renamed away), each deciding one table as the module does, and
//! /metrics naming the backend. These servers decide on the real clock: the table's rules count
//! per day, so that no window edge falls inside a run.

mod support;

use ratelimit_client::library::LIBRARY_SOURCE;
use support::*;

const SHOP: &str = "
domain: shop
descriptors:
  - key: client
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: path
    value: /admin/*
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: canary
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
";

/// A request's descriptors and (overall, [(code, remaining)]).
type Row<'a> = (&'a [&'a [(&'a str, &'a str)]], (i32, Vec<(i32, u32)>));

async fn table(rls: &mut Rls) {
    let rows: &[Row] = &[
        (&[&[("client", "a")]], (OK, vec![(OK, 2)])),
        (&[&[("client", "a")]], (OK, vec![(OK, 1)])),
        (&[&[("client", "a")]], (OK, vec![(OK, 0)])),
        (&[&[("client", "a")]], (OVER_LIMIT, vec![(OVER_LIMIT, 0)])),
        // All or nothing: b is not charged beside a's denial (answered by the denial cache),
        // only looked at, so its status tells what it has left.
        (
            &[&[("client", "b")], &[("client", "a")]],
            (OVER_LIMIT, vec![(OK, 3), (OVER_LIMIT, 0)]),
        ),
        (&[&[("client", "b")]], (OK, vec![(OK, 2)])),
        (&[&[("path", "/admin/x")]], (OK, vec![(OK, 0)])),
        (
            &[&[("path", "/admin/x")]],
            (OVER_LIMIT, vec![(OVER_LIMIT, 0)]),
        ),
        (&[&[("path", "/admin/y")]], (OK, vec![(OK, 0)])),
        // Shadow mode: decided, answered OK.
        (&[&[("canary", "c")]], (OK, vec![(OK, 0)])),
        (&[&[("canary", "c")]], (OK, vec![(OK, 0)])),
    ];
    for (i, (descriptors, want)) in rows.iter().enumerate() {
        let r = rls.ask(simple("shop", descriptors)).await;
        assert_eq!(&codes(&r), want, "row {i}: {descriptors:?}");
    }
}

fn backend_line(rls: &Rls) -> String {
    let text = rls.running().service.metrics.render();
    text.lines()
        .find(|l| l.starts_with("rls_store_backend{"))
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_module_the_library_and_the_scripts_decide_alike() {
    // The module, for the reference.
    let module = Redis::start();
    let mut rls = Rls::start(&module, SHOP, &[]).await;
    table(&mut rls).await;
    assert!(backend_line(&rls).contains("\"module\""));

    // The library, loaded beforehand.
    let loaded = Redis::plain(&[]);
    let _: String = loaded.cmd(redis::cmd("FUNCTION").arg("LOAD").arg(LIBRARY_SOURCE));
    let mut rls = Rls::start(&loaded, SHOP, &[]).await;
    table(&mut rls).await;
    assert!(backend_line(&rls).contains("\"functions\""));
    assert!(loaded.calls("fcall") > 0);

    // The library loaded by the service.
    let bare = Redis::plain(&[]);
    let mut rls = Rls::start(&bare, SHOP, &[("REDIS_LOAD_LIBRARY", "missing")]).await;
    table(&mut rls).await;
    assert!(backend_line(&rls).contains("\"functions\""));

    // FUNCTION refused: the scripts backend.
    let locked = Redis::plain(&["--rename-command", "FUNCTION", ""]);
    let mut rls = Rls::start(&locked, SHOP, &[("REDIS_LOAD_LIBRARY", "replace")]).await;
    table(&mut rls).await;
    assert!(backend_line(&rls).contains("\"scripts\""));
    assert!(locked.calls("evalsha") > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_gets_the_library_on_every_master_and_again_where_it_went() {
    let nodes = create_cluster((0..3).map(|_| Redis::plain_cluster_node()).collect());
    let urls: Vec<String> = nodes.iter().map(Redis::url).collect();
    let urls = urls.join(",");
    let held = |n: &Redis| -> bool {
        let list: Vec<redis::Value> = n.cmd(
            redis::cmd("FUNCTION")
                .arg("LIST")
                .arg("LIBRARYNAME")
                .arg("ratelimit"),
        );
        !list.is_empty()
    };
    assert!(nodes.iter().all(|n| !held(n)));
    // A generous deadline: the reload below runs within the call that finds the library gone.
    let mut rls = Rls::start(
        &nodes[0],
        SHOP,
        &[
            ("REDIS_TYPE", "CLUSTER"),
            ("REDIS_URL", &urls),
            ("REDIS_LOAD_LIBRARY", "missing"),
            ("RLS_DEADLINE_MS", "5000"),
        ],
    )
    .await;
    assert!(nodes.iter().all(held), "loaded on every master");
    assert!(backend_line(&rls).contains("\"functions\""));
    let r = rls.ask(simple("shop", &[&[("client", "a")]])).await;
    assert_eq!(codes(&r), (OK, vec![(OK, 2)]));

    // The master of the domain's slot loses the library (a node replaced after a failover):
    // the next call loads it there again and is decided by the store.
    let slot: i64 = nodes[0].cmd(redis::cmd("CLUSTER").arg("KEYSLOT").arg("{shop}"));
    let owner = nodes
        .iter()
        .find(|n| {
            let keys: Vec<String> =
                n.cmd(redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(slot).arg(10));
            !keys.is_empty()
        })
        .expect("the domain's keys on one master");
    let _: String = owner.cmd(redis::cmd("FUNCTION").arg("DELETE").arg("ratelimit"));
    let r = rls.ask(simple("shop", &[&[("client", "a")]])).await;
    assert_eq!(codes(&r), (OK, vec![(OK, 1)]));
    assert!(held(owner));
}
