//! The leaky bucket as a queue: a traffic *shaper* with nginx `limit_req` semantics
//! (`rate`, `burst`, `delay=`, `nodelay`). A policer answers "yes or no"; a shaper answers "yes,
//! after this delay" so that what it lets through leaves at the rate.
//!
//! Terms, in units (see the parent module); T (`emission_interval`) is W/L, one token:
//! - `tat`: the theoretical arrival time, as in GCRA: the instant the queue has drained. Its
//!   distance ahead of `now` is the key's *debt*.
//! - The *excess* of a request (nginx's word, counted in requests) is the debt it finds, over T:
//!   how many requests are ahead of it beyond the rate. The first request after idle has excess
//!   0 and goes at once.
//! - `queue` (q, nginx's `burst`): how many requests may wait beyond the rate. A request whose
//!   excess would exceed q is denied. This is GCRA with capacity B = q + 1, which is how q is
//!   stored: the policy's capacity is q + 1 (so the reply's `limit` is "how many may pass at
//!   once after idle", as for every other limiter).
//! - `undelayed` (d, nginx's `delay=`, 0 ≤ d ≤ q; `nodelay` is d = q): the first d requests
//!   beyond the rate are not delayed. A request of excess e > d waits `(e − d)·T`.
//!
//! So, exactly as nginx (`ngx_http_limit_req_module`): excess = max(0, E + 1 − elapsed/T) where E
//! is the previous admitted request's excess; denied when excess > q; delayed by
//! `(excess − d)·T` when excess > d. nginx keeps excess in thousandths of a request and time in
//! ms and truncates the delay; here it is exact (units), and the delay is rounded *up* to the ns
//! (to the ms in the reply), so a caller that waits it is never early.
//!
//! A request of cost n is n requests arriving together and released together: it is admitted
//! when `debt + n·T ≤ (q+1)·T` and released when its last unit would be, after
//! `max(0, debt + n·T − (d+1)·T)`.
//!
//! What it promises, for a clock that does not step back (property tests below):
//! - Admitted requests: at most q + 1 + L·t/W in any interval of length t (GCRA with B = q + 1).
//! - Released instants (admission + delay) are in admission order (a FIFO queue), and any
//!   interval of length t holds at most `max(d+1, n) + ⌊(t·L + L − 1)/W⌋` released requests (n
//!   the largest cost; `L − 1` absorbs the rounding of each instant up to the ns). So beyond the
//!   d + 1 that may go together, releases are spaced W/L apart.
//! - A denial's `retry_after` is exact, and so is a delay: the same request arriving at its
//!   release instant would go at once (a cost n > d + 1 still waits its own `(n−d−1)·T`);
//!   1 ns earlier it would still wait.
//!
//! Why d lives in the state and not in the policy: a stored policy is packed into 16 bytes with
//! no room left for a fourth 40-bit number, and a stored limiter must stay within 48 bytes. The
//! state (tat u128 + d u64, packed to 8 = 24 bytes, like the token bucket's) fits exactly. The
//! command layer compares the requested d with the stored one the way it compares policies.

use super::algorithm::Algorithm;
use super::amount::Amount;
use super::bytes::{Invalid, Reader};
use super::decision::{Decided, Outcome};
use super::gcra::{self, Gcra};
use super::inspect::{inspection, millitokens, relative_ms, Field};
use super::policy::{ms_ceil, Policy};

/// Stored state.
///
/// `repr(C, packed(8))` like `Gcra`: 24 bytes, so the stored limiter keeps its 48-byte size
/// class. Read fields by value (`{ s.tat }`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, packed(8))]
pub struct Shape {
    /// The theoretical arrival time, in units of the stored policy (as in `gcra`).
    pub tat: u128,
    /// d: how many requests beyond the rate pass without delay; at most the queue (capacity − 1).
    pub undelayed: u64,
}

impl Shape {
    /// The state a request configured with `undelayed` decides on: the stored one (already
    /// carried to the request's policy) with its d replaced, or an idle key (tat 0 is debt 0).
    pub fn configured(state: Option<&Shape>, undelayed: u64) -> Shape {
        Shape {
            tat: state.map_or(0, |s| s.tat),
            undelayed,
        }
    }
}

/// `RL.SHAPE`'s request (`Amount::Shaped`): decided with the request's d in place of the stored
/// one ([`Shape::configured`]). d belongs to the policy: a new one is stored even when the request
/// is denied (as a new L, W or queue is, see `step`); a peek stores nothing.
pub fn shaped(
    state: Option<&Shape>,
    policy: &Policy,
    now_ns: u64,
    cost: u64,
    undelayed: u64,
) -> Decided<Shape> {
    let configured = Shape::configured(state, undelayed);
    let mut shaped = check(Some(&configured), policy, now_ns, cost);
    if shaped.outcome.next.is_none() && cost > 0 && state.is_some_and(|s| s.undelayed != undelayed)
    {
        shaped.outcome.next = Some(configured);
    }
    shaped
}

/// Decides a request of `cost` at `now_ns` with the d stored in `state` (0 when None); `cost` 0
/// peeks. The caller guarantees `cost <= policy.capacity()` (the queue + 1). The delay is what
/// the admitted request must wait before it proceeds (0 when denied or when it may go now); a
/// peek reports what a cost-1 request would wait.
pub fn check(state: Option<&Shape>, policy: &Policy, now_ns: u64, cost: u64) -> Decided<Shape> {
    let gcra_state = state.map(|s| Gcra { tat: s.tat });
    let Outcome { decision, next } = gcra::check(gcra_state.as_ref(), policy, now_ns, cost);
    let undelayed = state.map_or(0, |s| s.undelayed);
    let emission_interval = policy.units_per_token();
    let now = policy.units_at(now_ns);
    // The debt once this request (or, for a peek, a cost-1 request) is in the queue.
    let debt_after = match next {
        Some(g) => g.tat - now,
        None => {
            let debt = state.map_or(0, |s| s.tat.saturating_sub(now));
            debt.saturating_add(emission_interval)
        }
    };
    // Released when its last unit's excess is down to d: it waits out the rest.
    let free = u128::from(undelayed).saturating_add(1) * emission_interval;
    let delay_ns = if decision.allowed == 1 {
        policy.ns_ceil(debt_after.saturating_sub(free))
    } else {
        0
    };
    Decided {
        outcome: Outcome {
            decision,
            next: next.map(|g| Shape {
                tat: g.tat,
                undelayed,
            }),
        },
        delay_ns,
    }
}

impl Algorithm for Shape {
    type Change = ();
    const NAME: &'static str = "leaky bucket";
    const ID: &'static str = "shape";
    const TAG: u8 = 6;
    /// Its capacity (queue + 1) is not L.
    const BURST: bool = true;

    /// Decides with the d stored in the state; `RL.SHAPE` puts the request's d there first
    /// ([`Shape::configured`]) and reads the delay from [`check`].
    fn check(state: Option<&Self>, policy: &Policy, now_ns: u64, cost: u64) -> Outcome<Self> {
        check(state, policy, now_ns, cost).outcome
    }

    /// `RL.SHAPE`'s amount is [`shaped`]; any other decides with the stored d.
    #[inline(always)]
    fn decide(state: Option<&Self>, policy: &Policy, now_ns: u64, amount: Amount) -> Decided<Self> {
        match amount {
            Amount::Shaped { cost, undelayed } => shaped(state, policy, now_ns, cost, undelayed),
            other => check(state, policy, now_ns, other.asked()),
        }
    }

    fn rescale(&self, from: &Policy, to: &Policy, now_ns: u64) -> Self {
        rescale(self, from, to, now_ns)
    }

    fn refund(&self, policy: &Policy, now_ns: u64, n: u64) -> Self {
        refund(self, policy, now_ns, n)
    }

    fn charge(&self, policy: &Policy, now_ns: u64, n: u64) -> Self {
        charge(self, policy, now_ns, n)
    }

    /// The queue's debt, as GCRA's.
    fn counted(&self, policy: &Policy, now_ns: u64) -> u128 {
        gcra::counted(&Gcra { tat: self.tat }, policy, now_ns)
    }

    /// `tat u128` (units of the stored policy, bounded as GCRA's), `undelayed u64` (d, at most
    /// the queue: B − 1).
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&{ self.tat }.to_le_bytes());
        out.extend_from_slice(&self.undelayed.to_le_bytes());
    }

    fn decode(r: &mut Reader<'_>, policy: &Policy) -> Result<Self, Invalid> {
        let (tat, undelayed) = (r.u128()?, r.u64()?);
        if tat > gcra::max_tat(policy) {
            return Err("leaky bucket arrival time out of range");
        }
        if undelayed >= policy.capacity() {
            return Err("leaky bucket DELAY above its queue");
        }
        Ok(Shape { tat, undelayed })
    }

    fn inspect(&self, policy: &Policy, now_ns: u64) -> Vec<Field> {
        inspect(self, policy, now_ns)
    }
}

/// `RL.INSPECT`'s fields: `tat_ms`, when the queue has drained, relative to now (≤ 0: empty);
/// `queued_millirequests`, the requests ahead beyond the rate (the debt over T), in thousandths
/// rounded up; `undelayed`, d; and `delay_ms`, what a cost-1 request admitted now would wait.
pub fn inspect(state: &Shape, policy: &Policy, now_ns: u64) -> Vec<Field> {
    let tat = state.tat;
    let debt = tat.saturating_sub(policy.units_at(now_ns));
    let shaped = check(Some(state), policy, now_ns, 0);
    let own = vec![
        (
            "tat_ms",
            relative_ms(tat.div_ceil(policy.units_per_ns()), now_ns),
        ),
        ("queued_millirequests", millitokens(debt, policy, true)),
        (
            "undelayed",
            i64::try_from(state.undelayed).unwrap_or(i64::MAX),
        ),
        (
            "delay_ms",
            i64::try_from(ms_ceil(shaped.delay_ns)).unwrap_or(i64::MAX),
        ),
    ];
    inspection(policy, own, &shaped.outcome.decision)
}

/// The same queue under a new policy: what was already queued carries over (as GCRA's debt),
/// and d is kept within the new queue.
pub fn rescale(state: &Shape, from: &Policy, to: &Policy, now_ns: u64) -> Shape {
    let carried = gcra::rescale(&Gcra { tat: state.tat }, from, to, now_ns);
    Shape {
        tat: carried.tat,
        undelayed: state.undelayed.min(to.capacity() - 1),
    }
}

/// Gives back `n` queue places (requests that were admitted but never sent).
pub fn refund(state: &Shape, policy: &Policy, now_ns: u64, n: u64) -> Shape {
    let back = gcra::refund(&Gcra { tat: state.tat }, policy, now_ns, n);
    Shape {
        tat: back.tat,
        undelayed: state.undelayed,
    }
}

/// Queues `n` whatever the queue holds (see `Algorithm::charge`), as GCRA's debt does; d stays.
pub fn charge(state: &Shape, policy: &Policy, now_ns: u64, n: u64) -> Shape {
    let charged = gcra::charge(&Gcra { tat: state.tat }, policy, now_ns, n);
    Shape {
        tat: charged.tat,
        undelayed: state.undelayed,
    }
}

#[cfg(test)]
mod tests {
    use super::super::props::{
        answers_are_exact, bucket_bound, run, run_at, trace_strategy, worst_interval, T0,
    };
    use super::*;
    use proptest::prelude::*;

    const SEC: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    /// Rate L per W ms with a queue of q.
    fn policy(l: u64, w: u64, queue: u64) -> Policy {
        Policy::new(l, w, queue + 1).unwrap()
    }

    #[test]
    fn inspect_shows_the_queue() {
        // 10 per second (T = 100 ms), queue 4, d = 1: five at once, read 50 ms later.
        let p = policy(10, 1000, 4);
        let s = check(Some(&Shape::configured(None, 1)), &p, T0, 5)
            .outcome
            .next
            .unwrap();
        assert_eq!(
            inspect(&s, &p, T0 + 50 * MS),
            vec![
                ("limit", 10),
                ("window_ms", 1000),
                ("burst", 5),
                ("tat_ms", 450),
                ("queued_millirequests", 4500),
                ("undelayed", 1),
                ("delay_ms", 0),
                ("remaining", 0),
                ("retry_after_ms", 50),
                ("reset_after_ms", 450),
            ]
        );
        // 300 ms later 1.5 are queued: a request would pass, and wait 50 ms (excess 2.5 − d 1 − 1).
        assert_eq!(
            inspect(&s, &p, T0 + 350 * MS)[3..],
            [
                ("tat_ms", 150),
                ("queued_millirequests", 1500),
                ("undelayed", 1),
                ("delay_ms", 50),
                ("remaining", 3),
                ("retry_after_ms", -1),
                ("reset_after_ms", 150)
            ]
        );
    }

    /// Runs requests (offset from T0, cost) with d = `undelayed`; returns (allowed, delay, retry).
    fn run_d(p: &Policy, undelayed: u64, reqs: &[(u64, u64)]) -> Vec<(u64, u64, Option<u64>)> {
        let out = std::cell::RefCell::new(Vec::new());
        run_at(reqs, |s: Option<&Shape>, now, cost| {
            let shaped = check(Some(&Shape::configured(s, undelayed)), p, now, cost);
            let d = shaped.outcome.decision;
            out.borrow_mut()
                .push((d.allowed, shaped.delay_ns, d.retry_after_ns));
            shaped.outcome
        });
        out.into_inner()
    }

    /// nginx's documentation: `limit_req_zone … rate=1r/s; limit_req zone=one burst=5;`. Seven
    /// requests at once: the first goes, the next five are queued and released one per second,
    /// the seventh is rejected (excess 6 > burst 5) and could come back 1 s later.
    #[test]
    fn nginx_rate_1rs_burst_5() {
        let p = policy(1, 1000, 5);
        let d = run_d(&p, 0, &[(0, 1); 7]);
        let delays: Vec<_> = d.iter().map(|r| r.1).collect();
        assert_eq!(delays, [0, SEC, 2 * SEC, 3 * SEC, 4 * SEC, 5 * SEC, 0]);
        assert!(d[..6].iter().all(|r| r.0 == 1 && r.2.is_none()));
        assert_eq!((d[6].0, d[6].2), (0, Some(SEC)));

        // 1 s later the queue has moved on by one: one more place, at the back (released at 6 s).
        let d = run_d(&p, 0, &[(0, 6), (SEC, 1), (SEC, 1)]);
        assert_eq!(d[1], (1, 5 * SEC, None));
        assert_eq!(d[2], (0, 0, Some(SEC)));

        // Idle long enough, the key is empty again: the next request goes at once.
        let d = run_d(&p, 0, &[(0, 6), (6 * SEC, 1), (6 * SEC, 1)]);
        assert_eq!(d[1], (1, 0, None));
        assert_eq!(d[2], (1, SEC, None));
    }

    /// `burst=5 nodelay`: the six go at once, the seventh is rejected, and one place frees every
    /// second ("NGINX forwards all … immediately and marks the slots in the queue as taken").
    #[test]
    fn nginx_rate_1rs_burst_5_nodelay() {
        let p = policy(1, 1000, 5);
        let d = run_d(&p, 5, &[(0, 1); 7]);
        assert!(d[..6].iter().all(|r| *r == (1, 0, None)));
        assert_eq!(d[6], (0, 0, Some(SEC)));
        let d = run_d(&p, 5, &[(0, 6), (SEC - 1, 1), (SEC, 1), (SEC, 1)]);
        assert_eq!(d[1], (0, 0, Some(1)));
        assert_eq!(d[2], (1, 0, None));
        assert_eq!(d[3], (0, 0, Some(SEC)));
    }

    /// `burst=5 delay=3`: the first and three excess requests go at once; the 5th and 6th wait
    /// 1 s and 2 s (excess 4 and 5, minus 3, times 1 s); the 7th is rejected.
    #[test]
    fn nginx_rate_1rs_burst_5_delay_3() {
        let p = policy(1, 1000, 5);
        let d = run_d(&p, 3, &[(0, 1); 7]);
        let delays: Vec<_> = d.iter().map(|r| r.1).collect();
        assert_eq!(delays, [0, 0, 0, 0, SEC, 2 * SEC, 0]);
        assert_eq!((d[6].0, d[6].2), (0, Some(SEC)));
    }

    /// The default burst (0): one request per second, no queue; nothing is ever delayed.
    #[test]
    fn nginx_default_burst_0_never_delays() {
        let p = policy(1, 1000, 0);
        let d = run_d(&p, 0, &[(0, 1), (500 * MS, 1), (SEC, 1)]);
        assert_eq!(d, [(1, 0, None), (0, 0, Some(500 * MS)), (1, 0, None)]);
    }

    #[test]
    fn uneven_interval_delay_rounds_up() {
        // 3 per second, queue 2: T = 333,333,333⅓ ns.
        let p = policy(3, 1000, 2);
        let d = run_d(&p, 0, &[(0, 1), (0, 1), (0, 1)]);
        assert_eq!(d[1].1, 333_333_334);
        assert_eq!(d[2].1, 666_666_667);
    }

    #[test]
    fn cost_is_released_with_its_last_unit() {
        // Queue 5, d 0: a cost-3 request on an idle key waits 2 T (its third unit's excess).
        let p = policy(1, 1000, 5);
        let d = run_d(&p, 0, &[(0, 3), (0, 1), (0, 3)]);
        assert_eq!(d[0], (1, 2 * SEC, None));
        assert_eq!(d[1], (1, 3 * SEC, None));
        assert_eq!(d[2], (0, 0, Some(SEC)));
    }

    #[test]
    fn peek_reports_a_cost_one_delay_and_stores_nothing() {
        let p = policy(1, 1000, 5);
        let s = Shape::configured(None, 1);
        let s = check(Some(&s), &p, T0, 3).outcome.next.unwrap();
        let peek = check(Some(&s), &p, T0, 0);
        assert_eq!(peek.outcome.next, None);
        // Debt 3 T; a fourth request has excess 3, d 1: waits 2 T.
        assert_eq!(peek.delay_ns, 2 * SEC);
        assert_eq!(peek.outcome.decision.remaining, 3);
        assert_eq!(check(None, &p, T0, 0).delay_ns, 0);
    }

    #[test]
    fn rescale_and_refund_keep_the_queue() {
        let from = policy(1, 1000, 5);
        let to = policy(2, 1000, 1);
        let s = check(Some(&Shape::configured(None, 4)), &from, T0, 3)
            .outcome
            .next
            .unwrap();
        let moved = rescale(&s, &from, &to, T0);
        // d clamped to the new queue; 3 s of debt at 1/s is 6 requests at 2/s: nothing fits.
        assert_eq!(moved.undelayed, 1);
        assert_eq!(check(Some(&moved), &to, T0, 1).outcome.decision.allowed, 0);
        let back = refund(&s, &from, T0, 2);
        assert_eq!({ back.tat }, { s.tat } - 2 * from.units_per_token());
        assert_eq!(back.undelayed, 4);
    }

    /// nginx's algorithm as its source states it: excess in thousandths of a request, time in
    /// ms, `excess = max(0, last_excess − rate·ms/1000 + 1000)`, rejected above `burst·1000`,
    /// delayed `(excess − delay·1000)·1000/rate` ms (truncated), a new key starting at 0.
    /// Returns (admitted, delay in ms as an exact fraction numerator over `rate`).
    fn nginx(rate_per_s: u64, burst: u64, delay: u64, trace_ms: &[u64]) -> Vec<(bool, u64)> {
        let rate = rate_per_s * 1000;
        let (mut last, mut out) = (None::<(u64, i64)>, Vec::new());
        for &now in trace_ms {
            let excess = match last {
                None => 0,
                Some((at, e)) => {
                    let ms = (now - at) as i64;
                    (e - rate as i64 * ms / 1000 + 1000).max(0)
                }
            };
            if excess as u64 > burst * 1000 {
                out.push((false, 0));
                continue;
            }
            last = Some((now, excess));
            // Exact delay in ms, times rate/1000 (so it stays an integer): excess − delay·1000.
            out.push((true, (excess as u64).saturating_sub(delay * 1000)));
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// On whole-millisecond traces with a whole rate per second (where nginx's integer
        /// arithmetic is exact), the shaper admits exactly what nginx admits and delays exactly
        /// nginx's delay, rounded up to the ms instead of down.
        #[test]
        fn reproduces_nginx_limit_req(
            rate in 1u64..=10, burst in 0u64..=8, delay_frac in 0u64..=8,
            gaps in prop::collection::vec(prop_oneof![Just(0u64), 0u64..300, 0u64..3000], 1..80),
        ) {
            let delay = delay_frac.min(burst);
            let p = policy(rate, 1000, burst);
            let mut at = 0;
            let trace: Vec<u64> = gaps.iter().map(|g| { at += g; at }).collect();
            let ours = run_d(&p, delay, &trace.iter().map(|&ms| (ms * MS, 1)).collect::<Vec<_>>());
            let theirs = nginx(rate, burst, delay, &trace);
            for (i, (o, (admitted, numer))) in ours.iter().zip(&theirs).enumerate() {
                prop_assert_eq!(o.0 == 1, *admitted, "request {} at {} ms", i, trace[i]);
                // delay ms = numer / rate exactly (numer thousandths of a request at rate/s).
                prop_assert_eq!(super::super::policy::ms_ceil(o.1), numer.div_ceil(rate), "request {}", i);
            }
        }

        /// Admitted requests keep GCRA's bound with capacity q + 1, and the decision is GCRA's
        /// field for field.
        #[test]
        fn admits_like_gcra_with_capacity_queue_plus_one(
            l in 1u64..=20, w in prop_oneof![1u64..=50, Just(1000u64)], q in 0u64..=10,
            d in 0u64..=10, trace in trace_strategy(11),
        ) {
            let p = policy(l, w, q);
            let d = d.min(q);
            let trace: Vec<_> = trace.into_iter().map(|(g, c)| (g, c.min(q + 1))).collect();
            let (admitted, steps) = run(&trace, |s: Option<&Shape>, now, cost| {
                check(Some(&Shape::configured(s, d)), &p, now, cost).outcome
            });
            prop_assert_eq!(worst_interval(&admitted, bucket_bound(&p)), None);
            let (_, g) = run(&trace, |s, now, cost| gcra::check(s, &p, now, cost));
            for (a, b) in steps.iter().zip(&g) {
                prop_assert_eq!(a.decision, b.decision);
            }
        }

        /// Released instants are in admission order and never beat the rate beyond the d + 1
        /// (or one request's cost) that may go together; delays and retry_after are exact;
        /// peeks change nothing.
        #[test]
        fn releases_keep_the_rate_and_delays_are_exact(
            l in 1u64..=20, w in prop_oneof![1u64..=50, Just(1000u64)], q in 0u64..=10,
            d in 0u64..=10, cap in prop_oneof![Just(1u64), 1u64..=11], trace in trace_strategy(11),
        ) {
            let p = policy(l, w, q);
            let d = d.min(q);
            let trace: Vec<_> = trace.into_iter().map(|(g, c)| (g, c.min(cap).min(q + 1))).collect();
            let decide = |s: Option<&Shape>, now: u64, cost: u64| {
                check(Some(&Shape::configured(s, d)), &p, now, cost)
            };
            let (_, steps) = run(&trace, |s, now, cost| decide(s, now, cost).outcome);
            let mut released = Vec::new();
            for step in &steps {
                let shaped = decide(step.before.as_ref(), step.now, step.cost);
                if shaped.outcome.next.is_none() {
                    prop_assert_eq!(shaped.delay_ns == 0 || step.cost == 0, true);
                    continue;
                }
                let at = step.now + shaped.delay_ns;
                if let Some(&(last, _)) = released.last() {
                    prop_assert!(at >= last, "released at {} before {}", at, last);
                }
                released.push((at, step.cost));
                // The same request arriving at its release instant waits only for its own
                // units beyond d + 1 (nothing, for a cost up to d + 1); 1 ns earlier, more.
                let own = p.ns_ceil(
                    u128::from(step.cost.saturating_sub(d + 1)) * p.units_per_token(),
                );
                let later = decide(step.before.as_ref(), at, step.cost);
                prop_assert_eq!((later.outcome.decision.allowed, later.delay_ns), (1, own));
                if shaped.delay_ns > 0 && step.cost <= d + 1 {
                    let early = decide(step.before.as_ref(), at - 1, step.cost);
                    prop_assert!(early.delay_ns > 0);
                }
            }
            let max_cost = trace.iter().map(|t| t.1).max().unwrap_or(1);
            let (units_ns, unit) = (u128::from(l), p.units_per_token());
            let bound = |len: u64| {
                u128::from((d + 1).max(max_cost))
                    + (u128::from(len) * units_ns + units_ns - 1) / unit
            };
            prop_assert_eq!(worst_interval(&released, bound), None);
            answers_are_exact(&steps, |s, now, cost| decide(s, now, cost).outcome)?;
        }
    }
}
