//! Self-certifying server names: `@LOCATION,HOSTID[/path]`.
//!
//! As in SFS, the name of a server carries a hash of its public key, so a client that has the
//! name needs no certificate authority: the handshake proves the server holds a key that hashes
//! to the HOSTID. The location is part of the hash, so a key cannot be replayed under another
//! host name.
//!
//! ```text
//! HOSTID = SHA-1( "SFS-HOSTID-1\0" || u32be(len(loc)) || loc || x25519_public_key[32] )
//! ```
//! where `loc` is the *canonical* location `host%port` (port always written, host in lower
//! case), printed as 32 characters of the SFS base32 alphabet, most significant bit first.

use std::fmt;
use std::net::Ipv6Addr;
use std::str::FromStr;

use sha1::{Digest, Sha1};

use crate::error::{HandshakeError, NameError};

/// The TCP port a location without `%port` means.
pub const DEFAULT_PORT: u16 = 4004;

/// The SFS base32 alphabet: digits and lower-case letters without the easily confused
/// `0`, `1`, `l` and `o`.
pub const BASE32_ALPHABET: &[u8; 32] = b"abcdefghijkmnpqrstuvwxyz23456789";

/// The domain tag that starts the HOSTID hash input.
pub const HOSTID_TAG: &[u8] = b"SFS-HOSTID-1\0";

/// Bytes in a HOSTID (a SHA-1 digest).
pub const HOSTID_LEN: usize = 20;

/// Characters in a printed HOSTID (160 bits / 5 bits per character).
pub const HOSTID_CHARS: usize = 32;

/// Bytes of an X25519 public key.
pub const PUBLIC_KEY_LEN: usize = 32;

/// The 160-bit hash naming a server key at a location.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostId([u8; HOSTID_LEN]);

impl HostId {
    /// Computes the HOSTID of `public_key` served at `location`.
    pub fn compute(location: &Location, public_key: &[u8; PUBLIC_KEY_LEN]) -> HostId {
        let loc = location.canonical();
        let loc_len = u32::try_from(loc.len()).expect("location longer than 4 GiB");
        let mut h = Sha1::new();
        h.update(HOSTID_TAG);
        h.update(loc_len.to_be_bytes());
        h.update(loc.as_bytes());
        h.update(public_key);
        HostId(h.finalize().into())
    }

    /// Wraps raw HOSTID bytes.
    pub const fn from_bytes(bytes: [u8; HOSTID_LEN]) -> HostId {
        HostId(bytes)
    }

    /// The raw 20 bytes (as hashed into LOGIN signatures).
    pub const fn as_bytes(&self) -> &[u8; HOSTID_LEN] {
        &self.0
    }
}

impl fmt::Display for HostId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // 160 bits, 5 at a time, most significant first.
        let mut acc: u32 = 0;
        let mut bits = 0;
        let mut out = String::with_capacity(HOSTID_CHARS);
        for &b in &self.0 {
            acc = (acc << 8) | u32::from(b);
            bits += 8;
            while bits >= 5 {
                bits -= 5;
                out.push(char::from(BASE32_ALPHABET[((acc >> bits) & 31) as usize]));
            }
        }
        f.write_str(&out)
    }
}

impl fmt::Debug for HostId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostId({self})")
    }
}

impl FromStr for HostId {
    type Err = NameError;

    fn from_str(s: &str) -> Result<Self, NameError> {
        let n = s.chars().count();
        if n != HOSTID_CHARS {
            return Err(NameError::HostIdLength(n));
        }
        let mut out = [0u8; HOSTID_LEN];
        let mut acc: u32 = 0;
        let mut bits = 0;
        let mut i = 0;
        for (pos, ch) in s.chars().enumerate() {
            let v = BASE32_ALPHABET
                .iter()
                .position(|&a| char::from(a) == ch)
                .ok_or(NameError::HostIdChar { ch, pos })?;
            acc = (acc << 5) | v as u32;
            bits += 5;
            if bits >= 8 {
                bits -= 8;
                out[i] = (acc >> bits) as u8;
                i += 1;
            }
        }
        Ok(HostId(out))
    }
}

/// Where a server is reached: a host (DNS name, IPv4 address or bracketed IPv6 address) and a
/// TCP port.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Location {
    host: String,
    port: u16,
}

impl Location {
    /// Validates and normalises (lower-cases) `host`.
    pub fn new(host: &str, port: u16) -> Result<Location, NameError> {
        if port == 0 {
            return Err(NameError::InvalidPort("0".into()));
        }
        Ok(Location {
            host: normalize_host(host)?,
            port,
        })
    }

    /// The host, normalised (lower case; IPv6 in brackets, compressed form).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The host as a socket address string usable with `ToSocketAddrs` (`host:port`).
    pub fn socket_addr_string(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The canonical form hashed into the HOSTID: `host%port`, port always present.
    pub fn canonical(&self) -> String {
        format!("{}%{}", self.host, self.port)
    }
}

impl fmt::Display for Location {
    /// `host` when the port is the default 4004, else `host%port`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.port == DEFAULT_PORT {
            f.write_str(&self.host)
        } else {
            write!(f, "{}%{}", self.host, self.port)
        }
    }
}

impl FromStr for Location {
    type Err = NameError;

    /// Parses `host` or `host%port`.
    fn from_str(s: &str) -> Result<Self, NameError> {
        let (host, port) = match s.rsplit_once('%') {
            Some((h, p)) => (h, parse_port(p)?),
            None => (s, DEFAULT_PORT),
        };
        Location::new(host, port)
    }
}

fn parse_port(p: &str) -> Result<u16, NameError> {
    let bad = || NameError::InvalidPort(crate::hex::snippet(p));
    if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) || p.starts_with('0') {
        return Err(bad());
    }
    match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(bad()),
        Ok(v) => Ok(v),
    }
}

fn normalize_host(host: &str) -> Result<String, NameError> {
    let invalid = |reason| NameError::InvalidHost {
        host: crate::hex::snippet(host),
        reason,
    };
    if host.is_empty() {
        return Err(NameError::EmptyHost);
    }
    if let Some(inner) = host.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| invalid("'[' without closing ']'"))?;
        let addr: Ipv6Addr = inner
            .parse()
            .map_err(|_| invalid("not an IPv6 address inside [ ]"))?;
        return Ok(format!("[{addr}]"));
    }
    if host.len() > 253 {
        return Err(invalid("longer than 253 characters"));
    }
    for label in host.split('.') {
        if label.is_empty() {
            return Err(invalid("empty label (leading, trailing or doubled '.')"));
        }
        if label.len() > 63 {
            return Err(invalid("a label is longer than 63 characters"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(invalid("only letters, digits, '-' and '.' are allowed"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(invalid("a label starts or ends with '-'"));
        }
    }
    Ok(host.to_ascii_lowercase())
}

/// A self-certifying server name, `@LOCATION,HOSTID[/path]`.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct ServerName {
    location: Location,
    host_id: HostId,
    path: Option<String>,
}

impl ServerName {
    /// A name from its parts, without a path.
    pub fn new(location: Location, host_id: HostId) -> ServerName {
        ServerName {
            location,
            host_id,
            path: None,
        }
    }

    /// The name of the server holding `public_key` at `location`.
    pub fn for_key(location: Location, public_key: &[u8; PUBLIC_KEY_LEN]) -> ServerName {
        let host_id = HostId::compute(&location, public_key);
        ServerName::new(location, host_id)
    }

    /// The same name with a path below the server's root (must start with `/`).
    pub fn with_path(mut self, path: &str) -> Result<ServerName, NameError> {
        check_path(path)?;
        self.path = Some(path.to_owned());
        Ok(self)
    }

    /// Where the server is reached.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// The normalised host.
    pub fn host(&self) -> &str {
        self.location.host()
    }

    /// The TCP port (4004 unless given).
    pub fn port(&self) -> u16 {
        self.location.port()
    }

    /// The HOSTID the server's key must hash to.
    pub fn host_id(&self) -> HostId {
        self.host_id
    }

    /// The path after the HOSTID, if any (starts with `/`).
    pub fn path(&self) -> Option<&str> {
        self.path.as_deref()
    }

    /// The name without its path: what identifies the server.
    pub fn without_path(&self) -> ServerName {
        ServerName::new(self.location.clone(), self.host_id)
    }

    /// Checks that `public_key` is the key this name certifies.
    pub fn verify_key(&self, public_key: &[u8; PUBLIC_KEY_LEN]) -> Result<(), HandshakeError> {
        let actual = HostId::compute(&self.location, public_key);
        // Both values are public; a constant-time comparison is not needed.
        if actual == self.host_id {
            Ok(())
        } else {
            Err(HandshakeError::HostIdMismatch {
                expected: self.host_id,
                actual,
            })
        }
    }
}

fn check_path(path: &str) -> Result<(), NameError> {
    let invalid = |reason| NameError::InvalidPath {
        path: crate::hex::snippet(path),
        reason,
    };
    if !path.starts_with('/') {
        return Err(invalid("must start with '/'"));
    }
    if path.chars().any(char::is_control) {
        return Err(invalid("contains control characters"));
    }
    Ok(())
}

impl fmt::Display for ServerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "@{},{}", self.location, self.host_id)?;
        if let Some(p) = &self.path {
            f.write_str(p)?;
        }
        Ok(())
    }
}

impl FromStr for ServerName {
    type Err = NameError;

    fn from_str(s: &str) -> Result<Self, NameError> {
        let rest = s.strip_prefix('@').ok_or(NameError::MissingAt)?;
        let (loc, rest) = rest.split_once(',').ok_or(NameError::MissingComma)?;
        let location: Location = loc.parse()?;
        let (id, path) = match rest.find('/') {
            Some(i) => (&rest[..i], Some(&rest[i..])),
            None => (rest, None),
        };
        let host_id: HostId = id.parse()?;
        let name = ServerName::new(location, host_id);
        match path {
            Some(p) => name.with_path(p),
            None => Ok(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base32_round_trip_and_bit_order() {
        let id = HostId::from_bytes([0; 20]);
        assert_eq!(id.to_string(), "a".repeat(32));
        let mut b = [0u8; 20];
        b[0] = 0x80;
        assert_eq!(
            HostId::from_bytes(b).to_string(),
            format!("s{}", "a".repeat(31))
        );
        b = [0xff; 20];
        assert_eq!(HostId::from_bytes(b).to_string(), "9".repeat(32));
        let id = HostId::from_bytes(*b"0123456789abcdefghij");
        assert_eq!(id.to_string().parse::<HostId>().unwrap(), id);
    }

    #[test]
    fn default_port_is_elided_but_hashed() {
        let key = [7u8; 32];
        let a = ServerName::for_key("Example.COM".parse().unwrap(), &key);
        let b = ServerName::for_key("example.com%4004".parse().unwrap(), &key);
        assert_eq!(a, b);
        assert!(a.to_string().starts_with("@example.com,"));
        let c = ServerName::for_key("example.com%4005".parse().unwrap(), &key);
        assert_ne!(a.host_id(), c.host_id());
        assert!(c.to_string().starts_with("@example.com%4005,"));
    }
}
