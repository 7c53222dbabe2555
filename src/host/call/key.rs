//! A key opened for one command: what it holds, the limiter stored in it, its expiry.

use std::ffi::{c_int, c_void};
use std::marker::PhantomData;

use redis_module::raw;

use crate::error::Error;
use crate::state::{self, gauges, Limiter};

/// A key opened for one command; closed on drop (also when a panic unwinds).
pub struct Key<'a> {
    pub(super) ptr: *mut raw::RedisModuleKey,
    /// The limiter the key held when last looked at (null: none), so that storing a new state
    /// replaces it in place without looking the value up again.
    pub(super) held: *mut Limiter,
    pub(super) run: PhantomData<&'a ()>,
}

/// What a key holds, when it is not a limiter: named in WRONGTYPE errors.
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

/// What an open key holds.
pub enum Held<'k> {
    Empty,
    Limiter(&'k mut Limiter),
    /// Another type: its name for the WRONGTYPE error ("a string", "a hash", …).
    Other(&'static str),
}

impl Key<'_> {
    /// What the key holds.
    pub fn held(&mut self) -> Held<'_> {
        if self.ptr.is_null() {
            return Held::Empty;
        }
        // SAFETY: ptr is an open key; a value of our type is always a `Box<Limiter>`.
        unsafe {
            let key_type = raw::RedisModule_KeyType.map_or(0, |f| f(self.ptr)) as isize;
            if key_type == raw::REDISMODULE_KEYTYPE_EMPTY {
                return Held::Empty;
            }
            if key_type == raw::REDISMODULE_KEYTYPE_MODULE
                && raw::RedisModule_ModuleTypeGetType.map_or(std::ptr::null_mut(), |f| f(self.ptr))
                    == state::rdb::raw_type()
            {
                let value = raw::RedisModule_ModuleTypeGetValue
                    .map_or(std::ptr::null_mut(), |f| f(self.ptr))
                    .cast::<Limiter>();
                self.held = value;
                return match value.as_mut() {
                    Some(limiter) => Held::Limiter(limiter),
                    None => Held::Other("an unreadable limiter"),
                };
            }
            Held::Other(type_name(key_type))
        }
    }

    /// A copy of the key's value when it is a string (`RL.THROTTLE` adopting redis-cell's keys);
    /// None for any other type or an empty key.
    pub fn string_value(&mut self) -> Option<Vec<u8>> {
        if self.ptr.is_null() {
            return None;
        }
        // SAFETY: ptr is an open key; for a string, StringDMA returns its buffer and length,
        // valid while the key is open and unchanged, and it is copied at once.
        unsafe {
            let key_type = raw::RedisModule_KeyType.map_or(0, |f| f(self.ptr)) as isize;
            if key_type != raw::REDISMODULE_KEYTYPE_STRING {
                return None;
            }
            let dma = raw::RedisModule_StringDMA?;
            let mut len = 0usize;
            let ptr = dma(self.ptr, &mut len, raw::REDISMODULE_READ as c_int);
            if ptr.is_null() {
                return Some(Vec::new());
            }
            Some(std::slice::from_raw_parts(ptr.cast::<u8>(), len).to_vec())
        }
    }

    /// The limiter stored here: None for an empty key, WRONGTYPE for any other value (`wanted`
    /// names the kind of limiter the command needs, for the message).
    pub fn limiter(&mut self, wanted: &'static str) -> Result<Option<&mut Limiter>, Error> {
        match self.held() {
            Held::Empty => Ok(None),
            Held::Limiter(l) => Ok(Some(l)),
            Held::Other(holds) => Err(Error::WrongType {
                holds: holds.into(),
                wanted,
                key: None,
            }),
        }
    }

    /// The limiter [`Key::held`] last found or [`Key::store`] stored, without asking Redis
    /// again (None when neither did).
    pub fn found(&mut self) -> Option<&mut Limiter> {
        // SAFETY: `held` is null or the value of this key, found by `held()` or stored by
        // `store()` while the key is open; nothing replaces it but `store()`.
        unsafe { self.held.as_mut() }
    }

    /// Stores a limiter in the key, replacing whatever it held (the caller checked what that
    /// was): in place when [`Key::held`] found a limiter. Returns the stored limiter.
    pub fn store(&mut self, limiter: Limiter) -> Result<&mut Limiter, Error> {
        // SAFETY: `held` is the value of this key, found by `held()` while the key is open, and
        // nothing replaced it since: every replacement goes through this function.
        if let Some(stored) = unsafe { self.held.as_mut() } {
            let before = gauges::Footprint::of(stored);
            *stored = limiter;
            gauges::limiter_changed(before, stored);
            return Ok(stored);
        }
        let value = Box::into_raw(Box::new(limiter));
        // SAFETY: ptr is a key opened for writing; on success Redis owns `value` and frees it
        // through the type's free callback (also the value it replaces).
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
        self.held = value;
        // SAFETY: Redis owns `value` now and keeps it alive while the key is open and unchanged.
        let stored = unsafe { value.as_mut() }.ok_or(Error::Internal)?;
        gauges::limiter_created(stored);
        Ok(stored)
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

    /// The key's absolute expiry in ms since the epoch; None when it has none (or is empty).
    pub fn expires_at_ms(&self) -> Option<u64> {
        // SAFETY: ptr is an open key (or null: no call).
        let at = unsafe {
            match raw::RedisModule_GetAbsExpire {
                Some(get) if !self.ptr.is_null() => get(self.ptr),
                _ => -1,
            }
        };
        u64::try_from(at).ok()
    }
}

impl Drop for Key<'_> {
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
