//! The limiter commands. `RL.<ALGORITHM> key L W [BURST B] [COST n]` decides one request with
//! that algorithm; `RL.LEASE key L W [BURST B] WANT n` is the token bucket with another
//! decision: it grants `min(n, available)` tokens for a gateway to spend locally (0 and the time
//! until one token is there when the bucket is empty). Each is parse → `decide::one` → reply.

use super::args::{parse_request, Ask, Options};
use super::decide;
use super::reply::Reply;
use crate::algo::token_bucket::TokenBucket;
use crate::error::Error;
use crate::host::call::{Args, Ctx};
use crate::metrics;
use crate::state::Stored;

/// `RL.GCRA`, `RL.TOKENBUCKET`, `RL.SLIDINGLOG`, `RL.SLIDINGCOUNTER`, `RL.FIXEDWINDOW`.
pub fn request<A: Stored>(ctx: &Ctx, args: Args<'_>) -> Result<Reply, Error> {
    let options = Options {
        burst: A::BURST,
        ask: Ask::Cost,
    };
    let request = parse_request(args, options)?;
    let answer = decide::one::<A>(ctx, &request)?;
    Ok(Reply::decision(&answer.decision))
}

/// `RL.LEASE key L W [BURST B] WANT n`: field 1 of the reply is the number of tokens granted.
pub fn lease(ctx: &Ctx, args: Args<'_>) -> Result<Reply, Error> {
    let options = Options {
        burst: true,
        ask: Ask::Want,
    };
    let request = parse_request(args, options)?;
    let answer = decide::one::<TokenBucket>(ctx, &request)?;
    metrics::leased(request.amount.asked(), answer.decision.allowed);
    Ok(Reply::decision(&answer.decision))
}
