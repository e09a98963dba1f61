//! Test-side harness: starts the real `sfsd` binary and talks to it with the protocol crate
//! over a blocking std `TcpStream` (timeouts everywhere, child killed on drop).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use protocol::*;

pub(crate) mod ganesha;
pub(crate) mod stack;

pub(crate) const TIMEOUT: Duration = Duration::from_secs(20);

pub(crate) struct Sfsd {
    pub child: Option<Child>,
    pub name: ServerName,
    pub addr: SocketAddr,
    pub stdout: Arc<Mutex<Vec<String>>>,
    pub dir: PathBuf,
    reader: Option<std::thread::JoinHandle<()>>,
    /// The NFS server sfsd fronts, with `SFSD_TEST_BACKEND=nfs` (see [`ganesha`]).
    pub backend: Option<ganesha::Ganesha>,
}

/// A temp area: `state/`, `export/`, `users`, `log`.
pub(crate) struct Area {
    pub tmp: tempfile::TempDir,
}

impl Area {
    pub(crate) fn new() -> Area {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("export")).unwrap();
        Area { tmp }
    }
    pub(crate) fn path(&self) -> &Path {
        self.tmp.path()
    }
    pub(crate) fn export(&self) -> PathBuf {
        self.tmp.path().join("export")
    }
    pub(crate) fn state(&self) -> PathBuf {
        self.tmp.path().join("state")
    }
    /// Writes a users file for `(name, seed, uid, gids)` and returns its path.
    pub(crate) fn users(&self, users: &[(&str, u8, u32, &str)]) -> PathBuf {
        let mut text = String::new();
        for (name, seed, uid, gids) in users {
            let k = UserKeypair::from_seed([*seed; 32]).public_key();
            text.push_str(&format!("{name} {k} {uid} {gids}\n"));
        }
        let p = self.tmp.path().join("users");
        std::fs::write(&p, text).unwrap();
        p
    }
    pub(crate) fn start(&self, extra: &[&str]) -> Sfsd {
        Sfsd::start(self.tmp.path(), extra)
    }
    /// Starts sfsd with a users file of `users` ([`Area::users`]) and the `extra` flags.
    pub(crate) fn start_for(&self, users: &[(&str, u8, u32, &str)], extra: &[&str]) -> Sfsd {
        let users = self.users(users);
        let mut args = vec!["--users", users.to_str().unwrap()];
        args.extend_from_slice(extra);
        self.start(&args)
    }
}

impl Sfsd {
    pub(crate) fn start(dir: &Path, extra: &[&str]) -> Sfsd {
        Sfsd::start_with(dir, extra, |_| {})
    }

    pub(crate) fn connect(&self) -> Client {
        Client::connect(&self.name, self.addr)
    }

    /// SIGTERM, wait (bounded); returns whether it exited 0.
    pub(crate) fn terminate(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                // Everything it printed has been collected once its stdout reaches EOF.
                if let Some(r) = self.reader.take() {
                    let _ = r.join();
                }
                return status.success();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL, as a crash: no goodbye to clients, nothing flushed.
    pub(crate) fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub(crate) fn alive(&mut self) -> bool {
        match &mut self.child {
            Some(c) => c.try_wait().unwrap().is_none(),
            None => false,
        }
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }
}

impl Drop for Sfsd {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!("--- sfsd log (last lines) ---");
            for l in tail.iter().rev() {
                eprintln!("{l}");
            }
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// sfsd's test client: protocol's blocking client over a `TcpStream` (reached through `Deref`:
/// `stream`, `conn`, `invalidations`), with panicking helpers for the tests.
pub(crate) struct Client {
    pub inner: protocol::client::blocking::BlockingClient<TcpStream>,
    /// The largest READ or WRITE this connection's records carry.
    pub max_io: u32,
}

impl std::ops::Deref for Client {
    type Target = protocol::client::blocking::BlockingClient<TcpStream>;
    fn deref(&self) -> &Self::Target {
        &self.inner
    }
}

impl std::ops::DerefMut for Client {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.inner
    }
}

impl Client {
    pub(crate) fn connect(name: &ServerName, addr: SocketAddr) -> Client {
        Client::try_connect_with(name, addr, HandshakeConfig::default(), TIMEOUT).unwrap()
    }

    pub(crate) fn send(&mut self, authno: u32, op: RequestOp) -> u64 {
        self.inner.send(authno, op).unwrap()
    }

    /// `op` sealed as this connection's next record, not sent: for tests that tamper with the
    /// bytes, replay them or send only part of them.
    pub(crate) fn seal_request(&mut self, id: u64, authno: u32, op: RequestOp) -> Vec<u8> {
        let mut wire = Vec::new();
        self.conn.requests.seal(id, authno, op, &mut wire).unwrap();
        wire
    }

    /// The next server message (None at EOF or error).
    pub(crate) fn next_message(&mut self) -> Option<ServerMessage> {
        self.inner.next_message().ok().flatten()
    }

    pub(crate) fn wait_reply(&mut self, id: u64) -> Result<ReplyBody, NfsStatus> {
        self.inner.wait_reply(id).expect("connection closed")
    }

    pub(crate) fn call(&mut self, authno: u32, op: RequestOp) -> Result<ReplyBody, NfsStatus> {
        let id = self.send(authno, op);
        self.wait_reply(id)
    }

    pub(crate) fn login(&mut self, user: &str, seed: u8) -> Result<u32, NfsStatus> {
        let key = UserKeypair::from_seed([seed; 32]);
        self.inner.login(user, &key).unwrap()
    }

    pub(crate) fn mount(&mut self, authno: u32) -> FileHandle {
        match self
            .call(
                authno,
                RequestOp::Mount {
                    path: b"/".to_vec(),
                },
            )
            .unwrap()
        {
            ReplyBody::Mount { fh, .. } => fh,
            other => panic!("unexpected {other:?}"),
        }
    }

    pub(crate) fn lookup(
        &mut self,
        a: u32,
        dir: FileHandle,
        name: &str,
    ) -> Result<FileHandle, NfsStatus> {
        match self.call(
            a,
            RequestOp::Lookup {
                dir,
                name: name.as_bytes().to_vec(),
            },
        )? {
            ReplyBody::Lookup { fh, .. } => Ok(fh),
            other => panic!("unexpected {other:?}"),
        }
    }

    pub(crate) fn getattr(&mut self, a: u32, fh: FileHandle) -> Result<Attr, NfsStatus> {
        match self.call(a, RequestOp::GetAttr { fh })? {
            ReplyBody::GetAttr { attr } => Ok(attr),
            other => panic!("unexpected {other:?}"),
        }
    }

    pub(crate) fn create(
        &mut self,
        a: u32,
        dir: FileHandle,
        name: &str,
        mode: u32,
    ) -> Result<FileHandle, NfsStatus> {
        let how = CreateHow::Guarded(SetAttr {
            mode: Some(mode),
            ..SetAttr::default()
        });
        match self.call(
            a,
            RequestOp::Create {
                dir,
                name: name.as_bytes().to_vec(),
                how,
            },
        )? {
            ReplyBody::Create(o) => Ok(o.fh.expect("CREATE returned the file's handle")),
            other => panic!("unexpected {other:?}"),
        }
    }

    pub(crate) fn mkdir(
        &mut self,
        a: u32,
        dir: FileHandle,
        name: &str,
        mode: u32,
    ) -> Result<FileHandle, NfsStatus> {
        match self.call(
            a,
            RequestOp::Mkdir {
                dir,
                name: name.as_bytes().to_vec(),
                attr: SetAttr {
                    mode: Some(mode),
                    ..SetAttr::default()
                },
            },
        )? {
            ReplyBody::Mkdir(o) => Ok(o.fh.expect("MKDIR returned the directory's handle")),
            other => panic!("unexpected {other:?}"),
        }
    }

    pub(crate) fn write(
        &mut self,
        a: u32,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
    ) -> Result<u32, NfsStatus> {
        match self.call(
            a,
            RequestOp::Write {
                fh,
                offset,
                stable: StableHow::FileSync,
                data: data.to_vec().into(),
            },
        )? {
            ReplyBody::Write { count, .. } => Ok(count),
            other => panic!("unexpected {other:?}"),
        }
    }

    pub(crate) fn read(
        &mut self,
        a: u32,
        fh: FileHandle,
        offset: u64,
        count: u32,
    ) -> Result<(Vec<u8>, bool), NfsStatus> {
        match self.call(a, RequestOp::Read { fh, offset, count })? {
            ReplyBody::Read { data, eof, .. } => Ok((data.to_vec(), eof)),
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Reads a whole file in `max_io` chunks.
    pub(crate) fn read_all(&mut self, a: u32, fh: FileHandle) -> Result<Vec<u8>, NfsStatus> {
        let mut out = Vec::new();
        loop {
            let (data, eof) = self.read(a, fh, out.len() as u64, self.max_io)?;
            out.extend_from_slice(&data);
            if eof {
                return Ok(out);
            }
            assert!(!data.is_empty(), "short read without eof");
        }
    }

    pub(crate) fn readdir_names(
        &mut self,
        a: u32,
        dir: FileHandle,
    ) -> Result<Vec<String>, NfsStatus> {
        let mut names = Vec::new();
        let mut cookie = 0;
        loop {
            match self.call(
                a,
                RequestOp::ReadDir {
                    dir,
                    cookie,
                    verifier: [0; 8],
                    count: 4096,
                },
            )? {
                ReplyBody::ReadDir(page) => {
                    for e in &page.entries {
                        names.push(String::from_utf8(e.name.clone()).unwrap());
                        cookie = e.cookie;
                    }
                    if page.eof {
                        names.sort();
                        return Ok(names);
                    }
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    /// Whether the server has closed this connection (reads EOF or an error soon).
    pub(crate) fn is_closed(&mut self) -> bool {
        self.stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut b = [0u8; 1];
        matches!(self.stream.read(&mut b), Ok(0) | Err(_))
    }
}

impl Client {
    /// The next message within `t` (None on timeout or EOF).
    pub(crate) fn next_message_timeout(&mut self, t: Duration) -> Option<ServerMessage> {
        self.stream.set_read_timeout(Some(t)).unwrap();
        let m = self.next_message();
        self.stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        m
    }
}

// ---- Additions for the attacker suite (attack.rs). The helpers above are unchanged. ----

impl Area {
    /// Like [`Area::start`], with `setup` applied to the `Command` before it is spawned (e.g. a
    /// `pre_exec` that sets resource limits or the umask of the server process).
    pub(crate) fn start_with(&self, extra: &[&str], setup: impl FnOnce(&mut Command)) -> Sfsd {
        Sfsd::start_with(self.tmp.path(), extra, setup)
    }
}

impl Sfsd {
    /// [`Sfsd::start`] with extra `Command` setup (same arguments, environment and output).
    pub(crate) fn start_with(dir: &Path, extra: &[&str], setup: impl FnOnce(&mut Command)) -> Sfsd {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("log"))
            .unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sfsd"));
        cmd.arg("serve").arg("--state").arg(dir.join("state"));
        // The same tests, in front of NFS-Ganesha exporting the same directory.
        // (Unless the test names its own backend.)
        let own_backend = extra.contains(&"--backend");
        let backend = (ganesha::enabled() && !own_backend)
            .then(|| ganesha::Ganesha::start(dir, &dir.join("export")));
        match &backend {
            Some(g) => {
                cmd.arg("--backend").arg(g.url());
            }
            None if !own_backend => {
                cmd.arg("--export").arg(dir.join("export"));
            }
            None => {}
        }
        if !extra.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        cmd.arg("--stats")
            .args(
                if extra.contains(&"--workers") || extra.contains(&"--uniprocessor") {
                    &[][..]
                } else {
                    &["--workers", "2"][..]
                },
            )
            .args(extra)
            .env("SFSD_LOG", "debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        setup(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        let out = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let lines2 = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if line.starts_with("sfsd: serving ") {
                    let _ = tx.send(line.clone());
                }
                lines2.lock().unwrap().push(line);
            }
        });
        let line = match rx.recv_timeout(TIMEOUT) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "sfsd did not start: {}",
                    std::fs::read_to_string(dir.join("log")).unwrap_or_default()
                );
            }
        };
        let mut words = line.split_whitespace().skip(2);
        let name: ServerName = words.next().unwrap().parse().unwrap();
        let addr: SocketAddr = words.nth(1).unwrap().parse().unwrap();
        Sfsd {
            child: Some(child),
            name,
            addr,
            stdout: lines,
            dir: dir.to_path_buf(),
            reader: Some(reader),
            backend,
        }
    }

    /// The server process's pid (None once terminated).
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// A field of `/proc/<pid>/status` in kB (`VmRSS`, `VmHWM`...).
    pub(crate) fn status_kb(&self, field: &str) -> u64 {
        let pid = self.pid().expect("sfsd not running");
        let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_else(|e| panic!("reading /proc/{pid}/status: {e}"));
        text.lines()
            .find_map(|l| {
                let rest = l.strip_prefix(field)?.strip_prefix(':')?;
                rest.trim().trim_end_matches("kB").trim().parse().ok()
            })
            .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
    }

    /// Resident memory of the server in bytes.
    pub(crate) fn rss(&self) -> u64 {
        self.status_kb("VmRSS") * 1024
    }

    /// Peak resident memory of the server in bytes.
    pub(crate) fn hwm(&self) -> u64 {
        self.status_kb("VmHWM") * 1024
    }

    /// A connection, or why not (the server may refuse or close it).
    pub(crate) fn try_connect(&self) -> Result<Client, String> {
        Client::try_connect_with(&self.name, self.addr, HandshakeConfig::default(), TIMEOUT)
    }

    /// [`Sfsd::try_connect`] giving up on the connect and handshake after `t`.
    pub(crate) fn try_connect_within(&self, t: Duration) -> Result<Client, String> {
        Client::try_connect_with(&self.name, self.addr, HandshakeConfig::default(), t)
    }

    /// A connection offering `config` in the handshake (e.g. a huge maximum record).
    pub(crate) fn connect_with(&self, config: HandshakeConfig) -> Client {
        Client::try_connect_with(&self.name, self.addr, config, TIMEOUT).unwrap()
    }
}

impl Client {
    /// Like [`Client::connect`] with a chosen handshake configuration and a bound `t` on the
    /// connect and each handshake read; errors instead of panics.
    pub(crate) fn try_connect_with(
        name: &ServerName,
        addr: SocketAddr,
        config: HandshakeConfig,
        t: Duration,
    ) -> Result<Client, String> {
        let e = |what: &str, err: &dyn std::fmt::Debug| format!("{what}: {err:?}");
        let stream = TcpStream::connect_timeout(&addr, t).map_err(|x| e("connect", &x))?;
        stream.set_read_timeout(Some(t)).unwrap();
        stream.set_write_timeout(Some(t)).unwrap();
        stream.set_nodelay(true).unwrap();
        let inner = protocol::client::blocking::BlockingClient::handshake(stream, name, config)
            .map_err(|x| e("handshake", &x))?;
        inner.stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        inner.stream.set_write_timeout(Some(TIMEOUT)).unwrap();
        let max_io = inner.conn.max_io();
        Ok(Client { inner, max_io })
    }

    /// Sends a request without panicking when the connection is gone.
    pub(crate) fn try_send(&mut self, authno: u32, op: RequestOp) -> Option<u64> {
        self.inner.send(authno, op).ok()
    }

    /// The reply to `id` within `t`; None on timeout or a closed connection.
    pub(crate) fn wait_reply_within(
        &mut self,
        id: u64,
        t: Duration,
    ) -> Option<Result<ReplyBody, NfsStatus>> {
        let deadline = Instant::now() + t;
        let result = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break None;
            }
            self.stream.set_read_timeout(Some(left)).unwrap();
            match self.inner.poll_reply(id) {
                Ok(Some(answer)) => break Some(answer),
                Ok(None) => {}
                Err(_) => break None,
            }
        };
        let _ = self.stream.set_read_timeout(Some(TIMEOUT));
        result
    }

    /// `call` bounded by `t`: None if no reply came in time (or the connection closed).
    pub(crate) fn call_within(
        &mut self,
        authno: u32,
        op: RequestOp,
        t: Duration,
    ) -> Option<Result<ReplyBody, NfsStatus>> {
        let id = self.try_send(authno, op)?;
        self.wait_reply_within(id, t)
    }
}

/// chown + chmod, not following a symlink (chmod after chown: chown clears setuid/setgid bits).
pub(crate) fn own(p: &Path, uid: u32, gid: u32, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::os::unix::fs::lchown(p, Some(uid), Some(gid))
        .unwrap_or_else(|e| panic!("chown {}: {e}", p.display()));
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
}

/// Sets the open-file limits the server process starts with (for [`Area::start_with`]).
pub(crate) fn with_nofile(cmd: &mut Command, soft: u64, hard: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit is async-signal-safe; the closure only touches the child's limits.
    unsafe {
        cmd.pre_exec(move || {
            let r = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// SETATTR of the size alone (truncate).
pub(crate) fn setattr_size(fh: FileHandle, size: u64) -> RequestOp {
    RequestOp::SetAttr {
        fh,
        attr: SetAttr {
            size: Some(size),
            ..SetAttr::default()
        },
        guard: None,
    }
}
