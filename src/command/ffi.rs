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

use redis_module::commands::get_redis_key_spec;
use redis_module::{raw, Context};

use super::{Keys, Reply, Spec, COMMANDS};
use crate::error::Error;
use crate::metrics;
use crate::state::{self, Limiter};

/// The context of the command being run. Only `dispatch` makes one.
pub struct Ctx {
    ptr: *mut raw::RedisModuleCtx,
    spec: &'static Spec,
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
    pub(super) unsafe fn new(ptr: *mut raw::RedisModuleCtx, spec: &'static Spec) -> Ctx {
        Ctx { ptr, spec }
    }

    /// The row of the command table being run.
    pub fn spec(&self) -> &'static Spec {
        self.spec
    }

    /// Replicas never decide: a write from anyone but the master's replication stream (or a
    /// load) is refused, whatever `replica-read-only` says. Otherwise a writable replica would
    /// admit on its own and keep keys the master never sees.
    pub fn refuse_on_replica(&self) -> Result<(), Error> {
        // SAFETY: live context; GetContextFlags exists since Redis 5.
        let flags = unsafe { raw::RedisModule_GetContextFlags.map_or(0, |f| f(self.ptr)) } as u32;
        let replica = flags & raw::REDISMODULE_CTX_FLAGS_SLAVE != 0;
        let allowed = raw::REDISMODULE_CTX_FLAGS_REPLICATED | raw::REDISMODULE_CTX_FLAGS_LOADING;
        if replica && flags & allowed == 0 {
            return Err(Error::Replica {
                command: self.spec.name,
            });
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
        let event = self.spec.event;
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

    /// Sends the reply (or the error) to the client.
    pub(super) fn reply(&self, reply: Result<Reply, Error>) {
        let ctx = self.ptr;
        // SAFETY: ctx is the live context of this command; the API pointers used here exist in
        // every Redis version the module loads on (checked at load by `api_present`).
        unsafe {
            let (Some(array), Some(int), Some(null), Some(simple)) = (
                raw::RedisModule_ReplyWithArray,
                raw::RedisModule_ReplyWithLongLong,
                raw::RedisModule_ReplyWithNull,
                raw::RedisModule_ReplyWithSimpleString,
            ) else {
                return;
            };
            match reply {
                Ok(Reply::Integers(fields)) => {
                    array(ctx, fields.len() as _);
                    for f in fields {
                        int(ctx, f);
                    }
                }
                Ok(Reply::Decision(fields)) => {
                    array(ctx, 5);
                    for f in fields {
                        int(ctx, f);
                    }
                }
                Ok(Reply::Nested(first, rest)) => {
                    array(ctx, (1 + rest.len()) as _);
                    array(ctx, 5);
                    for f in first {
                        int(ctx, f);
                    }
                    for fields in rest {
                        array(ctx, 5);
                        for f in fields {
                            int(ctx, f);
                        }
                    }
                }
                Ok(Reply::Map(fields)) => {
                    let map = raw::RedisModule_ReplyWithMap;
                    match map {
                        Some(map) => map(ctx, fields.len() as _),
                        None => array(ctx, (2 * fields.len()) as _),
                    };
                    for (name, value) in fields {
                        simple_or_bulk(ctx, name);
                        match value {
                            Field::Int(n) => int(ctx, n),
                            Field::Text(t) => {
                                simple_or_bulk(ctx, t);
                                0
                            }
                            Field::Null => null(ctx),
                        };
                    }
                }
                Ok(Reply::Integer(n)) => {
                    int(ctx, n);
                }
                Ok(Reply::Ok) => {
                    simple(ctx, c"OK".as_ptr());
                }
                Ok(Reply::Null) => {
                    null(ctx);
                }
                Err(Error::WrongArity) => {
                    if let Some(wrong_arity) = raw::RedisModule_WrongArity {
                        wrong_arity(ctx);
                    }
                }
                Err(e) => {
                    let text = CString::new(e.to_string().replace('\0', "?")).unwrap_or_default();
                    if let Some(error) = raw::RedisModule_ReplyWithError {
                        error(ctx, text.as_ptr());
                    }
                }
            }
        }
    }
}

/// A value in a map reply (`RL.INSPECT`).
pub enum Field {
    Int(i64),
    Text(&'static str),
    Null,
}

/// A short name or text as a bulk string.
///
/// # Safety
/// `ctx` is a live command context.
unsafe fn simple_or_bulk(ctx: *mut raw::RedisModuleCtx, s: &str) {
    if let Some(bulk) = raw::RedisModule_ReplyWithStringBuffer {
        bulk(ctx, s.as_ptr().cast(), s.len());
    }
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
    pub(super) unsafe fn new(argv: *mut *mut raw::RedisModuleString, argc: c_int) -> Args<'a> {
        let argc = usize::try_from(argc).unwrap_or(0);
        let argv = if argv.is_null() || argc == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(argv, argc)
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
            let before = metrics::Footprint::of(stored);
            *stored = limiter;
            metrics::limiter_changed(before, stored);
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
        metrics::limiter_created(stored);
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

/// The C entry point of the command at `COMMANDS[I]`. A panic never crosses it: it becomes
/// `ERR internal error` and a log line, and the server keeps running.
extern "C" fn dispatch<const I: usize>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let Some(spec) = COMMANDS.get(I) else {
        return raw::Status::Err as c_int;
    };
    // SAFETY: Redis calls a command with its live context and argc argument strings.
    let (ctx, args) = unsafe { (Ctx::new(ctx, spec), Args::new(argv, argc)) };
    if spec.keys == Keys::NumKeys && ctx.keys_position_request() {
        for pos in super::all::key_positions(args) {
            ctx.key_at(pos);
        }
        return raw::Status::Ok as c_int;
    }
    let result = catch_unwind(AssertUnwindSafe(|| super::run(spec, &ctx, args)));
    let reply = result.unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        ctx.log_warning(&format!("panic caught in {}: {why}", spec.name));
        Err(Error::Internal)
    });
    metrics::record(I, &reply);
    ctx.reply(reply);
    raw::Status::Ok as c_int
}

/// One entry point per row of the command table (a C function cannot carry the row it serves).
const DISPATCHERS: [raw::RedisModuleCmdFunc; 24] = [
    Some(dispatch::<0>),
    Some(dispatch::<1>),
    Some(dispatch::<2>),
    Some(dispatch::<3>),
    Some(dispatch::<4>),
    Some(dispatch::<5>),
    Some(dispatch::<6>),
    Some(dispatch::<7>),
    Some(dispatch::<8>),
    Some(dispatch::<9>),
    Some(dispatch::<10>),
    Some(dispatch::<11>),
    Some(dispatch::<12>),
    Some(dispatch::<13>),
    Some(dispatch::<14>),
    Some(dispatch::<15>),
    Some(dispatch::<16>),
    Some(dispatch::<17>),
    Some(dispatch::<18>),
    Some(dispatch::<19>),
    Some(dispatch::<20>),
    Some(dispatch::<21>),
    Some(dispatch::<22>),
    Some(dispatch::<23>),
];
const _: () = assert!(COMMANDS.len() <= DISPATCHERS.len());

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

/// Registers every command of the table, then its arity, summary and key spec so that
/// `COMMAND INFO`, `COMMAND GETKEYSANDFLAGS` and cluster clients see it right.
pub fn register_all(ctx: &Context) -> Result<(), String> {
    crate::server::add_acl_category(ctx);
    for (spec, handler) in COMMANDS.iter().zip(DISPATCHERS) {
        if super::throttle::registered(spec) {
            register(ctx.ctx, spec, handler).map_err(|e| super::throttle::explain(spec, e))?;
        }
    }
    Ok(())
}

fn register(
    ctx: *mut raw::RedisModuleCtx,
    spec: &Spec,
    handler: raw::RedisModuleCmdFunc,
) -> Result<(), String> {
    let name = CString::new(spec.name).map_err(|e| e.to_string())?;
    let flags = CString::new(format!("{}{}", spec.flags, spec.keys.extra_flags()))
        .map_err(|e| e.to_string())?;
    let summary = CString::new(spec.summary).map_err(|e| e.to_string())?;
    let fail = || format!("cannot register {}", spec.name);
    let (first, last, step) = spec.keys.legacy_range();
    let mut key_specs = get_redis_key_spec(spec.keys.key_spec().into_iter().collect());
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
            handler,
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
            arity: spec.arity,
            key_specs: if spec.keys == Keys::None {
                std::ptr::null_mut()
            } else {
                key_specs.as_mut_ptr()
            },
            args: std::ptr::null_mut(),
        };
        if raw::RedisModule_SetCommandInfo.ok_or_else(fail)?(command, &info)
            != raw::Status::Ok as c_int
        {
            return Err(format!("cannot set the command info of {}", spec.name));
        }
        // Redis 7.2+ and Valkey; absent on 7.0, where module commands have no categories.
        if let (Some(set_acl), Some(categories)) = (
            raw::RedisModule_SetCommandACLCategories,
            crate::server::acl_categories(spec.acl),
        ) {
            if set_acl(command, categories.as_ptr()) != raw::Status::Ok as c_int {
                return Err(format!(
                    "cannot set the ACL categories '{}' of {}",
                    spec.acl, spec.name
                ));
            }
        }
    }
    Ok(())
}
