//! The server end of a connection, sans IO: the phase (handshake, open, closed), the records
//! cut out of the byte stream and decoded into requests, LOGIN verification and the
//! connection's authno table, and sealing of the server's messages.
//!
//! A server does the same few things with a connection whatever drives its socket: it runs the
//! handshake ([`crate::handshake`]), opens the client's records, decodes them into [`Request`]s,
//! verifies LOGINs against the session (refusing replays), tells each request's sender from its
//! authno, and seals its replies as records. [`ServerConnection`] does those things over bytes
//! and hands out [`Event`]s; what needs the server's own state stays with the server: whether a
//! verified key may act as the user it claims and with which credentials (the server answers
//! with [`ServerConnection::assign`]), what anonymous requests may do, storage, leases,
//! admission, and when to read and write. sfsd's `conn.rs` drives it with its runtime.
//!
//! The zero-copy paths stay open to the driver: bytes are read straight into the record reader
//! ([`ServerConnection::read_buf`]), a large record alone in the receive buffer becomes the
//! request's data ([`ServerConnection::next_event`]), a READ reply is sealed where it was
//! encoded ([`ServerConnection::seal_in_place`]) or on another thread
//! ([`ServerConnection::defer_seal`]).

use crate::error::{DecodeError, HandshakeError, LoginError, RecordError};
use crate::handshake::{HandshakeConfig, ServerHandshake};
use crate::keys::ServerKeypair;
use crate::login::{ANONYMOUS, AuthTable, LoginVerifier, VerifiedLogin};
use crate::message::{Reply, Request, ServerMessage, max_io_size};
use crate::name::HostId;
use crate::record::{DeferredSeal, Opened, RecordReader, RecordStart, Sealer};
use crate::reply::ReplyBody;
use crate::request::RequestOp;
use crate::status::NfsStatus;

/// Where a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The handshake is under way: no records yet.
    Handshake,
    /// The session is established: records carry requests and replies.
    Open,
    /// The connection failed or was closed: nothing more comes out of it (but the output
    /// already queued, e.g. a handshake refusal, is still to be sent).
    Closed,
}

/// Why a connection ends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CloseReason {
    /// The handshake failed; a refusal the client should read may be in the output.
    #[error("handshake failed: {0}")]
    Handshake(HandshakeError),
    /// A record failed to open (tampering, a counter limit, a length over the limit).
    #[error("bad record: {0}")]
    BadRecord(RecordError),
    /// A record opened but is not a request.
    #[error("undecodable request: {0}")]
    BadRequest(DecodeError),
}

/// Who sent a request, from its authno and the connection's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sender<C> {
    /// Authno 0: the server decides what anonymous requests may do.
    Anonymous,
    /// An authno the server assigned on this connection, with its credentials.
    User(C),
    /// An authno never assigned on this connection: refused (`Acces`) by the server.
    Unknown,
}

/// What the connection's input produced.
#[derive(Debug)]
pub enum Event<C> {
    /// The handshake finished: the session is established.
    Opened,
    /// A LOGIN: `Ok` if its signature verified for this session (the server then looks the key
    /// up and answers with [`ServerConnection::assign`] or a refusal), `Err` if not (the
    /// server refuses it: [`login_refusal`]). The server assigns before it asks for the next
    /// event: a request's sender is resolved when it comes out, in the order of the stream, so
    /// a client may send requests with the authno its LOGIN will get without waiting.
    Login {
        /// The request id, for the reply.
        id: u64,
        /// The verified claim, or why it failed.
        result: Result<VerifiedLogin, LoginError>,
    },
    /// Any other request, with its sender. Its `authno` is the one it came with.
    Request {
        /// The decoded request.
        request: Request,
        /// Who sent it.
        sender: Sender<C>,
    },
    /// The connection must close (it is [`Phase::Closed`] now).
    Close(CloseReason),
}

/// The status a LOGIN that failed verification is refused with: a bad user name is the
/// caller's mistake (`Inval`); anything else, `Acces`.
pub fn login_refusal(e: &LoginError) -> NfsStatus {
    match e {
        LoginError::BadUserName(_) => NfsStatus::Inval,
        _ => NfsStatus::Acces,
    }
}

/// The open session's state.
#[derive(Debug)]
struct Open<C> {
    reader: RecordReader,
    sealer: Sealer,
    verifier: LoginVerifier,
    auth: AuthTable<C>,
    /// Largest READ this peer can receive in one record.
    max_read: usize,
}

enum State<C> {
    /// Boxed: a handshake is large, and a connection spends little of its life in it.
    Handshake(Box<ServerHandshake>),
    Open(Box<Open<C>>),
    Closed,
}

/// One connection's server end. `C` is what the server keeps per authno (its credentials).
pub struct ServerConnection<C> {
    state: State<C>,
    host: HostId,
    /// Handshake bytes to send.
    output: Vec<u8>,
    /// How the handshake ended, not yet handed out as an event (`Ok`: opened).
    pending: Option<Result<(), CloseReason>>,
}

impl<C> std::fmt::Debug for ServerConnection<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConnection")
            .field("phase", &self.phase())
            .finish_non_exhaustive()
    }
}

impl<C> ServerConnection<C> {
    /// Where the connection is.
    pub fn phase(&self) -> Phase {
        match self.state {
            State::Handshake(_) => Phase::Handshake,
            State::Open(_) => Phase::Open,
            State::Closed => Phase::Closed,
        }
    }
}

impl<C: Clone + PartialEq> ServerConnection<C> {
    /// A newly accepted connection to the server `host` with key `keypair`; its first output
    /// (the server's key message) is ready at once ([`ServerConnection::take_output`]).
    pub fn new(keypair: &ServerKeypair, config: HandshakeConfig, host: HostId) -> Self {
        let mut hs = ServerHandshake::with_config(keypair, config);
        let output = hs.take_output();
        ServerConnection {
            state: State::Handshake(Box::new(hs)),
            host,
            output,
            pending: None,
        }
    }

    /// Whether the session is established and the connection not closed.
    pub fn is_open(&self) -> bool {
        matches!(self.state, State::Open(_))
    }

    /// Bytes to send before anything sealed (the handshake's messages), emptied.
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.output)
    }

    /// Bytes received, in any phase (during the handshake, this is how they come in: it reads
    /// little, into a small buffer of the driver's). Events come out of
    /// [`ServerConnection::next_event`].
    pub fn receive(&mut self, mut input: &[u8]) {
        match &mut self.state {
            State::Closed => {}
            State::Open(open) => open.reader.extend_from_slice(input),
            State::Handshake(hs) => {
                let done = match hs.receive(input) {
                    Ok(used) => {
                        input = &input[used..];
                        hs.is_done()
                    }
                    Err(e) => {
                        self.output.extend_from_slice(&hs.take_output());
                        return self.fail(CloseReason::Handshake(e));
                    }
                };
                self.output.extend_from_slice(&hs.take_output());
                if !done {
                    return;
                }
                let State::Handshake(hs) = std::mem::replace(&mut self.state, State::Closed) else {
                    return;
                };
                match hs.into_session() {
                    Ok(session) => {
                        let max_read = max_io_size(session.sealer.max_payload()) as usize;
                        let mut reader = RecordReader::new(session.opener);
                        reader.extend_from_slice(input);
                        self.state = State::Open(Box::new(Open {
                            reader,
                            verifier: LoginVerifier::new(session.session_id, self.host),
                            sealer: session.sealer,
                            auth: AuthTable::new(),
                            max_read,
                        }));
                        self.pending = Some(Ok(()));
                    }
                    // A refused version: the refusal is already in the output.
                    Err(e) => self.fail(CloseReason::Handshake(e)),
                }
            }
        }
    }

    fn fail(&mut self, why: CloseReason) {
        self.state = State::Closed;
        self.pending = Some(Err(why));
    }

    /// Where the next bytes read from the socket go once the connection is open (empty
    /// otherwise: use [`ServerConnection::receive`]); call [`ServerConnection::advance`] with
    /// the count read.
    pub fn read_buf(&mut self) -> &mut [u8] {
        match &mut self.state {
            State::Open(open) => open.reader.read_buf(),
            _ => &mut [],
        }
    }

    /// `n` bytes were read into [`ServerConnection::read_buf`].
    pub fn advance(&mut self, n: usize) {
        if let State::Open(open) = &mut self.state {
            open.reader.advance(n);
        }
    }

    /// The next event, `None` when more bytes are needed. A record of at least `reuse_above`
    /// payload bytes (only a WRITE's is that large) does not copy its data: alone in the
    /// receive buffer, the buffer itself becomes the request's data and the reader goes on in
    /// `spare()`; otherwise its data goes into `spare()`. `spare` may give recycled buffers.
    pub fn next_event(
        &mut self,
        reuse_above: usize,
        mut spare: impl FnMut() -> Vec<u8>,
    ) -> Option<Event<C>> {
        match self.pending.take() {
            Some(Ok(())) => return Some(Event::Opened),
            Some(Err(why)) => return Some(Event::Close(why)),
            None => {}
        }
        let State::Open(open) = &mut self.state else {
            return None;
        };
        let decoded = match open.reader.next_record_or_buffer(reuse_above, &mut spare) {
            Ok(None) => return None,
            Ok(Some(Opened::Buffer { buf, payload })) => Request::decode_owned(buf, payload),
            Ok(Some(Opened::InPlace(payload))) if payload.len() >= reuse_above => {
                Request::decode_reusing(payload, spare())
            }
            Ok(Some(Opened::InPlace(payload))) => Request::decode(payload),
            Err(e) => {
                self.state = State::Closed;
                return Some(Event::Close(CloseReason::BadRecord(e)));
            }
        };
        let request = match decoded {
            Ok(request) => request,
            Err(e) => {
                self.state = State::Closed;
                return Some(Event::Close(CloseReason::BadRequest(e)));
            }
        };
        if let RequestOp::Login(args) = &request.op {
            return Some(Event::Login {
                id: request.id,
                result: open.verifier.verify(args),
            });
        }
        let sender = match request.authno {
            ANONYMOUS => Sender::Anonymous,
            authno => match open.auth.get(authno) {
                Some(c) => Sender::User(c.clone()),
                None => Sender::Unknown,
            },
        };
        Some(Event::Request { request, sender })
    }

    /// Call at end of stream: whether it stopped cleanly between records (never during the
    /// handshake).
    pub fn finished_cleanly(&self) -> bool {
        match &self.state {
            State::Open(open) => open.reader.finish().is_ok(),
            _ => false,
        }
    }

    /// Gives the credentials of a verified LOGIN the next authno (`None` unless open; `Err`
    /// when the table is full).
    pub fn assign(&mut self, credentials: C) -> Option<Result<u32, LoginError>> {
        self.auth_table().map(|t| t.assign(credentials))
    }

    /// The authno table, for a server that assigns authnos of its own (e.g. narrowed ones).
    pub fn auth_table(&mut self) -> Option<&mut AuthTable<C>> {
        match &mut self.state {
            State::Open(open) => Some(&mut open.auth),
            _ => None,
        }
    }

    /// The largest READ data this peer can receive in one record (0 unless open).
    pub fn max_read(&self) -> usize {
        match &self.state {
            State::Open(open) => open.max_read,
            _ => 0,
        }
    }

    /// Seals `msg` as the next record, appended to `out`. A reply too large for the peer's
    /// records goes as an error instead: `Xattr2Big` for an extended attribute value or list
    /// (as one too large for the caller's buffer), `ServerFault` otherwise; an invalidation too
    /// large is dropped (`Ok(false)`). `Err` if nothing can be sealed any more.
    pub fn seal(&mut self, msg: &ServerMessage, out: &mut Vec<u8>) -> Result<bool, RecordError> {
        let State::Open(open) = &mut self.state else {
            return Ok(false);
        };
        if open.sealer.seal_with(out, |b| msg.encode_into(b)).is_ok() {
            return Ok(true);
        }
        let (id, status) = match msg {
            ServerMessage::Reply(Reply {
                id,
                result: Ok(ReplyBody::GetXattr { .. } | ReplyBody::ListXattr { .. }),
            }) => (*id, NfsStatus::Xattr2Big),
            ServerMessage::Reply(r) => (r.id, NfsStatus::ServerFault),
            ServerMessage::Invalidate(_) => return Ok(false),
        };
        let fault = ServerMessage::Reply(Reply {
            id,
            result: Err(status),
        });
        open.sealer.seal_with(out, |b| fault.encode_into(b))?;
        Ok(true)
    }

    /// Seals, in place, the record begun at `start` of `buf` whose payload was encoded there
    /// (a READ reply: its data is not copied). `None` unless open.
    pub fn seal_in_place(
        &mut self,
        buf: &mut Vec<u8>,
        start: RecordStart,
    ) -> Option<Result<(), RecordError>> {
        match &mut self.state {
            State::Open(open) => Some(open.sealer.finish(buf, start)),
            _ => None,
        }
    }

    /// Takes the next record's counter for a record sealed elsewhere (another thread), which
    /// must then be sent in this place of the stream. `None` unless open.
    pub fn defer_seal(&mut self) -> Option<Result<DeferredSeal, RecordError>> {
        match &mut self.state {
            State::Open(open) => Some(open.sealer.defer()),
            _ => None,
        }
    }

    /// Lets the receive buffer go (a quiet connection holds none).
    pub fn release_buffer(&mut self) {
        if let State::Open(open) = &mut self.state {
            open.reader.release_buffer();
        }
    }

    /// Ends the connection from the server's side: the session's state goes.
    pub fn close(&mut self) {
        self.state = State::Closed;
        self.pending = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ClientConnection;
    use crate::handle::{FileHandle, HANDLE_LEN};
    use crate::handshake::ClientHandshake;
    use crate::keys::UserKeypair;
    use crate::request::StableHow;

    /// What the server keeps per authno in these tests: a uid.
    type Uid = u32;

    /// A server connection and a client connection, handshaken over bytes in memory, the
    /// server's `Opened` event taken.
    fn pair() -> (ServerConnection<Uid>, ClientConnection) {
        pair_with(HandshakeConfig::default()).unwrap()
    }

    /// A server end whose handshake failed, and why.
    type Refused = (ServerConnection<Uid>, CloseReason);

    fn pair_with(
        client_config: HandshakeConfig,
    ) -> Result<(ServerConnection<Uid>, ClientConnection), Box<Refused>> {
        let key = ServerKeypair::generate();
        let name = key.server_name("localhost".parse().unwrap());
        let mut client = ClientHandshake::with_config(&name, client_config);
        let mut server = ServerConnection::new(&key, HandshakeConfig::default(), name.host_id());
        assert_eq!(server.phase(), Phase::Handshake);
        let mut opened = false;
        while !client.is_done() {
            let to_client = server.take_output();
            if client.receive(&to_client).is_err() {
                break;
            }
            server.receive(&client.take_output());
            match server.next_event(usize::MAX, Vec::new) {
                Some(Event::Close(why)) => return Err(Box::new((server, why))),
                Some(Event::Opened) => opened = true,
                Some(e) => panic!("{e:?} during the handshake"),
                None => {}
            }
        }
        assert!(opened, "the handshake's end is an event");
        assert_eq!(server.phase(), Phase::Open);
        let c = ClientConnection::new(client.into_session().unwrap(), name.host_id(), &[]);
        Ok((server, c))
    }

    fn send(s: &mut ServerConnection<Uid>, c: &mut ClientConnection, authno: u32, op: RequestOp) {
        let mut wire = Vec::new();
        c.requests.send(authno, op, &mut wire).unwrap();
        s.receive(&wire);
    }

    fn next(s: &mut ServerConnection<Uid>) -> Option<Event<Uid>> {
        s.next_event(usize::MAX, Vec::new)
    }

    #[test]
    fn a_request_comes_out_as_an_event_with_its_sender() {
        let (mut s, mut c) = pair();
        send(&mut s, &mut c, ANONYMOUS, RequestOp::Null);
        let Some(Event::Request { request, sender }) = next(&mut s) else {
            panic!("no request event");
        };
        assert_eq!((request.id, request.op), (1, RequestOp::Null));
        assert_eq!(sender, Sender::Anonymous);
        assert!(next(&mut s).is_none(), "one record, one event");
    }

    #[test]
    fn a_verified_login_gets_an_authno_that_later_requests_map_to() {
        let (mut s, mut c) = pair();
        let key = UserKeypair::from_seed([5; 32]);
        let args = c.login_args("alice", &key).unwrap();
        send(&mut s, &mut c, ANONYMOUS, RequestOp::Login(args));
        let Some(Event::Login { id, result }) = next(&mut s) else {
            panic!("no login event");
        };
        let verified = result.unwrap();
        assert_eq!((id, verified.user.as_str()), (1, "alice"));
        assert_eq!(verified.public_key, key.public_key());
        let authno = s.assign(1000).unwrap().unwrap();
        assert_ne!(authno, ANONYMOUS);
        send(&mut s, &mut c, authno, RequestOp::Null);
        assert!(matches!(
            next(&mut s),
            Some(Event::Request {
                sender: Sender::User(1000),
                ..
            })
        ));
        send(&mut s, &mut c, authno + 1, RequestOp::Null);
        assert!(matches!(
            next(&mut s),
            Some(Event::Request {
                sender: Sender::Unknown,
                ..
            })
        ));
    }

    #[test]
    fn a_login_with_a_wrong_signature_or_replayed_is_refused() {
        let (mut s, mut c) = pair();
        let key = UserKeypair::from_seed([6; 32]);
        let mut bad = c.login_args("bob", &key).unwrap();
        bad.signature[0] ^= 1;
        send(&mut s, &mut c, ANONYMOUS, RequestOp::Login(bad));
        let Some(Event::Login { result: Err(e), .. }) = next(&mut s) else {
            panic!("a forged login verified");
        };
        assert_eq!(login_refusal(&e), NfsStatus::Acces);
        let good = c.login_args("bob", &key).unwrap();
        for expect_ok in [true, false] {
            send(&mut s, &mut c, ANONYMOUS, RequestOp::Login(good.clone()));
            let Some(Event::Login { result, .. }) = next(&mut s) else {
                panic!("no login event");
            };
            assert_eq!(result.is_ok(), expect_ok, "a replayed login verified");
        }
        assert_eq!(s.phase(), Phase::Open, "a refused login does not close");
    }

    #[test]
    fn a_tampered_record_closes_the_connection() {
        let (mut s, mut c) = pair();
        let mut wire = Vec::new();
        c.requests
            .send(ANONYMOUS, RequestOp::Null, &mut wire)
            .unwrap();
        let last = wire.len() - 1;
        wire[last] ^= 1;
        s.receive(&wire);
        assert!(matches!(
            next(&mut s),
            Some(Event::Close(CloseReason::BadRecord(_)))
        ));
        assert_eq!(s.phase(), Phase::Closed);
        assert!(next(&mut s).is_none());
        assert!(!s.finished_cleanly());
    }

    #[test]
    fn a_sealed_record_that_is_not_a_request_closes_the_connection() {
        let (mut s, mut c) = pair();
        let mut wire = Vec::new();
        c.requests.seal_raw(&[0xff; 3], &mut wire).unwrap();
        s.receive(&wire);
        assert!(matches!(
            next(&mut s),
            Some(Event::Close(CloseReason::BadRequest(_)))
        ));
        assert_eq!(s.phase(), Phase::Closed);
    }

    #[test]
    fn a_client_without_a_common_version_is_refused_and_told() {
        let config = HandshakeConfig {
            versions: vec![1],
            ..HandshakeConfig::default()
        };
        let Err(failed) = pair_with(config) else {
            panic!("a client with no common version got a session");
        };
        let (mut s, why) = *failed;
        assert!(matches!(why, CloseReason::Handshake(_)));
        assert_eq!(s.phase(), Phase::Closed);
        assert!(!s.take_output().is_empty(), "the refusal goes out");
    }

    #[test]
    fn a_large_write_alone_in_the_buffer_keeps_its_bytes_where_they_arrived() {
        let (mut s, mut c) = pair();
        let data = vec![9u8; 64 * 1024];
        let op = RequestOp::Write {
            fh: FileHandle::from_bytes([2; HANDLE_LEN]),
            offset: 0,
            stable: StableHow::Unstable,
            data: data.clone().into(),
        };
        let mut wire = Vec::new();
        c.requests.send(ANONYMOUS, op, &mut wire).unwrap();
        let (mut fed, mut last_buf) = (0, 0..0);
        while fed < wire.len() {
            let buf = s.read_buf();
            let n = buf.len().min(wire.len() - fed);
            buf[..n].copy_from_slice(&wire[fed..fed + n]);
            let at = buf.as_ptr().addr();
            last_buf = at - fed..at + n;
            s.advance(n);
            fed += n;
        }
        let mut spares = 0;
        let Some(Event::Request { request, .. }) = s.next_event(16 * 1024, || {
            spares += 1;
            Vec::new()
        }) else {
            panic!("no request event");
        };
        let RequestOp::Write { data: got, .. } = request.op else {
            panic!("not a WRITE");
        };
        assert_eq!(&got[..], &data[..]);
        assert!(
            last_buf.contains(&got.as_ptr().addr()),
            "the data was copied out of the receive buffer"
        );
        assert_eq!(spares, 1, "the reader went on in a spare buffer");
        assert!(s.finished_cleanly());
    }

    #[test]
    fn replies_are_sealed_for_the_client_and_one_too_large_goes_as_an_error() {
        let (mut s, mut c) = pair();
        let mut wire = Vec::new();
        let ok = ServerMessage::Reply(Reply {
            id: 4,
            result: Ok(ReplyBody::Null),
        });
        assert!(s.seal(&ok, &mut wire).unwrap());
        let huge = ServerMessage::Reply(Reply {
            id: 5,
            result: Ok(ReplyBody::ReadLink {
                attr: None,
                target: vec![b'a'; s.max_read() + 4096],
            }),
        });
        assert!(s.seal(&huge, &mut wire).unwrap());
        c.messages.extend_from_slice(&wire);
        assert_eq!(c.messages.next_message().unwrap(), Some(ok));
        let fault = ServerMessage::Reply(Reply {
            id: 5,
            result: Err(NfsStatus::ServerFault),
        });
        assert_eq!(c.messages.next_message().unwrap(), Some(fault));
        s.close();
        assert_eq!(s.phase(), Phase::Closed);
        assert!(s.defer_seal().is_none());
    }
}
