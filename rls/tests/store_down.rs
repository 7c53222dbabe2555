//! A store that stops answering (SIGSTOP) or is killed: every request is still answered, each
//! rule by its class (security fails closed, contract and billing admit), counted as fallback
//! decisions; billing counts admitted meanwhile are charged when the store is back.

mod support;

use std::time::Duration;

use support::*;

const CLASSES: &str = "
domain: d
descriptors:
  - key: login
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_log, class: security}
  - key: api
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: gcra, class: contract}
  - key: quota
    rate_limit: {unit: day, requests_per_unit: 1000, class: billing}
";

/// Asks, and fails the test if no answer comes in 20 s (a request waiting on the dead store
/// beyond its 2 s deadline; a bound a loaded machine cannot reach by scheduling alone).
async fn answered(rls: &mut Rls, descriptors: &[&[(&str, &str)]]) -> i32 {
    let ask = rls.client.should_rate_limit(simple("d", descriptors));
    let r = tokio::time::timeout(Duration::from_secs(20), ask)
        .await
        .expect("answered while the store is down")
        .expect("a response, not an error");
    r.into_inner().overall_code
}

async fn each_class_decides(rls: &mut Rls) {
    for _ in 0..3 {
        assert_eq!(answered(rls, &[&[("login", "bob")]]).await, OVER_LIMIT);
        assert_eq!(answered(rls, &[&[("api", "key1")]]).await, OK);
        assert_eq!(answered(rls, &[&[("quota", "acme")]]).await, OK);
        // Several descriptors: each class decides, all must admit.
        assert_eq!(
            answered(rls, &[&[("api", "key1")], &[("quota", "acme")]]).await,
            OK
        );
        assert_eq!(
            answered(rls, &[&[("api", "key1")], &[("login", "bob")]]).await,
            OVER_LIMIT
        );
    }
    let m = &rls.running().service.metrics;
    assert!(m.of("d.login").fallback >= 3, "{:?}", m.of("d.login"));
    assert!(m.of("d.api").fallback >= 3);
    assert!(m.of("d.quota").fallback >= 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_store_answers_by_class_and_billing_is_charged_after() {
    let redis = Redis::start();
    let mut rls = Rls::start(&redis, CLASSES, &[]).await;
    assert_eq!(answered(&mut rls, &[&[("login", "bob")]]).await, OK);
    redis.freeze();
    each_class_decides(&mut rls).await;
    redis.thaw();
    let report = rls.running.take().unwrap().stop().await;
    assert_eq!(report.unsettled, 0, "{report:?}");
    // 6 billing admits while frozen (3 alone, 3 beside api): all charged (a call that timed
    // out may still have been applied when the store woke up: at least 6).
    let peek: Vec<i64> = redis.cmd(redis::cmd("RL.PEEK").arg("rls:{d}:quota_acme:FIXEDWINDOW"));
    assert!(peek[2] <= 1000 - 6, "{peek:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_store_answers_by_class() {
    let mut redis = Redis::start();
    let mut rls = Rls::start(&redis, CLASSES, &[]).await;
    assert_eq!(answered(&mut rls, &[&[("api", "key1")]]).await, OK);
    redis.kill();
    each_class_decides(&mut rls).await;
    let report = rls.running.take().unwrap().stop().await;
    assert!(
        report.unsettled > 0,
        "the store is gone: billing counts stay owed"
    );
}
