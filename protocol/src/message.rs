//! Message envelopes: what one record carries.
//!
//! ```text
//! client -> server record: Request = u64 id || u32 authno || u32 proc || arguments
//! server -> client record: ServerMessage = u32 kind || ...
//!   kind 1 REPLY:      u64 id || u32 status || (status == 0: u32 proc || body)
//!   kind 2 INVALIDATE: handle[48] || optional attributes
//! ```
//!
//! Requests carry an id chosen by the client so replies may come back in any order (the server
//! works on a connection's requests in parallel with other connections' and answers as results
//! arrive). Each record holds exactly one message; decoding rejects trailing bytes.
//!
//! The bulk data of READ replies and WRITE requests is the tail of its record, so a server can
//! read file bytes straight into the record buffer ([`encode_read_reply_at`]) and seal them in
//! place, and a client can do the same for WRITE ([`encode_write_request_into`]).

use std::ops::Range;

use crate::attr::{Attr, decode_opt_attr, encode_opt_attr};
use crate::data::Data;
use crate::error::DecodeError;
use crate::handle::FileHandle;
use crate::reply::ReplyBody;
use crate::request::{Proc, RequestOp, StableHow, get_fh, put_fh};
use crate::status::{NFS3_OK, NfsStatus};
use crate::xdr::{self, Reader};

/// Kind of a [`ServerMessage::Reply`].
pub const KIND_REPLY: u32 = 1;
/// Kind of a [`ServerMessage::Invalidate`].
pub const KIND_INVALIDATE: u32 = 2;

/// A request from client to server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Chosen by the client; echoed in the reply.
    pub id: u64,
    /// Which logged-in user makes the request (0: anonymous).
    pub authno: u32,
    /// The operation.
    pub op: RequestOp,
}

impl Request {
    /// Appends the encoding to `buf` (e.g. between [`crate::Sealer::begin`] and
    /// [`crate::Sealer::finish`]).
    pub fn encode_into(&self, buf: &mut Vec<u8>) {
        xdr::put_u64(buf, self.id);
        xdr::put_u32(buf, self.authno);
        self.op.encode(buf);
    }

    /// The encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut buf = Vec::new();
        self.encode_into(&mut buf);
        buf
    }

    /// Decodes one record's payload.
    pub fn decode(bytes: &[u8]) -> Result<Request, DecodeError> {
        Self::decode_fields(&mut Reader::new(bytes))
    }

    /// As [`Request::decode`], but a WRITE's data goes into `spare` (cleared first) instead of
    /// a new allocation: a server receiving a stream of WRITEs cycles a few warm buffers rather
    /// than faulting in fresh pages for every megabyte. `spare` is dropped if unused.
    pub fn decode_reusing(bytes: &[u8], spare: Vec<u8>) -> Result<Request, DecodeError> {
        Self::decode_fields(&mut Reader::with_spare(bytes, spare))
    }

    /// Decodes the payload `buf[payload]`, keeping `buf` itself as a WRITE's data (a window
    /// on it, [`Data::window`]) instead of copying the data out: for a server that hands its
    /// receive buffer over with the record ([`crate::RecordReader::next_record_or_buffer`]).
    /// `buf` is dropped if the request is not a WRITE.
    ///
    /// # Panics
    /// If `payload` is not within `buf`.
    pub fn decode_owned(buf: Vec<u8>, payload: Range<usize>) -> Result<Request, DecodeError> {
        let mut r = Reader::locating(&buf[payload.clone()]);
        let mut req = Self::decode_fields(&mut r)?;
        let found = r.located();
        let op = match &mut req.op {
            RequestOp::Sequence { op, .. } => op.as_mut(),
            op => op,
        };
        if let (RequestOp::Write { data, .. } | RequestOp::Append { data, .. }, Some(at)) =
            (op, found)
        {
            *data = Data::window(buf, payload.start + at.start..payload.start + at.end);
        }
        Ok(req)
    }

    /// Decodes a whole request from `r`, trailing bytes refused.
    fn decode_fields(r: &mut Reader<'_>) -> Result<Request, DecodeError> {
        let req = Request {
            id: r.u64("request id")?,
            authno: r.u32("authno")?,
            op: RequestOp::decode(r)?,
        };
        r.finish()?;
        Ok(req)
    }
}

/// Appends a WRITE request without first copying `data` into a [`RequestOp::Write`].
pub fn encode_write_request_into(
    buf: &mut Vec<u8>,
    id: u64,
    authno: u32,
    fh: &FileHandle,
    offset: u64,
    stable: StableHow,
    data: &[u8],
) {
    let head = WriteHead {
        id,
        authno,
        fh,
        offset,
        stable,
        ticket: None,
    };
    let at = buf.len();
    let filled = encode_write_request_at(buf, at, &head, data.len(), |dst| {
        dst.copy_from_slice(data);
        Ok::<_, std::convert::Infallible>(data.len())
    });
    let Ok(_) = filled;
}

/// A WRITE request's fields besides its data, for [`encode_write_request_at`].
#[derive(Debug, Clone, Copy)]
pub struct WriteHead<'a> {
    /// The request id.
    pub id: u64,
    /// Which logged-in user makes the request.
    pub authno: u32,
    /// The file.
    pub fh: &'a FileHandle,
    /// Where in the file the data goes.
    pub offset: u64,
    /// How durable the server must make the data before it replies.
    pub stable: StableHow,
    /// The reply-cache slot it goes through (sent inside a SEQUENCE), if any.
    pub ticket: Option<crate::sequence::Ticket>,
}

/// Encodes a WRITE request at `at` of `buf` whose data, at most `max` bytes, `fill` writes
/// straight into the buffer and counts: a client reads a file into its request this way, with
/// no copy. The data starts [`write_request_data_offset`] bytes after `at`.
///
/// Bytes before `at` are kept (zeros where `buf` was shorter); everything from `at` on is
/// replaced, and the buffer ends with the request. A recycled buffer need not be cleared
/// first: its old bytes are overwritten or cut off, and only the part beyond its old length is
/// zeroed before `fill` sees it. Returns the data length `fill` reported (at most `max`), or
/// its error, in which case `buf` holds no request.
pub fn encode_write_request_at<E>(
    buf: &mut Vec<u8>,
    at: usize,
    head: &WriteHead<'_>,
    max: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
) -> Result<usize, E> {
    let mut fields = Vec::with_capacity(WRITE_REQUEST_OVERHEAD);
    xdr::put_u64(&mut fields, head.id);
    xdr::put_u32(&mut fields, head.authno);
    if let Some(t) = head.ticket {
        crate::sequence::put_head(&mut fields, t.slot, t.seq);
    }
    xdr::put_u32(&mut fields, Proc::Write.code());
    put_fh(&mut fields, head.fh);
    xdr::put_u64(&mut fields, head.offset);
    xdr::put_u32(&mut fields, head.stable as u32);
    let data_at = at + fields.len() + 4;
    debug_assert_eq!(data_at - at, write_request_data_offset(head));
    buf.resize(data_at + max, 0);
    let len = match fill(&mut buf[data_at..]) {
        Ok(n) => n.min(max),
        Err(e) => {
            buf.truncate(at);
            return Err(e);
        }
    };
    buf[at..at + fields.len()].copy_from_slice(&fields);
    let len32 = u32::try_from(len).expect("WRITE data longer than 4 GiB");
    buf[at + fields.len()..data_at].copy_from_slice(&len32.to_be_bytes());
    buf.truncate(data_at + len);
    xdr::put_padding(buf, len);
    Ok(len)
}

/// Where the data of a WRITE request with `head` starts, counted from where its encoding
/// starts: a client can place the request so that the data, which the kernel copies in from
/// the page cache, starts on a cache-line boundary.
pub fn write_request_data_offset(head: &WriteHead<'_>) -> usize {
    let fh_len = head.fh.as_bytes().len();
    let sequence = if head.ticket.is_some() {
        crate::sequence::HEAD_LEN
    } else {
        0
    };
    8 + 4 + sequence + 4 + 4 + fh_len + xdr::pad_len(fh_len) + 8 + 4 + 4
}

/// A reply to the request with the same id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The request's id.
    pub id: u64,
    /// The result, or the NFS error status.
    pub result: Result<ReplyBody, NfsStatus>,
}

impl Reply {
    /// Appends the encoding, as a [`ServerMessage::Reply`], to `buf`.
    pub fn encode_into(&self, buf: &mut Vec<u8>) {
        xdr::put_u32(buf, KIND_REPLY);
        xdr::put_u64(buf, self.id);
        match &self.result {
            Ok(body) => {
                xdr::put_u32(buf, NFS3_OK);
                body.encode(buf);
            }
            Err(status) => xdr::put_u32(buf, status.code()),
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<Reply, DecodeError> {
        let id = r.u64("reply id")?;
        let result = match r.u32("status")? {
            NFS3_OK => Ok(ReplyBody::decode(r)?),
            code => Err(NfsStatus::decode(code)?),
        };
        Ok(Reply { id, result })
    }
}

/// Encodes a successful READ reply at `at` of `buf` whose data, at most `max` bytes, `fill`
/// writes straight into the buffer: a server reads file bytes into its reply record this way
/// and seals it in place, with no copy. `fill` returns how many bytes it wrote and whether
/// they reach the end of the file. The data starts [`read_reply_data_offset`] bytes after
/// `at`.
///
/// The buffer contract is [`encode_write_request_at`]'s: bytes before `at` are kept (zeros
/// where `buf` was shorter), everything from `at` on is replaced, and a recycled buffer need
/// not be cleared first: only the part beyond its old length is zeroed before `fill` sees it,
/// so a server reusing its sent replies' buffers never pays for zeroing the data area. Returns
/// the data length (at most `max`), or `fill`'s error, in which case `buf` holds no reply.
pub fn encode_read_reply_at<E>(
    buf: &mut Vec<u8>,
    at: usize,
    id: u64,
    attr: Option<&Attr>,
    max: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<(usize, bool), E>,
) -> Result<usize, E> {
    let mut fields = Vec::with_capacity(READ_REPLY_OVERHEAD);
    xdr::put_u32(&mut fields, KIND_REPLY);
    xdr::put_u64(&mut fields, id);
    xdr::put_u32(&mut fields, NFS3_OK);
    xdr::put_u32(&mut fields, Proc::Read.code());
    encode_opt_attr(&mut fields, attr);
    let data_at = at + fields.len() + 8;
    debug_assert_eq!(data_at - at, read_reply_data_offset(attr));
    buf.resize(data_at + max, 0);
    let (len, eof) = match fill(&mut buf[data_at..]) {
        Ok((n, eof)) => (n.min(max), eof),
        Err(e) => {
            buf.truncate(at);
            return Err(e);
        }
    };
    let len32 = u32::try_from(len).expect("READ data longer than 4 GiB");
    let eof_at = at + fields.len();
    buf[at..eof_at].copy_from_slice(&fields);
    buf[eof_at..eof_at + 4].copy_from_slice(&u32::from(eof).to_be_bytes());
    buf[eof_at + 4..data_at].copy_from_slice(&len32.to_be_bytes());
    buf.truncate(data_at + len);
    xdr::put_padding(buf, len);
    Ok(len)
}

/// Where the data of a READ reply built by [`encode_read_reply_at`] starts, counted from
/// where the encoding starts: a server can place the record so that the data, which the
/// kernel copies in from the page cache, starts on a cache-line boundary (a copy to an
/// unaligned destination costs several times more on some CPUs).
pub const fn read_reply_data_offset(attr: Option<&Attr>) -> usize {
    let attr_len = match attr {
        Some(_) => 4 + crate::attr::ATTR_LEN,
        None => 4,
    };
    4 + 8 + 4 + 4 + attr_len + 4 + 4
}

/// Bytes of a successful READ reply besides its data (at most; fewer without attributes), so
/// a server can size `count` to fit a record.
pub const READ_REPLY_OVERHEAD: usize = 4 + 8 + 4 + 4 + 4 + crate::attr::ATTR_LEN + 4 + 4 + 3;

/// Bytes of a WRITE request besides its data (at most, with padding).
pub const WRITE_REQUEST_OVERHEAD: usize =
    8 + 4 + 4 + 4 + crate::handle::MAX_HANDLE_LEN + 3 + 8 + 4 + 4 + 3;

/// The largest READ or WRITE data that fits in a record of `max_payload` bytes
/// (e.g. `session.sealer.max_payload()` on the server for READ, on the client for WRITE).
pub fn max_io_size(max_payload: usize) -> u32 {
    let n = max_payload.saturating_sub(READ_REPLY_OVERHEAD.max(WRITE_REQUEST_OVERHEAD));
    // Keep transfers a multiple of 4 KiB when they can be, as file systems like.
    let n = if n >= 4096 { n & !4095 } else { n };
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Server-initiated: the client must drop cached attributes and data of `fh`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalidate {
    /// The object that changed.
    pub fh: FileHandle,
    /// Its new attributes, if the server has them (they carry a new lease).
    pub attr: Option<Attr>,
}

/// A message from server to client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerMessage {
    /// A reply to a request.
    Reply(Reply),
    /// A cache invalidation.
    Invalidate(Invalidate),
}

impl ServerMessage {
    /// Appends the encoding to `buf`.
    pub fn encode_into(&self, buf: &mut Vec<u8>) {
        match self {
            ServerMessage::Reply(r) => r.encode_into(buf),
            ServerMessage::Invalidate(inv) => {
                xdr::put_u32(buf, KIND_INVALIDATE);
                put_fh(buf, &inv.fh);
                encode_opt_attr(buf, inv.attr.as_ref());
            }
        }
    }

    /// The encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut buf = Vec::new();
        self.encode_into(&mut buf);
        buf
    }

    /// Decodes one record's payload.
    pub fn decode(bytes: &[u8]) -> Result<ServerMessage, DecodeError> {
        Self::decode_fields(&mut Reader::new(bytes))
    }

    /// As [`ServerMessage::decode`], but a READ reply's data goes into `spare` (cleared first)
    /// instead of a new allocation: a client streaming a file cycles a few warm buffers rather
    /// than faulting in fresh pages for every megabyte. `spare` is dropped if unused.
    pub fn decode_reusing(bytes: &[u8], spare: Vec<u8>) -> Result<ServerMessage, DecodeError> {
        Self::decode_fields(&mut Reader::with_spare(bytes, spare))
    }

    /// Decodes the payload `buf[payload]`, keeping `buf` itself as a READ reply's data (a
    /// window on it, [`Data::window`]) instead of copying the data out: for a client that
    /// takes its receive buffer with the record
    /// ([`crate::RecordReader::next_record_or_buffer`]). `buf` is dropped if the message is
    /// not a successful READ reply.
    ///
    /// # Panics
    /// If `payload` is not within `buf`.
    pub fn decode_owned(buf: Vec<u8>, payload: Range<usize>) -> Result<ServerMessage, DecodeError> {
        let mut r = Reader::locating(&buf[payload.clone()]);
        let mut msg = Self::decode_fields(&mut r)?;
        let found = r.located();
        if let (
            ServerMessage::Reply(Reply {
                result: Ok(ReplyBody::Read { data, .. } | ReplyBody::Fetch { data, .. }),
                ..
            }),
            Some(at),
        ) = (&mut msg, found)
        {
            *data = Data::window(buf, payload.start + at.start..payload.start + at.end);
        }
        Ok(msg)
    }

    /// Decodes a whole server message from `r`, trailing bytes refused.
    fn decode_fields(r: &mut Reader<'_>) -> Result<ServerMessage, DecodeError> {
        let msg = match r.u32("message kind")? {
            KIND_REPLY => ServerMessage::Reply(Reply::decode(r)?),
            KIND_INVALIDATE => ServerMessage::Invalidate(Invalidate {
                fh: get_fh(r)?,
                attr: decode_opt_attr(r)?,
            }),
            value => {
                return Err(DecodeError::BadDiscriminant {
                    what: "message kind",
                    value,
                });
            }
        };
        r.finish()?;
        Ok(msg)
    }
}

impl From<Reply> for ServerMessage {
    fn from(r: Reply) -> Self {
        ServerMessage::Reply(r)
    }
}

impl From<Invalidate> for ServerMessage {
    fn from(i: Invalidate) -> Self {
        ServerMessage::Invalidate(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_reply(data: &[u8]) -> Vec<u8> {
        ServerMessage::Reply(Reply {
            id: 9,
            result: Ok(ReplyBody::Read {
                attr: None,
                eof: true,
                data: data.to_vec().into(),
            }),
        })
        .encode()
    }

    #[test]
    fn a_read_reply_filled_in_a_stale_buffer_carries_only_the_filled_data() {
        for attr in [None, Some(Attr::test_file(5, 1000))] {
            let expected = ServerMessage::Reply(Reply {
                id: 9,
                result: Ok(ReplyBody::Read {
                    attr,
                    eof: true,
                    data: b"fresh".to_vec().into(),
                }),
            })
            .encode();
            // A recycled buffer: longer than the reply, full of an earlier record's bytes.
            let mut buf = vec![0xAA; 4096];
            let n = encode_read_reply_at(&mut buf, 3, 9, attr.as_ref(), 1000, |dst| {
                assert_eq!(dst.len(), 1000, "fill is offered exactly max bytes");
                dst[..5].copy_from_slice(b"fresh");
                Ok::<_, ()>((5, true))
            })
            .unwrap();
            assert_eq!(n, 5);
            assert_eq!(&buf[..3], &[0xAA; 3], "bytes before `at` are kept");
            assert_eq!(
                &buf[3..],
                &expected[..],
                "the reply, padded, and nothing else"
            );
            let at = 3 + read_reply_data_offset(attr.as_ref());
            assert_eq!(&buf[at..at + 5], b"fresh", "attributes: {}", attr.is_some());
        }

        // Not at the end of the file, and a fill that claims more than it was offered.
        let mut buf = Vec::new();
        let n = encode_read_reply_at(&mut buf, 0, 1, None, 8, |dst| {
            dst.copy_from_slice(b"12345678");
            Ok::<_, ()>((9, false))
        })
        .unwrap();
        assert_eq!(n, 8);
        match ServerMessage::decode(&buf).unwrap() {
            ServerMessage::Reply(Reply {
                result: Ok(ReplyBody::Read { eof, data, .. }),
                ..
            }) => assert_eq!((eof, &*data), (false, &b"12345678"[..])),
            other => panic!("{other:?}"),
        }

        // Beyond a short buffer's end: the gap is zeros, and fill's error leaves no reply.
        let mut short = vec![1u8; 2];
        let err = encode_read_reply_at(&mut short, 6, 1, None, 64, |_| Err("unreadable"));
        assert_eq!(
            (err, short.as_slice()),
            (Err("unreadable"), &[1u8, 1, 0, 0, 0, 0][..])
        );
    }

    #[test]
    fn a_write_request_filled_in_a_stale_buffer_carries_only_the_filled_data() {
        let fh = FileHandle::from_slice(&[7; crate::handle::HANDLE_LEN]).unwrap();
        let head = WriteHead {
            id: 9,
            authno: 2,
            fh: &fh,
            offset: 1 << 20,
            stable: StableHow::Unstable,
            ticket: None,
        };
        let mut expected = Vec::new();
        encode_write_request_into(
            &mut expected,
            9,
            2,
            &fh,
            1 << 20,
            StableHow::Unstable,
            b"fresh",
        );
        // A recycled buffer: longer than the request, full of an earlier record's bytes.
        let mut buf = vec![0xAA; 4096];
        let n = encode_write_request_at(&mut buf, 5, &head, 1000, |dst| {
            assert_eq!(dst.len(), 1000, "fill is offered exactly max bytes");
            dst[..5].copy_from_slice(b"fresh");
            Ok::<_, ()>(5)
        })
        .unwrap();
        assert_eq!(n, 5);
        assert_eq!(&buf[..5], &[0xAA; 5], "bytes before `at` are kept");
        assert_eq!(
            &buf[5..],
            &expected[..],
            "the request, padded, and nothing else"
        );
        assert_eq!(&buf[5 + write_request_data_offset(&head)..][..5], b"fresh");

        // Beyond a short buffer's end: the gap is zeros, and fill's error leaves no request.
        let mut short = vec![1u8; 2];
        let err = encode_write_request_at(&mut short, 8, &head, 64, |_| Err("unreadable"));
        assert_eq!(
            (err, short.as_slice()),
            (Err("unreadable"), &[1u8, 1, 0, 0, 0, 0, 0, 0][..])
        );
    }

    #[test]
    fn request_decode_reusing_puts_write_data_in_the_spare_buffer() {
        let fh = FileHandle::from_slice(&[7; crate::handle::HANDLE_LEN]).unwrap();
        let mut wire = Vec::new();
        encode_write_request_into(&mut wire, 3, 1, &fh, 4096, StableHow::Unstable, b"new data");
        let spare = b"old contents, longer than the data".to_vec();
        let ptr = spare.as_ptr();
        let req = Request::decode_reusing(&wire, spare).unwrap();
        assert_eq!(req, Request::decode(&wire).unwrap());
        let RequestOp::Write { data, offset, .. } = req.op else {
            panic!("not a WRITE");
        };
        assert_eq!((&*data, offset), (&b"new data"[..], 4096));
        assert_eq!(data.as_ptr(), ptr, "the spare allocation holds the data");
        let null = Request {
            id: 1,
            authno: 0,
            op: RequestOp::Null,
        }
        .encode();
        assert!(Request::decode_reusing(&null, vec![1; 10]).is_ok());
    }

    /// `payload` between a record header and a tag, as it lies in a receive buffer, and where.
    fn in_receive_buffer(payload: &[u8]) -> (Vec<u8>, Range<usize>) {
        let mut buf = b"HEAD".to_vec();
        buf.extend_from_slice(payload);
        buf.extend_from_slice(b"TAG-TAG-");
        (buf, 4..4 + payload.len())
    }

    #[test]
    fn request_decode_owned_keeps_the_buffer_as_write_data() {
        let fh = FileHandle::from_slice(&[7; crate::handle::HANDLE_LEN]).unwrap();
        let mut wire = Vec::new();
        encode_write_request_into(&mut wire, 3, 1, &fh, 4096, StableHow::Unstable, b"new data");
        let (buf, payload) = in_receive_buffer(&wire);
        let (ptr, len) = (buf.as_ptr(), buf.len());
        let req = Request::decode_owned(buf, payload).unwrap();
        assert_eq!(req, Request::decode(&wire).unwrap());
        let RequestOp::Write { data, offset, .. } = req.op else {
            panic!("not a WRITE");
        };
        assert_eq!((&*data, offset), (&b"new data"[..], 4096));
        let whole = data.into_buffer();
        assert_eq!(
            (whole.as_ptr(), whole.len()),
            (ptr, len),
            "not copied, nor cut"
        );
        // Other requests decode as from a slice; their buffer is not needed.
        let null = Request {
            id: 1,
            authno: 0,
            op: RequestOp::Null,
        }
        .encode();
        let mut buf = vec![0xAA; 3];
        buf.extend_from_slice(&null);
        let got = Request::decode_owned(buf, 3..3 + null.len()).unwrap();
        assert_eq!(got, Request::decode(&null).unwrap());
        // The payload's end is the end: trailing bytes (the tag) are not part of it.
        let mut buf = wire.clone();
        buf.extend_from_slice(&[0; 4]);
        assert!(Request::decode_owned(buf.clone(), 0..buf.len()).is_err());
    }

    /// The data of a successful READ reply.
    fn read_data(msg: ServerMessage) -> Data {
        let ServerMessage::Reply(Reply {
            result: Ok(ReplyBody::Read { data, .. }),
            ..
        }) = msg
        else {
            panic!("not a READ reply");
        };
        data
    }

    #[test]
    fn server_message_decode_owned_keeps_the_buffer_as_read_data() {
        let wire = read_reply(b"some file bytes");
        let (buf, payload) = in_receive_buffer(&wire);
        let (ptr, len) = (buf.as_ptr(), buf.len());
        let msg = ServerMessage::decode_owned(buf, payload).unwrap();
        assert_eq!(msg, ServerMessage::decode(&wire).unwrap());
        let data = read_data(msg);
        assert_eq!(&*data, b"some file bytes");
        let whole = data.into_buffer();
        assert_eq!(
            (whole.as_ptr(), whole.len()),
            (ptr, len),
            "not copied, nor cut"
        );
        // Other messages decode as from a slice.
        let inv = ServerMessage::Invalidate(Invalidate {
            fh: FileHandle::from_slice(&[3; crate::handle::HANDLE_LEN]).unwrap(),
            attr: None,
        })
        .encode();
        let mut buf = vec![0; 7];
        buf.extend_from_slice(&inv);
        assert_eq!(
            ServerMessage::decode_owned(buf, 7..7 + inv.len()).unwrap(),
            ServerMessage::decode(&inv).unwrap()
        );
    }

    #[test]
    fn decode_reusing_fills_the_spare_buffer_and_decodes_the_same() {
        let wire = read_reply(b"some file bytes");
        let spare = Vec::with_capacity(1 << 16);
        let ptr = spare.as_ptr();
        let msg = ServerMessage::decode_reusing(&wire, spare).unwrap();
        assert_eq!(msg, ServerMessage::decode(&wire).unwrap());
        let data = read_data(msg);
        assert_eq!(&*data, b"some file bytes");
        assert_eq!(data.as_ptr(), ptr, "the spare allocation holds the data");
        // A spare with old contents is cleared first; other messages ignore it.
        let msg = ServerMessage::decode_reusing(&read_reply(b"x"), b"stale".to_vec()).unwrap();
        assert_eq!(msg, ServerMessage::decode(&read_reply(b"x")).unwrap());
        let null = ServerMessage::Reply(Reply {
            id: 1,
            result: Ok(ReplyBody::Null),
        })
        .encode();
        assert!(ServerMessage::decode_reusing(&null, vec![1; 10]).is_ok());
    }
}
