//! An algorithm's in-place path as the stored format carries it: its `Change` as a delta
//! (`state::delta`), and the admit of a key that remembers other configurations charged in place
//! (`state::replay`). Above both, so that neither names the other's user.

use crate::algo::sliding_log::Change;

use super::delta::Delta;
use super::replay::ChargedDelta;
use super::Limiter;

/// An algorithm's in-place change (`Algorithm::Change`) as the stored format carries it: the
/// sliding log's as a [`Delta`]; `()`, the change of the algorithms without an in-place path,
/// never.
pub trait IntoDelta: Copy {
    /// The change as a delta's, None when it has no delta form.
    fn into_change(self) -> Option<Change>;
    /// The delta of this change made on a state of fingerprint `prior`.
    fn into_delta(self, prior: u64) -> Option<Delta> {
        Some(Delta {
            prior,
            change: self.into_change()?,
        })
    }
    /// The admit of `cost` on a key that remembers other configurations, under the policy it
    /// holds as current, planned in place (see `replay::plan_remembered`): None where the
    /// algorithm has no such path and `algo::step` decides.
    fn plan_remembered(_: &Limiter, _: u64, _: u64) -> Option<Remembering> {
        None
    }
}

/// What [`IntoDelta::plan_remembered`] answers: the decision and, when admitted, the delta
/// that charges every configuration and how long the key must then live.
pub type Remembering = (crate::algo::Decision, Option<(ChargedDelta, u64)>);

impl IntoDelta for () {
    fn into_change(self) -> Option<Change> {
        None
    }
}

impl IntoDelta for Change {
    fn into_change(self) -> Option<Change> {
        Some(self)
    }
    fn plan_remembered(limiter: &Limiter, now_ns: u64, cost: u64) -> Option<Remembering> {
        super::replay::plan_remembered(limiter, now_ns, cost)
    }
}
