//! Stored bytes are hostile input too (RESTORE, a replica link, an old RDB): any state that
//! passes validation must be decided, leased, refunded and carried to a new policy without a
//! panic or overflow, at any instant the clocks can produce, and what comes out must validate.
//! Debug builds check arithmetic overflow, so these runs catch it.

use super::{AlgoState, Limiter, MAX_TAG};
use crate::algo::concurrency::{self, Op};
use crate::algo::promises::{assert_covers_registry, registry_tags};
use crate::algo::{
    fixed_window, gcra, ms_ceil, shape, sliding_counter, sliding_log, token_bucket, Algorithm,
    Decision, Policy,
};
use proptest::prelude::*;

/// Values at and around the edges of every field, and anything in between.
fn edgy_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(2),
        Just(10),
        Just(1_000),
        Just(1_000_000),
        Just(1_000_000_000_000),
        Just(1_800_000_000_000_000_000),
        Just(10_000_000_000_000_000_000),
        Just(u64::MAX),
        any::<u64>(),
    ]
}

fn edgy_u128() -> impl Strategy<Value = u128> {
    prop_oneof![
        edgy_u64().prop_map(u128::from),
        edgy_u64().prop_map(|n| u128::from(n) * 1_000_000_000_000),
        any::<u128>(),
    ]
}

/// The tags a candidate carries: every algorithm's of the registry, and the next one, which no
/// algorithm has.
fn tags() -> Vec<u8> {
    let mut tags = registry_tags();
    tags.push(MAX_TAG + 1);
    tags
}

/// The algorithm's stored fields after the header, from edgy values: each algorithm's own
/// layout, so that many candidates pass validation. An algorithm whose fields are not the fixed
/// window's two u64 adds its arm (`the_candidates_reach_every_algorithm` fails until then).
fn fields(tag: u8, b: u64, big: u128, x: u64, y: u64, words: &[u64], out: &mut Vec<u8>) {
    match tag {
        t if t == gcra::Gcra::TAG => out.extend_from_slice(&big.to_le_bytes()),
        t if t == shape::Shape::TAG => {
            out.extend_from_slice(&big.to_le_bytes());
            out.extend_from_slice(&(x % b.max(1)).to_le_bytes());
        }
        t if t == token_bucket::TokenBucket::TAG => {
            out.extend_from_slice(&big.to_le_bytes());
            out.extend_from_slice(&x.to_le_bytes());
        }
        t if t == sliding_log::SlidingLog::TAG => {
            out.extend_from_slice(&x.to_le_bytes());
            out.extend_from_slice(&(words.len() as u32).to_le_bytes());
            for w in words {
                out.extend_from_slice(&w.to_le_bytes());
            }
        }
        t if t == sliding_counter::SlidingCounter::TAG => {
            out.extend_from_slice(&x.to_le_bytes());
            out.extend_from_slice(&y.to_le_bytes());
            out.extend_from_slice(&(y / 2).to_le_bytes());
        }
        t if t == concurrency::Concurrency::TAG => {
            let mut ids = words.to_vec();
            ids.sort_unstable();
            ids.dedup();
            out.extend_from_slice(&(ids.len() as u32).to_le_bytes());
            for (i, id) in ids.iter().enumerate() {
                out.extend_from_slice(&id.to_le_bytes());
                out.extend_from_slice(&if i % 2 == 0 { x } else { y }.to_le_bytes());
            }
        }
        // The fixed window's, and the unknown tag's.
        _ => {
            out.extend_from_slice(&x.to_le_bytes());
            out.extend_from_slice(&y.to_le_bytes());
        }
    }
}

/// A candidate encoding: format 1, any tag, edgy policy and fields.
fn candidate() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(tags()),
        prop_oneof![edgy_u64(), 1u64..=20],
        prop_oneof![edgy_u64(), 1u64..=2000],
        prop_oneof![edgy_u64(), 1u64..=20],
        edgy_u128(),
        edgy_u64(),
        edgy_u64(),
        prop::collection::vec(
            prop_oneof![edgy_u64(), (0u64..50).prop_map(|o| o << 20 | 1)],
            0..4,
        ),
    )
        .prop_map(|(tag, l, w, b, big, x, y, words)| {
            let mut out = vec![1, tag];
            for n in [l, w, b] {
                out.extend_from_slice(&n.to_le_bytes());
            }
            fields(tag, b, big, x, y, &words, &mut out);
            out
        })
}

/// The fuzzer reaches every algorithm: candidates of each tag of the registry pass validation,
/// so `any_valid_state_is_safe_to_use` decides, leases, refunds and carries states of each.
#[test]
fn the_candidates_reach_every_algorithm() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = candidate();
    let decoded: Vec<u8> = (0..20_000)
        .filter_map(|_| {
            let bytes = strategy.new_tree(&mut runner).ok()?.current();
            Limiter::decode(&bytes).ok().map(|l| l.state.tag())
        })
        .collect();
    assert_covers_registry("the valid candidates of `candidate()`", &decoded);
}

/// What the command layer does with a decision: milliseconds, rounded up, and an expiry.
fn reply(now_ns: u64, d: &Decision) -> (u64, u64) {
    let retry = d.retry_after_ns.map_or(0, ms_ceil);
    (
        retry,
        ms_ceil(now_ns).saturating_add(ms_ceil(d.reset_after_ns)),
    )
}

fn must_validate(policy: Policy, state: AlgoState) {
    let mut bytes = Vec::new();
    Limiter { policy, state }.encode(&mut bytes);
    assert!(
        Limiter::decode(&bytes).is_ok(),
        "{:?}",
        Limiter::decode(&bytes)
    );
}

/// A state carried over to a new policy is stored as it is (a denied call that brings a new
/// policy stores it too, so that a tightening holds), and so is what a decision that admits
/// makes of it: both must validate.
fn carried(to: Policy, state: AlgoState, now: u64) {
    must_validate(to, state.clone());
    let next = match &state {
        AlgoState::Gcra(s) => gcra::check(Some(s), &to, now, 1).next.map(AlgoState::Gcra),
        AlgoState::TokenBucket(s) => token_bucket::check(Some(s), &to, now, 1)
            .next
            .map(AlgoState::TokenBucket),
        AlgoState::SlidingLog(s) => sliding_log::check(Some(s), &to, now, 1)
            .next
            .map(AlgoState::SlidingLog),
        AlgoState::SlidingCounter(s) => sliding_counter::check(Some(s), &to, now, 1)
            .next
            .map(AlgoState::SlidingCounter),
        AlgoState::FixedWindow(s) => fixed_window::check(Some(s), &to, now, 1)
            .next
            .map(AlgoState::FixedWindow),
        AlgoState::Shape(s) => shape::check(Some(s), &to, now, 1)
            .outcome
            .next
            .map(AlgoState::Shape),
        AlgoState::Concurrency(s) => concurrency::check(Some(s), &to, now, 1)
            .next
            .map(AlgoState::Concurrency),
        AlgoState::Remembered(_) | AlgoState::Shared(_) => None,
    };
    if let Some(next) = next {
        must_validate(to, next);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

    #[test]
    fn any_valid_state_is_safe_to_use(
        bytes in candidate(),
        now in prop_oneof![edgy_u64().prop_map(|n| n.min(10_000_000_000_000_000_000)), 0u64..10_000_000_000_000_000_000],
        amount in edgy_u64(),
        other in (
            prop_oneof![1u64..=1000, Just(1_000_000), Just(crate::algo::MAX_LIMIT)],
            prop_oneof![1u64..=100_000, Just(crate::algo::MAX_WINDOW_MS)],
            prop_oneof![1u64..=1000, Just(crate::algo::MAX_LIMIT)],
        ),
    ) {
        let Ok(limiter) = Limiter::decode(&bytes) else { return Ok(()) };
        let p = limiter.policy;
        let cost = amount.min(p.capacity());
        let window_cost = amount.min(p.limit());
        let n = amount.clamp(1, crate::algo::MAX_LIMIT);
        let to = Policy::new(other.0, other.1, other.2).unwrap_or(p);
        match limiter.state {
            AlgoState::Gcra(s) => {
                for c in [0, 1, cost] {
                    reply(now, &gcra::check(Some(&s), &p, now, c).decision);
                }
                must_validate(p, AlgoState::Gcra(gcra::refund(&s, &p, now, n)));
                must_validate(p, AlgoState::Gcra(gcra::charge(&s, &p, now, n)));
                carried(to, AlgoState::Gcra(gcra::rescale(&s, &p, &to, now)), now);
            }
            AlgoState::TokenBucket(s) => {
                for c in [0, 1, cost] {
                    reply(now, &token_bucket::check(Some(&s), &p, now, c).decision);
                }
                let leased = token_bucket::lease(Some(&s), &p, now, n);
                reply(now, &leased.decision);
                if let Some(next) = leased.next {
                    must_validate(p, AlgoState::TokenBucket(next));
                }
                must_validate(p, AlgoState::TokenBucket(token_bucket::refund(&s, &p, now, n)));
                must_validate(p, AlgoState::TokenBucket(token_bucket::charge(&s, &p, now, n)));
                carried(to, AlgoState::TokenBucket(token_bucket::rescale(&s, &p, &to, now)), now);
            }
            AlgoState::SlidingLog(s) => {
                for c in [0, 1, window_cost] {
                    let out = sliding_log::check(Some(&s), &p, now, c);
                    reply(now, &out.decision);
                    if let Some(next) = out.next {
                        must_validate(p, AlgoState::SlidingLog(next));
                    }
                }
                must_validate(p, AlgoState::SlidingLog(sliding_log::refund(&s, &p, now, n)));
                must_validate(p, AlgoState::SlidingLog(sliding_log::charge(&s, &p, now, n)));
                // The command layer refuses a sliding log policy above MAX_LOG_LIMIT.
                let l = other.0.min(sliding_log::MAX_LOG_LIMIT);
                let to = Policy::new(l, other.1, l).unwrap_or(p);
                carried(to, AlgoState::SlidingLog(sliding_log::rescale(&s, &p, &to, now)), now);
            }
            AlgoState::SlidingCounter(s) => {
                for c in [0, 1, window_cost] {
                    let out = sliding_counter::check(Some(&s), &p, now, c);
                    reply(now, &out.decision);
                    if let Some(next) = out.next {
                        must_validate(p, AlgoState::SlidingCounter(next));
                    }
                }
                must_validate(p, AlgoState::SlidingCounter(sliding_counter::refund(&s, &p, now, n)));
                must_validate(p, AlgoState::SlidingCounter(sliding_counter::charge(&s, &p, now, n)));
                let to = Policy::new(other.0, other.1, other.0).unwrap_or(p);
                carried(to, AlgoState::SlidingCounter(sliding_counter::rescale(&s, &p, &to, now)), now);
            }
            AlgoState::Shape(s) => {
                for c in [0, 1, cost] {
                    let out = shape::check(Some(&s), &p, now, c);
                    reply(now, &out.outcome.decision);
                    let _ = ms_ceil(out.delay_ns);
                    if let Some(next) = out.outcome.next {
                        must_validate(p, AlgoState::Shape(next));
                    }
                }
                must_validate(p, AlgoState::Shape(shape::refund(&s, &p, now, n)));
                must_validate(p, AlgoState::Shape(shape::charge(&s, &p, now, n)));
                carried(to, AlgoState::Shape(shape::rescale(&s, &p, &to, now)), now);
            }
            AlgoState::FixedWindow(s) => {
                for c in [0, 1, window_cost] {
                    let out = fixed_window::check(Some(&s), &p, now, c);
                    reply(now, &out.decision);
                    if let Some(next) = out.next {
                        must_validate(p, AlgoState::FixedWindow(next));
                    }
                }
                must_validate(p, AlgoState::FixedWindow(fixed_window::refund(&s, &p, now, n)));
                must_validate(p, AlgoState::FixedWindow(fixed_window::charge(&s, &p, now, n)));
                let to = Policy::new(other.0, other.1, other.0).unwrap_or(p);
                carried(to, AlgoState::FixedWindow(fixed_window::rescale(&s, &p, &to, now)), now);
            }
            AlgoState::Concurrency(s) => {
                for c in [0, 1, window_cost] {
                    let out = concurrency::check(Some(&s), &p, now, c);
                    reply(now, &out.decision);
                    if let Some(next) = out.next {
                        must_validate(p, AlgoState::Concurrency(next));
                    }
                }
                let first = s.holders().first().map_or(amount, |h| h.id);
                for op in [Op::Acquire(first), Op::Acquire(amount), Op::Renew(first), Op::Release(first), Op::Peek] {
                    let out = concurrency::operate(Some(&s), &p, now, op);
                    reply(now, &out.decision);
                    if let Some(next) = out.next {
                        must_validate(p, AlgoState::Concurrency(next));
                    }
                }
                must_validate(p, AlgoState::Concurrency(concurrency::refund(&s, &p, now, n)));
                must_validate(p, AlgoState::Concurrency(concurrency::charge(&s, &p, now, n)));
                // The command layer refuses an N above MAX_HOLDERS.
                let l = other.0.min(concurrency::MAX_HOLDERS);
                let to = Policy::new(l, other.1, l).unwrap_or(p);
                carried(to, AlgoState::Concurrency(concurrency::rescale(&s, &p, &to, now)), now);
            }
            // The candidates are single configurations.
            AlgoState::Remembered(_) | AlgoState::Shared(_) => {}
        }
    }
}

/// The far corner: the largest debt the finest policy can store, carried to the coarsest.
#[test]
fn extreme_debt_carried_to_the_slowest_policy() {
    use crate::algo::{MAX_LIMIT, MAX_WINDOW_MS};
    let fine = Policy::new(MAX_LIMIT, 1, 1).unwrap();
    let coarse = Policy::new(1, MAX_WINDOW_MS, 1).unwrap();
    let tat = fine.units_at(u64::MAX) + fine.units_per_token();
    let state = gcra::Gcra { tat };
    must_validate(fine, AlgoState::Gcra(state));
    for now in [0, 1_800_000_000_000_000_000, 10_000_000_000_000_000_000] {
        let carried_state = gcra::rescale(&state, &fine, &coarse, now);
        carried(coarse, AlgoState::Gcra(carried_state), now);
        reply(
            now,
            &gcra::check(Some(&carried_state), &coarse, now, 1).decision,
        );
        let bucket = token_bucket::TokenBucket {
            tokens: 0,
            last_ns: u64::MAX,
        };
        let carried_bucket = token_bucket::rescale(&bucket, &fine, &coarse, now);
        reply(
            now,
            &token_bucket::check(Some(&carried_bucket), &coarse, now, 1).decision,
        );
    }
}
