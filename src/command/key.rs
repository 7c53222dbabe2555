//! An open Redis key holding (or about to hold) a limiter, and the effect sent to replicas and
//! the AOF after a change.

use std::cell::RefCell;
use std::ffi::{c_int, c_void};

use redis_module::raw;

use super::{Ctx, RString};
use crate::error::Error;
use crate::state::{self, Limiter};

/// A key opened for one command; closed on drop (also when a panic unwinds).
pub struct Key {
    ptr: *mut raw::RedisModuleKey,
}

impl Key {
    /// Opens `name`. Read-only opens of a missing key give an empty `Key`.
    pub fn open(ctx: Ctx, name: RString, write: bool) -> Key {
        let mode = if write {
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE
        } else {
            raw::REDISMODULE_READ
        };
        // SAFETY: ctx and name are live for the command; OpenKey exists (checked at load).
        let ptr = unsafe {
            raw::RedisModule_OpenKey.map_or(std::ptr::null_mut(), |open| {
                open(ctx.0, name.0, mode as c_int).cast()
            })
        };
        Key { ptr }
    }

    /// The limiter stored here: `None` for an empty key, `WRONGTYPE` for any other value
    /// (`wanted` names the kind of limiter the command needs, for the message).
    pub fn limiter(&mut self, wanted: &'static str) -> Result<Option<&mut Limiter>, Error> {
        if self.ptr.is_null() {
            return Ok(None);
        }
        // SAFETY: ptr is an open key; the value of our type is always a `Box<Limiter>`.
        unsafe {
            let key_type = raw::RedisModule_KeyType.map_or(0, |f| f(self.ptr)) as isize;
            if key_type == raw::REDISMODULE_KEYTYPE_EMPTY {
                return Ok(None);
            }
            if key_type == raw::REDISMODULE_KEYTYPE_MODULE
                && raw::RedisModule_ModuleTypeGetType.map_or(std::ptr::null_mut(), |f| f(self.ptr))
                    == state::rdb::raw_type()
            {
                let value = raw::RedisModule_ModuleTypeGetValue
                    .map_or(std::ptr::null_mut(), |f| f(self.ptr))
                    .cast::<Limiter>();
                return value.as_mut().map(Some).ok_or(Error::Internal);
            }
            Err(Error::WrongType {
                holds: type_name(key_type).into(),
                wanted,
            })
        }
    }

    /// Stores a new limiter in an empty key, or replaces the one stored.
    pub fn store(&mut self, limiter: Limiter) -> Result<(), Error> {
        if let Some(existing) = self.limiter("rate")? {
            *existing = limiter;
            return Ok(());
        }
        let value = Box::into_raw(Box::new(limiter));
        // SAFETY: ptr is a key opened for writing; on success Redis owns `value` and frees it
        // through the type's free callback.
        let stored = unsafe {
            raw::RedisModule_ModuleTypeSetValue.map_or(raw::Status::Err as c_int, |f| {
                f(self.ptr, state::rdb::raw_type(), value.cast::<c_void>())
            })
        };
        if stored != raw::Status::Ok as c_int {
            // SAFETY: Redis did not take ownership.
            drop(unsafe { Box::from_raw(value) });
            return Err(Error::Internal);
        }
        Ok(())
    }

    /// Sets the key to expire at an absolute instant (ms since the epoch), or never.
    pub fn expire_at(&mut self, at_ms: Option<u64>) {
        // SAFETY: ptr is an open key holding a value.
        unsafe {
            match at_ms {
                Some(ms) => {
                    if let Some(set) = raw::RedisModule_SetAbsExpire {
                        set(self.ptr, i64::try_from(ms).unwrap_or(i64::MAX));
                    }
                }
                None => {
                    if let Some(set) = raw::RedisModule_SetExpire {
                        set(self.ptr, i64::from(raw::REDISMODULE_NO_EXPIRE));
                    }
                }
            }
        }
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: closed once, here.
            unsafe {
                if let Some(close) = raw::RedisModule_CloseKey {
                    close(self.ptr);
                }
            }
        }
    }
}

fn type_name(key_type: isize) -> &'static str {
    match key_type {
        raw::REDISMODULE_KEYTYPE_STRING => "a string",
        raw::REDISMODULE_KEYTYPE_LIST => "a list",
        raw::REDISMODULE_KEYTYPE_HASH => "a hash",
        raw::REDISMODULE_KEYTYPE_SET => "a set",
        raw::REDISMODULE_KEYTYPE_ZSET => "a sorted set",
        raw::REDISMODULE_KEYTYPE_STREAM => "a stream",
        _ => "another module's value",
    }
}

thread_local! {
    /// Reused for every encoding: commands run on Redis's main thread, one at a time.
    static ENCODE_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Propagates the effect of a decision: `RL.SETSTATE key <state> PXAT <ms>`. Replicas and the
/// AOF store exactly this state and expiry; they never decide again on their own clock.
///
/// Every argument goes as a buffer (`b`): Redis turns a `c` string or an `l` integer into a new
/// string object with more work (`l` formats the number into a separately allocated sds), and
/// this call is the largest cost of an admitted request (measured with callgrind: about 550
/// fewer instructions per call than `"sbcl"`, for the same propagated command).
pub fn replicate_state(ctx: Ctx, name: RString, limiter: &Limiter, expire_at_ms: u64) {
    ENCODE_BUF.with_borrow_mut(|buf| {
        buf.clear();
        limiter.encode(buf);
        let mut digits = [0u8; 20];
        let at = decimal(expire_at_ms, &mut digits);
        // SAFETY: the format "sbbb" matches (RedisModuleString*, then three (char*, size_t)
        // pairs); every buffer outlives the call, which copies them.
        unsafe {
            if let Some(replicate) = raw::RedisModule_Replicate {
                replicate(
                    ctx.0,
                    c"RL.SETSTATE".as_ptr(),
                    c"sbbb".as_ptr(),
                    name.0,
                    buf.as_ptr(),
                    buf.len(),
                    c"PXAT".as_ptr(),
                    4usize,
                    at.as_ptr(),
                    at.len(),
                );
            }
        }
    });
}

/// `n` in decimal ASCII, written at the end of `buf` (20 digits hold any u64).
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut start = buf.len();
    for slot in buf.iter_mut().rev() {
        // n % 10 < 10: the cast is exact.
        *slot = b'0' + (n % 10) as u8;
        start -= 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.get(start..).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::decimal;

    #[test]
    fn decimal_digits() {
        let mut buf = [0u8; 20];
        for n in [0, 7, 10, 1_800_000_000_123, u64::MAX] {
            assert_eq!(decimal(n, &mut buf), n.to_string().as_bytes());
        }
    }
}
