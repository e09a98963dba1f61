//! The one error type of the crate.
//!
//! Every rejection says precisely what was wrong, because the people reading these messages are
//! either debugging an interoperable implementation or deciding whether a peer is hostile. The
//! error is grouped by layer so a caller can react per layer (a bad name is a usage error, a
//! record that fails to open ends the connection, a bad login only refuses that login).

use crate::name::HostId;

/// Any error the protocol crate reports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A self-certifying server name could not be parsed.
    #[error("invalid self-certifying name: {0}")]
    Name(#[from] NameError),
    /// A key (or key file) in text form could not be parsed.
    #[error("invalid key: {0}")]
    Key(#[from] KeyError),
    /// A message did not decode.
    #[error("malformed message: {0}")]
    Decode(#[from] DecodeError),
    /// The handshake failed; the connection must be closed.
    #[error("handshake failed: {0}")]
    Handshake(#[from] HandshakeError),
    /// The record layer failed; the connection must be closed.
    #[error("record layer failed: {0}")]
    Record(#[from] RecordError),
    /// A LOGIN was refused; only that login fails, the session goes on.
    #[error("login refused: {0}")]
    Login(#[from] LoginError),
    /// A file handle did not verify.
    #[error("bad file handle: {0}")]
    Handle(#[from] HandleError),
}

/// Why a self-certifying name (`@LOCATION,HOSTID[/path]`) was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    /// The name does not start with `@`.
    #[error("a self-certifying name starts with '@' (as in @host%port,hostid)")]
    MissingAt,
    /// There is no `,` separating the location from the HOSTID.
    #[error("missing ',' between the location and the HOSTID")]
    MissingComma,
    /// The host part is empty.
    #[error("the host is empty")]
    EmptyHost,
    /// The host is not a valid DNS name, IPv4 address or bracketed IPv6 address.
    #[error("invalid host {host:?}: {reason}")]
    InvalidHost {
        /// The host as written.
        host: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The port is not a decimal number in 1..=65535.
    #[error("invalid port {0:?}: expected a decimal number in 1..=65535 without leading zeros")]
    InvalidPort(String),
    /// The HOSTID has the wrong length.
    #[error("the HOSTID must be exactly 32 characters, got {0}")]
    HostIdLength(usize),
    /// The HOSTID contains a character outside the SFS base32 alphabet.
    #[error(
        "HOSTID character {ch:?} at position {pos} is not in the SFS base32 alphabet \
         (abcdefghijkmnpqrstuvwxyz23456789)"
    )]
    HostIdChar {
        /// The offending character.
        ch: char,
        /// Its position (in characters) inside the HOSTID.
        pos: usize,
    },
    /// The path after the HOSTID is not acceptable.
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath {
        /// The path as written.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// Why a key in text form was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key does not carry the expected algorithm prefix.
    #[error("expected a key of the form {expected}<64 hex digits>, got {found:?}")]
    BadPrefix {
        /// The prefix that was expected, e.g. `ed25519:`.
        expected: &'static str,
        /// What was found instead (truncated).
        found: String,
    },
    /// The hex part is not 64 hexadecimal digits.
    #[error("expected {expected} hex digits, got {found:?}")]
    BadHex {
        /// Number of hex digits expected.
        expected: usize,
        /// What was found instead (truncated).
        found: String,
    },
    /// The bytes are not a valid Ed25519 public key (not a curve point).
    #[error("not a valid Ed25519 public key (not a point on the curve)")]
    InvalidEd25519,
    /// A required line is missing from a key file.
    #[error("key file has no {0:?} line")]
    MissingLine(&'static str),
    /// A line of a key file is not understood.
    #[error("key file line {line} not understood: {text:?}")]
    UnknownLine {
        /// 1-based line number.
        line: usize,
        /// The line (truncated).
        text: String,
    },
    /// The public key written in a key file is not the one derived from its secret key.
    #[error("the public key in the key file does not match its secret key")]
    PublicMismatch,
}

/// Why a message could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// A file handle has a length no handle layout has.
    #[error("file handle of {0} bytes (handles are 48 or 50 to 113 bytes)")]
    BadHandleLength(usize),
    /// The record ended inside a field.
    #[error("record ends inside {what}: {needed} bytes needed, {remaining} left")]
    UnexpectedEnd {
        /// The field being read.
        what: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left in the record.
        remaining: usize,
    },
    /// Bytes were left after the message.
    #[error("{0} trailing bytes after the message")]
    TrailingBytes(usize),
    /// A length or count cannot fit in what is left of the record.
    #[error("{what} declares {len} items/bytes but only {remaining} bytes are left in the record")]
    LengthTooLarge {
        /// The field being read.
        what: &'static str,
        /// Declared length or count.
        len: u64,
        /// Bytes left in the record.
        remaining: usize,
    },
    /// A length exceeds the protocol's limit for that field.
    #[error("{what} is {len} bytes, more than the limit of {max}")]
    LimitExceeded {
        /// The field being read.
        what: &'static str,
        /// Its length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// An enumeration or union discriminant has no meaning.
    #[error("unknown {what} {value}")]
    BadDiscriminant {
        /// The enumeration being read.
        what: &'static str,
        /// The value found.
        value: u32,
    },
    /// XDR padding bytes were not zero.
    #[error("non-zero XDR padding after {0}")]
    NonZeroPadding(&'static str),
    /// A boolean was neither 0 nor 1.
    #[error("boolean {what} is {value}, not 0 or 1")]
    BadBool {
        /// The field being read.
        what: &'static str,
        /// The value found.
        value: u32,
    },
    /// A string field is not UTF-8.
    #[error("{0} is not valid UTF-8")]
    BadUtf8(&'static str),
    /// A time has a nanosecond field of one second or more.
    #[error("time has {0} nanoseconds (must be below 1000000000)")]
    BadNanos(u32),
    /// A public key inside a message is not a valid key.
    #[error("{0} is not a valid Ed25519 public key")]
    BadPublicKey(&'static str),
    /// An extended attribute name is empty or holds a NUL byte.
    #[error("extended attribute name is empty or holds a NUL byte")]
    BadXattrName,
}

/// Why a handshake failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// A handshake frame declared a length beyond the handshake limit: the peer is not speaking
    /// this protocol.
    #[error("handshake frame of {len} bytes exceeds the limit of {max} (peer is not an sfs peer?)")]
    FrameTooLarge {
        /// Declared frame length.
        len: usize,
        /// Largest acceptable frame.
        max: usize,
    },
    /// The server's first frame does not carry the protocol magic.
    #[error("server's key message has wrong magic or length (not an sfs server?)")]
    BadServerKeyMessage,
    /// The server's key message differs from the key remembered for its name (which was
    /// checked against the name's HOSTID): whoever answers does not hold the name's key.
    #[error("server's key differs from the one its name certifies (not the named server)")]
    ServerKeyChanged,
    /// The server's static key does not hash to the HOSTID in the name.
    #[error(
        "server key does not match the name: the name's HOSTID is {expected} but the server's \
         key gives {actual} (wrong server, or an attacker)"
    )]
    HostIdMismatch {
        /// The HOSTID from the server name.
        expected: HostId,
        /// The HOSTID computed from the key the server presented.
        actual: HostId,
    },
    /// The client's first Noise message did not decrypt.
    #[error(
        "client's handshake message does not authenticate: it was made for a different server key, \
         or the peer is not an sfs client"
    )]
    ClientMessageRejected,
    /// The server's Noise reply did not decrypt.
    #[error(
        "server's handshake reply does not authenticate: the server does not hold the key of its name"
    )]
    ServerMessageRejected,
    /// The server refused all the protocol versions the client offered.
    #[error("no common protocol version: client offers {client:?}, server supports {server:?}")]
    VersionRefused {
        /// Versions the client offered.
        client: Vec<u32>,
        /// Versions the server supports.
        server: Vec<u32>,
    },
    /// The server chose a version the client did not offer.
    #[error("server chose protocol version {0}, which the client did not offer")]
    UnofferedVersion(u32),
    /// A handshake payload did not decode.
    #[error("bad handshake payload: {0}")]
    BadPayload(DecodeError),
    /// The peer advertised a maximum record size below the protocol minimum.
    #[error("peer's maximum record payload {got} is below the protocol minimum {min}")]
    RecordLimitTooSmall {
        /// Advertised maximum.
        got: u32,
        /// Protocol minimum.
        min: u32,
    },
    /// The session was requested before the handshake finished.
    #[error("handshake is not finished")]
    NotFinished,
    /// An internal Noise error (should not happen with well-formed state).
    #[error("noise: {0}")]
    Noise(String),
}

/// Why the record layer failed. Any of these ends the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// A record header declares a payload larger than the receiver accepts.
    #[error("record of {len} payload bytes exceeds the maximum of {max}")]
    TooLarge {
        /// Declared payload length.
        len: usize,
        /// Maximum accepted.
        max: usize,
    },
    /// A record failed authentication.
    #[error("record failed authentication: tampered, reordered, replayed or from another session")]
    Authentication,
    /// The stream ended inside a record.
    #[error("stream ended inside a record: {have} of {need} bytes received")]
    Truncated {
        /// Bytes received of the record.
        have: usize,
        /// Bytes the record needs.
        need: usize,
    },
    /// The buffer passed to open is not exactly one record.
    #[error("buffer of {have} bytes is not one record of {need} bytes")]
    WrongLength {
        /// Bytes passed.
        have: usize,
        /// Bytes the record occupies according to its header.
        need: usize,
    },
    /// The 64-bit record counter is exhausted.
    #[error("record counter exhausted: the session must be re-established")]
    CounterExhausted,
    /// The direction's key has sealed as many bytes as its cipher safely allows
    /// ([`crate::record::AES_GCM_BYTE_LIMIT`]).
    #[error(
        "the record key has sealed all its cipher safely allows: the session must be re-established"
    )]
    KeyLimit,
    /// An earlier record failed, so this direction is unusable.
    #[error("an earlier record failed; the connection must be closed")]
    Poisoned,
}

/// Why a LOGIN was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoginError {
    /// The signature does not verify.
    #[error(
        "signature does not verify for this user name, key, sequence number, session and HOSTID"
    )]
    BadSignature,
    /// The sequence number was used before in this session.
    #[error("sequence number {0} was already used in this session (replay)")]
    Replayed(u64),
    /// The sequence number is too far behind the highest one seen to be checked for replay.
    #[error("sequence number {seqno} is too old: the highest seen is {highest}")]
    TooOld {
        /// The sequence number offered.
        seqno: u64,
        /// The highest sequence number seen in this session.
        highest: u64,
    },
    /// The user name is empty, too long or contains control characters.
    #[error("invalid user name: {0}")]
    BadUserName(&'static str),
    /// The session already has as many logins as it may hold.
    #[error("too many logins on this session (limit {0})")]
    TooManyLogins(usize),
}

/// Why a file handle was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandleError {
    /// The handle has the wrong size.
    #[error("file handle is {0} bytes, expected 48 or 50 to 113")]
    BadLength(usize),
    /// A storage backend's handle is empty or longer than 64 bytes.
    #[error("backend file handle is {0} bytes, expected 1 to 64")]
    BadBackendLength(usize),
    /// The handle's MAC does not verify.
    #[error(
        "file handle MAC does not verify: forged, altered, or issued under another server secret"
    )]
    BadMac,
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
