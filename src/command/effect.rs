//! What follows a change of a stored limiter: its expiry, the effect sent to replicas and the
//! AOF, and the keyspace signal. A denial, a peek or an error does none of this.

use std::cell::RefCell;

use crate::algo::ms_ceil;
use crate::host::call::{Ctx, RString};
use crate::state::delta::Delta;
use crate::state::effect::state_effect_header;
use crate::state::replay::ChargedDelta;
use crate::state::Limiter;

/// The shortest TTL a limiter key gets: 1 s.
///
/// A key that expires within milliseconds of a request (L=100 per second refills one token in
/// 10 ms) is deleted and created again by nearly every request of a client that calls a few
/// times a second, and Redis's active-expiry cycle spends its time reaping such keys. Measured
/// with `scripts/bench callgrind -r 5000` (every key revisited within a second), RL.GCRA over
/// random keys went from 15,678 to 12,257 instructions per request in the whole server, and p99
/// at -P 16 over 100,000 random keys halved. The price: a key touched once stays 1 s instead of
/// reset_after_ms, about 200 bytes per new key per second. A key outliving its reset is
/// harmless: its state has decayed to "full", and every algorithm decides from the stored state
/// and `now`, never from "the key exists".
pub const MIN_TTL_MS: u64 = 1_000;

/// The key lives until the limiter is full again, so an idle key disappears once it would be
/// indistinguishable from a fresh one: `keep_ns` from now, the reply's reset_after (or, for a
/// key that remembers other configurations, the longest of theirs, see `algo::step`); never
/// shorter than [`MIN_TTL_MS`].
pub fn expire_at_ms(now_ns: u64, keep_ns: u64) -> u64 {
    ms_ceil(now_ns).saturating_add(ms_ceil(keep_ns).max(MIN_TTL_MS))
}

/// What a change of a stored limiter sends to replicas and the AOF, as the state layer makes
/// it: the whole state, or a delta on the state they hold (`state::delta`), which they apply or
/// refuse if it was not made on that state.
pub enum Commit<'a> {
    /// The state whole (with its remembered configurations and share).
    State(&'a Limiter),
    /// An admit decided in place under the policy the key holds (the sliding log): 35 bytes
    /// whatever the log's length, where the full state is 8 bytes per entry.
    Delta(&'a Delta),
    /// An admit that charges every configuration a key remembers in place
    /// (`state::delta::ChargedDelta`): 36 bytes and 20 per other configuration.
    Charged(&'a ChargedDelta),
}

/// After the limiter in key `name` changed (it must live `keep_ns` more, see [`expire_at_ms`]):
/// propagates `RL.SETSTATE name <effect>` (`what` and its absolute expiry in one argument, see
/// `state::delta`'s effect envelope) so replicas and the AOF store exactly this state and expiry
/// (they never decide again on their own clock), and signals the change (WATCH, the command's
/// keyspace event). Returns the absolute expiry the caller gives the key. Every command that
/// changes a limiter ends here.
#[inline]
pub fn commit(ctx: &Ctx, name: RString<'_>, what: Commit<'_>, now_ns: u64, keep_ns: u64) -> u64 {
    let expire_at_ms = expire_at_ms(now_ns, keep_ns);
    match what {
        Commit::State(limiter) => ENCODE_BUF.with_borrow_mut(|buf| {
            buf.clear();
            state_effect_header(expire_at_ms, buf);
            limiter.encode(buf);
            ctx.replicate(c"RL.SETSTATE", name, buf);
        }),
        Commit::Delta(delta) => ctx.replicate(c"RL.SETSTATE", name, &delta.effect(expire_at_ms)),
        Commit::Charged(delta) => {
            ctx.replicate(c"RL.SETSTATE", name, &delta.effect(expire_at_ms));
        }
    }
    ctx.changed(name);
    expire_at_ms
}

thread_local! {
    /// Reused for every encoding: commands run on Redis's main thread, one at a time.
    static ENCODE_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}
