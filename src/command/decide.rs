//! One request on one limiter key, from its parsed request to its answer: every single-key
//! limiter command (`RL.<ALGORITHM>`, `RL.LEASE`, `RL.SHAPE`) parses its request, hands it here
//! and renders what comes back. Load (the key, opened read-only for a peek), decide (`plan`,
//! on the request's `Amount`), persist and propagate (`plan::commit`), in that order; nothing
//! here calls back into the handler that called it.

use super::args::Request;
use super::key::accepts;
use super::plan;
use crate::algo::Decision;
use crate::clock;
use crate::error::Error;
use crate::host::call::Ctx;
use crate::metrics;
use crate::state::Stored;

/// What a request was answered: its decision (charged when it spent something), and how long
/// the admitted request waits before it proceeds (`RL.SHAPE`'s delay; 0 for the others).
pub struct Answer {
    pub decision: Decision,
    pub delay_ns: u64,
}

/// Decides `request` with algorithm `A` alone, as `RL.ALL` decides each of its limiters (`plan`),
/// charged when its own decision spent something. A peek opens the key read-only: it can neither
/// create nor change it.
#[inline(always)]
pub fn one<A: Stored>(ctx: &Ctx, request: &Request<'_>) -> Result<Answer, Error> {
    // Before the key is opened: a policy over the log bound is refused whatever the key holds.
    accepts::<A>(&request.policy)?;
    let now_ns = clock::now_ns();
    let peek = request.amount.peeks();
    if peek {
        metrics::note(metrics::Outcome::Peek);
    }
    let mut key = ctx.open(request.key, !peek);
    let stored = key.limiter(A::NAME)?;
    let planned = plan::plan::<A>(
        stored.as_deref(),
        &request.policy,
        request.amount,
        now_ns,
        false,
    )?;
    let delay_ns = planned.delay_ns;
    let decision = plan::commit(ctx, &mut key, request.key, planned, true, now_ns)?;
    Ok(Answer { decision, delay_ns })
}
