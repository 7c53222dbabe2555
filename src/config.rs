//! The module's configuration values: set at load (module arguments) or by `CONFIG SET`, read by
//! the commands and `INFO`. A bottom module: it imports nothing of the crate, so any layer can
//! read it without reaching up into `lib.rs`.

use std::sync::atomic::AtomicI64;

/// `ratelimit.max-log-entries`: the largest L a sliding log accepts (memory is per entry).
pub static MAX_LOG_ENTRIES: AtomicI64 = AtomicI64::new(10_000);
