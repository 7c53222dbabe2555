//! `RL.LEASE key L W [BURST B] WANT n` — takes up to n tokens at once from the token bucket at
//! `key` (the key and state `RL.TOKENBUCKET` uses), for a gateway to spend locally. Field 1 of
//! the reply is the number granted: `min(n, available)`, or 0 with the time until one token is
//! there. The generic decide path does the rest: a grant of 0 writes and propagates nothing.

use super::decide::limiter_command;

limiter_command!(
    RlLease, "RL.LEASE", "Takes up to n tokens at once from a token bucket, for a gateway to spend locally",
    algorithm: "token bucket", burst: true,
    state: TokenBucket(token_bucket::TokenBucket),
    amount: Want, arity: -6, check: crate::algo::lease::lease
);
