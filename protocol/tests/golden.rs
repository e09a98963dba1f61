//! Golden byte vectors: the wire format must not drift silently. If one of these fails, the
//! format changed: bump the protocol version and update docs/PROTOCOL.md, do not just paste the
//! new bytes.

use protocol::handshake::{self, HandshakeConfig};
use protocol::record::{Opener, Sealer};
use protocol::*;

/// Compares `actual` with the golden value; with `GOLDEN_PRINT=1` prints it instead (that is
/// how the constants at the end were produced, once).
fn check(name: &str, want: &str, actual: &str) {
    if std::env::var_os("GOLDEN_PRINT").is_some() {
        println!("const {name}: &str = \"{actual}\";");
    } else {
        assert_eq!(actual, want, "{name} drifted");
    }
}

macro_rules! golden {
    ($name:ident, $actual:expr) => {
        check(stringify!($name), $name, &$actual)
    };
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn seq(start: u8) -> [u8; 32] {
    std::array::from_fn(|i| start.wrapping_add(i as u8))
}

/// The fixed setup of the golden handshake.
fn golden_keys() -> (ServerKeypair, ServerName) {
    let kp = ServerKeypair::from_secret(seq(0x01));
    let name = kp.server_name("golden.example".parse().unwrap());
    (kp, name)
}

#[test]
fn golden_server_key_and_name() {
    let (kp, name) = golden_keys();
    golden!(GOLDEN_SERVER_PUBLIC, hex(kp.public_key()));
    golden!(GOLDEN_NAME, name.to_string());
    golden!(GOLDEN_HOSTID_HEX, hex(name.host_id().as_bytes()));
}

/// Both sides speak version 2 only: the transcript was pinned then, and a version 3 peer sends
/// the same bytes to a version 2 one but for its hello's list of versions (section 11).
fn golden_config() -> HandshakeConfig {
    HandshakeConfig {
        versions: vec![2],
        ..HandshakeConfig::default()
    }
}

fn golden_pair() -> (ClientHandshake, ServerHandshake) {
    let (kp, name) = golden_keys();
    let c = ClientHandshake::with_fixed_ephemeral_for_testing(&name, golden_config(), seq(0x40));
    let s = ServerHandshake::with_fixed_ephemeral_for_testing(&kp, golden_config(), seq(0x80));
    (c, s)
}

#[test]
fn golden_handshake_transcript() {
    let (mut c, mut s) = golden_pair();
    let s0 = s.take_output();
    golden!(GOLDEN_S0, hex(&s0));
    assert_eq!(c.receive(&s0).unwrap(), s0.len());
    let c1 = c.take_output();
    golden!(GOLDEN_C1, hex(&c1));
    assert_eq!(s.receive(&c1).unwrap(), c1.len());
    let s1 = s.take_output();
    golden!(GOLDEN_S1, hex(&s1));
    assert_eq!(c.receive(&s1).unwrap(), s1.len());
    let mut cs = c.into_session().unwrap();
    let mut ss = s.into_session().unwrap();
    golden!(GOLDEN_SESSION_ID, hex(&cs.session_id));
    assert_eq!(cs.session_id, ss.session_id);
    assert_eq!(cs.version, 2);

    // First record each way.
    let req = Request {
        id: 1,
        authno: 0,
        op: RequestOp::Null,
    }
    .encode();
    let rec = cs.sealer.seal(&req).unwrap();
    golden!(GOLDEN_FIRST_CLIENT_RECORD, hex(&rec));
    assert_eq!(ss.opener.open(&rec).unwrap(), req);
    let rep = ServerMessage::Reply(Reply {
        id: 1,
        result: Ok(ReplyBody::Null),
    })
    .encode();
    let rec = ss.sealer.seal(&rep).unwrap();
    golden!(GOLDEN_FIRST_SERVER_RECORD, hex(&rec));
    assert_eq!(cs.opener.open(&rec).unwrap(), rep);

    // The same handshake driven by pump gives the same session.
    let (mut c, mut s) = golden_pair();
    handshake::pump(&mut c, &mut s).unwrap();
    golden!(
        GOLDEN_SESSION_ID,
        hex(&c.into_session().unwrap().session_id)
    );
}

#[test]
fn golden_records() {
    let key = [7u8; 32];
    let mut s = Sealer::new(&key, 4096);
    let r0 = s.seal(b"hello").unwrap();
    let r1 = s.seal(b"").unwrap();
    golden!(GOLDEN_RECORD_0, hex(&r0));
    golden!(GOLDEN_RECORD_1, hex(&r1));
    let mut o = Opener::new(&key, 4096);
    assert_eq!(o.open(&r0).unwrap(), b"hello");
    assert_eq!(o.open(&r1).unwrap(), b"");
}

/// Version 4's records: the same framing and nonces, sealed with AES-256-GCM.
#[test]
fn golden_aes_records() {
    use protocol::record::Cipher;
    let key = [7u8; 32];
    let mut s = Sealer::with_cipher(Cipher::Aes256Gcm, &key, 4096);
    let r0 = s.seal(b"hello").unwrap();
    let r1 = s.seal(b"").unwrap();
    golden!(GOLDEN_AES_RECORD_0, hex(&r0));
    golden!(GOLDEN_AES_RECORD_1, hex(&r1));
    let mut o = Opener::with_cipher(Cipher::Aes256Gcm, &key, 4096);
    assert_eq!(o.open(&r0).unwrap(), b"hello");
    assert_eq!(o.open(&r1).unwrap(), b"");
}

fn golden_attr() -> Attr {
    Attr {
        ftype: FileType::Regular,
        mode: 0o644,
        nlink: 1,
        uid: 1000,
        gid: 100,
        size: 5,
        used: 4096,
        rdev: (0, 0),
        fsid: 0x0102,
        fileid: 0x0304,
        atime: Time {
            seconds: 1_700_000_000,
            nanos: 1,
        },
        mtime: Time {
            seconds: 1_700_000_001,
            nanos: 2,
        },
        ctime: Time {
            seconds: -1,
            nanos: 999_999_999,
        },
        lease_ms: 60_000,
    }
}

fn golden_handle() -> FileHandle {
    HandleKey::new([9u8; 32]).seal(&HandleData {
        export_id: 1,
        device: 0x0801,
        inode: 0x1234_5678,
        generation: 42,
        backend: None,
    })
}

#[test]
fn golden_handle_bytes() {
    golden!(GOLDEN_HANDLE, hex(golden_handle().as_bytes()));
}

#[test]
fn golden_messages() {
    let fh = golden_handle();
    let lookup = Request {
        id: 0x0102030405060708,
        authno: 3,
        op: RequestOp::Lookup {
            dir: fh,
            name: b"hello.txt".to_vec(),
        },
    };
    golden!(GOLDEN_LOOKUP, hex(&lookup.encode()));
    let read = Request {
        id: 2,
        authno: 1,
        op: RequestOp::Read {
            fh,
            offset: 65536,
            count: 4096,
        },
    };
    golden!(GOLDEN_READ, hex(&read.encode()));
    let read_reply = ServerMessage::Reply(Reply {
        id: 2,
        result: Ok(ReplyBody::Read {
            attr: Some(golden_attr()),
            eof: true,
            data: b"hello".to_vec().into(),
        }),
    });
    golden!(GOLDEN_READ_REPLY, hex(&read_reply.encode()));
    let error_reply = ServerMessage::Reply(Reply {
        id: 3,
        result: Err(NfsStatus::NoEnt),
    });
    golden!(GOLDEN_ERROR_REPLY, hex(&error_reply.encode()));
    let invalidate = ServerMessage::Invalidate(Invalidate { fh, attr: None });
    golden!(GOLDEN_INVALIDATE, hex(&invalidate.encode()));
}

/// APPEND (proc 109): request and reply, so the extension's layout cannot drift either.
#[test]
fn golden_append() {
    let append = Request {
        id: 4,
        authno: 1,
        op: RequestOp::Append {
            fh: golden_handle(),
            stable: StableHow::Unstable,
            data: b"line\n".to_vec().into(),
        },
    };
    golden!(GOLDEN_APPEND, hex(&append.encode()));
    let reply = ServerMessage::Reply(Reply {
        id: 4,
        result: Ok(ReplyBody::Append {
            attr: None,
            count: 5,
            committed: StableHow::Unstable,
            verifier: [7; 8],
            offset: 0x1234,
        }),
    });
    golden!(GOLDEN_APPEND_REPLY, hex(&reply.encode()));
}

/// CREATEAT (proc 118): request and reply.
#[test]
fn golden_create_at() {
    let create = Request {
        id: 5,
        authno: 1,
        op: RequestOp::CreateAt {
            path: b"/up/new.bin".to_vec(),
            how: CreateHow::Guarded(SetAttr {
                mode: Some(0o644),
                size: Some(0),
                ..SetAttr::default()
            }),
        },
    };
    golden!(GOLDEN_CREATE_AT, hex(&create.encode()));
    let reply = ServerMessage::Reply(Reply {
        id: 5,
        result: Ok(ReplyBody::CreateAt {
            dir: golden_handle(),
            made: Box::new(NewObject {
                fh: Some(golden_handle()),
                attr: Some(golden_attr()),
                dir_attr: None,
            }),
        }),
    });
    golden!(GOLDEN_CREATE_AT_REPLY, hex(&reply.encode()));
}

#[test]
fn golden_login() {
    let (_, name) = golden_keys();
    let sid = seq(0xa0);
    let user = UserKeypair::from_seed(seq(0xc0));
    let stmt = login::login_statement(&sid, &name.host_id(), 1, "alice");
    golden!(GOLDEN_LOGIN_STATEMENT, hex(&stmt));
    let args = login::sign_login(&sid, &name.host_id(), 1, "alice", &user);
    golden!(GOLDEN_USER_PUBLIC, user.public_key().to_string());
    golden!(GOLDEN_LOGIN_SIGNATURE, hex(&args.signature));
    let req = Request {
        id: 4,
        authno: 0,
        op: RequestOp::Login(args.clone()),
    };
    golden!(GOLDEN_LOGIN_REQUEST, hex(&req.encode()));
    let mut v = LoginVerifier::new(sid, name.host_id());
    v.verify(&args).unwrap();
}

/// LOCK, UNLOCK and TESTLOCK (docs/PROTOCOL.md, "Locks"), byte by byte.
#[test]
fn golden_locks() {
    let fh = golden_handle();
    let lock = Request {
        id: 5,
        authno: 1,
        op: RequestOp::Lock(LockArgs {
            fh,
            owner: 0x1122334455667788,
            kind: LockKind::Write,
            start: 100,
            len: 0,
            flock: false,
            reclaim: false,
        }),
    };
    golden!(GOLDEN_LOCK, hex(&lock.encode()));
    let unlock = Request {
        id: 6,
        authno: 1,
        op: RequestOp::Unlock(UnlockArgs {
            fh,
            owner: 7,
            start: 0,
            len: 0,
            flock: true,
        }),
    };
    golden!(GOLDEN_UNLOCK, hex(&unlock.encode()));
    let test = Request {
        id: 7,
        authno: 1,
        op: RequestOp::TestLock(TestLockArgs {
            fh,
            owner: 7,
            kind: LockKind::Read,
            start: 0,
            len: 10,
            flock: false,
        }),
    };
    golden!(GOLDEN_TESTLOCK, hex(&test.encode()));
    let conflict = ServerMessage::Reply(Reply {
        id: 7,
        result: Ok(ReplyBody::TestLock {
            conflict: Some(LockConflict {
                kind: LockKind::Write,
                start: 100,
                len: 0,
                holder: 3,
            }),
        }),
    });
    golden!(GOLDEN_TESTLOCK_REPLY, hex(&conflict.encode()));
    let denied = ServerMessage::Reply(Reply {
        id: 5,
        result: Err(NfsStatus::Denied),
    });
    golden!(GOLDEN_DENIED_REPLY, hex(&denied.encode()));
}

const GOLDEN_SERVER_PUBLIC: &str =
    "07a37cbc142093c8b755dc1b10e86cb426374ad16aa853ed0bdfc0b2b86d1c7c";
const GOLDEN_NAME: &str = "@golden.example,qgb279mykna3ygncmhv597gyij86gt4x";
const GOLDEN_HOSTID_HEX: &str = "71838efd7653019b198259e7bff4d6427dc34755";
const GOLDEN_S0: &str =
    "00245346534b07a37cbc142093c8b755dc1b10e86cb426374ad16aa853ed0bdfc0b2b86d1c7c";
const GOLDEN_C1: &str = "003c79a631eede1bf9c98f12032cdeadd0e7a079398fc786b88cc846ec89af85a51a0c3b3bb775f70c89658d5fc53d00ab7982054a01569842be85acd95b";
const GOLDEN_S1: &str = "003c493e82fc74464a59268817623d2053c5eb8e2cc4a988b4fee179ec6b010d531d0d35b9ea47a73814954844332359e0ffd12d0ca04fbfe57e4bda7a35";
const GOLDEN_SESSION_ID: &str = "6c89279fdb94ef3fa95194d1a77f146ec89c7c259d010df1815b6652493b57f0";
const GOLDEN_FIRST_CLIENT_RECORD: &str =
    "000000107e113aa142e871d759d950d48a6fef76c2515805a0ad27d047e93d5b7365cdc8";
const GOLDEN_FIRST_SERVER_RECORD: &str =
    "00000014c1fb081eaceac229a46d8447641a07f7e6e47089f0f630fa5d85483cc64d5ed3bcff2d1d";
const GOLDEN_RECORD_0: &str = "000000055fe145600fa268124eca8af793728effffbc40bbe8";
const GOLDEN_RECORD_1: &str = "0000000057461cb12f57e7b331185eed71e86765";
const GOLDEN_HANDLE: &str = "0000000100000000000008010000000012345678000000000000002ac27bd1655725124ef73bd124749a666b62c4865e";
const GOLDEN_LOOKUP: &str = "01020304050607080000000300000003000000300000000100000000000008010000000012345678000000000000002ac27bd1655725124ef73bd124749a666b62c4865e0000000968656c6c6f2e747874000000";
const GOLDEN_READ: &str = "00000000000000020000000100000006000000300000000100000000000008010000000012345678000000000000002ac27bd1655725124ef73bd124749a666b62c4865e000000000001000000001000";
const GOLDEN_READ_REPLY: &str = "00000001000000000000000200000000000000060000000100000001000001a400000001000003e80000006400000000000000050000000000001000000000000000000000000000000001020000000000000304000000006553f10000000001000000006553f10100000002ffffffffffffffff3b9ac9ff0000ea60000000010000000568656c6c6f000000";
const GOLDEN_ERROR_REPLY: &str = "00000001000000000000000300000002";
const GOLDEN_INVALIDATE: &str = "00000002000000300000000100000000000008010000000012345678000000000000002ac27bd1655725124ef73bd124749a666b62c4865e00000000";
const GOLDEN_LOGIN_STATEMENT: &str = "5346532d4c4f47494e2d3100a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf71838efd7653019b198259e7bff4d6427dc34755000000000000000100000005616c696365";
const GOLDEN_USER_PUBLIC: &str =
    "ed25519:dde3bccec7f3a66a1115f45d720f4dc135c3ae7c4e22dca38fdb1efd6a495ff8";
const GOLDEN_LOGIN_SIGNATURE: &str = "f5657070be96547212af7609a4ba18864e129146f7abf059f41fe26d0cf95e8c013c2d8cc9159028c6329879f65391fba2efec04d7c06c027f6e57734b065202";
const GOLDEN_LOGIN_REQUEST: &str = "0000000000000004000000000000006500000005616c696365000000dde3bccec7f3a66a1115f45d720f4dc135c3ae7c4e22dca38fdb1efd6a495ff80000000000000001f5657070be96547212af7609a4ba18864e129146f7abf059f41fe26d0cf95e8c013c2d8cc9159028c6329879f65391fba2efec04d7c06c027f6e57734b065202";
const GOLDEN_APPEND: &str = "0000000000000004000000010000006d000000300000000100000000000008010000000012345678000000000000002ac27bd1655725124ef73bd124749a666b62c4865e00000000000000056c696e650a000000";
const GOLDEN_APPEND_REPLY: &str = "000000010000000000000004000000000000006d00000000000000050000000007070707070707070000000000001234";
const GOLDEN_AES_RECORD_0: &str = "0000000509bdc8de9455c7f128d501bd2ec95cbe2bd41aada0";
const GOLDEN_AES_RECORD_1: &str = "000000003b01f64808767a6a2215c095d5e5e5ce";
const GOLDEN_LOCK: &str = "00000000000000050000000100000071000000300000000100000000000008010000000012345678000000000000002ac27bd1655725124ef73bd124749a666b62c4865e112233445566778800000002000000000000006400000000000000000000000000000000";
const GOLDEN_UNLOCK: &str = "00000000000000060000000100000072000000300000000100000000000008010000000012345678000000000000002ac27bd1655725124ef73bd124749a666b62c4865e00000000000000070000000000000000000000000000000000000001";
const GOLDEN_TESTLOCK: &str = "00000000000000070000000100000073000000300000000100000000000008010000000012345678000000000000002ac27bd1655725124ef73bd124749a666b62c4865e0000000000000007000000010000000000000000000000000000000a00000000";
const GOLDEN_TESTLOCK_REPLY: &str = "00000001000000000000000700000000000000730000000100000002000000000000006400000000000000000000000000000003";
const GOLDEN_DENIED_REPLY: &str = "0000000100000000000000050000271a";
const GOLDEN_CREATE_AT: &str = "000000000000000500000001000000760000000b2f75702f6e65772e62696e000000000100000001000001a400000000000000000000000100000000000000000000000000000000";
const GOLDEN_CREATE_AT_REPLY: &str = "0000000100000000000000050000000000000076000000300000000100000000000008010000000012345678000000000000002ac27bd1655725124ef73bd124749a666b62c4865e00000001000000300000000100000000000008010000000012345678000000000000002ac27bd1655725124ef73bd124749a666b62c4865e0000000100000001000001a400000001000003e80000006400000000000000050000000000001000000000000000000000000000000001020000000000000304000000006553f10000000001000000006553f10100000002ffffffffffffffff3b9ac9ff0000ea6000000000";
