//! The crate's one error type. `Display` is the exact Redis error text, prefix included.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// Wrong number of arguments: answered with Redis's own arity error.
    WrongArity,
    /// An argument that is not an integer in range: `ERR invalid L 'abc': expected an integer from 1 to 10`.
    InvalidInteger {
        name: &'static str,
        value: String,
        min: u64,
        max: u64,
    },
    /// A free-form complaint about the command line, already phrased: `ERR <text>`.
    Syntax(String),
    /// An option given twice.
    RepeatedOption(&'static str),
    /// An option with no value after it.
    MissingValue(&'static str),
    /// COST larger than the capacity: never admitted, so an error and not a denial.
    CostExceedsCapacity { cost: u64, capacity: u64 },
    /// BURST × W / L above the supported refill horizon.
    RefillTooSlow {
        capacity: u64,
        limit: u64,
        window_ms: u64,
    },
    /// A sliding log's L above `ratelimit.max-log-entries` (memory grows with L).
    LogTooLong { limit: u64, max: u64 },
    /// The key holds something else: another Redis type, or a limiter of another algorithm
    /// (`wanted` names the algorithm the command needs; empty: any limiter).
    WrongType {
        holds: String,
        wanted: &'static str,
        /// The key's name, where a command has several (`RL.ALL`).
        key: Option<String>,
    },
    /// A stored or replicated state that fails validation.
    BadState(&'static str),
    /// A write sent to a replica by a client: replicas never decide.
    Replica { command: &'static str },
    /// The debug clock was asked for but the module was loaded without it.
    DebugClockDisabled,
    /// A panic was caught, or arithmetic that the bounds should rule out overflowed.
    Internal,
}

/// Stored bytes that are not a valid state (`algo::bytes::Invalid`, the reason).
impl From<&'static str> for Error {
    fn from(why: &'static str) -> Error {
        Error::BadState(why)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::WrongArity => write!(f, "ERR wrong number of arguments"),
            Error::InvalidInteger {
                name,
                value,
                min,
                max,
            } => write!(
                f,
                "ERR invalid {name} '{value}': expected an integer from {min} to {max}"
            ),
            Error::Syntax(text) => write!(f, "ERR {text}"),
            Error::RepeatedOption(name) => write!(f, "ERR option {name} given more than once"),
            Error::MissingValue(name) => write!(f, "ERR option {name} needs a value"),
            Error::CostExceedsCapacity { cost, capacity } => write!(
                f,
                "ERR COST {cost} can never be admitted: it exceeds the capacity {capacity}"
            ),
            Error::RefillTooSlow {
                capacity,
                limit,
                window_ms,
            } => write!(
                f,
                "ERR a capacity of {capacity} refilled at {limit} per {window_ms} ms takes longer than {} ms to refill",
                crate::algo::MAX_REFILL_MS
            ),
            Error::LogTooLong { limit, max } => write!(
                f,
                "ERR L {limit} is above ratelimit.max-log-entries ({max}): a sliding log stores an entry per request; use RL.SLIDINGCOUNTER for large limits, or raise the config"
            ),
            Error::WrongType { holds, wanted, key } => {
                let wanted = if wanted.is_empty() {
                    String::new()
                } else {
                    format!(" {wanted}")
                };
                let key = key.as_ref().map_or(String::new(), |k| format!(" '{k}'"));
                write!(
                    f,
                    "WRONGTYPE the key{key} holds {holds}, not a{wanted} limiter; use another key or DEL it"
                )
            }
            Error::BadState(why) => write!(f, "ERR invalid limiter state: {why}"),
            Error::Replica { command } => write!(
                f,
                "READONLY {command} decides on the master only: this server is a replica; send it to the master"
            ),
            Error::DebugClockDisabled => write!(
                f,
                "ERR the debug clock is off: load the module with DEBUG-CLOCK yes (tests only)"
            ),
            Error::Internal => write!(f, "ERR internal error"),
        }
    }
}

impl std::error::Error for Error {}

/// An argument as it may be echoed in an error: printable ASCII only, and short, so that a
/// hostile argument can neither break the reply line nor make it huge.
pub fn echo(arg: &[u8]) -> String {
    const MAX: usize = 32;
    let mut out: String = arg
        .iter()
        .take(MAX)
        .map(|&b| {
            if (0x20..0x7f).contains(&b) && b != b'\'' {
                b as char
            } else {
                '?'
            }
        })
        .collect();
    if arg.len() > MAX {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_is_printable_and_short() {
        assert_eq!(echo(b"abc"), "abc");
        assert_eq!(echo(b"a\r\nb"), "a??b");
        assert_eq!(echo(&[b'x'; 40]), format!("{}...", "x".repeat(32)));
    }

    #[test]
    fn messages_name_the_argument() {
        let e = Error::InvalidInteger {
            name: "L",
            value: "abc".into(),
            min: 1,
            max: 1_000_000_000_000,
        };
        assert_eq!(
            e.to_string(),
            "ERR invalid L 'abc': expected an integer from 1 to 1000000000000"
        );
    }
}
