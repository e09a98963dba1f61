//! Leases between connections, many concurrent clients, restart, shutdown.

mod common;

use std::time::Duration;

use common::*;
use protocol::*;

const USERS: &[(&str, u8, u32, &str)] = &[("alice", 1, 0, "0")];

fn start(area: &Area, extra: &[&str]) -> Sfsd {
    area.start_for(USERS, extra)
}

#[test]
fn lease_invalidation_between_connections() {
    let area = Area::new();
    std::fs::write(area.export().join("f"), b"v1").unwrap();
    let s = start(&area, &["--lease-secs", "30"]);
    let mut c1 = s.connect();
    let mut c2 = s.connect();
    let a1 = c1.login("alice", 1).unwrap();
    let a2 = c2.login("alice", 1).unwrap();
    let root = c1.mount(a1);
    let f = c1.lookup(a1, root, "f").unwrap();
    let attr = c1.getattr(a1, f).unwrap();
    assert_eq!(attr.lease_ms, 30_000);
    // c2 changes the file: c1 (a lease holder) gets INVALIDATE, c2 does not.
    c2.write(a2, f, 0, b"v2-longer").unwrap();
    let msg = c1.next_message().unwrap();
    match msg {
        ServerMessage::Invalidate(i) => {
            assert_eq!(i.fh, f);
            assert_eq!(i.attr.unwrap().size, 9);
        }
        o => panic!("{o:?}"),
    }
    // c1 no longer holds a lease: a second change sends nothing until c1 asks again.
    c2.write(a2, f, 0, b"v3").unwrap();
    assert!(c2.invalidations.is_empty());
    c1.getattr(a1, f).unwrap();
    assert!(c1.invalidations.is_empty());
    // Directory changes invalidate the directory.
    c1.getattr(a1, root).unwrap();
    c2.create(a2, root, "new", 0o644).unwrap();
    // c1 is told (that color 0 sends it before c2's reply, in every interleaving, is the
    // simulator's test: `sim::tests`); waiting for it needs no sleep.
    match c1.next_message().unwrap() {
        ServerMessage::Invalidate(i) => assert_eq!(i.fh, root),
        o => panic!("{o:?}"),
    }
}

#[test]
fn many_clients_read_and_write_concurrently() {
    let area = Area::new();
    // Modest volumes: debug builds seal slowly (the protocol crate is not optimised there).
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(area.export().join("big"), &big).unwrap();
    std::fs::write(area.export().join("shared"), vec![0u8; 64 * 16]).unwrap();
    let s = start(&area, &[]);
    let big = std::sync::Arc::new(big);
    let threads: Vec<_> = (0..10u8)
        .map(|i| {
            let (name, addr, big) = (s.name.clone(), s.addr, big.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&name, addr);
                let a = c.login("alice", 1).unwrap();
                let root = c.mount(a);
                // Everyone reads the same big file, pipelining several READs.
                let f = c.lookup(a, root, "big").unwrap();
                let chunk = 256 * 1024u32;
                let mut ids = Vec::new();
                for k in 0..(big.len() as u32).div_ceil(chunk) {
                    ids.push((
                        k,
                        c.send(
                            a,
                            RequestOp::Read {
                                fh: f,
                                offset: (k * chunk) as u64,
                                count: chunk,
                            },
                        ),
                    ));
                }
                for (k, id) in ids {
                    match c.wait_reply(id).unwrap() {
                        ReplyBody::Read { data, .. } => {
                            let off = (k * chunk) as usize;
                            assert!(data[..] == big[off..(off + chunk as usize).min(big.len())]);
                        }
                        o => panic!("{o:?}"),
                    }
                }
                // Each writes its own file and a slice of a shared one.
                let mine = c.create(a, root, &format!("own-{i}"), 0o644).unwrap();
                let data: Vec<u8> = (0..100_000u32).map(|x| (x as u8) ^ i).collect();
                for (n, part) in data.chunks(65536).enumerate() {
                    c.write(a, mine, (n * 65536) as u64, part).unwrap();
                }
                assert_eq!(c.read_all(a, mine).unwrap(), data);
                let shared = c.lookup(a, root, "shared").unwrap();
                c.write(a, shared, i as u64 * 64, &[i + 1; 64]).unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let shared = std::fs::read(area.export().join("shared")).unwrap();
    for i in 0..10u8 {
        assert!(
            shared[i as usize * 64..(i as usize + 1) * 64]
                .iter()
                .all(|&b| b == i + 1)
        );
        let own = std::fs::read(area.export().join(format!("own-{i}"))).unwrap();
        assert_eq!(own.len(), 100_000);
    }
}

#[test]
fn handles_survive_a_restart_and_sigterm_exits_cleanly() {
    let area = Area::new();
    std::fs::create_dir_all(area.export().join("a/b/c")).unwrap();
    std::fs::write(area.export().join("a/b/c/deep"), b"deep data").unwrap();
    let mut s = start(&area, &[]);
    let (root, deep, dir_b) = {
        let mut c = s.connect();
        let a = c.login("alice", 1).unwrap();
        let root = c.mount(a);
        let da = c.lookup(a, root, "a").unwrap();
        let db = c.lookup(a, da, "b").unwrap();
        let dc = c.lookup(a, db, "c").unwrap();
        let deep = c.lookup(a, dc, "deep").unwrap();
        (root, deep, db)
    };
    assert!(s.terminate(), "SIGTERM exits 0");
    let stats = s
        .stdout
        .lock()
        .unwrap()
        .iter()
        .find(|l| l.starts_with("sfsd-stats: {"))
        .cloned();
    let stats = stats.expect("--stats prints a line at shutdown");
    assert!(stats.contains("\"serial_fraction\":"));
    assert!(stats.contains("\"color0_busy_ns\":"));
    // Same state dir, new process (and a new port, so a new name; same key).
    let s2 = start(&area, &[]);
    let mut c = s2.connect();
    let a = c.login("alice", 1).unwrap();
    assert_eq!(c.mount(a), root);
    assert_eq!(
        c.read_all(a, deep).unwrap(),
        b"deep data",
        "handle from before the restart"
    );
    assert!(c.lookup(a, dir_b, "c").is_ok());
    // Moved while the server was down: still found.
    drop(c);
    std::fs::rename(
        area.export().join("a/b/c/deep"),
        area.export().join("a/moved"),
    )
    .unwrap();
    let mut c = s2.connect();
    let a = c.login("alice", 1).unwrap();
    // Export walks are rate-limited globally: right after the walk above, the server may ask
    // the client to come back later (JUKEBOX), as NFS clients do.
    fn retrying<T>(mut op: impl FnMut() -> Result<T, NfsStatus>) -> Result<T, NfsStatus> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        loop {
            match op() {
                Err(NfsStatus::Jukebox) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(200))
                }
                other => return other,
            }
        }
    }
    assert_eq!(retrying(|| c.read_all(a, deep)).unwrap(), b"deep data");
    std::fs::remove_file(area.export().join("a/moved")).unwrap();
    assert_eq!(retrying(|| c.getattr(a, deep)), Err(NfsStatus::Stale));
}

#[test]
fn slow_reader_does_not_make_the_server_buffer_without_bound() {
    let area = Area::new();
    std::fs::write(area.export().join("big"), vec![7u8; 4 << 20]).unwrap();
    let s = start(&area, &["--max-output", "262144", "--max-in-flight", "4"]);
    let mut slow = s.connect();
    let a = slow.login("alice", 1).unwrap();
    let root = slow.mount(a);
    let f = slow.lookup(a, root, "big").unwrap();
    // Ask for far more than the limits without reading replies.
    // (Debug builds seal slowly, so the volume stays modest: 8 MiB.)
    for k in 0..32u64 {
        slow.send(
            a,
            RequestOp::Read {
                fh: f,
                offset: (k % 16) << 18,
                count: 1 << 18,
            },
        );
    }
    std::thread::sleep(Duration::from_millis(300));
    // Others are served meanwhile.
    let mut fast = s.connect();
    let b = fast.login("alice", 1).unwrap();
    let r = fast.mount(b);
    assert_eq!(r, root);
    // The slow client eventually gets all its replies.
    slow.stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut n = 0;
    while n < 32 {
        match slow.next_message().unwrap() {
            ServerMessage::Reply(r) => {
                assert!(matches!(r.result, Ok(ReplyBody::Read { .. })));
                n += 1;
            }
            ServerMessage::Invalidate(_) => {}
        }
    }
}

/// With more workers than busy connections, one connection's READ replies are sealed on
/// several workers at once; they must still leave in nonce order (else they do not open),
/// each answer its own request, and carry the right bytes.
#[test]
fn one_stream_sealed_on_several_workers_arrives_whole_and_in_order() {
    let area = Area::new();
    let data: Vec<u8> = (0..(8u32 << 20))
        .map(|i| (i * 7 + i / 4096) as u8)
        .collect();
    std::fs::write(area.export().join("big"), &data).unwrap();
    let s = start(&area, &["--workers", "2"]);
    let mut c = s.connect();
    let a = c.login("alice", 1).unwrap();
    let root = c.mount(a);
    let f = c.lookup(a, root, "big").unwrap();
    let chunk = 64u64 << 10;
    for round in 0..4u64 {
        let ids: Vec<(u64, u64)> = (0..32u64)
            .map(|k| {
                let offset = ((round * 32 + k) * chunk) % data.len() as u64;
                let id = c.send(
                    a,
                    RequestOp::Read {
                        fh: f,
                        offset,
                        count: chunk as u32,
                    },
                );
                (id, offset)
            })
            .collect();
        // Replies may come in any order (a READ that misses the page cache or the open-file
        // cache waits for a storage thread); each must answer its own request.
        let mut pending: std::collections::HashMap<u64, u64> = ids.into_iter().collect();
        while !pending.is_empty() {
            let reply = loop {
                match c.next_message().expect("every record opens") {
                    ServerMessage::Reply(r) => break r,
                    ServerMessage::Invalidate(_) => {}
                }
            };
            let offset = pending
                .remove(&reply.id)
                .expect("a reply to a request in flight");
            match reply.result {
                Ok(ReplyBody::Read { data: got, .. }) => {
                    let at = offset as usize;
                    assert_eq!(&*got, &data[at..at + chunk as usize], "bytes at {offset}");
                }
                other => panic!("READ at {offset}: {other:?}"),
            }
        }
    }
}

/// Large WRITEs are decoded into buffers kept from earlier requests (written WRITEs' data,
/// sent replies) while the connection has work: more WRITEs than its output limit admits at
/// once (so it pauses, and decodes the rest as the first finish), of changing sizes, each
/// with its own bytes, must land exactly, with nothing of a longer earlier request left in a
/// reused buffer.
#[test]
fn pipelined_writes_in_reused_buffers_keep_only_their_own_bytes() {
    let area = Area::new();
    let s = start(&area, &["--max-output", "1048576"]);
    let mut c = s.connect();
    let a = c.login("alice", 1).unwrap();
    let root = c.mount(a);
    let f = c.create(a, root, "w", 0o644).unwrap();
    let mut expected = Vec::new();
    let ids: Vec<u64> = (0..40u8)
        .map(|k| {
            // 256 KiB down to 16 KiB (the smallest size decoded into a kept buffer) and up.
            let len = (((k % 12) as usize * 20) << 10)
                .abs_diff(256 << 10)
                .max(16 << 10);
            let offset = expected.len() as u64;
            expected.extend(std::iter::repeat_n(k + 1, len));
            c.send(
                a,
                RequestOp::Write {
                    fh: f,
                    offset,
                    stable: StableHow::Unstable,
                    data: vec![k + 1; len].into(),
                },
            )
        })
        .collect();
    for id in ids {
        match c.wait_reply(id) {
            Ok(ReplyBody::Write { .. }) => {}
            other => panic!("WRITE: {other:?}"),
        }
    }
    let on_disk = std::fs::read(area.export().join("w")).unwrap();
    assert_eq!(on_disk.len(), expected.len());
    let first_wrong = on_disk.iter().zip(&expected).position(|(a, b)| a != b);
    assert_eq!(first_wrong, None, "the file differs from what was written");
}

/// `dirs` directories `d0`, `d1`... of `per_dir` empty files each, made on the server's disk;
/// their handles, looked up through `c`.
fn dirs_of_files(
    area: &Area,
    c: &mut Client,
    a: u32,
    root: FileHandle,
    dirs: usize,
    per_dir: usize,
) -> Vec<FileHandle> {
    (0..dirs)
        .map(|d| {
            let dir = area.export().join(format!("d{d}"));
            std::fs::create_dir(&dir).unwrap();
            for i in 0..per_dir {
                std::fs::File::create(dir.join(format!("f{i:04}"))).unwrap();
            }
            c.lookup(a, root, &format!("d{d}")).unwrap()
        })
        .collect()
}

/// The first page of `dir`'s listing with attributes (and a lease on each entry).
fn first_page(dir: FileHandle) -> RequestOp {
    RequestOp::ReadDirPlus {
        dir,
        cookie: 0,
        verifier: [0; 8],
        dircount: u32::MAX,
        maxcount: 1 << 16,
    }
}

/// Past its share of leases, each lease a reply grants ends one of the connection's older
/// ones, told by an INVALIDATE ahead of that reply: hundreds ahead of a page of a listing,
/// beyond what the page reserved. Those are bounded by the requests the connection sent, so
/// one that reads its replies late is not closed for them, however full its output.
#[test]
fn a_slow_readers_own_invalidations_ahead_of_its_replies_do_not_close_it() {
    let area = Area::new();
    let s = start(
        &area,
        &["--max-output", "16777216", "--max-leases-per-conn", "100"],
    );
    let mut x = s.connect();
    let a = x.login("alice", 1).unwrap();
    let root = x.mount(a);
    let dirs = dirs_of_files(&area, &mut x, a, root, 4, 500);
    // Each page leases a few hundred objects, each ending one of X's older leases (an
    // INVALIDATE of about 70 bytes ahead of a page of about 60 KB). X sends as many pages as the output
    // limit admits at once, and reads nothing until their replies and INVALIDATEs have filled
    // the sockets' buffers (a few MB) and the output past its limit.
    const PAGES: usize = 300;
    for k in 0..PAGES {
        x.send(a, first_page(dirs[k % dirs.len()]));
    }
    std::thread::sleep(Duration::from_secs(2));
    x.stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let (mut replies, mut told) = (0, 0);
    while replies < PAGES {
        match x.next_message() {
            Some(ServerMessage::Reply(r)) => {
                assert!(
                    matches!(r.result, Ok(ReplyBody::ReadDirPlus(_))),
                    "{:?}",
                    r.result
                );
                replies += 1;
            }
            Some(ServerMessage::Invalidate(_)) => told += 1,
            None => panic!(
                "the server closed a connection that read its replies late after {replies} of \
                 {PAGES} replies and {told} invalidations ahead of them"
            ),
        }
    }
    // Each page past the share ends one lease per entry: about 350 of them (a local export's
    // handles), over 250 in front of an NFS server (longer handles, fewer entries a page).
    assert!(
        told > PAGES * 200,
        "only {told} leases ended for room over {PAGES} pages"
    );
}

/// The other side: INVALIDATEs a connection did not cause are not buffered for it without
/// bound. One that reads nothing while another client changes what it holds leases on is
/// closed once its output passes the limit (its leases end with it), and the other client is
/// served throughout.
#[test]
fn a_connection_not_reading_invalidations_others_cause_is_closed() {
    let area = Area::new();
    std::fs::write(area.export().join("big"), vec![7u8; 1 << 20]).unwrap();
    let s = start(&area, &["--max-output", "65536"]);
    let mut x = s.connect();
    let a = x.login("alice", 1).unwrap();
    let root = x.mount(a);
    const FILES: usize = 1000;
    let dirs = dirs_of_files(&area, &mut x, a, root, FILES / 250, 250);
    // X leases every file (a page of 64 KiB holds about 350 of these entries).
    let mut files = Vec::new();
    for &d in &dirs {
        let id = x.send(a, first_page(d));
        let Ok(ReplyBody::ReadDirPlus(p)) = x.wait_reply(id) else {
            panic!("READDIRPLUS failed")
        };
        for e in p.entries.iter().filter(|e| e.name.starts_with(b"f")) {
            assert!(e.attr.is_some_and(|at| at.lease_ms > 0), "no lease");
            files.push(e.fh.expect("a handle"));
        }
    }
    assert_eq!(files.len(), FILES);
    // X stops reading: READs it asks for fill the sockets' buffers (a few MiB between them),
    // then its output up to the limit (where the server stops reading its requests).
    const READS: u64 = 512;
    let big = x.lookup(a, root, "big").unwrap();
    for k in 0..READS {
        x.send(
            a,
            RequestOp::Read {
                fh: big,
                offset: (k % 32) << 15,
                count: 1 << 15,
            },
        );
    }
    std::thread::sleep(Duration::from_secs(1));
    // Y changes each file X holds a lease on (pipelined, 250 at a time).
    let mut y = s.connect();
    let b = y.login("alice", 1).unwrap();
    for chunk in files.chunks(250) {
        let ids: Vec<u64> = chunk
            .iter()
            .map(|&fh| {
                y.send(
                    b,
                    RequestOp::Write {
                        fh,
                        offset: 0,
                        stable: StableHow::Unstable,
                        data: b"x".to_vec().into(),
                    },
                )
            })
            .collect();
        for id in ids {
            assert!(matches!(y.wait_reply(id), Ok(ReplyBody::Write { .. })));
        }
    }
    // X finds its stream ended before the last of them.
    x.stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let (mut told, mut replies) = (0, 0);
    while let Some(m) = x.next_message() {
        match m {
            ServerMessage::Invalidate(_) => told += 1,
            ServerMessage::Reply(_) => replies += 1,
        }
        assert!(
            told < FILES,
            "the server buffered all {FILES} INVALIDATEs for a connection not reading them \
             (--max-output 65536, {replies} READ replies before them)"
        );
    }
}
