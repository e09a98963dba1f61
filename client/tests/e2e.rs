//! End to end against the real `sfsd`: transfers, permissions, HOSTID checks, restarts.

mod common;

use std::ffi::OsStr;
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const LIMIT: Duration = Duration::from_secs(120);

struct Setup {
    _dir: tempfile::TempDir,
    home: std::path::PathBuf,
    export: std::path::PathBuf,
    identity: std::path::PathBuf,
    server: Server,
}

/// A server exporting a fresh directory, with `alice` (key in `identity`) in its users file.
fn setup(extra: &[&str]) -> Setup {
    setup_as(None, extra)
}

/// [`setup`] with `alice` mapped to `user` (uid, gid), who owns the export; by default the
/// owner of the temporary directory.
fn setup_as(user: Option<(u32, u32)>, extra: &[&str]) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let export = dir.path().join("export");
    let state = dir.path().join("state");
    fs::create_dir_all(&home).unwrap();
    fs::create_dir_all(&export).unwrap();
    let identity = dir.path().join("alice.key");
    let mut c = sfs_cmd(&home);
    c.args(["keygen", "--out"]).arg(&identity);
    let out = run(c, LIMIT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let public = stdout.lines().last().unwrap().trim().to_owned();
    assert!(public.starts_with("ed25519:"), "{public}");
    // SAFETY-free uid lookup: the tests run as the owner of the temp dir.
    let (uid, gid) = user.unwrap_or_else(|| owner(dir.path()));
    std::os::unix::fs::chown(&export, Some(uid), Some(gid)).unwrap();
    let users = dir.path().join("users");
    fs::write(&users, format!("alice {public} {uid} {gid}\n")).unwrap();
    let users_s = users.to_string_lossy().into_owned();
    let mut args = vec!["--users", users_s.as_str()];
    args.extend_from_slice(extra);
    let server = Server::start(&state, &export, 0, &args);
    Setup {
        _dir: dir,
        home,
        export,
        identity,
        server,
    }
}

fn owner(p: &Path) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(p).unwrap();
    (m.uid(), m.gid())
}

impl Setup {
    fn sfs(&self, args: &[&str]) -> std::process::Output {
        let mut c = sfs_cmd(&self.home);
        c.arg("--identity").arg(&self.identity).args(args);
        run(c, LIMIT)
    }

    /// [`Setup::sfs`] run with `umask`.
    fn sfs_umask(&self, umask: u32, args: &[&str]) -> std::process::Output {
        use std::os::unix::process::CommandExt;
        let mut c = sfs_cmd(&self.home);
        c.arg("--identity").arg(&self.identity).args(args);
        // SAFETY: umask(2) is async-signal-safe and cannot fail.
        unsafe {
            c.pre_exec(move || {
                libc::umask(umask as libc::mode_t);
                Ok(())
            });
        }
        run(c, LIMIT)
    }

    fn path(&self, p: &str) -> String {
        format!("{}{}", self.server.name, p)
    }
}

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn put_then_get_large_file_keeps_its_sha256() {
    let s = setup(&[]);
    let local = s.home.join("big.bin");
    fs::write(&local, data(12 << 20, 1)).unwrap();
    let t = Instant::now();
    ok(&s.sfs(&["put", local.to_str().unwrap(), &s.path("/big.bin")]));
    let put = t.elapsed();
    assert_eq!(sha256_file(&local), sha256_file(&s.export.join("big.bin")));
    let back = s.home.join("back.bin");
    let t = Instant::now();
    ok(&s.sfs(&["get", &s.path("/big.bin"), back.to_str().unwrap()]));
    let get = t.elapsed();
    assert_eq!(sha256_file(&local), sha256_file(&back));
    eprintln!(
        "12 MiB: put {:.1} MiB/s, get {:.1} MiB/s (debug client, 2 shared cores)",
        12.0 / put.as_secs_f64(),
        12.0 / get.as_secs_f64()
    );
}

#[test]
fn commands_behave_like_shell_tools() {
    let s = setup(&[]);
    fs::write(s.export.join("hello.txt"), b"hello\n").unwrap();
    assert_eq!(ok(&s.sfs(&["cat", &s.path("/hello.txt")])), "hello\n");
    ok(&s.sfs(&["mkdir", "-p", &s.path("/a/b")]));
    assert!(s.export.join("a/b").is_dir());
    ok(&s.sfs(&["mv", &s.path("/hello.txt"), &s.path("/a/b/")]));
    assert!(s.export.join("a/b/hello.txt").is_file());
    let ls = ok(&s.sfs(&["ls", &s.path("/a/b")]));
    assert_eq!(ls.trim(), "hello.txt");
    let js = ok(&s.sfs(&["stat", "--json", &s.path("/a/b/hello.txt")]));
    let v: serde_json::Value = serde_json::from_str(&js).unwrap();
    assert_eq!(v["size"], 6);
    assert_eq!(v["type"], "file");
    let js = ok(&s.sfs(&["ls", "--json", &s.path("/a")]));
    let v: serde_json::Value = serde_json::from_str(&js).unwrap();
    assert_eq!(v[0]["name"], "b");
    assert_eq!(v[0]["type"], "dir");

    let missing = s.sfs(&["cat", &s.path("/nope")]);
    assert_eq!(missing.status.code(), Some(1));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.contains("No such file or directory"), "{err}");

    // put reads blocks at their offsets, which a device or pipe cannot do: refused up front,
    // and nothing is created on the server.
    let device = s.sfs(&["put", "/dev/zero", &s.path("/zero")]);
    assert_eq!(device.status.code(), Some(1));
    let err = String::from_utf8_lossy(&device.stderr);
    assert!(err.contains("/dev/zero: Not a regular file"), "{err}");
    assert!(!s.export.join("zero").exists());

    // -r both ways.
    let tree = s.home.join("tree");
    fs::create_dir_all(tree.join("sub")).unwrap();
    fs::write(tree.join("sub/f"), data(100_000, 2)).unwrap();
    ok(&s.sfs(&["put", "-r", tree.to_str().unwrap(), &s.path("/")]));
    assert_eq!(
        fs::read(s.export.join("tree/sub/f")).unwrap(),
        data(100_000, 2)
    );
    let back = s.home.join("back");
    ok(&s.sfs(&["get", "-r", &s.path("/tree"), back.to_str().unwrap()]));
    assert_eq!(fs::read(back.join("sub/f")).unwrap(), data(100_000, 2));
    ok(&s.sfs(&["rm", "-r", &s.path("/tree")]));
    assert!(!s.export.join("tree").exists());
    let rm = s.sfs(&["rm", &s.path("/tree")]);
    assert_eq!(rm.status.code(), Some(1));
}

#[test]
fn wrong_hostid_is_refused_with_a_clear_message() {
    let s = setup(&[]);
    // Same location, another server's HOSTID.
    let (loc, _) = s.server.name.split_once(',').unwrap();
    let bad = format!("{loc},{}", "a".repeat(32));
    let out = s.sfs(&["ls", &format!("{bad}/")]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.to_lowercase().contains("hostid"), "{err}");
}

#[test]
fn user_not_in_users_file_gets_permission_errors() {
    let s = setup(&[]);
    fs::write(s.export.join("secret"), b"x").unwrap();
    let other = s.home.join("mallory.key");
    let mut c = sfs_cmd(&s.home);
    c.args(["keygen", "--out"]).arg(&other);
    ok(&run(c, LIMIT));
    for args in [vec!["ls", "/"], vec!["cat", "/secret"], vec!["mkdir", "/m"]] {
        let mut c = sfs_cmd(&s.home);
        c.arg("--identity")
            .arg(&other)
            .args(["--user", "mallory", args[0]])
            .arg(s.path(args[1]));
        let out = run(c, LIMIT);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("Permission denied"), "{args:?}: {err}");
    }
    assert!(!s.export.join("m").exists());
    // Alice, in the users file, may.
    ok(&s.sfs(&["mkdir", &s.path("/m")]));
}

/// Runs `sfs` with `args` (and the identity) and restarts `s`'s server once `growing` holds
/// more than `past` bytes of the `size` the transfer writes there: the command must finish
/// successfully all the same.
fn restart_mid_transfer(s: &mut Setup, args: &[&OsStr], growing: &Path, past: u64, size: u64) {
    let mut c = sfs_cmd(&s.home);
    c.arg("--identity")
        .arg(&s.identity)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = Guard(c.spawn().unwrap());
    let deadline = Instant::now() + LIMIT;
    loop {
        let n = fs::metadata(growing).map(|m| m.len()).unwrap_or(0);
        if n > past {
            assert!(n < size, "transfer finished before the restart");
            break;
        }
        assert!(Instant::now() < deadline, "transfer did not start");
        std::thread::sleep(Duration::from_millis(2));
    }
    s.server.restart();
    let status = loop {
        if let Some(st) = child.0.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "{args:?} did not finish");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    use std::io::Read;
    let _ = child.0.stderr.take().unwrap().read_to_string(&mut err);
    assert!(status.success(), "{err}");
}

#[test]
fn server_restart_mid_read_resumes_with_content_intact() {
    let mut s = setup(&[]);
    const SIZE: usize = 24 << 20;
    let src = s.export.join("big");
    fs::write(&src, data(SIZE, 3)).unwrap();
    let back = s.home.join("big");
    let remote = s.path("/big");
    let args = [OsStr::new("get"), OsStr::new(&remote), back.as_os_str()];
    restart_mid_transfer(&mut s, &args, &back, 1 << 20, SIZE as u64);
    assert_eq!(sha256_file(&src), sha256_file(&back));
}

/// `sfs put` while sfsd is killed and started again: the WRITEs under way are sent again to
/// the new one and the write verifier (the server machine's boot) is unchanged, so the put
/// finishes and the file is whole.
#[test]
fn server_restart_mid_put_finishes_with_content_intact() {
    let mut s = setup(&[]);
    const SIZE: usize = 48 << 20;
    let src = s.home.join("big");
    fs::write(&src, data(SIZE, 5)).unwrap();
    let dst = s.export.join("big");
    let remote = s.path("/big");
    let args = [OsStr::new("put"), src.as_os_str(), OsStr::new(&remote)];
    // Past the first window (8 MiB), so the first WRITEs were answered by the server killed
    // then.
    restart_mid_transfer(&mut s, &args, &dst, 16 << 20, SIZE as u64);
    assert_eq!(sha256_file(&src), sha256_file(&dst));
}

#[test]
fn mount_nfs_without_kernel_nfs_prints_the_command() {
    let s = setup(&[]);
    let mnt = s.home.join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let has_nfs = fs::read_to_string("/proc/filesystems")
        .map(|t| {
            t.lines()
                .any(|l| l.split_whitespace().last() == Some("nfs"))
        })
        .unwrap_or(false);
    if has_nfs {
        eprintln!("kernel has NFS: not mounting from a test");
        return;
    }
    let out = s.sfs(&["mount", "--nfs", &s.server.name, mnt.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no NFS client"), "{err}");
    assert!(
        err.contains("mount -t nfs -o vers=3,tcp,nolock,port="),
        "{err}"
    );
    assert!(err.contains(&format!("sfs nfs {}", s.server.name)), "{err}");
}

#[test]
fn keygen_refuses_to_overwrite_and_prints_the_key_last() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("k");
    let mut c = sfs_cmd(dir.path());
    c.args(["keygen", "--out"]).arg(&key);
    let out = run(c, LIMIT);
    let first = ok(&out);
    let public = first.lines().last().unwrap();
    assert!(
        public.starts_with("ed25519:") && public.len() == 8 + 64,
        "{public}"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let mut c = sfs_cmd(dir.path());
    c.args(["keygen", "--out"]).arg(&key);
    let out = run(c, LIMIT);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"));
    let mut c = sfs_cmd(dir.path());
    c.args(["keygen", "--force", "--out"]).arg(&key);
    let second = ok(&run(c, LIMIT));
    assert_ne!(second.lines().last(), Some(public));
}

#[test]
fn bookmarks_stand_for_servers_in_every_command() {
    let s = setup(&[]);
    fs::create_dir_all(s.home.join(".sfs")).unwrap();
    fs::write(
        s.home.join(".sfs/bookmarks"),
        format!("# test\nwork {}\n", s.server.name),
    )
    .unwrap();
    fs::write(s.export.join("note"), b"via alias\n").unwrap();
    assert_eq!(ok(&s.sfs(&["cat", "work:/note"])), "via alias\n");
    ok(&s.sfs(&["mkdir", "work:/d"]));
    ok(&s.sfs(&["mv", "work:/note", "work:/d/note"]));
    assert!(s.export.join("d/note").exists());
    assert!(ok(&s.sfs(&["ls", "work:/d"])).contains("note"));
    // An unknown alias is a usage error naming the bookmarks file.
    let out = s.sfs(&["cat", "home:/note"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no bookmark \"home\"") && err.contains("bookmarks"),
        "{err}"
    );
}

fn mode(p: &Path) -> String {
    use std::os::unix::fs::PermissionsExt;
    format!(
        "{:o}",
        fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    )
}

/// `sfs mkdir` makes what a local `mkdir` would: 0777 less the umask, so its user can list
/// it, fill it and remove it (it used to send no mode, and sfsd in front of NFS-Ganesha made
/// such a directory 000). `mkdir -p` parents get u+wx as with GNU mkdir. Run as a user other
/// than root where the tests run as root, so permissions are checked.
#[test]
fn mkdir_makes_what_a_local_mkdir_would() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let s = setup_as(root.then_some((1000, 1000)), &[]);
    for (umask, want) in [
        (0o022, "755"),
        (0o027, "750"),
        (0o002, "775"),
        (0o077, "700"),
    ] {
        let d = format!("/d{umask:o}");
        ok(&s.sfs_umask(umask, &["mkdir", &s.path(&d)]));
        assert_eq!(mode(&s.export.join(&d[1..])), want, "umask {umask:03o}");
        // Its user can fill it, list it and remove it.
        let f = s.home.join("f");
        fs::write(&f, b"x").unwrap();
        ok(&s.sfs_umask(
            umask,
            &["put", f.to_str().unwrap(), &s.path(&format!("{d}/f"))],
        ));
        assert_eq!(ok(&s.sfs(&["ls", &s.path(&d)])).trim(), "f");
        ok(&s.sfs(&["rm", "-r", &s.path(&d)]));
        assert!(!s.export.join(&d[1..]).exists());
    }
    // -p: the parents writable and searchable by their owner whatever the umask.
    ok(&s.sfs_umask(0o577, &["mkdir", "-p", &s.path("/p/q/r")]));
    assert_eq!(mode(&s.export.join("p")), "300");
    assert_eq!(mode(&s.export.join("p/q")), "300");
    assert_eq!(mode(&s.export.join("p/q/r")), "200");
}

/// `sfs put` makes files and directories as `cp` does: the local mode less the umask and
/// without setuid or setgid; a read-only file or directory is filled first, then made
/// read-only (WRITE is checked against the mode the file has).
#[test]
fn put_gives_the_local_mode_less_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let s = setup_as(root.then_some((1000, 1000)), &[]);
    let set = |p: &Path, m: u32| fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
    let tree = s.home.join("tree");
    fs::create_dir(&tree).unwrap();
    fs::write(tree.join("ro"), b"read only").unwrap();
    set(&tree.join("ro"), 0o444);
    fs::write(tree.join("suid"), b"#!/bin/sh\n").unwrap();
    set(&tree.join("suid"), 0o4755);
    set(&tree, 0o555);
    ok(&s.sfs_umask(
        0o027,
        &["put", "-r", tree.to_str().unwrap(), &s.path("/tree")],
    ));
    let ex = s.export.join("tree");
    assert_eq!(mode(&ex), "550");
    assert_eq!(mode(&ex.join("ro")), "440");
    assert_eq!(mode(&ex.join("suid")), "750", "no setuid");
    assert_eq!(fs::read(ex.join("ro")).unwrap(), b"read only");
    ok(&s.sfs_umask(
        0o022,
        &["put", tree.join("ro").to_str().unwrap(), &s.path("/ro")],
    ));
    assert_eq!(mode(&s.export.join("ro")), "444");
    assert_eq!(fs::read(s.export.join("ro")).unwrap(), b"read only");
    set(&tree, 0o755);
}

/// The requests one `sfs` run sent, in order, from its `sfs::requests` debug lines (the only
/// ones `SFS_LOG=sfs::requests=debug` lets through).
fn requests_of(out: &std::process::Output) -> Vec<String> {
    ok(out);
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| l.split("proc=").nth(1))
        .map(|p| p.split_whitespace().next().unwrap_or("").to_owned())
        .collect()
}

/// `sfs put` of a new file makes it by path with one CREATEAT riding with the LOGIN: no
/// MOUNT, no LOOKUP, no CREATE of its own, one round trip after the handshake before the
/// first WRITE. A name that is an existing directory still receives the file under its own
/// name, and an existing file is overwritten, as `cp` does.
#[test]
fn put_makes_its_file_with_the_login() {
    let s = setup(&[]);
    fs::create_dir(s.export.join("d")).unwrap();
    let local = s.home.join("f.txt");
    fs::write(&local, b"first").unwrap();
    let put = |remote: &str| {
        let mut c = sfs_cmd(&s.home);
        c.env("SFS_LOG", "sfs::requests=debug")
            .arg("--identity")
            .arg(&s.identity)
            .args(["put", local.to_str().unwrap(), &s.path(remote)]);
        requests_of(&run(c, LIMIT))
    };
    // The CREATEAT goes out with the LOGIN, not as a request of its own.
    let new = put("/d/new.txt");
    assert_eq!(new, ["Write", "Commit"], "{new:?}");
    assert_eq!(fs::read(s.export.join("d/new.txt")).unwrap(), b"first");
    fs::write(&local, b"second").unwrap();
    // Taken: what is there is looked at, then the file truncated.
    let over = put("/d/new.txt");
    assert_eq!(over[..3], ["Fetch", "CreateAt", "Write"], "{over:?}");
    assert_eq!(fs::read(s.export.join("d/new.txt")).unwrap(), b"second");
    let into = put("/d");
    assert_eq!(into[..3], ["Fetch", "Create", "Write"], "{into:?}");
    assert_eq!(fs::read(s.export.join("d/f.txt")).unwrap(), b"second");
    let missing = {
        let mut c = sfs_cmd(&s.home);
        c.arg("--identity").arg(&s.identity).args([
            "put",
            local.to_str().unwrap(),
            &s.path("/nowhere/x"),
        ]);
        run(c, LIMIT)
    };
    assert!(!missing.status.success());
    assert!(!s.export.join("nowhere").exists());
}

/// `sfs ls -l` prints times as GNU `ls -l` does, in the local time zone (`TZ`); `--json`
/// keeps the exact seconds and nanoseconds.
#[test]
fn ls_long_prints_local_times_and_json_the_exact_ones() {
    use std::time::{SystemTime, UNIX_EPOCH};
    let s = setup(&[]);
    let set_mtime = |name: &str, t: SystemTime| {
        let p = s.export.join(name);
        fs::write(&p, b"x").unwrap();
        fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(t)
            .unwrap();
    };
    // 2020-09-13 20:30:00.25 UTC: 2020-09-14 05:30 in Tokyo.
    set_mtime("old", UNIX_EPOCH + Duration::from_millis(1_600_029_000_250));
    // Two hours ago, on a whole minute.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let recent = now - 7200 - now % 60;
    set_mtime("new", UNIX_EPOCH + Duration::from_secs(recent));
    let ls_l = |tz: &str| {
        let mut c = sfs_cmd(&s.home);
        c.env("TZ", tz)
            .arg("--identity")
            .arg(&s.identity)
            .args(["ls", "-l", &s.path("/")]);
        ok(&run(c, LIMIT))
    };
    let line = |out: &str, name: &str| {
        out.lines()
            .find(|l| l.ends_with(&format!(" {name}")))
            .unwrap_or_else(|| panic!("no {name} in {out}"))
            .to_owned()
    };
    let hhmm = |offset: u64| {
        let day = (recent + offset) % 86_400;
        format!(" {:02}:{:02} new", day / 3600, day % 3600 / 60)
    };
    let utc = ls_l("UTC0");
    assert!(line(&utc, "old").ends_with(" Sep 13  2020 old"), "{utc}");
    assert!(line(&utc, "new").ends_with(&hhmm(0)), "{utc}");
    let tokyo = ls_l("JST-9");
    assert!(
        line(&tokyo, "old").ends_with(" Sep 14  2020 old"),
        "{tokyo}"
    );
    assert!(line(&tokyo, "new").ends_with(&hhmm(9 * 3600)), "{tokyo}");
    // --json: the numbers themselves, whatever the zone.
    let js = ok(&s.sfs(&["ls", "--json", &s.path("/")]));
    let v: serde_json::Value = serde_json::from_str(&js).unwrap();
    let mtime = |name: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .and_then(|e| e["mtime"].as_f64())
            .unwrap()
    };
    assert_eq!(mtime("old"), 1_600_029_000.25);
    assert_eq!(mtime("new"), recent as f64);
}

/// A server's names with terminal control sequences (to retitle the window, clear the screen)
/// reach a terminal escaped as GNU `ls` escapes them, and error messages are always escaped;
/// a pipe gets the raw names, as from `ls`, and `--json` the exact ones.
#[test]
fn server_names_never_reach_a_terminal_raw() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("SKIPPED: needs script(1) (util-linux) for a terminal");
        return;
    }
    let s = setup(&[]);
    let evil = "retitle\x1b]0;owned\x07\x1b[2J";
    fs::write(s.export.join(evil), b"x").unwrap();
    let escaped = r"'retitle'$'\033'']0;owned'$'\007\033''[2J'";
    // On a terminal (script(1) gives sfs one; its output is what the terminal got).
    let sfs = env!("CARGO_BIN_EXE_sfs");
    for args in ["ls", "ls -l"] {
        let line = format!(
            "{sfs} --identity {} {args} {}/",
            s.identity.display(),
            s.server.name
        );
        let out = Command::new("script")
            .args(["-qec", &line, "/dev/null"])
            .env("HOME", &s.home)
            .env("SFS_USER", "alice")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        assert!(!text.contains('\x1b') && !text.contains('\x07'), "{text:?}");
        assert!(text.contains(escaped), "{args}: {text:?}");
    }
    // Into a pipe: raw, as ls.
    let out = ok(&s.sfs(&["ls", &s.path("/")]));
    assert_eq!(out, format!("{evil}\n"));
    // JSON: exact.
    let out = ok(&s.sfs(&["ls", "--json", &s.path("/")]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["name"], evil);
    // Errors: escaped wherever they go.
    let out = s.sfs(&["cat", &s.path(&format!("/{evil}/below"))]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains('\x1b') && !err.contains('\x07'), "{err:?}");
    assert!(err.contains(r"$'\033'"), "{err:?}");
}

/// The identity says who the client acts as, so it is read only when nobody else could have
/// written or redirected it (as ssh's private-key check): a key others can read or write, or
/// a symlink to a key, is refused with the file named and what to change, before any
/// connection.
#[test]
fn identity_files_others_could_change_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let s = setup(&[]);
    let ls = |identity: &Path| {
        let mut c = sfs_cmd(&s.home);
        c.arg("--identity")
            .arg(identity)
            .args(["ls", &s.server.name]);
        run(c, LIMIT)
    };
    ok(&ls(&s.identity));
    let link = s.home.join("link.key");
    std::os::unix::fs::symlink(&s.identity, &link).unwrap();
    let out = ls(&link);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("symbolic link"),
        "{err}"
    );
    for (mode, why) in [(0o620, "chmod go-w"), (0o640, "chmod 600")] {
        fs::set_permissions(&s.identity, fs::Permissions::from_mode(mode)).unwrap();
        let out = ls(&s.identity);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(why) && err.contains("alice.key"),
            "{mode:o}: {err}"
        );
    }
}
