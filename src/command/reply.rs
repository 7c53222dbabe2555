//! What a command answers, before `dispatch` renders it through `host::call`.

use crate::algo::{ms_ceil, Decision};
use crate::error::Error;
use crate::metrics;

/// What a command answers.
pub enum Reply {
    /// The five-integer reply of every limiter command.
    Decision([i64; 5]),
    /// A flat array of integers (`RL.SHAPE`: the five and a delay).
    Integers(Vec<i64>),
    /// The combined decision, then one decision per limiter (`RL.ALL`).
    Nested([i64; 5], Vec<[i64; 5]>),
    /// Rows of integers, one per key (`RL.SHARE`, `RL.DEMAND`).
    Rows(Vec<Vec<i64>>),
    /// Named fields: a map in RESP3, a flat name-value array in RESP2 (`RL.INSPECT`).
    Map(Vec<(&'static str, Field)>),
    Ok,
    Integer(i64),
    /// Nil: the key does not exist.
    Null,
}

/// A value in a map reply (`RL.INSPECT`).
pub enum Field {
    Int(i64),
    Text(&'static str),
    Null,
    /// An array of maps (`RL.INSPECT`'s other configurations).
    Maps(Vec<Vec<(&'static str, Field)>>),
}

/// A decision as the five reply fields: milliseconds rounded up, -1 for "admitted"; the
/// algorithm's capacity is the reply's `limit`.
pub fn fields(d: &Decision) -> [i64; 5] {
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    [
        int(d.allowed),
        int(d.capacity),
        int(d.remaining),
        d.retry_after_ns.map_or(-1, |ns| int(ms_ceil(ns))),
        int(ms_ceil(d.reset_after_ns)),
    ]
}

impl Reply {
    pub fn decision(d: &Decision) -> Reply {
        Reply::Decision(fields(d))
    }

    /// What a reply says of the call, for its counters (a handler may say more, see
    /// `metrics::note`): a decision by its field 1 (admitted when above 0), anything else a call.
    pub fn outcome(reply: &Result<Reply, Error>) -> metrics::Outcome {
        let allowed = |first: Option<&i64>| {
            if first.is_some_and(|&n| n > 0) {
                metrics::Outcome::Admitted
            } else {
                metrics::Outcome::Denied
            }
        };
        match reply {
            Err(_) => metrics::Outcome::Error,
            Ok(Reply::Decision(f) | Reply::Nested(f, _)) => allowed(f.first()),
            Ok(Reply::Integers(v)) => allowed(v.first()),
            Ok(_) => metrics::Outcome::Call,
        }
    }
}
