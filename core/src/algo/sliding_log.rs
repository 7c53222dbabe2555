//! Sliding log: the exact rolling window. It remembers when admitted requests arrived and admits
//! a request of cost n when the cost that arrived in the last W, plus n, is at most L: never more
//! than L in any interval of length W.
//!
//! Terms:
//! - `entry`: one distinct arrival instant and the cost admitted at it (a `COST 5` request is one
//!   entry of count 5; requests at the same instant share one). An entry at T counts against a
//!   decision at `now` while `now − W < T`, and has left the window from `T + W` on.
//! - `tick`: the resolution instants are stored at. 1 ns for windows up to 2^43 ns (about
//!   2.4 hours); for longer windows 2^k ns, the least that keeps a window's worth of ticks below
//!   2^43 (131 µs at the longest window). Instants are rounded up to a tick, so an entry leaves
//!   at most a tick late, never early.
//!
//! Entries are ordered, instants strictly increasing, and span at most `MAX_OFFSET` ticks (the
//! oldest is at most a window and a tick before the newest, or was clamped there by `pack`).
//! The log holds at most L entries.
//!
//! In memory (built for O(1) per admitted request, whatever L): a ring of u64 words, one per
//! entry, `ticks << 20 | count`, where `ticks` (44 bits) is the entry's instant in ticks modulo
//! 2^44 — so a word never changes once written, whichever entries come and go around it — and a
//! header holding the newest entry's instant in full (which every word is read against: the span
//! is below 2^44 ticks), the total count and an order-independent hash of the entries (kept up to
//! date entry by entry; the fingerprint a delta effect is checked against, see `state::delta`).
//! An admitted request drops the entries that left the window from the front and appends one
//! word at the back: work in the number of entries dropped, never in the log's length.
//!
//! Stored (RDB, `RL.SETSTATE`): the canonical form, unchanged since the first format — `base_ns`
//! is the oldest entry's instant and each word `offset << 20 | count` with `offset` the distance
//! from it in ticks (the first 0), so a log has exactly one encoding.

use super::bytes::Reader;
use super::{inspection, relative_ms, Decision, Field, Outcome, Policy};

const COUNT_BITS: u32 = 20;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
const OFFSET_BITS: u32 = u64::BITS - COUNT_BITS;
const MAX_OFFSET: u64 = (1 << OFFSET_BITS) - 1;

/// The largest L a log can hold: an entry's count must fit its 20 bits. The command layer bounds
/// L further by `ratelimit.max-log-entries`, whose maximum this is.
pub const MAX_LOG_LIMIT: u64 = 1_000_000;
const _: () = assert!(MAX_LOG_LIMIT <= COUNT_MASK);

/// Header words at the start of `SlidingLog::buf`, before the ring. `TOTAL` holds the total count
/// in its low 32 bits and the tick shift above (so the stored form needs no policy).
const NEWEST: usize = 0;
const TOTAL: usize = 1;
const HASH: usize = 2;
const HEADER: usize = 3;
const SHIFT_AT: u32 = 32;

/// Stored state: the entries (see the module comment).
#[derive(Clone, Default)]
pub struct SlidingLog {
    /// `[newest_ns, total | shift << 32, hash, ring …]`; empty (no allocation) for the empty
    /// log. The ring's capacity is the rest of the slice.
    buf: Box<[u64]>,
    /// The oldest entry's slot in the ring.
    head: u32,
    /// Entries in the ring (at most L <= 10^6).
    len: u32,
}

/// Equal when they hold the same entries, however the ring is laid out.
impl PartialEq for SlidingLog {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len
            && self.newest_ns() == other.newest_ns()
            && self.total() == other.total()
            && self.words().eq(other.words())
    }
}

impl Eq for SlidingLog {}

impl std::fmt::Debug for SlidingLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlidingLog")
            .field("newest_ns", &self.newest_ns())
            .field("total", &self.total())
            .field("words", &self.words().collect::<Vec<_>>())
            .finish()
    }
}

/// What an admitted request changes in a log: the `dropped` oldest entries (they left the
/// window) go, then `count` is recorded at `at_ns` — added to the newest entry if it is at that
/// instant, else appended as a new entry. The whole effect of an admit, whatever the log's
/// length; `state::delta` carries it to replicas and the AOF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    pub dropped: u32,
    pub at_ns: u64,
    pub count: u64,
}

/// A charge to apply in place (see [`SlidingLog::charge_change`]): `change` (its `dropped`
/// entries left the window), after the `merged` oldest entries left are folded into one at the
/// newest of their instants (0: none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Charge {
    pub change: Change,
    pub merged: u32,
}

/// How many of `live` entries a charge folds into one under a limit of L >= 2: none while the
/// new entry keeps the log at most L entries, else the oldest beyond L − 1 (see [`bounded`]).
fn merged_by_charge(live: usize, limit: u64) -> usize {
    let keep = usize::try_from(limit).unwrap_or(usize::MAX);
    if live < keep {
        0
    } else {
        live + 2 - keep
    }
}

/// log2 of the tick, in ns, for a policy's window: a window spans fewer than 2^43 ticks, so an
/// entry that arrives now is within 2^44 − 1 ticks of any entry still in the window.
fn tick_shift(policy: &Policy) -> u32 {
    (u64::BITS - policy.window_ns().leading_zeros()).saturating_sub(OFFSET_BITS - 1)
}

/// `at` rounded up to a multiple of 2^shift ns (down only if rounding up would overflow a u64,
/// some five centuries from now).
fn tick_ceil(at: u64, shift: u32) -> u64 {
    let tick = 1u64 << shift;
    at.checked_next_multiple_of(tick).unwrap_or(at - at % tick)
}

/// The word of an entry at `at_ns` (a multiple of the tick): its ticks modulo 2^44, and count.
fn word_at(at_ns: u64, count: u64, shift: u32) -> u64 {
    ((at_ns >> shift) & MAX_OFFSET) << COUNT_BITS | count
}

/// One entry's share of a log's hash: a mixing function of (instant, count), summed over the
/// entries so that dropping the oldest or appending one updates it in O(1).
pub fn entry_hash(at_ns: u64, count: u64) -> u64 {
    mix(mix(at_ns) ^ count)
}

/// splitmix64's finaliser: every input bit reaches every output bit.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Why stored words (or a change) are not a log.
pub use super::bytes::Invalid;

impl SlidingLog {
    /// Entries held.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the log holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The instant of the newest entry, ns (0 when empty).
    pub fn newest_ns(&self) -> u64 {
        self.header(NEWEST)
    }

    /// The sum of the entries' counts.
    pub fn total(&self) -> u64 {
        self.header(TOTAL) & u64::from(u32::MAX)
    }

    /// The tick shift the log was built under (0 when empty).
    fn shift(&self) -> u32 {
        // At most 17 (see `tick_shift`).
        (self.header(TOTAL) >> SHIFT_AT) as u32
    }

    /// The sum of `entry_hash` over the entries (wrapping): two logs with different entries have
    /// different hashes but with probability 2^-64.
    pub fn hash(&self) -> u64 {
        self.header(HASH)
    }

    fn header(&self, i: usize) -> u64 {
        if self.len == 0 {
            return 0;
        }
        self.buf.get(i).copied().unwrap_or(0)
    }

    fn set_header(&mut self, i: usize, value: u64) {
        if let Some(slot) = self.buf.get_mut(i) {
            *slot = value;
        }
    }

    fn capacity(&self) -> usize {
        self.buf.len().saturating_sub(HEADER)
    }

    /// The ring as two slices, oldest first (like `VecDeque::as_slices`).
    fn as_slices(&self) -> (&[u64], &[u64]) {
        let ring = self.buf.get(HEADER..).unwrap_or_default();
        let (head, len) = (self.head as usize, self.len as usize);
        let first_end = (head + len).min(ring.len());
        let wrapped = (head + len).saturating_sub(ring.len());
        (
            ring.get(head..first_end).unwrap_or_default(),
            ring.get(..wrapped).unwrap_or_default(),
        )
    }

    /// The words, oldest first.
    fn words(&self) -> impl Iterator<Item = u64> + '_ {
        let (a, b) = self.as_slices();
        a.iter().chain(b).copied()
    }

    /// The i-th word from the oldest (0 past the end).
    fn word(&self, i: usize) -> u64 {
        let cap = self.capacity();
        if i >= self.len as usize || cap == 0 {
            return 0;
        }
        let slot = HEADER + (self.head as usize + i) % cap;
        self.buf.get(slot).copied().unwrap_or(0)
    }

    /// The instant of the entry `word`, ns: read against the newest entry, which is at most
    /// `MAX_OFFSET` ticks after it.
    fn instant(&self, word: u64, shift: u32) -> u64 {
        let newest = self.newest_ns();
        let behind = ((newest >> shift).wrapping_sub(word >> COUNT_BITS)) & MAX_OFFSET;
        newest.saturating_sub(behind << shift)
    }

    /// The entries as (instant ns, count), oldest first.
    fn entries(&self, shift: u32) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.words()
            .map(move |w| (self.instant(w, shift), w & COUNT_MASK))
    }

    /// The canonical (stored) form: the oldest entry's instant (0 when empty) and each entry as
    /// `offset << 20 | count`, its distance from the oldest in ticks. Costs one pass.
    pub fn canonical(&self) -> (u64, impl Iterator<Item = u64> + '_) {
        let first = self.word(0) >> COUNT_BITS;
        let base_ns = if self.is_empty() {
            0
        } else {
            self.instant(self.word(0), self.shift())
        };
        let words = self.words().map(move |w| {
            ((w >> COUNT_BITS).wrapping_sub(first) & MAX_OFFSET) << COUNT_BITS | w & COUNT_MASK
        });
        (base_ns, words)
    }

    /// A log of `entries` (instant ns on a tick, count), ordered and within `MAX_OFFSET` ticks,
    /// with a ring of exactly their number.
    fn from_entries(shift: u32, entries: &[(u64, u64)]) -> SlidingLog {
        let Some(&(newest, _)) = entries.last() else {
            return SlidingLog::default();
        };
        let mut buf = Vec::with_capacity(HEADER + entries.len());
        let (mut total, mut hash) = (0u64, 0u64);
        for &(at, count) in entries {
            total = total.saturating_add(count);
            hash = hash.wrapping_add(entry_hash(at, count));
        }
        buf.extend_from_slice(&[newest, total | u64::from(shift) << SHIFT_AT, hash]);
        buf.extend(entries.iter().map(|&(at, count)| word_at(at, count, shift)));
        SlidingLog {
            buf: buf.into_boxed_slice(),
            head: 0,
            // At most L <= 10^6 entries.
            len: u32::try_from(entries.len()).unwrap_or(u32::MAX),
        }
    }

    /// A log from its stored parts, validated against the policy it was stored under: at most L
    /// entries whose counts are at least 1 and sum to at most `MAX_LOG_LIMIT` (above L only after
    /// a policy was lowered, see [`rescale`]), strictly increasing offsets starting
    /// at 0, a base on a tick, and instants a u64 can hold.
    pub fn from_parts(
        policy: &Policy,
        base_ns: u64,
        words: Vec<u64>,
    ) -> Result<SlidingLog, Invalid> {
        let shift = tick_shift(policy);
        if policy.limit() > MAX_LOG_LIMIT {
            return Err("sliding log limit out of range");
        }
        if words.len() as u64 > policy.limit() {
            return Err("sliding log longer than its limit");
        }
        if !base_ns.is_multiple_of(1 << shift) || (words.is_empty() && base_ns != 0) {
            return Err("sliding log base not canonical");
        }
        let (mut total, mut last) = (0u64, None);
        for &w in &words {
            let (offset, count) = (w >> COUNT_BITS, w & COUNT_MASK);
            if count == 0 {
                return Err("sliding log entry with count 0");
            }
            total += count;
            let in_order = match last {
                None => offset == 0,
                Some(prev) => offset > prev,
            };
            if !in_order {
                return Err("sliding log entries out of order");
            }
            last = Some(offset);
        }
        // Above L after a policy was lowered (what was spent is kept), never above the most any
        // policy allows.
        if total > MAX_LOG_LIMIT {
            return Err("sliding log total out of range");
        }
        if base_ns.checked_add(last.unwrap_or(0) << shift).is_none() {
            return Err("sliding log instant out of range");
        }
        let entries: Vec<(u64, u64)> = words
            .iter()
            .map(|&w| (base_ns + ((w >> COUNT_BITS) << shift), w & COUNT_MASK))
            .collect();
        Ok(SlidingLog::from_entries(shift, &entries))
    }

    /// Heap bytes held (for `MEMORY USAGE`).
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of_val::<[u64]>(&self.buf)
    }

    /// Packs entries (oldest first, counts >= 1, instants non-decreasing). Instants are rounded
    /// up to the tick and entries on the same tick merge. An entry more than `MAX_OFFSET` ticks
    /// before the newest (possible only after the clock stepped back, or a change to a shorter
    /// window) is moved up to that distance: later, so it leaves later, never earlier.
    fn pack(shift: u32, entries: &[(u64, u64)]) -> SlidingLog {
        let Some(&(newest, _)) = entries.last() else {
            return SlidingLog::default();
        };
        let floor = tick_ceil(newest, shift).saturating_sub(MAX_OFFSET << shift);
        let mut packed: Vec<(u64, u64)> = Vec::with_capacity(entries.len());
        for &(at, count) in entries {
            let at = tick_ceil(at, shift).max(floor);
            match packed.last_mut() {
                Some(last) if last.0 == at => last.1 += count,
                _ => packed.push((at, count)),
            }
        }
        SlidingLog::from_entries(shift, &packed)
    }

    /// Checks that `change` can apply to this log under `policy` (any change `decide` makes
    /// does): it drops at most the entries there are and records a count of 1..=L on a tick, at
    /// or after the newest entry left, within `MAX_OFFSET` ticks of the oldest one left, keeping
    /// the total at most L. Returns the count the dropped entries hold. Reads only the dropped
    /// entries.
    pub fn check_change(&self, policy: &Policy, change: &Change) -> Result<u64, Invalid> {
        let shift = tick_shift(policy);
        let dropped = change.dropped as usize;
        if dropped > self.len() {
            return Err("delta drops more entries than the log holds");
        }
        if change.count == 0 || change.count > policy.limit() {
            return Err("delta count out of range");
        }
        if !change.at_ns.is_multiple_of(1 << shift) {
            return Err("delta instant not on a tick");
        }
        let gone: u64 = (0..dropped).map(|i| self.word(i) & COUNT_MASK).sum();
        let left = self.total() - gone.min(self.total());
        if left.saturating_add(change.count) > policy.limit() {
            return Err("delta takes the log above its limit");
        }
        if dropped < self.len() {
            let oldest = self.instant(self.word(dropped), shift);
            if change.at_ns < self.newest_ns() {
                return Err("delta instant before the newest entry");
            }
            if (change.at_ns - oldest) >> shift > MAX_OFFSET {
                return Err("delta instant too far from the oldest entry");
            }
        }
        Ok(gone)
    }

    /// [`charge`] as a change to apply in place ([`SlidingLog::apply_charge`]): the entries
    /// that left the window dropped, the oldest merged when the new one makes more than L (as
    /// [`charge`] merges them), `n` recorded at now (or with the newest entry). None where
    /// `charge` saturates at `MAX_LOG_LIMIT`, or under L = 1 (the caller then charges the whole
    /// log). O(entries dropped and merged): 2 a call once a log is full.
    pub fn charge_change(&self, policy: &Policy, now_ns: u64, n: u64) -> Option<Charge> {
        let (shift, window) = (tick_shift(policy), policy.window_ns());
        let (mut dropped, mut gone) = (0usize, 0u64);
        while dropped < self.len() {
            let w = self.word(dropped);
            if in_window(self.instant(w, shift), window, now_ns) {
                break;
            }
            gone += w & COUNT_MASK;
            dropped += 1;
        }
        let left = self.total().saturating_sub(gone);
        if n == 0 || left.saturating_add(n) > MAX_LOG_LIMIT || policy.limit() < 2 {
            return None;
        }
        let at = tick_ceil(now_ns, shift).max(self.newest_ns());
        let live = self.len() - dropped;
        let merged = merged_by_charge(live, policy.limit());
        let oldest = dropped + merged.saturating_sub(1);
        if live > 0 && (at - self.instant(self.word(oldest), shift)) >> shift > MAX_OFFSET {
            return None;
        }
        Some(Charge {
            change: Change {
                dropped: u32::try_from(dropped).ok()?,
                at_ns: at,
                count: n,
            },
            merged: u32::try_from(merged).ok()?,
        })
    }

    /// Checks that `charge` can apply to this log under `policy`: what
    /// [`SlidingLog::charge_change`] would make of a log like this one (the total may pass L, up
    /// to `MAX_LOG_LIMIT`; the entries stay at most L). Reads only the dropped and merged
    /// entries.
    pub fn check_charge(&self, policy: &Policy, charge: &Charge) -> Result<(), Invalid> {
        let (shift, change) = (tick_shift(policy), &charge.change);
        let dropped = change.dropped as usize;
        if dropped > self.len() {
            return Err("charge drops more entries than the log holds");
        }
        let live = self.len() - dropped;
        if policy.limit() < 2 || charge.merged as usize != merged_by_charge(live, policy.limit()) {
            return Err("charge merges other entries than the charge would");
        }
        if change.count == 0 || change.count > MAX_LOG_LIMIT {
            return Err("charge count out of range");
        }
        if !change.at_ns.is_multiple_of(1 << shift) {
            return Err("charge instant not on a tick");
        }
        let gone: u64 = (0..dropped).map(|i| self.word(i) & COUNT_MASK).sum();
        let left = self.total() - gone.min(self.total());
        if left.saturating_add(change.count) > MAX_LOG_LIMIT {
            return Err("charge takes the log above its most");
        }
        if live > 0 {
            if change.at_ns < self.newest_ns() {
                return Err("charge instant before the newest entry");
            }
            let oldest = dropped + (charge.merged as usize).saturating_sub(1);
            let oldest = self.instant(self.word(oldest), shift);
            if (change.at_ns - oldest) >> shift > MAX_OFFSET {
                return Err("charge instant too far from the oldest entry");
            }
        }
        Ok(())
    }

    /// Applies a charge that `check_charge` accepted (or that `charge_change` made).
    pub fn apply_charge(&mut self, policy: &Policy, charge: &Charge) {
        let shift = tick_shift(policy);
        let (mut total, mut hash) = (self.total(), self.hash());
        for _ in 0..charge.change.dropped.min(self.len) {
            self.pop_front(shift, &mut total, &mut hash);
        }
        if charge.merged > 0 && self.len >= charge.merged {
            let (mut at, mut sum) = (0, 0);
            for _ in 0..charge.merged {
                let (instant, count) = self.pop_front(shift, &mut total, &mut hash);
                (at, sum) = (instant, sum + count);
            }
            // Room: at least two entries just left the ring.
            let cap = self.capacity();
            if cap > 0 {
                self.head = if self.head == 0 {
                    cap as u32 - 1
                } else {
                    self.head - 1
                };
                if let Some(w) = self.buf.get_mut(HEADER + self.head as usize) {
                    *w = word_at(at, sum, shift);
                }
                self.len += 1;
                total += sum;
                hash = hash.wrapping_add(entry_hash(at, sum));
            }
        }
        let newest = self.buf.get(NEWEST).copied().unwrap_or(0);
        self.set_header(TOTAL, total | u64::from(shift) << SHIFT_AT);
        self.set_header(HASH, hash);
        self.set_header(NEWEST, newest);
        let change = Change {
            dropped: 0,
            ..charge.change
        };
        self.apply(policy, &change);
    }

    /// Takes the oldest entry off the ring (there is one), keeping `total` and `hash` up to
    /// date; returns its instant and count.
    fn pop_front(&mut self, shift: u32, total: &mut u64, hash: &mut u64) -> (u64, u64) {
        let w = self.word(0);
        let (instant, count) = (self.instant(w, shift), w & COUNT_MASK);
        *total = total.saturating_sub(count);
        *hash = hash.wrapping_sub(entry_hash(instant, count));
        self.head = self.head.wrapping_add(1);
        if self.head as usize >= self.capacity() {
            self.head = 0;
        }
        self.len -= 1;
        (instant, count)
    }

    /// Applies a change that `check_change` accepted (or that `decide` made): O(dropped), plus a
    /// reallocation when the ring is full (its capacity doubles, up to L) or mostly empty.
    pub fn apply(&mut self, policy: &Policy, change: &Change) {
        let shift = tick_shift(policy);
        let (mut total, mut hash) = (self.total(), self.hash());
        for _ in 0..change.dropped.min(self.len) {
            let w = self.word(0);
            let count = w & COUNT_MASK;
            total = total.saturating_sub(count);
            hash = hash.wrapping_sub(entry_hash(self.instant(w, shift), count));
            self.head = self.head.wrapping_add(1);
            if self.head as usize >= self.capacity() {
                self.head = 0;
            }
            self.len -= 1;
        }
        let merge = self.len > 0 && self.newest_ns() == change.at_ns;
        if merge {
            let last = self.word(self.len() - 1);
            let count = last & COUNT_MASK;
            hash = hash.wrapping_sub(entry_hash(change.at_ns, count));
            hash = hash.wrapping_add(entry_hash(change.at_ns, count + change.count));
            let cap = self.capacity();
            if cap > 0 {
                let slot = HEADER + (self.head as usize + self.len() - 1) % cap;
                if let Some(w) = self.buf.get_mut(slot) {
                    *w = last + change.count;
                }
            }
        } else {
            hash = hash.wrapping_add(entry_hash(change.at_ns, change.count));
            self.reserve_one(policy.limit());
            let cap = self.capacity();
            if cap > 0 {
                let slot = HEADER + (self.head as usize + self.len()) % cap;
                if let Some(w) = self.buf.get_mut(slot) {
                    *w = word_at(change.at_ns, change.count, shift);
                }
            }
            self.len += 1;
        }
        self.set_header(NEWEST, change.at_ns);
        let total = total.saturating_add(change.count) | u64::from(shift) << SHIFT_AT;
        self.set_header(TOTAL, total);
        self.set_header(HASH, hash);
    }

    /// Room for one more entry: a full ring doubles (at most L entries, which a log never
    /// exceeds); one at most half full after the entry shrinks to 1.5 times its entries, so a log
    /// that shrank gives its memory back. A reallocation copies the entries and comes after at
    /// least a third of their number of changes since the last: amortised O(1). The ring holds at
    /// most twice the entries' words, and at most L.
    fn reserve_one(&mut self, limit: u64) {
        let (len, cap) = (self.len(), self.capacity());
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let wanted = if len == cap {
            (cap * 2).max(1).min(limit).max(len + 1)
        } else if cap > 4 && (len + 1) * 2 <= cap {
            (len + 1) + len.div_ceil(2)
        } else {
            return;
        };
        let mut buf = Vec::with_capacity(HEADER + wanted);
        buf.extend_from_slice(&[self.header(NEWEST), self.header(TOTAL), self.header(HASH)]);
        buf.extend(self.words());
        buf.resize(HEADER + wanted, 0);
        self.buf = buf.into_boxed_slice();
        self.head = 0;
    }
}

/// Whether an entry at `at` is still in the window at `now_ns`.
fn in_window(at: u64, window: u64, now_ns: u64) -> bool {
    u128::from(at) + u128::from(window) > u128::from(now_ns)
}

/// `at + W − now`, in ns: how long until an entry at `at` leaves the window.
fn until_gone(at: u64, window: u64, now_ns: u64) -> u64 {
    let gone = u128::from(at) + u128::from(window);
    u64::try_from(gone.saturating_sub(u128::from(now_ns))).unwrap_or(u64::MAX)
}

/// Decides a request of `cost` at `now_ns`; `cost` 0 peeks (answered as cost 1, nothing stored).
/// The caller guarantees `cost <= policy.limit() <= MAX_LOG_LIMIT`.
///
/// Returns the decision and, when the request is admitted, the change to apply to the log
/// (`SlidingLog::apply`). Reads the entries that left the window (they are dropped by the change)
/// and, for a denial, the oldest entries up to the one whose leaving admits it: never the whole
/// log.
pub fn decide(
    state: Option<&SlidingLog>,
    policy: &Policy,
    now_ns: u64,
    cost: u64,
) -> (Decision, Option<Change>) {
    let (shift, window, limit) = (tick_shift(policy), policy.window_ns(), policy.limit());
    let empty = SlidingLog::default();
    let log = state.unwrap_or(&empty);
    // Entries are ordered, so the ones that left the window are a prefix.
    let (mut dropped, mut gone) = (0usize, 0u64);
    while dropped < log.len() {
        let w = log.word(dropped);
        if in_window(log.instant(w, shift), window, now_ns) {
            break;
        }
        gone += w & COUNT_MASK;
        dropped += 1;
    }
    let total = log.total().saturating_sub(gone);
    let newest = (dropped < log.len()).then(|| log.newest_ns());

    let asked = cost.max(1);
    let admitted = total.saturating_add(asked) <= limit;
    let retry_after_ns = (!admitted).then(|| {
        // Wait until enough of the oldest entries have left: the entry whose leaving brings the
        // total down to L − asked. It exists, as asked <= L.
        let excess = total.saturating_add(asked) - limit;
        let mut freed = 0;
        (dropped..log.len())
            .map(|i| log.word(i))
            .find(|&w| {
                freed += w & COUNT_MASK;
                freed >= excess
            })
            .map_or(0, |w| until_gone(log.instant(w, shift), window, now_ns))
    });
    if !admitted || cost == 0 {
        let decision = Decision {
            allowed: u64::from(admitted),
            capacity: limit,
            remaining: limit.saturating_sub(total),
            retry_after_ns,
            reset_after_ns: newest.map_or(0, |at| until_gone(at, window, now_ns)),
        };
        return (decision, None);
    }

    // Admitted: the live entries plus this request. It is recorded at now, or with the newest
    // entry if the clock went back: entries stay ordered, and a request recorded later leaves
    // later, never earlier. `at` is at most a window and a tick after the oldest live entry (or
    // is the newest entry): within `MAX_OFFSET` ticks (see `tick_shift`).
    let at = tick_ceil(now_ns, shift).max(newest.unwrap_or(0));
    let decision = Decision {
        allowed: 1,
        capacity: limit,
        remaining: limit - (total + cost),
        retry_after_ns: None,
        reset_after_ns: until_gone(at, window, now_ns),
    };
    let change = Change {
        // At most L <= 10^6 entries.
        dropped: u32::try_from(dropped).unwrap_or(u32::MAX),
        at_ns: at,
        count: cost,
    };
    (decision, Some(change))
}

/// [`decide`], with the next state as a new log (a copy of the old one with the change applied:
/// for callers that keep the old state; the command layer applies the change in place).
pub fn check(
    state: Option<&SlidingLog>,
    policy: &Policy,
    now_ns: u64,
    cost: u64,
) -> Outcome<SlidingLog> {
    let (decision, change) = decide(state, policy, now_ns, cost);
    let next = change.map(|change| {
        let mut next = state.cloned().unwrap_or_default();
        next.apply(policy, &change);
        next
    });
    Outcome { decision, next }
}

/// The entries in the window at `now_ns`, oldest first.
fn live_entries(log: &SlidingLog, policy: &Policy, now_ns: u64) -> Vec<(u64, u64)> {
    let window = policy.window_ns();
    log.entries(tick_shift(policy))
        .filter(|&(at, _)| in_window(at, window, now_ns))
        .collect()
}

/// Takes `n` off the newest entries (the newest first), dropping the ones that reach 0.
fn drop_newest(entries: &mut Vec<(u64, u64)>, mut n: u64) {
    while n > 0 {
        let Some(last) = entries.last_mut() else {
            return;
        };
        let taken = last.1.min(n);
        last.1 -= taken;
        n -= taken;
        if last.1 == 0 {
            entries.pop();
        }
    }
}

/// The log under a new policy. The requests really arrived when they did, so every entry keeps
/// its instant (rounded up to the new tick) and counts while it lies in the new window. What was
/// spent is never forgotten, even above a lower L: a key tightened from 100 to 10 and called
/// again under 100 (two gateway configurations during a rollout) must still count the 100. To
/// keep at most L entries (memory is bounded by the policy in force), the oldest entries beyond
/// L − 1 are merged into the newest of them: they then leave the window together, at the latest
/// of their instants, which never admits earlier, and under the new policy admits exactly as the
/// unmerged log would (it can pass only once fewer than L remain, and then all of them have
/// left). A longer window cannot bring back entries that already left the shorter one.
pub fn rescale(state: &SlidingLog, from: &Policy, to: &Policy, now_ns: u64) -> SlidingLog {
    let window = to.window_ns();
    let entries: Vec<(u64, u64)> = state
        .entries(tick_shift(from))
        .filter(|&(at, _)| in_window(at, window, now_ns))
        .collect();
    bounded(to, entries)
}

/// Packs `entries` under `policy`, the oldest beyond L − 1 merged into the newest of them (see
/// [`rescale`]): at most L entries, whatever they count.
fn bounded(policy: &Policy, mut entries: Vec<(u64, u64)>) -> SlidingLog {
    let keep = usize::try_from(policy.limit()).unwrap_or(usize::MAX);
    if entries.len() > keep {
        // keep >= 1 (L >= 1), so at least two entries merge into one.
        let rest = entries.split_off(entries.len() - keep + 1);
        let at = entries.last().map_or(0, |&(at, _)| at);
        let count = entries.iter().map(|&(_, count)| count).sum();
        entries = std::iter::once((at, count)).chain(rest).collect();
    }
    SlidingLog::pack(tick_shift(policy), &entries)
}

/// Records `n` at `now_ns` whatever the window holds (see `Algorithm::charge`): what another
/// configuration of the key admitted. The log keeps at most L entries (merged as in
/// [`rescale`]) and a total of at most `MAX_LOG_LIMIT`, which fills a window under any policy.
pub fn charge(state: &SlidingLog, policy: &Policy, now_ns: u64, n: u64) -> SlidingLog {
    let mut entries = live_entries(state, policy, now_ns);
    let total: u64 = entries.iter().map(|&(_, count)| count).sum();
    let n = n.min(MAX_LOG_LIMIT.saturating_sub(total));
    if n > 0 {
        let at = tick_ceil(now_ns, tick_shift(policy)).max(state.newest_ns());
        entries.push((at, n));
    }
    bounded(policy, entries)
}

/// The cost the window holds at `now_ns`, in units (see `Algorithm::counted`).
pub fn counted(state: &SlidingLog, policy: &Policy, now_ns: u64) -> u128 {
    let total: u64 = live_entries(state, policy, now_ns)
        .iter()
        .map(|&(_, count)| count)
        .sum();
    u128::from(total) * policy.units_per_token()
}

/// Gives back `n` of what the window holds (requests that were not served): the newest entries
/// go first. Entries that already left the window are trimmed.
pub fn refund(state: &SlidingLog, policy: &Policy, now_ns: u64, n: u64) -> SlidingLog {
    let mut entries = live_entries(state, policy, now_ns);
    drop_newest(&mut entries, n);
    SlidingLog::pack(tick_shift(policy), &entries)
}

/// `RL.INSPECT`'s fields: `entries`, the entries stored (8 bytes each, including any that left
/// the window since the last admitted request); `oldest_ms` and `newest_ms`, the instants of the
/// oldest and newest stored entry relative to now (absent when the log is empty); and `count`,
/// the cost the window holds now (what a decision counts).
pub fn inspect(state: &SlidingLog, policy: &Policy, now_ns: u64) -> Vec<Field> {
    let shift = tick_shift(policy);
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let mut own = vec![("entries", int(state.len() as u64))];
    if !state.is_empty() {
        let oldest = state.instant(state.word(0), shift);
        let ms = |at: u64| relative_ms(at.into(), now_ns);
        own.extend([
            ("oldest_ms", ms(oldest)),
            ("newest_ms", ms(state.newest_ns())),
        ]);
    }
    let count = live_entries(state, policy, now_ns)
        .iter()
        .map(|&(_, c)| c)
        .sum();
    own.push(("count", int(count)));
    inspection(policy, own, &check(Some(state), policy, now_ns, 0).decision)
}

/// Stored fields: `base_ns u64`, `entries u32` (at most L), then `entries` packed words `u64`
/// (see the module comment: ordered, counts 1..=L, L <= 10^6).
pub fn encode(state: &SlidingLog, out: &mut Vec<u8>) {
    let (base_ns, words) = state.canonical();
    out.extend_from_slice(&base_ns.to_le_bytes());
    // At most L <= 10^6 entries: always fits.
    let entries = u32::try_from(state.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&entries.to_le_bytes());
    out.reserve(state.len() * 8);
    for word in words {
        out.extend_from_slice(&word.to_le_bytes());
    }
}

pub fn decode(r: &mut Reader<'_>, policy: &Policy) -> Result<SlidingLog, Invalid> {
    let base_ns = r.u64()?;
    let entries = u64::from(r.u32()?);
    // Bounded before anything is allocated: at most L entries, all present.
    if entries > policy.limit() || entries.saturating_mul(8) > r.left() as u64 {
        return Err("sliding log entry count out of range");
    }
    let words = (0..entries)
        .map(|_| r.u64())
        .collect::<Result<Vec<_>, _>>()?;
    SlidingLog::from_parts(policy, base_ns, words)
}

/// A 64-bit fingerprint of a log held under `p`: its policy, entry count, total, newest instant
/// and the hash of its entries (kept up to date by every change, so this is O(1)). Two logs with
/// different policies or entries have the same fingerprint with probability about 2^-64. What a
/// delta effect is checked against (see `state::delta`).
pub fn fingerprint(p: &Policy, log: &SlidingLog) -> u64 {
    [
        p.limit(),
        p.window_ms(),
        p.capacity(),
        log.len() as u64,
        log.total(),
        log.newest_ns(),
        log.hash(),
    ]
    .iter()
    .fold(u64::from(<SlidingLog as super::Algorithm>::TAG), |h, &x| {
        mix(h ^ x)
    })
}

super::algorithm!(SlidingLog, name: "sliding log", id: "sliding_log", tag: 3, burst: false,
type Change = Change;
fn entries(policy: &Policy) -> u64 {
    policy.limit()
}
fn heap_bytes(&self) -> usize {
    SlidingLog::heap_bytes(self)
}
fn entries_held(&self) -> u64 {
    self.len() as u64
}
fn decide_in_place(&self, policy: &Policy, now_ns: u64, cost: u64) -> Option<(Decision, Option<Change>)> {
    Some(decide(Some(self), policy, now_ns, cost))
}
fn apply_in_place(&mut self, policy: &Policy, change: &Change) -> Option<u64> {
    let prior = fingerprint(policy, self);
    self.apply(policy, change);
    Some(prior)
});

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    /// 1.8e18 ns: the instant `props::run_at` offsets count from.
    const T0: u64 = super::super::props::T0;

    fn policy(l: u64, w: u64) -> Policy {
        Policy::new(l, w, l).unwrap()
    }

    /// Runs requests at the given offsets from T0; returns the decisions and the final log.
    fn run(p: &Policy, reqs: &[(u64, u64)]) -> (Vec<Decision>, Option<SlidingLog>) {
        super::super::props::run_at(reqs, |s, now, cost| check(s, p, now, cost))
    }

    fn entries(log: &SlidingLog, p: &Policy) -> Vec<(u64, u64)> {
        log.entries(tick_shift(p))
            .map(|(at, c)| (at - T0, c))
            .collect()
    }

    #[test]
    fn inspect_shows_the_log() {
        let p = policy(5, 1000);
        let (_, log) = run(&p, &[(0, 2), (300 * MS, 1), (300 * MS, 2)]);
        let log = log.unwrap();
        assert_eq!(
            inspect(&log, &p, T0 + 700 * MS),
            vec![
                ("limit", 5),
                ("window_ms", 1000),
                ("burst", 5),
                ("entries", 2),
                ("oldest_ms", -700),
                ("newest_ms", -400),
                ("count", 5),
                ("remaining", 0),
                ("retry_after_ms", 300),
                ("reset_after_ms", 600),
            ]
        );
        // The oldest entry left the window but stays stored until the next admitted request.
        let f = inspect(&log, &p, T0 + 1000 * MS);
        assert_eq!(
            f[3..7],
            [
                ("entries", 2),
                ("oldest_ms", -1000),
                ("newest_ms", -700),
                ("count", 3)
            ]
        );
        assert_eq!(
            f[7..],
            [
                ("remaining", 2),
                ("retry_after_ms", -1),
                ("reset_after_ms", 300)
            ]
        );
        // Empty (everything refunded): no instants to show.
        let empty = refund(&log, &p, T0 + 700 * MS, 5);
        assert_eq!(
            inspect(&empty, &p, T0 + 700 * MS)[3..],
            [
                ("entries", 0),
                ("count", 0),
                ("remaining", 5),
                ("retry_after_ms", -1),
                ("reset_after_ms", 0)
            ]
        );
    }

    #[test]
    fn table_of_cases() {
        let p = policy(10, 1000);
        let (d, log) = run(
            &p,
            &[
                (0, 3),
                (100 * MS, 5),
                (100 * MS, 1),
                (200 * MS, 2),
                (200 * MS, 0),
                (1000 * MS - 1, 1),
                (1000 * MS, 1),
            ],
        );
        assert_eq!(
            d[0],
            Decision {
                allowed: 1,
                capacity: 10,
                remaining: 7,
                retry_after_ns: None,
                reset_after_ns: 1000 * MS
            }
        );
        assert_eq!((d[2].allowed, d[2].remaining), (1, 1));
        // 9 in the window: cost 2 waits for the 3 at T0 to leave, at 1000 ms.
        assert_eq!(
            d[3],
            Decision {
                allowed: 0,
                capacity: 10,
                remaining: 1,
                retry_after_ns: Some(800 * MS),
                reset_after_ns: 900 * MS
            }
        );
        assert_eq!((d[4].allowed, d[4].remaining), (1, 1), "a peek is cost 1");
        assert_eq!((d[5].allowed, d[5].remaining), (1, 0));
        assert_eq!((d[6].allowed, d[6].remaining), (1, 2));
        // Run-length: the COST 5 and the 1 at 100 ms are one entry; the 3 at T0 is trimmed.
        let log = log.unwrap();
        assert_eq!(
            entries(&log, &p),
            [(100 * MS, 6), (1000 * MS - 1, 1), (1000 * MS, 1)]
        );
        let (base_ns, words) = log.canonical();
        assert_eq!(base_ns, T0 + 100 * MS);
        assert_eq!(words.collect::<Vec<_>>()[0], 6);
    }

    #[test]
    fn retry_after_is_when_the_oldest_entries_leave() {
        let p = policy(5, 1000);
        let (d, _) = run(&p, &[(0, 1), (10, 1), (20, 3), (30, 2), (30, 5)]);
        // 5 in the window; cost 2 waits for the first two entries (2 requests): 1000 ms + 10 ns.
        assert_eq!(d[3].retry_after_ns, Some(1000 * MS - 20));
        assert_eq!(d[4].retry_after_ns, Some(1000 * MS - 10));
    }

    #[test]
    fn clock_backwards_records_with_the_newest_entry() {
        let p = policy(3, 1000);
        let (d, log) = run(&p, &[(2000 * MS, 1), (500 * MS, 1), (0, 1), (0, 1)]);
        assert_eq!(d[1].allowed, 1);
        assert_eq!(d[2].allowed, 1);
        assert_eq!(d[3].allowed, 0);
        // The entries from a clock behind sit with the newest: they leave with it, not earlier.
        assert_eq!(entries(&log.unwrap(), &p), [(2000 * MS, 3)]);
        assert_eq!(d[3].retry_after_ns, Some(3000 * MS));
    }

    #[test]
    fn long_windows_round_instants_up_to_a_tick() {
        // A day: 8.64e13 ns needs 47 bits, so the tick is 2^4 ns.
        let p = policy(2, 86_400_000);
        assert_eq!(tick_shift(&p), 4);
        assert_eq!(tick_shift(&policy(2, 8_796)), 0);
        assert_eq!(tick_shift(&policy(2, 1_000_000_000_000)), 17);
        let (d, log) = run(&p, &[(1, 1), (17, 1), (18, 1)]);
        let log = log.unwrap();
        assert_eq!(entries(&log, &p), [(16, 1), (32, 1)]);
        // Denied until the entry stored at 16 (arrived at 1) leaves: at most a tick late.
        assert_eq!(d[2].retry_after_ns, Some(86_400_000 * MS + 16 - 18));
    }

    #[test]
    fn rescale_keeps_the_instants_and_at_most_the_new_limit() {
        let from = policy(10, 1000);
        let (_, log) = run(&from, &[(0, 2), (300 * MS, 3), (600 * MS, 4)]);
        let log = log.unwrap();
        // A higher limit: the same entries.
        let to = policy(20, 1000);
        let r = rescale(&log, &from, &to, T0 + 700 * MS);
        assert_eq!(r, log);
        // A shorter window: only what lies in it.
        let to = policy(20, 500);
        let r = rescale(&log, &from, &to, T0 + 700 * MS);
        assert_eq!(entries(&r, &to), [(300 * MS, 3), (600 * MS, 4)]);
        // A lower limit: every request still counts (9 above L = 5), in at most L entries.
        let to = policy(5, 1000);
        let r = rescale(&log, &from, &to, T0 + 700 * MS);
        assert_eq!(r, log);
        // L = 2 below the 3 entries: the two oldest merge at the later instant, and decide
        // exactly as the unmerged log would under the new policy.
        let to = policy(2, 1000);
        let r = rescale(&log, &from, &to, T0 + 700 * MS);
        assert_eq!(entries(&r, &to), [(300 * MS, 5), (600 * MS, 4)]);
        for at in [700, 1000, 1299, 1300, 1599, 1600] {
            let now = T0 + at * MS;
            let merged = check(Some(&r), &to, now, 1).decision;
            assert_eq!(
                merged,
                check(Some(&log), &to, now, 1).decision,
                "at {at} ms"
            );
        }
        // Back to the old policy: all 9 still count.
        let back = rescale(&r, &to, &from, T0 + 700 * MS);
        assert_eq!(
            check(Some(&back), &from, T0 + 700 * MS, 0)
                .decision
                .remaining,
            1
        );
        // A window so long that the tick grows: instants round up.
        let to = policy(10, 1_000_000_000);
        let r = rescale(&log, &from, &to, T0 + 700 * MS);
        let shift = tick_shift(&to);
        assert!(entries(&r, &to)
            .iter()
            .zip([0, 300 * MS, 600 * MS])
            .all(|(&(at, _), was)| at >= was && at - was < 1 << shift));
    }

    #[test]
    fn refund_takes_the_newest_first() {
        let p = policy(10, 1000);
        let (_, log) = run(&p, &[(0, 2), (300 * MS, 3), (600 * MS, 4)]);
        let log = log.unwrap();
        let r = refund(&log, &p, T0 + 700 * MS, 5);
        assert_eq!(entries(&r, &p), [(0, 2), (300 * MS, 2)]);
        let r = refund(&log, &p, T0 + 1100 * MS, 1);
        assert_eq!(entries(&r, &p), [(300 * MS, 3), (600 * MS, 3)]);
        assert_eq!(refund(&log, &p, T0, 100), SlidingLog::default());
        let r = refund(&log, &p, T0 + 700 * MS, 9);
        assert_eq!(check(Some(&r), &p, T0 + 700 * MS, 10).decision.allowed, 1);
    }

    #[test]
    fn stored_parts_are_validated() {
        let p = policy(10, 1000);
        let (_, log) = run(&p, &[(0, 2), (300 * MS, 3)]);
        let log = log.unwrap();
        let (base_ns, words) = log.canonical();
        let w: Vec<u64> = words.collect();
        let ok = SlidingLog::from_parts(&p, base_ns, w.clone());
        assert_eq!(ok, Ok(log.clone()));
        let bad = |base: u64, words: Vec<u64>| SlidingLog::from_parts(&p, base, words).is_err();
        assert!(bad(base_ns, vec![w[1], w[0]]), "out of order");
        assert!(bad(base_ns, vec![w[0], w[0]]), "repeated instant");
        assert!(bad(base_ns, vec![w[1]]), "first offset not 0");
        assert!(bad(base_ns, vec![w[0] & !COUNT_MASK, w[1]]), "count 0");
        assert!(
            !bad(base_ns, vec![w[0] | 9, w[1]]),
            "total above L, after a lowered policy"
        );
        assert!(
            bad(base_ns, vec![w[0] | COUNT_MASK, w[1]]),
            "total above MAX_LOG_LIMIT"
        );
        assert!(bad(5, vec![]), "empty with a base");
        assert!(bad(u64::MAX, vec![0, w[1]]), "instant beyond u64");
        assert!(bad(0, vec![1; 11]), "more entries than L");
        let huge = policy(MAX_LOG_LIMIT + 1, 1000);
        assert!(SlidingLog::from_parts(&huge, 0, vec![]).is_err());
        let long = policy(1, 1_000_000_000);
        assert!(
            SlidingLog::from_parts(&long, 1, vec![1]).is_err(),
            "base off the tick"
        );
    }

    #[test]
    fn inline_size_stays_small() {
        assert!(std::mem::size_of::<SlidingLog>() <= 24);
    }

    /// The header (total, hash, newest) matches the entries, the canonical form round-trips,
    /// and the ring never holds more than L words.
    fn consistent(log: &SlidingLog, p: &Policy) -> Result<(), TestCaseError> {
        let shift = tick_shift(p);
        let entries: Vec<(u64, u64)> = log.entries(shift).collect();
        prop_assert_eq!(log.total(), entries.iter().map(|e| e.1).sum::<u64>());
        let hash = entries
            .iter()
            .fold(0u64, |h, &(at, c)| h.wrapping_add(entry_hash(at, c)));
        prop_assert_eq!(log.hash(), hash);
        prop_assert_eq!(log.newest_ns(), entries.last().map_or(0, |e| e.0));
        prop_assert!(log.capacity() as u64 <= p.limit().max(4));
        let (base, words) = log.canonical();
        let again = SlidingLog::from_parts(p, base, words.collect());
        prop_assert_eq!(again.as_ref(), Ok(log));
        prop_assert_eq!(again.map(|l| l.hash()), Ok(log.hash()));
        Ok(())
    }

    use proptest::prelude::*;

    proptest! {
        /// A charge in place is the charge: `charge_change` applied gives exactly `charge`'s
        /// log and passes `check_charge` (None only under L = 1 or at saturation).
        #[test]
        fn charge_in_place_is_the_charge(
            l in 1u64..12,
            w in 1u64..50,
            steps in prop::collection::vec((0u64..30, 0u64..20, any::<bool>()), 1..120),
        ) {
            let p = policy(l, w);
            let mut log = SlidingLog::default();
            let mut now = T0;
            for (gap_ms, n, admit) in steps {
                now += gap_ms * MS / 4;
                if admit {
                    if let (_, Some(change)) = decide(Some(&log), &p, now, n.clamp(1, l)) {
                        log.apply(&p, &change);
                    }
                    continue;
                }
                let whole = charge(&log, &p, now, n);
                match log.charge_change(&p, now, n) {
                    Some(change) => {
                        prop_assert_eq!(log.check_charge(&p, &change), Ok(()));
                        log.apply_charge(&p, &change);
                        consistent(&log, &p)?;
                        prop_assert_eq!(&log, &whole);
                    }
                    None => log = whole,
                }
            }
        }
    }

    proptest! {
        /// Applied in place over long runs (the ring wraps, grows and shrinks), a log stays
        /// consistent and equal to the log rebuilt from its entries; the same decisions as
        /// `check`'s copies.
        #[test]
        fn ring_stays_consistent(
            l in 1u64..40,
            w in 1u64..50,
            steps in prop::collection::vec((0u64..30, 0u64..6), 1..300),
        ) {
            let p = policy(l, w);
            let mut log: Option<SlidingLog> = None;
            // The reference: the entries in a plain list, trimmed and appended the naive way.
            let mut reference: Vec<(u64, u64)> = Vec::new();
            let mut now = T0;
            for (gap_ms, cost) in steps {
                now += gap_ms * MS / 4;
                let cost = cost.min(l);
                let live: Vec<(u64, u64)> = reference
                    .iter()
                    .copied()
                    .filter(|&(at, _)| at + p.window_ns() > now)
                    .collect();
                if cost > 0 && live.iter().map(|e| e.1).sum::<u64>() + cost <= l {
                    reference = live;
                    match reference.last_mut() {
                        Some(last) if last.0 == now => last.1 += cost,
                        _ => reference.push((now, cost)),
                    }
                }
                let copy = check(log.as_ref(), &p, now, cost);
                let (decision, change) = decide(log.as_ref(), &p, now, cost);
                prop_assert_eq!(decision, copy.decision);
                if let Some(change) = change {
                    let log = log.get_or_insert_with(SlidingLog::default);
                    prop_assert_eq!(log.check_change(&p, &change).is_ok(), true);
                    log.apply(&p, &change);
                    consistent(log, &p)?;
                    prop_assert_eq!(Some(&*log), copy.next.as_ref());
                }
                let held: Vec<(u64, u64)> =
                    log.iter().flat_map(|log| log.entries(tick_shift(&p))).collect();
                prop_assert_eq!(&held, &reference);
            }
        }
    }
}
