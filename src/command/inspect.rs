//! `RL.INSPECT key` — explains a limiter in human units: a map in RESP3, a flat field-value
//! array in RESP2; nil for a missing key. Read-only like `RL.PEEK`.
//!
//! Fields: `algorithm`, then the policy (`limit`, `window_ms`, `burst`), the algorithm's own
//! state fields (see each algorithm's `inspect`), what a cost-1 request would be answered now
//! (`remaining`, `retry_after_ms`, `reset_after_ms`), and `ttl_ms`, the key's expiry relative to
//! now on the module's clock (-1: none). Instants are relative to now, in ms rounded up.
//!
//! A key that remembers other configurations (see `algo::step`) adds `configurations`, how many
//! it holds (the current one included), and `others`: one map per other configuration, most
//! recently current first, with the same fields as above for that configuration's own state
//! (policy, state, its own peek) and `drop_after_ms`: when it will be dropped at the latest (at
//! the first write from then on): 0 if it already can be (it equals the current state carried
//! over to its policy), else when its state is full again, its `reset_after_ms`.
//!
//! A key holding a region's share adds `share`, `share_ttl_ms` (its expiry relative to now) and
//! the demand counters `asked` and `admitted`.

use super::reply::Field;
use super::reply::Reply;
use crate::algo::step::droppable;
use crate::algo::{self, Policy};
use crate::clock;
use crate::error::Error;
use crate::host::call::{Args, Ctx};
use crate::metrics;
use crate::state::{Limiter, Stored, Visit};

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
    let others = if limiter.others().is_empty() {
        Vec::new()
    } else {
        let held = limiter.clone();
        limiter.clone().state.visit(Others {
            limiter: &held,
            now_ns,
        })
    };
    let explained = limiter.state.visit(Inspect { policy, now_ns });
    let shared = limiter.shared().map(|s| (s.share, s.asked, s.admitted));
    let ttl_ms = key.expires_at_ms().map_or(-1, |at| {
        let at_ns = u128::from(at) * 1_000_000;
        algo::relative_ms(at_ns, now_ns)
    });
    let mut fields = Vec::with_capacity(explained.len() + 2);
    fields.push(("algorithm", Field::Text(metrics::algorithm_name(tag))));
    fields.extend(explained.into_iter().map(|(k, v)| (k, Field::Int(v))));
    fields.push(("ttl_ms", Field::Int(ttl_ms)));
    if !others.is_empty() {
        let n = i64::try_from(others.len() + 1).unwrap_or(i64::MAX);
        fields.push(("configurations", Field::Int(n)));
        let maps = others
            .into_iter()
            .map(|o| o.into_iter().map(|(k, v)| (k, Field::Int(v))).collect())
            .collect();
        fields.push(("others", Field::Maps(maps)));
    }
    // A region's share (docs/regions.md): L under it, its expiry, and the demand counters.
    if let Some((share, asked, admitted)) = shared {
        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let at_ns = u128::from(share.expire_at_ms) * 1_000_000;
        fields.extend([
            ("share", Field::Int(int(share.limit))),
            ("share_ttl_ms", Field::Int(algo::relative_ms(at_ns, now_ns))),
            ("asked", Field::Int(int(asked))),
            ("admitted", Field::Int(int(admitted))),
        ]);
    }
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

/// The other configurations of `limiter`, visited on (a copy of) its current state: each one's
/// `inspect` and when it will be dropped.
struct Others<'a> {
    limiter: &'a Limiter,
    now_ns: u64,
}

impl Visit for Others<'_> {
    type Out = Vec<Vec<algo::Field>>;

    fn visit<A: Stored>(self, current: &mut A) -> Vec<Vec<algo::Field>> {
        let (now_ns, current_policy) = (self.now_ns, self.limiter.policy);
        self.limiter
            .others_of::<A>()
            .into_iter()
            .map(|(p, s)| {
                let drop_after_ms = if droppable(&p, &s, &current_policy, current, now_ns) {
                    0
                } else {
                    let reset = A::check(Some(&s), &p, now_ns, 0).decision.reset_after_ns;
                    i64::try_from(algo::ms_ceil(reset)).unwrap_or(i64::MAX)
                };
                let mut fields = s.inspect(&p, now_ns);
                fields.push(("drop_after_ms", drop_after_ms));
                fields
            })
            .collect()
    }
}
