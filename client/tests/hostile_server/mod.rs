//! A hostile server for tests: a real handshake and sealed records (the `protocol` crate's
//! sans-IO pieces over a std `TcpStream`, one thread per connection), answering each request
//! with whatever the test scripts. It has its own host key, so a client given its name
//! (`@127.0.0.1%PORT,HOSTID`) verifies it as it would any server, and it accepts every LOGIN:
//! what is under test is what the client does with the answers.
//!
//! [`Tree`] serves a small scripted file system (MOUNT, GETATTR, LOOKUP, READDIRPLUS, READ,
//! READLINK) that a test can make lie: list `..`, a name twice, a symlink then a directory
//! of the same name. A test wanting more wraps [`Tree::answer`] in its own handler.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use protocol::{
    Attr, DirEntryPlus, DirPage, FileHandle, FileType, Invalidate, Location, NfsStatus,
    RecordReader, Reply, ReplyBody, Request, RequestOp, ServerHandshake, ServerKeypair,
    ServerMessage, Time,
};

/// What the fake server sends for one request, in order.
#[allow(clippy::large_enum_variant)] // test-only, short-lived
pub(crate) enum Out {
    /// The reply to the request (its id is filled in).
    Reply(Result<ReplyBody, NfsStatus>),
    /// An INVALIDATE, unprompted.
    Invalidate(FileHandle),
}

/// Answers a request (LOGIN excepted, which is always accepted).
pub(crate) type Handler = dyn Fn(&RequestOp) -> Vec<Out> + Send + Sync;

/// A running fake server; stops (and closes its connections) when dropped.
pub(crate) struct Hostile {
    /// Its self-certifying name, `@127.0.0.1%PORT,HOSTID`.
    pub name: String,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Hostile {
    /// Listens on 127.0.0.1 (a free port) with a fresh host key, answering with `handler`.
    pub(crate) fn start(
        handler: impl Fn(&RequestOp) -> Vec<Out> + Send + Sync + 'static,
    ) -> Hostile {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().unwrap().port();
        let key = Arc::new(ServerKeypair::generate());
        let name = key.server_name(Location::new("127.0.0.1", port).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<Handler> = Arc::new(handler);
        let st = stop.clone();
        let accept = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => {
                        let (k, h, st) = (key.clone(), handler.clone(), st.clone());
                        std::thread::spawn(move || serve(s, &k, &*h, &st));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Hostile {
            name: name.to_string(),
            stop,
            accept: Some(accept),
        }
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

/// One connection: handshake, then records until the client hangs up or the server stops.
fn serve(mut s: TcpStream, key: &ServerKeypair, handler: &Handler, stop: &AtomicBool) {
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
    let Ok(done) = protocol::handshake::complete(ServerHandshake::new(key), &mut s) else {
        return;
    };
    let mut sealer = done.session.sealer;
    let mut reader = RecordReader::new(done.session.opener);
    reader.extend_from_slice(&done.rest);
    while !stop.load(Ordering::Relaxed) {
        while let Ok(Some(rec)) = reader.next_record() {
            let Ok(req) = Request::decode(rec) else {
                return;
            };
            let outs = match &req.op {
                RequestOp::Login(_) => vec![Out::Reply(Ok(ReplyBody::Login { authno: 1 }))],
                // A reply cache it does not keep: changes come in SEQUENCEs, which the
                // script sees unwrapped.
                RequestOp::Session { .. } => vec![Out::Reply(Ok(ReplyBody::Session {
                    slots: protocol::sequence::MAX_SLOTS,
                    resumed: false,
                }))],
                RequestOp::Sequence { op, .. } => handler(op),
                op => handler(op),
            };
            for o in outs {
                let msg = match o {
                    Out::Reply(result) => ServerMessage::Reply(Reply { id: req.id, result }),
                    Out::Invalidate(fh) => ServerMessage::Invalidate(Invalidate { fh, attr: None }),
                };
                let mut wire = Vec::new();
                if sealer.seal_into(&msg.encode(), &mut wire).is_err()
                    || s.write_all(&wire).is_err()
                {
                    return;
                }
            }
        }
        match s.read(reader.read_buf()) {
            Ok(0) => return,
            Ok(n) => reader.advance(n),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return,
        }
    }
}

/// The handle of node `id`.
pub(crate) fn fh(id: u64) -> FileHandle {
    let mut b = [0u8; protocol::HANDLE_LEN];
    b[..8].copy_from_slice(&id.to_le_bytes());
    FileHandle::from_bytes(b)
}

/// The node id of a handle made by [`fh`].
pub(crate) fn id_of(fh: &FileHandle) -> u64 {
    u64::from_le_bytes(fh.as_bytes()[..8].try_into().unwrap())
}

/// Attributes of node `id` of type `ftype` and `size` bytes, no lease (never cached).
pub(crate) fn attr(id: u64, ftype: FileType, size: u64) -> Attr {
    let t = Time {
        seconds: 1,
        nanos: 0,
    };
    Attr {
        ftype,
        mode: if ftype == FileType::Directory {
            0o755
        } else {
            0o644
        },
        nlink: 1,
        uid: 0,
        gid: 0,
        size,
        used: size,
        rdev: (0, 0),
        fsid: 1,
        fileid: id,
        atime: t,
        mtime: t,
        ctime: t,
        lease_ms: 0,
    }
}

/// A node of a [`Tree`].
#[derive(Clone)]
pub(crate) enum Node {
    /// A directory listing exactly these (name, node id) pairs, in order, duplicates and
    /// dot names included.
    Dir(Vec<(Vec<u8>, u64)>),
    /// A regular file.
    File(Vec<u8>),
    /// A symbolic link.
    Link(Vec<u8>),
}

/// A scripted file system; node 1 is the root (a directory).
#[derive(Clone, Default)]
pub(crate) struct Tree {
    pub nodes: HashMap<u64, Node>,
}

impl Tree {
    /// A tree whose root lists `entries`.
    pub(crate) fn new(root: Vec<(&str, u64)>) -> Tree {
        let mut t = Tree::default();
        t.dir(1, root);
        t
    }

    pub(crate) fn dir(&mut self, id: u64, entries: Vec<(&str, u64)>) -> &mut Tree {
        let e = entries
            .into_iter()
            .map(|(n, i)| (n.as_bytes().to_vec(), i))
            .collect();
        self.nodes.insert(id, Node::Dir(e));
        self
    }

    pub(crate) fn file(&mut self, id: u64, data: &[u8]) -> &mut Tree {
        self.nodes.insert(id, Node::File(data.to_vec()));
        self
    }

    pub(crate) fn link(&mut self, id: u64, target: &[u8]) -> &mut Tree {
        self.nodes.insert(id, Node::Link(target.to_vec()));
        self
    }

    /// The attributes of node `id`.
    pub(crate) fn attr(&self, id: u64) -> Option<Attr> {
        Some(match self.nodes.get(&id)? {
            Node::Dir(_) => attr(id, FileType::Directory, 4096),
            Node::File(d) => attr(id, FileType::Regular, d.len() as u64),
            Node::Link(t) => attr(id, FileType::Symlink, t.len() as u64),
        })
    }

    /// The honest answer to `op` about this tree (directories listed in one page, with
    /// handles and attributes).
    pub(crate) fn answer(&self, op: &RequestOp) -> Vec<Out> {
        vec![Out::Reply(self.reply(op))]
    }

    fn reply(&self, op: &RequestOp) -> Result<ReplyBody, NfsStatus> {
        let get = |fh: &FileHandle| self.nodes.get(&id_of(fh)).ok_or(NfsStatus::Stale);
        let a = |id| self.attr(id).ok_or(NfsStatus::Stale);
        match op {
            RequestOp::Null => Ok(ReplyBody::Null),
            RequestOp::Mount { .. } => Ok(ReplyBody::Mount {
                fh: fh(1),
                attr: a(1)?,
            }),
            RequestOp::GetAttr { fh } => Ok(ReplyBody::GetAttr {
                attr: a(id_of(fh))?,
            }),
            RequestOp::Access { fh, access } => Ok(ReplyBody::Access {
                attr: Some(a(id_of(fh))?),
                access: *access,
            }),
            RequestOp::Lookup { dir, name } => {
                let Node::Dir(es) = get(dir)? else {
                    return Err(NfsStatus::NotDir);
                };
                let (_, id) = es.iter().find(|(n, _)| n == name).ok_or(NfsStatus::NoEnt)?;
                Ok(ReplyBody::Lookup {
                    fh: fh(*id),
                    attr: Some(a(*id)?),
                    dir_attr: None,
                })
            }
            RequestOp::ReadDirPlus { dir, .. } => {
                let Node::Dir(es) = get(dir)? else {
                    return Err(NfsStatus::NotDir);
                };
                let entries = es
                    .iter()
                    .enumerate()
                    .map(|(i, (name, id))| DirEntryPlus {
                        fileid: *id,
                        name: name.clone(),
                        cookie: i as u64 + 1,
                        attr: self.attr(*id),
                        fh: Some(fh(*id)),
                    })
                    .collect();
                Ok(ReplyBody::ReadDirPlus(DirPage {
                    dir_attr: None,
                    verifier: [0; 8],
                    entries,
                    eof: true,
                }))
            }
            RequestOp::Read { fh, offset, count } => {
                let Node::File(d) = get(fh)? else {
                    return Err(NfsStatus::Inval);
                };
                let start = (*offset).min(d.len() as u64) as usize;
                let end = (start + *count as usize).min(d.len());
                Ok(ReplyBody::Read {
                    attr: None,
                    eof: end == d.len(),
                    data: d[start..end].to_vec().into(),
                })
            }
            RequestOp::ReadLink { fh } => {
                let Node::Link(t) = get(fh)? else {
                    return Err(NfsStatus::Inval);
                };
                Ok(ReplyBody::ReadLink {
                    attr: None,
                    target: t.clone(),
                })
            }
            _ => Err(NfsStatus::NotSupp),
        }
    }
}

/// Every path under `root` (not following symlinks) with its type and, for files and links,
/// their contents or target: what a test compares before and after.
pub(crate) fn snapshot(root: &std::path::Path) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        let what = if m.file_type().is_symlink() {
            format!("link {:?}", std::fs::read_link(&p).unwrap())
        } else if m.is_dir() {
            let mut kids: Vec<_> = std::fs::read_dir(&p)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            kids.sort();
            stack.extend(kids);
            "dir".to_owned()
        } else {
            format!("file {:?}", std::fs::read(&p).unwrap_or_default())
        };
        out.push((p, what));
    }
    out.sort();
    out
}
