//! The one boundary between the module and Redis's C API while a command runs: every `unsafe`
//! call a command makes is in this file, behind safe types whose fields are private.
//!
//! Why raw calls and not the redis-module crate's `Context`/`RedisKeyWritable`: the crate's
//! wrappers `unwrap()` API function pointers that Redis 7.0 does not have (a panic that would
//! abort the server), its key type has no absolute expiry nor access to our value's type, and
//! its command macro cannot register key specs on 7.0. Each function pointer used here is
//! checked once at load ([`api_present`]); the `Option`s are still matched, never unwrapped.

use std::ffi::{c_int, c_void, CStr, CString};
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use redis_module::commands::{get_redis_key_spec, KeySpec};
use redis_module::{raw, Context};

use crate::error::Error;
use crate::state::{self, gauges, Limiter};

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
        // every call (about 130 instructions): see [`watch_role`] for why the cached role
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

/// The API functions the module calls without a fallback; all exist since Redis 7.0.
pub fn api_present() -> bool {
    // Copies each pointer out (they are `Option<fn>`) rather than referencing the statics.
    macro_rules! all_present {
        ($($f:ident),*) => {
            // SAFETY: reading function pointers that Redis filled in at load.
            unsafe { true $(&& { let f = raw::$f; f.is_some() })* }
        };
    }
    all_present!(
        RedisModule_ReplyWithArray,
        RedisModule_ReplyWithLongLong,
        RedisModule_ReplyWithError,
        RedisModule_ReplyWithSimpleString,
        RedisModule_ReplyWithStringBuffer,
        RedisModule_ReplyWithNull,
        RedisModule_ReplyWithMap,
        RedisModule_WrongArity,
        RedisModule_StringPtrLen,
        RedisModule_OpenKey,
        RedisModule_CloseKey,
        RedisModule_KeyType,
        RedisModule_ModuleTypeGetType,
        RedisModule_ModuleTypeGetValue,
        RedisModule_ModuleTypeSetValue,
        RedisModule_SetAbsExpire,
        RedisModule_SetExpire,
        RedisModule_Replicate,
        RedisModule_ReplicateVerbatim,
        RedisModule_GetContextFlags,
        RedisModule_IsKeysPositionRequest,
        RedisModule_KeyAtPos,
        RedisModule_SignalModifiedKey,
        RedisModule_NotifyKeyspaceEvent,
        RedisModule_Milliseconds,
        RedisModule_CreateCommand,
        RedisModule_GetCommand,
        RedisModule_SetCommandInfo,
        RedisModule_SetModuleOptions
    )
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

/// Module-wide options, set at load: loading garbage fails the load (`RESTORE` says "Bad data
/// format") instead of exiting, and a write-opened key is not signalled as modified when it is
/// closed: the module signals real changes itself ([`Ctx::changed`]), so a denial is not a write.
///
/// HANDLE_REPL_ASYNC_LOAD (7.0+; older servers ignore the bit): with `repl-diskless-load
/// swapdb` a replica loads the master's RDB into a temporary db (serving reads from the old one
/// meanwhile when the replication id is unchanged) and swaps or discards it at the end, so
/// rdb_load/free run for values of a db that is not the live one, and free may run on the
/// lazy-free thread. The only module state derived from the dataset is the gauges in
/// `metrics` (atomics, moved by rdb_load and free): during such a load they count both dbs,
/// which is the memory really held, and they return to the live db's values once the other is
/// freed (tests/servers.rs checks a replica's gauges equal its master's after an async load).
pub fn set_module_options(ctx: &Context) {
    let options = raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS
        | raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED
        | raw::REDISMODULE_OPTIONS_HANDLE_REPL_ASYNC_LOAD;
    // SAFETY: called at load with the load context; the function exists (checked at load).
    unsafe {
        if let Some(set_options) = raw::RedisModule_SetModuleOptions {
            set_options(ctx.ctx, options as c_int);
        }
    }
}

/// A command as Redis registers it (see `RedisModule_CreateCommand`/`SetCommandInfo`).
pub struct Registration {
    pub name: &'static str,
    /// Command flags, e.g. `write deny-oom fast getkeys-api`.
    pub flags: String,
    pub arity: i32,
    /// The legacy (first, last, step) key range.
    pub range: (c_int, c_int, c_int),
    pub key_spec: Option<KeySpec>,
    pub summary: &'static str,
    /// ACL categories, where the server has them for module commands (7.2+).
    pub acl: Option<CString>,
    pub entry: raw::RedisModuleCmdFunc,
}

/// Registers a command, then its arity, summary, key spec and ACL categories so that `COMMAND
/// INFO`, `COMMAND GETKEYSANDFLAGS`, ACL and cluster clients see it right.
pub fn register(ctx: &Context, r: Registration) -> Result<(), String> {
    let ctx = ctx.ctx;
    let name = CString::new(r.name).map_err(|e| e.to_string())?;
    let flags = CString::new(r.flags).map_err(|e| e.to_string())?;
    let summary = CString::new(r.summary).map_err(|e| e.to_string())?;
    let fail = || format!("cannot register {}", r.name);
    let (first, last, step) = r.range;
    let has_keys = r.key_spec.is_some();
    let mut key_specs = get_redis_key_spec(r.key_spec.into_iter().collect());
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    // SAFETY: called from OnLoad with its context; the pointers were checked by `api_present`;
    // every C string and the key specs outlive the calls, which copy them.
    unsafe {
        let create = raw::RedisModule_CreateCommand.ok_or_else(fail)?;
        if create(
            ctx,
            name.as_ptr(),
            r.entry,
            flags.as_ptr(),
            first,
            last,
            step,
        ) != raw::Status::Ok as c_int
        {
            return Err(fail());
        }
        let command = raw::RedisModule_GetCommand.ok_or_else(fail)?(ctx, name.as_ptr());
        if command.is_null() {
            return Err(fail());
        }
        let info = raw::RedisModuleCommandInfo {
            version: &version,
            summary: summary.as_ptr(),
            complexity: std::ptr::null(),
            since: c"0.1.0".as_ptr(),
            history: std::ptr::null_mut(),
            tips: std::ptr::null(),
            arity: r.arity,
            key_specs: if has_keys {
                key_specs.as_mut_ptr()
            } else {
                std::ptr::null_mut()
            },
            args: std::ptr::null_mut(),
        };
        if raw::RedisModule_SetCommandInfo.ok_or_else(fail)?(command, &info)
            != raw::Status::Ok as c_int
        {
            return Err(format!("cannot set the command info of {}", r.name));
        }
        // Redis 7.2+ and Valkey; absent on 7.0, where module commands have no categories.
        if let (Some(set_acl), Some(categories)) =
            (raw::RedisModule_SetCommandACLCategories, r.acl.as_ref())
        {
            if set_acl(command, categories.as_ptr()) != raw::Status::Ok as c_int {
                return Err(format!(
                    "cannot set the ACL categories '{}' of {}",
                    categories.to_string_lossy(),
                    r.name
                ));
            }
        }
    }
    Ok(())
}

// ---- The server: its clock, what it says of itself, its ACL categories --------------------

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

/// The version the server reports to modules (`RedisModule_GetServerVersion`, 0x00MMmmpp).
pub fn server_version() -> Option<i32> {
    // SAFETY: a function pointer filled at load.
    unsafe { raw::RedisModule_GetServerVersion.map(|f| f()) }
}

/// Fields of an `INFO` section of the server, read at load: (name, value) for each of `names`
/// the section has.
pub fn server_info(ctx: &Context, section: &CStr, names: &[&CStr]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    // SAFETY: `ctx` is the load context; the info data lives until freed below, and each field
    // is a NUL-terminated string owned by it, copied out at once.
    unsafe {
        let (Some(get), Some(free), Some(field)) = (
            raw::RedisModule_GetServerInfo,
            raw::RedisModule_FreeServerInfo,
            raw::RedisModule_ServerInfoGetFieldC,
        ) else {
            return found;
        };
        let data = get(ctx.ctx, section.as_ptr());
        if data.is_null() {
            return found;
        }
        for name in names {
            let p = field(data, name.as_ptr());
            if !p.is_null() {
                let value = CStr::from_ptr(p).to_string_lossy().into_owned();
                found.push((name.to_string_lossy().into_owned(), value));
            }
        }
        free(ctx.ctx, data);
    }
    found
}

/// Adds an ACL category (Redis 7.4+, Valkey 8; only during load). True when the server has it
/// afterwards: added now, or already there (another module's, `EBUSY`).
pub fn add_acl_category(ctx: &Context, name: &CStr) -> bool {
    /// `errno` for "the category exists" (Linux; the only platform the module is built for).
    const EBUSY: i32 = 16;
    // SAFETY: a function pointer filled at load, called from OnLoad with its context.
    unsafe {
        raw::RedisModule_AddACLCategory.is_some_and(|add| {
            add(ctx.ctx, name.as_ptr()) == raw::Status::Ok as i32
                || std::io::Error::last_os_error().raw_os_error() == Some(EBUSY)
        })
    }
}

/// Whether module commands can have ACL categories here (Redis 7.2+, Valkey).
pub fn has_command_acl_categories() -> bool {
    // SAFETY: copies a function pointer filled at load.
    unsafe { raw::RedisModule_SetCommandACLCategories }.is_some()
}

// ---- The server's role ------------------------------------------------------------------------

/// Whether this server is a replica: true until [`watch_role`] learns otherwise, so a server
/// whose role could not be watched checks the context flags on every write, as before.
static REPLICA: AtomicBool = AtomicBool::new(true);

/// Reads the server's role at load and follows it through Redis's replication-role event (fired
/// inside `REPLICAOF`, a cluster failover and any other change of role, before the server runs
/// another command), so [`Ctx::refuse_on_replica`] need not ask Redis on a master. A server that
/// refuses the subscription keeps asking on every write.
pub fn watch_role(ctx: &Context) {
    // SAFETY: called from OnLoad with its context; both functions exist since Redis 6.
    unsafe {
        let (Some(flags), Some(subscribe)) = (
            raw::RedisModule_GetContextFlags,
            raw::RedisModule_SubscribeToServerEvent,
        ) else {
            return;
        };
        let event = raw::RedisModuleEvent {
            id: raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
            dataver: 1,
        };
        if subscribe(ctx.ctx, event, Some(role_changed)) != raw::Status::Ok as c_int {
            return;
        }
        let replica = flags(ctx.ctx) as u32 & raw::REDISMODULE_CTX_FLAGS_SLAVE != 0;
        REPLICA.store(replica, Ordering::Relaxed);
    }
}

/// # Safety
/// Called by Redis on its main thread when the server's replication role changes.
unsafe extern "C" fn role_changed(
    _ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    let replica = subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_REPLICA;
    REPLICA.store(replica, Ordering::Relaxed);
}

// ---- INFO and CONFIG RESETSTAT --------------------------------------------------------------

/// The fields of an INFO section, as (name, value).
pub type InfoFields = fn() -> Vec<(String, i64)>;

/// What `INFO ratelimit` shows (the module's own section): installed by [`register_info`].
static INFO_FIELDS: OnceLock<InfoFields> = OnceLock::new();
/// What `CONFIG RESETSTAT` calls: installed by [`register_info`].
static ON_RESETSTAT: OnceLock<fn()> = OnceLock::new();

/// Registers the INFO callback (replacing the redis-module crate's, which would prefix a section
/// name of its own: `# ratelimit` and `ratelimit_<field>` is what Redis gives a module's own
/// section) showing `fields()`, and a command filter that calls `on_resetstat` on
/// `CONFIG RESETSTAT` (Redis has no server event for it, 7.0 through 7.4). Called at load.
pub fn register_info(ctx: &Context, fields: InfoFields, on_resetstat: fn()) -> Result<(), String> {
    let _ = INFO_FIELDS.set(fields);
    let _ = ON_RESETSTAT.set(on_resetstat);
    // SAFETY: called from OnLoad with its context; both functions exist since Redis 6.
    let registered = unsafe {
        match (
            raw::RedisModule_RegisterInfoFunc,
            raw::RedisModule_RegisterCommandFilter,
        ) {
            (Some(info), Some(filter)) => {
                info(ctx.ctx, Some(info_callback)) == raw::Status::Ok as c_int
                    && !filter(ctx.ctx, Some(command_filter), 0).is_null()
            }
            _ => false,
        }
    };
    if registered {
        Ok(())
    } else {
        Err("cannot register the INFO section or the CONFIG RESETSTAT filter".into())
    }
}

/// # Safety
/// Called by Redis with a live INFO context.
unsafe extern "C" fn info_callback(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: c_int) {
    // A panic must not cross into Redis; INFO then simply lacks the section.
    let _ = catch_unwind(|| {
        let (Some(section), Some(field), Some(fields)) = (
            // SAFETY: copies function pointers filled at load.
            unsafe { raw::RedisModule_InfoAddSection },
            unsafe { raw::RedisModule_InfoAddFieldLongLong },
            INFO_FIELDS.get(),
        ) else {
            return;
        };
        // SAFETY: `ctx` is live for this callback; the names outlive the calls, which copy them.
        unsafe {
            // An empty name: the section is the module's own, `# ratelimit`.
            if section(ctx, c"".as_ptr().cast_mut()) != raw::Status::Ok as c_int {
                return; // INFO asked for other sections.
            }
            for (name, value) in fields() {
                if let Ok(name) = CString::new(name) {
                    field(ctx, name.as_ptr().cast_mut(), value);
                }
            }
        }
    });
}

/// Sees every command before Redis runs it (client commands, MULTI's queued commands when they
/// are queued) and calls the RESETSTAT hook on `CONFIG RESETSTAT`. Two arguments are compared
/// only when there are exactly two: the cost on any other command is one call and a length check.
///
/// # Safety
/// Called by Redis with a live filter context.
unsafe extern "C" fn command_filter(fctx: *mut raw::RedisModuleCommandFilterCtx) {
    let _ = catch_unwind(|| {
        // SAFETY: copies function pointers filled at load.
        let api = unsafe {
            (
                raw::RedisModule_CommandFilterArgsCount,
                raw::RedisModule_CommandFilterArgGet,
                raw::RedisModule_StringPtrLen,
            )
        };
        let (Some(count), Some(arg), Some(ptr_len)) = api else {
            return;
        };
        // SAFETY: `fctx` is live for this callback.
        if unsafe { count(fctx) } != 2 {
            return;
        }
        let bytes = |i: c_int| -> &[u8] {
            // SAFETY: `fctx` is live; argument `i` < count; its buffer lives for this callback.
            unsafe {
                let s = arg(fctx, i);
                if s.is_null() {
                    return &[];
                }
                let mut len = 0usize;
                let p = ptr_len(s, &mut len);
                if p.is_null() {
                    return &[];
                }
                std::slice::from_raw_parts(p.cast::<u8>(), len)
            }
        };
        if bytes(0).eq_ignore_ascii_case(b"config") && bytes(1).eq_ignore_ascii_case(b"resetstat") {
            if let Some(reset) = ON_RESETSTAT.get() {
                reset();
            }
        }
    });
}
