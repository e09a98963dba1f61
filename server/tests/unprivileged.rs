//! sfsd run as an ordinary user: it cannot switch credentials, so every request acts as the
//! server's own user (like sshfs), as the README says.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;

use common::*;
use protocol::*;

/// The unprivileged user the server runs as.
const SERVER_UID: u32 = 65533;

#[test]
fn non_root_server_acts_as_its_own_user() {
    if !rustix::process::geteuid().is_root() {
        eprintln!(
            "SKIPPED non_root_server_acts_as_its_own_user: needs root to start sfsd as another user"
        );
        return;
    }
    let area = Area::new();
    // The server's user must reach its state and export below the (root 0700) temp dir.
    std::fs::set_permissions(area.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(area.export(), Some(SERVER_UID), Some(SERVER_UID)).unwrap();
    std::fs::create_dir(area.state()).unwrap();
    std::os::unix::fs::chown(area.state(), Some(SERVER_UID), Some(SERVER_UID)).unwrap();
    std::fs::set_permissions(area.state(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let users = area.users(&[("alice", 1, 2001, "2001")]);
    let s = area.start_with(&["--users", users.to_str().unwrap()], |cmd| {
        cmd.uid(SERVER_UID).gid(SERVER_UID);
    });
    let mut c = s.connect();
    let alice = c.login("alice", 1).unwrap();
    let root = c.mount(alice);
    let f = c.create(alice, root, "made-by-alice", 0o640).unwrap();
    c.write(alice, f, 0, b"x").unwrap();
    let meta = std::fs::metadata(area.export().join("made-by-alice")).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid()),
        (SERVER_UID, SERVER_UID),
        "requests act as the server's own user"
    );
    assert_eq!(meta.mode() & 0o7777, 0o640, "exact mode (umask 0)");
    assert!(
        s.log().contains("not running as root"),
        "the server says so in its log"
    );
}
