//! XDR (RFC 4506) encoding primitives, hand-written.
//!
//! The wire format follows XDR as SFS and NFS do: big-endian, every item a multiple of four bytes,
//! variable-length opaque data prefixed by a 32-bit length and zero-padded. Hand-written code keeps
//! the hostile-input rules in one place: the [`Reader`] checks every length against what is left
//! of the record *before* allocating, rejects non-zero padding (so each message has exactly one
//! encoding) and leaves the trailing-bytes check to [`Reader::finish`].
//!
//! The module is public so that every XDR reader of the project is this one: sfsd's NFS backend
//! reads its NFSv3 server's replies with [`Reader`] (`nfs3_types`' own decoder allocates from
//! wire lengths before checking them). Every failure is a [`DecodeError`] naming the field
//! (`what`) that did not decode, which a caller maps to its own errors.
//!
//! ```
//! use protocol::xdr::{put_opaque, put_u32, Reader};
//!
//! let mut wire = Vec::new();
//! put_u32(&mut wire, 7);
//! put_opaque(&mut wire, b"abc");
//! let mut r = Reader::new(&wire);
//! assert_eq!(r.u32("xid").unwrap(), 7);
//! assert_eq!(r.opaque(16, "name").unwrap(), b"abc");
//! r.finish().unwrap();
//! ```

use std::ops::Range;

use crate::data::Data;
use crate::error::DecodeError;

/// Bytes of zero padding needed after `len` bytes of opaque data.
#[inline]
pub const fn pad_len(len: usize) -> usize {
    (4 - (len & 3)) & 3
}

/// Appends a 32-bit unsigned integer.
#[inline]
pub fn put_u32(buf: &mut Vec<u8>, v: u32) {
    buf.extend_from_slice(&v.to_be_bytes());
}

/// Appends a 64-bit unsigned integer (XDR `unsigned hyper`).
#[inline]
pub fn put_u64(buf: &mut Vec<u8>, v: u64) {
    buf.extend_from_slice(&v.to_be_bytes());
}

/// Appends a 64-bit signed integer (XDR `hyper`).
#[inline]
pub fn put_i64(buf: &mut Vec<u8>, v: i64) {
    buf.extend_from_slice(&v.to_be_bytes());
}

/// Appends a boolean as a 32-bit 0 or 1.
#[inline]
pub fn put_bool(buf: &mut Vec<u8>, v: bool) {
    put_u32(buf, u32::from(v));
}

/// Appends fixed-length opaque data (no length prefix), padded.
#[inline]
pub fn put_fixed(buf: &mut Vec<u8>, data: &[u8]) {
    buf.extend_from_slice(data);
    put_padding(buf, data.len());
}

/// Appends variable-length opaque data: length, bytes, padding.
///
/// # Panics
/// If `data` is 4 GiB or longer, which no record can carry.
#[inline]
pub fn put_opaque(buf: &mut Vec<u8>, data: &[u8]) {
    let len = u32::try_from(data.len()).expect("opaque data longer than 4 GiB");
    put_u32(buf, len);
    put_fixed(buf, data);
}

/// Appends the zero padding that follows `len` bytes of opaque data.
#[inline]
pub fn put_padding(buf: &mut Vec<u8>, len: usize) {
    buf.extend_from_slice(&[0u8; 3][..pad_len(len)]);
}

/// Appends an array count.
///
/// # Panics
/// If `n` does not fit in 32 bits.
#[inline]
pub fn put_count(buf: &mut Vec<u8>, n: usize) {
    put_u32(buf, u32::try_from(n).expect("array longer than 2^32"));
}

/// A cursor over one record's bytes that never reads or allocates past its end.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    /// Where the one large field of a message (READ or WRITE data) goes.
    large: LargeField,
}

/// Where [`Reader::opaque_data`] puts the large field.
#[derive(Debug, Clone)]
enum LargeField {
    /// Into a new allocation.
    New,
    /// Into this buffer (cleared first; its allocation reused when large enough).
    Spare(Vec<u8>),
    /// Nowhere: the field decodes as empty and its place in the record is noted, for a caller
    /// that owns the record's buffer ([`Reader::located`]). `origin` is the address of the
    /// record's first byte.
    Locate {
        origin: usize,
        found: Option<Range<usize>>,
    },
}

impl<'a> Reader<'a> {
    /// Starts reading `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            large: LargeField::New,
        }
    }

    /// Starts reading `buf`, with `spare` to hold a large field instead of a new allocation.
    pub fn with_spare(buf: &'a [u8], spare: Vec<u8>) -> Self {
        Reader {
            buf,
            large: LargeField::Spare(spare),
        }
    }

    /// Starts reading `buf`, noting where READ or WRITE data lies instead of copying it.
    pub fn locating(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            large: LargeField::Locate {
                origin: buf.as_ptr().addr(),
                found: None,
            },
        }
    }

    /// Where in the record [`Reader::opaque_data`] found its bytes, when reading with
    /// [`Reader::locating`].
    pub fn located(&self) -> Option<Range<usize>> {
        match &self.large {
            LargeField::Locate { found, .. } => found.clone(),
            _ => None,
        }
    }

    /// Bytes not yet read.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// The bytes not read yet, without consuming them: for a caller that hands the rest of the
    /// record (an RPC reply's results, say) to another decoder.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        self.buf
    }

    /// Takes `n` bytes.
    #[inline]
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if n > self.buf.len() {
            return Err(DecodeError::UnexpectedEnd {
                what,
                needed: n,
                remaining: self.buf.len(),
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    /// Takes exactly `N` bytes as an array (no padding).
    #[inline]
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let bytes = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// Reads a 32-bit unsigned integer.
    #[inline]
    pub fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }

    /// Reads a 64-bit unsigned integer.
    #[inline]
    pub fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }

    /// Reads a 64-bit signed integer.
    #[inline]
    pub fn i64(&mut self, what: &'static str) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.array(what)?))
    }

    /// Reads a boolean, rejecting anything but 0 and 1.
    #[inline]
    pub fn bool(&mut self, what: &'static str) -> Result<bool, DecodeError> {
        match self.u32(what)? {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(DecodeError::BadBool { what, value }),
        }
    }

    /// Reads and checks the zero padding after `len` bytes of opaque data.
    #[inline]
    fn padding(&mut self, len: usize, what: &'static str) -> Result<(), DecodeError> {
        let pad = self.take(pad_len(len), what)?;
        if pad.iter().any(|&b| b != 0) {
            return Err(DecodeError::NonZeroPadding(what));
        }
        Ok(())
    }

    /// Reads fixed-length opaque data of `N` bytes plus padding.
    #[inline]
    pub fn fixed<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let out = self.array(what)?;
        self.padding(N, what)?;
        Ok(out)
    }

    /// Reads variable-length opaque data of at most `max` bytes, borrowed from the record.
    pub fn opaque(&mut self, max: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        let len = self.u32(what)? as usize;
        if len > max {
            return Err(DecodeError::LimitExceeded {
                what,
                len: len as u64,
                max: max as u64,
            });
        }
        if len > self.remaining() {
            return Err(DecodeError::LengthTooLarge {
                what,
                len: len as u64,
                remaining: self.remaining(),
            });
        }
        let data = self.take(len, what)?;
        self.padding(len, what)?;
        Ok(data)
    }

    /// Reads variable-length opaque data into an owned vector. The allocation is bounded by the
    /// record because the length was checked against what remains.
    pub fn opaque_vec(&mut self, max: usize, what: &'static str) -> Result<Vec<u8>, DecodeError> {
        self.opaque(max, what).map(<[u8]>::to_vec)
    }

    /// The one large field of a message (READ or WRITE data): copied into the spare buffer
    /// given to [`Reader::with_spare`] if any (cleared first; its allocation reused when large
    /// enough), else into a new allocation; with [`Reader::locating`] not copied at all
    /// (empty, its place noted for [`Reader::located`]).
    pub fn opaque_data(&mut self, max: usize, what: &'static str) -> Result<Data, DecodeError> {
        let bytes = self.opaque(max, what)?;
        if let LargeField::Locate { origin, found } = &mut self.large {
            let start = bytes.as_ptr().addr() - *origin;
            *found = Some(start..start + bytes.len());
            return Ok(Data::default());
        }
        Ok(self.copy_large(bytes).into())
    }

    /// `bytes` copied into the spare buffer if there is one, else into a new allocation.
    fn copy_large(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut out = match std::mem::replace(&mut self.large, LargeField::New) {
            LargeField::Spare(spare) => spare,
            other => {
                self.large = other;
                Vec::new()
            }
        };
        out.clear();
        out.extend_from_slice(bytes);
        out
    }

    /// Reads a UTF-8 string of at most `max` bytes.
    pub fn string(&mut self, max: usize, what: &'static str) -> Result<String, DecodeError> {
        let bytes = self.opaque(max, what)?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| DecodeError::BadUtf8(what))
    }

    /// Reads an array count and checks that `count` items of at least `min_item_size` bytes each
    /// can fit in the rest of the record, so `Vec::with_capacity(count)` is bounded by the record.
    pub fn count(
        &mut self,
        min_item_size: usize,
        what: &'static str,
    ) -> Result<usize, DecodeError> {
        let count = self.u32(what)? as usize;
        let need = count.saturating_mul(min_item_size.max(1));
        if need > self.remaining() {
            return Err(DecodeError::LengthTooLarge {
                what,
                len: count as u64,
                remaining: self.remaining(),
            });
        }
        Ok(count)
    }

    /// Reads an optional value (XDR `bool` discriminant then the value when true).
    pub fn option<T>(
        &mut self,
        what: &'static str,
        f: impl FnOnce(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<Option<T>, DecodeError> {
        if self.bool(what)? {
            f(self).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Ends decoding: the record must be fully consumed.
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes(self.buf.len()))
        }
    }
}

/// Appends an optional value as an XDR optional (bool + value).
pub fn put_option<T>(buf: &mut Vec<u8>, v: Option<&T>, f: impl FnOnce(&mut Vec<u8>, &T)) {
    match v {
        Some(v) => {
            put_bool(buf, true);
            f(buf, v);
        }
        None => put_bool(buf, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opaque_pads_and_round_trips() {
        let mut buf = Vec::new();
        put_opaque(&mut buf, b"abcde");
        assert_eq!(buf, [0, 0, 0, 5, b'a', b'b', b'c', b'd', b'e', 0, 0, 0]);
        let mut r = Reader::new(&buf);
        assert_eq!(r.opaque(100, "x").unwrap(), b"abcde");
        r.finish().unwrap();
    }

    #[test]
    fn rejects_nonzero_padding_and_overlong_lengths() {
        let buf = [0, 0, 0, 1, b'a', 0, 1, 0];
        assert_eq!(
            Reader::new(&buf).opaque(100, "x"),
            Err(DecodeError::NonZeroPadding("x"))
        );
        let buf = [0xff, 0xff, 0xff, 0xff, 0];
        assert!(matches!(
            Reader::new(&buf).opaque(usize::MAX, "x"),
            Err(DecodeError::LengthTooLarge { .. })
        ));
        // The caller's limit is checked before the record's length.
        assert!(matches!(
            Reader::new(&buf).opaque(64, "x"),
            Err(DecodeError::LimitExceeded {
                len: 0xffff_ffff,
                max: 64,
                ..
            })
        ));
        assert!(matches!(
            Reader::new(&buf).count(1, "x"),
            Err(DecodeError::LengthTooLarge { .. })
        ));
    }

    #[test]
    fn rest_is_what_is_left_and_consumes_nothing() {
        let mut r = Reader::new(&[0, 0, 0, 1, 9, 8]);
        assert_eq!(r.u32("n").unwrap(), 1);
        assert_eq!(r.rest(), [9, 8]);
        assert_eq!(r.remaining(), 2);
        assert_eq!(r.finish(), Err(DecodeError::TrailingBytes(2)));
    }

    #[test]
    fn rejects_bad_bool_and_trailing() {
        assert!(matches!(
            Reader::new(&[0, 0, 0, 2]).bool("b"),
            Err(DecodeError::BadBool { value: 2, .. })
        ));
        let mut r = Reader::new(&[0, 0, 0, 1, 9]);
        assert!(r.bool("b").unwrap());
        assert_eq!(r.finish(), Err(DecodeError::TrailingBytes(1)));
    }
}
