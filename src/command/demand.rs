//! `RL.DEMAND key [key ...]` — the budget controller reads what each key holding a region's
//! share was asked and admitted since its last read (docs/regions.md). The counting itself is
//! `Shared::count`, on the request path (`plan::commit`).

use super::reply::Reply;
use super::share::MAX_KEYS;
use crate::error::Error;
use crate::host::call::{Args, Ctx};
use crate::metrics;

/// `RL.DEMAND key [key ...]` — per key `[asked, admitted, share, expire_at_ms, limit]`: what the
/// key was asked and admitted since the last `RL.DEMAND` (which resets both), the share it holds
/// (0: none) and the L it is decided under now; all 0 for a missing key. The counters live in
/// memory on the master only: a replica, a restart or a failover starts them at 0.
pub fn demand(ctx: &Ctx, mut args: Args<'_>) -> Result<Reply, Error> {
    if args.remaining() > MAX_KEYS {
        return Err(Error::Syntax(format!("at most {MAX_KEYS} keys per call")));
    }
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let mut out = Vec::with_capacity(args.remaining());
    while args.remaining() > 0 {
        let name = args.next_string()?;
        let mut key = ctx.open(name, true);
        let Some(limiter) = key.limiter("")? else {
            out.push(vec![0; 5]);
            continue;
        };
        let limit = int(limiter.policy.limit());
        let row = match limiter.shared_mut() {
            Some(s) => {
                let read = [s.asked, s.admitted, s.share.limit, s.share.expire_at_ms];
                (s.asked, s.admitted) = (0, 0);
                read.map(int)
            }
            None => [0; 4],
        };
        let mut row = row.to_vec();
        row.push(limit);
        out.push(row);
    }
    metrics::note(metrics::Outcome::Peek);
    Ok(Reply::Rows(out))
}
