//! The stored limiter as the module holds it: the core's encoding (`ratelimit_core::state`),
//! re-exported whole, with what only a Redis server has: the data type's callbacks (`rdb`) and
//! the gauges they move (`gauges`).

pub use ratelimit_core::state::*;

pub mod gauges;
pub mod rdb;
