//! Between Redis's call and the reply: the router the entry points of `host::call` call (keys-position
//! requests, replicas refusing writes, the handler, the counters, the reply), the reply rendered
//! through `host::call`'s primitives, and the registration of the command table at load.

use std::ffi::CStr;

use redis_module::Context;

use super::reply::{Field, Reply};
use super::table::COMMANDS;
use crate::error::Error;
use crate::host::call::{self, ENTRIES};
use crate::host::call::{Args, Ctx};
use crate::host::load::{self, Registration};
use crate::metrics;

/// Registers every command of the table the server should have (a row's `condition` may leave
/// it out: `CL.THROTTLE` without `CELL-COMPAT yes`), installs the router and tells `metrics` which
/// commands INFO shows.
pub fn register_all(ctx: &Context) -> Result<(), String> {
    const _: () = assert!(COMMANDS.len() <= ENTRIES.len());
    const _: () = assert!(COMMANDS.len() <= metrics::MAX_COMMANDS);
    call::route(call::Router {
        command,
        run,
        panicked,
    });
    crate::server_facts::add_acl_category(ctx);
    let mut registered = Vec::with_capacity(COMMANDS.len());
    for (index, (spec, entry)) in COMMANDS.iter().zip(ENTRIES).enumerate() {
        if let Some(condition) = &spec.condition {
            if !(condition.registered)() {
                continue;
            }
        }
        let registration = Registration {
            name: spec.name,
            flags: format!("{}{}", spec.flags, spec.keys.extra_flags()),
            arity: spec.arity,
            range: spec.keys.legacy_range(),
            key_spec: spec.keys.key_spec(),
            summary: spec.summary,
            acl: crate::server_facts::acl_categories(spec.acl),
            entry,
        };
        load::register(ctx, registration).map_err(|e| match &spec.condition {
            Some(condition) => (condition.explain)(e),
            None => e,
        })?;
        registered.push((index, spec.name));
    }
    metrics::set_commands(registered);
    Ok(())
}

/// The name and keyspace event of the command at `index`.
fn command(index: usize) -> Option<(&'static str, &'static CStr)> {
    COMMANDS.get(index).map(|spec| (spec.name, spec.event))
}

/// Runs the command at `index`: answers a keys-position request from the row's
/// `key_positions`, refuses a write on a replica, runs the handler, counts the call and replies.
fn run(index: usize, ctx: &Ctx, args: Args<'_>) {
    let Some(spec) = COMMANDS.get(index) else {
        return;
    };
    if let Some(key_positions) = spec.key_positions {
        if ctx.keys_position_request() {
            for pos in key_positions(args) {
                ctx.key_at(pos);
            }
            return;
        }
    }
    let reply = match spec.flags.starts_with("write") {
        true => ctx
            .refuse_on_replica()
            .and_then(|()| (spec.handler)(ctx, args)),
        false => (spec.handler)(ctx, args),
    };
    metrics::record(index, Reply::outcome(&reply));
    send(ctx, &reply);
}

/// A run that panicked: counted as an error, answered `ERR internal error`.
fn panicked(index: usize, ctx: &Ctx) {
    let reply = Err(Error::Internal);
    metrics::record(index, Reply::outcome(&reply));
    send(ctx, &reply);
}

/// Sends the reply (or the error) to the client.
fn send(ctx: &Ctx, reply: &Result<Reply, Error>) {
    let integers = |fields: &[i64]| {
        ctx.reply_array(fields.len());
        for &f in fields {
            ctx.reply_int(f);
        }
    };
    match reply {
        Ok(Reply::Integers(fields)) => integers(fields),
        Ok(Reply::Decision(fields)) => integers(fields),
        Ok(Reply::Nested(first, rest)) => {
            ctx.reply_array(1 + rest.len());
            integers(first);
            for fields in rest {
                integers(fields);
            }
        }
        Ok(Reply::Rows(rows)) => {
            ctx.reply_array(rows.len());
            for fields in rows {
                integers(fields);
            }
        }
        Ok(Reply::Map(fields)) => map(ctx, fields),
        Ok(Reply::Integer(n)) => ctx.reply_int(*n),
        Ok(Reply::Ok) => ctx.reply_ok(),
        Ok(Reply::Null) => ctx.reply_null(),
        Err(e) => ctx.reply_error(e),
    }
}

/// Named fields as a map (a flat name-value array in RESP2), nested maps included.
fn map(ctx: &Ctx, fields: &[(&'static str, Field)]) {
    ctx.reply_map(fields.len());
    for (name, value) in fields {
        ctx.reply_text(name);
        match value {
            Field::Int(n) => ctx.reply_int(*n),
            Field::Text(t) => ctx.reply_text(t),
            Field::Null => ctx.reply_null(),
            Field::Maps(maps) => {
                ctx.reply_array(maps.len());
                for fields in maps {
                    map(ctx, fields);
                }
            }
        }
    }
}
