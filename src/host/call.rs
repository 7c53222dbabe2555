//! The C API while a command runs: its context, arguments, keys and replies, the entry points
//! Redis calls, and the server's clock; behind safe types whose fields are private.
//!
//! Why raw calls and not the redis-module crate's `Context`/`RedisKeyWritable`: the crate's
//! wrappers `unwrap()` API function pointers that Redis 7.0 does not have (a panic that would
//! abort the server), its key type has no absolute expiry nor access to our value's type, and
//! its command macro cannot register key specs on 7.0. Each function pointer used here is
//! checked once at load ([`api_present`](super::load::api_present)); the `Option`s are still matched, never unwrapped.

use std::ffi::{c_int, c_void, CStr, CString};
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use redis_module::raw;

use crate::error::Error;
use crate::state::{self, gauges, Limiter};

use super::load::REPLICA;

/// The context of the command being run. Only the entry points make one.
pub struct Ctx {
    ptr: *mut raw::RedisModuleCtx,
    name: &'static str,
    event: &'static CStr,
}

/// A Redis string that Redis owns (an argument), valid for the command's run `'a`.
#[derive(Clone, Copy)]
pub struct RString<'a> {
    ptr: *mut raw::RedisModuleString,
    run: PhantomData<&'a ()>,
}

/// The command's arguments, the command name already skipped. Everything read from them lives
/// for the command's run `'a`.
pub struct Args<'a> {
    argv: &'a [*mut raw::RedisModuleString],
    pos: usize,
}

impl Ctx {
    /// # Safety
    /// `ptr` is the context Redis handed to the command being run.
    unsafe fn new(ptr: *mut raw::RedisModuleCtx, name: &'static str, event: &'static CStr) -> Ctx {
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

impl<'a> RString<'a> {
    /// The string's bytes, valid for the command's run.
    pub fn bytes(self) -> &'a [u8] {
        let mut len = 0usize;
        // SAFETY: `self` is a live argument; StringPtrLen returns its buffer and length, which
        // stay valid while the command runs.
        unsafe {
            let Some(ptr_len) = raw::RedisModule_StringPtrLen else {
                return &[];
            };
            let ptr = ptr_len(self.ptr, &mut len);
            if ptr.is_null() {
                return &[];
            }
            std::slice::from_raw_parts(ptr.cast::<u8>(), len)
        }
    }
}

impl<'a> Args<'a> {
    /// # Safety
    /// `argv` holds `argc` argument pointers that Redis keeps alive for the command's run `'a`.
    unsafe fn new(argv: *mut *mut raw::RedisModuleString, argc: c_int) -> Args<'a> {
        let argc = usize::try_from(argc).unwrap_or(0);
        let argv = if argv.is_null() || argc == 0 {
            &[]
        } else {
            // SAFETY: the caller's contract: `argc` live pointers for the run.
            unsafe { std::slice::from_raw_parts(argv, argc) }
        };
        Args { argv, pos: 1 }
    }

    /// Arguments left to read.
    pub fn remaining(&self) -> usize {
        self.argv.len().saturating_sub(self.pos)
    }

    /// The next argument as Redis's own string (to open a key or replicate it).
    pub fn next_string(&mut self) -> Result<RString<'a>, Error> {
        let ptr = *self.argv.get(self.pos).ok_or(Error::WrongArity)?;
        self.pos += 1;
        Ok(RString {
            ptr,
            run: PhantomData,
        })
    }

    /// The next argument's bytes.
    pub fn next_bytes(&mut self) -> Result<&'a [u8], Error> {
        Ok(self.next_string()?.bytes())
    }

    /// The next argument's bytes without moving past it; None at the end.
    pub fn peek_bytes(&self) -> Option<&'a [u8]> {
        self.argv.get(self.pos).map(|&ptr| {
            RString {
                ptr,
                run: PhantomData,
            }
            .bytes()
        })
    }
}

/// A key opened for one command; closed on drop (also when a panic unwinds).
pub struct Key<'a> {
    ptr: *mut raw::RedisModuleKey,
    /// The limiter the key held when last looked at (null: none), so that storing a new state
    /// replaces it in place without looking the value up again.
    held: *mut Limiter,
    run: PhantomData<&'a ()>,
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

/// What the entry points call: installed once at load by the command layer (`dispatch`), so
/// this file knows nothing of the command table.
pub struct Router {
    /// The name and keyspace event of the command at a position of the table.
    pub command: fn(usize) -> Option<(&'static str, &'static CStr)>,
    /// Runs the command at a position: everything between Redis's call and the reply.
    pub run: fn(usize, &Ctx, Args<'_>),
    /// Answers for the command at a position whose run panicked.
    pub panicked: fn(usize, &Ctx),
}

static ROUTER: OnceLock<Router> = OnceLock::new();

/// Installs the router (once, at load).
pub fn route(router: Router) {
    let _ = ROUTER.set(router);
}

/// The C entry point of the command at position `I` of the table. A panic never crosses it: it
/// is logged and answered (`ERR internal error`), and the server keeps running.
extern "C" fn entry<const I: usize>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let Some(router) = ROUTER.get() else {
        return raw::Status::Err as c_int;
    };
    let Some((name, event)) = (router.command)(I) else {
        return raw::Status::Err as c_int;
    };
    // SAFETY: Redis calls a command with its live context and argc argument strings.
    let (ctx, args) = unsafe { (Ctx::new(ctx, name, event), Args::new(argv, argc)) };
    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| (router.run)(I, &ctx, args))) {
        let why = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        ctx.log_warning(&format!("panic caught in {name}: {why}"));
        (router.panicked)(I, &ctx);
    }
    raw::Status::Ok as c_int
}

/// One entry point per position of the command table (a C function cannot carry the row it
/// serves).
pub const ENTRIES: [raw::RedisModuleCmdFunc; 24] = [
    Some(entry::<0>),
    Some(entry::<1>),
    Some(entry::<2>),
    Some(entry::<3>),
    Some(entry::<4>),
    Some(entry::<5>),
    Some(entry::<6>),
    Some(entry::<7>),
    Some(entry::<8>),
    Some(entry::<9>),
    Some(entry::<10>),
    Some(entry::<11>),
    Some(entry::<12>),
    Some(entry::<13>),
    Some(entry::<14>),
    Some(entry::<15>),
    Some(entry::<16>),
    Some(entry::<17>),
    Some(entry::<18>),
    Some(entry::<19>),
    Some(entry::<20>),
    Some(entry::<21>),
    Some(entry::<22>),
    Some(entry::<23>),
];

// ---- The server's clock ------------------------------------------------------------------

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
