//! Poison-tolerant locking, the one way this crate takes a `std::sync::Mutex`.
//!
//! Every mutex here guards maps and counters whose updates are single inserts, removes or
//! stores: a thread that panicked while holding one cannot have left it half-updated, so the
//! data is still consistent and a poisoned lock is used as is rather than spreading the panic.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, ignoring poison (see the module docs for why that is sound here).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
