use super::*;
use crate::algo::policy::NS_PER_MS;
use crate::algo::props::T0;
use proptest::prelude::*;

/// N = 2, TTL = 1 s.
fn two() -> Policy {
    Policy::new(2, 1000, 2).unwrap()
}

/// Runs `op` on `state` at T0 + `at_ms`, keeping what it stores.
fn step(state: &mut Option<Concurrency>, p: &Policy, at_ms: u64, op: Op) -> Decision {
    let out = operate(state.as_ref(), p, T0 + at_ms * NS_PER_MS, op);
    if let Some(next) = out.next {
        *state = Some(next);
    }
    out.decision
}

/// (allowed, remaining, retry_after_ms or -1, reset_after_ms), as the reply shows them.
type Fields = (u64, u64, i64, u64);

fn fields(d: Decision) -> Fields {
    let retry = d
        .retry_after_ns
        .map_or(-1, |ns| i64::try_from(ns.div_ceil(NS_PER_MS)).unwrap());
    (
        d.allowed,
        d.remaining,
        retry,
        d.reset_after_ns.div_ceil(NS_PER_MS),
    )
}

#[test]
fn the_contract_case_by_case() {
    let p = two();
    let (a, b, c) = (holder_id(b"a"), holder_id(b"b"), holder_id(b"c"));
    let mut s = None;
    let cases: &[(u64, Op, Fields)] = &[
        // Empty: a peek admits, two slots free.
        (0, Op::Peek, (1, 2, -1, 0)),
        (0, Op::Acquire(a), (1, 1, -1, 1000)),
        // A second ACQUIRE by a renews it: still one slot.
        (100, Op::Acquire(a), (1, 1, -1, 1000)),
        (200, Op::Acquire(b), (1, 0, -1, 1000)),
        // Full: c waits for a (expires at 1100).
        (300, Op::Acquire(c), (0, 0, 800, 900)),
        (300, Op::Peek, (0, 0, 800, 900)),
        // a released: one slot back; released again: nothing, never a negative count.
        (400, Op::Release(a), (1, 1, -1, 800)),
        (500, Op::Release(a), (0, 1, 0, 700)),
        (500, Op::Release(c), (0, 1, 0, 700)),
        // RENEW of an id holding nothing takes no slot.
        (500, Op::Renew(c), (0, 1, 0, 700)),
        (600, Op::Renew(b), (1, 1, -1, 1000)),
        // b, never released, expires 1 s after its last RENEW: at 1600.
        (1599, Op::Peek, (1, 1, -1, 1)),
        (1600, Op::Peek, (1, 2, -1, 0)),
        // RENEW and RELEASE of an expired holder answer as for an unknown id.
        (1600, Op::Renew(b), (0, 2, 0, 0)),
        (1600, Op::Release(b), (0, 2, 0, 0)),
        (1600, Op::Acquire(c), (1, 1, -1, 1000)),
    ];
    for &(at, op, want) in cases {
        assert_eq!(fields(step(&mut s, &p, at, op)), want, "{op:?} at {at} ms");
    }
    // The expired b was dropped by the last change.
    assert_eq!(s.unwrap().holders().len(), 1);
}

#[test]
fn a_lowered_n_admits_nothing_until_below_it() {
    let mut s = None;
    let ten = Policy::new(10, 1000, 10).unwrap();
    for i in 0..5u64 {
        step(&mut s, &ten, i, Op::Acquire(holder_id(&i.to_le_bytes())));
    }
    // Under N = 2 with 5 live, the 4th earliest expiry (at 1003 ms) frees a slot.
    let d = step(&mut s, &two(), 10, Op::Acquire(holder_id(b"new")));
    assert_eq!(fields(d), (0, 0, 993, 994));
}

#[test]
fn holder_ids_differ_by_every_byte_and_length() {
    let ids = [
        &b""[..],
        b"\0",
        b"\0\0",
        b"a",
        b"b",
        b"abcdefgh",
        b"abcdefgh\0",
        b"abcdefgi",
    ];
    let digests: std::collections::HashSet<u64> = ids.iter().map(|i| holder_id(i)).collect();
    assert_eq!(digests.len(), ids.len());
    // Stored digests never change: this one is pinned.
    assert_eq!(holder_id(b"request-1"), holder_id(b"request-1"));
}

#[test]
fn encoding_round_trips_and_rejects_nonsense() {
    let p = two();
    let mut s = None;
    step(&mut s, &p, 0, Op::Acquire(holder_id(b"a")));
    step(&mut s, &p, 1, Op::Acquire(holder_id(b"b")));
    let s = s.unwrap();
    let mut buf = Vec::new();
    encode(&s, &mut buf);
    assert_eq!(buf.len(), 4 + 2 * 16);
    assert_eq!(decode(&mut Reader(&buf), &p), Ok(s.clone()));
    for cut in 0..buf.len() {
        assert!(
            decode(&mut Reader(&buf[..cut]), &p).is_err(),
            "prefix of {cut}"
        );
    }
    let mut swapped = buf.clone();
    swapped[4..20].copy_from_slice(&buf[20..36]);
    swapped[20..36].copy_from_slice(&buf[4..20]);
    assert_eq!(
        decode(&mut Reader(&swapped), &p),
        Err("holders out of order or repeated")
    );
    let mut repeated = buf.clone();
    repeated[20..28].copy_from_slice(&buf[4..12]);
    assert!(decode(&mut Reader(&repeated), &p).is_err());
    let mut many = buf.clone();
    many[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        decode(&mut Reader(&many), &p),
        Err("more holders than the cap")
    );
    let big = Policy::new(MAX_HOLDERS + 1, 1000, MAX_HOLDERS + 1).unwrap();
    assert!(decode(&mut Reader(&buf), &big).is_err());
}

#[test]
fn charge_saturates_at_the_cap_and_refund_ends_the_latest() {
    let p = two();
    let full = charge(&Concurrency::default(), &p, T0, u64::MAX);
    assert_eq!(full.holders().len() as u64, MAX_HOLDERS);
    assert_eq!(check(Some(&full), &p, T0, 1).decision.allowed, 0);
    let mut s = None;
    step(&mut s, &p, 0, Op::Acquire(holder_id(b"early")));
    let s = charge(&s.unwrap(), &p, T0 + 500 * NS_PER_MS, 1);
    let back = refund(&s, &p, T0 + 500 * NS_PER_MS, 1);
    assert!(back.holds(holder_id(b"early"), T0 + 500 * NS_PER_MS));
    assert_eq!(back.holders().len(), 1);
}

#[test]
fn a_holder_is_16_bytes_in_memory() {
    let p = Policy::new(100, 1000, 100).unwrap();
    let mut s = None;
    for i in 0..100u64 {
        step(&mut s, &p, 0, Op::Acquire(i));
    }
    assert_eq!(crate::algo::Algorithm::heap_bytes(&s.unwrap()), 1600);
    assert_eq!(std::mem::size_of::<Concurrency>(), 16);
}

/// An op on one of `ids` ids (or a peek), after a gap in ms.
fn ops(ids: u64) -> impl Strategy<Value = Vec<(u64, u8, u64)>> {
    prop::collection::vec(
        (
            prop_oneof![Just(0u64), 0u64..50, 0u64..3000],
            0u8..4,
            0..ids,
        ),
        1..200,
    )
}

fn op_of(kind: u8, id: u64) -> Op {
    match kind {
        0 => Op::Acquire(id),
        1 => Op::Renew(id),
        2 => Op::Release(id),
        _ => Op::Peek,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Whatever the calls, never more than N holders live at any instant: checked from a model
    /// of who holds a slot (an admitted ACQUIRE or RENEW holds until TTL later or its RELEASE),
    /// at every call and at every expiry in between. Every answer agrees with the model: a
    /// RELEASE gives back only a live slot, `remaining` is N less the live holders, and a
    /// denial's retry_after is exact.
    #[test]
    fn never_more_than_n_in_flight(n in 1u64..6, ttl_ms in 1u64..2000, trace in ops(10)) {
        let p = Policy::new(n, ttl_ms, n).unwrap();
        let ttl = ttl_ms * NS_PER_MS;
        let (mut now, mut s) = (T0, None::<Concurrency>);
        let mut model: std::collections::BTreeMap<u64, u64> = Default::default();
        for (gap, kind, id) in trace {
            now += gap * NS_PER_MS + gap;
            model.retain(|_, &mut e| e > now);
            prop_assert!(model.len() as u64 <= n);
            let op = op_of(kind, id);
            let out = operate(s.as_ref(), &p, now, op);
            let d = out.decision;
            let held = model.contains_key(&id);
            let expected = match op {
                Op::Acquire(_) => held || (model.len() as u64) < n,
                Op::Renew(_) | Op::Release(_) => held,
                Op::Peek => (model.len() as u64) < n,
            };
            prop_assert_eq!(d.allowed, u64::from(expected), "{:?}", op);
            // A RELEASE changes the state when `id` is stored, live or expired (it drops it
            // whatever the clock says: see `Concurrency::release`); the others when allowed.
            let stored = s.as_ref().is_some_and(|s| s.holders().iter().any(|h| h.id == id && h.expires_ns != 0));
            let changes = match op {
                Op::Release(_) => stored,
                Op::Peek => false,
                _ => expected,
            };
            prop_assert_eq!(out.next.is_some(), changes);
            match op {
                Op::Acquire(id) | Op::Renew(id) if expected => { model.insert(id, now + ttl); }
                Op::Release(id) => { model.remove(&id); }
                _ => {}
            }
            prop_assert_eq!(d.remaining, n - model.len() as u64);
            prop_assert_eq!(d.reset_after_ns, model.values().max().map_or(0, |e| e - now));
            if let (Op::Acquire(_) | Op::Peek, Some(retry)) = (op, d.retry_after_ns) {
                prop_assert!(retry > 0);
                let before = operate(s.as_ref(), &p, now + retry - 1, Op::Peek).decision;
                let at = operate(s.as_ref(), &p, now + retry, Op::Peek).decision;
                prop_assert_eq!((before.allowed, at.allowed), (0, 1));
            }
            if let Some(next) = out.next {
                prop_assert_eq!(next.live(now), model.len() as u64);
                s = Some(next);
            }
        }
    }

    /// A RELEASE stores the same state whatever the clock says (what lets a replica or an AOF
    /// replay run it on its own clock): after any trace, releasing an id at two instants, one
    /// maybe past every expiry, changes the state alike and leaves the same encoding.
    #[test]
    fn a_release_is_the_same_change_on_any_clock(
        n in 1u64..6, ttl_ms in 1u64..2000, trace in ops(10), id in 0u64..10,
        later_ms in 0u64..5000,
    ) {
        let p = Policy::new(n, ttl_ms, n).unwrap();
        let (mut now, mut s) = (T0, None::<Concurrency>);
        for (gap, kind, id) in trace {
            now += gap * NS_PER_MS;
            if let Some(next) = operate(s.as_ref(), &p, now, op_of(kind, id)).next {
                s = Some(next);
            }
        }
        let here = operate(s.as_ref(), &p, now, Op::Release(id)).next;
        let there = operate(s.as_ref(), &p, now + later_ms * NS_PER_MS, Op::Release(id)).next;
        let bytes = |c: &Option<Concurrency>| c.as_ref().map(|c| {
            let mut out = Vec::new();
            encode(c, &mut out);
            out
        });
        prop_assert_eq!(bytes(&here), bytes(&there));
        prop_assert_eq!(here.is_some(), s.as_ref().is_some_and(|s| s.encoded().any(|h| h.id == id)));
    }

    /// A holder that never comes back (a crashed worker) holds its slot exactly TTL after its
    /// last ACQUIRE or RENEW, whatever else happens, and not a nanosecond more.
    #[test]
    fn a_crashed_holder_frees_its_slot_at_ttl(
        n in 1u64..6, ttl_ms in 1u64..2000, trace in ops(10), last_ms in 0u64..5000,
    ) {
        let p = Policy::new(n, ttl_ms, n).unwrap();
        let crashed = u64::MAX;
        let (mut now, mut s) = (T0, None::<Concurrency>);
        for (gap, kind, id) in trace {
            now += gap * NS_PER_MS;
            if let Some(next) = operate(s.as_ref(), &p, now, op_of(kind, id)).next {
                s = Some(next);
            }
        }
        // Every other holder released: the crashed one is alone.
        for id in 0..10 {
            if let Some(next) = operate(s.as_ref(), &p, now, Op::Release(id)).next {
                s = Some(next);
            }
        }
        let out = operate(s.as_ref(), &p, now, Op::Acquire(crashed));
        prop_assert_eq!(out.decision.allowed, 1);
        let s = out.next.unwrap();
        let at = now + last_ms * NS_PER_MS;
        let expires = now + ttl_ms * NS_PER_MS;
        prop_assert_eq!(s.holds(crashed, at), at < expires);
        prop_assert_eq!(check(Some(&s), &p, expires - 1, 0).decision.remaining, n - 1);
        prop_assert_eq!(check(Some(&s), &p, expires, 0).decision.remaining, n);
    }
}

#[test]
fn a_key_going_from_one_holder_to_none_and_back_keeps_its_slot() {
    let p = Policy::new(2, 1000, 2).unwrap();
    let (a, b) = (holder_id(b"a"), holder_id(b"b"));
    let mut s = None;
    step(&mut s, &p, 0, Op::Acquire(a));
    assert_eq!(fields(step(&mut s, &p, 10, Op::Release(a))), (1, 2, -1, 0));
    let released = s.clone().unwrap();
    // Stored, live at no instant: a second RELEASE or a RENEW finds nothing.
    assert_eq!(released.holders().len(), 1);
    assert_eq!(released.live(0), 0);
    // Not encoded: replicas and the RDB get no holder, the state of a key never acquired.
    let (mut buf, mut empty) = (Vec::new(), Vec::new());
    encode(&released, &mut buf);
    encode(&Concurrency::default(), &mut empty);
    assert_eq!(buf, empty);
    assert_eq!(released, Concurrency::default());
    assert_eq!(crate::algo::Algorithm::heap_bytes(&released), 0);
    assert_eq!(crate::algo::Algorithm::entries_held(&released), 0);
    assert_eq!(fields(step(&mut s, &p, 20, Op::Release(a))), (0, 2, 0, 0));
    assert_eq!(fields(step(&mut s, &p, 20, Op::Renew(a))), (0, 2, 0, 0));
    // The next ACQUIRE takes its place.
    assert_eq!(
        fields(step(&mut s, &p, 30, Op::Acquire(b))),
        (1, 1, -1, 1000)
    );
    assert_eq!(s.as_ref().unwrap().holders().len(), 1);
    assert!(s.as_ref().unwrap().holds(b, T0 + 30 * NS_PER_MS));
}
