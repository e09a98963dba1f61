//! The reply cache's journal: what lets sfsd, started again after it crashed or was
//! restarted, answer a change it had done with the reply it gave then, so a client whose
//! CREATE, MKDIR, REMOVE or RENAME was cut off by the restart gets its answer instead of an
//! error (docs/PROTOCOL.md, section 6.3).
//!
//! **What is written.** One entry when a change through a slot begins and one when it ends,
//! appended to `replies-ADDR-PORT` in the state directory (one file per listening address:
//! instances sharing a state directory each keep their own):
//!
//! - a change that may simply run again after a restart ([`super::runs_again_after_restart`]:
//!   WRITE, a SETATTR without size or guard, LOCK and UNLOCK) writes one entry as it begins, so
//!   the slot's number survives, and none when it ends: sent again after a restart it is done
//!   again;
//! - any other change writes "began" before it runs and its reply (or "not done", for a
//!   JUKEBOX) once it has run, before the reply is sent. Sent again after a restart, a change
//!   whose reply is in the journal gets that reply; one that began but whose end is not there
//!   (sfsd died while it ran) is answered `IO`: it may or may not have been done, and doing it
//!   again could fail on, or undo, what it did.
//!
//! **Why no `fsync`.** The journal must outlive sfsd, not the machine: what sfsd wrote is in
//! the kernel's page cache, which a crash of sfsd does not lose. A reboot can lose both the
//! journal's tail and the changes it speaks of, so the journal of another boot is not read
//! (its header holds a tag of the boot id, [`crate::boot`]), as the write verifier changes
//! with the boot. The file is mapped shared and entries are copied into the mapping: no system
//! call per entry (a `write(2)` each cost sfsd about 5 us, through ext4 and the fanotify event
//! of sfsd's own watch of the file system; a copy costs about 0.5 us), and the pages are the
//! page cache's, which outlive sfsd as written ones do. The header holds the time of the last
//! entry: a mapping's writes do not move the file's mtime at once.
//!
//! **Torn and hostile bytes.** Each entry carries its length and a checksum; reading stops at
//! the first entry that is short, too long or does not check (the tail a crash cut), and a
//! reply is decoded by the protocol's bounded decoder. The file is sfsd's own, mode 0600 in its
//! 0700 state directory, checked like the keys there ([`crate::trust`]): it holds the clients'
//! secret ids.
//!
//! **Bounded.** The file is rewritten with only what the table holds once it has grown past
//! twice its size after the last rewrite (at least [`FIRST_REWRITE`]), and at every start; a
//! file larger than [`MAX_FILE`] is not read. Its blocks are allocated before they are mapped
//! (`fallocate`, else written with zeros), so a full disk shows there and not as a fault in the
//! mapping; an allocation that fails empties the file and turns the journal off until the next
//! start: a journal missing entries could answer a change sent again with the reply of an
//! older one.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::net::SocketAddr;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use memmap2::MmapMut;
use parking_lot::Mutex;
use protocol::sequence::MAX_SLOTS;
use protocol::{NfsStatus, Reply, ReplyBody, ServerMessage};

use super::ClientId;
use crate::trust::{self, Kind};

/// The start of a journal's file name; the listening address follows.
const PREFIX: &str = "replies-";
/// The file's first bytes; the boot tag and the time of the last entry follow.
const MAGIC: &[u8; 16] = b"sfsd replies v1\n";
/// Bytes of the boot tag after [`MAGIC`].
const BOOT_TAG_LEN: usize = 16;
/// Where the time of the last entry (u64, milliseconds since the epoch) is.
const STAMP_AT: usize = MAGIC.len() + BOOT_TAG_LEN;
const HEADER_LEN: usize = STAMP_AT + 8;
/// An entry's frame: its body's length (u32) and the first 8 bytes of the body's SHA-256.
const FRAME_LEN: usize = 4 + 8;
/// An entry's body before its reply: kind, client id, incarnation, granted, slot, seq, uid.
const BODY_HEAD_LEN: usize = 1 + 32 + 8 + 4 * 4;
/// The longest body read or written: a change's reply is a few hundred bytes (handles and
/// attributes); one that would not fit is journalled as begun and never ended (answered `IO`).
const MAX_BODY: usize = 16 * 1024;
/// A journal larger than this is not read (sfsd's own table, rewritten, stays far below).
const MAX_FILE: u64 = 1 << 30;
/// Room allocated past the rewrite size, and the least the file grows by when an append finds
/// it full.
const SLACK: u64 = 256 * 1024;
/// The size past which the first rewrite happens.
pub(super) const FIRST_REWRITE: u64 = 4 << 20;

/// An entry's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Kind8 {
    /// A change that may run again after a restart began (its slot's number is all we keep).
    BeganRunsAgain = 1,
    /// A change whose reply is kept began.
    Began = 2,
    /// It ended with the reply that follows.
    Done = 3,
    /// It ended undone (JUKEBOX): sent again, it runs.
    NotDone = 4,
}

impl Kind8 {
    fn from_u8(b: u8) -> Option<Kind8> {
        Some(match b {
            1 => Kind8::BeganRunsAgain,
            2 => Kind8::Began,
            3 => Kind8::Done,
            4 => Kind8::NotDone,
            _ => return None,
        })
    }
}

/// What the journal says of one slot, as [`Journal::open`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SlotEnd {
    /// Sent again, it runs: it was not done, or it may run again after a restart.
    RunsAgain,
    /// It began and its end is not known: sent again, it is answered `IO`.
    Unknown,
    /// It was done, with this reply.
    Done(Box<Result<ReplyBody, NfsStatus>>),
}

/// One slot's last change, as the journal has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotEntry<'a> {
    pub slot: u32,
    pub seq: u32,
    pub uid: u32,
    pub end: EntryEnd<'a>,
}

/// What an entry says of its change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EntryEnd<'a> {
    /// Began; may run again after a restart.
    BeganRunsAgain,
    /// Began; its reply is to be kept.
    Began,
    /// Ended with this reply.
    Done(&'a Result<ReplyBody, NfsStatus>),
    /// Ended undone.
    NotDone,
}

/// Which record an entry is of: the client's id, and which of its records (a client away past
/// the grace period gets a new one, numbered from 1 again, and none of the old one's entries
/// may count for it), with the slots it was granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordTag {
    pub id: ClientId,
    /// Drawn at random when the record is made.
    pub incarnation: u64,
    pub granted: u32,
}

/// A client's record as the journal had it.
#[derive(Debug, Default)]
pub(crate) struct LoadedRecord {
    pub incarnation: u64,
    pub granted: u32,
    /// Slot → (seq, uid, end).
    pub slots: HashMap<u32, (u32, u32, SlotEnd)>,
}

/// The journal of one listening address.
pub(crate) struct Journal {
    path: PathBuf,
    boot_tag: [u8; BOOT_TAG_LEN],
    inner: Mutex<Inner>,
}

struct Inner {
    /// None once an allocation failed (the journal is off).
    out: Option<Mapped>,
    /// Where the entries end (the next one goes there).
    len: u64,
    /// The file's size, allocated ahead of the entries and zero past them.
    allocated: u64,
    rewrite_at: u64,
}

impl Journal {
    /// The journal of the server listening on `listen` (the address it is bound to), in state
    /// directory `dir`, and what it held from an earlier start in this boot (at most
    /// `max_records` records). None where the boot cannot be told. The file is rewritten at
    /// once with what was read, so what a crash cut off does not stay behind the new entries,
    /// and held locked while this server runs. Other journals in `dir` that no running server
    /// holds and that have not changed for `grace` are removed: their clients have stopped
    /// waiting for them (a server started on a port the system chose leaves one behind each
    /// time). A journal unchanged for `grace` is not read either: a client away that long has
    /// no record left anyway, and one still connected had no change under way.
    pub(crate) fn open(
        dir: &Path,
        listen: SocketAddr,
        max_records: usize,
        grace: std::time::Duration,
    ) -> Result<Option<(Journal, HashMap<ClientId, LoadedRecord>)>> {
        let Some(boot) = crate::boot::id() else {
            return Ok(None);
        };
        let name = format!("{PREFIX}{}-{}", listen.ip(), listen.port()).replace(':', "_");
        remove_stale(dir, &name, grace);
        let mut boot_tag = [0; BOOT_TAG_LEN];
        boot_tag.copy_from_slice(&crate::boot::tag("sfsd reply journal", &boot)[..BOOT_TAG_LEN]);
        let path = dir.join(name);
        let loaded = match read_existing(&path, &boot_tag, max_records, grace) {
            Ok(loaded) => loaded,
            Err(e) => {
                tracing::warn!(path = %path.display(), "reply journal not read: {e:#}");
                HashMap::new()
            }
        };
        let journal = Journal {
            path,
            boot_tag,
            inner: Mutex::new(Inner {
                out: None,
                len: 0,
                allocated: 0,
                rewrite_at: FIRST_REWRITE,
            }),
        };
        let mut snapshot = Vec::new();
        for (id, record) in &loaded {
            let tag = RecordTag {
                id: *id,
                incarnation: record.incarnation,
                granted: record.granted,
            };
            for (&slot, (seq, uid, end)) in &record.slots {
                let end = match end {
                    SlotEnd::RunsAgain => EntryEnd::NotDone,
                    SlotEnd::Unknown => EntryEnd::Began,
                    SlotEnd::Done(reply) => EntryEnd::Done(reply.as_ref()),
                };
                let entry = SlotEntry {
                    slot,
                    seq: *seq,
                    uid: *uid,
                    end,
                };
                encode(&mut snapshot, &tag, &entry);
            }
        }
        let mut inner = journal.inner.lock();
        journal
            .replace(&mut inner, &snapshot)
            .with_context(|| format!("writing {}", journal.path.display()))?;
        drop(inner);
        Ok(Some((journal, loaded)))
    }

    /// Appends `entry` of record `tag`; true when the file has grown enough to be rewritten
    /// ([`Journal::rewrite`]).
    pub(crate) fn append(&self, tag: &RecordTag, entry: &SlotEntry<'_>) -> bool {
        let mut buf = Vec::with_capacity(FRAME_LEN + BODY_HEAD_LEN + 256);
        encode(&mut buf, tag, entry);
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        let Some(out) = &mut inner.out else {
            return false;
        };
        let end = inner.len + buf.len() as u64;
        if end > inner.allocated {
            // Appends that came between the one that asked for a rewrite and the rewrite.
            let size = inner.allocated + (end - inner.allocated).max(SLACK);
            match allocate(&out.file, inner.allocated, size).and_then(|()| map(&out.file)) {
                Ok(bigger) => {
                    out.map = bigger;
                    inner.allocated = size;
                }
                Err(e) => {
                    self.turn_off(inner, &e);
                    return false;
                }
            }
        }
        out.map[inner.len as usize..end as usize].copy_from_slice(&buf);
        stamp(&mut out.map);
        inner.len = end;
        inner.len >= inner.rewrite_at
    }

    /// Replaces the file with the entries `live` writes (each slot's last change, from the
    /// table): called with the journal held, so no entry is appended meanwhile; one appended
    /// right after of a change `live` saw already says it again, which changes nothing.
    pub(crate) fn rewrite(&self, live: impl FnOnce(&mut dyn FnMut(&RecordTag, &SlotEntry<'_>))) {
        let mut inner = self.inner.lock();
        if inner.out.is_none() || inner.len < inner.rewrite_at {
            return;
        }
        let mut snapshot = Vec::new();
        live(&mut |tag, entry| encode(&mut snapshot, tag, entry));
        if let Err(e) = self.replace(&mut inner, &snapshot) {
            self.turn_off(&mut inner, &e);
        }
    }

    /// Writes the header and `entries` to a new file and renames it over the journal.
    fn replace(&self, inner: &mut Inner, entries: &[u8]) -> std::io::Result<()> {
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".new");
        let tmp = PathBuf::from(tmp);
        let _ = std::fs::remove_file(&tmp);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        // Made on the thread of a request that just ran: its fsgid may still be that
        // request's (fs/creds.rs), which the file must not get as its group.
        rustix::fs::fchown(
            &file,
            Some(rustix::process::geteuid()),
            Some(rustix::process::getegid()),
        )?;
        let len = HEADER_LEN + entries.len();
        let rewrite_at = (len as u64 * 2).max(FIRST_REWRITE);
        allocate(&file, 0, rewrite_at + SLACK)?;
        let mut map = map(&file)?;
        map[..MAGIC.len()].copy_from_slice(MAGIC);
        map[MAGIC.len()..STAMP_AT].copy_from_slice(&self.boot_tag);
        stamp(&mut map);
        map[HEADER_LEN..len].copy_from_slice(entries);
        // Held while this server runs: another start on the same address (the port freed
        // early) must not take it, nor a start elsewhere remove it.
        rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)?;
        std::fs::rename(&tmp, &self.path)?;
        inner.out = Some(Mapped { file, map });
        inner.len = len as u64;
        inner.allocated = rewrite_at + SLACK;
        inner.rewrite_at = rewrite_at;
        Ok(())
    }

    /// Where the entries end.
    #[cfg(test)]
    pub(crate) fn entries_end(&self) -> u64 {
        self.inner.lock().len
    }

    /// An allocation failed: the journal would miss entries, so it is emptied (a start reads
    /// nothing from it) and written no more.
    fn turn_off(&self, inner: &mut Inner, e: &std::io::Error) {
        tracing::warn!(
            path = %self.path.display(),
            "reply journal turned off until sfsd starts again ({e}): a change cut off by a \
             restart fails in its client"
        );
        inner.out = None;
        // By its name, not the descriptor that failed.
        let emptied = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&self.path)
            .and_then(|f| f.set_len(0));
        if let Err(e) = emptied {
            tracing::warn!(path = %self.path.display(), "reply journal not emptied: {e}");
        }
    }
}

/// The journal's file and its shared mapping (the whole file).
struct Mapped {
    file: File,
    map: MmapMut,
}

/// Maps `file`, all of it, shared and writable.
fn map(file: &File) -> std::io::Result<MmapMut> {
    // SAFETY: a mapping of a file is sound as long as nobody truncates the file or changes
    // its bytes behind the mapping while it exists. This file is sfsd's own: created by this
    // process with mode 0600 in its state directory (0700, checked to be sfsd's or root's),
    // held with `flock` so no other sfsd on this address opens it for writing, and never
    // truncated while mapped (it only grows, by `allocate`, after which it is mapped again;
    // `turn_off` drops the mapping first). Only root could still truncate it, as root could
    // overwrite any of sfsd's memory. Its bytes are read and written only through this
    // mapping, behind `Journal::inner`'s mutex.
    unsafe { MmapMut::map_mut(file) }
}

/// Writes the time now into the header at the start of `map`.
fn stamp(map: &mut [u8]) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    map[STAMP_AT..HEADER_LEN].copy_from_slice(&now.to_le_bytes());
}

/// How long ago the journal whose first bytes are `header` had its last entry, if it says.
fn age(header: &[u8]) -> Option<Duration> {
    let ms = u64::from_le_bytes(header.get(STAMP_AT..HEADER_LEN)?.try_into().ok()?);
    SystemTime::now()
        .duration_since(UNIX_EPOCH + Duration::from_millis(ms))
        .ok()
}

/// Makes `file` (now `from` bytes) `size` bytes long, its new blocks allocated (their bytes
/// zero), so that writing them through the mapping needs no block from the file system: a
/// full disk shows here, as an error, and never as a fault in the mapping. Where the file
/// system cannot allocate ahead, zeros are written.
fn allocate(file: &File, from: u64, size: u64) -> std::io::Result<()> {
    match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, size) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::OPNOTSUPP) => {
            let zeros = vec![0; 64 * 1024];
            let mut at = from;
            while at < size {
                let n = (size - at).min(zeros.len() as u64) as usize;
                file.write_all_at(&zeros[..n], at)?;
                at += n as u64;
            }
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Removes the journals in `dir` other than `ours` that no running server holds and that have
/// not changed for `grace`.
fn remove_stale(dir: &Path, ours: &str, grace: std::time::Duration) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with(PREFIX) || name == ours {
            continue;
        }
        let path = entry.path();
        let Ok(file) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
        else {
            continue;
        };
        let mut header = [0; HEADER_LEN];
        let age = match file.read_exact_at(&mut header, 0) {
            Ok(()) if &header[..MAGIC.len()] == MAGIC => age(&header),
            _ => file
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok()),
        };
        let old = age.is_some_and(|age| age > grace);
        if old
            && rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)
                .is_ok()
        {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Appends `entry`'s frame and body.
fn encode(buf: &mut Vec<u8>, tag: &RecordTag, entry: &SlotEntry<'_>) {
    let mut body = Vec::with_capacity(BODY_HEAD_LEN + 256);
    let kind = match entry.end {
        EntryEnd::BeganRunsAgain => Kind8::BeganRunsAgain,
        EntryEnd::Began => Kind8::Began,
        EntryEnd::Done(_) => Kind8::Done,
        EntryEnd::NotDone => Kind8::NotDone,
    };
    body.push(kind as u8);
    body.extend_from_slice(&tag.id);
    body.extend_from_slice(&tag.incarnation.to_le_bytes());
    for n in [tag.granted, entry.slot, entry.seq, entry.uid] {
        body.extend_from_slice(&n.to_le_bytes());
    }
    if let EntryEnd::Done(result) = entry.end {
        Reply {
            id: 0,
            result: result.clone(),
        }
        .encode_into(&mut body);
        if body.len() > MAX_BODY {
            // Too long to read back: say it began, and that is all.
            body.truncate(BODY_HEAD_LEN);
            body[0] = Kind8::Began as u8;
        }
    }
    buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
    buf.extend_from_slice(&checksum(&body));
    buf.extend_from_slice(&body);
}

fn checksum(body: &[u8]) -> [u8; 8] {
    let d = ring::digest::digest(&ring::digest::SHA256, body);
    let mut out = [0; 8];
    out.copy_from_slice(&d.as_ref()[..8]);
    out
}

/// Reads the journal at `path`, if it is of this boot: each slot's last entry, of at most
/// `max_records` clients.
fn read_existing(
    path: &Path,
    boot_tag: &[u8; BOOT_TAG_LEN],
    max_records: usize,
    grace: std::time::Duration,
) -> Result<HashMap<ClientId, LoadedRecord>> {
    let mut file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(e) => return Err(e.into()),
    };
    trust::check_mine(path, Kind::Secret)?;
    let meta = file.metadata()?;
    let mut header = [0; HEADER_LEN];
    if file.read_exact_at(&mut header, 0).is_ok()
        && let Some(unchanged_for) = age(&header)
        && unchanged_for > grace
    {
        tracing::info!(
            path = %path.display(),
            "reply journal unchanged for {unchanged_for:?}, longer than the lease: not read"
        );
        return Ok(HashMap::new());
    }
    let len = meta.len();
    if len > MAX_FILE {
        bail!("{len} bytes, more than any table of replies needs");
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.read_to_end(&mut bytes)?;
    Ok(parse(&bytes, boot_tag, max_records))
}

/// The records `bytes` holds, if its header is of this boot (none otherwise), up to the first
/// entry that does not check.
fn parse(
    bytes: &[u8],
    boot_tag: &[u8; BOOT_TAG_LEN],
    max_records: usize,
) -> HashMap<ClientId, LoadedRecord> {
    let mut out: HashMap<ClientId, LoadedRecord> = HashMap::new();
    if bytes.len() < HEADER_LEN
        || &bytes[..MAGIC.len()] != MAGIC
        || &bytes[MAGIC.len()..STAMP_AT] != boot_tag
    {
        return out;
    }
    let mut at = HEADER_LEN;
    while let Some(frame) = bytes.get(at..at + FRAME_LEN) {
        let body_len = u32::from_le_bytes(frame[..4].try_into().expect("4 bytes")) as usize;
        if !(BODY_HEAD_LEN..=MAX_BODY).contains(&body_len) {
            break;
        }
        let Some(body) = bytes.get(at + FRAME_LEN..at + FRAME_LEN + body_len) else {
            break;
        };
        if checksum(body) != frame[4..] {
            break;
        }
        at += FRAME_LEN + body_len;
        let Some((tag, slot, seq, uid, end)) = decode_body(body) else {
            // Checks but does not decode: not written by this code; nothing after it is
            // trusted either.
            break;
        };
        if !out.contains_key(&tag.id) && out.len() >= max_records {
            continue;
        }
        let record = out.entry(tag.id).or_default();
        if (record.incarnation, record.granted) != (tag.incarnation, tag.granted) {
            // A later record of the client: the earlier one's slots are not its own.
            *record = LoadedRecord {
                incarnation: tag.incarnation,
                granted: tag.granted,
                slots: HashMap::new(),
            };
        }
        if slot < tag.granted {
            record.slots.insert(slot, (seq, uid, end));
        }
    }
    out
}

type Decoded = (RecordTag, u32, u32, u32, SlotEnd);

fn decode_body(body: &[u8]) -> Option<Decoded> {
    let kind = Kind8::from_u8(body[0])?;
    let id: ClientId = body[1..33].try_into().ok()?;
    let incarnation = u64::from_le_bytes(body[33..41].try_into().expect("8 bytes"));
    let n =
        |i: usize| u32::from_le_bytes(body[41 + 4 * i..45 + 4 * i].try_into().expect("4 bytes"));
    let (granted, slot, seq, uid) = (n(0), n(1), n(2), n(3));
    if !(1..=MAX_SLOTS).contains(&granted) || seq == 0 {
        return None;
    }
    let rest = &body[BODY_HEAD_LEN..];
    let end = match kind {
        Kind8::BeganRunsAgain | Kind8::NotDone if rest.is_empty() => SlotEnd::RunsAgain,
        Kind8::Began if rest.is_empty() => SlotEnd::Unknown,
        Kind8::Done => match ServerMessage::decode(rest).ok()? {
            ServerMessage::Reply(Reply { id: 0, result }) => SlotEnd::Done(Box::new(result)),
            _ => return None,
        },
        _ => return None,
    };
    let tag = RecordTag {
        id,
        incarnation,
        granted,
    };
    Some((tag, slot, seq, uid, end))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    const BOOT: [u8; BOOT_TAG_LEN] = [7; BOOT_TAG_LEN];
    const GRACE: std::time::Duration = std::time::Duration::from_secs(60);

    fn header(boot: &[u8; BOOT_TAG_LEN]) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(boot);
        b.resize(HEADER_LEN, 0);
        stamp(&mut b);
        b
    }

    fn entry(buf: &mut Vec<u8>, id: u8, slot: u32, seq: u32, end: EntryEnd<'_>) {
        let e = SlotEntry {
            slot,
            seq,
            uid: 1000,
            end,
        };
        encode(buf, &tag(id, 1, 8), &e);
    }

    fn tag(id: u8, incarnation: u64, granted: u32) -> RecordTag {
        RecordTag {
            id: [id; 32],
            incarnation,
            granted,
        }
    }

    fn removed() -> Result<ReplyBody, NfsStatus> {
        Ok(ReplyBody::Remove { dir_attr: None })
    }

    #[test]
    fn each_slots_last_entry_is_what_a_start_finds() {
        let mut b = header(&BOOT);
        entry(&mut b, 1, 0, 1, EntryEnd::Began);
        entry(&mut b, 1, 0, 1, EntryEnd::Done(&removed()));
        entry(&mut b, 1, 1, 1, EntryEnd::Began);
        entry(&mut b, 1, 2, 5, EntryEnd::BeganRunsAgain);
        entry(&mut b, 1, 3, 2, EntryEnd::Began);
        entry(&mut b, 1, 3, 2, EntryEnd::NotDone);
        entry(&mut b, 2, 0, 9, EntryEnd::Done(&Err(NfsStatus::Exist)));
        let got = parse(&b, &BOOT, 10);
        let one = &got[&[1; 32]];
        assert_eq!(one.granted, 8);
        assert_eq!(one.slots[&0], (1, 1000, SlotEnd::Done(Box::new(removed()))));
        assert_eq!(one.slots[&1], (1, 1000, SlotEnd::Unknown));
        assert_eq!(one.slots[&2], (5, 1000, SlotEnd::RunsAgain));
        assert_eq!(one.slots[&3], (2, 1000, SlotEnd::RunsAgain));
        assert_eq!(
            got[&[2; 32]].slots[&0],
            (9, 1000, SlotEnd::Done(Box::new(Err(NfsStatus::Exist))))
        );
    }

    #[test]
    fn another_boots_journal_or_a_stranger_file_is_not_read() {
        let mut b = header(&BOOT);
        entry(&mut b, 1, 0, 1, EntryEnd::Done(&removed()));
        assert_eq!(parse(&b, &BOOT, 10).len(), 1);
        assert!(parse(&b, &[8; BOOT_TAG_LEN], 10).is_empty());
        b[0] ^= 1;
        assert!(parse(&b, &BOOT, 10).is_empty());
    }

    #[test]
    fn reading_stops_at_a_torn_or_damaged_entry() {
        let mut b = header(&BOOT);
        entry(&mut b, 1, 0, 1, EntryEnd::Done(&removed()));
        let whole = b.len();
        entry(&mut b, 1, 1, 1, EntryEnd::Done(&removed()));
        entry(&mut b, 1, 2, 1, EntryEnd::Done(&removed()));
        // Every cut of the second entry leaves only the first.
        for cut in whole..b.len() - (b.len() - whole) / 2 {
            let got = parse(&b[..cut], &BOOT, 10);
            assert_eq!(got[&[1; 32]].slots.len(), 1, "cut at {cut}");
        }
        // A flipped bit in the second entry ends the reading there, though the third checks.
        let mut damaged = b.clone();
        damaged[whole + FRAME_LEN + 5] ^= 0x10;
        assert_eq!(parse(&damaged, &BOOT, 10)[&[1; 32]].slots.len(), 1);
        // A length beyond the bound is not followed.
        let mut long = b.clone();
        long[whole..whole + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(parse(&long, &BOOT, 10)[&[1; 32]].slots.len(), 1);
        assert_eq!(parse(&b, &BOOT, 10)[&[1; 32]].slots.len(), 3);
    }

    #[test]
    fn entries_that_check_but_make_no_sense_end_the_reading() {
        let mut b = header(&BOOT);
        entry(&mut b, 1, 0, 1, EntryEnd::Began);
        // Granted 0, sequence 0, and a reply that is not one.
        for bad in [
            {
                let mut e = Vec::new();
                let began = SlotEntry {
                    slot: 0,
                    seq: 1,
                    uid: 0,
                    end: EntryEnd::Began,
                };
                encode(&mut e, &tag(2, 1, 0), &began);
                e
            },
            {
                let mut e = Vec::new();
                entry(&mut e, 2, 0, 0, EntryEnd::Began);
                e
            },
            {
                let mut body = vec![Kind8::Done as u8];
                body.extend_from_slice(&[2; 32]);
                body.extend_from_slice(&1u64.to_le_bytes());
                for n in [8u32, 0, 1, 0] {
                    body.extend_from_slice(&n.to_le_bytes());
                }
                body.extend_from_slice(&[0xff; 12]);
                let mut e = (body.len() as u32).to_le_bytes().to_vec();
                e.extend_from_slice(&checksum(&body));
                e.extend_from_slice(&body);
                e
            },
        ] {
            let mut all = b.clone();
            all.extend_from_slice(&bad);
            entry(&mut all, 3, 0, 1, EntryEnd::Began);
            let got = parse(&all, &BOOT, 10);
            assert_eq!(got.len(), 1, "only the first client: {got:?}");
        }
    }

    #[test]
    fn at_most_max_records_are_read_and_slots_beyond_the_grant_are_not() {
        let mut b = header(&BOOT);
        for id in 1..=5 {
            entry(&mut b, id, 0, 1, EntryEnd::Began);
        }
        entry(&mut b, 1, 9, 1, EntryEnd::Began);
        let got = parse(&b, &BOOT, 3);
        assert_eq!(got.len(), 3);
        assert_eq!(got[&[1; 32]].slots.len(), 1, "slot 9 of 8 granted");
    }

    #[test]
    fn a_reply_too_long_to_read_back_is_kept_as_begun() {
        let big = Ok(ReplyBody::GetXattr {
            value: vec![0; MAX_BODY],
        });
        let mut b = header(&BOOT);
        entry(&mut b, 1, 0, 1, EntryEnd::Done(&big));
        assert_eq!(parse(&b, &BOOT, 10)[&[1; 32]].slots[&0].2, SlotEnd::Unknown);
    }

    #[test]
    fn a_journal_written_where_a_request_left_its_group_is_the_servers() {
        use crate::fs::creds::{Mode, Switcher};
        use std::os::unix::fs::MetadataExt;
        if crate::boot::id().is_none() || Mode::detect() != Mode::PerRequest {
            eprintln!("skipped: needs root and a boot id");
            return;
        }
        let dir = private_dir();
        let listen: SocketAddr = "127.0.0.1:4712".parse().unwrap();
        let path = dir.path().join("replies-127.0.0.1-4712");
        let gid = std::thread::scope(|s| {
            s.spawn(|| {
                // A request of a user in group 4243 ran on this thread and left its fsgid.
                let creds = crate::users::Creds {
                    name: "t".into(),
                    uid: 4242,
                    gids: vec![4243],
                    anonymous: false,
                };
                Switcher::new(Mode::PerRequest).run(&creds, || ()).unwrap();
                let (j, _) = open_at(dir.path(), listen);
                let gid = std::fs::metadata(&path).unwrap().gid();
                drop(j);
                gid
            })
            .join()
            .unwrap()
        });
        assert_eq!(gid, rustix::process::getegid().as_raw());
    }

    #[test]
    fn a_journal_opens_rewritten_with_what_it_held_and_private() {
        use std::os::unix::fs::PermissionsExt;
        if crate::boot::id().is_none() {
            return;
        }
        let dir = private_dir();
        let listen: SocketAddr = "127.0.0.1:4711".parse().unwrap();
        let open = || open_at(dir.path(), listen);
        let (j, loaded) = open();
        assert!(loaded.is_empty());
        let e = |seq, end| SlotEntry {
            slot: 1,
            seq,
            uid: 5,
            end,
        };
        j.append(&tag(1, 1, 4), &e(1, EntryEnd::Began));
        let reply = removed();
        j.append(&tag(1, 1, 4), &e(1, EntryEnd::Done(&reply)));
        j.append(&tag(2, 1, 4), &e(3, EntryEnd::Began));
        let path = dir.path().join("replies-127.0.0.1-4711");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let before = j.entries_end();
        drop(j);
        // A torn tail from the crash.
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&[9, 0, 0], before).unwrap();
        let (j, loaded) = open();
        assert_eq!(
            loaded[&[1; 32]].slots[&1],
            (1, 5, SlotEnd::Done(Box::new(removed())))
        );
        assert_eq!(loaded[&[2; 32]].slots[&1], (3, 5, SlotEnd::Unknown));
        // Rewritten: one entry per slot, the torn tail gone.
        let after = j.entries_end();
        assert!(after < before, "{after} < {before}");
        drop(j);
        let (_, again) = open();
        assert_eq!(again[&[1; 32]].slots, loaded[&[1; 32]].slots);
        assert_eq!(again[&[2; 32]].slots, loaded[&[2; 32]].slots);
    }

    #[test]
    fn only_journals_no_server_holds_and_unchanged_for_the_grace_are_removed() {
        use std::os::unix::fs::PermissionsExt;
        if crate::boot::id().is_none() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let at = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
        let short = std::time::Duration::from_millis(200);
        let (held, _) = Journal::open(dir.path(), at(1), 4, short).unwrap().unwrap();
        let (left, _) = Journal::open(dir.path(), at(2), 4, short).unwrap().unwrap();
        drop(left);
        let (young, _) = Journal::open(dir.path(), at(3), 4, GRACE).unwrap().unwrap();
        drop(young);
        let exists = |port: u16| {
            dir.path()
                .join(format!("replies-127.0.0.1-{port}"))
                .exists()
        };
        std::thread::sleep(short * 2);
        std::fs::write(dir.path().join("replies-127.0.0.1-3"), b"").unwrap();
        let (_ours, _) = Journal::open(dir.path(), at(4), 4, short).unwrap().unwrap();
        assert!(exists(1), "held by a running server");
        assert!(!exists(2), "no server holds it and it is old");
        assert!(exists(3), "changed within the grace");
        assert!(exists(4));
        drop(held);
    }

    #[test]
    fn a_later_record_of_a_client_keeps_none_of_the_earlier_ones_slots() {
        let mut b = header(&BOOT);
        let mut e = |tag: RecordTag, slot, seq| {
            let entry = SlotEntry {
                slot,
                seq,
                uid: 1,
                end: EntryEnd::Began,
            };
            encode(&mut b, &tag, &entry);
        };
        e(tag(1, 1, 8), 0, 57);
        e(tag(1, 1, 8), 1, 12);
        // The client came back past the grace period: a new record, numbers from 1.
        e(tag(1, 2, 8), 0, 1);
        let got = parse(&b, &BOOT, 10);
        let one = &got[&[1; 32]];
        assert_eq!(one.incarnation, 2);
        assert_eq!(one.slots.len(), 1, "slot 1 was the old record's");
        assert_eq!(one.slots[&0].0, 1);
    }

    /// The journal of a server listening on `listen` with state in `dir` (a grant of 4
    /// slots per record, [`GRACE`]), and what it held.
    fn open_at(dir: &Path, listen: SocketAddr) -> (Journal, HashMap<ClientId, LoadedRecord>) {
        Journal::open(dir, listen, 4, GRACE).unwrap().unwrap()
    }

    /// A state directory as sfsd keeps one (0700), for these tests and the reply cache's.
    pub(in crate::replies) fn private_dir() -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    #[test]
    fn a_journal_grows_past_its_allocation_when_no_rewrite_comes() {
        if crate::boot::id().is_none() {
            return;
        }
        let dir = private_dir();
        let listen = SocketAddr::from(([127, 0, 0, 1], 4712));
        let (j, _) = open_at(dir.path(), listen);
        let last = 10_000;
        for seq in 1..=last {
            for slot in 0..8 {
                let entry = SlotEntry {
                    slot,
                    seq,
                    uid: 1,
                    end: EntryEnd::BeganRunsAgain,
                };
                j.append(&tag(1, 1, 8), &entry);
            }
        }
        let end = j.entries_end();
        assert!(
            end > FIRST_REWRITE + SLACK,
            "{end} bytes: past the first allocation"
        );
        drop(j);
        let (_, loaded) = open_at(dir.path(), listen);
        let slots = &loaded[&[1; 32]].slots;
        assert_eq!(slots.len(), 8);
        assert!(
            slots.values().all(|&(seq, _, _)| seq == last),
            "every entry read back"
        );
    }

    #[test]
    fn a_journal_unchanged_for_longer_than_the_grace_is_not_read() {
        if crate::boot::id().is_none() {
            return;
        }
        let dir = private_dir();
        let listen = SocketAddr::from(([127, 0, 0, 1], 4713));
        let (j, _) = open_at(dir.path(), listen);
        let entry = SlotEntry {
            slot: 0,
            seq: 3,
            uid: 1,
            end: EntryEnd::Began,
        };
        j.append(&tag(1, 1, 8), &entry);
        drop(j);
        let path = dir.path().join("replies-127.0.0.1-4713");
        let (j, loaded) = open_at(dir.path(), listen);
        assert_eq!(loaded.len(), 1, "changed just now: read");
        drop(j);
        // Its last entry two lease lengths ago (the file that open rewrote).
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let then = SystemTime::now() - GRACE * 2;
        let ms = then.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
        f.write_all_at(&ms.to_le_bytes(), STAMP_AT as u64).unwrap();
        let (_, loaded) = open_at(dir.path(), listen);
        assert!(loaded.is_empty(), "its clients have stopped waiting");
    }

    #[test]
    fn a_journal_that_cannot_grow_is_emptied_and_written_no_more() {
        if crate::boot::id().is_none() {
            return;
        }
        let dir = private_dir();
        let listen = SocketAddr::from(([127, 0, 0, 1], 4714));
        let (j, _) = open_at(dir.path(), listen);
        let entry = |seq| SlotEntry {
            slot: 0,
            seq,
            uid: 1,
            end: EntryEnd::Began,
        };
        j.append(&tag(1, 1, 8), &entry(1));
        // The next entry needs more room, and allocating it fails (a descriptor not open for
        // writing stands in for a full disk).
        let path = dir.path().join("replies-127.0.0.1-4714");
        {
            let mut inner = j.inner.lock();
            inner.allocated = inner.len;
            inner.out.as_mut().unwrap().file = File::open(&path).unwrap();
        }
        assert!(!j.append(&tag(1, 1, 8), &entry(2)));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "emptied");
        assert!(!j.append(&tag(1, 1, 8), &entry(3)));
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            0,
            "written no more"
        );
        drop(j);
        let (_, loaded) = open_at(dir.path(), listen);
        assert!(loaded.is_empty(), "a start finds nothing to answer with");
    }
}
