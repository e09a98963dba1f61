//! A bounded XDR reader for what an NFS server sends back.
//!
//! Arguments are packed with `nfs3_types` (our own data, sized by us). Replies are read here
//! instead of with `nfs3_types`' `Unpack`, because that allocates from wire lengths before
//! checking them (`Opaque` allocates `vec![0; len]` and `Vec<u32>` reserves `len` elements
//! for any 32-bit `len`): a broken or hostile backend could make sfsd allocate gigabytes. This
//! reader borrows every opaque field from the record, which is itself bounded before it is
//! read, and checks each length against the bytes left first.

/// A reply that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Malformed {
    #[error("reply ends inside {0}")]
    Short(&'static str),
    #[error("{what} is {len} bytes, more than its limit of {max}")]
    TooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("bad value {value} for {what}")]
    Bad { what: &'static str, value: u32 },
}

/// Reads XDR from a byte slice.
pub(crate) struct Xdr<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Xdr<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Xdr<'a> {
        Xdr { buf, pos: 0 }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The bytes not read yet.
    pub(crate) fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Malformed> {
        if n > self.remaining() {
            return Err(Malformed::Short(what));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, Malformed> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, Malformed> {
        let hi = u64::from(self.u32(what)?);
        let lo = u64::from(self.u32(what)?);
        Ok(hi << 32 | lo)
    }

    pub(crate) fn bool(&mut self, what: &'static str) -> Result<bool, Malformed> {
        match self.u32(what)? {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(Malformed::Bad { what, value }),
        }
    }

    /// Fixed-length opaque data of `N` bytes (padded to 4).
    pub(crate) fn fixed<const N: usize>(
        &mut self,
        what: &'static str,
    ) -> Result<[u8; N], Malformed> {
        let b = self.take(N.div_ceil(4) * 4, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(&b[..N]);
        Ok(out)
    }

    /// Variable-length opaque data of at most `max` bytes, borrowed from the reply.
    pub(crate) fn opaque(&mut self, max: usize, what: &'static str) -> Result<&'a [u8], Malformed> {
        let len = self.u32(what)? as usize;
        if len > max {
            return Err(Malformed::TooLong { what, len, max });
        }
        let b = self.take(len.div_ceil(4) * 4, what)?;
        Ok(&b[..len])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_are_checked_before_anything_is_taken() {
        // A length of 4 GiB - 1 in a 12-byte reply: refused, nothing allocated.
        let wire = [0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8];
        assert!(matches!(
            Xdr::new(&wire).opaque(usize::MAX, "x"),
            Err(Malformed::Short("x"))
        ));
        assert!(matches!(
            Xdr::new(&wire).opaque(64, "x"),
            Err(Malformed::TooLong {
                len: 0xffff_ffff,
                ..
            })
        ));
        let wire = [0, 0, 0, 3, b'a', b'b', b'c', 0, 0, 0, 0, 9];
        let mut r = Xdr::new(&wire);
        assert_eq!(r.opaque(3, "x").unwrap(), b"abc");
        assert_eq!(r.u32("y").unwrap(), 9);
        assert!(r.u32("z").is_err());
        assert!(Xdr::new(&[0, 0, 0, 2]).bool("b").is_err());
    }
}
