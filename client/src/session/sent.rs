//! Where a request went, and whether a later request is known to have gone behind a set of
//! earlier ones on a connection whose server keeps that order.
//!
//! Servers of protocol version 9 and up run a COMMIT only after the WRITEs of its file that
//! arrived before it on the same connection, and servers of version 13 and up do the same for
//! a SETATTR. A client that sends a COMMIT or SETATTR behind WRITEs whose replies it has not
//! seen relies on that only when every WRITE's *answered* attempt went out before it, on the
//! connection that answered it: a WRITE sent again after a reconnect (or after the other
//! request) is not covered, and the caller then sends the later request again after the
//! WRITEs' replies.

/// Where one attempt of a request went: its connection (by serial, never reused within the
/// process), its place in the order in which that connection sent requests, and the
/// connection's protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sent {
    pub(crate) conn: u64,
    pub(crate) seq: u64,
    pub(crate) version: u32,
}

/// Where a set of answered requests went (their answered attempts), folded one by one.
#[derive(Debug, Default, Clone)]
pub(crate) struct SentSoFar {
    /// The connection all went on, `None` before the first.
    conn: Option<u64>,
    /// Some went on another connection, or one was answered without being seen to go out.
    mixed: bool,
    /// The latest place among them.
    last: u64,
}

impl SentSoFar {
    /// One more request answered; `at` is where its answered attempt went.
    pub(crate) fn add(&mut self, at: Option<Sent>) {
        let Some(at) = at else {
            self.mixed = true;
            return;
        };
        match self.conn {
            None => self.conn = Some(at.conn),
            Some(c) if c != at.conn => self.mixed = true,
            Some(_) => {}
        }
        self.last = self.last.max(at.seq);
    }

    /// Whether a request that went out at `later` came behind every one of them, on their
    /// connection, whose server keeps the order (`orders` of its version: requests on one
    /// connection share its version).
    pub(crate) fn covered_by(&self, later: Sent, orders: fn(u32) -> bool) -> bool {
        !self.mixed
            && orders(later.version)
            && self.conn.is_none_or(|c| c == later.conn)
            && self.last < later.seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::handshake::{has_ordered_commit, has_ordered_setattr};

    fn at(conn: u64, seq: u64) -> Sent {
        Sent {
            conn,
            seq,
            version: 14,
        }
    }

    #[test]
    fn a_later_request_counts_only_behind_every_earlier_one_on_its_connection() {
        let mut s = SentSoFar::default();
        for seq in [3, 1, 2] {
            s.add(Some(at(5, seq)));
        }
        assert!(s.covered_by(at(5, 4), has_ordered_commit));
        assert!(s.covered_by(at(5, 4), has_ordered_setattr));
        assert!(
            !s.covered_by(at(5, 3), has_ordered_commit),
            "one went out after it"
        );
        assert!(
            !s.covered_by(at(6, 9), has_ordered_commit),
            "another connection"
        );
        let older = Sent {
            version: 12,
            ..at(5, 4)
        };
        assert!(s.covered_by(older, has_ordered_commit));
        assert!(
            !s.covered_by(older, has_ordered_setattr),
            "a server that does not order SETATTR"
        );
        let mut mixed = SentSoFar::default();
        mixed.add(Some(at(5, 1)));
        mixed.add(Some(at(6, 2)));
        assert!(
            !mixed.covered_by(at(6, 3), has_ordered_commit),
            "answered on two connections"
        );
        let mut unseen = SentSoFar::default();
        unseen.add(None);
        assert!(!unseen.covered_by(at(5, 1), has_ordered_commit));
        assert!(SentSoFar::default().covered_by(at(5, 1), has_ordered_setattr));
    }
}
