//! Exactly-once changes across reconnects: the wire side of SESSION and SEQUENCE.
//!
//! A change whose connection broke before its reply arrived may or may not have been done. A
//! client that simply sends it again may do it twice (a second REMOVE fails with "no such
//! file", a second exclusive CREATE with "exists", a second truncate undoes another client's
//! write in between); one that does not leaves its user guessing. NFSv4.1's sessions (RFC
//! 8881, section 2.10.6) answer this with a reply cache the client addresses by slot and
//! sequence number, and so does this protocol:
//!
//! - **SESSION** `{ client_id[32], slots }`, sent with authno 0 on each new connection, binds
//!   the connection to the server's record for `client_id` (a random secret the client keeps
//!   for its lifetime and sends only inside the encrypted stream), made if there is none. The
//!   reply grants a number of slots and says whether the record already existed (`resumed`):
//!   only then were the replies of the previous connection kept.
//! - **SEQUENCE** `{ slot, seq, op }` carries a change. A slot holds one request at a time;
//!   the server keeps the reply of each slot's last request. `seq` one above the slot's last
//!   is a new request (and tells the server the last reply arrived, so it may drop it);
//!   `seq` equal to the last is the same request sent again, answered from the cache (or
//!   JUKEBOX while it is still being done), never done twice.
//!
//! Memory is bounded by the slots: one reply per slot, at most [`MAX_SLOTS`] slots per
//! record, and the server's own bound on records (one per connection, plus records of broken
//! connections kept for a grace period so their client can come back).

use crate::request::Proc;
use crate::xdr;

/// Bytes of a client id.
pub const CLIENT_ID_LEN: usize = 32;

/// Most slots a server grants one client (a client asking for more gets this many).
pub const MAX_SLOTS: u32 = 64;

/// Where a sequenced request goes: its slot and sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket {
    /// The slot (below the number SESSION granted).
    pub slot: u32,
    /// The slot's sequence number for this request.
    pub seq: u32,
}

/// Bytes SEQUENCE adds in front of the change's own procedure number and arguments.
pub const HEAD_LEN: usize = 12;

/// Appends SEQUENCE's procedure number and fields; the change's own procedure number and
/// arguments follow.
pub(crate) fn put_head(buf: &mut Vec<u8>, slot: u32, seq: u32) {
    xdr::put_u32(buf, Proc::Sequence.code());
    xdr::put_u32(buf, slot);
    xdr::put_u32(buf, seq);
}

/// A new client id: 32 bytes from the operating system's random source, so no other client
/// can guess it (it is the only thing that gives a client its replies).
pub fn new_client_id() -> [u8; CLIENT_ID_LEN] {
    use rand::RngCore;
    let mut id = [0; CLIENT_ID_LEN];
    rand::rngs::OsRng.fill_bytes(&mut id);
    id
}

/// The sequence number after `seq` (wrapping past `u32::MAX` to 1: 0 is "never used").
pub fn next_seq(seq: u32) -> u32 {
    seq.checked_add(1).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_skip_zero_when_they_wrap() {
        assert_eq!(next_seq(0), 1);
        assert_eq!(next_seq(41), 42);
        assert_eq!(next_seq(u32::MAX), 1);
    }
}
