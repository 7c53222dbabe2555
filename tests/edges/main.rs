//! The module at its edges (issue 9): a tightened policy is never forgotten, even when the call
//! that brings it is denied; replicas never decide; a denial is not a write (WATCH, the dirty
//! counter, keyspace notifications); what ACLs on Redis 7.0 can and cannot do; a corrupted
//! `RL.SETSTATE` in an AOF is dropped with a warning naming the key.
//!
//! The files: this one holds what they share (`tightenings`, every limiter's, `call`, `words`,
//! `gcra_full_state`); `tightening.rs` a tightened policy never forgotten; `replicas.rs`
//! replicas that never decide and refuse by role; `not_a_write.rs` a denial is not a write;
//! `acl.rs` ACLs on Redis 7.0; `refusals.rs` a corrupted `RL.SETSTATE` and other refused
//! states, logged or answered with the key.

#[path = "../support/mod.rs"]
mod support;

mod acl;
mod not_a_write;
mod refusals;
mod replicas;
mod tightening;

use support::*;

/// Every limiter of the registry with the tightening: policy A (10 per second, all
/// spent at once) then policy B (10 per minute), with BURST 10 where the algorithm takes it.
fn tightenings() -> Vec<(&'static str, Vec<&'static str>, Vec<&'static str>)> {
    limiter_algorithms()
        .map(|a| {
            let burst: &[&str] = if a.burst { &["BURST", "10"] } else { &[] };
            (
                a.command.as_str(),
                with(&["10", "1000"], burst),
                with(&["10", "60000"], burst),
            )
        })
        .collect()
}

/// `command key policy… extra…` as owned words.
fn call(command: &str, key: &str, policy: &[&str], extra: &[&str]) -> Vec<String> {
    [command, key]
        .iter()
        .chain(policy)
        .chain(extra)
        .map(|w| w.to_string())
        .collect()
}

fn words(owned: &[String]) -> Vec<&str> {
    owned.iter().map(String::as_str).collect()
}

/// The encoded state of a full GCRA limiter of 10 per 100 ms (burst 10): format 1, tag 1, L, W,
/// B as little-endian u64, TAT 0 as a u128. Every byte is ASCII, so it passes as a word.
fn gcra_full_state() -> String {
    let mut bytes = vec![1u8, 1];
    for n in [10u64, 100, 10] {
        bytes.extend_from_slice(&n.to_le_bytes());
    }
    bytes.extend_from_slice(&0u128.to_le_bytes());
    String::from_utf8(bytes).unwrap()
}
