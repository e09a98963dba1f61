//! Responses against curl (the reference client), keep-alive, pipelining and the order of
//! responses on one connection with many workers.

mod common;

use std::io::{BufReader, Write};
use std::process::Command;

use common::{Web, exchange, large_body, read_response, small_body, tree};

fn curl_available() -> bool {
    Command::new("curl").arg("--version").output().is_ok()
}

/// `curl -s -D - <args> URL`: (status, headers text, body).
fn curl(args: &[&str], url: &str) -> (u16, String, Vec<u8>) {
    let out = Command::new("curl")
        .args([
            "-s",
            "-S",
            "--max-time",
            "10",
            "-D",
            "/dev/stderr",
            "-o",
            "-",
        ])
        .args(args)
        .arg(url)
        .output()
        .expect("running curl");
    let head = String::from_utf8_lossy(&out.stderr).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("curl got no status: {head}"));
    (status, head, out.stdout)
}

#[test]
fn curl_sees_correct_responses() {
    if !curl_available() {
        eprintln!("skipping: curl is not installed (apt-get install curl)");
        return;
    }
    let (root, _out) = tree(4);
    let web = Web::start(root.path(), &["--cpus", "2", "--cache-mb", "1"]);
    let (st, head, body) = curl(&[], &web.url("/f1"));
    assert_eq!((st, body), (200, small_body(1)));
    assert!(head.contains("Last-Modified: "), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("content-length: {}", small_body(1).len()))
    );
    // Served with sendfile (too large for this cache).
    let (st, _, body) = curl(&[], &web.url("/large.bin"));
    assert_eq!(st, 200);
    assert!(
        body == large_body(),
        "large.bin differs ({} bytes)",
        body.len()
    );
    // Ranges, cached and sendfile'd.
    let (st, head, body) = curl(&["-r", "10-19"], &web.url("/f2"));
    assert_eq!((st, body.as_slice()), (206, &small_body(2)[10..20]));
    assert!(
        head.contains(&format!(
            "Content-Range: bytes 10-19/{}",
            small_body(2).len()
        )),
        "{head}"
    );
    let (st, _, body) = curl(&["-r", "-100"], &web.url("/large.bin"));
    let large = large_body();
    assert_eq!((st, body.as_slice()), (206, &large[large.len() - 100..]));
    let (st, _, body) = curl(&["-r", "1000-"], &web.url("/large.bin"));
    assert_eq!((st, body.as_slice()), (206, &large[1000..]));
    let (st, head, _) = curl(&["-r", "999999-"], &web.url("/f0"));
    assert_eq!(st, 416);
    assert!(
        head.contains(&format!("Content-Range: bytes */{}", small_body(0).len())),
        "{head}"
    );
    // HEAD: the headers of a GET, no body.
    let (st, head, body) = curl(&["-I"], &web.url("/f3"));
    assert_eq!(st, 200);
    assert!(
        body.is_empty() || body.starts_with(b"HTTP/1.1"),
        "HEAD carried a body"
    );
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("content-length: {}", small_body(3).len()))
    );
    // If-Modified-Since: 304 when not newer, 200 when it is.
    let later = httpdate::fmt_http_date(
        std::time::SystemTime::now() + std::time::Duration::from_secs(3600),
    );
    let (st, _, body) = curl(
        &["-H", &format!("If-Modified-Since: {later}")],
        &web.url("/f1"),
    );
    assert_eq!((st, body.len()), (304, 0));
    let (st, _, _) = curl(
        &["-H", "If-Modified-Since: Thu, 01 Jan 1970 00:00:00 GMT"],
        &web.url("/f1"),
    );
    assert_eq!(st, 200);
    // Directory index, symlink inside the root, 404.
    let (st, _, body) = curl(&[], &web.url("/dir/"));
    assert_eq!((st, body.as_slice()), (200, &b"<p>index</p>\n"[..]));
    let (st, _, body) = curl(&[], &web.url("/inside-link"));
    assert_eq!((st, body), (200, small_body(0)));
    assert_eq!(curl(&[], &web.url("/nope")).0, 404);
    assert_eq!(
        curl(&[], &web.url("/dir")).0,
        404,
        "a directory is not a file"
    );
}

#[test]
fn keep_alive_serves_many_requests_on_one_connection_and_close_closes() {
    let (root, _out) = tree(8);
    let web = Web::start(root.path(), &["--cpus", "2"]);
    let mut s = web.connect();
    let mut r = BufReader::new(s.try_clone().unwrap());
    for round in 0..40 {
        let i = round % 8;
        write!(s, "GET /f{i} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let resp = read_response(&mut r, false).expect("response on the kept-alive connection");
        assert_eq!((resp.status, resp.body), (200, small_body(i)));
    }
    // A 404 keeps the connection; `Connection: close` ends it after the response.
    write!(s, "GET /missing HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut r, false).unwrap().status, 404);
    write!(
        s,
        "GET /f1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let resp = read_response(&mut r, false).unwrap();
    assert_eq!(resp.header("connection"), Some("close"));
    assert!(common::closed_by_server(&mut r));
    // HTTP/1.0 without keep-alive closes too.
    let (resp, mut r) = exchange(&web, b"GET /f2 HTTP/1.0\r\n\r\n");
    assert_eq!((resp.status, resp.body), (200, small_body(2)));
    assert!(common::closed_by_server(&mut r));
}

/// Many requests written at once, for files spread over the cache's shards (most miss a
/// 1 MiB cache, so their answers come back from different shard colors, on four workers, in
/// any order), a large file and a 404 among them: the answers must come back in request
/// order. Without the per-connection ordering of answers (or with a connection's callbacks
/// overlapping) the bodies come back shuffled.
#[test]
fn pipelined_responses_come_back_in_request_order_with_many_workers() {
    let n = 200;
    let (root, _out) = tree(n);
    let web = Web::start(
        root.path(),
        &["--cpus", "4", "--cache-mb", "1", "--max-pipelined", "16"],
    );
    let large = large_body();
    for round in 0..3 {
        let s = web.connect();
        let mut order = Vec::new();
        let mut burst = Vec::new();
        for k in 0..150 {
            let i = (k * 37 + round * 11) % n;
            let target = match k % 50 {
                7 => "/large.bin".to_string(),
                13 => "/missing".to_string(),
                _ => format!("/f{i}"),
            };
            burst.extend_from_slice(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
            order.push((target, i));
        }
        // One write: the server sees them pipelined (more than its input buffer holds, so
        // it also has to stop and resume reading).
        let writer = {
            let mut s2 = s.try_clone().unwrap();
            std::thread::spawn(move || s2.write_all(&burst).unwrap())
        };
        let mut r = BufReader::new(s.try_clone().unwrap());
        for (k, (target, i)) in order.iter().enumerate() {
            let resp = read_response(&mut r, false)
                .unwrap_or_else(|| panic!("round {round}: no response {k} ({target})"));
            match target.as_str() {
                "/large.bin" => assert!(
                    resp.status == 200 && resp.body == large,
                    "response {k}: not large.bin"
                ),
                "/missing" => assert_eq!(resp.status, 404, "response {k}"),
                _ => assert!(
                    resp.status == 200 && resp.body == small_body(*i),
                    "round {round}: response {k} is not {target}'s (status {}, {} bytes)",
                    resp.status,
                    resp.body.len()
                ),
            }
        }
        writer.join().unwrap();
        s.shutdown(std::net::Shutdown::Both).unwrap();
    }
}

/// Several connections pipelining at once on four workers: each gets its own answers, in
/// its own order.
#[test]
fn concurrent_pipelining_connections_each_get_their_own_answers() {
    let n = 64;
    let (root, _out) = tree(n);
    let web = Web::start(root.path(), &["--cpus", "4", "--cache-mb", "1"]);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let s = web.connect();
            std::thread::spawn(move || {
                let mut s = s;
                let ids: Vec<usize> = (0..60).map(|k| (k * 13 + t * 5) % n).collect();
                let mut burst = String::new();
                for i in &ids {
                    burst.push_str(&format!("GET /f{i} HTTP/1.1\r\nHost: x\r\n\r\n"));
                }
                s.write_all(burst.as_bytes()).unwrap();
                let mut r = BufReader::new(s);
                for (k, i) in ids.iter().enumerate() {
                    let resp = read_response(&mut r, false).expect("response");
                    assert!(
                        resp.body == small_body(*i),
                        "conn {t} response {k} is not f{i}'s"
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
