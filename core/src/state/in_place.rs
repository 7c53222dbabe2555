//! An algorithm's in-place path as the stored format carries it: its `Change` as a delta
//! (`state::delta`). It names no stored limiter, so the stored limiter (`state`) can require it
//! of every algorithm; the admit of a key that remembers other configurations, charged in place,
//! is `replay`'s ([`super::replay::PlanRemembered`]).

use crate::algo::sliding_log::Change;

use super::delta::Delta;

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
}

impl IntoDelta for () {
    fn into_change(self) -> Option<Change> {
        None
    }
}

impl IntoDelta for Change {
    fn into_change(self) -> Option<Change> {
        Some(self)
    }
}
