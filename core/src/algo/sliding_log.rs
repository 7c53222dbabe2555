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
//!
//! The entries live in a ring of words (see `ring`); this file is the algorithm on them.

use super::bytes::Reader;
use super::decision::{Decision, Outcome};
use super::inspect::{inspection, relative_ms, Field};
use super::policy::Policy;
pub use ring::{entry_hash, mix, Change, Charge, Invalid, SlidingLog, MAX_LOG_LIMIT};
use ring::{in_window, tick_ceil, tick_shift, COUNT_MASK};

mod ring;

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
    .fold(
        u64::from(<SlidingLog as super::algorithm::Algorithm>::TAG),
        |h, &x| mix(h ^ x),
    )
}

super::algorithm::algorithm!(SlidingLog, name: "sliding log", id: "sliding_log", tag: 3, burst: false,
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
mod tests;
