//! A running command's arguments: Redis's own strings, read with a cursor.

use std::ffi::c_int;
use std::marker::PhantomData;

use redis_module::raw;

use crate::error::Error;

/// A Redis string that Redis owns (an argument), valid for the command's run `'a`.
#[derive(Clone, Copy)]
pub struct RString<'a> {
    pub(super) ptr: *mut raw::RedisModuleString,
    pub(super) run: PhantomData<&'a ()>,
}

/// The command's arguments, the command name already skipped. Everything read from them lives
/// for the command's run `'a`.
pub struct Args<'a> {
    argv: &'a [*mut raw::RedisModuleString],
    pos: usize,
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
