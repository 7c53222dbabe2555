//! Login protection through the RLS (docs/envoy.md, "A login endpoint"): the config fixture that
//! page shows, loaded as it is, with the descriptors Envoy's route sends. The request path checks
//! (hits_addend 0) and the stream-done call charges a failure, so only failures count: per account
//! and per (account, network) and per network for unknown devices, and the trusted devices' own
//! budget, which an attacker's failures never touch. Real server, real gRPC.

mod support;

use ratelimit_rls::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use support::*;

const FIXTURE: &str = include_str!("fixtures/login.yaml");

fn unknown(account: &str, network: &str) -> [Vec<(&'static str, String)>; 3] {
    let device = ("header_match", "unknown".to_string());
    let acct = ("login_account", account.to_string());
    let net = ("masked_remote_address", network.to_string());
    [
        vec![device.clone(), acct.clone()],
        vec![device.clone(), acct, net.clone()],
        vec![device, net],
    ]
}

fn trusted(account: &str) -> Vec<(&'static str, String)> {
    vec![
        ("header_match", "trusted".to_string()),
        ("login_account", account.to_string()),
    ]
}

fn entries<'a>(e: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    e.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// The request path: every descriptor checked, none charged.
fn check(descriptors: &[Vec<(&'static str, String)>]) -> Vec<RateLimitDescriptor> {
    descriptors
        .iter()
        .map(|e| descriptor(&entries(e), Some(0)))
        .collect()
}

/// The stream-done call after a failed login: each descriptor charged `n`.
fn failed(descriptors: &[Vec<(&'static str, String)>], n: u64) -> Vec<RateLimitDescriptor> {
    descriptors
        .iter()
        .map(|e| {
            let mut d = descriptor(&entries(e), Some(n));
            d.entries.insert(
                0,
                Entry {
                    key: "rls_settle".into(),
                    value: "1".into(),
                },
            );
            d
        })
        .collect()
}

#[test]
fn docs_envoy_md_shows_the_fixture() {
    let docs = include_str!("../../docs/envoy.md");
    assert!(
        docs.contains(FIXTURE),
        "docs/envoy.md must show rls/tests/fixtures/login.yaml as it is"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_count_per_account_network_and_pair_and_trusted_devices_pass() {
    let redis = Redis::start();
    let mut rls = Rls::start(&redis, FIXTURE, &[]).await;
    let home = unknown("alice", "203.0.113.0/24");
    let r = rls.ask(request("login", check(&home), 0)).await;
    assert_eq!(codes(&r), (OK, vec![(OK, 100), (OK, 10), (OK, 50)]));
    // Ten failures from one network: its (account, network) count is spent.
    for _ in 0..10 {
        let r = rls.ask(request("login", failed(&home, 1), 0)).await;
        assert_eq!(r.overall_code, OK, "a settle is never denied");
    }
    let r = rls.ask(request("login", check(&home), 0)).await;
    assert_eq!(
        codes(&r),
        (OVER_LIMIT, vec![(OK, 90), (OVER_LIMIT, 0), (OK, 40)])
    );
    // From another network alice is still checked.
    let away = unknown("alice", "2001:db8:1:2::/64");
    let r = rls.ask(request("login", check(&away), 0)).await;
    assert_eq!(codes(&r), (OK, vec![(OK, 90), (OK, 10), (OK, 50)]));
    // An attacker spends the account's 100 from many networks …
    let r = rls.ask(request("login", failed(&away, 90), 0)).await;
    assert_eq!(r.overall_code, OK);
    let elsewhere = unknown("alice", "2001:db8:9:9::/64");
    let r = rls.ask(request("login", check(&elsewhere), 0)).await;
    assert_eq!(codes(&r).0, OVER_LIMIT);
    assert_eq!(codes(&r).1[0], (OVER_LIMIT, 0));
    // … and a trusted device of alice's is checked against its own budget.
    let owner = [trusted("alice")];
    let r = rls.ask(request("login", check(&owner), 0)).await;
    assert_eq!(codes(&r), (OK, vec![(OK, 20)]));
    // One network's 50 at once, over all accounts.
    let net = unknown("bob", "198.51.100.0/24");
    rls.ask(request("login", failed(&net[2..], 50), 0)).await;
    let other = unknown("carol", "198.51.100.0/24");
    let r = rls.ask(request("login", check(&other), 0)).await;
    assert_eq!(
        codes(&r),
        (OVER_LIMIT, vec![(OK, 100), (OK, 10), (OVER_LIMIT, 0)])
    );
    // Refilling at 200 an hour: one more failure from it in 18 s.
    rls.advance(&redis, 18_000);
    let r = rls.ask(request("login", check(&other), 0)).await;
    assert_eq!(codes(&r), (OK, vec![(OK, 100), (OK, 10), (OK, 1)]));
}
