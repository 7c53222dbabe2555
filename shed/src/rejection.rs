//! Why a request was shed, said at once and cheaply: the service can log the reason, the client
//! can wait `retry_after`.

use std::fmt;
use std::time::Duration;

/// How long a shed client should wait: long enough for the queue to turn over many times, short
/// enough that a retry after a burst is served (Retry-After has a resolution of one second).
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The service is full and the queue holds only requests that go first (a higher tier, or
    /// the same tier from tenants within their share).
    Overloaded,
    /// The service is full and this tenant already has more than its fair share.
    OverShare,
    /// Waited in the queue longer than the queue allows (CoDel: the target under a standing
    /// queue, the interval otherwise).
    QueueTimeout,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::Overloaded => "overloaded",
            Reason::OverShare => "over_share",
            Reason::QueueTimeout => "queue_timeout",
        }
    }
}

/// A shed request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub reason: Reason,
    pub retry_after: Duration,
}

impl Rejection {
    pub(crate) fn new(reason: Reason) -> Rejection {
        Rejection {
            reason,
            retry_after: RETRY_AFTER,
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "shed: {}", self.reason.name())
    }
}

impl std::error::Error for Rejection {}
