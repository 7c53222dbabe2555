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
//! `CONCURRENCY N TTL ACQUIRE id` (or `PEEK`) takes a slot of a concurrency limiter beside the
//! rate limits (see `concurrency`): a request denied by either takes neither, and an admitted one
//! holds its slot until its RELEASE (`RL.CONCURRENCY`) or TTL.
//!
//! Reply: the combined decision (the five fields: allowed = all admitted; limit and remaining of
//! the limiter with the fewest remaining; retry_after_ms = when every limiter charged would
//! admit, -1 if admitted; reset_after_ms = the largest), then one five-field array per limiter in argument
//! order, describing it after the call (field 1: whether it would admit this request).

use super::args::{parse_i64, parse_limiter, Ask, Options, Request};
use super::charge::Given;
use super::concurrency;
use super::key::{accepts, at_key};
use super::plan::{self, Plan};
use super::reply::{fields, Reply};
use super::settle;
use crate::algo::concurrency::{Concurrency, Op};
use crate::algo::listed::{self, Listed};
use crate::algo::{Algorithm, Amount, Decision, Policy, MAX_LIMIT};
use crate::clock;
use crate::error::{echo, Error};
use crate::host::call::Key;
use crate::host::call::{Args, Ctx, RString};
use crate::state::{for_tag, ForAlgorithm, Limiter, Stored};

/// The most limiters one call may name.
pub const MAX_LIMITERS: u64 = 32;

/// One limiter's plan (`plan::plan`), its algorithm erased: the call holds one per key.
trait Planned {
    fn decision(&self) -> &Decision;
    /// `plan::commit`: charged when the whole request is admitted.
    fn commit(
        self: Box<Self>,
        ctx: &Ctx,
        key: &mut Key<'_>,
        name: RString<'_>,
        admitted: bool,
        now_ns: u64,
    ) -> Result<Decision, Error>;
}

impl<A: Stored> Planned for Plan<A> {
    fn decision(&self) -> &Decision {
        &self.decision
    }

    fn commit(
        self: Box<Self>,
        ctx: &Ctx,
        key: &mut Key<'_>,
        name: RString<'_>,
        admitted: bool,
        now_ns: u64,
    ) -> Result<Decision, Error> {
        plan::commit(ctx, key, name, *self, admitted, now_ns)
    }
}

/// A concurrency slot's plan: carried out (the slot taken) only when the whole request is.
impl Planned for concurrency::Plan {
    fn decision(&self) -> &Decision {
        &self.decision
    }

    fn commit(
        self: Box<Self>,
        ctx: &Ctx,
        key: &mut Key<'_>,
        name: RString<'_>,
        admitted: bool,
        now_ns: u64,
    ) -> Result<Decision, Error> {
        concurrency::commit(ctx, key, name, *self, admitted, now_ns)
    }
}

/// What limiter `A` would do with a request of `amount` under `policy`, as a limiter command
/// decides it (the log bound checked first), with the decision for when another limiter
/// denies.
struct PlanFor<'s> {
    stored: Option<&'s Limiter>,
    policy: &'s Policy,
    now_ns: u64,
    amount: Amount,
}

impl ForAlgorithm for PlanFor<'_> {
    type Out = Result<Box<dyn Planned>, Error>;

    fn run<A: Stored + 'static>(self) -> Self::Out {
        accepts::<A>(self.policy)?;
        let planned = plan::plan::<A>(self.stored, self.policy, self.amount, self.now_ns, true)?;
        Ok(Box::new(planned))
    }
}

/// "GCRA, TOKENBUCKET, … or FIXEDWINDOW": the words `RL.ALL` takes (the registry's limiters),
/// for its error.
fn expected() -> String {
    let words: Vec<&str> = listed::limiters().map(|l| l.word).collect();
    match words.split_last() {
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// One limiter of the call: its key, policy, cost and algorithm; in `RL.SETTLE` (see
/// `settle`), the difference it is settled by.
struct Part<'a> {
    request: Request<'a>,
    name: &'static str,
    plan: How,
    settle: Option<i64>,
}

/// How a part is planned: a limiter of the registry by its planner, or a concurrency slot
/// (`CONCURRENCY N TTL ACQUIRE id | PEEK`) by its operation.
#[derive(Clone, Copy)]
enum How {
    Limiter(&'static Listed),
    Slot(Op),
}

/// `RL.SETTLE numkeys key [key ...] <limiter> [<limiter> ...]`, each `<limiter>` RL.ALL's with
/// `BY d` in place of `COST n`: see `settle`. A command of its own, not a form of `RL.ALL`, so
/// that an ACL can grant deciding without granting refunds.
pub fn settle(ctx: &Ctx, mut args: Args<'_>) -> Result<Reply, Error> {
    let parts = parse(&mut args, true)?;
    let limiters: Vec<_> = parts
        .iter()
        .filter_map(|p| {
            let How::Limiter(rule) = p.plan else {
                return None;
            };
            p.settle.map(|by| settle::Limiter {
                key: p.request.key,
                given: Given {
                    rule,
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
    let peek = parts.iter().all(|p| p.request.amount.peeks());
    let mut keys: Vec<Key<'_>> = parts
        .iter()
        .map(|p| ctx.open(p.request.key, !peek))
        .collect();
    let mut plans = Vec::with_capacity(parts.len());
    for (part, key) in parts.iter().zip(keys.iter_mut()) {
        let name = part.request.key;
        let stored = key.limiter(part.name).map_err(|e| at_key(e, name))?;
        let stored = stored.map(|l| &*l);
        let (policy, amount) = (&part.request.policy, part.request.amount);
        let plan = match part.plan {
            How::Slot(op) => concurrency::plan(stored, policy, now_ns, op)
                .map(|p| Box::new(p) as Box<dyn Planned>),
            How::Limiter(rule) => {
                let plan = PlanFor {
                    stored,
                    policy,
                    now_ns,
                    amount,
                };
                for_tag(rule.tag, plan).ok_or(Error::Internal)?
            }
        }
        .map_err(|e| at_key(e, name))?;
        plans.push(plan);
    }
    let admitted = if peek {
        plans.iter().all(|p| p.decision().allowed == 1)
    } else {
        parts
            .iter()
            .zip(&plans)
            .all(|(part, plan)| part.request.amount.peeks() || plan.decision().allowed == 1)
    };
    let mut each = Vec::with_capacity(parts.len());
    for ((part, key), plan) in parts.iter().zip(keys.iter_mut()).zip(plans) {
        let decision = plan.commit(ctx, key, part.request.key, admitted, now_ns)?;
        each.push(decision);
    }
    let costs: Vec<u64> = parts.iter().map(|p| p.request.amount.asked()).collect();
    Ok(Reply::Nested(
        fields(&combine(admitted, &each, &costs)),
        each.iter().map(fields).collect(),
    ))
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

/// `CONCURRENCY N TTL ACQUIRE id | PEEK` for `key`: a slot taken with the request (COST 1) or
/// looked at (COST 0); RENEW and RELEASE belong to `RL.CONCURRENCY` alone.
fn slot<'a>(key: RString<'a>, args: &mut Args<'a>) -> Result<Part<'a>, Error> {
    let (policy, op) = concurrency::parse(args)?;
    let amount = match op {
        Op::Acquire(_) => Amount::Cost(1),
        Op::Peek => Amount::Peek,
        Op::Renew(_) | Op::Release(_) => {
            return Err(Error::Syntax(
                "RL.ALL takes CONCURRENCY N TTL ACQUIRE id or PEEK; RENEW and RELEASE are RL.CONCURRENCY's"
                    .into(),
            ))
        }
    };
    Ok(Part {
        request: Request {
            key,
            policy,
            amount,
        },
        name: Concurrency::NAME,
        plan: How::Slot(op),
        settle: None,
    })
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
            listed::limiter_by_word(word).is_some()
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
        if word.eq_ignore_ascii_case(b"CONCURRENCY") && !settling {
            args.next_bytes()?;
            parts.push(slot(key, args)?);
            continue;
        }
        let Some(rule) = listed::limiter_by_word(word) else {
            return Err(Error::Syntax(format!(
                "unknown algorithm '{}'; expected {}",
                echo(word),
                expected()
            )));
        };
        args.next_bytes()?;
        let options = Options {
            burst: rule.burst,
            ask: Ask::Cost,
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
            Some(by)
        } else {
            None
        };
        parts.push(Part {
            request,
            name: rule.name,
            plan: How::Limiter(rule),
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
