//! The RLS on a Redis Cluster (REDIS_TYPE=CLUSTER): a request's descriptors share the domain's
//! hash tag, so one RL.ALL on the slot's node decides them all, all or nothing.

mod support;

use support::*;

const SHOP: &str = "
domain: shop
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: sliding_log}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: gcra}
";

/// Three masters, no replicas, every slot covered.
fn cluster() -> Vec<Redis> {
    create_cluster((0..3).map(|_| Redis::cluster_node()).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_rl_all_per_request_on_the_domains_slot() {
    let nodes = cluster();
    let urls: Vec<String> = nodes.iter().map(Redis::url).collect();
    let urls = urls.join(",");
    let mut rls = Rls::start(
        &nodes[0],
        SHOP,
        &[("REDIS_TYPE", "CLUSTER"), ("REDIS_URL", &urls)],
    )
    .await;
    let three: &[&[(&str, &str)]] = &[&[("client", "a")], &[("path", "/x")], &[("tenant", "t")]];
    let r = rls.ask(simple("shop", three)).await;
    assert_eq!(codes(&r), (OK, vec![(OK, 2), (OK, 0), (OK, 9)]));
    // The path is spent: denied, and neither other descriptor is charged.
    let r = rls.ask(simple("shop", three)).await;
    assert_eq!(
        codes(&r),
        (OVER_LIMIT, vec![(OK, 2), (OVER_LIMIT, 0), (OK, 9)])
    );
    // Every key is on the node serving the slot of {shop}; two RL.ALL calls, both there.
    let slot: i64 = nodes[0].cmd(redis::cmd("CLUSTER").arg("KEYSLOT").arg("{shop}"));
    let owner = nodes
        .iter()
        .find(|n| {
            let keys: Vec<String> =
                n.cmd(redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(slot).arg(10));
            keys.len() == 3
        })
        .expect("the three keys on one node");
    assert_eq!(owner.calls("rl.all"), 2);
    let elsewhere: u64 = nodes.iter().map(|n| n.calls("rl.all")).sum();
    assert_eq!(elsewhere, 2);
}
