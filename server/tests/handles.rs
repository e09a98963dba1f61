//! File-handle generations: a handle to a deleted file must not revive when its inode number
//! is reused by a new file.

mod common;

use std::os::unix::fs::MetadataExt;

use common::*;
use protocol::*;

const ALICE: (&str, u8, u32, &str) = ("alice", 1, 1000, "1000");

#[test]
fn handle_of_deleted_file_is_stale_even_when_inode_is_reused() {
    let area = Area::new();
    std::os::unix::fs::chown(area.export(), Some(1000), Some(1000)).unwrap();
    let users = area.users(&[ALICE]);
    let s = area.start(&["--users", users.to_str().unwrap()]);
    let mut c = s.connect();
    let a = c.login("alice", 1).unwrap();
    let root = c.mount(a);

    let old = c.create(a, root, "victim", 0o644).unwrap();
    c.write(a, old, 0, b"old content").unwrap();
    let old_ino = std::fs::metadata(area.export().join("victim"))
        .unwrap()
        .ino();
    assert_eq!(c.getattr(a, old).unwrap().fileid, old_ino);
    assert!(
        c.call(
            a,
            RequestOp::Remove {
                dir: root,
                name: b"victim".to_vec(),
            },
        )
        .is_ok()
    );

    // Create files (behind the server's back, at the old name) until one gets the old inode
    // number. Non-matching ones are kept under other names so the allocator moves on.
    let victim = area.export().join("victim");
    let mut reused = false;
    for i in 0..2000 {
        std::fs::write(&victim, b"NEW CONTENT").unwrap();
        if std::fs::metadata(&victim).unwrap().ino() == old_ino {
            reused = true;
            break;
        }
        std::fs::rename(&victim, area.export().join(format!("filler{i}"))).unwrap();
    }
    if !reused {
        // The file system under the temp dir did not reuse the inode number within the bound:
        // the old handle must still be refused, and never read the new file.
        eprintln!("inode {old_ino} was not reused; checking the old handle only");
        std::fs::write(&victim, b"NEW CONTENT").unwrap();
    }

    let refused = |r: NfsStatus| matches!(r, NfsStatus::Stale | NfsStatus::NoEnt);
    match c.getattr(a, old) {
        Err(e) => assert!(refused(e), "GETATTR on the old handle: {e:?}"),
        Ok(attr) => panic!("old handle resolved to {attr:?}"),
    }
    match c.read(a, old, 0, 100) {
        Err(e) => assert!(refused(e), "READ on the old handle: {e:?}"),
        Ok((data, _)) => panic!("old handle read {:?}", String::from_utf8_lossy(&data)),
    }
    match c.write(a, old, 0, b"clobber") {
        Err(e) => assert!(refused(e), "WRITE on the old handle: {e:?}"),
        Ok(n) => panic!("old handle wrote {n} bytes"),
    }
    // After the walk's rate limit, still refused (the walk finds the inode but the generation
    // differs).
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert!(refused(c.getattr(a, old).unwrap_err()));

    // The new file is served under its own handle, untouched.
    let new = c.lookup(a, root, "victim").unwrap();
    assert_ne!(new, old);
    if reused {
        assert_eq!(c.getattr(a, new).unwrap().fileid, old_ino);
    }
    assert_eq!(c.read_all(a, new).unwrap(), b"NEW CONTENT");
    assert_eq!(std::fs::read(&victim).unwrap(), b"NEW CONTENT");
}
