//! A delta replayed on a stored limiter (a replica, an AOF replay): checked against the
//! fingerprint of the limiter it was made on, then applied in place (see `state::delta`).
//!
//! A log that remembers other configurations (see `algo::step`) sends a [`ChargedDelta`]
//! (format 2) for an admit under its current policy: its change and each other configuration's
//! charge, checked against the fingerprint of every configuration; when the admit drops a
//! configuration, or another is kin of the current one, the full state.

use crate::algo::bytes::Reader;
use crate::algo::sliding_log::{self, Change, SlidingLog};
use crate::error::Error;
use crate::state::delta::{Delta, DELTA_LEN, SLIDING_LOG};
use crate::state::effect::{EFFECT_DELTA, EFFECT_HEADER};
use crate::state::{AlgoState, Limiter, Stored};

/// A 64-bit fingerprint of a sliding-log limiter: its policy, entry count, total, newest instant
/// and the hash of its entries (kept up to date by every change, so this is O(1)). Two limiters
/// with different policies or entries have the same fingerprint with probability about 2^-64.
/// None for other algorithms (they have no deltas). A log holding a region's share is
/// fingerprinted as its log alone: the master makes its deltas on the log (the share moves only
/// by full effects, `RL.SHARE` and every carry to another policy).
pub fn fingerprint(limiter: &Limiter) -> Option<u64> {
    let log = log_of(&limiter.state)?;
    Some(sliding_log::fingerprint(&limiter.policy, log))
}

/// The sliding log a [`Delta`] applies to: the key's own, or the one its region's share holds.
fn log_of(state: &AlgoState) -> Option<&SlidingLog> {
    match state {
        AlgoState::SlidingLog(log) => Some(log),
        AlgoState::Shared(shared) => match &shared.current {
            AlgoState::SlidingLog(log) => Some(log),
            _ => None,
        },
        _ => None,
    }
}

fn log_of_mut(state: &mut AlgoState) -> Option<&mut SlidingLog> {
    match state {
        AlgoState::SlidingLog(log) => Some(log),
        AlgoState::Shared(shared) => match &mut shared.current {
            AlgoState::SlidingLog(log) => Some(log),
            _ => None,
        },
        _ => None,
    }
}

impl Delta {
    /// The delta of `change`, made on `prior` (before the change is applied). None if `prior`
    /// is not a sliding log.
    pub fn of(prior: &Limiter, change: Change) -> Option<Delta> {
        Some(Delta {
            prior: fingerprint(prior)?,
            change,
        })
    }

    /// Applies the delta to the limiter it was made on. Refused — an error, `limiter` untouched
    /// — if `limiter` is not a sliding log, its fingerprint is not the delta's, or the change
    /// does not fit it (see `SlidingLog::check_change`). O(entries dropped).
    pub fn apply(&self, limiter: &mut Limiter) -> Result<(), Error> {
        let policy = limiter.policy;
        let found = fingerprint(limiter);
        let Some(log) = log_of_mut(&mut limiter.state) else {
            return Err(Error::BadState(
                "delta for a sliding log, key holds another limiter",
            ));
        };
        if found != Some(self.prior) {
            return Err(Error::BadState(
                "delta made for another state (fingerprint differs): key unchanged",
            ));
        }
        log.check_change(&policy, &self.change)
            .map_err(Error::BadState)?;
        log.apply(&policy, &self.change);
        Ok(())
    }
}

/// Version byte of a delta for a sliding log that remembers other configurations.
const CHARGED_FORMAT: u8 = 2;
/// Encoded length of a charged delta's fixed part, and of each other configuration's charge.
const CHARGED_HEAD: usize = DELTA_LEN + 1;
const CHARGE_LEN: usize = 20;

/// An admit on a sliding log that remembers other configurations (see `algo::step`), under the
/// policy it holds as current: the current log's change, and the charge of what it admitted to
/// each other configuration, in the order the key holds them, made on the limiter whose
/// fingerprint (every configuration's, [`fingerprint_all`]) is `prior`.
///
/// Layout, version 2, integers little-endian (27 + 20 n bytes): version 1's fields (with format
/// 2), then `[n u8]` and n times `[dropped u32][merged u32][at_ns u64][count u32]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChargedDelta {
    pub prior: u64,
    pub change: Change,
    pub others: Vec<sliding_log::Charge>,
}

/// The fingerprint of every configuration of a sliding log that remembers others: the
/// current one's and each other's, in order. None if the limiter is not such a log.
pub fn fingerprint_all(limiter: &Limiter) -> Option<u64> {
    let AlgoState::Remembered(r) = &limiter.state else {
        return None;
    };
    let AlgoState::SlidingLog(current) = &r.current else {
        return None;
    };
    let mut h = sliding_log::fingerprint(&limiter.policy, current);
    for (p, s) in &r.others {
        let AlgoState::SlidingLog(log) = s else {
            return None;
        };
        h = sliding_log::mix(h ^ sliding_log::fingerprint(p, log));
    }
    Some(h)
}

/// The admit of `cost` at `now_ns` on a sliding log that remembers other configurations, under
/// the policy it holds as current, planned without changing it: the decision and, when
/// admitted, the delta that carries it out ([`ChargedDelta::apply`], on this very limiter) and
/// how long the key must then live. Exactly what `algo::step` decides and stores (a denial
/// stores nothing; every other configuration is charged), in time independent of the logs'
/// lengths. None where this path does not apply and `step` must decide: not such a log, an
/// other configuration that can be dropped or is kin of the current one (`step::droppable`,
/// `step::kin`), or a charge that is not a change in place.
pub fn plan_remembered(
    limiter: &Limiter,
    now_ns: u64,
    cost: u64,
) -> Option<(crate::algo::Decision, Option<(ChargedDelta, u64)>)> {
    use crate::algo::step::kin;
    use crate::algo::Algorithm;
    let policy = limiter.policy;
    let AlgoState::Remembered(r) = &limiter.state else {
        return None;
    };
    let AlgoState::SlidingLog(current) = &r.current else {
        return None;
    };
    let mut logs = Vec::with_capacity(r.others.len());
    for (p, s) in &r.others {
        let AlgoState::SlidingLog(log) = s else {
            return None;
        };
        let fresh = SlidingLog::check(None, p, now_ns, 0).decision;
        if kin::<SlidingLog>(p, &policy)
            || SlidingLog::check(Some(log), p, now_ns, 0).decision == fresh
        {
            return None;
        }
        logs.push((p, log));
    }
    let (decision, change) = sliding_log::decide(Some(current), &policy, now_ns, cost);
    let Some(change) = change else {
        return Some((decision, None));
    };
    let mut keep_ns = decision.reset_after_ns;
    let mut others = Vec::with_capacity(logs.len());
    for (p, log) in logs {
        let charge = log.charge_change(p, now_ns, cost)?;
        // Charged, the log's newest entry is at the charge's instant: it is full again a
        // window after it.
        let gone = u128::from(charge.change.at_ns) + u128::from(p.window_ns());
        let reset = u64::try_from(gone.saturating_sub(u128::from(now_ns))).unwrap_or(u64::MAX);
        keep_ns = keep_ns.max(reset);
        others.push(charge);
    }
    let delta = ChargedDelta {
        prior: fingerprint_all(limiter)?,
        change,
        others,
    };
    Some((decision, Some((delta, keep_ns))))
}

/// What [`plan_remembered`] answers: the decision and, when admitted, the delta that charges
/// every configuration and how long the key must then live.
pub type Remembering = (crate::algo::Decision, Option<(ChargedDelta, u64)>);

/// The admit of a key that remembers other configurations, planned in place, as every stored
/// algorithm offers it (`A::plan_remembered`): [`plan_remembered`], which answers None for any
/// but the sliding log (the one algorithm with an in-place path), so `algo::step` decides.
pub trait PlanRemembered: Stored {
    /// The admit of `cost` on `limiter`, a key of this algorithm that remembers other
    /// configurations, under the policy it holds as current, planned without changing it.
    fn plan_remembered(limiter: &Limiter, now_ns: u64, cost: u64) -> Option<Remembering> {
        plan_remembered(limiter, now_ns, cost)
    }
}

impl<A: Stored> PlanRemembered for A {}

/// [`plan_remembered`], carried out on `limiter` at once when admitted: what the command
/// layer's commit does with such a plan, for the tests.
#[cfg(test)]
pub fn admit_remembered(
    limiter: &mut Limiter,
    now_ns: u64,
    cost: u64,
) -> Option<(crate::algo::Decision, Option<(ChargedDelta, u64)>)> {
    let (decision, admitted) = plan_remembered(limiter, now_ns, cost)?;
    if let Some((delta, _)) = &admitted {
        // Planned on this very limiter: it applies.
        delta.apply(limiter).ok()?;
    }
    Some((decision, admitted))
}

impl ChargedDelta {
    /// Appends the encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut head = [0u8; DELTA_LEN];
        Delta {
            prior: self.prior,
            change: self.change,
        }
        .encode_into(&mut head);
        head[0] = CHARGED_FORMAT;
        out.extend_from_slice(&head);
        // At most 7 others: always fits.
        out.push(u8::try_from(self.others.len()).unwrap_or(u8::MAX));
        for charge in &self.others {
            // A count is at most 10^6 (checked again on apply).
            let count = u32::try_from(charge.change.count).unwrap_or(u32::MAX);
            out.extend_from_slice(&charge.change.dropped.to_le_bytes());
            out.extend_from_slice(&charge.merged.to_le_bytes());
            out.extend_from_slice(&charge.change.at_ns.to_le_bytes());
            out.extend_from_slice(&count.to_le_bytes());
        }
    }

    /// The whole effect of this delta with the key's expiry.
    pub fn effect(&self, expire_at_ms: u64) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(EFFECT_HEADER + CHARGED_HEAD + CHARGE_LEN * self.others.len());
        out.push(EFFECT_DELTA);
        out.extend_from_slice(&expire_at_ms.to_le_bytes());
        self.encode(&mut out);
        out
    }

    /// Decodes; a wrong version or algorithm, a count of others out of range, a truncated or a
    /// trailing byte is an error. The values are checked against the state when applied.
    pub fn decode(bytes: &[u8]) -> Result<ChargedDelta, Error> {
        let mut r = Reader(bytes);
        if r.u8()? != CHARGED_FORMAT {
            return Err(Error::BadState("unknown delta format version"));
        }
        if r.u8()? != SLIDING_LOG {
            return Err(Error::BadState("delta for an algorithm without deltas"));
        }
        let prior = r.u64()?;
        let change = Change {
            dropped: r.u32()?,
            at_ns: r.u64()?,
            count: u64::from(r.u32()?),
        };
        let n = usize::from(r.u8()?);
        if !(1..crate::algo::step::MAX_CONFIGURATIONS).contains(&n) {
            return Err(Error::BadState("remembered configurations out of range"));
        }
        let mut others = Vec::with_capacity(n);
        for _ in 0..n {
            let (dropped, merged, at_ns, count) = (r.u32()?, r.u32()?, r.u64()?, r.u32()?);
            others.push(sliding_log::Charge {
                change: Change {
                    dropped,
                    at_ns,
                    count: u64::from(count),
                },
                merged,
            });
        }
        if !r.0.is_empty() {
            return Err(Error::BadState("trailing bytes"));
        }
        Ok(ChargedDelta {
            prior,
            change,
            others,
        })
    }

    /// Applies the delta to the limiter it was made on. Refused — an error, `limiter` untouched
    /// — if `limiter` is not a sliding log remembering as many other configurations, its
    /// fingerprint is not the delta's, or a change does not fit its log. O(entries dropped and
    /// merged).
    pub fn apply(&self, limiter: &mut Limiter) -> Result<(), Error> {
        let policy = limiter.policy;
        if fingerprint_all(limiter) != Some(self.prior) {
            return Err(Error::BadState(
                "delta made for another state (fingerprint differs): key unchanged",
            ));
        }
        let AlgoState::Remembered(r) = &mut limiter.state else {
            return Err(Error::BadState(
                "delta for a sliding log, key holds another limiter",
            ));
        };
        if r.others.len() != self.others.len() {
            return Err(Error::BadState(
                "delta for another number of configurations",
            ));
        }
        let AlgoState::SlidingLog(current) = &mut r.current else {
            return Err(Error::BadState(
                "delta for a sliding log, key holds another limiter",
            ));
        };
        current
            .check_change(&policy, &self.change)
            .map_err(Error::BadState)?;
        for ((p, s), charge) in r.others.iter().zip(&self.others) {
            let AlgoState::SlidingLog(log) = s else {
                return Err(Error::BadState(
                    "delta for a sliding log, key holds another limiter",
                ));
            };
            log.check_charge(p, charge).map_err(Error::BadState)?;
        }
        current.apply(&policy, &self.change);
        for ((p, s), charge) in r.others.iter_mut().zip(&self.others) {
            if let AlgoState::SlidingLog(log) = s {
                log.apply_charge(p, charge);
            }
        }
        Ok(())
    }
}

/// Applies the body of a delta effect, of either version, to the limiter it was made on (see
/// [`Delta::apply`] and [`ChargedDelta::apply`]).
pub fn apply_delta(bytes: &[u8], limiter: &mut Limiter) -> Result<(), Error> {
    match bytes.first() {
        Some(&CHARGED_FORMAT) => ChargedDelta::decode(bytes)?.apply(limiter),
        _ => Delta::decode(bytes)?.apply(limiter),
    }
}

#[cfg(test)]
mod tests;
