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
use std::time::Duration;

use common::*;
use hostile_server::*;

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
    let mut tree = Tree::new(vec![("f", 2), ("t", 3)]);
    tree.file(2, b"evil")
        .dir(3, vec![("precious", 2), ("new", 2)]);
    let srv = Hostile::start(move |op| tree.answer(op));
    let before = s.outside_dest();
    let dir = sticky.to_str().unwrap();
    let file = sfs(&s.home, &["get", &format!("{}/f", srv.name), dir]);
    let tree = sfs(&s.home, &["get", "-r", &format!("{}/t", srv.name), dir]);
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
