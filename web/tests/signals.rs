//! SIGTERM and SIGINT stop colorweb cleanly, with exit status 0 (not death by the signal,
//! 143/130), in both runtime flavours, with connections open in every state: idle
//! keep-alive, half a request, a pipelined burst being answered, and a client hammering.

mod common;

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Web, exchange, tree};

fn stops_cleanly(flags: &[&str], signal: &str) {
    let (root, _outside) = tree(20);
    let mut web = Web::start(root.path(), flags);
    // An idle keep-alive connection that was served once.
    let (first, _idle) = exchange(&web, b"GET /f1 HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(first.status, 200);
    // Half a request.
    let mut half = web.connect();
    half.write_all(b"GET /f2 HTTP/1.1\r\nHo").unwrap();
    // A pipelined burst nobody reads.
    let mut burst = web.connect();
    burst
        .write_all(&b"GET /f3 HTTP/1.1\r\nHost: t\r\n\r\n".repeat(30))
        .unwrap();
    // A client that keeps asking until the server goes away.
    let stop = Arc::new(AtomicBool::new(false));
    let hammer = {
        let (addr, stop) = (web.addr, stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut s) = std::net::TcpStream::connect(addr) else {
                    break;
                };
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                let _ = s.write_all(b"GET /f4 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
                let _ = std::io::Read::read_to_end(&mut s, &mut Vec::new());
            }
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    web.signal(signal);
    let status = web.wait_exit(Duration::from_secs(10));
    stop.store(true, Ordering::Relaxed);
    hammer.join().unwrap();
    let status =
        status.unwrap_or_else(|| panic!("colorweb {flags:?} still runs 10 s after {signal}"));
    assert!(
        status.success(),
        "colorweb {flags:?} on SIG{signal}: {status} (want exit status 0)"
    );
}

#[test]
fn sigterm_stops_the_multiprocessor_server_with_status_0() {
    stops_cleanly(&["--cpus", "2"], "TERM");
}

#[test]
fn sigterm_stops_the_uniprocessor_server_with_status_0() {
    stops_cleanly(&["--uni"], "TERM");
}

#[test]
fn sigint_stops_the_server_with_status_0() {
    stops_cleanly(&["--cpus", "3"], "INT");
}
