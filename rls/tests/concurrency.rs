//! Concurrency rules (`concurrency: N`, `ttl`) over real gRPC on a real server: the request path
//! takes a slot for the holder its `rls_holder` entry names (Envoy's `request_headers` action on
//! `x-request-id`), the stream-done report (`apply_on_stream_done`, the `rls_settle` entry)
//! gives it back, a lost report frees it at its TTL on the debug clock, and beside a rate rule a
//! request is one all-or-nothing `RL.ALL`.

mod support;

use std::time::Duration;

use ratelimit_client::library::LIBRARY_SOURCE;
use ratelimit_rls::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use ratelimit_rls::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use support::*;

const JOBS: &str = "
domain: jobs
descriptors:
  - key: tenant
    rate_limit: {concurrency: 2, ttl: 10s}
  - key: rate
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: gcra}
  - key: strict
    rate_limit: {concurrency: 1, ttl: 10s, class: security}
";

const SLOTS_KEY: &str = "rls:{jobs}:tenant_acme:CONCURRENCY";

/// The request path's descriptor: the tenant and the request's id as its holder.
fn take(key: &str, tenant: &str, holder: &str) -> RateLimitDescriptor {
    descriptor(&[(key, tenant), ("rls_holder", holder)], None)
}

/// The stream-done report of the same descriptor: the `rls_settle` entry first, as a
/// `generic_key` action puts it.
fn done(key: &str, tenant: &str, holder: &str) -> RateLimitDescriptor {
    let mut d = take(key, tenant, holder);
    d.entries.insert(
        0,
        Entry {
            key: "rls_settle".into(),
            value: "1".into(),
        },
    );
    d
}

async fn ask(rls: &mut Rls, descriptors: Vec<RateLimitDescriptor>) -> (i32, Vec<(i32, u32)>) {
    codes(&rls.ask(request("jobs", descriptors, 0)).await)
}

/// The slots free in the store now (a PEEK writes nothing).
fn free_slots(redis: &Redis, key: &str, n: u64) -> i64 {
    let r: Vec<i64> = redis.cmd(
        redis::cmd("RL.CONCURRENCY")
            .arg(key)
            .arg(n)
            .arg(10_000)
            .arg("PEEK"),
    );
    r[2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_up_to_n_then_over_limit_and_the_stream_done_report_frees_one() {
    let redis = Redis::start();
    let mut rls = Rls::start(&redis, JOBS, &[]).await;
    let t = |h: &str| take("tenant", "acme", h);
    assert_eq!(ask(&mut rls, vec![t("r1")]).await, (OK, vec![(OK, 1)]));
    assert_eq!(ask(&mut rls, vec![t("r2")]).await, (OK, vec![(OK, 0)]));
    let denied = rls.ask(request("jobs", vec![t("r3")], 0)).await;
    assert_eq!(codes(&denied), (OVER_LIMIT, vec![(OVER_LIMIT, 0)]));
    // The status names the rule: N, and no unit (it bounds requests at once).
    let limit = denied.statuses[0].current_limit.clone().unwrap();
    assert_eq!((limit.requests_per_unit, limit.unit), (2, 0));
    // The same request id again renews its slot: never a second one.
    assert_eq!(ask(&mut rls, vec![t("r2")]).await, (OK, vec![(OK, 0)]));
    assert_eq!(free_slots(&redis, SLOTS_KEY, 2), 0);
    // r1's stream is done: its slot is free, and r3 takes it.
    let releases = redis.calls("RL.CONCURRENCY");
    let r = ask(&mut rls, vec![done("tenant", "acme", "r1")]).await;
    assert_eq!(r, (OK, vec![(OK, 1)]));
    assert_eq!(redis.calls("RL.CONCURRENCY"), releases + 1);
    assert_eq!(ask(&mut rls, vec![t("r3")]).await, (OK, vec![(OK, 0)]));
    // A second report for r1 (or one for a request that never held a slot) frees nothing.
    let r = ask(&mut rls, vec![done("tenant", "acme", "r1")]).await;
    assert_eq!(r, (OK, vec![(OK, 0)]));
    assert_eq!(free_slots(&redis, SLOTS_KEY, 2), 0);
    let m = rls.running().service.metrics.of("jobs.tenant");
    assert_eq!(
        (m.total_hits, m.within_limit, m.over_limit),
        (5, 4, 1),
        "{m:?}"
    );
    assert_eq!(
        (m.concurrency_released, m.concurrency_release_missed),
        (1, 1)
    );
    let text = rls.running().service.metrics.render();
    assert!(
        text.contains("rls_rule_concurrency_released_total{key=\"jobs.tenant\"} 1"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_stream_done_report_holds_its_slot_ttl_and_no_longer() {
    let redis = Redis::start();
    let mut rls = Rls::start(&redis, JOBS, &[]).await;
    let t = |h: &str| take("tenant", "acme", h);
    assert_eq!(ask(&mut rls, vec![t("r1")]).await.0, OK);
    rls.advance(&redis, 4_000);
    assert_eq!(ask(&mut rls, vec![t("r2")]).await.0, OK);
    // Neither report ever comes. r1's slot frees 10 s after its request, to the millisecond.
    let r = rls.ask(request("jobs", vec![t("r3")], 0)).await;
    assert_eq!(r.overall_code, OVER_LIMIT);
    rls.advance(&redis, 5_999);
    assert_eq!(ask(&mut rls, vec![t("r3")]).await.0, OVER_LIMIT);
    rls.advance(&redis, 1);
    assert_eq!(ask(&mut rls, vec![t("r3")]).await, (OK, vec![(OK, 0)]));
    // And r2's at 14 s.
    rls.advance(&redis, 3_999);
    assert_eq!(ask(&mut rls, vec![t("r4")]).await.0, OVER_LIMIT);
    rls.advance(&redis, 1);
    assert_eq!(ask(&mut rls, vec![t("r4")]).await.0, OK);
    // A report marked by `is_negative_hits` instead of the `rls_settle` entry frees r3's slot.
    let mut report = t("r3");
    report.is_negative_hits = true;
    assert_eq!(ask(&mut rls, vec![report]).await, (OK, vec![(OK, 1)]));
    assert_eq!(ask(&mut rls, vec![t("r5")]).await, (OK, vec![(OK, 0)]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_and_a_concurrency_rule_are_one_all_or_nothing_call() {
    let redis = Redis::start();
    // Without the atomic mode: a request with a concurrency rule is decided as one call anyway.
    let peer = [("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false")];
    let mut rls = Rls::start(&redis, JOBS, &peer).await;
    let both = |h: &str| {
        vec![
            descriptor(&[("rate", "acme")], None),
            take("tenant", "acme", h),
        ]
    };
    let rate_left = || -> i64 {
        let r: Vec<i64> = redis.cmd(redis::cmd("RL.PEEK").arg("rls:{jobs}:rate_acme:GCRA"));
        r[2]
    };
    let (alls, singles) = (redis.calls("RL.ALL"), redis.calls("RL.CONCURRENCY"));
    assert_eq!(
        ask(&mut rls, both("h1")).await,
        (OK, vec![(OK, 2), (OK, 1)])
    );
    assert_eq!(
        ask(&mut rls, both("h2")).await,
        (OK, vec![(OK, 1), (OK, 0)])
    );
    // The slots are full: denied, and no token spent.
    assert_eq!(
        ask(&mut rls, both("h3")).await,
        (OVER_LIMIT, vec![(OK, 1), (OVER_LIMIT, 0)])
    );
    assert_eq!(rate_left(), 1);
    assert_eq!(redis.calls("RL.ALL"), alls + 3);
    assert_eq!(redis.calls("RL.CONCURRENCY"), singles);
    // h1 is done; h3 takes its slot and the last token.
    assert_eq!(
        ask(&mut rls, vec![done("tenant", "acme", "h1")]).await.0,
        OK
    );
    assert_eq!(
        ask(&mut rls, both("h3")).await,
        (OK, vec![(OK, 0), (OK, 0)])
    );
    // h2 is done; the rate is spent: denied, and no slot taken.
    assert_eq!(
        ask(&mut rls, vec![done("tenant", "acme", "h2")]).await.0,
        OK
    );
    assert_eq!(free_slots(&redis, SLOTS_KEY, 2), 1);
    assert_eq!(
        ask(&mut rls, both("h4")).await,
        (OVER_LIMIT, vec![(OVER_LIMIT, 0), (OK, 1)])
    );
    assert_eq!(free_slots(&redis, SLOTS_KEY, 2), 1);
    // Envoy sends the report of a denied request too: it frees nothing (h4 held nothing).
    assert_eq!(
        ask(&mut rls, vec![done("tenant", "acme", "h4")]).await.0,
        OK
    );
    assert_eq!(free_slots(&redis, SLOTS_KEY, 2), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_descriptor_without_its_holder_is_denied_never_unlimited() {
    let redis = Redis::start();
    let mut rls = Rls::start(&redis, JOBS, &[]).await;
    let calls = redis.calls("RL.CONCURRENCY") + redis.calls("RL.ALL");
    let bare = descriptor(&[("tenant", "acme")], None);
    assert_eq!(
        ask(&mut rls, vec![bare.clone()]).await,
        (OVER_LIMIT, vec![(OVER_LIMIT, 0)])
    );
    // An empty id, or one longer than the module takes (1,024 bytes), is no holder either.
    let long = "x".repeat(1_025);
    for id in ["", long.as_str()] {
        let r = ask(&mut rls, vec![take("tenant", "acme", id)]).await;
        assert_eq!(r, (OVER_LIMIT, vec![(OVER_LIMIT, 0)]));
    }
    assert_eq!(redis.calls("RL.CONCURRENCY") + redis.calls("RL.ALL"), calls);
    // Beside a rate rule: denied, and the rate is only looked at.
    let r = ask(&mut rls, vec![descriptor(&[("rate", "acme")], None), bare]).await;
    assert_eq!(r, (OVER_LIMIT, vec![(OK, 3), (OVER_LIMIT, 0)]));
    // A stream-done report without a holder has nothing to give back: answered OK, counted.
    let mut report = descriptor(&[("rls_settle", "1"), ("tenant", "acme")], None);
    report.hits_addend = None;
    assert_eq!(ask(&mut rls, vec![report]).await.0, OK);
    let m = rls.running().service.metrics.of("jobs.tenant");
    assert_eq!(m.concurrency_no_holder, 5, "{m:?}");
    assert_eq!(free_slots(&redis, SLOTS_KEY, 2), 2);
}

/// Asks, and fails the test if no answer comes in 20 s (a request waiting on the dead store
/// beyond its 2 s deadline; a bound a loaded machine cannot reach by scheduling alone).
async fn answered(rls: &mut Rls, descriptors: Vec<RateLimitDescriptor>) -> RateLimitResponse {
    let ask = rls
        .client
        .should_rate_limit(request("jobs", descriptors, 0));
    tokio::time::timeout(Duration::from_secs(20), ask)
        .await
        .expect("answered while the store is down")
        .expect("a response, not an error")
        .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_store_leaves_each_class_to_decide_slots_here() {
    let redis = Redis::start();
    let mut rls = Rls::start(&redis, JOBS, &[]).await;
    redis.freeze();
    let t = |h: &str| take("tenant", "acme", h);
    // Contract: this server's own N (no RLS_GATEWAYS), slots by holder, freed by the report.
    assert_eq!(answered(&mut rls, vec![t("a")]).await.overall_code, OK);
    assert_eq!(answered(&mut rls, vec![t("a")]).await.overall_code, OK);
    assert_eq!(answered(&mut rls, vec![t("b")]).await.overall_code, OK);
    assert_eq!(
        answered(&mut rls, vec![t("c")]).await.overall_code,
        OVER_LIMIT
    );
    let report = answered(&mut rls, vec![done("tenant", "acme", "a")]).await;
    assert_eq!(report.overall_code, OK);
    assert_eq!(answered(&mut rls, vec![t("c")]).await.overall_code, OK);
    // Beside a rate rule, the classes decide together: the slots full, nothing taken.
    let both = vec![descriptor(&[("rate", "x")], None), t("d")];
    assert_eq!(answered(&mut rls, both).await.overall_code, OVER_LIMIT);
    // Security: closed.
    let strict = take("strict", "acme", "e");
    assert_eq!(
        answered(&mut rls, vec![strict]).await.overall_code,
        OVER_LIMIT
    );
    let m = rls.running().service.metrics.of("jobs.tenant");
    assert!(m.fallback >= 5, "{m:?}");
    assert_eq!(m.concurrency_released, 1, "{m:?}");
    redis.thaw();
}

const LIB: &str = "
domain: jobs
descriptors:
  - key: tenant
    rate_limit: {concurrency: 2, ttl: 10m}
  - key: rate
    rate_limit: {unit: day, requests_per_unit: 1}
";

/// The slots free on the library's key (`FCALL rl_concurrency … PEEK`, on the real clock).
fn free_on_library(redis: &Redis) -> i64 {
    let r: Vec<i64> = redis.cmd(
        redis::cmd("FCALL")
            .arg("rl_concurrency")
            .arg(1)
            .arg(SLOTS_KEY)
            .arg(2)
            .arg(600_000)
            .arg("PEEK"),
    );
    r[2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_functions_library_takes_and_gives_back_slots_in_steps() {
    let redis = Redis::plain(&[]);
    let _: String = redis.cmd(redis::cmd("FUNCTION").arg("LOAD").arg(LIBRARY_SOURCE));
    let mut rls = Rls::start(&redis, LIB, &[]).await;
    let t = |h: &str| take("tenant", "acme", h);
    let with_rate = |who: &str, h: &str| vec![descriptor(&[("rate", who)], None), t(h)];
    assert_eq!(
        ask(&mut rls, with_rate("a", "h1")).await,
        (OK, vec![(OK, 0), (OK, 1)])
    );
    // The rate denies: the slot taken first is given back.
    assert_eq!(ask(&mut rls, with_rate("a", "h2")).await.0, OVER_LIMIT);
    assert_eq!(free_on_library(&redis), 1);
    assert_eq!(ask(&mut rls, vec![t("h2")]).await, (OK, vec![(OK, 0)]));
    // The slots deny: the rate is only looked at.
    assert_eq!(
        ask(&mut rls, with_rate("b", "h3")).await,
        (OVER_LIMIT, vec![(OK, 1), (OVER_LIMIT, 0)])
    );
    assert_eq!(
        ask(&mut rls, vec![descriptor(&[("rate", "b")], None)]).await,
        (OK, vec![(OK, 0)])
    );
    // h1's stream is done: h3 gets its slot.
    assert_eq!(
        ask(&mut rls, vec![done("tenant", "acme", "h1")]).await.0,
        OK
    );
    assert_eq!(ask(&mut rls, vec![t("h3")]).await, (OK, vec![(OK, 0)]));
    assert!(redis.calls("fcall") > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_user_without_rl_concurrency_is_refused_at_start_by_name() {
    let redis = Redis::start();
    let _: String = redis.cmd(
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("gw")
            .arg("on")
            .arg(">secret-pw")
            .arg("~rls:*")
            .arg("+@all")
            .arg("-rl.concurrency"),
    );
    let root = scratch("rls");
    write_config(&root, "config.yaml", JOBS);
    let s = settings(&root, &redis, &[("REDIS_AUTH", "gw:secret-pw")]);
    let clock = std::sync::Arc::new(ratelimit_client::ManualClock::new(1_000_000_000));
    let refused = ratelimit_rls::server::start_with_clock(s, clock).await;
    let why = refused.err().expect("refused at start");
    assert!(why.contains("CONCURRENCY refused"), "{why}");
    assert!(!why.contains("secret-pw"), "{why}");
}
