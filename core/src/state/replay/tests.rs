use super::*;
use crate::algo::props::T0;
use crate::algo::sliding_log;
use crate::algo::Policy;
use crate::state::delta::DELTA_LEN;
use crate::state::effect::{state_effect_header, Effect};
use proptest::prelude::*;

const MS: u64 = 1_000_000;

/// What the master sends after a command: nothing, the full state, or a delta.
#[derive(Debug)]
enum Sent {
    Full(Vec<u8>),
    Delta(Vec<u8>),
}

/// One request on the master, as the command layer does it: a delta for an admit on a log
/// held under the same policy, else the full state of whatever changed.
fn admit(stored: &mut Option<Limiter>, policy: Policy, now: u64, cost: u64) -> Option<Sent> {
    let cost = cost.min(policy.limit());
    match stored {
        Some(limiter) if limiter.policy == policy => {
            let AlgoState::SlidingLog(log) = &limiter.state else {
                unreachable!()
            };
            let (_, change) = sliding_log::decide(Some(log), &policy, now, cost);
            let change = change?;
            let delta = Delta::of(limiter, change).unwrap();
            let AlgoState::SlidingLog(log) = &mut limiter.state else {
                unreachable!()
            };
            log.apply(&policy, &change);
            let mut buf = Vec::new();
            delta.encode(&mut buf);
            Some(Sent::Delta(buf))
        }
        Some(limiter) => {
            let AlgoState::SlidingLog(log) = &limiter.state else {
                unreachable!()
            };
            let carried = sliding_log::rescale(log, &limiter.policy, &policy, now);
            let next = sliding_log::check(Some(&carried), &policy, now, cost).next?;
            *limiter = Limiter {
                policy,
                state: AlgoState::SlidingLog(next),
            };
            Some(full(limiter))
        }
        None => {
            let next = sliding_log::check(None, &policy, now, cost).next?;
            let limiter = stored.insert(Limiter {
                policy,
                state: AlgoState::SlidingLog(next),
            });
            Some(full(limiter))
        }
    }
}

fn refund(stored: &mut Option<Limiter>, now: u64, n: u64) -> Option<Sent> {
    let limiter = stored.as_mut()?;
    let AlgoState::SlidingLog(log) = &limiter.state else {
        unreachable!()
    };
    let next = sliding_log::refund(log, &limiter.policy, now, n);
    if &next == log {
        return None;
    }
    limiter.state = AlgoState::SlidingLog(next);
    Some(full(limiter))
}

fn full(limiter: &Limiter) -> Sent {
    let mut buf = Vec::new();
    limiter.encode(&mut buf);
    Sent::Full(buf)
}

/// The replica's side: RL.SETSTATE stores a full state; a delta applies or is refused.
fn receive(replica: &mut Option<Limiter>, effect: &Sent) -> Result<(), Error> {
    match effect {
        Sent::Full(bytes) => {
            *replica = Some(Limiter::decode(bytes)?);
            Ok(())
        }
        Sent::Delta(bytes) => {
            let delta = Delta::decode(bytes)?;
            let limiter = replica
                .as_mut()
                .ok_or(Error::BadState("delta for a missing key"))?;
            delta.apply(limiter)
        }
    }
}

fn encoded(l: &Option<Limiter>) -> Option<Vec<u8>> {
    l.as_ref().map(|l| {
        let mut buf = Vec::new();
        l.encode(&mut buf);
        buf
    })
}

fn policy(l: u64, w: u64) -> Policy {
    Policy::new(l, w, l).unwrap()
}

#[test]
fn an_admit_on_a_held_log_is_26_bytes_whatever_its_length() {
    for l in [10, 10_000] {
        let p = policy(l, 10_000);
        let step = 10_000 * MS / l;
        let mut master = None;
        let mut now = T0;
        for _ in 0..l {
            admit(&mut master, p, now, 1);
            now += step;
        }
        // Full: each admit drops the oldest entry and appends one.
        for _ in 0..5 {
            match admit(&mut master, p, now, 1) {
                Some(Sent::Delta(bytes)) => assert_eq!(bytes.len(), DELTA_LEN),
                other => panic!("{other:?}"),
            }
            now += step;
        }
    }
}

#[test]
fn refused_on_another_state_and_untouched() {
    let p = policy(10, 1000);
    let mut master = None;
    admit(&mut master, p, T0, 1);
    admit(&mut master, p, T0 + MS, 2);
    let before = master.clone();
    let Some(Sent::Delta(bytes)) = admit(&mut master, p, T0 + 2 * MS, 1) else {
        panic!("expected a delta")
    };
    let delta = Delta::decode(&bytes).unwrap();
    // The state it was made on: applies, and gives the master's.
    let mut replica = before.clone();
    delta.apply(replica.as_mut().unwrap()).unwrap();
    assert_eq!(encoded(&replica), encoded(&master));
    // Applied twice (a replayed effect): refused, unchanged.
    let again = replica.clone();
    assert!(delta.apply(replica.as_mut().unwrap()).is_err());
    assert_eq!(replica, again);
    // One entry's count differs; the policy differs; another algorithm: refused.
    let mut other = None;
    admit(&mut other, p, T0, 2);
    admit(&mut other, p, T0 + MS, 1);
    let untouched = other.clone();
    assert!(delta.apply(other.as_mut().unwrap()).is_err());
    assert_eq!(other, untouched);
    let mut repolicied = before.clone().unwrap();
    repolicied.policy = policy(11, 1000);
    assert!(delta.apply(&mut repolicied).is_err());
    let mut gcra = Limiter {
        policy: p,
        state: AlgoState::Gcra(crate::algo::gcra::Gcra { tat: 1 }),
    };
    assert!(delta.apply(&mut gcra).is_err());
}

/// A log holding a region's share takes the deltas of its log (the master makes them on
/// the log it decides on), and keeps its share.
#[test]
fn a_shared_log_takes_its_logs_deltas() {
    let p = policy(10, 1000);
    let mut master = None;
    admit(&mut master, p, T0, 1);
    let before = master.clone().unwrap();
    let Some(Sent::Delta(bytes)) = admit(&mut master, p, T0 + MS, 2) else {
        panic!("expected a delta")
    };
    let share = crate::state::share::Share {
        limit: 10,
        expire_at_ms: 5_000_000_000_000,
    };
    let shared = |l: Limiter| Limiter::new(l.policy, AlgoState::shared(share, l.state));
    let mut replica = shared(before);
    apply_delta(&bytes, &mut replica).unwrap();
    assert_eq!(replica, shared(master.unwrap()));
    assert!(replica.shared().is_some());
}

#[test]
fn malformed_deltas_are_refused() {
    let p = policy(10, 1000);
    let mut master = None;
    admit(&mut master, p, T0, 1);
    let prior = master.clone().unwrap();
    let good = Delta {
        prior: fingerprint(&prior).unwrap(),
        change: Change {
            dropped: 0,
            at_ns: T0 + MS,
            count: 1,
        },
    };
    let refused = |d: Delta| {
        let mut l = prior.clone();
        let r = d.apply(&mut l);
        if r.is_err() {
            assert_eq!(l, prior, "untouched");
        }
        r.is_err()
    };
    assert!(!refused(good));
    let with = |f: fn(&mut Change)| {
        let mut d = good;
        f(&mut d.change);
        d
    };
    assert!(refused(with(|c| c.dropped = 2)), "drops more than held");
    assert!(refused(with(|c| c.count = 0)), "count 0");
    assert!(refused(with(|c| c.count = 10)), "above L");
    assert!(refused(with(|c| c.at_ns = T0 - 1)), "before the newest");
    assert!(
        refused(with(|c| c.at_ns = u64::MAX)),
        "too far from the oldest"
    );
    let mut buf = Vec::new();
    good.encode(&mut buf);
    assert_eq!(buf.len(), DELTA_LEN);
    assert_eq!(Delta::decode(&buf), Ok(good));
    for cut in 0..buf.len() {
        assert!(Delta::decode(&buf[..cut]).is_err());
    }
    let mut long = buf.clone();
    long.push(0);
    assert!(Delta::decode(&long).is_err());
    let mut v2 = buf.clone();
    v2[0] = 2;
    assert!(Delta::decode(&v2).is_err());
    let mut gcra = buf;
    gcra[1] = 1;
    assert!(Delta::decode(&gcra).is_err());
}

#[test]
fn effect_envelopes() {
    let delta = Delta {
        prior: 7,
        change: Change {
            dropped: 1,
            at_ns: 5,
            count: 2,
        },
    };
    let effect = delta.effect(1_800_000_000_000);
    let mut body = Vec::new();
    delta.encode(&mut body);
    assert_eq!(
        Effect::parse(&effect),
        Some(Effect::Delta {
            delta: &body,
            expire_at_ms: 1_800_000_000_000
        })
    );
    let mut full = Vec::new();
    state_effect_header(42, &mut full);
    full.extend_from_slice(b"state");
    assert_eq!(
        Effect::parse(&full),
        Some(Effect::State {
            state: b"state",
            expire_at_ms: 42
        })
    );
    // A bare state (format 1), an empty argument or a cut header: not an effect.
    assert_eq!(Effect::parse(&[1, 3, 0]), None);
    assert_eq!(Effect::parse(&[]), None);
    assert_eq!(Effect::parse(&effect[..8]), None);
}

/// One step of a workload: a request (gap ms, cost, which policy), or a refund.
fn step_strategy() -> impl Strategy<Value = (u64, u64, usize, Option<u64>)> {
    (
        0u64..400,
        0u64..4,
        prop::sample::select(vec![0usize, 0, 0, 0, 0, 0, 1, 2]),
        prop::option::weighted(0.05, 1u64..5),
    )
}

proptest! {
    /// For random workloads with policy changes and refunds, the effects the master emits,
    /// applied in order to a replica copy, give byte-identical encodings after every step;
    /// and every delta, applied to the state before the previous one, is refused.
    #[test]
    fn replica_applying_the_effects_stays_identical(
        l in 1u64..30,
        w in 1u64..3000,
        steps in prop::collection::vec(step_strategy(), 1..200),
    ) {
        let policies = [policy(l, w), policy(l + 3, w), policy(l.max(2) - 1, w * 2 + 1)];
        let (mut master, mut replica) = (None, None);
        let mut stale: Option<Limiter> = None;
        let mut now = T0;
        for (gap_ms, cost, which, refund_n) in steps {
            now += gap_ms * MS;
            let effect = match refund_n {
                Some(n) => refund(&mut master, now, n),
                None => admit(&mut master, policies[which], now, cost),
            };
            let before = replica.clone();
            if let Some(effect) = &effect {
                prop_assert!(receive(&mut replica, effect).is_ok(), "{:?}", effect);
                if let Sent::Delta(bytes) = effect {
                    prop_assert_eq!(bytes.len(), DELTA_LEN);
                    // The same delta on an older state: refused, that state untouched.
                    if let Some(old) = stale.as_mut() {
                        if Some(&*old) != before.as_ref() {
                            let kept = old.clone();
                            prop_assert!(Delta::decode(bytes).unwrap().apply(old).is_err());
                            prop_assert_eq!(&*old, &kept);
                        }
                    }
                }
            }
            prop_assert_eq!(encoded(&replica), encoded(&master));
            if effect.is_some() {
                stale = before;
            }
        }
    }
}

/// The general rule (`algo::step`) on a stored limiter: what the command layer's general
/// path stores, and the decision.
fn stepped(
    limiter: Option<&Limiter>,
    p: &Policy,
    now: u64,
    cost: u64,
) -> (crate::algo::Decision, Option<Limiter>, u64) {
    use crate::algo::step::{step, Held};
    let others: Vec<(Policy, SlidingLog)> = limiter
        .map(Limiter::others_of::<SlidingLog>)
        .unwrap_or_default();
    let current = limiter.and_then(|l| <SlidingLog as crate::state::Stored>::of(&l.state));
    let out = step(
        limiter.zip(current).map(|(l, state)| Held {
            policy: &l.policy,
            state,
            others: &others,
        }),
        p,
        now,
        crate::algo::Amount::cost(cost),
    );
    let keep_ns = out.store.as_ref().map_or(0, |k| k.keep_ns);
    (out.decision, out.store.map(Limiter::kept), keep_ns)
}

proptest! {
    /// A sliding log that remembers other configurations, admitted under its current one in
    /// place (`admit_remembered`), decides and stores exactly what the general rule does,
    /// and its charged delta, applied to a replica's copy, gives the same bytes; applied to
    /// any other state, it is refused.
    #[test]
    fn admitting_in_place_with_others_is_the_rule(
        l in 1u64..12,
        w in 1u64..40,
        steps in prop::collection::vec((0u64..30, 0u64..5, prop::sample::select(vec![0usize, 0, 0, 0, 1, 2])), 1..150),
    ) {
        let policies = [policy(l, w), policy(l + 2, w * 3 + 1), policy(l.max(2) - 1, w * 7 + 3)];
        let (mut master, mut replica): (Option<Limiter>, Option<Limiter>) = (None, None);
        let mut now = T0;
        for (gap_ms, cost, which) in steps {
            now += gap_ms * MS / 2;
            let p = policies[which];
            let cost = cost.min(p.limit());
            let (decision, stored, keep_ns) = stepped(master.as_ref(), &p, now, cost);
            let fast = master.as_mut().filter(|m| m.policy == p && cost > 0 && !m.others().is_empty());
            if let Some(limiter) = fast {
                let before = limiter.clone();
                if let Some((d, admitted)) = admit_remembered(limiter, now, cost) {
                    prop_assert_eq!(d, decision);
                    match admitted {
                        Some((delta, keep)) => {
                            prop_assert_eq!(Some(&*limiter), stored.as_ref());
                            prop_assert_eq!(keep, keep_ns);
                            let mut bytes = Vec::new();
                            delta.encode(&mut bytes);
                            prop_assert_eq!(bytes.len(), CHARGED_HEAD + CHARGE_LEN * delta.others.len());
                            let r = replica.as_mut().unwrap();
                            prop_assert_eq!(apply_delta(&bytes, r), Ok(()));
                            prop_assert_eq!(encoded(&replica), encoded(&master));
                            // Once more: the state it was made on is gone.
                            let mut again = replica.clone().unwrap();
                            prop_assert!(apply_delta(&bytes, &mut again).is_err());
                            prop_assert_eq!(Some(again), replica.clone());
                        }
                        None => {
                            prop_assert!(stored.is_none());
                            prop_assert_eq!(&*limiter, &before);
                        }
                    }
                    continue;
                }
                prop_assert_eq!(&*limiter, &before, "untouched when it does not apply");
            }
            if let Some(limiter) = stored {
                master = Some(limiter.clone());
                replica = Some(Limiter::decode(&encoded(&master).unwrap()).unwrap());
            }
        }
    }
}

/// The path the property above checks is taken: a log called once under another W, then
/// admitted under its own, sends charged deltas of 47 bytes (one other configuration).
#[test]
fn a_log_called_once_under_another_w_admits_in_place() {
    let (p, other) = (policy(5, 10), policy(5, 11));
    let (_, first, _) = stepped(None, &other, T0, 1);
    let (_, mut master, _) = stepped(first.as_ref(), &p, T0 + MS, 1);
    let mut deltas = 0;
    for i in 2..40 {
        let limiter = master.as_mut().unwrap();
        assert_eq!(limiter.others().len(), 1, "at {i}");
        let (d, admitted) = admit_remembered(limiter, T0 + 2 * i * MS, 1).unwrap();
        assert_eq!(d.allowed, 1);
        let (delta, _) = admitted.unwrap();
        let mut bytes = Vec::new();
        delta.encode(&mut bytes);
        assert_eq!(bytes.len(), 47);
        deltas += 1;
    }
    assert_eq!(deltas, 38);
}

proptest! {
    /// A charged delta with any bytes (a valid one mutated, or garbage after its version
    /// byte) never panics: it applies, or is refused with the key untouched.
    #[test]
    fn hostile_charged_deltas_are_refused_or_apply(
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        garbage in prop::collection::vec(any::<u8>(), 0..80),
    ) {
        let (p, other) = (policy(5, 10), policy(5, 11));
        let (_, first, _) = stepped(None, &other, T0, 1);
        let (_, master, _) = stepped(first.as_ref(), &p, T0 + MS, 1);
        let master = master.unwrap();
        let mut admitted = master.clone();
        let (_, delta) = admit_remembered(&mut admitted, T0 + 3 * MS, 1).unwrap();
        let mut bytes = Vec::new();
        delta.unwrap().0.encode(&mut bytes);
        let i = at.index(bytes.len());
        bytes[i] = byte;
        let mut wild = vec![CHARGED_FORMAT];
        wild.extend(&garbage);
        for candidate in [bytes, wild] {
            let mut limiter = master.clone();
            if apply_delta(&candidate, &mut limiter).is_err() {
                prop_assert_eq!(&limiter, &master);
            }
        }
    }
}
