//! Session tests against an in-process server driven with the protocol crate.

use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use protocol::{
    Invalidate, Location, NfsStatus, RecordReader, Reply, ReplyBody, Request, RequestOp,
    ServerHandshake, ServerKeypair, ServerMessage, StableHow, UserKeypair,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::*;
use crate::caller_groups::Groups;

/// What the fake server does with a request.
enum Out {
    Send(Box<ServerMessage>),
    Close,
}

type Behaviour = Box<dyn FnMut(usize, Request) -> Vec<Out> + Send>;

struct Fake {
    name: ServerName,
    key: Arc<ServerKeypair>,
    conns: Arc<AtomicUsize>,
    /// Per connection, whether the client sent its first handshake message before the server
    /// sent its key (recorded only by [`fake_probing`]).
    spoke_first: Arc<Mutex<Vec<bool>>>,
    task: JoinHandle<()>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn reply(id: u64, r: Result<ReplyBody, NfsStatus>) -> Out {
    Out::Send(Box::new(ServerMessage::Reply(Reply { id, result: r })))
}

fn attr(size: u64, lease_ms: u32) -> Attr {
    Attr::test_file(size, lease_ms)
}

const FH: FileHandle = FileHandle::from_bytes([7; 48]);

/// A fake server of protocol version 2: no SESSION, changes are not sequenced.
async fn fake(behaviour: Behaviour) -> Fake {
    fake_on(0, ServerKeypair::generate(), behaviour).await
}

/// A fake server with `key` on `port` (0: any free port), of protocol version 2.
async fn fake_on(port: u16, key: ServerKeypair, behaviour: Behaviour) -> Fake {
    fake_speaking(port, key, vec![2], behaviour).await
}

/// A fake server speaking `versions`; from version 3 the behaviour answers SESSION too.
async fn fake_speaking(
    port: u16,
    key: ServerKeypair,
    versions: Vec<u32>,
    behaviour: Behaviour,
) -> Fake {
    fake_full(port, key, versions, false, behaviour).await
}

/// [`fake_speaking`] that waits a moment before sending its key, to see whether the client
/// speaks first ([`Fake::spoke_first`]).
async fn fake_probing(versions: Vec<u32>, behaviour: Behaviour) -> Fake {
    fake_full(0, ServerKeypair::generate(), versions, true, behaviour).await
}

async fn fake_full(
    port: u16,
    key: ServerKeypair,
    versions: Vec<u32>,
    probe: bool,
    behaviour: Behaviour,
) -> Fake {
    let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let key = Arc::new(key);
    let name = key.server_name(Location::new("127.0.0.1", port).unwrap());
    let conns = Arc::new(AtomicUsize::new(0));
    let spoke_first = Arc::new(Mutex::new(Vec::new()));
    let behaviour = Arc::new(Mutex::new(behaviour));
    let (k, c, hid) = (key.clone(), conns.clone(), name.host_id());
    let spoke = spoke_first.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else {
                return;
            };
            if probe {
                let mut byte = [0u8; 1];
                let early = tokio::time::timeout(Duration::from_millis(300), s.peek(&mut byte));
                let spoke_first = matches!(early.await, Ok(Ok(1)));
                spoke.lock().push(spoke_first);
            }
            let n = c.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve(
                s,
                k.clone(),
                hid,
                n,
                versions.clone(),
                behaviour.clone(),
            ));
        }
    });
    Fake {
        name,
        key,
        conns,
        spoke_first,
        task,
    }
}

async fn serve(
    mut s: TcpStream,
    key: Arc<ServerKeypair>,
    host_id: protocol::HostId,
    conn: usize,
    versions: Vec<u32>,
    behaviour: Arc<Mutex<Behaviour>>,
) {
    let config = protocol::HandshakeConfig {
        versions,
        ..protocol::HandshakeConfig::default()
    };
    let handshake = ServerHandshake::with_config(&key, config);
    let Ok(done) = super::handshake::complete(handshake, &mut s).await else {
        return;
    };
    let session = done.session;
    let mut verifier = protocol::LoginVerifier::new(session.session_id, host_id);
    let mut sealer = session.sealer;
    let mut reader = RecordReader::new(session.opener);
    reader.extend_from_slice(&done.rest);
    loop {
        let mut outs = Vec::new();
        while let Ok(Some(rec)) = reader.next_record() {
            let req = Request::decode(rec).unwrap();
            if let RequestOp::Login(args) = &req.op {
                // Logins are checked for real: a bad signature would fail here.
                let ok = verifier.verify(args).is_ok() && args.user == "alice";
                outs.push(reply(
                    req.id,
                    if ok {
                        Ok(ReplyBody::Login { authno: 7 })
                    } else {
                        Err(NfsStatus::Acces)
                    },
                ));
                continue;
            }
            outs.extend((behaviour.lock())(conn, req));
        }
        let mut wire = Vec::new();
        for o in outs {
            match o {
                Out::Send(m) => sealer.seal_into(&m.encode(), &mut wire).unwrap(),
                Out::Close => {
                    let _ = s.write_all(&wire).await;
                    return;
                }
            }
        }
        if !wire.is_empty() && s.write_all(&wire).await.is_err() {
            return;
        }
        let b = reader.read_buf();
        match s.read(b).await {
            Ok(0) | Err(_) => return,
            Ok(n) => reader.advance(n),
        }
    }
}

fn quick() -> Options {
    Options {
        connect_attempts: 3,
        initial_backoff: Duration::from_millis(20),
        connect_timeout: Duration::from_secs(5),
        ..Options::default()
    }
}

/// Data of the fake file: byte `i` is `i % 251`.
fn content(offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| ((offset + i) % 251) as u8)
        .collect()
}

/// A COMMIT reply, with the verifier of [`write_ok`].
fn commit_ok(id: u64) -> Out {
    reply(
        id,
        Ok(ReplyBody::Commit {
            attr: None,
            verifier: [1; 8],
        }),
    )
}

/// The fake server's file: `data` written at `offset`, the file growing to hold it.
fn store(file: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let end = offset as usize + data.len();
    if file.len() < end {
        file.resize(end, 0);
    }
    file[offset as usize..end].copy_from_slice(data);
}

/// A WRITE reply taking `count` bytes, always with the same verifier.
fn write_ok(id: u64, count: usize) -> Out {
    reply(
        id,
        Ok(ReplyBody::Write {
            attr: None,
            count: count as u32,
            committed: StableHow::Unstable,
            verifier: [1; 8],
        }),
    )
}

/// A local file holding `data`, open for reading.
fn local_file(data: &[u8]) -> Arc<std::fs::File> {
    let mut f = tempfile::tempfile().unwrap();
    std::io::Write::write_all(&mut f, data).unwrap();
    Arc::new(f)
}

fn serve_read(id: u64, offset: u64, count: u32, size: u64) -> Out {
    let end = (offset + u64::from(count)).min(size);
    let data = if offset >= size {
        vec![]
    } else {
        content(offset, (end - offset) as usize)
    };
    reply(
        id,
        Ok(ReplyBody::Read {
            attr: None,
            eof: end >= size,
            data: data.into(),
        }),
    )
}

#[tokio::test]
async fn replies_out_of_order_reach_their_callers() {
    let mut held: Vec<Request> = Vec::new();
    let f = fake(Box::new(move |_, req| {
        held.push(req);
        if held.len() < 4 {
            return vec![];
        }
        // Answer all four at once, last first.
        held.drain(..)
            .rev()
            .map(|r| match r.op {
                RequestOp::Read { offset, count, .. } => serve_read(r.id, offset, count, 1 << 20),
                _ => reply(r.id, Err(NfsStatus::NotSupp)),
            })
            .collect()
    }))
    .await;
    let c = Client::new(&f.name, None, quick());
    let mut tasks = Vec::new();
    for i in 0..4u64 {
        let c = c.clone();
        tasks.push(tokio::spawn(
            async move { c.read(&FH, i * 1000, 100).await },
        ));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        let (data, _) = tokio::time::timeout(Duration::from_secs(10), t)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(&*data, content(i as u64 * 1000, 100));
    }
}

#[tokio::test]
async fn invalidate_drops_cached_attributes() {
    let getattrs = Arc::new(AtomicUsize::new(0));
    let g = getattrs.clone();
    let f = fake(Box::new(move |_, req| match req.op {
        RequestOp::GetAttr { .. } => {
            g.fetch_add(1, Ordering::SeqCst);
            vec![reply(
                req.id,
                Ok(ReplyBody::GetAttr {
                    attr: attr(5, 60_000),
                }),
            )]
        }
        RequestOp::Null => vec![
            Out::Send(Box::new(ServerMessage::Invalidate(Invalidate {
                fh: FH,
                attr: None,
            }))),
            reply(req.id, Ok(ReplyBody::Null)),
        ],
        _ => vec![reply(req.id, Err(NfsStatus::NotSupp))],
    }))
    .await;
    let c = Client::new(&f.name, None, quick());
    c.getattr(&FH).await.unwrap();
    c.getattr(&FH).await.unwrap();
    assert_eq!(
        getattrs.load(Ordering::SeqCst),
        1,
        "second one from the lease"
    );
    c.call(RequestOp::Null).await.unwrap();
    assert!(c.cache().get(&FH).is_none());
    c.getattr(&FH).await.unwrap();
    assert_eq!(getattrs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn expired_lease_goes_back_to_the_server() {
    let getattrs = Arc::new(AtomicUsize::new(0));
    let g = getattrs.clone();
    let f = fake(Box::new(move |_, req| {
        g.fetch_add(1, Ordering::SeqCst);
        vec![reply(req.id, Ok(ReplyBody::GetAttr { attr: attr(5, 50) }))]
    }))
    .await;
    let c = Client::new(&f.name, None, quick());
    c.getattr(&FH).await.unwrap();
    c.getattr(&FH).await.unwrap();
    assert_eq!(getattrs.load(Ordering::SeqCst), 1);
    tokio::time::sleep(Duration::from_millis(80)).await;
    c.getattr(&FH).await.unwrap();
    assert_eq!(getattrs.load(Ordering::SeqCst), 2);
}

/// JUKEBOX ("not done, try later") is retried for every procedure, LINK included (the retries
/// are bounded: 10, backing off to 3.2 s).
#[tokio::test]
async fn jukebox_is_retried_for_any_procedure() {
    let links = Arc::new(AtomicUsize::new(0));
    let seen = links.clone();
    let f = fake(Box::new(move |_, req| match req.op {
        RequestOp::Link { .. } => {
            // Busy twice, then done.
            if seen.fetch_add(1, Ordering::SeqCst) < 2 {
                vec![reply(req.id, Err(NfsStatus::Jukebox))]
            } else {
                vec![reply(
                    req.id,
                    Ok(ReplyBody::Link {
                        attr: Some(attr(3, 1000)),
                        dir_attr: None,
                    }),
                )]
            }
        }
        _ => vec![reply(req.id, Err(NfsStatus::ServerFault))],
    }))
    .await;
    let c = Client::new(&f.name, None, quick());
    let a = c.link(&FH, &FH, b"n").await.unwrap().attr;
    assert_eq!(a.size, 3);
    assert_eq!(links.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn broken_stream_retries_idempotent_and_refuses_the_rest() {
    let f = fake(Box::new(move |conn, req| match req.op {
        // The first connection dies on its first request.
        _ if conn == 0 => vec![Out::Close],
        RequestOp::Read { offset, count, .. } => vec![serve_read(req.id, offset, count, 10)],
        RequestOp::Remove { .. } if conn == 1 => vec![Out::Close],
        _ => vec![reply(req.id, Ok(ReplyBody::Remove { dir_attr: None }))],
    }))
    .await;
    let c = Client::new(&f.name, None, quick());
    let (data, eof) = c.read(&FH, 0, 100).await.unwrap();
    assert_eq!((&*data, eof), (&content(0, 10)[..], true));
    assert_eq!(f.conns.load(Ordering::SeqCst), 2, "reconnected once");
    let e = c.remove(&FH, b"x", false).await.unwrap_err();
    assert!(matches!(e, SessionError::NotRetried { .. }), "{e}");
    assert!(e.to_string().contains("not idempotent"), "{e}");
    // The next request reconnects and works.
    c.remove(&FH, b"x", false).await.unwrap();
    assert_eq!(f.conns.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn wrong_hostid_is_refused_clearly() {
    let f = fake(Box::new(|_, req| vec![reply(req.id, Ok(ReplyBody::Null))])).await;
    let other = ServerKeypair::generate().server_name(f.name.location().clone());
    let c = Client::new(&other, None, quick());
    let e = c.call(RequestOp::Null).await.unwrap_err();
    assert!(
        matches!(
            e,
            SessionError::Handshake {
                source: protocol::HandshakeError::HostIdMismatch { .. },
                ..
            }
        ),
        "{e}"
    );
    // What the user reads: the message with its cause (the CLI prints the whole chain).
    let msg = e.report().to_string();
    assert!(msg.to_lowercase().contains("hostid"), "{msg}");
    assert_eq!(f.conns.load(Ordering::SeqCst), 1, "no retry of a wrong key");
    let _ = &f.key;
}

#[tokio::test]
async fn unreachable_server_gives_up_after_backoff() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    let name = ServerKeypair::generate().server_name(Location::new("127.0.0.1", port).unwrap());
    let c = Client::new(&name, None, quick());
    let e = c.call(RequestOp::Null).await.unwrap_err();
    assert!(matches!(e, SessionError::Connect { .. }), "{e}");
}

#[tokio::test]
async fn login_sets_authno_and_refusal_falls_back_to_anonymous() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let f = fake(Box::new(move |_, req| {
        s.lock().push(req.authno);
        vec![reply(req.id, Ok(ReplyBody::Null))]
    }))
    .await;
    let key = Arc::new(UserKeypair::generate());
    for (user, want) in [("alice", 7), ("mallory", 0)] {
        let id = Identity {
            user: user.into(),
            key: key.clone(),
        };
        let c = Client::new(&f.name, Some(id), quick());
        c.call(RequestOp::Null).await.unwrap();
        assert_eq!(seen.lock().pop(), Some(want), "{user}");
    }
}

#[tokio::test]
async fn bulk_read_and_write_use_a_window_and_survive_short_replies() {
    const SIZE: u64 = 3 * 1024 * 1024 + 123;
    let written = Arc::new(Mutex::new(vec![0u8; SIZE as usize]));
    let inflight_max = Arc::new(AtomicUsize::new(0));
    let w = written.clone();
    let mut held = Vec::new();
    let im = inflight_max.clone();
    let f = fake(Box::new(move |_, req| match req.op {
        // Reads of odd chunks come back short, to exercise the restart path.
        RequestOp::Read { offset, count, .. } => {
            let short = (offset / 65536) % 3 == 1;
            vec![serve_read(
                req.id,
                offset,
                if short { count / 2 } else { count },
                SIZE,
            )]
        }
        // Writes of odd blocks are taken only in part: the client must send the rest.
        RequestOp::Write { offset, data, .. } => {
            let short = (offset / 65536) % 3 == 1;
            let count = if short { data.len() / 2 } else { data.len() };
            let mut g = w.lock();
            let end = (offset as usize + count).min(g.len());
            g[offset as usize..end].copy_from_slice(&data[..end - offset as usize]);
            held.push(write_ok(req.id, count));
            im.fetch_max(held.len(), Ordering::SeqCst);
            // Hold two writes before answering so the window shows.
            if held.len() >= 2 {
                std::mem::take(&mut held)
            } else {
                vec![]
            }
        }
        RequestOp::Commit { .. } => {
            let mut out: Vec<Out> = std::mem::take(&mut held);
            out.push(commit_ok(req.id));
            out
        }
        _ => vec![reply(req.id, Err(NfsStatus::NotSupp))],
    }))
    .await;
    let opts = Options {
        window: 4,
        ..quick()
    };
    let c = Client::new(&f.name, None, opts);
    let mut got = Vec::new();
    let n = tokio::time::timeout(
        Duration::from_secs(60),
        c.read_all(&FH, 0, |d| {
            got.extend_from_slice(d);
            Ok(())
        }),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(n, SIZE);
    assert!(got == content(0, SIZE as usize), "read content differs");

    let src = content(0, SIZE as usize);
    let wrote = c.write_file(&FH, local_file(&src), |_| {}).await.unwrap();
    assert_eq!(wrote, SIZE);
    assert!(*written.lock() == src, "written content differs");
    assert!(
        inflight_max.load(Ordering::SeqCst) >= 2,
        "writes were pipelined"
    );
}

#[tokio::test]
async fn a_bulk_write_lost_with_its_connection_is_read_from_the_file_again() {
    const SIZE: u64 = 4 * 1024 * 1024 + 5;
    let written = Arc::new(Mutex::new(vec![0u8; SIZE as usize]));
    let w = written.clone();
    let f = fake(Box::new(move |conn, req| match req.op {
        // The first connection breaks at the second block: it and everything after it were
        // sent sealed in place, so they must be read from the file and sealed anew.
        RequestOp::Write { offset, .. } if conn == 0 && offset >= 1 << 20 => vec![Out::Close],
        RequestOp::Write { offset, data, .. } => {
            store(&mut w.lock(), offset, &data);
            vec![write_ok(req.id, data.len())]
        }
        RequestOp::Commit { .. } => vec![commit_ok(req.id)],
        _ => vec![reply(req.id, Err(NfsStatus::NotSupp))],
    }))
    .await;
    let c = Client::new(&f.name, None, quick());
    let src = content(0, SIZE as usize);
    let wrote = tokio::time::timeout(
        Duration::from_secs(60),
        c.write_file(&FH, local_file(&src), |_| {}),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(wrote, SIZE);
    assert!(f.conns.load(Ordering::SeqCst) >= 2, "the connection broke");
    assert!(*written.lock() == src, "written content differs");
}

#[tokio::test]
async fn a_bulk_write_of_a_file_that_grows_copies_it_to_its_new_end() {
    let written = Arc::new(Mutex::new(Vec::new()));
    let w = written.clone();
    let f = fake(Box::new(move |_, req| match req.op {
        RequestOp::Write { offset, data, .. } => {
            store(&mut w.lock(), offset, &data);
            vec![write_ok(req.id, data.len())]
        }
        RequestOp::Commit { .. } => vec![commit_ok(req.id)],
        _ => vec![reply(req.id, Err(NfsStatus::NotSupp))],
    }))
    .await;
    // Two blocks in flight: the file grows before the last planned block is even sent.
    let opts = Options {
        window: 2,
        ..quick()
    };
    let c = Client::new(&f.name, None, opts);
    let full = content(0, (4 << 20) + 7);
    let file = local_file(&full[..3 << 20]);
    let grow = file.clone();
    let tail = full[3 << 20..].to_vec();
    let mut first = true;
    let wrote = c
        .write_file(&FH, file, move |_| {
            if std::mem::take(&mut first) {
                std::os::unix::fs::FileExt::write_all_at(&*grow, &tail, 3 << 20).unwrap();
            }
        })
        .await
        .unwrap();
    assert_eq!(wrote, full.len() as u64);
    assert!(*written.lock() == full, "written content differs");
}

#[tokio::test]
async fn a_bulk_write_of_a_file_that_shrinks_fails_instead_of_sending_stale_bytes() {
    let f = fake(Box::new(|_, req| match req.op {
        RequestOp::Write { data, .. } => vec![write_ok(req.id, data.len())],
        _ => vec![reply(req.id, Err(NfsStatus::NotSupp))],
    }))
    .await;
    // Two blocks in flight: the third is read after the first is acknowledged.
    let opts = Options {
        window: 2,
        ..quick()
    };
    let c = Client::new(&f.name, None, opts);
    let file = local_file(&content(0, 3 << 20));
    let shrink = file.clone();
    let mut first = true;
    let e = c
        .write_file(&FH, file, move |_| {
            if std::mem::take(&mut first) {
                shrink.set_len(1000).unwrap();
            }
        })
        .await
        .unwrap_err();
    assert!(format!("{e:#}").contains("shrank"), "{e:#}");
}

#[tokio::test]
async fn reconnect_insists_on_the_same_hostid() {
    let mut served = 0;
    let f = fake(Box::new(move |_, req| {
        served += 1;
        // The genuine server answers once, then its connection breaks.
        if served == 1 {
            vec![reply(req.id, Ok(ReplyBody::Null))]
        } else {
            vec![Out::Close]
        }
    }))
    .await;
    let port = f.name.port();
    let c = Client::new(&f.name, None, quick());
    c.call(RequestOp::Null).await.unwrap();
    // The server goes away and an impostor with another key takes its port.
    drop(f);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let impostor = fake_on(
        port,
        ServerKeypair::generate(),
        Box::new(|_, req| vec![reply(req.id, Ok(ReplyBody::Null))]),
    )
    .await;
    // The next request finds the stream broken, reconnects, meets the impostor and stops.
    let last = c.call(RequestOp::Null).await.err();
    let e = last.expect("the impostor was never refused");
    assert!(matches!(e, SessionError::Handshake { .. }), "{e}");
    assert!(impostor.conns.load(Ordering::SeqCst) >= 1);
}

/// Options for the timeout tests: replies are due within 300 ms.
fn impatient() -> Options {
    Options {
        request_timeout: Duration::from_millis(300),
        ..quick()
    }
}

fn alice() -> Identity {
    Identity {
        user: "alice".into(),
        key: Arc::new(UserKeypair::generate()),
    }
}

#[tokio::test]
async fn silent_server_times_out_instead_of_hanging() {
    // Handshake and LOGIN are answered (by the fake itself); nothing else ever is.
    let f = fake(Box::new(|_, _| vec![])).await;
    let c = Client::new(&f.name, Some(alice()), impatient());
    assert_eq!(c.authno().await.unwrap(), 7, "logged in");
    let start = std::time::Instant::now();
    let e = tokio::time::timeout(Duration::from_secs(10), c.getattr(&FH))
        .await
        .expect("the request hung")
        .unwrap_err();
    let took = start.elapsed();
    assert!(matches!(e, SessionError::Timeout { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("did not answer"), "{msg}");
    assert!(msg.contains("within 0.3 s"), "{msg}");
    assert!(msg.contains(&f.name.to_string()), "{msg}");
    // Retried once on a fresh connection, then given up: two timeouts, not eight.
    assert_eq!(f.conns.load(Ordering::SeqCst), 2);
    assert!(took >= Duration::from_millis(600), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[tokio::test]
async fn timed_out_request_is_retried_on_an_answering_connection() {
    let f = fake(Box::new(|conn, req| match req.op {
        // The first connection goes silent; the second one answers.
        _ if conn == 0 => vec![],
        RequestOp::Read { offset, count, .. } => vec![serve_read(req.id, offset, count, 10)],
        _ => vec![reply(req.id, Err(NfsStatus::NotSupp))],
    }))
    .await;
    let c = Client::new(&f.name, Some(alice()), impatient());
    let (data, eof) = tokio::time::timeout(Duration::from_secs(10), c.read(&FH, 0, 100))
        .await
        .expect("the request hung")
        .unwrap();
    assert_eq!((&*data, eof), (&content(0, 10)[..], true));
    assert_eq!(f.conns.load(Ordering::SeqCst), 2, "reconnected once");
    assert_eq!(c.authno().await.unwrap(), 7, "logged in again");
}

#[tokio::test]
async fn timed_out_non_idempotent_request_is_not_repeated() {
    let removes = Arc::new(AtomicUsize::new(0));
    let r = removes.clone();
    let f = fake(Box::new(move |_, req| {
        if let RequestOp::Remove { .. } = req.op {
            r.fetch_add(1, Ordering::SeqCst);
        }
        vec![]
    }))
    .await;
    let c = Client::new(&f.name, None, impatient());
    let e = tokio::time::timeout(Duration::from_secs(10), c.remove(&FH, b"x", false))
        .await
        .expect("the request hung")
        .unwrap_err();
    assert!(matches!(e, SessionError::Timeout { .. }), "{e}");
    assert!(e.to_string().contains("not idempotent"), "{e}");
    assert_eq!(removes.load(Ordering::SeqCst), 1, "sent once");
    assert_eq!(f.conns.load(Ordering::SeqCst), 1, "no reconnect for it");
}

#[tokio::test]
async fn timeout_then_failed_reconnect_says_the_server_did_not_answer() {
    let f = fake(Box::new(|_, _| vec![])).await;
    let c = Client::new(&f.name, None, impatient());
    c.authno().await.unwrap();
    let call = {
        let c = c.clone();
        tokio::spawn(async move { c.call(RequestOp::Null).await })
    };
    // While the request waits, the server stops accepting connections (the silent stream
    // stays open), so the reconnect after the timeout fails.
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(f);
    let e = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the request hung")
        .unwrap()
        .unwrap_err();
    assert!(matches!(e, SessionError::Timeout { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("did not answer Null within 0.3 s"), "{msg}");
    assert!(msg.contains("reconnecting failed"), "{msg}");
}

#[test]
fn default_request_timeout_is_thirty_seconds() {
    assert_eq!(Options::default().request_timeout, Duration::from_secs(30));
}

#[tokio::test]
async fn an_object_made_without_a_handle_is_looked_up() {
    const DIR: FileHandle = FileHandle::from_bytes([3; 48]);
    let lookups = Arc::new(Mutex::new(Vec::new()));
    let seen = lookups.clone();
    let f = fake(Box::new(move |_, req| match req.op {
        // Made, but the server could not look it up (out of descriptors): no handle.
        RequestOp::Mkdir { .. } => vec![reply(
            req.id,
            Ok(ReplyBody::Mkdir(protocol::NewObject {
                fh: None,
                attr: None,
                dir_attr: None,
            })),
        )],
        RequestOp::Lookup { dir, name } => {
            seen.lock().push((dir, name));
            vec![reply(
                req.id,
                Ok(ReplyBody::Lookup {
                    fh: FH,
                    attr: Some(attr(0, 60_000)),
                    dir_attr: None,
                }),
            )]
        }
        _ => vec![reply(req.id, Err(NfsStatus::NotSupp))],
    }))
    .await;
    let c = Client::new(&f.name, None, quick());
    let made = c
        .mkdir(&DIR, b"new", protocol::SetAttr::default())
        .await
        .unwrap();
    assert_eq!((made.fh, made.attr), (FH, attr(0, 60_000)));
    assert_eq!(*lookups.lock(), vec![(DIR, b"new".to_vec())]);
}

/// A fake server that answers GETATTR and READDIRPLUS (one entry, `FH`) with the file's size
/// before a write, but holds those replies until after the WRITE's (whose post-op attributes
/// say 100 bytes): what sfsd's storage threads may do to pipelined requests. The stale replies
/// reach their callers, but the cache keeps what the WRITE said.
#[tokio::test]
async fn attributes_from_before_a_write_never_replace_the_write_s() {
    let held_now = Arc::new(AtomicUsize::new(0));
    let h = held_now.clone();
    let mut held: Vec<Out> = Vec::new();
    let f = fake(Box::new(move |_, req| match req.op {
        RequestOp::GetAttr { .. } => {
            let a = attr(0, 60_000);
            held.push(reply(req.id, Ok(ReplyBody::GetAttr { attr: a })));
            h.fetch_add(1, Ordering::SeqCst);
            vec![]
        }
        RequestOp::ReadDirPlus { .. } => {
            let entry = protocol::DirEntryPlus {
                fileid: 7,
                name: b"f".to_vec(),
                cookie: 1,
                attr: Some(attr(0, 60_000)),
                fh: Some(FH),
            };
            held.push(reply(
                req.id,
                Ok(ReplyBody::ReadDirPlus(protocol::DirPage {
                    dir_attr: None,
                    verifier: [0; 8],
                    entries: vec![entry],
                    eof: true,
                })),
            ));
            h.fetch_add(1, Ordering::SeqCst);
            vec![]
        }
        RequestOp::Write { .. } => vec![reply(
            req.id,
            Ok(ReplyBody::Write {
                attr: Some(attr(100, 60_000)),
                count: 100,
                committed: StableHow::Unstable,
                verifier: [1; 8],
            }),
        )],
        // The stale replies, once the WRITE's has been handled.
        RequestOp::Null => {
            let mut out = std::mem::take(&mut held);
            out.push(reply(req.id, Ok(ReplyBody::Null)));
            out
        }
        _ => vec![reply(req.id, Err(NfsStatus::NotSupp))],
    }))
    .await;
    let c = Client::new(&f.name, None, quick());
    let dir = FileHandle::from_bytes([6; 48]);
    let (g, l) = (c.clone(), c.clone());
    let getattr = tokio::spawn(async move { g.getattr_fresh(&FH).await });
    let listing = tokio::spawn(async move { l.readdir_all(&dir).await });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while held_now.load(Ordering::SeqCst) < 2 {
        assert!(std::time::Instant::now() < deadline, "requests not held");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    c.write(&FH, 0, StableHow::Unstable, &[1; 100])
        .await
        .unwrap();
    assert_eq!(c.cache().get(&FH).map(|a| a.size), Some(100));
    c.call(RequestOp::Null).await.unwrap();
    assert_eq!(getattr.await.unwrap().unwrap().size, 0);
    assert_eq!(listing.await.unwrap().unwrap()[0].attr.unwrap().size, 0);
    // No GETATTR either (it would be held): the cached attributes are the WRITE's.
    assert_eq!(c.cache().get(&FH).map(|a| a.size), Some(100));
    assert_eq!(c.getattr(&FH).await.unwrap().size, 100);
}

/// A client acting with a process's groups asks the server once per (login, groups) on a
/// connection and then carries the narrowed authno; a refused narrowing leaves the login's
/// authno (and is not asked again), and a client without groups never narrows.
#[tokio::test]
async fn narrowed_authnos_are_asked_once_and_a_refusal_keeps_the_login() {
    let narrows = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (n, s) = (narrows.clone(), seen.clone());
    let f = fake(Box::new(move |_, req| match req.op {
        RequestOp::Narrow { gid, groups } => {
            n.lock().push((req.authno, gid, groups));
            // Group 99 is one the user does not have.
            let r = if gid == 99 {
                Err(NfsStatus::Perm)
            } else {
                Ok(ReplyBody::Narrow { authno: 8 + gid })
            };
            vec![reply(req.id, r)]
        }
        _ => {
            s.lock().push(req.authno);
            vec![reply(req.id, Ok(ReplyBody::Null))]
        }
    }))
    .await;
    let c = Client::new(&f.name, Some(alice()), quick());
    let g1 = c.with_groups(Groups::new(1, vec![5, 3, 5]));
    let g1_again = c.with_groups(Groups::new(1, vec![3, 5]));
    let refused = c.with_groups(Groups::new(99, vec![]));
    for client in [&g1, &g1_again, &g1, &refused, &refused, &c] {
        client.call(RequestOp::Null).await.unwrap();
    }
    assert_eq!(*seen.lock(), vec![9, 9, 9, 7, 7, 7]);
    assert_eq!(
        *narrows.lock(),
        vec![(7, 1, vec![3, 5]), (7, 99, vec![])],
        "one NARROW per (login, gid, groups), from the login's authno"
    );
}

/// Whether `op` is a REMOVE through a reply-cache slot, and its ticket.
fn sequenced_remove(op: &RequestOp) -> Option<(u32, u32)> {
    match op {
        RequestOp::Sequence { slot, seq, op } if matches!(**op, RequestOp::Remove { .. }) => {
            Some((*slot, *seq))
        }
        _ => None,
    }
}

/// A REMOVE whose connection breaks before its reply is sent again on the next connection
/// with the same slot and sequence number (so a server that did it answers from its reply
/// cache instead of doing it again), and the caller gets the answer, not "not retried".
#[tokio::test]
async fn a_change_cut_off_is_sent_again_with_its_ticket() {
    let tickets = Arc::new(Mutex::new(Vec::new()));
    let seen = tickets.clone();
    let f = fake_speaking(
        0,
        ServerKeypair::generate(),
        vec![2, 3],
        Box::new(move |conn, req| {
            if let RequestOp::Session { slots, .. } = req.op {
                assert_eq!(slots, protocol::sequence::MAX_SLOTS);
                let resumed = conn > 0;
                return vec![reply(req.id, Ok(ReplyBody::Session { slots: 4, resumed }))];
            }
            let ticket = sequenced_remove(&req.op).expect("a sequenced REMOVE");
            seen.lock().push((conn, ticket));
            if conn == 0 {
                vec![Out::Close]
            } else {
                vec![reply(req.id, Ok(ReplyBody::Remove { dir_attr: None }))]
            }
        }),
    )
    .await;
    let c = Client::new(&f.name, None, quick());
    c.remove(&FH, b"x", false).await.unwrap();
    c.remove(&FH, b"y", false).await.unwrap();
    assert_eq!(
        *tickets.lock(),
        vec![(0, (0, 1)), (1, (0, 1)), (1, (0, 2))],
        "the same ticket again after the reconnect, the next one after the answer"
    );
}

/// When the server kept no replies from before the reconnect (it restarted, or the client was
/// away too long), a cut-off change may have been done: it is not sent again, and the next
/// change starts the new record's slots from 1.
#[tokio::test]
async fn a_change_is_not_sent_again_when_the_server_lost_its_replies() {
    let tickets = Arc::new(Mutex::new(Vec::new()));
    let seen = tickets.clone();
    let sessions = Arc::new(AtomicUsize::new(0));
    let count = sessions.clone();
    let f = fake_speaking(
        0,
        ServerKeypair::generate(),
        vec![3],
        Box::new(move |conn, req| {
            if let RequestOp::Session { .. } = req.op {
                count.fetch_add(1, Ordering::SeqCst);
                return vec![reply(
                    req.id,
                    Ok(ReplyBody::Session {
                        slots: 4,
                        resumed: false,
                    }),
                )];
            }
            seen.lock().push((conn, sequenced_remove(&req.op).unwrap()));
            if conn == 0 {
                vec![Out::Close]
            } else {
                vec![reply(req.id, Ok(ReplyBody::Remove { dir_attr: None }))]
            }
        }),
    )
    .await;
    let c = Client::new(&f.name, None, quick());
    let e = c.remove(&FH, b"x", false).await.unwrap_err();
    assert!(matches!(e, SessionError::NotRetried { .. }), "{e}");
    c.remove(&FH, b"y", false).await.unwrap();
    assert_eq!(*tickets.lock(), vec![(0, (0, 1)), (1, (0, 1))]);
    assert_eq!(sessions.load(Ordering::SeqCst), 2);
}

/// A fake server of protocol version 3 that keeps no replies from one connection to the next
/// (as one restarted between them): every SESSION starts a new record, with 4 slots;
/// `behaviour` answers the rest.
async fn fake_forgetting(mut behaviour: Behaviour) -> Fake {
    let sessions: Behaviour = Box::new(move |conn, req| match req.op {
        RequestOp::Session { .. } => vec![reply(
            req.id,
            Ok(ReplyBody::Session {
                slots: 4,
                resumed: false,
            }),
        )],
        _ => behaviour(conn, req),
    });
    fake_speaking(0, ServerKeypair::generate(), vec![3], sessions).await
}

/// A WRITE cut off by a server that then lost its replies (it restarted) is sent again, with a
/// slot of the new record: writing the same bytes at the same offset again leaves what doing
/// it once does, and the write is still under way for its caller, so it takes effect within
/// the call either way. Failing it instead failed every `cp` under way when sfsd restarted.
#[tokio::test]
async fn a_write_is_sent_again_when_the_server_lost_its_replies() {
    let tickets = Arc::new(Mutex::new(Vec::new()));
    let seen = tickets.clone();
    let f = fake_forgetting(Box::new(move |conn, req| {
        let RequestOp::Sequence { slot, seq, op } = req.op else {
            panic!("a WRITE outside a SEQUENCE: {:?}", req.op)
        };
        let RequestOp::Write { data, .. } = *op else {
            panic!("not a WRITE: {op:?}")
        };
        seen.lock().push((conn, (slot, seq)));
        if conn == 0 {
            return vec![Out::Close];
        }
        vec![reply(
            req.id,
            Ok(ReplyBody::Write {
                attr: None,
                count: data.len() as u32,
                committed: StableHow::Unstable,
                verifier: [7; 8],
            }),
        )]
    }))
    .await;
    let c = Client::new(&f.name, None, quick());
    let (count, _) = c
        .write(&FH, 0, StableHow::Unstable, b"abc")
        .await
        .expect("the WRITE is sent again after the server lost its replies");
    assert_eq!(count, 3);
    assert_eq!(*tickets.lock(), vec![(0, (0, 1)), (1, (0, 1))]);
    // What is not idempotent still fails (the REMOVE test above).
}

/// A SETATTR of a mode (tar's `chmod`, `utimensat`, `chown`) cut off by a server that then
/// lost its replies is sent again too; a truncating one is not (done again, it could cut what
/// another client wrote since).
#[tokio::test]
async fn a_setattr_is_sent_again_when_the_server_lost_its_replies_unless_it_truncates() {
    let sent = Arc::new(Mutex::new(Vec::new()));
    let seen = sent.clone();
    let f = fake_forgetting(Box::new(move |conn, req| {
        let RequestOp::Sequence { op, .. } = req.op else {
            panic!("a SETATTR outside a SEQUENCE: {:?}", req.op)
        };
        let RequestOp::SetAttr { attr, .. } = *op else {
            panic!("not a SETATTR: {op:?}")
        };
        let mut seen = seen.lock();
        seen.push((conn, attr.size));
        // Each one's first try dies with its connection.
        if seen.len() != 2 {
            return vec![Out::Close];
        }
        vec![reply(
            req.id,
            Ok(ReplyBody::SetAttr {
                attr: Some(Attr::test_file(1, 0)),
            }),
        )]
    }))
    .await;
    let c = Client::new(&f.name, None, quick());
    let chmod = protocol::SetAttr {
        mode: Some(0o600),
        ..protocol::SetAttr::default()
    };
    c.setattr(&FH, chmod)
        .await
        .expect("a chmod is sent again after the server lost its replies");
    let truncate = protocol::SetAttr {
        size: Some(0),
        ..protocol::SetAttr::default()
    };
    let e = c.setattr(&FH, truncate).await.unwrap_err();
    assert!(matches!(e, SessionError::NotRetried { .. }), "{e}");
    assert_eq!(
        *sent.lock(),
        vec![(0, None), (1, None), (1, Some(0))],
        "the chmod twice, the truncation once"
    );
}

/// A server of protocol version 2 gets no SESSION and no SEQUENCE.
#[tokio::test]
async fn a_version_2_server_gets_plain_changes() {
    let f = fake(Box::new(|_, req| match req.op {
        RequestOp::Remove { .. } => vec![reply(req.id, Ok(ReplyBody::Remove { dir_attr: None }))],
        op => panic!("unexpected {op:?}"),
    }))
    .await;
    let c = Client::new(&f.name, None, quick());
    c.remove(&FH, b"x", false).await.unwrap();
}

/// APPEND: the reply's attributes (the size after our data and whatever came before it) go
/// into the cache, the offset and verifier come back, and an APPEND whose connection is lost
/// is sent again only with its reply-cache ticket (a server that did it answers from the
/// cache instead of appending twice).
#[tokio::test]
async fn append_installs_its_attributes_and_is_resent_only_with_its_ticket() {
    let appends = Arc::new(Mutex::new(Vec::new()));
    let seen = appends.clone();
    let f = fake_speaking(
        0,
        ServerKeypair::generate(),
        vec![3],
        Box::new(move |conn, req| {
            let (ticket, op) = match req.op {
                RequestOp::Session { .. } => {
                    let resumed = conn > 0;
                    return vec![reply(req.id, Ok(ReplyBody::Session { slots: 4, resumed }))];
                }
                RequestOp::Sequence { slot, seq, op } => ((slot, seq), *op),
                op => panic!("unsequenced {op:?}"),
            };
            let RequestOp::Append { data, .. } = op else {
                panic!("not an APPEND: {op:?}");
            };
            let mut seen = seen.lock();
            seen.push((conn, ticket));
            if conn == 0 && seen.len() == 2 {
                return vec![Out::Close];
            }
            vec![reply(
                req.id,
                Ok(ReplyBody::Append {
                    attr: Some(attr(100 + data.len() as u64, 60_000)),
                    count: data.len() as u32,
                    committed: StableHow::Unstable,
                    verifier: [4; 8],
                    offset: 100,
                }),
            )]
        }),
    )
    .await;
    let c = Client::new(&f.name, None, quick());
    let done = c.append(&FH, StableHow::Unstable, b"abc").await.unwrap();
    assert_eq!(
        done,
        append::Appended {
            offset: 100,
            count: 3,
            verifier: [4; 8]
        }
    );
    assert_eq!(c.cache().get(&FH).unwrap().size, 103);
    let again = c.append(&FH, StableHow::Unstable, b"lost").await.unwrap();
    assert_eq!(again.count, 4);
    assert_eq!(
        *appends.lock(),
        vec![(0, (0, 1)), (0, (0, 2)), (1, (0, 2))],
        "sent again with the same ticket after the reconnect"
    );
}

/// A server of protocol version 2 has no APPEND: the caller is told NOTSUPP (and writes at its
/// offset instead) without anything being sent, since such a server would close the
/// connection on the unknown procedure.
#[tokio::test]
async fn append_to_a_version_2_server_is_not_supported_and_not_sent() {
    let f = fake(Box::new(|_, req| panic!("sent {:?}", req.op))).await;
    let c = Client::new(&f.name, None, quick());
    let e = c
        .append(&FH, StableHow::Unstable, b"abc")
        .await
        .unwrap_err();
    assert!(matches!(e, SessionError::Nfs(NfsStatus::NotSupp)), "{e}");
}

/// A server of protocol version 2 has no locks: LOCK answers "no locks available" without
/// anything being sent (such a server would close the connection on the procedure).
#[tokio::test]
async fn locks_on_a_version_2_server_are_not_available_and_not_sent() {
    let f = fake(Box::new(|_, req| panic!("sent {:?}", req.op))).await;
    let c = Client::new(&f.name, None, quick());
    let args = protocol::LockArgs {
        fh: FH,
        owner: 1,
        kind: protocol::LockKind::Write,
        start: 0,
        len: 0,
        flock: false,
        reclaim: false,
    };
    let e = c.lock(args).await.unwrap_err();
    assert!(matches!(e, SessionError::Nfs(NfsStatus::NoLck)), "{e}");
}

/// A GETXATTR answer is given without waiting only when it is cached and the authno is
/// known already (connected, logged in); an INVALIDATE takes it away as it does for
/// [`Client::getxattr`].
#[tokio::test]
async fn cached_xattr_answers_are_given_without_waiting_only_when_known() {
    let f = fake(Box::new(move |_, req| match req.op {
        RequestOp::GetAttr { .. } => vec![reply(
            req.id,
            Ok(ReplyBody::GetAttr {
                attr: attr(5, 60_000),
            }),
        )],
        RequestOp::GetXattr { .. } => vec![reply(
            req.id,
            Ok(ReplyBody::GetXattr {
                value: b"v".to_vec(),
            }),
        )],
        RequestOp::Null => vec![
            Out::Send(Box::new(ServerMessage::Invalidate(Invalidate {
                fh: FH,
                attr: None,
            }))),
            reply(req.id, Ok(ReplyBody::Null)),
        ],
        _ => vec![reply(req.id, Err(NfsStatus::NotSupp))],
    }))
    .await;
    let c = Client::new(&f.name, Some(alice()), quick());
    assert_eq!(c.authno_now(), None, "not connected");
    assert!(c.getxattr_cached(&FH, b"user.k").is_none());
    c.getattr(&FH).await.unwrap();
    assert_eq!(c.authno_now(), Some(7));
    assert!(c.getxattr_cached(&FH, b"user.k").is_none(), "not asked yet");
    assert_eq!(c.getxattr(&FH, b"user.k").await.unwrap(), b"v");
    let (authno, answer) = c.getxattr_cached(&FH, b"user.k").unwrap();
    assert_eq!((authno, answer.unwrap()), (7, b"v".to_vec()));
    assert!(c.getxattr_cached(&FH, b"user.other").is_none());
    assert!(c.listxattr_cached(&FH).is_none(), "the list was not asked");
    assert_eq!(
        c.as_uid(1234).authno_now(),
        None,
        "that user never logged in"
    );
    c.call(RequestOp::Null).await.unwrap();
    assert!(c.getxattr_cached(&FH, b"user.k").is_none(), "invalidated");
}

/// A SESSION reply: a new record with 4 slots.
fn new_session(id: u64) -> Out {
    reply(
        id,
        Ok(ReplyBody::Session {
            slots: 4,
            resumed: false,
        }),
    )
}

/// A FETCH reply carrying all of `data`.
fn fetched(id: u64, data: &[u8]) -> Out {
    reply(
        id,
        Ok(ReplyBody::Fetch {
            fh: FH,
            attr: attr(data.len() as u64, 60_000),
            eof: true,
            data: data.to_vec().into(),
        }),
    )
}

/// The first FETCH of a connection goes out with its LOGIN, carrying the authno a LOGIN gets
/// first (1) before the LOGIN is answered; a server that gave another authno (this fake gives
/// 7) gets the FETCH again with that one, and the answer to the first is not used.
#[tokio::test]
async fn the_first_fetch_rides_with_the_login_and_is_asked_again_if_the_authno_differs() {
    let authnos = Arc::new(Mutex::new(Vec::new()));
    let seen = authnos.clone();
    let f = fake_speaking(
        0,
        ServerKeypair::generate(),
        vec![2, 3, 5],
        Box::new(move |_, req| match req.op {
            RequestOp::Session { .. } => vec![new_session(req.id)],
            RequestOp::Fetch { ref path, .. } => {
                assert_eq!(path, b"/a/b");
                seen.lock().push(req.authno);
                match req.authno {
                    7 => vec![fetched(req.id, b"alice's")],
                    _ => vec![reply(req.id, Err(NfsStatus::Acces))],
                }
            }
            ref other => panic!("unexpected {other:?}"),
        }),
    )
    .await;
    let c = Client::new(&f.name, Some(alice()), quick());
    let got = c
        .fetch("/a/b")
        .await
        .unwrap()
        .expect("the server can FETCH");
    assert_eq!(&got.data[..], b"alice's");
    assert_eq!(
        *authnos.lock(),
        vec![1, 7],
        "pipelined with 1, then as the LOGIN said"
    );
    // On the live connection a FETCH is an ordinary request.
    c.fetch("/a/b").await.unwrap().unwrap();
    assert_eq!(*authnos.lock(), vec![1, 7, 7]);
}

/// The FETCH riding with a new connection's LOGIN asks for no more bytes than TCP's first
/// flight carries, so the READs for the rest follow a round trip after the handshake instead
/// of waiting out a whole record's slow start (a round trip with nothing to send); on the
/// live connection a FETCH asks for a whole record.
#[tokio::test]
async fn the_first_fetch_asks_for_what_the_first_flight_carries() {
    const SIZE: usize = 100 * 1024;
    let counts = Arc::new(Mutex::new(Vec::new()));
    let seen = counts.clone();
    let f = fake_speaking(
        0,
        ServerKeypair::generate(),
        vec![2, 3, 5],
        Box::new(move |_, req| match req.op {
            RequestOp::Session { .. } => vec![new_session(req.id)],
            RequestOp::Fetch { count, .. } => {
                seen.lock().push(count);
                let n = SIZE.min(count as usize);
                vec![reply(
                    req.id,
                    Ok(ReplyBody::Fetch {
                        fh: FH,
                        attr: attr(SIZE as u64, 60_000),
                        eof: n == SIZE,
                        data: content(0, n).into(),
                    }),
                )]
            }
            ref other => panic!("unexpected {other:?}"),
        }),
    )
    .await;
    // Anonymous: the early FETCH's answer is used (no LOGIN whose authno could differ).
    let c = Client::new(&f.name, None, quick());
    let first = c.fetch("/f").await.unwrap().expect("the server can FETCH");
    assert_eq!(first.data.len(), 8 * 1024, "the first flight's worth");
    assert!(first.data[..] == content(0, 8 * 1024)[..]);
    assert!(!first.eof);
    let again = c.fetch("/f").await.unwrap().unwrap();
    assert_eq!(again.data.len(), SIZE);
    assert!(again.eof);
    assert_eq!(*counts.lock(), vec![8 * 1024, u32::MAX]);
}

/// A server of a version without FETCH is never sent one: the caller walks instead.
#[tokio::test]
async fn no_fetch_is_sent_to_a_server_without_it() {
    let f = fake_speaking(
        0,
        ServerKeypair::generate(),
        vec![2, 3],
        Box::new(|_, req| match req.op {
            RequestOp::Session { .. } => vec![new_session(req.id)],
            ref other => panic!("unexpected {other:?}"),
        }),
    )
    .await;
    let c = Client::new(&f.name, Some(alice()), quick());
    assert!(c.fetch("/a").await.unwrap().is_none());
}

/// A server that claims bytes for a directory, or more than one record's worth, is refused.
#[tokio::test]
async fn a_fetch_reply_with_bytes_for_a_directory_is_refused() {
    let f = fake_speaking(
        0,
        ServerKeypair::generate(),
        vec![5],
        Box::new(|_, req| match req.op {
            RequestOp::Session { .. } => vec![new_session(req.id)],
            RequestOp::Fetch { .. } => vec![reply(
                req.id,
                Ok(ReplyBody::Fetch {
                    fh: FH,
                    attr: Attr {
                        ftype: protocol::FileType::Directory,
                        ..attr(0, 60_000)
                    },
                    eof: true,
                    data: b"../../etc/passwd".to_vec().into(),
                }),
            )],
            ref other => panic!("unexpected {other:?}"),
        }),
    )
    .await;
    let c = Client::new(&f.name, None, quick());
    let e = c.fetch("/d").await.unwrap_err();
    assert!(matches!(e, SessionError::Protocol { .. }), "{e:?}");
}

/// A FETCH reply with more bytes than one READ of the connection may carry is refused
/// before any of it reaches the caller.
#[tokio::test]
async fn a_fetch_reply_longer_than_a_read_is_refused() {
    let f = fake_speaking(
        0,
        ServerKeypair::generate(),
        vec![5],
        Box::new(|_, req| match req.op {
            RequestOp::Session { .. } => vec![new_session(req.id)],
            RequestOp::Fetch { .. } => {
                let too_long = protocol::max_io_size(protocol::record::DEFAULT_MAX_PAYLOAD) + 100;
                vec![fetched(req.id, &vec![7; too_long as usize])]
            }
            ref other => panic!("unexpected {other:?}"),
        }),
    )
    .await;
    let c = Client::new(&f.name, None, quick());
    let e = c.fetch("/f").await.unwrap_err();
    assert!(matches!(e, SessionError::Protocol { .. }), "{e:?}");
}

/// Once the server's key is known, a new connection sends its first handshake message at
/// once instead of waiting a round trip for the server's key message.
#[tokio::test]
async fn a_reconnect_speaks_first_with_the_key_it_learned() {
    let f = fake_probing(
        vec![2],
        Box::new(|_, req| vec![reply(req.id, Ok(ReplyBody::Null))]),
    )
    .await;
    let c = Client::new(&f.name, None, quick());
    c.call(RequestOp::Null).await.unwrap();
    assert!(c.disconnect().await);
    c.call(RequestOp::Null).await.unwrap();
    assert_eq!(
        *f.spoke_first.lock(),
        vec![false, true],
        "waited for the key the first time only"
    );
}

/// Where the server orders COMMIT behind the connection's WRITEs (version 9), `write_file`
/// sends it behind the last WRITE without waiting for their replies: this fake answers no
/// WRITE until the COMMIT has come (a client that waits for the replies first would wait
/// for ever). With a server of version 8 the COMMIT still comes after the last reply.
#[tokio::test]
async fn a_commit_goes_out_behind_the_last_write_where_the_server_orders_it() {
    const SIZE: u64 = 3 * 1024 * 1024 + 5;
    for version in [9u32, 8] {
        let written = Arc::new(Mutex::new(Vec::new()));
        let commits = Arc::new(Mutex::new(Vec::new()));
        let (w, seen) = (written.clone(), commits.clone());
        let mut held = Vec::new();
        let f = fake_speaking(
            0,
            ServerKeypair::generate(),
            vec![2, version],
            Box::new(move |_, req| match req.op {
                // No reply cache: the WRITEs go unsequenced.
                RequestOp::Session { .. } => vec![reply(req.id, Err(NfsStatus::NotSupp))],
                RequestOp::Write { offset, data, .. } => {
                    let mut g = w.lock();
                    store(&mut g, offset, &data);
                    held.push(write_ok(req.id, data.len()));
                    // Version 8: answered once all the data is in.
                    if version == 8 && g.len() as u64 == SIZE {
                        std::mem::take(&mut held)
                    } else {
                        vec![]
                    }
                }
                RequestOp::Commit { .. } => {
                    seen.lock().push(held.len());
                    let mut out: Vec<Out> = std::mem::take(&mut held);
                    out.push(commit_ok(req.id));
                    out
                }
                ref other => panic!("unexpected {other:?}"),
            }),
        )
        .await;
        let c = Client::new(&f.name, Some(alice()), quick());
        let src = content(0, SIZE as usize);
        let wrote = tokio::time::timeout(
            Duration::from_secs(20),
            c.write_file(&FH, local_file(&src), |_| {}),
        )
        .await
        .expect("the COMMIT did not wait for the WRITE replies")
        .unwrap();
        assert_eq!(wrote, SIZE);
        assert!(*written.lock() == src, "written content differs");
        let commits = commits.lock().clone();
        if version == 9 {
            assert_eq!(
                commits,
                [4],
                "one COMMIT, sent with the 4 WRITEs unanswered"
            );
        } else {
            assert_eq!(commits, [0], "one COMMIT, after every reply");
        }
    }
}

/// `sfs put`'s CREATEAT goes out with the LOGIN (authno 1 before the LOGIN is answered); a
/// reply without the new file's handle is followed by a LOOKUP of the path's last name in the
/// directory the reply names.
#[tokio::test]
async fn the_first_create_at_rides_with_the_login_and_a_missing_handle_is_looked_up() {
    const DIR: FileHandle = FileHandle::from_bytes([3; 48]);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let f = fake_speaking(
        0,
        ServerKeypair::generate(),
        vec![2, 3, 5, 7, 9, 11],
        Box::new(move |_, req| match req.op {
            RequestOp::Session { .. } => vec![new_session(req.id)],
            RequestOp::CreateAt { ref path, .. } => {
                log.lock().push((req.authno, path.clone()));
                vec![reply(
                    req.id,
                    Ok(ReplyBody::CreateAt {
                        dir: DIR,
                        made: Box::new(protocol::NewObject {
                            fh: None,
                            attr: None,
                            dir_attr: None,
                        }),
                    }),
                )]
            }
            RequestOp::Lookup { dir, ref name } => {
                log.lock()
                    .push((req.authno, [dir.as_bytes(), name].concat()));
                vec![reply(
                    req.id,
                    Ok(ReplyBody::Lookup {
                        fh: FH,
                        attr: Some(attr(0, 60_000)),
                        dir_attr: None,
                    }),
                )]
            }
            ref other => panic!("unexpected {other:?}"),
        }),
    )
    .await;
    let c = Client::new(&f.name, None, quick());
    let how = protocol::CreateHow::Guarded(protocol::SetAttr::default());
    let (fh, _) = c
        .create_at("/up/new.bin", how)
        .await
        .unwrap()
        .expect("CREATEAT");
    assert_eq!(fh, FH);
    let lookup = [DIR.as_bytes(), b"new.bin"].concat();
    assert_eq!(
        *seen.lock(),
        vec![
            (protocol::ANONYMOUS, b"/up/new.bin".to_vec()),
            (protocol::ANONYMOUS, lookup)
        ]
    );
}

/// A server of a version without CREATEAT is never sent one: `sfs put` finds the directory
/// and sends CREATE instead.
#[tokio::test]
async fn no_create_at_is_sent_to_a_server_without_it() {
    let f = fake_speaking(
        0,
        ServerKeypair::generate(),
        vec![2, 3, 5, 7, 9],
        Box::new(|_, req| match req.op {
            RequestOp::Session { .. } => vec![new_session(req.id)],
            ref other => panic!("unexpected {other:?}"),
        }),
    )
    .await;
    let c = Client::new(&f.name, None, quick());
    let how = protocol::CreateHow::Guarded(protocol::SetAttr::default());
    assert!(c.create_at("/f", how).await.unwrap().is_none());
}

/// Records the socket does not take at once go to the writer task and still arrive whole and
/// in the order they were sealed: the server stops reading for a while (its first request
/// blocks it), so the client's writes of 200 records of 60 KiB (under the size written
/// alone, so each is written by its sender) find the socket full, partly or wholly; the
/// server then opens every record (one out of order or cut short fails its tag) and each
/// WRITE carries its own bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_the_socket_does_not_take_at_once_arrive_whole_and_in_order() {
    const CHUNK: usize = 60 * 1024;
    let mut first = true;
    let f = fake(Box::new(move |_, req| {
        if std::mem::take(&mut first) {
            std::thread::sleep(Duration::from_millis(400));
        }
        match req.op {
            RequestOp::Write { offset, data, .. } => {
                let want = (offset / CHUNK as u64) as u8;
                if data.len() != CHUNK || data.iter().any(|b| *b != want) {
                    return vec![reply(req.id, Err(NfsStatus::Inval))];
                }
                vec![write_ok(req.id, data.len())]
            }
            _ => vec![reply(req.id, Err(NfsStatus::NotSupp))],
        }
    }))
    .await;
    let c = Client::new(&f.name, None, quick());
    let mut tasks = Vec::new();
    for i in 0..200u64 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            let data = vec![i as u8; CHUNK];
            c.write(&FH, i * CHUNK as u64, StableHow::Unstable, &data)
                .await
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        let written = tokio::time::timeout(Duration::from_secs(20), t)
            .await
            .expect("no answer")
            .unwrap();
        assert_eq!(
            written.map(|(n, _)| n as usize).ok(),
            Some(CHUNK),
            "write {i}"
        );
    }
    assert_eq!(
        f.conns.load(Ordering::SeqCst),
        1,
        "one connection throughout"
    );
}
