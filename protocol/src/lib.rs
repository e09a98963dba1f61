//! The sans-IO wire protocol of `sfs` (client) and `sfsd` (server).
//!
//! Everything that crosses the wire, as pure functions and state machines over bytes: no
//! sockets, no threads, no runtime. Both sides, the benchmarks and the fuzzers use this code, and
//! `docs/PROTOCOL.md` describes the same format byte by byte.
//!
//! A connection goes through these layers:
//!
//! 1. **Names** ([`name`]): the client starts from a self-certifying name
//!    `@host%port,HOSTID`; the HOSTID is a hash of the server's public key.
//! 2. **Handshake** ([`handshake`]): [`ServerHandshake`] and [`ClientHandshake`] exchange three
//!    messages (server key, Noise NK) and yield a [`Session`]: session id, negotiated version and
//!    one [`Sealer`] and one [`Opener`], which can go to different threads. Both are one
//!    sans-IO machine, [`handshake::Handshake`]; [`handshake::complete`] drives it over a
//!    blocking `Read + Write` stream.
//! 3. **Records** ([`record`]): every later message is one sealed, length-prefixed record;
//!    [`RecordReader`] cuts a byte stream into opened records without copying payloads.
//! 4. **Messages** ([`message`]): [`Request`] from client to server, [`ServerMessage`] (a
//!    [`Reply`] or an [`Invalidate`]) from server to client.
//! 5. **Login** ([`login`]): users prove an Ed25519 key with a LOGIN request bound to the
//!    session; the server gets an authno for their later requests.
//! 6. **Handles** ([`handle`]): opaque, MACed file handles.
//!
//! Each end's connection puts layers 2 to 5 together over bytes: [`ServerConnection`]
//! ([`server`]: phase, requests out as events, LOGIN verification, the authno table, sealing)
//! and [`ClientConnection`] ([`client`]: request ids, sealing, LOGIN signing, messages out).
//!
//! ```
//! use protocol::*;
//!
//! // Server side, once: a key and its name.
//! let server_key = ServerKeypair::generate();
//! let name = server_key.server_name("localhost".parse().unwrap());
//!
//! // Per connection: drive both handshakes (here in memory).
//! let mut client = ClientHandshake::new(&name);
//! let mut server = ServerHandshake::new(&server_key);
//! handshake::pump(&mut client, &mut server).unwrap();
//! let mut c = client.into_session().unwrap();
//! let mut s = server.into_session().unwrap();
//!
//! // The client sends a request, encoded straight into the record buffer.
//! let mut wire = Vec::new();
//! let rec = c.sealer.begin(&mut wire);
//! Request { id: 1, authno: ANONYMOUS, op: RequestOp::Null }.encode_into(&mut wire);
//! c.sealer.finish(&mut wire, rec).unwrap();
//!
//! // The server opens and decodes it.
//! let mut reader = RecordReader::new(s.opener);
//! reader.extend_from_slice(&wire);
//! let payload = reader.next_record().unwrap().unwrap();
//! let req = Request::decode(payload).unwrap();
//! assert_eq!(req.op, RequestOp::Null);
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod attr;
pub mod client;
pub mod data;
pub mod error;
#[cfg(feature = "testing")]
pub mod fuzzing;
pub mod handle;
pub mod handshake;
mod hex;
pub mod keys;
pub mod lock;
pub mod login;
pub mod message;
pub mod name;
pub mod record;
pub mod reply;
pub mod request;
pub mod sequence;
pub mod server;
pub mod status;
pub mod xattr;
pub mod xdr;

pub use attr::{Attr, FileType, SetAttr, SetTime, Time};
pub use client::{ClientConnection, ConnectionError};
pub use data::Data;
pub use error::{
    DecodeError, Error, HandleError, HandshakeError, KeyError, LoginError, NameError, RecordError,
    Result,
};
pub use handle::{BackendFh, FileHandle, HANDLE_LEN, HandleData, HandleKey, MAX_HANDLE_LEN};
pub use handshake::{
    ClientHandshake, HandshakeConfig, PROTOCOL_VERSION, SESSIONS_VERSION, SUPPORTED_VERSIONS,
    ServerHandshake, Session,
};
pub use keys::{ServerKeypair, UserKeypair, UserPublicKey};
pub use lock::{LockArgs, LockConflict, LockKind, TestLockArgs, UnlockArgs};
pub use login::{ANONYMOUS, AuthTable, LoginArgs, LoginSigner, LoginVerifier, VerifiedLogin};
pub use message::{
    Invalidate, Reply, Request, ServerMessage, WriteHead, encode_read_reply_at,
    encode_write_request_at, encode_write_request_into, max_io_size, read_reply_data_offset,
    write_request_data_offset,
};
pub use name::{DEFAULT_PORT, HostId, Location, ServerName};
pub use record::{DeferredSeal, Opened, Opener, RecordReader, RecordStart, Sealer};
pub use reply::{DirEntry, DirEntryPlus, DirPage, FsInfo, FsStat, NewObject, PathConf, ReplyBody};
pub use request::{
    CreateHow, Proc, RequestOp, SpecialKind, StableHow, access, create_keeps_open_state,
    rename_flags,
};
pub use server::ServerConnection;
pub use status::NfsStatus;

#[cfg(test)]
mod send_tests {
    fn assert_send<T: Send>() {}

    #[test]
    fn state_is_send() {
        assert_send::<crate::Sealer>();
        assert_send::<crate::Opener>();
        assert_send::<crate::RecordReader>();
        assert_send::<crate::Session>();
        assert_send::<crate::ClientHandshake>();
        assert_send::<crate::ServerHandshake>();
        assert_send::<crate::LoginVerifier>();
        assert_send::<crate::HandleKey>();
        assert_send::<crate::Error>();
    }
}
