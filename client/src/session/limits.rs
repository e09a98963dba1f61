//! Bounds on what a server can make this client hold or do. Any user reaches any server by
//! its self-certifying name, so the server may be hostile; whatever it sends, memory and work
//! stay bounded and the answer is an error, never a loop or an out-of-memory kill.
//!
//! Bounded elsewhere, by the protocol crate: a record is at most the payload this side
//! advertised in the handshake (`protocol::record::DEFAULT_MAX_PAYLOAD`, 1 MiB + 4 KiB),
//! checked against the length header before anything is allocated (`RecordReader::read_buf`
//! grows only with bytes that arrived, `Opener` refuses a longer header); every count in a
//! message is checked against the bytes left before a `Vec` is sized for it (`xdr::Reader::
//! count`); a READLINK target is at most `MAX_PATH_LEN` (4096) bytes and a name at most
//! `MAX_NAME_LEN` (1024). Attribute sizes are never used to size a buffer. The attribute
//! cache holds at most `cache::MAX_ENTRIES` objects.

/// Entries in one directory listing. A million is far more than any directory a person
/// lists, and at about 300 bytes per entry in memory (name, handle, attributes) it is
/// ~300 MiB at worst.
pub(crate) const MAX_DIR_ENTRIES: usize = 1 << 20;

/// Bytes of names in one directory listing: 64 bytes per entry on average at the entry
/// bound; names are rarely longer than 30.
pub(crate) const MAX_DIR_NAME_BYTES: usize = 64 << 20;

/// READDIRPLUS requests for one listing. An honest server fills its pages (ours puts
/// hundreds of entries in each); one that sends a few per page would still list the entry
/// bound's worth in 65536 round trips, so more is a server stringing us along.
pub(crate) const MAX_DIR_PAGES: usize = 1 << 16;

/// Invalidations waiting for the FUSE side to pass them to the kernel. Past this the queue
/// is replaced by one [`super::Invalidation::Everything`] (all that is cached of the server is
/// dropped), which is always safe: a flood of INVALIDATEs costs the server's own cache hits,
/// not our memory.
pub(crate) const MAX_QUEUED_INVALIDATIONS: usize = 4096;
