//! What the backend's unit tests share: a backend on a temporary export, as the test's user.

use std::path::Path;
use std::sync::Arc;

use protocol::{FileHandle, HandleKey, ReplyBody, RequestOp};

use super::LocalFs;
use crate::fs::creds::{Mode, Switcher};
use crate::fs::{BlockingStorage, OpCtx};
use crate::users::Creds;

/// A request of the test's own user.
pub(crate) fn ctx() -> OpCtx {
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    OpCtx {
        creds: Creds {
            name: "tester".into(),
            uid,
            gids: vec![gid],
            anonymous: false,
        },
        conn: 1,
        lease_ms: 1000,
    }
}

/// A backend on `export` running as the test's own user; opened again on the same export,
/// it is that server restarted (same handle key, an empty inode index).
pub(crate) fn open(export: &Path) -> LocalFs {
    LocalFs::open(
        export,
        HandleKey::new([3; 32]),
        1 << 20,
        false,
        Switcher::new(Mode::ServerUser),
    )
    .unwrap()
}

/// [`open`], and the handle of `name` in it.
pub(crate) fn backend(export: &Path, name: &str) -> (Arc<LocalFs>, FileHandle) {
    let fs = open(export);
    let c = ctx();
    let root = match fs
        .execute(
            &c,
            RequestOp::Mount {
                path: b"/".to_vec(),
            },
        )
        .result
    {
        Ok(ReplyBody::Mount { fh, .. }) => fh,
        other => panic!("{other:?}"),
    };
    let lookup = RequestOp::Lookup {
        dir: root,
        name: name.as_bytes().to_vec(),
    };
    let fh = match fs.execute(&c, lookup).result {
        Ok(ReplyBody::Lookup { fh, .. }) => fh,
        other => panic!("{other:?}"),
    };
    (Arc::new(fs), fh)
}
