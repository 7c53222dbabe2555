//! Redis glue. A handler (`limit`, `all`, `shape`, `throttle`, `refund`, `charge`, `settle`,
//! `peek`, `inspect`, `setstate`, `debug`, `share`, `demand`) reads as STYLE.md's five steps:
//! parse, load, decide, persist and propagate the effect, reply. Below this layer, `crate::host`
//! makes every call into Redis's C API. Inside it, each using only those below it: `args`,
//! `reply`, `effect` and `key` (a limiter key's checks), then `plan` (one request's `Amount` on
//! one key: every limiter command and each limiter of `RL.ALL` plan and commit through it), then
//! `decide` (one key's load → plan → commit, for the single-key limiter commands), then the
//! handlers, then `table` (the command table), then `dispatch` (the router and registration).

pub mod all;
pub mod args;
pub mod charge;
pub mod concurrency;
pub mod debug;
pub mod decide;
pub mod demand;
pub mod dispatch;
pub mod effect;
pub mod inspect;
pub mod key;
pub mod limit;
pub mod peek;
pub mod plan;
pub mod refund;
pub mod reply;
pub mod setstate;
pub mod settle;
pub mod shape;
pub mod share;
pub mod table;
pub mod throttle;
