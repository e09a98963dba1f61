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
//! Both sides are sans-IO state machines: feed received bytes with `receive`, send whatever
//! `take_output` returns, and when `is_done` turn the machine into a [`Session`]. `receive`
//! never consumes bytes past the end of the handshake: any remainder belongs to the record layer.

use snow::{Builder, HandshakeState};

use crate::error::{DecodeError, HandshakeError};
use crate::keys::ServerKeypair;
use crate::name::{PUBLIC_KEY_LEN, ServerName};
use crate::record::{
    DEFAULT_MAX_PAYLOAD, MAX_MAX_PAYLOAD, MIN_MAX_PAYLOAD, Opener, RecordKey, Sealer,
};
use crate::xdr::{self, Reader};

/// The Noise protocol name.
pub const NOISE_PARAMS: &str = "Noise_NK_25519_ChaChaPoly_SHA256";
/// First bytes of the Noise prologue (followed by the S0 body).
pub const PROLOGUE_TAG: &[u8] = b"SFS-HANDSHAKE-1\0";
/// Magic that starts the server's key message.
pub const SERVER_KEY_MAGIC: [u8; 4] = *b"SFSK";
/// Largest handshake frame body accepted.
pub const MAX_FRAME: usize = 1024;
/// The protocol version this crate implements.
pub const PROTOCOL_VERSION: u32 = 2;
/// Every version this crate can speak.
pub const SUPPORTED_VERSIONS: &[u32] = &[PROTOCOL_VERSION];
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
            versions: SUPPORTED_VERSIONS.to_vec(),
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

/// Accumulates one length-prefixed handshake frame.
#[derive(Debug, Default)]
struct FrameBuf {
    buf: Vec<u8>,
}

impl FrameBuf {
    /// Consumes bytes of `input` up to the end of one frame; returns how many were consumed and
    /// the frame body once complete.
    fn feed(&mut self, input: &[u8]) -> Result<(usize, Option<Vec<u8>>), HandshakeError> {
        let mut used = 0;
        if self.buf.len() < 2 {
            let n = (2 - self.buf.len()).min(input.len());
            self.buf.extend_from_slice(&input[..n]);
            used = n;
            if self.buf.len() < 2 {
                return Ok((used, None));
            }
        }
        let len = usize::from(u16::from_be_bytes([self.buf[0], self.buf[1]]));
        if len > MAX_FRAME {
            return Err(HandshakeError::FrameTooLarge {
                len,
                max: MAX_FRAME,
            });
        }
        let n = (2 + len - self.buf.len()).min(input.len() - used);
        self.buf.extend_from_slice(&input[used..used + n]);
        used += n;
        if self.buf.len() == 2 + len {
            let body = self.buf.split_off(2);
            self.buf.clear();
            Ok((used, Some(body)))
        } else {
            Ok((used, None))
        }
    }
}

fn push_frame(out: &mut Vec<u8>, body: &[u8]) {
    // Bodies we build are far below MAX_FRAME.
    out.extend_from_slice(&(body.len() as u16).to_be_bytes());
    out.extend_from_slice(body);
}

fn noise_builder<'a>() -> Builder<'a> {
    Builder::new(NOISE_PARAMS.parse().expect("valid Noise parameters"))
}

fn noise_err(e: snow::Error) -> HandshakeError {
    HandshakeError::Noise(e.to_string())
}

fn server_key_body(public: &[u8; PUBLIC_KEY_LEN]) -> Vec<u8> {
    let mut body = Vec::with_capacity(4 + PUBLIC_KEY_LEN);
    body.extend_from_slice(&SERVER_KEY_MAGIC);
    body.extend_from_slice(public);
    body
}

fn prologue(s0_body: &[u8]) -> Vec<u8> {
    [PROLOGUE_TAG, s0_body].concat()
}

/// Writes a Noise message carrying `payload` and returns it.
fn noise_write(noise: &mut HandshakeState, payload: &[u8]) -> Result<Vec<u8>, HandshakeError> {
    let mut msg = vec![0u8; payload.len() + NOISE_OVERHEAD];
    let n = noise.write_message(payload, &mut msg).map_err(noise_err)?;
    msg.truncate(n);
    Ok(msg)
}

/// What a finished Noise handshake yields: the session id and the two record keys.
struct SessionKeys {
    session_id: [u8; SESSION_ID_LEN],
    client_to_server: RecordKey,
    server_to_client: RecordKey,
}

/// Splits a finished Noise handshake into the session id and the two direction keys.
fn split(noise: &mut HandshakeState) -> Result<SessionKeys, HandshakeError> {
    if !noise.is_handshake_finished() {
        return Err(HandshakeError::NotFinished);
    }
    let mut id = [0u8; SESSION_ID_LEN];
    id.copy_from_slice(noise.get_handshake_hash());
    let (client_to_server, server_to_client) = noise.dangerously_get_raw_split();
    Ok(SessionKeys {
        session_id: id,
        client_to_server,
        server_to_client,
    })
}

fn check_peer_max(max: u32) -> Result<usize, HandshakeError> {
    if (max as usize) < MIN_MAX_PAYLOAD {
        return Err(HandshakeError::RecordLimitTooSmall {
            got: max,
            min: MIN_MAX_PAYLOAD as u32,
        });
    }
    Ok((max as usize).min(MAX_MAX_PAYLOAD))
}

/// ClientHello = u32 count || count * u32 version || u32 max_record_payload.
fn encode_client_hello(cfg: &HandshakeConfig) -> Vec<u8> {
    let mut p = Vec::new();
    let versions = &cfg.versions[..cfg.versions.len().min(MAX_OFFERED_VERSIONS)];
    xdr::put_count(&mut p, versions.len());
    for &v in versions {
        xdr::put_u32(&mut p, v);
    }
    xdr::put_u32(&mut p, cfg.advertised_max());
    p
}

fn decode_client_hello(payload: &[u8]) -> Result<(Vec<u32>, u32), DecodeError> {
    let mut r = Reader::new(payload);
    let n = r.count(4, "offered versions")?;
    if n > MAX_OFFERED_VERSIONS {
        return Err(DecodeError::LimitExceeded {
            what: "offered versions",
            len: n as u64,
            max: MAX_OFFERED_VERSIONS as u64,
        });
    }
    let versions = (0..n)
        .map(|_| r.u32("version"))
        .collect::<Result<Vec<_>, _>>()?;
    let max = r.u32("max record payload")?;
    r.finish()?;
    Ok((versions, max))
}

/// What the server says in its Noise reply.
enum ServerHello {
    Accept {
        version: u32,
        max_record_payload: u32,
    },
    Refuse {
        versions: Vec<u32>,
    },
}

fn encode_server_hello(h: &ServerHello) -> Vec<u8> {
    let mut p = Vec::new();
    match h {
        ServerHello::Accept {
            version,
            max_record_payload,
        } => {
            xdr::put_u32(&mut p, HELLO_ACCEPT);
            xdr::put_u32(&mut p, *version);
            xdr::put_u32(&mut p, *max_record_payload);
        }
        ServerHello::Refuse { versions } => {
            xdr::put_u32(&mut p, HELLO_REFUSE);
            let versions = &versions[..versions.len().min(MAX_OFFERED_VERSIONS)];
            xdr::put_count(&mut p, versions.len());
            for &v in versions {
                xdr::put_u32(&mut p, v);
            }
        }
    }
    p
}

fn decode_server_hello(payload: &[u8]) -> Result<ServerHello, DecodeError> {
    let mut r = Reader::new(payload);
    let h = match r.u32("server hello status")? {
        HELLO_ACCEPT => ServerHello::Accept {
            version: r.u32("version")?,
            max_record_payload: r.u32("max record payload")?,
        },
        HELLO_REFUSE => {
            let n = r.count(4, "server versions")?;
            if n > MAX_OFFERED_VERSIONS {
                return Err(DecodeError::LimitExceeded {
                    what: "server versions",
                    len: n as u64,
                    max: MAX_OFFERED_VERSIONS as u64,
                });
            }
            ServerHello::Refuse {
                versions: (0..n).map(|_| r.u32("version")).collect::<Result<_, _>>()?,
            }
        }
        value => {
            return Err(DecodeError::BadDiscriminant {
                what: "server hello status",
                value,
            });
        }
    };
    r.finish()?;
    Ok(h)
}

enum ClientState {
    AwaitServerKey,
    AwaitServerHello {
        noise: Box<HandshakeState>,
        server_key: [u8; PUBLIC_KEY_LEN],
    },
    Done(Box<Session>),
    Failed(HandshakeError),
    Taken,
}

/// The client side of the handshake.
pub struct ClientHandshake {
    name: ServerName,
    config: HandshakeConfig,
    fixed_ephemeral: Option<[u8; 32]>,
    state: ClientState,
    frame: FrameBuf,
    output: Vec<u8>,
}

impl std::fmt::Debug for ClientHandshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientHandshake")
            .field("name", &self.name.to_string())
            .field("done", &self.is_done())
            .finish_non_exhaustive()
    }
}

impl ClientHandshake {
    /// A handshake with the server named `name`, offering every supported version.
    pub fn new(name: &ServerName) -> ClientHandshake {
        ClientHandshake::with_config(name, HandshakeConfig::default())
    }

    /// A handshake with explicit versions and record limit.
    pub fn with_config(name: &ServerName, config: HandshakeConfig) -> ClientHandshake {
        ClientHandshake {
            name: name.without_path(),
            config,
            fixed_ephemeral: None,
            state: ClientState::AwaitServerKey,
            frame: FrameBuf::default(),
            output: Vec::new(),
        }
    }

    /// Deterministic handshake for golden test vectors only: a fixed ephemeral key destroys
    /// forward secrecy and must never be used on a real connection.
    #[doc(hidden)]
    pub fn with_fixed_ephemeral_for_testing(
        name: &ServerName,
        config: HandshakeConfig,
        ephemeral: [u8; 32],
    ) -> ClientHandshake {
        let mut hs = ClientHandshake::with_config(name, config);
        hs.fixed_ephemeral = Some(ephemeral);
        hs
    }

    /// Feeds received bytes; returns how many were consumed (the handshake stops consuming
    /// at its last byte). After an error the machine stays failed.
    pub fn receive(&mut self, input: &[u8]) -> Result<usize, HandshakeError> {
        let mut used = 0;
        loop {
            match &self.state {
                ClientState::Failed(e) => return Err(e.clone()),
                ClientState::Done(_) | ClientState::Taken => return Ok(used),
                _ => {}
            }
            if used == input.len() {
                return Ok(used);
            }
            let step = self.frame.feed(&input[used..]).and_then(|(n, body)| {
                used += n;
                match body {
                    Some(body) => self.on_frame(&body),
                    None => Ok(()),
                }
            });
            if let Err(e) = step {
                self.state = ClientState::Failed(e.clone());
                return Err(e);
            }
        }
    }

    fn on_frame(&mut self, body: &[u8]) -> Result<(), HandshakeError> {
        match std::mem::replace(&mut self.state, ClientState::Taken) {
            ClientState::AwaitServerKey => {
                if body.len() != 4 + PUBLIC_KEY_LEN || body[..4] != SERVER_KEY_MAGIC {
                    return Err(HandshakeError::BadServerKeyMessage);
                }
                let mut server_key = [0u8; PUBLIC_KEY_LEN];
                server_key.copy_from_slice(&body[4..]);
                self.name.verify_key(&server_key)?;
                let prologue = prologue(body);
                let mut builder = noise_builder()
                    .remote_public_key(&server_key)
                    .and_then(|b| b.prologue(&prologue))
                    .map_err(noise_err)?;
                if let Some(e) = &self.fixed_ephemeral {
                    builder = builder.fixed_ephemeral_key_for_testing_only(e);
                }
                let mut noise = builder.build_initiator().map_err(noise_err)?;
                let msg = noise_write(&mut noise, &encode_client_hello(&self.config))?;
                push_frame(&mut self.output, &msg);
                self.state = ClientState::AwaitServerHello {
                    noise: Box::new(noise),
                    server_key,
                };
                Ok(())
            }
            ClientState::AwaitServerHello {
                mut noise,
                server_key,
            } => {
                let mut payload = vec![0u8; body.len()];
                let n = noise
                    .read_message(body, &mut payload)
                    .map_err(|_| HandshakeError::ServerMessageRejected)?;
                let hello =
                    decode_server_hello(&payload[..n]).map_err(HandshakeError::BadPayload)?;
                let (version, peer_max) = match hello {
                    ServerHello::Refuse { versions } => {
                        return Err(HandshakeError::VersionRefused {
                            client: self.config.versions.clone(),
                            server: versions,
                        });
                    }
                    ServerHello::Accept {
                        version,
                        max_record_payload,
                    } => (version, max_record_payload),
                };
                if !self.config.versions.contains(&version) {
                    return Err(HandshakeError::UnofferedVersion(version));
                }
                let peer_max = check_peer_max(peer_max)?;
                let keys = split(&mut noise)?;
                self.state = ClientState::Done(Box::new(Session {
                    session_id: keys.session_id,
                    version,
                    sealer: Sealer::new(&keys.client_to_server, peer_max),
                    opener: Opener::new(
                        &keys.server_to_client,
                        self.config.advertised_max() as usize,
                    ),
                    server_key,
                }));
                Ok(())
            }
            other => {
                self.state = other;
                Ok(())
            }
        }
    }

    /// Bytes to send to the server now (empty when there are none).
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.output)
    }

    /// Whether [`ClientHandshake::take_output`] has bytes.
    pub fn has_output(&self) -> bool {
        !self.output.is_empty()
    }

    /// Whether the handshake waits for bytes from the server.
    pub fn wants_input(&self) -> bool {
        matches!(
            self.state,
            ClientState::AwaitServerKey | ClientState::AwaitServerHello { .. }
        )
    }

    /// Whether the session is established.
    pub fn is_done(&self) -> bool {
        matches!(self.state, ClientState::Done(_))
    }

    /// The established session (send any pending output first).
    pub fn into_session(self) -> Result<Session, HandshakeError> {
        match self.state {
            ClientState::Done(s) => Ok(*s),
            ClientState::Failed(e) => Err(e),
            _ => Err(HandshakeError::NotFinished),
        }
    }
}

enum ServerState {
    AwaitClientHello(Box<HandshakeState>),
    Done(Box<Session>),
    Failed(HandshakeError),
    Taken,
}

/// The server side of the handshake.
pub struct ServerHandshake {
    config: HandshakeConfig,
    server_key: [u8; PUBLIC_KEY_LEN],
    state: ServerState,
    frame: FrameBuf,
    output: Vec<u8>,
}

impl std::fmt::Debug for ServerHandshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandshake")
            .field("done", &self.is_done())
            .finish_non_exhaustive()
    }
}

impl ServerHandshake {
    /// A handshake for a newly accepted connection, speaking every supported version. Its first
    /// output (the server key message) is ready at once.
    pub fn new(keypair: &ServerKeypair) -> ServerHandshake {
        ServerHandshake::with_config(keypair, HandshakeConfig::default())
    }

    /// A handshake with explicit versions and record limit.
    pub fn with_config(keypair: &ServerKeypair, config: HandshakeConfig) -> ServerHandshake {
        ServerHandshake::build(keypair, config, None)
    }

    /// Deterministic handshake for golden test vectors only (see
    /// [`ClientHandshake::with_fixed_ephemeral_for_testing`]).
    #[doc(hidden)]
    pub fn with_fixed_ephemeral_for_testing(
        keypair: &ServerKeypair,
        config: HandshakeConfig,
        ephemeral: [u8; 32],
    ) -> ServerHandshake {
        ServerHandshake::build(keypair, config, Some(ephemeral))
    }

    fn build(
        keypair: &ServerKeypair,
        config: HandshakeConfig,
        ephemeral: Option<[u8; 32]>,
    ) -> ServerHandshake {
        let body = server_key_body(keypair.public_key());
        let mut output = Vec::new();
        push_frame(&mut output, &body);
        let prologue = prologue(&body);
        let state = noise_builder()
            .local_private_key(keypair.secret_key())
            .and_then(|b| b.prologue(&prologue))
            .and_then(|b| match &ephemeral {
                Some(e) => b.fixed_ephemeral_key_for_testing_only(e).build_responder(),
                None => b.build_responder(),
            })
            .map_or_else(
                |e| ServerState::Failed(noise_err(e)),
                |n| ServerState::AwaitClientHello(Box::new(n)),
            );
        ServerHandshake {
            config,
            server_key: *keypair.public_key(),
            state,
            frame: FrameBuf::default(),
            output,
        }
    }

    /// Feeds received bytes; returns how many were consumed (the handshake stops consuming
    /// at its last byte). After an error the machine stays failed; still send
    /// [`ServerHandshake::take_output`] before closing, as it may hold a version refusal.
    pub fn receive(&mut self, input: &[u8]) -> Result<usize, HandshakeError> {
        let mut used = 0;
        loop {
            match &self.state {
                ServerState::Failed(e) => return Err(e.clone()),
                ServerState::Done(_) | ServerState::Taken => return Ok(used),
                ServerState::AwaitClientHello(_) => {}
            }
            if used == input.len() {
                return Ok(used);
            }
            let step = self.frame.feed(&input[used..]).and_then(|(n, body)| {
                used += n;
                match body {
                    Some(body) => self.on_client_hello(&body),
                    None => Ok(()),
                }
            });
            if let Err(e) = step {
                self.state = ServerState::Failed(e.clone());
                return Err(e);
            }
        }
    }

    fn on_client_hello(&mut self, body: &[u8]) -> Result<(), HandshakeError> {
        let ServerState::AwaitClientHello(mut noise) =
            std::mem::replace(&mut self.state, ServerState::Taken)
        else {
            return Err(HandshakeError::NotFinished);
        };
        let mut payload = vec![0u8; body.len()];
        let n = noise
            .read_message(body, &mut payload)
            .map_err(|_| HandshakeError::ClientMessageRejected)?;
        let (offered, client_max) =
            decode_client_hello(&payload[..n]).map_err(HandshakeError::BadPayload)?;
        let chosen = self
            .config
            .versions
            .iter()
            .copied()
            .filter(|v| offered.contains(v))
            .max();
        let Some(version) = chosen else {
            let refusal = ServerHello::Refuse {
                versions: self.config.versions.clone(),
            };
            let msg = noise_write(&mut noise, &encode_server_hello(&refusal))?;
            push_frame(&mut self.output, &msg);
            return Err(HandshakeError::VersionRefused {
                client: offered,
                server: self.config.versions.clone(),
            });
        };
        let peer_max = check_peer_max(client_max)?;
        let accept = ServerHello::Accept {
            version,
            max_record_payload: self.config.advertised_max(),
        };
        let msg = noise_write(&mut noise, &encode_server_hello(&accept))?;
        push_frame(&mut self.output, &msg);
        let keys = split(&mut noise)?;
        self.state = ServerState::Done(Box::new(Session {
            session_id: keys.session_id,
            version,
            sealer: Sealer::new(&keys.server_to_client, peer_max),
            opener: Opener::new(
                &keys.client_to_server,
                self.config.advertised_max() as usize,
            ),
            server_key: self.server_key,
        }));
        Ok(())
    }

    /// Bytes to send to the client now (empty when there are none).
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.output)
    }

    /// Whether [`ServerHandshake::take_output`] has bytes.
    pub fn has_output(&self) -> bool {
        !self.output.is_empty()
    }

    /// Whether the handshake waits for bytes from the client.
    pub fn wants_input(&self) -> bool {
        matches!(self.state, ServerState::AwaitClientHello(_))
    }

    /// Whether the session is established (the last output still has to be sent).
    pub fn is_done(&self) -> bool {
        matches!(self.state, ServerState::Done(_))
    }

    /// The established session (send any pending output first).
    pub fn into_session(self) -> Result<Session, HandshakeError> {
        match self.state {
            ServerState::Done(s) => Ok(*s),
            ServerState::Failed(e) => Err(e),
            _ => Err(HandshakeError::NotFinished),
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
        assert_eq!(cs.version, PROTOCOL_VERSION);
        let r = cs.sealer.seal(b"ping").unwrap();
        assert_eq!(ss.opener.open(&r).unwrap(), b"ping");
        let r = ss.sealer.seal(b"pong").unwrap();
        assert_eq!(cs.opener.open(&r).unwrap(), b"pong");
    }

    #[test]
    fn version_refusal_is_reported_on_both_sides() {
        let (mut c, mut s) = pair(
            HandshakeConfig {
                versions: vec![7, 8],
                ..HandshakeConfig::default()
            },
            HandshakeConfig::default(),
        );
        let err = pump(&mut c, &mut s).unwrap_err();
        let expect = HandshakeError::VersionRefused {
            client: vec![7, 8],
            server: vec![PROTOCOL_VERSION],
        };
        assert_eq!(err, expect);
        assert_eq!(c.into_session().unwrap_err(), expect);
        assert_eq!(s.into_session().unwrap_err(), expect);
    }
}
