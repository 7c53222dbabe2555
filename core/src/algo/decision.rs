//! What a limiter answers for one request, and the state a decision leaves.

/// What a limiter answers for one request. Durations are exact nanoseconds, rounded up.
/// The command layer turns it into the five-integer reply (`capacity` is the reply's `limit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// How much was admitted: 1 or 0 for a request (admitted or denied). A lease sets it to the
    /// tokens granted and a refund to the tokens given back: the reply's first field is always
    /// "how much this call moved".
    pub allowed: u64,
    /// The capacity: BURST for the bucket algorithms, L for the window algorithms.
    pub capacity: u64,
    /// How many more cost-1 requests would be admitted right now.
    pub remaining: u64,
    /// None when admitted; else the time until this request would be admitted.
    pub retry_after_ns: Option<u64>,
    /// Time until the limiter is back to full capacity (0 when it is full).
    pub reset_after_ns: u64,
}

/// A decision, and the state to store when the decision changed it (None: store nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome<S> {
    pub decision: Decision,
    pub next: Option<S>,
}

/// What `Algorithm::decide` answers: the outcome, and how long an admitted request waits before
/// it proceeds (the shaper's delay, `RL.SHAPE`'s sixth field; 0 for every other algorithm).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decided<S> {
    pub outcome: Outcome<S>,
    pub delay_ns: u64,
}

impl<S> Decided<S> {
    /// An outcome that waits for nothing.
    #[inline]
    pub fn now(outcome: Outcome<S>) -> Decided<S> {
        Decided {
            outcome,
            delay_ns: 0,
        }
    }
}
