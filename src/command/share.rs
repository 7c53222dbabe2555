//! `RL.SHARE algorithm L W B key share expire_at_ms [key share expire_at_ms ...]` — the budget
//! controller stores each key's share of a global limit in this region (see docs/regions.md and
//! `state::share`). `algorithm L W B` is the region's *safe* policy, the one its gateways call
//! the keys with: a missing key is created under it, full, holding the share (so the region
//! counts its demand from now on); an existing key must hold a limiter of that algorithm. A
//! share of 0 removes the key's share (the key is decided under the caller's policy again). The
//! key lives at least until the share's expiry.
//!
//! The reply, one row per key: `[share, expire_at_ms, limit, burst]`, what the key holds now
//! (share 0: none) and the policy it is decided under now, so the controller reads back what it
//! wrote. On an error (a key holding something else), the keys before it hold their new share.
//!
//! Also the request path's hook: [`prepare`] (the policy a request is decided under, the state
//! carried to it; `RL.ALL` plans the same without changing the key until the call is decided),
//! [`carry_for_settle`] and [`count_settled`] (the same for the settles), [`count`] (the demand
//! counters) and [`keep_ns`].

use super::args::{limiter_rule, policy};
use super::effect;
use super::key::{accepts, wrong_type};
use super::reply::Reply;
use crate::algo::{Policy, MAX_LIMIT, MAX_WINDOW_MS};
use crate::clock;
use crate::error::{echo, Error};
use crate::host::call::{Args, Ctx, RString};
use crate::metrics;
use crate::state::share::{scaled, Share, MAX_EXPIRE_AT_MS};
use crate::state::{for_tag, AlgoState, ForAlgorithm, Limiter, Stored, Visit};

/// Keys one call may name: bounds the work of one call (the controller batches).
pub const MAX_KEYS: usize = 10_000;

/// For the settles (`RL.CHARGE`, `RL.REFUND`, `RL.SETTLE`), which decide nothing: carries a key
/// holding a share to the policy it is decided under now, as `plan` does for a request:
/// the caller's `given` policy scaled to the share while it is in force (its own after the
/// expiry). Without a policy (`RL.REFUND`, `RL.CHARGE` without `POLICY`): the policy the key
/// holds, scaled to the share while it is in force (after the expiry, the key stays under the
/// policy it holds until a request brings the caller's). `true`: the key moved, to be stored
/// and propagated whatever the settle did. With `apply` false, only checks that the move is
/// allowed (the log bound), changing nothing: `RL.SETTLE` checks every key before it changes one.
pub fn carry_for_settle(
    limiter: &mut Limiter,
    given: Option<&Policy>,
    now_ns: u64,
    apply: bool,
) -> Result<bool, Error> {
    let Some(shared) = limiter.shared() else {
        return Ok(false);
    };
    let (share, from) = (shared.share, limiter.policy);
    let to = match given {
        Some(given) => share.policy_for(given, now_ns),
        None if share.active(now_ns) => scaled(&from, share.limit),
        None => from,
    };
    if to == from {
        return Ok(false);
    }
    let before = metrics::Footprint::of(limiter);
    limiter.state.visit(Carry {
        from,
        to,
        now_ns,
        apply,
    })?;
    if apply {
        limiter.policy = to;
        metrics::limiter_changed(before, limiter);
    }
    Ok(true)
}

/// Carries a state from one policy to another (what was spent stays spent), once the log bound
/// accepts the other.
struct Carry {
    from: Policy,
    to: Policy,
    now_ns: u64,
    apply: bool,
}

impl Visit for Carry {
    type Out = Result<(), Error>;

    fn visit<A: Stored>(self, state: &mut A) -> Result<(), Error> {
        accepts::<A>(&self.to)?;
        if self.apply {
            *state = state.rescale(&self.from, &self.to, self.now_ns);
        }
        Ok(())
    }
}

/// Counts a settle of a key holding a share: a charge of `by` > 0 was asked and `moved` of it
/// admitted; a refund (`by` < 0) gives back `moved` the request did not use, taken off both
/// counters (saturating: a refund after `RL.DEMAND` read the request leaves them at 0).
pub fn count_settled(limiter: &mut Limiter, by: i64, moved: u64) {
    if let Some(shared) = limiter.shared_mut() {
        if by > 0 {
            shared.asked = shared.asked.saturating_add(by.unsigned_abs());
            shared.admitted = shared.admitted.saturating_add(moved);
        } else {
            shared.asked = shared.asked.saturating_sub(moved);
            shared.admitted = shared.admitted.saturating_sub(moved);
        }
    }
}

/// How long a key must live for the share it holds (0: none).
pub fn keep_ns(limiter: &Limiter, now_ns: u64) -> u64 {
    limiter.shared().map_or(0, |s| s.share.keep_ns(now_ns))
}

/// Where the keys are: every third argument from the fifth (for a keys-position request).
pub const FIRST_KEY: usize = 5;

pub fn share(ctx: &Ctx, mut args: Args<'_>) -> Result<Reply, Error> {
    let word = args.next_bytes()?;
    let rule = limiter_rule(word)?;
    let limit = args.next_u64("L", 1, MAX_LIMIT)?;
    let window_ms = args.next_u64("W", 1, MAX_WINDOW_MS)?;
    let capacity = args.next_u64("B", 1, MAX_LIMIT)?;
    if !rule.burst && capacity != limit {
        return Err(Error::Syntax(format!("B must equal L for {}", echo(word))));
    }
    let safe = policy(limit, window_ms, capacity)?;
    if args.remaining() == 0 || !args.remaining().is_multiple_of(3) {
        return Err(Error::WrongArity);
    }
    if args.remaining() / 3 > MAX_KEYS {
        return Err(Error::Syntax(format!("at most {MAX_KEYS} keys per call")));
    }
    // Every number is read before any key changes. A share whose expiry has passed is refused:
    // a write the controller gave up on can never land after it stopped counting it.
    let now_ns = clock::now_ns();
    let mut rows = Vec::with_capacity(args.remaining() / 3);
    while args.remaining() > 0 {
        let key = args.next_string()?;
        let share = args.next_u64("share", 0, MAX_LIMIT)?;
        let expire_at_ms = args.next_u64("expire_at_ms", 0, MAX_EXPIRE_AT_MS)?;
        let share = match (share, expire_at_ms) {
            (0, _) => None,
            (_, 0) => {
                return Err(Error::Syntax(
                    "a share needs an expiry (unix time in ms)".into(),
                ))
            }
            (limit, expire_at_ms) => {
                let share = Share {
                    limit,
                    expire_at_ms,
                };
                if !share.active(now_ns) {
                    return Err(Error::Syntax(format!(
                        "share expiry {expire_at_ms} has passed"
                    )));
                }
                Some(share)
            }
        };
        rows.push((key, share));
    }
    let mut out = Vec::with_capacity(rows.len());
    for (key, share) in rows {
        let set = Set {
            ctx,
            name: key,
            safe: &safe,
            share,
            now_ns,
        };
        out.push(for_tag(rule.tag, set).ok_or(Error::Internal)??.to_vec());
    }
    metrics::note(metrics::Outcome::Call);
    Ok(Reply::Rows(out))
}

/// Stores `share` (None: removes it) in the key `name` holding a limiter of the algorithm it
/// runs with.
struct Set<'a, 'c> {
    ctx: &'c Ctx,
    name: RString<'a>,
    safe: &'c Policy,
    share: Option<Share>,
    now_ns: u64,
}

impl ForAlgorithm for Set<'_, '_> {
    type Out = Result<[i64; 4], Error>;

    fn run<A: Stored + 'static>(self) -> Self::Out {
        let Set {
            ctx,
            name,
            safe,
            share,
            now_ns,
        } = self;
        if let Some(share) = share {
            accepts::<A>(&share.policy_for(safe, now_ns))?;
        }
        let mut key = ctx.open(name, true);
        let expires_at_ms = key.expires_at_ms();
        let limiter = match (key.limiter(A::NAME)?, share) {
            (None, None) => return Ok([0; 4]),
            (None, Some(share)) => {
                // Full: what a first request under the share would start from.
                let to = share.policy_for(safe, now_ns);
                let Some(full) = A::check(None, &to, now_ns, 1)
                    .next
                    .map(|s| s.refund(&to, now_ns, 1))
                else {
                    return Err(Error::Internal);
                };
                Limiter::new(to, AlgoState::shared(share, full.wrap()))
            }
            (Some(held), share) => {
                let from = held.policy;
                let to = share.map_or(*safe, |s| s.policy_for(safe, now_ns));
                let Some(state) = A::of(&held.state) else {
                    return Err(wrong_type::<A>(held));
                };
                let state = state.rescale(&from, &to, now_ns).wrap();
                let (asked, admitted) = held.shared().map_or((0, 0), |s| (s.asked, s.admitted));
                let state = match share {
                    Some(share) => AlgoState::shared(share, state),
                    None => state,
                };
                let mut limiter = Limiter::new(to, state);
                if let Some(shared) = limiter.shared_mut() {
                    (shared.asked, shared.admitted) = (asked, admitted);
                }
                limiter
            }
        };
        // The key lives as long as it had to, and at least until the share's expiry.
        let until_ns =
            expires_at_ms.map_or(0, |ms| ms.saturating_mul(1_000_000).saturating_sub(now_ns));
        let keep = A::check(A::of(&limiter.state), &limiter.policy, now_ns, 0)
            .decision
            .reset_after_ns
            .max(until_ns)
            .max(keep_ns(&limiter, now_ns));
        let stored = key.store(limiter)?;
        let at = effect::commit(ctx, name, effect::Commit::State(stored), now_ns, keep);
        let held = row(stored);
        key.expire_at(Some(at));
        Ok(held)
    }
}

/// `[share, expire_at_ms, limit, burst]` of a stored limiter.
fn row(limiter: &Limiter) -> [i64; 4] {
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let (share, expire_at_ms) = limiter
        .shared()
        .map_or((0, 0), |s| (s.share.limit, s.share.expire_at_ms));
    [
        int(share),
        int(expire_at_ms),
        int(limiter.policy.limit()),
        int(limiter.policy.capacity()),
    ]
}
