//! The C API at load time: the API functions the module needs, its options, the registration of
//! its commands, what the server says of itself (version, INFO fields, ACL categories), its
//! replication role, and the module's own INFO section with the `CONFIG RESETSTAT` filter.

use std::ffi::{c_int, c_void, CStr, CString};
use std::panic::catch_unwind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use redis_module::commands::{get_redis_key_spec, KeySpec};
use redis_module::{raw, Context};

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

/// Module-wide options, set at load: loading garbage fails the load (`RESTORE` says "Bad data
/// format") instead of exiting, and a write-opened key is not signalled as modified when it is
/// closed: the module signals real changes itself ([`Ctx::changed`](super::call::Ctx::changed)), so a denial is not a write.
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

// ---- The server: what it says of itself, its ACL categories ---------------------------

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
pub(super) static REPLICA: AtomicBool = AtomicBool::new(true);

/// Reads the server's role at load and follows it through Redis's replication-role event (fired
/// inside `REPLICAOF`, a cluster failover and any other change of role, before the server runs
/// another command), so [`Ctx::refuse_on_replica`](super::call::Ctx::refuse_on_replica) need not ask Redis on a master. A server that
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
