//! Property: RL.ALL is the single-key commands, all or nothing.

use std::cell::RefCell;
use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::*;

/// The algorithms `RL.ALL` takes: every limiter of the registry, by index.
fn in_all() -> Vec<&'static support::registry::Algorithm> {
    limiter_algorithms().collect()
}
const KEY_SLOTS: usize = 6;

#[derive(Clone, Copy, Debug)]
struct Pol {
    limit: u64,
    window_ms: u64,
    burst: Option<u64>,
}

impl Pol {
    fn capacity(&self) -> u64 {
        self.burst.unwrap_or(self.limit)
    }

    fn words(&self, cost: u64) -> Vec<String> {
        let mut w = vec![self.limit.to_string(), self.window_ms.to_string()];
        if let Some(b) = self.burst {
            w.extend(["BURST".to_string(), b.to_string()]);
        }
        w.extend(["COST".to_string(), cost.to_string()]);
        w
    }
}

/// One limiter of a call: (key slot, which of its two policies, cost).
type Lim = (usize, bool, u64);

/// A case: for each key slot an algorithm and two policies; then steps of (clock gap in ms,
/// the call's limiters).
#[derive(Clone, Debug)]
struct Case {
    keys: Vec<(usize, [Pol; 2])>,
    steps: Vec<(u64, Vec<Lim>)>,
}

fn pol(algorithm: usize) -> impl Strategy<Value = Pol> {
    let burst = in_all()[algorithm].burst;
    (
        1u64..=5,
        prop::sample::select(vec![1000u64, 3000, 60000]),
        0u64..=3,
        any::<bool>(),
    )
        .prop_map(move |(limit, window_ms, extra, with_burst)| Pol {
            limit,
            window_ms,
            burst: (burst && with_burst).then_some(limit + extra),
        })
}

fn case() -> impl Strategy<Value = Case> {
    let key = (0..in_all().len()).prop_flat_map(|a| (Just(a), [pol(a), pol(a)]));
    let limiter = (0..KEY_SLOTS, any::<bool>(), 0u64..=3);
    let gap = prop_oneof![3 => Just(0u64), 2 => 1u64..500, 1 => 500u64..5000];
    let step = (gap, prop::collection::vec(limiter, 1..=4));
    (
        prop::collection::vec(key, KEY_SLOTS),
        prop::collection::vec(step, 1..=15),
    )
        .prop_map(|(keys, steps)| Case { keys, steps })
}

/// Copies `from` (DUMP and absolute expiry, or its absence) to `to`.
fn copy(c: &mut Connection, state: &(Option<Vec<u8>>, i64), to: &str) {
    let _: () = redis::cmd("DEL").arg(to).query(c).unwrap();
    if let Some(payload) = &state.0 {
        let _: () = redis::cmd("RESTORE")
            .arg(to)
            .arg(0)
            .arg(payload.as_slice())
            .arg("REPLACE")
            .query(c)
            .unwrap();
        if state.1 >= 0 {
            let _: i64 = redis::cmd("PEXPIREAT")
                .arg(to)
                .arg(state.1)
                .query(c)
                .unwrap();
        }
    }
}

fn key_state(c: &mut Connection, key: &str) -> (Option<Vec<u8>>, i64) {
    (dump(c, key), pexpiretime(c, key))
}

/// The single-key command of `algorithm` on `key`.
fn single(c: &mut Connection, algorithm: usize, key: &str, p: &Pol, cost: u64) -> [i64; 5] {
    let command = &in_all()[algorithm].command;
    let mut words = vec![command.clone(), key.to_string()];
    words.extend(p.words(cost));
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    rl(c, &words)
}

fn run_case(c: &mut Connection, case: &Case) -> Result<(), TestCaseError> {
    let _: () = redis::cmd("FLUSHALL").query(c).unwrap();
    clock_set(c, T0_MS);
    // The policy each real key holds, as far as this test has seen it stored.
    let mut held: BTreeMap<usize, (u64, u64, u64)> = BTreeMap::new();
    for (n, (gap, limiters)) in case.steps.iter().enumerate() {
        clock_advance(c, i64::try_from(*gap).unwrap());
        let mut seen = [false; KEY_SLOTS];
        let limiters: Vec<(usize, usize, u64)> = limiters
            .iter()
            .filter(|(k, _, _)| !std::mem::replace(&mut seen[*k], true))
            .map(|&(k, second, cost)| {
                let choice = usize::from(second);
                (k, choice, cost.min(case.keys[k].1[choice].capacity()))
            })
            .collect();
        // On a copy of each key: a peek, then the single-key command.
        let mut pre = Vec::new();
        let mut peeks = Vec::new();
        let mut singles = Vec::new();
        let mut shadows = Vec::new();
        for &(k, choice, cost) in &limiters {
            let (algorithm, policies) = &case.keys[k];
            let p = &policies[choice];
            let state = key_state(c, &format!("k{k}"));
            let shadow = format!("s{k}");
            copy(c, &state, &shadow);
            peeks.push(single(c, *algorithm, &shadow, p, 0));
            singles.push(single(c, *algorithm, &shadow, p, cost));
            shadows.push(key_state(c, &shadow));
            pre.push(state);
        }
        let mut words = vec!["RL.ALL".to_string(), limiters.len().to_string()];
        words.extend(limiters.iter().map(|(k, _, _)| format!("k{k}")));
        for &(k, choice, cost) in &limiters {
            let (algorithm, policies) = &case.keys[k];
            words.push(in_all()[*algorithm].word.clone());
            words.extend(policies[choice].words(cost));
        }
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        let (combined, each) = all(c, &words);
        let charged = limiters.iter().any(|l| l.2 > 0);
        let admits = limiters
            .iter()
            .zip(&singles)
            .all(|(l, s)| s[0] == 1 || (charged && l.2 == 0));
        prop_assert_eq!(combined[0], i64::from(admits), "step {}: {:?}", n, words);
        for (i, &(k, choice, cost)) in limiters.iter().enumerate() {
            let real = format!("k{k}");
            let after = key_state(c, &real);
            let (algorithm, policies) = &case.keys[k];
            let p = &policies[choice];
            let policy = (p.limit, p.window_ms, p.capacity());
            let policy_changed = pre[i].0.is_some() && held.get(&k) != Some(&policy);
            if admits {
                prop_assert_eq!(each[i], singles[i], "step {}: {:?} limiter {}", n, words, i);
                prop_assert_eq!(&after, &shadows[i], "step {}: {:?} key {}", n, words, real);
            } else {
                let expected = if singles[i][0] == 1 && cost > 0 {
                    peeks[i]
                } else {
                    singles[i]
                };
                prop_assert_eq!(each[i], expected, "step {}: {:?} limiter {}", n, words, i);
                if cost > 0 && policy_changed {
                    // Stored as a single-key denial stores it: the state carried to the new
                    // policy. A request for one more than remains is such a denial.
                    let (capacity, remaining) = (peeks[i][1], peeks[i][2]);
                    if remaining < capacity {
                        let t = format!("t{k}");
                        copy(c, &pre[i], &t);
                        let more = u64::try_from(remaining + 1).unwrap();
                        prop_assert_eq!(single(c, *algorithm, &t, p, more)[0], 0);
                        prop_assert_eq!(&after, &key_state(c, &t), "step {}: {:?}", n, words);
                    } else {
                        // Full under the new policy: the key now holds it, and the single-key
                        // command goes on from it exactly as from the old state.
                        prop_assert_ne!(&after.0, &pre[i].0, "step {}: policy not stored", n);
                        let u = format!("u{k}");
                        copy(c, &after, &u);
                        prop_assert_eq!(single(c, *algorithm, &u, p, cost), singles[i]);
                        prop_assert_eq!(&key_state(c, &u), &shadows[i], "step {}", n);
                    }
                } else {
                    prop_assert_eq!(&after, &pre[i], "step {}: {:?} key {}", n, words, real);
                }
            }
            if after.0 != pre[i].0 {
                held.insert(k, policy);
            }
        }
        // The combined fields: the tightest limiter (first of the fewest remaining), the
        // latest retry of the charged limiters (of all when none is: a peek), the latest reset.
        let tightest = each
            .iter()
            .min_by_key(|d| d[2])
            .copied()
            .unwrap_or_default();
        let retry = if admits {
            -1
        } else {
            each.iter()
                .zip(&limiters)
                .filter(|(_, l)| l.2 > 0 || !charged)
                .map(|(d, _)| d[3].max(0))
                .max()
                .unwrap_or(0)
        };
        let reset = each.iter().map(|d| d[4]).max().unwrap_or(0);
        prop_assert_eq!(
            combined,
            [i64::from(admits), tightest[1], tightest[2], retry, reset],
            "step {}: {:?}",
            n,
            words
        );
    }
    Ok(())
}

/// RL.ALL admits exactly when every charged limiter's single-key command would (every limiter's,
/// for a peek over all), and leaves each key exactly as that command leaves a copy of it; when
/// it denies, each key is left as it was, or as a single-key denial leaves it when the policy
/// changed.
#[test]
fn all_is_the_single_key_commands_all_or_nothing() {
    let (_s, c) = server();
    let c = RefCell::new(c);
    let mut runner = TestRunner::new(Config::with_cases(32));
    runner
        .run(&case(), |case| run_case(&mut c.borrow_mut(), &case))
        .unwrap();
}
