//! The shape every limiter command shares: parse → load → decide → persist and propagate the
//! effect → reply. An algorithm plugs in through [`Algorithm`].

use super::args::{parse_request, Args, Options};
use super::key::{replicate_state, Key};
use super::{Ctx, RString, Reply};
use crate::algo::{ms_ceil, Decision, Outcome, Policy};
use crate::clock;
use crate::error::Error;
use crate::state::{AlgoState, Limiter};

/// A pure algorithm, as the command layer sees it.
pub trait Algorithm {
    type State;
    /// How errors name it: "GCRA", "token bucket", …
    const NAME: &'static str;
    const OPTIONS: Options;
    /// This algorithm's state inside a stored limiter, or None if the key holds another one.
    fn state_mut(stored: &mut AlgoState) -> Option<&mut Self::State>;
    fn wrap(state: Self::State) -> AlgoState;
    fn check(
        state: Option<&Self::State>,
        policy: &Policy,
        now_ns: u64,
        amount: u64,
    ) -> Outcome<Self::State>;
    /// The state carried over to a new policy.
    fn rescale(state: &Self::State, from: &Policy, to: &Policy, now_ns: u64) -> Self::State;
    /// Refuses a policy this algorithm will not keep (checked before the key is opened).
    fn accepts(_policy: &Policy) -> Result<(), Error> {
        Ok(())
    }
}

/// Runs one limiter command end to end.
pub fn decide<A: Algorithm>(ctx: Ctx, args: Args<'_>) -> Result<Reply, Error> {
    let request = parse_request(args, A::OPTIONS)?;
    A::accepts(&request.policy)?;
    let now_ns = clock::now_ns();
    // A peek (COST 0) opens read-only: it can neither create nor change the key.
    let mut key = Key::open(
        ctx,
        request.key,
        request.amount > 0 || A::OPTIONS.amount == super::args::Amount::Want,
    );
    let (decision, changed) = match key.limiter(A::NAME)? {
        None => {
            let Outcome { decision, next } =
                A::check(None, &request.policy, now_ns, request.amount);
            let changed = match next {
                Some(state) => {
                    key.store(Limiter {
                        policy: request.policy,
                        state: A::wrap(state),
                    })?;
                    true
                }
                None => false,
            };
            (decision, changed)
        }
        Some(limiter) => {
            let held = limiter.state.name();
            let state = A::state_mut(&mut limiter.state).ok_or_else(|| Error::WrongType {
                holds: format!("a {held} limiter"),
                wanted: A::NAME,
            })?;
            let Outcome { decision, next } = if limiter.policy == request.policy {
                A::check(Some(state), &request.policy, now_ns, request.amount)
            } else {
                // A new policy applies at once; it is stored only if this request changes state.
                let carried = A::rescale(state, &limiter.policy, &request.policy, now_ns);
                A::check(Some(&carried), &request.policy, now_ns, request.amount)
            };
            let changed = match next {
                Some(next) => {
                    *state = next;
                    limiter.policy = request.policy;
                    true
                }
                None => false,
            };
            (decision, changed)
        }
    };
    if changed {
        persist_effect(ctx, &mut key, request.key, now_ns, &decision)?;
    }
    Ok(Reply::decision(&decision))
}

/// After a command changed the limiter in `key`: the key's expiry follows `decision` (the
/// limiter's state as it now stands), and the state goes to replicas and the AOF with that
/// absolute expiry. Shared by every command that writes a limiter.
pub fn persist_effect(
    ctx: Ctx,
    key: &mut Key,
    name: RString,
    now_ns: u64,
    decision: &Decision,
) -> Result<(), Error> {
    let expire_at_ms = expire_at_ms(now_ns, decision);
    key.expire_at(Some(expire_at_ms));
    if let Some(limiter) = key.limiter("rate")? {
        replicate_state(ctx, name, limiter, expire_at_ms);
    }
    Ok(())
}

/// The key lives until the limiter is full again, so an idle key disappears once it would be
/// indistinguishable from a fresh one; its TTL is never shorter than the reply's reset_after_ms.
/// Nor is it shorter than [`MIN_TTL_MS`].
fn expire_at_ms(now_ns: u64, decision: &Decision) -> u64 {
    ms_ceil(now_ns).saturating_add(ms_ceil(decision.reset_after_ns).max(MIN_TTL_MS))
}

/// The shortest TTL a limiter key gets: 1 s.
///
/// A key that expires within milliseconds of a request (L=100 per second refills one token in
/// 10 ms) is deleted and created again by nearly every request of a client that calls a few
/// times a second, and Redis's active-expiry cycle spends its time reaping such keys. Measured
/// with `scripts/bench callgrind -r 5000` (every key revisited within a second), RL.GCRA over
/// random keys went from 15,678 to 12,257 instructions per request in the whole server, and p99
/// at -P 16 over 100,000 random keys halved. The price: a key touched once stays 1 s instead of
/// reset_after_ms, about 200 bytes per new key per second. A key outliving its reset is
/// harmless: its state has decayed to "full", and every algorithm decides from the stored state
/// and `now`, never from "the key exists".
pub const MIN_TTL_MS: u64 = 1_000;

/// Declares a limiter command: the unit struct, its `Command` (flags, arity, key spec) and its
/// `Algorithm` (which `AlgoState` variant and which pure functions, and optionally a function
/// that refuses policies: `accepts: path`). Every limiter command is the same glue around a
/// different algorithm; only these names differ.
///
/// The short form is a `COST n` command decided by `$module::check`. The long form names the
/// amount option, the arity and the decision function: `RL.LEASE` is the token bucket's state
/// and rescale with `WANT n` and `lease` as its decision.
macro_rules! limiter_command {
    (
        $command:ident, $redis_name:literal, $summary:literal,
        algorithm: $algo_name:literal, burst: $burst:expr,
        state: $variant:ident($module:ident::$state:ident)
        $(, accepts: $accepts:path)?
    ) => {
        $crate::command::decide::limiter_command!(
            $command, $redis_name, $summary,
            algorithm: $algo_name, burst: $burst,
            state: $variant($module::$state),
            amount: Cost, arity: -4, check: $crate::algo::$module::check
            $(, accepts: $accepts)?
        );
    };
    (
        $command:ident, $redis_name:literal, $summary:literal,
        algorithm: $algo_name:literal, burst: $burst:expr,
        state: $variant:ident($module:ident::$state:ident),
        amount: $amount:ident, arity: $arity:literal, check: $check:path
        $(, accepts: $accepts:path)?
    ) => {
        pub struct $command;

        impl $crate::command::Command for $command {
            const NAME: &'static str = $redis_name;
            const FLAGS: &'static str = "write deny-oom fast";
            const ARITY: i32 = $arity;
            const KEY: $crate::command::KeyAccess = $crate::command::KeyAccess::ReadWrite;
            const SUMMARY: &'static str = $summary;

            fn run(
                ctx: $crate::command::Ctx,
                args: $crate::command::args::Args<'_>,
            ) -> Result<$crate::command::Reply, $crate::error::Error> {
                $crate::command::decide::decide::<Self>(ctx, args)
            }
        }

        impl $crate::command::decide::Algorithm for $command {
            type State = $crate::algo::$module::$state;
            const NAME: &'static str = $algo_name;
            const OPTIONS: $crate::command::args::Options = $crate::command::args::Options {
                burst: $burst,
                amount: $crate::command::args::Amount::$amount,
            };

            fn state_mut(stored: &mut $crate::state::AlgoState) -> Option<&mut Self::State> {
                match stored {
                    $crate::state::AlgoState::$variant(s) => Some(s),
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }

            fn wrap(state: Self::State) -> $crate::state::AlgoState {
                $crate::state::AlgoState::$variant(state)
            }

            fn check(
                state: Option<&Self::State>,
                policy: &$crate::algo::Policy,
                now_ns: u64,
                cost: u64,
            ) -> $crate::algo::Outcome<Self::State> {
                $check(state, policy, now_ns, cost)
            }

            fn rescale(
                state: &Self::State,
                from: &$crate::algo::Policy,
                to: &$crate::algo::Policy,
                now_ns: u64,
            ) -> Self::State {
                $crate::algo::$module::rescale(state, from, to, now_ns)
            }

            $(
                fn accepts(policy: &$crate::algo::Policy) -> Result<(), $crate::error::Error> {
                    $accepts(policy)
                }
            )?
        }
    };
}
pub(crate) use limiter_command;
