//! The C entry points of the commands and the router they call, installed at load.

use std::ffi::{c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use redis_module::raw;

use super::args::Args;
use super::context::Ctx;

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
