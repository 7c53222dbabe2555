//! `RL.PEEK key` — the five integers a cost-1 request would get now under the policy stored in
//! the key, spending nothing: what the key's own command answers with `COST 0`, without knowing
//! its policy. Nil for a missing key. Read-only (`readonly fast`, a read-only key spec), so it
//! runs on replicas and on cluster replicas in `READONLY` mode: dashboards and support tools
//! read there and never touch a master. It writes, signals and propagates nothing.

use super::reply::Reply;
use crate::algo::{Decision, Policy};
use crate::clock;
use crate::error::Error;
use crate::host::call::{Args, Ctx};
use crate::metrics;
use crate::state::{Stored, Visit};

pub fn peek(ctx: &Ctx, mut args: Args<'_>) -> Result<Reply, Error> {
    let name = args.next_string()?;
    args.done()?;
    let now_ns = clock::now_ns();
    metrics::note(metrics::Outcome::Peek);
    let mut key = ctx.open(name, false);
    let Some(limiter) = key.limiter("")? else {
        return Ok(Reply::Null);
    };
    let policy = limiter.policy;
    Ok(Reply::decision(
        &limiter.state.visit(Peek { policy, now_ns }),
    ))
}

/// The algorithm's own peek (`check` with cost 0) on a stored state.
struct Peek {
    policy: Policy,
    now_ns: u64,
}

impl Visit for Peek {
    type Out = Decision;

    fn visit<A: Stored>(self, state: &mut A) -> Decision {
        A::check(Some(state), &self.policy, self.now_ns, 0).decision
    }
}
