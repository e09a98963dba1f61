//! A map that forgets its earliest entries past a number of them, without a scan.
//!
//! The mount remembers several kinds of things for a while and must bound each whatever a
//! walk or a build does: the walk memory ([`super::listing_ahead`]), the last pages of files it
//! made ([`super::read_at_open`]). Each entry's place in the keeping order carries the count it
//! was kept at; a place whose entry was taken, or kept again since, is skipped when met, and
//! such places are dropped once they outnumber the entries.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

pub(super) struct Bounded<K, V> {
    /// By key: when it was kept (a count), and the value.
    map: HashMap<K, (u64, V)>,
    /// The order entries were kept in.
    order: VecDeque<(u64, K)>,
    kept: u64,
    max: usize,
}

impl<K: Hash + Eq + Copy, V> Bounded<K, V> {
    pub(super) fn with_max(max: usize) -> Self {
        Bounded {
            map: HashMap::new(),
            order: VecDeque::new(),
            kept: 0,
            max,
        }
    }

    /// Inserts `k` (true) unless it is there already (false).
    pub(super) fn insert(&mut self, k: K, v: V) -> bool {
        if self.map.contains_key(&k) {
            return false;
        }
        self.keep(k, v);
        true
    }

    /// Keeps `v` under `k`, as the latest entry whether `k` was there or not; the earliest go
    /// past the bound.
    pub(super) fn keep(&mut self, k: K, v: V) {
        self.map.remove(&k);
        while self.map.len() >= self.max {
            let Some((n, old)) = self.order.pop_front() else {
                break;
            };
            if self.current(n, &old) {
                self.map.remove(&old);
            }
        }
        self.kept += 1;
        self.map.insert(k, (self.kept, v));
        self.order.push_back((self.kept, k));
        if self.order.len() > 2 * self.max {
            let map = &self.map;
            self.order
                .retain(|(n, k)| map.get(k).is_some_and(|(kept, _)| kept == n));
        }
    }

    /// Whether the place `(n, k)` is that of `k`'s entry.
    fn current(&self, n: u64, k: &K) -> bool {
        self.map.get(k).is_some_and(|(kept, _)| *kept == n)
    }

    pub(super) fn get(&self, k: &K) -> Option<&V> {
        self.map.get(k).map(|(_, v)| v)
    }

    pub(super) fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        self.map.get_mut(k).map(|(_, v)| v)
    }

    /// Takes `k`'s entry out.
    pub(super) fn take(&mut self, k: &K) -> Option<V> {
        self.map.remove(k).map(|(_, v)| v)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// Places in the keeping order, those skipped included.
    #[cfg(test)]
    pub(super) fn places(&self) -> usize {
        self.order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earliest_go_first_and_taken_places_stay_bounded() {
        let mut b = Bounded::with_max(3);
        assert!(b.insert(1, "a"));
        assert!(!b.insert(1, "z"), "there already");
        b.keep(2, "b");
        b.keep(3, "c");
        // 1 kept again: now the latest, so 2 is the earliest.
        b.keep(1, "a2");
        b.keep(4, "d");
        assert_eq!(b.get(&2), None, "the earliest kept went");
        assert_eq!(b.get(&1), Some(&"a2"));
        assert_eq!(b.len(), 3);
        assert_eq!(b.take(&3), Some("c"));
        assert_eq!(b.take(&3), None);
        for i in 10..1000 {
            b.keep(i, "x");
            assert_eq!(b.take(&i), Some("x"));
        }
        assert!(b.places() <= 2 * 3 + 1, "{} places", b.places());
        assert_eq!(b.len(), 2);
    }
}
