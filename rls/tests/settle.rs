//! Post-response settles (Envoy's `apply_on_stream_done` with a `hits_addend` from metadata):
//! charged to the key the request was decided on, into debt, never denied, so the next request
//! pays exactly what the last one cost beyond its estimate. Real server, real gRPC, Envoy's
//! protos. Every test runs on each backend (`on_every_backend!`): the module, the Functions
//! library alone by FCALL (`rl_settle`), and its scripts by EVALSHA where FUNCTION is refused.

mod support;

use std::time::Duration;

use ratelimit_client::Backend;
use ratelimit_rls::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use ratelimit_rls::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use support::*;

on_every_backend!(
    an_overage_settled_after_the_response_is_paid_by_the_next_request,
    a_smaller_actual_gives_back_only_through_negative_hits,
    several_descriptors_settle_in_one_call,
    a_settle_rule_checks_at_zero_and_charges_after,
    a_frozen_store_journals_billing_settles_and_drops_the_others,
    a_give_back_lifts_a_cached_denial,
);

const AI: &str = "
domain: ai
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: token_bucket}
  - key: model
    rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: gcra}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: token_bucket, settle: true}
  - key: quota
    rate_limit: {unit: day, requests_per_unit: 1000, class: billing}
  - key: api
    rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: gcra}
  - key: calls
    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: gcra}
";

const IETF: &[(&str, &str)] = &[("RLS_IETF_HEADERS", "true")];

/// A descriptor as Envoy's post-response rate limit sends it: the `rls_settle` entry (a
/// `generic_key` action) first, then the request path's entries; `negative` for a give-back.
fn settle(entries: &[(&str, &str)], hits: u64, negative: bool) -> RateLimitDescriptor {
    let mut d = descriptor(entries, Some(hits));
    d.entries.insert(
        0,
        Entry {
            key: "rls_settle".into(),
            value: "true".into(),
        },
    );
    d.is_negative_hits = negative;
    d
}

fn remaining(r: &RateLimitResponse) -> Vec<u32> {
    r.statuses.iter().map(|s| s.limit_remaining).collect()
}

/// The `Retry-After` the RLS asks Envoy to add (with `RLS_IETF_HEADERS`).
fn retry_after(r: &RateLimitResponse) -> Option<String> {
    r.response_headers_to_add
        .iter()
        .find(|h| h.key == "Retry-After")
        .map(|h| h.value.clone())
}

async fn decide(rls: &mut Rls, entries: &[(&str, &str)], hits: u64) -> RateLimitResponse {
    rls.ask(request("ai", vec![descriptor(entries, Some(hits))], 0))
        .await
}

async fn an_overage_settled_after_the_response_is_paid_by_the_next_request(backend: Backend) {
    let redis = Redis::on(backend);
    let mut rls = Rls::start(&redis, AI, IETF).await;
    let bob = [("user", "bob")];
    // Admitted with an estimate of 10 tokens.
    let r = decide(&mut rls, &bob, 10).await;
    assert_eq!(codes(&r), (OK, vec![(OK, 90)]));
    // The response cost 150: the post-response call charges 150 and gives the estimate back,
    // one RL.CHARGE of 140 on the same key. Never denied, though it is far over.
    let charges = redis.store_calls("charge");
    let post = request(
        "ai",
        vec![settle(&bob, 150, false), settle(&bob, 10, true)],
        0,
    );
    let r = rls.ask(post).await;
    assert_eq!(codes(&r), (OK, vec![(OK, 0), (OK, 0)]));
    assert_eq!(redis.store_calls("charge"), charges + 1);
    // 90 − 140 = −50 tokens: a request of 10 needs 60 more, 600 ms each: 36 s exactly.
    let r = decide(&mut rls, &bob, 10).await;
    assert_eq!(codes(&r), (OVER_LIMIT, vec![(OVER_LIMIT, 0)]));
    assert_eq!(retry_after(&r).as_deref(), Some("36"));
    rls.advance(&redis, 35_999);
    assert_eq!(decide(&mut rls, &bob, 10).await.overall_code, OVER_LIMIT);
    rls.advance(&redis, 1);
    assert_eq!(
        codes(&decide(&mut rls, &bob, 10).await),
        (OK, vec![(OK, 0)])
    );
    let m = rls.running().service.metrics.of("ai.user");
    // The two descriptors name one key: settled by their sum, 140.
    assert_eq!(m.settle_charged, 140);
    assert_eq!(m.settle_given_back, 0);
    // Settles are not hits: two admitted, one denied, one admitted.
    assert_eq!(m.total_hits, 40);
    let text = rls.running().service.metrics.render();
    assert!(
        text.contains("rls_rule_settle_charged_total{key=\"ai.user\"} 140"),
        "{text}"
    );
}

async fn a_smaller_actual_gives_back_only_through_negative_hits(backend: Backend) {
    let redis = Redis::on(backend);
    let mut rls = Rls::start(&redis, AI, IETF).await;
    let bob = [("user", "bob")];
    assert_eq!(remaining(&decide(&mut rls, &bob, 50).await), vec![50]);
    // Actual 20: +20 and the estimate 50 given back: net −30, one RL.SETTLE.
    let settles = redis.store_calls("settle");
    let post = request(
        "ai",
        vec![settle(&bob, 20, false), settle(&bob, 50, true)],
        0,
    );
    let r = rls.ask(post).await;
    assert_eq!(codes(&r), (OK, vec![(OK, 80), (OK, 80)]));
    assert_eq!(redis.store_calls("settle"), settles + 1);
    // Without the give-back descriptor a settle only charges: +20 more.
    let r = rls
        .ask(request("ai", vec![settle(&bob, 20, false)], 0))
        .await;
    assert_eq!(codes(&r), (OK, vec![(OK, 60)]));
}

async fn several_descriptors_settle_in_one_call(backend: Backend) {
    let redis = Redis::on(backend);
    let mut rls = Rls::start(&redis, AI, IETF).await;
    let (bob, gpt) = ([("user", "bob")], [("model", "gpt")]);
    let both = request(
        "ai",
        vec![descriptor(&bob, Some(10)), descriptor(&gpt, Some(10))],
        0,
    );
    assert_eq!(codes(&rls.ask(both).await), (OK, vec![(OK, 90), (OK, 990)]));
    let settles = redis.store_calls("settle");
    let post = request(
        "ai",
        vec![settle(&bob, 120, false), settle(&gpt, 120, false)],
        0,
    );
    let r = rls.ask(post).await;
    assert_eq!(codes(&r), (OK, vec![(OK, 0), (OK, 870)]));
    assert_eq!(redis.store_calls("settle"), settles + 1);
    // The user's key is 30 in debt: the next request is denied on it, the model not charged.
    let both = request(
        "ai",
        vec![descriptor(&bob, Some(1)), descriptor(&gpt, Some(1))],
        0,
    );
    let r = rls.ask(both).await;
    assert_eq!(r.overall_code, OVER_LIMIT);
    assert_eq!(r.statuses[0].code, OVER_LIMIT);
    let peek: Vec<i64> = redis.cmd(&mut redis.command("PEEK", &["rls:{ai}:model_gpt:GCRA"]));
    assert_eq!(peek[2], 870);
}

async fn a_settle_rule_checks_at_zero_and_charges_after(backend: Backend) {
    // The Envoy AI Gateway shape: the request path sends hits_addend 0, the response path the
    // tokens, on the same descriptor; `settle: true` tells them apart.
    let redis = Redis::on(backend);
    let mut rls = Rls::start(&redis, AI, IETF).await;
    let acme = [("tenant", "acme")];
    assert_eq!(
        codes(&decide(&mut rls, &acme, 0).await),
        (OK, vec![(OK, 100)])
    );
    let r = decide(&mut rls, &acme, 130).await;
    assert_eq!(codes(&r), (OK, vec![(OK, 0)]));
    // 30 in debt: checks are denied until it is paid, 31 tokens of 600 ms.
    let r = decide(&mut rls, &acme, 0).await;
    assert_eq!(codes(&r), (OVER_LIMIT, vec![(OVER_LIMIT, 0)]));
    assert_eq!(retry_after(&r).as_deref(), Some("19"));
    // Beside a counted descriptor, the check still denies the whole request, and the count
    // (charged by RL.ALL, which takes a cost of 0 as a peek) is given back.
    let calls = [("calls", "acme")];
    let both = request(
        "ai",
        vec![descriptor(&acme, Some(0)), descriptor(&calls, Some(1))],
        0,
    );
    let r = rls.ask(both).await;
    assert_eq!(codes(&r), (OVER_LIMIT, vec![(OVER_LIMIT, 0), (OK, 10)]));
    let peek: Vec<i64> = redis.cmd(&mut redis.command("PEEK", &["rls:{ai}:calls_acme:GCRA"]));
    assert_eq!(peek[2], 10);
    rls.advance(&redis, 18_600);
    assert_eq!(
        codes(&decide(&mut rls, &acme, 0).await),
        (OK, vec![(OK, 1)])
    );
}

async fn a_frozen_store_journals_billing_settles_and_drops_the_others(backend: Backend) {
    let redis = Redis::on(backend);
    let journal =
        // One per backend: the three run at once in this process.
        std::env::temp_dir().join(format!(
            "rl-rls-settle-{}-{}.journal",
            std::process::id(),
            backend.name()
        ));
    let _ = std::fs::remove_file(&journal);
    let path = journal.display().to_string();
    let mut rls = Rls::start(&redis, AI, &[("RLS_BILLING_JOURNAL", &path)]).await;
    let (acme, key1) = ([("quota", "acme")], [("api", "key1")]);
    let both = request(
        "ai",
        vec![descriptor(&acme, Some(1)), descriptor(&key1, Some(1))],
        0,
    );
    assert_eq!(rls.ask(both).await.overall_code, OK);
    redis.freeze();
    for _ in 0..3 {
        let post = request(
            "ai",
            vec![settle(&acme, 30, false), settle(&key1, 30, false)],
            0,
        );
        let ask = rls.client.should_rate_limit(post);
        let r = tokio::time::timeout(Duration::from_secs(20), ask)
            .await
            .expect("answered while the store is frozen")
            .expect("a response")
            .into_inner();
        assert_eq!(r.overall_code, OK);
    }
    let service = &rls.running().service;
    let (quota, api) = (service.metrics.of("ai.quota"), service.metrics.of("ai.api"));
    assert_eq!(quota.settle_journaled, 90, "{quota:?}");
    assert_eq!(api.settle_dropped, 90, "{api:?}");
    let owed = service.limiter().unsettled();
    assert_eq!(owed.get("rls:{ai}:quota_acme:FIXEDWINDOW"), Some(&90));
    // Owed in the journal before the answer: a killed server's successor charges it.
    let written = std::fs::metadata(&journal).map(|m| m.len()).unwrap_or(0);
    assert!(written > 0, "the billing journal holds the settles");
    redis.thaw();
    let report = rls.running.take().unwrap().stop().await;
    assert_eq!(report.unsettled, 0, "{report:?}");
    // 1 decided + 90 owed, charged when the store answered (a settle that timed out may still
    // have landed as well: at least).
    let peek: Vec<i64> =
        redis.cmd(&mut redis.command("PEEK", &["rls:{ai}:quota_acme:FIXEDWINDOW"]));
    assert!(peek[2] <= 1000 - 91, "{peek:?}");
    let _ = std::fs::remove_file(&journal);
}

async fn a_give_back_lifts_a_cached_denial(backend: Backend) {
    let redis = Redis::on(backend);
    let mut rls = Rls::start(&redis, AI, IETF).await;
    let carol = [("user", "carol")];
    assert_eq!(remaining(&decide(&mut rls, &carol, 100).await), vec![0]);
    assert_eq!(decide(&mut rls, &carol, 1).await.overall_code, OVER_LIMIT);
    assert_eq!(rls.running().service.denials.len(), 1);
    let r = rls
        .ask(request("ai", vec![settle(&carol, 50, true)], 0))
        .await;
    assert_eq!(codes(&r), (OK, vec![(OK, 50)]));
    assert_eq!(
        codes(&decide(&mut rls, &carol, 1).await),
        (OK, vec![(OK, 49)])
    );
}
