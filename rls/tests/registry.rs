//! The YAML `algorithm` words against the algorithm registry (the core's `listed::limiters`):
//! every limiter of the registry is accepted by its id, decided with the client's algorithm of
//! the same word, takes `burst` as the registry says, and nothing else is accepted. No server:
//! a new limiter of the registry fails here, naming rls/src/load.rs, until the RLS takes it.

use ratelimit_core::algo::listed;
use ratelimit_rls::load::{self, ConfigError};
use ratelimit_rls::yaml_limits::YamlLimits;

fn load(
    files: &[(String, String)],
    merge: bool,
) -> Result<ratelimit_rls::config::Config, ConfigError> {
    load::load(files, merge, YamlLimits::default())
}

fn yaml(algorithm: &str, burst: bool) -> String {
    let burst = if burst { ", burst: 5" } else { "" };
    format!(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{unit: second, requests_per_unit: 2, algorithm: {algorithm}{burst}}}\n"
    )
}

#[test]
fn the_yaml_algorithm_words_are_the_registrys_limiters() {
    for l in listed::limiters() {
        let config = load(&[("t.yaml".into(), yaml(l.id, false))], false).unwrap_or_else(|e| {
            panic!(
                "rls/src/load.rs refuses the registry's limiter '{}': {}",
                l.id, e.0
            )
        });
        let rule = config.rule_for("d", &[("k", "v")]).expect("the rule");
        let policy = rule.rule.policy().expect("a limited rule");
        assert_eq!(
            policy.algorithm.name(),
            l.word,
            "rls/src/load.rs maps '{}' to another algorithm",
            l.id
        );
        let with_burst = load(&[("t.yaml".into(), yaml(l.id, true))], false);
        assert_eq!(
            with_burst.is_ok(),
            l.burst,
            "rls/src/load.rs: burst on '{}' against the registry's BURST ({})",
            l.id,
            l.burst
        );
    }
    for shaper in listed::REGISTRY.iter().filter(|l| !l.limiter) {
        assert!(
            load(&[("t.yaml".into(), yaml(shaper.id, false))], false).is_err(),
            "rls/src/load.rs accepts the shaper '{}', which has no five-integer reply",
            shaper.id
        );
    }
}
