//! Every message survives encode/decode unchanged; every strict prefix and every extension by
//! trailing bytes is rejected.

mod common;

use std::collections::HashSet;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use protocol::*;

fn check_strict<T: std::fmt::Debug + PartialEq>(
    bytes: &[u8],
    decode: impl Fn(&[u8]) -> std::result::Result<T, DecodeError>,
    expect: &T,
) {
    assert_eq!(&decode(bytes).unwrap(), expect);
    for cut in 0..bytes.len() {
        assert!(
            decode(&bytes[..cut]).is_err(),
            "prefix of {cut} bytes decoded"
        );
    }
    let mut longer = bytes.to_vec();
    longer.extend_from_slice(&[0, 0, 0, 0]);
    assert_eq!(decode(&longer).unwrap_err(), DecodeError::TrailingBytes(4));
}

proptest! {
    #[test]
    fn request_round_trip(req in common::request()) {
        let bytes = req.encode();
        prop_assert_eq!(bytes.len() % 4, 0);
        check_strict(&bytes, Request::decode, &req);
    }

    #[test]
    fn server_message_round_trip(msg in common::server_message()) {
        let bytes = msg.encode();
        prop_assert_eq!(bytes.len() % 4, 0);
        check_strict(&bytes, ServerMessage::decode, &msg);
    }

    #[test]
    fn read_reply_helper_matches_reply_body(
        id in any::<u64>(),
        attr in common::opt_attr(),
        eof in any::<bool>(),
        data in common::bytes(300),
    ) {
        let mut fast = vec![0xee; 3]; // the helper keeps the bytes before `at`
        encode_read_reply_at::<()>(&mut fast, 3, id, attr.as_ref(), data.len(), |buf| {
            buf.copy_from_slice(&data);
            Ok((data.len(), eof))
        })
        .unwrap();
        let msg = ServerMessage::Reply(Reply { id, result: Ok(ReplyBody::Read { attr, eof, data: data.into() }) });
        prop_assert_eq!(&fast[3..], &msg.encode()[..]);
    }

    #[test]
    fn write_request_helper_matches_request(
        id in any::<u64>(),
        authno in any::<u32>(),
        fh in common::fh(),
        offset in any::<u64>(),
        stable in common::stable(),
        data in common::bytes(300),
    ) {
        let mut fast = Vec::new();
        encode_write_request_into(&mut fast, id, authno, &fh, offset, stable, &data);
        let write = RequestOp::Write { fh, offset, stable, data: data.clone().into() };
        let req = Request { id, authno, op: write.clone() };
        prop_assert_eq!(fast, req.encode());

        // Through a reply-cache slot: the same WRITE inside a SEQUENCE, its data where
        // `write_request_data_offset` says.
        let ticket = protocol::sequence::Ticket { slot: authno % 64, seq: id as u32 };
        let head = WriteHead { id, authno, fh: &fh, offset, stable, ticket: Some(ticket) };
        let mut sequenced = Vec::new();
        encode_write_request_at(&mut sequenced, 0, &head, data.len(), |dst| {
            dst.copy_from_slice(&data);
            Ok::<_, ()>(data.len())
        })
        .unwrap();
        let op = RequestOp::Sequence { slot: ticket.slot, seq: ticket.seq, op: Box::new(write) };
        prop_assert_eq!(&sequenced, &Request { id, authno, op }.encode());
        let at = write_request_data_offset(&head);
        prop_assert_eq!(&sequenced[at..at + data.len()], &data[..]);
    }

    #[test]
    fn attrs_mut_reaches_every_attribute(mut body in common::reply_body()) {
        for a in body.attrs_mut() {
            a.lease_ms = 0;
        }
        // Any attribute attrs_mut missed still shows its (random) lease in the debug form.
        let text = format!("{body:?}");
        for (at, _) in text.match_indices("lease_ms: ") {
            let rest = &text[at + "lease_ms: ".len()..];
            prop_assert!(rest.starts_with("0,") || rest.starts_with("0 "), "missed: {}", &rest[..rest.len().min(20)]);
        }
    }

    #[test]
    fn names_round_trip(
        host in "[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?(\\.[a-z0-9]{1,8}){0,3}",
        port in 1u16..,
        key in any::<[u8; 32]>(),
        path in prop::option::of("(/[a-zA-Z0-9._-]{0,8}){1,4}"),
    ) {
        let mut name = ServerName::for_key(Location::new(&host, port).unwrap(), &key);
        if let Some(p) = &path {
            name = name.with_path(p).unwrap();
        }
        let text = name.to_string();
        let back: ServerName = text.parse().unwrap();
        prop_assert_eq!(&back, &name);
        prop_assert!(back.verify_key(&key).is_ok());
        prop_assert_eq!(back.path(), path.as_deref());
    }
}

#[test]
fn read_reply_helper_leaves_no_reply_on_error() {
    let mut buf = vec![1, 2, 3];
    let r = encode_read_reply_at(&mut buf, 3, 9, None, 100, |b| {
        b[..7].copy_from_slice(b"partial");
        Err("disk on fire")
    });
    assert_eq!(r, Err("disk on fire"));
    assert_eq!(buf, [1, 2, 3]);
}

/// The strategies cover every procedure, so the round trips above test every message.
#[test]
fn strategies_cover_every_procedure() {
    let mut runner = TestRunner::deterministic();
    let (mut reqs, mut replies) = (HashSet::new(), HashSet::new());
    let req = common::request_op();
    let rep = common::reply_body();
    for _ in 0..3000 {
        reqs.insert(req.new_tree(&mut runner).unwrap().current().proc());
        replies.insert(rep.new_tree(&mut runner).unwrap().current().proc());
    }
    assert_eq!(reqs.len(), Proc::ALL.len(), "requests: {reqs:?}");
    // A SEQUENCE is answered with its change's reply: it has none of its own.
    assert!(!replies.contains(&Proc::Sequence));
    assert_eq!(replies.len(), Proc::ALL.len() - 1, "replies: {replies:?}");
}

#[test]
fn every_status_round_trips_in_a_reply() {
    for &s in NfsStatus::ALL {
        let msg = ServerMessage::Reply(Reply {
            id: 5,
            result: Err(s),
        });
        assert_eq!(ServerMessage::decode(&msg.encode()).unwrap(), msg);
    }
}

#[test]
fn max_io_size_fits_a_record() {
    use protocol::record::DEFAULT_MAX_PAYLOAD;
    assert_eq!(
        max_io_size(DEFAULT_MAX_PAYLOAD),
        1 << 20,
        "1 MiB transfers with the default record limit"
    );
    let attr = Attr::test_file(0, 0);
    for max in [4096, 10_001, DEFAULT_MAX_PAYLOAD] {
        let n = max_io_size(max) as usize;
        let mut sealer = Sealer::new(&[0; 32], max);
        let mut out = Vec::new();
        let start = sealer.begin(&mut out);
        encode_read_reply_at::<()>(&mut out, 4, u64::MAX, Some(&attr), n, |b| {
            Ok((b.len(), true))
        })
        .unwrap();
        sealer.finish(&mut out, start).unwrap();
        sealer
            .seal_with(&mut out, |b| {
                encode_write_request_into(
                    b,
                    u64::MAX,
                    u32::MAX,
                    &FileHandle::from_bytes([0; HANDLE_LEN]),
                    0,
                    StableHow::FileSync,
                    &vec![0; n],
                )
            })
            .unwrap();
    }
}
