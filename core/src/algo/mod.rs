//! Pure rate-limiting algorithms: numbers in, a decision and the next state out.
//!
//! Nothing here knows about Redis. Time is an argument (`now_ns`, nanoseconds since the Unix
//! epoch), so tests drive it by hand.
//!
//! Exact arithmetic: every algorithm that refills continuously counts in *units*, where one
//! nanosecond is worth `limit` units and one token is worth `window_ns` units. A rate of L per W is
//! then exactly one token per `window_ns` units, with no division and no rounding, for any L and W.
//! The bounds on the policy keep every product below 2^128.

pub mod bytes;
pub mod concurrency;
pub mod fixed_window;
pub mod gcra;
pub mod lease;
pub mod listed;
pub mod settle;
pub mod shape;
pub mod sliding_counter;
pub mod sliding_log;
pub mod step;
pub mod token_bucket;

/// Largest accepted L, BURST and COST.
pub const MAX_LIMIT: u64 = 1_000_000_000_000;
/// Largest accepted window, in milliseconds (about 31.7 years).
pub const MAX_WINDOW_MS: u64 = 1_000_000_000_000;
/// Largest time a limiter may take to go from empty to full (BURST × W / L), in milliseconds.
/// It keeps every instant the algorithms compute inside a u64 of nanoseconds.
pub const MAX_REFILL_MS: u64 = MAX_WINDOW_MS;

const NS_PER_MS: u64 = 1_000_000;

/// The promise a limiter keeps: no key gets more than `limit` requests in any window of
/// `window_ms` milliseconds, plus a burst: the `capacity` (B, the `BURST` option) is how many may
/// pass at once after idle. The window algorithms have capacity L.
///
/// Fields are private so that a `Policy` always holds values within the bounds above.
///
/// Every stored limiter holds one, so it is packed: L, W and B are each below 2^40, kept as their
/// low 32 bits and one word holding the next 8 bits of each. 16 bytes instead of 24 is what lets
/// a stored limiter fit jemalloc's 48-byte size class (see `state::Limiter`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    limit_low: u32,
    window_ms_low: u32,
    capacity_low: u32,
    /// Bits 32..40 of L (bits 0..8 here), of W (8..16) and of B (16..24).
    high: u32,
}

const _: () = assert!(MAX_LIMIT < 1 << 40 && MAX_WINDOW_MS < 1 << 40);

/// The low 32 bits of `n` and its bits 32..40 (the caller guarantees n < 2^40).
fn split(n: u64) -> (u32, u32) {
    // Both masked values fit a u32: the casts are exact.
    ((n & 0xffff_ffff) as u32, ((n >> 32) & 0xff) as u32)
}

/// The inverse of `split`, from the low word and the 8-bit field at `shift` in `high`.
fn join(low: u32, high: u32, shift: u32) -> u64 {
    u64::from(low) | u64::from((high >> shift) & 0xff) << 32
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("limit", &self.limit())
            .field("window_ms", &self.window_ms())
            .field("capacity", &self.capacity())
            .finish()
    }
}

/// Why a policy was refused; the command layer turns it into a Redis error naming the argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyError {
    Limit,
    Window,
    Capacity,
    /// BURST × W / L is longer than [`MAX_REFILL_MS`].
    RefillTooSlow,
}

impl Policy {
    pub fn new(limit: u64, window_ms: u64, capacity: u64) -> Result<Policy, PolicyError> {
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(PolicyError::Limit);
        }
        if !(1..=MAX_WINDOW_MS).contains(&window_ms) {
            return Err(PolicyError::Window);
        }
        if !(1..=MAX_LIMIT).contains(&capacity) {
            return Err(PolicyError::Capacity);
        }
        // capacity * window / limit <= MAX_REFILL_MS, compared without division.
        if u128::from(capacity) * u128::from(window_ms)
            > u128::from(MAX_REFILL_MS) * u128::from(limit)
        {
            return Err(PolicyError::RefillTooSlow);
        }
        let ((limit_low, l), (window_ms_low, w), (capacity_low, b)) =
            (split(limit), split(window_ms), split(capacity));
        Ok(Policy {
            limit_low,
            window_ms_low,
            capacity_low,
            high: l | w << 8 | b << 16,
        })
    }

    pub fn limit(&self) -> u64 {
        join(self.limit_low, self.high, 0)
    }

    pub fn window_ms(&self) -> u64 {
        join(self.window_ms_low, self.high, 8)
    }

    /// B: how many may pass at once after idle. The window algorithms store `limit` here.
    pub fn capacity(&self) -> u64 {
        join(self.capacity_low, self.high, 16)
    }

    pub fn window_ns(&self) -> u64 {
        self.window_ms() * NS_PER_MS
    }

    /// Units in one token (see the module comment): the window in nanoseconds.
    pub fn units_per_token(&self) -> u128 {
        u128::from(self.window_ns())
    }

    /// Units in one nanosecond: the limit.
    pub fn units_per_ns(&self) -> u128 {
        u128::from(self.limit())
    }

    /// The start of the window that contains `now_ns`, windows being aligned to the Unix epoch
    /// (so every shard and replica agrees on the boundaries).
    pub fn window_start(&self, now_ns: u64) -> u64 {
        // window_ns >= 1 ms: never a division by zero.
        now_ns - now_ns % self.window_ns()
    }

    /// `now_ns` expressed in units.
    pub fn units_at(&self, now_ns: u64) -> u128 {
        u128::from(now_ns) * self.units_per_ns()
    }

    /// A duration in units, as nanoseconds rounded up (never shorter than the truth), saturating.
    pub fn ns_ceil(&self, units: u128) -> u64 {
        u64::try_from(units.div_ceil(self.units_per_ns())).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod policy_tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn policy_packing_keeps_every_bit() {
        let edges = [
            1,
            2,
            (1 << 32) - 1,
            1 << 32,
            (1 << 32) + 1,
            0xe7_ffff_ffff,
            MAX_LIMIT,
        ];
        for l in edges {
            for w in edges {
                for b in edges {
                    if let Ok(p) = Policy::new(l, w, b) {
                        assert_eq!((p.limit(), p.window_ms(), p.capacity()), (l, w, b));
                    }
                }
            }
        }
        assert_eq!(std::mem::size_of::<Policy>(), 16);
    }

    proptest! {
        #[test]
        fn policy_round_trips(l in 1..=MAX_LIMIT, w in 1..=MAX_WINDOW_MS, b in 1..=MAX_LIMIT) {
            if let Ok(p) = Policy::new(l, w, b) {
                prop_assert_eq!((p.limit(), p.window_ms(), p.capacity()), (l, w, b));
                prop_assert_eq!(Policy::new(l, w, b), Ok(p));
            }
        }
    }
}

/// What a limiter answers for one request. Durations are exact nanoseconds, rounded up.
/// The command layer turns it into the five-integer reply (`capacity` is the reply's `limit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// How much was admitted: 1 or 0 for a request (admitted or denied). A lease sets it to the
    /// tokens granted and a refund to the tokens given back: the reply's first field is always
    /// "how much this call moved".
    pub allowed: u64,
    /// The capacity: BURST for the bucket algorithms, L for the window algorithms.
    pub capacity: u64,
    /// How many more cost-1 requests would be admitted right now.
    pub remaining: u64,
    /// None when admitted; else the time until this request would be admitted.
    pub retry_after_ns: Option<u64>,
    /// Time until the limiter is back to full capacity (0 when it is full).
    pub reset_after_ns: u64,
}

/// A decision, and the state to store when the decision changed it (None: store nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome<S> {
    pub decision: Decision,
    pub next: Option<S>,
}

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
        $crate::algo::algorithm!($state, name: $name, id: $id, tag: $tag, burst: $burst,
            type Change = ();
        );
    };
    ($state:ty, name: $name:literal, id: $id:literal, tag: $tag:literal, burst: $burst:literal, $($item:tt)*) => {
        impl $crate::algo::Algorithm for $state {
            const NAME: &'static str = $name;
            const ID: &'static str = $id;
            const TAG: u8 = $tag;
            const BURST: bool = $burst;

            fn check(
                state: Option<&Self>,
                policy: &$crate::algo::Policy,
                now_ns: u64,
                cost: u64,
            ) -> $crate::algo::Outcome<Self> {
                check(state, policy, now_ns, cost)
            }

            fn rescale(&self, from: &$crate::algo::Policy, to: &$crate::algo::Policy, now_ns: u64) -> Self {
                rescale(self, from, to, now_ns)
            }

            fn refund(&self, policy: &$crate::algo::Policy, now_ns: u64, n: u64) -> Self {
                refund(self, policy, now_ns, n)
            }

            fn charge(&self, policy: &$crate::algo::Policy, now_ns: u64, n: u64) -> Self {
                charge(self, policy, now_ns, n)
            }

            fn counted(&self, policy: &$crate::algo::Policy, now_ns: u64) -> u128 {
                counted(self, policy, now_ns)
            }

            fn inspect(&self, policy: &$crate::algo::Policy, now_ns: u64) -> Vec<$crate::algo::Field> {
                inspect(self, policy, now_ns)
            }

            fn encode(&self, out: &mut Vec<u8>) {
                encode(self, out)
            }

            fn decode(
                r: &mut $crate::algo::bytes::Reader<'_>,
                policy: &$crate::algo::Policy,
            ) -> Result<Self, $crate::algo::bytes::Invalid> {
                decode(r, policy)
            }

            $($item)*
        }
    };
}
pub(crate) use algorithm;

/// The registry: every algorithm, once. Adding an algorithm is its pure file (with its
/// `algorithm!` line: error name, INFO id, stored tag, whether it takes BURST) and one line here:
/// its module, its state type, the word that names it in commands (`RL.<WORD>`, and inside
/// `RL.ALL`), its keyspace event, how its command answers (`limiter`: the five integers of
/// `limit::request`, also offered inside `RL.ALL`; `shaper`: `RL.SHAPE`'s own handler;
/// `concurrency`: `RL.CONCURRENCY`'s holders, its own handler), and its
/// command's summary. The stored enum, its dispatch and encoding, the INFO ids, the command
/// table and `RL.ALL`'s table are generated from it (`registry!(some_macro)` hands the list to
/// `some_macro`); tags are never reused.
#[macro_export]
macro_rules! registry {
    ($then:ident) => {
        $then! {
            gcra::Gcra, "GCRA", c"rl.gcra", limiter,
                "Decides one request with GCRA: at most L per W ms plus a burst of B";
            token_bucket::TokenBucket, "TOKENBUCKET", c"rl.tokenbucket", limiter,
                "Decides one request with a token bucket: at most L per W ms plus a burst of B";
            sliding_log::SlidingLog, "SLIDINGLOG", c"rl.slidinglog", limiter,
                "Decides one request with a sliding log: never more than L in any W ms";
            sliding_counter::SlidingCounter, "SLIDINGCOUNTER", c"rl.slidingcounter", limiter,
                "Decides one request with a sliding window counter (two weighted windows)";
            fixed_window::FixedWindow, "FIXEDWINDOW", c"rl.fixedwindow", limiter,
                "Decides one request with a fixed window counter: at most L per aligned W ms";
            shape::Shape, "SHAPE", c"rl.shape", shaper,
                "Shapes with a leaky bucket queue (nginx limit_req): admits with the delay to wait, or denies";
            concurrency::Concurrency, "CONCURRENCY", c"rl.concurrency", concurrency,
                "Bounds requests in flight: at most N holders at once, each expiring TTL ms after its last ACQUIRE or RENEW";
        }
    };
}
pub use crate::registry;

/// Nanoseconds rounded up to whole milliseconds, so a client that waits this long is not early.
pub fn ms_ceil(ns: u64) -> u64 {
    ns.div_ceil(NS_PER_MS)
}

/// Milliseconds as nanoseconds, saturating (the clock layer never hands out such instants).
pub fn ms_to_ns(ms: u64) -> u64 {
    ms.saturating_mul(NS_PER_MS)
}

/// Converts an amount of tokens counted in `from`'s units into `to`'s units, so that what was
/// already spent carries over when a key's policy changes. Rounds up when `round_up` (a debt must
/// never shrink), down otherwise (a balance must never grow); saturates instead of overflowing.
pub fn rescale_units(units: u128, from: &Policy, to: &Policy, round_up: bool) -> u128 {
    let (from_token, to_token) = (from.units_per_token(), to.units_per_token());
    let (whole, part) = (units / from_token, units % from_token);
    // part < from_token <= 10^18 and to_token <= 10^18, so the product fits in a u128.
    let scaled_part = part * to_token;
    let part_units = if round_up {
        scaled_part.div_ceil(from_token)
    } else {
        scaled_part / from_token
    };
    whole.saturating_mul(to_token).saturating_add(part_units)
}

/// One field of `RL.INSPECT`: its name and an integer in human units (milliseconds, tokens,
/// requests). Instants are given relative to now: positive in the future, negative in the past.
pub type Field = (&'static str, i64);

/// `at_ns − now_ns` in milliseconds, rounded up (toward the future), saturating.
pub fn relative_ms(at_ns: u128, now_ns: u64) -> i64 {
    let diff = i128::try_from(at_ns)
        .unwrap_or(i128::MAX)
        .saturating_sub(i128::from(now_ns));
    let ms = NS_PER_MS as i128;
    // Division truncates toward zero: that is already up for a negative difference.
    let up = diff / ms + i128::from(diff % ms > 0);
    i64::try_from(up).unwrap_or(if up < 0 { i64::MIN } else { i64::MAX })
}

/// `units` in thousandths of a token, rounded up when `round_up`, saturating.
pub fn millitokens(units: u128, policy: &Policy, round_up: bool) -> i64 {
    let scaled = units.saturating_mul(1000);
    let per_token = policy.units_per_token();
    let milli = if round_up {
        scaled.div_ceil(per_token)
    } else {
        scaled / per_token
    };
    i64::try_from(milli).unwrap_or(i64::MAX)
}

/// An inspection: the policy, the algorithm's own `state` fields, then what a cost-1 request
/// would be answered now (`peek`: the algorithm's `check` with cost 0).
pub fn inspection(policy: &Policy, state: Vec<Field>, peek: &Decision) -> Vec<Field> {
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let mut fields = vec![
        ("limit", int(policy.limit())),
        ("window_ms", int(policy.window_ms())),
        ("burst", int(policy.capacity())),
    ];
    fields.extend(state);
    fields.extend([
        ("remaining", int(peek.remaining)),
        (
            "retry_after_ms",
            peek.retry_after_ns.map_or(-1, |ns| int(ms_ceil(ns))),
        ),
        ("reset_after_ms", int(ms_ceil(peek.reset_after_ns))),
    ]);
    fields
}

#[cfg(test)]
mod inspect_tests {
    use super::*;

    #[test]
    fn relative_ms_rounds_toward_the_future() {
        let now = 10 * NS_PER_MS;
        assert_eq!(relative_ms(u128::from(now), now), 0);
        assert_eq!(relative_ms(u128::from(now + 1), now), 1);
        assert_eq!(relative_ms(u128::from(now + NS_PER_MS), now), 1);
        assert_eq!(relative_ms(u128::from(now - 1), now), 0);
        assert_eq!(relative_ms(u128::from(now - NS_PER_MS - 1), now), -1);
        assert_eq!(relative_ms(u128::MAX, now), i64::MAX);
        assert_eq!(relative_ms(0, u64::MAX), -18_446_744_073_709);
    }

    #[test]
    fn millitokens_round_as_asked() {
        let p = Policy::new(3, 1000, 3).unwrap();
        let third = p.units_per_token() / 3;
        assert_eq!(millitokens(third, &p, false), 333);
        assert_eq!(millitokens(third, &p, true), 334);
        assert_eq!(millitokens(3 * p.units_per_token(), &p, false), 3000);
        assert_eq!(millitokens(u128::MAX, &p, false), i64::MAX);
    }

    use super::props::{
        for_each_algorithm, policy_of, policy_strategy, run, trace_strategy,
        window_policy_strategy, EachAlgorithm, Promised,
    };
    use proptest::prelude::*;

    /// Every state a trace leaves, inspected now, later and after the clock stepped back: the
    /// policy comes first, the last three fields are exactly the peek's answer, nothing panics.
    fn inspect_agrees<A: Algorithm>(p: &Policy, trace: &[(u64, u64)]) -> Result<(), TestCaseError> {
        let trace: Vec<_> = trace
            .iter()
            .map(|&(g, c)| (g, c.min(p.capacity())))
            .collect();
        let (_, steps) = run(&trace, |s: Option<&A>, now, cost| A::check(s, p, now, cost));
        for step in steps {
            let Some(state) = step.before else { continue };
            for at in [
                step.now,
                step.now + 3 * p.window_ns(),
                step.now - 1_000_000_000,
            ] {
                let fields = state.inspect(p, at);
                let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
                prop_assert_eq!(
                    &fields[..3],
                    &[
                        ("limit", int(p.limit())),
                        ("window_ms", int(p.window_ms())),
                        ("burst", int(p.capacity()))
                    ]
                );
                let peek = A::check(Some(&state), p, at, 0).decision;
                let tail = inspection(p, Vec::new(), &peek);
                prop_assert_eq!(&fields[fields.len() - 3..], &tail[3..]);
            }
        }
        Ok(())
    }

    /// [`inspect_agrees`] for each algorithm, under the policy of its kind.
    struct InspectAgrees<'a> {
        bucket: &'a Policy,
        window: &'a Policy,
        trace: &'a [(u64, u64)],
    }

    impl EachAlgorithm for InspectAgrees<'_> {
        fn run<A: Promised>(&mut self) -> Result<(), TestCaseError> {
            inspect_agrees::<A>(policy_of::<A>(self.bucket, self.window), self.trace)
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        /// For every algorithm of the registry.
        #[test]
        fn inspect_agrees_with_the_peek(
            p in policy_strategy(),
            w in window_policy_strategy(),
            trace in trace_strategy(20),
        ) {
            for_each_algorithm(&mut InspectAgrees { bucket: &p, window: &w, trace: &trace })?;
        }
    }
}

/// Property-test helpers and the promises' property tests (the state module reuses the helpers).
#[cfg(any(test, feature = "props"))]
pub mod props;
