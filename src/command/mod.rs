//! Redis glue: one file per command family. Each handler reads as parse → load → decide →
//! persist and propagate the effect → reply. This file holds what they share: the dispatch
//! trampoline with its panic guard, the reply type and command registration.

pub mod args;
pub mod debug;
pub mod decide;
pub mod fixed_window;
pub mod gcra;
pub mod key;
pub mod lease;
pub mod refund;
pub mod sliding_counter;
pub mod sliding_log;
pub mod token_bucket;

pub mod setstate;

use std::ffi::{c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::commands::{get_redis_key_spec, BeginSearch, FindKeys, KeySpec, KeySpecFlags};
use redis_module::raw;

use crate::algo::{ms_ceil, Decision};
use crate::error::Error;
use args::Args;

/// The context of the command being run.
#[derive(Clone, Copy)]
pub struct Ctx(pub *mut raw::RedisModuleCtx);

/// A Redis string owned by Redis (an argument), valid while the command runs.
#[derive(Clone, Copy)]
pub struct RString(pub *mut raw::RedisModuleString);

/// What a command answers.
pub enum Reply {
    /// The five-integer decision reply of every limiter command.
    Decision([i64; 5]),
    Ok,
    Integer(i64),
    /// Nil: `RL.REFUND` on a key that does not exist.
    Null,
}

impl Reply {
    /// The decision reply: milliseconds rounded up, -1 for "admitted".
    pub fn decision(d: &Decision) -> Reply {
        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        Reply::Decision([
            int(d.allowed),
            int(d.limit),
            int(d.remaining),
            d.retry_after_ns.map_or(-1, |ns| int(ms_ceil(ns))),
            int(ms_ceil(d.reset_after_ns)),
        ])
    }
}

/// How a command touches its key (the first argument), for key specs and cluster routing.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum KeyAccess {
    None,
    /// Reads, updates and returns data from the key.
    ReadWrite,
    /// Replaces the key's value.
    Overwrite,
}

/// One command of the module. Implemented by a unit struct per command.
pub trait Command {
    const NAME: &'static str;
    /// Redis command flags, e.g. `write deny-oom fast`.
    const FLAGS: &'static str;
    /// Redis arity: positive exact, negative minimum (command name included).
    const ARITY: i32;
    const KEY: KeyAccess;
    const SUMMARY: &'static str;
    fn run(ctx: Ctx, args: Args<'_>) -> Result<Reply, Error>;
}

/// The function Redis calls. A panic never crosses it: it becomes `ERR internal error` and a
/// log line, and the server keeps running.
extern "C" fn dispatch<C: Command>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let result = catch_unwind(AssertUnwindSafe(|| C::run(Ctx(ctx), Args::new(argv, argc))));
    let reply = result.unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        log_warning(Ctx(ctx), &format!("panic caught in {}: {why}", C::NAME));
        Err(Error::Internal)
    });
    send(ctx, reply);
    raw::Status::Ok as c_int
}

fn send(ctx: *mut raw::RedisModuleCtx, reply: Result<Reply, Error>) {
    // SAFETY: ctx is the live context of this command; the API pointers used here exist in
    // every Redis version the module loads on (checked at load by `api_present`).
    unsafe {
        match reply {
            Ok(Reply::Decision(fields)) => {
                if let (Some(array), Some(int)) = (
                    raw::RedisModule_ReplyWithArray,
                    raw::RedisModule_ReplyWithLongLong,
                ) {
                    array(ctx, 5);
                    for f in fields {
                        int(ctx, f);
                    }
                }
            }
            Ok(Reply::Integer(n)) => {
                if let Some(int) = raw::RedisModule_ReplyWithLongLong {
                    int(ctx, n);
                }
            }
            Ok(Reply::Ok) => {
                if let Some(simple) = raw::RedisModule_ReplyWithSimpleString {
                    simple(ctx, c"OK".as_ptr());
                }
            }
            Ok(Reply::Null) => {
                if let Some(null) = raw::RedisModule_ReplyWithNull {
                    null(ctx);
                }
            }
            Err(Error::WrongArity) => {
                if let Some(wrong_arity) = raw::RedisModule_WrongArity {
                    wrong_arity(ctx);
                }
            }
            Err(e) => {
                let text = CString::new(e.to_string()).unwrap_or_default();
                if let Some(error) = raw::RedisModule_ReplyWithError {
                    error(ctx, text.as_ptr());
                }
            }
        }
    }
}

pub fn log_warning(ctx: Ctx, msg: &str) {
    let msg = CString::new(msg.replace('\0', "?")).unwrap_or_default();
    // SAFETY: "%s" with one C string argument matches the variadic call.
    unsafe {
        if let Some(log) = raw::RedisModule_Log {
            log(ctx.0, c"warning".as_ptr(), c"%s".as_ptr(), msg.as_ptr());
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
        RedisModule_ReplyWithNull,
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
        RedisModule_Milliseconds,
        RedisModule_CreateCommand,
        RedisModule_GetCommand,
        RedisModule_SetCommandInfo
    )
}

/// Registers command `C`: the command itself, then its arity, summary and key spec so that
/// `COMMAND INFO`, `COMMAND GETKEYSANDFLAGS` and cluster clients see it right.
pub fn register<C: Command>(ctx: Ctx) -> Result<(), String> {
    let ctx = ctx.0;
    let name = CString::new(C::NAME).map_err(|e| e.to_string())?;
    let flags = CString::new(C::FLAGS).map_err(|e| e.to_string())?;
    let first_key = if C::KEY == KeyAccess::None { 0 } else { 1 };
    let fail = || format!("cannot register {}", C::NAME);
    // SAFETY: called from OnLoad with its context; the pointers were checked by `api_present`.
    unsafe {
        let create = raw::RedisModule_CreateCommand.ok_or_else(fail)?;
        let created = create(
            ctx,
            name.as_ptr(),
            Some(dispatch::<C>),
            flags.as_ptr(),
            first_key,
            first_key,
            first_key,
        );
        if created != raw::Status::Ok as c_int {
            return Err(fail());
        }
        let command = raw::RedisModule_GetCommand.ok_or_else(fail)?(ctx, name.as_ptr());
        if command.is_null() {
            return Err(fail());
        }
        let key_flags = match C::KEY {
            KeyAccess::None => None,
            KeyAccess::ReadWrite => {
                Some(KeySpecFlags::READ_WRITE | KeySpecFlags::UPDATE | KeySpecFlags::ACCESS)
            }
            KeyAccess::Overwrite => Some(KeySpecFlags::OVERWRITE | KeySpecFlags::UPDATE),
        };
        let has_key = key_flags.is_some();
        let mut key_specs = get_redis_key_spec(
            key_flags
                .map(|f| {
                    KeySpec::new(
                        None,
                        f,
                        BeginSearch::new_index(1),
                        FindKeys::new_range(0, 1, 0),
                    )
                })
                .into_iter()
                .collect(),
        );
        let summary = CString::new(C::SUMMARY).map_err(|e| e.to_string())?;
        let version = raw::RedisModuleCommandInfoVersion {
            version: 1,
            sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
            sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
            sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
        };
        let info = raw::RedisModuleCommandInfo {
            version: &version,
            summary: summary.as_ptr(),
            complexity: std::ptr::null(),
            since: c"0.1.0".as_ptr(),
            history: std::ptr::null_mut(),
            tips: std::ptr::null(),
            arity: C::ARITY,
            key_specs: if has_key {
                key_specs.as_mut_ptr()
            } else {
                std::ptr::null_mut()
            },
            args: std::ptr::null_mut(),
        };
        if raw::RedisModule_SetCommandInfo.ok_or_else(fail)?(command, &info)
            != raw::Status::Ok as c_int
        {
            return Err(format!("cannot set the command info of {}", C::NAME));
        }
    }
    Ok(())
}
