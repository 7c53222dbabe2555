use super::*;

fn one(text: &str) -> Result<Config, ConfigError> {
    load(
        &[("config/t.yaml".into(), text.into())],
        false,
        YamlLimits::default(),
    )
}

fn rule_of(c: &Config, domain: &str, entries: &[(&str, &str)]) -> Option<String> {
    c.rule_for(domain, entries)
        .map(|m| m.rule.stats_key.clone())
}

#[test]
fn matching_follows_the_peer() {
    let c = one("domain: d
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 10.0.0.1
  - key: path
    value: /admin*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 5}
")
    .unwrap();
    let r = |e: &[(&str, &str)]| rule_of(&c, "d", e);
    assert_eq!(
        r(&[("remote_address", "1.2.3.4")]).as_deref(),
        Some("d.remote_address")
    );
    // A key/value entry without rate_limit whitelists that value.
    assert_eq!(r(&[("remote_address", "10.0.0.1")]), None);
    assert_eq!(
        r(&[("path", "/admin/users")]).as_deref(),
        Some("d.path_/admin*")
    );
    assert_eq!(r(&[("path", "/api")]).as_deref(), Some("d.path"));
    assert_eq!(
        r(&[("path", "/api"), ("user", "bob")]).as_deref(),
        Some("d.path.user")
    );
    // The request is deeper than the config: no rule.
    assert_eq!(r(&[("remote_address", "1.2.3.4"), ("x", "y")]), None);
    // Shallower than the config at a level with a rule: that level's rule.
    assert_eq!(r(&[("nothing", "here")]), None);
    assert_eq!(rule_of(&c, "other", &[("path", "/")]), None);
}

#[test]
fn every_rejection_names_file_and_entry() {
    let cases: &[(&str, &str)] = &[
            ("domain: d\nfoo: 1\n", "config/t.yaml: config error, unknown key 'foo'"),
            ("descriptors: []\n", "config/t.yaml: config file cannot have empty domain"),
            (
                "domain: d\ndescriptors:\n  - value: v\n",
                "config/t.yaml: descriptors[0]: descriptor has empty key",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
                "config/t.yaml: descriptors[0] (key 'k').rate_limit: invalid rate limit unit 'fortnight'",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n",
                "config/t.yaml: descriptors[0] (key 'k').rate_limit: should not specify rate limit unit when unlimited",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n  - key: k\n",
                "config/t.yaml: descriptors[1] (key 'k'): duplicate descriptor composite key 'd.k'",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: a, replaces: [{name: a}]}\n",
                "config/t.yaml: descriptors[0] (key 'k').rate_limit: replaces should not contain name of same descriptor",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1.5}\n",
                "config/t.yaml: descriptors[0].rate_limit.requests_per_unit: config error, a value of unsupported type: Real(\"1.5\")",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: leaky}\n",
                "config/t.yaml: descriptors[0] (key 'k').rate_limit: unknown algorithm 'leaky' (gcra, token_bucket, sliding_log, sliding_counter, fixed_window)",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, settle: yes}\n",
                "config/t.yaml: descriptors[0] (key 'k').rate_limit: settle must be true or false",
            ),
        ];
    for (text, want) in cases {
        assert_eq!(one(text).unwrap_err().0, *want, "{text}");
    }
    let two = [
        ("a.yaml".to_string(), "domain: d\n".to_string()),
        ("b.yaml".to_string(), "domain: d\n".to_string()),
    ];
    assert_eq!(
        load(&two, false, YamlLimits::default()).unwrap_err().0,
        "b.yaml: duplicate domain 'd' in config file"
    );
    assert!(load(&two, true, YamlLimits::default()).is_ok());
}

#[test]
fn concurrency_rules_load_and_refuse_what_does_not_go_with_them() {
    let c = one("domain: d
descriptors:
  - key: tenant
    rate_limit: {concurrency: 10, ttl: 90s, class: security, name: jobs}
  - key: user
    rate_limit: {concurrency: 1}
")
    .unwrap();
    let rule = |k: &str| c.rule_for("d", &[(k, "x")]).unwrap().rule;
    let jobs = rule("tenant");
    assert_eq!(
        jobs.concurrency,
        Some(crate::config::Concurrency {
            limit: 10,
            ttl_ms: 90_000,
            class: Class::Security
        })
    );
    assert!(jobs.limit.is_none() && jobs.is_limited());
    assert_eq!((jobs.requests_per_unit, jobs.unit_proto()), (10, 0));
    assert_eq!(
        rule("user").concurrency.map(|c| c.ttl_ms),
        Some(crate::config::DEFAULT_SLOT_TTL_MS)
    );
    let at = "config/t.yaml: descriptors[0] (key 'k').rate_limit: ";
    let cases: &[(&str, String)] = &[
        (
            "{concurrency: 0}",
            "concurrency must be an integer from 1 to 1000".into(),
        ),
        (
            "{concurrency: 1001}",
            "concurrency must be an integer from 1 to 1000".into(),
        ),
        (
            "{concurrency: two}",
            "concurrency must be an integer from 1 to 1000".into(),
        ),
        (
            "{concurrency: 2, unit: second}",
            "'unit' does not go with concurrency (a concurrency rule bounds the requests in \
                 flight, not the requests per unit)"
                .into(),
        ),
        (
            "{concurrency: 2, settle: true}",
            "'settle' does not go with concurrency (a concurrency rule bounds the requests in \
                 flight, not the requests per unit)"
                .into(),
        ),
        (
            "{concurrency: 2, ttl: 30}",
            "ttl must be a duration such as 30s or 5m".into(),
        ),
        (
            "{concurrency: 2, ttl: 1us}",
            "ttl '1us' is not a duration from 1ms (a Go duration such as 30s)".into(),
        ),
        (
            "{unit: second, requests_per_unit: 1, ttl: 5s}",
            "ttl is for concurrency rules only".into(),
        ),
    ];
    for (rl, want) in cases {
        let text = format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {rl}\n");
        assert_eq!(one(&text).unwrap_err().0, format!("{at}{want}"), "{rl}");
    }
}
