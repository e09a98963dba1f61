//! The table of open states both backends keep (OPEN, CLOSE, and what CREATE keeps: see
//! docs/PROTOCOL.md): who holds a state on which object, with a value per holder (the local
//! backend's kept descriptor; nothing for the NFS backend, which only needs to know whether
//! an object is held).
//!
//! A holder is one connection and one server uid. Bounded: at most [`MAX_PER_HOLDER`] states
//! per connection, each charged to it, and [`crate::limits::OPEN_STATES`] in all (reserved in
//! the descriptors the server keeps room for); past that nothing more is kept.

use std::collections::{HashMap, HashSet, VecDeque};

use parking_lot::Mutex;

use super::{ObjKey, OpCtx};
use crate::ids::ConnId;

/// Most open states one connection may hold.
pub(crate) const MAX_PER_HOLDER: usize = 256;

/// How many closed connections are remembered (see [`StateTable::closed`]).
const CLOSED_REMEMBERED: usize = 1024;

/// Who holds a state: a connection and the server uid its request ran as.
pub(crate) type Holder = (ConnId, u32);

/// The holder a request acts for.
pub(crate) fn holder(ctx: &OpCtx) -> Holder {
    (ctx.conn, ctx.creds.uid)
}

/// The states by object and by connection, behind the table's one mutex.
struct StateTable<T> {
    by_obj: HashMap<ObjKey, HashMap<Holder, T>>,
    by_conn: HashMap<ConnId, HashSet<(u32, ObjKey)>>,
    /// States held, all connections together.
    total: usize,
    /// Connections closed lately: a request of theirs still under way when they closed must
    /// not leave a state nobody will ever drop.
    closed: VecDeque<ConnId>,
}

/// Every connection's open states, each with a `T`.
pub(crate) struct OpenStates<T> {
    inner: Mutex<StateTable<T>>,
}

impl<T> Default for OpenStates<T> {
    fn default() -> Self {
        OpenStates {
            inner: Mutex::new(StateTable {
                by_obj: HashMap::new(),
                by_conn: HashMap::new(),
                total: 0,
                closed: VecDeque::new(),
            }),
        }
    }
}

impl<T> OpenStates<T> {
    /// Keeps `value` for `holder` on object `key`; a state the holder has already is replaced
    /// only if `replaces` says so of the old value. Whether the holder holds a state now
    /// (false when its connection closed or the bounds are reached).
    pub(crate) fn keep(
        &self,
        holder: Holder,
        key: ObjKey,
        value: T,
        replaces: impl FnOnce(&T) -> bool,
    ) -> bool {
        let mut g = self.inner.lock();
        if g.closed.contains(&holder.0) {
            return false;
        }
        let total = g.total;
        let held = g.by_conn.entry(holder.0).or_default();
        if !held.contains(&(holder.1, key)) {
            if held.len() >= MAX_PER_HOLDER || total >= crate::limits::OPEN_STATES {
                if held.is_empty() {
                    g.by_conn.remove(&holder.0);
                }
                return false;
            }
            held.insert((holder.1, key));
            g.total += 1;
        }
        let states = g.by_obj.entry(key).or_default();
        if states.get(&holder).is_none_or(replaces) {
            states.insert(holder, value);
        }
        true
    }

    /// `f` of `holder`'s value on `key`, if it holds one.
    pub(crate) fn get<R>(
        &self,
        holder: Holder,
        key: ObjKey,
        f: impl FnOnce(&T) -> Option<R>,
    ) -> Option<R> {
        let g = self.inner.lock();
        f(g.by_obj.get(&key)?.get(&holder)?)
    }

    /// `f` of some holder's value on `key`, if anybody holds one.
    pub(crate) fn any<R>(&self, key: ObjKey, f: impl FnOnce(&T) -> Option<R>) -> Option<R> {
        let g = self.inner.lock();
        f(g.by_obj.get(&key)?.values().next()?)
    }

    /// Whether anybody holds a state on `key`.
    pub(crate) fn is_held(&self, key: ObjKey) -> bool {
        self.inner.lock().by_obj.contains_key(&key)
    }

    /// Drops `holder`'s state on `key` (none is fine); whether `key` is now held by nobody.
    pub(crate) fn close(&self, holder: Holder, key: ObjKey) -> bool {
        let mut g = self.inner.lock();
        if let Some(held) = g.by_conn.get_mut(&holder.0) {
            let removed = held.remove(&(holder.1, key));
            let empty = held.is_empty();
            if removed {
                g.total -= 1;
            }
            if empty {
                g.by_conn.remove(&holder.0);
            }
        }
        drop_holder(&mut g.by_obj, key, holder)
    }

    /// Drops every state of connection `conn` (it closed); the objects now held by nobody.
    pub(crate) fn close_conn(&self, conn: ConnId) -> Vec<ObjKey> {
        let mut g = self.inner.lock();
        if g.closed.len() >= CLOSED_REMEMBERED {
            g.closed.pop_front();
        }
        g.closed.push_back(conn);
        let Some(held) = g.by_conn.remove(&conn) else {
            return Vec::new();
        };
        g.total -= held.len();
        held.into_iter()
            .filter(|&(uid, key)| drop_holder(&mut g.by_obj, key, (conn, uid)))
            .map(|(_, key)| key)
            .collect()
    }

    /// States held by connection `conn`.
    #[cfg(test)]
    pub(crate) fn held_by(&self, conn: ConnId) -> usize {
        self.inner.lock().by_conn.get(&conn).map_or(0, HashSet::len)
    }

    /// States held in all.
    #[cfg(test)]
    pub(crate) fn total(&self) -> usize {
        self.inner.lock().total
    }
}

/// Removes `holder` from `key`'s holders; whether `key` has none left.
fn drop_holder<T>(
    by_obj: &mut HashMap<ObjKey, HashMap<Holder, T>>,
    key: ObjKey,
    holder: Holder,
) -> bool {
    let Some(states) = by_obj.get_mut(&key) else {
        return true;
    };
    states.remove(&holder);
    if states.is_empty() {
        by_obj.remove(&key);
        true
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_holder_values_and_who_holds_what() {
        let s = OpenStates::<u8>::default();
        assert!(s.keep((1, 1000), (5, 7), 1, |_| true));
        assert_eq!(s.get((1, 1000), (5, 7), |v| Some(*v)), Some(1));
        assert_eq!(s.get((1, 1001), (5, 7), |v| Some(*v)), None, "another user");
        assert_eq!(
            s.get((2, 1000), (5, 7), |v| Some(*v)),
            None,
            "another connection"
        );
        // Kept only where `replaces` says so.
        assert!(s.keep((1, 1000), (5, 7), 2, |old| *old != 1));
        assert_eq!(s.get((1, 1000), (5, 7), |v| Some(*v)), Some(1));
        assert!(s.keep((2, 1001), (5, 7), 3, |_| true));
        assert!(!s.close((1, 1000), (5, 7)), "the other holder keeps it");
        assert!(s.is_held((5, 7)));
        assert_eq!(s.any((5, 7), |v| Some(*v)), Some(3));
        assert_eq!(s.close_conn(2), vec![(5, 7)]);
        assert!(!s.is_held((5, 7)));
        assert_eq!((s.held_by(2), s.total()), (0, 0));
        assert!(s.close((9, 9), (9, 9)), "closing nothing is fine");
        // A request that finishes after its connection closed keeps nothing.
        assert!(!s.keep((2, 1001), (5, 7), 4, |_| true));
        assert!(!s.is_held((5, 7)));
    }

    #[test]
    fn a_connection_holds_a_bounded_number() {
        let s = OpenStates::<()>::default();
        for i in 0..MAX_PER_HOLDER as u64 {
            assert!(s.keep((1, 1000), (1, i), (), |_| true));
        }
        assert!(!s.keep((1, 1000), (1, u64::MAX), (), |_| true));
        assert!(
            s.keep((1, 1000), (1, 0), (), |_| true),
            "one it holds may be renewed"
        );
        assert!(
            s.keep((2, 1000), (1, u64::MAX), (), |_| true),
            "others unaffected"
        );
        assert_eq!(s.held_by(1), MAX_PER_HOLDER);
        assert_eq!(s.close_conn(1).len(), MAX_PER_HOLDER);
        assert_eq!(s.held_by(1), 0);
        assert!(s.close((2, 1000), (1, u64::MAX)));
        assert_eq!(s.total(), 0);
    }

    #[test]
    fn the_server_holds_a_bounded_number() {
        let s = OpenStates::<()>::default();
        let per = MAX_PER_HOLDER as u64;
        let conns = (crate::limits::OPEN_STATES as u64).div_ceil(per);
        for conn in 0..conns {
            for i in 0..per {
                s.keep((conn as ConnId, 0), (conn, i), (), |_| true);
            }
        }
        assert_eq!(s.total(), crate::limits::OPEN_STATES);
        assert!(!s.keep((999, 0), (7, 7), (), |_| true), "full");
        assert_eq!(s.held_by(999), 0);
        s.close((0, 0), (0, 0));
        assert!(s.keep((999, 0), (7, 7), (), |_| true), "room again");
    }
}
