//! The limiter commands. `RL.<ALGORITHM> key L W [BURST B] [COST n]` decides one request with
//! that algorithm; `RL.LEASE key L W [BURST B] WANT n` is the token bucket with another
//! decision: it grants `min(n, available)` tokens for a gateway to spend locally (0 and the time
//! until one token is there when the bucket is empty).

use super::args::{parse_request, Amount, Options, Request};
use super::key::accepts;
use super::plan::{self, Rule};
use super::reply::Reply;
use crate::algo::{lease, token_bucket::TokenBucket, Decision, Outcome, Policy};
use crate::clock;
use crate::error::Error;
use crate::host::call::{Args, Ctx};
use crate::metrics;
use crate::state::Stored;

/// `RL.GCRA`, `RL.TOKENBUCKET`, `RL.SLIDINGLOG`, `RL.SLIDINGCOUNTER`, `RL.FIXEDWINDOW`.
pub fn request<A: Stored>(ctx: &Ctx, args: Args<'_>) -> Result<Reply, Error> {
    let options = Options {
        burst: A::BURST,
        amount: Amount::Cost,
    };
    let request = parse_request(args, options)?;
    let decision = decide::<A, _, _>(ctx, &request, plan::checked(request.amount))?;
    Ok(Reply::decision(&decision))
}

/// `RL.LEASE key L W [BURST B] WANT n`: field 1 of the reply is the number of tokens granted.
pub fn lease(ctx: &Ctx, args: Args<'_>) -> Result<Reply, Error> {
    let options = Options {
        burst: true,
        amount: Amount::Want,
    };
    let request = parse_request(args, options)?;
    let want = request.amount;
    let rule = Rule {
        decide: |state: Option<&TokenBucket>, policy: &Policy, now_ns| {
            lease::lease(state, policy, now_ns, want)
        },
        spent: |d: &Decision| d.allowed,
        checks: false,
    };
    let decision = decide(ctx, &request, rule)?;
    metrics::leased(want, decision.allowed);
    Ok(Reply::decision(&decision))
}

/// Load, plan, commit: one request decided alone, as `RL.ALL` decides each of its limiters
/// (`plan`), charged when its own decision spent something. A peek opens the key read-only: it
/// can neither create nor change it.
pub fn decide<A: Stored, D, S>(
    ctx: &Ctx,
    request: &Request<'_>,
    rule: Rule<D, S>,
) -> Result<Decision, Error>
where
    D: FnOnce(Option<&A>, &Policy, u64) -> Outcome<A>,
    S: Fn(&Decision) -> u64 + Copy,
{
    // Before the key is opened: a policy over the log bound is refused whatever the key holds.
    accepts::<A>(&request.policy)?;
    let now_ns = clock::now_ns();
    let peek = request.amount == 0;
    if peek {
        metrics::note(metrics::Outcome::Peek);
    }
    let mut key = ctx.open(request.key, !peek);
    let stored = key.limiter(A::NAME)?;
    let (policy, amount) = (&request.policy, request.amount);
    let planned = plan::plan(stored.as_deref(), policy, amount, now_ns, rule, false)?;
    plan::commit(ctx, &mut key, request.key, planned, true, now_ns)
}
