//! `RL.FIXEDWINDOW key L W [COST n]` — fixed window: at most L per W-ms window aligned to the Unix
//! epoch (so up to 2L across a boundary); one count per key.

use super::decide::limiter_command;

limiter_command!(
    RlFixedWindow, "RL.FIXEDWINDOW", "Decides one request with a fixed window: at most L per epoch-aligned W ms",
    algorithm: "fixed window", burst: false,
    state: FixedWindow(fixed_window::FixedWindow)
);
