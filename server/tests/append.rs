//! APPEND against a real sfsd: the data goes at the end as the server finds it, the reply says
//! where, lease holders are told, and concurrent appenders on several connections never
//! overlap. Runs against both backends (with `SFSD_TEST_BACKEND=nfs`, in front of
//! NFS-Ganesha, where sfsd serialises the APPENDs of each object itself).

mod common;

use std::time::Duration;

use common::*;
use protocol::*;

const USERS: &[(&str, u8, u32, &str)] = &[("alice", 1, 0, "0")];

fn start(area: &Area) -> Sfsd {
    let users = area.users(USERS);
    area.start(&["--users", users.to_str().unwrap(), "--lease-secs", "30"])
}

/// APPEND's reply: (offset, count, committed, attributes).
fn append(
    c: &mut Client,
    a: u32,
    fh: FileHandle,
    stable: StableHow,
    data: &[u8],
) -> Result<(u64, u32, StableHow, Option<Attr>), NfsStatus> {
    match c.call(a, append_op(fh, stable, data))? {
        ReplyBody::Append {
            offset,
            count,
            committed,
            attr,
            ..
        } => Ok((offset, count, committed, attr)),
        o => panic!("{o:?}"),
    }
}

fn append_op(fh: FileHandle, stable: StableHow, data: &[u8]) -> RequestOp {
    RequestOp::Append {
        fh,
        stable,
        data: data.to_vec().into(),
    }
}

#[test]
fn appends_go_at_the_end_and_lease_holders_are_told() {
    let area = Area::new();
    std::fs::write(area.export().join("f"), b"12345").unwrap();
    std::fs::create_dir(area.export().join("d")).unwrap();
    let s = start(&area);
    let mut c1 = s.connect();
    let mut c2 = s.connect();
    let a1 = c1.login("alice", 1).unwrap();
    let a2 = c2.login("alice", 1).unwrap();
    let root = c1.mount(a1);
    let f = c1.lookup(a1, root, "f").unwrap();
    // c2 holds a lease on f.
    assert_eq!(c2.getattr(a2, f).unwrap().size, 5);

    let (offset, count, committed, attr) =
        append(&mut c1, a1, f, StableHow::Unstable, b"abc").unwrap();
    assert_eq!((offset, count), (5, 3));
    assert_eq!(committed, StableHow::Unstable);
    assert_eq!(attr.unwrap().size, 8);
    match c2.next_message_timeout(Duration::from_secs(5)) {
        Some(ServerMessage::Invalidate(i)) => assert_eq!(i.fh, f),
        o => panic!("no INVALIDATE for the lease holder: {o:?}"),
    }
    // c2's WRITE at the end it believed (5) would overwrite; its APPEND goes after c1's.
    let (offset, _, committed, _) = append(&mut c2, a2, f, StableHow::FileSync, b"XY").unwrap();
    assert_eq!(offset, 8);
    assert_eq!(committed, StableHow::FileSync);
    assert_eq!(c1.read_all(a1, f).unwrap(), b"12345abcXY");
    // An empty append changes nothing and says where the end is.
    assert_eq!(
        append(&mut c1, a1, f, StableHow::Unstable, b"").unwrap().0,
        10
    );
    let d = c1.lookup(a1, root, "d").unwrap();
    assert_eq!(
        append(&mut c1, a1, d, StableHow::Unstable, b"x"),
        Err(NfsStatus::IsDir)
    );
    // Not for anonymous users.
    assert_eq!(
        c1.call(0, append_op(f, StableHow::Unstable, b"x")),
        Err(NfsStatus::Acces)
    );
}

#[test]
fn concurrent_appends_on_four_connections_never_overlap() {
    const CONNS: usize = 4;
    const BATCHES: usize = 5;
    const PIPELINED: usize = 40;
    let area = Area::new();
    std::fs::write(area.export().join("f"), b"").unwrap();
    let s = start(&area);
    let backend = if s.backend.is_some() { "NFS" } else { "local" };
    eprintln!("{backend} backend");
    let threads: Vec<_> = (0..CONNS)
        .map(|t| {
            let mut c = s.connect();
            std::thread::spawn(move || {
                let a = c.login("alice", 1).unwrap();
                let root = c.mount(a);
                let f = c.lookup(a, root, "f").unwrap();
                let mut placed = Vec::new();
                for b in 0..BATCHES {
                    // Many in flight at once, so they queue behind each other on the server.
                    let sent: Vec<(u64, String)> = (0..PIPELINED)
                        .map(|i| {
                            let rec = format!("{t}:{b}:{i}:{}\n", "x".repeat((b * 7 + i) % 41));
                            let op = append_op(f, StableHow::Unstable, rec.as_bytes());
                            (c.send(a, op), rec)
                        })
                        .collect();
                    for (id, rec) in sent {
                        match c.wait_reply(id) {
                            Ok(ReplyBody::Append { offset, count, .. }) => {
                                assert_eq!(count as usize, rec.len());
                                placed.push((offset, rec));
                            }
                            o => panic!("{o:?}"),
                        }
                    }
                }
                placed
            })
        })
        .collect();
    let mut placed: Vec<(u64, String)> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    placed.sort();
    let content = std::fs::read(area.export().join("f")).unwrap();
    let mut end = 0u64;
    for (offset, rec) in &placed {
        assert_eq!(*offset, end, "gap or overlap before {rec:?}");
        let at = *offset as usize;
        assert_eq!(&content[at..at + rec.len()], rec.as_bytes());
        end += rec.len() as u64;
    }
    assert_eq!(end, content.len() as u64);
    assert_eq!(placed.len(), CONNS * BATCHES * PIPELINED);
}
