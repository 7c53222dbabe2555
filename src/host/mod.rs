//! The C API boundary: every call into Redis's C API, behind safe types. The bottom layer of
//! the module's Redis side: it imports the stored state and the errors, never the commands.
//! `call` serves a running command (its context, arguments, keys, replies, the server's clock);
//! `load` serves load time (registration, module options, INFO, role events, the command filter).

pub mod call;
pub mod load;
