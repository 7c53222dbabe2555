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

    /// The admit of `cost` on `limiter`, a key of this algorithm that remembers other
    /// configurations, under the policy it holds as current, planned without changing it (see
    /// [`in_place::IntoDelta::plan_remembered`]): None where `algo::step` must decide.
    fn plan_remembered(limiter: &Limiter, now_ns: u64, cost: u64) -> Option<in_place::Remembering> {
        <Self::Change as IntoDelta>::plan_remembered(limiter, now_ns, cost)
    }
}

/// Work done on a stored state of any algorithm (see [`AlgoState::visit`]).
pub trait Visit {
    type Out;
    fn visit<A: Stored>(self, state: &mut A) -> Self::Out;
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
            Shared(Box<Shared>),
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
                    AlgoState::Shared(s) => std::mem::size_of::<Shared>() + s.current.heap_bytes(),
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
    pub fn shared(&self) -> Option<&Shared> {
        match &self.state {
            AlgoState::Shared(s) => Some(s),
            _ => None,
        }
    }

    pub fn shared_mut(&mut self) -> Option<&mut Shared> {
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
mod tests {
    use super::*;
    use crate::algo::props::{
        assert_covers_registry, run, trace_strategy, window_policy_strategy, T0,
    };
    use crate::algo::MAX_LIMIT;
    use crate::algo::{fixed_window, sliding_counter, sliding_log, token_bucket};
    use proptest::prelude::*;

    fn gcra() -> Limiter {
        Limiter {
            policy: Policy::new(10, 1000, 20).unwrap(),
            state: AlgoState::Gcra(Gcra { tat: 12345 }),
        }
    }

    #[test]
    fn round_trip() {
        let mut buf = Vec::new();
        gcra().encode(&mut buf);
        assert_eq!(buf.len(), 2 + 24 + 16);
        assert_eq!(Limiter::decode(&buf), Ok(gcra()));
    }

    #[test]
    fn rejects_garbage() {
        let mut buf = Vec::new();
        gcra().encode(&mut buf);
        for cut in 0..buf.len() {
            assert!(
                Limiter::decode(&buf[..cut]).is_err(),
                "prefix of {cut} bytes"
            );
        }
        let mut long = buf.clone();
        long.push(0);
        assert_eq!(
            Limiter::decode(&long),
            Err(Error::BadState("trailing bytes"))
        );
        let mut zero_limit = buf.clone();
        zero_limit[2..10].fill(0);
        assert_eq!(
            Limiter::decode(&zero_limit),
            Err(Error::BadState("policy out of range"))
        );
        let mut bad_tag = buf;
        bad_tag[1] = 99;
        assert_eq!(
            Limiter::decode(&bad_tag),
            Err(Error::BadState("unknown algorithm"))
        );
    }

    /// A GCRA key that remembers two other configurations.
    fn remembered() -> Limiter {
        let other = |l: u64, tat: u128| {
            (
                Policy::new(l, 1000, l).unwrap(),
                AlgoState::Gcra(Gcra { tat }),
            )
        };
        Limiter::new(
            Policy::new(10, 1000, 20).unwrap(),
            AlgoState::Remembered(Box::new(Remembered {
                current: AlgoState::Gcra(Gcra { tat: 12345 }),
                others: vec![other(5, 777), other(7, 999)],
            })),
        )
    }

    #[test]
    fn remembered_configurations_round_trip_and_are_validated() {
        let limiter = remembered();
        let mut buf = Vec::new();
        limiter.encode(&mut buf);
        assert_eq!(buf[0], 2);
        assert_eq!(buf.len(), 2 + 24 + 16 + 1 + 2 * (24 + 16));
        assert_eq!(Limiter::decode(&buf), Ok(limiter.clone()));
        assert_eq!(limiter.others().len(), 2);
        assert_eq!(limiter.state.tag(), 1);
        for cut in 0..buf.len() {
            assert!(Limiter::decode(&buf[..cut]).is_err(), "prefix of {cut}");
        }
        let n_at = 2 + 24 + 16;
        let edited = |at: usize, bytes: &[u8]| {
            let mut b = buf.clone();
            b[at..at + bytes.len()].copy_from_slice(bytes);
            b
        };
        for n in [0u8, 3, 4, 255] {
            assert!(Limiter::decode(&edited(n_at, &[n])).is_err(), "n = {n}");
        }
        // The second remembered policy made equal to the first, then the first to the current.
        let policy = |l: u64, w: u64, b: u64| [l, w, b].map(u64::to_le_bytes).concat();
        let first_l = n_at + 1;
        let second_l = first_l + 40;
        for (at, bytes) in [
            (second_l, policy(5, 1000, 5)),
            (first_l, policy(10, 1000, 20)),
        ] {
            assert_eq!(
                Limiter::decode(&edited(at, &bytes)),
                Err(Error::BadState("remembered configuration repeated"))
            );
        }
        // Format 1 with the same bytes has trailing bytes.
        assert_eq!(
            Limiter::decode(&edited(0, &[1])),
            Err(Error::BadState("trailing bytes"))
        );
    }

    /// A GCRA key holding a region's share: format 3 round-trips (the counters, memory only,
    /// are not encoded) and every truncation or out-of-range share is refused.
    #[test]
    fn shared_round_trips_and_is_validated() {
        let share = Share {
            limit: 7,
            expire_at_ms: 4_000_000_000_000,
        };
        let mut limiter = Limiter::new(
            Policy::new(7, 1000, 14).unwrap(),
            AlgoState::shared(share, AlgoState::Gcra(Gcra { tat: 99 })),
        );
        if let Some(s) = limiter.shared_mut() {
            s.asked = 5;
        }
        let mut buf = Vec::new();
        limiter.encode(&mut buf);
        assert_eq!(buf[0], 3);
        assert_eq!(buf.len(), 2 + 24 + 16 + 16);
        let decoded = Limiter::decode(&buf).unwrap();
        assert_eq!(decoded, limiter);
        assert_eq!(decoded.shared().map(|s| s.asked), Some(0));
        for cut in 0..buf.len() {
            assert!(Limiter::decode(&buf[..cut]).is_err(), "prefix of {cut}");
        }
        let at = 2 + 24 + 16;
        for (offset, n) in [
            (0, 0),
            (0, crate::algo::MAX_LIMIT + 1),
            (8, 0),
            (8, u64::MAX),
        ] {
            let mut bad = buf.clone();
            bad[at + offset..at + offset + 8].copy_from_slice(&n.to_le_bytes());
            assert_eq!(
                Limiter::decode(&bad),
                Err(Error::BadState("share out of range"))
            );
        }
        // Version 1's bytes still load as they did.
        let mut plain = Vec::new();
        gcra().encode(&mut plain);
        assert_eq!(plain[0], 1);
        assert_eq!(Limiter::decode(&plain), Ok(gcra()));
    }

    fn window(l: u64, w: u64) -> Policy {
        Policy::new(l, w, l).unwrap()
    }

    const NS: u64 = 1_800_000_000_000_000_000;

    /// One limiter of each window algorithm, as their own `check` leaves them.
    fn window_limiters() -> Vec<Limiter> {
        let p = window(10, 1000);
        let log = sliding_log::check(None, &p, NS, 3).next.unwrap();
        let log = sliding_log::check(Some(&log), &p, NS + 7, 2).next.unwrap();
        vec![
            Limiter {
                policy: p,
                state: AlgoState::SlidingLog(log),
            },
            Limiter {
                policy: p,
                state: AlgoState::SlidingCounter(SlidingCounter {
                    start_ns: NS,
                    prev: 10,
                    curr: 4,
                }),
            },
            Limiter {
                policy: p,
                state: AlgoState::FixedWindow(FixedWindow {
                    start_ns: NS,
                    count: 7,
                }),
            },
        ]
    }

    #[test]
    fn window_algorithms_round_trip() {
        let sizes = [2 + 24 + 8 + 4 + 2 * 8, 2 + 24 + 24, 2 + 24 + 16];
        for (limiter, size) in window_limiters().into_iter().zip(sizes) {
            let mut buf = Vec::new();
            limiter.encode(&mut buf);
            assert_eq!(buf.len(), size, "{}", limiter.state.name());
            assert_eq!(Limiter::decode(&buf), Ok(limiter.clone()));
            for cut in 0..buf.len() {
                assert!(Limiter::decode(&buf[..cut]).is_err(), "prefix of {cut}");
            }
            let mut long = buf.clone();
            long.extend_from_slice(&[0; 8]);
            assert!(Limiter::decode(&long).is_err(), "trailing bytes");
        }
    }

    #[test]
    fn window_algorithms_reject_nonsense() {
        let [log, counter, fixed] = <[Limiter; 3]>::try_from(window_limiters()).unwrap();
        // The encoding of `l` with the bytes at `at` replaced. The algorithm's fields start after
        // [format][tag][L][W][B], at 26.
        let edited = |l: &Limiter, at: usize, bytes: &[u8]| {
            let mut buf = Vec::new();
            l.encode(&mut buf);
            buf[at..at + bytes.len()].copy_from_slice(bytes);
            buf
        };
        let n = |n: u64| n.to_le_bytes();
        let mut first_entry_count_0 = edited(&log, 34, &1u32.to_le_bytes());
        first_entry_count_0.truncate(first_entry_count_0.len() - 8);
        first_entry_count_0[38..46].copy_from_slice(&n(0));
        let second_entry_first = {
            let mut buf = Vec::new();
            log.encode(&mut buf);
            buf.copy_within(46..54, 38);
            buf
        };
        let cases = [
            (edited(&fixed, 18, &n(11)), "window limiter with a burst"),
            (edited(&fixed, 26, &n(NS + 1)), "fixed window not aligned"),
            (
                edited(&fixed, 34, &n(MAX_LIMIT + 1)),
                "fixed window count out of range",
            ),
            (
                edited(&counter, 26, &n(NS + 5)),
                "sliding counter window not aligned",
            ),
            (
                edited(&counter, 34, &n(MAX_LIMIT + 1)),
                "sliding counter count out of range",
            ),
            (
                edited(&counter, 42, &n(MAX_LIMIT + 1)),
                "sliding counter count out of range",
            ),
            (
                edited(&log, 34, &11u32.to_le_bytes()),
                "sliding log entry count out of range",
            ),
            (
                edited(&log, 34, &u32::MAX.to_le_bytes()),
                "sliding log entry count out of range",
            ),
            (
                edited(&log, 38, &n((1 << 20) - 1)),
                "sliding log total out of range",
            ),
            (first_entry_count_0, "sliding log entry with count 0"),
            (second_entry_first, "sliding log entries out of order"),
        ];
        for (bytes, why) in cases {
            assert_eq!(Limiter::decode(&bytes), Err(Error::BadState(why)), "{why}");
        }
    }

    /// A shaper as `RL.SHAPE` leaves it: 1 per second, queue 5, DELAY 2, three queued.
    fn shaper() -> Limiter {
        let p = Policy::new(1, 1000, 6).unwrap();
        let s = crate::algo::shape::check(Some(&Shape::configured(None, 2)), &p, NS, 3);
        Limiter {
            policy: p,
            state: AlgoState::Shape(s.outcome.next.unwrap()),
        }
    }

    #[test]
    fn shaper_round_trips_and_rejects_nonsense() {
        let limiter = shaper();
        let mut buf = Vec::new();
        limiter.encode(&mut buf);
        assert_eq!(buf.len(), 2 + 24 + 16 + 8);
        assert_eq!(buf[1], 6);
        assert_eq!(Limiter::decode(&buf), Ok(limiter));
        for cut in 0..buf.len() {
            assert!(Limiter::decode(&buf[..cut]).is_err(), "prefix of {cut}");
        }
        let mut long = buf.clone();
        long.push(0);
        assert_eq!(
            Limiter::decode(&long),
            Err(Error::BadState("trailing bytes"))
        );
        let edited = |at: usize, bytes: &[u8]| {
            let mut b = buf.clone();
            b[at..at + bytes.len()].copy_from_slice(bytes);
            b
        };
        // d = 6 with a queue of 5 (capacity 6); the largest valid d is 5.
        assert_eq!(
            Limiter::decode(&edited(42, &6u64.to_le_bytes())),
            Err(Error::BadState("leaky bucket DELAY above its queue"))
        );
        assert!(Limiter::decode(&edited(42, &5u64.to_le_bytes())).is_ok());
        assert_eq!(
            Limiter::decode(&edited(26, &u128::MAX.to_le_bytes())),
            Err(Error::BadState("leaky bucket arrival time out of range"))
        );
        // A capacity of 1 (no queue) leaves no room for any d but 0.
        assert_eq!(
            Limiter::decode(&edited(18, &1u64.to_le_bytes())),
            Err(Error::BadState("leaky bucket DELAY above its queue"))
        );
    }

    /// One limiter of every algorithm of the registry, as their own `check` leaves them.
    fn one_of_each() -> Vec<Limiter> {
        let p = Policy::new(10, 1000, 20).unwrap();
        let bucket = Limiter {
            policy: p,
            state: AlgoState::TokenBucket(token_bucket::check(None, &p, NS, 3).next.unwrap()),
        };
        let mut limiters = vec![gcra(), bucket];
        limiters.extend(window_limiters());
        limiters.push(shaper());
        let n = Policy::new(3, 1000, 3).unwrap();
        let holding = crate::algo::concurrency::check(None, &n, NS, 2)
            .next
            .unwrap();
        limiters.push(Limiter::new(n, AlgoState::Concurrency(holding)));
        limiters
    }

    #[test]
    fn one_of_each_covers_the_registry() {
        let tags: Vec<u8> = one_of_each().iter().map(|l| l.state.tag()).collect();
        assert_covers_registry("one_of_each()", &tags);
    }

    /// The inline size of the enum: the window algorithms do not make every limiter bigger.
    #[test]
    fn state_stays_small() {
        assert!(std::mem::size_of::<SlidingLog>() <= 24);
        // The tag takes one alignment unit (8 bytes since the u128 states are packed(8)).
        assert_eq!(
            std::mem::size_of::<AlgoState>(),
            std::mem::size_of::<TokenBucket>() + std::mem::align_of::<AlgoState>()
        );
    }

    /// Encodes, decodes, and checks the bytes are the only encoding of that state.
    fn round_trips(limiter: Limiter) -> Result<(), TestCaseError> {
        let mut buf = Vec::new();
        limiter.encode(&mut buf);
        prop_assert_eq!(Limiter::decode(&buf), Ok(limiter));
        Ok(())
    }

    proptest! {
        /// Every state the window algorithms store, and every state a policy change carries
        /// over, passes validation and round-trips.
        #[test]
        fn window_states_round_trip(
            p in window_policy_strategy(),
            p2 in window_policy_strategy(),
            trace in trace_strategy(20),
        ) {
            let trace: Vec<_> = trace.into_iter().map(|(g, c)| (g, c.min(p.limit()))).collect();
            let end = T0 + trace.iter().map(|t| t.0).sum::<u64>();
            let (_, steps) = run(&trace, |s, now, cost| sliding_log::check(s, &p, now, cost));
            for log in steps.into_iter().filter_map(|s| s.before) {
                let moved = sliding_log::rescale(&log, &p, &p2, end);
                round_trips(Limiter { policy: p2, state: AlgoState::SlidingLog(moved) })?;
                let refunded = sliding_log::refund(&log, &p, end, 2);
                round_trips(Limiter { policy: p, state: AlgoState::SlidingLog(refunded) })?;
                round_trips(Limiter { policy: p, state: AlgoState::SlidingLog(log) })?;
            }
            let (_, steps) = run(&trace, |s, now, cost| sliding_counter::check(s, &p, now, cost));
            for c in steps.into_iter().filter_map(|s| s.before) {
                let moved = sliding_counter::rescale(&c, &p, &p2, end);
                round_trips(Limiter { policy: p2, state: AlgoState::SlidingCounter(moved) })?;
                let refunded = sliding_counter::refund(&c, &p, end, 2);
                round_trips(Limiter { policy: p, state: AlgoState::SlidingCounter(refunded) })?;
                round_trips(Limiter { policy: p, state: AlgoState::SlidingCounter(c) })?;
            }
            let (_, steps) = run(&trace, |s, now, cost| fixed_window::check(s, &p, now, cost));
            for f in steps.into_iter().filter_map(|s| s.before) {
                let moved = fixed_window::rescale(&f, &p, &p2, end);
                round_trips(Limiter { policy: p2, state: AlgoState::FixedWindow(moved) })?;
                let refunded = fixed_window::refund(&f, &p, end, 2);
                round_trips(Limiter { policy: p, state: AlgoState::FixedWindow(refunded) })?;
                round_trips(Limiter { policy: p, state: AlgoState::FixedWindow(f) })?;
            }
        }

        /// A mutated valid encoding either fails to decode or decodes to a state whose encoding
        /// is exactly those bytes (one encoding per state: replicas compare bytes).
        #[test]
        fn mutated_encodings_are_refused_or_canonical(
            which in any::<prop::sample::Index>(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let mut limiters = one_of_each();
            let limiter = limiters.swap_remove(which.index(limiters.len()));
            let mut buf = Vec::new();
            limiter.encode(&mut buf);
            let i = at.index(buf.len());
            buf[i] = byte;
            if let Ok(decoded) = Limiter::decode(&buf) {
                let mut again = Vec::new();
                decoded.encode(&mut again);
                prop_assert_eq!(again, buf);
            }
        }

        #[test]
        fn decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..120)) {
            let _ = Limiter::decode(&bytes);
        }
    }
}
