//! One rate-limiting algorithm as the command layer and the stored format reach it: the
//! [`Algorithm`] trait, and the `algorithm!` line each algorithm file implements it with.

use super::amount::Amount;
use super::bytes;
use super::decision::{Decided, Decision, Outcome};
use super::inspect::{inspection, Field};
use super::policy::Policy;

/// One rate-limiting algorithm, implemented on the state it stores: its name, its tag in the
/// stored encoding, and its pure functions. The command layer and the stored format reach every
/// algorithm through this trait.
pub trait Algorithm: Sized + Clone + PartialEq + std::fmt::Debug {
    /// How errors name it: "GCRA", "token bucket", …
    const NAME: &'static str;
    /// How `RL.INSPECT` and `INFO ratelimit` name it: "gcra", "token_bucket", …
    const ID: &'static str;
    /// Its tag in the stored encoding; never reused.
    const TAG: u8;
    /// Whether it takes `BURST` (a capacity other than L). The window algorithms do not.
    const BURST: bool;
    /// What an admit decided in place changed ([`Algorithm::decide_in_place`]), for
    /// [`Algorithm::apply_in_place`] and the effect that carries it: the algorithm's own word
    /// (the sliding log's entries dropped and added); `()` for the algorithms without that path.
    type Change: Copy + std::fmt::Debug + PartialEq;

    /// Decides a request of `cost` at `now_ns`; `cost` 0 peeks (answered as cost 1 would be,
    /// nothing spent, `next` None). The caller guarantees `cost <= policy.capacity()`.
    fn check(state: Option<&Self>, policy: &Policy, now_ns: u64, cost: u64) -> Outcome<Self>;

    /// Decides what `amount` asks (see [`Amount`]) at `now_ns`: every limiter command decides
    /// through it. By default a peek or a cost is [`Algorithm::check`]; the token bucket adds
    /// the lease and the shaper its queue. An amount an algorithm does not take (parsing builds
    /// `Lease` only for the token bucket and `Shaped` only for the shaper) is decided as its cost.
    #[inline(always)]
    fn decide(state: Option<&Self>, policy: &Policy, now_ns: u64, amount: Amount) -> Decided<Self> {
        Decided::now(Self::check(state, policy, now_ns, amount.asked()))
    }

    /// This state carried over to a new policy: what was already spent stays spent.
    fn rescale(&self, from: &Policy, to: &Policy, now_ns: u64) -> Self;

    /// Gives back `n` unspent tokens, never above the capacity.
    fn refund(&self, policy: &Policy, now_ns: u64, n: u64) -> Self;

    /// Spends `n` at `now_ns` whatever the state holds: what another configuration of the key
    /// admitted (see `step`). It may leave the state beyond empty (a debt past the capacity, a
    /// count above L) so that this configuration, called again, still counts all of it; it
    /// saturates where a stored state must stop, at a point that denies under this policy.
    fn charge(&self, policy: &Policy, now_ns: u64, n: u64) -> Self;

    /// What this state counts against `policy` at `now_ns`, in units (a token is
    /// `policy.units_per_token()` units): for the bucket algorithms the debt (the capacity less
    /// the balance, beyond the capacity when the key owes), for the window algorithms the cost
    /// counted in the window a charge lands in. `RL.CHARGE` and `RL.REFUND` measure what they
    /// moved by it (see `settle`), so a debt is seen where `remaining` is already 0.
    fn counted(&self, policy: &Policy, now_ns: u64) -> u128;

    /// How many entries a state may hold under `policy`, when its memory grows with them (the
    /// sliding log: L); 0 for the fixed-size states.
    fn entries(_policy: &Policy) -> u64 {
        0
    }

    /// Appends its stored fields to `out` (after the header `state` writes: format, tag,
    /// policy). Every state has exactly one encoding: replicas compare bytes.
    fn encode(&self, out: &mut Vec<u8>);

    /// Reads its stored fields, validated against the policy they were stored under: bytes from
    /// a file, a replica link or a client never reach a decision unchecked.
    fn decode(r: &mut bytes::Reader<'_>, policy: &Policy) -> Result<Self, bytes::Invalid>;

    /// Heap bytes held beyond the inline state, for `MEMORY USAGE`.
    fn heap_bytes(&self) -> usize {
        0
    }

    /// How many entries it holds now (what [`Algorithm::entries`] bounds; `INFO ratelimit`'s
    /// log entries); 0 for the fixed-size states.
    fn entries_held(&self) -> u64 {
        0
    }

    /// Decides a request of `cost` (at least 1) on this state, held under the request's own
    /// `policy`, without building the next state, where that is cheaper than `check`: the
    /// sliding log, whose admit touches only the entries it drops and adds. Returns the
    /// decision and, when admitted, the change for [`Algorithm::apply_in_place`]; None when the
    /// algorithm has no such path.
    fn decide_in_place(
        &self,
        _policy: &Policy,
        _now_ns: u64,
        _cost: u64,
    ) -> Option<(Decision, Option<Self::Change>)> {
        None
    }

    /// Applies a change [`Algorithm::decide_in_place`] made on this very state; returns the
    /// fingerprint of the state before it (what a delta effect is checked against), None when
    /// the algorithm has no such path.
    fn apply_in_place(&mut self, _policy: &Policy, _change: &Self::Change) -> Option<u64> {
        None
    }

    /// `RL.INSPECT`'s fields for this state under `policy` at `now_ns`: the policy, the
    /// algorithm's own state fields in human units, then what a cost-1 request would be answered
    /// now (see [`inspection`]). The default shows no state fields.
    fn inspect(&self, policy: &Policy, now_ns: u64) -> Vec<Field> {
        inspection(
            policy,
            Vec::new(),
            &Self::check(Some(self), policy, now_ns, 0).decision,
        )
    }
}

/// Implements [`Algorithm`] for a state type through its module's free functions `check`,
/// `rescale`, `refund`, `charge`, `counted`, `inspect`, `encode` and `decode` (the module's own tests call
/// those directly). Extra items (overrides of the defaulted methods) follow the name, tag and
/// burst, starting with `type Change = …;` (the in-place path's change; the short form, without
/// items, has `()`).
macro_rules! algorithm {
    ($state:ty, name: $name:literal, id: $id:literal, tag: $tag:literal, burst: $burst:literal) => {
        $crate::algo::algorithm::algorithm!($state, name: $name, id: $id, tag: $tag, burst: $burst,
            type Change = ();
        );
    };
    ($state:ty, name: $name:literal, id: $id:literal, tag: $tag:literal, burst: $burst:literal, $($item:tt)*) => {
        impl $crate::algo::algorithm::Algorithm for $state {
            const NAME: &'static str = $name;
            const ID: &'static str = $id;
            const TAG: u8 = $tag;
            const BURST: bool = $burst;

            fn check(
                state: Option<&Self>,
                policy: &$crate::algo::policy::Policy,
                now_ns: u64,
                cost: u64,
            ) -> $crate::algo::decision::Outcome<Self> {
                check(state, policy, now_ns, cost)
            }

            fn rescale(&self, from: &$crate::algo::policy::Policy, to: &$crate::algo::policy::Policy, now_ns: u64) -> Self {
                rescale(self, from, to, now_ns)
            }

            fn refund(&self, policy: &$crate::algo::policy::Policy, now_ns: u64, n: u64) -> Self {
                refund(self, policy, now_ns, n)
            }

            fn charge(&self, policy: &$crate::algo::policy::Policy, now_ns: u64, n: u64) -> Self {
                charge(self, policy, now_ns, n)
            }

            fn counted(&self, policy: &$crate::algo::policy::Policy, now_ns: u64) -> u128 {
                counted(self, policy, now_ns)
            }

            fn inspect(&self, policy: &$crate::algo::policy::Policy, now_ns: u64) -> Vec<$crate::algo::inspect::Field> {
                inspect(self, policy, now_ns)
            }

            fn encode(&self, out: &mut Vec<u8>) {
                encode(self, out)
            }

            fn decode(
                r: &mut $crate::algo::bytes::Reader<'_>,
                policy: &$crate::algo::policy::Policy,
            ) -> Result<Self, $crate::algo::bytes::Invalid> {
                decode(r, policy)
            }

            $($item)*
        }
    };
}
pub(crate) use algorithm;
