//! A mutex that a panicking holder left poisoned is still used: the state it guards (counts,
//! pools, the ledger's book) stays meaningful, and a gateway must not stop deciding.

use std::sync::{Mutex, MutexGuard};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
