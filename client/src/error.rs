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
    /// The store could not be reached: connection refused or dropped, or the Cluster client
    /// found no connection for the slot.
    Unreachable(String),
    /// The store answered but cannot decide now: an error reply that says so about the server,
    /// not about the call (`OOM`, `BUSY`, `MISCONF`, `NOREPLICAS`, `LOADING`, `TRYAGAIN`,
    /// `MASTERDOWN`, `CLUSTERDOWN`, `READONLY`, `ERR max number of clients reached`; the list is
    /// [`UNAVAILABLE_CODES`]). For the limit's class the store is down: its fallback decides
    /// and the circuit counts a failure.
    Unavailable(String),
    /// The circuit is open: the store kept failing and is not called until the next probe.
    CircuitOpen,
    /// The server holds a library of an incompatible version, or lacks the command.
    Unsupported(String),
    /// Any other server error, or a reply that is not the shape the command promises.
    Reply(String),
    /// The connection settings or the server's ACL refuse this client: a wrong user name or
    /// password (`WRONGPASS`), a command or key the user may not use (`NOPERM`), a server
    /// certificate not trusted, settings that name a missing file. Reported at start, never a
    /// fallback: the message names what is missing (never the password).
    Config(String),
}

impl Error {
    /// True for the errors a limit's class falls back on: the store did not decide.
    pub fn store_down(&self) -> bool {
        matches!(
            self,
            Error::Timeout | Error::Unreachable(_) | Error::Unavailable(_) | Error::CircuitOpen
        )
    }

    /// A short, stable name for metrics and the decision log.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Argument(_) => "argument",
            Error::WrongType(_) => "wrongtype",
            Error::Timeout => "timeout",
            Error::Unreachable(_) => "unreachable",
            Error::Unavailable(_) => "unavailable",
            Error::CircuitOpen => "circuit_open",
            Error::Unsupported(_) => "unsupported",
            Error::Reply(_) => "reply",
            Error::Config(_) => "config",
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
            Error::Unavailable(m) => write!(f, "the store cannot decide now: {m}"),
            Error::CircuitOpen => write!(f, "the circuit to the store is open"),
            Error::Unsupported(m) => write!(f, "unsupported: {m}"),
            Error::Reply(m) => write!(f, "unexpected reply: {m}"),
            Error::Config(m) => write!(f, "configuration: {m}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Error {
        Error::classify(&e)
    }
}

/// The error codes with which a server says it cannot decide now, whatever the call: out of
/// memory under `noeviction`, a script or function past `busy-reply-threshold`, a failed RDB
/// save with `stop-writes-on-bgsave-error`, `min-replicas-to-write` unmet, loading the dataset,
/// a Cluster slot moving or down, a replica that lost its primary or refuses writes.
pub const UNAVAILABLE_CODES: [&str; 9] = [
    "OOM",
    "BUSY",
    "MISCONF",
    "NOREPLICAS",
    "LOADING",
    "TRYAGAIN",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "READONLY",
];

impl Error {
    pub(crate) fn classify(e: &redis::RedisError) -> Error {
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
        let detail = e.detail().unwrap_or("").to_ascii_lowercase();
        match e.code() {
            Some(code) if UNAVAILABLE_CODES.contains(&code) => return Error::Unavailable(text),
            Some("ERR") if detail.starts_with("max number of clients") => {
                return Error::Unavailable(text)
            }
            Some("WRONGTYPE") => return Error::WrongType(text),
            Some("NOPERM") | Some("WRONGPASS") | Some("NOAUTH") => return Error::Config(text),
            Some("NOSCRIPT") => return Error::Unsupported(text),
            Some("ERR") if unsupported(&detail) => return Error::Unsupported(text),
            Some("ERR") => return Error::Argument(text),
            _ => {}
        }
        match e.kind() {
            redis::ErrorKind::IoError | redis::ErrorKind::ClusterConnectionNotFound => {
                Error::Unreachable(text)
            }
            redis::ErrorKind::AuthenticationFailed => Error::Config(format!(
                "authentication failed: wrong user name or password ({text})"
            )),
            _ => Error::Reply(text),
        }
    }
}

fn unsupported(detail: &str) -> bool {
    detail.starts_with("unknown command") || detail.starts_with("function not found")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error as the client sees it for a raw RESP error reply.
    fn reply(line: &str) -> Error {
        let value = redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).unwrap();
        match value.extract_error() {
            Err(e) => Error::classify(&e),
            Ok(v) => panic!("not an error: {v:?}"),
        }
    }

    #[test]
    fn replies_that_mean_the_store_cannot_decide_now_fall_back() {
        let unavailable = [
            "OOM command not allowed when used memory > 'maxmemory'.",
            "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
            "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.",
            "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.",
            "NOREPLICAS Not enough good replicas to write.",
            "LOADING Redis is loading the dataset in memory",
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            "CLUSTERDOWN The cluster is down",
            "READONLY You can't write against a read only replica.",
            "ERR max number of clients reached",
        ];
        for line in unavailable {
            let e = reply(line);
            assert!(matches!(e, Error::Unavailable(_)), "{line}: {e:?}");
            assert!(e.store_down(), "{line}");
            assert_eq!(e.kind(), "unavailable");
        }
        for code in UNAVAILABLE_CODES {
            assert!(reply(&format!("{code} x")).store_down(), "{code}");
        }
    }

    #[test]
    fn errors_about_the_call_stay_errors() {
        let cases = [
            ("ERR invalid L '0': must be a positive integer", "argument"),
            (
                "ERR wrong number of arguments for 'rl.gcra' command",
                "argument",
            ),
            (
                "WRONGTYPE Operation against a key holding the wrong kind of value",
                "wrongtype",
            ),
            ("ERR unknown command 'RL.GCRA'", "unsupported"),
            ("ERR Function not found", "unsupported"),
            ("NOSCRIPT No matching script.", "unsupported"),
            (
                "NOPERM this user has no permissions to run the 'rl.gcra' command",
                "config",
            ),
            (
                "CROSSSLOT Keys in request don't hash to the same slot",
                "reply",
            ),
        ];
        for (line, kind) in cases {
            let e = reply(line);
            assert_eq!(e.kind(), kind, "{line}: {e:?}");
            assert!(!e.store_down(), "{line}");
        }
    }
}
