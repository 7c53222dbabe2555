//! The client's `Algorithm` against the module's registry (the core crate's `REGISTRY`): the
//! same limiters, in the same order, named and taking `BURST` alike. No server: a new algorithm
//! of the registry fails this test until the client has it, and a client variant the module
//! lacks fails it too.

use ratelimit_client::Algorithm;
use ratelimit_core::algo::listed::REGISTRY;

/// Does not compile when the enum gains a variant: a variant the registry has fails
/// [`the_clients_algorithms_are_the_registrys_limiters`] until `Algorithm::ALL` lists it.
#[allow(dead_code)]
fn listed(a: Algorithm) {
    match a {
        Algorithm::Gcra
        | Algorithm::TokenBucket
        | Algorithm::SlidingLog
        | Algorithm::SlidingCounter
        | Algorithm::FixedWindow => {}
    }
}

/// `Algorithm::parse` (what the RLS's YAML and a configuration word go through) finds every
/// limiter of the registry by its word, in any case.
#[test]
fn the_client_parses_every_limiter_of_the_registry() {
    for l in REGISTRY.iter().filter(|l| l.limiter) {
        let parsed = Algorithm::parse(&l.word.to_lowercase()).map(Algorithm::name);
        assert_eq!(
            parsed,
            Some(l.word),
            "client/src/command.rs: Algorithm::parse does not find the registry's {}",
            l.word
        );
    }
}

#[test]
fn the_clients_algorithms_are_the_registrys_limiters() {
    let client: Vec<(&str, bool)> = Algorithm::ALL
        .iter()
        .map(|a| (a.name(), a.has_burst()))
        .collect();
    let registry: Vec<(&str, bool)> = REGISTRY
        .iter()
        .filter(|l| l.limiter)
        .map(|l| (l.word, l.burst))
        .collect();
    assert_eq!(
        client, registry,
        "client/src/command.rs's Algorithm::ALL (name, has_burst) differs from the registry's \
         limiters (word, BURST): see docs/development.md, Adding an algorithm"
    );
}
