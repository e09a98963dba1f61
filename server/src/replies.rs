//! The reply cache that makes changes exactly-once across reconnects (SESSION and SEQUENCE:
//! see `protocol::sequence` and docs/PROTOCOL.md, "Sessions").
//!
//! A client names itself with a random 32-byte id on each connection (SESSION); the server
//! keeps one [`Record`] per id with a reply per slot. A change sent again after its connection
//! broke (same slot, same sequence number) is answered from the slot, or JUKEBOX while the
//! first attempt still runs, and never done twice.
//!
//! Records outlive their connection by a grace period (the attribute lease: a client that
//! comes back within it finds its replies), then go. Bounds: a connection binds one record;
//! records are at most [`ClientRecords::new`]'s `max`; one record holds at most
//! `protocol::sequence::MAX_SLOTS` replies, each the reply to one change (a few hundred
//! bytes). When the table is full a new client evicts the record unbound longest, or, if
//! every record has a connection, is refused (JUKEBOX) and works without the cache.
//!
//! Restarts: with a [`Journal`] the slots outlive sfsd itself (within one boot of the
//! machine): a client coming back after a restart finds its record, and a change the restart
//! cut off gets the reply it was given, or runs again if it may ([`runs_again_after_restart`]).
//!
//! Locks: the table is one `Mutex` taken for a lookup per SESSION; a record's slots have their
//! own, taken twice per change (begin, complete) by the connection's color, and the journal's
//! file one more, taken after the slot's is let go (a rewrite holds it while it takes the
//! table's and each record's). Nothing here runs file operations; the journal's entry is one
//! `write(2)` into the page cache.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use protocol::sequence::{CLIENT_ID_LEN, MAX_SLOTS, Ticket, next_seq};
use protocol::{NfsStatus, ReplyBody, RequestOp};

use crate::leases::ConnId;

mod journal;

pub(crate) use journal::Journal;

/// An opened journal and the records it held ([`Journal::open`]).
pub(crate) type Opened = (Journal, HashMap<ClientId, LoadedRecord>);
use journal::{EntryEnd, LoadedRecord, RecordTag, SlotEnd, SlotEntry};

/// A client's secret id.
pub(crate) type ClientId = [u8; CLIENT_ID_LEN];

/// What one slot holds.
#[derive(Debug, Default)]
enum SlotState {
    /// Nothing to answer with: never used, or the last request was not done (JUKEBOX), so it
    /// may be sent again and done.
    #[default]
    Empty,
    /// Being done now.
    Running,
    /// Done; its reply.
    Done(Box<Result<ReplyBody, NfsStatus>>),
    /// Begun before sfsd restarted, and not known to have ended: sent again it is answered
    /// `IO` (it may or may not have been done).
    Unknown,
}

/// A slot never used is `Slot::default()`: number 0, empty.
#[derive(Debug, Default)]
struct Slot {
    /// The sequence number of the slot's last request (0: none yet).
    seq: u32,
    /// The server uid it ran as: the cached reply goes to no one else.
    uid: u32,
    /// The request may run again after a restart ([`runs_again_after_restart`]): the journal
    /// keeps its number, not its reply.
    runs_again: bool,
    state: SlotState,
}

impl Slot {
    /// The slot as the journal has it, if it was ever used.
    fn entry(&self, slot: u32) -> Option<SlotEntry<'_>> {
        let end = match &self.state {
            _ if self.seq == 0 => return None,
            _ if self.runs_again => EntryEnd::BeganRunsAgain,
            SlotState::Empty => EntryEnd::NotDone,
            SlotState::Running | SlotState::Unknown => EntryEnd::Began,
            SlotState::Done(reply) => EntryEnd::Done(reply),
        };
        Some(SlotEntry {
            slot,
            seq: self.seq,
            uid: self.uid,
            end,
        })
    }
}

/// Whether a change may simply be done again when sent again after sfsd restarted, so that
/// its journal entry need not keep its reply: an idempotent one (WRITE; a SETATTR without size
/// or guard), and LOCK and UNLOCK, since the restart ended every lock (done again, they take
/// or give up the lock in the new table, which is what their sender wants).
pub(crate) fn runs_again_after_restart(op: &RequestOp) -> bool {
    op.is_idempotent() || matches!(op, RequestOp::Lock(_) | RequestOp::Unlock(_))
}

#[derive(Debug)]
struct RecordState {
    /// Slots granted.
    granted: u32,
    /// The slots used so far (made on first use: a client uses the lowest free slot, so an
    /// idle or quiet connection's record holds few or none).
    slots: Vec<Slot>,
    /// The connection using the record now.
    bound: Option<ConnId>,
    /// When its last connection closed (None while bound).
    unbound_since: Option<Instant>,
}

/// One client's reply cache.
pub(crate) struct Record {
    /// A number for the client, never reused while the server runs (so locks and other
    /// state can be held by the client rather than by one of its connections).
    pub key: u64,
    /// The client's id, this record of it and its slots (the journal's entries name them).
    tag: RecordTag,
    state: Mutex<RecordState>,
    journal: Option<Arc<JournalLink>>,
}

impl std::fmt::Debug for Record {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the id: it is the client's secret.
        f.debug_struct("Record")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// The journal, and the table it rewrites itself from.
struct JournalLink {
    journal: Journal,
    table: Weak<Mutex<RecordTable>>,
}

impl JournalLink {
    fn append(&self, tag: &RecordTag, entry: &SlotEntry<'_>) {
        if self.journal.append(tag, entry)
            && let Some(table) = self.table.upgrade()
        {
            self.journal.rewrite(|write| {
                for record in table.lock().by_id.values() {
                    let st = record.state.lock();
                    for (i, slot) in st.slots.iter().enumerate() {
                        if let Some(entry) = slot.entry(i as u32) {
                            write(&record.tag, &entry);
                        }
                    }
                }
            });
        }
    }
}

/// What to do with a sequenced request.
#[derive(Debug, PartialEq, Eq)]
// Short-lived (matched at once by the caller): boxing the answer would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Begin {
    /// Do it, then [`Record::complete`] the ticket with its result.
    Run,
    /// Answer this without doing anything.
    Answer(Result<ReplyBody, NfsStatus>),
}

impl Record {
    /// A request through `ticket`, running as server uid `uid`, arrives; `runs_again` is
    /// [`runs_again_after_restart`] of it.
    pub(crate) fn begin(&self, ticket: Ticket, uid: u32, runs_again: bool) -> Begin {
        let begin = self.begin_in_memory(ticket, uid, runs_again);
        if begin == Begin::Run {
            let end = if runs_again {
                EntryEnd::BeganRunsAgain
            } else {
                EntryEnd::Began
            };
            self.journal(ticket, uid, end);
        }
        begin
    }

    /// Writes to the journal, if there is one, that the change through `ticket` run as `uid`
    /// reached `end`.
    fn journal(&self, ticket: Ticket, uid: u32, end: EntryEnd<'_>) {
        if let Some(link) = &self.journal {
            let entry = SlotEntry {
                slot: ticket.slot,
                seq: ticket.seq,
                uid,
                end,
            };
            link.append(&self.tag, &entry);
        }
    }

    fn begin_in_memory(&self, ticket: Ticket, uid: u32, runs_again: bool) -> Begin {
        let mut st = self.state.lock();
        if ticket.slot >= st.granted {
            return Begin::Answer(Err(NfsStatus::BadSlot));
        }
        let i = ticket.slot as usize;
        if st.slots.len() <= i {
            st.slots.resize_with(i + 1, Slot::default);
        }
        let s = &mut st.slots[i];
        if ticket.seq == next_seq(s.seq) {
            // A new request: the slot's last reply has arrived and may go. A slot whose last
            // request is still being done is not reused before it ends.
            if matches!(s.state, SlotState::Running) {
                return Begin::Answer(Err(NfsStatus::Jukebox));
            }
            *s = Slot {
                seq: ticket.seq,
                uid,
                runs_again,
                state: SlotState::Running,
            };
            return Begin::Run;
        }
        if ticket.seq != s.seq || s.seq == 0 || s.uid != uid {
            return Begin::Answer(Err(NfsStatus::SeqMisordered));
        }
        // The same request again.
        match &s.state {
            SlotState::Running => Begin::Answer(Err(NfsStatus::Jukebox)),
            SlotState::Done(reply) => Begin::Answer(replayed(reply)),
            SlotState::Unknown => Begin::Answer(Err(NfsStatus::Io)),
            SlotState::Empty => {
                s.state = SlotState::Running;
                s.runs_again = runs_again;
                Begin::Run
            }
        }
    }

    /// The request through `ticket` ended with `result`. A JUKEBOX means it was not done: the
    /// slot is left empty, so the same request sent again is done then.
    pub(crate) fn complete(&self, ticket: Ticket, result: &Result<ReplyBody, NfsStatus>) {
        let mut st = self.state.lock();
        let Some(s) = st.slots.get_mut(ticket.slot as usize) else {
            return;
        };
        if s.seq != ticket.seq || !matches!(s.state, SlotState::Running) {
            return;
        }
        let done = !matches!(result, Err(NfsStatus::Jukebox));
        s.state = if done {
            SlotState::Done(Box::new(result.clone()))
        } else {
            SlotState::Empty
        };
        let (uid, runs_again) = (s.uid, s.runs_again);
        drop(st);
        // Journalled before the reply goes (the caller sends it after this returns).
        if !runs_again {
            let end = if done {
                EntryEnd::Done(result)
            } else {
                EntryEnd::NotDone
            };
            self.journal(ticket, uid, end);
        }
    }

    /// Slots the record has.
    #[cfg(test)]
    pub(crate) fn slots(&self) -> u32 {
        self.state.lock().granted
    }
}

/// A cached reply as sent again: its attributes keep no lease (the grant was for the first
/// answer's moment, and the lease table may no longer hold it).
fn replayed(reply: &Result<ReplyBody, NfsStatus>) -> Result<ReplyBody, NfsStatus> {
    let mut reply = reply.clone();
    if let Ok(body) = &mut reply {
        for a in body.attrs_mut() {
            a.lease_ms = 0;
        }
    }
    reply
}

/// Every client's record.
pub(crate) struct ClientRecords {
    inner: Arc<Mutex<RecordTable>>,
    grace: Duration,
    max: usize,
    journal: Option<Arc<JournalLink>>,
}

/// The records by client id, behind the table's one mutex.
struct RecordTable {
    by_id: HashMap<ClientId, Arc<Record>>,
    next_key: u64,
}

/// A connection bound to a record.
#[derive(Debug)]
pub(crate) struct Bound {
    pub record: Arc<Record>,
    /// Slots granted.
    pub slots: u32,
    /// The record existed (its replies from earlier connections are there).
    pub resumed: bool,
}

impl ClientRecords {
    /// A table of at most `max` records, each kept `grace` after its last connection closed.
    pub(crate) fn new(max: usize, grace: Duration) -> ClientRecords {
        ClientRecords {
            inner: Arc::new(Mutex::new(RecordTable {
                by_id: HashMap::new(),
                next_key: 1,
            })),
            grace,
            max: max.max(1),
            journal: None,
        }
    }

    /// As [`ClientRecords::new`], with the slots kept in `journal` too if there is one, and
    /// the records it held back in the table: unbound since now, so each client has the grace
    /// period to come back for its replies.
    pub(crate) fn start(max: usize, grace: Duration, journal: Option<Opened>) -> ClientRecords {
        match journal {
            Some((journal, loaded)) => {
                Self::with_journal(max, grace, journal, loaded, Instant::now())
            }
            None => Self::new(max, grace),
        }
    }

    fn with_journal(
        max: usize,
        grace: Duration,
        journal: Journal,
        loaded: HashMap<ClientId, LoadedRecord>,
        now: Instant,
    ) -> ClientRecords {
        let mut records = ClientRecords::new(max, grace);
        let link = Arc::new(JournalLink {
            journal,
            table: Arc::downgrade(&records.inner),
        });
        let mut table = records.inner.lock();
        for (id, loaded) in loaded.into_iter().take(records.max) {
            let mut slots: Vec<Slot> = Vec::new();
            for (i, (seq, uid, end)) in loaded.slots {
                let i = i as usize;
                if slots.len() <= i {
                    slots.resize_with(i + 1, Slot::default);
                }
                let (runs_again, state) = match end {
                    SlotEnd::RunsAgain => (true, SlotState::Empty),
                    SlotEnd::Unknown => (false, SlotState::Unknown),
                    SlotEnd::Done(reply) => (false, SlotState::Done(reply)),
                };
                slots[i] = Slot {
                    seq,
                    uid,
                    runs_again,
                    state,
                };
            }
            let key = table.next_key;
            table.next_key += 1;
            let record = Record {
                key,
                tag: RecordTag {
                    id,
                    incarnation: loaded.incarnation,
                    granted: loaded.granted,
                },
                state: Mutex::new(RecordState {
                    granted: loaded.granted,
                    slots,
                    bound: None,
                    unbound_since: Some(now),
                }),
                journal: Some(link.clone()),
            };
            table.by_id.insert(id, Arc::new(record));
        }
        drop(table);
        records.journal = Some(link);
        records
    }

    /// Connection `conn` (SESSION) names client `id` and wants `slots` slots: binds it to the
    /// client's record, made if there is none (or it expired). A record still bound to
    /// another connection moves to this one: its client has given that one up.
    pub(crate) fn bind(
        &self,
        id: &ClientId,
        slots: u32,
        conn: ConnId,
        now: Instant,
    ) -> Result<Bound, NfsStatus> {
        let mut inner = self.inner.lock();
        self.reap(&mut inner, now);
        if let Some(record) = inner.by_id.get(id) {
            let mut st = record.state.lock();
            st.bound = Some(conn);
            st.unbound_since = None;
            let slots = st.granted;
            drop(st);
            return Ok(Bound {
                record: record.clone(),
                slots,
                resumed: true,
            });
        }
        if inner.by_id.len() >= self.max && !Self::evict_oldest_unbound(&mut inner) {
            return Err(NfsStatus::Jukebox);
        }
        let slots = slots.clamp(1, MAX_SLOTS);
        let key = inner.next_key;
        inner.next_key += 1;
        let record = Arc::new(Record {
            key,
            tag: RecordTag {
                id: *id,
                incarnation: rand::random(),
                granted: slots,
            },
            state: Mutex::new(RecordState {
                granted: slots,
                slots: Vec::new(),
                bound: Some(conn),
                unbound_since: None,
            }),
            journal: self.journal.clone(),
        });
        inner.by_id.insert(*id, record.clone());
        Ok(Bound {
            record,
            slots,
            resumed: false,
        })
    }

    /// Connection `conn`, bound to `record`, closed: the record's grace period starts (unless
    /// another connection has taken it over). Whether it did (the client has no connection).
    pub(crate) fn unbind(&self, record: &Record, conn: ConnId, now: Instant) -> bool {
        let mut st = record.state.lock();
        if st.bound == Some(conn) {
            st.bound = None;
            st.unbound_since = Some(now);
            return true;
        }
        false
    }

    /// Records in the table.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().by_id.len()
    }

    /// Drops records unbound for longer than the grace period.
    fn reap(&self, inner: &mut RecordTable, now: Instant) {
        let grace = self.grace;
        inner.by_id.retain(|_, r| {
            let st = r.state.lock();
            st.unbound_since
                .is_none_or(|since| now.saturating_duration_since(since) < grace)
        });
    }

    /// Drops the record unbound longest; false if every record is bound.
    fn evict_oldest_unbound(inner: &mut RecordTable) -> bool {
        let oldest = inner
            .by_id
            .iter()
            .filter_map(|(id, r)| r.state.lock().unbound_since.map(|t| (t, *id)))
            .min();
        match oldest {
            Some((_, id)) => inner.by_id.remove(&id).is_some(),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use protocol::Attr;

    use super::journal::tests::private_dir;
    use super::*;

    const GRACE: Duration = Duration::from_secs(60);

    fn t(slot: u32, seq: u32) -> Ticket {
        Ticket { slot, seq }
    }

    fn removed() -> Result<ReplyBody, NfsStatus> {
        Ok(ReplyBody::Remove { dir_attr: None })
    }

    fn bound(records: &ClientRecords, id: u8, conn: ConnId) -> Bound {
        records.bind(&[id; 32], 8, conn, Instant::now()).unwrap()
    }

    #[test]
    fn a_request_sent_again_is_answered_from_the_slot_and_not_done_twice() {
        let records = ClientRecords::new(4, GRACE);
        let r = bound(&records, 1, 1).record;
        assert_eq!(r.begin(t(0, 1), 1000, false), Begin::Run);
        // Sent again while the first attempt runs: try later.
        assert_eq!(
            r.begin(t(0, 1), 1000, false),
            Begin::Answer(Err(NfsStatus::Jukebox))
        );
        r.complete(t(0, 1), &removed());
        // Sent again after: the first answer, however often.
        for _ in 0..3 {
            assert_eq!(r.begin(t(0, 1), 1000, false), Begin::Answer(removed()));
        }
        // An error is an answer too: a REMOVE that failed is not tried again.
        assert_eq!(r.begin(t(0, 2), 1000, false), Begin::Run);
        r.complete(t(0, 2), &Err(NfsStatus::NoEnt));
        assert_eq!(
            r.begin(t(0, 2), 1000, false),
            Begin::Answer(Err(NfsStatus::NoEnt))
        );
        // Slots are independent.
        assert_eq!(r.begin(t(7, 1), 1000, false), Begin::Run);
    }

    #[test]
    fn a_request_the_server_did_not_do_is_done_when_sent_again() {
        let records = ClientRecords::new(4, GRACE);
        let r = bound(&records, 1, 1).record;
        assert_eq!(r.begin(t(3, 1), 7, false), Begin::Run);
        r.complete(t(3, 1), &Err(NfsStatus::Jukebox));
        assert_eq!(r.begin(t(3, 1), 7, false), Begin::Run);
        r.complete(t(3, 1), &removed());
        assert_eq!(r.begin(t(3, 1), 7, false), Begin::Answer(removed()));
    }

    #[test]
    fn numbers_out_of_order_other_users_and_unknown_slots_are_refused() {
        let records = ClientRecords::new(4, GRACE);
        let r = bound(&records, 1, 1).record;
        let misordered = Begin::Answer(Err(NfsStatus::SeqMisordered));
        // Nothing sent yet: only 1 is next; 0 is never a request.
        assert_eq!(r.begin(t(0, 0), 1, false), misordered);
        assert_eq!(r.begin(t(0, 2), 1, false), misordered);
        assert_eq!(
            r.begin(t(8, 1), 1, false),
            Begin::Answer(Err(NfsStatus::BadSlot))
        );
        assert_eq!(r.begin(t(0, 1), 1, false), Begin::Run);
        r.complete(t(0, 1), &removed());
        // A skipped number, an old one, and another user asking for the cached reply.
        assert_eq!(r.begin(t(0, 3), 1, false), misordered);
        assert_eq!(r.begin(t(0, 1), 2, false), misordered);
        // A new request while the slot's last still runs waits.
        assert_eq!(r.begin(t(0, 2), 1, false), Begin::Run);
        assert_eq!(
            r.begin(t(0, 3), 1, false),
            Begin::Answer(Err(NfsStatus::Jukebox))
        );
        // A completion for a request the slot no longer holds changes nothing.
        r.complete(t(0, 1), &Err(NfsStatus::Io));
        r.complete(t(0, 2), &removed());
        assert_eq!(r.begin(t(0, 2), 1, false), Begin::Answer(removed()));
    }

    #[test]
    fn replayed_attributes_carry_no_lease() {
        let records = ClientRecords::new(4, GRACE);
        let r = bound(&records, 1, 1).record;
        let attr = Attr::test_file(1, 30_000);
        let reply = Ok(ReplyBody::SetAttr { attr: Some(attr) });
        assert_eq!(r.begin(t(0, 1), 1, false), Begin::Run);
        r.complete(t(0, 1), &reply);
        let Begin::Answer(Ok(ReplyBody::SetAttr { attr: Some(a) })) = r.begin(t(0, 1), 1, false)
        else {
            panic!("no cached answer");
        };
        assert_eq!(a.lease_ms, 0);
    }

    #[test]
    fn a_client_finds_its_record_again_within_the_grace_period_only() {
        let records = ClientRecords::new(4, GRACE);
        let first = bound(&records, 1, 1);
        assert!(!first.resumed);
        assert_eq!(first.slots, 8);
        first.record.begin(t(0, 1), 1, false);
        first.record.complete(t(0, 1), &removed());
        let now = Instant::now();
        records.unbind(&first.record, 1, now);
        let again = records.bind(&[1; 32], 8, 2, now + GRACE / 2).unwrap();
        assert!(again.resumed);
        assert_eq!(again.record.key, first.record.key);
        assert_eq!(
            again.record.begin(t(0, 1), 1, false),
            Begin::Answer(removed())
        );
        // The old connection closing late does not start the grace of the new one.
        records.unbind(&again.record, 1, now + GRACE / 2);
        let still = records.bind(&[1; 32], 8, 3, now + GRACE * 3).unwrap();
        assert!(still.resumed);
        // Past the grace period it is a new client.
        records.unbind(&still.record, 3, now + GRACE * 3);
        let gone = records.bind(&[1; 32], 8, 4, now + GRACE * 5).unwrap();
        assert!(!gone.resumed);
        assert_ne!(gone.record.key, first.record.key);
        assert_eq!(
            gone.record.begin(t(0, 1), 1, false),
            Begin::Run,
            "a new record remembers nothing"
        );
    }

    #[test]
    fn the_table_is_bounded_and_evicts_the_longest_unbound_record_first() {
        let records = ClientRecords::new(3, GRACE);
        let now = Instant::now();
        let a = records.bind(&[1; 32], 1, 1, now).unwrap();
        let b = records.bind(&[2; 32], 1, 2, now).unwrap();
        let c = records.bind(&[3; 32], 1, 3, now).unwrap();
        // Every record has a connection: a fourth client is refused (it works without).
        assert_eq!(
            records.bind(&[4; 32], 1, 4, now).unwrap_err(),
            NfsStatus::Jukebox
        );
        records.unbind(&b.record, 2, now);
        records.unbind(&a.record, 1, now + Duration::from_secs(1));
        let d = records
            .bind(&[4; 32], 1, 4, now + Duration::from_secs(2))
            .unwrap();
        assert!(!d.resumed);
        assert_eq!(records.len(), 3);
        // b (unbound longest) went; a and c stayed.
        assert!(records.bind(&[1; 32], 1, 5, now).unwrap().resumed);
        assert!(records.bind(&[3; 32], 1, 6, now).unwrap().resumed);
        assert_eq!(c.record.slots(), 1);
        // All three bound again, and b not among them: it is refused, not resumed.
        assert_eq!(
            records.bind(&[2; 32], 1, 7, now).unwrap_err(),
            NfsStatus::Jukebox
        );
    }

    #[test]
    fn a_record_holds_only_the_slots_used() {
        let records = ClientRecords::new(4, GRACE);
        let r = bound(&records, 1, 1).record;
        assert!(r.state.lock().slots.is_empty());
        assert_eq!(r.begin(t(2, 1), 1, false), Begin::Run);
        assert_eq!(r.state.lock().slots.len(), 3);
        // Unused slots below it are fresh: their first number is 1.
        assert_eq!(r.begin(t(0, 1), 1, false), Begin::Run);
        assert_eq!(r.state.lock().slots.len(), 3);
    }

    /// A table journalled in `dir`, as a start of sfsd listening on port 4711 makes it.
    fn journalled(dir: &std::path::Path) -> ClientRecords {
        let opened = Journal::open(dir, "127.0.0.1:4711".parse().unwrap(), 8, GRACE)
            .unwrap()
            .expect("this machine has a boot id");
        ClientRecords::start(8, GRACE, Some(opened))
    }

    #[test]
    fn after_a_restart_a_change_gets_its_reply_runs_again_or_is_unknown() {
        let dir = private_dir();
        let records = journalled(dir.path());
        let r = bound(&records, 1, 1).record;
        // A REMOVE done, a CREATE still running when sfsd dies, a WRITE answered, a REMOVE
        // answered JUKEBOX (not done).
        assert_eq!(r.begin(t(0, 1), 1000, false), Begin::Run);
        r.complete(t(0, 1), &removed());
        assert_eq!(r.begin(t(1, 1), 1000, false), Begin::Run);
        assert_eq!(r.begin(t(2, 1), 1000, true), Begin::Run);
        r.complete(t(2, 1), &Ok(ReplyBody::Null));
        assert_eq!(r.begin(t(3, 1), 1000, false), Begin::Run);
        r.complete(t(3, 1), &Err(NfsStatus::Jukebox));
        drop((r, records));

        let records = journalled(dir.path());
        let again = records.bind(&[1; 32], 8, 2, Instant::now()).unwrap();
        assert!(again.resumed, "the record came back from the journal");
        assert_eq!(again.slots, 8);
        let r = again.record;
        assert_eq!(r.begin(t(0, 1), 1000, false), Begin::Answer(removed()));
        assert_eq!(
            r.begin(t(0, 1), 1001, false),
            Begin::Answer(Err(NfsStatus::SeqMisordered))
        );
        assert_eq!(
            r.begin(t(1, 1), 1000, false),
            Begin::Answer(Err(NfsStatus::Io))
        );
        assert_eq!(
            r.begin(t(2, 1), 1000, true),
            Begin::Run,
            "a WRITE runs again"
        );
        assert_eq!(
            r.begin(t(3, 1), 1000, false),
            Begin::Run,
            "not done: it runs now"
        );
        // The numbers went on from where they were.
        assert_eq!(r.begin(t(0, 2), 1000, false), Begin::Run);
        assert_eq!(
            r.begin(t(4, 2), 1000, false),
            Begin::Answer(Err(NfsStatus::SeqMisordered))
        );
        // Another client's id finds nothing.
        assert!(
            !records
                .bind(&[2; 32], 8, 3, Instant::now())
                .unwrap()
                .resumed
        );
    }

    #[test]
    fn the_journal_is_rewritten_as_it_grows_and_keeps_each_slots_last_change() {
        let dir = private_dir();
        let path = dir.path().join("replies-127.0.0.1-4711");
        let records = journalled(dir.path());
        let r = bound(&records, 1, 1).record;
        // Slots the rewrites must carry over as they are: a change still running, one that may
        // run again, one not done (JUKEBOX).
        assert_eq!(r.begin(t(2, 1), 7, false), Begin::Run);
        assert_eq!(r.begin(t(3, 1), 7, true), Begin::Run);
        assert_eq!(r.begin(t(4, 1), 7, false), Begin::Run);
        r.complete(t(4, 1), &Err(NfsStatus::Jukebox));
        let mut largest = 0;
        let mut seq = 0;
        // Well past the first rewrite's size (about 130 bytes a change).
        for _ in 0..40_000 {
            seq = next_seq(seq);
            for slot in 0..2 {
                assert_eq!(r.begin(t(slot, seq), 7, false), Begin::Run);
                r.complete(t(slot, seq), &Err(NfsStatus::Exist));
            }
            largest = largest.max(std::fs::metadata(&path).unwrap().len());
        }
        assert!(
            largest < 2 * journal::FIRST_REWRITE,
            "rewritten: at most {largest} bytes"
        );
        drop((r, records));
        let records = journalled(dir.path());
        let r = records.bind(&[1; 32], 8, 2, Instant::now()).unwrap().record;
        for slot in 0..2 {
            assert_eq!(
                r.begin(t(slot, seq), 7, false),
                Begin::Answer(Err(NfsStatus::Exist))
            );
        }
        assert_eq!(
            r.begin(t(2, 1), 7, false),
            Begin::Answer(Err(NfsStatus::Io))
        );
        assert_eq!(r.begin(t(3, 1), 7, true), Begin::Run);
        assert_eq!(r.begin(t(4, 1), 7, false), Begin::Run);
        let end = records.journal.as_ref().unwrap().journal.entries_end();
        assert!(end < 1024, "one entry per slot: {end} bytes");
    }

    #[test]
    fn slots_are_granted_within_bounds() {
        let records = ClientRecords::new(4, GRACE);
        let now = Instant::now();
        assert_eq!(records.bind(&[1; 32], 0, 1, now).unwrap().slots, 1);
        assert_eq!(
            records.bind(&[2; 32], u32::MAX, 2, now).unwrap().slots,
            MAX_SLOTS
        );
    }
}
