//! APPEND: data written at the end of a file, wherever the end is when the kernel gets there.
//!
//! A WRITE at the size a client believes the file has overwrites whatever another client
//! appended meanwhile. Here the server's kernel places the data: the file is opened
//! `O_WRONLY | O_APPEND` as the caller (so the kernel also decides whether the caller may
//! write), and one `write(2)` on that descriptor moves to the end and writes under the inode's
//! lock, atomically with respect to every other appender: other APPENDs, and local processes
//! on the server writing with `O_APPEND`. The descriptor is this operation's own, so its file
//! position after the write is where our data ended, and the offset answered is that position
//! minus what was written.

use std::fs::File;
use std::io::{Seek, Write};

use protocol::{Attr, FileHandle, NfsStatus, ReplyBody, StableHow};
use rustix::fs::OFlags;

use super::{LocalFs, io_status};
use crate::fs::{OpCtx, Outcome};

impl LocalFs {
    /// APPEND: all of `data` at the end of the file, synced as the client asked; answers
    /// where it went.
    pub(super) fn append(
        &self,
        ctx: &OpCtx,
        fh: FileHandle,
        stable: StableHow,
        data: &[u8],
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        self.writable()?;
        let o = self.obj(&fh, &ctx.creds)?;
        o.require_regular()?;
        // Only a descriptor opened here carries O_APPEND and a position no one else moves.
        // The read-write descriptor a CREATE kept for a file whose mode denies its owner
        // writing ([`super::open`]) is shared, and setting O_APPEND on it would turn that
        // user's WRITEs into appends too: such a file is answered NotSupp, and the client
        // falls back to a WRITE at the offset it believes.
        let f = match o.reopen(OFlags::WRONLY | OFlags::APPEND) {
            Err(NfsStatus::Acces)
                if super::open::granted(&self.open, super::open::holder(ctx), o.key).is_some() =>
            {
                return Err(NfsStatus::NotSupp);
            }
            opened => opened?,
        };
        let offset = append_all(&f, data).map_err(|e| io_status(&e))?;
        match stable {
            StableHow::Unstable => {}
            StableHow::DataSync => f.sync_data().map_err(|e| io_status(&e))?,
            StableHow::FileSync => f.sync_all().map_err(|e| io_status(&e))?,
        }
        let a = f
            .metadata()
            .ok()
            .map(|m| Attr::from_metadata(&m, ctx.lease_ms));
        out.leased.push((o.key, fh));
        // Other holders of a lease get INVALIDATE, as for WRITE: their size is stale.
        out.changed.push((o.key, fh, a));
        Ok(ReplyBody::Append {
            attr: a,
            count: data.len() as u32,
            committed: stable,
            verifier: self.write_verifier,
            offset,
        })
    }
}

/// Writes all of `data` to `f`, a descriptor opened `O_APPEND` by the caller and used by no
/// one else, and returns the offset where the data starts.
///
/// One `write(2)`: a regular file takes all of it at once (the kernel appends it under the
/// inode lock), so the data lands in one piece. A short write (the disk filled, a file size
/// limit, a signal) leaves the rest to further writes, each again at the end; another
/// appender may then slip in between the pieces, so the data is whole but not contiguous. We
/// keep going rather than fail half-written, as `write_all` does, and answer the offset of
/// the first piece.
fn append_all(mut f: &File, data: &[u8]) -> std::io::Result<u64> {
    if data.is_empty() {
        // Nothing written, so the position says nothing (a fresh O_APPEND descriptor is at
        // 0 until its first write): the end is the size.
        return Ok(f.metadata()?.len());
    }
    let first = loop {
        match f.write(data) {
            Ok(n) => break n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    };
    if first == 0 {
        return Err(std::io::ErrorKind::WriteZero.into());
    }
    // The position is where our write ended: the descriptor is private to this operation.
    let offset = f.stream_position()? - first as u64;
    f.write_all(&data[first..])?;
    Ok(offset)
}

#[cfg(test)]
mod tests {
    use protocol::RequestOp;

    use super::*;
    use crate::fs::BlockingStorage;
    use crate::fs::local::testing::{backend, ctx};

    fn append(fs: &LocalFs, fh: FileHandle, data: &[u8]) -> (u64, Option<Attr>, usize) {
        let op = RequestOp::Append {
            fh,
            stable: StableHow::Unstable,
            data: data.to_vec().into(),
        };
        let out = fs.execute(&ctx(), op);
        match out.result {
            Ok(ReplyBody::Append {
                offset,
                attr,
                count,
                ..
            }) => {
                assert_eq!(count as usize, data.len());
                (offset, attr, out.changed.len())
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_offset_is_the_previous_size_and_holders_are_told() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"12345").unwrap();
        let (fs, fh) = backend(dir.path(), "f");
        let (offset, attr, changed) = append(&fs, fh, b"abc");
        assert_eq!(offset, 5);
        assert_eq!(attr.unwrap().size, 8);
        assert_eq!(changed, 1, "other lease holders get INVALIDATE");
        // A local process appends behind sfsd's back: the next APPEND goes after it.
        let mut local = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("f"))
            .unwrap();
        local.write_all(b"LOCAL").unwrap();
        assert_eq!(append(&fs, fh, b"xy").0, 13);
        assert_eq!(
            std::fs::read(dir.path().join("f")).unwrap(),
            b"12345abcLOCALxy"
        );
        // Not a regular file: refused.
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let (fs, d) = backend(dir.path(), "d");
        let op = RequestOp::Append {
            fh: d,
            stable: StableHow::FileSync,
            data: b"x".to_vec().into(),
        };
        assert_eq!(fs.execute(&ctx(), op).result, Err(NfsStatus::IsDir));
    }

    #[test]
    fn concurrent_appends_never_overlap() {
        const THREADS: usize = 4;
        const EACH: usize = 300;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"").unwrap();
        let (fs, fh) = backend(dir.path(), "f");
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let fs = fs.clone();
                std::thread::spawn(move || {
                    (0..EACH)
                        .map(|i| {
                            // Records of different lengths, so an overlap would show.
                            let rec = format!("{t}:{i}:{}\n", "x".repeat(i % 37));
                            let (offset, _, _) = append(&fs, fh, rec.as_bytes());
                            (offset, rec)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut placed: Vec<(u64, String)> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        placed.sort();
        let content = std::fs::read(dir.path().join("f")).unwrap();
        // Each record is where its APPEND said, and the records tile the file exactly.
        let mut end = 0u64;
        for (offset, rec) in &placed {
            assert_eq!(*offset, end, "gap or overlap before {rec:?}");
            let at = *offset as usize;
            assert_eq!(&content[at..at + rec.len()], rec.as_bytes());
            end += rec.len() as u64;
        }
        assert_eq!(end, content.len() as u64);
        assert_eq!(placed.len(), THREADS * EACH);
    }
}
