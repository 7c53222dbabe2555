//! The context of a running command: who it is, the replica rule, keys-position requests,
//! opening keys, replication and keyspace events, logging and replies.

use std::ffi::{c_int, CStr, CString};
use std::marker::PhantomData;
use std::sync::atomic::Ordering;

use redis_module::raw;

use crate::error::Error;
use crate::host::load::REPLICA;

use super::args::RString;
use super::key::Key;

/// The context of the command being run. Only the entry points make one.
pub struct Ctx {
    ptr: *mut raw::RedisModuleCtx,
    name: &'static str,
    event: &'static CStr,
}

impl Ctx {
    /// # Safety
    /// `ptr` is the context Redis handed to the command being run.
    pub(super) unsafe fn new(
        ptr: *mut raw::RedisModuleCtx,
        name: &'static str,
        event: &'static CStr,
    ) -> Ctx {
        Ctx { ptr, name, event }
    }

    /// The name of the command being run.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Replicas never decide: a write from anyone but the master's replication stream (or a
    /// load) is refused, whatever `replica-read-only` says. Otherwise a writable replica would
    /// admit on its own and keep keys the master never sees.
    pub fn refuse_on_replica(&self) -> Result<(), Error> {
        // A master (the common case) skips the context flags, which Redis computes in full on
        // every call (about 130 instructions): see [`watch_role`](super::load::watch_role) for why the cached role
        // cannot be stale when a command runs.
        if !REPLICA.load(Ordering::Relaxed) {
            return Ok(());
        }
        // SAFETY: live context; GetContextFlags exists since Redis 5.
        let flags = unsafe { raw::RedisModule_GetContextFlags.map_or(0, |f| f(self.ptr)) } as u32;
        let replica = flags & raw::REDISMODULE_CTX_FLAGS_SLAVE != 0;
        let allowed = raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING;
        if replica && flags & allowed == 0 {
            return Err(Error::Replica { command: self.name });
        }
        Ok(())
    }

    /// True when the command comes from the master's replication stream or from the AOF being
    /// loaded, not from a client.
    pub fn from_stream(&self) -> bool {
        // SAFETY: live context; GetContextFlags exists since Redis 5.
        let flags = unsafe { raw::RedisModule_GetContextFlags.map_or(0, |f| f(self.ptr)) } as u32;
        flags & (raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING) != 0
    }

    /// True when Redis runs the command only to learn where its keys are (its `getkeys-api`
    /// flag). Redis 7.0's cluster redirection finds a module command's keys this way or from
    /// its legacy (first, last, step) range, never from its key specs.
    pub fn keys_position_request(&self) -> bool {
        // SAFETY: live context; the function exists since Redis 4.
        unsafe { raw::RedisModule_IsKeysPositionRequest.is_some_and(|f| f(self.ptr) != 0) }
    }

    /// Answers a keys-position request: argument `pos` (the command name is 0) is a key.
    pub fn key_at(&self, pos: usize) {
        let Ok(pos) = c_int::try_from(pos) else {
            return;
        };
        // SAFETY: live context, within a keys-position request.
        unsafe {
            if let Some(key_at) = raw::RedisModule_KeyAtPos {
                key_at(self.ptr, pos);
            }
        }
    }

    /// Whether the client speaks RESP3 (maps are then maps, not flat arrays).
    pub fn resp3(&self) -> bool {
        // SAFETY: live context.
        let flags = unsafe { raw::RedisModule_GetContextFlags.map_or(0, |f| f(self.ptr)) } as u32;
        flags & raw::REDISMODULE_CTX_FLAGS_RESP3 != 0
    }

    /// Opens `name` for this command; a read-only open of a missing key gives an empty `Key`.
    pub fn open<'a>(&self, name: RString<'a>, write: bool) -> Key<'a> {
        let mode = if write {
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE
        } else {
            raw::REDISMODULE_READ
        };
        // SAFETY: ctx and name are live for the command; OpenKey exists (checked at load).
        let ptr = unsafe {
            raw::RedisModule_OpenKey.map_or(std::ptr::null_mut(), |open| {
                open(self.ptr, name.ptr, mode as c_int).cast()
            })
        };
        Key {
            ptr,
            held: std::ptr::null_mut(),
            run: PhantomData,
        }
    }

    /// Sends `RL.SETSTATE`-like `command key <bytes>` to replicas and the AOF. One buffer (`b`)
    /// after the key: Redis makes an object of every argument, copies and frees them after the
    /// command, and looks the command name up again on every call; this call is the largest cost
    /// of an admitted request. Each argument fewer saves about 300-400 instructions (callgrind),
    /// hence one argument carrying both the state and its expiry (see `state::delta`).
    pub fn replicate(&self, command: &CStr, key: RString<'_>, bytes: &[u8]) {
        // SAFETY: the format "sb" matches (RedisModuleString*, then one (char*, size_t) pair);
        // the buffer outlives the call, which copies it.
        unsafe {
            if let Some(replicate) = raw::RedisModule_Replicate {
                replicate(
                    self.ptr,
                    command.as_ptr(),
                    c"sb".as_ptr(),
                    key.ptr,
                    bytes.as_ptr(),
                    bytes.len(),
                );
            }
        }
    }

    /// Sends `DEL key` to replicas and the AOF: a value of another type is replaced by a limiter
    /// (`RL.THROTTLE` adopting a redis-cell key), and `RL.SETSTATE` never replaces one.
    pub fn replicate_del(&self, key: RString<'_>) {
        // SAFETY: the format "s" matches one RedisModuleString*.
        unsafe {
            if let Some(replicate) = raw::RedisModule_Replicate {
                replicate(self.ptr, c"DEL".as_ptr(), c"s".as_ptr(), key.ptr);
            }
        }
    }

    /// Passes the command on to replicas and the AOF exactly as it came (it must be
    /// deterministic).
    pub fn replicate_verbatim(&self) {
        // SAFETY: live context.
        unsafe {
            if let Some(verbatim) = raw::RedisModule_ReplicateVerbatim {
                verbatim(self.ptr);
            }
        }
    }

    /// Tells Redis the key changed (WATCH, client-side caching), and sends the keyspace event
    /// named after the command (`rl.gcra`; class "d", module key-type events). The module turns
    /// off Redis's implicit signal on every closed write-opened key, so denials, peeks and errors
    /// signal nothing.
    pub fn changed(&self, key: RString<'_>) {
        let event = self.event;
        // SAFETY: live context and key name; both functions exist since Redis 6.0.
        unsafe {
            if let Some(signal) = raw::RedisModule_SignalModifiedKey {
                signal(self.ptr, key.ptr);
            }
            if let Some(notify) = raw::RedisModule_NotifyKeyspaceEvent {
                notify(
                    self.ptr,
                    raw::REDISMODULE_NOTIFY_MODULE as c_int,
                    event.as_ptr(),
                    key.ptr,
                );
            }
        }
    }

    pub fn log_warning(&self, msg: &str) {
        log(self.ptr, msg);
    }

    /// Replies with an array of `len` elements (the elements follow).
    pub fn reply_array(&self, len: usize) {
        // SAFETY: live context; the function exists (checked at load).
        unsafe {
            if let Some(array) = raw::RedisModule_ReplyWithArray {
                array(self.ptr, c_long(len));
            }
        }
    }

    /// Replies with a map of `len` pairs in RESP3, a flat array of 2·len elements in RESP2.
    pub fn reply_map(&self, len: usize) {
        // SAFETY: live context; ReplyWithMap turns into an array for a RESP2 client.
        unsafe {
            match raw::RedisModule_ReplyWithMap {
                Some(map) => {
                    map(self.ptr, c_long(len));
                }
                None => self.reply_array(2 * len),
            }
        }
    }

    pub fn reply_int(&self, n: i64) {
        // SAFETY: live context; the function exists (checked at load).
        unsafe {
            if let Some(int) = raw::RedisModule_ReplyWithLongLong {
                int(self.ptr, n);
            }
        }
    }

    /// A short name or text as a bulk string.
    pub fn reply_text(&self, s: &str) {
        // SAFETY: live context; the buffer outlives the call, which copies it.
        unsafe {
            if let Some(bulk) = raw::RedisModule_ReplyWithStringBuffer {
                bulk(self.ptr, s.as_ptr().cast(), s.len());
            }
        }
    }

    pub fn reply_null(&self) {
        // SAFETY: live context; the function exists (checked at load).
        unsafe {
            if let Some(null) = raw::RedisModule_ReplyWithNull {
                null(self.ptr);
            }
        }
    }

    pub fn reply_ok(&self) {
        // SAFETY: live context; the function exists (checked at load).
        unsafe {
            if let Some(simple) = raw::RedisModule_ReplyWithSimpleString {
                simple(self.ptr, c"OK".as_ptr());
            }
        }
    }

    /// Replies with the error: Redis's own arity error, or the error's text.
    pub fn reply_error(&self, e: &Error) {
        // SAFETY: live context; the C string outlives the call, which copies it.
        unsafe {
            if let Error::WrongArity = e {
                if let Some(wrong_arity) = raw::RedisModule_WrongArity {
                    wrong_arity(self.ptr);
                }
                return;
            }
            let text = CString::new(e.to_string().replace('\0', "?")).unwrap_or_default();
            if let Some(error) = raw::RedisModule_ReplyWithError {
                error(self.ptr, text.as_ptr());
            }
        }
    }
}

/// A length as the C API's `long`.
fn c_long(len: usize) -> std::ffi::c_long {
    std::ffi::c_long::try_from(len).unwrap_or(std::ffi::c_long::MAX)
}

/// Logs at warning level.
fn log(ctx: *mut raw::RedisModuleCtx, msg: &str) {
    let msg = CString::new(msg.replace('\0', "?")).unwrap_or_default();
    // SAFETY: "%s" with one C string argument matches the variadic call.
    unsafe {
        if let Some(log) = raw::RedisModule_Log {
            log(ctx, c"warning".as_ptr(), c"%s".as_ptr(), msg.as_ptr());
        }
    }
}
