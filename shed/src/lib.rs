//! The load shedder in front of a service (the capacity class; docs/shedding.md).

pub mod gradient;
pub mod limit;
