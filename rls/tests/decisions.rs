//! ShouldRateLimit over a real gRPC connection against a real server: the decision table of the
//! peer's config format, all or nothing across descriptors, fixed windows at their edges (the
//! peer's reset rule), the response headers, the denial cache, shadow mode, leases. Every test
//! runs on each backend (`on_every_backend!`): the module on its debug clock, the Functions
//! library alone by FCALL, and its scripts by EVALSHA where FUNCTION is refused, these two on a
//! wall clock the test moves.

mod support;

use ratelimit_client::Backend;
use support::*;

on_every_backend!(
    the_decision_table,
    hits_addend_per_request_and_per_descriptor,
    all_or_nothing_in_one_store_call,
    fixed_windows_at_their_edges_answer_as_the_peer,
    headers_as_the_peer_names_them_and_as_docs_http_computes_them,
    a_denied_key_is_answered_locally_until_its_retry_time,
    global_shadow_mode_decides_counts_and_answers_ok,
    a_leased_rule_calls_the_store_once_per_lease_and_refunds_at_stop,
);

const SHOP: &str = "
domain: shop
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: client
    value: health-checker
  - key: client
    value: partner
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: /admin/*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /static/*
    rate_limit: {unlimited: true}
  - key: tenant
    value: acme
    descriptors:
      - key: plan
        value: gold
        rate_limit: {unit: hour, requests_per_unit: 2, name: gold}
      - key: plan
        rate_limit: {unit: hour, requests_per_unit: 1, name: default-plan}
  - key: region
    rate_limit: {unit: second, requests_per_unit: 2, name: region, replaces: [{name: gold}]}
  - key: canary
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
";

/// The descriptors of a request, and (overall, [(code, remaining, requests_per_unit)]).
type Row<'a> = (&'a [&'a [(&'a str, &'a str)]], (i32, &'a [(i32, u32, u32)]));

/// (overall, [(code, remaining, requests_per_unit or 0 without a limit)]) of one request.
async fn ask(rls: &mut Rls, descriptors: &[&[(&str, &str)]]) -> (i32, Vec<(i32, u32, u32)>) {
    let r = rls.ask(simple("shop", descriptors)).await;
    (
        r.overall_code,
        r.statuses
            .iter()
            .map(|s| {
                let rpu = s.current_limit.as_ref().map_or(0, |l| l.requests_per_unit);
                (s.code, s.limit_remaining, rpu)
            })
            .collect(),
    )
}

async fn the_decision_table(backend: Backend) {
    let redis = Redis::on(backend);
    let mut rls = Rls::start(&redis, SHOP, &[]).await;
    let table: &[Row] = &[
        // A key-only entry is the default for every value, each value counted on its own.
        (&[&[("client", "1.2.3.4")]], (OK, &[(OK, 2, 3)])),
        (&[&[("client", "1.2.3.4")]], (OK, &[(OK, 1, 3)])),
        (&[&[("client", "1.2.3.4")]], (OK, &[(OK, 0, 3)])),
        (
            &[&[("client", "1.2.3.4")]],
            (OVER_LIMIT, &[(OVER_LIMIT, 0, 3)]),
        ),
        (&[&[("client", "5.6.7.8")]], (OK, &[(OK, 2, 3)])),
        // A key/value entry without rate_limit whitelists; one with its own overrides.
        (&[&[("client", "health-checker")]], (OK, &[(OK, 0, 0)])),
        (&[&[("client", "partner")]], (OK, &[(OK, 4, 5)])),
        // Wildcard values, unlimited, and a descriptor no rule knows.
        (&[&[("path", "/admin/users")]], (OK, &[(OK, 0, 1)])),
        (
            &[&[("path", "/admin/users")]],
            (OVER_LIMIT, &[(OVER_LIMIT, 0, 1)]),
        ),
        (&[&[("path", "/admin/keys")]], (OK, &[(OK, 0, 1)])),
        // Unlimited answers the largest remaining, as the peer (MaxUint32).
        (&[&[("path", "/static/app.js")]], (OK, &[(OK, u32::MAX, 0)])),
        (&[&[("path", "/elsewhere")]], (OK, &[(OK, 0, 0)])),
        // Nested: value, then the key-only default of the level; a level without a rule.
        (
            &[&[("tenant", "acme"), ("plan", "gold")]],
            (OK, &[(OK, 1, 2)]),
        ),
        (
            &[&[("tenant", "acme"), ("plan", "silver")]],
            (OK, &[(OK, 0, 1)]),
        ),
        (
            &[&[("tenant", "acme"), ("plan", "silver")]],
            (OVER_LIMIT, &[(OVER_LIMIT, 0, 1)]),
        ),
        (&[&[("tenant", "acme")]], (OK, &[(OK, 0, 0)])),
        (
            &[&[("tenant", "other"), ("plan", "gold")]],
            (OK, &[(OK, 0, 0)]),
        ),
        // A deeper request than the config: no rule.
        (&[&[("client", "1.2.3.4"), ("x", "y")]], (OK, &[(OK, 0, 0)])),
        // `region` replaces `gold`: gold is not applied (nor charged) beside it.
        (
            &[&[("tenant", "acme"), ("plan", "gold")], &[("region", "eu")]],
            (OK, &[(OK, 0, 0), (OK, 1, 2)]),
        ),
        (
            &[&[("tenant", "acme"), ("plan", "gold")]],
            (OK, &[(OK, 0, 2)]),
        ),
        // A limit of 0 denies every request, without a store call.
        (&[&[("blocked", "x")]], (OVER_LIMIT, &[(OVER_LIMIT, 0, 0)])),
        // Shadow mode: decided and counted, answered OK.
        (&[&[("canary", "a")]], (OK, &[(OK, 0, 1)])),
        (&[&[("canary", "a")]], (OK, &[(OK, 0, 1)])),
    ];
    for (i, (descriptors, (overall, statuses))) in table.iter().enumerate() {
        let got = ask(&mut rls, descriptors).await;
        assert_eq!(
            got,
            (*overall, statuses.to_vec()),
            "row {i}: {descriptors:?}"
        );
    }
    let m = &rls.running().service.metrics;
    let canary = m.of("shop.canary");
    assert_eq!(
        (canary.total_hits, canary.over_limit, canary.shadow_mode),
        (2, 1, 1)
    );
    let client = m.of("shop.client");
    assert_eq!(
        (client.total_hits, client.within_limit, client.over_limit),
        (5, 4, 1)
    );
    // Near the limit: the hits above 80 % of 3 (the 3rd of 1.2.3.4's).
    assert_eq!(client.near_limit, 1);
}

async fn hits_addend_per_request_and_per_descriptor(backend: Backend) {
    let redis = Redis::on(backend);
    let mut rls = Rls::start(&redis, SHOP, &[]).await;
    let client = [("client", "9.9.9.9")];
    // Per descriptor 0: checked, not charged.
    let r = rls
        .ask(request("shop", vec![descriptor(&client, Some(0))], 0))
        .await;
    assert_eq!(codes(&r), (OK, vec![(OK, 3)]));
    // The request's 2 (its 0 means 1).
    let r = rls
        .ask(request("shop", vec![descriptor(&client, None)], 2))
        .await;
    assert_eq!(codes(&r), (OK, vec![(OK, 1)]));
    // 2 more do not fit: denied (remaining 0 on an OVER_LIMIT, as the peer answers), and not
    // charged (a retry of 1 passes).
    let r = rls
        .ask(request("shop", vec![descriptor(&client, None)], 2))
        .await;
    assert_eq!(codes(&r), (OVER_LIMIT, vec![(OVER_LIMIT, 0)]));
    // The descriptor's own hits_addend wins over the request's.
    let r = rls
        .ask(request("shop", vec![descriptor(&client, Some(1))], 3))
        .await;
    assert_eq!(codes(&r), (OK, vec![(OK, 0)]));
    // A check (hits 0) of a limit of 0 is answered, not refused.
    let blocked = [("blocked", "x")];
    let r = rls
        .ask(request("shop", vec![descriptor(&blocked, Some(0))], 0))
        .await;
    assert_eq!(codes(&r), (OK, vec![(OK, 0)]));
    // The same descriptor twice in one request: one key, charged for both.
    let twice: &[&[(&str, &str)]] = &[&[("client", "3.3.3.3")], &[("client", "3.3.3.3")]];
    let r = rls.ask(simple("shop", twice)).await;
    assert_eq!(codes(&r), (OK, vec![(OK, 1), (OK, 1)]));
    // More than the limit can ever admit: denied without a store call.
    let before = redis.store_calls("fixedwindow");
    let other = [("client", "8.8.8.8")];
    let r = rls
        .ask(request("shop", vec![descriptor(&other, Some(4))], 0))
        .await;
    assert_eq!(codes(&r).0, OVER_LIMIT);
    assert_eq!(redis.store_calls("fixedwindow"), before);
}

async fn all_or_nothing_in_one_store_call(backend: Backend) {
    let redis = Redis::on(backend);
    let mut rls = Rls::start(&redis, SHOP, &[]).await;
    let pair: &[&[(&str, &str)]] = &[&[("client", "7.7.7.7")], &[("path", "/admin/a")]];
    let calls = redis.store_calls("all");
    assert_eq!(
        ask(&mut rls, pair).await,
        (OK, vec![(OK, 2, 3), (OK, 0, 1)])
    );
    assert_eq!(
        redis.store_calls("all"),
        calls + 1,
        "one RL.ALL for both descriptors"
    );
    // /admin/a is spent: the request is denied and 7.7.7.7 is not charged for it.
    assert_eq!(
        ask(&mut rls, pair).await,
        (OVER_LIMIT, vec![(OK, 2, 3), (OVER_LIMIT, 0, 1)])
    );
    assert_eq!(
        ask(&mut rls, &[&[("client", "7.7.7.7")]]).await,
        (OK, vec![(OK, 1, 3)])
    );
    // Three descriptors, still one call.
    let three: &[&[(&str, &str)]] = &[
        &[("client", "6.6.6.6")],
        &[("client", "partner")],
        &[("tenant", "acme"), ("plan", "gold")],
    ];
    let calls = redis.store_calls("all");
    assert_eq!(
        ask(&mut rls, three).await,
        (OK, vec![(OK, 2, 3), (OK, 4, 5), (OK, 1, 2)])
    );
    assert_eq!(redis.store_calls("all"), calls + 1);
}

/// The peer's reset: the unit in seconds minus (now in whole seconds mod the unit).
fn peer_reset(now_ms: u64, unit_s: u64) -> i64 {
    (unit_s - (now_ms / 1000) % unit_s) as i64
}

async fn fixed_windows_at_their_edges_answer_as_the_peer(backend: Backend) {
    let redis = Redis::on(backend);
    let yaml = "domain: w\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n";
    let mut rls = Rls::start(&redis, yaml, &[]).await;
    let mut now = T0_MS;
    let mut step = |rls: &Rls, ms: u64| {
        rls.advance(&redis, ms);
        now += ms;
        now
    };
    // (advance by, expected code, remaining): the last ms of a window, then its successor.
    let rows: &[(u64, i32, u32)] = &[
        (59_999, OK, 1),
        (0, OK, 0),
        (0, OVER_LIMIT, 0),
        (1, OK, 1),
        (1, OK, 0),
        (999, OVER_LIMIT, 0),
        (59_000, OK, 1),
    ];
    for (i, (by, code, remaining)) in rows.iter().enumerate() {
        let at = step(&rls, *by);
        let r = rls.ask(simple("w", &[&[("k", "v")]])).await;
        let s = &r.statuses[0];
        assert_eq!((s.code, s.limit_remaining), (*code, *remaining), "row {i}");
        let reset = s.duration_until_reset.as_ref().map(|d| d.seconds);
        assert_eq!(reset, Some(peer_reset(at, 60)), "row {i} at {at}");
    }
}

async fn headers_as_the_peer_names_them_and_as_docs_http_computes_them(backend: Backend) {
    let redis = Redis::on(backend);
    let yaml = "
domain: api
descriptors:
  - key: user
    descriptors:
      - key: per
        value: second
        rate_limit: {unit: second, requests_per_unit: 5, algorithm: gcra, name: second}
      - key: per
        value: hour
        rate_limit: {unit: hour, requests_per_unit: 100, algorithm: token_bucket, name: hour}
";
    let extra = [
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
        ("RLS_IETF_HEADERS", "true"),
    ];
    let mut rls = Rls::start(&redis, yaml, &extra).await;
    let both = |hits| {
        request(
            "api",
            vec![
                descriptor(&[("user", "alice"), ("per", "second")], None),
                descriptor(&[("user", "alice"), ("per", "hour")], None),
            ],
            hits,
        )
    };
    let headers = |r: &ratelimit_rls::pb::envoy::service::ratelimit::v3::RateLimitResponse| {
        r.response_headers_to_add
            .iter()
            .map(|h| format!("{}: {}", h.key, h.value))
            .collect::<Vec<_>>()
    };
    let r = rls.ask(both(1)).await;
    assert_eq!(
        headers(&r),
        [
            "RateLimit-Limit: 5",
            "RateLimit-Remaining: 4",
            "RateLimit-Reset: 1",
            "RateLimit-Policy: \"second\";q=5;w=1, \"hour\";q=100;w=3600",
            "RateLimit: \"second\";r=4;t=1, \"hour\";r=99;t=36",
        ]
    );
    let r = rls.ask(both(5)).await;
    assert_eq!(r.overall_code, OVER_LIMIT);
    assert_eq!(
        headers(&r),
        [
            "RateLimit-Limit: 5",
            "RateLimit-Remaining: 4",
            "RateLimit-Reset: 1",
            "RateLimit-Policy: \"second\";q=5;w=1, \"hour\";q=100;w=3600",
            "Retry-After: 1",
            "RateLimit: \"second\";r=0;t=1, \"hour\";r=99;t=36",
        ]
    );
}

async fn a_denied_key_is_answered_locally_until_its_retry_time(backend: Backend) {
    let redis = Redis::on(backend);
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";
    let mut rls = Rls::start(&redis, yaml, &[]).await;
    let ask = simple("d", &[&[("k", "v")]]);
    assert_eq!(codes(&rls.ask(ask.clone()).await).0, OK);
    assert_eq!(codes(&rls.ask(ask.clone()).await).0, OVER_LIMIT);
    let calls = redis.store_calls("fixedwindow");
    // The start's access check (a peek: COST 0, writes nothing) and the two decisions.
    assert_eq!(calls, 3);
    for _ in 0..5 {
        let r = rls.ask(ask.clone()).await;
        assert_eq!(codes(&r).0, OVER_LIMIT);
        assert_eq!(
            r.statuses[0]
                .duration_until_reset
                .as_ref()
                .map(|d| d.seconds),
            Some(60)
        );
    }
    assert_eq!(
        redis.store_calls("fixedwindow"),
        calls,
        "no store call while cached"
    );
    let m = rls.running().service.metrics.of("d.k");
    assert_eq!((m.over_limit, m.over_limit_with_local_cache), (6, 5));
    // At the retry time (the next window) the store is asked again.
    rls.advance(&redis, 60_000);
    assert_eq!(codes(&rls.ask(ask.clone()).await).0, OK);
    assert_eq!(redis.store_calls("fixedwindow"), calls + 1);
}

async fn global_shadow_mode_decides_counts_and_answers_ok(backend: Backend) {
    let redis = Redis::on(backend);
    let mut rls = Rls::start(&redis, SHOP, &[("SHADOW_MODE", "true")]).await;
    let pair: &[&[(&str, &str)]] = &[&[("client", "4.4.4.4")], &[("path", "/admin/z")]];
    assert_eq!(
        ask(&mut rls, pair).await,
        (OK, vec![(OK, 2, 3), (OK, 0, 1)])
    );
    // As the peer: the status keeps its OVER_LIMIT, the total is OK.
    assert_eq!(
        ask(&mut rls, pair).await,
        (OK, vec![(OK, 1, 3), (OVER_LIMIT, 0, 1)])
    );
    let m = &rls.running().service.metrics;
    assert_eq!(m.service_count("global_shadow_mode"), 1);
    // The rule's own shadow_mode counter counts rules in shadow mode, not the global switch.
    let admin = m.of("shop.path_/admin/*");
    assert_eq!((admin.over_limit, admin.shadow_mode), (1, 0));
    // The request the shadow rule would have denied still charged the other descriptor.
    assert_eq!(
        ask(&mut rls, &[&[("client", "4.4.4.4")]]).await.1,
        vec![(OK, 0, 3)]
    );
}

async fn a_leased_rule_calls_the_store_once_per_lease_and_refunds_at_stop(backend: Backend) {
    let redis = Redis::on(backend);
    let yaml = "domain: l\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 100, algorithm: token_bucket, lease: 10}\n";
    let mut rls = Rls::start(&redis, yaml, &[]).await;
    let calls = redis.store_calls("lease");
    for _ in 0..4 {
        assert_eq!(codes(&rls.ask(simple("l", &[&[("k", "v")]])).await).0, OK);
    }
    assert_eq!(
        redis.store_calls("lease"),
        calls + 1,
        "one lease of 10 served the 4"
    );
    let report = rls.running.take().unwrap().stop().await;
    assert_eq!(report.refunded, 6, "{report:?}");
}
