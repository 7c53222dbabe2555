//! One request against a stored limiter, whatever the algorithm: which state the decision starts
//! from and what must be stored afterwards.
//!
//! **Configurations.** A key called with a policy (L, W, B) it does not hold is in a rollout:
//! gateways with two (or more) configurations call it in turn. The promise that holds then is
//! each configuration's own: *a request admitted under a configuration finds, among everything
//! the key admitted under any configuration since that configuration was taken up (its first
//! call, or its first call after its state was as good as fresh, see below), no more than that
//! configuration's own bound allows*. So alternating configurations never admit more than the one in force
//! allows, and no cheaper one can refill a stricter one.
//!
//! To keep it, a key remembers up to [`MAX_CONFIGURATIONS`] configurations: the one it was last
//! called with (the *current*, whose policy the key shows) and the others, each with its own
//! state. Whatever is admitted, under whichever configuration, is charged to every one of them
//! (`Algorithm::charge`), so each judges all the spending by its own rule, in absolute time: a
//! fixed window by its own aligned window, a sliding log by its own W, a bucket by its own rate
//! and capacity. A configuration the key does not remember starts from the state of its *kin*
//! if the key holds one (the first in the order current, then most recently current), else
//! from the current one's, carried over (`Algorithm::rescale`: what was spent stays spent).
//! Two policies are kin when their states count the same admissions over the same span, so
//! that the same charges keep them alike: the same W for the window algorithms (L may differ),
//! the same L and W for the others (B may differ).
//!
//! **Dropping.** Whenever a request stores the key, each remembered configuration `(p, s)`
//! other than the request's is dropped when it can deny nothing a fresh start would not, judged
//! beside the state `(P, S)` the request starts from (before the request is charged to the
//! others, the previous current one included) and again beside the state stored (after):
//! - (a) `s` is as good as fresh under `p`: a peek on `s` answers exactly as a peek on no state
//!   (it is full again; as at the key's expiry, what it counted is over), or
//! - (b) `p` is kin of `P` and `s` equals `S` carried over to `p`: kin stay alike under the
//!   same charges, so `S` keeps counting for `p` what `s` would, and `p`, called again, starts
//!   from it (its kin first, see above).
//!
//! A configuration dropped by (b) keeps its promise as if it had been kept: its kin holds its
//! account (kin is an equivalence, so a kin dropped beside a later kin passes it on, and a kin
//! full again means `p` would be full again too). One dropped by (a) is taken up anew by its
//! next call. So a key whose rollout ended is back to one configuration, its cheapest form, as
//! soon as the others are full again or are kin of the current one with nothing more counted
//! (a rollout that changed only L: at once), not when the key expires.
//!
//! **Overflow: the result can only deny more.** A request that brings a configuration the key
//! does not remember, when the key would then hold more than [`MAX_CONFIGURATIONS`] (those
//! droppable beside the state it starts from not counted), forgets none of them. The request is
//! decided on the state a first-seen configuration starts from (see above), *and* is admitted only if every remembered
//! configuration admits what it spends under its own rule (`check` with that cost; a cost above
//! one's capacity is denied). Admitted, it is charged to every remembered configuration and the
//! key keeps its current configuration (the newcomer is not remembered: its next call is
//! decided the same way). Denied (by its own decision or by a remembered one), the key is kept
//! as it was, living at least as long as the reply's `reset_after`; a peek stores nothing.
//!
//! *Why no number of configurations admits more than the loosest alone.* Every admission is
//! admitted by the rule of a configuration `c` the key remembers afterwards, on `c`'s state (the
//! request's own configuration, or, on overflow, every remembered one), and that state was
//! charged with everything the key admitted since `c` was taken up: each admission is charged
//! to every remembered configuration, an overflow evicts none, and one is dropped only when it
//! holds no more than a fresh start would. So every admission keeps the promise of a
//! configuration the key remembers, counting every admission of every configuration since that
//! one was taken up; adding configurations, however many and in whatever order, cannot refill
//! one (the attack that cycled a fifth configuration to push a slow one out and bring it back
//! empty no longer exists: nothing is pushed out). What a fresh start does not count (a
//! configuration taken up after it was dropped full starts from the current state carried over,
//! see the docs' "What it cannot promise") is the only spending a configuration's promise leaves
//! out. The property tests check each promise with 2 to 8 configurations and the remembered
//! ones' with 9 to 12 (overflow).
//!
//! The rule that makes a policy change hold: a request that brings another configuration is
//! decided on that configuration's state, and the key is stored with it as the current one
//! **whether or not the request is admitted** (but on overflow, see above). Were it stored only
//! on admission, a tightening that is denied would be forgotten: the key would keep the old
//! policy's shorter expiry and, once it expired, admit a fresh capacity under the tight policy.
//!
//! The key lives until every configuration it remembers is back to full (the longest of their
//! `reset_after`), so expiry never forgets anything one of them still counts.
//!
//! A peek (amount 0) stores nothing, even under a new policy: it answers as that configuration
//! would and leaves the key as it was.

use std::borrow::Cow;

use super::algorithm::Algorithm;
use super::amount::Amount;
use super::decision::{Decided, Decision, Outcome};
use super::policy::Policy;

/// The most configurations a key remembers, the current one included (see the module comment:
/// a configuration beyond them is decided so that it can only deny more).
pub const MAX_CONFIGURATIONS: usize = 8;

/// What a key holds, as a request reads it: the current configuration and the others it
/// remembers, most recently current first.
#[derive(Clone, Copy, Debug)]
pub struct Held<'a, S> {
    pub policy: &'a Policy,
    pub state: &'a S,
    pub others: &'a [(Policy, S)],
}

/// What to store: the current configuration's policy (the request's, but on overflow) and
/// state, the other configurations, and how long the key must live at least (the longest
/// `reset_after` among them, in ns from now).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept<S> {
    pub policy: Policy,
    pub state: S,
    pub others: Vec<(Policy, S)>,
    pub keep_ns: u64,
}

/// What a request does to a stored limiter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step<S> {
    pub decision: Decision,
    /// What to store; None: store nothing.
    pub store: Option<Kept<S>>,
}

/// Whether two policies are kin (see the module comment): their states count the same
/// admissions over the same span and so stay alike under the same charges. The window
/// algorithms: the same W (L may differ). The others: the same L and W (B may differ).
pub fn kin<S: Algorithm>(p: &Policy, q: &Policy) -> bool {
    p.window_ms() == q.window_ms() && (!S::BURST || p.limit() == q.limit())
}

/// Whether the remembered configuration `(p, s)` can be dropped beside the current `(current_p,
/// current)` at `now_ns` (see the module comment): `s` is as good as fresh under `p`, or `p` is
/// kin of the current configuration and `s` is exactly its state carried over to `p`.
pub fn droppable<S: Algorithm>(
    p: &Policy,
    s: &S,
    current_p: &Policy,
    current: &S,
    now_ns: u64,
) -> bool {
    S::check(Some(s), p, now_ns, 0).decision == S::check(None, p, now_ns, 0).decision
        || (kin::<S>(p, current_p) && *s == current.rescale(current_p, p, now_ns))
}

/// Where a request under `policy` starts.
struct Start<'a, S: Clone> {
    /// The key's state under the request's policy: current or remembered, or carried over for a
    /// configuration the key does not remember; None for a new key.
    state: Option<Cow<'a, S>>,
    /// The other configurations as they will be kept (the previous current first when the
    /// current configuration changes).
    others: Cow<'a, [(Policy, S)]>,
    /// Whether the current configuration changes.
    switched: bool,
    /// On overflow: the current configuration, which stays current (`others` are then the
    /// remembered ones that are not droppable).
    overflow: Option<(Policy, Cow<'a, S>)>,
}

fn start<'a, S: Algorithm>(
    held: Option<Held<'a, S>>,
    policy: &Policy,
    now_ns: u64,
) -> Start<'a, S> {
    let Some(held) = held else {
        return Start {
            state: None,
            others: Cow::Borrowed(&[]),
            switched: false,
            overflow: None,
        };
    };
    let remembered = held.others.iter().position(|(p, _)| p == policy);
    let live = |p: &Policy, s: &S| !droppable(p, s, held.policy, held.state, now_ns);
    if held.policy == policy {
        // Those that can be dropped go before the request is charged to them.
        let others = if held.others.iter().all(|(p, s)| live(p, s)) {
            Cow::Borrowed(held.others)
        } else {
            Cow::Owned(
                held.others
                    .iter()
                    .filter(|(p, s)| live(p, s))
                    .cloned()
                    .collect(),
            )
        };
        return Start {
            state: Some(Cow::Borrowed(held.state)),
            others,
            switched: false,
            overflow: None,
        };
    }
    let fresh = |p: &Policy, s: &S| {
        S::check(Some(s), p, now_ns, 0).decision == S::check(None, p, now_ns, 0).decision
    };
    // A configuration the key does not remember starts from its kin's state if the key holds
    // one that is not full again (most recently current first: what it was dropped beside),
    // else from the current one's.
    let carried = || {
        let (from_p, from) = std::iter::once((held.policy, held.state))
            .chain(held.others.iter().map(|(p, s)| (p, s)))
            .find(|&(p, s)| kin::<S>(p, policy) && !fresh(p, s))
            .unwrap_or((held.policy, held.state));
        from.rescale(from_p, policy, now_ns)
    };
    let state = match remembered.and_then(|i| held.others.get(i)) {
        Some((_, s)) => s.clone(),
        None => carried(),
    };
    // The configurations kept beside the request's, the previous current first: those that can
    // be dropped beside the state the request starts from go before it is charged to them.
    let kept: Vec<(Policy, S)> = std::iter::once((held.policy, held.state))
        .chain(held.others.iter().map(|(p, s)| (p, s)))
        .filter(|&(p, s)| p != policy && !droppable(p, s, policy, &state, now_ns))
        .map(|(p, s)| (*p, s.clone()))
        .collect();
    if remembered.is_none() && kept.len() + 1 > MAX_CONFIGURATIONS {
        let others = held
            .others
            .iter()
            .filter(|(p, s)| live(p, s))
            .cloned()
            .collect::<Vec<_>>();
        return Start {
            state: Some(Cow::Owned(state)),
            others: Cow::Owned(others),
            switched: false,
            overflow: Some((*held.policy, Cow::Borrowed(held.state))),
        };
    }
    Start {
        state: Some(Cow::Owned(state)),
        others: Cow::Owned(kept),
        switched: true,
        overflow: None,
    }
}

/// The other configurations, each charged `n` at `now_ns`.
fn charged<S: Algorithm>(others: Cow<'_, [(Policy, S)]>, now_ns: u64, n: u64) -> Vec<(Policy, S)> {
    if n == 0 {
        return others.into_owned();
    }
    others
        .iter()
        .map(|(p, s)| (*p, s.charge(p, now_ns, n)))
        .collect()
}

impl<S: Algorithm> Kept<S> {
    /// `state` under `policy` (whose decision says it is full again after `reset_after`) with
    /// `others`, the droppable ones dropped.
    fn new(
        policy: &Policy,
        state: S,
        mut others: Vec<(Policy, S)>,
        reset_after_ns: u64,
        now_ns: u64,
    ) -> Kept<S> {
        others.retain(|(p, s)| !droppable(p, s, policy, &state, now_ns));
        let keep_ns = others
            .iter()
            .map(|(p, s)| S::check(Some(s), p, now_ns, 0).decision.reset_after_ns)
            .fold(reset_after_ns, u64::max);
        Kept {
            policy: *policy,
            state,
            others,
            keep_ns,
        }
    }
}

/// How long a remembered configuration `(p, s)` makes a request spending `n` wait, if it
/// refuses it: its own `check` with that cost (a cost above its capacity waits until it is
/// full again, when it can be dropped).
fn refusal<S: Algorithm>(p: &Policy, s: &S, now_ns: u64, n: u64) -> Option<u64> {
    if n > p.capacity() {
        return Some(S::check(Some(s), p, now_ns, 0).decision.reset_after_ns);
    }
    let d = S::check(Some(s), p, now_ns, n).decision;
    (d.allowed == 0).then(|| d.retry_after_ns.unwrap_or(d.reset_after_ns))
}

/// What an overflowed request stores: the current configuration `state` under `policy` (still
/// current) and `others`, living at least as long as the reply's `reset_after` says (the
/// newcomer's, which the key's expiry must not cut short).
fn kept_current<S: Algorithm>(
    policy: Policy,
    state: S,
    others: Vec<(Policy, S)>,
    decision: &Decision,
    now_ns: u64,
) -> Kept<S> {
    let reset = S::check(Some(&state), &policy, now_ns, 0)
        .decision
        .reset_after_ns
        .max(decision.reset_after_ns);
    Kept::new(&policy, state, others, reset, now_ns)
}

/// An overflowed request whose own decision spends `n` (0: denied): admitted only if every
/// remembered configuration admits `n` too, and then charged to all of them, the current one
/// staying current. Returns the decision (denied, with the longest wait, if one refuses), what
/// to store (the key charged, or as it was, with the reply's reset_after as its life) and
/// whether that is the key charged.
fn overflowed<S: Algorithm>(
    decision: Decision,
    current: (Policy, Cow<'_, S>),
    others: Cow<'_, [(Policy, S)]>,
    now_ns: u64,
    n: u64,
) -> (Decision, Kept<S>, bool) {
    let (policy, state) = current;
    let wait = if n == 0 {
        None
    } else {
        std::iter::once((&policy, &*state))
            .chain(others.iter().map(|(p, s)| (p, s)))
            .filter_map(|(p, s)| refusal(p, s, now_ns, n))
            .max()
    };
    if n == 0 || wait.is_some() {
        let decision = match wait {
            Some(wait) => Decision {
                allowed: 0,
                remaining: 0,
                retry_after_ns: Some(wait.max(1)),
                ..decision
            },
            None => decision,
        };
        let kept = kept_current(
            policy,
            state.into_owned(),
            others.into_owned(),
            &decision,
            now_ns,
        );
        return (decision, kept, false);
    }
    let state = state.charge(&policy, now_ns, n);
    let others = charged(others, now_ns, n);
    let kept = kept_current(policy, state, others, &decision, now_ns);
    (decision, kept, true)
}

/// What a request would do to a stored limiter, before anything is written: its decision and
/// what to store whether or not it is charged. A single-limiter command is charged whenever its
/// decision spent something ([`Plan::alone`]); an all-or-nothing call (`RL.ALL`) only when every
/// limiter admits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan<S> {
    /// Its decision on the request (charged, when admitted).
    pub decision: Decision,
    /// The decision when it is not charged: as the key stands after the call. Only computed
    /// for a request that may be left uncharged (`either`); else `decision`.
    pub uncharged: Decision,
    /// What to store when the request is charged (None: it spent nothing).
    pub charged: Option<Kept<S>>,
    /// What to store when it is not charged: a change of configuration holds whatever the
    /// outcome (None: nothing to store).
    pub carried: Option<Kept<S>>,
    /// How long the admitted request waits before it proceeds (`Decided::delay_ns`).
    pub delay_ns: u64,
}

impl<S> Plan<S> {
    /// The outcome of a request decided alone: charged when it spent something, else as
    /// carried.
    pub fn alone(self) -> Step<S> {
        match self.charged {
            Some(charged) => Step {
                decision: self.decision,
                store: Some(charged),
            },
            None => Step {
                decision: self.decision,
                store: self.carried,
            },
        }
    }
}

/// Decides one request of `amount` under `policy` at `now_ns` (the algorithm's
/// `Algorithm::decide`), on what the key holds, if anything: the one rule of the module comment,
/// for one limiter and for several. A peek stores nothing. `either`: the caller may leave the
/// request uncharged though it admits (`RL.ALL`: another limiter of the call denied), which needs
/// [`Plan::uncharged`].
pub fn plan<S: Algorithm>(
    held: Option<Held<'_, S>>,
    policy: &Policy,
    now_ns: u64,
    amount: Amount,
    either: bool,
) -> Plan<S> {
    let peek = amount.peeks();
    let Start {
        state,
        others,
        switched,
        overflow,
    } = start(held, policy, now_ns);
    let Decided {
        outcome: Outcome { decision, next },
        delay_ns,
    } = S::decide(state.as_deref(), policy, now_ns, amount);
    // Admitted but not charged (another limiter denied): the key as it stands, which admits.
    let peeked = || S::check(state.as_deref(), policy, now_ns, 0).decision;
    if let Some(current) = overflow {
        if peek {
            return Plan {
                decision,
                uncharged: decision,
                charged: None,
                carried: None,
                delay_ns,
            };
        }
        let n = if next.is_some() {
            amount.spent(&decision)
        } else {
            0
        };
        if !either || n == 0 {
            let (decision, kept, charging) = overflowed(decision, current, others, now_ns, n);
            let (charged, carried) = if charging {
                (Some(kept), None)
            } else {
                (None, Some(kept))
            };
            return Plan {
                decision,
                uncharged: decision,
                charged,
                carried,
                delay_ns,
            };
        }
        let (decision, kept, charging) =
            overflowed(decision, current.clone(), others.clone(), now_ns, n);
        if !charging {
            return Plan {
                decision,
                uncharged: decision,
                charged: None,
                carried: Some(kept),
                delay_ns,
            };
        }
        let uncharged = peeked();
        let (_, carried, _) = overflowed(uncharged, current, others, now_ns, 0);
        return Plan {
            decision,
            uncharged,
            charged: Some(kept),
            carried: Some(carried),
            delay_ns,
        };
    }
    let uncharged = match next {
        Some(_) if either => peeked(),
        _ => decision,
    };
    let carried = match &state {
        Some(s) if switched && !peek && (either || next.is_none()) => Some(Kept::new(
            policy,
            s.clone().into_owned(),
            others.to_vec(),
            uncharged.reset_after_ns,
            now_ns,
        )),
        _ => None,
    };
    let charged = next.map(|next| {
        let others = charged(others, now_ns, amount.spent(&decision));
        Kept::new(policy, next, others, decision.reset_after_ns, now_ns)
    });
    Plan {
        decision,
        uncharged,
        charged,
        carried,
        delay_ns,
    }
}

/// [`plan`] for a request decided alone (see [`Plan::alone`]).
pub fn step<S: Algorithm>(
    held: Option<Held<'_, S>>,
    policy: &Policy,
    now_ns: u64,
    amount: Amount,
) -> Step<S> {
    plan(held, policy, now_ns, amount, false).alone()
}

#[cfg(test)]
mod tests;
