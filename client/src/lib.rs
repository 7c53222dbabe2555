//! The gateway half of redis-ratelimit: typed calls for every command, and a [`Limiter`] that
//! decides each request within a deadline, with leases, and with a fallback chosen per class of
//! limit when the store does not answer. docs/client.md is the guide.
//!
//! ```no_run
//! # async fn demo() -> Result<(), ratelimit_client::Error> {
//! use ratelimit_client::{Class, Config, Limit, Limiter, Policy, Store};
//! let store = Store::connect("redis://127.0.0.1:6379/").await?;
//! let limiter = Limiter::new(store, Config { gateways: Some(4), ..Config::default() });
//! let api = Limit::new("api", Policy::gcra(100, 60_000), Class::Contract);
//! let decision = limiter.check(&api, "api:key:abc").await?;
//! if !decision.allowed { /* 429, Retry-After from decision.retry_after_ms */ }
//! limiter.shutdown().await;
//! # Ok(()) }
//! ```

mod billing;
pub mod bounded;
mod call;
mod circuit;
pub mod client_ip;
mod clock;
pub mod command;
mod config;
pub mod connection;
mod deadline;
mod dial;
mod entries;
mod error;
mod fallback;
pub mod http;
mod install;
pub mod layer;
mod lease;
pub mod library;
mod limit;
mod limiter;
mod local;
pub mod login;
mod metered;
pub mod observe;
mod reconnect;
mod reservation;
pub mod scripts;
pub mod secret;
mod sentinel;
mod slot;
mod slot_layer;
pub mod store;
mod switch_master;
mod sync;
pub mod tls;

pub use billing::ledger::CHARGE_TOKEN_TTL;
pub use circuit::CircuitConfig;
pub use clock::{Clock, ManualClock, SystemClock};
pub use command::{
    Algorithm, AllDecision, Backend, Class, Decision, Policy, Shape, ShapeDelay, Shaped, Source,
};
pub use config::{Config, DEFAULT_MAX_DEADLINE};
pub use connection::{Addr, Auth, ConnectionSettings, Target, Tls};
pub use error::{Error, UNAVAILABLE_CODES};
pub use library::{LoadLibrary, Version, LIBRARY_SOURCE};
pub use limit::{key_slot, sub_keys, Limit};
pub use limiter::{Limiter, ShutdownReport, Stats};
pub use reservation::{Reservation, Settlement, DEFAULT_GRACE};
pub use secret::Secret;
pub use slot::{ConcurrencyLimit, Slot, SlotGuard};
pub use store::{AllEntry, SlotEntry, SlotOp, Store};

/// docs/client.md, whose Rust snippets are compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/client.md")]
pub struct ClientGuide;

/// docs/tokens.md, whose Rust snippets are compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/tokens.md")]
pub struct TokensGuide;
