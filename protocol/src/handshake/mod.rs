//! The handshake: server key, Noise NK, version negotiation, session keys.
//!
//! ```text
//! server -> client  S0: frame( "SFSK" || server static X25519 public key[32] )     plaintext
//! client            checks HOSTID(location, key) against the name it was given
//! client -> server  C1: frame( Noise NK message 1: e, es, encrypted ClientHello )
//! server -> client  S1: frame( Noise NK message 2: e, ee, encrypted ServerHello )
//! frame(body) = u16 big-endian length || body, length <= 1024
//! ```
//!
//! The server speaks first so a connection costs one round trip after TCP's. The Noise prologue
//! is `"SFS-HANDSHAKE-1\0" || S0 body`, so a tampered S0 makes the handshake fail even if the key
//! were accepted. NK authenticates the server only (as SFS, users authenticate separately with
//! LOGIN); the handshake hash becomes the session id that LOGIN signatures are bound to, and the
//! Noise split gives the two record keys: the first for client-to-server records, the second for
//! server-to-client.
//!
//! Version negotiation: ClientHello lists the versions the client speaks; the server answers
//! with the highest one both speak, or with a refusal that lists its own versions, so the client
//! can report exactly why. The refusal is itself authenticated by the handshake.
//!
//! **The sans-IO contract.** Both sides are one machine, [`Handshake`] ([`ClientHandshake`] and
//! [`ServerHandshake`] are its two sides). It never performs I/O and never blocks: feed the
//! bytes received with [`Handshake::receive`], send whatever [`Handshake::take_output`]
//! returns (also after an error: a server's version refusal is output), and once
//! [`Handshake::is_done`] turn it into a [`Session`] with [`Handshake::into_session`].
//! `receive` never consumes bytes past the end of the handshake: it returns how many it used,
//! and any remainder belongs to the record layer. An error is final: the machine stays failed
//! and reports the same error again. [`complete`] drives a machine over a blocking
//! `Read + Write` stream; an event loop drives it directly (as sfsd does).
//!
//! **States as types.** Inside the machine each step of each side is its own type (`client.rs`,
//! `server.rs`) holding exactly what that step needs, and handling the peer's frame consumes the
//! state and yields the next one: a Noise state cannot be used twice, and a step cannot see
//! data of a step it is not in. The machine itself only cuts frames and keeps the output.

mod client;
mod io;
mod server;
mod wire;

use std::marker::PhantomData;

use crate::error::HandshakeError;
use crate::name::PUBLIC_KEY_LEN;
use crate::record::{DEFAULT_MAX_PAYLOAD, MAX_MAX_PAYLOAD, MIN_MAX_PAYLOAD, Opener, Sealer};
use wire::FrameBuf;

pub use io::{Completed, DriveError, complete};

/// The Noise protocol name.
pub const NOISE_PARAMS: &str = "Noise_NK_25519_ChaChaPoly_SHA256";
/// First bytes of the Noise prologue (followed by the S0 body).
pub const PROLOGUE_TAG: &[u8] = b"SFS-HANDSHAKE-1\0";
/// Magic that starts the server's key message.
pub const SERVER_KEY_MAGIC: [u8; 4] = *b"SFSK";
/// Largest handshake frame body accepted.
pub const MAX_FRAME: usize = 1024;
/// The protocol version this crate implements (with ChaCha20-Poly1305 records; see
/// [`DISK_TOLD_AES_VERSION`] for the same with AES-256-GCM). A server that cannot tell of
/// changes behind its back speaks up to [`UNNAMED_TOLD_VERSION`].
pub const PROTOCOL_VERSION: u32 = DISK_TOLD_VERSION;
/// The first version with SESSION and SEQUENCE ([`crate::sequence`]) and APPEND: a client
/// sends them only on connections that chose it or a later one, so it still works with a
/// server of version 2, without exactly-once changes or atomic appends.
pub const SESSIONS_VERSION: u32 = 3;
/// Version 3 with records sealed by AES-256-GCM instead of ChaCha20-Poly1305
/// ([`crate::record::Cipher`]). A peer offers it only where its CPU has AES instructions, so
/// the highest common version picks AES exactly when both ends have them; the offer and the
/// choice travel in the handshake's encrypted, authenticated payloads, so no one in between
/// can take it out or put it in.
pub const AES_VERSION: u32 = 4;
/// Version 3 with FETCH ([`crate::RequestOp::Fetch`]), ChaCha20-Poly1305 records.
pub const FETCH_VERSION: u32 = 5;
/// Version 5 with AES-256-GCM records, offered only with AES instructions as 4 is.
pub const FETCH_AES_VERSION: u32 = 6;
/// Version 5 with LISTDIR ([`crate::RequestOp::ListDir`]), ChaCha20-Poly1305 records.
pub const LISTDIR_VERSION: u32 = 7;
/// Version 7 with AES-256-GCM records, offered only with AES instructions as 4 is.
pub const LISTDIR_AES_VERSION: u32 = 8;
/// Version 7 with COMMIT ordered behind the connection's WRITEs: the server runs a COMMIT
/// only once every WRITE and APPEND of the same file that arrived before it on the same
/// connection has been answered, so a client may send COMMIT right behind its last WRITE
/// instead of a round trip after the last reply. Nothing on the wire changes.
pub const ORDERED_COMMIT_VERSION: u32 = 9;
/// Version 9 with AES-256-GCM records, offered only with AES instructions as 4 is.
pub const ORDERED_COMMIT_AES_VERSION: u32 = 10;
/// Version 9 with CREATEAT ([`crate::RequestOp::CreateAt`]), ChaCha20-Poly1305 records.
pub const CREATE_AT_VERSION: u32 = 11;
/// Version 11 with AES-256-GCM records, offered only with AES instructions as 4 is.
pub const CREATE_AT_AES_VERSION: u32 = 12;
/// Version 11 with SETATTR ordered behind the connection's WRITEs, as COMMIT is since
/// [`ORDERED_COMMIT_VERSION`]: the server runs a SETATTR only once every WRITE and APPEND of
/// the same file that arrived before it on the same connection has been answered, so a client
/// may send the `utimensat` or `chmod` that follows a file's last write right behind that
/// WRITE instead of a round trip after its reply. Nothing on the wire changes.
pub const ORDERED_SETATTR_VERSION: u32 = 13;
/// Version 13 with AES-256-GCM records, offered only with AES instructions as 4 is.
pub const ORDERED_SETATTR_AES_VERSION: u32 = 14;
/// Version 13 whose server tells the sender of a REMOVE, RMDIR, RENAME or RENAME2 of what it
/// changed without naming it by handle (the object removed, moved or replaced), as it tells
/// any other client holding a lease on it: an INVALIDATE sent before the reply. A client may
/// then keep answering from its other cached attributes while such a request is under way,
/// where before it had to take any of them as possibly changed (a hard link of the removed
/// file, say). Nothing on the wire changes.
pub const UNNAMED_TOLD_VERSION: u32 = 15;
/// Version 15 with AES-256-GCM records, offered only with AES instructions as 4 is.
pub const UNNAMED_TOLD_AES_VERSION: u32 = 16;
/// Version 15 whose server also tells every lease holder of the changes made to its files
/// behind its back (by other programs on its host), with an INVALIDATE, as of changes made
/// through it. A client may then keep a directory's listing from the first name it has to
/// look up there, where before a name made on the server's disk would have stayed unseen
/// until the lease ended. A server offers it only while it can keep that promise (sfsd: while
/// it watches its file system); nothing on the wire changes.
pub const DISK_TOLD_VERSION: u32 = 17;
/// Version 17 with AES-256-GCM records, offered only with AES instructions as 4 is.
pub const DISK_TOLD_AES_VERSION: u32 = 18;
/// Every version this crate can speak: 2 differs from 3 only in having no SESSION and
/// SEQUENCE, so a peer of either version can be served; 5 is 3 with FETCH; 7 is 5 with
/// LISTDIR; 9 is 7 with COMMIT ordered behind the connection's WRITEs; 11 is 9 with
/// CREATEAT; 13 is 11 with SETATTR ordered behind them too; 15 is 13 whose server tells the
/// sender of a removal or rename what it changed unnamed; 17 is 15 whose server tells of
/// changes made behind its back; 4, 6, 8, 10, 12, 14, 16 and 18 are 3, 5, 7, 9, 11, 13, 15
/// and 17 with AES-256-GCM records.
pub const SUPPORTED_VERSIONS: &[u32] = &[
    2,
    SESSIONS_VERSION,
    AES_VERSION,
    FETCH_VERSION,
    FETCH_AES_VERSION,
    LISTDIR_VERSION,
    LISTDIR_AES_VERSION,
    ORDERED_COMMIT_VERSION,
    ORDERED_COMMIT_AES_VERSION,
    CREATE_AT_VERSION,
    CREATE_AT_AES_VERSION,
    ORDERED_SETATTR_VERSION,
    ORDERED_SETATTR_AES_VERSION,
    UNNAMED_TOLD_VERSION,
    UNNAMED_TOLD_AES_VERSION,
    DISK_TOLD_VERSION,
    DISK_TOLD_AES_VERSION,
];

/// Whether records of `version` are sealed with AES-256-GCM (else ChaCha20-Poly1305).
pub fn uses_aes(version: u32) -> bool {
    matches!(
        version,
        AES_VERSION
            | FETCH_AES_VERSION
            | LISTDIR_AES_VERSION
            | ORDERED_COMMIT_AES_VERSION
            | CREATE_AT_AES_VERSION
            | ORDERED_SETATTR_AES_VERSION
            | UNNAMED_TOLD_AES_VERSION
            | DISK_TOLD_AES_VERSION
    )
}

/// Whether a connection of `version` may carry FETCH.
pub fn has_fetch(version: u32) -> bool {
    version >= FETCH_VERSION
}

/// Whether a connection of `version` may carry LISTDIR.
pub fn has_listdir(version: u32) -> bool {
    version >= LISTDIR_VERSION
}

/// Whether a connection of `version` may carry CREATEAT.
pub fn has_create_at(version: u32) -> bool {
    version >= CREATE_AT_VERSION
}

/// Whether the server of a connection of `version` runs a COMMIT only after the WRITEs of
/// the same file that came before it on the connection ([`ORDERED_COMMIT_VERSION`]).
pub fn has_ordered_commit(version: u32) -> bool {
    version >= ORDERED_COMMIT_VERSION
}

/// Whether the server of a connection of `version` runs a SETATTR only after the WRITEs of
/// the same file that came before it on the connection ([`ORDERED_SETATTR_VERSION`]).
pub fn has_ordered_setattr(version: u32) -> bool {
    version >= ORDERED_SETATTR_VERSION
}

/// Whether the server of a connection of `version` tells the sender of a REMOVE, RMDIR,
/// RENAME or RENAME2 of the objects it changed unnamed, before its reply
/// ([`UNNAMED_TOLD_VERSION`]).
pub fn tells_unnamed(version: u32) -> bool {
    version >= UNNAMED_TOLD_VERSION
}

/// Whether the server of a connection of `version` tells every lease holder of changes made
/// behind its back ([`DISK_TOLD_VERSION`]).
pub fn tells_disk_changes(version: u32) -> bool {
    version >= DISK_TOLD_VERSION
}

/// The versions this machine offers: all it speaks, but those with AES records only with AES
/// instructions (in software AES is slower than ChaCha20 and not constant-time).
pub fn versions_here() -> Vec<u32> {
    let aes = crate::record::Cipher::aes_in_hardware();
    SUPPORTED_VERSIONS
        .iter()
        .copied()
        .filter(|&v| !uses_aes(v) || aes)
        .collect()
}
/// Most versions a ClientHello may list.
pub const MAX_OFFERED_VERSIONS: usize = 64;
/// Bytes of a session id (the SHA-256 handshake hash).
pub const SESSION_ID_LEN: usize = 32;

const NOISE_OVERHEAD: usize = 32 + 16; // ephemeral key + payload tag
const HELLO_ACCEPT: u32 = 0;
const HELLO_REFUSE: u32 = 1;

/// What one side offers in the handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakeConfig {
    /// Protocol versions spoken (any order); the highest common one is chosen.
    pub versions: Vec<u32>,
    /// The largest record payload this side accepts (the peer's sealer is bounded by it).
    pub max_record_payload: usize,
}

impl Default for HandshakeConfig {
    fn default() -> Self {
        HandshakeConfig {
            versions: versions_here(),
            max_record_payload: DEFAULT_MAX_PAYLOAD,
        }
    }
}

impl HandshakeConfig {
    fn advertised_max(&self) -> u32 {
        // Clamped to MAX_MAX_PAYLOAD < 2^32.
        self.max_record_payload
            .clamp(MIN_MAX_PAYLOAD, MAX_MAX_PAYLOAD) as u32
    }
}

/// An established session: what both sides hold after the handshake.
#[derive(Debug)]
pub struct Session {
    /// The Noise handshake hash; LOGIN signatures are bound to it.
    pub session_id: [u8; SESSION_ID_LEN],
    /// The negotiated protocol version.
    pub version: u32,
    /// Seals this side's outgoing records (bounded by the peer's maximum).
    pub sealer: Sealer,
    /// Opens the peer's records (bounded by this side's maximum).
    pub opener: Opener,
    /// The server's static public key.
    pub server_key: [u8; PUBLIC_KEY_LEN],
}

/// The client side of a handshake (a [`Handshake`] marker).
#[derive(Debug)]
pub enum Client {}

/// The server side of a handshake (a [`Handshake`] marker).
#[derive(Debug)]
pub enum Server {}

/// The client side of the handshake.
pub type ClientHandshake = Handshake<Client>;

/// The server side of the handshake.
pub type ServerHandshake = Handshake<Server>;

/// A handshake step waiting for the peer's next frame. Each step is its own type; handling the
/// frame consumes it.
trait Step: Send {
    /// Handles one complete frame body; may append frames to send to `out`, even when it fails
    /// (a version refusal).
    fn on_frame(self: Box<Self>, frame: &[u8], out: &mut Vec<u8>) -> Result<Next, HandshakeError>;
}

/// What a step leads to.
enum Next {
    /// Another step, waiting for the next frame.
    Wait(Box<dyn Step>),
    /// The session.
    Done(Box<Session>),
}

/// Where a handshake stands.
enum Progress {
    /// Waiting for the peer's frame, in this step.
    Wait(Box<dyn Step>),
    /// Established; the session is taken by [`Handshake::into_session`].
    Done(Box<Session>),
    /// Failed for good; every later call reports this error.
    Failed(HandshakeError),
}

/// One side of a handshake (see the module docs for the contract). `S` is [`Client`] or
/// [`Server`]; the constructors are per side, everything else is shared.
pub struct Handshake<S> {
    progress: Progress,
    /// The frame being received.
    frame: FrameBuf,
    /// Bytes for the peer, until [`Handshake::take_output`].
    output: Vec<u8>,
    side: PhantomData<S>,
}

impl<S> std::fmt::Debug for Handshake<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handshake")
            .field("side", &std::any::type_name::<S>())
            .field("done", &self.is_done())
            .field("failed", &matches!(self.progress, Progress::Failed(_)))
            .finish_non_exhaustive()
    }
}

impl<S> Handshake<S> {
    /// A machine in `progress` with `output` ready to send.
    fn start(progress: Progress, output: Vec<u8>) -> Handshake<S> {
        Handshake {
            progress,
            frame: FrameBuf::default(),
            output,
            side: PhantomData,
        }
    }

    /// Feeds received bytes; returns how many were consumed (the handshake stops consuming
    /// at its last byte). After an error the machine stays failed; still send
    /// [`Handshake::take_output`] before closing, as it may hold a version refusal.
    pub fn receive(&mut self, input: &[u8]) -> Result<usize, HandshakeError> {
        let mut used = 0;
        loop {
            match &self.progress {
                Progress::Failed(e) => return Err(e.clone()),
                Progress::Done(_) => return Ok(used),
                Progress::Wait(_) if used == input.len() => return Ok(used),
                Progress::Wait(_) => {}
            }
            let (n, frame) = match self.frame.feed(&input[used..]) {
                Ok(fed) => fed,
                Err(e) => {
                    self.progress = Progress::Failed(e.clone());
                    return Err(e);
                }
            };
            used += n;
            if let Some(frame) = frame {
                self.advance(&frame);
            }
        }
    }

    /// Hands a complete frame to the waiting step and stores what it leads to. The step is
    /// consumed by its transition, so while it runs the machine counts as failed.
    fn advance(&mut self, frame: &[u8]) {
        let failed = Progress::Failed(HandshakeError::NotFinished);
        self.progress = match std::mem::replace(&mut self.progress, failed) {
            Progress::Wait(step) => match step.on_frame(frame, &mut self.output) {
                Ok(Next::Wait(step)) => Progress::Wait(step),
                Ok(Next::Done(session)) => Progress::Done(session),
                Err(e) => Progress::Failed(e),
            },
            // `receive` only advances a waiting machine.
            finished => finished,
        };
    }

    /// Bytes to send to the peer now (empty when there are none).
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.output)
    }

    /// Whether [`Handshake::take_output`] has bytes.
    pub fn has_output(&self) -> bool {
        !self.output.is_empty()
    }

    /// Whether the handshake waits for bytes from the peer.
    pub fn wants_input(&self) -> bool {
        matches!(self.progress, Progress::Wait(_))
    }

    /// Whether the session is established (the last output may still have to be sent).
    pub fn is_done(&self) -> bool {
        matches!(self.progress, Progress::Done(_))
    }

    /// The established session (send any pending output first).
    pub fn into_session(self) -> Result<Session, HandshakeError> {
        match self.progress {
            Progress::Done(s) => Ok(*s),
            Progress::Failed(e) => Err(e),
            Progress::Wait(_) => Err(HandshakeError::NotFinished),
        }
    }
}

/// Runs a handshake between two in-process machines until neither has anything to say, and
/// returns the first error either side reports. For tests and in-process benchmarks.
pub fn pump(
    client: &mut ClientHandshake,
    server: &mut ServerHandshake,
) -> Result<(), HandshakeError> {
    let mut first_err = None;
    loop {
        let to_client = server.take_output();
        let to_server = client.take_output();
        if to_client.is_empty() && to_server.is_empty() {
            return first_err.map_or(Ok(()), Err);
        }
        // Receiving nothing is a no-op, so both directions can be fed unconditionally.
        if let Err(e) = client.receive(&to_client) {
            first_err.get_or_insert(e);
        }
        if let Err(e) = server.receive(&to_server) {
            first_err.get_or_insert(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::ServerKeypair;
    use crate::name::Location;

    fn pair(
        client_cfg: HandshakeConfig,
        server_cfg: HandshakeConfig,
    ) -> (ClientHandshake, ServerHandshake) {
        let kp = ServerKeypair::generate();
        let name = kp.server_name(Location::new("localhost", 4004).unwrap());
        (
            ClientHandshake::with_config(&name, client_cfg),
            ServerHandshake::with_config(&kp, server_cfg),
        )
    }

    #[test]
    fn handshake_establishes_matching_sessions() {
        let (mut c, mut s) = pair(HandshakeConfig::default(), HandshakeConfig::default());
        pump(&mut c, &mut s).unwrap();
        let mut cs = c.into_session().unwrap();
        let mut ss = s.into_session().unwrap();
        assert_eq!(cs.session_id, ss.session_id);
        assert_eq!(cs.version, *versions_here().iter().max().unwrap());
        let r = cs.sealer.seal(b"ping").unwrap();
        assert_eq!(ss.opener.open(&r).unwrap(), b"ping");
        let r = ss.sealer.seal(b"pong").unwrap();
        assert_eq!(cs.opener.open(&r).unwrap(), b"pong");
    }

    #[test]
    fn a_client_that_knows_the_key_speaks_before_the_server_and_gets_the_same_session() {
        let kp = ServerKeypair::generate();
        let name = kp.server_name(Location::new("localhost", 4004).unwrap());
        let mut s = ServerHandshake::with_config(&kp, HandshakeConfig::default());
        let mut c =
            ClientHandshake::with_known_key(&name, HandshakeConfig::default(), *kp.public_key())
                .unwrap();
        // C1 is ready before anything was received: it goes out with TCP's first data.
        assert!(c.has_output());
        pump(&mut c, &mut s).unwrap();
        let mut cs = c.into_session().unwrap();
        let mut ss = s.into_session().unwrap();
        assert_eq!(cs.session_id, ss.session_id);
        let r = cs.sealer.seal(b"ping").unwrap();
        assert_eq!(ss.opener.open(&r).unwrap(), b"ping");
    }

    #[test]
    fn a_remembered_key_the_name_does_not_certify_is_refused_before_anything_is_sent() {
        let kp = ServerKeypair::generate();
        let other = ServerKeypair::generate();
        let name = kp.server_name(Location::new("localhost", 4004).unwrap());
        let Err(err) =
            ClientHandshake::with_known_key(&name, HandshakeConfig::default(), *other.public_key())
        else {
            panic!("a key of another name was taken");
        };
        assert!(
            matches!(err, HandshakeError::HostIdMismatch { .. }),
            "{err:?}"
        );
    }

    #[test]
    fn a_key_message_that_is_not_the_remembered_key_ends_the_handshake_at_once() {
        let kp = ServerKeypair::generate();
        let other = ServerKeypair::generate();
        let name = kp.server_name(Location::new("localhost", 4004).unwrap());
        let mut c =
            ClientHandshake::with_known_key(&name, HandshakeConfig::default(), *kp.public_key())
                .unwrap();
        let mut s0 = Vec::new();
        wire::push_frame(&mut s0, &wire::server_key_body(other.public_key()));
        let err = c.receive(&s0).unwrap_err();
        assert!(matches!(err, HandshakeError::ServerKeyChanged), "{err:?}");
    }

    #[test]
    fn a_server_whose_key_message_differs_from_the_remembered_key_is_refused() {
        // The name certifies `kp`'s key, but `impostor` answers at its location.
        let kp = ServerKeypair::generate();
        let impostor = ServerKeypair::generate();
        let name = kp.server_name(Location::new("localhost", 4004).unwrap());
        let mut s = ServerHandshake::with_config(&impostor, HandshakeConfig::default());
        let mut c =
            ClientHandshake::with_known_key(&name, HandshakeConfig::default(), *kp.public_key())
                .unwrap();
        let err = pump(&mut c, &mut s).unwrap_err();
        assert!(
            matches!(err, HandshakeError::ServerKeyChanged)
                || matches!(err, HandshakeError::ClientMessageRejected),
            "{err:?}"
        );
        assert!(c.into_session().is_err());
    }

    #[test]
    fn peers_get_their_highest_common_version_and_its_cipher() {
        let v2 = HandshakeConfig {
            versions: vec![2],
            ..HandshakeConfig::default()
        };
        let v3 = HandshakeConfig {
            versions: vec![2, 3],
            ..HandshakeConfig::default()
        };
        let all = HandshakeConfig {
            versions: SUPPORTED_VERSIONS.to_vec(),
            ..HandshakeConfig::default()
        };
        let v4 = HandshakeConfig {
            versions: vec![2, 3, 4],
            ..HandshakeConfig::default()
        };
        let chacha = HandshakeConfig {
            versions: vec![2, 3, 5],
            ..HandshakeConfig::default()
        };
        let v6 = HandshakeConfig {
            versions: vec![2, 3, 4, 5, 6],
            ..HandshakeConfig::default()
        };
        let chacha7 = HandshakeConfig {
            versions: vec![2, 3, 5, 7],
            ..HandshakeConfig::default()
        };
        let v8 = HandshakeConfig {
            versions: vec![2, 3, 4, 5, 6, 7, 8],
            ..HandshakeConfig::default()
        };
        let chacha9 = HandshakeConfig {
            versions: vec![2, 3, 5, 7, 9],
            ..HandshakeConfig::default()
        };
        let v10 = HandshakeConfig {
            versions: (2..=10).collect(),
            ..HandshakeConfig::default()
        };
        let chacha11 = HandshakeConfig {
            versions: vec![2, 3, 5, 7, 9, 11],
            ..HandshakeConfig::default()
        };
        let v12 = HandshakeConfig {
            versions: (2..=12).collect(),
            ..HandshakeConfig::default()
        };
        let chacha13 = HandshakeConfig {
            versions: vec![2, 3, 5, 7, 9, 11, 13],
            ..HandshakeConfig::default()
        };
        let v14 = HandshakeConfig {
            versions: (2..=14).collect(),
            ..HandshakeConfig::default()
        };
        let chacha15 = HandshakeConfig {
            versions: vec![2, 3, 5, 7, 9, 11, 13, 15],
            ..HandshakeConfig::default()
        };
        let v16 = HandshakeConfig {
            versions: (2..=16).collect(),
            ..HandshakeConfig::default()
        };
        let chacha17 = HandshakeConfig {
            versions: vec![2, 3, 5, 7, 9, 11, 13, 15, 17],
            ..HandshakeConfig::default()
        };
        for (client, server, chosen) in [
            (v2.clone(), HandshakeConfig::default(), 2),
            (HandshakeConfig::default(), v2, 2),
            // AES records only when both ends offer them.
            (v3.clone(), all.clone(), 3),
            (all.clone(), v3, 3),
            (all.clone(), v4.clone(), 4),
            (v4, all.clone(), 4),
            // FETCH with ChaCha20 records where one end has no AES instructions.
            (chacha.clone(), all.clone(), 5),
            (all.clone(), chacha, 5),
            (v6.clone(), all.clone(), 6),
            (all.clone(), v6, 6),
            // LISTDIR, with ChaCha20 records where one end has no AES instructions.
            (chacha7.clone(), all.clone(), 7),
            (all.clone(), chacha7, 7),
            (v8.clone(), all.clone(), 8),
            (all.clone(), v8, 8),
            // Ordered COMMIT.
            (chacha9.clone(), all.clone(), 9),
            (all.clone(), chacha9, 9),
            (v10.clone(), all.clone(), 10),
            (all.clone(), v10, 10),
            // CREATEAT.
            (chacha11.clone(), all.clone(), 11),
            (all.clone(), chacha11, 11),
            (v12.clone(), all.clone(), 12),
            (all.clone(), v12, 12),
            // Ordered SETATTR.
            (chacha13.clone(), all.clone(), 13),
            (all.clone(), chacha13, 13),
            (v14.clone(), all.clone(), 14),
            (all.clone(), v14, 14),
            // The sender of a removal or rename told what it changed unnamed.
            (chacha15.clone(), all.clone(), 15),
            (all.clone(), chacha15, 15),
            (v16.clone(), all.clone(), 16),
            // A server that does not tell of changes behind its back offers up to 16.
            (all.clone(), v16, 16),
            (chacha17.clone(), all.clone(), 17),
            (all.clone(), chacha17, 17),
            (all.clone(), all, 18),
        ] {
            let (mut c, mut s) = pair(client, server);
            pump(&mut c, &mut s).unwrap();
            let (mut cs, mut ss) = (c.into_session().unwrap(), s.into_session().unwrap());
            assert_eq!((cs.version, ss.version), (chosen, chosen));
            // Both ends seal with the version's cipher: a record opens on the other side, and
            // only under that cipher.
            let r = cs.sealer.seal(b"ping").unwrap();
            assert_eq!(ss.opener.open(&r).unwrap(), b"ping");
            let r = ss.sealer.seal(b"pong").unwrap();
            assert_eq!(cs.opener.open(&r).unwrap(), b"pong");
            let cipher = crate::record::Cipher::for_version(chosen);
            assert_eq!(
                cipher == crate::record::Cipher::Aes256Gcm,
                chosen % 2 == 0 && chosen >= 4
            );
            assert_eq!(has_fetch(chosen), chosen >= 5);
            assert_eq!(has_listdir(chosen), chosen >= 7);
            assert_eq!(has_ordered_commit(chosen), chosen >= 9);
            assert_eq!(has_create_at(chosen), chosen >= 11);
            assert_eq!(has_ordered_setattr(chosen), chosen >= 13);
            assert_eq!(tells_unnamed(chosen), chosen >= 15);
            assert_eq!(tells_disk_changes(chosen), chosen >= 17);
        }
    }

    #[test]
    fn version_refusal_is_reported_on_both_sides() {
        let (mut c, mut s) = pair(
            HandshakeConfig {
                versions: vec![70, 80],
                ..HandshakeConfig::default()
            },
            HandshakeConfig::default(),
        );
        let err = pump(&mut c, &mut s).unwrap_err();
        let expect = HandshakeError::VersionRefused {
            client: vec![70, 80],
            server: versions_here(),
        };
        assert_eq!(err, expect);
        assert_eq!(c.into_session().unwrap_err(), expect);
        assert_eq!(s.into_session().unwrap_err(), expect);
    }
}
