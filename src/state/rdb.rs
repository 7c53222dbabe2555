//! The `ratelimit` module data type: Redis's callbacks for RDB, AOF rewrite, `MEMORY USAGE`,
//! `DEBUG DIGEST`, `COPY` and freeing. Each runs behind a panic guard; loading validates every
//! field and answers garbage with a clean failure (`RESTORE` then says "Bad data format").

use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::native_types::RedisType;
use redis_module::raw;

use super::{Limiter, ENCVER};

pub static LIMITER_TYPE: RedisType = RedisType::new(
    "ratelimit",
    ENCVER,
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load),
        rdb_save: Some(rdb_save),
        aof_rewrite: Some(aof_rewrite),
        mem_usage: Some(mem_usage),
        digest: Some(digest),
        free: Some(free),
        aux_load: None,
        aux_save: None,
        aux_save_triggers: 0,
        free_effort: None,
        unlink: None,
        copy: Some(copy),
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: None,
        copy2: None,
        aux_save2: None,
    },
);

/// The registered type, to recognise our values in keys.
pub fn raw_type() -> *mut raw::RedisModuleType {
    LIMITER_TYPE
        .raw_type
        .try_borrow()
        .map_or(std::ptr::null_mut(), |t| *t)
}

/// Runs a callback body; a panic becomes `fallback` instead of aborting the server.
fn guarded<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

fn encoded(value: *const c_void) -> Option<Vec<u8>> {
    // SAFETY: Redis hands back the pointer we stored: a live `Limiter`.
    let limiter = unsafe { value.cast::<Limiter>().as_ref() }?;
    let mut buf = Vec::with_capacity(64);
    limiter.encode(&mut buf);
    Some(buf)
}

/// # Safety
/// Redis calls it with a live RDB handle while loading one value of this type.
unsafe extern "C" fn rdb_load(rdb: *mut raw::RedisModuleIO, encver: c_int) -> *mut c_void {
    guarded(std::ptr::null_mut(), || {
        if encver != ENCVER {
            return std::ptr::null_mut();
        }
        // SAFETY: copies function pointers filled at load.
        let api = unsafe {
            (
                raw::RedisModule_LoadStringBuffer,
                raw::RedisModule_IsIOError,
                raw::RedisModule_Free,
            )
        };
        let (Some(load), Some(is_error), Some(free)) = api else {
            return std::ptr::null_mut();
        };
        let mut len = 0usize;
        // SAFETY: `rdb` is the live handle Redis passed in; the buffer it returns is `len` bytes
        // that we own and free below, after decoding copied what it needs.
        let buf = unsafe { load(rdb, &mut len) };
        // SAFETY: as above.
        if unsafe { is_error(rdb) } != 0 || buf.is_null() {
            return std::ptr::null_mut();
        }
        // SAFETY: `buf` is non-null and holds `len` bytes (RedisModule_LoadStringBuffer), ours
        // to free once decoded.
        let decoded = Limiter::decode(unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) });
        // SAFETY: as above; freed once.
        unsafe { free(buf.cast()) };
        match decoded {
            Ok(limiter) => {
                // Every value loaded is later freed through `free`: a discarded temporary
                // database (diskless load) and an expired key on load included.
                super::gauges::limiter_created(&limiter);
                Box::into_raw(Box::new(limiter)).cast()
            }
            Err(_) => std::ptr::null_mut(),
        }
    })
}

/// # Safety
/// Redis calls it with a live RDB handle and a value this module stored (a `Box<Limiter>`).
unsafe extern "C" fn rdb_save(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    guarded((), || {
        // SAFETY (here and below): `value` is a live `Box<Limiter>` of this module; the function
        // pointer was filled at load.
        if let (Some(buf), Some(save)) =
            unsafe { (encoded(value), raw::RedisModule_SaveStringBuffer) }
        {
            // SAFETY: `rdb` is live for this callback; Redis copies the buffer.
            unsafe { save(rdb, buf.as_ptr().cast(), buf.len()) };
        }
    })
}

/// # Safety
/// Redis calls it with a live AOF handle, the key's name and a value this module stored.
unsafe extern "C" fn aof_rewrite(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    // Redis appends the key's expiry (PEXPIREAT) after what the type emits.
    guarded((), || {
        // SAFETY: `value` is a live `Box<Limiter>`; the function pointer was filled at load.
        if let (Some(buf), Some(emit)) = unsafe { (encoded(value), raw::RedisModule_EmitAOF) } {
            // SAFETY: "sb" matches (RedisModuleString*, then a (char*, size_t) pair); `aof` and
            // `key` are live for this callback, which copies the buffer.
            unsafe {
                emit(
                    aof,
                    c"RL.SETSTATE".as_ptr(),
                    c"sb".as_ptr(),
                    key,
                    buf.as_ptr(),
                    buf.len(),
                )
            };
        }
    })
}

/// # Safety
/// `value` is a value this module stored (a `Box<Limiter>`), alive for the call.
unsafe extern "C" fn mem_usage(value: *const c_void) -> usize {
    guarded(0, || {
        // SAFETY: see the function's contract: null or a live `Limiter`.
        unsafe { value.cast::<Limiter>().as_ref() }.map_or(0, Limiter::value_bytes)
    })
}

/// # Safety
/// Redis calls it with a live digest and a value this module stored.
unsafe extern "C" fn digest(md: *mut raw::RedisModuleDigest, value: *mut c_void) {
    guarded((), || {
        // SAFETY: `value` is a live `Box<Limiter>`; the function pointers were filled at load.
        let found = unsafe {
            (
                encoded(value),
                raw::RedisModule_DigestAddStringBuffer,
                raw::RedisModule_DigestEndSequence,
            )
        };
        if let (Some(buf), Some(add), Some(end)) = found {
            // SAFETY: `md` is live for this callback; Redis reads `buf.len()` bytes from the buffer.
            unsafe {
                add(md, buf.as_ptr().cast_mut().cast(), buf.len());
                end(md);
            }
        }
    })
}

/// # Safety
/// `value` is a value this module stored (a `Box<Limiter>`); Redis frees each value once, here
/// (possibly on its lazy-free thread: `metrics` uses atomics).
unsafe extern "C" fn free(value: *mut c_void) {
    guarded((), || {
        if !value.is_null() {
            // SAFETY: the pointer came from `Box::into_raw` and Redis hands it back once.
            let limiter = unsafe { Box::from_raw(value.cast::<Limiter>()) };
            super::gauges::limiter_freed(&limiter);
            drop(limiter);
        }
    })
}

/// # Safety
/// `value` is a value this module stored, alive for the call; Redis owns the copy returned.
unsafe extern "C" fn copy(
    _from: *mut raw::RedisModuleString,
    _to: *mut raw::RedisModuleString,
    value: *const c_void,
) -> *mut c_void {
    guarded(std::ptr::null_mut(), || {
        // SAFETY: see the function's contract: null or a live `Limiter`.
        unsafe { value.cast::<Limiter>().as_ref() }.map_or(std::ptr::null_mut(), |l| {
            super::gauges::limiter_created(l);
            Box::into_raw(Box::new(l.clone())).cast()
        })
    })
}
