//! The client against a hostile server ([`hostile::Hostile`]): names that climb out of the
//! destination, a symlink then a directory of the same name, symlinks planted in a sticky
//! directory, endless listings, READ replies longer than asked. Whatever the server sends,
//! nothing is written outside what the user named and memory stays bounded.

mod common;
mod hostile_server;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use common::*;
use hostile_server::*;
use protocol::{DirEntryPlus, DirPage, FileType, ReplyBody, RequestOp};

const LIMIT: Duration = Duration::from_secs(60);

/// `sfs ARGS` with a fresh HOME (anonymous: the fake server accepts anyone).
fn sfs(home: &Path, args: &[&str]) -> Output {
    let mut c = sfs_cmd(home);
    c.args(args);
    run(c, LIMIT)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A scratch area: `top` holds `home`, `dest` (where files may go) and `outside` (a file and a
/// directory nothing may touch).
struct Scratch {
    _dir: tempfile::TempDir,
    top: std::path::PathBuf,
    home: std::path::PathBuf,
    dest: std::path::PathBuf,
    outside: std::path::PathBuf,
}

fn scratch() -> Scratch {
    let dir = tempfile::tempdir().unwrap();
    let top = dir.path().to_path_buf();
    let home = top.join("home");
    let dest = top.join("dest");
    let outside = top.join("outside");
    fs::create_dir(&home).unwrap();
    fs::create_dir(&dest).unwrap();
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("precious"), b"keep me").unwrap();
    Scratch {
        _dir: dir,
        top,
        home,
        dest,
        outside,
    }
}

impl Scratch {
    /// Everything outside `dest` (and `home`, where the client keeps its own files).
    fn outside_dest(&self) -> Vec<(std::path::PathBuf, String)> {
        snapshot(&self.top)
            .into_iter()
            .filter(|(p, _)| !p.starts_with(&self.dest) && !p.starts_with(&self.home))
            .collect()
    }
}

#[test]
fn get_refuses_names_that_are_not_one_component() {
    let s = scratch();
    // Directory 2 ("d") lists the bad names, each a file, then one good file.
    let mut t = Tree::new(vec![("d", 2)]);
    t.dir(
        2,
        vec![
            ("..", 3),
            ("../x", 3),
            ("a/b", 3),
            ("", 3),
            (".", 3),
            ("nul\0byte", 3),
            ("good", 4),
        ],
    )
    .file(3, b"evil")
    .file(4, b"fine");
    let srv = Hostile::start(move |op| t.answer(op));
    let before = s.outside_dest();
    let out = sfs(
        &s.home,
        &[
            "get",
            "-r",
            &format!("{}/d", srv.name),
            s.dest.to_str().unwrap(),
        ],
    );
    let err = text(&out.stderr);
    assert_eq!(s.outside_dest(), before, "nothing changed outside dest");
    assert!(
        !out.status.success(),
        "bad names make the command fail: {err}"
    );
    for shown in ["'..'", "'../x'", "'a/b'", "''", "'.'"] {
        assert!(
            err.contains(&format!("refusing the name {shown}")),
            "{shown} reported: {err}"
        );
    }
    assert!(err.contains(r"'nul'$'\000''byte'"), "escaped NUL: {err}");
    // The good entry is still copied, and nothing but it.
    assert_eq!(fs::read(s.dest.join("d/good")).unwrap(), b"fine");
    let made: Vec<_> = fs::read_dir(s.dest.join("d")).unwrap().collect();
    assert_eq!(made.len(), 1, "only the good name: {made:?}");
}

#[test]
fn get_never_writes_through_a_symlink_the_server_sent() {
    let s = scratch();
    let outside = s.outside.to_str().unwrap().as_bytes().to_vec();
    // "d" lists a symlink "l" to the outside directory, then a directory "l" with a file in
    // it: written through the link, the file would land outside. Then "f" twice.
    let mut t = Tree::new(vec![("d", 2)]);
    t.dir(2, vec![("l", 3), ("l", 4), ("f", 6), ("f", 7)])
        .link(3, &outside)
        .dir(4, vec![("pwned", 5)])
        .file(5, b"evil")
        .file(6, b"first")
        .file(7, b"second");
    let srv = Hostile::start(move |op| t.answer(op));
    let before = s.outside_dest();
    let out = sfs(
        &s.home,
        &[
            "get",
            "-r",
            &format!("{}/d", srv.name),
            s.dest.to_str().unwrap(),
        ],
    );
    let err = text(&out.stderr);
    assert_eq!(
        s.outside_dest(),
        before,
        "nothing changed outside dest: {err}"
    );
    assert!(!s.outside.join("pwned").exists());
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("d/l: listed twice"), "{err}");
    assert!(err.contains("d/f: listed twice"), "{err}");
    // The first of each is kept as sent: the link as a link (never followed), the file.
    let l = s.dest.join("d/l");
    assert!(fs::symlink_metadata(&l).unwrap().file_type().is_symlink());
    assert_eq!(fs::read_link(&l).unwrap(), s.outside);
    assert_eq!(fs::read(s.dest.join("d/f")).unwrap(), b"first");
}

/// Another local user's symlinks in a sticky world-writable directory (as in /tmp) are never
/// followed, whatever fs.protected_symlinks says: the file the server sends is not written
/// through a planted link, nor a tree through a planted directory link.
#[test]
fn get_into_a_sticky_directory_does_not_follow_planted_symlinks() {
    let s = scratch();
    let sticky = s.dest.join("tmp");
    fs::create_dir(&sticky).unwrap();
    fs::set_permissions(&sticky, fs::Permissions::from_mode(0o1777)).unwrap();
    let plant = |name: &str, target: &Path| {
        let p = sticky.join(name);
        std::os::unix::fs::symlink(target, &p).unwrap();
        std::os::unix::fs::lchown(&p, Some(4242), Some(4242)).unwrap();
    };
    plant("f", &s.outside.join("precious"));
    plant("t", &s.outside);
    // And another user's regular file, which they could read after we wrote to it.
    let theirs = sticky.join("r");
    fs::write(&theirs, b"theirs").unwrap();
    std::os::unix::fs::chown(&theirs, Some(4242), Some(4242)).unwrap();
    let mut tree = Tree::new(vec![("f", 2), ("t", 3), ("r", 2)]);
    tree.file(2, b"evil")
        .dir(3, vec![("precious", 2), ("new", 2)]);
    let srv = Hostile::start(move |op| tree.answer(op));
    let before = s.outside_dest();
    let dir = sticky.to_str().unwrap();
    let file = sfs(&s.home, &["get", &format!("{}/f", srv.name), dir]);
    let tree = sfs(&s.home, &["get", "-r", &format!("{}/t", srv.name), dir]);
    let other = sfs(&s.home, &["get", &format!("{}/r", srv.name), dir]);
    assert_eq!(fs::read(&theirs).unwrap(), b"theirs");
    let err = text(&other.stderr);
    assert!(!other.status.success(), "{err}");
    assert!(err.contains("tmp/r: belongs to another user"), "{err}");
    assert_eq!(s.outside_dest(), before, "outside untouched");
    assert_eq!(fs::read(s.outside.join("precious")).unwrap(), b"keep me");
    for (out, name) in [(file, "f"), (tree, "t")] {
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{name}: {err}");
        assert!(
            err.contains(&format!("tmp/{name}: is a symbolic link")),
            "{name} reported: {err}"
        );
        assert!(
            fs::symlink_metadata(sticky.join(name))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }
}

/// Pages of `per_page` entries with names of `name_len` bytes and ever larger cookies, never
/// eof.
fn endless_page(cookie: u64, per_page: u64, name_len: usize) -> ReplyBody {
    let entries = (cookie + 1..=cookie + per_page)
        .map(|c| DirEntryPlus {
            fileid: c,
            name: format!("{c:0>name_len$}").into_bytes(),
            cookie: c,
            attr: Some(attr(c + 10, FileType::Regular, 0)),
            fh: Some(fh(c + 10)),
        })
        .collect();
    ReplyBody::ReadDirPlus(DirPage {
        dir_attr: None,
        verifier: [0; 8],
        entries,
        eof: false,
    })
}

/// Runs `sfs ARGS` watching its resident memory: (output, peak VmRSS in KiB). The child is
/// killed once it passes `max_kib` or the time limit.
fn run_watched(home: &Path, args: &[&str], max_kib: u64) -> (Output, u64) {
    use std::io::Read;
    let mut c = sfs_cmd(home);
    c.args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = Guard(c.spawn().unwrap());
    let mut err = child.0.stderr.take().unwrap();
    let errs = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let status_file = format!("/proc/{}/status", child.0.id());
    let deadline = Instant::now() + LIMIT;
    let mut peak = 0;
    let status = loop {
        if let Ok(s) = fs::read_to_string(&status_file)
            && let Some(kib) = s
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            peak = peak.max(kib);
        }
        if let Some(st) = child.0.try_wait().unwrap() {
            break st;
        }
        assert!(peak <= max_kib, "sfs grew past {max_kib} KiB");
        assert!(
            Instant::now() < deadline,
            "sfs did not finish within {LIMIT:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = errs.join().unwrap();
    (
        Output {
            status,
            stdout: Vec::new(),
            stderr,
        },
        peak,
    )
}

/// Resident memory the listing tests allow the client: the entry bound's worth of entries
/// and then some, far less than an endless listing would take.
const LISTING_MAX_KIB: u64 = 768 * 1024;

/// `sfs ls` of a directory whose listing never ends, with pages of `per_page` names of
/// `name_len` bytes: it fails, saying why, within the memory bound.
fn endless_listing(per_page: u64, name_len: usize, why: &str) {
    let s = scratch();
    let tree = Tree::new(vec![]);
    let srv = Hostile::start(move |op| match op {
        RequestOp::ReadDirPlus { cookie, .. } => {
            vec![Out::Reply(Ok(endless_page(*cookie, per_page, name_len)))]
        }
        op => tree.answer(op),
    });
    let start = Instant::now();
    let (out, peak) = run_watched(&s.home, &["ls", &format!("{}/", srv.name)], LISTING_MAX_KIB);
    let err = text(&out.stderr);
    eprintln!(
        "endless listing of {name_len}-byte names: {:?}, peak RSS {peak} KiB",
        start.elapsed()
    );
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("endless listing"), "{err}");
    assert!(err.contains(why), "{err}");
}

#[test]
fn ls_of_an_endless_listing_of_long_names_fails_in_bounded_memory() {
    endless_listing(2000, 200, "bytes of names");
}

#[test]
fn ls_of_an_endless_listing_of_short_names_fails_in_bounded_memory() {
    endless_listing(4000, 8, "entries");
}

#[test]
fn ls_of_an_endless_listing_one_entry_a_page_fails() {
    endless_listing(1, 8, "pages");
}

#[test]
fn a_listing_whose_cookie_repeats_is_an_error() {
    let s = scratch();
    let tree = Tree::new(vec![]);
    // Always the same page, whatever cookie is asked for.
    let srv = Hostile::start(move |op| match op {
        RequestOp::ReadDirPlus { .. } => vec![Out::Reply(Ok(endless_page(0, 10, 8)))],
        op => tree.answer(op),
    });
    let (out, _) = run_watched(&s.home, &["ls", &format!("{}/", srv.name)], LISTING_MAX_KIB);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("endless listing"), "{err}");
}

#[test]
fn a_read_reply_longer_than_asked_is_an_error() {
    let s = scratch();
    let mut tree = Tree::new(vec![("f", 2)]);
    tree.file(2, b"ten bytes!");
    let srv = Hostile::start(move |op| match op {
        RequestOp::Read { count, .. } => vec![Out::Reply(Ok(ReplyBody::Read {
            attr: None,
            eof: true,
            data: vec![b'x'; *count as usize + 100].into(),
        }))],
        op => tree.answer(op),
    });
    let local = s.dest.join("f");
    let out = sfs(
        &s.home,
        &["get", &format!("{}/f", srv.name), local.to_str().unwrap()],
    );
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("more data than asked"), "{err}");
    let len = fs::metadata(&local).map(|m| m.len()).unwrap_or(0);
    assert!(len <= 10, "local file of {len} bytes");
}

/// A flood of INVALIDATEs, each READ reply preceded by thousands, while `sfs get` copies a
/// file: the copy completes and memory stays bounded.
#[test]
fn a_flood_of_invalidates_keeps_memory_bounded() {
    let s = scratch();
    let data = data(8 << 20, 3);
    let mut tree = Tree::new(vec![("f", 2)]);
    tree.file(2, &data);
    let n = std::sync::atomic::AtomicU64::new(0);
    let srv = Hostile::start(move |op| {
        let mut outs: Vec<Out> = match op {
            RequestOp::Read { .. } => (0..20_000)
                .map(|_| {
                    Out::Invalidate(fh(
                        n.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 100
                    ))
                })
                .collect(),
            _ => Vec::new(),
        };
        outs.extend(tree.answer(op));
        outs
    });
    let local = s.dest.join("f");
    let (out, peak) = run_watched(
        &s.home,
        &["get", &format!("{}/f", srv.name), local.to_str().unwrap()],
        256 * 1024,
    );
    eprintln!("invalidate flood: peak RSS {peak} KiB");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(fs::read(&local).unwrap(), data);
}

/// `get -r` of a directory whose listing never ends, and of directories nested without end:
/// each stops at its bound, with nothing written outside the destination.
#[test]
fn get_of_endless_trees_stops_at_the_bounds() {
    let s = scratch();
    // Node 2 lists forever; node 3 and every node below it lists one directory "d" deeper.
    let srv = Hostile::start(move |op| {
        let dir = |id| {
            vec![Out::Reply(Ok(ReplyBody::GetAttr {
                attr: attr(id, FileType::Directory, 4096),
            }))]
        };
        match op {
            RequestOp::Mount { .. } => vec![Out::Reply(Ok(ReplyBody::Mount {
                fh: fh(1),
                attr: attr(1, FileType::Directory, 4096),
            }))],
            RequestOp::GetAttr { fh } => dir(id_of(fh)),
            RequestOp::Lookup { name, .. } => {
                let id = if name == b"wide" { 2 } else { 3 };
                vec![Out::Reply(Ok(ReplyBody::Lookup {
                    fh: fh(id),
                    attr: Some(attr(id, FileType::Directory, 4096)),
                    dir_attr: None,
                }))]
            }
            RequestOp::ReadDirPlus { dir, cookie, .. } if id_of(dir) == 2 => {
                vec![Out::Reply(Ok(endless_page(*cookie, 4000, 8)))]
            }
            RequestOp::ReadDirPlus { dir, .. } => {
                let next = id_of(dir) + 1;
                vec![Out::Reply(Ok(ReplyBody::ReadDirPlus(DirPage {
                    dir_attr: None,
                    verifier: [0; 8],
                    entries: vec![DirEntryPlus {
                        fileid: next,
                        name: b"d".to_vec(),
                        cookie: 1,
                        attr: Some(attr(next, FileType::Directory, 4096)),
                        fh: Some(fh(next)),
                    }],
                    eof: true,
                })))]
            }
            _ => vec![Out::Reply(Err(protocol::NfsStatus::NotSupp))],
        }
    });
    let before = s.outside_dest();
    let dest = s.dest.to_str().unwrap();
    let wide = sfs(&s.home, &["get", "-r", &format!("{}/wide", srv.name), dest]);
    let deep = sfs(&s.home, &["get", "-r", &format!("{}/deep", srv.name), dest]);
    assert_eq!(s.outside_dest(), before, "nothing outside dest");
    let (wide_err, deep_err) = (text(&wide.stderr), text(&deep.stderr));
    assert!(
        !wide.status.success() && wide_err.contains("endless listing"),
        "{wide_err}"
    );
    assert!(
        !deep.status.success() && deep_err.contains("256 levels deep"),
        "{deep_err}"
    );
    // The wide directory was made, empty: its listing failed before anything was copied.
    assert_eq!(fs::read_dir(s.dest.join("wide")).unwrap().count(), 0);
    let mut depth = 0;
    let mut p = s.dest.join("deep");
    while p.is_dir() {
        depth += 1;
        p.push("d");
    }
    assert_eq!(depth, 257, "the top and 256 levels below it");
}

/// A READLINK target longer than PATH_MAX is not accepted (the protocol crate's decoder
/// refuses it before allocating; the session treats the reply as a broken stream): the copy
/// fails at once and no link is made.
#[test]
fn a_symlink_target_longer_than_path_max_is_refused() {
    let s = scratch();
    let mut t = Tree::new(vec![("d", 2)]);
    t.dir(2, vec![("long", 3), ("ok", 4)])
        .link(3, &[b'a'; 5000])
        .file(4, b"fine");
    let srv = Hostile::start(move |op| t.answer(op));
    let start = Instant::now();
    let out = sfs(
        &s.home,
        &[
            "get",
            "-r",
            &format!("{}/d", srv.name),
            s.dest.to_str().unwrap(),
        ],
    );
    let err = text(&out.stderr);
    eprintln!("long link target: {:?}: {err}", start.elapsed());
    assert!(!out.status.success(), "{err}");
    assert!(fs::symlink_metadata(s.dest.join("d/long")).is_err());
}

/// A mount of the hostile server (`sfs mount NAME DIR`, in the background): unmounted and its
/// process killed on drop.
struct Mounted {
    dir: std::path::PathBuf,
    pid: u32,
}

impl Drop for Mounted {
    fn drop(&mut self) {
        unmount(&self.dir, self.pid);
    }
}

/// Peak VmRSS in KiB of `pid` so far (VmHWM).
fn peak_rss_kib(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// `sfs mount SERVER DIR` of the hostile server on `dest/mnt`; None (saying why) where FUSE
/// cannot be tested.
fn mount(s: &Scratch, srv: &Hostile) -> Option<Mounted> {
    if !Path::new("/dev/fuse").exists()
        || std::process::Command::new("fusermount3")
            .arg("--version")
            .output()
            .is_err()
    {
        eprintln!("SKIPPED: no /dev/fuse or fusermount3; FUSE mount not tested");
        return None;
    }
    let dir = s.dest.join("mnt");
    fs::create_dir(&dir).unwrap();
    let mut c = sfs_cmd(&s.home);
    c.args(["--timeout", "60", "mount", &srv.name])
        .arg(&dir)
        .arg("--log")
        .arg(s.top.join("mount.log"));
    let out = run(c, LIMIT);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let pid = mounted_pid(&stdout);
    Some(Mounted { dir, pid })
}

/// Through a FUSE mount, names that are not one component are left out of a listing (the
/// kernel would fail the whole listing with EIO) and the rest is listed.
#[test]
fn a_mount_lists_the_good_names_of_a_hostile_listing() {
    let s = scratch();
    let mut t = Tree::new(vec![
        ("a/b", 2),
        ("", 2),
        ("..", 2),
        ("nul\0", 2),
        ("good", 2),
    ]);
    t.file(2, b"fine");
    let srv = Hostile::start(move |op| t.answer(op));
    let Some(m) = mount(&s, &srv) else { return };
    let names: Vec<_> = fs::read_dir(&m.dir)
        .expect("the listing is not failed by its bad names")
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["good"]);
    assert_eq!(fs::read(m.dir.join("good")).unwrap(), b"fine");
}

/// Through the FUSE mount, where invalidations queue for the kernel: a server that sends
/// 300 000 INVALIDATEs of the file being read before each READ reply (the kernel holds the
/// page being read locked, so the first invalidation of that file waits for the reply, and
/// the rest pile up behind it) does not make the mount's memory grow with them.
#[test]
fn a_flood_of_invalidates_through_a_mount_keeps_memory_bounded() {
    let s = scratch();
    let content = data(64 * 1024, 5);
    let mut tree = Tree::new(vec![("f", 2)]);
    tree.file(2, &content);
    // One flood, with the first READ: each flood makes the file changed, so a flood with
    // every READ had the mount read again (2 to 100 s, by how the READs and the flood
    // crossed), and one is all the bound needs.
    let flooded = std::sync::atomic::AtomicBool::new(false);
    let srv = Hostile::start(move |op| {
        let first_read = matches!(op, RequestOp::Read { .. })
            && !flooded.swap(true, std::sync::atomic::Ordering::Relaxed);
        let mut outs: Vec<Out> = if first_read {
            (0..300_000).map(|_| Out::Invalidate(fh(2))).collect()
        } else {
            Vec::new()
        };
        outs.extend(tree.answer(op));
        outs
    });
    let Some(m) = mount(&s, &srv) else { return };
    let start = Instant::now();
    let got = fs::read(m.dir.join("f")).unwrap();
    let peak = peak_rss_kib(m.pid);
    eprintln!(
        "mount under an INVALIDATE flood: read in {:?}, peak RSS {peak} KiB",
        start.elapsed()
    );
    assert_eq!(got, content);
    assert!(peak < 48 * 1024, "peak RSS {peak} KiB");
}
