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
//! Storage: one u64 word per entry, `offset << 20 | count`, where `offset` (44 bits) is the
//! entry's distance from `base_ns` in ticks and `count` (20 bits) is 1..=L. Entries are ordered,
//! instants strictly increasing, and `base_ns` is the oldest entry's instant (the first offset is
//! 0), so a log has exactly one encoding. Every call trims the entries that left the window (a
//! denial stores nothing, so the trimmed log is stored by the next admitted request). The log holds
//! at most L entries: 8 bytes each.

use super::{inspection, relative_ms, Algorithm, Decision, Field, Outcome, Policy};

const COUNT_BITS: u32 = 20;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
const OFFSET_BITS: u32 = u64::BITS - COUNT_BITS;
const MAX_OFFSET: u64 = (1 << OFFSET_BITS) - 1;

/// The largest L a log can hold: an entry's count must fit its 20 bits. The command layer bounds
/// L further by `ratelimit.max-log-entries`, whose maximum this is.
pub const MAX_LOG_LIMIT: u64 = 1_000_000;
const _: () = assert!(MAX_LOG_LIMIT <= COUNT_MASK);

/// Stored state: the entries, packed (see the module comment).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlidingLog {
    base_ns: u64,
    /// A boxed slice, not a Vec: 16 bytes inline instead of 24, and no spare capacity.
    words: Box<[u64]>,
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

/// Why stored words are not a log.
pub type Invalid = &'static str;

impl SlidingLog {
    /// The instant of the oldest entry, ns (0 when empty).
    pub fn base_ns(&self) -> u64 {
        self.base_ns
    }

    /// The packed entries, oldest first.
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// A log from stored parts, validated against the policy it was stored under: at most L
    /// entries whose counts are 1..=L and sum to at most L, strictly increasing offsets starting
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
        if total > policy.limit() {
            return Err("sliding log total above its limit");
        }
        if base_ns.checked_add(last.unwrap_or(0) << shift).is_none() {
            return Err("sliding log instant out of range");
        }
        Ok(SlidingLog {
            base_ns,
            words: words.into_boxed_slice(),
        })
    }

    /// Heap bytes held (for `MEMORY USAGE`).
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of_val::<[u64]>(&self.words)
    }

    /// The instant of the entry `word`, ns. The offset is below 2^44 and the shift at most 17,
    /// and the sum was checked when the log was built; saturating all the same.
    fn instant(&self, word: u64, shift: u32) -> u64 {
        self.base_ns.saturating_add((word >> COUNT_BITS) << shift)
    }

    /// The entries as (instant ns, count), oldest first.
    fn entries(&self, shift: u32) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.words
            .iter()
            .map(move |&w| (self.instant(w, shift), w & COUNT_MASK))
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
        let mut words: Vec<u64> = Vec::with_capacity(entries.len());
        let mut base = None;
        for &(at, count) in entries {
            let at = tick_ceil(at, shift).max(floor);
            let base = *base.get_or_insert(at);
            let offset = (at - base) >> shift;
            match words.last_mut() {
                Some(last) if *last >> COUNT_BITS == offset => *last += count,
                _ => words.push(offset << COUNT_BITS | count),
            }
        }
        SlidingLog {
            base_ns: base.unwrap_or(0),
            words: words.into_boxed_slice(),
        }
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
pub fn check(
    state: Option<&SlidingLog>,
    policy: &Policy,
    now_ns: u64,
    cost: u64,
) -> Outcome<SlidingLog> {
    let (shift, window, limit) = (tick_shift(policy), policy.window_ns(), policy.limit());
    let empty = SlidingLog::default();
    let log = state.unwrap_or(&empty);
    // Entries are ordered, so the ones still in the window are a suffix.
    let first_live = log
        .words
        .partition_point(|&w| !in_window(log.instant(w, shift), window, now_ns));
    let live = log.words.get(first_live..).unwrap_or_default();
    let total: u64 = live.iter().map(|w| w & COUNT_MASK).sum();
    let newest = live.last().map(|&w| log.instant(w, shift));

    let asked = cost.max(1);
    let admitted = total.saturating_add(asked) <= limit;
    let retry_after_ns = (!admitted).then(|| {
        // Wait until enough of the oldest entries have left: the entry whose leaving brings the
        // total down to L − asked. It exists, as asked <= L.
        let excess = total.saturating_add(asked) - limit;
        let mut freed = 0;
        live.iter()
            .find(|&&w| {
                freed += w & COUNT_MASK;
                freed >= excess
            })
            .map_or(0, |&w| until_gone(log.instant(w, shift), window, now_ns))
    });
    if !admitted || cost == 0 {
        let decision = Decision {
            allowed: u64::from(admitted),
            capacity: limit,
            remaining: limit.saturating_sub(total),
            retry_after_ns,
            reset_after_ns: newest.map_or(0, |at| until_gone(at, window, now_ns)),
        };
        return Outcome {
            decision,
            next: None,
        };
    }

    // Admitted: the live entries, rebased on the oldest, plus this request. It is recorded at
    // now, or with the newest entry if the clock went back: entries stay ordered, and a request
    // recorded later leaves later, never earlier.
    let at = tick_ceil(now_ns, shift).max(newest.unwrap_or(0));
    let first_offset = live.first().map_or(0, |w| w >> COUNT_BITS);
    let base_ns = live.first().map_or(at, |&w| log.instant(w, shift));
    let mut words = Vec::with_capacity(live.len() + 1);
    words.extend(live.iter().map(|w| w - (first_offset << COUNT_BITS)));
    // `at` is at most a window and a tick after the oldest live entry (or is the newest entry):
    // its offset fits (see `tick_shift`).
    let offset = at.saturating_sub(base_ns) >> shift;
    match words.last_mut() {
        Some(last) if *last >> COUNT_BITS == offset => *last += cost,
        _ => words.push(offset << COUNT_BITS | cost),
    }
    let decision = Decision {
        allowed: 1,
        capacity: limit,
        remaining: limit - (total + cost),
        retry_after_ns: None,
        reset_after_ns: until_gone(at, window, now_ns),
    };
    let next = SlidingLog {
        base_ns,
        words: words.into_boxed_slice(),
    };
    Outcome {
        decision,
        next: Some(next),
    }
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
/// its instant (rounded up to the new tick) and counts while it lies in the new window. If they
/// add up to more than the new L, only the newest L are kept: the decisions are the same (a full
/// log denies either way, and the window empties from the oldest end), and the log fits. A longer
/// window cannot bring back entries that already left the shorter one.
pub fn rescale(state: &SlidingLog, from: &Policy, to: &Policy, now_ns: u64) -> SlidingLog {
    let window = to.window_ns();
    let mut entries: Vec<(u64, u64)> = state
        .entries(tick_shift(from))
        .filter(|&(at, _)| in_window(at, window, now_ns))
        .collect();
    let total: u64 = entries.iter().map(|&(_, count)| count).sum();
    // Dropping the excess from the oldest end: reverse, drop from the (new) end, reverse back.
    entries.reverse();
    drop_newest(&mut entries, total.saturating_sub(to.limit()));
    entries.reverse();
    SlidingLog::pack(tick_shift(to), &entries)
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
    let mut own = vec![("entries", int(state.words.len() as u64))];
    let instant = |w: Option<&u64>| w.map(|&w| relative_ms(state.instant(w, shift).into(), now_ns));
    if let (Some(oldest), Some(newest)) =
        (instant(state.words.first()), instant(state.words.last()))
    {
        own.extend([("oldest_ms", oldest), ("newest_ms", newest)]);
    }
    let count = live_entries(state, policy, now_ns)
        .iter()
        .map(|&(_, c)| c)
        .sum();
    own.push(("count", int(count)));
    inspection(policy, own, &check(Some(state), policy, now_ns, 0).decision)
}

impl Algorithm for SlidingLog {
    const NAME: &'static str = "sliding log";
    const TAG: u8 = 3;
    const BURST: bool = false;

    fn check(state: Option<&Self>, policy: &Policy, now_ns: u64, cost: u64) -> Outcome<Self> {
        check(state, policy, now_ns, cost)
    }

    fn rescale(&self, from: &Policy, to: &Policy, now_ns: u64) -> Self {
        rescale(self, from, to, now_ns)
    }

    fn refund(&self, policy: &Policy, now_ns: u64, n: u64) -> Self {
        refund(self, policy, now_ns, n)
    }

    fn inspect(&self, policy: &Policy, now_ns: u64) -> Vec<Field> {
        inspect(self, policy, now_ns)
    }

    fn entries(policy: &Policy) -> u64 {
        policy.limit()
    }
}

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
        assert_eq!(log.base_ns(), T0 + 100 * MS);
        assert_eq!(log.words()[0], 6);
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
        // A lower limit: the newest 5; the same decisions as the unclamped log.
        let to = policy(5, 1000);
        let r = rescale(&log, &from, &to, T0 + 700 * MS);
        assert_eq!(entries(&r, &to), [(300 * MS, 1), (600 * MS, 4)]);
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
        let ok = SlidingLog::from_parts(&p, log.base_ns(), log.words().to_vec());
        assert_eq!(ok, Ok(log.clone()));
        let w = log.words().to_vec();
        let bad = |base: u64, words: Vec<u64>| SlidingLog::from_parts(&p, base, words).is_err();
        assert!(bad(log.base_ns(), vec![w[1], w[0]]), "out of order");
        assert!(bad(log.base_ns(), vec![w[0], w[0]]), "repeated instant");
        assert!(bad(log.base_ns(), vec![w[1]]), "first offset not 0");
        assert!(
            bad(log.base_ns(), vec![w[0] & !COUNT_MASK, w[1]]),
            "count 0"
        );
        assert!(bad(log.base_ns(), vec![w[0] | 9, w[1]]), "total above L");
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
}
