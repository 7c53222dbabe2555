//! redis-ratelimit: rate limiters as native Redis commands, decided atomically on the server's
//! clock and replicated as effects. This file registers the module: its data type, configuration
//! and load arguments; the commands are the table in `command`. Everything else lives in `algo`
//! (the pure core crate, `ratelimit_core`), `state` (stored format), `host` (the C API),
//! `command` (the handlers), `clock`, `config`, `metrics` and `server_facts`; docs/development.md
//! draws the layers.
//!
//! `unsafe` lives in two places only: `host` (every call into Redis's C API) and
//! `state::rdb` (the data type's callbacks, which Redis calls with raw pointers). Inside an
//! `unsafe fn` every unsafe operation still needs its own block and SAFETY comment.
#![deny(unsafe_op_in_unsafe_fn)]

pub use ratelimit_core::algo;
pub mod clock;
pub mod command;
pub mod config;
pub use ratelimit_core::error;
pub mod host;
pub mod metrics;
pub mod server_facts;
pub mod state;

use redis_module::configuration::ConfigurationFlags;
use redis_module::{redis_module, Context, RedisString, Status};

use host::load;
use state::rdb::LIMITER_TYPE;

// Rust's allocations go through Redis's allocator (counted in `used_memory`, `MEMORY USAGE`);
// unit tests run outside Redis and use the system allocator.
#[cfg(not(test))]
type Allocator = redis_module::alloc::RedisAlloc;
#[cfg(not(test))]
const ALLOCATOR: Allocator = redis_module::alloc::RedisAlloc;
#[cfg(test)]
type Allocator = std::alloc::System;
#[cfg(test)]
const ALLOCATOR: Allocator = std::alloc::System;

/// Module arguments: `DEBUG-CLOCK yes|no`, `CELL-COMPAT yes|no` (see `command::throttle`) and `max-log-entries <n>` (the latter read by the
/// configuration table). Anything else fails the load, so a typo is never silently ignored.
fn init(ctx: &Context, args: &[RedisString]) -> Status {
    let found = server_facts::detect(ctx);
    if found.too_old() || !load::api_present() {
        ctx.log_warning(&format!(
            "not loaded: this server is {}; the module needs Redis 7.0 or later (or Valkey)",
            found.describe()
        ));
        return Status::Err;
    }
    let mut debug_clock = false;
    for pair in args.chunks(2) {
        let [name, value] = pair else {
            ctx.log_warning("module arguments come in pairs: NAME VALUE");
            return Status::Err;
        };
        let (name, value) = (name.as_slice(), value.as_slice());
        if name.eq_ignore_ascii_case(b"DEBUG-CLOCK") {
            if value.eq_ignore_ascii_case(b"yes") || value.eq_ignore_ascii_case(b"no") {
                debug_clock = value.eq_ignore_ascii_case(b"yes");
            } else {
                ctx.log_warning("DEBUG-CLOCK takes yes or no");
                return Status::Err;
            }
        } else if name.eq_ignore_ascii_case(b"CELL-COMPAT") {
            if value.eq_ignore_ascii_case(b"yes") || value.eq_ignore_ascii_case(b"no") {
                command::throttle::CELL_COMPAT.store(
                    value.eq_ignore_ascii_case(b"yes"),
                    std::sync::atomic::Ordering::Relaxed,
                );
            } else {
                ctx.log_warning("CELL-COMPAT takes yes or no");
                return Status::Err;
            }
        } else if name != b"max-log-entries" {
            ctx.log_warning(&format!(
                "unknown module argument '{}'; expected DEBUG-CLOCK, CELL-COMPAT or max-log-entries",
                error::echo(name)
            ));
            return Status::Err;
        }
    }
    if debug_clock {
        clock::enable_debug_clock();
        ctx.log_warning("DEBUG-CLOCK is on: RL.DEBUG can move this server's limiter clock. Never in production.");
    }
    load::set_module_options(ctx);
    load::watch_role(ctx);
    match command::dispatch::register_all(ctx).and_then(|()| metrics::register(ctx)) {
        Ok(()) => {
            ctx.log_notice(&format!(
                "loaded on {}; module API used: {}",
                found.describe(),
                server_facts::features()
            ));
            Status::Ok
        }
        Err(e) => {
            ctx.log_warning(&e);
            Status::Err
        }
    }
}

redis_module! {
    name: "ratelimit",
    version: 1,
    allocator: (Allocator, ALLOCATOR),
    data_types: [LIMITER_TYPE],
    init: init,
    configurations: [
        i64: [
            ["max-log-entries", &config::MAX_LOG_ENTRIES, 10_000, 1, algo::sliding_log::MAX_LOG_LIMIT as i64, ConfigurationFlags::DEFAULT, None],
        ],
        string: [],
        bool: [],
        enum: [],
        module_args_as_configuration: true,
    ]
}
