//! One request on one limiter key, as every limiter command and `RL.ALL` decide it: [`plan`]
//! decides the request's `Amount` on the key as it stands and writes nothing; [`commit`] writes
//! what the plan says for the outcome of the call and ends in `effect::commit`. A limiter
//! command commits its plan as its own decision says (what the decision spent is charged, see
//! `decide`); `RL.ALL` plans every limiter first and charges them only when all admit. This
//! file calls nothing above it: its callers (`decide`, `all`) hand it the amount, never a
//! closure.
//!
//! Which state a request starts from and what it stores is `algo::step`'s rule. What this file
//! adds are the forms of a stored key the rule does not see, each written where it is rather
//! than as a new value: the key's one configuration under the policy it holds (its state
//! replaced by its successor, or changed in place where the algorithm decides in place,
//! `Algorithm::decide_in_place`), a key that remembers other configurations charged in place
//! (`PlanRemembered::plan_remembered`), and a region's share (the request's policy scaled to it, see
//! `state::share`). No algorithm is named here: each one's in-place path is behind the trait.

use std::borrow::Cow;

use super::effect::{self, Commit};
use super::key::{accepts, of};
use crate::algo::step::{self, Held, Kept};
use crate::algo::{Amount, Decided, Decision, Outcome, Policy};
use crate::error::Error;
use crate::host::call::{Ctx, Key, RString};
use crate::metrics;
use crate::state::replay::{ChargedDelta, PlanRemembered};
use crate::state::share::Share;
use crate::state::{AlgoState, Limiter, Stored};

/// What one request would do to one key, before anything is written.
pub struct Plan<A: Stored> {
    /// Its decision (charged, when the call charges it).
    pub decision: Decision,
    /// The decision when the call does not charge it (`RL.ALL`, another limiter denied): as the
    /// key stands after the call. `decision` unless the plan was asked for both.
    uncharged: Decision,
    /// What to write when it is charged (None: the decision spent nothing).
    charged: Option<Write<A>>,
    /// What to write when it is not: a change of configuration or of share holds whatever the
    /// outcome (None: nothing).
    carried: Option<Write<A>>,
    /// A key holding a region's share counts what it was asked, and what the decision spends
    /// when charged.
    count: Option<(u64, u64)>,
    /// How long the admitted request waits before it proceeds (`RL.SHAPE`'s delay; else 0).
    pub delay_ns: u64,
}

/// A write to the key, and how long the key must then live (ns from now, see
/// `effect::expire_at_ms`).
enum Write<A: Stored> {
    /// The state of the key's current configuration replaced, where it is, by its successor:
    /// the effect is the state whole.
    Next(A, u64),
    /// The state changed in place by what the algorithm's in-place path planned: the effect is
    /// a delta, in time and bytes independent of the state's size.
    Change(A::Change, u64),
    /// Every configuration a key remembers charged in place: one charged delta.
    Charged(ChargedDelta, u64),
    /// A new value for the key.
    Value(Limiter, u64),
}

/// Decides a request of `amount` under the caller's policy on the limiter the key holds, if
/// any. `either`: the call may leave the key uncharged though it admits (`RL.ALL`), so the plan
/// carries that decision too. The caller checked that `called` keeps within the log bound
/// (`key::accepts`); a share's scaled policy is checked here.
#[inline(always)]
pub fn plan<A: Stored>(
    stored: Option<&Limiter>,
    called: &Policy,
    amount: Amount,
    now_ns: u64,
    either: bool,
) -> Result<Plan<A>, Error> {
    let Some(limiter) = stored else {
        return Ok(by_rule(None, called, now_ns, amount, either));
    };
    let state = of::<A>(limiter)?;
    if let Some(shared) = limiter.shared() {
        let share = shared.share;
        return shared_plan(limiter, state, share, called, amount, now_ns, either);
    }
    if !amount.peeks() && limiter.policy == *called {
        if limiter.others().is_empty() {
            return Ok(in_place(state, called, amount, now_ns, either, 0));
        }
        if amount.checks() {
            if let Some(plan) = remembered(limiter, state, amount.asked(), now_ns, either) {
                return Ok(plan);
            }
        }
    }
    Ok(by_rule(
        Some((limiter, state)),
        called,
        now_ns,
        amount,
        either,
    ))
}

/// A request (not a peek) on the key's one configuration under the policy it holds: the
/// successor replaces the state where it is, or, where the algorithm decides in place (the
/// sliding log), only what the request touches changes. `share_ns`: how long the share the key
/// holds must live (0: none).
#[inline(always)]
fn in_place<A: Stored>(
    state: &A,
    policy: &Policy,
    amount: Amount,
    now_ns: u64,
    either: bool,
    share_ns: u64,
) -> Plan<A> {
    let keep = |d: &Decision| d.reset_after_ns.max(share_ns);
    let uncharged = |decision: Decision, charges: bool| {
        if either && charges {
            A::check(Some(state), policy, now_ns, 0).decision
        } else {
            decision
        }
    };
    if amount.checks() {
        if let Some((decision, change)) = state.decide_in_place(policy, now_ns, amount.asked()) {
            return Plan {
                decision,
                uncharged: uncharged(decision, change.is_some()),
                charged: change.map(|change| Write::Change(change, keep(&decision))),
                carried: None,
                count: None,
                delay_ns: 0,
            };
        }
    }
    let Decided {
        outcome: Outcome { decision, next },
        delay_ns,
    } = A::decide(Some(state), policy, now_ns, amount);
    Plan {
        decision,
        uncharged: uncharged(decision, next.is_some()),
        charged: next.map(|next| Write::Next(next, keep(&decision))),
        carried: None,
        count: None,
        delay_ns,
    }
}

/// A request of `cost` on a key that remembers other configurations, under the one it holds as
/// current, where its algorithm charges them all in place (`PlanRemembered::plan_remembered`, the
/// sliding log's), where the rule would copy and send every state: None otherwise.
#[inline(never)]
fn remembered<A: Stored>(
    limiter: &Limiter,
    state: &A,
    cost: u64,
    now_ns: u64,
    either: bool,
) -> Option<Plan<A>> {
    let (decision, admitted) = A::plan_remembered(limiter, now_ns, cost)?;
    let uncharged = match admitted {
        Some(_) if either => A::check(Some(state), &limiter.policy, now_ns, 0).decision,
        _ => decision,
    };
    Some(Plan {
        decision,
        uncharged,
        charged: admitted.map(|(delta, keep_ns)| Write::Charged(delta, keep_ns)),
        carried: None,
        count: None,
        delay_ns: 0,
    })
}

/// Everything else (a new key, a peek, a policy change, a key remembering others): the rule of
/// `algo::step`, whose writes are new values.
#[inline(never)]
fn by_rule<A: Stored>(
    held: Option<(&Limiter, &A)>,
    policy: &Policy,
    now_ns: u64,
    amount: Amount,
    either: bool,
) -> Plan<A> {
    let others = held.map(|(limiter, _)| limiter.others_of::<A>());
    let held = held.map(|(limiter, state)| Held {
        policy: &limiter.policy,
        state,
        others: others.as_deref().unwrap_or(&[]),
    });
    let planned = step::plan(held, policy, now_ns, amount, either);
    let value = |kept: Kept<A>| {
        let keep_ns = kept.keep_ns;
        Write::Value(Limiter::kept(kept), keep_ns)
    };
    Plan {
        decision: planned.decision,
        uncharged: planned.uncharged,
        charged: planned.charged.map(value),
        carried: planned.carried.map(value),
        count: None,
        delay_ns: planned.delay_ns,
    }
}

/// A key holding a region's share (see `share`): decided under the caller's policy scaled to
/// the share while it is in force (the caller's own after its expiry), the state carried over
/// to it (what was spent stays spent). What is stored keeps the share, its counters and one
/// configuration: a share never becomes a remembered one. A carried state is stored whatever
/// the outcome (a lowered share that denies must still hold); a peek stores nothing. A cost
/// above the share's capacity waits for the share to move (or to expire).
#[inline(never)]
fn shared_plan<A: Stored>(
    limiter: &Limiter,
    state: &A,
    share: Share,
    called: &Policy,
    amount: Amount,
    now_ns: u64,
    either: bool,
) -> Result<Plan<A>, Error> {
    let to = share.policy_for(called, now_ns);
    if to != *called {
        // A share larger than the caller's L: the log bound holds for it too.
        accepts::<A>(&to)?;
    }
    let counted = |plan: Plan<A>| Plan {
        count: (!amount.peeks()).then(|| (amount.asked(), amount.spent(&plan.decision))),
        ..plan
    };
    let share_ns = share.keep_ns(now_ns);
    let moved = limiter.policy != to;
    let peek = amount.peeks();
    let above = amount.checks() && amount.asked() > to.capacity();
    if !moved && !peek && !above {
        let plan = in_place(state, &to, amount, now_ns, either, share_ns);
        return Ok(counted(plan));
    }
    let start: Cow<'_, A> = if moved {
        Cow::Owned(state.rescale(&limiter.policy, &to, now_ns))
    } else {
        Cow::Borrowed(state)
    };
    let peeked = A::check(Some(&start), &to, now_ns, 0).decision;
    let (decision, next, delay_ns) = if peek {
        (peeked, None, 0)
    } else if above {
        let denied = Decision {
            allowed: 0,
            retry_after_ns: Some(share_ns.max(1)),
            ..peeked
        };
        (denied, None, 0)
    } else {
        let Decided {
            outcome: Outcome { decision, next },
            delay_ns,
        } = A::decide(Some(&start), &to, now_ns, amount);
        (decision, next, delay_ns)
    };
    let keep = |state: A, reset_after_ns: u64| {
        let mut kept = Limiter::new(to, AlgoState::shared(share, state.wrap()));
        if let (Some(into), Some(from)) = (kept.shared_mut(), limiter.shared()) {
            (into.asked, into.admitted) = (from.asked, from.admitted);
        }
        Write::Value(kept, reset_after_ns.max(share_ns))
    };
    let uncharged = if next.is_some() { peeked } else { decision };
    let charged = next.map(|next| keep(next, decision.reset_after_ns));
    let carried = (moved && !peek).then(|| keep(start.into_owned(), peeked.reset_after_ns));
    Ok(counted(Plan {
        decision,
        uncharged,
        charged,
        carried,
        count: None,
        delay_ns,
    }))
}

/// Writes what `plan`, made on `key` (named `name`) in this call, says for the call's outcome
/// (`charge`: the request is charged; false when another limiter of an `RL.ALL` denied),
/// propagates it (`effect::commit`), counts a share's demand, and answers the decision.
#[inline(always)]
pub fn commit<A: Stored>(
    ctx: &Ctx,
    key: &mut Key<'_>,
    name: RString<'_>,
    plan: Plan<A>,
    charge: bool,
    now_ns: u64,
) -> Result<Decision, Error> {
    let Plan {
        decision,
        uncharged,
        charged,
        carried,
        count,
        delay_ns: _,
    } = plan;
    let (write, decision, charging) = match (charge, charged) {
        (true, Some(write)) => (Some(write), decision, true),
        (true, None) => (carried, decision, false),
        (false, _) => (carried, uncharged, false),
    };
    if let Some(write) = write {
        let at = write_back(ctx, key, name, write, now_ns)?;
        key.expire_at(Some(at));
    }
    if let (Some((asked, spent)), Some(limiter)) = (count, key.found()) {
        if let Some(shared) = limiter.shared_mut() {
            shared.count(asked, if charging { spent } else { 0 });
        }
    }
    Ok(decision)
}

/// Carries out one write and propagates it; returns the key's new absolute expiry.
#[inline(always)]
fn write_back<A: Stored>(
    ctx: &Ctx,
    key: &mut Key<'_>,
    name: RString<'_>,
    write: Write<A>,
    now_ns: u64,
) -> Result<u64, Error> {
    let at = match write {
        Write::Value(limiter, keep_ns) => {
            let limiter = key.store(limiter)?;
            effect::commit(ctx, name, Commit::State(limiter), now_ns, keep_ns)
        }
        Write::Next(next, keep_ns) => {
            // Planned on the limiter this key holds, in this call.
            let limiter = key.found().ok_or(Error::Internal)?;
            replace(limiter, next)?;
            effect::commit(ctx, name, Commit::State(limiter), now_ns, keep_ns)
        }
        Write::Change(change, keep_ns) => {
            let limiter = key.found().ok_or(Error::Internal)?;
            let (before, policy) = (metrics::Footprint::of(limiter), limiter.policy);
            let state = A::of_mut(&mut limiter.state).ok_or(Error::Internal)?;
            let delta = state.apply_delta(&policy, &change);
            metrics::limiter_changed(before, limiter);
            match delta {
                Some(delta) => effect::commit(ctx, name, Commit::Delta(&delta), now_ns, keep_ns),
                // A change the plan made on this very state always applies; were it not to,
                // the state whole still carries what the key holds.
                None => effect::commit(ctx, name, Commit::State(limiter), now_ns, keep_ns),
            }
        }
        Write::Charged(delta, keep_ns) => {
            let limiter = key.found().ok_or(Error::Internal)?;
            let before = metrics::Footprint::of(limiter);
            delta.apply(limiter)?;
            metrics::limiter_changed(before, limiter);
            effect::commit(ctx, name, Commit::Charged(&delta), now_ns, keep_ns)
        }
    };
    Ok(at)
}

/// Replaces the current state of `limiter` by `next`. The gauges follow only a change of size:
/// for the fixed-size states (heap 0, no entries) that test is decided at compile time.
fn replace<A: Stored>(limiter: &mut Limiter, next: A) -> Result<(), Error> {
    let size = |s: &A| (s.heap_bytes(), s.entries_held());
    let state = A::of_mut(&mut limiter.state).ok_or(Error::Internal)?;
    if size(state) == size(&next) {
        *state = next;
        return Ok(());
    }
    let before = metrics::Footprint::of(limiter);
    *A::of_mut(&mut limiter.state).ok_or(Error::Internal)? = next;
    metrics::limiter_changed(before, limiter);
    Ok(())
}
