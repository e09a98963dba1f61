//! Hostile requests: each gets its error status (and `Connection: close`), no path or symlink
//! leaves the root, slow or abandoned requests are bounded by the header timeout and the
//! connection limit, and the server survives all of it. Plus the parser's fuzz entry point as
//! a proptest.

mod common;

use std::io::{BufReader, Read, Write};
use std::time::{Duration, Instant};

use common::{Web, closed_by_server, exchange, read_response, small_body, tree};
use proptest::prelude::*;

/// Sends `req` on its own connection; returns the status after checking that an error
/// response says `Connection: close` and the server then closes.
fn status_of(web: &Web, req: &[u8]) -> u16 {
    let (resp, mut r) = exchange(web, req);
    if resp.status >= 400 && resp.status != 404 && resp.status != 416 {
        assert_eq!(
            resp.header("connection"),
            Some("close"),
            "status {}",
            resp.status
        );
        assert!(
            closed_by_server(&mut r),
            "connection left open after {}",
            resp.status
        );
    }
    resp.status
}

#[test]
fn malformed_and_refused_requests_get_their_status() {
    let (root, _out) = tree(2);
    let mut web = Web::start(root.path(), &["--cpus", "2"]);
    let mut huge = b"GET /f0 HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 9000));
    huge.extend_from_slice(b"\r\n\r\n");
    let mut many = String::from("GET /f0 HTTP/1.1\r\nHost: x\r\n");
    for i in 0..100 {
        many.push_str(&format!("X-{i}: y\r\n"));
    }
    many.push_str("\r\n");
    let cases: Vec<(&[u8], u16)> = vec![
        (&huge, 431),
        (many.as_bytes(), 431),
        (
            b"POST /f0 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
            405,
        ),
        (b"DELETE /f0 HTTP/1.1\r\nHost: x\r\n\r\n", 405),
        (b"G@T /f0 HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET /f0 HTTP/1.1\r\n\r\n", 400),
        (b"GET /f0 HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400),
        (b"GET /f0 HTTP/9.9\r\nHost: x\r\n\r\n", 400),
        (b"\x00\x01\x02\x03\r\n\r\n", 400),
        (
            b"GET /f0 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
            413,
        ),
        (
            b"GET /f0 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            413,
        ),
        (
            b"GET /f0 HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
            400,
        ),
        // Paths out of the root.
        (b"GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (
            b"GET /dir/../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
            400,
        ),
        (
            b"GET /%2e%2e/%2e%2e/etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
            400,
        ),
        (
            b"GET /..%2f..%2fetc%2fpasswd HTTP/1.1\r\nHost: x\r\n\r\n",
            400,
        ),
        (b"GET /f0%00.txt HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET /%ff HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET * HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET http://x/etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        // Symlinks out of the root are not found (the kernel refuses the resolution).
        (b"GET /out-link HTTP/1.1\r\nHost: x\r\n\r\n", 404),
        (b"GET /out-dir/secret HTTP/1.1\r\nHost: x\r\n\r\n", 404),
        // Ranges: unsatisfiable is 416; malformed or multiple ranges are ignored (200).
        (
            b"GET /f0 HTTP/1.1\r\nHost: x\r\nRange: bytes=5000-6000\r\n\r\n",
            416,
        ),
        (
            b"GET /f0 HTTP/1.1\r\nHost: x\r\nRange: bytes=-0\r\n\r\n",
            416,
        ),
        (
            b"GET /f0 HTTP/1.1\r\nHost: x\r\nRange: bytes=9-1\r\n\r\n",
            200,
        ),
        (
            b"GET /f0 HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1,5-6\r\n\r\n",
            200,
        ),
        (
            b"GET /f0 HTTP/1.1\r\nHost: x\r\nRange: bytes=99999999999999999999999-\r\n\r\n",
            200,
        ),
        (
            b"GET /f0 HTTP/1.1\r\nHost: x\r\nRange: lines=1-2\r\n\r\n",
            200,
        ),
        (
            b"GET /f0 HTTP/1.1\r\nHost: x\r\nIf-Modified-Since: yesterday\r\n\r\n",
            200,
        ),
    ];
    for (req, want) in cases {
        let got = status_of(&web, req);
        assert_eq!(
            got,
            want,
            "for {:?}",
            String::from_utf8_lossy(&req[..req.len().min(60)])
        );
    }
    assert!(web.alive(), "colorweb exited");
    // And it still serves.
    let (resp, _) = exchange(&web, b"GET /f1 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(resp.body, small_body(1));
}

/// An error in the middle of a pipelined burst: the answers before it arrive, then the error,
/// then the connection closes (nothing after the bad request is answered).
#[test]
fn an_error_ends_a_pipelined_burst_after_the_earlier_answers() {
    let (root, _out) = tree(3);
    let web = Web::start(root.path(), &["--cpus", "2"]);
    let mut s = web.connect();
    s.write_all(
        b"GET /f0 HTTP/1.1\r\nHost: x\r\n\r\nGET /f1 HTTP/1.1\r\nHost: x\r\n\r\n\
          BREW /pot HTTP/1.1\r\nHost: x\r\n\r\nGET /f2 HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .unwrap();
    let mut r = BufReader::new(s);
    assert_eq!(read_response(&mut r, false).unwrap().body, small_body(0));
    assert_eq!(read_response(&mut r, false).unwrap().body, small_body(1));
    let err = read_response(&mut r, false).unwrap();
    assert_eq!((err.status, err.header("allow")), (405, Some("GET, HEAD")));
    assert!(closed_by_server(&mut r), "answered past the error");
}

/// Slowloris: connections that send a request a byte at a time, or half a request and
/// nothing more, are closed after the header timeout, and the connection limit caps how many
/// such connections exist at once; meanwhile a normal client is served.
#[test]
fn slow_and_abandoned_requests_are_bounded() {
    let (root, _out) = tree(2);
    let web = Web::start(
        root.path(),
        &[
            "--cpus",
            "2",
            "--header-timeout",
            "0.5",
            "--max-connections",
            "4",
        ],
    );
    // Three connections sit on half a request (one trickling bytes).
    let mut idle: Vec<_> = (0..3)
        .map(|_| {
            let mut s = web.connect();
            s.write_all(b"GET /f0 HTTP/1.1\r\nHo").unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    // The limit: a fifth connection is closed at once (the fourth place is free).
    let mut fourth = web.connect();
    let mut fifth = web.connect();
    fifth
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    assert!(
        closed_by_server(&mut fifth),
        "a connection past the limit was kept"
    );
    fourth
        .write_all(b"GET /f1 HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut r4 = BufReader::new(fourth);
    assert_eq!(read_response(&mut r4, false).unwrap().body, small_body(1));
    drop(r4);
    // Trickle one byte every 200 ms: still over the timeout for the whole request.
    let t0 = Instant::now();
    for _ in 0..5 {
        if idle[0].write_all(b"s").is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    for (k, s) in idle.iter_mut().enumerate() {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).unwrap_or(0);
        assert_eq!(n, 0, "slow connection {k} was answered instead of closed");
    }
    assert!(
        t0.elapsed() < Duration::from_secs(6),
        "closing took {:?}",
        t0.elapsed()
    );
    // Places freed: new clients are served.
    std::thread::sleep(Duration::from_millis(100));
    let (resp, _) = exchange(&web, b"GET /f0 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(resp.body, small_body(0));
}

/// A client that pipelines requests and never reads: the server stops reading it once its
/// output and pipeline bounds are reached (TCP flow control then blocks the client), and
/// other clients are still served.
#[test]
fn a_client_that_never_reads_is_bounded_and_others_are_served() {
    let (root, _out) = tree(2);
    let web = Web::start(root.path(), &["--cpus", "2", "--idle-timeout", "30"]);
    let mut s = web.connect();
    s.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    let req = b"GET /large.bin HTTP/1.1\r\nHost: x\r\n\r\n".repeat(64);
    let mut sent = 0usize;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(3) {
        match s.write(&req) {
            Ok(n) => sent += n,
            Err(_) => break,
        }
        if sent > 64 << 20 {
            break;
        }
    }
    assert!(
        sent < 64 << 20,
        "the server kept reading requests it could not answer ({sent} bytes)"
    );
    let (resp, _) = exchange(&web, b"GET /f0 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(resp.body, small_body(0));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn the_parser_survives_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        colorweb::fuzzing::parse_request(&data);
    }

    #[test]
    fn the_parser_survives_near_valid_requests(
        method in prop::sample::select(vec!["GET", "HEAD", "POST", "get", "G\u{0}T"]),
        path in "(/[a-z.%0-9]{0,6}){0,4}/?",
        range in prop::option::of("bytes=[0-9]{0,4}-[0-9]{0,4}(,[0-9]-[0-9])?"),
        ims in prop::option::of("[A-Za-z0-9 ,:]{0,30}"),
        conn in prop::option::of(prop::sample::select(vec!["close", "keep-alive", "x, close"])),
        cut in 0usize..200,
    ) {
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: h\r\n");
        if let Some(r) = range { req.push_str(&format!("Range: {r}\r\n")); }
        if let Some(d) = ims { req.push_str(&format!("If-Modified-Since: {d}\r\n")); }
        if let Some(c) = conn { req.push_str(&format!("Connection: {c}\r\n")); }
        req.push_str("\r\n");
        let bytes = req.as_bytes();
        colorweb::fuzzing::parse_request(bytes);
        colorweb::fuzzing::parse_request(&bytes[..cut.min(bytes.len())]);
    }
}
