//! The C API while a command runs: its context, arguments, keys and replies, the entry points
//! Redis calls, and the server's clock; behind safe types whose fields are private.
//!
//! Why raw calls and not the redis-module crate's `Context`/`RedisKeyWritable`: the crate's
//! wrappers `unwrap()` API function pointers that Redis 7.0 does not have (a panic that would
//! abort the server), its key type has no absolute expiry nor access to our value's type, and
//! its command macro cannot register key specs on 7.0. Each function pointer used here is
//! checked once at load ([`api_present`](super::load::api_present)); the `Option`s are still matched, never unwrapped.
//!
//! One concept a file: `context` (the running command), `args` (its arguments), `key` (a key
//! it opened), `router` (the entry points Redis calls), `clock` (the server's clock). The
//! command layer names them through this file.

mod args;
mod clock;
mod context;
mod key;
mod router;

pub use args::{Args, RString};
pub use clock::{server_clock_kind, server_clock_ns};
pub use context::Ctx;
pub use key::{Held, Key};
pub use router::{route, Router, ENTRIES};
