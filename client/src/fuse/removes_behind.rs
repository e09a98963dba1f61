//! Removing behind: an `unlink` the server cannot refuse for any reason the mount could see
//! is answered at once, and its REMOVE goes to the server behind it; whatever could observe
//! the directory waits for it.
//!
//! `rm -r` removes a directory's files one `unlink` at a time, each waiting for a round trip
//! to the server, which is most of its time. Here an unlink is answered before the server's
//! answer when all of these hold:
//!
//! - the server said, in an ACCESS answer whose lease still runs, that this user may write
//!   and search the directory, and the directory is not sticky
//!   ([`crate::cache`]'s `removable_dirs`; the first unlink in a directory asks, beside its
//!   own REMOVE, and goes the usual way);
//! - the name is one the kernel was told of, for a node whose cached attributes (under their
//!   lease) say it is not a directory and has one link, which no program has open through
//!   this mount and which has no write under way: once its name goes, nothing can reach it;
//! - fewer than [`MAX_UNDER_WAY`] removals are under way in the whole mount.
//!
//! The REMOVE is sent before the kernel hears the answer (its first poll runs here, which
//! also marks the directory changed in the attribute cache, so no kept listing of it is
//! handed out again). What could see the directory as it was waits until the directory's
//! removals under way are answered: LOOKUP in it, every request that adds, removes or
//! renames a name in it, a listing of it (also one read ahead), its GETATTR and SETATTR, a
//! change of its extended attributes, and RMDIR of it. Removals in one directory do not wait
//! for each other (they name different entries). Unmounting waits for them all.
//!
//! What a server could still refuse is what no client can see coming: its disk failing, an
//! immutable flag, the directory's mode changed on the server's own disk behind sfsd's back,
//! or the name replaced meanwhile by a directory. Then the file stays, and its name shows
//! again (the refusal is logged, the directory's caches are dropped); `fsync` of the
//! directory reports the error (once); an `rmdir` of the directory fails with `ENOTEMPTY`.
//! A removal the server answers "no such file" is a success: someone removed it first. If
//! the mount process dies with removals under way, their files stay: removing behind never
//! loses data, at worst it leaves a file a program was told is gone.

use std::collections::HashMap;
use std::sync::Arc;

use fuser::{Errno, INodeNo};
use parking_lot::Mutex;
use protocol::{FileHandle, FileType, NfsStatus};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::ServerMount;
use super::convert::errno;
use super::kept_listings::Edit;
use crate::session::{Client, SessionError};

/// Removals under way at once in the whole mount; past it, an unlink waits for the server.
pub(super) const MAX_UNDER_WAY: usize = 256;

/// One directory's removals under way.
#[derive(Default)]
struct Dir {
    under_way: usize,
    /// The first refusal not yet reported by an `fsync` of the directory.
    failed: Option<Errno>,
}

/// The removals under way in one mount, by directory.
pub(super) struct RemovesBehind {
    dirs: Mutex<HashMap<FileHandle, Dir>>,
    /// Woken whenever a removal ends.
    ended: Notify,
    slots: Arc<Semaphore>,
}

impl Default for RemovesBehind {
    fn default() -> RemovesBehind {
        RemovesBehind {
            dirs: Mutex::default(),
            ended: Notify::new(),
            slots: Arc::new(Semaphore::new(MAX_UNDER_WAY)),
        }
    }
}

/// A removal registered as under way in `dir`; ended by [`Removal::end`], or as a failure if
/// dropped first.
pub(super) struct Removal {
    behind: Arc<RemovesBehind>,
    dir: FileHandle,
    _slot: OwnedSemaphorePermit,
    ended: bool,
}

impl Removal {
    pub(super) fn end(mut self, result: Result<(), Errno>) {
        self.ended = true;
        self.behind.end(&self.dir, result);
    }
}

impl Drop for Removal {
    fn drop(&mut self) {
        if !self.ended {
            self.behind.end(&self.dir, Err(Errno::EIO));
        }
    }
}

impl RemovesBehind {
    /// Registers a removal in `dir`, if a slot is free.
    pub(super) fn begin(self: &Arc<Self>, dir: FileHandle) -> Option<Removal> {
        let slot = self.slots.clone().try_acquire_owned().ok()?;
        self.dirs.lock().entry(dir).or_default().under_way += 1;
        Some(Removal {
            behind: self.clone(),
            dir,
            _slot: slot,
            ended: false,
        })
    }

    fn end(&self, dir: &FileHandle, result: Result<(), Errno>) {
        let mut dirs = self.dirs.lock();
        if let Some(d) = dirs.get_mut(dir) {
            d.under_way = d.under_way.saturating_sub(1);
            if let Err(e) = result {
                d.failed.get_or_insert(e);
            }
            if d.under_way == 0 && d.failed.is_none() {
                dirs.remove(dir);
            }
        }
        drop(dirs);
        self.ended.notify_waiters();
    }

    /// Whether `dir` has removals under way.
    pub(super) fn busy(&self, dir: &FileHandle) -> bool {
        self.dirs.lock().get(dir).is_some_and(|d| d.under_way > 0)
    }

    /// Whether `dir` has a refusal not yet reported.
    pub(super) fn failed(&self, dir: &FileHandle) -> bool {
        self.dirs
            .lock()
            .get(dir)
            .is_some_and(|d| d.failed.is_some())
    }

    /// Waits until `done` holds of the removals under way.
    async fn wait_until(&self, done: impl Fn(&HashMap<FileHandle, Dir>) -> bool) {
        loop {
            let notified = self.ended.notified();
            tokio::pin!(notified);
            // Registered before looking, so an end in between is not missed.
            notified.as_mut().enable();
            if done(&self.dirs.lock()) {
                return;
            }
            notified.await;
        }
    }

    /// Waits until `dir` has no removal under way (those begun meanwhile included).
    pub(super) async fn settle(&self, dir: &FileHandle) {
        self.wait_until(|dirs| dirs.get(dir).is_none_or(|d| d.under_way == 0))
            .await;
    }

    /// Waits until no removal is under way anywhere.
    pub(super) async fn settle_all(&self) {
        self.wait_until(|dirs| dirs.values().all(|d| d.under_way == 0))
            .await;
    }

    /// [`RemovesBehind::settle`], then the first refusal in `dir` not yet reported
    /// (forgotten once reported), for `fsync` of the directory.
    pub(super) async fn settle_and_report(&self, dir: &FileHandle) -> Result<(), Errno> {
        self.settle(dir).await;
        let mut dirs = self.dirs.lock();
        let failed = dirs.get_mut(dir).and_then(|d| d.failed.take());
        if dirs.get(dir).is_some_and(|d| d.under_way == 0) {
            dirs.remove(dir);
        }
        failed.map_or(Ok(()), Err)
    }
}

impl ServerMount {
    /// Waits until node `ino`, if a directory, has no removal under way.
    pub(super) async fn settle_removes(&self, ino: INodeNo) {
        if let Ok(dir) = self.fh(ino) {
            self.removes.settle(&dir).await;
        }
    }

    /// Answers the unlink of `name` in `parent` now, if the server cannot refuse it for a
    /// reason the mount could see (see the module's doc): then its REMOVE is on its way and
    /// `true` is returned; `false` if it must go the usual way.
    pub(super) fn remove_early(&self, c: &Client, parent: INodeNo, name: &[u8]) -> bool {
        let Ok(dir) = self.fh(parent) else {
            return false;
        };
        if !c.removable_now(&dir).0 {
            return false;
        }
        let Some((ino, fh)) = self.named(parent, name) else {
            return false;
        };
        {
            let t = self.table();
            if t.open.contains_key(&ino) || t.hidden.contains_key(&ino) {
                return false;
            }
        }
        if self.behind.busy(ino) {
            return false;
        }
        match c.cache().get(&fh) {
            Some(a) if a.ftype != FileType::Directory && a.nlink == 1 => {}
            _ => return false,
        }
        let Some(removal) = self.removes.begin(dir) else {
            return false;
        };
        let (c, owned, kept) = (c.clone(), name.to_vec(), self.kept.clone());
        let work = async move {
            let result = match c.remove(&dir, &owned, false).await {
                Ok(settled) => {
                    super::names::edited(&kept, &dir, settled, Edit::Unnamed(&owned));
                    Ok(())
                }
                Err(SessionError::Nfs(NfsStatus::NoEnt)) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = &result {
                tracing::warn!(
                    name = %String::from_utf8_lossy(&owned).escape_debug(),
                    error = %e,
                    "a file removed behind was refused by the server: it stays"
                );
                // Its name shows again: nothing kept may say it is gone (the kernel asks
                // again for a name it was told was unlinked).
                c.cache().invalidate(&dir);
            }
            removal.end(result.map_err(errno));
        };
        // Polled here first: the REMOVE is sent, and the directory marked changed in the
        // attribute cache, before the kernel hears the answer.
        crate::first_poll::spawn_here(&tokio::runtime::Handle::current(), work);
        self.forget_name(parent, name);
        true
    }

    /// After a REMOVE answered the usual way in `dir`: asks, if not known, whether this user
    /// may remove entries there, so the directory's next unlinks may be answered early.
    pub(super) async fn learn_removable(&self, c: &Client, dir: &FileHandle) {
        if c.removable_now(dir).1 {
            return;
        }
        if let Err(e) = c.ask_removable(dir).await {
            tracing::debug!(error = %e, "asking whether entries may be removed failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const D: FileHandle = FileHandle::from_bytes([4; 48]);
    const E: FileHandle = FileHandle::from_bytes([5; 48]);

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    }

    #[test]
    fn a_directory_settles_when_its_own_removals_end() {
        rt().block_on(async {
            let rb = Arc::new(RemovesBehind::default());
            let a = rb.begin(D).unwrap();
            let b = rb.begin(D).unwrap();
            let other = rb.begin(E).unwrap();
            assert!(rb.busy(&D) && rb.busy(&E));
            let settled = {
                let rb = rb.clone();
                tokio::spawn(async move { rb.settle(&D).await })
            };
            a.end(Ok(()));
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(
                !settled.is_finished(),
                "one of D's removals is still under way"
            );
            b.end(Ok(()));
            tokio::time::timeout(Duration::from_secs(5), settled)
                .await
                .expect("D settles with E's removal still under way")
                .unwrap();
            assert!(!rb.busy(&D) && rb.busy(&E));
            let all = {
                let rb = rb.clone();
                tokio::spawn(async move { rb.settle_all().await })
            };
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(!all.is_finished());
            other.end(Ok(()));
            tokio::time::timeout(Duration::from_secs(5), all)
                .await
                .unwrap()
                .unwrap();
        });
    }

    #[test]
    fn a_refusal_is_reported_once_by_the_directorys_fsync() {
        rt().block_on(async {
            let rb = Arc::new(RemovesBehind::default());
            rb.begin(D).unwrap().end(Err(Errno::EPERM));
            rb.begin(D).unwrap().end(Ok(()));
            assert!(!rb.busy(&D));
            assert_eq!(rb.settle_and_report(&E).await, Ok(()));
            assert_eq!(rb.settle_and_report(&D).await, Err(Errno::EPERM));
            assert_eq!(rb.settle_and_report(&D).await, Ok(()), "reported once");
            // A removal dropped without an answer (its task gone) counts as refused.
            drop(rb.begin(D).unwrap());
            assert_eq!(rb.settle_and_report(&D).await, Err(Errno::EIO));
        });
    }

    #[test]
    fn removals_under_way_are_bounded() {
        let rb = Arc::new(RemovesBehind::default());
        let held: Vec<Removal> = (0..MAX_UNDER_WAY).map(|_| rb.begin(D).unwrap()).collect();
        assert!(
            rb.begin(E).is_none(),
            "past the bound an unlink waits for the server"
        );
        drop(held);
        assert!(rb.begin(E).is_some());
    }
}
