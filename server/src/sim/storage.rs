//! The simulator's storage: regular files in memory, answering what the lease races need
//! (GETATTR, READ, WRITE, APPEND) with the same [`Outcome`] a real backend gives color 0.

use std::collections::HashMap;

use protocol::{Attr, Data, FileHandle, HANDLE_LEN, NfsStatus, ReplyBody, RequestOp, StableHow};

use crate::fs::{ObjKey, Outcome};

/// The file system id every simulated file has.
const FSID: u64 = 1;

struct MemFile {
    key: ObjKey,
    data: Vec<u8>,
}

/// Files in memory, by handle.
#[derive(Default)]
pub(super) struct MemStorage {
    files: HashMap<FileHandle, MemFile>,
}

impl MemStorage {
    /// A new file holding `data` (at most 255 of them: the handle is the file's number).
    pub(super) fn create(&mut self, data: &[u8]) -> FileHandle {
        let n = u8::try_from(self.files.len() + 1).expect("at most 255 simulated files");
        let fh = FileHandle::from_bytes([n; HANDLE_LEN]);
        let file = MemFile {
            key: (FSID, u64::from(n)),
            data: data.to_vec(),
        };
        self.files.insert(fh, file);
        fh
    }

    /// The server-side identity of `fh`.
    pub(super) fn key(&self, fh: &FileHandle) -> Option<ObjKey> {
        self.files.get(fh).map(|f| f.key)
    }

    /// The attributes of `fh`, carrying `lease_ms`.
    pub(super) fn attr(&self, fh: &FileHandle, lease_ms: u32) -> Option<Attr> {
        let f = self.files.get(fh)?;
        Some(Attr {
            fsid: f.key.0,
            fileid: f.key.1,
            ..Attr::test_file(f.data.len() as u64, lease_ms)
        })
    }

    /// READ of `count` bytes at `offset`, its attributes carrying `lease_ms`.
    pub(super) fn read(
        &self,
        fh: &FileHandle,
        offset: u64,
        count: u32,
        lease_ms: u32,
    ) -> Result<ReplyBody, NfsStatus> {
        let f = self.files.get(fh).ok_or(NfsStatus::Stale)?;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(f.data.len());
        let end = start.saturating_add(count as usize).min(f.data.len());
        Ok(ReplyBody::Read {
            attr: self.attr(fh, lease_ms),
            eof: end == f.data.len(),
            data: Data::from(f.data[start..end].to_vec()),
        })
    }

    /// Any other request the simulator supports, as a backend would answer it.
    pub(super) fn execute(&mut self, op: RequestOp, lease_ms: u32) -> Outcome {
        match op {
            RequestOp::GetAttr { fh } => self.getattr(fh, lease_ms),
            RequestOp::Write {
                fh, offset, data, ..
            } => self.write(fh, Some(offset), &data, lease_ms),
            RequestOp::Append { fh, data, .. } => self.write(fh, None, &data, lease_ms),
            _ => Outcome::err(NfsStatus::NotSupp),
        }
    }

    fn getattr(&self, fh: FileHandle, lease_ms: u32) -> Outcome {
        let (Some(key), Some(attr)) = (self.key(&fh), self.attr(&fh, lease_ms)) else {
            return Outcome::err(NfsStatus::Stale);
        };
        Outcome {
            result: Ok(ReplyBody::GetAttr { attr }),
            leased: vec![(key, fh)],
            changed: Vec::new(),
            returned_buffer: Vec::new(),
        }
    }

    /// WRITE at `offset`, or APPEND at the end with `None`.
    fn write(
        &mut self,
        fh: FileHandle,
        offset: Option<u64>,
        data: &[u8],
        lease_ms: u32,
    ) -> Outcome {
        let Some(f) = self.files.get_mut(&fh) else {
            return Outcome::err(NfsStatus::Stale);
        };
        let at = offset.map_or(f.data.len(), |o| o as usize);
        if f.data.len() < at + data.len() {
            f.data.resize(at + data.len(), 0);
        }
        f.data[at..at + data.len()].copy_from_slice(data);
        let key = f.key;
        let attr = self.attr(&fh, lease_ms);
        let count = data.len() as u32;
        let result = match offset {
            Some(_) => ReplyBody::Write {
                attr,
                count,
                committed: StableHow::FileSync,
                verifier: [0; 8],
            },
            None => ReplyBody::Append {
                attr,
                count,
                committed: StableHow::FileSync,
                verifier: [0; 8],
                offset: at as u64,
            },
        };
        Outcome {
            result: Ok(result),
            leased: vec![(key, fh)],
            changed: vec![(key, fh, attr)],
            returned_buffer: Vec::new(),
        }
    }
}
