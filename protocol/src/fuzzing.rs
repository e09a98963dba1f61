//! Entry points for fuzzers and for the hostile-input property tests.
//!
//! Each function takes arbitrary bytes, must never panic, and asserts the invariants that hold
//! for any input (a decoded message re-encodes to exactly the same bytes, a parsed name prints
//! back to an equal name, a tampered login never verifies...). `protocol/fuzz` calls them from
//! cargo-fuzz targets, and `tests/hostile.rs` from proptest, so CI exercises the same code
//! without a nightly toolchain.

use crate::handle::{HandleData, HandleKey};
use crate::handshake::{ClientHandshake, HandshakeConfig, ServerHandshake};
use crate::keys::{ServerKeypair, UserKeypair};
use crate::login::{LoginVerifier, sign_login};
use crate::message::{Request, ServerMessage};
use crate::name::{HostId, Location, ServerName};
use crate::record::{Opener, RecordReader, Sealer};
use crate::request::RequestOp;

const FUZZ_SERVER_SECRET: [u8; 32] = [0x42; 32];

/// The fuzzers' server key, derived once (an X25519 base multiplication per input would
/// dominate the fuzzers' time).
fn server_keypair() -> &'static ServerKeypair {
    static KP: std::sync::OnceLock<ServerKeypair> = std::sync::OnceLock::new();
    KP.get_or_init(|| ServerKeypair::from_secret(FUZZ_SERVER_SECRET))
}
const FUZZ_RECORD_KEY: [u8; 32] = [0x17; 32];
const FUZZ_MAX_PAYLOAD: usize = 1 << 16;

/// Decodes a request; one that decodes must re-encode to the same bytes, and decoding it in
/// place in a larger buffer ([`Request::decode_owned`]) must give the same result.
pub fn decode_request(data: &[u8]) {
    let decoded = Request::decode(data);
    if let Ok(req) = &decoded {
        assert_eq!(req.encode(), data, "request encoding is not canonical");
    }
    // The server's path without a copy (the payload inside its receive buffer) agrees.
    let owned = Request::decode_owned(in_larger_buffer(data), 3..3 + data.len());
    assert_eq!(
        owned.as_ref().ok(),
        decoded.as_ref().ok(),
        "decode_owned and decode disagree"
    );
}

/// Decodes a server message; one that decodes must re-encode to the same bytes, and decoding
/// it in place in a larger buffer ([`ServerMessage::decode_owned`]) must give the same result.
pub fn decode_server_message(data: &[u8]) {
    let decoded = ServerMessage::decode(data);
    if let Ok(msg) = &decoded {
        assert_eq!(
            msg.encode(),
            data,
            "server message encoding is not canonical"
        );
    }
    // The client's path without a copy (the payload inside its receive buffer) agrees.
    let owned = ServerMessage::decode_owned(in_larger_buffer(data), 3..3 + data.len());
    assert_eq!(
        owned.as_ref().ok(),
        decoded.as_ref().ok(),
        "decode_owned and decode disagree"
    );
}

/// `data` with bytes before (3) and after it, as a payload sits in a receive buffer.
fn in_larger_buffer(data: &[u8]) -> Vec<u8> {
    let mut buf = vec![0xA5; 3];
    buf.extend_from_slice(data);
    buf.extend_from_slice(&[0x5A; 5]);
    buf
}

/// Feeds `data` as a record stream (in chunks whose sizes come from the data) and seals and
/// reopens it as a payload.
pub fn open_records(data: &[u8]) {
    let mut reader = RecordReader::new(Opener::new(&FUZZ_RECORD_KEY, FUZZ_MAX_PAYLOAD));
    let chunk = usize::from(data.first().copied().unwrap_or(1)).max(1);
    for piece in data.chunks(chunk) {
        reader.extend_from_slice(piece);
        while let Ok(Some(_)) = reader.next_record() {}
        if reader.opener().has_failed() {
            assert!(
                reader.next_record().is_err(),
                "a failed opener must stay failed"
            );
            return;
        }
    }
    let _ = reader.finish();

    let mut opener = Opener::new(&FUZZ_RECORD_KEY, FUZZ_MAX_PAYLOAD);
    let _ = opener.open(data);

    let mut sealer = Sealer::new(&FUZZ_RECORD_KEY, FUZZ_MAX_PAYLOAD);
    let mut opener = Opener::new(&FUZZ_RECORD_KEY, FUZZ_MAX_PAYLOAD);
    if let Ok(rec) = sealer.seal(data) {
        assert_eq!(opener.open(&rec).expect("own record opens"), data);
    }
}

/// A server handshake fed arbitrary client bytes.
pub fn server_handshake(data: &[u8]) {
    let mut hs = ServerHandshake::new(server_keypair());
    let _ = hs.take_output();
    match hs.receive(data) {
        Ok(n) => assert!(n <= data.len()),
        Err(_) => assert!(
            hs.receive(b"x").is_err(),
            "a failed handshake must stay failed"
        ),
    }
    let _ = hs.into_session();
}

/// A client handshake fed arbitrary server bytes. First byte odd: a genuine server key message
/// is fed first, so the rest reaches the Noise reply parsing.
pub fn client_handshake(data: &[u8]) {
    let kp = server_keypair();
    let name = kp.server_name(Location::new("fuzz.example", 4004).expect("valid location"));
    let mut hs = ClientHandshake::with_config(&name, HandshakeConfig::default());
    let rest = match data.split_first() {
        Some((&mode, rest)) if mode & 1 == 1 => {
            let mut server = ServerHandshake::new(kp);
            let s0 = server.take_output();
            hs.receive(&s0).expect("genuine server key accepted");
            rest
        }
        _ => data,
    };
    match hs.receive(rest) {
        Ok(n) => assert!(n <= rest.len()),
        Err(_) => assert!(
            hs.receive(b"x").is_err(),
            "a failed handshake must stay failed"
        ),
    }
    let _ = hs.take_output();
    let _ = hs.into_session();
}

/// Parses a server name; one that parses must print and re-parse to an equal name.
pub fn server_name(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(name) = text.parse::<ServerName>() {
        let printed = name.to_string();
        let again: ServerName = printed.parse().expect("printed name parses");
        assert_eq!(again, name);
        assert_eq!(again.to_string(), printed);
    }
    let _ = text.parse::<HostId>();
    let _ = text.parse::<Location>();
    let _ = text.parse::<crate::keys::UserPublicKey>();
    let _ = ServerKeypair::from_text(text);
    let _ = UserKeypair::from_text(text);
}

/// Verifies arbitrary bytes as a handle, and a genuine handle with `data` XORed into it: only
/// the untouched handle verifies.
pub fn handle_verify(data: &[u8]) {
    let key = HandleKey::new(FUZZ_SERVER_SECRET);
    if let Ok(d) = key.verify_bytes(data) {
        assert_eq!(key.seal(&d).as_bytes(), data);
    }
    let genuine = key.seal(&HandleData {
        export_id: 1,
        device: 2,
        inode: 3,
        generation: 4,
        backend: None,
    });
    let mut bytes = genuine.as_bytes().to_vec();
    for (b, x) in bytes.iter_mut().zip(data) {
        *b ^= x;
    }
    let ok = key.verify_bytes(&bytes).is_ok();
    assert_eq!(ok, bytes == genuine.as_bytes(), "tampered handle verified");
}

/// Verifies arbitrary bytes as a LOGIN request, and a genuine LOGIN with `data` XORed into its
/// encoding: a login verifies only if it is the genuine one.
pub fn login_verify(data: &[u8]) {
    let session_id = [0x33; 32];
    let host_id = HostId::from_bytes([0x44; 20]);
    let user = UserKeypair::from_seed([0x55; 32]);
    let genuine = sign_login(&session_id, &host_id, 7, "alice", &user);

    if let Ok(Request {
        op: RequestOp::Login(args),
        ..
    }) = Request::decode(data)
    {
        let mut v = LoginVerifier::new(session_id, host_id);
        if v.verify(&args).is_ok() {
            assert_eq!(args, genuine, "forged login verified");
        }
    }

    let mut wire = Request {
        id: 1,
        authno: 0,
        op: RequestOp::Login(genuine.clone()),
    }
    .encode();
    for (b, x) in wire.iter_mut().zip(data) {
        *b ^= x;
    }
    if let Ok(Request {
        op: RequestOp::Login(args),
        ..
    }) = Request::decode(&wire)
    {
        let mut v = LoginVerifier::new(session_id, host_id);
        if v.verify(&args).is_ok() {
            assert_eq!(args, genuine, "tampered login verified");
            assert!(v.verify(&args).is_err(), "replayed login verified");
        }
    }
}
