use super::super::policy::ms_ceil;
use super::super::promises::{for_each_algorithm, policy_of, EachAlgorithm, Promised};
use super::super::props::{policy_strategy, window_policy_strategy, Promise};
use super::super::{
    fixed_window::FixedWindow, sliding_counter::SlidingCounter, sliding_log::SlidingLog,
};
use super::*;
use proptest::prelude::*;

const MS: u64 = 1_000_000;
const T0: u64 = 1_800_000_000_000 * MS;

/// A key as Redis holds it: the stored policy, state and other configurations, and the
/// absolute expiry (ms) the command layer gives it: `keep_ns` from now, rounded up. No
/// minimum TTL here, so the model is as strict as it can be.
/// The current policy and state, and the other configurations.
type Stored<S> = (Policy, S, Vec<(Policy, S)>);

struct Key<S> {
    stored: Option<Stored<S>>,
    expire_at_ms: u64,
}

impl<S: Algorithm> Key<S> {
    fn new() -> Key<S> {
        Key {
            stored: None,
            expire_at_ms: 0,
        }
    }

    /// One command. First Redis expires the key if its TTL has passed (its millisecond
    /// clock past the expiry: `now > when`, now in whole ms); the key must then be
    /// indistinguishable from a fresh one under every configuration it remembers, else
    /// expiry would have forgotten something one of them still counts.
    fn call(&mut self, p: &Policy, now_ns: u64, cost: u64) -> Result<Decision, TestCaseError> {
        if let Some((held, state, others)) = &self.stored {
            if now_ns / MS > self.expire_at_ms {
                for (held, state) in
                    std::iter::once((held, state)).chain(others.iter().map(|(p, s)| (p, s)))
                {
                    let stored = S::check(Some(state), held, now_ns, 0).decision;
                    let fresh = S::check(None, held, now_ns, 0).decision;
                    prop_assert_eq!(
                        stored,
                        fresh,
                        "expired while it still counted, at {}",
                        now_ns
                    );
                }
                self.stored = None;
            }
        }
        let held = self.stored.as_ref().map(|(policy, state, others)| Held {
            policy,
            state,
            others,
        });
        let out = step(held, p, now_ns, Amount::cost(cost));
        if let Some(kept) = out.store {
            prop_assert!(kept.keep_ns >= out.decision.reset_after_ns);
            prop_assert!(kept.others.len() < MAX_CONFIGURATIONS);
            self.expire_at_ms = ms_ceil(now_ns) + ms_ceil(kept.keep_ns);
            self.stored = Some((kept.policy, kept.state, kept.others));
        }
        if cost > 0 && self.stored.is_some() {
            prop_assert!(
                u128::from(self.expire_at_ms) * u128::from(MS)
                    >= u128::from(now_ns) + u128::from(out.decision.reset_after_ns),
                "the key expires before its reset_after {} ns at {}",
                out.decision.reset_after_ns,
                now_ns
            );
        }
        Ok(out.decision)
    }
}

/// Calls switching between two policies at random: (gap ns, cost, which policy).
fn switching_trace() -> impl Strategy<Value = Vec<(u64, u64, bool)>> {
    prop::collection::vec(
        (
            prop_oneof![Just(0u64), 0..5 * MS, 0..3_000 * MS],
            0u64..4,
            any::<bool>(),
        ),
        1..60,
    )
}

/// Runs `trace` on a key that Redis expires by the TTL the command layer gives it: the key
/// never expires while its state still counts under the policy it holds, denials and policy
/// changes included, and its TTL is never shorter than a reply's reset_after.
fn expiry_forgets_nothing<S: Algorithm>(
    p1: &Policy,
    p2: &Policy,
    trace: &[(u64, u64, bool)],
) -> Result<(), TestCaseError> {
    let mut key = Key::<S>::new();
    let mut now = T0;
    for &(gap, cost, second) in trace {
        now += gap;
        let p = if second { p2 } else { p1 };
        key.call(p, now, cost.min(p.capacity()))?;
    }
    Ok(())
}

/// Two policies of each kind for [`expiry_forgets_nothing`]: `A` takes the pair of its kind.
struct SurvivesDenials<'a> {
    buckets: [&'a Policy; 2],
    windows: [&'a Policy; 2],
    trace: &'a [(u64, u64, bool)],
}

impl EachAlgorithm for SurvivesDenials<'_> {
    fn run<A: Promised>(&mut self) -> Result<(), TestCaseError> {
        let p1 = policy_of::<A>(self.buckets[0], self.windows[0]);
        let p2 = policy_of::<A>(self.buckets[1], self.windows[1]);
        expiry_forgets_nothing::<A>(p1, p2, self.trace)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// For every algorithm of the registry.
    #[test]
    fn policy_changes_survive_denials(
        p1 in policy_strategy(), p2 in policy_strategy(),
        w1 in window_policy_strategy(), w2 in window_policy_strategy(),
        t in switching_trace(),
    ) {
        for_each_algorithm(&mut SurvivesDenials { buckets: [&p1, &p2], windows: [&w1, &w2], trace: &t })?;
    }
}

/// A rollout: two gateway configurations call one key with the same W and different L, in
/// any order. Runs `trace` and returns every admitted request (instant, cost, its policy's L).
fn rollout<S: Algorithm>(
    w_ms: u64,
    l1: u64,
    l2: u64,
    trace: &[(u64, u64, bool)],
) -> Result<Vec<(u64, u64, u64)>, TestCaseError> {
    let (p1, p2) = (
        Policy::new(l1, w_ms, l1).unwrap(),
        Policy::new(l2, w_ms, l2).unwrap(),
    );
    let mut key = Key::<S>::new();
    let (mut now, mut admitted) = (T0, Vec::new());
    for &(gap, cost, second) in trace {
        now += gap;
        let p = if second { &p2 } else { &p1 };
        let cost = cost.min(p.limit());
        if key.call(p, now, cost)?.allowed == 1 && cost > 0 {
            admitted.push((now, cost, p.limit()));
        }
    }
    Ok(admitted)
}

/// What the `i`-th admission and those before it admitted in `(from, to]`.
fn admitted_in(admitted: &[(u64, u64, u64)], i: usize, from: u64, to: u64) -> u64 {
    admitted
        .iter()
        .take(i + 1)
        .filter(|&&(at, _, _)| at > from && at <= to)
        .map(|&(_, cost, _)| cost)
        .sum()
}

fn rollout_strategy() -> impl Strategy<Value = (u64, u64, u64, Vec<(u64, u64, bool)>)> {
    (
        prop_oneof![Just(10u64), Just(1000u64), Just(60_000u64)],
        1u64..=20,
        1u64..=20,
        switching_trace(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// A request admitted under L finds at most L (itself included) in the W before it,
    /// whichever policy admitted the others: lowering L never forgets what was spent, so
    /// alternating calls cannot refill the looser policy.
    #[test]
    fn a_rollout_never_beats_the_policy_in_force_sliding_log((w, l1, l2, t) in rollout_strategy()) {
        let admitted = rollout::<SlidingLog>(w, l1, l2, &t)?;
        for (i, &(at, _, limit)) in admitted.iter().enumerate() {
            let held = admitted_in(&admitted, i, at.saturating_sub(w * MS), at);
            prop_assert!(held <= limit, "{} in the W before {} under L = {}", held, at, limit);
        }
    }

    /// The fixed window's form of it: at most L in the aligned window of each admission.
    #[test]
    fn a_rollout_never_beats_the_policy_in_force_fixed_window((w, l1, l2, t) in rollout_strategy()) {
        let admitted = rollout::<FixedWindow>(w, l1, l2, &t)?;
        for (i, &(at, _, limit)) in admitted.iter().enumerate() {
            let start = at - at % (w * MS);
            let held = admitted_in(&admitted, i, start.saturating_sub(1), at);
            prop_assert!(held <= limit, "{} in the window of {} under L = {}", held, at, limit);
        }
    }

    /// The sliding counter's form of it: its own bound, L plus what the previous window
    /// admitted (at most the larger L), in the W before each admission.
    #[test]
    fn a_rollout_never_beats_the_policy_in_force_sliding_counter((w, l1, l2, t) in rollout_strategy()) {
        let admitted = rollout::<SlidingCounter>(w, l1, l2, &t)?;
        for (i, &(at, _, limit)) in admitted.iter().enumerate() {
            let held = admitted_in(&admitted, i, at.saturating_sub(w * MS), at);
            let bound = limit + l1.max(l2);
            prop_assert!(held <= bound, "{} in the W before {} under L = {}", held, at, limit);
        }
    }
}

/// Gaps between calls, from none to ten minutes: windows from 1 ms to 1 h all matter.
fn gap() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), 0..5 * MS, 0..3_000 * MS, 0..600_000 * MS]
}

/// W from 1 ms to 1 h.
fn window_ms() -> impl Strategy<Value = u64> {
    prop_oneof![
        1u64..=50,
        Just(1000u64),
        Just(60_000u64),
        Just(3_600_000u64)
    ]
}

/// `configs` bucket configurations (L, W, B) and calls alternating among them at random:
/// (gap, cost up to the capacity, which configuration).
fn bucket_rollout(
    configs: std::ops::RangeInclusive<usize>,
) -> impl Strategy<Value = (Vec<Policy>, Vec<(u64, u64, usize)>)> {
    let policy = (1u64..=20, window_ms(), 1u64..=30)
        .prop_filter_map("refill bound", |(l, w, b)| Policy::new(l, w, b).ok());
    (
        prop::collection::vec(policy, configs),
        prop::collection::vec((gap(), 0u64..=30, 0usize..12), 1..80),
    )
}

/// The same for the window algorithms: (L, W) with capacity L.
fn window_rollout(
    configs: std::ops::RangeInclusive<usize>,
) -> impl Strategy<Value = (Vec<Policy>, Vec<(u64, u64, usize)>)> {
    let policy = (1u64..=20, window_ms()).prop_map(|(l, w)| Policy::new(l, w, l).unwrap());
    (
        prop::collection::vec(policy, configs),
        prop::collection::vec((gap(), 0u64..=20, 0usize..12), 1..80),
    )
}

/// An admitted request: when, its cost, under which configuration, its place among the
/// calls, the place of the call that took that configuration up (its first call, or its
/// first after it was dropped: its promise counts from then), and whether the key remembers
/// it after the call (not so for an overflow, whose promise is the remembered ones').
#[derive(Clone, Copy, Debug)]
struct Admission {
    at: u64,
    cost: u64,
    config: usize,
    call: usize,
    since: usize,
    promised: bool,
}

/// Runs a rollout on a key (expired by its TTL, as Redis would) and returns every admission.
fn run_rollout<S: Algorithm>(
    configs: &[Policy],
    trace: &[(u64, u64, usize)],
) -> Result<Vec<Admission>, TestCaseError> {
    let mut key = Key::<S>::new();
    let (mut now, mut admitted, mut first) = (T0, Vec::new(), vec![None; configs.len()]);
    // Each configuration taken up, as the key holds it or (dropped beside its kin) would
    // hold it had it been kept: charged with everything admitted since.
    let mut shadow: Vec<Option<S>> = vec![None; configs.len()];
    for (call, &(gap, cost, which)) in trace.iter().enumerate() {
        now += gap;
        let config = which % configs.len();
        let p = &configs[config];
        let cost = cost.min(p.capacity());
        // An expired key forgets every configuration (each was back to full, see `Key`).
        if key.stored.is_some() && now / MS > key.expire_at_ms {
            first.iter_mut().for_each(|f| *f = None);
            shadow.iter_mut().for_each(|s| *s = None);
        }
        // A configuration whose state is as good as fresh is taken up anew by its next
        // call: from then on it may be dropped, and starts again from another's state.
        for (c, s) in shadow.iter_mut().enumerate() {
            let q = &configs[c];
            let fresh = s.as_ref().is_some_and(|s| {
                S::check(Some(s), q, now, 0).decision == S::check(None, q, now, 0).decision
            });
            if fresh {
                (first[c], *s) = (None, None);
            }
        }
        // A peek stores nothing: the configuration is remembered from its first call that
        // spends (or is denied).
        if cost > 0 {
            first[config].get_or_insert(call);
        }
        let since = first[config].unwrap_or(call);
        let allowed = key.call(p, now, cost)?.allowed == 1;
        let remembered: Vec<Policy> = key.stored.iter().flat_map(remembered_of).collect();
        for c in 0..configs.len() {
            let held = key.stored.as_ref().and_then(|k| state_in(k, &configs[c]));
            shadow[c] = match (held, shadow[c].take()) {
                _ if first[c].is_none() => None,
                (Some(state), _) => Some(state.clone()),
                (None, Some(s)) if allowed && cost > 0 => Some(s.charge(&configs[c], now, cost)),
                (None, s) => s,
            };
            // Not taken up after all (an overflow): its next call takes it up.
            if shadow[c].is_none() {
                first[c] = None;
            }
        }
        if allowed && cost > 0 {
            admitted.push(Admission {
                at: now,
                cost,
                config,
                call,
                since,
                promised: remembered.contains(p),
            });
        }
    }
    Ok(admitted)
}

/// The state a stored key holds under `p`, if it remembers it.
fn state_in<'a, S>(stored: &'a Stored<S>, p: &Policy) -> Option<&'a S> {
    std::iter::once((&stored.0, &stored.1))
        .chain(stored.2.iter().map(|(p, s)| (p, s)))
        .find(|(q, _)| *q == p)
        .map(|(_, s)| s)
}

/// Every policy a stored key remembers, the current one first.
fn remembered_of<S>(stored: &Stored<S>) -> Vec<Policy> {
    std::iter::once(stored.0)
        .chain(stored.2.iter().map(|(p, _)| *p))
        .collect()
}

/// What was admitted, by the `i`-th admission and those before it, in `[from, to]`, among
/// the calls from the `since`-th on.
fn held(admitted: &[Admission], i: usize, since: usize, from: u64, to: u64) -> u128 {
    admitted
        .iter()
        .take(i + 1)
        .filter(|a| a.call >= since && a.at >= from && a.at <= to)
        .map(|a| u128::from(a.cost))
        .sum()
}

/// The instant of the `call`-th call of `trace`.
fn first_call_at(_admitted: &[Admission], trace: &[(u64, u64, usize)], call: usize) -> u64 {
    T0 + trace.iter().take(call + 1).map(|t| t.0).sum::<u64>()
}

/// The bucket promise of the configuration in force, over everything admitted: for every
/// admission under (L, W, B) at t and every instant s from that configuration's first call
/// on, what was admitted in [s, t] is at most B + L·(t − s)/W.
fn buckets_keep_each_promise<S: Algorithm>(
    configs: &[Policy],
    trace: &[(u64, u64, usize)],
) -> Result<(), TestCaseError> {
    let admitted = run_rollout::<S>(configs, trace)?;
    for (i, a) in admitted.iter().enumerate().filter(|(_, a)| a.promised) {
        let p = &configs[a.config];
        for s in admitted
            .iter()
            .take(i + 1)
            .filter(|b| b.call >= a.since)
            .map(|b| b.at)
        {
            let total = held(&admitted, i, a.since, s, a.at);
            let bound = super::super::props::bucket_bound(p)(a.at - s);
            prop_assert!(
                total <= bound,
                "{} in [{}, {}] under {:?}: bound {}",
                total,
                s,
                a.at,
                p,
                bound
            );
        }
    }
    Ok(())
}

/// The window algorithms' promise: at most L (its own) from `from(p, at)` to each admission
/// `at`, counting from its configuration's first call. `stretch` names that span in a
/// failure.
fn at_most_l_before_each<S: Algorithm>(
    configs: &[Policy],
    trace: &[(u64, u64, usize)],
    from: impl Fn(&Policy, u64) -> u64,
    stretch: &str,
) -> Result<(), TestCaseError> {
    let admitted = run_rollout::<S>(configs, trace)?;
    for (i, a) in admitted.iter().enumerate().filter(|(_, a)| a.promised) {
        let p = &configs[a.config];
        let total = held(&admitted, i, a.since, from(p, a.at), a.at);
        prop_assert!(
            total <= u128::from(p.limit()),
            "{} in {} {} under {:?}",
            total,
            stretch,
            a.at,
            p
        );
    }
    Ok(())
}

/// The sliding log's: at most L in the W before each admission (its own L and W).
fn log_keeps_each_promise<S: Algorithm>(
    configs: &[Policy],
    trace: &[(u64, u64, usize)],
) -> Result<(), TestCaseError> {
    let w_before = |p: &Policy, at: u64| (at + 1).saturating_sub(p.window_ns());
    at_most_l_before_each::<S>(configs, trace, w_before, "the W before")
}

/// The fixed window's: at most L in its own aligned window of each admission.
fn window_keeps_each_promise<S: Algorithm>(
    configs: &[Policy],
    trace: &[(u64, u64, usize)],
) -> Result<(), TestCaseError> {
    let start = |p: &Policy, at: u64| p.window_start(at);
    at_most_l_before_each::<S>(configs, trace, start, "the window of")
}

/// The sliding counter's own rule, recomputed from everything admitted: each admission
/// whose previous window began after its configuration's first call found
/// `prev·(W − e) + (curr + n − 1)·W < L·W` with its own L and W.
fn counter_keeps_each_promise<S: Algorithm>(
    configs: &[Policy],
    trace: &[(u64, u64, usize)],
) -> Result<(), TestCaseError> {
    let admitted = run_rollout::<S>(configs, trace)?;
    for (i, a) in admitted.iter().enumerate().filter(|(_, a)| a.promised) {
        let p = &configs[a.config];
        let (w, start) = (p.window_ns(), p.window_start(a.at));
        // The previous window must begin after the configuration's first call.
        let Some(prev_start) = start.checked_sub(w) else {
            continue;
        };
        if first_call_at(&admitted, trace, a.since) > prev_start {
            continue;
        }
        let prev = held(&admitted, i, a.since, prev_start, start - 1);
        let curr = if i == 0 {
            0
        } else {
            held(&admitted, i - 1, a.since, start, a.at)
        };
        let e = u128::from(a.at - start);
        let (w, l) = (u128::from(w), u128::from(p.limit()));
        prop_assert!(
            prev * (w - e) + (curr + u128::from(a.cost) - 1) * w < l * w,
            "prev {} curr {} cost {} at e {} under {:?}",
            prev,
            curr,
            a.cost,
            e,
            p
        );
    }
    Ok(())
}

/// A rollout of each kind: `A` runs the one of its kind and is held to its own promise.
struct KeepsEachPromise<'a> {
    buckets: &'a (Vec<Policy>, Vec<(u64, u64, usize)>),
    windows: &'a (Vec<Policy>, Vec<(u64, u64, usize)>),
}

impl EachAlgorithm for KeepsEachPromise<'_> {
    fn run<A: Promised>(&mut self) -> Result<(), TestCaseError> {
        let (configs, trace) = if A::BURST { self.buckets } else { self.windows };
        match A::PROMISE {
            Promise::Bucket => buckets_keep_each_promise::<A>(configs, trace),
            Promise::SlidingLog => log_keeps_each_promise::<A>(configs, trace),
            Promise::FixedWindow => window_keeps_each_promise::<A>(configs, trace),
            Promise::SlidingCounter => counter_keeps_each_promise::<A>(configs, trace),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Two to four configurations alternating on a key of every algorithm of the registry:
    /// every admission keeps the promise of the configuration that admitted it, whoever
    /// admitted the rest.
    #[test]
    fn alternating_configurations_keep_each_promise(buckets in bucket_rollout(2..=4), windows in window_rollout(2..=4)) {
        for_each_algorithm(&mut KeepsEachPromise { buckets: &buckets, windows: &windows })?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    /// Five to eight: as many as a key remembers, none forgotten while it still counts.
    #[test]
    fn five_to_eight_configurations_keep_each_promise(buckets in bucket_rollout(5..=8), windows in window_rollout(5..=8)) {
        for_each_algorithm(&mut KeepsEachPromise { buckets: &buckets, windows: &windows })?;
    }

    /// Nine to twelve: beyond what a key remembers. The remembered configurations keep
    /// their promise counting the overflowed admissions too (each of which they admitted).
    #[test]
    fn overflowing_configurations_keep_each_remembered_promise(buckets in bucket_rollout(9..=12), windows in window_rollout(9..=12)) {
        for_each_algorithm(&mut KeepsEachPromise { buckets: &buckets, windows: &windows })?;
    }
}

/// The trace that found it: 100 spent under L = 100, then calls alternating between L = 10
/// and L = 100 in the same minute. Clamping the count to 10 on each tightening let every
/// call under 100 through.
#[test]
fn alternating_limits_admit_nothing_more() {
    let trace: Vec<(u64, u64, bool)> = std::iter::once((0, 100, false))
        .chain((0..40).map(|i| (MS, 1, i % 2 == 0)))
        .collect();
    let admitted = rollout::<FixedWindow>(60_000, 100, 10, &trace).unwrap();
    assert_eq!(admitted.len(), 1);
    let admitted = rollout::<SlidingLog>(60_000, 100, 10, &trace).unwrap();
    assert_eq!(admitted.len(), 1);
    let admitted = rollout::<SlidingCounter>(60_000, 100, 10, &trace).unwrap();
    assert_eq!(admitted.len(), 1);
}

/// The trace: a sliding log spent at 10 per second, tightened to 10 per minute and
/// denied, then tried again 2 s later. The old rule stored nothing on the denial and the key
/// expired after 1 s: 10 more were admitted.
#[test]
fn a_denied_tightening_holds() {
    let loose = Policy::new(10, 1_000, 10).unwrap();
    let tight = Policy::new(10, 60_000, 10).unwrap();
    let mut key = Key::<SlidingLog>::new();
    assert_eq!(key.call(&loose, T0, 10).unwrap().allowed, 1);
    let denied = key.call(&tight, T0, 1).unwrap();
    assert_eq!(
        (denied.allowed, ms_ceil(denied.reset_after_ns)),
        (0, 60_000)
    );
    assert_eq!(key.expire_at_ms, ms_ceil(T0) + 60_000);
    let later = T0 + 2_000 * MS;
    let admitted = (0..10).filter(|_| key.call(&tight, later, 1).unwrap().allowed == 1);
    assert_eq!(admitted.count(), 0);
}
