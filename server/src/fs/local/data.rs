//! Operations on file data: WRITE and COMMIT. READ is not dispatched here: it is opened by
//! `BlockingStorage::open_read` and read by the server's READ path ([`crate::read`]).
//!
//! Data is only ever reached by re-opening a checked `O_PATH` descriptor
//! ([`super::resolve::Obj::reopen`]), never by name.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use protocol::{Attr, FileHandle, NfsStatus, ReplyBody, StableHow};
use rustix::fs::OFlags;

use super::{LocalFs, inline, io_status};
use crate::fs::{OpCtx, Outcome};

impl LocalFs {
    /// WRITE: all of `data` at `offset`, synced as the client asked.
    pub(super) fn write(
        &self,
        ctx: &OpCtx,
        fh: FileHandle,
        offset: u64,
        stable: StableHow,
        data: &[u8],
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        self.writable()?;
        let o = self.obj(&fh, &ctx.creds)?;
        o.require_regular()?;
        if offset.checked_add(data.len() as u64).is_none() {
            return Err(NfsStatus::FBig);
        }
        let f = self.open_data(ctx, &o, OFlags::WRONLY)?;
        if inline::running_inline() {
            let size = f.metadata().map_err(|e| io_status(&e))?.len();
            if !inline::reads_no_page(offset, data.len() as u64, size) && inline::refused() {
                return Err(NfsStatus::ServerFault);
            }
        }
        write_in_pieces(&f, data, offset).map_err(|e| io_status(&e))?;
        match stable {
            StableHow::Unstable if data.len() >= WRITE_BEHIND_MIN => {
                start_writeback(&f, offset, data.len());
            }
            StableHow::Unstable => {}
            StableHow::DataSync => f.sync_data().map_err(|e| io_status(&e))?,
            StableHow::FileSync => f.sync_all().map_err(|e| io_status(&e))?,
        }
        let a = f
            .metadata()
            .ok()
            .map(|m| Attr::from_metadata(&m, ctx.lease_ms));
        out.leased.push((o.key, fh));
        out.changed.push((o.key, fh, a));
        Ok(ReplyBody::Write {
            attr: a,
            count: data.len() as u32,
            committed: stable,
            verifier: self.write_verifier,
        })
    }

    /// COMMIT: syncs the whole file (the requested range is a hint NFS allows ignoring).
    pub(super) fn commit(
        &self,
        ctx: &OpCtx,
        fh: FileHandle,
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        let o = self.obj(&fh, &ctx.creds)?;
        o.require_regular()?;
        // fsync needs a descriptor open for data: whichever the caller may have.
        let f = o
            .reopen(OFlags::RDONLY)
            .or_else(|_| self.open_data(ctx, &o, OFlags::WRONLY))?;
        f.sync_all().map_err(|e| io_status(&e))?;
        out.leased.push((o.key, fh));
        Ok(ReplyBody::Commit {
            attr: o.fresh_attr(ctx.lease_ms),
            verifier: self.write_verifier,
        })
    }
}

/// The WRITE/COMMIT verifier: it changes when unstable writes this server answered may have
/// been lost, so that clients holding such writes uncommitted report the loss (NFSv3's
/// rule). Those writes are in the kernel's page cache, which a crash or restart of sfsd does
/// not lose, but a reboot of the machine does: so the verifier is the kernel's boot id
/// (hashed, so clients learn nothing of it), the same for every start of sfsd within one boot.
/// A fresh random one per start where the boot id cannot be read (every restart then counts
/// as a reboot, as before). A write the disk failed to store is not this: COMMIT's `fsync`
/// reports it.
pub(super) fn write_verifier() -> [u8; 8] {
    verifier_of_boot(crate::boot::id().as_deref())
}

fn verifier_of_boot(boot_id: Option<&[u8]>) -> [u8; 8] {
    match boot_id.map(<[u8]>::trim_ascii) {
        Some(id) if !id.is_empty() => {
            let mut v = [0; 8];
            v.copy_from_slice(&crate::boot::tag("sfsd write verifier", id)[..8]);
            v
        }
        _ => rand::random(),
    }
}

/// The most one `pwrite` puts into the page cache: 32 KiB, eight pages.
///
/// The kernel sizes the page-cache folios it allocates for a write by the write's length. On
/// a virtual machine with free page reporting, folios larger than eight pages (the
/// allocator's "costly order") are slow to fill when memory has been free for a few seconds:
/// as far as we can tell they come from the big free blocks that were handed back to the
/// host, so the first write into each page faults on the host, while smaller ones come from
/// per-CPU lists of recently freed pages. Measured on a 2-vCPU VM
/// (sfsd, one 512 MiB `sfs put` into memory freed seconds earlier, 4-8 interleaved runs each):
/// 1 MiB writes cost the server 2.2-3.3 CPU-s/GB, 64 KiB ones 2.7-3.2, 32 KiB ones 1.0-1.8;
/// `dd` alone shows the same step between 32 and 64 KiB. Where memory is not reported (bare
/// metal, or memory freed just before) 32 KiB pieces cost no more than whole writes: the
/// extra system calls are 32 per MiB.
const PAGE_CACHE_WRITE_MAX: usize = 32 * 1024;

/// Writes all of `data` at `offset` in pieces of at most [`PAGE_CACHE_WRITE_MAX`].
fn write_in_pieces(file: &File, data: &[u8], offset: u64) -> std::io::Result<()> {
    let mut at = offset;
    for piece in data.chunks(PAGE_CACHE_WRITE_MAX) {
        file.write_all_at(piece, at)?;
        at += piece.len() as u64;
    }
    Ok(())
}

/// Unstable WRITEs at least this large start their own writeback.
const WRITE_BEHIND_MIN: usize = 256 * 1024;

/// Write-behind: starts writing `len` bytes at `offset` of `file` to disk without waiting for
/// them. A file written as a stream of large unstable WRITEs is then mostly on disk when the
/// client's COMMIT comes, which waits for the last part only instead of the whole file (the
/// disk works while the data arrives). The page cache keeps the data for readers. A hint: a
/// failure changes nothing, as COMMIT syncs whatever is still dirty.
fn start_writeback(file: &File, offset: u64, len: usize) {
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: sync_file_range takes a descriptor and integers and touches no memory of ours;
    // `file` keeps the descriptor open for the duration of the call.
    let _ = unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verifier_changes_with_the_boot_not_with_each_start() {
        let boot = b"4f1c2a9e-6b0d-4c55-9a3e-0d7f6c1b2e11\n";
        let other = b"0b7e5c3d-2a19-4f6e-8c41-9d2e7f3a6b58\n";
        assert_eq!(verifier_of_boot(Some(boot)), verifier_of_boot(Some(boot)));
        assert_ne!(verifier_of_boot(Some(boot)), verifier_of_boot(Some(other)));
        // Not the boot id itself.
        assert_ne!(&verifier_of_boot(Some(boot))[..], &boot[..8]);
        // Unreadable: a new one each start.
        assert_ne!(verifier_of_boot(None), verifier_of_boot(None));
        assert_ne!(verifier_of_boot(Some(b"\n")), verifier_of_boot(Some(b"\n")));
        // This machine's is stable.
        assert_eq!(write_verifier(), write_verifier());
    }
}
