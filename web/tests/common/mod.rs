//! A colorweb process on 127.0.0.1 for the integration tests, and a tiny HTTP/1.1 response
//! reader (the tests need to see exactly what the server sent, byte for byte).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub(crate) struct Web {
    child: Child,
    pub addr: SocketAddr,
}

impl Web {
    /// Starts colorweb serving `root` with extra flags; waits for its "listening" line.
    pub(crate) fn start(root: &Path, extra: &[&str]) -> Web {
        let mut child = Command::new(env!("CARGO_BIN_EXE_colorweb"))
            .arg("--root")
            .arg(root)
            .args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting colorweb");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("reading colorweb's first line");
        let addr = line
            .trim()
            .strip_prefix("colorweb listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .unwrap();
        Web { child, addr }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub(crate) fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }

    /// Sends `signal` (a name `kill` knows: TERM, INT) to the server process.
    pub(crate) fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("running kill")
            .success();
        assert!(ok, "kill -{signal} failed");
    }

    /// Waits up to `limit` for the process to exit; its status, or None if it still runs.
    pub(crate) fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if std::time::Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether the process is still running (it must never exit on hostile input).
    pub(crate) fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Web {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One response as it came off the wire.
#[derive(Debug)]
pub(crate) struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one response; `head_only` for HEAD (no body follows whatever Content-Length says).
pub(crate) fn read_response(r: &mut impl BufRead, head_only: bool) -> Option<Response> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let status: u16 = line.split_whitespace().nth(1)?.parse().ok()?;
    assert!(line.starts_with("HTTP/1.1 "), "status line {line:?}");
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end_matches(['\r', '\n']);
        if h.is_empty() {
            break;
        }
        let (n, v) = h.split_once(':').expect("header line");
        headers.push((n.to_string(), v.trim().to_string()));
    }
    let mut resp = Response {
        status,
        headers,
        body: Vec::new(),
    };
    if !head_only && status != 304 {
        let len: usize = resp
            .header("content-length")
            .expect("content-length")
            .parse()
            .unwrap();
        resp.body = vec![0; len];
        r.read_exact(&mut resp.body).ok()?;
    }
    Some(resp)
}

/// Sends `request` on a new connection and reads one response.
pub(crate) fn exchange(web: &Web, request: &[u8]) -> (Response, BufReader<TcpStream>) {
    let mut s = web.connect();
    s.write_all(request).unwrap();
    let head = request.starts_with(b"HEAD");
    let mut r = BufReader::new(s);
    let resp = read_response(&mut r, head).expect("a response");
    (resp, r)
}

/// True if the server closes the connection (EOF or reset) within the read timeout.
pub(crate) fn closed_by_server(r: &mut impl Read) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        match r.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return false;
            }
            Err(_) => return true,
        }
    }
}

/// A root with small distinct files `f0..fN`, a file too large for a small cache, a
/// directory with an index, and symlinks inside and out.
pub(crate) fn tree(n: usize) -> (tempfile::TempDir, tempfile::TempDir) {
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "secret").unwrap();
    for i in 0..n {
        std::fs::write(root.path().join(format!("f{i}")), small_body(i)).unwrap();
    }
    std::fs::write(root.path().join("large.bin"), large_body()).unwrap();
    std::fs::create_dir(root.path().join("dir")).unwrap();
    std::fs::write(root.path().join("dir/index.html"), "<p>index</p>\n").unwrap();
    std::os::unix::fs::symlink("f0", root.path().join("inside-link")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), root.path().join("out-link"))
        .unwrap();
    std::os::unix::fs::symlink(outside.path(), root.path().join("out-dir")).unwrap();
    (root, outside)
}

/// File i's content: its own size (100..3100 bytes) and bytes.
pub(crate) fn small_body(i: usize) -> Vec<u8> {
    let len = 100 + (i * 997) % 3000;
    (0..len).map(|j| (i * 31 + j * 7) as u8).collect()
}

/// 600 KiB: above the cache's largest entry with `--cache-mb 1`, so it is sent with sendfile.
pub(crate) fn large_body() -> Vec<u8> {
    (0..600 * 1024).map(|j: usize| (j % 251) as u8).collect()
}
