//! The client's steps: wait for the server's key (S0), check it against the name and answer
//! with the Noise message carrying ClientHello (C1); wait for the server's Noise reply (S1) and
//! derive the session. A client that knows the server's key from an earlier connection sends
//! C1 at once and only checks that S0 repeats the key ([`Handshake::with_known_key`]): one
//! round trip fewer, since the server sends S0 only once it has accepted the connection.

use snow::HandshakeState;

use super::wire::{
    ServerHello, check_peer_max, decode_server_hello, encode_client_hello, noise_builder,
    noise_err, noise_write, prologue, push_frame, server_key_body, split,
};
use super::{Client, Handshake, HandshakeConfig, Next, Progress, SERVER_KEY_MAGIC, Session, Step};
use crate::error::HandshakeError;
use crate::name::{PUBLIC_KEY_LEN, ServerName};
use crate::record::{Opener, Sealer};

impl Handshake<Client> {
    /// A handshake with the server named `name`, offering every supported version.
    pub fn new(name: &ServerName) -> Handshake<Client> {
        Self::with_config(name, HandshakeConfig::default())
    }

    /// A handshake with explicit versions and record limit.
    pub fn with_config(name: &ServerName, config: HandshakeConfig) -> Handshake<Client> {
        Self::client(name, config, None)
    }

    /// Deterministic handshake for golden test vectors only: a fixed ephemeral key destroys
    /// forward secrecy and must never be used on a real connection.
    #[cfg(feature = "testing")]
    pub fn with_fixed_ephemeral_for_testing(
        name: &ServerName,
        config: HandshakeConfig,
        ephemeral: [u8; 32],
    ) -> Handshake<Client> {
        Self::client(name, config, Some(ephemeral))
    }

    /// A handshake that sends C1 at once, with `server_key` remembered from an earlier
    /// connection to `name`. The key is checked against the name first (so a wrong or stale
    /// key is refused here, and the caller falls back to [`Handshake::new`]), and the server's
    /// S0 must then carry exactly this key.
    pub fn with_known_key(
        name: &ServerName,
        config: HandshakeConfig,
        server_key: [u8; PUBLIC_KEY_LEN],
    ) -> Result<Handshake<Client>, HandshakeError> {
        let name = name.without_path();
        name.verify_key(&server_key)?;
        let s0 = server_key_body(&server_key);
        let mut out = Vec::new();
        let hello = send_client_hello(&s0, server_key, config, None, &mut out)?;
        let first = AwaitKeyRepeated { s0, hello };
        Ok(Handshake::start(Progress::Wait(Box::new(first)), out))
    }

    fn client(
        name: &ServerName,
        config: HandshakeConfig,
        fixed_ephemeral: Option<[u8; 32]>,
    ) -> Handshake<Client> {
        let first = AwaitServerKey {
            name: name.without_path(),
            config,
            fixed_ephemeral,
        };
        Handshake::start(Progress::Wait(Box::new(first)), Vec::new())
    }
}

/// First step: nothing sent yet, waiting for the server's key message.
struct AwaitServerKey {
    /// The name the server's key must match.
    name: ServerName,
    config: HandshakeConfig,
    /// Golden tests only (see [`Handshake::with_fixed_ephemeral_for_testing`]).
    fixed_ephemeral: Option<[u8; 32]>,
}

impl Step for AwaitServerKey {
    fn on_frame(self: Box<Self>, body: &[u8], out: &mut Vec<u8>) -> Result<Next, HandshakeError> {
        if body.len() != 4 + PUBLIC_KEY_LEN || body[..4] != SERVER_KEY_MAGIC {
            return Err(HandshakeError::BadServerKeyMessage);
        }
        let mut server_key = [0u8; PUBLIC_KEY_LEN];
        server_key.copy_from_slice(&body[4..]);
        self.name.verify_key(&server_key)?;
        let hello = send_client_hello(
            body,
            server_key,
            self.config,
            self.fixed_ephemeral.as_ref(),
            out,
        )?;
        Ok(Next::Wait(Box::new(hello)))
    }
}

/// Starts Noise with the server's key message `s0` in the prologue and appends C1 to `out`.
fn send_client_hello(
    s0: &[u8],
    server_key: [u8; PUBLIC_KEY_LEN],
    config: HandshakeConfig,
    fixed_ephemeral: Option<&[u8; 32]>,
    out: &mut Vec<u8>,
) -> Result<AwaitServerHello, HandshakeError> {
    let prologue = prologue(s0);
    let mut builder = noise_builder()
        .remote_public_key(&server_key)
        .and_then(|b| b.prologue(&prologue))
        .map_err(noise_err)?;
    if let Some(e) = fixed_ephemeral {
        builder = builder.fixed_ephemeral_key_for_testing_only(e);
    }
    let mut noise = builder.build_initiator().map_err(noise_err)?;
    let msg = noise_write(&mut noise, &encode_client_hello(&config))?;
    push_frame(out, &msg);
    Ok(AwaitServerHello {
        config,
        noise: Box::new(noise),
        server_key,
    })
}

/// First step with a known key: C1 sent, waiting for S0 to repeat the key it was sent under.
struct AwaitKeyRepeated {
    s0: Vec<u8>,
    hello: AwaitServerHello,
}

impl Step for AwaitKeyRepeated {
    fn on_frame(self: Box<Self>, body: &[u8], _out: &mut Vec<u8>) -> Result<Next, HandshakeError> {
        if body.len() != 4 + PUBLIC_KEY_LEN || body[..4] != SERVER_KEY_MAGIC {
            return Err(HandshakeError::BadServerKeyMessage);
        }
        if body != self.s0.as_slice() {
            // A server at the name's location without the name's key: it could not have
            // read C1 anyway.
            return Err(HandshakeError::ServerKeyChanged);
        }
        Ok(Next::Wait(Box::new(self.hello)))
    }
}

/// Second step: ClientHello sent, waiting for the server's Noise reply.
struct AwaitServerHello {
    config: HandshakeConfig,
    noise: Box<HandshakeState>,
    /// The server's verified static key.
    server_key: [u8; PUBLIC_KEY_LEN],
}

impl Step for AwaitServerHello {
    fn on_frame(
        mut self: Box<Self>,
        body: &[u8],
        _out: &mut Vec<u8>,
    ) -> Result<Next, HandshakeError> {
        let mut payload = vec![0u8; body.len()];
        let n = self
            .noise
            .read_message(body, &mut payload)
            .map_err(|_| HandshakeError::ServerMessageRejected)?;
        let hello = decode_server_hello(&payload[..n]).map_err(HandshakeError::BadPayload)?;
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
        let keys = split(&mut self.noise)?;
        Ok(Next::Done(Box::new(Session {
            session_id: keys.session_id,
            version,
            sealer: Sealer::with_cipher(
                crate::record::Cipher::for_version(version),
                &keys.client_to_server,
                peer_max,
            ),
            opener: Opener::with_cipher(
                crate::record::Cipher::for_version(version),
                &keys.server_to_client,
                self.config.advertised_max() as usize,
            ),
            server_key: self.server_key,
        })))
    }
}
