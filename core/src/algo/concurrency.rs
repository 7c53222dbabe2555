//! Concurrency: at most N in flight per key. Where the other limiters bound how often, this one
//! bounds how many at once: a request takes a slot when it starts and gives it back when it
//! ends, and a worker that dies mid-request gives its slot back on its own, TTL later.
//!
//! Terms:
//! - `holder`: one request in flight, named by its caller's id (a request id, a job id) and
//!   stored as that id's 64-bit digest ([`holder_id`]) with the instant it expires.
//! - `N` (the policy's L): how many holders may be live at once. `TTL` (the policy's W, in ms):
//!   how long a holder lives after its last ACQUIRE or RENEW. A holder is live while
//!   `now < expires_ns`; from its expiry on it holds nothing, whether or not it is still stored.
//! - `ACQUIRE id` admits while fewer than N holders are live; by an id that is already live it
//!   renews that holder (never a second slot). `RENEW id` moves a live holder's expiry to
//!   now + TTL. `RELEASE id` ends a live holder. `PEEK` answers what an ACQUIRE by a new id
//!   would get. RENEW and RELEASE of an id that holds nothing (unknown, expired, released
//!   before) change nothing and answer 0 (see [`operate`]): never a negative count, never a
//!   slot taken.
//!
//! The reply's `remaining` is N less the live holders (0 when more are live than a lowered N
//! allows); `retry_after` the time until an ACQUIRE by a new id would be admitted (the k-th
//! earliest expiry, k the holders over N − 1); `reset_after` the time until every slot is free
//! (the latest expiry).
//!
//! Ids are digests: two ids with the same 64-bit digest are one holder (the second ACQUIRE
//! renews the first's slot, a RELEASE by either ends it). Among h live holders the chance that
//! a new id collides with one of them is h/2^64 (below 10^-16 at the [`MAX_HOLDERS`] cap); a
//! collision can let one more request in than N, never fewer. A digest keeps a holder at 16
//! bytes whatever the id's length; ids are at most [`MAX_ID_BYTES`] long.
//!
//! Through the [`Algorithm`](super::algorithm::Algorithm) trait (`RL.PEEK`, `RL.INSPECT`, `RL.CHARGE`,
//! `RL.REFUND`), a request of cost n is n anonymous holders (ids no caller names, derived from
//! the instant): exactly a sliding log of L = N, W = TTL, whose promise it keeps (never more than
//! N admitted in any interval shorter than TTL). A charge holds n anonymous slots for TTL; a
//! refund ends the n holders that would expire last.
//!
//! Stored: the holders sorted by id, ids distinct; expired holders are dropped by the next
//! change other than a RELEASE (an ACQUIRE, a RENEW, a charge or a refund), so a state holds at most N live holders plus
//! those that expired (or were released) since. A RELEASE drops its own holder and nothing else
//! (so it is the same change on any clock, see [`Concurrency::release`]): it keeps the released
//! holder in memory with expiry 0 (live at no instant; not encoded, so replicas, the AOF and the
//! RDB never see it), and a change that leaves as many holders as are stored writes them in
//! place: a key that goes from one holder to none and back keeps its allocation (no allocator
//! call per call).

use super::bytes::{Invalid, Reader};
use super::decision::{Decision, Outcome};
use super::inspect::{inspection, relative_ms, Field};
use super::policy::Policy;
use super::sliding_log::mix;

/// The largest N: every change replicates the holders whole (16 bytes each, 16 KB at the cap)
/// and an ACQUIRE looks them up, so the cap bounds the work and the bytes of one call.
pub const MAX_HOLDERS: u64 = 1_000;

/// The longest id accepted, in bytes: it is hashed, so this bounds only the hashing.
pub const MAX_ID_BYTES: usize = 1_024;

/// One request in flight: its id's digest and the instant it expires, ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    pub id: u64,
    pub expires_ns: u64,
}

impl Holder {
    fn live(&self, now_ns: u64) -> bool {
        now_ns < self.expires_ns
    }
}

/// Stored state: the holders, sorted by id, ids distinct (see the module comment). Empty: no
/// allocation.
#[derive(Clone, Debug, Default)]
pub struct Concurrency {
    holders: Box<[Holder]>,
}

impl Concurrency {
    /// The holders the state is made of: a released one kept only for its allocation is not
    /// (it is neither encoded nor compared).
    fn encoded(&self) -> impl Iterator<Item = &Holder> + Clone {
        self.holders.iter().filter(|h| h.expires_ns != RELEASED)
    }
}

impl PartialEq for Concurrency {
    fn eq(&self, other: &Concurrency) -> bool {
        self.encoded().eq(other.encoded())
    }
}

impl Eq for Concurrency {}

/// What a call does with the slots (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Acquire(u64),
    Renew(u64),
    Release(u64),
    Peek,
}

/// The digest a holder is stored under: every byte of the id reaches every bit (splitmix64's
/// finaliser over 8-byte words, seeded with the length). Stable: it is stored.
pub fn holder_id(id: &[u8]) -> u64 {
    let mut h = mix(id.len() as u64);
    for chunk in id.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        h = mix(h ^ u64::from_le_bytes(word));
    }
    h
}

impl Concurrency {
    /// Every holder stored, live or expired, sorted by id.
    pub fn holders(&self) -> &[Holder] {
        &self.holders
    }

    /// Holders live at `now_ns`.
    pub fn live(&self, now_ns: u64) -> u64 {
        self.holders.iter().filter(|h| h.live(now_ns)).count() as u64
    }

    fn find(&self, id: u64) -> Option<&Holder> {
        let at = self.holders.binary_search_by_key(&id, |h| h.id).ok()?;
        self.holders.get(at)
    }

    /// Whether `id` holds a slot at `now_ns`.
    pub fn holds(&self, id: u64, now_ns: u64) -> bool {
        self.find(id).is_some_and(|h| h.live(now_ns))
    }

    /// The live holders at `now_ns`, `id` (live or not) left out.
    fn kept(&self, now_ns: u64, without: Option<u64>) -> Vec<Holder> {
        self.holders
            .iter()
            .filter(|h| h.live(now_ns) && Some(h.id) != without)
            .copied()
            .collect()
    }

    fn of(mut holders: Vec<Holder>) -> Concurrency {
        holders.sort_unstable_by_key(|h| h.id);
        Concurrency {
            holders: holders.into_boxed_slice(),
        }
    }
}

/// The expiry a released holder keeps while it stays stored: live at no `now`, whatever the
/// clock does.
const RELEASED: u64 = 0;

fn expiry(policy: &Policy, now_ns: u64) -> u64 {
    now_ns.saturating_add(policy.window_ns())
}

/// The answer on `state` at `now_ns` for a call that was `admitted` (allowed 1: a slot taken,
/// renewed or given back, or a peek that would be) or not, for an ACQUIRE of `want` new slots:
/// `remaining` and `reset_after` as the state stands, `retry_after` None when admitted, else the
/// time until `want` slots are free (0 when they are now).
fn answer(state: &[Holder], policy: &Policy, now_ns: u64, admitted: bool, want: u64) -> Decision {
    let n = policy.limit();
    let (mut live, mut latest) = (0u64, None::<u64>);
    for h in state.iter().filter(|h| h.live(now_ns)) {
        live += 1;
        latest = latest.max(Some(h.expires_ns));
    }
    let reset_after_ns = latest.map_or(0, |e| e - now_ns);
    // Free when at most n − want are live: after the k-th earliest expiry (only a call that
    // admitted nothing needs it, so only it collects the expiries).
    let k = (live + want).saturating_sub(n);
    let retry_after_ns = match (
        admitted,
        usize::try_from(k).ok().and_then(|k| k.checked_sub(1)),
    ) {
        (true, _) => None,
        (false, None) => Some(0),
        (false, Some(i)) => {
            let mut expiries: Vec<u64> = state
                .iter()
                .filter(|h| h.live(now_ns))
                .map(|h| h.expires_ns)
                .collect();
            Some(match expiries.get(i) {
                Some(_) => *expiries.select_nth_unstable(i).1 - now_ns,
                // More wanted than N can ever hold: the caller guarantees want <= N.
                None => reset_after_ns,
            })
        }
    };
    Decision {
        allowed: u64::from(admitted),
        capacity: n,
        remaining: n.saturating_sub(live),
        retry_after_ns,
        reset_after_ns,
    }
}

/// One call of `RL.CONCURRENCY` on the state at `now_ns` under `policy` (N, TTL): the decision,
/// and the state to store when the call changed it ([`Concurrency::apply`] on a copy).
pub fn operate(
    state: Option<&Concurrency>,
    policy: &Policy,
    now_ns: u64,
    op: Op,
) -> Outcome<Concurrency> {
    let mut next = state.cloned().unwrap_or_default();
    let (decision, changed) = next.apply(policy, now_ns, op);
    Outcome {
        decision,
        next: changed.then_some(next),
    }
}

impl Concurrency {
    /// One call of `RL.CONCURRENCY` at `now_ns` under `policy` (N, TTL), changing the holders
    /// in place; returns the decision and whether the holders changed.
    /// - `Acquire(id)`: renews a live holder `id`, else admits it while fewer than N are live
    ///   (denied: retry_after until a slot frees).
    /// - `Renew(id)`: renews a live holder; `id` holding nothing: allowed 0, nothing changes
    ///   (the caller must ACQUIRE again; retry_after says when that would be admitted, 0 now).
    /// - `Release(id)`: see [`Concurrency::release`].
    /// - `Peek`: an ACQUIRE by a new id, answered, nothing changed.
    ///
    /// An ACQUIRE or RENEW that changes the holders drops the expired ones. A renewal with none
    /// expired changes one expiry where it is; a change that leaves as many holders as are
    /// stored rewrites them in place; any other change writes them anew, once, in order.
    pub fn apply(&mut self, policy: &Policy, now_ns: u64, op: Op) -> (Decision, bool) {
        let live = self.live(now_ns);
        let (id, takes) = match op {
            Op::Acquire(id) => (id, true),
            Op::Renew(id) => (id, false),
            Op::Release(id) => return self.release(policy, now_ns, id),
            Op::Peek => {
                let free = live < policy.limit();
                return (answer(&self.holders, policy, now_ns, free, 1), false);
            }
        };
        // `id` looked up once: whether it holds a slot, and where it is stored.
        let found = self.holders.binary_search_by_key(&id, |h| h.id);
        let held = found
            .ok()
            .and_then(|at| self.holders.get(at))
            .is_some_and(|h| h.live(now_ns));
        if !(held || (takes && live < policy.limit())) {
            return (answer(&self.holders, policy, now_ns, false, 1), false);
        }
        let expires_ns = expiry(policy, now_ns);
        let all_live = live as usize == self.holders.len();
        // The live holders after the call: `live`, less `id` when it held a slot, plus `id`.
        let after = live as usize - usize::from(held) + 1;
        match (found, all_live) {
            (Ok(at), true) => {
                if let Some(h) = self.holders.get_mut(at) {
                    h.expires_ns = expires_ns;
                }
            }
            _ if after == self.holders.len() => {
                // As many holders as stored (a new one in the place of an expired or
                // released one): rewritten in their allocation.
                let mut kept = 0;
                for at in 0..self.holders.len() {
                    let stays = self.holders.get(at);
                    if stays.is_some_and(|h| h.live(now_ns) && h.id != id) {
                        // kept <= at < len: both in place.
                        self.holders.swap(kept, at);
                        kept += 1;
                    }
                }
                let at = self
                    .holders
                    .get(..kept)
                    .map_or(0, |k| k.partition_point(|h| h.id < id));
                // One place is left past the kept ones (after == len): `at` is in it.
                if let Some(tail) = self.holders.get_mut(at..) {
                    tail.rotate_right(1);
                    if let Some(first) = tail.first_mut() {
                        *first = Holder { id, expires_ns };
                    }
                }
            }
            _ => {
                let mut holders = Vec::with_capacity(live as usize + 1);
                let mut pending = Some(Holder { id, expires_ns });
                for h in self.holders.iter().filter(|h| h.live(now_ns) && h.id != id) {
                    if let Some(new) = pending.filter(|new| new.id < h.id) {
                        holders.push(new);
                        pending = None;
                    }
                    holders.push(*h);
                }
                holders.extend(pending);
                self.holders = holders.into_boxed_slice();
            }
        }
        (answer(&self.holders, policy, now_ns, true, 1), true)
    }
}

impl Concurrency {
    /// `RELEASE id`: ends the holder `id` (allowed 1 when it was live: one slot given back;
    /// else 0, retry_after as for RENEW). It reads the clock only for its answer: the change,
    /// "the stored holder `id` is gone", is the same at any instant, since it drops `id` whether
    /// or not it has expired, and nothing else (the other expired holders wait for the next
    /// ACQUIRE). So a replica or an AOF replay that runs the RELEASE itself, on its own clock,
    /// stores exactly what the master stored. Changed: `id` was stored (an expired `id` is
    /// dropped too, a change no answer shows). The released holder stays in its place with
    /// expiry 0 (live at no instant, not encoded), so the allocation is kept.
    pub fn release(&mut self, policy: &Policy, now_ns: u64, id: u64) -> (Decision, bool) {
        let at = self.holders.binary_search_by_key(&id, |h| h.id).ok();
        let Some(h) = at
            .and_then(|at| self.holders.get_mut(at))
            .filter(|h| h.expires_ns != RELEASED)
        else {
            return (answer(&self.holders, policy, now_ns, false, 1), false);
        };
        let was_live = h.live(now_ns);
        h.expires_ns = RELEASED;
        (answer(&self.holders, policy, now_ns, was_live, 1), true)
    }
}

/// `n` anonymous holders added to the live ones at `now_ns`: ids no caller names, derived from
/// the instant (a collision with a stored id moves on to the next candidate), so the state stays
/// a pure function of the calls. Stops at [`MAX_HOLDERS`].
fn with_anonymous(state: &Concurrency, policy: &Policy, now_ns: u64, n: u64) -> Concurrency {
    let mut holders = state.kept(now_ns, None);
    let room = MAX_HOLDERS.saturating_sub(holders.len() as u64);
    let mut candidate = now_ns;
    for _ in 0..n.min(room) {
        let id = loop {
            candidate = candidate.wrapping_add(1);
            let id = mix(candidate);
            if !holders.iter().any(|h| h.id == id) {
                break id;
            }
        };
        holders.push(Holder {
            id,
            expires_ns: expiry(policy, now_ns),
        });
    }
    Concurrency::of(holders)
}

/// A request of `cost` anonymous holders (see the module comment); `cost` 0 peeks. The caller
/// guarantees `cost <= policy.limit()`.
pub fn check(
    state: Option<&Concurrency>,
    policy: &Policy,
    now_ns: u64,
    cost: u64,
) -> Outcome<Concurrency> {
    let empty = Concurrency::default();
    let state = state.unwrap_or(&empty);
    let want = cost.max(1);
    let admitted = state.live(now_ns).saturating_add(want) <= policy.limit();
    if cost == 0 || !admitted {
        return Outcome {
            decision: answer(&state.holders, policy, now_ns, admitted, want),
            next: None,
        };
    }
    let next = with_anonymous(state, policy, now_ns, cost);
    Outcome {
        decision: answer(&next.holders, policy, now_ns, true, 1),
        next: Some(next),
    }
}

/// Holders keep their expiries under a new N or TTL: a request in flight stays in flight.
pub fn rescale(state: &Concurrency, _from: &Policy, _to: &Policy, _now_ns: u64) -> Concurrency {
    state.clone()
}

/// Ends the `n` live holders that would expire last (an operator freeing slots by hand).
pub fn refund(state: &Concurrency, _policy: &Policy, now_ns: u64, n: u64) -> Concurrency {
    let mut holders = state.kept(now_ns, None);
    holders.sort_unstable_by_key(|h| std::cmp::Reverse((h.expires_ns, h.id)));
    let ended = usize::try_from(n).unwrap_or(usize::MAX).min(holders.len());
    Concurrency::of(holders.split_off(ended))
}

/// Holds `n` anonymous slots for TTL whatever is live (up to [`MAX_HOLDERS`], which denies
/// under any N).
pub fn charge(state: &Concurrency, policy: &Policy, now_ns: u64, n: u64) -> Concurrency {
    with_anonymous(state, policy, now_ns, n)
}

/// The live holders, in units.
pub fn counted(state: &Concurrency, policy: &Policy, now_ns: u64) -> u128 {
    u128::from(state.live(now_ns)) * policy.units_per_token()
}

/// `holders` (live now) and `next_expiry_ms` (the earliest live expiry, relative; -1: none).
pub fn inspect(state: &Concurrency, policy: &Policy, now_ns: u64) -> Vec<Field> {
    let next = state
        .holders
        .iter()
        .filter(|h| h.live(now_ns))
        .map(|h| h.expires_ns)
        .min()
        .map_or(-1, |e| relative_ms(u128::from(e), now_ns));
    let live = i64::try_from(state.live(now_ns)).unwrap_or(i64::MAX);
    inspection(
        policy,
        vec![("holders", live), ("next_expiry_ms", next)],
        &check(Some(state), policy, now_ns, 0).decision,
    )
}

/// `[count u32][id u64, expires_ns u64]…`, sorted by id.
pub fn encode(state: &Concurrency, out: &mut Vec<u8>) {
    // At most MAX_HOLDERS: fits. A released holder kept for its allocation is left out: a
    // replica, the AOF and the RDB get the holders without it (and a RELEASE's effect stays
    // short enough for Redis to keep it in one allocation).
    let count = u32::try_from(state.encoded().count()).unwrap_or(u32::MAX);
    out.extend_from_slice(&count.to_le_bytes());
    for h in state.encoded() {
        out.extend_from_slice(&h.id.to_le_bytes());
        out.extend_from_slice(&h.expires_ns.to_le_bytes());
    }
}

/// Refuses an N over [`MAX_HOLDERS`], more holders than that, ids out of order or repeated.
pub fn decode(r: &mut Reader<'_>, policy: &Policy) -> Result<Concurrency, Invalid> {
    if policy.limit() > MAX_HOLDERS {
        return Err("concurrency limit above the holder cap");
    }
    let count = u64::from(r.u32()?);
    if count > MAX_HOLDERS {
        return Err("more holders than the cap");
    }
    if (r.left() as u64) < count * 16 {
        return Err("truncated");
    }
    let mut holders = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let holder = Holder {
            id: r.u64()?,
            expires_ns: r.u64()?,
        };
        if holders.last().is_some_and(|h: &Holder| h.id >= holder.id) {
            return Err("holders out of order or repeated");
        }
        holders.push(holder);
    }
    Ok(Concurrency {
        holders: holders.into_boxed_slice(),
    })
}

super::algorithm::algorithm!(Concurrency, name: "concurrency", id: "concurrency", tag: 7, burst: false,
    type Change = ();

    // The holders encoded, as a replica or a reload holds them: a released holder kept for its
    // allocation (at most one a key, 16 bytes) is left out, so INFO's gauges and MEMORY USAGE
    // agree between a master and its replicas, as allocator rounding is left out everywhere.
    fn heap_bytes(&self) -> usize {
        self.encoded().count() * std::mem::size_of::<Holder>()
    }

    fn entries_held(&self) -> u64 {
        self.encoded().count() as u64
    }
);

#[cfg(test)]
mod tests;
