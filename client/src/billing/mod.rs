//! Billing without the store: what the Billing class admitted while the store did not decide,
//! owed and charged when it answers again. `ledger` (the counts and their charges), `owed`
//! (what is owed, in memory and as replayed), `journal` (the same on disk, so it outlives the
//! process).

pub(crate) mod journal;
pub(crate) mod ledger;
pub(crate) mod owed;
