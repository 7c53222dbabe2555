//! `RL.SHAPE key L W [QUEUE q] [DELAY d | NODELAY] [COST n]` — the leaky bucket as a queue
//! (nginx `limit_req`; see `algo::shape` and docs/shaping.md).
//!
//! Reply: the five integers of every limiter command (`limit` is q + 1), then `delay_ms`: how
//! long the admitted request waits before it proceeds (0: now; 0 when denied), rounded up.
//! The five keep their meaning so a gateway's reply handling works unchanged; the delay is new
//! information, not a denial, so it is a sixth field.

use super::args::Request;
use super::decide;
use super::reply::{fields, Reply};
use crate::algo::shape::Shape;
use crate::algo::{ms_ceil, Amount, MAX_LIMIT, MAX_WINDOW_MS};
use crate::error::{echo, Error};
use crate::host::call::{Args, Ctx};

/// Parse → `decide::one` (the request's `Amount::Shaped`, see `algo::shape::shaped`) → reply.
pub fn shape(ctx: &Ctx, args: Args<'_>) -> Result<Reply, Error> {
    let request = parse(args)?;
    let answer = decide::one::<Shape>(ctx, &request)?;
    let mut reply = fields(&answer.decision).to_vec();
    reply.push(i64::try_from(ms_ceil(answer.delay_ns)).unwrap_or(i64::MAX));
    Ok(Reply::Integers(reply))
}

/// `key L W [QUEUE q] [DELAY d | NODELAY] [COST n]`: the request (capacity q + 1), its amount
/// the cost with d.
fn parse(mut args: Args<'_>) -> Result<Request<'_>, Error> {
    if args.remaining() < 3 {
        return Err(Error::WrongArity);
    }
    let key = args.next_string()?;
    let limit = args.next_u64("L", 1, MAX_LIMIT)?;
    let window_ms = args.next_u64("W", 1, MAX_WINDOW_MS)?;
    let (mut queue, mut delay, mut cost, mut nodelay) = (None, None, None, false);
    while args.remaining() > 0 {
        let name = args.next_bytes()?;
        if name.eq_ignore_ascii_case(b"NODELAY") {
            if nodelay {
                return Err(Error::RepeatedOption("NODELAY"));
            }
            nodelay = true;
            continue;
        }
        let (slot, label, max) = if name.eq_ignore_ascii_case(b"QUEUE") {
            (&mut queue, "QUEUE", MAX_LIMIT - 1)
        } else if name.eq_ignore_ascii_case(b"DELAY") {
            (&mut delay, "DELAY", MAX_LIMIT - 1)
        } else if name.eq_ignore_ascii_case(b"COST") {
            (&mut cost, "COST", MAX_LIMIT)
        } else {
            return Err(Error::Syntax(format!(
                "unknown option '{}'; expected QUEUE, DELAY, NODELAY or COST",
                echo(name)
            )));
        };
        args.option_value(slot, label, 0, max)?;
    }
    let queue = queue.unwrap_or(0);
    let undelayed = match (delay, nodelay) {
        (Some(_), true) => {
            return Err(Error::Syntax(
                "DELAY d and NODELAY are exclusive (NODELAY is DELAY equal to QUEUE)".into(),
            ))
        }
        (_, true) => queue,
        (d, false) => d.unwrap_or(0),
    };
    if undelayed > queue {
        return Err(Error::Syntax(format!(
            "DELAY {undelayed} is above QUEUE {queue}: at most the whole queue goes undelayed"
        )));
    }
    let capacity = queue + 1;
    let policy = super::args::policy(limit, window_ms, capacity)?;
    let cost = cost.unwrap_or(1);
    if cost > capacity {
        return Err(Error::CostExceedsCapacity { cost, capacity });
    }
    Ok(Request {
        key,
        policy,
        amount: Amount::Shaped { cost, undelayed },
    })
}
