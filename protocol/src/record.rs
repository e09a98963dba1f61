//! Sealed records: the framing and encryption of everything after the handshake.
//!
//! ```text
//! record = length: u32 big-endian (payload bytes) || ciphertext[length] || tag[16]
//! ciphertext, tag = AEAD(key, nonce, aad = the 4 length bytes, payload)
//! nonce = 0x00000000 || counter as u64 little-endian      (as Noise's ChaChaPoly)
//! ```
//!
//! The AEAD ([`Cipher`]) is ChaCha20-Poly1305, or AES-256-GCM on connections whose protocol
//! version says so (version 4: both ends have AES instructions, where it costs a third or less
//! of ChaCha20-Poly1305 per byte).
//!
//! Each direction has its own key and its own counter, starting at 0 and incremented per
//! record, never sent. A reordered, replayed, dropped or spliced record is therefore opened under
//! the wrong nonce and fails authentication; a changed length fails because the length is the
//! associated data; an oversized length is refused as soon as the 4 header bytes arrive, before
//! any buffering. After any failure an [`Opener`] stays failed: the connection must be closed.
//!
//! [`Sealer`] and [`Opener`] are separate owned values so the two directions of a connection can
//! be driven from different threads (a server seals and opens in the connection's color). Both
//! encrypt and decrypt in place, so a record costs the cipher plus a few bytes of bookkeeping:
//! a server can encode a message straight into the output buffer between
//! [`Sealer::begin`] and [`Sealer::finish`] and never copy the payload.

use ring::aead::{AES_256_GCM, Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};

use crate::error::RecordError;

/// Bytes of the length header.
pub const HEADER_LEN: usize = 4;
/// Bytes of the Poly1305 tag.
pub const TAG_LEN: usize = 16;
/// Bytes a record adds to its payload.
pub const RECORD_OVERHEAD: usize = HEADER_LEN + TAG_LEN;
/// Default largest payload a peer accepts: 1 MiB of file data plus room for a reply header.
pub const DEFAULT_MAX_PAYLOAD: usize = (1 << 20) + 4096;
/// The smallest maximum payload a peer may advertise (anything less could not carry the
/// largest fixed-size messages).
pub const MIN_MAX_PAYLOAD: usize = 4096;
/// The largest maximum payload a peer may advertise (the length field is 32 bits, and a
/// record must fit in memory twice).
pub const MAX_MAX_PAYLOAD: usize = 1 << 30;

/// A record's 32-byte direction key.
pub type RecordKey = [u8; 32];

fn nonce(counter: u64) -> Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&counter.to_le_bytes());
    // Unique: each direction has its own key and a counter that only goes up.
    Nonce::assume_unique_for_key(n)
}

/// The AEAD that seals a connection's records.
///
/// ring's assembly implementations: the cipher is most of what a byte of file data costs, and
/// ring's are the fastest of the well-kept pure-Rust-API crates for both on x86-64 and ARM
/// (see `benches/README.md` for the measured figures).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cipher {
    /// ChaCha20-Poly1305 (RFC 8439): fast everywhere, always available.
    ChaCha20Poly1305,
    /// AES-256-GCM (NIST SP 800-38D): much faster where the CPU has AES and carry-less
    /// multiplication instructions, slow and not constant-time in software, so chosen only
    /// when both ends have them.
    Aes256Gcm,
}

/// Bytes one AES-256-GCM key may seal: 2^38 (256 GiB), TLS 1.3's bound (RFC 8446, section
/// 5.5: 2^24.5 records of 2^14 bytes) for a 2^-57 margin. A direction that reaches it ends
/// (the session must be re-established, with new keys); ChaCha20-Poly1305's bound is beyond
/// the 64-bit counter.
pub const AES_GCM_BYTE_LIMIT: u64 = 1 << 38;

impl Cipher {
    /// The record cipher of protocol `version`: AES-256-GCM for 4 and 6, else ChaCha20-Poly1305.
    pub fn for_version(version: u32) -> Cipher {
        if crate::handshake::uses_aes(version) {
            Cipher::Aes256Gcm
        } else {
            Cipher::ChaCha20Poly1305
        }
    }

    /// Whether this machine has the instructions that make AES-256-GCM fast and
    /// constant-time (AES rounds and carry-less multiplication).
    pub fn aes_in_hardware() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("aes")
                && std::arch::is_x86_feature_detected!("pclmulqdq")
        }
        #[cfg(target_arch = "aarch64")]
        {
            std::arch::is_aarch64_feature_detected!("aes")
                && std::arch::is_aarch64_feature_detected!("pmull")
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            false
        }
    }

    /// Bytes of payload one key may seal.
    fn byte_limit(self) -> u64 {
        match self {
            Cipher::ChaCha20Poly1305 => u64::MAX,
            Cipher::Aes256Gcm => AES_GCM_BYTE_LIMIT,
        }
    }

    /// The key of one direction.
    fn key(self, key: &RecordKey) -> LessSafeKey {
        let algorithm = match self {
            Cipher::ChaCha20Poly1305 => &CHACHA20_POLY1305,
            Cipher::Aes256Gcm => &AES_256_GCM,
        };
        LessSafeKey::new(UnboundKey::new(algorithm, key).expect("a 32-byte AEAD key"))
    }
}

/// Where a record being built by [`Sealer::begin`] starts in its buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "pass the RecordStart to Sealer::finish"]
pub struct RecordStart(usize);

impl RecordStart {
    /// A record whose 4-byte header gap is at the very start of its buffer: a payload encoded
    /// after `[0; 4]` (as a server builds a READ reply, to seal it without copying the data).
    pub const BUFFER_START: RecordStart = RecordStart(0);

    /// A record whose 4-byte header gap is at `offset` of its buffer (the bytes before it are
    /// not part of the record: e.g. padding that puts the record's data on a cache-line
    /// boundary).
    pub const fn at(offset: usize) -> RecordStart {
        RecordStart(offset)
    }
}

/// Seals the records of one direction.
pub struct Sealer {
    cipher: LessSafeKey,
    counter: u64,
    max_payload: usize,
    /// Payload bytes the key may still seal.
    budget: u64,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer")
            .field("counter", &self.counter)
            .field("max_payload", &self.max_payload)
            .finish_non_exhaustive()
    }
}

impl Sealer {
    /// A sealer under `key` for a peer that accepts payloads up to `max_payload` bytes.
    ///
    /// Sessions get their sealer from the handshake; this constructor is for tests and
    /// benchmarks.
    pub fn new(key: &RecordKey, max_payload: usize) -> Sealer {
        Sealer::with_cipher(Cipher::ChaCha20Poly1305, key, max_payload)
    }

    /// [`Sealer::new`] with `cipher`.
    pub fn with_cipher(cipher: Cipher, key: &RecordKey, max_payload: usize) -> Sealer {
        Sealer {
            cipher: cipher.key(key),
            counter: 0,
            max_payload: max_payload.min(MAX_MAX_PAYLOAD),
            budget: cipher.byte_limit(),
        }
    }

    /// Charges `len` payload bytes to the key's budget.
    fn spend(&mut self, len: usize) -> Result<(), RecordError> {
        self.budget = self
            .budget
            .checked_sub(len as u64)
            .ok_or(RecordError::KeyLimit)?;
        Ok(())
    }

    /// The largest payload the peer accepts.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// Records sealed so far (the next record's counter).
    pub fn counter(&self) -> u64 {
        self.counter
    }

    /// Starts a record at the end of `out`: reserves the header. Append the payload to `out`,
    /// then call [`Sealer::finish`].
    pub fn begin(&self, out: &mut Vec<u8>) -> RecordStart {
        let start = out.len();
        out.extend_from_slice(&[0u8; HEADER_LEN]);
        RecordStart(start)
    }

    /// Seals the payload appended to `out` since [`Sealer::begin`], in place, and appends the
    /// tag. On error `out` is truncated back to where the record started.
    pub fn finish(&mut self, out: &mut Vec<u8>, start: RecordStart) -> Result<(), RecordError> {
        if self.counter == u64::MAX {
            out.truncate(start.0);
            return Err(RecordError::CounterExhausted);
        }
        let len = out.len().saturating_sub(start.0 + HEADER_LEN);
        if let Err(e) = self.spend(len) {
            out.truncate(start.0);
            return Err(e);
        }
        seal_in_place(&self.cipher, self.counter, self.max_payload, out, start)?;
        self.counter += 1;
        Ok(())
    }

    /// Takes the next record's nonce now, to seal that record later, possibly on another
    /// thread, with [`DeferredSeal::finish`]: a connection can seal several records in
    /// parallel. The records must still be *sent* in the order their nonces were taken (the
    /// peer opens them in that order), and every deferred seal must be finished and sent: a
    /// skipped nonce makes every later record fail to open.
    pub fn defer(&mut self) -> Result<DeferredSeal, RecordError> {
        if self.counter == u64::MAX {
            return Err(RecordError::CounterExhausted);
        }
        // Its size is not known yet: charged as the largest.
        self.spend(self.max_payload)?;
        let deferred = DeferredSeal {
            cipher: self.cipher.clone(),
            counter: self.counter,
            max_payload: self.max_payload,
        };
        self.counter += 1;
        Ok(deferred)
    }

    /// Appends one sealed record whose payload `encode` appends to `out`, sealed in place:
    /// `sealer.seal_with(&mut out, |b| request.encode_into(b))`.
    pub fn seal_with(
        &mut self,
        out: &mut Vec<u8>,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> Result<(), RecordError> {
        let start = self.begin(out);
        encode(out);
        self.finish(out, start)
    }

    /// Appends one sealed record carrying `payload` to `out`.
    pub fn seal_into(&mut self, payload: &[u8], out: &mut Vec<u8>) -> Result<(), RecordError> {
        if payload.len() > self.max_payload {
            return Err(RecordError::TooLarge {
                len: payload.len(),
                max: self.max_payload,
            });
        }
        out.reserve(payload.len() + RECORD_OVERHEAD);
        let start = self.begin(out);
        out.extend_from_slice(payload);
        self.finish(out, start)
    }

    /// One sealed record carrying `payload`.
    pub fn seal(&mut self, payload: &[u8]) -> Result<Vec<u8>, RecordError> {
        let mut out = Vec::with_capacity(payload.len() + RECORD_OVERHEAD);
        self.seal_into(payload, &mut out)?;
        Ok(out)
    }
}

/// One record's nonce, taken in order by [`Sealer::defer`], to seal anywhere.
pub struct DeferredSeal {
    cipher: LessSafeKey,
    counter: u64,
    max_payload: usize,
}

impl std::fmt::Debug for DeferredSeal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeferredSeal")
            .field("counter", &self.counter)
            .finish_non_exhaustive()
    }
}

impl DeferredSeal {
    /// The record's counter (its place in the sending order).
    pub fn counter(&self) -> u64 {
        self.counter
    }

    /// As [`Sealer::finish`], under the nonce this seal was given.
    pub fn finish(self, out: &mut Vec<u8>, start: RecordStart) -> Result<(), RecordError> {
        seal_in_place(&self.cipher, self.counter, self.max_payload, out, start)
    }
}

/// Seals the payload after `start`'s header gap in place under `counter`'s nonce and appends
/// the tag; on error truncates `out` back to `start`.
fn seal_in_place(
    cipher: &LessSafeKey,
    counter: u64,
    max_payload: usize,
    out: &mut Vec<u8>,
    start: RecordStart,
) -> Result<(), RecordError> {
    let payload_start = start.0 + HEADER_LEN;
    assert!(
        payload_start <= out.len(),
        "RecordStart does not belong to this buffer"
    );
    let len = out.len() - payload_start;
    if len > max_payload {
        out.truncate(start.0);
        return Err(RecordError::TooLarge {
            len,
            max: max_payload,
        });
    }
    // len <= MAX_MAX_PAYLOAD < 2^32.
    let header = (len as u32).to_be_bytes();
    out[start.0..payload_start].copy_from_slice(&header);
    let Ok(tag) = cipher.seal_in_place_separate_tag(
        nonce(counter),
        Aad::from(header),
        &mut out[payload_start..],
    ) else {
        // Only a payload beyond ChaCha20's 256 GiB limit fails, which max_payload excludes.
        out.truncate(start.0);
        return Err(RecordError::TooLarge {
            len,
            max: max_payload,
        });
    };
    out.extend_from_slice(tag.as_ref());
    Ok(())
}

/// Opens the records of one direction, in order.
pub struct Opener {
    cipher: LessSafeKey,
    counter: u64,
    max_payload: usize,
    failed: bool,
    /// Payload bytes the key may still open (a peer that seals beyond its cipher's bound is
    /// refused, as its own sealer would have).
    budget: u64,
}

impl std::fmt::Debug for Opener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opener")
            .field("counter", &self.counter)
            .field("max_payload", &self.max_payload)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl Opener {
    /// An opener under `key` that accepts payloads up to `max_payload` bytes.
    ///
    /// Sessions get their opener from the handshake; this constructor is for tests and
    /// benchmarks.
    pub fn new(key: &RecordKey, max_payload: usize) -> Opener {
        Opener::with_cipher(Cipher::ChaCha20Poly1305, key, max_payload)
    }

    /// [`Opener::new`] with `cipher`.
    pub fn with_cipher(cipher: Cipher, key: &RecordKey, max_payload: usize) -> Opener {
        Opener {
            cipher: cipher.key(key),
            counter: 0,
            max_payload: max_payload.min(MAX_MAX_PAYLOAD),
            failed: false,
            budget: cipher.byte_limit(),
        }
    }

    /// The largest payload accepted.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// Records opened so far (the next record's counter).
    pub fn counter(&self) -> u64 {
        self.counter
    }

    /// Whether an earlier failure made this opener unusable.
    pub fn has_failed(&self) -> bool {
        self.failed
    }

    fn fail<T>(&mut self, e: RecordError) -> Result<T, RecordError> {
        self.failed = true;
        Err(e)
    }

    /// The total size (header, payload and tag) of the record starting at `buf[0]`, once its
    /// header is in `buf`; `Ok(None)` while fewer than 4 bytes are there. Fails (and poisons the
    /// opener) when the header announces more than the maximum payload.
    pub fn record_len(&mut self, buf: &[u8]) -> Result<Option<usize>, RecordError> {
        if self.failed {
            return Err(RecordError::Poisoned);
        }
        let Some(header) = buf.first_chunk::<HEADER_LEN>() else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(*header) as usize;
        if len > self.max_payload {
            return self.fail(RecordError::TooLarge {
                len,
                max: self.max_payload,
            });
        }
        Ok(Some(len + RECORD_OVERHEAD))
    }

    /// Opens exactly one record in place and returns its payload, a sub-slice of `record`.
    pub fn open_in_place<'a>(&mut self, record: &'a mut [u8]) -> Result<&'a [u8], RecordError> {
        let need = match self.record_len(record)? {
            Some(n) => n,
            None => {
                return self.fail(RecordError::Truncated {
                    have: record.len(),
                    need: HEADER_LEN,
                });
            }
        };
        if record.len() != need {
            let e = if record.len() < need {
                RecordError::Truncated {
                    have: record.len(),
                    need,
                }
            } else {
                RecordError::WrongLength {
                    have: record.len(),
                    need,
                }
            };
            return self.fail(e);
        }
        if self.counter == u64::MAX {
            return self.fail(RecordError::CounterExhausted);
        }
        let len = (need - RECORD_OVERHEAD) as u64;
        match self.budget.checked_sub(len) {
            Some(left) => self.budget = left,
            None => return self.fail(RecordError::KeyLimit),
        }
        let (header, body_and_tag) = record.split_at_mut(HEADER_LEN);
        let header: [u8; HEADER_LEN] = (&*header).try_into().expect("split at HEADER_LEN");
        let opened =
            self.cipher
                .open_in_place(nonce(self.counter), Aad::from(header), body_and_tag);
        let Ok(body) = opened else {
            return self.fail(RecordError::Authentication);
        };
        self.counter += 1;
        Ok(body)
    }

    /// Opens exactly one record, leaving `record` untouched.
    pub fn open(&mut self, record: &[u8]) -> Result<Vec<u8>, RecordError> {
        let mut copy = record.to_vec();
        let n = self.open_in_place(&mut copy)?.len();
        copy.copy_within(HEADER_LEN..HEADER_LEN + n, 0);
        copy.truncate(n);
        Ok(copy)
    }

    /// Opens the record at the front of `buf` if it is complete, removing it from `buf`;
    /// `Ok(None)` if more bytes are needed. Simple but moves the rest of `buf`: for a stream,
    /// [`RecordReader`] avoids that.
    pub fn open_from(&mut self, buf: &mut Vec<u8>) -> Result<Option<Vec<u8>>, RecordError> {
        let Some(need) = self.record_len(buf)? else {
            return Ok(None);
        };
        if buf.len() < need {
            return Ok(None);
        }
        let payload = self.open_in_place(&mut buf[..need])?.to_vec();
        buf.drain(..need);
        Ok(Some(payload))
    }
}

/// Size a [`RecordReader`] grows its free space to, so small records arriving together are
/// read with one system call.
const MIN_READ: usize = 16 * 1024;
/// Free space below which a [`RecordReader`] compacts or grows its buffer.
const MIN_SPARE: usize = 4096;
/// Alignment of where a [`RecordReader`] starts receiving a record.
const RECEIVE_ALIGN: usize = 64;
/// Records at least this long are read only up to their end.
const READ_TO_BOUNDARY_ABOVE: usize = 64 * 1024;

/// A record opened by [`RecordReader::next_record_or_buffer`].
#[derive(Debug)]
pub enum Opened<'a> {
    /// The payload, borrowed from the reader's buffer until the next call.
    InPlace(&'a [u8]),
    /// The reader's whole receive buffer, handed over, with the payload at `buf[payload]`.
    Buffer {
        /// The buffer (the record's header and tag around the payload, maybe padding before).
        buf: Vec<u8>,
        /// Where the payload is.
        payload: std::ops::Range<usize>,
    },
}

/// Accumulates bytes from a stream and opens whole records in place, without copying a payload.
///
/// ```
/// # use protocol::record::{Opener, RecordReader, Sealer};
/// let key = [9u8; 32];
/// let mut sealer = Sealer::new(&key, 1 << 20);
/// let mut reader = RecordReader::new(Opener::new(&key, 1 << 20));
/// let wire = sealer.seal(b"hello").unwrap();
/// // What a socket read would do:
/// let buf = reader.read_buf();
/// buf[..wire.len()].copy_from_slice(&wire);
/// reader.advance(wire.len());
/// assert_eq!(reader.next_record().unwrap(), Some(&b"hello"[..]));
/// assert_eq!(reader.next_record().unwrap(), None);
/// reader.finish().unwrap(); // no partial record at end of stream
/// ```
#[derive(Debug)]
pub struct RecordReader {
    opener: Opener,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// A record was skipped unopened: the nonce sequence is broken for good.
    skipped: bool,
}

impl RecordReader {
    /// A reader opening with `opener`.
    pub fn new(opener: Opener) -> RecordReader {
        RecordReader {
            opener,
            buf: Vec::new(),
            start: 0,
            end: 0,
            skipped: false,
        }
    }

    /// The opener (to inspect its counter or limit).
    pub fn opener(&self) -> &Opener {
        &self.opener
    }

    /// Gives the opener back.
    pub fn into_opener(self) -> Opener {
        self.opener
    }

    /// Bytes received and not yet returned as records.
    pub fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// How many more bytes complete the next record (at least 1 while only part of a header is
    /// buffered, 0 when a whole record is waiting).
    pub fn needed(&self) -> usize {
        let have = self.buffered();
        match self.peek_len() {
            Some(total) => total.saturating_sub(have),
            None => HEADER_LEN - have,
        }
    }

    fn peek_len(&self) -> Option<usize> {
        let header = self.buf[self.start..self.end].first_chunk::<HEADER_LEN>()?;
        Some(u32::from_be_bytes(*header) as usize + RECORD_OVERHEAD)
    }

    /// Space to read into (initialised memory; at least 4 KiB, or the rest of the record being
    /// received if that is less). Follow with [`RecordReader::advance`].
    ///
    /// The buffer is compacted or grown only when the free space runs low, so a stream of small
    /// records is read with few, large reads and few copies.
    pub fn read_buf(&mut self) -> &mut [u8] {
        if self.start == self.end {
            // Nothing buffered: the next record starts on a cache-line boundary, so the
            // kernel copies into an aligned destination (several times cheaper on some CPUs).
            let origin = self.origin();
            self.start = origin;
            self.end = origin;
        }
        // Bytes still missing from the record being received. A header beyond the limit is
        // not trusted here (next_record rejects it), so a hostile length never makes us
        // allocate.
        let (missing, large) = match self.peek_len() {
            Some(total) if total <= self.opener.max_payload + RECORD_OVERHEAD => (
                total - self.buffered().min(total),
                total >= READ_TO_BOUNDARY_ABOVE,
            ),
            _ => (0, false),
        };
        // Grow with what has arrived, not with what the header announces: room for at most as
        // many bytes as are already buffered (at least MIN_READ), so memory is only ever
        // committed for bytes a peer actually sent (doubling, so a large record still costs
        // few reads and amortised-linear copying).
        let want = match missing {
            0 => MIN_READ,
            m => m.min(self.buffered().max(MIN_READ)),
        }
        .max(MIN_SPARE);
        if self.buf.len() - self.end < want {
            let origin = self.origin();
            let front = if self.start >= origin { origin } else { 0 };
            if self.start > front {
                self.buf.copy_within(self.start..self.end, front);
                self.end -= self.start - front;
                self.start = front;
            }
            if self.buf.len() - self.end < want {
                // Exactly: `want` already doubles with the data, and Vec's own amortised
                // growth would double again on top.
                self.buf.reserve_exact(self.end + want - self.buf.len());
                self.buf.resize(self.end + want, 0);
            }
        }
        // A large record is read up to its end and no further: once it is handled the buffer
        // is empty and the next record starts at the front, instead of the next record's
        // first bytes being copied there (up to a megabyte per record in a stream of WRITEs
        // or READ replies), and the buffer can be handed over with the record
        // (`next_record_or_buffer`). Small records are read many at a time.
        // While the next header is unknown, reads stop after READ_TO_BOUNDARY_ABOVE bytes, so
        // one read does not run through a large record into the next.
        let space = self.buf.len() - self.end;
        let len = if large && missing > 0 {
            space.min(missing)
        } else if self.peek_len().is_none() {
            space.min(READ_TO_BOUNDARY_ABOVE)
        } else {
            space
        };
        &mut self.buf[self.end..self.end + len]
    }

    /// The buffer's first cache-line boundary (within it).
    fn origin(&self) -> usize {
        let pad = (RECEIVE_ALIGN - self.buf.as_ptr().addr() % RECEIVE_ALIGN) % RECEIVE_ALIGN;
        pad.min(self.buf.len())
    }

    /// Frees the receive buffer if nothing is buffered (an idle connection then holds none;
    /// the next [`RecordReader::read_buf`] allocates again).
    pub fn release_buffer(&mut self) {
        if self.buffered() == 0 {
            self.buf = Vec::new();
            self.start = 0;
            self.end = 0;
        }
    }

    /// Bytes of receive buffer currently allocated.
    pub fn buffer_capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Records that `n` bytes were written at the front of the last [`RecordReader::read_buf`].
    ///
    /// # Panics
    /// If `n` is more than that buffer's length.
    pub fn advance(&mut self, n: usize) {
        assert!(self.end + n <= self.buf.len(), "advance past read_buf");
        self.end += n;
    }

    /// Appends received bytes (for callers that already hold them in their own buffer).
    pub fn extend_from_slice(&mut self, data: &[u8]) {
        let mut data = data;
        while !data.is_empty() {
            let dst = self.read_buf();
            let n = dst.len().min(data.len());
            dst[..n].copy_from_slice(&data[..n]);
            self.advance(n);
            data = &data[n..];
        }
    }

    /// Opens the next complete record and returns its payload (borrowed from the reader until
    /// the next call); `Ok(None)` when more bytes are needed.
    pub fn next_record(&mut self) -> Result<Option<&[u8]>, RecordError> {
        if self.skipped {
            return Err(RecordError::Poisoned);
        }
        let avail = &self.buf[self.start..self.end];
        let Some(need) = self.opener.record_len(avail)? else {
            return Ok(None);
        };
        if avail.len() < need {
            return Ok(None);
        }
        let at = self.start;
        self.start += need;
        self.opener
            .open_in_place(&mut self.buf[at..at + need])
            .map(Some)
    }

    /// As [`RecordReader::next_record`], but a record of at least `min` payload bytes that is
    /// all the reader holds comes with the receive buffer itself ([`Opened::Buffer`]): the
    /// reader continues in `replacement()` (which may hold stale bytes; they are never
    /// returned), and the caller keeps the payload without copying it out.
    pub fn next_record_or_buffer(
        &mut self,
        min: usize,
        replacement: impl FnOnce() -> Vec<u8>,
    ) -> Result<Option<Opened<'_>>, RecordError> {
        let base = self.buf.as_ptr().addr();
        let payload = match self.next_record()? {
            None => return Ok(None),
            Some(p) => {
                let start = p.as_ptr().addr() - base;
                start..start + p.len()
            }
        };
        if payload.len() < min || self.start != self.end {
            return Ok(Some(Opened::InPlace(&self.buf[payload])));
        }
        let buf = std::mem::replace(&mut self.buf, replacement());
        self.start = 0;
        self.end = 0;
        Ok(Some(Opened::Buffer { buf, payload }))
    }

    /// Discards the next complete record *without authenticating it* and returns its payload
    /// length; `Ok(None)` when more bytes are needed.
    ///
    /// Only for load generators that count bytes and must not spend CPU on opening (the
    /// benchmark's cheap clients). Skipping breaks the nonce sequence, so from the first
    /// skipped record on `next_record` always fails with `Poisoned`.
    pub fn skip_record(&mut self) -> Result<Option<usize>, RecordError> {
        let avail = &self.buf[self.start..self.end];
        let Some(need) = self.opener.record_len(avail)? else {
            return Ok(None);
        };
        if avail.len() < need {
            return Ok(None);
        }
        self.start += need;
        self.skipped = true;
        Ok(Some(need - RECORD_OVERHEAD))
    }

    /// Call at end of stream: fails if a partial record is buffered (a truncated stream).
    pub fn finish(&self) -> Result<(), RecordError> {
        if self.opener.failed {
            return Err(RecordError::Poisoned);
        }
        let have = self.buffered();
        if have == 0 {
            return Ok(());
        }
        Err(RecordError::Truncated {
            have,
            need: self.peek_len().unwrap_or(HEADER_LEN),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `wire` the way a socket read would, `chunk` bytes per read.
    fn feed(r: &mut RecordReader, wire: &[u8], chunk: usize) {
        let mut at = 0;
        while at < wire.len() {
            let dst = r.read_buf();
            let n = dst.len().min(chunk).min(wire.len() - at);
            dst[..n].copy_from_slice(&wire[at..at + n]);
            r.advance(n);
            at += n;
        }
    }

    #[test]
    fn buffer_grows_with_arrived_bytes_not_the_announced_length() {
        let key = [5u8; 32];
        let max = 4 << 20;
        let mut s = Sealer::new(&key, max);
        let payload = vec![9u8; 3 << 20];
        let wire = s.seal(&payload).unwrap();
        let mut r = RecordReader::new(Opener::new(&key, max));
        // A header alone commits no more than the minimum read size.
        feed(&mut r, &wire[..4], 4);
        let _ = r.read_buf();
        assert!(
            r.buffer_capacity() <= 2 * MIN_READ,
            "a bare header allocated {} bytes",
            r.buffer_capacity()
        );
        // Growth stays within twice what arrived, and the record still opens.
        feed(&mut r, &wire[4..wire.len() / 2], 64 * 1024);
        assert!(r.buffer_capacity() <= 2 * r.buffered() + 2 * MIN_READ);
        feed(&mut r, &wire[wire.len() / 2..], 1 << 20);
        assert_eq!(r.next_record().unwrap(), Some(&payload[..]));
        // Once everything is consumed the buffer can be released, and reading resumes.
        r.release_buffer();
        assert_eq!(r.buffer_capacity(), 0);
        let again = s.seal(b"next").unwrap();
        feed(&mut r, &again, 3);
        assert_eq!(r.next_record().unwrap(), Some(&b"next"[..]));
    }

    #[test]
    fn a_large_record_is_read_to_its_end_and_the_next_starts_at_the_front() {
        let key = [6u8; 32];
        let mut s = Sealer::new(&key, 1 << 20);
        let mut wire = Vec::new();
        let big: Vec<u8> = (0..300_000u32).map(|i| i as u8).collect();
        s.seal_into(&big, &mut wire).unwrap();
        s.seal_into(&big[..200_000], &mut wire).unwrap();
        s.seal_into(b"small", &mut wire).unwrap();
        let first_len = big.len() + RECORD_OVERHEAD;
        let second_len = 200_000 + RECORD_OVERHEAD;
        let mut r = RecordReader::new(Opener::new(&key, 1 << 20));
        // A socket with everything already arrived: each read takes all it is offered.
        feed(&mut r, &wire[..first_len], usize::MAX);
        assert_eq!(r.next_record().unwrap(), Some(&big[..]));
        let capacity = r.buffer_capacity();
        // The next record is received from a cache-line boundary.
        assert_eq!(r.read_buf().as_ptr().addr() % RECEIVE_ALIGN, 0);
        // The buffer now has room for more than the next record; it is offered only the rest
        // of that record, so nothing of the one after it needs moving later.
        feed(&mut r, &wire[first_len..first_len + 1000], usize::MAX);
        assert_eq!(
            r.read_buf().len(),
            second_len - 1000,
            "read past the record's end"
        );
        feed(&mut r, &wire[first_len + 1000..], usize::MAX);
        assert_eq!(r.next_record().unwrap(), Some(&big[..200_000]));
        assert_eq!(r.next_record().unwrap(), Some(&b"small"[..]));
        assert_eq!(r.buffer_capacity(), capacity);
    }

    #[test]
    fn a_large_record_alone_comes_with_the_buffer_and_the_reader_goes_on_in_the_replacement() {
        let key = [8u8; 32];
        let mut s = Sealer::new(&key, 1 << 20);
        let big: Vec<u8> = (0..300_000u32).map(|i| (i ^ i >> 9) as u8).collect();
        let mut r = RecordReader::new(Opener::new(&key, 1 << 20));
        // Alone in the buffer (fed in pieces, as from a socket) and `min` bytes: handed over.
        feed(&mut r, &s.seal(&big).unwrap(), 70_000);
        let stale = vec![0xEE; 64 * 1024];
        let Some(Opened::Buffer { buf, payload }) =
            r.next_record_or_buffer(big.len(), || stale).unwrap()
        else {
            panic!("a large record alone was not handed over");
        };
        assert_eq!(&buf[payload], &big[..]);
        // The reader goes on in the replacement, none of its stale bytes showing.
        feed(&mut r, &s.seal(b"small").unwrap(), 2);
        assert_eq!(
            r.buffer_capacity(),
            64 * 1024,
            "the replacement is the reader's buffer"
        );
        let Some(Opened::InPlace(p)) = r.next_record_or_buffer(1000, Vec::new).unwrap() else {
            panic!("a small record was handed over");
        };
        assert_eq!(p, b"small");
        // Not alone (the next record's bytes behind it): opened in place, the next one intact.
        let mut wire = s.seal(&big).unwrap();
        s.seal_into(b"next", &mut wire).unwrap();
        r.extend_from_slice(&wire);
        let Some(Opened::InPlace(p)) = r.next_record_or_buffer(1000, Vec::new).unwrap() else {
            panic!("handed over with another record's bytes in it");
        };
        assert_eq!(p, &big[..]);
        assert_eq!(r.next_record().unwrap(), Some(&b"next"[..]));
        assert!(r.next_record_or_buffer(1000, Vec::new).unwrap().is_none());
    }

    #[test]
    fn no_read_runs_from_a_large_record_into_the_next() {
        let key = [4u8; 32];
        let mut s = Sealer::new(&key, 1 << 20);
        let wire = s.seal(&[1u8; 300_000]).unwrap();
        let mut r = RecordReader::new(Opener::new(&key, 1 << 20));
        // Even when little of it is missing.
        feed(&mut r, &wire[..wire.len() - 10], 1 << 20);
        assert_eq!(r.read_buf().len(), 10, "read past the record's end");
        feed(&mut r, &wire[wire.len() - 10..], 1 << 20);
        assert!(r.next_record().unwrap().is_some());
        // Nor before its header is known, though the buffer has room for a whole record.
        assert!(r.buffer_capacity() > 300_000);
        assert_eq!(r.read_buf().len(), READ_TO_BOUNDARY_ABOVE);
    }

    #[test]
    fn skipping_counts_payload_and_poisons_later_opens() {
        let key = [3u8; 32];
        let mut s = Sealer::new(&key, 1000);
        let mut wire = Vec::new();
        s.seal_into(b"first", &mut wire).unwrap();
        s.seal_into(&[7u8; 300], &mut wire).unwrap();
        s.seal_into(b"third", &mut wire).unwrap();
        let mut r = RecordReader::new(Opener::new(&key, 1000));
        r.extend_from_slice(&wire[..wire.len() - 1]);
        assert_eq!(r.next_record().unwrap(), Some(&b"first"[..]));
        assert_eq!(r.skip_record().unwrap(), Some(300));
        assert_eq!(r.skip_record().unwrap(), None, "last record is incomplete");
        r.extend_from_slice(&wire[wire.len() - 1..]);
        assert!(matches!(r.next_record(), Err(RecordError::Poisoned)));
        assert_eq!(r.skip_record().unwrap(), Some(5));
        // Oversized headers are still refused while skipping.
        r.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(r.skip_record().is_err());
    }

    #[test]
    fn deferred_seals_finished_out_of_order_open_in_nonce_order() {
        let key = [3u8; 32];
        let mut sealer = Sealer::new(&key, 1 << 16);
        let mut opener = Opener::new(&key, 1 << 16);
        let first = sealer.defer().unwrap();
        let inline = sealer.seal(b"middle").unwrap();
        let third = sealer.defer().unwrap();
        assert_eq!((first.counter(), third.counter()), (0, 2));
        assert_eq!(sealer.counter(), 3);
        let seal = |d: DeferredSeal, payload: &[u8]| {
            let mut out = Vec::new();
            let start = Sealer::new(&[0; 32], 16).begin(&mut out);
            out.extend_from_slice(payload);
            d.finish(&mut out, start).unwrap();
            out
        };
        // Sealed in the opposite order, on another thread.
        let last = std::thread::spawn(move || seal(third, b"last"))
            .join()
            .unwrap();
        let head = seal(first, b"first");
        assert_eq!(opener.open(&head).unwrap(), b"first");
        assert_eq!(opener.open(&inline).unwrap(), b"middle");
        assert_eq!(opener.open(&last).unwrap(), b"last");
        // A record sent out of its nonce order does not open.
        let mut sealer = Sealer::new(&key, 1 << 16);
        let mut opener = Opener::new(&key, 1 << 16);
        let skipped = sealer.defer().unwrap();
        let second = sealer.seal(b"second").unwrap();
        assert!(opener.open(&second).is_err());
        let _ = skipped;
    }

    #[test]
    fn each_cipher_opens_only_its_own_records() {
        let key = [7u8; 32];
        for cipher in [Cipher::ChaCha20Poly1305, Cipher::Aes256Gcm] {
            let other = match cipher {
                Cipher::ChaCha20Poly1305 => Cipher::Aes256Gcm,
                Cipher::Aes256Gcm => Cipher::ChaCha20Poly1305,
            };
            let r = Sealer::with_cipher(cipher, &key, 1 << 20)
                .seal(b"hello")
                .unwrap();
            let mut same = Opener::with_cipher(cipher, &key, 1 << 20);
            assert_eq!(same.open(&r).unwrap(), b"hello");
            let mut wrong = Opener::with_cipher(other, &key, 1 << 20);
            assert_eq!(wrong.open(&r), Err(RecordError::Authentication));
        }
    }

    #[test]
    fn a_key_seals_and_opens_no_more_than_its_cipher_allows() {
        assert_eq!(Cipher::Aes256Gcm.byte_limit(), 1 << 38);
        assert_eq!(Cipher::ChaCha20Poly1305.byte_limit(), u64::MAX);
        let key = [7u8; 32];
        let mut s = Sealer::with_cipher(Cipher::Aes256Gcm, &key, 1 << 20);
        let mut o = Opener::with_cipher(Cipher::Aes256Gcm, &key, 1 << 20);
        // As if 2^38 - 8 bytes had gone already.
        s.budget = 8;
        o.budget = 8;
        let r = s.seal(b"12345678").unwrap();
        assert_eq!(o.open(&r).unwrap(), b"12345678");
        assert_eq!(s.seal(b"x"), Err(RecordError::KeyLimit));
        assert_eq!(s.defer().err(), Some(RecordError::KeyLimit));
        // A peer sealing on regardless is refused.
        let mut beyond = Sealer::with_cipher(Cipher::Aes256Gcm, &key, 1 << 20);
        beyond.counter = 1;
        let r = beyond.seal(b"x").unwrap();
        assert_eq!(o.open(&r), Err(RecordError::KeyLimit));
        assert!(o.has_failed());
    }

    #[test]
    fn seal_then_open() {
        let key = [1u8; 32];
        let mut s = Sealer::new(&key, 100);
        let mut o = Opener::new(&key, 100);
        let r = s.seal(b"abc").unwrap();
        assert_eq!(r.len(), 3 + RECORD_OVERHEAD);
        assert_eq!(o.open(&r).unwrap(), b"abc");
        assert!(matches!(
            s.seal(&[0u8; 101]),
            Err(RecordError::TooLarge { len: 101, max: 100 })
        ));
    }

    #[test]
    fn reader_handles_byte_at_a_time_input() {
        let key = [2u8; 32];
        let mut s = Sealer::new(&key, 1000);
        let mut wire = Vec::new();
        for i in 0..5u8 {
            s.seal_into(&vec![i; usize::from(i) * 100], &mut wire)
                .unwrap();
        }
        let mut r = RecordReader::new(Opener::new(&key, 1000));
        let mut got = Vec::new();
        for b in wire {
            r.extend_from_slice(&[b]);
            while let Some(p) = r.next_record().unwrap() {
                got.push(p.to_vec());
            }
        }
        r.finish().unwrap();
        assert_eq!(got.len(), 5);
        for (i, p) in got.iter().enumerate() {
            assert_eq!(p, &vec![i as u8; i * 100]);
        }
    }
}
