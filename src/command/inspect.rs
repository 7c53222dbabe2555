//! `RL.INSPECT key` — explains a limiter in human units: a map in RESP3, a flat field-value
//! array in RESP2; nil for a missing key. Read-only like `RL.PEEK`.
//!
//! Fields: `algorithm`, then the policy (`limit`, `window_ms`, `burst`), the algorithm's own
//! state fields (see each algorithm's `inspect`), what a cost-1 request would be answered now
//! (`remaining`, `retry_after_ms`, `reset_after_ms`), and `ttl_ms`, the key's expiry relative to
//! now on the module's clock (-1: none). Instants are relative to now, in ms rounded up.

use super::reply::Field;
use super::reply::Reply;
use crate::algo::{self, Policy};
use crate::clock;
use crate::error::Error;
use crate::host::call::{Args, Ctx};
use crate::metrics;
use crate::state::{Stored, Visit};

pub fn inspect(ctx: &Ctx, mut args: Args<'_>) -> Result<Reply, Error> {
    let name = args.next_string()?;
    args.done()?;
    let now_ns = clock::now_ns();
    metrics::note(metrics::Outcome::Peek);
    let mut key = ctx.open(name, false);
    let Some(limiter) = key.limiter("")? else {
        return Ok(Reply::Null);
    };
    let (policy, tag) = (limiter.policy, limiter.state.tag());
    let explained = limiter.state.visit(Inspect { policy, now_ns });
    let ttl_ms = key.expires_at_ms().map_or(-1, |at| {
        let at_ns = u128::from(at) * 1_000_000;
        algo::relative_ms(at_ns, now_ns)
    });
    let mut fields = Vec::with_capacity(explained.len() + 2);
    fields.push(("algorithm", Field::Text(metrics::algorithm_name(tag))));
    fields.extend(explained.into_iter().map(|(k, v)| (k, Field::Int(v))));
    fields.push(("ttl_ms", Field::Int(ttl_ms)));
    Ok(Reply::Map(fields))
}

/// The algorithm's `inspect` on a stored state.
struct Inspect {
    policy: Policy,
    now_ns: u64,
}

impl Visit for Inspect {
    type Out = Vec<algo::Field>;

    fn visit<A: Stored>(self, state: &mut A) -> Vec<algo::Field> {
        state.inspect(&self.policy, self.now_ns)
    }
}
