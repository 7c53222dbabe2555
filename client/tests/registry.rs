//! The client's `Algorithm` against the module's registry (the core crate's `REGISTRY`): the
//! same limiters, in the same order, named and taking `BURST` alike. No server: a new algorithm
//! of the registry fails this test until the client has it, and a client variant the module
//! lacks fails it too.

use ratelimit_client::Algorithm;
use ratelimit_core::algo::listed::REGISTRY;

/// Every variant of the client's enum, in declaration order.
const CLIENT: [Algorithm; 5] = [
    Algorithm::Gcra,
    Algorithm::TokenBucket,
    Algorithm::SlidingLog,
    Algorithm::SlidingCounter,
    Algorithm::FixedWindow,
];

/// Does not compile when the enum gains a variant that [`CLIENT`] lacks.
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

#[test]
fn the_clients_algorithms_are_the_registrys_limiters() {
    let client: Vec<(&str, bool)> = CLIENT.iter().map(|a| (a.name(), a.has_burst())).collect();
    let registry: Vec<(&str, bool)> = REGISTRY
        .iter()
        .filter(|l| l.limiter)
        .map(|l| (l.word, l.burst))
        .collect();
    assert_eq!(
        client, registry,
        "client/src/command.rs's Algorithm (name, has_burst) differs from the registry's \
         limiters (word, BURST): see docs/development.md, Adding an algorithm"
    );
}
