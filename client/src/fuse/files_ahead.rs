//! Small files' bytes read ahead along a listing.
//!
//! `grep -r`, `cp -r`, `tar c`, `diff -r` and `cat *` open the files of a directory one after
//! the other, in the order of its listing, and read each whole. Each file costs a round trip
//! (its bytes come with its open, [`super::read_at_open`]), during which the program and the
//! stream sit idle: 50 ms a file over a long link. When a user opens for reading a file that
//! comes after the one they opened before in a listing (the walk rule of
//! [`super::xattr_ahead`], which remembers the listings), or the first file in a directory
//! their walk of the tree stepped into ([`super::listing_ahead`]), the next [`AHEAD`] small
//! regular files of that listing (the ones before it, for a walk going backwards) are read
//! ahead, side by side on the one stream: each file's access for that user (so its open is
//! answered by the mount) and its bytes, kept with the bytes read at open, where the
//! program's next opens and READs find them.
//!
//! - **Only what the open would read.** A file whose pages the kernel keeps
//!   ([`super::kept_pages`]: read before, unchanged since) is not read again.
//! - **Never staler than a read at open.** The bytes serve under the same rule as those read
//!   with an open: unchanged since the READ was sent, as the attribute cache tells (a change
//!   through this mount, another client's INVALIDATE), no write of ours under way, 2 s at most.
//!   A file is read ahead only while its attributes are cached (under their lease), which is
//!   also where its size comes from.
//! - **As whom.** The ACCESS and the READ go as the user whose open started the read-ahead; the
//!   server decides both. The bytes serve a READ only of a file the kernel let a caller open for
//!   reading, which the server granted (its access answer for that caller), as for bytes read
//!   with an open.
//! - **No double reads.** An open, or a READ, of a file whose bytes are being read ahead waits
//!   for them.
//! - **Bounds.** At most [`AHEAD`] files per step and [`MAX_IN_FLIGHT`] reads under way in the
//!   whole mount (past that, files are left to their opens); the bytes kept are bounded by
//!   [`super::read_at_open`]'s limits (64 files of at most 128 KiB).

use std::sync::Arc;

use fuser::OpenFlags;
use protocol::FileHandle;
use tokio::runtime::Handle;
use tokio::sync::Semaphore;

use super::ServerMount;
use super::convert::open_bits;
use super::read_at_open::wanted;
use super::under_way::UnderWay;
use crate::session::Client;

/// Files read ahead of the one opened.
pub(super) const AHEAD: usize = 16;

/// Read-aheads under way at once, over the whole mount.
const MAX_IN_FLIGHT: usize = 32;

/// The files being read ahead.
pub(super) struct FilesAhead {
    reading: UnderWay<FileHandle>,
    permits: Arc<Semaphore>,
}

impl Default for FilesAhead {
    fn default() -> FilesAhead {
        FilesAhead {
            reading: UnderWay::default(),
            permits: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        }
    }
}

impl FilesAhead {
    /// Waits for a read-ahead of `fh` under way, if any.
    pub(super) async fn settle(&self, fh: &FileHandle) {
        if let Some(end) = self.reading.end(fh) {
            end.wait().await;
        }
    }
}

impl ServerMount {
    /// Local user `uid` (as `c`) opened `fh` for reading: if that continues a walk along a
    /// listing, reads the next files ahead (tasks on `rt`; see the module's doc).
    pub(super) fn opened_for_reading(
        self: &Arc<Self>,
        c: &Client,
        uid: u32,
        fh: &FileHandle,
        rt: &Handle,
    ) {
        let next = self.xattr_ahead.opened(fh, self.acting_uid(uid));
        if next.is_empty() {
            return;
        }
        let cache = self.client.cache();
        let reading = OpenFlags(libc::O_RDONLY);
        let mut started = 0;
        for e in next {
            let Some(size) = cache.get(&e).and_then(|a| wanted(reading, &a)) else {
                continue;
            };
            // Read with an open already, or in the kernel's pages (kept at the open).
            if self.kept_from_open(&e) || self.pages_kept(&e) {
                continue;
            }
            let Ok(permit) = self.files_ahead.permits.clone().try_acquire_owned() else {
                break;
            };
            let Some(under_way) = self.files_ahead.reading.start(e) else {
                continue;
            };
            started += 1;
            let (sh, c) = (self.clone(), c.clone());
            rt.spawn(async move {
                let since = sh.client.cache().stamp();
                let bits = open_bits(reading);
                let (_, read) = tokio::join!(c.access(&e, bits), c.read(&e, 0, size));
                if let Ok((data, eof)) = read {
                    sh.table()
                        .read_at_open
                        .keep(e, since, data.to_vec(), eof, None);
                }
                drop((under_way, permit));
            });
        }
        if started > 0 {
            tracing::debug!(files = started, "files read ahead");
        }
    }
}
