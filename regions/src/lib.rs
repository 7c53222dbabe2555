//! The budget controller (docs/regions.md): every period it reads each region's demand per key
//! (`RL.DEMAND`), splits each key's global limit between the regions in proportion to it, and
//! writes the shares (`RL.SHARE`), lowers before raises, so that a key's shares never sum above
//! its limit, whatever fails.

pub mod config;
pub mod controller;
pub mod ledger;
pub mod link;
pub mod route;
pub mod split;
pub mod wire;

pub use config::Config;
pub use controller::{Controller, Report};
