//! Writes to files opened `O_APPEND`: sent as APPEND, so the server puts the data at the end of
//! the file as it finds it.
//!
//! The kernel computes an append's offset from the size it has cached, which another client's
//! appends have made stale; sent as a WRITE there, two mounts appending to one file overwrite
//! each other's lines. So:
//!
//! - **Opening.** A file opened with `O_APPEND` is opened `FOPEN_DIRECT_IO`
//!   ([`open_flags`]): the kernel then passes its writes on without first copying them into
//!   its page cache at the offset it believes (this mount writes through, so without it the
//!   cache would keep our data at the wrong place).
//! - **Writing.** A write whose open flags carry `O_APPEND` becomes APPEND and the kernel's
//!   offset is ignored ([`is_append`]). Write-back of a shared mapping's pages
//!   (`FUSE_WRITE_CACHE`) stays a WRITE at its offset: those pages are where they are.
//! - **Afterwards.** The data may have gone elsewhere than the kernel thinks, so the node's
//!   attributes and cached pages (other open files of it keep pages) are invalidated, after the
//!   write is answered and from the invalidation thread: the kernel may hold the page lock
//!   while it waits for this write's reply, and a notification sent from here could wait for
//!   it for ever. The session's attribute cache already holds the reply's attributes.
//! - **Committing.** Appends go UNSTABLE and count as writes for COMMIT at close and fsync.
//! - **Older or limited servers.** `NotSupp` (sfsd answers it where it cannot append
//!   atomically, e.g. through the descriptor a CREATE kept for a file its owner may not write)
//!   falls back to a WRITE at the kernel's offset, as before APPEND existed.

use fuser::{Errno, INodeNo, OpenFlags, WriteFlags};
use protocol::{NfsStatus, StableHow};

use super::{ServerMount, errno};
use crate::session::{Client, SessionError};

/// The `FOPEN_*` flags an open (or create) with `flags` answers.
pub(super) fn open_flags(flags: i32) -> fuser::FopenFlags {
    if flags & libc::O_APPEND != 0 {
        fuser::FopenFlags::FOPEN_DIRECT_IO
    } else {
        fuser::FopenFlags::empty()
    }
}

/// Whether a write with these flags is a program's append (not the kernel writing back a
/// shared mapping's pages, which belong at their offset).
pub(super) fn is_append(write_flags: WriteFlags, flags: OpenFlags) -> bool {
    !write_flags.contains(WriteFlags::FUSE_WRITE_CACHE) && flags.0 & libc::O_APPEND != 0
}

impl ServerMount {
    /// All of `data` appended to `ino` (APPENDs of at most the negotiated size each: a larger
    /// write is appended in pieces, each atomic, as a local file system may split a large
    /// `write(2)` too). `offset` is the kernel's idea of the end, used only by the fallback.
    pub(super) async fn append(
        &self,
        c: &Client,
        ino: INodeNo,
        offset: u64,
        data: &[u8],
    ) -> Result<u32, Errno> {
        let fh = self.fh(ino)?;
        let (_, wmax) = c.io_sizes().await.map_err(errno)?;
        let wmax = wmax.max(1) as usize;
        let mut pos = 0usize;
        while pos < data.len() {
            let end = (pos + wmax).min(data.len());
            let n = match c.append(&fh, StableHow::Unstable, &data[pos..end]).await {
                Ok(done) => {
                    self.note_write(ino.0, done.verifier);
                    done.count
                }
                Err(SessionError::Nfs(NfsStatus::NotSupp)) if pos == 0 => {
                    tracing::debug!(ino = ino.0, "APPEND not supported here: WRITE at {offset}");
                    return self.write(c, ino, offset, data).await;
                }
                Err(e) => return Err(errno(e)),
            };
            if n == 0 {
                return Err(Errno::EIO);
            }
            pos += n as usize;
        }
        Ok(data.len() as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_are_the_programs_and_never_write_back() {
        let append = OpenFlags(libc::O_WRONLY | libc::O_APPEND);
        let plain = OpenFlags(libc::O_WRONLY);
        assert!(is_append(WriteFlags::empty(), append));
        assert!(!is_append(WriteFlags::empty(), plain));
        assert!(!is_append(WriteFlags::FUSE_WRITE_CACHE, append));
        assert_eq!(
            open_flags(libc::O_RDWR | libc::O_APPEND | libc::O_CREAT),
            fuser::FopenFlags::FOPEN_DIRECT_IO
        );
        assert_eq!(open_flags(libc::O_RDWR), fuser::FopenFlags::empty());
    }
}
