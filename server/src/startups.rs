//! The pool of starting connections: accepted, not yet logged in (nor granted anonymous
//! access). Lives in color 0, next to the connection registry.
//!
//! A connection costs its peer nothing until it logs in, so the pool is bounded on its own
//! ([`pool_size`]: a fraction of `--max-connections`, never all of it) and, when it is full, a
//! new connection is not refused: the pool drops one of its own members instead. (sshd's
//! MaxStartups refuses the newcomer, at random from its first threshold on; a flood that keeps
//! the pool full then keeps a real client out until the flood's connections time out.) A
//! flood of silent connections churns through the pool without ever holding a slot a real
//! client needs, and never reaches the connection limit that logged-in users need.
//!
//! Which one goes: the oldest connection still in the handshake, unless more than half the
//! pool has finished the handshake (without logging in), in which case the oldest of those.
//! Oldest, not random, because it gives a guarantee instead of odds: a client is never dropped
//! before half a pool of connections arrived after it, whatever the attacker does (with a
//! random drop every arrival kills it with probability 1/size, and an attacker gains nothing
//! from either order by reconnecting, which only costs him). Handshaking connections go first
//! because finishing the handshake cost the peer a key exchange and a real client finishes it
//! one round trip after connecting, while a silent connection never does: once out of the
//! handshake, a client can only be pushed out by half a pool of completed handshakes, not by
//! silent connections. And the finished ones may hold only half the pool, so an attacker who
//! completes handshakes first and then floods silently still leaves newcomers half a pool.
//!
//! Anonymous access (`--anonymous-read`) lets a connection out of the pool without logging in,
//! but only while anonymous connections hold at most half of `--max-connections`
//! ([`anonymous_limit`]); beyond it they stay among the starting connections, where newcomers
//! can push them out. A crowd of anonymous connections thus cannot take every slot either.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::leases::ConnId;

/// Where a starting connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Accepted; the handshake is not done.
    Handshake,
    /// The handshake is done; no LOGIN (or anonymous request) yet.
    Session,
}

/// A starting connection to close to make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dropped {
    pub conn: ConnId,
    /// Whether color 0 had it in the handshake (if the connection finished it meanwhile, it
    /// comes back: [`Startups::readmit`]).
    pub in_handshake: bool,
}

/// Starting connections, oldest first per stage.
#[derive(Debug)]
pub(crate) struct Startups {
    size: usize,
    /// Order of arrival (connection ids wrap; this does not).
    next: u64,
    handshake: BTreeMap<u64, ConnId>,
    session: BTreeMap<u64, ConnId>,
    members: HashMap<ConnId, (Stage, u64)>,
    /// Connections let out of the pool by anonymous access, not logged in.
    anonymous: HashSet<ConnId>,
    anonymous_max: usize,
}

/// The most connections anonymous access lets out of the pool: half of `max_connections`, so
/// logged-in users always have the other half.
pub(crate) fn anonymous_limit(max_connections: usize) -> usize {
    (max_connections / 2).max(1)
}

/// The pool's size for `wanted` (`--max-startups`) and `max_connections`: at most a quarter of
/// the connection limit, so starting connections can never take the slots logged-in users
/// need; at least one.
pub(crate) fn pool_size(wanted: usize, max_connections: usize) -> usize {
    wanted.min(max_connections / 4).max(1)
}

impl Startups {
    /// A pool of `size` (see [`pool_size`]) letting out at most `anonymous_max` anonymous
    /// connections (see [`anonymous_limit`]).
    pub(crate) fn new(size: usize, anonymous_max: usize) -> Startups {
        Startups {
            size: size.max(1),
            next: 0,
            handshake: BTreeMap::new(),
            session: BTreeMap::new(),
            members: HashMap::new(),
            anonymous: HashSet::new(),
            anonymous_max,
        }
    }

    /// Connection `id` was accepted. Returns the member to drop to make room, if the pool
    /// is full (it has already left the pool).
    #[must_use]
    pub(crate) fn admit(&mut self, id: ConnId) -> Option<Dropped> {
        self.leave(id);
        let victim = self.make_room();
        self.insert(id, Stage::Handshake);
        victim
    }

    /// Connection `id`, dropped while color 0 had it in the handshake, had in fact finished it
    /// (the news was on its way): it comes back as the newest that finished the handshake,
    /// and another makes room. Without this, the lag of color 0 under a flood would make a
    /// real client's handshake a race against half a pool of arrivals plus that lag.
    #[must_use]
    pub(crate) fn readmit(&mut self, id: ConnId) -> Option<Dropped> {
        if self.members.contains_key(&id) || self.anonymous.contains(&id) {
            return None;
        }
        let victim = self.make_room();
        self.insert(id, Stage::Session);
        victim
    }

    /// If the pool is full, takes out the member to drop (see the module's doc).
    fn make_room(&mut self) -> Option<Dropped> {
        if self.members.len() < self.size {
            return None;
        }
        let (oldest, in_handshake) = if self.session.len() > self.size / 2 {
            (self.session.pop_first(), false)
        } else {
            match self.handshake.pop_first() {
                Some(h) => (Some(h), true),
                None => (self.session.pop_first(), false),
            }
        };
        let (_, conn) = oldest?;
        self.members.remove(&conn);
        Some(Dropped { conn, in_handshake })
    }

    fn insert(&mut self, id: ConnId, stage: Stage) {
        let seq = self.next;
        self.next += 1;
        match stage {
            Stage::Handshake => self.handshake.insert(seq, id),
            Stage::Session => self.session.insert(seq, id),
        };
        self.members.insert(id, (stage, seq));
    }

    /// Connection `id` finished the handshake (it keeps its place in the order of arrival).
    pub(crate) fn handshake_done(&mut self, id: ConnId) {
        if let Some((stage @ Stage::Handshake, seq)) = self.members.get_mut(&id) {
            self.handshake.remove(seq);
            self.session.insert(*seq, id);
            *stage = Stage::Session;
        }
    }

    /// Connection `id` logged in: it is not starting.
    pub(crate) fn logged_in(&mut self, id: ConnId) {
        self.leave(id);
        self.anonymous.remove(&id);
    }

    /// Connection `id` was granted anonymous access: it leaves the pool if anonymous
    /// connections have room ([`anonymous_limit`]), else it stays. Returns whether it left.
    pub(crate) fn anonymous(&mut self, id: ConnId) -> bool {
        if !self.members.contains_key(&id) || self.anonymous.len() >= self.anonymous_max {
            return false;
        }
        self.leave(id);
        self.anonymous.insert(id)
    }

    /// Connection `id` closed.
    pub(crate) fn closed(&mut self, id: ConnId) {
        self.leave(id);
        self.anonymous.remove(&id);
    }

    fn leave(&mut self, id: ConnId) {
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

    impl Startups {
        /// [`Startups::admit`], the dropped connection's id only.
        fn admit_id(&mut self, id: ConnId) -> Option<ConnId> {
            self.admit(id).map(|d| d.conn)
        }
    }

    #[test]
    fn a_connection_dropped_on_stale_news_comes_back_finished() {
        let mut p = Startups::new(4, 100);
        for id in 1..=4 {
            assert_eq!(p.admit_id(id), None);
        }
        // 1 finished its handshake, but color 0 drops it before hearing so.
        let d = p.admit(5).unwrap();
        assert_eq!(
            d,
            Dropped {
                conn: 1,
                in_handshake: true
            }
        );
        p.handshake_done(1);
        assert_eq!(p.len(), 4, "the news about a non-member changes nothing");
        // It comes back as a finished handshake; the oldest handshake makes room.
        assert_eq!(
            p.readmit(1),
            Some(Dropped {
                conn: 2,
                in_handshake: true
            })
        );
        assert_eq!(p.readmit(1), None, "already back");
        for id in 6..100 {
            assert_ne!(p.admit_id(id), Some(1), "silent arrivals do not drop it");
        }
        p.handshake_done(99);
        p.handshake_done(98);
        // More than half finished: the oldest finished goes, not as a handshake.
        assert_eq!(
            p.admit(100),
            Some(Dropped {
                conn: 1,
                in_handshake: false
            })
        );
        assert_eq!(p.readmit(98), None, "a member is not readmitted");
        assert_eq!(p.len(), 4);
    }

    #[test]
    fn full_pool_drops_the_oldest_handshake_first() {
        let mut p = Startups::new(4, 100);
        for id in 1..=4 {
            assert_eq!(p.admit_id(id), None);
        }
        p.handshake_done(1);
        // 1 is the oldest but finished its handshake: 2 goes, then 3, then 4.
        assert_eq!(p.admit_id(5), Some(2));
        assert_eq!(p.admit_id(6), Some(3));
        assert_eq!(p.admit_id(7), Some(4));
        p.handshake_done(6);
        // Two of four finished (not more than half): still the handshakes go.
        assert_eq!(p.admit_id(8), Some(5));
        p.handshake_done(7);
        // Three of four finished: the oldest of them goes.
        assert_eq!(p.admit_id(9), Some(1));
        // Two left finished: handshakes again.
        assert_eq!(p.admit_id(10), Some(8));
        assert_eq!(p.len(), 4);
    }

    #[test]
    fn finished_handshakes_hold_at_most_half_the_pool() {
        let mut p = Startups::new(8, 100);
        // The attacker finishes handshakes on the whole pool first.
        for id in 0..8 {
            assert_eq!(p.admit_id(id), None);
            p.handshake_done(id);
        }
        // Then floods with silent connections: a newcomer among them still outlives the next
        // three arrivals (half a pool less itself).
        for id in 8..12 {
            assert_eq!(p.admit_id(id), Some(id - 8));
        }
        // Half the pool is finished handshakes now: the handshakes go, oldest first.
        assert_eq!(p.admit_id(100), Some(8));
        for id in 12..15 {
            assert_ne!(
                p.admit_id(id),
                Some(100),
                "dropped after {} arrivals",
                id - 11
            );
        }
        assert_eq!(p.admit_id(15), Some(100));
    }

    #[test]
    fn leaving_makes_room_and_nothing_leaks() {
        let mut p = Startups::new(3, 1);
        for round in 0..1000u32 {
            let (a, b, c) = (3 * round + 1, 3 * round + 2, 3 * round + 3);
            assert_eq!(p.admit_id(a), None);
            assert_eq!(p.admit_id(b), None);
            assert_eq!(p.admit_id(c), None);
            p.handshake_done(a);
            p.handshake_done(c);
            p.logged_in(a);
            assert!(p.anonymous(c), "anonymous connections have room");
            assert!(!p.anonymous(a), "logged in: not a member any more");
            p.closed(b);
            p.closed(b);
            p.handshake_done(b);
            assert_eq!(p.len(), 0);
            p.closed(a);
            p.closed(c);
        }
        assert!(p.handshake.is_empty() && p.session.is_empty() && p.members.is_empty());
        assert!(p.anonymous.is_empty());
    }

    #[test]
    fn a_client_out_of_the_handshake_survives_any_silent_flood() {
        let mut p = Startups::new(64, 100);
        for id in 0..64 {
            assert_eq!(p.admit_id(id), None);
        }
        // The pool is full of silent connections; 64 more arrive before 100's handshake is
        // done: it outlives at least half a pool of them.
        for id in 64..96 {
            assert!(p.admit_id(id).is_some_and(|v| v < 64));
        }
        assert_eq!(p.admit_id(100), Some(32));
        for id in 101..132 {
            assert_ne!(
                p.admit_id(id),
                Some(100),
                "dropped after {} arrivals",
                id - 100
            );
        }
        p.handshake_done(100);
        // From now on no silent arrival drops it.
        for id in 1000..100_000 {
            assert_ne!(p.admit_id(id), Some(100), "dropped after {id} arrivals");
        }
        assert_eq!(p.len(), 64);
    }

    #[test]
    fn anonymous_connections_leave_the_pool_only_while_they_have_room() {
        let mut p = Startups::new(4, 2);
        for id in 1..=4 {
            assert_eq!(p.admit_id(id), None);
            p.handshake_done(id);
        }
        assert!(p.anonymous(1));
        assert!(p.anonymous(2));
        assert!(!p.anonymous(3), "two anonymous connections at most");
        assert_eq!(p.len(), 2);
        // 3 and 4 are still starting: newcomers push them out (once finished handshakes are
        // more than half the pool).
        assert_eq!(p.admit_id(5), None);
        assert_eq!(p.admit_id(6), None);
        assert_eq!(p.admit_id(7), Some(5));
        p.handshake_done(7);
        assert_eq!(p.admit_id(8), Some(3));
        // One anonymous connection logs in, another closes: room for two more.
        p.logged_in(1);
        p.closed(2);
        assert!(p.anonymous(4));
        assert!(p.anonymous(7));
        assert!(!p.anonymous(6));
        assert_eq!(p.len(), 2);
    }

    #[test]
    fn the_pool_is_a_fraction_of_the_connection_limit() {
        assert_eq!(pool_size(256, 4096), 256);
        assert_eq!(pool_size(256, 1000), 250);
        assert_eq!(pool_size(256, 2), 1);
        assert_eq!(pool_size(0, 4096), 1);
        assert_eq!(anonymous_limit(4096), 2048);
        assert_eq!(anonymous_limit(1), 1);
    }
}
