//! Locks between two FUSE mounts of one server, each with its own identity (issue 26): what
//! one mount's programs lock, the other's see, through `fcntl`, `flock` and F_GETLK, as
//! programs on one machine do; a holder that dies or a mount that vanishes lets go (the
//! latter only after the server's grace, here the 3-second lease); a blocked F_SETLKW ends
//! with EINTR on a signal; and two SQLite writers on two mounts keep one database whole.
//! Locks are driven by small Python programs (`fcntl.lockf`, `fcntl.flock`, `fcntl.fcntl`).
//! Skipped where FUSE or python3 is missing. Every process and mount is removed by a guard
//! and every wait is bounded.

mod common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const LIMIT: Duration = Duration::from_secs(60);
/// The server's lease, and so the grace a vanished mount's locks outlive it by.
const LEASE_SECS: u64 = 3;

fn no_fuse() -> Option<&'static str> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing");
    }
    if Command::new("fusermount3")
        .arg("--version")
        .output()
        .is_err()
    {
        return Some("fusermount3 is missing");
    }
    if Command::new("python3").arg("--version").output().is_err() {
        return Some("python3 is missing");
    }
    None
}

macro_rules! need_fuse {
    () => {
        if let Some(why) = no_fuse() {
            eprintln!("SKIPPED: {why}; locks not tested");
            return;
        }
    };
}

/// The lock driver: `python3 DRIVER MODE PATH`. Holders print `locked` and keep their locks
/// until stdin closes; the others print one word of outcome.
const DRIVER: &str = r#"
import errno, fcntl, os, signal, struct, sys, time
mode, path = sys.argv[1], sys.argv[2]
def hold():
    print("locked", flush=True)
    sys.stdin.read()
def outcome(f):
    try:
        f()
        print("granted", flush=True)
    except OSError as e:
        print(errno.errorcode.get(e.errno, str(e.errno)), flush=True)
if mode == "hold-ex":
    f = open(path, "r+"); fcntl.lockf(f, fcntl.LOCK_EX, 10, 0); hold()
elif mode == "hold-sh":
    f = open(path, "r"); fcntl.fcntl(f, fcntl.F_SETLK, struct.pack("hhqqi4x", fcntl.F_RDLCK, 0, 0, 10, 0)); hold()
elif mode == "hold-flock":
    f = open(path, "r"); fcntl.flock(f, fcntl.LOCK_EX); hold()
elif mode == "try-ex":
    f = open(path, "r+"); outcome(lambda: fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 5))
elif mode == "try-sh":
    f = open(path, "r"); outcome(lambda: fcntl.fcntl(f, fcntl.F_SETLK, struct.pack("hhqqi4x", fcntl.F_RDLCK, 0, 5, 1, 0)))
elif mode == "try-after":
    f = open(path, "r+"); outcome(lambda: fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 0, 10))
elif mode == "try-flock":
    f = open(path, "r"); outcome(lambda: fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB))
elif mode == "getlk":
    f = open(path, "r+")
    r = fcntl.fcntl(f, fcntl.F_GETLK, struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 0, 0, 0))
    t, w, s, l, p = struct.unpack("hhqqi4x", r)
    print("type=%s start=%d len=%d pid=%d" % ({fcntl.F_RDLCK: "rd", fcntl.F_WRLCK: "wr", fcntl.F_UNLCK: "un"}[t], s, l, p), flush=True)
elif mode == "wait-ex":
    f = open(path, "r+"); print("waiting", flush=True); fcntl.lockf(f, fcntl.LOCK_EX, 1, 5); print("granted", flush=True)
elif mode == "wait-flock":
    f = open(path, "r"); print("waiting", flush=True); fcntl.flock(f, fcntl.LOCK_EX); print("granted", flush=True)
elif mode == "alarm":
    class Alarm(Exception): pass
    def on_alarm(s, fr): raise Alarm()
    signal.signal(signal.SIGALRM, on_alarm)
    f = open(path, "r+"); t = time.time(); signal.alarm(1)
    try:
        fcntl.lockf(f, fcntl.LOCK_EX, 1, 5); print("granted", flush=True)
    except Alarm:
        print("interrupted after %.1f" % (time.time() - t), flush=True)
elif mode == "ofd":
    F_OFD_SETLK = 37
    f = open(path, "r+"); fcntl.fcntl(f, F_OFD_SETLK, struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 0, 0, 0)); hold()
elif mode == "measure":
    f = open(path, "r+"); t = time.time()
    for i in range(1000):
        fcntl.lockf(f, fcntl.LOCK_EX, 1, 0); fcntl.lockf(f, fcntl.LOCK_UN, 1, 0)
    print("%.1f" % ((time.time() - t) * 1e6 / 1000), flush=True)
elif mode == "sqlite":
    import sqlite3
    who, n = sys.argv[3], int(sys.argv[4])
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    db.execute("PRAGMA journal_mode=DELETE")
    for i in range(n):
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO t(who, i, pad) VALUES (?, ?, ?)", (who, i, os.urandom(300).hex()))
        db.execute("COMMIT")
    print("done", flush=True)
"#;

/// A server with two users, alice and bob, both the owner of the export, and two mounts.
struct Two {
    _dir: tempfile::TempDir,
    /// The server's tree in mount B.
    b_root: PathBuf,
    export: PathBuf,
    driver: PathBuf,
    _server: Server,
    a: Mount,
    b: Mount,
}

/// `sfs mount WHAT` as `user` (its key in `identity`) on `DIR/name`.
fn mount(dir: &Path, home: &Path, what: &str, user: &str, identity: &Path, name: &str) -> Mount {
    let mnt = dir.join(name);
    fs::create_dir_all(&mnt).unwrap();
    let mnt = mnt.canonicalize().unwrap();
    let log = dir.join(format!("{name}.log"));
    let mut c = sfs_cmd(home);
    c.env("SFS_USER", user)
        .arg("--identity")
        .arg(identity)
        .args(["-vv", "--timeout", "5", "mount", what])
        .arg(&mnt)
        .arg("--log")
        .arg(&log);
    let out = run(c, LIMIT);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "mount failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid = mounted_pid(&stdout);
    Mount { dir: mnt, pid, log }
}

fn two() -> Two {
    setup(false)
}

/// Two mounts; with `namespace`, B is a `--namespace` mount reaching the server by its name.
fn setup(namespace: bool) -> Two {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let export = dir.path().join("export");
    fs::create_dir_all(&home).unwrap();
    fs::create_dir_all(&export).unwrap();
    let m = fs::metadata(dir.path()).unwrap();
    let (alice, bob) = (dir.path().join("alice.key"), dir.path().join("bob.key"));
    let lines = format!(
        "alice {} {uid} {gid}\nbob {} {uid} {gid}\n",
        keygen(&home, &alice),
        keygen(&home, &bob),
        uid = m.uid(),
        gid = m.gid()
    );
    let users = dir.path().join("users");
    fs::write(&users, lines).unwrap();
    let lease = LEASE_SECS.to_string();
    let server = Server::start(
        &dir.path().join("state"),
        &export,
        0,
        &["--users", users.to_str().unwrap(), "--lease-secs", &lease],
    );
    let a = mount(dir.path(), &home, &server.name, "alice", &alice, "a");
    let b = if namespace {
        mount(dir.path(), &home, "--namespace", "bob", &bob, "b")
    } else {
        mount(dir.path(), &home, &server.name, "bob", &bob, "b")
    };
    let b_root = if namespace {
        b.dir.join(&server.name)
    } else {
        b.dir.clone()
    };
    let driver = dir.path().join("driver.py");
    fs::write(&driver, DRIVER).unwrap();
    Two {
        b_root,
        export,
        driver,
        _server: server,
        a,
        b,
        _dir: dir,
    }
}

/// A running driver; killed on drop.
struct Proc {
    child: Guard,
    out: BufReader<ChildStdout>,
}

impl Proc {
    /// Its next line of output, within `limit`.
    fn line(&mut self, limit: Duration) -> String {
        let pid = self.child.0.id();
        // A watchdog: kills the driver if it says nothing in time, so read_line returns.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let watchdog = std::thread::spawn(move || {
            if rx.recv_timeout(limit).is_err() {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).output();
            }
        });
        let mut l = String::new();
        let _ = self.out.read_line(&mut l);
        let _ = tx.send(());
        let _ = watchdog.join();
        l.trim().to_owned()
    }

    /// Closes its stdin (a holder lets go by exiting) and waits for it.
    fn finish(mut self) {
        drop(self.child.0.stdin.take());
        let _ = self.child.0.wait();
    }

    fn pid(&self) -> u32 {
        self.child.0.id()
    }
}

impl Two {
    fn start(&self, mode: &str, path: &Path, extra: &[&str]) -> Proc {
        let mut child: Child = Command::new("python3")
            .arg(&self.driver)
            .arg(mode)
            .arg(path)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Proc {
            child: Guard(child),
            out,
        }
    }

    /// Runs a one-shot driver mode and returns its line.
    fn once(&self, mode: &str, path: &Path) -> String {
        let mut p = self.start(mode, path, &[]);
        let l = p.line(Duration::from_secs(20));
        p.finish();
        l
    }

    fn logs(&self) -> String {
        format!(
            "mount a:\n{}\nmount b:\n{}",
            fs::read_to_string(&self.a.log).unwrap_or_default(),
            fs::read_to_string(&self.b.log).unwrap_or_default()
        )
    }
}

fn file(t: &Two, name: &str) -> (PathBuf, PathBuf) {
    fs::write(t.export.join(name), vec![0u8; 100]).unwrap();
    (t.a.dir.join(name), t.b_root.join(name))
}

#[test]
fn two_mounts_share_fcntl_and_flock_locks() {
    need_fuse!();
    let t = two();
    let (fa, fb) = file(&t, "db");

    // A write lock on bytes 0..10 through A: B's F_SETLK on byte 5 is EAGAIN, F_GETLK shows it
    // (with no pid from another machine), and bytes past it are free.
    let mut holder = t.start("hold-ex", &fa, &[]);
    assert_eq!(holder.line(LIMIT), "locked", "{}", t.logs());
    assert_eq!(t.once("try-ex", &fb), "EAGAIN", "{}", t.logs());
    assert_eq!(t.once("try-sh", &fb), "EAGAIN");
    assert_eq!(t.once("getlk", &fb), "type=wr start=0 len=10 pid=0");
    assert_eq!(t.once("try-after", &fb), "granted");
    // flock and fcntl locks do not meet (as on Linux).
    assert_eq!(t.once("try-flock", &fb), "granted");

    // A blocked F_SETLKW through B is granted once A lets go.
    let mut waiter = t.start("wait-ex", &fb, &[]);
    assert_eq!(waiter.line(LIMIT), "waiting");
    std::thread::sleep(Duration::from_millis(700));
    holder.finish();
    let granted = Instant::now();
    assert_eq!(waiter.line(Duration::from_secs(10)), "granted");
    assert!(granted.elapsed() < Duration::from_secs(2));
    waiter.finish();
    assert_eq!(t.once("getlk", &fb), "type=un start=0 len=0 pid=0");

    // Read locks are shared; a writer waits for them.
    let mut reader = t.start("hold-sh", &fa, &[]);
    assert_eq!(reader.line(LIMIT), "locked");
    assert_eq!(t.once("try-sh", &fb), "granted");
    assert_eq!(t.once("try-ex", &fb), "EAGAIN");
    reader.finish();
    assert_eq!(t.once("try-ex", &fb), "granted");

    // flock: exclusive between mounts, a blocked one granted on release.
    let mut holder = t.start("hold-flock", &fa, &[]);
    assert_eq!(holder.line(LIMIT), "locked");
    assert_eq!(t.once("try-flock", &fb), "EAGAIN");
    assert_eq!(t.once("try-ex", &fb), "granted");
    let mut waiter = t.start("wait-flock", &fb, &[]);
    assert_eq!(waiter.line(LIMIT), "waiting");
    std::thread::sleep(Duration::from_millis(500));
    holder.finish();
    assert_eq!(waiter.line(Duration::from_secs(10)), "granted");
    waiter.finish();

    // OFD locks (owned by the open file) conflict with B's POSIX locks and end with the file.
    let mut ofd = t.start("ofd", &fa, &[]);
    assert_eq!(ofd.line(LIMIT), "locked");
    assert_eq!(t.once("try-ex", &fb), "EAGAIN");
    ofd.finish();
    assert_eq!(t.once("try-ex", &fb), "granted");
}

#[test]
fn locks_go_with_a_killed_holder_and_after_the_grace_with_a_dead_mount() {
    need_fuse!();
    let t = two();
    let (fa, fb) = file(&t, "f");

    // kill -9 of the holder: its exit closes the file, and the lock goes at once.
    let mut holder = t.start("hold-ex", &fa, &[]);
    assert_eq!(holder.line(LIMIT), "locked");
    assert_eq!(t.once("try-ex", &fb), "EAGAIN");
    let _ = Command::new("kill")
        .args(["-9", &holder.pid().to_string()])
        .output();
    let _ = holder.child.0.wait();
    assert_eq!(t.once("try-ex", &fb), "granted", "{}", t.logs());

    // The mount dies with the lock held: it stays for the grace (the lease), then goes.
    let mut holder = t.start("hold-ex", &fa, &[]);
    assert_eq!(holder.line(LIMIT), "locked");
    let _ = Command::new("kill")
        .args(["-9", &t.a.pid.to_string()])
        .output();
    let killed = Instant::now();
    assert_eq!(
        t.once("try-ex", &fb),
        "EAGAIN",
        "right after the mount died"
    );
    let mut waiter = t.start("wait-ex", &fb, &[]);
    assert_eq!(waiter.line(LIMIT), "waiting");
    assert_eq!(waiter.line(Duration::from_secs(15)), "granted");
    let waited = killed.elapsed();
    assert!(
        waited >= Duration::from_secs(LEASE_SECS) - Duration::from_millis(500)
            && waited < Duration::from_secs(LEASE_SECS + 5),
        "granted {waited:?} after the mount died (grace {LEASE_SECS} s)"
    );
    waiter.finish();
    let _ = Command::new("kill")
        .args(["-9", &holder.pid().to_string()])
        .output();
    let _ = holder.child.0.wait();
}

#[test]
fn an_interrupted_lock_wait_ends_with_eintr() {
    need_fuse!();
    let t = two();
    let (fa, fb) = file(&t, "f");
    let mut holder = t.start("hold-ex", &fa, &[]);
    assert_eq!(holder.line(LIMIT), "locked");
    let mut waiter = t.start("alarm", &fb, &[]);
    let l = waiter.line(Duration::from_secs(10));
    let after: f64 = l
        .strip_prefix("interrupted after ")
        .unwrap_or_else(|| panic!("{l:?}"))
        .parse()
        .unwrap();
    assert!((0.9..2.5).contains(&after), "{l}");
    waiter.finish();
    holder.finish();
    // The interrupted request left nothing behind.
    assert_eq!(t.once("try-ex", &fb), "granted");
}

/// A `--namespace` mount serves locks too (its file system forwards them to the server's).
#[test]
fn a_namespace_mount_shares_locks_with_a_plain_one() {
    need_fuse!();
    let t = setup(true);
    let (fa, fb) = file(&t, "f");
    let mut holder = t.start("hold-ex", &fa, &[]);
    assert_eq!(holder.line(LIMIT), "locked");
    assert_eq!(t.once("try-ex", &fb), "EAGAIN", "{}", t.logs());
    assert_eq!(t.once("getlk", &fb), "type=wr start=0 len=10 pid=0");
    holder.finish();
    let mut holder = t.start("hold-flock", &fb, &[]);
    assert_eq!(holder.line(LIMIT), "locked");
    assert_eq!(t.once("try-flock", &fa), "EAGAIN");
    holder.finish();
    assert_eq!(t.once("try-flock", &fa), "granted");
    assert_eq!(t.once("try-ex", &fb), "granted");
}

/// Two SQLite writers (rollback journal, which locks with fcntl) on two mounts of one
/// database: every row arrives and the database stays whole. Without shared locks both
/// write at once and the database is corrupt or rows are lost.
#[test]
fn two_sqlite_writers_on_two_mounts_keep_the_database_whole() {
    need_fuse!();
    let t = two();
    let db = t.export.join("t.db");
    let out = Command::new("python3")
        .args([
            "-c",
            "import sqlite3,sys; d=sqlite3.connect(sys.argv[1]); \
             d.execute('CREATE TABLE t(who TEXT, i INT, pad TEXT)'); d.commit()",
        ])
        .arg(&db)
        .output()
        .unwrap();
    assert!(out.status.success());
    const N: usize = 150;
    let n = N.to_string();
    let mut wa = t.start("sqlite", &t.a.dir.join("t.db"), &["a", &n]);
    let mut wb = t.start("sqlite", &t.b_root.join("t.db"), &["b", &n]);
    assert_eq!(wa.line(LIMIT), "done", "{}", t.logs());
    assert_eq!(wb.line(LIMIT), "done", "{}", t.logs());
    wa.finish();
    wb.finish();
    let out = Command::new("python3")
        .args([
            "-c",
            "import sqlite3,sys; d=sqlite3.connect(sys.argv[1]); \
             print(d.execute('PRAGMA integrity_check').fetchone()[0], \
             d.execute('SELECT COUNT(*) FROM t').fetchone()[0])",
        ])
        .arg(&db)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("ok {}", 2 * N),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The cost of an uncontended lock and unlock through the mount (printed, not checked).
#[test]
fn measure_uncontended_lock_round_trip() {
    need_fuse!();
    let t = two();
    let (fa, _) = file(&t, "m");
    let mut p = t.start("measure", &fa, &[]);
    let us = p.line(LIMIT);
    p.finish();
    eprintln!("MEASURE lock+unlock through the mount: {us} us per pair (1000 pairs)");
}
