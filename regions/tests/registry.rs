//! The configuration's algorithm words against the algorithm registry (the core's
//! `listed::limiters`): every limiter is accepted by its command word in any case, takes a
//! burst other than L exactly when the registry says it takes BURST, and a shaper is refused.
//! No server: a new limiter of the registry fails here, naming regions/src/config.rs.

use ratelimit_core::algo::listed;
use ratelimit_regions::config::Config;

fn config(algorithm: &str, burst: u64) -> String {
    format!(
        "[[regions]]\nname = \"a\"\nurl = \"redis://127.0.0.1:1\"\n\
         [[regions]]\nname = \"b\"\nurl = \"redis://127.0.0.1:2\"\n\
         [[keys]]\nkeys = [\"k\"]\nalgorithm = \"{algorithm}\"\nlimit = 100\nwindow_ms = 1000\nburst = {burst}\n"
    )
}

#[test]
fn the_configuration_words_are_the_registrys_limiters() {
    for l in listed::limiters() {
        for word in [l.word.to_string(), l.word.to_ascii_lowercase()] {
            let parsed = Config::parse(&config(&word, 100));
            let group = match parsed {
                Ok(c) => c,
                Err(e) => {
                    panic!("regions/src/config.rs refuses the registry's limiter '{word}': {e}")
                }
            };
            let policy = group.policy(&group.keys[0]).expect("a policy");
            assert_eq!(policy.algorithm, l.word, "regions/src/config.rs: '{word}'");
        }
        assert_eq!(
            Config::parse(&config(l.word, 50)).is_ok(),
            l.burst,
            "regions/src/config.rs: a burst other than L for {} against the registry's BURST ({})",
            l.word,
            l.burst
        );
    }
    for shaper in listed::REGISTRY.iter().filter(|l| !l.limiter) {
        assert!(
            Config::parse(&config(shaper.word, 100)).is_err(),
            "regions/src/config.rs accepts the shaper {}",
            shaper.word
        );
    }
}
