//! The server's clock, as the C API offers it.

use redis_module::raw;

/// The server's clock as the finest reading it offers, and which one that is: `CachedMicroseconds`
/// (Redis 7.2+, Valkey), `Microseconds`, else `Milliseconds` (Redis 7.0). In ns; 0 if none.
pub fn server_clock_ns() -> u64 {
    // SAFETY: the API pointers are filled once at module load and never change afterwards.
    unsafe {
        if let Some(cached) = raw::RedisModule_CachedMicroseconds {
            return u64::try_from(cached()).unwrap_or(0).saturating_mul(1_000);
        }
        if let Some(micros) = raw::RedisModule_Microseconds {
            return u64::try_from(micros()).unwrap_or(0).saturating_mul(1_000);
        }
        if let Some(millis) = raw::RedisModule_Milliseconds {
            return u64::try_from(millis())
                .unwrap_or(0)
                .saturating_mul(1_000_000);
        }
    }
    0
}

/// Which clock [`server_clock_ns`] reads: "cached-us", "us" or "ms".
pub fn server_clock_kind() -> &'static str {
    // SAFETY: copies function pointers filled at load (no reference to the statics).
    let (cached, micros) = unsafe {
        (
            raw::RedisModule_CachedMicroseconds,
            raw::RedisModule_Microseconds,
        )
    };
    match (cached.is_some(), micros.is_some()) {
        (true, _) => "cached-us",
        (false, true) => "us",
        (false, false) => "ms",
    }
}
