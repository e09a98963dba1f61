//! The handshake's wire format and crypto steps, shared by both sides: frames, the Noise
//! setup and split, and the hello payloads. No state lives here.

use snow::{Builder, HandshakeState};

use super::{
    HELLO_ACCEPT, HELLO_REFUSE, HandshakeConfig, MAX_FRAME, MAX_OFFERED_VERSIONS, NOISE_OVERHEAD,
    NOISE_PARAMS, PROLOGUE_TAG, SERVER_KEY_MAGIC, SESSION_ID_LEN,
};
use crate::error::{DecodeError, HandshakeError};
use crate::name::PUBLIC_KEY_LEN;
use crate::record::{MAX_MAX_PAYLOAD, MIN_MAX_PAYLOAD, RecordKey};
use crate::xdr::{self, Reader};

/// Accumulates one length-prefixed handshake frame.
#[derive(Debug, Default)]
pub(super) struct FrameBuf {
    buf: Vec<u8>,
}

impl FrameBuf {
    /// Consumes bytes of `input` up to the end of one frame; returns how many were consumed and
    /// the frame body once complete.
    pub(super) fn feed(
        &mut self,
        input: &[u8],
    ) -> Result<(usize, Option<Vec<u8>>), HandshakeError> {
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

pub(super) fn push_frame(out: &mut Vec<u8>, body: &[u8]) {
    // Bodies we build are far below MAX_FRAME.
    out.extend_from_slice(&(body.len() as u16).to_be_bytes());
    out.extend_from_slice(body);
}

pub(super) fn noise_builder<'a>() -> Builder<'a> {
    Builder::new(NOISE_PARAMS.parse().expect("valid Noise parameters"))
}

pub(super) fn noise_err(e: snow::Error) -> HandshakeError {
    HandshakeError::Noise(e.to_string())
}

pub(super) fn server_key_body(public: &[u8; PUBLIC_KEY_LEN]) -> Vec<u8> {
    let mut body = Vec::with_capacity(4 + PUBLIC_KEY_LEN);
    body.extend_from_slice(&SERVER_KEY_MAGIC);
    body.extend_from_slice(public);
    body
}

pub(super) fn prologue(s0_body: &[u8]) -> Vec<u8> {
    [PROLOGUE_TAG, s0_body].concat()
}

/// Writes a Noise message carrying `payload` and returns it.
pub(super) fn noise_write(
    noise: &mut HandshakeState,
    payload: &[u8],
) -> Result<Vec<u8>, HandshakeError> {
    let mut msg = vec![0u8; payload.len() + NOISE_OVERHEAD];
    let n = noise.write_message(payload, &mut msg).map_err(noise_err)?;
    msg.truncate(n);
    Ok(msg)
}

/// What a finished Noise handshake yields: the session id and the two record keys.
pub(super) struct SessionKeys {
    pub(super) session_id: [u8; SESSION_ID_LEN],
    pub(super) client_to_server: RecordKey,
    pub(super) server_to_client: RecordKey,
}

/// Splits a finished Noise handshake into the session id and the two direction keys.
pub(super) fn split(noise: &mut HandshakeState) -> Result<SessionKeys, HandshakeError> {
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

pub(super) fn check_peer_max(max: u32) -> Result<usize, HandshakeError> {
    if (max as usize) < MIN_MAX_PAYLOAD {
        return Err(HandshakeError::RecordLimitTooSmall {
            got: max,
            min: MIN_MAX_PAYLOAD as u32,
        });
    }
    Ok((max as usize).min(MAX_MAX_PAYLOAD))
}

/// ClientHello = u32 count || count * u32 version || u32 max_record_payload.
pub(super) fn encode_client_hello(cfg: &HandshakeConfig) -> Vec<u8> {
    let mut p = Vec::new();
    let versions = &cfg.versions[..cfg.versions.len().min(MAX_OFFERED_VERSIONS)];
    xdr::put_count(&mut p, versions.len());
    for &v in versions {
        xdr::put_u32(&mut p, v);
    }
    xdr::put_u32(&mut p, cfg.advertised_max());
    p
}

pub(super) fn decode_client_hello(payload: &[u8]) -> Result<(Vec<u32>, u32), DecodeError> {
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
pub(super) enum ServerHello {
    Accept {
        version: u32,
        max_record_payload: u32,
    },
    Refuse {
        versions: Vec<u32>,
    },
}

pub(super) fn encode_server_hello(h: &ServerHello) -> Vec<u8> {
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

pub(super) fn decode_server_hello(payload: &[u8]) -> Result<ServerHello, DecodeError> {
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
