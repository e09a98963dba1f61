//! The client's side of the server's reply cache (`protocol::sequence`): its id, and which
//! slot and sequence number each change goes through.
//!
//! A change holds a slot from its first send to its answer, and keeps its ticket (slot and
//! sequence number) through every retry, on whatever connection: that is what lets the server
//! recognise it. The slot's number advances only once an answer arrived. A slot whose change
//! was given up without an answer is retired: whether the server did it is unknown, so neither
//! its old number (which the server might answer with the old reply) nor the next (which it
//! might refuse as out of order) is safe on it. When the server did not keep the record (it
//! restarted, or the client stayed away past the grace period), every slot starts afresh in a
//! new *epoch*, and a change sent in an earlier one cannot be safely sent again.

use parking_lot::Mutex;
use protocol::sequence::{CLIENT_ID_LEN, MAX_SLOTS, Ticket, new_client_id, next_seq};
use tokio::sync::Notify;

/// One change's hold on a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Held {
    pub ticket: Ticket,
    /// The record epoch the ticket belongs to.
    pub epoch: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// The last sequence number answered (0: none).
    seq: u32,
    busy: bool,
    retired: bool,
}

struct State {
    /// Counts records: a new one each time the server had none for us.
    epoch: u64,
    /// Slots the server granted (at most [`MAX_SLOTS`], whatever it says).
    granted: usize,
    slots: Vec<Slot>,
}

/// The session's reply-cache slots.
pub(super) struct Slots {
    client_id: [u8; CLIENT_ID_LEN],
    state: Mutex<State>,
    freed: Notify,
}

impl Slots {
    pub(super) fn new() -> Slots {
        Slots {
            client_id: new_client_id(),
            state: Mutex::new(State {
                epoch: 0,
                granted: 0,
                slots: vec![Slot::default(); MAX_SLOTS as usize],
            }),
            freed: Notify::new(),
        }
    }

    /// What SESSION sends.
    pub(super) fn session_request(&self) -> protocol::RequestOp {
        protocol::RequestOp::Session {
            client_id: self.client_id,
            slots: MAX_SLOTS,
        }
    }

    /// A connection's SESSION was answered: `slots` granted, the record `resumed` or new. The
    /// epoch the connection's requests belong to.
    pub(super) fn bound(&self, slots: u32, resumed: bool) -> u64 {
        let mut st = self.state.lock();
        if !resumed || st.epoch == 0 {
            st.epoch += 1;
            for s in &mut st.slots {
                // Busy slots stay busy until their holder lets go (it sees the new epoch).
                *s = Slot {
                    busy: s.busy,
                    ..Slot::default()
                };
            }
        }
        st.granted = (slots as usize).min(MAX_SLOTS as usize);
        let epoch = st.epoch;
        drop(st);
        self.freed.notify_waiters();
        epoch
    }

    /// A free slot of `epoch` and its next sequence number, waiting for one if all are busy;
    /// None if the epoch has passed or no usable slot is left (the change is then sent
    /// without one, as to a server without sessions).
    pub(super) async fn acquire(&self, epoch: u64) -> Option<Held> {
        loop {
            let freed = self.freed.notified();
            {
                let mut st = self.state.lock();
                if st.epoch != epoch {
                    return None;
                }
                let granted = st.granted;
                let usable = st.slots[..granted].iter().any(|s| !s.retired);
                if !usable {
                    return None;
                }
                if let Some((i, s)) = st.slots[..granted]
                    .iter_mut()
                    .enumerate()
                    .find(|(_, s)| !s.busy && !s.retired)
                {
                    s.busy = true;
                    return Some(Held {
                        ticket: Ticket {
                            slot: i as u32,
                            seq: next_seq(s.seq),
                        },
                        epoch,
                    });
                }
            }
            freed.await;
        }
    }

    /// The change holding `held` is over: `answered` if the server's answer arrived (the
    /// slot's number advances), else the slot is retired.
    pub(super) fn release(&self, held: Held, answered: bool) {
        let mut st = self.state.lock();
        let same_epoch = st.epoch == held.epoch;
        let s = &mut st.slots[held.ticket.slot as usize];
        s.busy = false;
        if same_epoch {
            if answered {
                s.seq = held.ticket.seq;
            } else {
                s.retired = true;
            }
        }
        drop(st);
        self.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn tickets_advance_on_answers_and_wait_for_a_free_slot() {
        let slots = Slots::new();
        let e = slots.bound(2, false);
        let a = slots.acquire(e).await.unwrap();
        let b = slots.acquire(e).await.unwrap();
        assert_eq!((a.ticket.slot, a.ticket.seq), (0, 1));
        assert_eq!((b.ticket.slot, b.ticket.seq), (1, 1));
        // Both busy: the third waits until one is released.
        let third = tokio::time::timeout(Duration::from_millis(50), slots.acquire(e)).await;
        assert!(third.is_err(), "a busy slot was handed out twice");
        slots.release(a, true);
        let c = slots.acquire(e).await.unwrap();
        assert_eq!((c.ticket.slot, c.ticket.seq), (0, 2));
    }

    #[tokio::test]
    async fn a_slot_given_up_without_an_answer_is_never_used_again() {
        let slots = Slots::new();
        let e = slots.bound(2, false);
        let a = slots.acquire(e).await.unwrap();
        slots.release(a, false);
        for _ in 0..3 {
            let b = slots.acquire(e).await.unwrap();
            assert_eq!(b.ticket.slot, 1);
            slots.release(b, true);
        }
        let b = slots.acquire(e).await.unwrap();
        slots.release(b, false);
        assert_eq!(slots.acquire(e).await, None, "no usable slot: send without");
    }

    #[tokio::test]
    async fn a_record_the_server_lost_starts_a_new_epoch() {
        let slots = Slots::new();
        let e1 = slots.bound(4, false);
        let a = slots.acquire(e1).await.unwrap();
        slots.release(a, true);
        let held = slots.acquire(e1).await.unwrap();
        assert_eq!(held.ticket, Ticket { slot: 0, seq: 2 });
        // Resumed: the same epoch, numbers kept.
        assert_eq!(slots.bound(4, true), e1);
        // Not resumed: a new epoch, every number from 1, the old epoch's tickets are dead.
        let e2 = slots.bound(4, false);
        assert_ne!(e1, e2);
        assert_eq!(slots.acquire(e1).await, None);
        slots.release(held, true);
        let fresh = slots.acquire(e2).await.unwrap();
        assert_eq!(fresh.ticket, Ticket { slot: 0, seq: 1 });
    }

    #[tokio::test]
    async fn a_server_granting_more_than_the_maximum_gets_the_maximum() {
        let slots = Slots::new();
        let e = slots.bound(u32::MAX, false);
        let mut held = Vec::new();
        for _ in 0..MAX_SLOTS {
            held.push(slots.acquire(e).await.unwrap());
        }
        let more = tokio::time::timeout(Duration::from_millis(50), slots.acquire(e)).await;
        assert!(more.is_err());
    }
}
