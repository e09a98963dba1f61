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
//!   file: it goes to the server once the file's writes before it are answered, later writes
//!   wait for it, and later SETATTRs answered early while it has not gone yet join it (one
//!   SETATTR for `tar`'s `utimensat`, `fchown` and `fchmod` of a file).
//!
//! Bounds: [`BUDGET`] bytes under way in the whole mount (a writer past it waits, as for a
//! full socket). Appends and the kernel's write-back of shared mappings are not written
//! behind (the former need the server's answer, the latter come from the kernel's own cache).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use fuser::Errno;
use parking_lot::Mutex;
use protocol::SetAttr;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// Bytes of written-behind data under way at once, over the whole mount.
pub(crate) const BUDGET: usize = 32 << 20;
/// The budget's unit: permits are counted in these.
const UNIT: usize = 4096;

/// One file's writes under way.
#[derive(Default)]
struct Under {
    /// Byte ranges under way, with the id of each.
    ranges: Vec<(u64, u64, u64)>,
    /// The first failure not yet reported.
    failed: Option<Errno>,
    /// Woken whenever one of them ends.
    ended: Arc<Notify>,
    /// The attribute change answered early and not yet sent, with the id of its range.
    queued: Option<(u64, SetAttr)>,
}

impl Under {
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
        loop {
            let ended = match self.register(ino, offset, end, &mut permit) {
                Ok(ticket) => return ticket,
                Err(ended) => ended,
            };
            // Registered before the lock is let go, so an end in between is not missed.
            let notified = ended.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
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

    /// [`WriteBehind::begin`] without waiting, on the kernel's thread: None if the write
    /// would have to wait (the budget is used up, or it overlaps a write under way). Answering
    /// a write there saves the hop to the runtime's thread and back, most of its cost.
    pub(crate) fn begin_now(
        self: &Arc<Self>,
        ino: u64,
        offset: u64,
        len: usize,
    ) -> Option<Result<Ticket, Errno>> {
        let permit = self
            .budget
            .clone()
            .try_acquire_many_owned(units(len))
            .ok()?;
        let end = offset.saturating_add(len as u64);
        self.register(ino, offset, end, &mut Some(permit)).ok()
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
        let under = files.entry(ino).or_default();
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
    pub(crate) fn queue_attrs(self: &Arc<Self>, ino: u64, s: SetAttr) -> Option<Option<Ticket>> {
        let mut files = self.files.lock();
        let under = files.entry(ino).or_default();
        if under.failed.is_some() {
            return None;
        }
        if let Some((_, queued)) = &mut under.queued {
            *queued = super::attrs_behind::merge(*queued, s);
            return Some(None);
        }
        let permit = self.budget.clone().try_acquire_many_owned(1).ok()?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        under.ranges.push((0, u64::MAX, id));
        under.queued = Some((id, s));
        Some(Some(Ticket {
            behind: self.clone(),
            ino,
            id,
            _permit: permit,
            ended: false,
        }))
    }

    /// The change queued under `ticket` (with whatever joined it), which stops taking more.
    pub(crate) fn take_queued(&self, ticket: &Ticket) -> Option<SetAttr> {
        let mut files = self.files.lock();
        let under = files.get_mut(&ticket.ino)?;
        match under.queued {
            Some((id, s)) if id == ticket.id => {
                under.queued = None;
                Some(s)
            }
            _ => None,
        }
    }

    /// Waits until every write and change of the ticket's file registered before it ended.
    pub(crate) async fn settle_before(&self, ticket: &Ticket) {
        self.wait_while(ticket.ino, |u| {
            u.ranges.iter().any(|&(_, _, i)| i < ticket.id)
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
            let Some(ended_now) = ended() else {
                return;
            };
            let notified = ended_now.notified();
            tokio::pin!(notified);
            // Registered before looking again, so an end in between is not missed.
            notified.as_mut().enable();
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

    /// Whether `ino` has a failure to report (so `close` must look).
    pub(crate) fn failed(&self, ino: u64) -> bool {
        self.files
            .lock()
            .get(&ino)
            .is_some_and(|u| u.failed.is_some())
    }

    fn end(&self, ino: u64, id: u64, result: Result<(), Errno>) {
        let mut files = self.files.lock();
        let Some(under) = files.get_mut(&ino) else {
            return;
        };
        under.ranges.retain(|&(_, _, i)| i != id);
        if under.queued.is_some_and(|(q, _)| q == id) {
            // Ended before it was sent: nothing more may join it.
            under.queued = None;
        }
        if let Err(e) = result {
            under.failed.get_or_insert(e);
        }
        under.ended.notify_waiters();
        if under.idle() && under.failed.is_none() {
            files.remove(&ino);
        }
    }
}

impl Ticket {
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
