//! The pure core of redis-ratelimit: the rate-limiting algorithms, their one registry and the
//! encoding of their states. No Redis types: the module (`redis-ratelimit`), the gateway client
//! and the tests link it, so every package derives the list of algorithms from the registry.

pub mod algo;
pub mod error;
pub mod state;
