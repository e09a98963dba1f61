//! File handles: opaque to clients, unforgeable, stable across server restarts.
//!
//! Two layouts, told apart by their length:
//!
//! ```text
//! local[48]     = export_id u32be || device u64be || inode u64be || generation u64be
//!                 || HMAC-SHA-1(secret, "SFS-FH-1\0" || first 28 bytes)[20]
//! wrapped[49+n] = export_id u32be || device u64be || inode u64be || generation u64be
//!                 || n u8 || backend[n] || HMAC-SHA-1(secret, "SFS-FH-2\0" || first 29+n bytes)[20]
//! ```
//!
//! The server-side identity of the object travels in the clear inside the handle (so the server
//! keeps no handle table and handles survive restarts), and the MAC under a 32-byte server
//! secret that also survives restarts makes it impossible for a client to guess or alter one.
//! Verification is constant-time.
//!
//! The wrapped layout carries a storage backend's own handle (an NFSv3 `nfs_fh3`, 1 to 64
//! bytes, [`BACKEND_FH_MAX`]) when the server fronts another file server: the client can
//! neither read a meaningful backend handle out of it (it is opaque to the client either way)
//! nor make the server use a backend handle it did not issue, since the MAC covers it. The two
//! layouts have different MAC tags, so a local handle can never be re-read as a wrapped one.
//! Handles are at most [`MAX_HANDLE_LEN`] bytes.

use std::fmt;

use hmac::{Hmac, Mac};
use rand::RngCore;
use rand::rngs::OsRng;
use sha1::Sha1;

use crate::error::{HandleError, KeyError};
use crate::hex;

/// Bytes of a local file handle on the wire.
pub const HANDLE_LEN: usize = 48;
/// Longest backend handle a wrapped handle carries (NFSv3's `NFS3_FHSIZE`).
pub const BACKEND_FH_MAX: usize = 64;
/// Longest file handle of either layout.
pub const MAX_HANDLE_LEN: usize = BODY_LEN + 1 + BACKEND_FH_MAX + MAC_LEN;
/// Bytes of the handle's identity part.
const BODY_LEN: usize = 28;
/// Bytes of the MAC.
const MAC_LEN: usize = 20;
/// The domain tag the MAC of a local handle covers before the identity.
pub const HANDLE_TAG: &[u8] = b"SFS-FH-1\0";
/// The domain tag of a wrapped handle.
pub const WRAPPED_HANDLE_TAG: &[u8] = b"SFS-FH-2\0";

const SECRET_PREFIX: &str = "fh-secret:";

/// A storage backend's own handle for an object (1 to [`BACKEND_FH_MAX`] bytes), carried
/// inside a wrapped [`FileHandle`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct BackendFh {
    len: u8,
    bytes: [u8; BACKEND_FH_MAX],
}

impl BackendFh {
    /// Checks the length (1 to 64 bytes, as NFSv3 allows).
    pub fn new(bytes: &[u8]) -> Result<BackendFh, HandleError> {
        if bytes.is_empty() || bytes.len() > BACKEND_FH_MAX {
            return Err(HandleError::BadBackendLength(bytes.len()));
        }
        let mut out = [0u8; BACKEND_FH_MAX];
        out[..bytes.len()].copy_from_slice(bytes);
        Ok(BackendFh {
            len: bytes.len() as u8,
            bytes: out,
        })
    }

    /// The backend's bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl fmt::Debug for BackendFh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BackendFh({})", hex::encode(self.as_slice()))
    }
}

/// What a handle identifies on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HandleData {
    /// Which export the object belongs to.
    pub export_id: u32,
    /// The object's device number (a backend's file system id).
    pub device: u64,
    /// The object's inode number (a backend's file id).
    pub inode: u64,
    /// The inode's generation, so a reused inode number does not revive an old handle.
    pub generation: u64,
    /// The storage backend's own handle, when the server fronts another file server.
    pub backend: Option<BackendFh>,
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

    fn from_body(b: &[u8; BODY_LEN], backend: Option<BackendFh>) -> HandleData {
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
            backend,
        }
    }
}

/// An opaque file handle as it travels on the wire: 48 bytes (local) or 50 to
/// [`MAX_HANDLE_LEN`] bytes (wrapped). Bytes past `len` are always zero, so the derived
/// comparisons are those of the wire bytes; the hash is of the wire bytes alone (the
/// derived one hashed all [`MAX_HANDLE_LEN`]: the client's caches, keyed by handle, hash
/// several per directory entry, and a walk spent 7% of the mount's CPU in SipHash).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FileHandle {
    len: u8,
    bytes: [u8; MAX_HANDLE_LEN],
}

impl FileHandle {
    /// Wraps 48 bytes received from a peer (not yet verified).
    pub const fn from_bytes(b: [u8; HANDLE_LEN]) -> FileHandle {
        let mut bytes = [0u8; MAX_HANDLE_LEN];
        let mut i = 0;
        while i < HANDLE_LEN {
            bytes[i] = b[i];
            i += 1;
        }
        FileHandle {
            len: HANDLE_LEN as u8,
            bytes,
        }
    }

    /// Wraps a byte slice, checking only that its length is one a handle can have (not yet
    /// verified).
    pub fn from_slice(b: &[u8]) -> Result<FileHandle, HandleError> {
        let ok = b.len() == HANDLE_LEN || (HANDLE_LEN + 2..=MAX_HANDLE_LEN).contains(&b.len());
        if !ok {
            return Err(HandleError::BadLength(b.len()));
        }
        let mut bytes = [0u8; MAX_HANDLE_LEN];
        bytes[..b.len()].copy_from_slice(b);
        Ok(FileHandle {
            len: b.len() as u8,
            bytes,
        })
    }

    /// The wire bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl std::hash::Hash for FileHandle {
    /// As the wire bytes' slice: equal handles have equal bytes, so this agrees with `Eq`.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl fmt::Debug for FileHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FileHandle({})", hex::encode(self.as_bytes()))
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

    /// Makes the handle of `data` (wrapped when it carries a backend handle).
    pub fn seal(&self, data: &HandleData) -> FileHandle {
        let mut out = [0u8; MAX_HANDLE_LEN];
        out[..BODY_LEN].copy_from_slice(&data.body());
        let (tag, covered) = match &data.backend {
            None => (HANDLE_TAG, BODY_LEN),
            Some(b) => {
                let n = b.as_slice().len();
                out[BODY_LEN] = n as u8;
                out[BODY_LEN + 1..BODY_LEN + 1 + n].copy_from_slice(b.as_slice());
                (WRAPPED_HANDLE_TAG, BODY_LEN + 1 + n)
            }
        };
        let mut m = self.mac.clone();
        m.update(tag);
        m.update(&out[..covered]);
        out[covered..covered + MAC_LEN].copy_from_slice(&m.finalize().into_bytes());
        FileHandle {
            len: (covered + MAC_LEN) as u8,
            bytes: out,
        }
    }

    /// Checks `handle`'s MAC in constant time and returns what it identifies.
    pub fn verify(&self, handle: &FileHandle) -> Result<HandleData, HandleError> {
        let wire = handle.as_bytes();
        let (covered, tag) = wire.split_at(wire.len().saturating_sub(MAC_LEN));
        let domain = if covered.len() == BODY_LEN {
            HANDLE_TAG
        } else {
            // The length byte must say exactly what the handle's size says.
            let n = covered.len().saturating_sub(BODY_LEN + 1);
            if covered.len() < BODY_LEN + 2 || usize::from(covered[BODY_LEN]) != n {
                return Err(HandleError::BadLength(wire.len()));
            }
            WRAPPED_HANDLE_TAG
        };
        let mut m = self.mac.clone();
        m.update(domain);
        m.update(covered);
        m.verify_slice(tag).map_err(|_| HandleError::BadMac)?;
        let body: &[u8; BODY_LEN] = covered[..BODY_LEN].try_into().expect("length checked");
        let backend = if covered.len() == BODY_LEN {
            None
        } else {
            Some(BackendFh::new(&covered[BODY_LEN + 1..])?)
        };
        Ok(HandleData::from_body(body, backend))
    }

    /// Checks handle bytes of any length.
    pub fn verify_bytes(&self, bytes: &[u8]) -> Result<HandleData, HandleError> {
        self.verify(&FileHandle::from_slice(bytes)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handle hashes as its wire bytes (not its whole fixed-size buffer): equal handles
    /// alike, handles of different lengths apart.
    #[test]
    fn a_handle_hashes_as_its_wire_bytes() {
        use std::hash::{BuildHasher, BuildHasherDefault};
        let h = BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default();
        let local = FileHandle::from_slice(&[7; HANDLE_LEN]).unwrap();
        let wrapped = FileHandle::from_slice(&[7; HANDLE_LEN + 2]).unwrap();
        assert_eq!(h.hash_one(local), h.hash_one(local.as_bytes()));
        assert_eq!(h.hash_one(wrapped), h.hash_one(wrapped.as_bytes()));
        assert_ne!(h.hash_one(local), h.hash_one(wrapped));
    }

    #[test]
    fn seal_verify_and_tamper() {
        let k = HandleKey::new([1; 32]);
        let d = HandleData {
            export_id: 1,
            device: 2,
            inode: 3,
            generation: 4,
            backend: None,
        };
        let h = k.seal(&d);
        assert_eq!(k.verify(&h).unwrap(), d);
        for bit in 0..HANDLE_LEN * 8 {
            let mut b: [u8; HANDLE_LEN] = h.as_bytes().try_into().unwrap();
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

    #[test]
    fn wrapped_handles_carry_the_backend_handle_under_the_mac() {
        let k = HandleKey::new([1; 32]);
        for n in [1, 7, 28, BACKEND_FH_MAX] {
            let fh: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(37)).collect();
            let d = HandleData {
                export_id: 2,
                device: 5,
                inode: 6,
                generation: 0,
                backend: Some(BackendFh::new(&fh).unwrap()),
            };
            let h = k.seal(&d);
            assert_eq!(h.as_bytes().len(), BODY_LEN + 1 + n + MAC_LEN);
            assert_eq!(k.verify(&h).unwrap(), d);
            assert_eq!(k.verify_bytes(h.as_bytes()).unwrap(), d);
            // Every bit of it is covered.
            for bit in 0..h.as_bytes().len() * 8 {
                let mut b = h.as_bytes().to_vec();
                b[bit / 8] ^= 1 << (bit % 8);
                assert!(
                    k.verify_bytes(&b).is_err(),
                    "bit {bit} flipped still verifies"
                );
            }
            // Cut short or extended, it no longer verifies.
            let b = h.as_bytes();
            assert!(k.verify_bytes(&b[..b.len() - 1]).is_err());
            let mut longer = b.to_vec();
            longer.push(0);
            assert!(k.verify_bytes(&longer).is_err());
        }
        assert!(BackendFh::new(&[]).is_err());
        assert!(BackendFh::new(&[0; BACKEND_FH_MAX + 1]).is_err());
        assert!(FileHandle::from_slice(&[0; MAX_HANDLE_LEN + 1]).is_err());
        assert!(FileHandle::from_slice(&[0; HANDLE_LEN + 1]).is_err());
    }

    #[test]
    fn a_wrapped_handle_whose_length_byte_lies_is_refused_even_under_a_good_mac() {
        // Only the key's holder can make a MAC that verifies, so this is defence in depth:
        // the length byte must agree with the handle's size, and a backend part is never empty.
        let k = HandleKey::new([4; 32]);
        let body = [9u8; BODY_LEN];
        let with_good_mac = |length_byte: u8, backend: &[u8]| {
            let mut covered = body.to_vec();
            covered.push(length_byte);
            covered.extend_from_slice(backend);
            let mut m = k.mac.clone();
            m.update(WRAPPED_HANDLE_TAG);
            m.update(&covered);
            covered.extend_from_slice(&m.finalize().into_bytes());
            covered
        };
        let honest = with_good_mac(3, &[1, 2, 3]);
        assert!(
            k.verify_bytes(&honest).is_ok(),
            "the construction itself is right"
        );
        for lie in [0, 2, 4, 255] {
            let b = with_good_mac(lie, &[1, 2, 3]);
            assert_eq!(
                k.verify_bytes(&b),
                Err(HandleError::BadLength(b.len())),
                "{lie}"
            );
        }
        // An empty backend part (the length byte alone) is not a handle of either layout.
        let empty = with_good_mac(0, &[]);
        assert_eq!(
            k.verify(&FileHandle {
                len: empty.len() as u8,
                bytes: {
                    let mut b = [0u8; MAX_HANDLE_LEN];
                    b[..empty.len()].copy_from_slice(&empty);
                    b
                },
            }),
            Err(HandleError::BadLength(empty.len()))
        );
    }

    #[test]
    fn handle_bytes_round_trip_and_the_longest_handle_fits() {
        let b: [u8; HANDLE_LEN] = std::array::from_fn(|i| i as u8 + 1);
        assert_eq!(FileHandle::from_bytes(b).as_bytes(), &b[..]);
        // The longest wrapped handle: 28-byte body, length byte, 64-byte backend handle, MAC.
        assert_eq!(MAX_HANDLE_LEN, 113);
        assert!(FileHandle::from_slice(&[1; 113]).is_ok());
        // Debug shows a handle's bytes, and never a key's secret.
        assert_eq!(
            format!("{:?}", FileHandle::from_slice(&[0xab; 50]).unwrap()),
            format!("FileHandle({})", "ab".repeat(50))
        );
        assert_eq!(
            format!("{:?}", BackendFh::new(&[1, 2]).unwrap()),
            "BackendFh(0102)"
        );
        let secret = [0x5a; 32];
        let shown = format!("{:?}", HandleKey::new(secret));
        assert_eq!(shown, "HandleKey(..)");
        assert!(!shown.contains("5a"));
    }

    #[test]
    fn a_local_handle_is_never_read_as_a_wrapped_one() {
        // A wrapped handle whose backend part is 0 bytes would be as long as... nothing: the
        // shortest wrapped handle is 50 bytes. And the tags differ, so a local MAC never
        // verifies a wrapped body of the same bytes.
        let k = HandleKey::new([3; 32]);
        let local = k.seal(&HandleData {
            export_id: 1,
            device: 1,
            inode: 1,
            generation: 1,
            backend: None,
        });
        let mut b = local.as_bytes()[..BODY_LEN].to_vec();
        b.push(0);
        b.extend_from_slice(&local.as_bytes()[BODY_LEN..]);
        assert!(k.verify_bytes(&b).is_err());
    }
}
