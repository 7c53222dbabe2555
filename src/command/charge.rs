//! `RL.CHARGE key n [POLICY algorithm L W [BURST B]]` — charges n tokens to the limiter at key
//! whatever it holds (a response that cost more than its estimate), under the policy the key
//! holds: the key goes into debt that the next requests pay (see `algo::settle`). Never denied:
//! the work was done.
//!
//! A key that does not exist is created under the policy given after `POLICY` (`algorithm` one of
//! the words `RL.ALL` takes: GCRA, TOKENBUCKET, SLIDINGLOG, SLIDINGCOUNTER, FIXEDWINDOW) and
//! charged; without `POLICY` the reply is nil and nothing is created. On an existing key `POLICY`
//! only checks the algorithm (WRONGTYPE if the key holds another); its L, W and B are not applied.
//!
//! Reply: the five integers, field 1 = tokens charged (n, or less when the debt reached its bound
//! and the charge saturated), fields 2–5 as a peek (`COST 0`) answers after the charge: a
//! streaming response can still carry its RateLimit headers. Every configuration the key
//! remembers is charged by its own rule, as `RL.REFUND` gives back to each. A charge that changes
//! the state propagates it as an effect with its absolute expiry; one that changes nothing (the
//! debt was already at its bound) writes and propagates nothing.

use super::args::{limiter_rule, parse_limiter, Ask, Options};
use super::effect;
use super::key::accepts;
use super::reply::Reply;
use super::share;
use crate::algo::listed::Listed;
use crate::algo::{settle, Decision, Policy, MAX_LIMIT};
use crate::clock;
use crate::error::{echo, Error};
use crate::host::call::{Args, Ctx, Key, RString};
use crate::metrics;
use crate::state::{for_tag, AlgoState, ForAlgorithm, Limiter, Stored, Visit};

pub fn charge(ctx: &Ctx, mut args: Args<'_>) -> Result<Reply, Error> {
    let name = args.next_string()?;
    let n = args.next_u64("n", 1, MAX_LIMIT)?;
    let given = if args.remaining() > 0 {
        Some(parse_policy(name, &mut args)?)
    } else {
        None
    };
    args.done()?;
    let now_ns = clock::now_ns();
    let mut key = ctx.open(name, true);
    metrics::note(metrics::Outcome::Call);
    let by = i64::try_from(n).map_err(|_| Error::Internal)?;
    let settled = settle_key(ctx, &mut key, name, given.as_ref(), now_ns, by)?;
    metrics::charged(settled.as_ref().map_or(0, |s| s.moved));
    Ok(match settled {
        Some(s) => Reply::decision(&Decision {
            allowed: s.moved,
            ..s.after
        }),
        None => Reply::Null,
    })
}

/// A limiter of algorithm `A` under `policy` that has spent nothing at `now_ns`.
struct Fresh<'p> {
    policy: &'p Policy,
    now_ns: u64,
}

impl ForAlgorithm for Fresh<'_> {
    type Out = Result<Limiter, Error>;

    fn run<A: Stored + 'static>(self) -> Self::Out {
        accepts::<A>(self.policy)?;
        let state = settle::fresh::<A>(self.policy, self.now_ns).ok_or(Error::Internal)?;
        Ok(Limiter::new(*self.policy, state.wrap()))
    }
}

/// The policy a settle creates a missing key with, and its algorithm.
pub struct Given {
    /// The registry's rule for its algorithm (a limiter: `RL.ALL`'s words).
    pub rule: &'static Listed,
    pub policy: Policy,
}

impl Given {
    /// A limiter under this policy that has spent nothing at `now_ns` (the log bound checked).
    pub fn fresh(&self, now_ns: u64) -> Result<Limiter, Error> {
        let fresh = Fresh {
            policy: &self.policy,
            now_ns,
        };
        for_tag(self.rule.tag, fresh).ok_or(Error::Internal)?
    }

    /// WRONGTYPE unless `held` holds this policy's algorithm.
    pub fn same_algorithm(&self, held: &Limiter) -> Result<(), Error> {
        if held.state.tag() == self.rule.tag {
            return Ok(());
        }
        Err(Error::WrongType {
            holds: format!("a {} limiter", held.state.name()),
            wanted: self.rule.name,
            key: None,
        })
    }
}

/// `POLICY algorithm L W [BURST B]`.
fn parse_policy<'a>(key: RString<'a>, args: &mut Args<'a>) -> Result<Given, Error> {
    let word = args.next_bytes()?;
    if !word.eq_ignore_ascii_case(b"POLICY") {
        return Err(Error::Syntax(format!(
            "unknown option '{}'; expected POLICY",
            echo(word)
        )));
    }
    if args.remaining() == 0 {
        return Err(Error::MissingValue("POLICY"));
    }
    let word = args.next_bytes()?;
    let rule = limiter_rule(word)?;
    let options = Options {
        burst: rule.burst,
        ask: Ask::Cost,
    };
    // A charge has no COST (its n is the cost): BURST is the policy's one option.
    let request = parse_limiter(key, args, options, |w| {
        !(rule.burst && w.eq_ignore_ascii_case(b"BURST"))
    })?;
    if let Some(word) = args.peek_bytes() {
        let expected = if rule.burst {
            "expected BURST (the cost is n)"
        } else {
            "the policy ends at W (the cost is n)"
        };
        return Err(Error::Syntax(format!(
            "unknown option '{}'; {expected}",
            echo(word)
        )));
    }
    Ok(Given {
        rule,
        policy: request.policy,
    })
}

/// What a settle did to one key.
pub struct KeySettled {
    /// Tokens charged or given back.
    pub moved: u64,
    /// A peek after the settle.
    pub after: Decision,
}

/// Settles the limiter at `key` by `by` tokens (a charge when positive, a refund when negative)
/// under the policy it holds, creating it under `given` when it does not exist and `by` charges;
/// stores, propagates and expires it when it changed. None: no key, and nothing to create it
/// with (or nothing to charge).
pub fn settle_key(
    ctx: &Ctx,
    key: &mut Key<'_>,
    name: RString<'_>,
    given: Option<&Given>,
    now_ns: u64,
    by: i64,
) -> Result<Option<KeySettled>, Error> {
    let wanted = given.map_or("", |g| g.rule.name);
    if let Some(limiter) = key.limiter(wanted)? {
        if let Some(g) = given {
            g.same_algorithm(limiter)?;
        }
        // A key holding a share is settled under the policy it is decided under now.
        let moved = share::carry_for_settle(limiter, given.map(|g| &g.policy), now_ns, true)?;
        let before = metrics::Footprint::of(limiter);
        let out = settle_limiter(limiter, now_ns, by);
        share::count_settled(limiter, by, out.moved);
        if out.changed || moved {
            metrics::limiter_changed(before, limiter);
            let keep_ns = out.keep_ns.max(share::keep_ns(limiter, now_ns));
            let at = effect::commit(ctx, name, effect::Commit::State(limiter), now_ns, keep_ns);
            key.expire_at(Some(at));
        }
        return Ok(Some(KeySettled {
            moved: out.moved,
            after: out.after,
        }));
    }
    let Some(g) = given else { return Ok(None) };
    let mut limiter = g.fresh(now_ns)?;
    let out = settle_limiter(&mut limiter, now_ns, by);
    if out.changed {
        let limiter = key.store(limiter)?;
        let at = effect::commit(
            ctx,
            name,
            effect::Commit::State(limiter),
            now_ns,
            out.keep_ns,
        );
        key.expire_at(Some(at));
    }
    Ok(Some(KeySettled {
        moved: out.moved,
        after: out.after,
    }))
}

/// What a settle did to a stored limiter.
pub struct Settled {
    /// What the current configuration moved.
    pub moved: u64,
    /// Its peek after the settle.
    pub after: Decision,
    pub changed: bool,
    /// How long the key must live: the longest reset of its configurations.
    pub keep_ns: u64,
}

/// Settles `by` on the current configuration and on every other one the key remembers (each
/// was charged the request's estimate, so each takes the difference by its own rule).
pub fn settle_limiter(limiter: &mut Limiter, now_ns: u64, by: i64) -> Settled {
    let policy = limiter.policy;
    let current = limiter.state.visit(Settle { policy, now_ns, by });
    let (mut changed, mut keep_ns) = (current.changed, current.after.reset_after_ns);
    if let AlgoState::Remembered(remembered) = &mut limiter.state {
        for (policy, state) in remembered.others.iter_mut() {
            let policy = *policy;
            let other = state.visit(Settle { policy, now_ns, by });
            changed |= other.changed;
            keep_ns = keep_ns.max(other.after.reset_after_ns);
        }
    }
    Settled {
        moved: current.moved,
        after: current.after,
        changed,
        keep_ns,
    }
}

/// Applies `algo::settle::settle` to a stored state.
struct Settle {
    policy: Policy,
    now_ns: u64,
    by: i64,
}

struct StateSettled {
    moved: u64,
    after: Decision,
    changed: bool,
}

impl Visit for Settle {
    type Out = StateSettled;

    fn visit<A: Stored>(self, state: &mut A) -> StateSettled {
        let Settle { policy, now_ns, by } = self;
        let settled = settle::settle(state, &policy, now_ns, by);
        let changed = settled.state != *state;
        if changed {
            *state = settled.state;
        }
        StateSettled {
            moved: settled.moved,
            after: A::check(Some(state), &policy, now_ns, 0).decision,
            changed,
        }
    }
}
