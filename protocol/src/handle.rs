//! File handles: opaque to clients, unforgeable, stable across server restarts.
//!
//! ```text
//! handle[48] = export_id u32be || device u64be || inode u64be || generation u64be
//!              || HMAC-SHA-1(secret, "SFS-FH-1\0" || first 28 bytes)[20]
//! ```
//!
//! The server-side identity of the object travels in the clear inside the handle (so the server
//! keeps no handle table and handles survive restarts), and the MAC under a 32-byte server
//! secret that also survives restarts makes it impossible for a client to guess or alter one.
//! Verification is constant-time.

use std::fmt;

use hmac::{Hmac, Mac};
use rand::RngCore;
use rand::rngs::OsRng;
use sha1::Sha1;

use crate::error::{HandleError, KeyError};
use crate::hex;

/// Bytes of a file handle on the wire.
pub const HANDLE_LEN: usize = 48;
/// Bytes of the handle's identity part.
const BODY_LEN: usize = 28;
/// The domain tag the MAC covers before the identity.
pub const HANDLE_TAG: &[u8] = b"SFS-FH-1\0";

const SECRET_PREFIX: &str = "fh-secret:";

/// What a handle identifies on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HandleData {
    /// Which export the object belongs to.
    pub export_id: u32,
    /// The object's device number.
    pub device: u64,
    /// The object's inode number.
    pub inode: u64,
    /// The inode's generation, so a reused inode number does not revive an old handle.
    pub generation: u64,
}

impl HandleData {
    fn body(&self) -> [u8; BODY_LEN] {
        let mut b = [0u8; BODY_LEN];
        b[0..4].copy_from_slice(&self.export_id.to_be_bytes());
        b[4..12].copy_from_slice(&self.device.to_be_bytes());
        b[12..20].copy_from_slice(&self.inode.to_be_bytes());
        b[20..28].copy_from_slice(&self.generation.to_be_bytes());
        b
    }

    fn from_body(b: &[u8; BODY_LEN]) -> HandleData {
        let u64_at = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i..i + 8]);
            u64::from_be_bytes(x)
        };
        HandleData {
            export_id: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            device: u64_at(4),
            inode: u64_at(12),
            generation: u64_at(20),
        }
    }
}

/// An opaque file handle as it travels on the wire.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileHandle([u8; HANDLE_LEN]);

impl FileHandle {
    /// Wraps 48 bytes received from a peer (not yet verified).
    pub const fn from_bytes(bytes: [u8; HANDLE_LEN]) -> FileHandle {
        FileHandle(bytes)
    }

    /// Wraps a byte slice, checking only its length (not yet verified).
    pub fn from_slice(bytes: &[u8]) -> Result<FileHandle, HandleError> {
        bytes
            .try_into()
            .map(FileHandle)
            .map_err(|_| HandleError::BadLength(bytes.len()))
    }

    /// The 48 wire bytes.
    pub const fn as_bytes(&self) -> &[u8; HANDLE_LEN] {
        &self.0
    }
}

impl fmt::Debug for FileHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FileHandle({})", hex::encode(&self.0))
    }
}

/// The server secret that makes handles unforgeable.
#[derive(Clone)]
pub struct HandleKey {
    mac: Hmac<Sha1>,
    secret: [u8; 32],
}

impl fmt::Debug for HandleKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HandleKey(..)")
    }
}

impl HandleKey {
    /// A key from a 32-byte secret (keep it across restarts so handles stay valid).
    pub fn new(secret: [u8; 32]) -> HandleKey {
        HandleKey {
            mac: Hmac::new_from_slice(&secret).expect("HMAC accepts any key length"),
            secret,
        }
    }

    /// A fresh random key.
    pub fn generate() -> HandleKey {
        let mut secret = [0u8; 32];
        OsRng.fill_bytes(&mut secret);
        HandleKey::new(secret)
    }

    /// The secret in one-line text form, `fh-secret:<64 hex>`, for the server's state file.
    pub fn to_text(&self) -> String {
        format!("{SECRET_PREFIX}{}", hex::encode(&self.secret))
    }

    /// Parses [`HandleKey::to_text`].
    pub fn from_text(text: &str) -> Result<HandleKey, KeyError> {
        let text = text.trim();
        let h = text
            .strip_prefix(SECRET_PREFIX)
            .ok_or_else(|| KeyError::BadPrefix {
                expected: SECRET_PREFIX,
                found: hex::snippet(text),
            })?;
        hex::decode::<32>(h)
            .map(HandleKey::new)
            .ok_or_else(|| KeyError::BadHex {
                expected: 64,
                found: hex::snippet(h),
            })
    }

    fn tag_mac(&self, body: &[u8; BODY_LEN]) -> Hmac<Sha1> {
        let mut m = self.mac.clone();
        m.update(HANDLE_TAG);
        m.update(body);
        m
    }

    /// Makes the handle of `data`.
    pub fn seal(&self, data: &HandleData) -> FileHandle {
        let body = data.body();
        let tag = self.tag_mac(&body).finalize().into_bytes();
        let mut out = [0u8; HANDLE_LEN];
        out[..BODY_LEN].copy_from_slice(&body);
        out[BODY_LEN..].copy_from_slice(&tag);
        FileHandle(out)
    }

    /// Checks `handle`'s MAC in constant time and returns what it identifies.
    pub fn verify(&self, handle: &FileHandle) -> Result<HandleData, HandleError> {
        let (body, tag) = handle.0.split_at(BODY_LEN);
        let body: &[u8; BODY_LEN] = body.try_into().expect("fixed split");
        self.tag_mac(body)
            .verify_slice(tag)
            .map_err(|_| HandleError::BadMac)?;
        Ok(HandleData::from_body(body))
    }

    /// Checks handle bytes of any length.
    pub fn verify_bytes(&self, bytes: &[u8]) -> Result<HandleData, HandleError> {
        self.verify(&FileHandle::from_slice(bytes)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_verify_and_tamper() {
        let k = HandleKey::new([1; 32]);
        let d = HandleData {
            export_id: 1,
            device: 2,
            inode: 3,
            generation: 4,
        };
        let h = k.seal(&d);
        assert_eq!(k.verify(&h).unwrap(), d);
        for bit in 0..HANDLE_LEN * 8 {
            let mut b = *h.as_bytes();
            b[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(
                k.verify(&FileHandle::from_bytes(b)),
                Err(HandleError::BadMac)
            );
        }
        assert_eq!(HandleKey::new([2; 32]).verify(&h), Err(HandleError::BadMac));
        assert_eq!(k.verify_bytes(&[0; 47]), Err(HandleError::BadLength(47)));
        let back = HandleKey::from_text(&k.to_text()).unwrap();
        assert_eq!(back.verify(&h).unwrap(), d);
    }
}
