//! `RL.ALL numkeys key [key ...] <limiter> [<limiter> ...]` — one atomic decision over several
//! limiters, one per key, in the same order; each `<limiter>` is `ALGORITHM L W [BURST B]
//! [COST n]` with ALGORITHM one of GCRA, TOKENBUCKET, SLIDINGLOG, SLIDINGCOUNTER, FIXEDWINDOW
//! and the same rules as that algorithm's own command.
//!
//! All or nothing: at one `now`, the request is admitted only if every limiter would admit it;
//! then every limiter is charged its cost. If any denies, none is charged (a new policy is still
//! stored, as for one key). A limiter with COST 0 is only looked at: it is reported, never
//! charged, and does not hold the others back; a call whose limiters all have COST 0 is a peek
//! over all of them and writes nothing.
//!
//! Reply: the combined decision (the five fields: allowed = all admitted; limit and remaining of
//! the limiter with the fewest remaining; retry_after_ms = when every limiter charged would
//! admit, -1 if admitted; reset_after_ms = the largest), then one five-field array per limiter in argument
//! order, describing it after the call (field 1: whether it would admit this request).

use super::args::{parse_i64, parse_limiter, Amount, Options, Request};
use super::charge::{self, Creator, Given};
use super::effect::{self, Commit};
use super::limit::{accepts, of};
use super::reply::{fields, Reply};
use super::settle;
use super::share;
use crate::algo::step::{self, Held, Kept};
use crate::algo::{Algorithm, Decision, Outcome, Policy, MAX_LIMIT};
use crate::clock;
use crate::error::{echo, Error};
use crate::host::call::Key;
use crate::host::call::{Args, Ctx, RString};
use crate::metrics;
use crate::state::delta::{Change, Delta, IntoDelta};
use crate::state::replay::ChargedDelta;
use crate::state::share::Share;
use crate::state::{AlgoState, Limiter, Stored};

/// The most limiters one call may name.
pub const MAX_LIMITERS: u64 = 32;

/// What one limiter would do with the request, before anything is written: the single-key rule
/// (`algo::step::plan`), with the limiters it stores ready to store.
struct Plan {
    /// Its decision on the request (charged, when admitted).
    decision: Decision,
    /// The decision when it is not charged: as the key stands after the call.
    uncharged: Decision,
    /// What to store when the whole request is admitted, and how long the key must then live.
    charged: Option<(Limiter, u64)>,
    /// What to store when it is not (a change of configuration holds whatever the outcome).
    carried: Option<(Limiter, u64)>,
    /// Instead of `charged`, for an algorithm that decides in place under the policy the key
    /// holds: what to apply when the whole request is admitted, which goes out as a delta, in
    /// time and bytes independent of the state's size.
    in_place: Option<InPlace>,
    /// The key holds a region's share: what it was asked and admitted is counted.
    shared: bool,
}

/// A charge planned in place (see [`Stored::decide_in_place`] and [`Stored::plan_remembered`]).
enum InPlace {
    /// The change to the key's one configuration, and how to apply it.
    Change(Change, Applier),
    /// The delta that charges every configuration the key remembers, and how long the key must
    /// then live.
    Charged(ChargedDelta, u64),
}

/// Applies a planned change to the state of its algorithm (see [`Stored::apply_delta`]).
type Applier = fn(&mut AlgoState, &Policy, &Change) -> Option<Delta>;

fn apply_in_place<A: Stored>(
    state: &mut AlgoState,
    policy: &Policy,
    change: &Change,
) -> Option<Delta> {
    let change = A::Change::from_change(change)?;
    A::of_mut(state)?.apply_delta(policy, &change)
}

type Planner = fn(Option<&Limiter>, &Policy, u64, u64) -> Result<Plan, Error>;

/// An algorithm `RL.ALL` takes: the name of its own command without `RL.`, its name in errors,
/// whether it takes BURST, and its planner.
type Entry = (&'static str, &'static str, bool, Planner);

/// The entry of a registry algorithm: every `limiter` (the five-integer commands) is offered.
macro_rules! entry {
    (limiter, $state:ty, $word:literal) => {
        Some((
            $word,
            <$state as Algorithm>::NAME,
            <$state as Algorithm>::BURST,
            plan::<$state> as Planner,
        ))
    };
    ($other:ident, $state:ty, $word:literal) => {
        None
    };
}

/// The algorithms of the registry (`algo::registry!`), in its order; `RL.SHAPE`'s shaper is not
/// among them (its reply has a sixth field).
macro_rules! all_table {
    ($($module:ident::$variant:ident, $word:literal, $event:literal, $kind:ident, $summary:literal;)*) => {
        const ALGORITHMS: &[Option<Entry>] =
            &[$(entry!($kind, crate::algo::$module::$variant, $word),)*];
    };
}

crate::algo::registry!(all_table);

/// "GCRA, TOKENBUCKET, … or FIXEDWINDOW": the words `RL.ALL` takes, for its error.
fn expected() -> String {
    let words: Vec<&str> = ALGORITHMS.iter().flatten().map(|e| e.0).collect();
    match words.split_last() {
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

fn algorithm(word: &[u8]) -> Option<&'static Entry> {
    ALGORITHMS
        .iter()
        .flatten()
        .find(|(command, ..)| command.as_bytes().eq_ignore_ascii_case(word))
}

/// One limiter of the call: its key, policy, cost and algorithm; in `RL.SETTLE` (see
/// `settle`), the difference it is settled by, and its algorithm's creator.
struct Part<'a> {
    request: Request<'a>,
    name: &'static str,
    plan: Planner,
    settle: Option<(i64, &'static Creator)>,
}

/// `RL.SETTLE numkeys key [key ...] <limiter> [<limiter> ...]`, each `<limiter>` RL.ALL's with
/// `BY d` in place of `COST n`: see `settle`. A command of its own, not a form of `RL.ALL`, so
/// that an ACL can grant deciding without granting refunds.
pub fn settle(ctx: &Ctx, mut args: Args<'_>) -> Result<Reply, Error> {
    let parts = parse(&mut args, true)?;
    let limiters: Vec<_> = parts
        .iter()
        .filter_map(|p| {
            p.settle.map(|(by, creator)| settle::Limiter {
                key: p.request.key,
                given: Given {
                    creator,
                    policy: p.request.policy,
                },
                by,
            })
        })
        .collect();
    settle::all(ctx, &limiters)
}

pub fn all(ctx: &Ctx, mut args: Args<'_>) -> Result<Reply, Error> {
    let parts = parse(&mut args, false)?;
    let now_ns = clock::now_ns();
    let peek = parts.iter().all(|p| p.request.amount == 0);
    let mut keys: Vec<Key<'_>> = parts
        .iter()
        .map(|p| ctx.open(p.request.key, !peek))
        .collect();
    let mut plans = Vec::with_capacity(parts.len());
    for (part, key) in parts.iter().zip(keys.iter_mut()) {
        let name = part.request.key;
        let stored = key.limiter(part.name).map_err(|e| at_key(e, name))?;
        let plan = (part.plan)(
            stored.map(|l| &*l),
            &part.request.policy,
            now_ns,
            part.request.amount,
        )
        .map_err(|e| at_key(e, name))?;
        plans.push(plan);
    }
    let admitted = if peek {
        plans.iter().all(|p| p.decision.allowed == 1)
    } else {
        parts
            .iter()
            .zip(&plans)
            .all(|(part, plan)| part.request.amount == 0 || plan.decision.allowed == 1)
    };
    let mut each = Vec::with_capacity(parts.len());
    for ((part, key), plan) in parts.iter().zip(keys.iter_mut()).zip(plans) {
        let decision = apply(ctx, key, part, plan, admitted, now_ns)?;
        each.push(decision);
    }
    let costs: Vec<u64> = parts.iter().map(|p| p.request.amount).collect();
    Ok(Reply::Nested(
        fields(&combine(admitted, &each, &costs)),
        each.iter().map(fields).collect(),
    ))
}

/// Stores what the plan of one limiter says for the call's outcome (`admitted`: the whole
/// request), counts a shared key's demand, and answers the limiter's decision.
fn apply(
    ctx: &Ctx,
    key: &mut Key<'_>,
    part: &Part<'_>,
    plan: Plan,
    admitted: bool,
    now_ns: u64,
) -> Result<Decision, Error> {
    let cost = part.request.amount;
    let decision = if let (true, Some(in_place)) = (admitted, &plan.in_place) {
        charge_in_place(ctx, key, part, in_place, now_ns, &plan.decision)?;
        plan.decision
    } else {
        let (store, decision) = match (admitted, plan.charged) {
            (true, Some(charged)) => (Some(charged), plan.decision),
            (true, None) => (plan.carried, plan.decision),
            (false, _) => (plan.carried, plan.uncharged),
        };
        if let Some((limiter, keep_ns)) = store {
            let limiter = key.store(limiter)?;
            let what = Commit::State(limiter);
            let at = effect::commit(ctx, part.request.key, what, now_ns, keep_ns);
            key.expire_at(Some(at));
        }
        decision
    };
    // Asked even when another limiter of the call denied it: the region's demand for this key.
    if plan.shared && cost > 0 {
        if let Some(limiter) = key.limiter(part.name)? {
            share::count(limiter, cost, if admitted { cost } else { 0 });
        }
    }
    Ok(decision)
}

/// Charges a limiter whose change was planned in place, and propagates it as a delta (the full
/// state if a change could not be applied, which the plan rules out).
fn charge_in_place(
    ctx: &Ctx,
    key: &mut Key<'_>,
    part: &Part<'_>,
    in_place: &InPlace,
    now_ns: u64,
    decision: &Decision,
) -> Result<(), Error> {
    let name = part.request.key;
    let Some(limiter) = key.limiter(part.name)? else {
        return Ok(());
    };
    let before = metrics::Footprint::of(limiter);
    let at = match in_place {
        InPlace::Change(change, apply) => {
            let policy = limiter.policy;
            // A key holding a share lives at least until the share's expiry.
            let keep = decision.reset_after_ns.max(share::keep_ns(limiter, now_ns));
            let at = match apply(&mut limiter.state, &policy, change) {
                Some(delta) => effect::commit(ctx, name, Commit::Delta(&delta), now_ns, keep),
                None => effect::commit(ctx, name, Commit::State(limiter), now_ns, keep),
            };
            metrics::limiter_changed(before, limiter);
            at
        }
        InPlace::Charged(delta, keep_ns) => {
            // Planned on this very limiter in this call: it applies.
            delta.apply(limiter)?;
            metrics::limiter_changed(before, limiter);
            effect::commit(ctx, name, Commit::Charged(delta), now_ns, *keep_ns)
        }
    };
    key.expire_at(Some(at));
    Ok(())
}

/// The combined decision: allowed when all admitted; the capacity and remaining of the limiter
/// with the fewest remaining; the latest retry of the limiters charged (every limiter only
/// refills as time passes, so at the latest of their retry times all admit, if nothing else
/// spends meanwhile); the latest reset. `costs`: each limiter's COST, in order.
fn combine(admitted: bool, each: &[Decision], costs: &[u64]) -> Decision {
    let peek = costs.iter().all(|&c| c == 0);
    let tightest = each.iter().min_by_key(|d| d.remaining);
    Decision {
        allowed: u64::from(admitted),
        capacity: tightest.map_or(0, |d| d.capacity),
        remaining: tightest.map_or(0, |d| d.remaining),
        // A limiter at COST 0 holds nothing back: its retry counts only when every limiter is
        // at COST 0 (a peek over all of them).
        retry_after_ns: if admitted {
            None
        } else {
            Some(
                each.iter()
                    .zip(costs)
                    .filter(|(_, &cost)| cost > 0 || peek)
                    .filter_map(|(d, _)| d.retry_after_ns)
                    .max()
                    .unwrap_or(0),
            )
        },
        reset_after_ns: each.iter().map(|d| d.reset_after_ns).max().unwrap_or(0),
    }
}

/// Where the keys are, for Redis's keys-position request (see `Keys::NumKeys`): the `numkeys`
/// arguments after numkeys, as far as there are arguments; none when numkeys is invalid (the
/// call then fails on it without opening a key).
pub fn key_positions(mut args: Args<'_>) -> std::ops::Range<usize> {
    let after = args.remaining().saturating_sub(1);
    let n = args
        .next_u64("numkeys", 1, MAX_LIMITERS)
        .ok()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0);
    2..2 + n.min(after)
}

/// `numkeys key… limiter…`: every key distinct, one limiter per key; when `settling`, each
/// limiter ends with `BY d`.
fn parse<'a>(args: &mut Args<'a>, settling: bool) -> Result<Vec<Part<'a>>, Error> {
    let n = args.next_u64("numkeys", 1, MAX_LIMITERS)?;
    let mut keys: Vec<RString<'a>> = Vec::new();
    for _ in 0..n {
        let key = args.next_string()?;
        if keys.iter().any(|k| k.bytes() == key.bytes()) {
            return Err(Error::Syntax(format!(
                "key '{}' is named twice; each key has one limiter",
                echo(key.bytes())
            )));
        }
        keys.push(key);
    }
    let mut parts = Vec::with_capacity(keys.len());
    let count = keys.len();
    for (i, key) in keys.into_iter().enumerate() {
        // A limiter ends at the next algorithm word; before another limiter, at any word that
        // is not one of its options, so that a misspelt algorithm is named as one.
        let more = i + 1 < count;
        let cost_given = std::cell::Cell::new(false);
        let is_algorithm = |word: &[u8]| {
            cost_given.set(cost_given.get() || word.eq_ignore_ascii_case(b"COST"));
            algorithm(word).is_some()
                || (settling && word.eq_ignore_ascii_case(b"BY"))
                || (more
                    && !word.eq_ignore_ascii_case(b"BURST")
                    && !word.eq_ignore_ascii_case(b"COST"))
        };
        let Some(word) = args.peek_bytes() else {
            return Err(Error::Syntax(format!(
                "no limiter for key '{}': expected {n} limiters, one per key",
                echo(key.bytes())
            )));
        };
        let Some(&(_, name, burst, plan)) = algorithm(word) else {
            return Err(Error::Syntax(format!(
                "unknown algorithm '{}'; expected {}",
                echo(word),
                expected()
            )));
        };
        args.next_bytes()?;
        let options = Options {
            burst,
            amount: Amount::Cost,
        };
        let request = parse_limiter(key, args, options, is_algorithm)?;
        let settle = if settling {
            if cost_given.get() {
                return Err(Error::Syntax(
                    "RL.SETTLE takes BY d, not COST: the request was already decided".into(),
                ));
            }
            match args.peek_bytes() {
                Some(w) if w.eq_ignore_ascii_case(b"BY") => args.next_bytes()?,
                _ => {
                    return Err(Error::Syntax(format!(
                        "no BY d for key '{}': every limiter is settled by its own difference",
                        echo(key.bytes())
                    )))
                }
            };
            let Some(by) = args.peek_bytes() else {
                return Err(Error::MissingValue("BY"));
            };
            let by = parse_i64("BY", by, MAX_LIMIT)?;
            args.next_bytes()?;
            Some((by, charge::creator(word).ok_or(Error::Internal)?))
        } else {
            None
        };
        parts.push(Part {
            request,
            name,
            plan,
            settle,
        });
    }
    if args.remaining() > 0 {
        return Err(Error::Syntax(format!(
            "more limiters than keys: numkeys is {n}"
        )));
    }
    Ok(parts)
}

/// What limiter `A` would do with a request of `cost` under `policy` (see [`Plan`]).
fn plan<A: Stored>(
    stored: Option<&Limiter>,
    policy: &Policy,
    now_ns: u64,
    cost: u64,
) -> Result<Plan, Error> {
    accepts::<A>(policy)?;
    let held = match stored {
        Some(limiter) => Some((limiter, of::<A>(limiter)?)),
        None => None,
    };
    if let Some((limiter, state)) = held {
        if let Some(shared) = limiter.shared() {
            return plan_shared(limiter, state, shared.share, policy, now_ns, cost);
        }
        if limiter.policy == *policy && limiter.others().is_empty() && cost > 0 {
            if let Some(plan) = plan_in_place(state, policy, now_ns, cost) {
                return Ok(plan);
            }
        }
        if limiter.policy == *policy && !limiter.others().is_empty() && cost > 0 {
            if let Some((decision, charged_delta)) = A::plan_remembered(limiter, now_ns, cost) {
                let uncharged = match charged_delta {
                    Some(_) => A::check(Some(state), policy, now_ns, 0).decision,
                    None => decision,
                };
                return Ok(Plan {
                    decision,
                    uncharged,
                    charged: None,
                    carried: None,
                    in_place: charged_delta
                        .map(|(delta, keep_ns)| InPlace::Charged(delta, keep_ns)),
                    shared: false,
                });
            }
        }
    }
    let others = stored.map(Limiter::others_of::<A>);
    let planned = step::plan(
        held.map(|(limiter, state)| Held {
            policy: &limiter.policy,
            state,
            others: others.as_deref().unwrap_or(&[]),
        }),
        policy,
        now_ns,
        cost,
    );
    let limiter = |kept: Kept<A>| {
        let keep_ns = kept.keep_ns;
        (Limiter::kept(kept), keep_ns)
    };
    Ok(Plan {
        decision: planned.decision,
        uncharged: planned.uncharged,
        charged: planned.charged.map(limiter),
        carried: planned.carried.map(limiter),
        in_place: None,
        shared: false,
    })
}

/// A request of `cost` (> 0) on `state` under the policy it holds, decided in place when the
/// algorithm does (the sliding log): None otherwise.
fn plan_in_place<A: Stored>(state: &A, policy: &Policy, now_ns: u64, cost: u64) -> Option<Plan> {
    let (decision, change) = state.decide_in_place(policy, now_ns, cost)?;
    let uncharged = match change {
        Some(_) => A::check(Some(state), policy, now_ns, 0).decision,
        None => decision,
    };
    Some(Plan {
        decision,
        uncharged,
        charged: None,
        carried: None,
        in_place: change
            .and_then(IntoDelta::into_change)
            .map(|change| InPlace::Change(change, apply_in_place::<A> as Applier)),
        shared: false,
    })
}

/// A key holding a region's share, as the single-key commands decide it (`share::prepare`):
/// under the caller's policy scaled to the share while it is in force (the caller's own after
/// its expiry), the state carried over to it (what was spent stays spent). What is stored keeps
/// the share, its counters and one configuration: a share never becomes a remembered one. A
/// carried state is stored whatever the outcome (a lowered share that denies must still hold);
/// a limiter at COST 0 stores nothing. A cost above the share's capacity waits for the share to
/// move (or to expire).
fn plan_shared<A: Stored>(
    limiter: &Limiter,
    state: &A,
    share: Share,
    called: &Policy,
    now_ns: u64,
    cost: u64,
) -> Result<Plan, Error> {
    let to = share.policy_for(called, now_ns);
    if to != *called {
        // A share larger than the caller's L: the log bound holds for it too.
        accepts::<A>(&to)?;
    }
    let moved = limiter.policy != to;
    if !moved && cost > 0 && cost <= to.capacity() {
        if let Some(plan) = plan_in_place(state, &to, now_ns, cost) {
            return Ok(Plan {
                shared: true,
                ..plan
            });
        }
    }
    let share_ns = share.keep_ns(now_ns);
    let start = if moved {
        state.rescale(&limiter.policy, &to, now_ns)
    } else {
        state.clone()
    };
    let peek = A::check(Some(&start), &to, now_ns, 0).decision;
    let keep = |state: A, reset_after_ns: u64| {
        let mut kept = Limiter::new(to, AlgoState::shared(share, state.wrap()));
        if let (Some(into), Some(from)) = (kept.shared_mut(), limiter.shared()) {
            (into.asked, into.admitted) = (from.asked, from.admitted);
        }
        (kept, reset_after_ns.max(share_ns))
    };
    let (decision, next) = if cost == 0 {
        (peek, None)
    } else if cost > to.capacity() {
        let denied = Decision {
            allowed: 0,
            retry_after_ns: Some(share_ns.max(1)),
            ..peek
        };
        (denied, None)
    } else {
        let Outcome { decision, next } = A::check(Some(&start), &to, now_ns, cost);
        (decision, next)
    };
    let uncharged = if next.is_some() { peek } else { decision };
    let carried = (moved && cost > 0).then(|| keep(start, peek.reset_after_ns));
    Ok(Plan {
        decision,
        uncharged,
        charged: next.map(|next| keep(next, decision.reset_after_ns)),
        carried,
        in_place: None,
        shared: true,
    })
}

/// Names the key in a WRONGTYPE error: a call has several.
pub(super) fn at_key(e: Error, key: RString<'_>) -> Error {
    match e {
        Error::WrongType { holds, wanted, .. } => Error::WrongType {
            holds,
            wanted,
            key: Some(echo(key.bytes())),
        },
        other => other,
    }
}
