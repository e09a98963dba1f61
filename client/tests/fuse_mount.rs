//! The FUSE mount for real: `sfs mount` against a real `sfsd`, checked with `std::fs` and
//! ordinary programs through the kernel. Skipped (with a message) only where `/dev/fuse` or
//! `fusermount3` is missing. Every mount is removed by a guard (`fusermount3 -u -z`) and every
//! wait is bounded.

mod common;

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

const LIMIT: Duration = Duration::from_secs(120);

/// Why FUSE cannot be tested here, if it cannot.
fn no_fuse() -> Option<&'static str> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing");
    }
    let found = Command::new("fusermount3")
        .arg("--version")
        .output()
        .is_ok();
    if !found {
        return Some("fusermount3 is missing (apt-get install fuse3)");
    }
    None
}

macro_rules! need_fuse {
    () => {
        if let Some(why) = no_fuse() {
            eprintln!("SKIPPED: {why}; FUSE mount not tested");
            return;
        }
    };
}

struct Setup {
    dir: tempfile::TempDir,
    home: PathBuf,
    export: PathBuf,
    identity: PathBuf,
    server: Server,
}

/// A server exporting a fresh directory, with `alice` (the owner of the temp dir) as a user.
fn setup() -> Setup {
    setup_users(&[])
}

/// [`setup`] plus users `(name, uid)` (uid = gid) with keys in `DIR/idents/UID`.
fn setup_users(extra: &[(&str, u32)]) -> Setup {
    setup_owned(None, extra)
}

/// [`setup_users`], with `alice` (the mounting identity) mapped to uid = gid `alice` on the
/// server instead of the owner of the temporary directory.
fn setup_owned(alice: Option<u32>, extra: &[(&str, u32)]) -> Setup {
    let extra: Vec<(&str, u32, String)> = extra
        .iter()
        .map(|(name, uid)| (*name, *uid, uid.to_string()))
        .collect();
    setup_grouped(alice, &extra)
}

/// [`setup_owned`] with users `(name, uid, gids)`: `gids` as the users file writes them.
fn setup_grouped(alice: Option<u32>, extra: &[(&str, u32, String)]) -> Setup {
    setup_serving(alice, extra, &[])
}

/// [`setup_grouped`] with extra `sfsd serve` flags.
fn setup_serving(alice: Option<u32>, extra: &[(&str, u32, String)], flags: &[&str]) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let export = dir.path().join("export");
    let state = dir.path().join("state");
    fs::create_dir_all(&home).unwrap();
    fs::create_dir_all(&export).unwrap();
    let identity = dir.path().join("alice.key");
    let public = keygen(&home, &identity);
    let m = fs::metadata(dir.path()).unwrap();
    let users = dir.path().join("users");
    let (uid, gid) = alice.map_or((m.uid(), m.gid()), |a| (a, a));
    let mut lines = format!("alice {public} {uid} {gid}\n");
    fs::create_dir_all(dir.path().join("idents")).unwrap();
    for (name, uid, gids) in extra {
        let public = keygen(&home, &dir.path().join("idents").join(uid.to_string()));
        lines.push_str(&format!("{name} {public} {uid} {gids}\n"));
    }
    fs::write(&users, lines).unwrap();
    let mut args = vec!["--users", users.to_str().unwrap()];
    args.extend_from_slice(flags);
    let server = Server::start(&state, &export, 0, &args);
    Setup {
        dir,
        home,
        export,
        identity,
        server,
    }
}

/// Whether `dir` is a mount point of type fuse.sfs.
fn is_sfs_mount(dir: &Path) -> bool {
    let want = dir.to_string_lossy().replace(' ', "\\040");
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(&want) && l.contains(" - fuse.sfs "))
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Setup {
    /// `sfs mount NAME DIR` (background) on a fresh directory named `name`.
    fn mount(&self, name: &str) -> Mount {
        self.mount_with(name, &[])
    }

    /// [`Setup::mount`] with extra `sfs mount` flags.
    fn mount_with(&self, name: &str, flags: &[&str]) -> Mount {
        self.mount_args(name, &[&self.server.name], flags)
    }

    /// `sfs mount --namespace DIR` on a fresh directory named `name`.
    fn mount_namespace(&self, name: &str, flags: &[&str]) -> Mount {
        self.mount_args(name, &["--namespace"], flags)
    }

    /// `sfs mount ARGS DIR --log LOG FLAGS`.
    fn mount_args(&self, name: &str, args: &[&str], flags: &[&str]) -> Mount {
        let log = self.dir.path().join(format!("{name}.log"));
        self.mount_logging_to(name, args, flags, log)
    }

    /// [`Setup::mount_args`] logging to `log`.
    fn mount_logging_to(&self, name: &str, args: &[&str], flags: &[&str], log: PathBuf) -> Mount {
        let dir = self.dir.path().join(name);
        fs::create_dir_all(&dir).unwrap();
        let dir = dir.canonicalize().unwrap();
        let mut c = sfs_cmd(&self.home);
        c.arg("--identity")
            .arg(&self.identity)
            .args(["-vv", "--timeout", "5", "mount"])
            .args(args)
            .arg(&dir)
            .arg("--log")
            .arg(&log)
            .args(flags);
        let out = run(c, LIMIT);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            // At most 64 KiB of it: the log may be a device that never ends (`/dev/full`).
            let mut text = Vec::new();
            if let Ok(f) = fs::File::open(&log) {
                let _ =
                    std::io::Read::read_to_end(&mut std::io::Read::take(f, 64 * 1024), &mut text);
            }
            panic!(
                "mount failed: {}{}\nlog:\n{}",
                stdout,
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&text)
            );
        }
        let pid = mounted_pid(&stdout);
        assert!(is_sfs_mount(&dir), "not in mountinfo after sfs mount");
        Mount { dir, pid, log }
    }
}

fn errno(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(-1)
}

#[test]
fn files_and_directories_through_the_kernel() {
    need_fuse!();
    let s = setup();
    let m = s.mount("mnt");
    let d = &m.dir;

    // create / write / read
    fs::write(d.join("a.txt"), b"hello over sfs\n").unwrap();
    assert_eq!(fs::read(d.join("a.txt")).unwrap(), b"hello over sfs\n");
    assert_eq!(
        fs::read(s.export.join("a.txt")).unwrap(),
        b"hello over sfs\n"
    );
    // A file made on the server side shows up (at once, or once sfsd's watch of its disk
    // has ended the root's listing the mount keeps: within milliseconds).
    fs::write(s.export.join("server-made"), b"x").unwrap();
    soon("a file made on the server side", true, || {
        d.join("server-made").exists()
    });
    assert_eq!(fs::read(d.join("server-made")).unwrap(), b"x");

    // ordinary programs: cat, ls, wc
    let out = Command::new("cat").arg(d.join("a.txt")).output().unwrap();
    assert_eq!(out.stdout, b"hello over sfs\n");
    let out = Command::new("ls").arg("-la").arg(d).output().unwrap();
    let ls = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && ls.contains("a.txt"), "{ls}");

    // mkdir / rmdir (not empty, then empty)
    fs::create_dir(d.join("sub")).unwrap();
    fs::write(d.join("sub/f"), b"1").unwrap();
    let e = fs::remove_dir(d.join("sub")).unwrap_err();
    assert_eq!(errno(&e), libc::ENOTEMPTY, "{e}");
    assert!(fs::metadata(d.join("sub")).unwrap().is_dir());
    let mut names: Vec<String> = fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["a.txt", "server-made", "sub"]);

    // rename, and rename over an existing file
    fs::rename(d.join("sub/f"), d.join("moved")).unwrap();
    fs::remove_dir(d.join("sub")).unwrap();
    assert!(!d.join("sub").exists());
    let ino = fs::metadata(d.join("a.txt")).unwrap().ino();
    fs::rename(d.join("a.txt"), d.join("moved")).unwrap();
    assert_eq!(fs::read(d.join("moved")).unwrap(), b"hello over sfs\n");
    assert_eq!(fs::metadata(d.join("moved")).unwrap().ino(), ino);
    assert_eq!(
        errno(&fs::metadata(d.join("a.txt")).unwrap_err()),
        libc::ENOENT
    );

    // hard links
    fs::hard_link(d.join("moved"), d.join("link")).unwrap();
    let (a, b) = (
        fs::metadata(d.join("moved")).unwrap(),
        fs::metadata(d.join("link")).unwrap(),
    );
    assert_eq!(a.ino(), b.ino());
    assert_eq!(a.nlink(), 2);
    fs::write(d.join("link"), b"through the link").unwrap();
    assert_eq!(fs::read(d.join("moved")).unwrap(), b"through the link");
    fs::remove_file(d.join("moved")).unwrap();
    assert_eq!(fs::metadata(d.join("link")).unwrap().nlink(), 1);
    assert_eq!(fs::read(d.join("link")).unwrap(), b"through the link");

    // symlinks
    std::os::unix::fs::symlink("link", d.join("sym")).unwrap();
    assert_eq!(fs::read_link(d.join("sym")).unwrap(), Path::new("link"));
    assert_eq!(fs::read(d.join("sym")).unwrap(), b"through the link");
    assert!(
        fs::symlink_metadata(d.join("sym"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        fs::read_link(s.export.join("sym")).unwrap(),
        Path::new("link"),
        "a real symlink on the server"
    );

    // chmod, and ctime moving with it
    let before = fs::metadata(d.join("link")).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    fs::set_permissions(d.join("link"), fs::Permissions::from_mode(0o640)).unwrap();
    let after = fs::metadata(d.join("link")).unwrap();
    assert_eq!(after.mode() & 0o7777, 0o640);
    assert_eq!(
        fs::metadata(s.export.join("link")).unwrap().mode() & 0o7777,
        0o640
    );
    assert!(
        (after.ctime(), after.ctime_nsec()) > (before.ctime(), before.ctime_nsec()),
        "ctime moves on chmod"
    );

    // O_EXCL
    let e = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(d.join("link"))
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(d.join("fresh"))
        .unwrap();
    assert_eq!(fs::metadata(d.join("fresh")).unwrap().mode() & 0o777, 0o600);

    // truncate shorter and longer (zeros)
    let f = fs::OpenOptions::new()
        .write(true)
        .open(d.join("link"))
        .unwrap();
    f.set_len(7).unwrap();
    assert_eq!(fs::read(d.join("link")).unwrap(), b"through");
    f.set_len(10).unwrap();
    assert_eq!(fs::read(d.join("link")).unwrap(), b"through\0\0\0");
    drop(f);
    // O_TRUNC
    fs::write(d.join("link"), b"new").unwrap();
    assert_eq!(fs::read(s.export.join("link")).unwrap(), b"new");

    // unlink: the file has one link and its attributes are cached, so the unlink may be
    // answered at once and its REMOVE reach the server just behind (fuse/removes_behind.rs).
    fs::remove_file(d.join("link")).unwrap();
    fs::remove_file(d.join("sym")).unwrap();
    assert!(!d.join("link").exists());
    soon("link on the server's disk", false, || {
        s.export.join("link").exists()
    });

    // statfs answers
    let out = Command::new("df").arg(d).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // `sfs umount` ends the mount and the background process.
    let mut c = sfs_cmd(&s.home);
    c.arg("umount").arg(d);
    let out = run(c, LIMIT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!is_sfs_mount(d));
    wait_for("the mount process to exit", Duration::from_secs(10), || {
        !m.alive()
    });
}

#[test]
fn posix_details_sparse_large_offsets_times_open_unlinked() {
    need_fuse!();
    let s = setup();
    let m = s.mount("mnt");
    let d = &m.dir;

    // Sparse: a write far out leaves a hole of zeros; few blocks used.
    {
        let mut f = fs::File::create(d.join("sparse")).unwrap();
        f.seek(SeekFrom::Start(10 << 20)).unwrap();
        f.write_all(b"end").unwrap();
    }
    let md = fs::metadata(d.join("sparse")).unwrap();
    assert_eq!(md.len(), (10 << 20) + 3);
    assert!(
        md.blocks() * 512 < 1 << 20,
        "hole allocated: {} blocks",
        md.blocks()
    );
    let mut f = fs::File::open(d.join("sparse")).unwrap();
    f.seek(SeekFrom::Start(5 << 20)).unwrap();
    let mut buf = vec![1u8; 4096];
    f.read_exact(&mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));

    // Offsets past 4 GiB.
    let big = (5u64 << 30) + 123;
    {
        let f = fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(d.join("big"))
            .unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(b"beyond 4 GiB", big).unwrap();
        f.sync_all().unwrap();
    }
    assert_eq!(fs::metadata(d.join("big")).unwrap().len(), big + 12);
    assert_eq!(fs::metadata(s.export.join("big")).unwrap().len(), big + 12);
    {
        use std::os::unix::fs::FileExt;
        let f = fs::File::open(d.join("big")).unwrap();
        let mut b = [0u8; 12];
        f.read_exact_at(&mut b, big).unwrap();
        assert_eq!(&b, b"beyond 4 GiB");
    }
    fs::remove_file(d.join("big")).unwrap();

    // mtime: set to the past, then a write moves it to now; utimes to a chosen time sticks.
    let p = d.join("times");
    fs::write(&p, b"1").unwrap();
    let past = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    fs::File::options()
        .write(true)
        .open(&p)
        .unwrap()
        .set_modified(past)
        .unwrap();
    assert_eq!(fs::metadata(&p).unwrap().mtime(), 1_000_000_000);
    assert_eq!(
        fs::metadata(s.export.join("times")).unwrap().mtime(),
        1_000_000_000
    );
    let ctime0 = fs::metadata(&p).unwrap().ctime();
    fs::OpenOptions::new()
        .append(true)
        .open(&p)
        .unwrap()
        .write_all(b"2")
        .unwrap();
    let md = fs::metadata(&p).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(
        (now - md.mtime()).abs() < 60,
        "mtime {} now {now}",
        md.mtime()
    );
    assert!(md.ctime() >= ctime0);
    assert_eq!(fs::read(&p).unwrap(), b"12", "O_APPEND appends");

    // Unlink of an open file: the open descriptor keeps working, the name is gone.
    let p = d.join("open-unlinked");
    fs::write(&p, b"still readable").unwrap();
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&p)
        .unwrap();
    fs::remove_file(&p).unwrap();
    assert_eq!(errno(&fs::metadata(&p).unwrap_err()), libc::ENOENT);
    // isatty(3) on a mount file: ENOTTY, as for a local file, and nothing logged.
    {
        use std::os::fd::AsRawFd;
        // SAFETY: isatty only reads the descriptor number, which `f` keeps open.
        assert_eq!(unsafe { libc::isatty(f.as_raw_fd()) }, 0);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::ENOTTY)
        );
    }
    // No hidden name: the server keeps the file for the mount (an open state).
    assert_eq!(
        f.metadata().unwrap().nlink(),
        0,
        "fstat of an unlinked file"
    );
    assert!(
        !fs::read_dir(&s.export).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with(".sfs-unlinked")),
        "a hidden name in the export"
    );
    let mut got = String::new();
    f.read_to_string(&mut got).unwrap();
    assert_eq!(got, "still readable");
    f.write_all(b" and writable").unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    got.clear();
    f.read_to_string(&mut got).unwrap();
    assert_eq!(got, "still readable and writable");
    drop(f);
    let log = m.log();
    assert!(!log.contains("ioctl"), "ioctl logged:\n{log}");
}

/// MKNOD and RENAME2 end to end: FIFOs and sockets made by ordinary programs exist on the
/// server (data through a FIFO flows in the local kernel, never to the server); a device node
/// is made only if the server's kernel lets the mapped user; `renameat2(RENAME_NOREPLACE)`
/// refuses an existing target.
#[test]
fn special_files_and_noreplace_rename() {
    use std::os::unix::fs::FileTypeExt;
    need_fuse!();
    let s = setup();
    let m = s.mount("mnt");
    let d = &m.dir;

    let out = Command::new("mkfifo")
        .args(["-m", "0640"])
        .arg(d.join("pipe"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = fs::symlink_metadata(d.join("pipe")).unwrap();
    assert!(md.file_type().is_fifo());
    assert_eq!(md.mode() & 0o7777, 0o640);
    assert!(
        fs::symlink_metadata(s.export.join("pipe"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
    let pipe = d.join("pipe");
    let writer = std::thread::spawn(move || fs::write(pipe, b"through the local kernel"));
    assert_eq!(
        fs::read(d.join("pipe")).unwrap(),
        b"through the local kernel"
    );
    writer.join().unwrap().unwrap();

    let _listener = std::os::unix::net::UnixListener::bind(d.join("sock")).unwrap();
    assert!(
        fs::symlink_metadata(s.export.join("sock"))
            .unwrap()
            .file_type()
            .is_socket()
    );

    // A device node as the user the server maps us to (alice: the owner of the temp dir).
    let server_uid = fs::metadata(s.dir.path()).unwrap().uid();
    let local_root = fs::metadata("/proc/self").unwrap().uid() == 0;
    let out = Command::new("mknod")
        .arg(d.join("null"))
        .args(["c", "1", "300"])
        .output()
        .unwrap();
    if server_uid == 0 && local_root {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let md = fs::symlink_metadata(d.join("null")).unwrap();
        assert!(md.file_type().is_char_device());
        // Through the kernel's device encoding both ways (minor above 255).
        assert_eq!(md.rdev(), rustix::fs::makedev(1, 300));
        let on_server = fs::symlink_metadata(s.export.join("null")).unwrap();
        assert_eq!(on_server.rdev(), rustix::fs::makedev(1, 300));
    } else {
        assert!(!out.status.success(), "a device node as an ordinary user");
        assert!(!s.export.join("null").exists());
    }

    // renameat2(RENAME_NOREPLACE): one atomic refusal on the server.
    fs::write(d.join("a"), b"a").unwrap();
    fs::write(d.join("b"), b"b").unwrap();
    let r = rustix::fs::renameat_with(
        rustix::fs::CWD,
        d.join("a"),
        rustix::fs::CWD,
        d.join("b"),
        rustix::fs::RenameFlags::NOREPLACE,
    );
    assert_eq!(r, Err(rustix::io::Errno::EXIST));
    assert_eq!(fs::read(s.export.join("b")).unwrap(), b"b");
    rustix::fs::renameat_with(
        rustix::fs::CWD,
        d.join("a"),
        rustix::fs::CWD,
        d.join("c"),
        rustix::fs::RenameFlags::NOREPLACE,
    )
    .unwrap();
    assert!(!d.join("a").exists());
    assert_eq!(fs::read(d.join("c")).unwrap(), b"a");
}

#[test]
fn copy_64_mib_in_and_out() {
    need_fuse!();
    let s = setup();
    let m = s.mount("mnt");
    let src = s.dir.path().join("src.bin");
    fs::write(&src, data(64 << 20, 7)).unwrap();
    let want = sha256_file(&src);
    let t = Instant::now();
    let out = Command::new("cp")
        .arg(&src)
        .arg(m.dir.join("big.bin"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let up = t.elapsed();
    assert_eq!(
        sha256_file(&s.export.join("big.bin")),
        want,
        "on the server"
    );
    let back = s.dir.path().join("back.bin");
    let t = Instant::now();
    let out = Command::new("cp")
        .arg(m.dir.join("big.bin"))
        .arg(&back)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let down = t.elapsed();
    assert_eq!(sha256_file(&back), want, "copied back out");
    let mbs = |d: Duration| 64.0 / d.as_secs_f64();
    eprintln!(
        "64 MiB through the FUSE mount: in {:.2} s ({:.0} MiB/s), out {:.2} s ({:.0} MiB/s)",
        up.as_secs_f64(),
        mbs(up),
        down.as_secs_f64(),
        mbs(down)
    );
}

/// Retries `f` for up to 3 s (an INVALIDATE crosses the server and a second connection);
/// the lease is 60 s, so only the invalidation can make it pass this soon.
fn soon<T: PartialEq + std::fmt::Debug>(what: &str, want: T, mut f: impl FnMut() -> T) {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let got = f();
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still {got:?}, want {want:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `stat` of many names in a directory not listed yet (git status `lstat`s its index's paths
/// before it lists anything) reads the directory whole at the second lookup in it, and the
/// rest are answered from that listing: names it holds with their attributes, names it lacks
/// with `ENOENT`. A file changed since (another client's write) shows its new size.
#[test]
fn lookups_in_a_directory_are_answered_from_one_listing_of_it() {
    need_fuse!();
    let s = setup();
    dir_of_files(&s.export.join("d"), 30, 2);
    let m = s.mount("mnt");
    let other = s.mount("other");
    let d = m.dir.join("d");
    fs::metadata(&d).unwrap();
    let before = requests(&m, "Lookup") + requests(&m, "ListDir");
    for i in 0..30 {
        assert_eq!(fs::metadata(d.join(format!("f{i:02}"))).unwrap().len(), 1);
    }
    for i in 0..10 {
        assert!(!d.join(format!("absent{i}")).exists());
    }
    let asked = requests(&m, "Lookup") + requests(&m, "ListDir") - before;
    assert!(
        asked <= 3,
        "30 names and 10 absent ones asked the server {asked} times"
    );

    fs::write(other.dir.join("d/f07"), b"longer now").unwrap();
    soon("f07's new size", 10, || {
        fs::metadata(d.join("f07")).map(|m| m.len()).unwrap_or(0)
    });
    assert_eq!(fs::read(d.join("f07")).unwrap(), b"longer now");
}

/// A directory its user may list but not search (mode 0744, another owner) lists its names,
/// as on a local disk: with the server's inode numbers and no type (`DT_UNKNOWN`), and
/// without a lookup per name. Lookups in it are the server's refusals, however many pile up:
/// a listing read for them has names but no attributes, and answers nothing (an absent name
/// is `EACCES`, not `ENOENT`). In one it may search but not list (0711) the listing cannot be
/// read, and lookups go to the server: names there are found, absent ones are `ENOENT`.
#[test]
fn lookups_where_the_user_may_not_both_list_and_search_are_the_servers_answers() {
    need_fuse!();
    if fs::metadata("/proc/self").unwrap().uid() != 0 {
        eprintln!("SKIPPED: needs root to log in as another server user");
        return;
    }
    // The mount logs in as server uid 65534; the directories are root's.
    let s = setup_grouped(Some(65534), &[]);
    for (d, mode) in [("listable", 0o744), ("searchable", 0o711)] {
        dir_of_files(&s.export.join(d), 10, 2);
        fs::set_permissions(s.export.join(d), fs::Permissions::from_mode(mode)).unwrap();
    }
    let m = s.mount("mnt");
    let errno = |p: PathBuf| {
        fs::metadata(p)
            .map(|_| 0)
            .unwrap_or_else(|e| e.raw_os_error().unwrap())
    };

    use std::os::unix::fs::DirEntryExt;
    let listable = m.dir.join("listable");
    let lookups = requests(&m, "Lookup");
    let entries: Vec<fs::DirEntry> = fs::read_dir(&listable)
        .unwrap_or_else(|e| panic!("listing a readable directory: {e}\n{}", m.log()))
        .map(Result::unwrap)
        .collect();
    assert_eq!(requests(&m, "Lookup"), lookups, "a lookup per name listed");
    let mut listed: Vec<(String, u64)> = entries
        .iter()
        .map(|e| (e.file_name().into_string().unwrap(), e.ino()))
        .collect();
    listed.sort();
    let mut on_disk: Vec<(String, u64)> = fs::read_dir(s.export.join("listable"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().into_string().unwrap(), e.ino())
        })
        .collect();
    on_disk.sort();
    assert_eq!(
        listed, on_disk,
        "names and inode numbers as on the server's disk"
    );
    for e in &entries {
        // No type: `file_type` has to `lstat`, which the server refuses.
        assert!(e.file_type().is_err(), "{:?} has a type", e.file_name());
    }
    for i in 0..5 {
        let (name, absent) = (format!("f{i:02}"), format!("absent{i}"));
        assert_eq!(
            errno(listable.join(&name)),
            libc::EACCES,
            "{name}\n{}",
            m.log()
        );
        assert_eq!(
            errno(listable.join(&absent)),
            libc::EACCES,
            "{absent}\n{}",
            m.log()
        );
    }

    let searchable = m.dir.join("searchable");
    assert!(fs::read_dir(&searchable).is_err(), "not listable");
    let before = requests(&m, "Lookup");
    for i in 0..5 {
        assert_eq!(errno(searchable.join(format!("f{i:02}"))), 0, "{}", m.log());
        assert_eq!(errno(searchable.join(format!("absent{i}"))), libc::ENOENT);
    }
    assert_eq!(
        requests(&m, "Lookup") - before,
        10,
        "each lookup asked the server"
    );
}
/// `stat` shows the server's inode numbers, in every mount and after a remount, as NFS
/// does; a listing's `d_ino` agrees. In the namespace each server's numbers carry its range
/// in the top bits, so two servers' files never share one.
#[test]
fn inode_numbers_are_the_servers_and_outlast_a_remount() {
    use std::os::unix::fs::DirEntryExt;
    need_fuse!();
    let s = setup();
    dir_of_files(&s.export.join("d"), 10, 2);
    fs::create_dir(s.export.join("d/sub")).unwrap();
    fs::hard_link(s.export.join("d/f00"), s.export.join("d/link")).unwrap();
    let inos = |d: &Path| -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = fs::read_dir(d)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let ino = fs::symlink_metadata(e.path()).unwrap().ino();
                assert_eq!(e.ino(), ino, "d_ino of {:?}", e.file_name());
                (e.file_name().into_string().unwrap(), ino)
            })
            .collect();
        v.sort();
        v
    };
    let on_server = inos(&s.export.join("d"));
    assert_eq!(on_server.len(), 12);
    let m = s.mount("mnt");
    assert_eq!(inos(&m.dir.join("d")), on_server);
    assert_eq!(
        fs::metadata(m.dir.join("d")).unwrap().ino(),
        fs::metadata(s.export.join("d")).unwrap().ino()
    );
    drop(m);
    let again = s.mount("again");
    assert_eq!(inos(&again.dir.join("d")), on_server, "after a remount");
    drop(again);

    let ns = s.mount_namespace("ns", &[]);
    let in_ns = inos(&ns.dir.join(&s.server.name).join("d"));
    let tagged: Vec<(String, u64)> = on_server
        .iter()
        .map(|(n, ino)| (n.clone(), ino ^ 1 << 48))
        .collect();
    assert_eq!(in_ns, tagged, "the first server's range in the top bits");
}

/// A repository committed through one mount is clean through the next: git keeps each file's
/// `st_ino` in its index, and `git status` reads again, whole, every file whose number changed
/// (over a long link, the whole work tree after each remount).
#[test]
fn git_sees_a_clean_tree_after_a_remount() {
    need_fuse!();
    let s = setup();
    let m = s.mount("mnt");
    let repo = m.dir.join("repo");
    fs::create_dir(&repo).unwrap();
    for i in 0..5 {
        fs::write(repo.join(format!("f{i}")), format!("file {i}\n")).unwrap();
    }
    let git = |dir: &Path, args: &[&str]| {
        let out = Command::new("git")
            .args([
                "-c",
                "safe.directory=*",
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
            ])
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "x"]);
    let indexed = git(&repo, &["ls-files", "--debug"]);
    drop(m);
    let again = s.mount("again");
    let repo = again.dir.join("repo");
    // Met in another order than through the first mount (whose node ids were made in the
    // order of creation), as after any remount.
    for i in (0..5).rev() {
        let name = format!("f{i}");
        let ino = fs::metadata(repo.join(&name)).unwrap().ino();
        // `ls-files --debug`: the path, then its stat data indented, `ino: N` among it.
        let entry: String = indexed
            .split_inclusive('\n')
            .skip_while(|l| l.trim_end() != name)
            .skip(1)
            .take_while(|l| l.starts_with(' '))
            .collect();
        assert!(
            entry.contains(&format!("ino: {ino}\n")),
            "{name}'s inode number {ino} is not the index's:\n{indexed}"
        );
    }
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
}

/// A LOOKUP of a name that a kept listing of the directory does not hold is answered by the
/// mount (`ENOENT`) without asking the server: git looks for a `.gitignore` in every directory.
/// A name another client adds shows at once (its INVALIDATE ends the kept listing), and so
/// does one of ours.
#[test]
fn a_name_a_kept_listing_lacks_is_absent_without_asking_the_server() {
    need_fuse!();
    let s = setup();
    // Made on the server's disk: a directory this mount made is known empty of other names
    // anyway (`fresh_dirs`).
    dir_of_files(&s.export.join("d"), 5, 1);
    let m = s.mount("mnt");
    let other = s.mount("other");
    let d = m.dir.join("d");
    assert_eq!(fs::read_dir(&d).unwrap().count(), 5);
    let before = requests(&m, "Lookup");
    for i in 0..20 {
        assert!(!d.join(format!(".gitignore{i}")).exists());
    }
    let asked = requests(&m, "Lookup") - before;
    assert_eq!(asked, 0, "20 absent names asked the server {asked} times");

    fs::write(other.dir.join("d/.gitignore3"), b"*.o").unwrap();
    soon("a name another mount added", true, || {
        d.join(".gitignore3").exists()
    });
    assert_eq!(fs::read_dir(&d).unwrap().count(), 6);
    fs::write(d.join(".gitignore4"), b"*.a").unwrap();
    assert_eq!(fs::read(d.join(".gitignore4")).unwrap(), b"*.a");
    assert!(!d.join(".gitignore5").exists());

    // A name longer than any the listing could hold is the server's to refuse.
    fs::read_dir(&d).unwrap().count();
    let long = "n".repeat(256);
    let err = fs::metadata(d.join(long)).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENAMETOOLONG), "{err}");
}

/// Our own changes of a directory (creates, renames, removals, several removed at once behind
/// the kernel's back) do not end its kept listing: it is edited to show them, so the names
/// git probes for in `.git` between its own lock-file renames stay free of round trips. The
/// listing shows exactly the directory as the server has it, and another client's change
/// still ends it at once.
#[test]
fn our_own_changes_keep_the_listing_of_their_directory_answering() {
    need_fuse!();
    let s = setup();
    dir_of_files(&s.export.join("d"), 8, 1);
    let m = s.mount("mnt");
    let other = s.mount("other");
    let d = m.dir.join("d");
    assert_eq!(fs::read_dir(&d).unwrap().count(), 8);
    // What git does to `.git`: a lock file made, written and renamed over its target, a
    // file renamed, files removed in a row (the later ones removed behind, together).
    fs::write(d.join("index.lock"), b"new index").unwrap();
    fs::rename(d.join("index.lock"), d.join("f1")).unwrap();
    fs::rename(d.join("f0"), d.join("moved")).unwrap();
    fs::create_dir(d.join("sub")).unwrap();
    std::os::unix::fs::symlink("f1", d.join("link")).unwrap();
    for i in 2..7 {
        fs::remove_file(d.join(format!("f{i}"))).unwrap();
    }
    let before = requests(&m, "Lookup") + requests(&m, "ListDir");
    for i in 0..20 {
        assert!(!d.join(format!("MERGE_HEAD{i}")).exists());
    }
    for gone in ["index.lock", "f0", "f2", "f6"] {
        assert!(!d.join(gone).exists(), "{gone}");
    }
    let names = names_in(&d);
    let asked = requests(&m, "Lookup") + requests(&m, "ListDir") - before;
    assert_eq!(
        asked, 0,
        "absent names and the listing asked the server {asked} times"
    );
    assert_eq!(names, ["f1", "f7", "link", "moved", "sub"]);
    assert_eq!(fs::read(d.join("f1")).unwrap(), b"new index");
    assert_eq!(fs::read(d.join("moved")).unwrap(), b"x");
    assert!(fs::metadata(d.join("sub")).unwrap().is_dir());
    assert_eq!(fs::read_link(d.join("link")).unwrap(), Path::new("f1"));

    // As the server has it.
    assert_eq!(names, names_in(&s.export.join("d")));

    // Another client's name shows at once (its INVALIDATE ends the listing).
    fs::write(other.dir.join("d/MERGE_HEAD3"), b"x").unwrap();
    soon("a name another mount added", true, || {
        d.join("MERGE_HEAD3").exists()
    });
    assert_eq!(fs::read_dir(&d).unwrap().count(), 6);
}

/// An empty directory's listing has no entry to show that its reader may search it: the
/// server is asked that beside the listing (ACCESS, the same round trip), and absent names
/// there are then answered without a request (git probes `.git/refs/tags` for `HEAD` and
/// `.git/objects/info` for `alternates` at every command). Another client's new name there
/// still shows at once.
#[test]
fn absent_names_in_an_empty_directory_are_answered_from_its_listing() {
    need_fuse!();
    let s = setup();
    fs::create_dir(s.export.join("empty")).unwrap();
    let m = s.mount("mnt");
    let other = s.mount("other");
    let e = m.dir.join("empty");
    assert!(fs::metadata(&e).unwrap().is_dir());
    for i in 0..2 {
        assert!(!e.join(format!("probe{i}")).exists());
    }
    let asked = || {
        ["Lookup", "ListDir", "Access"]
            .map(|p| requests(&m, p))
            .iter()
            .sum::<usize>()
    };
    let before = asked();
    for i in 2..22 {
        assert!(!e.join(format!("probe{i}")).exists());
    }
    assert_eq!(asked() - before, 0, "absent names in an empty directory");
    fs::write(other.dir.join("empty/HEAD"), b"ref").unwrap();
    soon("a name another mount added", true, || {
        e.join("HEAD").exists()
    });
}

/// Where sfsd tells of changes made behind its back (it watches its disk: protocol 17), a
/// small directory is read whole at the first name no listing answers, and the next absent
/// names there cost nothing: git probes most of `.git`'s small directories for one or two
/// names per command. Without the watch it is read at the second, so one lookup never keeps a
/// listing that a name made on the disk would not end. Either way a name made on the server's
/// disk then shows.
#[test]
fn a_small_directory_is_listed_at_its_first_miss_where_sfsd_watches_its_disk() {
    need_fuse!();
    if !disk_watched() {
        return;
    }
    for (watch, first_listed) in [(true, true), (false, false)] {
        let flags: &[&str] = if watch { &[] } else { &["--no-disk-watch"] };
        let s = setup_serving(None, &[], flags);
        dir_of_files(&s.export.join("d"), 3, 1);
        let m = s.mount("mnt");
        let d = m.dir.join("d");
        assert!(fs::metadata(&d).unwrap().is_dir());
        let (lookups, listings) = (requests(&m, "Lookup"), requests(&m, "ListDir"));
        assert!(!d.join("probe0").exists());
        assert_eq!(
            (
                requests(&m, "Lookup") - lookups,
                requests(&m, "ListDir") - listings
            ),
            if first_listed { (0, 1) } else { (1, 0) },
            "watch {watch}: the first miss; log:\n{}",
            m.log()
        );
        for i in 1..10 {
            assert!(!d.join(format!("probe{i}")).exists());
        }
        assert_eq!(
            requests(&m, "Lookup") - lookups,
            if first_listed { 0 } else { 1 },
            "watch {watch}: lookups; log:\n{}",
            m.log()
        );
        assert_eq!(requests(&m, "ListDir") - listings, 1, "watch {watch}");
        if watch {
            fs::write(s.export.join("d/made-on-disk"), b"x").unwrap();
            soon("a name made on the disk", true, || {
                d.join("made-on-disk").exists()
            });
        }
    }
}

/// A rename between two directories whose listings are kept shows in both at once: gone from
/// the one it left (whose listing is edited), there in the one it went to (whose listing is
/// read again), in listings and in lookups alike.
#[test]
fn a_rename_between_directories_shows_in_both_kept_listings() {
    need_fuse!();
    let s = setup();
    dir_of_files(&s.export.join("a"), 3, 1);
    dir_of_files(&s.export.join("b"), 2, 1);
    let m = s.mount("mnt");
    let (a, b) = (m.dir.join("a"), m.dir.join("b"));
    assert_eq!(names_in(&a), ["f0", "f1", "f2"]);
    assert_eq!(names_in(&b), ["f0", "f1"]);
    fs::rename(a.join("f1"), b.join("moved")).unwrap();
    assert!(!a.join("f1").exists());
    assert!(b.join("moved").exists());
    assert_eq!(names_in(&a), ["f0", "f2"]);
    assert_eq!(names_in(&b), ["f0", "f1", "moved"]);
    assert_eq!(fs::read(b.join("moved")).unwrap(), b"x");
    // And back over a name there.
    fs::rename(b.join("moved"), a.join("f0")).unwrap();
    assert_eq!(names_in(&a), ["f0", "f2"]);
    assert_eq!(names_in(&b), ["f0", "f1"]);
    assert!(!b.join("moved").exists());
}

/// Removing or renaming over a file while programs hold other files open asks the server no
/// LOOKUP: the node the kernel holds for the name tells whether it is one of the open files
/// (git holds its packs open while it renames lock files over refs and removes temporary
/// objects). A file that is open still outlives its name, and one renamed over too.
#[test]
fn unlinks_and_renames_while_files_are_open_ask_no_lookup() {
    need_fuse!();
    let s = setup();
    fs::create_dir(s.export.join("d")).unwrap();
    for name in ["pack", "tmp_obj", "open", "index", "index.lock", "replaced"] {
        fs::write(s.export.join("d").join(name), name).unwrap();
    }
    let m = s.mount("mnt");
    let d = m.dir.join("d");
    // Listed: the kernel's own LOOKUP of a rename's target (it never trusts its dentry
    // there) is answered from the listing.
    assert_eq!(fs::read_dir(&d).unwrap().count(), 6);
    let mut pack = fs::File::open(d.join("pack")).unwrap();
    let mut open = fs::File::open(d.join("open")).unwrap();
    let mut replaced = fs::File::open(d.join("replaced")).unwrap();
    let before = requests(&m, "Lookup");
    fs::rename(d.join("index.lock"), d.join("index")).unwrap();
    fs::remove_file(d.join("tmp_obj")).unwrap();
    fs::remove_file(d.join("open")).unwrap();
    fs::rename(d.join("index"), d.join("replaced")).unwrap();
    let asked = requests(&m, "Lookup") - before;
    assert_eq!(asked, 0, "renames and unlinks asked {asked} LOOKUPs");
    for (f, was) in [
        (&mut pack, "pack"),
        (&mut open, "open"),
        (&mut replaced, "replaced"),
    ] {
        let mut got = String::new();
        f.read_to_string(&mut got).unwrap();
        assert_eq!(got, was);
    }
    assert_eq!(fs::read(d.join("replaced")).unwrap(), b"index.lock");

    // A name renamed over another is the moved file's: open, it outlives its removal.
    let mut moved = fs::File::open(d.join("pack")).unwrap();
    fs::rename(d.join("pack"), d.join("replaced")).unwrap();
    fs::remove_file(d.join("replaced")).unwrap();
    let mut got = String::new();
    moved.read_to_string(&mut got).unwrap();
    assert_eq!(got, "pack");
}

/// A file read again is read from the kernel's pages while it is unchanged under its lease
/// (`FOPEN_KEEP_CACHE`, fuse/kept_pages.rs): no READ, and no GETATTR either (the kernel forgets
/// a file's access time after each READ and asks again at the next `stat`, answered from the
/// mount's cache). A change through another mount, even one that keeps the size, shows at
/// once (its INVALIDATE drops the pages); so does one of ours.
#[test]
fn a_file_read_again_is_read_from_the_kernels_pages_until_it_changes() {
    need_fuse!();
    let s = setup();
    let m = s.mount("mnt");
    let other = s.mount("other");
    let files: Vec<PathBuf> = (0..20).map(|i| m.dir.join(format!("f{i:02}"))).collect();
    for (i, f) in files.iter().enumerate() {
        fs::write(f, format!("contents of file {i:02}")).unwrap();
    }
    let read_all = || -> Vec<Vec<u8>> { files.iter().map(|f| fs::read(f).unwrap()).collect() };
    let first = read_all();
    let asked = |m: &Mount| requests(m, "Read") + requests(m, "GetAttr");
    let tries = tries_until_at_most(2, || {
        let before = asked(&m);
        for _ in 0..3 {
            assert_eq!(read_all(), first);
            for f in &files {
                fs::metadata(f).unwrap();
            }
        }
        asked(&m) - before
    });
    assert!(
        tries.last() <= Some(&2),
        "reading 20 files again 3 times asked the server this many times, try by try: {tries:?}"
    );

    // Another client rewrites one file, same size: its new bytes show here.
    let path = other.dir.join("f05");
    fs::write(&path, b"CONTENTS OF FILE 05").unwrap();
    soon(
        "f05 through the first mount",
        b"CONTENTS OF FILE 05".to_vec(),
        || fs::read(&files[5]).unwrap(),
    );
    // Ours too, through a second descriptor while the first stays open.
    let held = fs::File::open(&files[6]).unwrap();
    fs::write(&files[6], b"rewritten here, longer than before").unwrap();
    assert_eq!(
        fs::read(&files[6]).unwrap(),
        b"rewritten here, longer than before"
    );
    drop(held);
    assert_eq!(fs::read(&files[7]).unwrap(), first[7]);
}

/// Directories `t/d00`, `t/d01`, ... (`n` of them) made on the server, and a mount of it that
/// has listed each once (it caches their attributes): the mount and their paths in it.
fn mount_with_listed_dirs(s: &Setup, n: usize) -> (Mount, Vec<PathBuf>) {
    for i in 0..n {
        fs::create_dir_all(s.export.join(format!("t/d{i:02}"))).unwrap();
    }
    let m = s.mount("mnt");
    let dirs: Vec<PathBuf> = (0..n).map(|i| m.dir.join(format!("t/d{i:02}"))).collect();
    for d in &dirs {
        assert_eq!(fs::read_dir(d).unwrap().count(), 0);
    }
    (m, dirs)
}

/// The GETATTRs the server got while `f` ran.
fn getattrs_during(m: &Mount, f: impl FnOnce()) -> usize {
    let before = requests(m, "GetAttr");
    f();
    requests(m, "GetAttr") - before
}

/// A change of ours that names only what it changes (a CREATE, a WRITE) leaves the attributes
/// cached of everything else answering the kernel, and a REMOVE those of directories: `git
/// status` makes and removes its index's lock file, and its next run `stat`s every directory
/// again (the kernel forgets a directory's access time after each READDIR), which asked the
/// server once per directory after any change.
#[test]
fn a_write_leaves_other_objects_cached_attributes_answering() {
    need_fuse!();
    let s = setup();
    let (m, dirs) = mount_with_listed_dirs(&s, 20);
    let asked = getattrs_during(&m, || {
        // git's lock file: made, then removed (a REMOVE changes no directory it does not name).
        fs::write(m.dir.join("t/index.lock"), b"").unwrap();
        fs::remove_file(m.dir.join("t/index.lock")).unwrap();
        fs::write(m.dir.join("t/index"), b"written").unwrap();
        for d in &dirs {
            fs::metadata(d).unwrap();
        }
    });
    assert_eq!(
        asked,
        0,
        "GETATTRs for {} directories after a write elsewhere",
        dirs.len()
    );
}

/// A RENAME of ours leaves the attributes cached of objects it does not change answering the
/// kernel (git renames its index's lock file over the index after every change of it, and its
/// next run `stat`s every directory again), and the server tells us of the one it replaced
/// before its reply: another name of the replaced file shows the link it lost.
#[test]
fn a_rename_leaves_other_cached_attributes_answering_and_shows_what_it_replaced() {
    need_fuse!();
    let s = setup();
    let (m, dirs) = mount_with_listed_dirs(&s, 20);
    let t = m.dir.join("t");
    fs::write(t.join("index"), b"old index").unwrap();
    fs::hard_link(t.join("index"), t.join("kept")).unwrap();
    assert_eq!(fs::metadata(t.join("kept")).unwrap().nlink(), 2);
    let asked = getattrs_during(&m, || {
        fs::write(t.join("index.lock"), b"new index").unwrap();
        fs::rename(t.join("index.lock"), t.join("index")).unwrap();
        for d in &dirs {
            fs::metadata(d).unwrap();
        }
    });
    assert_eq!(
        asked,
        0,
        "GETATTRs for {} directories after a rename elsewhere",
        dirs.len()
    );
    assert_eq!(fs::read(t.join("index")).unwrap(), b"new index");
    // A READ makes the kernel forget the file's access time, so its next stat asks the mount.
    assert_eq!(fs::read(t.join("kept")).unwrap(), b"old index");
    assert_eq!(
        fs::metadata(t.join("kept")).unwrap().nlink(),
        1,
        "the replaced file's other name\n{}",
        m.log()
    );
}

/// A RENAME changes the change time of the directory it moves, which it does not name: the
/// moved directory's `stat` is the server's after it, not attributes cached before.
#[test]
fn a_moved_directory_shows_its_new_change_time() {
    need_fuse!();
    let s = setup();
    let m = s.mount("mnt");
    for d in ["a/x", "b"] {
        fs::create_dir_all(m.dir.join(d)).unwrap();
    }
    let before = fs::metadata(m.dir.join("a/x")).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    fs::rename(m.dir.join("a/x"), m.dir.join("b/x")).unwrap();
    let on_disk = fs::metadata(s.export.join("b/x")).unwrap();
    assert_ne!(
        (on_disk.ctime(), on_disk.ctime_nsec()),
        (before.ctime(), before.ctime_nsec()),
        "the server's file system moves a renamed directory's ctime"
    );
    let moved = fs::metadata(m.dir.join("b/x")).unwrap();
    assert_eq!(
        (moved.ctime(), moved.ctime_nsec()),
        (on_disk.ctime(), on_disk.ctime_nsec())
    );
}

/// The kernel asks a file's attributes again after a change of ours that changed them without
/// naming the file (an unlink of another of its names): the server answers, not attributes
/// the mount cached before the change.
#[test]
fn a_link_count_changed_by_our_unlink_is_asked_of_the_server() {
    need_fuse!();
    let s = setup();
    let m = s.mount("mnt");
    let f = m.dir.join("f");
    fs::write(&f, b"linked").unwrap();
    fs::hard_link(&f, m.dir.join("g")).unwrap();
    assert_eq!(fs::read(&f).unwrap(), b"linked");
    assert_eq!(fs::metadata(&f).unwrap().nlink(), 2);
    // A READ makes the kernel forget f's access time, so its next stat asks the mount.
    assert_eq!(fs::read(&f).unwrap(), b"linked");
    fs::remove_file(m.dir.join("g")).unwrap();
    assert_eq!(fs::read(&f).unwrap(), b"linked");
    assert_eq!(fs::metadata(&f).unwrap().nlink(), 1);
}

/// A program's working directory in a mount stays its working directory when another client
/// changes the directory above it, and when sfsd restarts under the mount: git, make and
/// Python ask `getcwd` first thing, which fails with ENOENT for a directory the kernel
/// dropped from its name cache (passing such a change on dropped the kernel's entries of the
/// changed directory's names; now they only expire, and the kernel looks each up again).
#[test]
fn a_working_directory_survives_changes_above_it_and_a_server_restart() {
    need_fuse!();
    let mut s = setup();
    let a = s.mount("a");
    let b = s.mount("b");
    fs::create_dir_all(a.dir.join("proj/src")).unwrap();
    // Programs working in proj (a name in the root) and in proj/src.
    let dirs = [a.dir.join("proj"), a.dir.join("proj/src")];
    let mut programs: Vec<_> = dirs
        .iter()
        .map(|d| {
            Command::new("sleep")
                .arg("60")
                .current_dir(d)
                .spawn()
                .unwrap()
        })
        .collect();
    let cwds = |programs: &[std::process::Child]| -> Vec<PathBuf> {
        let cwd = |p: &std::process::Child| fs::read_link(format!("/proc/{}/cwd", p.id()));
        programs.iter().map(|p| cwd(p).unwrap()).collect()
    };
    assert_eq!(cwds(&programs), dirs);
    // Another client makes a name in each directory above them; once A sees both, the
    // INVALIDATEs have been passed on. A dropped entry shows as "PATH (deleted)".
    fs::write(b.dir.join("proj/new"), b"n").unwrap();
    fs::write(b.dir.join("top"), b"t").unwrap();
    soon("A sees proj/new", true, || a.dir.join("proj/new").exists());
    soon("A sees top", true, || a.dir.join("top").exists());
    assert_eq!(
        cwds(&programs),
        dirs,
        "the kernel dropped a working directory"
    );
    // sfsd restarts: at its next request to the server the mount reconnects and passes on
    // that every cache is stale (passed on by another thread: given time to arrive).
    s.server.restart();
    soon("A writes again", true, || {
        fs::write(a.dir.join("proj/after"), b"a").is_ok()
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        cwds(&programs),
        dirs,
        "the kernel dropped a working directory"
    );
    // And a path through them still finds what it names, and loses what is gone.
    assert_eq!(fs::read(a.dir.join("proj/new")).unwrap(), b"n");
    fs::remove_dir(b.dir.join("proj/src")).unwrap();
    soon("A sees src gone", false, || a.dir.join("proj/src").exists());
    for p in &mut programs {
        p.kill().unwrap();
        p.wait().unwrap();
    }
}

/// The server's leases end with the connection they came on: a mount whose connection
/// broke (sfsd killed and started again) stops answering from what it kept under them at
/// once, not at its own next request to the server, so a name another client makes after the
/// restart shows though this mount asked nothing meanwhile (it kept the listing, and until
/// then answered "no such file" for up to the lease, a minute), and so does a size changed
/// after the restart, which the kernel kept too.
#[test]
fn a_mount_trusts_nothing_it_kept_once_its_connection_broke() {
    need_fuse!();
    let mut s = setup();
    let a = s.mount("a");
    let b = s.mount("b");
    fs::write(a.dir.join("old"), b"o").unwrap();
    assert_eq!(names_in(&a.dir), ["old"]);
    assert_eq!(names_in(&b.dir), ["old"]);
    // The kernel keeps old's attributes for the lease, too.
    assert_eq!(fs::metadata(a.dir.join("old")).unwrap().len(), 1);
    s.server.restart();
    soon("B writes again", true, || {
        fs::write(b.dir.join("new"), b"n").is_ok()
    });
    fs::write(b.dir.join("old"), b"longer").unwrap();
    // Asked first: A's next request to the server would reconnect, which invalidates
    // everything anyway.
    soon("A sees old's new size", 6, || {
        fs::metadata(a.dir.join("old")).unwrap().len()
    });
    soon("A sees the new name", true, || a.dir.join("new").exists());
    assert_eq!(names_in(&a.dir), ["new", "old"]);
    assert_eq!(fs::read(a.dir.join("new")).unwrap(), b"n");
}

#[test]
fn two_mounts_see_each_others_changes_at_once() {
    need_fuse!();
    let s = setup();
    let a = s.mount("a");
    let b = s.mount("b");
    let (pa, pb) = (&a.dir, &b.dir);

    fs::write(pa.join("x"), b"one").unwrap();
    assert_eq!(fs::read(pb.join("x")).unwrap(), b"one");
    let md = fs::metadata(pb.join("x")).unwrap(); // B now caches x for the lease
    assert_eq!(md.len(), 3);

    // Rewritten through A: B sees the new size and data (attributes and pages invalidated).
    fs::write(pa.join("x"), b"two, longer").unwrap();
    soon("B's size of x", 11, || {
        fs::metadata(pb.join("x")).map(|m| m.len()).unwrap_or(0)
    });
    assert_eq!(fs::read(pb.join("x")).unwrap(), b"two, longer");

    // chmod through A.
    fs::set_permissions(pa.join("x"), fs::Permissions::from_mode(0o600)).unwrap();
    soon("B's mode of x", 0o600, || {
        fs::metadata(pb.join("x"))
            .map(|m| m.mode() & 0o777)
            .unwrap_or(0)
    });

    // Extended attributes: B caches its answers (an absent one too) for the lease, and A's
    // change reaches it at once all the same (the server INVALIDATEs lease holders).
    assert_eq!(getxattr(&pb.join("x"), "user.k", 10), Err(libc::ENODATA));
    assert_eq!(listxattr(&pb.join("x")), Vec::<String>::new());
    setxattr(
        &pa.join("x"),
        "user.k",
        b"a",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    soon("B's user.k of x", Ok(b"a".to_vec()), || {
        getxattr(&pb.join("x"), "user.k", 10)
    });
    assert_eq!(listxattr(&pb.join("x")), ["user.k"]);
    setxattr(
        &pa.join("x"),
        "user.k",
        b"b",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    soon("B's new user.k of x", Ok(b"b".to_vec()), || {
        getxattr(&pb.join("x"), "user.k", 10)
    });
    rustix::fs::removexattr(pa.join("x"), "user.k").unwrap();
    soon("B's removed user.k of x", Err(libc::ENODATA), || {
        getxattr(&pb.join("x"), "user.k", 10)
    });

    // Names: created, renamed and removed through A.
    fs::write(pa.join("y"), b"y").unwrap();
    assert_eq!(fs::read(pb.join("y")).unwrap(), b"y");
    fs::rename(pa.join("y"), pa.join("z")).unwrap();
    soon("B's view of y after rename", false, || {
        pb.join("y").exists()
    });
    assert_eq!(fs::read(pb.join("z")).unwrap(), b"y");
    fs::remove_file(pa.join("x")).unwrap();
    soon("B's view of x after unlink", false, || {
        pb.join("x").exists()
    });

    // And the other way round.
    fs::create_dir(pb.join("dir")).unwrap();
    fs::write(pb.join("dir/f"), b"from b").unwrap();
    assert_eq!(fs::read(pa.join("dir/f")).unwrap(), b"from b");
    fs::remove_file(pb.join("dir/f")).unwrap();
    soon("A's view of dir/f", false, || pa.join("dir/f").exists());
}

/// Requests of procedure `proc_` the mount sent so far: its log has a line ending in
/// `request proc=PROC` for each (debug level, which these mounts log at).
/// What `run` asked, try by try, until a try asks at most `most` (5 tries at most). The kernel
/// may drop what it cached (pages, inodes with their ACLs) under memory pressure, and CI's page
/// cache is full of build output; it then asks again. A mount that makes it ask every time
/// asks as much on every try, so a few tries tell the two apart.
fn tries_until_at_most(most: usize, mut run: impl FnMut() -> usize) -> Vec<usize> {
    let mut tries = Vec::new();
    while tries.len() < 5 && tries.last().is_none_or(|&asked| asked > most) {
        tries.push(run());
    }
    tries
}

fn requests(m: &Mount, proc_: &str) -> usize {
    let want = format!("request proc={proc_}");
    m.log()
        .lines()
        .filter(|l| l.trim_end().ends_with(&want))
        .count()
}

/// Requests of every kind the mount sent, once it stopped sending (no new one for 200 ms).
fn settled_requests(m: &Mount) -> usize {
    let all = || {
        m.log()
            .lines()
            .filter(|l| l.contains("request proc="))
            .count()
    };
    let mut last = all();
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(200));
        let now = all();
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("the mount kept sending requests\n{}", m.log());
}

/// A client that uses more objects than its share of leases (`--max-leases-per-conn`) keeps
/// caching the ones it uses now: sfsd ends the client's oldest leases for new ones, and tells
/// it, instead of granting lease 0 past the share, which made every later use of those
/// objects a round trip (a `find` of 20,000 directories: 15 s, a LOOKUP and a GETATTR per
/// step).
#[test]
fn objects_used_past_the_lease_share_are_cached_all_the_same() {
    need_fuse!();
    let s = setup_serving(None, &[], &["--max-leases-per-conn", "64"]);
    let n = 200;
    let dir = s.export.join("many");
    fs::create_dir(&dir).unwrap();
    for i in 0..n {
        fs::write(dir.join(format!("f{i:03}")), b"x").unwrap();
    }
    let m = s.mount("mnt");
    let stat = |i: usize| fs::symlink_metadata(m.dir.join(format!("many/f{i:03}"))).unwrap();
    // Every file once: three times the share.
    for i in 0..n {
        assert_eq!(stat(i).len(), 1);
    }
    // The last ten again: whatever was ended for room is asked once more...
    for i in n - 10..n {
        stat(i);
    }
    let before = settled_requests(&m);
    // ...and then they are cached.
    for _ in 0..3 {
        for i in n - 10..n {
            stat(i);
        }
    }
    let after = settled_requests(&m);
    assert_eq!(
        after - before,
        0,
        "{} requests for files used a moment before\n{}",
        after - before,
        m.log()
    );
}

/// Lookups that step from a directory into its subdirectories, as `git status` `lstat`s every
/// path of its index one directory after another, read the next listings ahead: once a
/// lookup reads the listing of a subdirectory of a listing read before, the listings of its
/// siblings and subdirectories, and of theirs as they come, are read side by side, and
/// lookups in them, of names they hold or lack, ask the server nothing (in an empty one,
/// whether its reader may search it once). Where the server does not tell of changes behind
/// its back (`--no-disk-watch`), nothing is read ahead for lookups: such a listing would
/// hide a name made on the server's disk for the directory's lease.
#[test]
fn lookups_stepping_into_subdirectories_read_the_next_listings_ahead() {
    need_fuse!();
    for watch in [true, false] {
        let flags: &[&str] = if watch { &[] } else { &["--no-disk-watch"] };
        let s = setup_serving(None, &[], flags);
        for d in 0..8 {
            let dir = s.export.join(format!("top/d{d}"));
            fs::create_dir_all(dir.join("sub")).unwrap();
            fs::write(dir.join("sub/h"), b"h").unwrap();
            fs::write(dir.join("f"), vec![b'x'; d + 1]).unwrap();
        }
        fs::create_dir(s.export.join("top/empty")).unwrap();
        let m = s.mount("mnt");
        let top = m.dir.join("top");
        // Two names absent from each of the first two directories: even without a watch,
        // their listings are read for lookups (at the second miss).
        for name in ["a1", "a2", "top/a1", "top/a2"] {
            assert!(!m.dir.join(name).exists());
        }
        assert_eq!(fs::metadata(top.join("d0/f")).unwrap().len(), 1);
        let before = settled_requests(&m);
        for d in 1..8 {
            let f = fs::metadata(top.join(format!("d{d}/f"))).unwrap();
            assert_eq!(f.len(), d as u64 + 1);
            let absent = fs::metadata(top.join(format!("d{d}/absent"))).unwrap_err();
            assert_eq!(errno(&absent), libc::ENOENT);
            // One level further down, read ahead as the siblings' listings came.
            let g = fs::metadata(top.join(format!("d{d}/sub/g"))).unwrap_err();
            assert_eq!(errno(&g), libc::ENOENT);
        }
        let asked = settled_requests(&m) - before;
        if !watch {
            assert!(asked >= 7, "{asked} requests: read ahead without a watch");
            continue;
        }
        assert_eq!(asked, 0, "requests for lookups read ahead\n{}", m.log());
        // An empty listing read ahead does not show that its reader may search the
        // directory: that is asked once, then names are answered absent from the listing.
        let access = requests(&m, "Access");
        for name in ["x", "y", "z"] {
            let absent = fs::metadata(top.join("empty").join(name)).unwrap_err();
            assert_eq!(errno(&absent), libc::ENOENT);
        }
        assert_eq!(
            (
                settled_requests(&m) - before,
                requests(&m, "Access") - access
            ),
            (1, 1),
            "(requests, ACCESS) for 3 names absent from an empty directory read ahead\n{}",
            m.log()
        );
    }
}

/// Listing a directory again asks the server nothing while the directory's lease lasts: no
/// LISTDIR (the listing is kept) and no GETATTR (the kernel sends one right after each
/// re-opening, since it forgets a directory's atime after each READDIR and glibc's `opendir`
/// `fstat`s what it opened; it is answered from the listing's attributes). Changes still show
/// at once: ours, and another client's (its INVALIDATE of the directory), with the
/// directory's mtime.
#[test]
fn listing_a_directory_again_asks_the_server_nothing_while_its_lease_lasts() {
    need_fuse!();
    let s = setup();
    let m = s.mount("mnt");
    let other = s.mount("other");
    let d = m.dir.join("d");
    fs::create_dir(&d).unwrap();
    for i in 0..5 {
        fs::write(d.join(format!("f{i}")), b"x").unwrap();
    }
    assert_eq!(names_in(&d), ["f0", "f1", "f2", "f3", "f4"]);
    let counts = |m: &Mount| {
        let listings = requests(m, "ListDir") + requests(m, "ReadDirPlus");
        (requests(m, "GetAttr"), listings)
    };
    let before = counts(&m);
    for _ in 0..5 {
        assert_eq!(names_in(&d).len(), 5);
    }
    assert_eq!(
        counts(&m),
        before,
        "(GETATTR, LISTDIR or READDIRPLUS) requests for 5 listings; log:\n{}",
        m.log()
    );
    // Our own change shows at once; so does another client's (its INVALIDATE).
    fs::remove_file(d.join("f0")).unwrap();
    assert_eq!(names_in(&d), ["f1", "f2", "f3", "f4"]);
    fs::write(other.dir.join("d/g"), b"g").unwrap();
    soon("the listing after another mount's create", 5, || {
        names_in(&d).len()
    });
    assert!(names_in(&d).contains(&"g".to_string()));
    fs::rename(other.dir.join("d/g"), other.dir.join("d/h")).unwrap();
    soon("the listing after another mount's rename", true, || {
        names_in(&d).contains(&"h".to_string())
    });
    assert!(!names_in(&d).contains(&"g".to_string()));
    assert_eq!(
        fs::metadata(&d).unwrap().mtime_nsec(),
        fs::metadata(s.export.join("d")).unwrap().mtime_nsec()
    );
}

/// FUSE requests of opcode `op` (READDIRPLUS, OPENDIR, ...) the kernel sent the mount so far:
/// fuser logs each at debug level.
/// `ls -l DIR`'s output; the run must succeed.
fn ls_l(dir: &Path) -> String {
    let out = Command::new("ls").arg("-l").arg(dir).output().unwrap();
    assert!(
        out.status.success(),
        "ls -l {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Makes `dir` with `n` one-byte files, named `f` and their index in `width` digits.
fn dir_of_files(dir: &Path, n: usize, width: usize) {
    fs::create_dir(dir).unwrap();
    for i in 0..n {
        fs::write(dir.join(format!("f{i:0width$}")), b"x").unwrap();
    }
}

fn kernel_requests(m: &Mount, op: &str) -> usize {
    let want = format!(" {op} ");
    m.log()
        .lines()
        .filter(|l| l.contains("fuser::request") && l.contains(&want))
        .count()
}

/// A directory listed again is read from the kernel's own copy of its listing
/// (`FOPEN_CACHE_DIR`, fuse/kernel_listings.rs): no READDIRPLUS reaches the mount. A change
/// ends that copy: ours at once, another mount's with its INVALIDATE. Nodes the kernel forgot
/// get new ids when looked up again, yet `st_ino` stays and the copy's `d_ino` stay right.
#[test]
fn a_directory_listed_again_is_the_kernels_own_copy_until_it_changes() {
    need_fuse!();
    let s = setup();
    let m = s.mount("mnt");
    let other = s.mount("other");
    let d = m.dir.join("d");
    fs::create_dir(&d).unwrap();
    for i in 0..20 {
        fs::write(d.join(format!("f{i:02}")), b"x").unwrap();
    }
    // Each entry's d_ino against its st_ino, and the names. A name another mount is removing
    // may still be listed and already gone when looked up, as on any file system where a
    // removal falls between a program's readdir and its stat: such a name is left out.
    let list = |d: &Path| {
        use std::os::unix::fs::DirEntryExt;
        let mut names = Vec::new();
        for e in fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            let ino = match fs::symlink_metadata(e.path()) {
                Ok(meta) => meta.ino(),
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                Err(err) => panic!("stat {:?}: {err}", e.file_name()),
            };
            assert_eq!(e.ino(), ino, "d_ino of {:?}", e.file_name());
            names.push(e.file_name().into_string().unwrap());
        }
        names.sort();
        names
    };
    assert_eq!(list(&d).len(), 20);
    let listings = || kernel_requests(&m, "READDIRPLUS") + kernel_requests(&m, "READDIR");
    let tries = tries_until_at_most(0, || {
        let before = listings();
        for _ in 0..5 {
            assert_eq!(list(&d).len(), 20);
        }
        listings() - before
    });
    assert_eq!(
        tries.last(),
        Some(&0),
        "listings read again from the mount, try by try: {tries:?}; log:\n{}",
        m.log()
    );
    fs::write(d.join("ours"), b"o").unwrap();
    assert!(list(&d).contains(&"ours".to_owned()), "our own create");
    fs::write(other.dir.join("d/theirs"), b"t").unwrap();
    soon("another mount's create", true, || {
        list(&d).contains(&"theirs".to_owned())
    });
    fs::remove_file(other.dir.join("d/f00")).unwrap();
    soon("another mount's removal", false, || {
        list(&d).contains(&"f00".to_owned())
    });
    // The kernel forgets the entries' inodes (the directory's own stays: it is open): their
    // next lookups get their old node ids back, so st_ino is what it was and the d_ino of
    // the kernel's copy of the listing stay right, however the FORGETs (read by one thread)
    // and the next OPENDIR and LOOKUPs (read by others) cross.
    if rustix::process::geteuid().is_root() {
        let held = fs::File::open(&d).unwrap();
        let inos = || -> Vec<u64> {
            list(&d)
                .iter()
                .map(|n| fs::symlink_metadata(d.join(n)).unwrap().ino())
                .collect()
        };
        let before = inos();
        let forgets = || kernel_requests(&m, "FORGET") + kernel_requests(&m, "BATCHFORGET");
        let forgotten = forgets();
        fs::write("/proc/sys/vm/drop_caches", b"2").unwrap();
        let waited = Instant::now();
        while forgets() == forgotten && waited.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if forgets() > forgotten {
            assert_eq!(
                inos(),
                before,
                "st_ino changed after the kernel forgot the inodes"
            );
        } else {
            eprintln!("drop_caches forgot no node here: the forget case is not checked");
        }
        drop(held);
    }
}

/// A walk down the tree (a directory opened, then one of its subdirectories) reads the
/// listings of the subdirectory's subdirectories and of its siblings ahead, and of their
/// subdirectories in turn, so the walk's next `opendir`s ask the server nothing; opening one
/// directory alone reads nothing ahead.
#[test]
fn a_walk_reads_the_next_listings_ahead() {
    need_fuse!();
    let s = setup();
    for d in [
        "top/a/deep/deeper/deepest",
        "top/b/inner",
        "top/c",
        "alone/x",
        "alone/y",
    ] {
        fs::create_dir_all(s.export.join(d)).unwrap();
    }
    fs::write(s.export.join("top/b/file"), b"b").unwrap();
    let m = s.mount("mnt");
    let names = |d: &str| names_in(&m.dir.join(d));
    let listdirs = |m: &Mount| requests(m, "ListDir") + requests(m, "ReadDirPlus");
    // Looking names up in the root reads the root whole (at the first lookup no listing
    // answers where sfsd watches its disk, else the second: fuse/lookups_listed.rs): done
    // first, so that only the directories' own listings are counted.
    fs::metadata(m.dir.join("alone")).unwrap();
    fs::metadata(m.dir.join("top")).unwrap();
    // One directory alone: its listing only, nothing ahead.
    let before = listdirs(&m);
    assert_eq!(names("alone"), ["x", "y"]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(listdirs(&m), before + 1, "log:\n{}", m.log());
    // A walk: top, then top/a; then a/deep, b and c are read ahead, and as they arrive,
    // a/deep/deeper and b/inner (one level more, no further: not a/deep/deeper/deepest).
    let before = listdirs(&m);
    assert_eq!(names("top"), ["a", "b", "c"]);
    assert_eq!(names("top/a"), ["deep"]);
    soon("listings read ahead", before + 7, || listdirs(&m));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        listdirs(&m),
        before + 7,
        "read ahead too deep; log:\n{}",
        m.log()
    );
    assert_eq!(names("top/a/deep"), ["deeper"]);
    assert_eq!(names("top/b"), ["file", "inner"]);
    assert_eq!(names("top/b/inner"), Vec::<String>::new());
    assert_eq!(names("top/c"), Vec::<String>::new());
    assert_eq!(listdirs(&m), before + 7, "log:\n{}", m.log());
    // The step into a/deep/deeper reads deepest ahead.
    assert_eq!(names("top/a/deep/deeper"), ["deepest"]);
    soon("the next level read ahead", before + 8, || listdirs(&m));
    assert_eq!(names("top/a/deep/deeper/deepest"), Vec::<String>::new());
    assert_eq!(listdirs(&m), before + 8, "log:\n{}", m.log());
}

/// The level read ahead below a step's listings is bounded per step (`MAX_DEEPER`, 256): a
/// walk into one of six sibling directories, five of which hold 60 subdirectories each,
/// reads ahead the five siblings' listings and 256 of their 300 subdirectories' (each
/// sibling's at most `MAX_PER_STEP`, 64), not all of them.
#[test]
fn the_level_read_ahead_below_a_step_is_bounded() {
    need_fuse!();
    let s = setup();
    fs::create_dir_all(s.export.join("top/walked")).unwrap();
    for i in 0..5 {
        for j in 0..60 {
            fs::create_dir_all(s.export.join(format!("top/s{i}/d{j}"))).unwrap();
        }
    }
    let m = s.mount("mnt");
    let listdirs = |m: &Mount| requests(m, "ListDir") + requests(m, "ReadDirPlus");
    fs::metadata(m.dir.join("top")).unwrap();
    let before = listdirs(&m);
    assert_eq!(fs::read_dir(m.dir.join("top")).unwrap().count(), 6);
    assert_eq!(fs::read_dir(m.dir.join("top/walked")).unwrap().count(), 0);
    // top and top/walked, the five siblings, 256 below them.
    let want = before + 2 + 5 + 256;
    soon("listings read ahead", want, || listdirs(&m));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        listdirs(&m),
        want,
        "read ahead past the bound; log:\n{}",
        m.log()
    );
}

/// A name a program makes on the server's disk (behind sfsd's back, so no INVALIDATE) shows
/// in a listing once the directory's lease ends: a kept listing lasts no longer. sfsd does not
/// watch its disk here (that is the test below).
#[test]
fn a_name_made_on_the_servers_disk_shows_when_the_directory_lease_ends() {
    need_fuse!();
    let s = setup_serving(None, &[], &["--lease-secs", "1", "--no-disk-watch"]);
    let m = s.mount("mnt");
    let d = m.dir.join("d");
    fs::create_dir(&d).unwrap();
    assert_eq!(fs::read_dir(&d).unwrap().count(), 0);
    fs::write(s.export.join("d/new"), b"n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while fs::read_dir(&d).unwrap().count() == 0 {
        assert!(Instant::now() < deadline, "the new name never showed");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Where sfsd watches its disk (root, the local backend), what a program changes there shows
/// through the mount within moments, though the lease is a minute: a name made in a directory
/// whose listing the mount keeps, a file rewritten whose pages the kernel keeps, a mode
/// changed, a name removed. Without the watch each would show only after the minute.
#[test]
fn changes_on_the_servers_disk_show_through_the_mount_at_once() {
    need_fuse!();
    if !disk_watched() {
        return;
    }
    let s = setup_serving(None, &[], &["--lease-secs", "60"]);
    fs::create_dir(s.export.join("d")).unwrap();
    fs::write(s.export.join("d/f"), b"v1").unwrap();
    let m = s.mount("mnt");
    let d = m.dir.join("d");
    // Listed twice (kept), read (pages kept), attributes cached.
    assert_eq!(names_in(&d), ["f"]);
    assert_eq!(names_in(&d), ["f"]);
    assert_eq!(fs::read(d.join("f")).unwrap(), b"v1");
    assert_eq!(fs::read(d.join("f")).unwrap(), b"v1");
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&d.join("f")), 0o644);

    fs::write(s.export.join("d/new"), b"n").unwrap();
    soon("a name made on the disk", strings(&["f", "new"]), || {
        names_in(&d)
    });
    fs::write(s.export.join("d/f"), b"v2, longer").unwrap();
    soon(
        "a file rewritten on the disk",
        b"v2, longer".to_vec(),
        || fs::read(d.join("f")).unwrap(),
    );
    fs::set_permissions(s.export.join("d/f"), fs::Permissions::from_mode(0o600)).unwrap();
    soon("a mode changed on the disk", 0o600, || mode(&d.join("f")));
    fs::remove_file(s.export.join("d/new")).unwrap();
    soon("a name removed on the disk", strings(&["f"]), || {
        names_in(&d)
    });
    let deadline = Instant::now() + Duration::from_secs(3);
    while d.join("new").exists() {
        assert!(
            Instant::now() < deadline,
            "the removed name is still found; mount log:\n{}",
            m.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A directory stream opened before a name went (its listing a snapshot, as POSIX allows) and
/// read after the mount learnt of the removal must not leave the kernel a dentry of the gone
/// name: the stream may show it, a lookup must not find it.
#[test]
fn a_stream_opened_before_a_removal_leaves_no_dentry_of_the_removed_name() {
    need_fuse!();
    if !disk_watched() {
        return;
    }
    let s = setup_serving(None, &[], &["--lease-secs", "60"]);
    fs::create_dir(s.export.join("d")).unwrap();
    fs::write(s.export.join("d/f"), b"f").unwrap();
    fs::write(s.export.join("d/gone"), b"g").unwrap();
    let m = s.mount("mnt");
    let d = m.dir.join("d");
    assert_eq!(names_in(&d), ["f", "gone"]);
    assert_eq!(names_in(&d), ["f", "gone"]);
    // Opened (the listing taken) but not read yet.
    let early = fs::read_dir(&d).unwrap();
    fs::remove_file(s.export.join("d/gone")).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let late: Vec<String> = early
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(late.contains(&"f".to_string()), "{late:?}");
    assert!(
        !d.join("gone").exists(),
        "a removed name is found after a stale stream's read ({late:?}); log:\n{}",
        m.log()
    );
}

/// A tree walked again within the lease reads no listing again, however many directories it
/// has up to the mount's bound (4096 listings, 65536 entries): 1,100 here, more than the 1,024
/// it once kept, past which a second `ls -lR` of two header trees read every listing again.
/// Counted at the server: the kernel may drop its own copy of a listing under memory pressure
/// (CI once saw it read two again), and the mount then answers from the listing it kept.
#[test]
fn a_tree_of_many_directories_walked_again_reads_no_listing_again() {
    need_fuse!();
    let s = setup();
    const DIRS: usize = 1100;
    for i in 0..DIRS {
        let d = s.export.join(format!("t/d{i:04}"));
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("f"), b"x").unwrap();
    }
    let m = s.mount("mnt");
    // Held open, `t` keeps its name in the kernel, which may otherwise forget it and look it
    // up again: a second miss in the root, which reads the root's listing (lookups_listed.rs).
    let _held_t = fs::File::open(m.dir.join("t")).unwrap();
    let walk = || {
        let mut files = 0;
        for d in fs::read_dir(m.dir.join("t")).unwrap() {
            files += fs::read_dir(d.unwrap().path()).unwrap().count();
        }
        files
    };
    let listings = || requests(&m, "ListDir") + requests(&m, "ReadDirPlus");
    assert_eq!(walk(), DIRS);
    let first = listings();
    assert!(first >= DIRS, "the first walk read {first} listings");
    assert_eq!(walk(), DIRS);
    assert_eq!(
        listings(),
        first,
        "the second walk read {} listings again",
        listings() - first
    );
}

/// Writes `n` files `d/f00`, `d/f01`, ... into `export`, each holding its own name as
/// [`numbered_content`] says.
fn numbered_files(export: &Path, n: usize) {
    fs::create_dir(export.join("d")).unwrap();
    for i in 0..n {
        fs::write(export.join(format!("d/f{i:02}")), format!("file {i:02}")).unwrap();
    }
}

/// What [`numbered_files`] wrote in the file at `p`.
fn numbered_content(p: &Path) -> String {
    format!("file {}", &p.file_name().unwrap().to_str().unwrap()[1..])
}

/// The paths of directory `d`'s entries, in the order its listing gives them.
fn listing_order(d: &Path) -> Vec<PathBuf> {
    fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect()
}

/// Files opened along a listing are read ahead (fuse/files_ahead.rs): `cat` of a directory's
/// files in listing order reads each file from the server once, most of them ahead of their
/// opens, and what was read ahead of a file another client changed since is not served: its
/// new bytes show.
#[test]
fn files_opened_along_a_listing_are_read_ahead_once_and_never_stale() {
    need_fuse!();
    let s = setup();
    const FILES: usize = 40;
    numbered_files(&s.export, FILES);
    let m = s.mount("mnt");
    let other = s.mount("other");
    let d = m.dir.join("d");
    let order = listing_order(&d);
    assert_eq!(order.len(), FILES);
    // Pinned (O_PATH: no OPEN reaches the mount), so the kernel keeps every file's node under
    // memory pressure, and with it the mount's record of the pages the kernel holds.
    let _pinned: Vec<fs::File> = order
        .iter()
        .map(|p| {
            fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH)
                .open(p)
                .unwrap()
        })
        .collect();
    let contents = |p: &Path| String::from_utf8(fs::read(p).unwrap()).unwrap();
    let expected = numbered_content;
    let reads_before = requests(&m, "Read");
    for p in &order {
        assert_eq!(contents(p), expected(p));
    }
    let reads = requests(&m, "Read") - reads_before;
    let ahead = read_ahead(&m);
    assert_eq!(reads, FILES, "READs for {FILES} files ({ahead} read ahead)");
    assert!(ahead >= FILES - 4, "{ahead} of {FILES} files read ahead");

    // A file changed after it was read ahead: its new bytes, not those read ahead.
    let changed = &order[10];
    let before = fs::metadata(changed).unwrap().mtime_nsec();
    for p in &order[..3] {
        assert_eq!(contents(p), expected(p));
    }
    std::thread::sleep(Duration::from_millis(100));
    let theirs = other.dir.join("d").join(changed.file_name().unwrap());
    fs::write(&theirs, b"FILE CHANGED").unwrap();
    soon("the change seen here", true, || {
        fs::metadata(changed).unwrap().mtime_nsec() != before
    });
    for p in &order[3..] {
        let want = if p == changed {
            "FILE CHANGED".to_owned()
        } else {
            expected(p)
        };
        assert_eq!(contents(p), want, "{}", p.display());
    }
    // Files whose pages the kernel keeps are not read ahead again: only the changed one.
    assert!(
        read_ahead(&m) <= ahead + 1,
        "the second walk read ahead {} files",
        read_ahead(&m) - ahead
    );
}

/// A walk of opens going backwards along a listing (git opens its packs' indexes newest
/// first, every third entry) reads the files before ahead from its second step back: the
/// opens after it find their bytes read ahead, and every file reads right.
#[test]
fn files_opened_backwards_along_a_listing_are_read_ahead() {
    need_fuse!();
    let s = setup();
    const FILES: usize = 48;
    numbered_files(&s.export, FILES);
    let m = s.mount("mnt");
    let order = listing_order(&m.dir.join("d"));
    assert_eq!(order.len(), FILES);
    let opened: Vec<&PathBuf> = order.iter().rev().step_by(3).collect();
    for p in &opened {
        assert_eq!(fs::read_to_string(p).unwrap(), numbered_content(p));
    }
    let ahead = read_ahead(&m);
    assert!(
        ahead >= opened.len(),
        "{ahead} files read ahead for {} opens backwards\n{}",
        opened.len(),
        m.log()
    );
}

/// In a directory a walk of the tree stepped into (`grep -r`), the first file opened already
/// reads the next ones ahead, and each file is read from the server once.
#[test]
fn a_walks_first_open_in_a_directory_reads_ahead() {
    need_fuse!();
    let s = setup();
    const FILES: usize = 12;
    fs::create_dir_all(s.export.join("top/sub")).unwrap();
    for i in 0..FILES {
        fs::write(s.export.join(format!("top/sub/f{i:02}")), b"x").unwrap();
    }
    let m = s.mount("mnt");
    let top = m.dir.join("top");
    assert_eq!(fs::read_dir(&top).unwrap().count(), 1);
    let order = listing_order(&top.join("sub"));
    assert_eq!(order.len(), FILES);
    let reads_before = requests(&m, "Read");
    let walk = Instant::now();
    assert_eq!(fs::read(&order[0]).unwrap(), b"x");
    let ahead = read_ahead(&m);
    assert!(
        ahead > 0,
        "nothing read ahead at the first open in a directory stepped into"
    );
    for p in &order[1..] {
        assert_eq!(fs::read(p).unwrap(), b"x");
    }
    // Bytes read ahead serve for 2 s (`read_at_open::KEPT_FOR`): a walk slower than that
    // on a loaded machine reads the late files again, rightly.
    let took = walk.elapsed();
    let reads = requests(&m, "Read") - reads_before;
    if took < Duration::from_millis(1500) {
        assert_eq!(reads, FILES, "{ahead} read ahead, in {took:?}\n{}", m.log());
    } else {
        eprintln!("the walk took {took:?}: {reads} READs for {FILES} files not checked");
    }
}

/// In a `--multi-user` mount, files read ahead along one user's walk serve no other user the
/// server refuses, even one the kernel's own check lets open them: local uid 65534 logs in as
/// server uid 65533, so the kernel sees it owning files the server says it may not read. Its
/// opens must still be the server's answer for it, not the answer or the bytes got for the
/// user whose walk read them ahead.
#[test]
fn files_read_ahead_for_one_user_serve_no_user_the_server_refuses() {
    need_fuse!();
    let root = fs::metadata("/proc/self").unwrap().uid() == 0;
    if !root || Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("SKIPPED: needs root and setpriv to act as other local users");
        return;
    }
    // Server uid 65534 (owns the files) is local uid 65533's login, and server uid 65533 is
    // local uid 65534's: each users-file line has the name of the local user logging in with
    // its key, and the identity files (named after server uids when made) are swapped.
    let (p, q) = (passwd_name(65533), passwd_name(65534));
    let s = setup_grouped(
        None,
        &[
            (&p, 65534, "65534".to_owned()),
            (&q, 65533, "65533".to_owned()),
        ],
    );
    fs::set_permissions(s.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let idents = s.dir.path().join("idents");
    fs::rename(idents.join("65533"), idents.join("swap")).unwrap();
    fs::rename(idents.join("65534"), idents.join("65533")).unwrap();
    fs::rename(idents.join("swap"), idents.join("65534")).unwrap();
    const FILES: usize = 20;
    fs::create_dir(s.export.join("d")).unwrap();
    fs::set_permissions(s.export.join("d"), fs::Permissions::from_mode(0o755)).unwrap();
    for i in 0..FILES {
        let f = s.export.join(format!("d/f{i:02}"));
        fs::write(&f, format!("secret {i:02}")).unwrap();
        std::os::unix::fs::chown(&f, Some(65534), Some(65532)).unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o640)).unwrap();
    }
    let m = s.mount_with(
        "mnt",
        &["--multi-user", "--identities", idents.to_str().unwrap()],
    );
    let d = m.dir.join("d");
    // The reader: local 65533 in group 65532 locally (the kernel lets it read through the
    // group), p at the server (the owner). The refused: local 65534 (the kernel sees the
    // owner), q at the server (neither owner nor in the group).
    let reader = |script: &str| as_ids(65533, 65533, &[65532], script);
    let refused = |script: &str| as_ids(65534, 65534, &[], script);
    let cat = |i: usize| format!("cat {}/f{i:02}", d.display());
    let (ok, err) = refused(&format!("ls {}", d.display()));
    assert!(ok, "{err}\n{}", m.log());
    let (ok, _) = refused(&cat(FILES - 1));
    assert!(!ok, "the server must refuse q the last file");

    // The reader's walk: two files in listing order read the next ones ahead, as p.
    let (ok, listing) = {
        let out = Command::new("setpriv")
            .args([
                "--reuid=65533",
                "--regid=65533",
                "--groups=65532",
                "ls",
                "-f",
            ])
            .arg(&d)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    assert!(ok);
    let order: Vec<&str> = listing.lines().filter(|n| n.starts_with('f')).collect();
    assert_eq!(order.len(), FILES);
    let first_two = format!(
        "cat {0}/{1} {0}/{2} > /dev/null",
        d.display(),
        order[0],
        order[1]
    );
    let (ok, err) = reader(&first_two);
    assert!(ok, "{err}\n{}", m.log());
    soon("files read ahead for the reader", true, || {
        read_ahead(&m) >= 4
    });

    // While their bytes are kept, each open by the refused user is the server's answer for it.
    for name in &order[2..FILES - 1] {
        let (ok, err) = refused(&format!("cat {}/{name}", d.display()));
        assert!(
            !ok,
            "{name} read by a user the server refuses ({err})\n{}",
            m.log()
        );
    }
    // The reader still reads them, and what it reads is each file's.
    for name in &order[2..] {
        let out = Command::new("setpriv")
            .args(["--reuid=65533", "--regid=65533", "--groups=65532", "cat"])
            .arg(d.join(name))
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}\n{}", m.log());
        assert_eq!(out.stdout, format!("secret {}", &name[1..]).into_bytes());
    }
}
/// How many files the mount read ahead ([`files_opened_along_a_listing_are_read_ahead_once_and_never_stale`]).
fn read_ahead(m: &Mount) -> usize {
    m.log()
        .lines()
        .filter_map(|l| l.split("files read ahead files=").nth(1))
        .map(|n| n.trim().parse::<usize>().unwrap())
        .sum()
}

/// A listing kept from before a file had its node still waits for the file's writes under
/// way: `ls -l` right after a write that returned shows the written size, not the listed one.
/// (The listing once remembered the node an entry had when listed, or none, and missed the
/// writes of the node the file has since.) The kernel's own copy of the listing is dropped
/// with `fadvise` so the mount is asked while the write is still held (10 ms at most).
#[test]
fn a_kept_listing_waits_for_writes_of_a_file_made_a_node_since() {
    need_fuse!();
    let s = setup();
    let m = s.mount("mnt");
    let other = s.mount("other");
    let d = m.dir.join("d");
    fs::create_dir(&d).unwrap();
    for i in 0..10 {
        let name = format!("f{i}");
        fs::write(other.dir.join("d").join(&name), b"").unwrap();
        let dir = fs::File::open(&d).unwrap();
        // The listing is read (and kept) while `f{i}` has no node here yet.
        soon("the other mount's file", i + 1, || {
            fs::read_dir(&d).unwrap().count()
        });
        let mut f = fs::OpenOptions::new()
            .write(true)
            .open(d.join(&name))
            .unwrap();
        f.write_all(b"ten bytes!").unwrap();
        rustix::fs::fadvise(&dir, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        for e in fs::read_dir(&d).unwrap() {
            fs::symlink_metadata(e.unwrap().path()).unwrap();
        }
        assert_eq!(
            fs::metadata(d.join(&name)).unwrap().len(),
            10,
            "{name} right after its write"
        );
    }
}

/// Security labels stay on the server's host (fuse/xattr.rs): a `security.selinux` label on
/// the server's disk is `EOPNOTSUPP` through the mount, left out of `listxattr`, and cannot be
/// set through it, while `user.` attributes travel. `ls -l`, told `EOPNOTSUPP` once, stops
/// asking for the label: about one GETXATTR per file reaches the mount (the ACL), not two.
#[test]
fn security_labels_stay_on_the_servers_host() {
    need_fuse!();
    let s = setup();
    const FILES: usize = 100;
    let dir = s.export.join("d");
    dir_of_files(&dir, FILES, 3);
    let flags = rustix::fs::XattrFlags::empty();
    let on_disk = dir.join("f001");
    rustix::fs::setxattr(&on_disk, "user.tag", b"one", flags).unwrap();
    // Root may label a file on a host without SELinux (ext4 and tmpfs keep the label); an
    // ordinary user may not, and the rest of the test still holds.
    let label = b"system_u:object_r:etc_t:s0\0";
    let labelled = rustix::fs::setxattr(&on_disk, "security.selinux", label, flags).is_ok();
    let m = s.mount("mnt");
    let f = m.dir.join("d/f001");
    assert_eq!(getxattr(&f, "security.selinux", 100), Err(libc::EOPNOTSUPP));
    assert_eq!(getxattr(&f, "security.selinux", 0), Err(libc::EOPNOTSUPP));
    assert_eq!(getxattr(&f, "user.tag", 100), Ok(b"one".to_vec()));
    assert_eq!(listxattr(&f), vec!["user.tag"]);
    assert_eq!(
        rustix::fs::setxattr(&f, "security.selinux", b"x\0", flags),
        Err(rustix::io::Errno::OPNOTSUPP)
    );
    assert_eq!(
        rustix::fs::removexattr(&f, "security.selinux"),
        Err(rustix::io::Errno::OPNOTSUPP)
    );
    if labelled {
        assert_eq!(
            getxattr(&on_disk, "security.selinux", 100),
            Ok(label.to_vec())
        );
    }
    let before = kernel_requests(&m, "GETXATTR");
    assert_eq!(ls_l(&m.dir.join("d")).split('\n').count(), FILES + 2);
    let asked = kernel_requests(&m, "GETXATTR") - before;
    // The directory's own (label, ACL, default ACL) and one per file; two per file when
    // the label was answered ENODATA.
    assert!(
        asked <= FILES + 3,
        "ls -l of {FILES} files sent the mount {asked} GETXATTRs"
    );
}

/// A single-user mount does not negotiate `FUSE_POSIX_ACL` (fuse/kernel.rs): that flag makes
/// the kernel check every caller against the modes, and the mount's owner's local ids need
/// not be the server's. Its kernel then neither evaluates nor keeps ACLs, so each `ls -l`
/// asks the mount for every file's ACL again (a multi-user mount's second `ls -l` asks none).
#[test]
fn a_single_user_mount_leaves_acls_to_the_server() {
    need_fuse!();
    let s = setup();
    const FILES: usize = 50;
    dir_of_files(&s.export.join("d"), FILES, 2);
    let m = s.mount("mnt");
    ls_l(&m.dir.join("d"));
    let before = kernel_requests(&m, "GETXATTR");
    ls_l(&m.dir.join("d"));
    let again = kernel_requests(&m, "GETXATTR") - before;
    assert!(
        again >= FILES,
        "ls -l again sent the mount {again} GETXATTRs"
    );
}

/// `ls -l` of a directory costs one request, not one or two per file: the listing (LISTDIR)
/// says which entries have no extended attributes, so the `security.selinux` and
/// `system.posix_acl_access` questions `ls` asks of every file are answered by the mount.
/// Files that have some are still asked about: an ACL and a `user.` attribute set on the
/// server's disk show through the mount (`+` in `ls -l`, `getfattr`).
#[test]
fn ls_l_asks_nothing_of_files_without_extended_attributes() {
    need_fuse!();
    let s = setup();
    let dir = s.export.join("d");
    dir_of_files(&dir, 30, 2);
    let acl = acl_with_a_named_user();
    let flags = rustix::fs::XattrFlags::empty();
    rustix::fs::setxattr(dir.join("f03"), "system.posix_acl_access", &acl, flags).unwrap();
    rustix::fs::setxattr(dir.join("f07"), "user.tag", b"seven", flags).unwrap();
    let m = s.mount("mnt");
    let asked = |m: &Mount| requests(m, "GetXattr") + requests(m, "ListXattr");
    let before = asked(&m);
    let text = ls_l(&m.dir.join("d"));
    for line in text.lines().skip(1) {
        let mode = line.split(' ').next().unwrap();
        let want = if line.ends_with(" f03") {
            "-rw-r-----+"
        } else {
            "-rw-r--r--"
        };
        assert_eq!(mode, want, "{line}");
    }
    assert_eq!(text.lines().count(), 31, "{text}");
    let asked_for = asked(&m) - before;
    // The directory's own three (`ls` asks of the directory it lists), two for each file
    // with attributes; without LISTDIR's answer, two for each of the 30.
    assert!(
        asked_for <= 3 + 2 * 2,
        "{asked_for} GETXATTR/LISTXATTR requests for ls -l of 30 files, 2 with attributes; \
         log:\n{}",
        m.log()
    );
    assert_eq!(
        getxattr(&m.dir.join("d/f07"), "user.tag", 100),
        Ok(b"seven".to_vec())
    );
    assert_eq!(
        getxattr(&m.dir.join("d/f08"), "user.tag", 100),
        Err(libc::ENODATA)
    );
    assert_eq!(listxattr(&m.dir.join("d/f07")), vec!["user.tag"]);
}

/// Writes are answered before the server's answer (fuse/write_behind.rs), and no program can
/// tell: a `utimensat` after the last piece is not overtaken by a piece still under way (the
/// server would move the mtime again), `fstat` and another process's `stat` see the whole
/// size before `close`, the server's disk holds every byte and the mtime set once `close`
/// returns, and another mount reads the file whole. A piece the server refuses (past ext4's
/// largest file: EFBIG) is reported, by the `write` itself or at the latest by `fsync`.
#[test]
fn written_behind_pieces_are_never_overtaken_and_failures_are_reported() {
    need_fuse!();
    let s = setup();
    let a = s.mount("a");
    let b = s.mount("b");
    let piece = vec![7u8; 1 << 20];
    let whole = 8 * piece.len() as u64;
    let when = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    for round in 0..16 {
        let name = format!("f{round}");
        let p = a.dir.join(&name);
        let mut f = fs::File::create(&p).unwrap();
        for _ in 0..8 {
            f.write_all(&piece).unwrap();
        }
        f.set_modified(when).unwrap();
        assert_eq!(f.metadata().unwrap().len(), whole, "{name}");
        assert_eq!(fs::metadata(&p).unwrap().len(), whole, "{name}");
        drop(f);
        let held = fs::metadata(s.export.join(&name)).unwrap();
        assert_eq!((held.len(), held.mtime()), (whole, 1_000_000_000), "{name}");
        assert_eq!(fs::read(b.dir.join(&name)).unwrap().len() as u64, whole);
    }
    use std::os::unix::fs::FileExt;
    let f = fs::File::create(a.dir.join("too-far")).unwrap();
    let failed = match f.write_at(b"x", 17 << 40) {
        Err(e) => e,
        Ok(_) => f.sync_all().unwrap_err(),
    };
    assert_eq!(failed.raw_os_error(), Some(libc::EFBIG), "{failed}");
}

/// A write the mount answered before the server refused it leaves the kernel's pages holding
/// bytes the server does not have: once the file is released, the next open reads the
/// server's bytes, not those pages (`kept_pages.rs`: pages written are kept as read only when
/// no write failed), even when a later write the server took brought attributes. The
/// server's copy is made immutable behind the mount's back (no watch, so no INVALIDATE drops
/// the pages for it).
#[test]
fn pages_of_a_write_the_server_refused_are_not_read_back() {
    need_fuse!();
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIPPED: making a file immutable (chattr +i) needs root");
        return;
    }
    use std::os::unix::fs::FileExt;
    let s = setup_serving(None, &[], &["--no-disk-watch"]);
    let old = vec![b'o'; 3 * 4096];
    let held = s.export.join("f");
    fs::write(&held, &old).unwrap();
    let m = s.mount("mnt");
    let p = m.dir.join("f");
    assert!(fs::read(&p).unwrap() == old);
    let chattr = |flag: &str| {
        let out = Command::new("chattr")
            .arg(flag)
            .arg(&held)
            .output()
            .unwrap();
        assert!(out.status.success(), "chattr {flag}: {out:?}");
    };
    let f = fs::OpenOptions::new().write(true).open(&p).unwrap();
    chattr("+i");
    let refused = match f.write_at(&[b'n'; 4096], 4096) {
        Err(e) => e,
        Ok(_) => f.sync_all().unwrap_err(),
    };
    assert_eq!(errno(&refused), libc::EPERM, "{refused}");
    // A later write the server takes brings attributes the pages would be kept under.
    chattr("-i");
    f.write_all_at(&[b'x'; 4096], 2 * 4096).unwrap();
    f.sync_all().unwrap();
    drop(f);
    // RELEASE goes to the mount behind `close`: let it arrive before the next open.
    std::thread::sleep(Duration::from_millis(300));
    let mut now_held = old.clone();
    now_held[2 * 4096..].fill(b'x');
    assert!(fs::read(&held).unwrap() == now_held);
    assert!(
        fs::read(&p).unwrap() == now_held,
        "the refused page read back\n{}",
        m.log()
    );
}

/// An `open` whose access answer the mount keeps is answered without a request (on the
/// mount's reading thread), and decides as the server did: on a read-only server, opening a
/// file for writing fails every time, the open itself (not a later write), with one ACCESS
/// asked; opening it for reading works every time.
#[test]
fn an_open_answered_from_the_kept_access_answer_decides_as_the_server_did() {
    need_fuse!();
    let s = setup_serving(None, &[], &["--read-only"]);
    fs::write(s.export.join("f"), b"x").unwrap();
    let m = s.mount("m");
    let p = m.dir.join("f");
    // Looked up first: reading the root's listing for it may ask an ACCESS of the root.
    fs::metadata(&p).unwrap();
    let before = requests(&m, "Access");
    for _ in 0..3 {
        let e = fs::OpenOptions::new().append(true).open(&p).unwrap_err();
        assert!(
            matches!(errno(&e), libc::EACCES | libc::EROFS),
            "{e}; log:\n{}",
            m.log()
        );
    }
    assert_eq!(requests(&m, "Access") - before, 1, "log:\n{}", m.log());
    for _ in 0..3 {
        assert_eq!(fs::read(&p).unwrap(), b"x");
    }
}

/// Of a larger file opened for reading, the first bytes and the last are read with the open,
/// in the same flight as its ACCESS: a program reading a header at the start and a trailer at
/// the end (git's pack files) waits for no READ of its own; its read between them goes to the
/// server. Each read gets the file's bytes.
#[test]
fn the_start_of_a_larger_file_is_read_with_its_open() {
    need_fuse!();
    let s = setup();
    let body: Vec<u8> = (0..1_000_000u32).map(|i| (i % 253) as u8).collect();
    fs::write(s.export.join("pack"), &body).unwrap();
    let m = s.mount("m");
    let p = m.dir.join("pack");
    assert_eq!(fs::metadata(&p).unwrap().len(), body.len() as u64);
    let reads = requests(&m, "Read");
    let mut f = fs::File::open(&p).unwrap();
    assert_eq!(
        requests(&m, "Read") - reads,
        2,
        "start and end read with the open; log:\n{}",
        m.log()
    );
    let mut header = [0u8; 12];
    f.read_exact(&mut header).unwrap();
    assert_eq!(header, body[..12]);
    let mut trailer = [0u8; 20];
    f.seek(SeekFrom::Start(body.len() as u64 - 20)).unwrap();
    f.read_exact(&mut trailer).unwrap();
    assert_eq!(trailer, body[body.len() - 20..]);
    assert_eq!(
        requests(&m, "Read") - reads,
        2,
        "the header and trailer reads asked nothing more; log:\n{}",
        m.log()
    );
    let mut all = Vec::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_end(&mut all).unwrap();
    assert!(all == body, "the whole file, read after");
}

/// A small file opened for reading is read with its open: the READ goes in the same flight
/// as the open's ACCESS, and the program's reads ask the server nothing more. Bytes read so
/// are not served once the file changed: after another client's write (its INVALIDATE
/// dropped the kernel's pages), a read of the file opened before gets the new bytes.
#[test]
fn a_small_file_is_read_with_its_open_until_it_changes() {
    need_fuse!();
    let s = setup();
    let body: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    fs::write(s.export.join("f"), &body).unwrap();
    // Made before the mounts: sfsd's watch of its disk would otherwise INVALIDATE whatever
    // the mount learned of it in the meantime, however soon after the write that was.
    fs::write(s.export.join("g"), &body).unwrap();
    let m = s.mount("m");
    let other = s.mount("other");
    let p = m.dir.join("f");
    fs::metadata(&p).unwrap();
    let (reads, accesses) = (requests(&m, "Read"), requests(&m, "Access"));
    let mut f = fs::File::open(&p).unwrap();
    assert_eq!(requests(&m, "Access") - accesses, 1, "log:\n{}", m.log());
    assert_eq!(
        requests(&m, "Read") - reads,
        1,
        "read with the open; log:\n{}",
        m.log()
    );
    let mut got = Vec::new();
    f.read_to_end(&mut got).unwrap();
    assert_eq!(got, body);
    assert_eq!(
        requests(&m, "Read") - reads,
        1,
        "read again; log:\n{}",
        m.log()
    );
    drop(f);

    // Opened (and read with its open: a file not opened before, whose access answer the
    // mount does not keep yet) before another client's write, read after it.
    let p = m.dir.join("g");
    fs::metadata(&p).unwrap();
    let reads = requests(&m, "Read");
    let stale = fs::File::open(&p).unwrap();
    assert_eq!(
        requests(&m, "Read") - reads,
        1,
        "read with the open; log:\n{}",
        m.log()
    );
    let fresh: Vec<u8> = body.iter().map(|b| b ^ 0xff).collect();
    fs::write(other.dir.join("g"), &fresh).unwrap();
    soon("the other client's write seen", true, || {
        fs::metadata(&p).unwrap().modified().unwrap()
            == fs::metadata(other.dir.join("g"))
                .unwrap()
                .modified()
                .unwrap()
    });
    let mut got = Vec::new();
    (&stale).read_to_end(&mut got).unwrap();
    assert_eq!(
        got, fresh,
        "bytes read with the open served after the file changed"
    );
}

/// A file written in pieces, as `tar` writes (10 KiB records), reaches the server as one
/// WRITE, sent when it is closed; another client sees every byte after the close. A file
/// left open reaches the server anyway, within moments.
#[test]
fn a_file_written_in_pieces_goes_as_one_write() {
    need_fuse!();
    let s = setup();
    let m = s.mount("m");
    let other = s.mount("other");
    let body: Vec<u8> = (0..40 * 1024u32).map(|i| (i % 253) as u8).collect();
    // A held write also goes after 10-20 ms, so a writer stalled that long between pieces
    // (a loaded machine) sends two: one file of three must go as one WRITE.
    let mut sent = Vec::new();
    for name in ["f", "f2", "f3"] {
        let writes = requests(&m, "Write");
        let mut f = fs::File::create(m.dir.join(name)).unwrap();
        for piece in body.chunks(10 * 1024) {
            f.write_all(piece).unwrap();
        }
        drop(f);
        sent.push(requests(&m, "Write") - writes);
        assert_eq!(fs::read(other.dir.join(name)).unwrap(), body);
        if sent.last() == Some(&1) {
            break;
        }
    }
    assert_eq!(
        sent.last(),
        Some(&1),
        "WRITEs per file: {sent:?}; log:\n{}",
        m.log()
    );

    // Left open: on the server without a close.
    let mut f = fs::File::create(m.dir.join("g")).unwrap();
    f.write_all(b"still open").unwrap();
    soon("a held write sent without a close", true, || {
        fs::read(s.export.join("g")).unwrap() == b"still open"
    });
    drop(f);
}

/// The CPUs in a `/proc` CPU list (`0-3,6`).
fn cpu_list(list: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        cpus.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap());
    }
    cpus
}

/// The `Cpus_allowed_list` of a `/proc/.../status` file.
fn allowed_cpus(status: &Path) -> Vec<usize> {
    let status = fs::read_to_string(status).unwrap();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap();
    cpu_list(list)
}

/// The `/proc` directories of the mount process `pid`'s threads that read the kernel's
/// requests (fuser's `fuser-N`).
fn reader_threads(pid: u32) -> Vec<PathBuf> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|t| t.unwrap().path())
        .filter(|t| fs::read_to_string(t.join("comm")).is_ok_and(|c| c.starts_with("fuser-")))
        .collect()
}

/// The mount reads the kernel's requests with one thread per CPU, each pinned to its own
/// CPU (client README: a request is then often read on its caller's CPU).
#[test]
fn the_kernels_requests_are_read_by_one_thread_pinned_to_each_cpu() {
    need_fuse!();
    let s = setup();
    let a = s.mount("a");
    let ours = allowed_cpus(Path::new("/proc/self/status"));
    let cpus = std::thread::available_parallelism().unwrap().get();
    let mut readers: Vec<Vec<usize>> = reader_threads(a.pid)
        .iter()
        .map(|t| allowed_cpus(&t.join("status")))
        .collect();
    readers.sort();
    assert_eq!(readers.len(), cpus.min(16), "{readers:?}");
    if ours.len() == cpus && cpus <= 16 {
        let want: Vec<Vec<usize>> = ours.iter().map(|&c| vec![c]).collect();
        assert_eq!(readers, want, "one reader pinned to each CPU");
    }
    // And it serves as before.
    fs::write(a.dir.join("f"), b"x").unwrap();
    assert_eq!(fs::read(a.dir.join("f")).unwrap(), b"x");
}

/// While a program's requests keep to one CPU, only the reader pinned to that CPU reads them
/// (fuser's `duty.rs`, vendored): the kernel hands requests to the waiting readers in turn,
/// and every other one would otherwise wake a thread on another CPU.
#[test]
fn a_program_on_one_cpu_has_its_requests_read_on_that_cpu() {
    need_fuse!();
    let ours = allowed_cpus(Path::new("/proc/self/status"));
    let cpus = std::thread::available_parallelism().unwrap().get();
    if ours.len() < 2 || ours.len() != cpus || cpus > 16 {
        eprintln!("skipped: needs 2-16 CPUs, all of them ours ({ours:?} of {cpus})");
        return;
    }
    let s = setup();
    let a = s.mount("a");
    let f = a.dir.join("f");
    fs::write(&f, b"x").unwrap();
    let home = ours[0];
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET and sched_setaffinity are given
    // the set's address and size; 0 is this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(home, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set),
            0
        );
    }
    // A request the mount answers itself (no file it made has a capability).
    let ask = || assert_eq!(getxattr(&f, "security.capability", 0), Err(libc::ENODATA));
    // Long enough for the mount's looks (one every 4 ms, four agreeing) to settle.
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_millis(100) {
        ask();
    }
    // Requests read by each reader: its switches, as a reader sleeps in between.
    let reads = || -> Vec<(usize, u64)> {
        let mut r = Vec::new();
        for task in reader_threads(a.pid) {
            let status = fs::read_to_string(task.join("status")).unwrap();
            let switches: u64 = status
                .lines()
                .filter(|l| l.contains("ctxt_switches"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum();
            r.push((allowed_cpus(&task.join("status"))[0], switches));
        }
        r.sort();
        r
    };
    let before = reads();
    for _ in 0..2000 {
        ask();
    }
    let after = reads();
    let (mut here, mut elsewhere) = (0, 0);
    for ((cpu, b), (_, a)) in before.iter().zip(&after) {
        if *cpu == home {
            here += a - b;
        } else {
            elsewhere += a - b;
        }
    }
    assert!(
        here >= 500 && elsewhere * 4 < here,
        "of 2000 requests from CPU {home}, its reader woke {here} times, the others {elsewhere}"
    );
}

/// A new file's times and mode, set right after its last write, go to the server right behind
/// that WRITE rather than a round trip after its reply (protocol version 13 and up: the
/// server applies a SETATTR after the WRITEs of its file that came before it): with the
/// server stopped, `close` has sent both, and the two changes as one SETATTR. Afterwards the
/// server's file has the times and mode, which a SETATTR applied before the WRITE would lose.
#[test]
fn a_new_files_setattr_goes_right_behind_its_write() {
    need_fuse!();
    let s = setup();
    let a = s.mount("a");
    let mut f = fs::File::options()
        .write(true)
        .create_new(true)
        .open(a.dir.join("timed"))
        .unwrap();
    let (writes, setattrs) = (requests(&a, "Write"), requests(&a, "SetAttr"));
    let stopped = Stopped::server(&s);
    f.write_all(b"stamped").unwrap();
    let mtime = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000);
    f.set_modified(mtime).unwrap();
    f.set_permissions(fs::Permissions::from_mode(0o600))
        .unwrap();
    // close waits for the server (close-to-open): on another thread.
    let closing = std::thread::spawn(move || drop(f));
    let deadline = Instant::now() + Duration::from_secs(10);
    while requests(&a, "Write") == writes || requests(&a, "SetAttr") == setattrs {
        assert!(
            Instant::now() < deadline,
            "the SETATTR waited for the WRITE's reply; log:\n{}",
            a.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(stopped);
    closing.join().unwrap();
    let m = fs::metadata(s.export.join("timed")).unwrap();
    assert_eq!(
        (m.mtime(), m.mode() & 0o7777, m.len()),
        (1_000_000, 0o600, 7)
    );
    assert_eq!(requests(&a, "SetAttr") - setattrs, 1, "{}", a.log());
}

/// `tar x` sets each file's times, owner and mode on the open file right after writing it:
/// for a file this mount just made, those are answered at once and reach the server as one
/// SETATTR behind the file's writes (fuse/attrs_behind.rs). Once `tar` returns, the server's
/// disk and another mount show every file's bytes, mode and mtime. A change the server could
/// refuse or alter (a setuid bit) is still the server's to answer, at once.
#[test]
fn a_new_files_times_owner_and_mode_go_behind_its_writes_as_one_setattr() {
    need_fuse!();
    let s = setup();
    let a = s.mount("a");
    let b = s.mount("b");
    let src = s.dir.path().join("tree/t");
    fs::create_dir_all(&src).unwrap();
    let files = 30;
    let mode_of = |i: u32| [0o644, 0o755, 0o600, 0o444][i as usize % 4];
    let mtime_of = |i: u32| 1_000_000_000 + i64::from(i) * 1000;
    for i in 0..files {
        let p = src.join(format!("f{i}"));
        fs::write(&p, vec![i as u8; 5000 + i as usize * 700]).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode_of(i))).unwrap();
        let when = std::time::UNIX_EPOCH + Duration::from_secs(mtime_of(i) as u64);
        fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(when)
            .unwrap();
    }
    let archive = s.dir.path().join("t.tar");
    let made = Command::new("tar")
        .arg("-cf")
        .arg(&archive)
        .arg("-C")
        .arg(s.dir.path().join("tree"))
        .arg("t")
        .status()
        .unwrap();
    assert!(made.success());
    let before = requests(&a, "SetAttr");
    let out = Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(&a.dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for i in 0..files {
        let name = format!("t/f{i}");
        let want = fs::read(src.join(format!("f{i}"))).unwrap();
        for seen in [s.export.join(&name), b.dir.join(&name)] {
            let m = fs::metadata(&seen).unwrap();
            assert_eq!(
                (m.mode() & 0o7777, m.mtime()),
                (mode_of(i), mtime_of(i)),
                "{}",
                seen.display()
            );
            assert_eq!(fs::read(&seen).unwrap(), want, "{}", seen.display());
        }
    }
    let setattrs = requests(&a, "SetAttr") - before;
    // Three a file (`utimensat`, `fchown` as root, `fchmod`) and three for the directory when
    // each went on its own; now one a file, or two where the first went before the next came.
    assert!(
        setattrs <= 2 * files as usize + 3,
        "{setattrs} SETATTRs for {files} files and a directory; log:\n{}",
        a.log()
    );

    // Close-to-open holds for a change answered early; a setuid bit is the server's to set.
    let p = a.dir.join("own");
    let mut f = fs::File::options()
        .write(true)
        .create_new(true)
        .open(&p)
        .unwrap();
    f.write_all(b"mine").unwrap();
    f.set_permissions(fs::Permissions::from_mode(0o640))
        .unwrap();
    let when = std::time::UNIX_EPOCH + Duration::from_secs(1_234_567_890);
    f.set_modified(when).unwrap();
    assert_eq!(
        f.metadata().unwrap().mtime(),
        1_234_567_890,
        "fstat waits for it"
    );
    f.set_permissions(fs::Permissions::from_mode(0o4750))
        .unwrap();
    let held = fs::metadata(s.export.join("own")).unwrap();
    assert_eq!(
        held.mode() & 0o7777,
        0o4750,
        "set by the server before chmod returned"
    );
    drop(f);
    let held = fs::metadata(s.export.join("own")).unwrap();
    assert_eq!(
        (held.mode() & 0o7777, held.mtime()),
        (0o4750, 1_234_567_890)
    );
}

/// A directory's attributes after a change of its names through this mount are the ones the
/// server's reply to that change carried: a `stat` of the directory right after (git stats
/// `.git` between its lock files' creates, renames and removals) asks the server nothing,
/// and shows the change (mtime, link count). Another mount's change still shows at once.
#[test]
fn a_directorys_attributes_after_our_change_of_its_names_come_with_the_reply() {
    need_fuse!();
    let s = setup();
    let a = s.mount("a");
    let b = s.mount("b");
    let d = a.dir.join("d");
    fs::create_dir(&d).unwrap();
    let _held = fs::File::open(&d).unwrap();
    let before = requests(&a, "GetAttr");
    let mut last = fs::metadata(&d).unwrap();
    let changed = |last: &fs::Metadata, now: &fs::Metadata| {
        (now.mtime(), now.mtime_nsec()) != (last.mtime(), last.mtime_nsec())
            || now.nlink() != last.nlink()
    };
    for step in [
        "create", "mkdir", "rename", "link", "remove", "rmdir", "symlink",
    ] {
        std::thread::sleep(Duration::from_millis(20));
        match step {
            "create" => fs::write(d.join("f.lock"), b"x").unwrap(),
            "mkdir" => fs::create_dir(d.join("sub")).unwrap(),
            "rename" => fs::rename(d.join("f.lock"), d.join("f")).unwrap(),
            "link" => fs::hard_link(d.join("f"), d.join("g")).unwrap(),
            "remove" => fs::remove_file(d.join("g")).unwrap(),
            "rmdir" => fs::remove_dir(d.join("sub")).unwrap(),
            _ => std::os::unix::fs::symlink("f", d.join("l")).unwrap(),
        }
        let now = fs::metadata(&d).unwrap();
        assert!(changed(&last, &now), "the directory after {step}");
        assert_eq!(
            (now.mtime(), now.mtime_nsec(), now.nlink()),
            {
                let on_disk = fs::metadata(s.export.join("d")).unwrap();
                (on_disk.mtime(), on_disk.mtime_nsec(), on_disk.nlink())
            },
            "as on the server after {step}"
        );
        last = now;
    }
    assert_eq!(
        requests(&a, "GetAttr"),
        before,
        "GETATTRs of the directory after 7 changes of its names\n{}",
        a.log()
    );
    fs::write(b.dir.join("d/from_b"), b"b").unwrap();
    let on_disk = fs::metadata(s.export.join("d")).unwrap();
    soon(
        "A's view of d after B's create",
        on_disk.mtime_nsec(),
        || fs::metadata(&d).unwrap().mtime_nsec(),
    );
}

/// A file made by `open(O_CREAT)` without `O_EXCL` (a shell's `>`, a compiler's output,
/// `unzip`, Python's `open(..., "w")`) is known new as one made with `O_EXCL` is: the
/// kernel's `security.capability` probe before its first write is answered by the mount, and
/// so is its maker's reading it back. And where the kernel took a name for absent that the server has (made on the server's disk
/// behind a kept listing, no watch telling), `O_TRUNC` still truncates the file there.
#[test]
fn a_file_made_without_o_excl_is_known_new_and_o_trunc_holds_on_a_name_that_appeared() {
    need_fuse!();
    let s = setup_serving(None, &[], &["--no-disk-watch"]);
    let m = s.mount("mnt");
    let d = m.dir.join("d");
    fs::create_dir(&d).unwrap();
    let _held = fs::File::open(&d).unwrap();
    let before = requests(&m, "GetXattr");
    for i in 0..5 {
        fs::write(d.join(format!("out{i}")), b"built").unwrap();
    }
    assert_eq!(
        requests(&m, "GetXattr"),
        before,
        "capability probes of 5 files made by O_CREAT|O_TRUNC\n{}",
        m.log()
    );
    for i in 0..5 {
        assert_eq!(
            fs::read(s.export.join(format!("d/out{i}"))).unwrap(),
            b"built"
        );
    }
    // Read back by their maker (a linker reading a compiler's output): its owner bits say
    // it may, the kernel's pages the writes filled are the file's, and the last page,
    // written in part (which the kernel keeps as not read), is answered from what was
    // written: no ACCESS, no READ.
    let object: Vec<u8> = (0..3 * 4096 + 100u32).map(|i| (i % 251) as u8).collect();
    for i in 0..5 {
        fs::write(d.join(format!("obj{i}")), &object).unwrap();
    }
    let asked = (requests(&m, "Access"), requests(&m, "Read"));
    for i in 0..5 {
        assert!(fs::read(d.join(format!("obj{i}"))).unwrap() == object);
    }
    assert_eq!(
        (requests(&m, "Access"), requests(&m, "Read")),
        asked,
        "(ACCESS, READ) requests to read back 5 files just made\n{}",
        m.log()
    );
    // Another mount's write to one of them is read.
    let other = s.mount("other");
    fs::write(other.dir.join("d/obj0"), b"rebuilt by another").unwrap();
    soon(
        "the other mount's write read back",
        b"rebuilt by another".to_vec(),
        || fs::read(d.join("obj0")).unwrap(),
    );

    // The kept listing of `d` answers `late` absent; it is made on the disk meanwhile.
    assert!(!d.join("late").exists());
    fs::write(s.export.join("d/late"), b"old and longer").unwrap();
    assert!(!d.join("late").exists(), "the listing is kept (no watch)");
    fs::write(d.join("late"), b"new").unwrap();
    assert_eq!(
        fs::read(s.export.join("d/late")).unwrap(),
        b"new",
        "truncated"
    );
}

/// What creating a file costs through the mount, as `tar x` and `cp -r` create them: in a
/// directory this mount made, no LOOKUP reaches the server (the directory is fresh: every name
/// in it is one of ours), neither does the kernel's `security.capability` probe before the
/// first write and before a chown (a new file has none), and `close` sends no COMMIT (the
/// server's fsync); `fsync` still does. And what must hold all the same: another mount reads
/// each file whole right after its close (close-to-open), a name another mount creates in
/// the fresh directory is seen at once (its INVALIDATE ends the freshness), and data closed
/// but never fsynced survives a crash of sfsd (it is in the server's kernel).
#[test]
fn creating_files_costs_no_lookup_capability_or_commit_request() {
    need_fuse!();
    // Without the watch of the server's file system: other tests running beside change
    // files on the same file system, and an event for one of theirs deleted while its inode
    // number is given to one of ours can end our file's lease (a harmless INVALIDATE that
    // drops what the mount knows of it, and would send a GETXATTR counted here).
    let mut s = setup_serving(None, &[], &["--no-disk-watch"]);
    let a = s.mount("a");
    let b = s.mount("b");
    let d = a.dir.join("d");
    fs::create_dir(&d).unwrap();
    let counts = |m: &Mount| {
        (
            requests(m, "Lookup"),
            requests(m, "GetXattr"),
            requests(m, "Commit"),
        )
    };
    // Open directories keep their names in the kernel, which may otherwise forget them under
    // memory pressure and look them up again (a LOOKUP of `d` goes to the server).
    let _held_d = fs::File::open(&d).unwrap();
    let before = counts(&a);
    fs::create_dir(d.join("sub")).unwrap();
    let _held_sub = fs::File::open(d.join("sub")).unwrap();
    let (uid, gid) = (rustix::process::geteuid(), rustix::process::getegid());
    for i in 0..20 {
        let name = format!("f{i}");
        let path = if i % 2 == 0 {
            d.join(&name)
        } else {
            d.join("sub").join(&name)
        };
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        f.write_all(name.as_bytes()).unwrap();
        std::os::unix::fs::fchown(&f, Some(uid.as_raw()), Some(gid.as_raw())).unwrap();
        drop(f);
        let seen = b.dir.join(path.strip_prefix(&a.dir).unwrap());
        assert_eq!(
            fs::read(&seen).unwrap(),
            name.as_bytes(),
            "{}",
            seen.display()
        );
    }
    assert_eq!(
        counts(&a),
        before,
        "(LOOKUP, GETXATTR, COMMIT) requests for 20 new files in directories this mount made; \
         log:\n{}",
        a.log()
    );
    let mut f = fs::OpenOptions::new()
        .append(false)
        .write(true)
        .open(d.join("f0"))
        .unwrap();
    f.write_all(b"F0").unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(requests(&a, "Commit"), before.2 + 1, "fsync commits");

    // Listings still come from the server.
    assert_eq!(names_in(&d).len(), 11);

    // Another mount's name in the fresh directory: A's INVALIDATE ends what A knew.
    fs::write(b.dir.join("d/from_b"), b"b").unwrap();
    soon("A's view of d/from_b", true, || d.join("from_b").exists());
    assert_eq!(fs::read(d.join("from_b")).unwrap(), b"b");
    soon("A's listing of d", 12, || names_in(&d).len());
    // And a name of ours.
    fs::write(d.join("ours"), b"o").unwrap();
    assert!(names_in(&d).contains(&"ours".to_string()));

    // Closed, never fsynced, and sfsd killed: the data is in the server's kernel.
    fs::write(d.join("unsynced"), b"kept by the page cache").unwrap();
    s.server.kill();
    s.server.restart();
    assert_eq!(
        fs::read(s.export.join("d/unsynced")).unwrap(),
        b"kept by the page cache"
    );
    assert_eq!(
        fs::read(d.join("unsynced")).unwrap(),
        b"kept by the page cache"
    );
}

/// The next sfsd of `s`, started by a shell forked now that waits for the returned gate file
/// to exist: forked while a file of the mount is open for writing, a process would flush it
/// as it execs, and an exec'ing sfsd would wait on itself. Swap it into `s.server.child`
/// once the gate is opened.
fn restart_gate(s: &Setup) -> (PathBuf, Guard) {
    let gate = s.dir.path().join("gate");
    let _ = fs::remove_file(&gate);
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(r#"while [ ! -e "$1" ]; do sleep 0.02; done; shift; exec "$@""#)
        .arg("sh")
        .arg(&gate)
        .arg(sfsd())
        .arg("serve")
        .arg("--state")
        .arg(&s.server.state)
        .arg("--export")
        .arg(&s.server.export)
        .args([
            "--listen",
            &format!("127.0.0.1:{}", s.server.port),
            "--workers",
            "2",
        ])
        .args(&s.server.extra)
        .stdout(std::process::Stdio::null());
    (gate, Guard(cmd.spawn().unwrap()))
}

#[test]
fn server_restart_under_a_reader_and_a_lost_server() {
    need_fuse!();
    let mut s = setup();
    let m = s.mount("mnt");
    let payload = data(8 << 20, 3);
    fs::write(m.dir.join("f"), &payload).unwrap();
    let want = sha256_file(&m.dir.join("f"));

    // A reader keeps opening and reading the file while the server is killed and restarted.
    let path = m.dir.join("f");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let want2 = want.clone();
    let reader = std::thread::spawn(move || {
        let mut rounds = 0;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            let got = sha256_file(&path);
            assert_eq!(got, want2, "read {rounds} returned other data");
            rounds += 1;
        }
        rounds
    });
    std::thread::sleep(Duration::from_millis(300));
    s.server.kill();
    std::thread::sleep(Duration::from_millis(700));
    s.server.restart();
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = reader
        .join()
        .expect("the reader saw an error or wrong data");
    assert!(rounds >= 2, "only {rounds} reads");

    // Unstable writes across a restart of sfsd.
    let (gate, mut helper) = restart_gate(&s);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(m.dir.join("f"))
        .unwrap();
    f.write_all(b"before").unwrap();
    // Answered by the server about to die: the write is answered once registered and goes
    // out behind (fuse/write_behind.rs). A GETATTR waits for the file's writes under way, and
    // `write` left the kernel's size stale.
    f.metadata().unwrap();
    s.server.kill();
    fs::write(&gate, b"").unwrap();
    f.write_all(b"after").unwrap(); // waits for the new server
    // sfsd restarted, its machine did not: what the old one answered is in the kernel's page
    // cache there, and the write verifier (the boot's) is the same, so fsync succeeds. (A
    // verifier that changed, as after a reboot, makes it fail: `fuse/data.rs`'s tests.)
    if let Err(e) = f.sync_all() {
        panic!("fsync after a restart of sfsd: {e}; log:\n{}", m.log());
    }
    drop(f);
    assert_eq!(&fs::read(s.export.join("f")).unwrap()[..11], b"beforeafter");
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(m.dir.join("f"))
        .unwrap();
    f.write_all(b"again").unwrap();
    f.sync_all().unwrap();
    drop(f);
    std::mem::swap(&mut s.server.child, &mut helper.0);

    // A lost server: EIO after the reconnect attempts, not a hang, and the mount stays.
    s.server.kill();
    let t = Instant::now();
    let e = fs::read(m.dir.join("f")).unwrap_err();
    assert_eq!(errno(&e), libc::EIO, "{e}");
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
    assert!(is_sfs_mount(&m.dir) && m.alive());
    // Back again: service resumes by itself.
    s.server.restart();
    assert_eq!(
        fs::metadata(m.dir.join("f")).unwrap().len(),
        payload.len() as u64
    );
    assert!(m.log().contains("mounted on"), "{}", m.log());
}

/// sfsd killed and started again while a program writes a file: the WRITEs under way
/// when it died are sent again to the new one (the same bytes at the same place: done twice
/// they leave what once does), and the verifier is unchanged (the machine did not restart),
/// so the program's writes and `close` succeed and the file is whole.
#[test]
fn a_file_written_across_a_restart_of_sfsd_is_whole() {
    need_fuse!();
    let mut s = setup();
    let m = s.mount("mnt");
    let payload = data(24 << 20, 9);
    let path = m.dir.join("big");
    let (gate, mut helper) = restart_gate(&s);
    let writer = {
        let (path, payload) = (path.clone(), payload.clone());
        std::thread::spawn(move || -> std::io::Result<()> {
            let mut f = fs::File::create(&path)?;
            for chunk in payload.chunks(1 << 20) {
                f.write_all(chunk)?;
            }
            f.sync_all()
        })
    };
    let on_server = s.export.join("big");
    wait_for(
        "the first MiBs on the server",
        Duration::from_secs(30),
        || fs::metadata(&on_server).is_ok_and(|md| md.len() >= 2 << 20),
    );
    s.server.kill();
    assert!(
        !writer.is_finished(),
        "the file was written before sfsd was killed"
    );
    std::thread::sleep(Duration::from_millis(300));
    fs::write(&gate, b"").unwrap();
    std::mem::swap(&mut s.server.child, &mut helper.0);
    writer
        .join()
        .unwrap()
        .unwrap_or_else(|e| panic!("writing across the restart: {e}; log:\n{}", m.log()));
    for (what, p) in [("on the server", &on_server), ("through the mount", &path)] {
        let got = fs::read(p).unwrap();
        let differs = got.iter().zip(&payload).position(|(a, b)| a != b);
        assert!(
            got.len() == payload.len() && differs.is_none(),
            "the file {what}: {} of {} bytes, first difference at {differs:?}",
            got.len(),
            payload.len()
        );
    }
}

#[test]
fn signals_and_a_dead_process_leave_no_mount_behind() {
    need_fuse!();
    let s = setup();
    // SIGTERM: a clean unmount, even with a file open.
    let m = s.mount("term");
    let open = fs::File::open(&m.dir).unwrap();
    Command::new("kill")
        .args(["-TERM", &m.pid.to_string()])
        .status()
        .unwrap();
    wait_for("SIGTERM to unmount", Duration::from_secs(10), || {
        !is_sfs_mount(&m.dir)
    });
    wait_for("the process to exit", Duration::from_secs(10), || {
        !m.alive()
    });
    drop(open);
    assert!(
        fs::metadata(&m.dir).unwrap().is_dir(),
        "the plain directory is back"
    );

    // SIGKILL: auto_unmount removes the mount; no "Transport endpoint is not connected".
    let m = s.mount("kill");
    Command::new("kill")
        .args(["-KILL", &m.pid.to_string()])
        .status()
        .unwrap();
    wait_for("the dead mount to go", Duration::from_secs(10), || {
        !is_sfs_mount(&m.dir)
    });
    assert!(fs::metadata(&m.dir).unwrap().is_dir());

    // Mounting again on the same directory works.
    let m2 = s.mount("kill");
    fs::write(m2.dir.join("again"), b"1").unwrap();
    assert_eq!(fs::read(s.export.join("again")).unwrap(), b"1");
}

#[test]
fn large_directory_listing_and_inode_numbers() {
    need_fuse!();
    let s = setup();
    let m = s.mount("mnt");
    let d = m.dir.join("many");
    fs::create_dir(&d).unwrap();
    for i in 0..400 {
        fs::write(d.join(format!("f{i:03}")), i.to_string()).unwrap();
    }
    let t = Instant::now();
    let listed = ls_l(&d).lines().count();
    let took = t.elapsed();
    assert_eq!(listed, 401, "400 entries and the total line");
    eprintln!(
        "ls -l of 400 entries: {:.0} ms",
        took.as_secs_f64() * 1000.0
    );
    // readdir's inode numbers agree with stat's (READDIRPLUS entries are the kernel's inodes).
    for e in fs::read_dir(&d).unwrap() {
        let e = e.unwrap();
        use std::os::unix::fs::DirEntryExt;
        assert_eq!(
            e.ino(),
            fs::metadata(e.path()).unwrap().ino(),
            "{:?}",
            e.file_name()
        );
    }
    // Entries another client adds or removes show up in the next listing (its INVALIDATE
    // ends the listing kept here).
    let other = s.mount("other");
    fs::remove_file(other.dir.join("many/f000")).unwrap();
    fs::write(other.dir.join("many/new"), b"n").unwrap();
    soon(
        "the listing after another mount's changes",
        (true, false),
        || {
            let names: Vec<_> = fs::read_dir(&d)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            (
                names.contains(&"new".to_owned()),
                names.contains(&"f000".to_owned()),
            )
        },
    );
    for e in fs::read_dir(&d).unwrap() {
        let e = e.unwrap();
        use std::os::unix::fs::DirEntryExt;
        assert_eq!(e.ino(), fs::metadata(e.path()).unwrap().ino());
    }
    assert_eq!(fs::read(d.join("new")).unwrap(), b"n");
    assert_eq!(fs::read(d.join("f399")).unwrap(), b"399");
}

/// Runs `sh -c script` as local uid (= gid) `uid`: whether it succeeded, and its stderr.
fn as_uid(uid: u32, script: &str) -> (bool, String) {
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            "--clear-groups",
            "sh",
            "-c",
            script,
        ])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `sh -c script` as local uid `uid` with effective gid `gid` and supplementary
/// `groups`: whether it succeeded, and its stderr.
fn as_ids(uid: u32, gid: u32, groups: &[u32], script: &str) -> (bool, String) {
    let groups: Vec<String> = groups.iter().map(u32::to_string).collect();
    let mut c = Command::new("setpriv");
    c.args([&format!("--reuid={uid}"), &format!("--regid={gid}")]);
    if groups.is_empty() {
        c.arg("--clear-groups");
    } else {
        c.arg(format!("--groups={}", groups.join(",")));
    }
    let out = c.args(["sh", "-c", script]).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue 26, point 5: in a `--multi-user` mount a process acts with its own groups, within
/// what the users file grants its user: it reads a group-readable file only while it has the
/// group locally (and the users file grants it), `chgrp` goes to such a group only, and what
/// it creates gets its effective gid.
#[test]
fn multi_user_processes_act_with_their_own_groups() {
    need_fuse!();
    let root = fs::metadata("/proc/self").unwrap().uid() == 0;
    if !root || Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("SKIPPED: needs root and setpriv to act as other local users");
        return;
    }
    // Local uid 65534 logs in as 65534 with groups 65534 and 65531 (not 65532).
    let name = passwd_name(65534);
    let s = setup_grouped(None, &[(&name, 65534, "65534,65531".to_owned())]);
    fs::set_permissions(s.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    for (f, gid) in [("g31", 65531), ("g32", 65532)] {
        fs::write(s.export.join(f), f).unwrap();
        std::os::unix::fs::chown(s.export.join(f), Some(0), Some(gid)).unwrap();
        fs::set_permissions(s.export.join(f), fs::Permissions::from_mode(0o640)).unwrap();
    }
    fs::create_dir(s.export.join("shared")).unwrap();
    fs::set_permissions(s.export.join("shared"), fs::Permissions::from_mode(0o777)).unwrap();
    let idents = s.dir.path().join("idents");
    let m = s.mount_with(
        "mnt",
        &["--multi-user", "--identities", idents.to_str().unwrap()],
    );
    let d = &m.dir;
    let cat = |f: &str| format!("cat {}/{f}", d.display());

    // Without group 65531 locally, its file is not readable, although the users file grants
    // the group; with it, it is; 65532 is never granted, whatever the process has.
    let (ok, _) = as_ids(65534, 65534, &[], &cat("g31"));
    assert!(
        !ok,
        "a process without the group must not read\n{}",
        m.log()
    );
    let (ok, err) = as_ids(65534, 65534, &[65531], &cat("g31"));
    assert!(ok, "{err}\n{}", m.log());
    let (ok, _) = as_ids(65534, 65534, &[65531, 65532], &cat("g32"));
    assert!(!ok, "a group the users file does not grant is not gained");

    // What a process creates gets its effective gid.
    let (ok, err) = as_ids(
        65534,
        65531,
        &[65531],
        &format!("echo new > {}/shared/new", d.display()),
    );
    assert!(ok, "{err}\n{}", m.log());
    let meta = fs::metadata(s.export.join("shared/new")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (65534, 65531));

    // chgrp to a group the process has (and the users file grants), not to one it lacks.
    let (ok, err) = as_ids(
        65534,
        65534,
        &[],
        &format!("echo mine > {}/shared/mine", d.display()),
    );
    assert!(ok, "{err}");
    assert_eq!(
        fs::metadata(s.export.join("shared/mine")).unwrap().gid(),
        65534
    );
    let chgrp = format!("chgrp 65531 {}/shared/mine", d.display());
    let (ok, _) = as_ids(65534, 65534, &[], &chgrp);
    assert!(!ok, "chgrp to a group the process lacks");
    assert_eq!(
        fs::metadata(s.export.join("shared/mine")).unwrap().gid(),
        65534
    );
    let (ok, err) = as_ids(65534, 65534, &[65531], &chgrp);
    assert!(ok, "{err}\n{}", m.log());
    assert_eq!(
        fs::metadata(s.export.join("shared/mine")).unwrap().gid(),
        65531
    );
}

#[test]
fn many_users_on_one_stream() {
    need_fuse!();
    let root = fs::metadata("/proc/self").unwrap().uid() == 0;
    if !root || Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("SKIPPED: needs root and setpriv to act as other local users");
        return;
    }
    // Local uid 65534 has a key the server maps to 65534; 65533 has none (anonymous).
    // The LOGIN name is the local user's name from /etc/passwd (the uid when it has none).
    let name = fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .find(|l| l.split(':').nth(2) == Some("65534"))
        .and_then(|l| l.split(':').next().map(str::to_owned))
        .unwrap_or_else(|| "65534".to_owned());
    let s = setup_users(&[(&name, 65534)]);
    fs::set_permissions(s.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let idents = s.dir.path().join("idents");
    let m = s.mount_with(
        "mnt",
        &["--multi-user", "--identities", idents.to_str().unwrap()],
    );
    let d = &m.dir;
    assert!(
        fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .contains("allow_other")
    );

    // The owner (root here, alice on the server) makes a shared directory and a file.
    fs::create_dir(d.join("shared")).unwrap();
    fs::set_permissions(d.join("shared"), fs::Permissions::from_mode(0o777)).unwrap();
    fs::write(d.join("readme"), b"for everyone to read").unwrap();

    // uid 65534 logs in on the same stream: its file is created as 65534 on the server.
    let (ok, err) = as_uid(65534, &format!("echo mine > {}/shared/byn", d.display()));
    assert!(ok, "{err}\n{}", m.log());
    assert_eq!(
        fs::metadata(s.export.join("shared/byn")).unwrap().uid(),
        65534
    );
    let (ok, _) = as_uid(65534, &format!("cat {}/readme", d.display()));
    assert!(ok, "a logged-in user reads a 0644 file");
    let (ok, _) = as_uid(65534, &format!("echo x >> {}/readme", d.display()));
    assert!(!ok, "but may not write it");

    // uid 65533 has no identity: anonymous, and this server gives anonymous users nothing,
    // although the modes would let any local user read and create.
    let (ok, err) = as_uid(65533, &format!("cat {}/readme", d.display()));
    assert!(!ok && err.contains("Permission denied"), "{err}");
    let (ok, _) = as_uid(65533, &format!("echo a > {}/shared/anon", d.display()));
    assert!(!ok);
    assert!(!s.export.join("shared/anon").exists());
    // A write by a non-owner clears set-user-ID and set-group-ID bits, and succeeds: the
    // server's kernel clears them as part of the write made as 65534 (the mount's kernel
    // would otherwise send a chmod as 65534, which the server must refuse).
    fs::write(d.join("shared/setid"), b"").unwrap();
    fs::set_permissions(d.join("shared/setid"), fs::Permissions::from_mode(0o6777)).unwrap();
    let (ok, err) = as_uid(65534, &format!("echo x >> {}/shared/setid", d.display()));
    assert!(ok, "{err}\n{}", m.log());
    assert_eq!(
        fs::metadata(s.export.join("shared/setid")).unwrap().mode() & 0o7777,
        0o777
    );
    assert_eq!(
        fs::metadata(d.join("shared/setid")).unwrap().mode() & 0o7777,
        0o777,
        "the mount shows the server's mode at once"
    );
    // The owner is unaffected, and sees 65534's file.
    assert_eq!(fs::read(d.join("shared/byn")).unwrap(), b"mine\n");
    assert!(m.log().contains("uid=65534"), "{}", m.log());
}

#[test]
fn namespace_connects_on_lookup_and_shows_bookmarks() {
    need_fuse!();
    let s = setup();
    fs::write(s.export.join("file"), b"through the namespace\n").unwrap();
    fs::create_dir_all(s.home.join(".sfs")).unwrap();
    fs::write(
        s.home.join(".sfs/bookmarks"),
        format!("srv {}\n", s.server.name),
    )
    .unwrap();
    let m = s.mount_namespace("ns", &["--idle-secs", "1"]);
    let d = &m.dir;

    // The root lists the bookmark (a symlink to the server's name) and nothing else.
    let names: Vec<String> = fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["srv"]);
    assert!(
        fs::symlink_metadata(d.join("srv"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        fs::read_link(d.join("srv")).unwrap(),
        Path::new(&s.server.name)
    );

    // A self-certifying name connects on lookup; the server's tree is below it.
    let srv = d.join(&s.server.name);
    assert_eq!(
        fs::read(srv.join("file")).unwrap(),
        b"through the namespace\n"
    );
    assert!(fs::metadata(&srv).unwrap().is_dir());
    // Through the bookmark: the same tree, and writes reach the server.
    assert_eq!(
        fs::read(d.join("srv/file")).unwrap(),
        b"through the namespace\n"
    );
    fs::write(d.join("srv/new"), b"written").unwrap();
    assert_eq!(fs::read(s.export.join("new")).unwrap(), b"written");
    let out = Command::new("cat").arg(srv.join("new")).output().unwrap();
    assert_eq!(out.stdout, b"written");
    // Extended attributes reach the server's files; the namespace's own nodes have none
    // (ENODATA, never ENOSYS, which would turn them off for the whole mount).
    assert_eq!(getxattr(d, "user.k", 10), Err(libc::ENODATA));
    assert_eq!(
        setxattr(d, "user.k", b"v", rustix::fs::XattrFlags::empty()),
        Err(libc::EOPNOTSUPP)
    );
    assert!(listxattr(d).is_empty());
    setxattr(
        &srv.join("new"),
        "user.k",
        b"v",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    assert_eq!(getxattr(&s.export.join("new"), "user.k", 10).unwrap(), b"v");
    assert_eq!(getxattr(&d.join("srv/new"), "user.k", 10).unwrap(), b"v");

    // The same location with another HOSTID is refused (the handshake checks the key).
    let (loc, _) = s.server.name.split_once(',').unwrap();
    let bad = format!("{loc},{}", "a".repeat(32));
    let e = fs::metadata(d.join(&bad)).unwrap_err();
    assert_eq!(errno(&e), libc::EACCES, "{e}");
    // Not a self-certifying name, or not a bookmark: no such entry.
    for name in ["@not-a-name", "nobookmark"] {
        let e = fs::metadata(d.join(name)).unwrap_err();
        assert_eq!(errno(&e), libc::ENOENT, "{name}: {e}");
    }
    // Nothing can be made in the root.
    assert!(fs::create_dir(d.join("x")).is_err());

    // Idle for longer than --idle-secs: disconnected; the next use reconnects.
    wait_for("the idle disconnect", Duration::from_secs(20), || {
        m.log().contains("namespace: disconnected")
    });
    // (The root's entries are cached for a second only, so this looks the name up again and
    // must find the existing session.)
    fs::write(s.export.join("file"), b"changed while idle\n").unwrap();
    assert_eq!(fs::read(srv.join("file")).unwrap(), b"changed while idle\n");
    let log = m.log();
    assert!(
        log.contains("refusing server") || log.to_lowercase().contains("hostid"),
        "{log}"
    );
}

/// When a namespace mount ends, the hidden names of files unlinked while open go on every
/// server it reached, as they do for a mount of one server. Hidden names exist only where the
/// server keeps no open state for a file: sfsd keeps at most 256 per connection
/// (`server/src/fs/open_states.rs`: `MAX_PER_HOLDER`), so past that the mount's OPEN is
/// refused and an unlinked open file is renamed instead. `umount -f` (root only) aborts the
/// FUSE connection while the files are still open: no RELEASE will ever remove their names,
/// only the mount's own cleanup as its session ends.
#[test]
fn namespace_end_removes_hidden_names_of_files_still_open() {
    need_fuse!();
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIPPED: forcing an unmount (umount -f) needs root");
        return;
    }
    const FILES: usize = 256 + 4;
    let s = setup();
    let m = s.mount_namespace("ns", &[]);
    let srv = m.dir.join(&s.server.name);
    for i in 0..FILES {
        fs::write(s.export.join(format!("f{i}")), b"x").unwrap();
    }
    let held: Vec<fs::File> = (0..FILES)
        .map(|i| fs::File::open(srv.join(format!("f{i}"))).unwrap())
        .collect();
    for i in 0..FILES {
        fs::remove_file(srv.join(format!("f{i}"))).unwrap();
    }
    let hidden = hidden_names(&s.export);
    assert!(
        !hidden.is_empty(),
        "the server kept every file: no hidden name to test with
mount log:
{}",
        m.log()
    );
    // Busy, so the unmount itself fails, but the FUSE connection is aborted first.
    let out = Command::new("umount")
        .arg("-f")
        .arg(&m.dir)
        .output()
        .unwrap();
    wait_for("the mount process to end", Duration::from_secs(20), || {
        !m.alive()
    });
    assert_eq!(
        hidden_names(&s.export),
        Vec::<PathBuf>::new(),
        "hidden names left after the mount ended (umount -f: {out:?})
mount log:
{}",
        m.log()
    );
    drop(held);
}

/// A mount that local uid 65534 uses with its own identity (mapped to 65534 on the server),
/// and the directory `work` there that it owns. None (skipped, saying why) where the test
/// cannot act as another local user.
fn ordinary_user_mount() -> Option<(Setup, Mount, PathBuf)> {
    let root = fs::metadata("/proc/self").unwrap().uid() == 0;
    if !root || Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("SKIPPED: needs root and setpriv to act as an ordinary local user");
        return None;
    }
    let name = fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .find(|l| l.split(':').nth(2) == Some("65534"))
        .and_then(|l| l.split(':').next().map(str::to_owned))
        .unwrap_or_else(|| "65534".to_owned());
    let s = setup_users(&[(&name, 65534)]);
    fs::set_permissions(s.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let work = s.export.join("work");
    fs::create_dir(&work).unwrap();
    std::os::unix::fs::chown(&work, Some(65534), Some(65534)).unwrap();
    let idents = s.dir.path().join("idents");
    let m = s.mount_with(
        "mnt",
        &["--multi-user", "--identities", idents.to_str().unwrap()],
    );
    let work = m.dir.join("work");
    Some((s, m, work))
}

/// Names of hidden files the client may leave in `dir` (recursively).
fn hidden_names(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap().flatten() {
        if e.file_name()
            .to_string_lossy()
            .starts_with(".sfs-unlinked-")
        {
            out.push(e.path());
        }
        if e.file_type().unwrap().is_dir() {
            out.extend(hidden_names(&e.path()));
        }
    }
    out
}

#[test]
fn ordinary_user_writes_through_a_read_only_creation_and_unlinks_open_files() {
    need_fuse!();
    let Some((s, m, work)) = ordinary_user_mount() else {
        return;
    };
    // An archive holding a read-only file in a read-only directory, made locally.
    let src = s.dir.path().join("src");
    fs::create_dir_all(src.join("ro-dir")).unwrap();
    fs::write(src.join("ro-dir/ro-file"), b"read-only contents\n").unwrap();
    fs::set_permissions(
        src.join("ro-dir/ro-file"),
        fs::Permissions::from_mode(0o444),
    )
    .unwrap();
    fs::set_permissions(src.join("ro-dir"), fs::Permissions::from_mode(0o555)).unwrap();
    let archive = s.dir.path().join("ro.tar");
    let out = Command::new("tar")
        .arg("-C")
        .arg(&src)
        .arg("-cf")
        .arg(&archive)
        .arg("ro-dir")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    fs::set_permissions(&archive, fs::Permissions::from_mode(0o644)).unwrap();

    let script = format!(
        r#"set -e
cd {work}
# open(O_CREAT|O_RDWR, 0444), then write through that descriptor (how git writes objects).
umask 0222
exec 3<>ro
printf hello >&3
exec 3>&-
umask 022
test "$(cat ro)" = hello || {{ echo "read back: $(cat ro)" >&2; exit 1; }}
test "$(stat -c %a ro)" = 444
# Afterwards the mode decides.
if (printf x >> ro) 2>/dev/null; then echo "appended to a 0444 file" >&2; exit 1; fi
# tar x of read-only files and directories.
tar -xf {archive}
test "$(cat ro-dir/ro-file)" = "read-only contents"
chmod u+w ro-dir
# A file unlinked while open lives on through the descriptor; nothing hidden shows.
mkdir scratch
exec 4<>scratch/tmp
printf abc >&4
rm scratch/tmp
test -z "$(ls -A scratch)" || {{ echo "left: $(ls -A scratch)" >&2; exit 1; }}
test "$(cat /proc/$$/fd/4)" = abc
printf def >&4
test "$(cat /proc/$$/fd/4)" = abcdef
exec 4>&-
rmdir scratch
# Replacing an open file by rename: the old one lives on too.
printf old > a; printf new > b
exec 5<a
mv b a
test "$(cat <&5)" = old
exec 5<&-
test "$(cat a)" = new
# Close, then unlink at once (the close's RELEASE reaches the mount after the unlink began).
mkdir churn
i=0
while [ $i -lt 100 ]; do
    exec 6<>churn/f$i
    printf x >&6
    exec 6>&-
    rm churn/f$i
    i=$((i+1))
done
rmdir churn
"#,
        work = work.display(),
        archive = archive.display(),
    );
    let (ok, err) = as_uid(65534, &script);
    assert!(ok, "{err}\nmount log:\n{}", m.log());
    let ro = s.export.join("work/ro");
    assert_eq!(fs::read(&ro).unwrap(), b"hello");
    assert_eq!(fs::metadata(&ro).unwrap().uid(), 65534);
    assert_eq!(hidden_names(&s.export), Vec::<PathBuf>::new());
    drop(m);
    assert_eq!(hidden_names(&s.export), Vec::<PathBuf>::new());
    let left: Vec<_> = fs::read_dir(s.export.join("work"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 3, "{left:?}");
}

/// What a build with its output in the mount does, many times at once: writers create a file,
/// write it in pieces and close it; other threads reopen each closed file at once and check
/// `fstat`/`statx` size and the data, while listers read the directory with its attributes
/// (`ls -l`: READDIRPLUS) and stat every entry. A file's size must never go back to what it was
/// before a write that has returned (close-to-open), e.g. from a listing started earlier.
#[test]
fn closed_files_reopen_whole_under_writers_listers_and_reopeners() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Mutex, mpsc};
    need_fuse!();
    let s = setup();
    let m = s.mount("mnt");
    let d = m.dir.join("out");
    fs::create_dir(&d).unwrap();
    let d = &d;
    let deadline = Instant::now() + Duration::from_secs(3);
    let (tx, rx) = mpsc::channel::<(PathBuf, u64, usize)>();
    let rx = Mutex::new(rx);
    let written = Mutex::new(Vec::new());
    let failures = Mutex::new(Vec::<String>::new());
    let listings = AtomicUsize::new(0);
    let fail = |what: String| failures.lock().unwrap().push(what);
    // Size and data of `p`, reopened: both stat paths and the bytes.
    let check = |p: &Path, seed: u64, len: usize| {
        let by_path = fs::metadata(p).map(|m| m.len());
        let mut f = match fs::File::open(p) {
            Ok(f) => f,
            Err(e) => return fail(format!("{}: open: {e}", p.display())),
        };
        let by_fd = f.metadata().map(|m| m.len());
        let mut got = Vec::new();
        let read = f.read_to_end(&mut got);
        let want = len as u64;
        if by_path.as_ref().ok() != Some(&want) || by_fd.as_ref().ok() != Some(&want) {
            fail(format!(
                "{}: stat says {by_path:?}, fstat {by_fd:?}, written {want}",
                p.display()
            ));
        } else if read.is_err() || got != data(len, seed) {
            fail(format!(
                "{}: read {} bytes ({read:?}), not the {len} written",
                p.display(),
                got.len()
            ));
        }
    };
    std::thread::scope(|sc| {
        for w in 0..6u64 {
            let tx = tx.clone();
            sc.spawn(move || {
                let mut r = 0u64;
                while Instant::now() < deadline {
                    let seed = w << 32 | r;
                    let len = 20_000 + (seed.wrapping_mul(7919) % 300_000) as usize;
                    let p = d.join(format!("w{w}-{r}.o"));
                    let bytes = data(len, seed);
                    let mut f = fs::File::create(&p).unwrap();
                    for piece in bytes.chunks(48 * 1024) {
                        f.write_all(piece).unwrap();
                    }
                    drop(f);
                    tx.send((p, seed, len)).unwrap();
                    r += 1;
                }
            });
        }
        drop(tx);
        for _ in 0..3 {
            sc.spawn(|| {
                loop {
                    let next = rx.lock().unwrap().recv();
                    let Ok((p, seed, len)) = next else { break };
                    check(&p, seed, len);
                    written.lock().unwrap().push((p, seed, len));
                }
            });
        }
        for _ in 0..2 {
            sc.spawn(|| {
                while Instant::now() < deadline {
                    for e in fs::read_dir(d).unwrap() {
                        let _ = e.unwrap().metadata();
                    }
                    listings.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    // Once more, all at rest: nothing listed earlier may have left a size behind.
    let written = written.into_inner().unwrap();
    for (p, seed, len) in &written {
        check(p, *seed, *len);
    }
    let failures = failures.into_inner().unwrap();
    eprintln!(
        "{} files written and reopened, {} listings, {} failures",
        written.len(),
        listings.into_inner(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} checks failed, e.g.:\n{}",
        failures.len(),
        written.len() * 2,
        failures[..failures.len().min(10)].join("\n")
    );
}

/// Close-to-open across processes of an ordinary user: shell writers each write files of
/// growing sizes and check, as soon as each is closed, that `stat` and a fresh `read` see every
/// byte, while `ls -l` processes list the directory (READDIRPLUS, whose attributes must never
/// take a size back).
#[test]
fn ordinary_user_processes_see_whole_files_while_others_list() {
    need_fuse!();
    let Some((_s, m, work)) = ordinary_user_mount() else {
        return;
    };
    let script = format!(
        r#"cd {work} && mkdir race || exit 1
end=$(( $(date +%s) + 4 ))
lister() {{ while [ "$(date +%s)" -lt $end ]; do ls -l race >/dev/null || exit 1; done; }}
writer() {{
    i=0
    while [ $i -lt 40 ]; do
        n=$(( (i + 1) * 3000 + $1 ))
        head -c $n /dev/zero > race/f$1-$i
        s=$(stat -c %s race/f$1-$i)
        c=$(wc -c < race/f$1-$i)
        if [ "$s" != $n ] || [ "$c" != $n ]; then
            echo "race/f$1-$i: wrote $n, stat says $s, read $c" >&2
            exit 1
        fi
        i=$((i + 1))
    done
}}
lister & lister &
writer 1 & w1=$!; writer 2 & w2=$!; writer 3 & w3=$!; writer 4 & w4=$!
ok=0
for w in $w1 $w2 $w3 $w4; do wait $w || ok=1; done
wait
exit $ok
"#,
        work = work.display()
    );
    let (ok, err) = as_uid(65534, &script);
    assert!(ok, "{err}\nmount log:\n{}", m.log());
}

/// A TCP listener on 127.0.0.1 that accepts connections and never says a word (a server
/// that hangs in the handshake), holding every connection open; counts them.
struct Silent {
    port: u16,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Silent {
    fn start() -> Silent {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let n = accepted.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for s in l.incoming().flatten() {
                n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                held.push(s);
            }
        });
        Silent { port, accepted }
    }

    /// A self-certifying name for it (any HOSTID: the handshake never gets that far).
    fn name(&self, id: char) -> String {
        format!("@127.0.0.1%{},{}", self.port, id.to_string().repeat(32))
    }
}

/// A port on 127.0.0.1 nobody listens on (bound, then closed).
fn refused_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Runs `f` on a thread and waits at most `limit` for it; its result and how long it took.
/// Panics naming `what` when it takes longer (the thread is left behind, blocked in the
/// kernel until the mount's guard unmounts).
fn within<T: Send + 'static>(
    what: &str,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> (T, Duration) {
    let (tx, rx) = std::sync::mpsc::channel();
    let start = Instant::now();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => (v, start.elapsed()),
        Err(_) => panic!("{what} did not finish within {limit:?}"),
    }
}

/// Issue 25, point 3: in the namespace, a server that accepts connections but never speaks,
/// and a port where nobody listens, stall nothing but their own lookups: while one lookup
/// waits on the silent server, the real server, the namespace root and the refused port
/// all answer at once; concurrent lookups of the silent name share one connection attempt,
/// and it fails within its deadline with ETIMEDOUT.
#[test]
fn namespace_a_silent_server_stalls_only_its_own_lookups() {
    need_fuse!();
    let s = setup();
    fs::write(s.export.join("file"), b"real\n").unwrap();
    let silent = Silent::start();
    let m = s.mount_namespace("ns", &[]);
    let real = m.dir.join(&s.server.name);
    assert_eq!(fs::read(real.join("file")).unwrap(), b"real\n");

    // Three programs look the silent server up at once.
    let waiting: Vec<_> = (0..3)
        .map(|_| {
            let p = m.dir.join(silent.name('a')).join("x");
            std::thread::spawn(move || {
                let start = Instant::now();
                let r = fs::metadata(&p).map(drop).map_err(|e| errno(&e));
                (r, start.elapsed())
            })
        })
        .collect();
    wait_for(
        "the silent server's connection",
        Duration::from_secs(5),
        || silent.accepted.load(std::sync::atomic::Ordering::SeqCst) > 0,
    );
    // Past the root entries' one-second cache, so the real server's name is looked up again.
    std::thread::sleep(Duration::from_millis(1500));
    let quick = Duration::from_secs(2);
    for round in 0..3 {
        let f = real.join("file");
        let (data, took) = within("reading the real server", quick, move || fs::read(f));
        assert_eq!(data.unwrap(), b"real\n", "round {round}");
        assert!(took < quick, "round {round}: {took:?}");
        eprintln!("round {round}: the real server answered in {took:?}");
        let d = m.dir.clone();
        let (names, _) = within("listing the namespace root", quick, move || {
            fs::read_dir(d).map(|r| r.count())
        });
        names.unwrap();
        std::thread::sleep(Duration::from_millis(600));
    }
    // Nobody listening: refused at once, as "host unreachable".
    let refused = m
        .dir
        .join(format!("@127.0.0.1%{},{}", refused_port(), "b".repeat(32)));
    let (r, took) = within("the refused lookup", Duration::from_secs(5), move || {
        fs::metadata(refused).map_err(|e| errno(&e))
    });
    assert_eq!(r.unwrap_err(), libc::EHOSTUNREACH, "{took:?}");
    eprintln!("refused lookup failed after {took:?}");

    for w in waiting {
        let (r, took) = w.join().unwrap();
        assert_eq!(r, Err(libc::ETIMEDOUT), "after {took:?}\n{}", m.log());
        eprintln!("silent lookup failed after {took:?}");
        assert!(took <= Duration::from_secs(15), "{took:?}");
    }
    let tries = silent.accepted.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        tries <= 2,
        "{tries} connections for one name looked up 3 times at once"
    );
    // The real server is still there.
    assert_eq!(fs::read(real.join("file")).unwrap(), b"real\n");
}

/// Issue 25, point 3: a program waiting in the kernel for a lookup of a silent server dies
/// when killed (SIGTERM, SIGINT, SIGKILL), within a second or two, not when the lookup
/// gives up.
#[test]
fn namespace_programs_waiting_on_a_silent_server_can_be_killed() {
    need_fuse!();
    let s = setup();
    let silent = Silent::start();
    let m = s.mount_namespace("ns", &[]);
    for (i, (sig, signame)) in [
        (libc::SIGTERM, "TERM"),
        (libc::SIGINT, "INT"),
        (libc::SIGKILL, "KILL"),
    ]
    .into_iter()
    .enumerate()
    {
        let path = m.dir.join(silent.name(['c', 'd', 'e'][i])).join("x");
        let before = silent.accepted.load(std::sync::atomic::Ordering::SeqCst);
        use std::os::unix::process::CommandExt;
        let mut stat = Command::new("stat");
        stat.arg(&path);
        // With each signal's default action, as a shell gives the programs it runs: a test
        // started from a background job inherits SIGINT ignored, and the SIGINT case would
        // then wait for the lookup to give up.
        // SAFETY: signal(2) is async-signal-safe, as pre_exec requires of what it runs.
        unsafe {
            stat.pre_exec(|| {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                Ok(())
            });
        }
        let mut child = Guard(stat.spawn().unwrap());
        // Blocked in the kernel once the namespace has dialled the silent server.
        wait_for(
            "the lookup to reach the server",
            Duration::from_secs(5),
            || silent.accepted.load(std::sync::atomic::Ordering::SeqCst) > before,
        );
        std::thread::sleep(Duration::from_millis(300));
        assert!(child.0.try_wait().unwrap().is_none(), "stat ended early");
        let pid = child.0.id().to_string();
        let sent = Command::new("kill").args(["-s", signame, &pid]).status();
        assert!(sent.unwrap().success());
        let killed = Instant::now();
        let deadline = killed + Duration::from_secs(3);
        let status = loop {
            if let Some(st) = child.0.try_wait().unwrap() {
                break st;
            }
            assert!(
                Instant::now() < deadline,
                "signal {sig}: stat still waiting after {:?}\n{}",
                killed.elapsed(),
                m.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(sig), "{status:?}");
        eprintln!(
            "SIG{signame}: stat ended {:?} after the signal",
            killed.elapsed()
        );
        assert!(
            killed.elapsed() < Duration::from_secs(2),
            "{:?}",
            killed.elapsed()
        );
    }
    assert!(m.alive(), "the mount survives");
}

/// The login name of local `uid` in /etc/passwd (the number when it has none).
fn passwd_name(uid: u32) -> String {
    fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .find(|l| l.split(':').nth(2) == Some(uid.to_string().as_str()))
        .and_then(|l| l.split(':').next().map(str::to_owned))
        .unwrap_or_else(|| uid.to_string())
}

/// Makes `path` (created 0600), writes `DATA` into it through a shared writable mapping,
/// says "dirty" and waits for a line on stdin before unmapping (no msync) and closing.
const MAP_WRITER: &str = r#"
import mmap, os, sys
DATA = b"written through a shared mapping\n"
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
os.ftruncate(fd, 4096)
m = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
m[0:len(DATA)] = DATA
print("dirty", flush=True)
sys.stdin.readline()
m.close()
os.close(fd)
"#;

/// Issue 25, point 5: in a `--multi-user` mount, pages a user dirtied through a shared
/// writable mapping, written back by the kernel's flusher (whose requests carry uid 0, the
/// mount owner here), reach the server as that user, never as the mount's owner. The owner
/// logs in as uid 65532, which may not write 65534's private directory: a write-back sent
/// as the owner is refused and the data never arrives.
#[test]
fn multi_user_shared_mapping_is_written_back_as_its_writer() {
    need_fuse!();
    let python = Path::new("/usr/bin/python3");
    let root = fs::metadata("/proc/self").unwrap().uid() == 0;
    if !root || Command::new("setpriv").arg("--version").output().is_err() || !python.exists() {
        eprintln!("SKIPPED: needs root, setpriv and /usr/bin/python3");
        return;
    }
    let s = setup_owned(Some(65532), &[(&passwd_name(65534), 65534)]);
    fs::set_permissions(s.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let work = s.export.join("work");
    fs::create_dir(&work).unwrap();
    std::os::unix::fs::chown(&work, Some(65534), Some(65534)).unwrap();
    fs::set_permissions(&work, fs::Permissions::from_mode(0o700)).unwrap();
    let idents = s.dir.path().join("idents");
    let m = s.mount_with(
        "mnt",
        &["--multi-user", "--identities", idents.to_str().unwrap()],
    );
    let mut writer = Guard(
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(python)
            .args(["-c", MAP_WRITER])
            .arg(m.dir.join("work/mapped"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut out = std::io::BufReader::new(writer.0.stdout.take().unwrap());
    let (line, _) = within("the mapping writer", Duration::from_secs(30), move || {
        let mut l = String::new();
        std::io::BufRead::read_line(&mut out, &mut l).map(|_| l)
    });
    assert_eq!(line.unwrap(), "dirty\n", "{}", m.log());

    // sync(1) has the kernel's flusher write the dirty page back while it is still mapped.
    assert!(Command::new("sync").status().unwrap().success());
    let want = b"written through a shared mapping\n";
    let on_server = || fs::read(work.join("mapped")).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !on_server().starts_with(want) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let got = on_server();
    assert!(
        got.starts_with(want),
        "after sync the server has {:?}\n{}",
        String::from_utf8_lossy(&got[..got.len().min(40)]),
        m.log()
    );
    writer.0.stdin.take().unwrap().write_all(b"\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = writer.0.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "the writer did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}\n{}", m.log());
    let meta = fs::metadata(work.join("mapped")).unwrap();
    assert_eq!((meta.uid(), meta.len()), (65534, 4096));
    assert!(on_server().starts_with(want));
}

/// Issue 25, point 3, for a mount of one server: a program waiting for a server that stopped
/// answering (SIGSTOP: connected, silent) dies when killed, long before the request's
/// timeout; the mount serves again once the server is back.
#[test]
fn a_program_waiting_on_a_stopped_server_can_be_killed() {
    need_fuse!();
    let s = setup();
    for signame in ["TERM", "KILL"] {
        fs::create_dir(s.export.join(format!("sub-{signame}"))).unwrap();
    }
    let m = s.mount("m");
    fs::write(m.dir.join("f"), b"before\n").unwrap();
    for signame in ["TERM", "KILL"] {
        assert!(m.dir.join(format!("sub-{signame}")).is_dir());
    }
    /// Sends SIGCONT to sfsd on drop (a failed test leaves no stopped server behind).
    struct Resume(String);
    impl Drop for Resume {
        fn drop(&mut self) {
            let _ = Command::new("kill").args(["-CONT", &self.0]).status();
        }
    }
    let pid = s.server.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success()
    );
    let resume = Resume(pid);
    for signame in ["TERM", "KILL"] {
        // Negative lookups are not cached, and no listing of this directory is kept (the
        // root's may be, read at the lookup of `f`): this LOOKUP, or the listing read for it,
        // goes to the stopped server.
        let mut child = Guard(
            Command::new("stat")
                .arg(m.dir.join(format!("sub-{signame}/absent")))
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        std::thread::sleep(Duration::from_millis(500));
        assert!(child.0.try_wait().unwrap().is_none(), "stat ended early");
        let cpid = child.0.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-s", signame, &cpid])
                .status()
                .unwrap()
                .success()
        );
        let killed = Instant::now();
        let deadline = killed + Duration::from_secs(3);
        while child.0.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "SIG{signame}: stat still waiting after {:?}\n{}",
                killed.elapsed(),
                m.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            killed.elapsed() < Duration::from_secs(2),
            "{:?}",
            killed.elapsed()
        );
    }
    drop(resume);
    let f = m.dir.join("f");
    let (r, _) = within(
        "reading after the server resumed",
        Duration::from_secs(30),
        move || fs::read(f),
    );
    assert_eq!(r.unwrap(), b"before\n");
}

/// `getxattr(2)` of `name` on `path` with a buffer of `size` bytes: the value (or, with size
/// 0, a buffer of the length asked), or the errno.
fn getxattr(path: &Path, name: &str, size: usize) -> Result<Vec<u8>, i32> {
    let mut buf = vec![0u8; size];
    let got = if size == 0 {
        rustix::fs::getxattr_query(path, name).map(|n| buf.resize(n, 0))
    } else {
        rustix::fs::getxattr(path, name, &mut buf[..]).map(|n| buf.truncate(n))
    };
    got.map(|()| buf).map_err(|e| e.raw_os_error())
}

fn listxattr(path: &Path) -> Vec<String> {
    let mut buf = vec![0u8; 65536];
    let n = rustix::fs::listxattr(path, &mut buf[..]).unwrap();
    let mut names: Vec<String> = buf[..n]
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    names.sort();
    names
}

fn setxattr(
    path: &Path,
    name: &str,
    value: &[u8],
    flags: rustix::fs::XattrFlags,
) -> Result<(), i32> {
    rustix::fs::setxattr(path, name, value, flags).map_err(|e| e.raw_os_error())
}

/// Extended attributes through the mount: set, get (with the size probe and a short buffer),
/// list, replace, create-exclusive, remove, and an ACL, each checked on the server's disk;
/// `cp --preserve=xattr` and `tar --xattrs` keep them. ENOSYS before extended attributes were
/// in the protocol.
#[test]
fn extended_attributes_round_trip_through_the_mount() {
    use rustix::fs::XattrFlags as X;
    need_fuse!();
    let s = setup();
    let m = s.mount("mnt");
    let d = &m.dir;
    let f = d.join("f");
    fs::write(&f, b"data").unwrap();
    let on_disk = s.export.join("f");
    setxattr(&f, "user.k", b"value", X::empty()).unwrap();
    assert_eq!(getxattr(&on_disk, "user.k", 100).unwrap(), b"value");
    assert_eq!(getxattr(&f, "user.k", 0).unwrap().len(), 5, "size probe");
    assert_eq!(getxattr(&f, "user.k", 100).unwrap(), b"value");
    assert_eq!(getxattr(&f, "user.k", 3), Err(libc::ERANGE));
    assert_eq!(getxattr(&f, "user.none", 100), Err(libc::ENODATA));
    assert_eq!(listxattr(&f), ["user.k"]);
    assert_eq!(setxattr(&f, "user.k", b"x", X::CREATE), Err(libc::EEXIST));
    assert_eq!(
        setxattr(&f, "user.none", b"x", X::REPLACE),
        Err(libc::ENODATA)
    );
    setxattr(&f, "user.k", b"replaced", X::REPLACE).unwrap();
    assert_eq!(getxattr(&f, "user.k", 100).unwrap(), b"replaced");
    // A change on the server shows at once for a name the mount never cached.
    rustix::fs::setxattr(&on_disk, "user.srv", b"from the server", X::empty()).unwrap();
    assert_eq!(getxattr(&f, "user.srv", 100).unwrap(), b"from the server");
    // Directories, and a namespace the server does not serve.
    setxattr(d, "user.dir", b"d", X::empty()).unwrap();
    assert_eq!(getxattr(&s.export, "user.dir", 10).unwrap(), b"d");
    assert_eq!(
        setxattr(&f, "system.nfs4_acl", b"x", X::empty()),
        Err(libc::EOPNOTSUPP)
    );
    // cp and tar keep them.
    let out = Command::new("cp")
        .arg("--preserve=xattr")
        .arg(&f)
        .arg(d.join("copy"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        getxattr(&s.export.join("copy"), "user.k", 100).unwrap(),
        b"replaced"
    );
    let tar = s.dir.path().join("f.tar");
    let out = Command::new("tar")
        .arg("--xattrs")
        .arg("-cf")
        .arg(&tar)
        .arg("-C")
        .arg(d)
        .arg("f")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::create_dir(d.join("untar")).unwrap();
    let out = Command::new("tar")
        .args(["--xattrs", "--xattrs-include=user.*", "-xf"])
        .arg(&tar)
        .arg("-C")
        .arg(d.join("untar"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        getxattr(&s.export.join("untar/f"), "user.k", 100).unwrap(),
        b"replaced"
    );
    // An ACL set through the mount is the server file's ACL (its mask shows in the mode).
    let acl = acl_with_a_named_user();
    setxattr(&f, "system.posix_acl_access", &acl, X::empty()).unwrap();
    assert_eq!(
        getxattr(&on_disk, "system.posix_acl_access", 1000).unwrap(),
        acl
    );
    assert_eq!(fs::metadata(&on_disk).unwrap().mode() & 0o777, 0o640);
    assert_eq!(
        fs::metadata(&f).unwrap().mode() & 0o777,
        0o640,
        "the mount shows the mode the ACL gave at once"
    );
    // Remove.
    rustix::fs::removexattr(&f, "user.k").unwrap();
    assert_eq!(getxattr(&f, "user.k", 100), Err(libc::ENODATA));
    assert_eq!(getxattr(&on_disk, "user.k", 100), Err(libc::ENODATA));
    assert_eq!(
        rustix::fs::removexattr(&f, "user.k").map_err(|e| e.raw_os_error()),
        Err(libc::ENODATA)
    );
}

/// An ordinary local user (65534, its own identity on a multi-user mount) reads the user
/// attributes of root's 0644 file but may not set them (EACCES), sets its own, and gets EPERM
/// for `trusted.`, which root sets.
#[test]
fn extended_attribute_permissions_as_two_users() {
    need_fuse!();
    let python = Path::new("/usr/bin/python3");
    let Some((s, m, work)) = ordinary_user_mount() else {
        return;
    };
    if !python.exists() {
        eprintln!("SKIPPED: needs /usr/bin/python3 to call setxattr as another user");
        return;
    }
    let d = &m.dir;
    fs::write(d.join("roots"), b"r").unwrap();
    fs::set_permissions(d.join("roots"), fs::Permissions::from_mode(0o644)).unwrap();
    setxattr(
        &d.join("roots"),
        "user.k",
        b"root's",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    let py = |code: &str| {
        as_uid(
            65534,
            &format!("/usr/bin/python3 -c 'import os, sys\n{code}'"),
        )
    };
    let roots = d.join("roots").display().to_string();
    let (ok, err) = py(&format!(
        "sys.exit(0 if os.getxattr(\"{roots}\", \"user.k\") == b\"root'\"'\"'s\" else 1)"
    ));
    assert!(
        ok,
        "65534 reads the attributes of a file it may read: {err}"
    );
    let (ok, err) = py(&format!("os.setxattr(\"{roots}\", \"user.k\", b\"mine\")"));
    assert!(!ok && err.contains("Permission denied"), "{err}");
    assert_eq!(
        getxattr(&s.export.join("roots"), "user.k", 100).unwrap(),
        b"root's"
    );
    let mine = work.join("mine");
    let (ok, err) = py(&format!(
        "open(\"{0}\", \"w\").close(); os.setxattr(\"{0}\", \"user.k\", b\"65534s\")",
        mine.display()
    ));
    assert!(ok, "{err}\n{}", m.log());
    assert_eq!(
        getxattr(&s.export.join("work/mine"), "user.k", 100).unwrap(),
        b"65534s"
    );
    let (ok, err) = py(&format!(
        "os.setxattr(\"{}\", \"trusted.t\", b\"x\")",
        mine.display()
    ));
    assert!(!ok && err.contains("Operation not permitted"), "{err}");
    // Root (mapped to the server's root) may.
    setxattr(&mine, "trusted.t", b"x", rustix::fs::XattrFlags::empty()).unwrap();
    assert_eq!(
        getxattr(&s.export.join("work/mine"), "trusted.t", 10).unwrap(),
        b"x"
    );
}

/// In a `--multi-user` mount, where the kernel checks each caller's access itself, it
/// evaluates POSIX ACLs too (`FUSE_POSIX_ACL`, fuse/kernel.rs): an ACL granting an ordinary
/// user read of a root file its mode bits deny lets that user read it through the mount, as
/// on the server's disk, and a file without one stays denied; another client's revoke shows
/// at once. The kernel keeps each file's ACL as long as its attributes, so `ls -l` again asks
/// the mount for no ACL.
#[test]
fn multi_user_mount_grants_what_an_acl_grants_and_keeps_acls_in_the_kernel() {
    need_fuse!();
    let Some((s, m, _work)) = ordinary_user_mount() else {
        return;
    };
    let none = rustix::fs::XattrFlags::empty();
    let (granted, denied) = (m.dir.join("granted"), m.dir.join("denied"));
    for f in [&granted, &denied] {
        fs::write(f, b"secret").unwrap();
        fs::set_permissions(f, fs::Permissions::from_mode(0o600)).unwrap();
    }
    setxattr(
        &granted,
        "system.posix_acl_access",
        &acl_with_a_named_user(),
        none,
    )
    .unwrap();
    let (ok, err) = as_uid(65534, &format!("cat {} >/dev/null", granted.display()));
    assert!(ok, "65534 reads what its ACL grants: {err}\n{}", m.log());
    let (ok, err) = as_uid(65534, &format!("cat {} >/dev/null", denied.display()));
    assert!(!ok && err.contains("Permission denied"), "{err}");
    // Another client takes the grant back: its INVALIDATE ends the kernel's copy (within the
    // INVALIDATE's trip, not the 60 s lease).
    let other = s.mount("other");
    rustix::fs::removexattr(other.dir.join("granted"), "system.posix_acl_access").unwrap();
    wait_for(
        "the revoke to reach the kernel",
        Duration::from_secs(5),
        || {
            let (ok, _) = as_uid(65534, &format!("cat {} >/dev/null", granted.display()));
            !ok
        },
    );

    const FILES: usize = 50;
    // Made through another client: a name made on the server's own disk, behind sfsd's back,
    // shows only when the lease of the listing this mount keeps of its root ends.
    dir_of_files(&other.dir.join("many"), FILES, 2);
    let ls = || assert_eq!(ls_l(&m.dir.join("many")).split('\n').count(), FILES + 2);
    ls();
    let tries = tries_until_at_most(2, || {
        let before = kernel_requests(&m, "GETXATTR");
        ls();
        kernel_requests(&m, "GETXATTR") - before
    });
    // At most the label `ls` asks once per run (EOPNOTSUPP, never cached by the kernel).
    assert!(
        tries.last() <= Some(&2),
        "ls -l again sent the mount this many GETXATTRs, try by try: {tries:?}"
    );
}

/// Writes through the mount in 4 KiB (16 MiB) and in 1 MiB (64 MiB) `write(2)` calls (dd),
/// timed. With extended attributes served the kernel asks for `security.capability` before
/// writing a file (to drop file capabilities), but once per file, not per write: it then marks
/// the inode as having none to drop (measured: one GETXATTR for each 64 MiB file; 64 MiB in
/// 1 MiB writes took 0.51-0.52 s with ENOSYS answers and with xattrs served alike).
#[test]
fn measure_writes_with_extended_attributes_served() {
    need_fuse!();
    let s = setup();
    let m = s.mount("mnt");
    for (bs, count, mib) in [("4k", 4096, 16), ("1M", 64, 64)] {
        let out_file = m.dir.join(format!("dd-{bs}"));
        let t = Instant::now();
        let out = Command::new("dd")
            .arg("if=/dev/zero")
            .arg(format!("of={}", out_file.display()))
            .arg(format!("bs={bs}"))
            .arg(format!("count={count}"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let took = t.elapsed();
        assert_eq!(
            fs::metadata(s.export.join(format!("dd-{bs}")))
                .unwrap()
                .len(),
            mib << 20
        );
        eprintln!(
            "{mib} MiB in {bs} writes through the FUSE mount: {:.2} s ({:.0} MiB/s)",
            took.as_secs_f64(),
            mib as f64 / took.as_secs_f64()
        );
    }
}

/// `ls -l` of 2000 files through the mount, timed: `ls` asks each file for
/// `security.selinux` and `system.posix_acl_access` (GETXATTR), one after the other. The first
/// time the mount reads them ahead along the listing (fuse/xattr_ahead.rs): one LISTXATTR per
/// file, up to 64 files ahead, side by side on the stream; then, and the second time, the
/// cached answers are given on the kernel's thread. Measured (debug build, 2 cores shared with
/// other sessions' builds, load 5-10): 0.53-0.77 s the first time, 0.23-0.36 s the second;
/// the same build without the read-ahead and the kernel-thread answers 2.07-2.17 s and
/// 0.33-0.38 s (1.3-1.9 s and 0.28-0.49 s at lower load); 0.06-0.12 s when the mount answered
/// ENOSYS and the kernel stopped asking. What remains is 2000 requests from the kernel to the
/// mount (it caches no extended attributes; `security.selinux` is asked once, answered
/// `EOPNOTSUPP`, since security labels are not carried) and, the first time, 2000 LISTXATTRs.
#[test]
fn measure_ls_l_with_extended_attributes_served() {
    need_fuse!();
    let s = setup();
    dir_of_files(&s.export.join("many"), 2000, 4);
    let m = s.mount("mnt");
    for round in ["first", "second"] {
        let t = Instant::now();
        assert_eq!(ls_l(&m.dir.join("many")).split('\n').count(), 2002);
        eprintln!(
            "ls -l of 2000 files through the FUSE mount ({round}): {:.3} s",
            t.elapsed().as_secs_f64()
        );
    }
}

/// An ACL in `system.posix_acl_access`'s form granting user 65534 read: mode bits and mask
/// `rw-r-----`, so the file has an ACL beyond its mode (`ls -l` shows `+`).
fn acl_with_a_named_user() -> Vec<u8> {
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (0x01u16, 6u16, u32::MAX),
        (0x02, 4, 65534),
        (0x04, 0, u32::MAX),
        (0x10, 4, u32::MAX),
        (0x20, 0, u32::MAX),
    ] {
        acl.extend_from_slice(&tag.to_le_bytes());
        acl.extend_from_slice(&perm.to_le_bytes());
        acl.extend_from_slice(&id.to_le_bytes());
    }
    acl
}

/// Per `xattr read-ahead` line of the mount's log whose name is `name`: the entries read
/// ahead, summed.
fn read_ahead_entries(log: &str, name: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("xattr read-ahead") && l.contains(&format!("\"{name}\"")))
        .filter_map(|l| l.split("entries=").nth(1))
        .filter_map(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .filter_map(|n| n.parse::<usize>().ok())
        .sum()
}

/// Extended attributes asked along a listing are read ahead (fuse/xattr_ahead.rs) and the
/// answers are right: files with a `user.` attribute or an ACL set on the server's disk show
/// them through the mount, in `ls -l` (`+`) and to `getxattr` and `listxattr` walking the
/// directory in its order, absent ones absent; the mount's log shows nearly every entry was read ahead (without
/// the read-ahead there are no such lines). A change made through the mount afterwards shows
/// at once.
#[test]
fn extended_attributes_are_read_ahead_along_a_listing() {
    need_fuse!();
    let s = setup();
    let n: usize = 300;
    let dir = s.export.join("many");
    fs::create_dir(&dir).unwrap();
    let acl = acl_with_a_named_user();
    let tag = |i: usize| format!("tag {i}").into_bytes();
    for i in 0..n {
        let f = dir.join(format!("f{i:03}"));
        fs::write(&f, b"x").unwrap();
        if i.is_multiple_of(7) {
            rustix::fs::setxattr(&f, "user.tag", &tag(i), rustix::fs::XattrFlags::empty()).unwrap();
        }
        if i.is_multiple_of(11) {
            rustix::fs::setxattr(
                &f,
                "system.posix_acl_access",
                &acl,
                rustix::fs::XattrFlags::empty(),
            )
            .unwrap();
        }
    }
    let m = s.mount("mnt");
    let text = ls_l(&m.dir.join("many"));
    let mut seen = 0;
    for line in text.lines().skip(1) {
        let (mode, name) = (
            line.split(' ').next().unwrap(),
            line.rsplit(' ').next().unwrap(),
        );
        let i: usize = name[1..].parse().unwrap();
        let want = if i.is_multiple_of(11) {
            "-rw-r-----+"
        } else {
            "-rw-r--r--"
        };
        assert_eq!(mode, want, "{line}");
        seen += 1;
    }
    assert_eq!(seen, n);
    let log = m.log();
    // The ACL `ls` asks of each file (its `security.selinux`, asked first, is `EOPNOTSUPP`
    // once and never again: fuse/xattr.rs), read ahead for the files that have extended
    // attributes: nearly all of them (an ask the kernel's thread sends itself may overtake a
    // read-ahead still queued on a busy runtime), and none of the others, whose listing
    // entries told the mount they have none (it answers their ACL from that; reading ahead
    // what is known already cost every later `ls -lR` a task per file).
    let with_xattrs = (0..n)
        .filter(|i| i.is_multiple_of(7) || i.is_multiple_of(11))
        .count();
    let ahead = read_ahead_entries(&log, "system.posix_acl_access");
    assert!(
        ahead >= with_xattrs * 9 / 10 && ahead <= with_xattrs,
        "ACL: {ahead} of {n} read ahead, {with_xattrs} have extended attributes\n{log}"
    );
    // A walk in the listing's order, as getfattr -R does.
    let walk = |label: &str| {
        let names = listing_order(&m.dir.join("many"));
        assert_eq!(names.len(), n);
        for p in &names {
            let i: usize = p.file_name().unwrap().to_str().unwrap()[1..]
                .parse()
                .unwrap();
            let want = match i {
                5 => Ok(b"changed".to_vec()),
                0 => Err(libc::ENODATA),
                _ if i.is_multiple_of(7) => Ok(tag(i)),
                _ => Err(libc::ENODATA),
            };
            assert_eq!(
                getxattr(p, "user.tag", 100),
                want,
                "{label}: {}",
                p.display()
            );
            let acl_len = getxattr(p, "system.posix_acl_access", 0).map(|v| v.len());
            let want = if i.is_multiple_of(11) {
                Ok(acl.len())
            } else {
                Err(libc::ENODATA)
            };
            assert_eq!(acl_len, want, "{label}: {}", p.display());
            let mut names = Vec::new();
            if i.is_multiple_of(11) {
                names.push("system.posix_acl_access");
            }
            if i == 5 || (i != 0 && i.is_multiple_of(7)) {
                names.push("user.tag");
            }
            assert_eq!(listxattr(p), names, "{label}: {}", p.display());
        }
    };
    // Through the mount: file 0 loses its tag, file 5 gets one.
    rustix::fs::removexattr(m.dir.join("many/f000"), "user.tag").unwrap();
    rustix::fs::setxattr(
        m.dir.join("many/f005"),
        "user.tag",
        b"changed",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    walk("first walk");
    let log = m.log();
    let ahead = read_ahead_entries(&log, "user.tag");
    assert!(ahead >= n * 9 / 10, "user.tag: {ahead} of {n} read ahead");
    walk("from the cache");
}

// ---- Appends (O_APPEND goes as APPEND, placed by the server) ----
//
// These run against sfsd's local backend only (the client tests start no NFS server);
// server/tests/append.rs checks APPEND itself under `SFSD_TEST_BACKEND=nfs` too.

/// `sfs --identity KEY --user USER mount SERVER DIR`: a mount logged in as another identity.
fn mount_as(s: &Setup, name: &str, user: &str, key: &Path) -> Mount {
    let dir = s.dir.path().join(name);
    fs::create_dir_all(&dir).unwrap();
    let dir = dir.canonicalize().unwrap();
    let log = s.dir.path().join(format!("{name}.log"));
    let mut c = sfs_cmd(&s.home);
    c.arg("--identity")
        .arg(key)
        .args(["--user", user, "-vv", "--timeout", "5", "mount"])
        .arg(&s.server.name)
        .arg(&dir)
        .arg("--log")
        .arg(&log);
    let out = run(c, LIMIT);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "mount as {user} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid = mounted_pid(&stdout);
    assert!(is_sfs_mount(&dir), "not in mountinfo after sfs mount");
    Mount { dir, pid, log }
}

/// Appends `n` numbered lines tagged `tag` to `path`, one `write(2)` each with `O_APPEND`
/// (Python's line-buffered append mode), in a process of its own.
fn appender(path: &Path, tag: &str, n: usize) -> std::process::Child {
    const SCRIPT: &str = "import sys\n\
        path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])\n\
        with open(path, 'a', buffering=1) as f:\n\
        \x20   for i in range(n):\n\
        \x20       f.write(f'{tag} {i:06d} ' + 'x' * (i % 53) + '\\n')\n";
    Command::new("python3")
        .args(["-c", SCRIPT])
        .arg(path)
        .arg(tag)
        .arg(n.to_string())
        .spawn()
        .unwrap()
}

/// Whether `text` is exactly the lines [`appender`] writes for each of `tags`, `n` each, in
/// any interleaving: every line whole and present once. The problems found, if any.
fn appended_lines_problems(text: &str, tags: &[&str], n: usize) -> Vec<String> {
    let mut problems = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let lines: Vec<&str> = text.split_terminator('\n').collect();
    if lines.len() != tags.len() * n || !text.ends_with('\n') {
        problems.push(format!(
            "{} lines (want {}), {} bytes",
            lines.len(),
            tags.len() * n,
            text.len()
        ));
    }
    for l in &lines {
        let mut parts = l.splitn(3, ' ');
        let (tag, i, pad) = (parts.next(), parts.next(), parts.next().unwrap_or(""));
        let ok = match (tag, i.and_then(|i| i.parse::<usize>().ok())) {
            (Some(tag), Some(i)) if tags.contains(&tag) && i < n => {
                pad == "x".repeat(i % 53) && seen.insert((tag.to_owned(), i))
            }
            _ => false,
        };
        if !ok && problems.len() < 10 {
            problems.push(format!("bad or repeated line {l:?}"));
        }
    }
    problems
}

/// Two mounts of one server, each logged in as its own identity, each with a process
/// appending 2000 lines to one file at once: every line arrives whole, once. Before APPEND the
/// kernel sent each append as a WRITE at the size it had cached, and about half the lines
/// were overwritten by the other mount's.
#[test]
fn appends_from_two_mounts_never_overwrite_each_other() {
    need_fuse!();
    const N: usize = 2000;
    let s = setup_users(&[("bob", 4242)]);
    let a = s.mount("a");
    let b = mount_as(&s, "b", "bob", &s.dir.path().join("idents/4242"));
    // Both users may write it (bob is server uid 4242 where sfsd switches credentials).
    let on_server = s.export.join("log");
    fs::write(&on_server, b"").unwrap();
    fs::set_permissions(&on_server, fs::Permissions::from_mode(0o666)).unwrap();

    let t = Instant::now();
    let mut procs = [
        appender(&a.dir.join("log"), "a", N),
        appender(&b.dir.join("log"), "b", N),
    ];
    let deadline = Instant::now() + LIMIT;
    for i in 0..procs.len() {
        loop {
            if let Some(status) = procs[i].try_wait().unwrap() {
                assert!(status.success(), "appender failed: {status}");
                break;
            }
            if Instant::now() > deadline {
                for p in &mut procs {
                    let _ = p.kill();
                }
                panic!("appenders did not finish within {LIMIT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let secs = t.elapsed().as_secs_f64();
    eprintln!(
        "two mounts appending {N} lines each at once: {secs:.2} s, {:.0} lines/s",
        (2 * N) as f64 / secs
    );

    let text = String::from_utf8(fs::read(&on_server).unwrap()).unwrap();
    let problems = appended_lines_problems(&text, &["a", "b"], N);
    assert!(problems.is_empty(), "{problems:#?}");
    // And each mount reads what the server has.
    for m in [&a, &b] {
        soon("the mount's copy of the log", text.len() as u64, || {
            fs::metadata(m.dir.join("log"))
                .map(|m| m.len())
                .unwrap_or(0)
        });
        assert!(fs::read(m.dir.join("log")).unwrap() == text.as_bytes());
    }
}

/// The kernel's view on one mount stays the server's while another mount appends: the size
/// and the data it reads (no page cached at the old end), and a file it holds open for
/// appending puts each of its writes at the end as the server has it.
#[test]
fn a_mount_sees_the_other_mounts_appends_and_appends_after_them() {
    need_fuse!();
    let s = setup();
    let a = s.mount("a");
    let b = s.mount("b");
    let (fa, fb) = (a.dir.join("f"), b.dir.join("f"));
    let append = |p: &Path, data: &[u8]| {
        fs::OpenOptions::new()
            .append(true)
            .open(p)
            .unwrap()
            .write_all(data)
            .unwrap();
    };

    fs::write(&fa, b"one\n").unwrap();
    // A caches the size and the pages (a reader keeps them open).
    let mut reader = fs::File::open(&fa).unwrap();
    let mut seen = String::new();
    reader.read_to_string(&mut seen).unwrap();
    assert_eq!(seen, "one\n");
    assert_eq!(fs::metadata(&fa).unwrap().len(), 4);

    append(&fb, b"two\n");
    soon("A's size after B appended", 8, || {
        fs::metadata(&fa).map(|m| m.len()).unwrap_or(0)
    });
    assert_eq!(fs::read(&fa).unwrap(), b"one\ntwo\n");

    // A holds the file open for appending; B appends between A's two writes.
    let mut w = fs::OpenOptions::new().append(true).open(&fa).unwrap();
    w.write_all(b"A1\n").unwrap();
    append(&fb, b"B\n");
    w.write_all(b"A2\n").unwrap();
    // And A's own append is seen by B.
    soon("B's size after A appended", 16, || {
        fs::metadata(&fb).map(|m| m.len()).unwrap_or(0)
    });
    drop(w);
    let want = "one\ntwo\nA1\nB\nA2\n";
    assert_eq!(fs::read_to_string(s.export.join("f")).unwrap(), want);
    // The reader opened before all this reads the server's data, not pages at old offsets.
    soon("A's old reader", want.to_owned(), || {
        let mut got = String::new();
        reader.seek(SeekFrom::Start(0)).unwrap();
        reader.read_to_string(&mut got).unwrap();
        got
    });
    for p in [&fa, &fb] {
        assert_eq!(fs::metadata(p).unwrap().len(), want.len() as u64);
        assert_eq!(fs::read_to_string(p).unwrap(), want);
    }
}

/// A file opened for appending (direct I/O here) can still be mapped shared and written
/// through the mapping, as on a local file system: the kernel writes the pages back at
/// their offsets.
#[test]
fn a_file_opened_for_appending_can_be_mapped_and_written() {
    need_fuse!();
    let s = setup();
    let m = s.mount("m");
    const SCRIPT: &str = "import mmap, os, sys\n\
        fd = os.open(sys.argv[1], os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)\n\
        os.write(fd, b'hello world\\n')\n\
        mm = mmap.mmap(fd, 12)\n\
        mm[0:5] = b'HELLO'\n\
        mm.flush()\n\
        mm.close()\n\
        os.write(fd, b'more\\n')\n\
        os.close(fd)\n";
    let out = Command::new("python3")
        .args(["-c", SCRIPT])
        .arg(m.dir.join("mapped"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        fs::read_to_string(s.export.join("mapped")).unwrap(),
        "HELLO world\nmore\n"
    );
}

/// A file an ordinary user creates read-only with `O_APPEND` (the server keeps the creating
/// descriptor, and answers APPEND through it `NotSupp`): its writes fall back to WRITEs at
/// the kernel's offset, and all of them arrive.
#[test]
fn appends_through_a_read_only_creation_fall_back_to_writes() {
    need_fuse!();
    let Some((s, _m, work)) = ordinary_user_mount() else {
        return;
    };
    let script = format!(
        "python3 -c 'import os\n\
         fd = os.open(\"{}\", os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o444)\n\
         os.write(fd, b\"ab\\n\")\n\
         os.write(fd, b\"cd\\n\")\n\
         os.close(fd)'",
        work.join("ro-log").display()
    );
    let (ok, err) = as_uid(65534, &script);
    assert!(ok, "{err}");
    assert_eq!(
        fs::read_to_string(s.export.join("work/ro-log")).unwrap(),
        "ab\ncd\n"
    );
}

/// Stops the test's sfsd (SIGSTOP) until the guard drops (SIGCONT), so a failed test leaves
/// no stopped server behind.
struct Stopped(String);

impl Stopped {
    fn server(s: &Setup) -> Stopped {
        let pid = s.server.child.id().to_string();
        let stopped = Command::new("kill").args(["-STOP", &pid]).status();
        assert!(stopped.unwrap().success());
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.0]).status();
    }
}

/// The names in `dir`, sorted.
/// Whether sfsd here watches its disk (it does as root), saying it skips if not.
fn disk_watched() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipped: sfsd watches its disk only as root");
    }
    root
}

fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|s| s.to_string()).collect()
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A directory `d` of `n` small files made through `m`, listed once (as `rm -r` lists what it
/// removes), and its first file removed the usual way, which asks whether this user may
/// remove entries of `d`.
fn listed_files(m: &Mount, n: usize) -> PathBuf {
    let d = m.dir.join("d");
    fs::create_dir(&d).unwrap();
    for i in 0..n {
        fs::write(d.join(format!("f{i:02}")), b"x").unwrap();
    }
    assert_eq!(names_in(&d).len(), n);
    fs::remove_file(d.join("f00")).unwrap();
    d
}

/// Removing behind (`client/src/fuse/removes_behind.rs`): once the server said this user may
/// remove entries of a directory, an unlink there is answered before the server's answer
/// (here the server is stopped, and they return anyway), its REMOVE reaches the server, and
/// nothing shows the directory as it was meanwhile: a listing asked while they are under
/// way does not hand out the names, the kept one included.
#[test]
fn unlinks_are_answered_before_the_server_and_reach_it() {
    need_fuse!();
    let s = setup();
    let m = s.mount("m");
    let d = listed_files(&m, 12);
    let stopped = Stopped::server(&s);
    let d2 = d.clone();
    let (removed, _) = within(
        "unlinks while the server is stopped",
        Duration::from_secs(10),
        move || (1..12).try_for_each(|i| fs::remove_file(d2.join(format!("f{i:02}")))),
    );
    removed.unwrap();
    let d3 = d.clone();
    let listing = std::thread::spawn(move || names_in(&d3));
    std::thread::sleep(Duration::from_millis(300));
    if listing.is_finished() {
        let early = listing.join().unwrap();
        panic!("a listing with the removals under way ended early: {early:?}");
    }
    drop(stopped);
    assert_eq!(listing.join().unwrap(), Vec::<String>::new());
    assert_eq!(names_in(&s.export.join("d")), Vec::<String>::new());
    // A name removed behind can be made again, and the directory removed.
    fs::write(d.join("f05"), b"new").unwrap();
    assert_eq!(fs::read(s.export.join("d/f05")).unwrap(), b"new");
    fs::remove_file(d.join("f05")).unwrap();
    fs::remove_dir(&d).unwrap();
    assert!(!s.export.join("d").exists());
}

/// What no client can foresee (here a file replaced by a directory on the server's own disk,
/// behind sfsd's back, while the mount still holds the file's attributes) makes the server
/// refuse a removal answered early: the name shows again, and `fsync` of the directory
/// reports the refusal, once. sfsd does not watch its disk here: with the watch, the mount
/// would hear of the change (an INVALIDATE) before or after the removal, as it happened.
#[test]
fn a_removal_refused_after_its_answer_is_reported_by_the_directorys_fsync() {
    need_fuse!();
    let s = setup_serving(None, &[], &["--no-disk-watch"]);
    let m = s.mount("m");
    let d = listed_files(&m, 3);
    let on_disk = s.export.join("d/f01");
    fs::remove_file(&on_disk).unwrap();
    fs::create_dir(&on_disk).unwrap();
    fs::write(on_disk.join("inside"), b"kept").unwrap();
    fs::remove_file(d.join("f01")).expect("answered before the server's refusal");
    let dir = fs::File::open(&d).unwrap();
    let refused = dir.sync_all().expect_err("the refusal is reported");
    assert_eq!(refused.raw_os_error(), Some(libc::EISDIR), "{refused}");
    dir.sync_all().expect("reported once");
    assert_eq!(names_in(&d), vec!["f01".to_string(), "f02".to_string()]);
    assert!(d.join("f01").is_dir());
    assert_eq!(fs::read(d.join("f01/inside")).unwrap(), b"kept");
    assert!(
        m.log()
            .contains("a file removed behind was refused by the server"),
        "{}",
        m.log()
    );
}

/// A background mount whose log cannot be written (its disk is full: here `/dev/full`) mounts
/// and serves all the same. Before, tracing reported the lost log line on standard error, which
/// for a background mount is the same full file, and that failed write panicked the mount
/// process; and `sfs mount`, seeing it exit, read the device given as its log for ever.
#[test]
fn a_mount_whose_log_cannot_be_written_still_serves() {
    need_fuse!();
    let s = setup();
    let m = s.mount_logging_to("full", &[&s.server.name], &[], PathBuf::from("/dev/full"));
    let dir = &m.dir;
    fs::write(dir.join("written"), b"with the log's disk full").unwrap();
    assert_eq!(
        fs::read(s.export.join("written")).unwrap(),
        b"with the log's disk full"
    );
}
