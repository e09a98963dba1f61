//! Open states through the NFS backend. NFSv3 cannot keep a file that has lost its last name,
//! so sfsd does what NFS clients do (the "silly rename"), on the server's side: a REMOVE of a
//! file, or a RENAME over one, that some client holds an open state on (OPEN) renames it to a
//! hidden name `.sfs-open-FILEID-N` in the same directory instead; the name is removed when
//! the last state on the file ends, by CLOSE or because its connection closed (a client that
//! dies leaves nothing behind). Hidden names are left out of listings. Only a crash of sfsd
//! itself, with such a file held, leaves one in the export.
//!
//! What CREATE keeps in the local backend (writing a read-only file through its creating
//! descriptor) is the NFS server's business here: its rules for the owner decide.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use protocol::{Attr, BackendFh, FileHandle, NfsStatus, Proc, ReplyBody};

use super::{Done, NfsState, Obj, Outcome, ops, results};
use crate::fs::open_states::{OpenStates, holder};
use crate::fs::{ObjKey, OpCtx};
use crate::ids::ConnId;
use crate::users::Creds;

/// Prefix of hidden names (never listed).
pub(crate) const HIDDEN_PREFIX: &[u8] = b".sfs-open-";

/// Where a held file that lost its last name is kept.
struct HiddenName {
    dir: BackendFh,
    name: Vec<u8>,
    /// Who removed the name: removing the hidden one is done as them.
    creds: Creds,
}

/// The NFS backend's open states, and the hidden names of held files.
#[derive(Default)]
pub(crate) struct Opens {
    states: OpenStates<()>,
    hidden: Mutex<HashMap<ObjKey, HiddenName>>,
    next: AtomicU64,
}

impl Opens {
    /// Whether removing a name of `key` must hide the file instead: it is held, and not
    /// already kept under a hidden name (a second name of it can simply go).
    pub(crate) fn must_hide(&self, key: ObjKey) -> bool {
        self.states.is_held(key) && !self.hidden.lock().contains_key(&key)
    }
}

impl NfsState {
    /// OPEN: remembers that this connection's user holds `fh`.
    pub(super) fn open(&self, ctx: OpCtx, fh: FileHandle, done: Done<Outcome>) {
        let o = or_fail!(self.unwrap(&fh), done);
        let mut out = Outcome::err(NfsStatus::DQuot);
        if self.opens.states.keep(holder(&ctx), o.key, (), |_| false) {
            out.result = Ok(ReplyBody::Open { attr: None });
        }
        done(out)
    }

    /// CLOSE: drops this connection's user's state on `fh`; the last one removes the hidden
    /// name, if the file has one.
    pub(super) fn close_state(self: &Arc<Self>, ctx: &OpCtx, fh: &FileHandle, done: Done<Outcome>) {
        let mut out = Outcome::err(NfsStatus::ServerFault);
        match self.key.verify(fh) {
            Ok(h) => {
                let key = (h.device, h.inode);
                if self.opens.states.close(holder(ctx), key) {
                    self.drop_hidden(key);
                }
                out.result = Ok(ReplyBody::Close);
            }
            Err(e) => out.result = Err(e.into()),
        }
        done(out)
    }

    /// Connection `conn` closed: its states go, and the hidden names of files nobody holds now.
    pub(super) fn connection_closed(self: &Arc<Self>, conn: ConnId) {
        for key in self.opens.states.close_conn(conn) {
            self.drop_hidden(key);
        }
    }

    /// Renames `name` in `d` (the held object `key`) to a hidden name, as `creds`; `then` gets
    /// the directory's attributes after.
    pub(super) fn hide(
        self: &Arc<Self>,
        creds: &Creds,
        d: &Obj,
        name: Vec<u8>,
        key: ObjKey,
        then: impl FnOnce(&Arc<Self>, Result<Option<Attr>, NfsStatus>) + Send + 'static,
    ) {
        let n = self.opens.next.fetch_add(1, Ordering::Relaxed);
        let hidden = [HIDDEN_PREFIX, format!("{}-{n}", key.1).as_bytes()].concat();
        let args = ops::pack(&nfs3_types::nfs3::RENAME3args {
            from: ops::dirop(d.b.as_slice(), &name),
            to: ops::dirop(d.b.as_slice(), &hidden),
        });
        let (dir, creds2) = (d.b, creds.clone());
        self.call(creds, Proc::Rename, args, move |me, res| {
            let r = results(res, |r| Ok((ops::wcc(r)?, ops::wcc(r)?)));
            if r.is_ok() {
                me.opens.hidden.lock().insert(
                    key,
                    HiddenName {
                        dir,
                        name: hidden,
                        creds: creds2,
                    },
                );
                // The last CLOSE may have come while the rename was under way.
                if !me.opens.states.is_held(key) {
                    me.drop_hidden(key);
                }
            }
            then(me, r.map(|(_, to_dir)| to_dir))
        });
    }

    /// Removes the hidden name of `key`, if it has one (nobody holds it any more).
    fn drop_hidden(self: &Arc<Self>, key: ObjKey) {
        let Some(h) = self.opens.hidden.lock().remove(&key) else {
            return;
        };
        let args = ops::pack(&nfs3_types::nfs3::REMOVE3args {
            object: ops::dirop(h.dir.as_slice(), &h.name),
        });
        self.call(&h.creds, Proc::Remove, args, move |_, res| {
            if let Err(status) = results(res, ops::wcc) {
                tracing::warn!(
                    ?status,
                    name = %String::from_utf8_lossy(&h.name).escape_debug(),
                    "cannot remove the hidden name of a file no client holds any more"
                );
            }
        });
    }
}
