//! Helpers for end-to-end tests: the real `sfsd` and the `sfs` binary as child processes,
//! on 127.0.0.1 only, killed on drop, every wait bounded.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The `sfsd` binary, built once per test process with the cargo that runs the tests (the
/// server is another package, so `CARGO_BIN_EXE_sfsd` is not available here).
pub(crate) fn sfsd() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let out = Command::new(env!("CARGO"))
            .args([
                "build",
                "-p",
                "sfsd",
                "--message-format=json-render-diagnostics",
            ])
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
            .stderr(Stdio::inherit())
            .output()
            .expect("run cargo build -p sfsd");
        assert!(out.status.success(), "cargo build -p sfsd failed");
        let mut exe = None;
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if v["reason"] == "compiler-artifact"
                && v["target"]["name"] == "sfsd"
                && let Some(p) = v["executable"].as_str()
            {
                exe = Some(PathBuf::from(p));
            }
        }
        exe.expect("cargo did not report the sfsd executable")
    })
    .clone()
}

/// A running `sfsd`, killed on drop.
pub(crate) struct Server {
    pub child: Child,
    /// Its self-certifying name, `@127.0.0.1%PORT,HOSTID`.
    pub name: String,
    pub port: u16,
    pub state: PathBuf,
    pub export: PathBuf,
    pub extra: Vec<String>,
}

impl Server {
    /// Starts `sfsd serve` on `port` (0: any) with extra flags.
    pub(crate) fn start(state: &Path, export: &Path, port: u16, extra: &[&str]) -> Server {
        let mut child = Command::new(sfsd())
            .arg("serve")
            .arg("--state")
            .arg(state)
            .arg("--export")
            .arg(export)
            .args(["--listen", &format!("127.0.0.1:{port}"), "--workers", "2"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn sfsd");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if line.starts_with("sfsd: serving ") {
                    let _ = tx.send(line);
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let line = loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(l) => break l,
                Err(_) if Instant::now() < deadline => {
                    if let Ok(Some(status)) = child.try_wait() {
                        panic!("sfsd exited ({status}) before printing its name");
                    }
                }
                Err(_) => {
                    let _ = child.kill();
                    panic!("sfsd did not print its name within 30 s");
                }
            }
        };
        // "sfsd: serving @127.0.0.1%PORT,HOSTID on 127.0.0.1:PORT"
        let mut words = line.split_whitespace().skip(2);
        let name = words.next().expect("name").to_owned();
        let addr = words.nth(1).expect("address");
        let port = addr.rsplit(':').next().unwrap().parse().expect("port");
        Server {
            child,
            name,
            port,
            state: state.to_path_buf(),
            export: export.to_path_buf(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Kills the server (SIGKILL: no goodbye to clients).
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again on the same port with the same state.
    pub(crate) fn restart(&mut self) {
        self.kill();
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // The port may linger briefly; retry until it binds.
            let r = std::panic::catch_unwind(|| {
                Server::start(&self.state, &self.export, self.port, &extra)
            });
            match r {
                Ok(mut s) => {
                    std::mem::swap(&mut self.child, &mut s.child);
                    assert_eq!(s.name, self.name, "same name after restart");
                    std::mem::forget(s);
                    return;
                }
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(200))
                }
                Err(e) => std::panic::resume_unwind(e),
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A child killed on drop.
pub(crate) struct Guard(pub Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `sfs` command with a clean environment (no identity unless given).
pub(crate) fn sfs_cmd(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sfs"));
    c.env("HOME", home)
        .env_remove("SFS_IDENTITY")
        .env("SFS_USER", "alice")
        .stdin(Stdio::null());
    c
}

/// Runs `sfs` to completion within `limit`.
pub(crate) fn run(mut cmd: Command, limit: Duration) -> Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn sfs");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let to = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let te = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("sfs did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: to.join().unwrap(),
        stderr: te.join().unwrap(),
    }
}

/// Deterministic pseudo-random bytes.
pub(crate) fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Hex SHA-256 of a file.
pub(crate) fn sha256_file(p: &Path) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    let mut f = std::fs::File::open(p).unwrap();
    std::io::copy(&mut f, &mut h).unwrap();
    format!("{:x}", h.finalize())
}

/// `sfs keygen --out key`: the public key.
pub(crate) fn keygen(home: &Path, key: &Path) -> String {
    let mut c = sfs_cmd(home);
    c.args(["keygen", "--out"]).arg(key);
    let out = run(c, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .trim()
        .to_owned()
}

/// A mounted tree; unmounted (lazily, so it never stays) and its process killed on drop.
pub(crate) struct Mount {
    pub dir: PathBuf,
    pub pid: u32,
    pub log: PathBuf,
}

impl Mount {
    pub(crate) fn alive(&self) -> bool {
        process_alive(self.pid)
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        unmount(&self.dir, self.pid);
    }
}

/// Whether process `pid` still runs (exists and is not a zombie).
pub(crate) fn process_alive(pid: u32) -> bool {
    !std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|_| ") Z ".into())
        .contains(") Z ")
}

/// Lazily unmounts `dir` and waits up to 5 s for its mount process `pid` to end, killing it
/// after that.
pub(crate) fn unmount(dir: &Path, pid: u32) {
    let _ = Command::new("fusermount3")
        .args(["-u", "-z", "--"])
        .arg(dir)
        .output();
    let deadline = Instant::now() + Duration::from_secs(5);
    while process_alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if process_alive(pid) {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).output();
    }
}

/// The mount process's pid from what `sfs mount` prints: "sfs: mounted on DIR (process PID,
/// log FILE)".
pub(crate) fn mounted_pid(stdout: &str) -> u32 {
    stdout
        .split("(process ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {stdout:?}"))
}
