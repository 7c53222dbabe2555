//! The peer's config features answered over real gRPC: quota_mode (the request denied only when
//! every quota descriptor is over) with the passed rules' metadata in the dynamic metadata,
//! share_threshold (one counter for every value of a pattern), a wildcard inside a value, and a
//! limit of 0 resetting at the end of its window. The configs are `tests/compat/configs/`.

mod support;

use ratelimit_rls::pb::google::protobuf::value::Kind;
use support::*;

fn fixture(name: &str) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/compat/configs/");
    std::fs::read_to_string(format!("{path}{name}")).unwrap()
}

fn peer_mode() -> [(&'static str, &'static str); 2] {
    [
        ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false"),
        ("RESPONSE_DYNAMIC_METADATA", "true"),
    ]
}

/// The `service_with_quota.name` of the response's merged metadata, if any.
fn quota_name(
    r: &ratelimit_rls::pb::envoy::service::ratelimit::v3::RateLimitResponse,
) -> Option<String> {
    let meta = r.dynamic_metadata.as_ref()?.fields.get("metadata")?;
    let Some(Kind::StructValue(m)) = &meta.kind else {
        return None;
    };
    let Some(Kind::StructValue(s)) = &m.fields.get("service_with_quota")?.kind else {
        return None;
    };
    match &s.fields.get("name")?.kind {
        Some(Kind::StringValue(n)) => Some(n.clone()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_mode_denies_when_every_quota_descriptor_is_over() {
    let redis = Redis::start();
    let mut rls = Rls::start(&redis, &fixture("example_rl.yaml"), &peer_mode()).await;
    let both: &[&[(&str, &str)]] = &[&[("service", "service_1")], &[("service", "service_2")]];
    let r = rls.ask(simple("rl", both)).await;
    assert_eq!(codes(&r), (OK, vec![(OK, 0), (OK, 1)]));
    assert_eq!(quota_name(&r).as_deref(), Some("service_1"));
    let domain = r
        .dynamic_metadata
        .as_ref()
        .map(|m| m.fields["domain"].kind.clone());
    assert_eq!(domain, Some(Some(Kind::StringValue("rl".into()))));
    // service_1 is over, service_2 is not: the request passes; only service_2's metadata.
    let r = rls.ask(simple("rl", both)).await;
    assert_eq!(codes(&r), (OK, vec![(OVER_LIMIT, 0), (OK, 0)]));
    assert_eq!(quota_name(&r).as_deref(), Some("service_2"));
    // Both over: denied.
    let r = rls.ask(simple("rl", both)).await;
    assert_eq!(
        codes(&r),
        (OVER_LIMIT, vec![(OVER_LIMIT, 0), (OVER_LIMIT, 0)])
    );
    assert_eq!(quota_name(&r), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_threshold_counts_every_matching_value_once() {
    let redis = Redis::start();
    let mut rls = Rls::start(&redis, &fixture("integration_share.yaml"), &peer_mode()).await;
    let d = "share-threshold-test";
    for i in 0..10u32 {
        let value = format!("files/{i}.txt");
        let r = rls.ask(simple(d, &[&[("files", &value)]])).await;
        assert_eq!(codes(&r), (OK, vec![(OK, 9 - i)]), "shared, request {i}");
    }
    let r = rls.ask(simple(d, &[&[("files", "files/other.pdf")]])).await;
    assert_eq!(codes(&r), (OVER_LIMIT, vec![(OVER_LIMIT, 0)]));
    let m = rls
        .running()
        .service
        .metrics
        .of("share-threshold-test.files_files/*");
    assert_eq!((m.total_hits, m.over_limit), (11, 1));
    // Without share_threshold each value has its own counter.
    for value in ["files_no_share/a", "files_no_share/b"] {
        let r = rls.ask(simple(d, &[&[("files_no_share", value)]])).await;
        assert_eq!(codes(&r), (OK, vec![(OK, 9)]), "{value}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wildcards_inside_values_and_a_zero_limit_resetting_with_its_window() {
    let redis = Redis::start();
    let mut rls = Rls::start(&redis, &fixture("wildcard.yaml"), &peer_mode()).await;
    let d = "test-domain";
    let r = rls.ask(simple(d, &[&[("midWild", "bar123b")]])).await;
    assert_eq!(codes(&r), (OK, vec![(OK, 19)]));
    let r = rls.ask(simple(d, &[&[("multiWild", "foo1bar2baz")]])).await;
    assert_eq!(codes(&r), (OK, vec![(OK, 9)]));
    let r = rls.ask(simple(d, &[&[("multiWild", "foo1baz")]])).await;
    assert_eq!(codes(&r), (OK, vec![(OK, 0)]), "no rule: no limit");

    rls.write("rl.yaml", &fixture("example_rl.yaml"));
    until("the watcher loads rl.yaml", || {
        rls.running().service.config().domains.contains_key("rl")
    })
    .await;
    // A limit of 0 is over at once and resets with its minute, on this server's clock as the
    // peer's (read around the call: either second is right).
    let secs = || {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        60 - (now % 60) as i64
    };
    let before = secs();
    let r = rls
        .ask(simple("rl", &[&[("foo", "x"), ("bar", "banned")]]))
        .await;
    let after = secs();
    assert_eq!(codes(&r), (OVER_LIMIT, vec![(OVER_LIMIT, 0)]));
    let reset = r.statuses[0].duration_until_reset.as_ref().unwrap().seconds;
    assert!(
        reset == before || reset == after,
        "{reset} not in {{{before}, {after}}}"
    );
}
