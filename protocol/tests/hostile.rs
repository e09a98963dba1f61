//! Hostile input: tampering, replay, reordering, truncation, oversized lengths, wrong keys and
//! names, forged logins; plus the fuzz entry points run as property tests.

mod common;

use proptest::prelude::*;
use protocol::handshake::{self, HandshakeConfig};
use protocol::record::{Opener, RecordReader, Sealer};
use protocol::*;

fn location() -> Location {
    Location::new("server.example", 4004).unwrap()
}

fn sessions() -> (Session, Session) {
    let kp = ServerKeypair::generate();
    let mut c = ClientHandshake::new(&kp.server_name(location()));
    let mut s = ServerHandshake::new(&kp);
    handshake::pump(&mut c, &mut s).unwrap();
    (c.into_session().unwrap(), s.into_session().unwrap())
}

// ---- records ----

#[test]
fn every_flipped_bit_is_rejected() {
    let key = [1u8; 32];
    let rec = Sealer::new(&key, 1000).seal(b"some payload").unwrap();
    for bit in 0..rec.len() * 8 {
        let mut bad = rec.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        let mut o = Opener::new(&key, 1000);
        assert!(o.open(&bad).is_err(), "bit {bit} flip accepted");
        // The stream reader either rejects it or waits for bytes that never come.
        let mut r = RecordReader::new(Opener::new(&key, 1000));
        r.extend_from_slice(&bad);
        match r.next_record() {
            Err(_) => {}
            Ok(None) => assert!(r.finish().is_err()),
            Ok(Some(p)) => panic!("bit {bit} flip opened as {p:?}"),
        }
    }
}

#[test]
fn replayed_reordered_and_dropped_records_fail() {
    let key = [2u8; 32];
    let mut s = Sealer::new(&key, 100);
    let r0 = s.seal(b"zero").unwrap();
    let r1 = s.seal(b"one").unwrap();

    let mut o = Opener::new(&key, 100);
    assert_eq!(o.open(&r0).unwrap(), b"zero");
    assert_eq!(o.open(&r0), Err(RecordError::Authentication), "replay");

    let mut o = Opener::new(&key, 100);
    assert_eq!(
        o.open(&r1),
        Err(RecordError::Authentication),
        "reorder/drop"
    );
    assert_eq!(o.open(&r0), Err(RecordError::Poisoned), "stays failed");
}

#[test]
fn records_from_another_session_or_direction_fail() {
    let (mut c1, mut s1) = sessions();
    let (_c2, mut s2) = sessions();
    let rec = c1.sealer.seal(b"for session 1").unwrap();
    assert_eq!(s2.opener.open(&rec), Err(RecordError::Authentication));
    assert_eq!(c1.opener.open(&rec), Err(RecordError::Authentication));
    assert_eq!(s1.opener.open(&rec).unwrap(), b"for session 1");
    let back = s1.sealer.seal(b"reply").unwrap();
    assert_eq!(c1.opener.open(&back), Err(RecordError::Poisoned));
}

#[test]
fn truncated_records_fail() {
    let key = [3u8; 32];
    let rec = Sealer::new(&key, 100).seal(b"payload").unwrap();
    for cut in 0..rec.len() {
        let mut o = Opener::new(&key, 100);
        assert!(
            matches!(o.open(&rec[..cut]), Err(RecordError::Truncated { .. })),
            "cut {cut}"
        );
        let mut r = RecordReader::new(Opener::new(&key, 100));
        r.extend_from_slice(&rec[..cut]);
        assert_eq!(r.next_record(), Ok(None));
        if cut == 0 {
            r.finish().unwrap();
        } else {
            assert!(matches!(r.finish(), Err(RecordError::Truncated { have, .. }) if have == cut));
        }
    }
    // A record with its length shortened no longer authenticates.
    let mut short = rec.clone();
    short[3] -= 1;
    short.pop();
    assert_eq!(
        Opener::new(&key, 100).open(&short),
        Err(RecordError::Authentication)
    );
}

#[test]
fn oversized_lengths_are_refused_from_the_header_alone() {
    let key = [4u8; 32];
    let mut r = RecordReader::new(Opener::new(&key, 1000));
    r.extend_from_slice(&1001u32.to_be_bytes());
    assert_eq!(
        r.next_record(),
        Err(RecordError::TooLarge {
            len: 1001,
            max: 1000
        })
    );
    // A hostile header does not make the reader allocate: the next read buffer stays small.
    let mut r = RecordReader::new(Opener::new(&key, 1000));
    r.extend_from_slice(&u32::MAX.to_be_bytes());
    assert!(r.read_buf().len() <= 64 * 1024);
    assert!(r.next_record().is_err());
    // The sealer refuses what the peer would refuse.
    assert!(matches!(
        Sealer::new(&key, 1000).seal(&[0; 1001]),
        Err(RecordError::TooLarge { .. })
    ));
    let mut out = vec![9];
    let mut s = Sealer::new(&key, 10);
    let start = s.begin(&mut out);
    out.extend_from_slice(&[0; 11]);
    assert!(s.finish(&mut out, start).is_err());
    assert_eq!(out, [9], "buffer restored after a refused record");
}

#[test]
fn open_from_drains_whole_records_only() {
    let key = [5u8; 32];
    let mut s = Sealer::new(&key, 100);
    let mut wire = Vec::new();
    s.seal_into(b"a", &mut wire).unwrap();
    s.seal_into(b"bc", &mut wire).unwrap();
    wire.extend_from_slice(&[0, 0]); // half a header
    let mut o = Opener::new(&key, 100);
    assert_eq!(o.open_from(&mut wire).unwrap().unwrap(), b"a");
    assert_eq!(o.open_from(&mut wire).unwrap().unwrap(), b"bc");
    assert_eq!(o.open_from(&mut wire).unwrap(), None);
    assert_eq!(wire, [0, 0]);
}

// ---- handshake ----

#[test]
fn wrong_hostid_is_refused_by_the_client() {
    let real = ServerKeypair::generate();
    let other = ServerKeypair::generate();
    // A HOSTID is bound to a key *and* a location: the real key's HOSTID for another
    // location does not certify it here.
    let moved = |host: &str, port: u16| {
        ServerName::new(
            location(),
            real.host_id(&Location::new(host, port).unwrap()),
        )
    };
    for name in [
        other.server_name(location()),
        moved("server.example", 4005),
        moved("other.example", 4004),
    ] {
        let mut c = ClientHandshake::new(&name);
        let mut s = ServerHandshake::new(&real);
        let err = handshake::pump(&mut c, &mut s).unwrap_err();
        assert!(
            matches!(err, HandshakeError::HostIdMismatch { expected, .. } if expected == name.host_id()),
            "{err}"
        );
        assert!(err.to_string().contains(&name.host_id().to_string()));
    }
}

#[test]
fn impostor_replaying_the_real_key_cannot_finish() {
    let real = ServerKeypair::generate();
    let impostor = ServerKeypair::generate();
    let name = real.server_name(location());
    let mut c = ClientHandshake::new(&name);
    // The impostor sends the genuine server's key message...
    let s0 = ServerHandshake::new(&real).take_output();
    c.receive(&s0).unwrap();
    let c1 = c.take_output();
    // ...but cannot read the client's message without the secret key.
    let mut fake = ServerHandshake::new(&impostor);
    fake.take_output();
    assert_eq!(
        fake.receive(&c1),
        Err(HandshakeError::ClientMessageRejected)
    );
    // Nor forge a reply: a reply from a responder with another key is rejected.
    let mut other = ServerHandshake::new(&impostor);
    let mut c2 = ClientHandshake::new(&impostor.server_name(location()));
    c2.receive(&other.take_output()).unwrap();
    other.receive(&c2.take_output()).unwrap();
    assert_eq!(
        c.receive(&other.take_output()),
        Err(HandshakeError::ServerMessageRejected)
    );
}

#[test]
fn tampered_handshake_messages_fail() {
    let kp = ServerKeypair::generate();
    let name = kp.server_name(location());
    // Tampered C1.
    let mut c = ClientHandshake::new(&name);
    let mut s = ServerHandshake::new(&kp);
    c.receive(&s.take_output()).unwrap();
    let mut c1 = c.take_output();
    let last = c1.len() - 1;
    c1[last] ^= 1;
    assert_eq!(s.receive(&c1), Err(HandshakeError::ClientMessageRejected));
    // Tampered S1.
    let mut c = ClientHandshake::new(&name);
    let mut s = ServerHandshake::new(&kp);
    c.receive(&s.take_output()).unwrap();
    s.receive(&c.take_output()).unwrap();
    let mut s1 = s.take_output();
    s1[10] ^= 0x80;
    assert_eq!(c.receive(&s1), Err(HandshakeError::ServerMessageRejected));
    // Bad magic.
    let mut c = ClientHandshake::new(&name);
    let mut s0 = ServerHandshake::new(&kp).take_output();
    s0[2] = b'X';
    assert_eq!(c.receive(&s0), Err(HandshakeError::BadServerKeyMessage));
}

#[test]
fn a_non_sfs_client_is_turned_away_at_once() {
    let mut s = ServerHandshake::new(&ServerKeypair::generate());
    let err = s.receive(b"GET / HTTP/1.1\r\n\r\n").unwrap_err();
    assert!(matches!(err, HandshakeError::FrameTooLarge { .. }), "{err}");
    assert!(s.into_session().is_err());
}

#[test]
fn version_negotiation_picks_the_highest_common_version() {
    let kp = ServerKeypair::generate();
    let name = kp.server_name(location());
    let run = |cv: Vec<u32>, sv: Vec<u32>| {
        let mut c = ClientHandshake::with_config(
            &name,
            HandshakeConfig {
                versions: cv,
                ..HandshakeConfig::default()
            },
        );
        let mut s = ServerHandshake::with_config(
            &kp,
            HandshakeConfig {
                versions: sv,
                ..HandshakeConfig::default()
            },
        );
        handshake::pump(&mut c, &mut s)?;
        let (cs, ss) = (c.into_session()?, s.into_session()?);
        assert_eq!(cs.version, ss.version);
        Ok::<u32, HandshakeError>(cs.version)
    };
    assert_eq!(run(vec![1, 2], vec![1]), Ok(1));
    assert_eq!(run(vec![2, 1], vec![1, 2, 3]), Ok(2));
    let err = run(vec![1], vec![2, 3]).unwrap_err();
    assert_eq!(
        err,
        HandshakeError::VersionRefused {
            client: vec![1],
            server: vec![2, 3]
        }
    );
    assert!(err.to_string().contains("server supports [2, 3]"), "{err}");
}

#[test]
fn record_limits_are_exchanged() {
    let kp = ServerKeypair::generate();
    let mut c = ClientHandshake::with_config(
        &kp.server_name(location()),
        HandshakeConfig {
            max_record_payload: 8192,
            ..HandshakeConfig::default()
        },
    );
    let mut s = ServerHandshake::with_config(
        &kp,
        HandshakeConfig {
            max_record_payload: 100_000,
            ..HandshakeConfig::default()
        },
    );
    handshake::pump(&mut c, &mut s).unwrap();
    let (cs, ss) = (c.into_session().unwrap(), s.into_session().unwrap());
    assert_eq!(cs.sealer.max_payload(), 100_000);
    assert_eq!(cs.opener.max_payload(), 8192);
    assert_eq!(ss.sealer.max_payload(), 8192);
    assert_eq!(ss.opener.max_payload(), 100_000);
}

#[test]
fn handshake_does_not_consume_record_bytes() {
    let kp = ServerKeypair::generate();
    let mut c = ClientHandshake::new(&kp.server_name(location()));
    let mut s = ServerHandshake::new(&kp);
    c.receive(&s.take_output()).unwrap();
    s.receive(&c.take_output()).unwrap();
    // The server's last handshake message and its first record arrive in one read.
    let mut wire = s.take_output();
    let mut ss = s.into_session().unwrap();
    let rec = ss.sealer.seal(b"early").unwrap();
    wire.extend_from_slice(&rec);
    let used = c.receive(&wire).unwrap();
    assert_eq!(used, wire.len() - rec.len());
    assert_eq!(
        c.receive(&wire[used..]),
        Ok(0),
        "done: consumes nothing more"
    );
    let mut cs = c.into_session().unwrap();
    assert_eq!(cs.opener.open(&wire[used..]).unwrap(), b"early");
}

#[test]
fn handshake_accepts_bytes_one_at_a_time() {
    let kp = ServerKeypair::generate();
    let mut c = ClientHandshake::new(&kp.server_name(location()));
    let mut s = ServerHandshake::new(&kp);
    for b in s.take_output() {
        assert_eq!(c.receive(&[b]).unwrap(), 1);
    }
    for b in c.take_output() {
        assert_eq!(s.receive(&[b]).unwrap(), 1);
    }
    for b in s.take_output() {
        assert_eq!(c.receive(&[b]).unwrap(), 1);
    }
    assert!(c.is_done() && s.is_done());
    let (cs, ss) = (c.into_session().unwrap(), s.into_session().unwrap());
    assert_eq!(cs.session_id, ss.session_id);
}

// ---- login ----

struct LoginSetup {
    client: Session,
    server: Session,
    host_id: HostId,
}

fn login_setup() -> LoginSetup {
    let kp = ServerKeypair::generate();
    let name = kp.server_name(location());
    let mut c = ClientHandshake::new(&name);
    let mut s = ServerHandshake::new(&kp);
    handshake::pump(&mut c, &mut s).unwrap();
    LoginSetup {
        client: c.into_session().unwrap(),
        server: s.into_session().unwrap(),
        host_id: name.host_id(),
    }
}

#[test]
fn many_users_log_in_over_one_session() {
    let t = login_setup();
    let alice = UserKeypair::generate();
    let bob = UserKeypair::generate();
    let mut signer = LoginSigner::new(t.client.session_id, t.host_id);
    let mut verifier = LoginVerifier::new(t.server.session_id, t.host_id);
    let mut table = AuthTable::new();
    let mut authno = |args: &LoginArgs| {
        // What the server does: verify, look the key up, assign an authno.
        let v = verifier.verify(args).unwrap();
        table.assign((v.user, v.public_key)).unwrap()
    };
    // The login travels as a request: check it survives the wire.
    let a = signer.sign("alice", &alice).unwrap();
    let req = Request {
        id: 1,
        authno: ANONYMOUS,
        op: RequestOp::Login(a.clone()),
    };
    assert_eq!(Request::decode(&req.encode()).unwrap(), req);
    assert_eq!(authno(&a), 1);
    assert_eq!(authno(&signer.sign("bob", &bob).unwrap()), 2);
    assert_eq!(authno(&signer.sign("alice", &alice).unwrap()), 1);
    assert_eq!(table.get(ANONYMOUS), None);
    assert_eq!(table.get(2).unwrap().0, "bob");
}

#[test]
fn replayed_login_fails() {
    let t = login_setup();
    let alice = UserKeypair::generate();
    let args = LoginSigner::new(t.client.session_id, t.host_id)
        .sign("alice", &alice)
        .unwrap();
    let mut v = LoginVerifier::new(t.server.session_id, t.host_id);
    v.verify(&args).unwrap();
    assert_eq!(v.verify(&args), Err(LoginError::Replayed(args.seqno)));
}

#[test]
fn login_from_another_session_fails() {
    let t1 = login_setup();
    let t2 = login_setup();
    let alice = UserKeypair::generate();
    let args = LoginSigner::new(t1.client.session_id, t1.host_id)
        .sign("alice", &alice)
        .unwrap();
    let mut v2 = LoginVerifier::new(t2.server.session_id, t1.host_id);
    assert_eq!(v2.verify(&args), Err(LoginError::BadSignature));
    let mut v1 = LoginVerifier::new(t1.server.session_id, t1.host_id);
    v1.verify(&args).unwrap();
}

#[test]
fn login_for_another_server_fails() {
    let t = login_setup();
    let alice = UserKeypair::generate();
    let other_host = HostId::from_bytes([1; 20]);
    let args = LoginSigner::new(t.client.session_id, other_host)
        .sign("alice", &alice)
        .unwrap();
    let mut v = LoginVerifier::new(t.server.session_id, t.host_id);
    assert_eq!(v.verify(&args), Err(LoginError::BadSignature));
}

#[test]
fn wrong_user_key_or_name_fails() {
    let t = login_setup();
    let alice = UserKeypair::generate();
    let mallory = UserKeypair::generate();
    let mut signer = LoginSigner::new(t.client.session_id, t.host_id);
    let mut v = LoginVerifier::new(t.server.session_id, t.host_id);
    // Mallory signs but claims Alice's key.
    let mut args = signer.sign("alice", &mallory).unwrap();
    args.public_key = alice.public_key();
    assert_eq!(v.verify(&args), Err(LoginError::BadSignature));
    // Alice's signature with the user name changed.
    let mut args = signer.sign("alice", &alice).unwrap();
    args.user = "root".into();
    assert_eq!(v.verify(&args), Err(LoginError::BadSignature));
    // Alice's signature with the sequence number changed.
    let mut args = signer.sign("alice", &alice).unwrap();
    args.seqno += 1000;
    assert_eq!(v.verify(&args), Err(LoginError::BadSignature));
    assert!(matches!(
        signer.sign("", &alice),
        Err(LoginError::BadUserName(_))
    ));
}

// ---- handles ----

#[test]
fn handles_from_another_secret_fail() {
    let data = HandleData {
        export_id: 0,
        device: 1,
        inode: 2,
        generation: 3,
        backend: None,
    };
    let mine = HandleKey::generate();
    let theirs = HandleKey::generate();
    assert_eq!(mine.verify(&mine.seal(&data)).unwrap(), data);
    assert_eq!(mine.verify(&theirs.seal(&data)), Err(HandleError::BadMac));
    // Handles survive a restart: the same secret, loaded from text, verifies.
    let reloaded = HandleKey::from_text(&mine.to_text()).unwrap();
    assert_eq!(reloaded.verify(&mine.seal(&data)).unwrap(), data);
}

// ---- decoders ----

#[test]
fn decoders_reject_huge_counts_without_allocating() {
    // READDIR reply claiming 2^32-1 entries in a 40-byte record.
    let mut b = Vec::new();
    b.extend_from_slice(&1u32.to_be_bytes()); // REPLY
    b.extend_from_slice(&7u64.to_be_bytes()); // id
    b.extend_from_slice(&0u32.to_be_bytes()); // OK
    b.extend_from_slice(&16u32.to_be_bytes()); // READDIR
    b.extend_from_slice(&0u32.to_be_bytes()); // no dir attr
    b.extend_from_slice(&[0; 8]); // verifier
    b.extend_from_slice(&u32::MAX.to_be_bytes()); // count
    assert!(matches!(
        ServerMessage::decode(&b),
        Err(DecodeError::LengthTooLarge { .. })
    ));
    // WRITE claiming 4 GiB of data.
    let mut b = Request {
        id: 1,
        authno: 0,
        op: RequestOp::Write {
            fh: FileHandle::from_bytes([0; HANDLE_LEN]),
            offset: 0,
            stable: StableHow::Unstable,
            data: vec![1, 2, 3, 4].into(),
        },
    }
    .encode();
    let at = b.len() - 8;
    b[at..at + 4].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(matches!(
        Request::decode(&b),
        Err(DecodeError::LengthTooLarge { .. })
    ));
    // Unknown procedure, unknown message kind, non-canonical boolean.
    let mut b = Request {
        id: 1,
        authno: 0,
        op: RequestOp::Null,
    }
    .encode();
    b[12..16].copy_from_slice(&199u32.to_be_bytes()); // not in the set
    assert_eq!(
        Request::decode(&b),
        Err(DecodeError::BadDiscriminant {
            what: "procedure",
            value: 199
        })
    );
    assert!(ServerMessage::decode(&[0, 0, 0, 3]).is_err());
    let mut b = ServerMessage::Invalidate(Invalidate {
        fh: FileHandle::from_bytes([0; HANDLE_LEN]),
        attr: None,
    })
    .encode();
    let last = b.len() - 1;
    b[last] = 2;
    assert!(matches!(
        ServerMessage::decode(&b),
        Err(DecodeError::BadBool { value: 2, .. })
    ));
}

/// NARROW names at most `MAX_NARROW_GROUPS` groups: a longer list is refused from its count,
/// before anything is allocated for it, and a count the record cannot hold is refused too.
#[test]
fn narrow_group_lists_are_bounded() {
    use protocol::request::MAX_NARROW_GROUPS;
    let narrow = |groups: Vec<u32>| {
        Request {
            id: 1,
            authno: 1,
            op: RequestOp::Narrow { gid: 5, groups },
        }
        .encode()
    };
    let most = narrow(vec![7; MAX_NARROW_GROUPS]);
    assert!(matches!(
        Request::decode(&most).map(|r| r.op),
        Ok(RequestOp::Narrow { groups, .. }) if groups.len() == MAX_NARROW_GROUPS
    ));
    assert_eq!(
        Request::decode(&narrow(vec![7; MAX_NARROW_GROUPS + 1])),
        Err(DecodeError::LimitExceeded {
            what: "narrow groups",
            len: MAX_NARROW_GROUPS as u64 + 1,
            max: MAX_NARROW_GROUPS as u64,
        })
    );
    // A count of 2^32-1 with no groups after it.
    let mut b = narrow(Vec::new());
    let at = b.len() - 4;
    b[at..].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(matches!(
        Request::decode(&b),
        Err(DecodeError::LengthTooLarge { .. })
    ));
}

/// MKNOD names only special types, and RENAME2 only the flags this version defines: a request
/// that would make a regular file through MKNOD, or pass an undefined `renameat2` bit (such as
/// RENAME_EXCHANGE or RENAME_WHITEOUT) to a server, does not decode.
#[test]
fn mknod_types_and_rename_flags_are_closed_sets() {
    let fh = FileHandle::from_bytes([0; HANDLE_LEN]);
    let mknod = Request {
        id: 1,
        authno: 0,
        op: RequestOp::Mknod {
            dir: fh,
            name: b"p".to_vec(),
            kind: SpecialKind::Fifo,
            attr: SetAttr::default(),
        },
    }
    .encode();
    // id 8, authno 4, proc 4, handle (length 4 + bytes), name length 4 + "p" padded to 4:
    // then the type.
    let at = 16 + 4 + HANDLE_LEN + 8;
    assert_eq!(mknod[at..at + 4], 7u32.to_be_bytes());
    for (bad, what) in [
        (1u32, "regular"),
        (2, "directory"),
        (5, "symlink"),
        (8, "unknown"),
    ] {
        let mut b = mknod.clone();
        b[at..at + 4].copy_from_slice(&bad.to_be_bytes());
        assert_eq!(
            Request::decode(&b),
            Err(DecodeError::BadDiscriminant {
                what: "mknod type",
                value: bad
            }),
            "{what}"
        );
    }
    // A device carries its numbers; a FIFO does not.
    let dev = Request {
        id: 1,
        authno: 0,
        op: RequestOp::Mknod {
            dir: fh,
            name: b"p".to_vec(),
            kind: SpecialKind::Char(1, 3),
            attr: SetAttr::default(),
        },
    }
    .encode();
    assert_eq!(dev.len(), mknod.len() + 8);

    let rename = Request {
        id: 1,
        authno: 0,
        op: RequestOp::Rename2 {
            from_dir: fh,
            from_name: b"a".to_vec(),
            to_dir: fh,
            to_name: b"b".to_vec(),
            flags: rename_flags::NOREPLACE,
        },
    }
    .encode();
    assert!(Request::decode(&rename).is_ok());
    let last = rename.len() - 4;
    for bad in [2u32, 4, 0x8000_0000, 3] {
        let mut b = rename.clone();
        b[last..].copy_from_slice(&bad.to_be_bytes());
        assert_eq!(
            Request::decode(&b),
            Err(DecodeError::BadDiscriminant {
                what: "rename flags",
                value: bad
            })
        );
    }
}

#[test]
fn names_are_rejected_precisely() {
    let id = "a".repeat(32);
    let cases: Vec<(String, NameError)> = vec![
        (format!("host,{id}"), NameError::MissingAt),
        ("@host".into(), NameError::MissingComma),
        (format!("@,{id}"), NameError::EmptyHost),
        (format!("@host%0,{id}"), NameError::InvalidPort("0".into())),
        (
            format!("@host%65536,{id}"),
            NameError::InvalidPort("65536".into()),
        ),
        (
            format!("@host%04004,{id}"),
            NameError::InvalidPort("04004".into()),
        ),
        (format!("@host%,{id}"), NameError::InvalidPort("".into())),
        ("@host,abc".into(), NameError::HostIdLength(3)),
        (format!("@host,{id}a"), NameError::HostIdLength(33)),
        (
            format!("@host,{}", "l".repeat(32)),
            NameError::HostIdChar { ch: 'l', pos: 0 },
        ),
        (
            format!("@host,{}0", "a".repeat(31)),
            NameError::HostIdChar { ch: '0', pos: 31 },
        ),
        (
            format!("@host,{}", "A".repeat(32)),
            NameError::HostIdChar { ch: 'A', pos: 0 },
        ),
    ];
    for (text, want) in cases {
        assert_eq!(text.parse::<ServerName>(), Err(want.clone()), "{text}");
    }
    for bad_host in [
        "-a.b",
        "a..b",
        "a_b",
        "a.b.",
        "[::1",
        "[zz]",
        &"a".repeat(64),
    ] {
        let text = format!("@{bad_host},{id}");
        assert!(
            matches!(
                text.parse::<ServerName>(),
                Err(NameError::InvalidHost { .. })
            ),
            "{text}"
        );
    }
    assert!(matches!(
        format!("@host,{id}/a\nb").parse::<ServerName>(),
        Err(NameError::InvalidPath { .. })
    ));
    let ok: ServerName = format!("@[::1]%4005,{id}/export/x").parse().unwrap();
    assert_eq!(ok.host(), "[::1]");
    assert_eq!(ok.port(), 4005);
    assert_eq!(ok.path(), Some("/export/x"));
    assert_eq!(ok.location().socket_addr_string(), "[::1]:4005");
}

// ---- fuzz entry points as property tests ----

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn fuzz_decode_request(data in common::bytes(400)) {
        protocol::fuzzing::decode_request(&data);
    }

    #[test]
    fn fuzz_decode_server_message(data in common::bytes(400)) {
        protocol::fuzzing::decode_server_message(&data);
    }

    #[test]
    fn fuzz_open_records(data in common::bytes(400)) {
        protocol::fuzzing::open_records(&data);
    }

    #[test]
    fn fuzz_server_handshake(data in common::bytes(200)) {
        protocol::fuzzing::server_handshake(&data);
    }

    #[test]
    fn fuzz_client_handshake(data in common::bytes(200)) {
        protocol::fuzzing::client_handshake(&data);
    }

    #[test]
    fn fuzz_server_name(data in common::bytes(80), text in r"@[a-z0-9.%\[\]:-]{0,20},[a-z2-9]{30,33}(/[a-z/]{0,5})?") {
        protocol::fuzzing::server_name(&data);
        protocol::fuzzing::server_name(text.as_bytes());
    }

    #[test]
    fn fuzz_handle_verify(data in common::bytes(60)) {
        protocol::fuzzing::handle_verify(&data);
    }

    #[test]
    fn fuzz_login_verify(data in common::bytes(200)) {
        protocol::fuzzing::login_verify(&data);
    }

    /// Valid messages with a few bytes changed: still no panic, and canonical if they decode.
    #[test]
    fn mutated_requests(req in common::request(), edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4)) {
        let mut b = req.encode();
        for (i, v) in edits {
            let i = i.index(b.len());
            b[i] = v;
        }
        protocol::fuzzing::decode_request(&b);
    }

    #[test]
    fn mutated_server_messages(msg in common::server_message(), edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4)) {
        let mut b = msg.encode();
        for (i, v) in edits {
            let i = i.index(b.len());
            b[i] = v;
        }
        protocol::fuzzing::decode_server_message(&b);
    }

    /// A pipelined conversation over a stream cut at arbitrary points: every request arrives
    /// in order, replies may be sent in any order and are matched by id.
    #[test]
    fn pipelined_session_over_a_chopped_stream(
        reqs in prop::collection::vec(common::request(), 1..8),
        cuts in prop::collection::vec(1usize..300, 1..20),
        reverse in any::<bool>(),
    ) {
        // Direction keys as a handshake would give (the handshake itself is slow in debug
        // builds and tested above).
        let (c2s, s2c) = ([0x11; 32], [0x22; 32]);
        let mut csealer = Sealer::new(&c2s, 1 << 20);
        let mut wire = Vec::new();
        for r in &reqs {
            let at = csealer.begin(&mut wire);
            r.encode_into(&mut wire);
            csealer.finish(&mut wire, at).unwrap();
        }
        let mut reader = RecordReader::new(Opener::new(&c2s, 1 << 20));
        let mut got = Vec::new();
        let mut rest = &wire[..];
        let mut cut = cuts.iter().cycle();
        while !rest.is_empty() {
            let n = (*cut.next().unwrap()).min(rest.len());
            let buf = reader.read_buf();
            let n = n.min(buf.len());
            buf[..n].copy_from_slice(&rest[..n]);
            reader.advance(n);
            rest = &rest[n..];
            while let Some(p) = reader.next_record().unwrap() {
                got.push(Request::decode(p).unwrap());
            }
        }
        reader.finish().unwrap();
        prop_assert_eq!(&got, &reqs);

        let mut ss = Sealer::new(&s2c, 1 << 20);
        let mut order: Vec<&Request> = got.iter().collect();
        if reverse {
            order.reverse();
        }
        let mut out = Vec::new();
        for r in &order {
            let at = ss.begin(&mut out);
            Reply { id: r.id, result: Err(NfsStatus::NotSupp) }.encode_into(&mut out);
            ss.finish(&mut out, at).unwrap();
        }
        let mut creader = RecordReader::new(Opener::new(&s2c, 1 << 20));
        creader.extend_from_slice(&out);
        let mut ids = Vec::new();
        while let Some(p) = creader.next_record().unwrap() {
            match ServerMessage::decode(p).unwrap() {
                ServerMessage::Reply(r) => ids.push(r.id),
                ServerMessage::Invalidate(_) => unreachable!(),
            }
        }
        let want: Vec<u64> = order.iter().map(|r| r.id).collect();
        prop_assert_eq!(ids, want);
    }
}

// ---- extended attributes ----

/// A SETXATTR of a value one byte over `XATTR_SIZE_MAX`, a name over `XATTR_NAME_MAX`, an
/// empty or NUL-holding name, unknown flags: none decodes, and the value is refused from its
/// length alone (the record holds far fewer bytes than it declares).
#[test]
fn xattr_requests_beyond_the_bounds_do_not_decode() {
    let fh = FileHandle::from_bytes([3; HANDLE_LEN]);
    let set = |name: &[u8], value: Vec<u8>, flags| {
        Request {
            id: 1,
            authno: 1,
            op: RequestOp::SetXattr {
                fh,
                name: name.to_vec(),
                value,
                flags,
            },
        }
        .encode()
    };
    let ok = set(
        b"user.k",
        vec![7; xattr::MAX_VALUE_LEN],
        xattr::flags::CREATE,
    );
    assert!(Request::decode(&ok).is_ok());
    assert!(matches!(
        Request::decode(&set(b"user.k", vec![7; xattr::MAX_VALUE_LEN + 1], 0)),
        Err(DecodeError::LimitExceeded {
            what: "xattr value",
            ..
        })
    ));
    assert!(matches!(
        Request::decode(&set(&[b'u'; xattr::MAX_NAME_LEN + 1], vec![], 0)),
        Err(DecodeError::LimitExceeded {
            what: "xattr name",
            ..
        })
    ));
    for bad in [&b""[..], b"user.a\0b"] {
        assert_eq!(
            Request::decode(&set(bad, vec![], 0)),
            Err(DecodeError::BadXattrName)
        );
    }
    assert!(matches!(
        Request::decode(&set(b"user.k", vec![], 4)),
        Err(DecodeError::BadDiscriminant {
            what: "xattr flags",
            value: 4
        })
    ));
    // A declared value length far beyond the record: refused before any allocation.
    let mut b = set(b"user.k", vec![], 0);
    let at = b.len() - 8;
    b[at..at + 4].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(matches!(
        Request::decode(&b),
        Err(DecodeError::LimitExceeded { .. })
    ));
}

/// A hostile server's GETXATTR value or LISTXATTR list beyond the bounds does not decode.
#[test]
fn xattr_replies_beyond_the_bounds_do_not_decode() {
    let reply = |body| {
        let mut b = Vec::new();
        Reply {
            id: 1,
            result: Ok(body),
        }
        .encode_into(&mut b);
        b
    };
    let big = reply(ReplyBody::GetXattr {
        value: vec![0; xattr::MAX_VALUE_LEN + 1],
    });
    assert!(ServerMessage::decode(&big).is_err());
    // 300 names of 255 bytes: each valid, together over XATTR_LIST_MAX.
    let names = vec![vec![b'n'; 255]; 300];
    assert!(xattr::list_len(&names) > xattr::MAX_LIST_LEN);
    let long = reply(ReplyBody::ListXattr { names });
    assert!(matches!(
        ServerMessage::decode(&long),
        Err(DecodeError::LimitExceeded {
            what: "xattr list",
            ..
        })
    ));
    let names = vec![vec![b'n'; 255]; 200];
    let fits = reply(ReplyBody::ListXattr {
        names: names.clone(),
    });
    assert!(matches!(
        ServerMessage::decode(&fits),
        Ok(ServerMessage::Reply(Reply { result: Ok(ReplyBody::ListXattr { names: n }), .. })) if n == names
    ));
}

/// SEQUENCE carries only changes, and never another SEQUENCE: the inner procedure is checked
/// before its arguments are read, so a chain of nested SEQUENCEs is refused at its first link,
/// not decoded recursively (which a long enough chain would overflow the stack with).
#[test]
fn sequence_carries_only_changes_and_never_nests() {
    let sequenced = |op: RequestOp| {
        Request {
            id: 1,
            authno: 1,
            op: RequestOp::Sequence {
                slot: 0,
                seq: 1,
                op: Box::new(op),
            },
        }
        .encode()
    };
    let fh = FileHandle::from_bytes([0; HANDLE_LEN]);
    let remove = RequestOp::Remove {
        dir: fh,
        name: b"x".to_vec(),
    };
    assert!(matches!(
        Request::decode(&sequenced(remove.clone())).map(|r| r.op),
        Ok(RequestOp::Sequence { op, .. }) if *op == remove
    ));
    for plain in [RequestOp::GetAttr { fh }, RequestOp::Null] {
        let code = plain.proc().code();
        assert_eq!(
            Request::decode(&sequenced(plain)),
            Err(DecodeError::BadDiscriminant {
                what: "sequenced procedure",
                value: code,
            })
        );
    }
    // A million nested SEQUENCE heads (12 MB): refused at the second, at once.
    let mut b = Vec::new();
    b.extend_from_slice(&1u64.to_be_bytes());
    b.extend_from_slice(&1u32.to_be_bytes());
    for _ in 0..1_000_000 {
        for v in [Proc::Sequence.code(), 0, 1] {
            b.extend_from_slice(&v.to_be_bytes());
        }
    }
    assert_eq!(
        Request::decode(&b),
        Err(DecodeError::BadDiscriminant {
            what: "sequenced procedure",
            value: Proc::Sequence.code(),
        })
    );
}

/// A LISTDIR reply carries exactly one bit per entry: a bitmap a byte short or a byte long
/// (a hostile server's way to say something of entries it did not list) does not decode.
#[test]
fn a_listdir_reply_has_one_bit_per_entry() {
    use protocol::{DirEntryPlus, DirPage, Reply, ReplyBody};
    let entries = (0..9u64)
        .map(|i| DirEntryPlus {
            fileid: i,
            name: format!("f{i}").into_bytes(),
            cookie: i + 1,
            attr: None,
            fh: None,
        })
        .collect::<Vec<_>>();
    let reply = |bare: Vec<bool>| {
        ServerMessage::Reply(Reply {
            id: 7,
            result: Ok(ReplyBody::ListDir {
                page: DirPage {
                    dir_attr: None,
                    verifier: [0; 8],
                    entries: entries.clone(),
                    eof: true,
                },
                bare,
            }),
        })
    };
    let mut bare = vec![false; 9];
    bare[0] = true;
    bare[8] = true;
    let good = reply(bare.clone());
    assert_eq!(ServerMessage::decode(&good.encode()).unwrap(), good);
    // 9 entries take 2 bytes of bits; say 1 (the last entry's bit missing), then 3.
    let encoded = good.encode();
    let bits_at = encoded.len() - 8; // length word, 2 bytes, 2 of padding
    assert_eq!(&encoded[bits_at..bits_at + 4], &2u32.to_be_bytes());
    for len in [1u32, 3] {
        let mut b = encoded[..bits_at].to_vec();
        b.extend_from_slice(&len.to_be_bytes());
        b.extend_from_slice(&[0xff; 4]);
        assert!(ServerMessage::decode(&b).is_err(), "{len} bytes of bits");
    }
    // The second byte holds entry 8's bit only: a bit set above it says something of an entry
    // that is not there, and decoding then encoding would not give the same bytes back.
    let mut b = encoded.clone();
    b[bits_at + 5] |= 1 << 3;
    assert!(
        ServerMessage::decode(&b).is_err(),
        "a bit beyond the last entry"
    );
}
