//! Writing behind: a WRITE is answered to the kernel once it is on its way to the server, and
//! whatever depends on it waits for it.
//!
//! The kernel sends each `write(2)` as its own WRITE and the writer waits for the answer, so a
//! program writing a file in pieces (`tar` writes 10 KiB records) paid a round trip to the
//! server per piece. Here a piece is answered as soon as it is registered (its bytes copied,
//! its share of the memory budget taken), and the WRITE goes to the server in the background,
//! beside the next ones. What the program can observe waits for the file's writes under way:
//!
//! - `close` (FLUSH) and `fsync` wait for them and report the first one that failed (as NFS
//!   clients do: a failed background write is an error of the next `write`, `close` or
//!   `fsync` of the file); close-to-open therefore holds as before: when `close` returns,
//!   every byte written is on the server.
//! - GETATTR, SETATTR (a `utimensat` or `chmod` after the last write must not be overtaken
//!   by it: the server would move the mtime again, or clear a setuid bit), READ, OPEN,
//!   LOOKUP and listings of the file, lock requests and extended-attribute changes (a WRITE
//!   clears `security.capability`) wait for them, so none sees the file as it was before a
//!   write that returned.
//! - A write overlapping one under way waits for it, so the server cannot apply them out of
//!   order; writes of disjoint ranges may land in any order, which leaves the same bytes.
//!
//! - A SETATTR answered early ([`super::attrs_behind`]) is under way too, over the whole
//!   file: it goes to the server once the file's writes before it are answered, or, where the
//!   server applies a SETATTR only after the WRITEs of its file before it on the connection
//!   (protocol version 13 and up), once they have gone out ([`WriteBehind::gone_out_before`];
//!   where each went is kept for the check [`WriteBehind::take_watch`] serves). Later writes
//!   wait for it, and later SETATTRs answered early while it has not gone yet join it (one
//!   SETATTR for `tar`'s `utimensat`, `fchown` and `fchmod` of a file).
//!
//! - **Small writes are gathered** ([`WriteBehind::write_now`]). A write answered on the
//!   kernel's thread is held, not sent, and the next write of the same open file by the same
//!   caller that continues it joins it (up to [`GATHER_MAX`] bytes): `tar` writes a file in
//!   10 KiB records, each a WRITE to the server before, each costing the server a trip to a
//!   storage thread. A held write is sent by whatever comes next for its file: another write
//!   that does not continue it, an attribute change, anything that waits for the file's writes
//!   (`close`, `fsync`, GETATTR, READ, ...), and at the latest [`GATHER_FOR`] after it was
//!   held ([`WriteBehind::start_sweep`]), so a file left open reaches the server as soon as
//!   before, give or take that.
//!
//! Bounds: [`BUDGET`] bytes under way in the whole mount (a writer past it waits, as for a
//! full socket). Appends and the kernel's write-back of shared mappings are not written
//! behind (the former need the server's answer, the latter come from the kernel's own cache).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fuser::Errno;
use parking_lot::Mutex;
use protocol::SetAttr;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::session::{Sent, SentSoFar};

/// Bytes of written-behind data under way at once, over the whole mount.
pub(crate) const BUDGET: usize = 32 << 20;
/// The budget's unit: permits are counted in these.
const UNIT: usize = 4096;

/// Most bytes gathered into one held write.
pub(crate) const GATHER_MAX: usize = 256 * 1024;

/// Longest a write is held before it is sent anyway.
pub(crate) const GATHER_FOR: Duration = Duration::from_millis(10);

/// Sends a held write: its offset, its bytes and the budget its joined writes took (the
/// first's is in its ticket). Called once.
pub(crate) type SendHeld = Box<dyn FnOnce(u64, Vec<u8>, Vec<OwnedSemaphorePermit>) + Send>;

/// A write answered and registered but not sent yet ([module docs](self)).
struct Held {
    /// Its range's id.
    id: u64,
    offset: u64,
    data: Vec<u8>,
    /// Who may join it: the open file (FUSE file handle) and the caller's uid.
    owner: (u64, u32),
    since: Instant,
    permits: Vec<OwnedSemaphorePermit>,
    send: SendHeld,
}

impl Held {
    fn send(self) {
        (self.send)(self.offset, self.data, self.permits);
    }
}

/// One file's writes under way.
#[derive(Default)]
struct Under {
    /// Byte ranges under way, with the id of each.
    ranges: Vec<(u64, u64, u64)>,
    /// The first failure not yet reported.
    failed: Option<Errno>,
    /// Woken whenever one of them ends.
    ended: Arc<Notify>,
    /// The attribute change answered early and not yet sent.
    queued: Option<Queued>,
    /// The write held to gather the next ones (its range is in `ranges`).
    held: Option<Held>,
    /// Where the last piece of each write under way last went out, by range id
    /// ([`WriteBehind::went`]).
    went: HashMap<u64, Sent>,
    /// The SETATTR sent behind writes still under way (its range id), and where the answered
    /// attempts of those writes went, folded as each ends ([`WriteBehind::take_watch`]).
    watch: Option<(u64, SentSoFar)>,
}

/// An attribute change answered early and not yet sent ([`Under::queued`]).
struct Queued {
    /// The id of its range.
    id: u64,
    /// The change, with those that joined it.
    change: SetAttr,
    /// When it was answered.
    since: Instant,
    /// Something waits for it: then it goes as soon as the writes before it allow. To a server
    /// that orders it behind them it would otherwise go out before the next change could join
    /// it ([`WriteBehind::gone_out_before`]).
    wanted: bool,
}

impl Under {
    /// The queued change, if any, is waited for from now on.
    fn want_queued(&mut self) {
        if let Some(q) = &mut self.queued
            && !q.wanted
        {
            q.wanted = true;
            self.ended.notify_waiters();
        }
    }

    /// A change is queued that nothing waits for yet.
    fn queued_unwanted(&self) -> bool {
        self.queued.as_ref().is_some_and(|q| !q.wanted)
    }

    /// Nothing under way (a queued change has a range until it ends).
    fn idle(&self) -> bool {
        self.ranges.is_empty() && self.queued.is_none()
    }

    fn overlaps(&self, offset: u64, end: u64) -> bool {
        self.ranges.iter().any(|&(s, e, _)| s < end && offset < e)
    }
}

/// The writes under way in one mount, by inode.
pub(crate) struct WriteBehind {
    files: Mutex<HashMap<u64, Under>>,
    budget: Arc<Semaphore>,
    next_id: AtomicU64,
    /// Sends writes held too long ([`WriteBehind::start_sweep`]).
    held_sweep: Arc<crate::sweep::Sweep>,
    /// Files a write of which failed since they were last asked about: the kernel's pages
    /// of them hold bytes the server does not ([`WriteBehind::take_failed_since`]).
    failed_since: Mutex<HashSet<u64>>,
}

/// The budget's permits a write of `len` bytes takes.
fn units(len: usize) -> u32 {
    len.div_ceil(UNIT).clamp(1, BUDGET / UNIT) as u32
}

impl Default for WriteBehind {
    fn default() -> WriteBehind {
        WriteBehind {
            files: Mutex::new(HashMap::new()),
            budget: Arc::new(Semaphore::new(BUDGET / UNIT)),
            next_id: AtomicU64::new(0),
            held_sweep: Arc::default(),
            failed_since: Mutex::default(),
        }
    }
}

/// A write registered as under way; ended (and its range freed) by [`Ticket::end`], or as a
/// failure if dropped first.
pub(crate) struct Ticket {
    behind: Arc<WriteBehind>,
    ino: u64,
    id: u64,
    _permit: OwnedSemaphorePermit,
    ended: bool,
}

impl WriteBehind {
    /// Registers a write of `len` bytes at `offset` of `ino`: waits for any write under way
    /// that overlaps it and for room in the budget. A failure of an earlier write of the file
    /// not yet reported is reported instead (and forgotten).
    pub(crate) async fn begin(
        self: &Arc<Self>,
        ino: u64,
        offset: u64,
        len: usize,
    ) -> Result<Ticket, Errno> {
        let permit = self
            .budget
            .clone()
            .acquire_many_owned(units(len))
            .await
            .map_err(|_| Errno::EIO)?;
        let end = offset.saturating_add(len as u64);
        let mut permit = Some(permit);
        // A change answered early covers the whole file: this write waits for it.
        self.want_queued(ino);
        loop {
            // A write held to gather more goes now: this one does not continue it.
            self.send_held(ino);
            let ended = match self.register(ino, offset, end, &mut permit) {
                Ok(ticket) => return ticket,
                Err(ended) => ended,
            };
            // Registered before the lock is let go, so an end in between is not missed.
            let notified = ended.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            self.send_held(ino);
            let still = self
                .files
                .lock()
                .get(&ino)
                .is_some_and(|u| u.overlaps(offset, end));
            if !still {
                continue;
            }
            notified.await;
        }
    }

    /// Registers `offset..end` of `ino` with `permit` (taken from it) unless it overlaps a
    /// write under way (then `Err` with what tells of their ends) or a failure is to be
    /// reported.
    fn register(
        self: &Arc<Self>,
        ino: u64,
        offset: u64,
        end: u64,
        permit: &mut Option<OwnedSemaphorePermit>,
    ) -> Result<Result<Ticket, Errno>, Arc<Notify>> {
        let mut files = self.files.lock();
        self.register_in(files.entry(ino).or_default(), ino, offset, end, permit)
    }

    /// [`WriteBehind::register`] with the file's entry at hand (its lock held).
    fn register_in(
        self: &Arc<Self>,
        under: &mut Under,
        ino: u64,
        offset: u64,
        end: u64,
        permit: &mut Option<OwnedSemaphorePermit>,
    ) -> Result<Result<Ticket, Errno>, Arc<Notify>> {
        if let Some(e) = under.failed.take() {
            return Ok(Err(e));
        }
        if under.overlaps(offset, end) {
            return Err(under.ended.clone());
        }
        let Some(permit) = permit.take() else {
            return Ok(Err(Errno::EIO));
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        under.ranges.push((offset, end, id));
        Ok(Ok(Ticket {
            behind: self.clone(),
            ino,
            id,
            _permit: permit,
            ended: false,
        }))
    }

    /// Registers an attribute change `s` of `ino` answered early, over the whole file: Some
    /// ticket when it is to be sent ([`WriteBehind::take_queued`] after
    /// [`WriteBehind::settle_before`] its id); Some(None) when it joined a change not yet sent;
    /// None when it cannot be under way (a failure is to be reported, or the budget is used
    /// up): then it is sent as usual.
    ///
    /// A write held to gather more must be sent first ([`WriteBehind::send_held`], by the
    /// caller, holding no lock the WRITE takes): with one held, None.
    pub(crate) fn queue_attrs(self: &Arc<Self>, ino: u64, s: SetAttr) -> Option<Option<Ticket>> {
        let mut files = self.files.lock();
        let under = files.entry(ino).or_default();
        if under.failed.is_some() || under.held.is_some() {
            return None;
        }
        if let Some(q) = &mut under.queued {
            q.change = super::attrs_behind::merge(q.change, s);
            return Some(None);
        }
        let permit = self.budget.clone().try_acquire_many_owned(1).ok()?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        under.ranges.push((0, u64::MAX, id));
        under.queued = Some(Queued {
            id,
            change: s,
            since: Instant::now(),
            wanted: false,
        });
        drop(files);
        self.held_sweep.added();
        Some(Some(Ticket {
            behind: self.clone(),
            ino,
            id,
            _permit: permit,
            ended: false,
        }))
    }

    /// Something waits for `ino`'s change answered early, if one is queued: it goes as soon
    /// as the writes before it allow.
    fn want_queued(&self, ino: u64) {
        if let Some(u) = self.files.lock().get_mut(&ino) {
            u.want_queued();
        }
    }

    /// The change queued under `ticket` (with whatever joined it), which stops taking more.
    /// From here on, where the writes before it that are still under way went is folded for
    /// [`WriteBehind::take_watch`].
    pub(crate) fn take_queued(&self, ticket: &Ticket) -> Option<SetAttr> {
        let mut files = self.files.lock();
        let under = files.get_mut(&ticket.ino)?;
        if under.queued.as_ref().is_none_or(|q| q.id != ticket.id) {
            return None;
        }
        let q = under.queued.take()?;
        under.watch = Some((q.id, SentSoFar::default()));
        Some(q.change)
    }

    /// Where the answered attempts of the writes that were still under way when the change
    /// under `ticket` was taken ([`WriteBehind::take_queued`]) went, once
    /// [`WriteBehind::settle_before`] it: the change counts as applied after them only if it
    /// went out behind every one, on their connection. None if the change was not taken.
    pub(crate) fn take_watch(&self, ticket: &Ticket) -> Option<SentSoFar> {
        let mut files = self.files.lock();
        let under = files.get_mut(&ticket.ino)?;
        match under.watch.take() {
            Some((id, so_far)) if id == ticket.id => Some(so_far),
            other => {
                under.watch = other;
                None
            }
        }
    }

    /// The last piece of the write under `ticket`'s range `id` of `ino` went out at `at` (sent
    /// again after a reconnect, it is told again).
    pub(crate) fn went(&self, ino: u64, id: u64, at: Sent) {
        let mut files = self.files.lock();
        if let Some(u) = files.get_mut(&ino)
            && u.ranges.iter().any(|&(_, _, i)| i == id)
        {
            u.went.insert(id, at);
            u.ended.notify_waiters();
        }
    }

    /// Waits until every write and change of the ticket's file registered before it ended.
    pub(crate) async fn settle_before(&self, ticket: &Ticket) {
        self.wait_while(ticket.ino, |u| {
            u.ranges.iter().any(|&(_, _, i)| i < ticket.id)
        })
        .await;
    }

    /// Waits until every write of the ticket's file registered before it has gone out (its
    /// last piece sent at least once: [`WriteBehind::went`]) or ended, every change before
    /// it ended (changes are not ordered among themselves by the server), and the change is
    /// wanted: something waits for the file (`close`, `stat`, a later write, ...), or it was
    /// answered [`GATHER_FOR`] ago ([`WriteBehind::start_sweep`]). Until then the changes
    /// that follow join it: `tar`'s three of a file go as one SETATTR.
    pub(crate) async fn gone_out_before(&self, ticket: &Ticket) {
        self.wait_while(ticket.ino, |u| {
            let unwanted = u
                .queued
                .as_ref()
                .is_some_and(|q| q.id == ticket.id && !q.wanted);
            unwanted
                || u.ranges
                    .iter()
                    .any(|&(_, _, i)| i < ticket.id && !u.went.contains_key(&i))
        })
        .await;
    }

    /// Waits until `ino` has nothing under way for which `pending` holds.
    async fn wait_while(&self, ino: u64, pending: impl Fn(&Under) -> bool) {
        let ended = || {
            self.files
                .lock()
                .get(&ino)
                .filter(|u| pending(u))
                .map(|u| u.ended.clone())
        };
        loop {
            // A write held to gather more is sent now: someone waits for it.
            self.send_held(ino);
            let Some(ended_now) = ended() else {
                return;
            };
            let notified = ended_now.notified();
            tokio::pin!(notified);
            // Registered before looking again, so an end (or a write held) in between is not
            // missed.
            notified.as_mut().enable();
            self.send_held(ino);
            if ended().is_none() {
                return;
            }
            notified.await;
        }
    }

    /// Whether `ino` has writes under way.
    pub(crate) fn busy(&self, ino: u64) -> bool {
        self.files
            .lock()
            .get(&ino)
            .is_some_and(|u| !u.ranges.is_empty())
    }

    /// Waits until `ino` has no write under way (those begun meanwhile included).
    pub(crate) async fn settle(&self, ino: u64) {
        self.want_queued(ino);
        self.wait_while(ino, |u| !u.ranges.is_empty()).await;
    }

    /// [`WriteBehind::settle`], then the first failure of the file's writes not yet reported
    /// (forgotten once reported), for `close` and `fsync`.
    pub(crate) async fn settle_and_report(&self, ino: u64) -> Result<(), Errno> {
        self.settle(ino).await;
        let mut files = self.files.lock();
        let failed = files.get_mut(&ino).and_then(|u| u.failed.take());
        if files.get(&ino).is_some_and(Under::idle) {
            files.remove(&ino);
        }
        failed.map_or(Ok(()), Err)
    }

    /// Whether a write of `ino` failed since the last time this was asked (reported or not).
    pub(crate) fn take_failed_since(&self, ino: u64) -> bool {
        self.failed_since.lock().remove(&ino)
    }

    /// Node `ino` is gone: nothing of it is kept (node ids are not used again).
    pub(crate) fn forget(&self, ino: u64) {
        self.failed_since.lock().remove(&ino);
    }

    /// Whether `ino` has a failure to report (so `close` must look).
    pub(crate) fn failed(&self, ino: u64) -> bool {
        self.files
            .lock()
            .get(&ino)
            .is_some_and(|u| u.failed.is_some())
    }

    /// A write of `data` at `offset` of `ino` by `owner` (open file, uid), answered at once on
    /// the kernel's thread: joined to the file's held write if it continues it, else
    /// registered and held itself (the file's held write, if any, is sent first; `send` makes
    /// what sends this one, given its ticket). None if it would have to wait (the budget is
    /// used up, or it overlaps a write under way): the caller registers it with
    /// [`WriteBehind::begin`]. A failure of an earlier write not yet reported is reported
    /// instead.
    pub(crate) fn write_now(
        self: &Arc<Self>,
        ino: u64,
        offset: u64,
        data: &[u8],
        owner: (u64, u32),
        send: impl FnOnce(Ticket) -> SendHeld,
    ) -> Option<Result<(), Errno>> {
        let permit = self
            .budget
            .clone()
            .try_acquire_many_owned(units(data.len()))
            .ok()?;
        let end = offset.saturating_add(data.len() as u64);
        {
            let mut files = self.files.lock();
            let under = files.entry(ino).or_default();
            let newest = under.ranges.last().map(|&(_, _, id)| id);
            if let Some(h) = &mut under.held
                && h.owner == owner
                && newest == Some(h.id)
                && h.offset + h.data.len() as u64 == offset
                && h.data.len() + data.len() <= GATHER_MAX
                && under.failed.is_none()
            {
                h.data.extend_from_slice(data);
                h.permits.push(permit);
                let id = h.id;
                if let Some(r) = under.ranges.iter_mut().find(|r| r.2 == id) {
                    r.1 = end;
                }
                return Some(Ok(()));
            }
        }
        self.send_held(ino);
        let mut files = self.files.lock();
        let under = files.entry(ino).or_default();
        let ticket = match self
            .register_in(under, ino, offset, end, &mut Some(permit))
            .ok()?
        {
            Ok(t) => t,
            Err(e) => return Some(Err(e)),
        };
        under.held = Some(Held {
            id: ticket.id,
            offset,
            data: data.to_vec(),
            owner,
            since: Instant::now(),
            permits: Vec::new(),
            send: send(ticket),
        });
        // Whoever waits for the file's writes looks again, and sends it.
        under.ended.notify_waiters();
        drop(files);
        self.held_sweep.added();
        Some(Ok(()))
    }

    /// Sends the held write of `ino`, if any. Sending polls its request on this thread
    /// ([`crate::first_poll`]), which takes the mount's table lock: never call this with it
    /// held.
    pub(crate) fn send_held(&self, ino: u64) {
        let held = self.files.lock().get_mut(&ino).and_then(|u| u.held.take());
        if let Some(h) = held {
            h.send();
        }
    }

    /// Starts, on `rt`, the sweep that sends every write held [`GATHER_FOR`] or longer, and
    /// lets every change answered that long ago go ([`WriteBehind::gone_out_before`]),
    /// ticking while any is held or waits; it ends with the mount's writes.
    pub(crate) fn start_sweep(self: &Arc<Self>, rt: &tokio::runtime::Handle) {
        let (behind, sweep) = (Arc::downgrade(self), self.held_sweep.clone());
        rt.spawn(async move {
            let tick = || {
                let wb = behind.upgrade()?;
                let now = Instant::now();
                let mut due: Vec<Held> = Vec::new();
                for u in wb.files.lock().values_mut() {
                    if u.queued
                        .as_ref()
                        .is_some_and(|q| now - q.since >= GATHER_FOR)
                    {
                        u.want_queued();
                    }
                    if u.held.as_ref().is_some_and(|h| now - h.since >= GATHER_FOR) {
                        due.extend(u.held.take());
                    }
                }
                for h in due {
                    h.send();
                }
                let waiting = |u: &Under| u.held.is_some() || u.queued_unwanted();
                let any = wb.files.lock().values().any(waiting);
                Some(any)
            };
            sweep.run(GATHER_FOR, 10, tick).await;
        });
    }

    fn end(&self, ino: u64, id: u64, result: Result<(), Errno>) {
        let mut files = self.files.lock();
        let Some(under) = files.get_mut(&ino) else {
            return;
        };
        under.ranges.retain(|&(_, _, i)| i != id);
        let went = under.went.remove(&id);
        match &mut under.watch {
            Some((w, so_far)) if id < *w => so_far.add(went),
            Some((w, _)) if id == *w => under.watch = None,
            _ => {}
        }
        if under.queued.as_ref().is_some_and(|q| q.id == id) {
            // Ended before it was sent: nothing more may join it.
            under.queued = None;
        }
        if let Err(e) = result {
            under.failed.get_or_insert(e);
            self.failed_since.lock().insert(ino);
        }
        under.ended.notify_waiters();
        if under.idle() && under.failed.is_none() {
            files.remove(&ino);
        }
    }
}

impl Drop for WriteBehind {
    /// Lets an idle sweep see that the writes are gone, and end.
    fn drop(&mut self) {
        self.held_sweep.added();
    }
}

impl Ticket {
    /// The last piece of this write went out at `at` ([`WriteBehind::went`]).
    pub(crate) fn went(&self, at: Sent) {
        self.behind.went(self.ino, self.id, at);
    }

    /// The write is answered: its range is free and a failure is kept for the file's next
    /// `write`, `close` or `fsync`.
    pub(crate) fn end(mut self, result: Result<(), Errno>) {
        self.ended = true;
        self.behind.end(self.ino, self.id, result);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.ended {
            // Dropped unanswered (the runtime shutting down): the bytes may not have arrived.
            self.behind.end(self.ino, self.id, Err(Errno::EIO));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn overlapping_writes_wait_disjoint_ones_do_not() {
        let wb = Arc::new(WriteBehind::default());
        let a = wb.begin(1, 0, 100).await.unwrap();
        // Disjoint: at once.
        let b = wb.begin(1, 100, 100).await.unwrap();
        // Another file: at once.
        let c = wb.begin(2, 0, 100).await.unwrap();
        // Overlapping `a`: waits until `a` ends.
        let wb2 = wb.clone();
        let overlapping = tokio::spawn(async move { wb2.begin(1, 50, 10).await.map(|_| ()) });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!overlapping.is_finished(), "an overlapping write waited");
        a.end(Ok(()));
        overlapping.await.unwrap().unwrap();
        b.end(Ok(()));
        c.end(Ok(()));
        assert!(!wb.busy(1) && !wb.busy(2));
    }

    #[tokio::test]
    async fn settling_waits_for_every_write_and_reports_the_first_failure_once() {
        let wb = Arc::new(WriteBehind::default());
        let a = wb.begin(1, 0, 10).await.unwrap();
        let b = wb.begin(1, 10, 10).await.unwrap();
        let wb2 = wb.clone();
        let closing = tokio::spawn(async move { wb2.settle_and_report(1).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!closing.is_finished());
        a.end(Err(Errno::ENOSPC));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!closing.is_finished(), "b is still under way");
        b.end(Err(Errno::EIO));
        assert_eq!(closing.await.unwrap(), Err(Errno::ENOSPC));
        assert_eq!(wb.settle_and_report(1).await, Ok(()), "reported once");
    }

    #[tokio::test]
    async fn a_failure_is_the_next_writes_error_and_a_dropped_ticket_fails() {
        let wb = Arc::new(WriteBehind::default());
        drop(wb.begin(1, 0, 10).await.unwrap());
        assert!(wb.failed(1));
        assert_eq!(wb.begin(1, 100, 10).await.err(), Some(Errno::EIO));
        assert!(wb.begin(1, 100, 10).await.is_ok(), "reported once");
        // Reported or not, the kernel's pages of it are told to be unlike the server's.
        assert!(wb.take_failed_since(1));
        assert!(!wb.take_failed_since(1), "told once");
        assert!(!wb.take_failed_since(2), "another file");
        drop(wb.begin(3, 0, 10).await.unwrap());
        wb.forget(3);
        assert!(!wb.take_failed_since(3), "forgotten with its node");
    }

    #[tokio::test]
    async fn an_attribute_change_goes_after_earlier_writes_and_before_later_ones() {
        let wb = Arc::new(WriteBehind::default());
        let write = wb.begin(1, 0, 10).await.unwrap();
        let mode = |m| SetAttr {
            mode: Some(m),
            ..SetAttr::default()
        };
        let change = wb.queue_attrs(1, mode(0o600)).unwrap().unwrap();
        // A second change before the first is sent joins it.
        assert!(wb.queue_attrs(1, mode(0o644)).unwrap().is_none());
        // It waits for the write before it...
        let wb2 = wb.clone();
        let sending = tokio::spawn(async move {
            wb2.settle_before(&change).await;
            let s = wb2.take_queued(&change);
            (change, s)
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !sending.is_finished(),
            "sent before the write before it ended"
        );
        // ...and a later write waits for it.
        let wb3 = wb.clone();
        let later = tokio::spawn(async move { wb3.begin(1, 100, 10).await.map(|_| ()) });
        write.end(Ok(()));
        let (change, s) = sending.await.unwrap();
        assert_eq!(s, Some(mode(0o644)), "the two as one");
        // Taken: a change from now on is a new one, after it.
        let next = wb.queue_attrs(1, mode(0o640)).unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!later.is_finished(), "a later write overtook the change");
        let wb4 = wb.clone();
        let closing = tokio::spawn(async move { wb4.settle_and_report(1).await });
        change.end(Err(Errno::EPERM));
        later.await.unwrap().unwrap_err();
        wb.settle_before(&next).await;
        assert_eq!(wb.take_queued(&next), Some(mode(0o640)));
        next.end(Ok(()));
        assert_eq!(
            closing.await.unwrap(),
            Ok(()),
            "reported to the write after it"
        );
        assert!(!wb.busy(1));
    }

    #[tokio::test]
    async fn an_ordered_change_goes_once_the_writes_before_it_went_out_and_it_is_wanted() {
        use protocol::handshake::has_ordered_setattr;
        let at = |seq| crate::session::Sent {
            conn: 7,
            seq,
            version: 13,
        };
        let mode = |m| SetAttr {
            mode: Some(m),
            ..SetAttr::default()
        };
        let wb = Arc::new(WriteBehind::default());
        let write = wb.begin(1, 0, 10).await.unwrap();
        let change = wb.queue_attrs(1, mode(0o600)).unwrap().unwrap();
        let wb2 = wb.clone();
        let sending = tokio::spawn(async move {
            wb2.gone_out_before(&change).await;
            let s = wb2.take_queued(&change);
            (change, s)
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!sending.is_finished(), "went before the write before it");
        write.went(at(1));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !sending.is_finished(),
            "went before anything waited for it: the next change cannot join"
        );
        assert!(wb.queue_attrs(1, mode(0o644)).unwrap().is_none());
        // Something waits for the file: it goes, the write still under way.
        let wb3 = wb.clone();
        let closing = tokio::spawn(async move { wb3.settle_and_report(1).await });
        let (change, s) = tokio::time::timeout(Duration::from_secs(5), sending)
            .await
            .expect("not sent although waited for")
            .unwrap();
        assert_eq!(s, Some(mode(0o644)), "the two as one");
        assert!(wb.busy(1));
        // The write is sent again after the change went out (at 2), and that is answered:
        // the change's check learns it.
        write.went(at(3));
        write.end(Ok(()));
        tokio::time::timeout(Duration::from_secs(5), wb.settle_before(&change))
            .await
            .expect("the write ended");
        let writes = wb.take_watch(&change).unwrap();
        assert!(!writes.covered_by(at(2), has_ordered_setattr));
        assert!(writes.covered_by(at(4), has_ordered_setattr));
        change.end(Ok(()));
        assert_eq!(closing.await.unwrap(), Ok(()));
        assert!(!wb.busy(1));
    }

    #[tokio::test]
    async fn a_change_nothing_waits_for_goes_after_a_while() {
        let wb = Arc::new(WriteBehind::default());
        wb.start_sweep(&tokio::runtime::Handle::current());
        let start = std::time::Instant::now();
        let change = wb.queue_attrs(3, SetAttr::default()).unwrap().unwrap();
        tokio::time::timeout(Duration::from_secs(2), wb.gone_out_before(&change))
            .await
            .expect("never let go");
        assert!(start.elapsed() >= GATHER_FOR, "let go before its time");
        assert!(wb.take_queued(&change).is_some());
        change.end(Ok(()));
        assert!(!wb.busy(3));
    }

    #[tokio::test]
    async fn a_change_ended_unsent_takes_nothing_more() {
        let wb = Arc::new(WriteBehind::default());
        let change = wb.queue_attrs(1, SetAttr::default()).unwrap().unwrap();
        drop(change);
        assert!(wb.failed(1));
        assert!(
            wb.queue_attrs(1, SetAttr::default()).is_none(),
            "a failure to report first"
        );
        assert_eq!(wb.settle_and_report(1).await, Err(Errno::EIO));
        assert!(wb.queue_attrs(1, SetAttr::default()).unwrap().is_some());
    }

    /// What [`WriteBehind::write_now`]'s held writes sent: (offset, bytes), in order.
    type Sent = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;

    fn sender(sent: &Sent) -> impl FnOnce(Ticket) -> SendHeld {
        let sent = sent.clone();
        move |ticket| {
            Box::new(move |offset, data, _permits| {
                sent.lock().push((offset, data));
                ticket.end(Ok(()));
            })
        }
    }

    #[tokio::test]
    async fn writes_continuing_a_held_one_join_it_until_something_waits() {
        let wb = Arc::new(WriteBehind::default());
        let sent = Sent::default();
        let me = (1, 1000);
        for i in 0..4u64 {
            let piece = vec![i as u8; 100];
            wb.write_now(7, i * 100, &piece, me, sender(&sent))
                .unwrap()
                .unwrap();
        }
        assert!(sent.lock().is_empty(), "held, not sent");
        assert!(wb.busy(7), "under way for whoever looks");
        wb.settle(7).await;
        let got = sent.lock().clone();
        assert_eq!(got.len(), 1, "one write for the four");
        assert_eq!(got[0].0, 0);
        assert_eq!(got[0].1.len(), 400);
        assert!(got[0].1[300..].iter().all(|b| *b == 3));
        assert!(!wb.busy(7));
    }

    #[tokio::test]
    async fn a_write_that_does_not_continue_the_held_one_sends_it() {
        let wb = Arc::new(WriteBehind::default());
        let sent = Sent::default();
        let me = (1, 1000);
        wb.write_now(7, 0, &[1; 10], me, sender(&sent))
            .unwrap()
            .unwrap();
        // A gap: sent, and the new one held.
        wb.write_now(7, 20, &[2; 10], me, sender(&sent))
            .unwrap()
            .unwrap();
        assert_eq!(sent.lock().len(), 1);
        // Another open file, or another user, continuing it: not joined.
        wb.write_now(7, 30, &[3; 10], (2, 1000), sender(&sent))
            .unwrap()
            .unwrap();
        wb.write_now(7, 40, &[4; 10], (2, 1001), sender(&sent))
            .unwrap()
            .unwrap();
        assert_eq!(sent.lock().len(), 3);
        // An attribute change is not queued while a write is held (it must go after the
        // writes); once that is sent, it is.
        assert!(wb.queue_attrs(7, SetAttr::default()).is_none());
        wb.send_held(7);
        assert_eq!(sent.lock().len(), 4);
        let change = wb.queue_attrs(7, SetAttr::default()).unwrap().unwrap();
        wb.settle_before(&change).await;
        change.end(Ok(()));
        // Too much to gather: sent, then held anew.
        wb.write_now(8, 0, &vec![0; GATHER_MAX], me, sender(&sent))
            .unwrap()
            .unwrap();
        wb.write_now(8, GATHER_MAX as u64, &[0; 1], me, sender(&sent))
            .unwrap()
            .unwrap();
        assert_eq!(sent.lock().len(), 5);
        wb.settle(8).await;
        let offsets: Vec<u64> = sent.lock().iter().map(|(o, _)| *o).collect();
        assert_eq!(offsets, [0, 20, 30, 40, 0, GATHER_MAX as u64]);
    }

    #[tokio::test]
    async fn a_held_write_is_sent_by_the_sweep_if_nothing_else_comes() {
        let wb = Arc::new(WriteBehind::default());
        wb.start_sweep(&tokio::runtime::Handle::current());
        let sent = Sent::default();
        wb.write_now(7, 0, &[1; 10], (1, 1000), sender(&sent))
            .unwrap()
            .unwrap();
        let start = std::time::Instant::now();
        while sent.lock().is_empty() {
            assert!(start.elapsed() < Duration::from_secs(2), "never sent");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert!(start.elapsed() >= GATHER_FOR, "sent before its time");
        assert!(!wb.busy(7));
    }

    #[tokio::test]
    async fn the_budget_bounds_the_bytes_under_way() {
        let wb = Arc::new(WriteBehind::default());
        let big = wb.begin(1, 0, BUDGET).await.unwrap();
        let wb2 = wb.clone();
        let next = tokio::spawn(async move { wb2.begin(2, 0, 1).await.map(|_| ()) });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!next.is_finished(), "no room until the first ends");
        big.end(Ok(()));
        next.await.unwrap().unwrap();
    }
}
