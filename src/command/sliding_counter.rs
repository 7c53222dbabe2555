//! `RL.SLIDINGCOUNTER key L W [COST n]` — sliding counter: two window counts, the previous one
//! weighted by its overlap with the last W ms; three integers per key whatever L.

use super::decide::limiter_command;

limiter_command!(
    RlSlidingCounter, "RL.SLIDINGCOUNTER", "Decides one request with a sliding counter: about L per W ms, two counts per key",
    algorithm: "sliding counter", burst: false,
    state: SlidingCounter(sliding_counter::SlidingCounter)
);
