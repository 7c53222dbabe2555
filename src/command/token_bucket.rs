//! `RL.TOKENBUCKET key L W [BURST B] [COST n]` — token bucket: a balance refilled at L per W up to
//! B; admits exactly what `RL.GCRA` with the same L, W, B admits. `RL.LEASE` shares its keys.

use super::decide::limiter_command;

limiter_command!(
    RlTokenBucket, "RL.TOKENBUCKET", "Decides one request with a token bucket: at most L per W ms plus a burst of B",
    algorithm: "token bucket", burst: true,
    state: TokenBucket(token_bucket::TokenBucket)
);
