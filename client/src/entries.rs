//! What one `RL.CONCURRENCY` or `RL.ALL` call is given besides its key: a slot's operation and
//! holder, a concurrency limiter inside `RL.ALL`, and each limiter of an `RL.ALL`.

use redis::Cmd;

use crate::command::Policy;

/// What an `RL.CONCURRENCY` call does with a slot, and the holder's id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotOp<'a> {
    Acquire(&'a str),
    Renew(&'a str),
    Release(&'a str),
    Peek,
}

/// A concurrency limiter inside `RL.ALL`: N, TTL (ms) and what to do (`ACQUIRE id` or `PEEK`;
/// the server refuses RENEW and RELEASE there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotEntry<'a> {
    pub limit: u64,
    pub ttl_ms: u64,
    pub op: SlotOp<'a>,
}

/// One limiter of an `RL.ALL` call: a rate check (its policy and cost) or a concurrency slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllEntry<'a> {
    Rate(Policy, u64),
    Slot(SlotEntry<'a>),
}

impl SlotOp<'_> {
    /// The words after `N TTL`.
    pub(crate) fn args(self, cmd: &mut Cmd) {
        match self {
            SlotOp::Acquire(id) => cmd.arg("ACQUIRE").arg(id),
            SlotOp::Renew(id) => cmd.arg("RENEW").arg(id),
            SlotOp::Release(id) => cmd.arg("RELEASE").arg(id),
            SlotOp::Peek => cmd.arg("PEEK"),
        };
    }
}
