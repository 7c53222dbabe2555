//! The sliding log's entries in memory and as stored: the ring the algorithm
//! (`super`) decides on, with its changes applied in place.
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

use crate::algo::policy::Policy;

const COUNT_BITS: u32 = 20;
pub(super) const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
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
/// new entry keeps the log at most L entries, else the oldest beyond L − 1 (as the algorithm's
/// `bounded` merges them).
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
pub(super) fn tick_shift(policy: &Policy) -> u32 {
    (u64::BITS - policy.window_ns().leading_zeros()).saturating_sub(OFFSET_BITS - 1)
}

/// `at` rounded up to a multiple of 2^shift ns (down only if rounding up would overflow a u64,
/// some five centuries from now).
pub(super) fn tick_ceil(at: u64, shift: u32) -> u64 {
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
pub use crate::algo::bytes::Invalid;

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

    pub(super) fn capacity(&self) -> usize {
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
    pub(super) fn word(&self, i: usize) -> u64 {
        let cap = self.capacity();
        if i >= self.len as usize || cap == 0 {
            return 0;
        }
        let slot = HEADER + (self.head as usize + i) % cap;
        self.buf.get(slot).copied().unwrap_or(0)
    }

    /// The instant of the entry `word`, ns: read against the newest entry, which is at most
    /// `MAX_OFFSET` ticks after it.
    pub(super) fn instant(&self, word: u64, shift: u32) -> u64 {
        let newest = self.newest_ns();
        let behind = ((newest >> shift).wrapping_sub(word >> COUNT_BITS)) & MAX_OFFSET;
        newest.saturating_sub(behind << shift)
    }

    /// The entries as (instant ns, count), oldest first.
    pub(super) fn entries(&self, shift: u32) -> impl Iterator<Item = (u64, u64)> + '_ {
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
    pub(super) fn from_entries(shift: u32, entries: &[(u64, u64)]) -> SlidingLog {
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
    /// a policy was lowered, see [`super::rescale`]), strictly increasing offsets starting
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
    pub(super) fn pack(shift: u32, entries: &[(u64, u64)]) -> SlidingLog {
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

    /// [`super::charge`] as a change to apply in place ([`SlidingLog::apply_charge`]): the entries
    /// that left the window dropped, the oldest merged when the new one makes more than L (as
    /// [`super::charge`] merges them), `n` recorded at now (or with the newest entry). None where
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
pub(super) fn in_window(at: u64, window: u64, now_ns: u64) -> bool {
    u128::from(at) + u128::from(window) > u128::from(now_ns)
}
