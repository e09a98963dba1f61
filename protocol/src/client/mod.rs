//! The client end of an open connection, sans IO: request ids, sealing, LOGIN signing, and the
//! server's messages cut out of the byte stream.
//!
//! After the handshake ([`crate::handshake`]) a client does the same few things whatever drives
//! its socket: it gives each request the next id and seals it as the next record, signs LOGINs
//! with the session's increasing sequence numbers, and opens the server's records into
//! [`ServerMessage`]s, whose replies may come in any order. [`ClientConnection`] does those
//! things over bytes; [`blocking::BlockingClient`] drives it over a blocking stream for tools
//! and tests (sfsd's test client, the benchmark's load clients). The two halves,
//! [`RequestSender`] and [`MessageReader`], can live on different threads or tasks, as the
//! session's [`crate::handshake::Session`] halves do.
//!
//! Requests may also be encoded apart from where they are sealed ([`UnsealedRequest`]): a
//! client whose callers encode their own requests (the sfs client) hands them to the one task
//! that owns the [`RequestSender`], which seals them in place or into a batch of records.

pub mod blocking;
mod unsealed;

pub use unsealed::{SealedRequest, UnsealedRequest, WRITE_DATA_ALIGN};

use crate::error::{DecodeError, LoginError, RecordError};
use crate::handshake::Session;
use crate::keys::UserKeypair;
use crate::login::{LoginArgs, LoginSigner};
use crate::message::{Request, ServerMessage, max_io_size};
use crate::name::HostId;
use crate::record::{Opened, Opener, RecordReader, RecordStart, Sealer};
use crate::request::RequestOp;

/// Why the connection cannot go on: the record stream or a message from the server is bad.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionError {
    /// A record failed to seal or open (tampering, a counter or key limit).
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The server sent a record that is not a server message.
    #[error("the server sent a malformed message: {0}")]
    Decode(#[from] DecodeError),
}

/// The sending half: assigns request ids and seals requests as records, in order (the record
/// counter is the nonce, so a record must go out in the order it was sealed).
///
/// Two ways to send, for two kinds of client:
/// - [`RequestSender::send`] gives each request the connection's next id and encodes and
///   seals it at once: for a client whose requests live and die with one connection (sfsd's
///   test client, the benchmark's load clients, [`blocking::BlockingClient`]).
/// - [`RequestSender::seal_in_place`] and [`RequestSender::seal_into_batch`] seal a request
///   its caller already encoded ([`UnsealedRequest`]) with an id the caller chose: for a
///   client whose ids span its connections (the sfs client sends a request again on a new
///   connection, with the same id, when one breaks) and whose callers encode their own
///   requests while one task seals and writes them (a WRITE's data is read straight into its
///   request and never copied again; small requests are batched into one write).
///
/// A connection uses one of the two: the ids of the first do not know of the second's.
#[derive(Debug)]
pub struct RequestSender {
    sealer: Sealer,
    next_id: u64,
}

impl RequestSender {
    /// Takes the next request id without sealing anything (for a caller that seals a request
    /// itself, e.g. to tamper with it or send part of it).
    pub fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Appends `op`, sent as `authno` with the next id, to `out` as one sealed record, and
    /// returns the id.
    pub fn send(
        &mut self,
        authno: u32,
        op: RequestOp,
        out: &mut Vec<u8>,
    ) -> Result<u64, RecordError> {
        let id = self.take_id();
        self.seal(id, authno, op, out)?;
        Ok(id)
    }

    /// The largest payload a record may carry (what the server accepts).
    pub fn max_payload(&self) -> usize {
        self.sealer.max_payload()
    }

    /// The largest WRITE whose request one record carries.
    pub fn max_write(&self) -> u32 {
        max_io_size(self.max_payload())
    }

    /// Seals `request` as the next record where it was encoded, without copying its payload:
    /// for a large request (a WRITE), written from its own buffer.
    pub fn seal_in_place(
        &mut self,
        request: UnsealedRequest,
    ) -> Result<SealedRequest, RecordError> {
        let (mut buf, start) = request.into_parts();
        self.sealer.finish(&mut buf, RecordStart::at(start))?;
        Ok(SealedRequest::new(buf, start))
    }

    /// Appends `request` to `batch` as the next sealed record, sealed there: for small
    /// requests gathered into one write (their one copy is the one into the batch). The
    /// request's buffer is left as it was, to reuse.
    pub fn seal_into_batch(
        &mut self,
        request: &UnsealedRequest,
        batch: &mut Vec<u8>,
    ) -> Result<(), RecordError> {
        self.sealer.seal_into(request.payload(), batch)
    }

    /// Appends `payload`, whatever it is, to `out` as the next sealed record: for tests of how
    /// a server treats a well-sealed record that is not a request.
    pub fn seal_raw(&mut self, payload: &[u8], out: &mut Vec<u8>) -> Result<(), RecordError> {
        self.sealer.seal_into(payload, out)
    }

    /// Appends a request with id `id` to `out` as the next sealed record.
    pub fn seal(
        &mut self,
        id: u64,
        authno: u32,
        op: RequestOp,
        out: &mut Vec<u8>,
    ) -> Result<(), RecordError> {
        self.sealer
            .seal_with(out, |b| Request { id, authno, op }.encode_into(b))
    }
}

/// The receiving half: bytes from the server in, [`ServerMessage`]s out.
#[derive(Debug)]
pub struct MessageReader {
    records: RecordReader,
}

impl MessageReader {
    /// A reader opening with `opener`; `rest` is what the server sent after its last
    /// handshake byte.
    pub fn new(opener: Opener, rest: &[u8]) -> MessageReader {
        let mut records = RecordReader::new(opener);
        records.extend_from_slice(rest);
        MessageReader { records }
    }

    /// Where the next bytes read from the socket go; call [`MessageReader::advance`] with the
    /// count read.
    pub fn read_buf(&mut self) -> &mut [u8] {
        self.records.read_buf()
    }

    /// `n` bytes were read into [`MessageReader::read_buf`].
    pub fn advance(&mut self, n: usize) {
        self.records.advance(n);
    }

    /// Bytes that arrived by another way (after the handshake's last message).
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.records.extend_from_slice(bytes);
    }

    /// The next whole message, `Ok(None)` when more bytes are needed. An error ends the
    /// connection: every later call fails too.
    pub fn next_message(&mut self) -> Result<Option<ServerMessage>, ConnectionError> {
        match self.records.next_record()? {
            Some(payload) => Ok(Some(ServerMessage::decode(payload)?)),
            None => Ok(None),
        }
    }

    /// As [`MessageReader::next_message`], without copying payload bytes out of records: a
    /// record of at least `reuse_above` payload bytes alone in the receive buffer hands the
    /// buffer itself to the message (a READ reply's data stays where the socket put it) and
    /// the reader goes on in `spare(reuse_above)`; a smaller message's data goes into
    /// `spare(len)`. `spare` may give recycled buffers.
    pub fn next_message_reusing(
        &mut self,
        reuse_above: usize,
        mut spare: impl FnMut(usize) -> Vec<u8>,
    ) -> Result<Option<ServerMessage>, ConnectionError> {
        let message = match self
            .records
            .next_record_or_buffer(reuse_above, || spare(reuse_above))?
        {
            None => return Ok(None),
            Some(Opened::Buffer { buf, payload }) => ServerMessage::decode_owned(buf, payload)?,
            Some(Opened::InPlace(payload)) => {
                ServerMessage::decode_reusing(payload, spare(payload.len()))?
            }
        };
        Ok(Some(message))
    }

    /// The largest READ whose reply one record carries.
    pub fn max_read(&self) -> u32 {
        max_io_size(self.records.opener().max_payload())
    }

    /// Drops the next whole message *without opening it* and returns its payload length;
    /// `Ok(None)` when more bytes are needed.
    ///
    /// Only for load generators that count bytes and must not spend CPU on opening (the
    /// benchmark's cheap clients): skipping breaks the nonce sequence, so from the first
    /// skipped message on [`MessageReader::next_message`] always fails.
    pub fn skip_message(&mut self) -> Result<Option<usize>, ConnectionError> {
        Ok(self.records.skip_record()?)
    }

    /// Call at end of stream: fails if the stream stopped inside a record.
    pub fn finish(&self) -> Result<(), ConnectionError> {
        Ok(self.records.finish()?)
    }
}

/// One open connection's client end: both halves and the LOGIN signer.
#[derive(Debug)]
pub struct ClientConnection {
    /// Sends requests.
    pub requests: RequestSender,
    /// Reads the server's messages.
    pub messages: MessageReader,
    signer: LoginSigner,
}

impl ClientConnection {
    /// The connection a finished handshake with the server `host` opened; `rest` is what the
    /// server sent after its last handshake byte.
    pub fn new(session: Session, host: HostId, rest: &[u8]) -> ClientConnection {
        ClientConnection {
            requests: RequestSender {
                sealer: session.sealer,
                next_id: 1,
            },
            messages: MessageReader::new(session.opener, rest),
            signer: LoginSigner::new(session.session_id, host),
        }
    }

    /// The largest READ or WRITE whose record both directions carry.
    pub fn max_io(&self) -> u32 {
        self.requests.max_write().min(self.messages.max_read())
    }

    /// The arguments of a LOGIN of `user` with `key`, signed for this session with its next
    /// sequence number.
    pub fn login_args(&mut self, user: &str, key: &UserKeypair) -> Result<LoginArgs, LoginError> {
        self.signer.sign(user, key)
    }

    /// The two halves and the signer, for drivers that run them apart.
    pub fn into_parts(self) -> (RequestSender, MessageReader, LoginSigner) {
        (self.requests, self.messages, self.signer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::{self, ClientHandshake, ServerHandshake};
    use crate::keys::ServerKeypair;
    use crate::message::{Invalidate, Reply, WriteHead, write_request_data_offset};
    use crate::record::RecordReader;
    use crate::reply::ReplyBody;
    use crate::request::StableHow;
    use crate::{FileHandle, NfsStatus};

    /// A client connection and the server's session halves, after an in-memory handshake.
    fn pair() -> (ClientConnection, Sealer, RecordReader) {
        let key = ServerKeypair::generate();
        let name = key.server_name("localhost".parse().unwrap());
        let mut client = ClientHandshake::new(&name);
        let mut server = ServerHandshake::new(&key);
        handshake::pump(&mut client, &mut server).unwrap();
        let c = ClientConnection::new(client.into_session().unwrap(), name.host_id(), &[]);
        let s = server.into_session().unwrap();
        (c, s.sealer, RecordReader::new(s.opener))
    }

    #[test]
    fn requests_get_increasing_ids_and_reach_the_server_in_order() {
        let (mut c, _, mut server) = pair();
        let mut wire = Vec::new();
        let a = c.requests.send(7, RequestOp::Null, &mut wire).unwrap();
        let b = c.requests.take_id();
        c.requests
            .seal(
                b,
                0,
                RequestOp::FsInfo {
                    fh: FileHandle::from_bytes([1; crate::HANDLE_LEN]),
                },
                &mut wire,
            )
            .unwrap();
        assert_eq!((a, b), (1, 2));
        server.extend_from_slice(&wire);
        let first = Request::decode(server.next_record().unwrap().unwrap()).unwrap();
        assert_eq!((first.id, first.authno, first.op), (1, 7, RequestOp::Null));
        let second = Request::decode(server.next_record().unwrap().unwrap()).unwrap();
        assert_eq!(second.id, 2);
    }

    /// The requests the server end reads from `wire`.
    fn requests_read(server: &mut RecordReader, wire: &[u8]) -> Vec<Request> {
        server.extend_from_slice(wire);
        let mut got = Vec::new();
        while let Some(payload) = server.next_record().unwrap() {
            got.push(Request::decode(payload).unwrap());
        }
        server.finish().unwrap();
        got
    }

    #[test]
    fn requests_encoded_apart_reach_the_server_with_the_ids_their_callers_chose() {
        let (mut c, _, mut server) = pair();
        let fh = FileHandle::from_bytes([2; crate::HANDLE_LEN]);
        let small = |id| {
            let op = RequestOp::GetAttr { fh };
            UnsealedRequest::new(vec![0xAA; 9], &Request { id, authno: 3, op })
        };
        let head = WriteHead {
            id: 1000,
            authno: 3,
            fh: &fh,
            offset: 4096,
            stable: StableHow::Unstable,
            ticket: None,
        };
        let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let write = UnsealedRequest::write(Vec::new(), &head, data.len(), |dst| {
            dst.copy_from_slice(&data);
            Ok::<_, ()>(data.len())
        })
        .unwrap();
        // Ids out of order and far apart, as a session's are on a connection after a retry;
        // batched and in-place records interleaved in the sealing order.
        let mut wire = Vec::new();
        let first = small(42);
        c.requests.seal_into_batch(&first, &mut wire).unwrap();
        assert_eq!(wire.len(), first.record_len());
        let sealed = c.requests.seal_in_place(write).unwrap();
        wire.extend_from_slice(sealed.record());
        c.requests.seal_into_batch(&small(7), &mut wire).unwrap();
        let got = requests_read(&mut server, &wire);
        let ids: Vec<u64> = got.iter().map(|r| r.id).collect();
        assert_eq!(ids, [42, 1000, 7]);
        assert!(got.iter().all(|r| r.authno == 3));
        let RequestOp::Write {
            offset, data: sent, ..
        } = &got[1].op
        else {
            panic!("not a WRITE: {:?}", got[1].op);
        };
        assert_eq!((*offset, &sent[..]), (4096, &data[..]));
        // The batched request's buffer is untouched, to reuse.
        assert_eq!(
            Request::decode(first.payload()).unwrap().op,
            RequestOp::GetAttr { fh }
        );
    }

    #[test]
    fn a_write_is_sealed_where_its_data_was_read_in() {
        let (mut c, _, mut server) = pair();
        let fh = FileHandle::from_bytes([5; crate::HANDLE_LEN]);
        let head = WriteHead {
            id: 9,
            authno: 0,
            fh: &fh,
            offset: 0,
            stable: StableHow::FileSync,
            ticket: None,
        };
        let len = 256 * 1024;
        let mut data_at = 0;
        let write = UnsealedRequest::write(Vec::new(), &head, len, |dst| {
            dst[..len].fill(0x5A);
            data_at = dst.as_ptr().addr();
            Ok::<_, ()>(len)
        })
        .unwrap();
        assert_eq!(
            data_at % WRITE_DATA_ALIGN,
            0,
            "the data is not cache-aligned"
        );
        let payload_at = write.payload().as_ptr().addr();
        assert_eq!(payload_at + write_request_data_offset(&head), data_at);
        let record_len = write.record_len();
        let sealed = c.requests.seal_in_place(write).unwrap();
        let record = sealed.record();
        assert_eq!(record.len(), record_len);
        assert_eq!(
            record.as_ptr().addr() + crate::record::HEADER_LEN,
            payload_at,
            "the request was copied to be sealed"
        );
        let got = requests_read(&mut server, record);
        assert_eq!(got[0].id, 9);
        // What comes back to reuse is the buffer the data was read into.
        let buf = sealed.into_buffer();
        assert!(buf.as_ptr_range().contains(&(data_at as *const u8)));
    }

    #[test]
    fn server_messages_come_out_whole_however_the_bytes_are_cut() {
        let (mut c, mut sealer, _) = pair();
        let mut wire = Vec::new();
        let reply = ServerMessage::Reply(Reply {
            id: 9,
            result: Err(NfsStatus::NoEnt),
        });
        let invalidate = ServerMessage::Invalidate(Invalidate {
            fh: FileHandle::from_bytes([3; crate::HANDLE_LEN]),
            attr: None,
        });
        for m in [&reply, &invalidate] {
            sealer.seal_with(&mut wire, |b| m.encode_into(b)).unwrap();
        }
        let mut got = Vec::new();
        for byte in &wire {
            c.messages.extend_from_slice(std::slice::from_ref(byte));
            while let Some(m) = c.messages.next_message().unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got, vec![reply, invalidate]);
        c.messages.finish().unwrap();
    }

    #[test]
    fn a_large_reply_alone_in_the_buffer_keeps_its_bytes_where_they_arrived() {
        let (mut c, mut sealer, _) = pair();
        let data = vec![7u8; 64 * 1024];
        let reply = ServerMessage::Reply(Reply {
            id: 3,
            result: Ok(ReplyBody::Read {
                attr: None,
                eof: true,
                data: data.clone().into(),
            }),
        });
        let mut wire = Vec::new();
        sealer
            .seal_with(&mut wire, |b| reply.encode_into(b))
            .unwrap();
        let mut fed = 0;
        let mut last_buf = 0..0;
        while fed < wire.len() {
            let buf = c.messages.read_buf();
            let n = buf.len().min(wire.len() - fed);
            buf[..n].copy_from_slice(&wire[fed..fed + n]);
            let at = buf.as_ptr().addr();
            last_buf = at - fed..at + n;
            c.messages.advance(n);
            fed += n;
        }
        let mut spares = Vec::new();
        let got = c
            .messages
            .next_message_reusing(16 * 1024, |len| {
                spares.push(len);
                Vec::new()
            })
            .unwrap()
            .unwrap();
        assert_eq!(got, reply);
        let ServerMessage::Reply(Reply {
            result: Ok(ReplyBody::Read { data: got, .. }),
            ..
        }) = got
        else {
            unreachable!()
        };
        let at = got.as_ptr().addr();
        assert!(
            last_buf.contains(&at),
            "the data was copied out of the receive buffer"
        );
        assert_eq!(
            spares,
            vec![16 * 1024],
            "the reader went on in a spare buffer"
        );
    }

    #[test]
    fn a_skipped_message_counts_its_payload_and_no_later_message_opens() {
        let (mut c, mut sealer, _) = pair();
        let mut wire = Vec::new();
        sealer.seal_into(&[1; 300], &mut wire).unwrap();
        let m = ServerMessage::Reply(Reply {
            id: 2,
            result: Ok(ReplyBody::Null),
        });
        sealer.seal_with(&mut wire, |b| m.encode_into(b)).unwrap();
        c.messages.extend_from_slice(&wire[..wire.len() - 1]);
        assert_eq!(c.messages.skip_message().unwrap(), Some(300));
        assert_eq!(c.messages.skip_message().unwrap(), None, "incomplete");
        c.messages.extend_from_slice(&wire[wire.len() - 1..]);
        assert!(c.messages.next_message().is_err());
    }

    #[test]
    fn a_tampered_record_ends_the_connection() {
        let (mut c, mut sealer, _) = pair();
        let mut wire = Vec::new();
        let m = ServerMessage::Reply(Reply {
            id: 1,
            result: Ok(ReplyBody::Null),
        });
        sealer.seal_with(&mut wire, |b| m.encode_into(b)).unwrap();
        sealer.seal_with(&mut wire, |b| m.encode_into(b)).unwrap();
        let last = wire.len() - 1;
        wire[last] ^= 1;
        c.messages.extend_from_slice(&wire);
        assert_eq!(c.messages.next_message().unwrap(), Some(m));
        assert!(matches!(
            c.messages.next_message(),
            Err(ConnectionError::Record(_))
        ));
        assert!(c.messages.next_message().is_err());
    }

    #[test]
    fn logins_are_signed_for_this_session_with_increasing_sequence_numbers() {
        let (mut c, _, _) = pair();
        let key = UserKeypair::from_seed([4; 32]);
        let first = c.login_args("alice", &key).unwrap();
        let second = c.login_args("alice", &key).unwrap();
        assert!(second.seqno > first.seqno);
    }
}
