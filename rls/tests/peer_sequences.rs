//! envoyproxy/ratelimit's integration sequence (its `testBasicBaseConfig`), replayed step by step
//! over real gRPC against a real server with the module, in both charge modes: unset
//! STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT (every descriptor charged on its own, as the peer's
//! default) and set (here: one atomic call, none charged when one is over). The configs are the
//! peer's integration runtime files, restated in `tests/compat/configs/`.

mod support;

use ratelimit_rls::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use support::*;

const MINUTE: i32 = 2;
const HOUR: i32 = 3;
const SECOND: i32 = 1;

fn fixture(name: &str) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/compat/configs/");
    std::fs::read_to_string(format!("{path}{name}")).unwrap()
}

/// (code, requests_per_unit, unit, remaining, seconds to reset) per status.
fn statuses(r: &RateLimitResponse) -> Vec<(i32, u32, i32, u32, i64)> {
    r.statuses
        .iter()
        .map(|s| {
            let (rpu, unit) = s
                .current_limit
                .as_ref()
                .map_or((0, 0), |l| (l.requests_per_unit, l.unit));
            let reset = s.duration_until_reset.as_ref().map_or(0, |d| d.seconds);
            (s.code, rpu, unit, s.limit_remaining, reset)
        })
        .collect()
}

async fn replay(stop_increment: bool) {
    let redis = Redis::start();
    let stop = if stop_increment { "true" } else { "false" };
    let mut rls = Rls::start(
        &redis,
        &fixture("integration_basic.yaml"),
        &[
            ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", stop),
            ("LOCAL_CACHE_SIZE_IN_BYTES", "1048576"),
        ],
    )
    .await;
    rls.write("another.yaml", &fixture("integration_another.yaml"));
    // The second file is picked up by the watcher: wait for it (a poll, not a timed wait).
    until("the watcher loads another.yaml", || {
        rls.running()
            .service
            .config()
            .domains
            .contains_key("another")
    })
    .await;
    let mode = if stop_increment { "stop" } else { "peer" };

    // A domain no config knows: OK, no limit.
    let r = rls.ask(simple("foo", &[&[("hello", "world")]])).await;
    assert_eq!((r.overall_code, statuses(&r)), (OK, vec![(OK, 0, 0, 0, 0)]));

    let r = rls.ask(simple("basic", &[&[("key1", "foo")]])).await;
    assert_eq!(
        (r.overall_code, statuses(&r)),
        (OK, vec![(OK, 50, SECOND, 49, 1)])
    );
    let m = rls.running().service.metrics.clone();
    assert_eq!(m.of("basic.key1").total_hits, 1);

    // Over a minute limit on one key: 20 admitted, then OVER_LIMIT with 0 left.
    for i in 0..25u32 {
        let r = rls.ask(simple("another", &[&[("key2", "4242")]])).await;
        let (code, left) = if i >= 20 {
            (OVER_LIMIT, 0)
        } else {
            (OK, 20 - (i + 1))
        };
        assert_eq!(
            (r.overall_code, statuses(&r)),
            (code, vec![(code, 20, MINUTE, left, 60)]),
            "{mode}: key2 alone, step {i}"
        );
        let c = m.of("another.key2");
        assert_eq!(c.total_hits, u64::from(i + 1), "{mode}: step {i}");
        assert_eq!(
            c.over_limit,
            u64::from(i.saturating_sub(19)),
            "{mode}: step {i}"
        );
        assert_eq!(
            c.over_limit_with_local_cache,
            u64::from(i.saturating_sub(20)),
            "{mode}: step {i}"
        );
    }

    // Two keys of one domain in each request: key3 (10 an hour) goes over at step 10.
    for i in 0..15u32 {
        let r = rls
            .ask(simple("another", &[&[("key2", "77")], &[("key3", "77")]]))
            .await;
        let mut left1 = 20 - (i + 1);
        let (code, mut left2) = (OK, 10u32.saturating_sub(i + 1));
        let code = if i >= 10 { OVER_LIMIT } else { code };
        if i >= 10 {
            left2 = 0;
            // Set: the request over on key3 charges key2 no more.
            if stop_increment {
                left1 = 10;
            }
        }
        assert_eq!(
            (r.overall_code, statuses(&r)),
            (
                code,
                vec![(OK, 20, MINUTE, left1, 60), (code, 10, HOUR, left2, 3600)]
            ),
            "{mode}: key2 and key3, step {i}"
        );
        let k2 = m.of("another.key2");
        assert_eq!(k2.total_hits, u64::from(i + 26), "{mode}: step {i}");
        assert_eq!(k2.over_limit, 5, "{mode}: step {i}");
        let k3 = m.of("another.key3");
        assert_eq!(k3.total_hits, u64::from(i + 1), "{mode}: step {i}");
        assert_eq!(
            k3.over_limit,
            u64::from(i.saturating_sub(9)),
            "{mode}: step {i}"
        );
        assert_eq!(
            k3.over_limit_with_local_cache,
            u64::from(i.saturating_sub(10)),
            "{mode}: step {i}"
        );
    }

    // The reset counts down with the clock (the peer sleeps 2 s; the store's clock is moved).
    let day = simple("another", &[&[("key4", "durTest")]]);
    let first = statuses(&rls.ask(day.clone()).await)[0].4;
    rls.advance(&redis, 2_000);
    let second = statuses(&rls.ask(day).await)[0].4;
    assert_eq!((first, second), (86_400, 86_398), "{mode}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peers_sequence_charging_each_descriptor() {
    replay(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peers_sequence_with_stop_cache_key_increment_when_overlimit() {
    replay(true).await;
}
