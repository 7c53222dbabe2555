//! The policy a limiter keeps (L per W plus a burst B), its bounds, and the exact arithmetic
//! of units every continuously refilling algorithm counts in.
//!
//! Exact arithmetic: every algorithm that refills continuously counts in *units*, where one
//! nanosecond is worth `limit` units and one token is worth `window_ns` units. A rate of L per W is
//! then exactly one token per `window_ns` units, with no division and no rounding, for any L and W.
//! The bounds on the policy keep every product below 2^128.

/// Largest accepted L, BURST and COST.
pub const MAX_LIMIT: u64 = 1_000_000_000_000;
/// Largest accepted window, in milliseconds (about 31.7 years).
pub const MAX_WINDOW_MS: u64 = 1_000_000_000_000;
/// Largest time a limiter may take to go from empty to full (BURST × W / L), in milliseconds.
/// It keeps every instant the algorithms compute inside a u64 of nanoseconds.
pub const MAX_REFILL_MS: u64 = MAX_WINDOW_MS;

pub(super) const NS_PER_MS: u64 = 1_000_000;

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

    /// The policy nearest to L per W ms with capacity B that [`Policy::new`] accepts: L and W
    /// each brought into its range, and B into `1..=` the most that refills within
    /// [`MAX_REFILL_MS`] (at least L, since W ≤ `MAX_REFILL_MS`). For a caller that must decide
    /// whatever it was configured with (the client's local fallback), where the store would
    /// refuse the policy.
    pub fn nearest(limit: u64, window_ms: u64, capacity: u64) -> Policy {
        let limit = limit.clamp(1, MAX_LIMIT);
        let window_ms = window_ms.clamp(1, MAX_WINDOW_MS);
        let most = u128::from(MAX_REFILL_MS) * u128::from(limit) / u128::from(window_ms);
        let most = u64::try_from(most).unwrap_or(MAX_LIMIT).min(MAX_LIMIT);
        let capacity = capacity.clamp(1, most.max(1));
        let ((limit_low, l), (window_ms_low, w), (capacity_low, b)) =
            (split(limit), split(window_ms), split(capacity));
        Policy {
            limit_low,
            window_ms_low,
            capacity_low,
            high: l | w << 8 | b << 16,
        }
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

#[cfg(test)]
mod tests {
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
