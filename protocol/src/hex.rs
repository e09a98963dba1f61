//! Lower-case hexadecimal for key files and users files.
//!
//! Keys are written in hex rather than base64 because hex has exactly one spelling per key,
//! survives any editor or shell quoting, and needs no dependency.

/// Encodes bytes as lower-case hex.
pub(crate) fn encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out
}

/// Decodes exactly `N` bytes of hex (either case); `None` on any other input.
pub(crate) fn decode<const N: usize>(text: &str) -> Option<[u8; N]> {
    let bytes = text.as_bytes();
    if bytes.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (o, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        let hi = char::from(pair[0]).to_digit(16)?;
        let lo = char::from(pair[1]).to_digit(16)?;
        // Both digits are below 16, so the value fits in a byte.
        *o = u8::try_from(hi * 16 + lo).ok()?;
    }
    Some(out)
}

/// Shortens untrusted text for inclusion in an error message.
pub(crate) fn snippet(text: &str) -> String {
    text.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trip() {
        let b = [0u8, 1, 0xab, 0xff];
        assert_eq!(super::encode(&b), "0001abff");
        assert_eq!(super::decode::<4>("0001ABff"), Some(b));
        assert_eq!(super::decode::<4>("0001abf"), None);
        assert_eq!(super::decode::<4>("0001abfg"), None);
        assert_eq!(super::decode::<2>("+1+1"), None);
    }
}
