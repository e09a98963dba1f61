//! The server's one step: its key message (S0) is output at once; wait for the client's Noise
//! message (C1), choose the version, answer with the Noise reply (S1, an acceptance or an
//! authenticated refusal) and derive the session.

use snow::HandshakeState;

use super::wire::{
    ServerHello, check_peer_max, decode_client_hello, encode_server_hello, noise_builder,
    noise_err, noise_write, prologue, push_frame, server_key_body, split,
};
use super::{Handshake, HandshakeConfig, Next, Progress, Server, Session, Step};
use crate::error::HandshakeError;
use crate::keys::ServerKeypair;
use crate::record::{Opener, Sealer};

impl Handshake<Server> {
    /// A handshake for a newly accepted connection, speaking every supported version. Its first
    /// output (the server key message) is ready at once.
    pub fn new(keypair: &ServerKeypair) -> Handshake<Server> {
        Self::with_config(keypair, HandshakeConfig::default())
    }

    /// A handshake with explicit versions and record limit.
    pub fn with_config(keypair: &ServerKeypair, config: HandshakeConfig) -> Handshake<Server> {
        Self::server(keypair, config, None)
    }

    /// Deterministic handshake for golden test vectors only (see
    /// [`Handshake::with_fixed_ephemeral_for_testing`](super::ClientHandshake::with_fixed_ephemeral_for_testing)).
    #[cfg(feature = "testing")]
    pub fn with_fixed_ephemeral_for_testing(
        keypair: &ServerKeypair,
        config: HandshakeConfig,
        ephemeral: [u8; 32],
    ) -> Handshake<Server> {
        Self::server(keypair, config, Some(ephemeral))
    }

    fn server(
        keypair: &ServerKeypair,
        config: HandshakeConfig,
        ephemeral: Option<[u8; 32]>,
    ) -> Handshake<Server> {
        let body = server_key_body(keypair.public_key());
        let mut output = Vec::new();
        push_frame(&mut output, &body);
        let step = AwaitClientHello {
            config,
            keypair: keypair.clone(),
            prologue: prologue(&body),
            ephemeral,
        };
        Handshake::start(Progress::Wait(Box::new(step)), output)
    }
}

/// The server's step: key message sent, waiting for the client's Noise message. The Noise
/// state is made only when that message arrives: making it derives the static public key (a
/// scalar multiplication), which a connection that never speaks must not cost the server (a
/// flood of silent connections costs it no cryptography at all).
struct AwaitClientHello {
    config: HandshakeConfig,
    keypair: ServerKeypair,
    prologue: Vec<u8>,
    /// A fixed ephemeral key (golden test vectors only).
    ephemeral: Option<[u8; 32]>,
}

impl AwaitClientHello {
    fn responder(&self) -> Result<HandshakeState, HandshakeError> {
        let b = noise_builder()
            .local_private_key(self.keypair.secret_key())
            .and_then(|b| b.prologue(&self.prologue))
            .map_err(noise_err)?;
        match &self.ephemeral {
            Some(e) => b.fixed_ephemeral_key_for_testing_only(e).build_responder(),
            None => b.build_responder(),
        }
        .map_err(noise_err)
    }
}

impl Step for AwaitClientHello {
    fn on_frame(self: Box<Self>, body: &[u8], out: &mut Vec<u8>) -> Result<Next, HandshakeError> {
        let mut noise = self.responder()?;
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
            push_frame(out, &msg);
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
        push_frame(out, &msg);
        let keys = split(&mut noise)?;
        Ok(Next::Done(Box::new(Session {
            session_id: keys.session_id,
            version,
            sealer: Sealer::with_cipher(
                crate::record::Cipher::for_version(version),
                &keys.server_to_client,
                peer_max,
            ),
            opener: Opener::with_cipher(
                crate::record::Cipher::for_version(version),
                &keys.client_to_server,
                self.config.advertised_max() as usize,
            ),
            server_key: *self.keypair.public_key(),
        })))
    }
}
