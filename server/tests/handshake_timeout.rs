//! A peer that connects and never completes the handshake is dropped after the handshake
//! timeout (here shortened with the hidden `--handshake-timeout-secs`), and the server keeps
//! serving others meanwhile and afterwards.

mod common;

use std::io::Read;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::*;
use protocol::*;

#[test]
fn silent_peer_is_closed_after_handshake_timeout() {
    let area = Area::new();
    let s = area.start(&["--handshake-timeout-secs", "1"]);
    let started = Instant::now();
    let mut idle = TcpStream::connect_timeout(&s.addr, TIMEOUT).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();

    // Another client completes its handshake and is served while the idle one waits.
    let mut c = s.connect();
    assert_eq!(c.call(0, RequestOp::Null), Ok(ReplyBody::Null));

    // Send nothing; the server may send its side of the handshake, then must close.
    let mut buf = [0u8; 4096];
    loop {
        match idle.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("idle connection not closed by the server: {e}"),
        }
    }
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900),
        "closed too early ({waited:?})"
    );
    assert!(
        waited < Duration::from_secs(6),
        "closed too late ({waited:?})"
    );

    // The established client is unaffected, and new clients are still served.
    assert_eq!(c.call(0, RequestOp::Null), Ok(ReplyBody::Null));
    let mut c2 = s.connect();
    assert_eq!(c2.call(0, RequestOp::Null), Ok(ReplyBody::Null));
    assert!(s.log().contains("handshake timeout"));
}
