//! The one error type of the client. A denial is a [`Decision`](crate::Decision), never an error.

use std::fmt;

/// Why a call did not produce a decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The server rejected the command's arguments (`ERR invalid L …`, a cost above the capacity,
    /// arity): a bug in the caller's limit, never retried and never replaced by a fallback.
    Argument(String),
    /// The key holds another type or a limiter of another algorithm (`WRONGTYPE …`).
    WrongType(String),
    /// The store did not answer within the deadline.
    Timeout,
    /// The store could not be reached: connection refused or dropped, cluster down, a replica
    /// that refuses writes (`READONLY`) or a server still loading.
    Unreachable(String),
    /// The circuit is open: the store kept failing and is not called until the next probe.
    CircuitOpen,
    /// The server has neither the module nor the Functions library, or lacks the command.
    Unsupported(String),
    /// Any other server error, or a reply that is not the shape the command promises.
    Reply(String),
}

impl Error {
    /// True for the errors a limit's class falls back on: the store did not decide.
    pub fn store_down(&self) -> bool {
        matches!(
            self,
            Error::Timeout | Error::Unreachable(_) | Error::CircuitOpen
        )
    }

    /// A short, stable name for metrics and the decision log.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Argument(_) => "argument",
            Error::WrongType(_) => "wrongtype",
            Error::Timeout => "timeout",
            Error::Unreachable(_) => "unreachable",
            Error::CircuitOpen => "circuit_open",
            Error::Unsupported(_) => "unsupported",
            Error::Reply(_) => "reply",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Argument(m) => write!(f, "argument rejected by the store: {m}"),
            Error::WrongType(m) => write!(f, "wrong type: {m}"),
            Error::Timeout => write!(f, "the store did not answer within the deadline"),
            Error::Unreachable(m) => write!(f, "the store is unreachable: {m}"),
            Error::CircuitOpen => write!(f, "the circuit to the store is open"),
            Error::Unsupported(m) => write!(f, "unsupported: {m}"),
            Error::Reply(m) => write!(f, "unexpected reply: {m}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Error {
        Error::classify(&e)
    }
}

impl Error {
    pub(crate) fn classify(e: &redis::RedisError) -> Error {
        use redis::ErrorKind as K;
        let text = match (e.code(), e.detail()) {
            (Some(code), Some(detail)) => format!("{code} {detail}"),
            _ => e.to_string(),
        };
        if e.is_timeout() {
            return Error::Timeout;
        }
        if e.is_io_error() || e.is_connection_refusal() || e.is_connection_dropped() {
            return Error::Unreachable(text);
        }
        match e.kind() {
            K::IoError
            | K::ClusterDown
            | K::MasterDown
            | K::BusyLoadingError
            | K::TryAgain
            | K::ReadOnly
            | K::ClusterConnectionNotFound => Error::Unreachable(text),
            K::NoScriptError => Error::Unsupported(text),
            _ => match e.code() {
                Some("WRONGTYPE") => Error::WrongType(text),
                Some("ERR") if unsupported(e.detail().unwrap_or("")) => Error::Unsupported(text),
                Some("ERR") => Error::Argument(text),
                _ => Error::Reply(text),
            },
        }
    }
}

fn unsupported(detail: &str) -> bool {
    let d = detail.to_ascii_lowercase();
    d.starts_with("unknown command") || d.starts_with("function not found")
}
