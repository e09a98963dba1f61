//! The pool of starting connections: accepted, not yet logged in (nor granted anonymous
//! access). Lives in color 0, next to the connection registry.
//!
//! A connection costs its peer nothing until it logs in, so the pool is bounded on its own
//! ([`pool_size`]: a fraction of `--max-connections`, never all of it) and, when it is full, a
//! new connection is not refused: the pool drops one of its own members instead, as sshd's
//! MaxStartups does. A flood of silent connections then churns through the pool without ever
//! holding a slot a real client needs, and never reaches the connection limit that logged-in
//! users need.
//!
//! Which one goes: the oldest connection still in the handshake; only when none is left, the
//! oldest that finished the handshake but has not logged in. Oldest, not random, because it
//! gives a guarantee instead of odds: a client whose handshake completes before `size` more
//! connections arrive is never dropped, whatever the attacker does (with a random drop every
//! arrival kills it with probability 1/size, and an attacker gains nothing from either order by
//! reconnecting, which only costs him). Handshaking connections go first because finishing the
//! handshake cost the peer a key exchange, and a real client is out of the handshake one round
//! trip after connecting; a silent connection never is.

use std::collections::{BTreeMap, HashMap};

use crate::leases::ConnId;

/// Where a starting connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Accepted; the handshake is not done.
    Handshake,
    /// The handshake is done; no LOGIN (or anonymous request) yet.
    Session,
}

/// Starting connections, oldest first per stage.
#[derive(Debug)]
pub struct Startups {
    size: usize,
    /// Order of arrival (connection ids wrap; this does not).
    next: u64,
    handshake: BTreeMap<u64, ConnId>,
    session: BTreeMap<u64, ConnId>,
    members: HashMap<ConnId, (Stage, u64)>,
}

/// The pool's size for `wanted` (`--max-startups`) and `max_connections`: at most a quarter of
/// the connection limit, so starting connections can never take the slots logged-in users
/// need; at least one.
pub fn pool_size(wanted: usize, max_connections: usize) -> usize {
    wanted.min(max_connections / 4).max(1)
}

impl Startups {
    pub fn new(size: usize) -> Startups {
        Startups {
            size: size.max(1),
            next: 0,
            handshake: BTreeMap::new(),
            session: BTreeMap::new(),
            members: HashMap::new(),
        }
    }

    /// Connection `id` was accepted. Returns the member to drop to make room, if the pool
    /// is full (it has already left the pool).
    #[must_use]
    pub fn admit(&mut self, id: ConnId) -> Option<ConnId> {
        let victim = if self.members.len() >= self.size {
            let oldest = self
                .handshake
                .pop_first()
                .or_else(|| self.session.pop_first());
            oldest.map(|(_, victim)| {
                self.members.remove(&victim);
                victim
            })
        } else {
            None
        };
        self.leave(id);
        let seq = self.next;
        self.next += 1;
        self.handshake.insert(seq, id);
        self.members.insert(id, (Stage::Handshake, seq));
        victim
    }

    /// Connection `id` finished the handshake (it keeps its place in the order of arrival).
    pub fn handshake_done(&mut self, id: ConnId) {
        if let Some((stage @ Stage::Handshake, seq)) = self.members.get_mut(&id) {
            self.handshake.remove(seq);
            self.session.insert(*seq, id);
            *stage = Stage::Session;
        }
    }

    /// Connection `id` logged in, was granted anonymous access or closed: it is not starting.
    pub fn leave(&mut self, id: ConnId) {
        match self.members.remove(&id) {
            Some((Stage::Handshake, seq)) => self.handshake.remove(&seq),
            Some((Stage::Session, seq)) => self.session.remove(&seq),
            None => None,
        };
    }

    /// Starting connections now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.members.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_pool_drops_the_oldest_handshake_first() {
        let mut p = Startups::new(3);
        assert_eq!(p.admit(1), None);
        assert_eq!(p.admit(2), None);
        assert_eq!(p.admit(3), None);
        p.handshake_done(1);
        // 1 is the oldest but finished its handshake: 2 goes, then 3, then 4.
        assert_eq!(p.admit(4), Some(2));
        assert_eq!(p.admit(5), Some(3));
        assert_eq!(p.admit(6), Some(4));
        p.handshake_done(5);
        p.handshake_done(6);
        // Only finished handshakes left: the oldest of them goes; then the newcomers, still in
        // the handshake, go before them.
        assert_eq!(p.admit(7), Some(1));
        assert_eq!(p.admit(8), Some(7));
        assert_eq!(p.admit(9), Some(8));
        p.handshake_done(9);
        assert_eq!(p.admit(10), Some(5));
        assert_eq!(p.len(), 3);
    }

    #[test]
    fn leaving_makes_room_and_nothing_leaks() {
        let mut p = Startups::new(2);
        for round in 0..1000u32 {
            let (a, b) = (2 * round + 1, 2 * round + 2);
            assert_eq!(p.admit(a), None);
            assert_eq!(p.admit(b), None);
            p.handshake_done(a);
            p.leave(a);
            p.leave(b);
            p.leave(b);
            p.handshake_done(b);
            assert_eq!(p.len(), 0);
        }
        assert!(p.handshake.is_empty() && p.session.is_empty() && p.members.is_empty());
    }

    #[test]
    fn a_client_that_finishes_in_time_survives_any_flood() {
        let mut p = Startups::new(64);
        assert_eq!(p.admit(0), None);
        // Fewer than 64 arrivals before its handshake is done: it is never the one dropped.
        for id in 1..60 {
            assert_eq!(p.admit(id), None);
        }
        p.handshake_done(0);
        for id in 60..100_000 {
            assert_ne!(p.admit(id), Some(0), "dropped after {id} arrivals");
        }
        assert_eq!(p.len(), 64);
    }

    #[test]
    fn the_pool_is_a_fraction_of_the_connection_limit() {
        assert_eq!(pool_size(256, 4096), 256);
        assert_eq!(pool_size(256, 1000), 250);
        assert_eq!(pool_size(256, 2), 1);
        assert_eq!(pool_size(0, 4096), 1);
    }
}
