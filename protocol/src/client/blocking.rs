//! A [`ClientConnection`] driven over a blocking `Read + Write` stream: for tools and tests
//! (sfsd's test client, the benchmark's load clients). The client's own driver (tokio tasks)
//! uses the same halves.

use std::collections::HashMap;
use std::io::{self, Read, Write};

use super::{ClientConnection, ConnectionError};
use crate::error::LoginError;
use crate::handshake::{self, ClientHandshake, DriveError, HandshakeConfig};
use crate::keys::UserKeypair;
use crate::message::{Invalidate, ServerMessage};
use crate::name::ServerName;
use crate::reply::ReplyBody;
use crate::request::RequestOp;
use crate::status::NfsStatus;

/// What a request got back: the server's reply.
pub type Answer = Result<ReplyBody, NfsStatus>;

/// Why a call on a blocking client failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Reading or writing the stream failed (a read timeout set on the socket ends up here).
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The server closed the connection.
    #[error("the server closed the connection")]
    Closed,
    /// The record stream or a message is bad: the connection is over.
    #[error(transparent)]
    Connection(#[from] ConnectionError),
    /// A LOGIN could not be signed (a bad user name).
    #[error(transparent)]
    Login(#[from] LoginError),
    /// The server answered with a reply of another kind than the request's.
    #[error("unexpected reply {0:?}")]
    Unexpected(Box<ReplyBody>),
}

/// A client connection over a blocking stream. Replies that arrive while another is awaited
/// are kept for their callers; INVALIDATEs are collected in [`BlockingClient::invalidations`].
#[derive(Debug)]
pub struct BlockingClient<S> {
    /// The stream (to set timeouts, or to write bytes a test made up).
    pub stream: S,
    /// The connection's state.
    pub conn: ClientConnection,
    /// INVALIDATEs received so far, oldest first.
    pub invalidations: Vec<Invalidate>,
    early: HashMap<u64, Answer>,
}

impl<S: Read + Write> BlockingClient<S> {
    /// Runs the handshake with the server `name` over `stream` (connected to it).
    pub fn handshake(
        mut stream: S,
        name: &ServerName,
        config: HandshakeConfig,
    ) -> Result<BlockingClient<S>, DriveError> {
        let done = handshake::complete(ClientHandshake::with_config(name, config), &mut stream)?;
        Ok(BlockingClient {
            stream,
            conn: ClientConnection::new(done.session, name.host_id(), &done.rest),
            invalidations: Vec::new(),
            early: HashMap::new(),
        })
    }

    /// Sends `op` as `authno`; returns its id.
    pub fn send(&mut self, authno: u32, op: RequestOp) -> Result<u64, CallError> {
        let mut wire = Vec::new();
        let id = self
            .conn
            .requests
            .send(authno, op, &mut wire)
            .map_err(ConnectionError::from)?;
        self.stream.write_all(&wire)?;
        Ok(id)
    }

    /// The next message from the server; `Ok(None)` at end of stream.
    pub fn next_message(&mut self) -> Result<Option<ServerMessage>, CallError> {
        loop {
            if let Some(m) = self.conn.messages.next_message()? {
                return Ok(Some(m));
            }
            let n = match self.stream.read(self.conn.messages.read_buf()) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                self.conn.messages.finish()?;
                return Ok(None);
            }
            self.conn.messages.advance(n);
        }
    }

    /// Reads until a whole message is there and drops it unopened: its payload length.
    /// See [`MessageReader::skip_message`](super::MessageReader::skip_message): after this,
    /// no message of this connection opens again.
    pub fn skip_message(&mut self) -> Result<usize, CallError> {
        loop {
            if let Some(len) = self.conn.messages.skip_message()? {
                return Ok(len);
            }
            let n = match self.stream.read(self.conn.messages.read_buf()) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                return Err(CallError::Closed);
            }
            self.conn.messages.advance(n);
        }
    }

    /// The reply to request `id`, reading (and keeping) whatever comes before it.
    pub fn wait_reply(&mut self, id: u64) -> Result<Answer, CallError> {
        loop {
            if let Some(answer) = self.poll_reply(id)? {
                return Ok(answer);
            }
        }
    }

    /// The reply to request `id` if it came already, else reads one message: the reply if it
    /// is that, else keeps it (another id's reply, or an INVALIDATE) and returns `Ok(None)`. A
    /// caller with a deadline calls this in a loop, with the stream's read timeout set to what
    /// is left.
    pub fn poll_reply(&mut self, id: u64) -> Result<Option<Answer>, CallError> {
        if let Some(answer) = self.early.remove(&id) {
            return Ok(Some(answer));
        }
        match self.next_message()?.ok_or(CallError::Closed)? {
            ServerMessage::Reply(r) if r.id == id => return Ok(Some(r.result)),
            ServerMessage::Reply(r) => {
                self.early.insert(r.id, r.result);
            }
            ServerMessage::Invalidate(i) => self.invalidations.push(i),
        }
        Ok(None)
    }

    /// Sends `op` and waits for its reply.
    pub fn call(&mut self, authno: u32, op: RequestOp) -> Result<Answer, CallError> {
        let id = self.send(authno, op)?;
        self.wait_reply(id)
    }

    /// Logs `user` in with `key`: the authno of their later requests, or the server's refusal.
    pub fn login(
        &mut self,
        user: &str,
        key: &UserKeypair,
    ) -> Result<Result<u32, NfsStatus>, CallError> {
        let args = self.conn.login_args(user, key)?;
        match self.call(crate::login::ANONYMOUS, RequestOp::Login(args))? {
            Ok(ReplyBody::Login { authno }) => Ok(Ok(authno)),
            Ok(other) => Err(CallError::Unexpected(Box::new(other))),
            Err(status) => Ok(Err(status)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};

    use super::*;
    use crate::handshake::ServerHandshake;
    use crate::keys::ServerKeypair;
    use crate::message::{Reply, Request};
    use crate::record::RecordReader;

    /// A server thread that answers each request's id in reverse order of two, with an
    /// INVALIDATE in between: replies out of order must still reach their callers.
    #[test]
    fn replies_out_of_order_reach_their_callers_and_invalidations_are_kept() {
        let key = ServerKeypair::generate();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let name = key.server_name(format!("127.0.0.1%{}", addr.port()).parse().unwrap());
        let server = std::thread::spawn(move || {
            let (mut sock, _) = listener.accept().unwrap();
            let done = handshake::complete(ServerHandshake::new(&key), &mut sock).unwrap();
            let mut sealer = done.session.sealer;
            let mut reader = RecordReader::new(done.session.opener);
            reader.extend_from_slice(&done.rest);
            let mut ids = Vec::new();
            while ids.len() < 2 {
                match reader.next_record().unwrap() {
                    Some(p) => ids.push(Request::decode(p).unwrap().id),
                    None => {
                        let n = sock.read(reader.read_buf()).unwrap();
                        reader.advance(n);
                    }
                }
            }
            let mut wire = Vec::new();
            let messages = [
                ServerMessage::Reply(Reply {
                    id: ids[1],
                    result: Err(NfsStatus::NoEnt),
                }),
                ServerMessage::Invalidate(Invalidate {
                    fh: crate::FileHandle::from_bytes([5; crate::HANDLE_LEN]),
                    attr: None,
                }),
                ServerMessage::Reply(Reply {
                    id: ids[0],
                    result: Ok(ReplyBody::Null),
                }),
            ];
            for m in &messages {
                sealer.seal_with(&mut wire, |b| m.encode_into(b)).unwrap();
            }
            sock.write_all(&wire).unwrap();
        });
        let stream = TcpStream::connect(addr).unwrap();
        let mut client =
            BlockingClient::handshake(stream, &name, HandshakeConfig::default()).unwrap();
        let first = client.send(0, RequestOp::Null).unwrap();
        let second = client.send(0, RequestOp::Null).unwrap();
        assert_eq!(client.wait_reply(first).unwrap(), Ok(ReplyBody::Null));
        assert_eq!(client.invalidations.len(), 1);
        assert_eq!(client.wait_reply(second).unwrap(), Err(NfsStatus::NoEnt));
        server.join().unwrap();
        assert!(client.next_message().unwrap().is_none(), "end of stream");
        assert!(matches!(client.wait_reply(99), Err(CallError::Closed)));
    }
}
