//! Changes cut off by a broken connection, as a user meets them: `sfs rm`, `sfs mv` and
//! `sfs mkdir` whose reply is lost on the way back (the server did the change) reconnect, send
//! the change again and get the server's answer from its reply cache: the command succeeds
//! and the change is done once. Before the reply cache they failed "not retried" (and a retry
//! without it would fail with "no such file" or "exists").
//!
//! A proxy between `sfs` and `sfsd` counts the server's records (it cannot read them: they are
//! sealed) and, when told, swallows one and cuts the connection. A dry run of the same command
//! tells which record is the change's reply: the last one.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;

const LIMIT: Duration = Duration::from_secs(120);

#[derive(Default)]
struct Cut {
    /// Records the server sent, all connections together, since the last reset.
    server_records: usize,
    /// Swallow the record with this index (0-based) and cut its connection.
    at: Option<usize>,
    /// Connections accepted.
    connections: usize,
}

/// A TCP proxy to `upstream` (set once the server listens) that can cut a connection at one
/// server record.
struct Proxy {
    port: u16,
    upstream: Arc<AtomicU16>,
    cut: Arc<Mutex<Cut>>,
}

impl Proxy {
    fn start() -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(Mutex::new(Cut::default()));
        let upstream = Arc::new(AtomicU16::new(0));
        let (c, up) = (cut.clone(), upstream.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let to = ("127.0.0.1", up.load(Ordering::SeqCst));
                let Ok(server) = TcpStream::connect(to) else {
                    continue;
                };
                c.lock().unwrap().connections += 1;
                let (c2s_from, c2s_to) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || pass(c2s_from, c2s_to));
                let cut = c.clone();
                std::thread::spawn(move || pass_records(server, client, &cut));
            }
        });
        Proxy {
            port,
            upstream,
            cut,
        }
    }

    fn reset(&self, at: Option<usize>) {
        let mut c = self.cut.lock().unwrap();
        *c = Cut {
            at,
            ..Cut::default()
        };
    }

    fn counts(&self) -> (usize, usize) {
        let c = self.cut.lock().unwrap();
        (c.server_records, c.connections)
    }
}

/// Client to server, as it comes.
fn pass(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 64 * 1024];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// Server to client: two handshake frames (`u16be` length), then records (`u32be` length,
/// payload, 16-byte tag), counted, one of them possibly swallowed with the connection cut.
fn pass_records(mut from: TcpStream, mut to: TcpStream, cut: &Mutex<Cut>) {
    let mut exact = |n: usize| -> Option<Vec<u8>> {
        let mut b = vec![0; n];
        from.read_exact(&mut b).ok().map(|_| b)
    };
    for _ in 0..2 {
        let Some(len) = exact(2) else { return };
        let Some(body) = exact(u16::from_be_bytes([len[0], len[1]]) as usize) else {
            return;
        };
        if to.write_all(&len).is_err() || to.write_all(&body).is_err() {
            return;
        }
    }
    while let Some(len) = exact(4) {
        let n = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let Some(body) = exact(n + 16) else { break };
        let swallow = {
            let mut c = cut.lock().unwrap();
            let i = c.server_records;
            c.server_records += 1;
            c.at == Some(i)
        };
        if swallow {
            let _ = to.shutdown(Shutdown::Both);
            return;
        }
        if to.write_all(&len).is_err() || to.write_all(&body).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

struct Setup {
    _dir: tempfile::TempDir,
    home: std::path::PathBuf,
    export: std::path::PathBuf,
    identity: std::path::PathBuf,
    _server: Server,
    proxy: Proxy,
    /// The server's name with the proxy's port.
    name: String,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let export = dir.path().join("export");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&export).unwrap();
    let identity = dir.path().join("alice.key");
    let mut c = sfs_cmd(&home);
    c.args(["keygen", "--out"]).arg(&identity);
    let out = run(c, LIMIT);
    assert!(out.status.success());
    let public = String::from_utf8(out.stdout).unwrap();
    let public = public.lines().last().unwrap().trim().to_owned();
    let (uid, gid) = owner(dir.path());
    let users = dir.path().join("users");
    std::fs::write(&users, format!("alice {public} {uid} {gid}\n")).unwrap();
    // The server's name has the proxy's location: clients reach it through the proxy.
    let proxy = Proxy::start();
    let location = format!("127.0.0.1%{}", proxy.port);
    let server = Server::start(
        &dir.path().join("state"),
        &export,
        0,
        &["--users", users.to_str().unwrap(), "--location", &location],
    );
    proxy.upstream.store(server.port, Ordering::SeqCst);
    let name = server.name.clone();
    Setup {
        _dir: dir,
        home,
        export,
        identity,
        _server: server,
        proxy,
        name,
    }
}

fn owner(p: &Path) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).unwrap();
    (m.uid(), m.gid())
}

impl Setup {
    fn sfs(&self, args: &[String]) -> std::process::Output {
        let mut c = sfs_cmd(&self.home);
        c.arg("--identity").arg(&self.identity).args(args);
        run(c, LIMIT)
    }

    /// Runs `command(i)` once to count the server's records, then `command(i + 1)` with the
    /// last of them (the change's reply) swallowed and the connection cut: its output, and
    /// how many connections it made.
    fn cut_at_last_reply(
        &self,
        command: impl Fn(usize) -> Vec<String>,
        i: usize,
    ) -> (std::process::Output, usize) {
        self.proxy.reset(None);
        let dry = self.sfs(&command(i));
        assert!(
            dry.status.success(),
            "{}",
            String::from_utf8_lossy(&dry.stderr)
        );
        let (records, connections) = self.proxy.counts();
        assert_eq!(connections, 1);
        self.proxy.reset(Some(records - 1));
        let out = self.sfs(&command(i + 1));
        let (_, connections) = self.proxy.counts();
        (out, connections)
    }
}

fn assert_ok(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn rm_mv_and_mkdir_whose_reply_is_lost_succeed_and_are_done_once() {
    let s = setup();
    for i in 0..4 {
        std::fs::write(s.export.join(format!("f{i}")), format!("file {i}")).unwrap();
    }
    let name = s.name.clone();

    let (out, connections) = s.cut_at_last_reply(|i| vec!["rm".into(), format!("{name}/f{i}")], 0);
    assert_ok(&out);
    assert_eq!(connections, 2, "the command reconnected");
    assert!(!s.export.join("f1").exists());
    assert!(s.export.join("f2").exists());

    let (out, connections) = s.cut_at_last_reply(
        |i| {
            vec![
                "mv".into(),
                format!("{name}/f{i}"),
                format!("{name}/moved{i}"),
            ]
        },
        2,
    );
    assert_ok(&out);
    assert_eq!(connections, 2);
    assert_eq!(
        std::fs::read_to_string(s.export.join("moved3")).unwrap(),
        "file 3"
    );
    assert!(!s.export.join("f3").exists());

    let (out, connections) =
        s.cut_at_last_reply(|i| vec!["mkdir".into(), format!("{name}/d{i}")], 0);
    assert_ok(&out);
    assert_eq!(connections, 2);
    assert!(s.export.join("d1").is_dir());
}
