//! The stored limiter: what one Redis key of type `ratelimit` holds, and its byte encoding.
//!
//! The same bytes serve the RDB (and so `DUMP`/`RESTORE`, `DEBUG RELOAD`, cluster migration), the
//! AOF rewrite and the effect replicated after each decision (`RL.SETSTATE`). Decoding validates
//! every field: bytes from a file, a replica link or a client never reach an algorithm unchecked.
//!
//! Layout, version 1, integers little-endian:
//! `[format u8][algorithm u8][L u64][W ms u64][B u64][algorithm state]`
//! then the algorithm's own fields: see each `Stored` impl below.
//!
//! Version 2, a key that remembers other configurations (see `algo::step`): version 1's layout,
//! then `[n u8]` (1 to 7: `algo::step::MAX_CONFIGURATIONS` − 1; at most 3 before it was
//! raised, which loads as it did) and n times `[L u64][W ms u64][B u64][algorithm state]`, most
//! recently current first, each policy distinct from the current one and from each other. A
//! key without others is always written as version 1, so keys written before version 2 existed
//! keep their bytes (and their digests).
//!
//! Version 3, a key that holds a region's share (see `share`): version 1's layout (the policy
//! being the one the share scales to), then `[share L u64][share expiry ms u64]`. Such a key
//! never remembers other configurations.
//!
//! The window algorithms (3–5) store B = L.

use crate::algo::step::{Kept, MAX_CONFIGURATIONS};
use crate::algo::{registry, Algorithm, Policy};
use crate::error::Error;
use delta::Delta;
use in_place::IntoDelta;
use share::{Share, Shared};

pub mod delta;
pub mod effect;
pub mod in_place;
pub mod replay;
pub mod share;

#[cfg(test)]
mod adversarial;

/// The data type's encoding version handed to Redis (`RedisModule_CreateDataType`).
pub const ENCVER: i32 = 1;
/// Version byte at the start of an encoded state with one configuration.
const FORMAT: u8 = 1;
/// Version byte of a state that remembers other configurations.
const FORMAT_REMEMBERED: u8 = 2;
/// Version byte of a state that holds a region's share.
const FORMAT_SHARED: u8 = 3;

/// One limiter: the policy it was last decided under, and its algorithm's state (which, for a
/// key in a rollout, holds the other configurations it remembers: [`AlgoState::Remembered`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limiter {
    pub policy: Policy,
    pub state: AlgoState,
}

/// A key that remembers other configurations (see `algo::step`): the current state (never itself
/// `Remembered`) and 1 to 7 others of the same algorithm, most recently current first. Boxed, so
/// the keys that never change configuration keep their 48 bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remembered {
    pub current: AlgoState,
    pub others: Vec<(Policy, AlgoState)>,
}

// A key's value is one allocation of a `Limiter`, so its size is memory per key: 48 bytes is a
// jemalloc size class (it was 80 before the policy was packed and the u128 states aligned to 8).
// An algorithm state larger than 24 bytes inline would push it to the next class, 64.
const _: () = assert!(std::mem::size_of::<Limiter>() <= 48);

/// An algorithm as the stored value holds it: its variant of [`AlgoState`] (generated for every
/// algorithm of the registry, `algo::registry!`), and its in-place path as a delta effect (an
/// algorithm whose `Change` is `()` has none).
pub trait Stored: Algorithm<Change: IntoDelta> {
    /// This algorithm's state inside a stored limiter (the current one's, for a key that
    /// remembers others), or None if it holds another algorithm.
    fn of(state: &AlgoState) -> Option<&Self>;
    fn of_mut(state: &mut AlgoState) -> Option<&mut Self>;
    fn wrap(self) -> AlgoState;

    /// Applies a change `Algorithm::decide_in_place` made on this very state, returning the
    /// delta that carries it to replicas and the AOF.
    fn apply_delta(&mut self, policy: &Policy, change: &Self::Change) -> Option<Delta> {
        let prior = self.apply_in_place(policy, change)?;
        change.into_delta(prior)
    }
}

/// Work done on a stored state of any algorithm (see [`AlgoState::visit`]).
pub trait Visit {
    type Out;
    fn visit<A: Stored>(self, state: &mut A) -> Self::Out;
}

/// Work generic over the algorithm, for a command that names its algorithm in an argument
/// (`RL.ALL`'s `GCRA …`, `RL.CHARGE`'s `POLICY TOKENBUCKET …`): the word is looked up once in the
/// registry (`algo::listed::limiter_by_word`, the one rule value every such command takes) and
/// [`for_tag`] runs the work with that algorithm's type.
pub trait ForAlgorithm {
    type Out;
    fn run<A: Stored + 'static>(self) -> Self::Out;
}

/// Declares the stored algorithms from the registry (`algo::registry!`): the `AlgoState` enum,
/// everything that dispatches on it, and each algorithm's [`Stored`] impl.
macro_rules! algorithms {
    ($($module:ident::$variant:ident, $word:literal, $event:literal, $kind:ident, $summary:literal;)*) => {
        $(pub use crate::algo::$module::$variant;)*

        /// The algorithm's state, tagged by algorithm. A key keeps its algorithm for life.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum AlgoState {
            $($variant($variant),)*
            Remembered(Box<Remembered>),
            Shared(Box<Shared<AlgoState>>),
        }

        impl AlgoState {
            /// Its tag in the stored encoding (`Algorithm::TAG`).
            pub fn tag(&self) -> u8 {
                match self {
                    $(AlgoState::$variant(_) => $variant::TAG,)*
                    AlgoState::Remembered(r) => r.current.tag(),
                    AlgoState::Shared(s) => s.current.tag(),
                }
            }

            /// How the algorithm is named in errors (`WRONGTYPE the key holds a GCRA limiter …`).
            pub fn name(&self) -> &'static str {
                match self {
                    $(AlgoState::$variant(_) => $variant::NAME,)*
                    AlgoState::Remembered(r) => r.current.name(),
                    AlgoState::Shared(s) => s.current.name(),
                }
            }

            fn encode(&self, out: &mut Vec<u8>) {
                match self {
                    $(AlgoState::$variant(s) => Algorithm::encode(s, out),)*
                    AlgoState::Remembered(r) => r.current.encode(out),
                    AlgoState::Shared(s) => s.current.encode(out),
                }
            }

            fn heap_bytes(&self) -> usize {
                match self {
                    $(AlgoState::$variant(s) => Algorithm::heap_bytes(s),)*
                    AlgoState::Remembered(r) => r.heap_bytes(),
                    AlgoState::Shared(s) => std::mem::size_of::<Shared<AlgoState>>() + s.current.heap_bytes(),
                }
            }

            fn entries_held(&self) -> u64 {
                match self {
                    $(AlgoState::$variant(s) => Algorithm::entries_held(s),)*
                    AlgoState::Remembered(r) => r.current.entries_held(),
                    AlgoState::Shared(s) => s.current.entries_held(),
                }
            }

            /// Runs `v` on the state, whichever algorithm it is (the current one's, for a key
            /// that remembers others).
            pub fn visit<V: Visit>(&mut self, v: V) -> V::Out {
                match self {
                    $(AlgoState::$variant(s) => v.visit(s),)*
                    AlgoState::Remembered(r) => r.current.visit(v),
                    AlgoState::Shared(s) => s.current.visit(v),
                }
            }

            fn decode(tag: u8, r: &mut Reader<'_>, policy: &Policy) -> Result<AlgoState, Error> {
                $(
                    if tag == $variant::TAG {
                        if !$variant::BURST && policy.capacity() != policy.limit() {
                            return Err(Error::BadState("window limiter with a burst"));
                        }
                        return <$variant as Algorithm>::decode(r, policy)
                            .map(AlgoState::$variant)
                            .map_err(Error::BadState);
                    }
                )*
                Err(Error::BadState("unknown algorithm"))
            }
        }

        pub use crate::algo::listed::ALGORITHM_IDS;

        /// Runs `work` with the algorithm whose stored tag is `tag` (`Listed::tag`); None when
        /// no algorithm of the registry has it.
        pub fn for_tag<W: ForAlgorithm>(tag: u8, work: W) -> Option<W::Out> {
            $(
                if tag == $variant::TAG {
                    return Some(work.run::<$variant>());
                }
            )*
            None
        }

        $(
            impl From<$variant> for AlgoState {
                fn from(s: $variant) -> AlgoState {
                    AlgoState::$variant(s)
                }
            }

            impl Stored for $variant {
                fn of(state: &AlgoState) -> Option<&Self> {
                    match state {
                        AlgoState::$variant(s) => Some(s),
                        AlgoState::Remembered(r) => Self::of(&r.current),
                        AlgoState::Shared(s) => Self::of(&s.current),
                        #[allow(unreachable_patterns)]
                        _ => None,
                    }
                }

                fn of_mut(state: &mut AlgoState) -> Option<&mut Self> {
                    match state {
                        AlgoState::$variant(s) => Some(s),
                        AlgoState::Remembered(r) => Self::of_mut(&mut r.current),
                        AlgoState::Shared(s) => Self::of_mut(&mut s.current),
                        #[allow(unreachable_patterns)]
                        _ => None,
                    }
                }

                fn wrap(self) -> AlgoState {
                    AlgoState::$variant(self)
                }
            }
        )*
    };
}

registry!(algorithms);

/// The largest stored tag: the gauges keep a slot per tag.
pub const MAX_TAG: u8 = {
    let (mut i, mut max) = (0, 0);
    while i < ALGORITHM_IDS.len() {
        if ALGORITHM_IDS[i].0 > max {
            max = ALGORITHM_IDS[i].0;
        }
        i += 1;
    }
    max
};

impl AlgoState {
    /// `state` (a plain algorithm state) holding `share`, its counters at 0.
    pub fn shared(share: Share, state: AlgoState) -> AlgoState {
        AlgoState::Shared(Box::new(Shared {
            share,
            current: state,
            asked: 0,
            admitted: 0,
        }))
    }

    /// The plain algorithm state: the current one of a key that remembers others or holds a
    /// share.
    pub fn plain(self) -> AlgoState {
        match self {
            AlgoState::Remembered(r) => r.current,
            AlgoState::Shared(s) => s.current,
            plain => plain,
        }
    }
}

impl Remembered {
    fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Remembered>()
            + self.current.heap_bytes()
            + self.others.capacity() * std::mem::size_of::<(Policy, AlgoState)>()
            + self
                .others
                .iter()
                .map(|(_, s)| s.heap_bytes())
                .sum::<usize>()
    }
}

impl Limiter {
    /// A limiter of `policy` and `state` (a plain algorithm state).
    pub fn new(policy: Policy, state: AlgoState) -> Limiter {
        Limiter { policy, state }
    }

    /// The limiter a step keeps: `kept.state` under `kept.policy` as the current configuration,
    /// with the others it remembers.
    pub fn kept<A: Stored>(kept: Kept<A>) -> Limiter {
        let policy = kept.policy;
        let current = kept.state.wrap();
        if kept.others.is_empty() {
            return Limiter::new(policy, current);
        }
        let others = kept
            .others
            .into_iter()
            .map(|(p, s)| (p, s.wrap()))
            .collect();
        Limiter::new(
            policy,
            AlgoState::Remembered(Box::new(Remembered { current, others })),
        )
    }

    /// The other configurations this key remembers, most recently current first (empty, without
    /// allocating, for a key that has only one).
    pub fn others(&self) -> &[(Policy, AlgoState)] {
        match &self.state {
            AlgoState::Remembered(r) => &r.others,
            _ => &[],
        }
    }

    /// The other configurations as states of algorithm `A` (the key's own, checked by the
    /// caller; a state of another algorithm, which validation rules out, is left out).
    pub fn others_of<A: Stored>(&self) -> Vec<(Policy, A)> {
        self.others()
            .iter()
            .filter_map(|(p, s)| A::of(s).map(|s| (*p, s.clone())))
            .collect()
    }

    /// The region's share this key holds, if any (see `share`).
    pub fn shared(&self) -> Option<&Shared<AlgoState>> {
        match &self.state {
            AlgoState::Shared(s) => Some(s),
            _ => None,
        }
    }

    pub fn shared_mut(&mut self) -> Option<&mut Shared<AlgoState>> {
        match &mut self.state {
            AlgoState::Shared(s) => Some(s),
            _ => None,
        }
    }

    /// Heap bytes this limiter holds beyond its own struct, for `MEMORY USAGE`.
    pub fn heap_bytes(&self) -> usize {
        self.state.heap_bytes()
    }

    /// The memory this value takes, as `MEMORY USAGE` counts it (the key's overhead aside).
    pub fn value_bytes(&self) -> usize {
        std::mem::size_of::<Limiter>() + self.heap_bytes()
    }

    /// Sliding-log entries held (8 bytes each), in every configuration; 0 for the other
    /// algorithms.
    pub fn log_entries(&self) -> u64 {
        self.state.entries_held()
            + self
                .others()
                .iter()
                .map(|(_, s)| s.entries_held())
                .sum::<u64>()
    }

    /// Appends the encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let others = self.others();
        let shared = self.shared();
        out.push(match (shared, others.is_empty()) {
            (Some(_), _) => FORMAT_SHARED,
            (None, true) => FORMAT,
            (None, false) => FORMAT_REMEMBERED,
        });
        out.push(self.state.tag());
        encode_policy(&self.policy, out);
        self.state.encode(out);
        if let Some(shared) = shared {
            out.extend_from_slice(&shared.share.limit.to_le_bytes());
            out.extend_from_slice(&shared.share.expire_at_ms.to_le_bytes());
        }
        if !others.is_empty() {
            // At most 7: always fits.
            out.push(u8::try_from(others.len()).unwrap_or(u8::MAX));
            for (policy, state) in others {
                encode_policy(policy, out);
                state.encode(out);
            }
        }
    }

    /// Decodes and validates; any malformed, truncated, trailing or out-of-range byte is an error.
    pub fn decode(bytes: &[u8]) -> Result<Limiter, Error> {
        let mut r = Reader(bytes);
        let format = r.u8()?;
        if format != FORMAT && format != FORMAT_REMEMBERED && format != FORMAT_SHARED {
            return Err(Error::BadState("unknown format version"));
        }
        let tag = r.u8()?;
        let policy = decode_policy(&mut r)?;
        let state = AlgoState::decode(tag, &mut r, &policy)?;
        let limiter = if format == FORMAT {
            Limiter::new(policy, state)
        } else if format == FORMAT_SHARED {
            let (limit, expire_at_ms) = (r.u64()?, r.u64()?);
            if !(1..=crate::algo::MAX_LIMIT).contains(&limit)
                || !(1..=share::MAX_EXPIRE_AT_MS).contains(&expire_at_ms)
            {
                return Err(Error::BadState("share out of range"));
            }
            Limiter::new(
                policy,
                AlgoState::shared(
                    Share {
                        limit,
                        expire_at_ms,
                    },
                    state,
                ),
            )
        } else {
            let n = usize::from(r.u8()?);
            if !(1..MAX_CONFIGURATIONS).contains(&n) {
                return Err(Error::BadState("remembered configurations out of range"));
            }
            let mut others: Vec<(Policy, AlgoState)> = Vec::with_capacity(n);
            for _ in 0..n {
                let other = decode_policy(&mut r)?;
                if other == policy || others.iter().any(|(p, _)| *p == other) {
                    return Err(Error::BadState("remembered configuration repeated"));
                }
                let state = AlgoState::decode(tag, &mut r, &other)?;
                others.push((other, state));
            }
            Limiter::new(
                policy,
                AlgoState::Remembered(Box::new(Remembered {
                    current: state,
                    others,
                })),
            )
        };
        if !r.0.is_empty() {
            return Err(Error::BadState("trailing bytes"));
        }
        Ok(limiter)
    }
}

fn encode_policy(policy: &Policy, out: &mut Vec<u8>) {
    for n in [policy.limit(), policy.window_ms(), policy.capacity()] {
        out.extend_from_slice(&n.to_le_bytes());
    }
}

fn decode_policy(r: &mut Reader<'_>) -> Result<Policy, Error> {
    let (limit, window_ms, capacity) = (r.u64()?, r.u64()?, r.u64()?);
    Policy::new(limit, window_ms, capacity).map_err(|_| Error::BadState("policy out of range"))
}

pub use crate::algo::bytes::Reader;

#[cfg(test)]
mod tests;
