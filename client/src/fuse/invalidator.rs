//! The thread that passes the server's invalidations, as the session hands them on, to the
//! kernel as cache invalidations ([`invalidator`]).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use fuser::{INodeNo, Notifier};

use super::ServerMount;
use crate::session::Invalidation;

/// Turns the session's invalidations into kernel cache invalidations, on its own thread: the
/// kernel may wait for locks held by requests we are answering, so the notifications must not
/// be sent from the tasks that answer them.
pub(crate) fn invalidator(
    sh: Arc<ServerMount>,
    notifier: Notifier,
    rx: crate::session::invalidations::Receiver,
) {
    for ev in rx {
        let work: Vec<(u64, Vec<Vec<u8>>)> = {
            let mut t = sh.table();
            match ev {
                Invalidation::Object(fh, _) => match t.by_fh.get(&fh).copied() {
                    Some(ino) => {
                        let names = t.names.remove(&ino).unwrap_or_default();
                        vec![(ino, names.into_keys().collect())]
                    }
                    None => continue,
                },
                Invalidation::Everything => {
                    let mut names = std::mem::take(&mut t.names);
                    t.nodes
                        .keys()
                        .map(|ino| {
                            let n = names.remove(ino).unwrap_or_default();
                            (*ino, n.into_keys().collect())
                        })
                        .collect()
                }
            }
        };
        for (ino, names) in work {
            if let Err(e) = notifier.inval_inode(INodeNo(ino), 0, 0) {
                tracing::debug!(ino, error = %e, "inode invalidation failed");
            }
            // Expired, not dropped: the kernel looks each name up again at its next use
            // (and drops it then if it is gone), and a directory that is a program's working
            // directory stays one (a dropped one made its `getcwd` fail: git, make and
            // Python in a directory below one another client changed, or after a reconnect).
            for n in names {
                if let Err(e) = notifier.expire_entry(INodeNo(ino), OsStr::from_bytes(&n)) {
                    tracing::debug!(ino, error = %e, "entry invalidation failed");
                }
            }
        }
    }
}
