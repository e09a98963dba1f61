//! Operations on a file's data: READ, WRITE (UNSTABLE), the COMMIT of `fsync(2)` and the
//! FLUSH of `close(2)`, which report writes the server may have lost (its write verifier
//! changed), and READLINK.

use fuser::{Errno, INodeNo};
use protocol::StableHow;

use super::ServerMount;
use super::convert::errno;
use crate::session::{Client, Sent};

/// Unstable writes not yet committed, per node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dirty {
    /// All writes so far came back with this verifier.
    Verifier([u8; 8]),
    /// Two writes came back with different verifiers: the server restarted in between and
    /// may have lost the earlier one.
    Changed,
}

impl ServerMount {
    pub(super) async fn read(
        &self,
        c: &Client,
        ino: INodeNo,
        offset: u64,
        size: u32,
    ) -> Result<Vec<u8>, Errno> {
        let fh = self.fh(ino)?;
        self.behind.settle(ino.0).await;
        self.files_ahead.settle(&fh).await;
        if let Some(early) = self.read_from_open(ino.0, offset, size) {
            return Ok(early);
        }
        let (rmax, _) = c.io_sizes().await.map_err(errno)?;
        let mut out = Vec::with_capacity(size.min(rmax.max(1) * 4) as usize);
        loop {
            let done = out.len() as u32;
            if done >= size {
                break;
            }
            let want = (size - done).min(rmax.max(1));
            let (data, eof) = c
                .read(&fh, offset + u64::from(done), want)
                .await
                .map_err(errno)?;
            let empty = data.is_empty();
            out.extend_from_slice(&data);
            if eof || empty {
                break;
            }
        }
        Ok(out)
    }

    pub(super) async fn write(
        &self,
        c: &Client,
        ino: INodeNo,
        offset: u64,
        data: &[u8],
    ) -> Result<u32, Errno> {
        self.write_sent(c, ino, offset, data, &mut |_| {}).await
    }

    /// [`ServerMount::write`], telling `on_last_sent` where each attempt of the WRITE that
    /// carries the data's end went (the pieces before it were answered by then).
    pub(super) async fn write_sent(
        &self,
        c: &Client,
        ino: INodeNo,
        offset: u64,
        data: &[u8],
        on_last_sent: &mut (dyn FnMut(Sent) + Send),
    ) -> Result<u32, Errno> {
        let fh = self.fh(ino)?;
        let (_, wmax) = c.io_sizes().await.map_err(errno)?;
        let wmax = wmax.max(1) as usize;
        let mut pos = 0usize;
        while pos < data.len() {
            let end = (pos + wmax).min(data.len());
            let (at, piece) = (offset + pos as u64, &data[pos..end]);
            let unstable = StableHow::Unstable;
            let (n, verf) = if end == data.len() {
                c.write_sent(&fh, at, unstable, piece, on_last_sent).await
            } else {
                c.write(&fh, at, unstable, piece).await
            }
            .map_err(errno)?;
            self.note_write(ino.0, verf);
            if n == 0 {
                return Err(Errno::EIO);
            }
            pos += n as usize;
        }
        Ok(data.len() as u32)
    }

    pub(super) fn note_write(&self, ino: u64, verf: [u8; 8]) {
        let mut t = self.table();
        let d = t.dirty.entry(ino).or_insert(Dirty::Verifier(verf));
        if *d != Dirty::Verifier(verf) {
            *d = Dirty::Changed;
        }
    }

    /// `fsync(2)`: COMMITs the file, i.e. has the server `fsync` it; `EIO` when the server
    /// may have lost some of its unstable writes (the verifier changed since they were
    /// answered, or a loss is pending: see [`Table::lost`], which this clears).
    ///
    /// [`Table::lost`]: super::Table::lost
    pub(super) async fn commit(&self, c: &Client, ino: INodeNo) -> Result<(), Errno> {
        self.behind.settle_and_report(ino.0).await?;
        let (dirty, lost) = {
            let mut t = self.table();
            (t.dirty.remove(&ino.0), t.lost.remove(&ino.0))
        };
        // Until the server answers, what was taken out goes back if this ends early (an
        // error, or the caller killed and this dropped): the next flush or fsync reports it.
        let mut taken = Uncommitted {
            sh: self,
            ino: ino.0,
            dirty,
            lost,
            armed: true,
        };
        let fh = self.fh(ino)?;
        let committed = c.commit(&fh).await.map_err(errno)?;
        taken.armed = false;
        tracing::debug!(ino = ino.0, ?dirty, ?committed, lost, "commit");
        let lost_now = match dirty {
            Some(Dirty::Verifier(v)) => v != committed,
            Some(Dirty::Changed) => true,
            None => false,
        };
        if lost_now {
            tracing::warn!(
                ino = ino.0,
                "the server restarted before data written to this file was committed; \
                 some writes may be lost (reporting EIO)"
            );
            return Err(Errno::EIO);
        }
        taken.armed = false;
        if lost { Err(Errno::EIO) } else { Ok(()) }
    }

    /// `close(2)` (FLUSH): answered without a request. Every WRITE of the file was answered
    /// before the kernel sends FLUSH, and the server answers a WRITE once the data is in its
    /// kernel (its page cache), where it survives a crash or restart of sfsd and where every
    /// other client's next open reads it (close-to-open consistency). What only a COMMIT
    /// adds, the server's `fsync`, protects against a crash of the server machine, and
    /// costs a disk flush per file (3.5 ms of a 5 ms file created by `tar x`, measured):
    /// `fsync(2)` still sends it. `EIO` when the writes came back with two verifiers (the
    /// server restarted in between and may have lost the earlier ones), or a loss is pending
    /// (see [`Table::lost`]); the writes' verifier stays recorded until an `fsync` compares
    /// it with the server's.
    ///
    /// [`Table::lost`]: super::Table::lost
    pub(super) fn flushed(&self, ino: INodeNo) -> Result<(), Errno> {
        let mut t = self.table();
        if t.dirty.get(&ino.0) == Some(&Dirty::Changed) {
            t.dirty.remove(&ino.0);
            t.lost.insert(ino.0);
            tracing::warn!(
                ino = ino.0,
                "the server's write verifier changed while this file was being written (its \
                 machine or storage restarted); some writes may be lost (reporting EIO)"
            );
        }
        if t.lost.contains(&ino.0) {
            Err(Errno::EIO)
        } else {
            Ok(())
        }
    }

    pub(super) async fn readlink(&self, c: &Client, ino: INodeNo) -> Result<Vec<u8>, Errno> {
        let fh = self.fh(ino)?;
        c.readlink(&fh).await.map_err(errno)
    }
}

/// Unstable writes a COMMIT under way took out of the table, put back if it does not finish.
struct Uncommitted<'a> {
    sh: &'a ServerMount,
    ino: u64,
    dirty: Option<Dirty>,
    lost: bool,
    armed: bool,
}

impl Drop for Uncommitted<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut t = self.sh.table();
        if let Some(d) = self.dirty {
            let merged = match t.dirty.get(&self.ino) {
                Some(now) if *now != d => Dirty::Changed,
                _ => d,
            };
            t.dirty.insert(self.ino, merged);
        }
        if self.lost {
            t.lost.insert(self.ino);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuse::tests::shared;

    #[test]
    fn a_commit_that_does_not_finish_keeps_its_writes_uncommitted() {
        let sh = shared();
        sh.note_write(5, [1; 8]);
        sh.table().lost.insert(5);
        let taken = sh.table().dirty.remove(&5);
        drop(Uncommitted {
            sh: &sh,
            ino: 5,
            dirty: taken,
            lost: true,
            armed: true,
        });
        assert_eq!(sh.table().dirty[&5], Dirty::Verifier([1; 8]));
        assert!(sh.table().lost.contains(&5));
        // Written again meanwhile with another verifier: the server restarted in between.
        sh.table().dirty.insert(6, Dirty::Verifier([2; 8]));
        drop(Uncommitted {
            sh: &sh,
            ino: 6,
            dirty: Some(Dirty::Verifier([1; 8])),
            lost: false,
            armed: true,
        });
        assert_eq!(sh.table().dirty[&6], Dirty::Changed);
    }

    #[test]
    fn verifier_changes_are_lost_writes() {
        let sh = shared();
        sh.note_write(5, [1; 8]);
        sh.note_write(5, [1; 8]);
        assert_eq!(sh.table().dirty[&5], Dirty::Verifier([1; 8]));
        sh.note_write(5, [2; 8]);
        assert_eq!(sh.table().dirty[&5], Dirty::Changed);
    }
}
