//! `RL.GCRA key L W [BURST B] [COST n]` — GCRA: one instant per key; admits exactly what a token
//! bucket with the same L, W, B admits.

use super::decide::limiter_command;

limiter_command!(
    RlGcra, "RL.GCRA", "Decides one request with GCRA: at most L per W ms plus a burst of B",
    algorithm: "GCRA", burst: true,
    state: Gcra(gcra::Gcra)
);
