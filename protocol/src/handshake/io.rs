//! The blocking driver: runs a [`Handshake`] to its end over a `Read + Write` stream.
//!
//! For tools and tests that use blocking sockets (sfsd's test client, the benchmark's load
//! clients); the client's async driver and sfsd's event loop follow the same steps.

use std::io::{self, Read, Write};

use super::{Handshake, Session};
use crate::error::HandshakeError;

/// A finished handshake: the session, and what the peer sent after its last handshake byte (the
/// start of the record stream, usually empty: feed it to the `RecordReader` first).
#[derive(Debug)]
pub struct Completed {
    /// The established session.
    pub session: Session,
    /// Bytes received past the handshake.
    pub rest: Vec<u8>,
}

/// Why a driven handshake did not finish.
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    /// Reading or writing the stream failed (a read timeout set on the socket ends up here).
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The peer closed the connection before the handshake ended.
    #[error("the peer closed the connection during the handshake")]
    Closed,
    /// The handshake itself failed (a wrong key, a version refusal, ...).
    #[error(transparent)]
    Handshake(#[from] HandshakeError),
}

/// Runs `hs` over `stream` until the session is established: sends its output, reads the
/// peer's bytes and feeds them, in the order the protocol needs. On a handshake error the
/// machine's last output (a server's version refusal) is still sent, best effort.
pub fn complete<S, T: Read + Write>(
    mut hs: Handshake<S>,
    stream: &mut T,
) -> Result<Completed, DriveError> {
    let mut buf = [0u8; 4096];
    let mut rest = Vec::new();
    loop {
        if hs.has_output() {
            stream.write_all(&hs.take_output())?;
        }
        if !hs.wants_input() {
            break;
        }
        let n = match stream.read(&mut buf) {
            Ok(0) => return Err(DriveError::Closed),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        match hs.receive(&buf[..n]) {
            Ok(used) => rest.extend_from_slice(&buf[used..n]),
            Err(e) => {
                if hs.has_output() {
                    let _ = stream.write_all(&hs.take_output());
                }
                return Err(e.into());
            }
        }
    }
    stream.flush()?;
    let session = hs.into_session()?;
    Ok(Completed { session, rest })
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use super::*;
    use crate::handshake::{ClientHandshake, ServerHandshake};
    use crate::keys::ServerKeypair;
    use crate::name::Location;

    /// One end of an in-memory connection: reads what the peer wrote before, records writes.
    struct Scripted {
        input: Cursor<Vec<u8>>,
        written: Vec<u8>,
    }

    impl Read for Scripted {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.input.read(buf)
        }
    }

    impl Write for Scripted {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.written.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_version_refusal_reaches_the_client() {
        let kp = ServerKeypair::generate();
        let name = kp.server_name(Location::new("localhost", 4004).unwrap());
        let (mut a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let server = std::thread::spawn(move || complete(ServerHandshake::new(&kp), &mut b));
        let config = crate::handshake::HandshakeConfig {
            versions: vec![70],
            ..Default::default()
        };
        let err = complete(ClientHandshake::with_config(&name, config), &mut a).unwrap_err();
        let refused = HandshakeError::VersionRefused {
            client: vec![70],
            server: crate::handshake::versions_here(),
        };
        // The client learns why (the refusal was sent although the server's side failed).
        assert!(
            matches!(&err, DriveError::Handshake(e) if *e == refused),
            "{err:?}"
        );
        let server_err = server.join().unwrap().unwrap_err();
        assert!(matches!(&server_err, DriveError::Handshake(e) if *e == refused));
    }

    #[test]
    fn a_peer_that_closes_early_is_reported_as_closed() {
        let kp = ServerKeypair::generate();
        let name = kp.server_name(Location::new("localhost", 4004).unwrap());
        let mut stream = Scripted {
            input: Cursor::new(Vec::new()),
            written: Vec::new(),
        };
        let err = complete(ClientHandshake::new(&name), &mut stream).unwrap_err();
        assert!(matches!(err, DriveError::Closed), "{err:?}");
    }

    #[test]
    fn both_sides_complete_over_a_socket_pair() {
        let kp = ServerKeypair::generate();
        let name = kp.server_name(Location::new("localhost", 4004).unwrap());
        let (mut a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let server = std::thread::spawn(move || {
            let done = complete(ServerHandshake::new(&kp), &mut b).unwrap();
            // A record right after the handshake: the client must find it in `rest`.
            let mut sealer = done.session.sealer;
            b.write_all(&sealer.seal(b"first record").unwrap()).unwrap();
            done.session.session_id
        });
        let done = complete(ClientHandshake::new(&name), &mut a).unwrap();
        let server_id = server.join().unwrap();
        assert_eq!(done.session.session_id, server_id);
        let mut reader = crate::record::RecordReader::new(done.session.opener);
        reader.extend_from_slice(&done.rest);
        let record = loop {
            if let Some(r) = reader.next_record().unwrap() {
                break r.to_vec();
            }
            let n = a.read(reader.read_buf()).unwrap();
            assert!(n > 0, "the record arrives");
            reader.advance(n);
        };
        assert_eq!(record, b"first record");
    }
}
