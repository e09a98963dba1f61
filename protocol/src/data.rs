//! [`Data`]: a WRITE's bytes, which may be a window of the buffer they arrived in.

use std::fmt;
use std::ops::{Deref, Range};

/// The bytes of a WRITE: `buf[range]`.
///
/// A server decodes a large WRITE where its record was received and keeps the whole receive
/// buffer as the data ([`crate::Request::decode_owned`]), so a megabyte of data is not copied
/// out of the record it came in; [`Data::into_buffer`] gives the buffer back for the next
/// record. Everywhere else a `Data` is just bytes: `Vec<u8>` converts into one, and it
/// dereferences to `[u8]` (equality and `Debug` are the bytes').
#[derive(Clone, Default)]
pub struct Data {
    buf: Vec<u8>,
    range: Range<usize>,
}

impl Data {
    /// The bytes `buf[range]`.
    ///
    /// # Panics
    /// If `range` is not within `buf`.
    pub fn window(buf: Vec<u8>, range: Range<usize>) -> Data {
        assert!(
            range.start <= range.end && range.end <= buf.len(),
            "window {range:?} outside a buffer of {} bytes",
            buf.len()
        );
        Data { buf, range }
    }

    /// The buffer holding the bytes, whole (with whatever lies before and after them), for
    /// reuse.
    pub fn into_buffer(self) -> Vec<u8> {
        self.buf
    }
}

impl From<Vec<u8>> for Data {
    fn from(buf: Vec<u8>) -> Data {
        let range = 0..buf.len();
        Data { buf, range }
    }
}

impl Deref for Data {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.buf[self.range.clone()]
    }
}

impl PartialEq for Data {
    fn eq(&self, other: &Data) -> bool {
        **self == **other
    }
}

impl Eq for Data {}

impl fmt::Debug for Data {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_its_bytes_and_gives_back_the_whole_buffer() {
        let d = Data::window(b"headDATAtail".to_vec(), 4..8);
        assert_eq!(&*d, b"DATA");
        assert_eq!(d, Data::from(b"DATA".to_vec()));
        assert_ne!(d, Data::from(b"head".to_vec()));
        assert_eq!(format!("{d:?}"), format!("{:?}", b"DATA"));
        assert_eq!(d.into_buffer(), b"headDATAtail");
    }

    #[test]
    #[should_panic(expected = "outside a buffer")]
    fn a_window_past_the_buffer_is_refused() {
        let _ = Data::window(vec![0; 4], 2..5);
    }
}
