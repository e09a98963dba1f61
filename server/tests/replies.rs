//! Exactly-once changes (SESSION, SEQUENCE): a change whose connection is cut after the server
//! did it, sent again by its client on a new connection with the same slot and sequence
//! number, is answered from the reply cache, not done twice; another client, or the same one
//! after the grace period, gets no one else's replies.

mod common;

use std::time::{Duration, Instant};

use common::*;
use protocol::*;

const ALICE: (&str, u8, u32, &str) = ("alice", 1, 1000, "1000");

struct Session {
    c: Client,
    a: u32,
    root: FileHandle,
}

/// A connection bound to client `id`'s record, logged in as alice: whether the record existed.
fn session(s: &Sfsd, id: u8) -> (Session, bool) {
    let mut c = s.connect();
    let resumed = match c.call(
        ANONYMOUS,
        RequestOp::Session {
            client_id: [id; 32],
            slots: 8,
        },
    ) {
        Ok(ReplyBody::Session { slots, resumed }) => {
            assert_eq!(slots, 8);
            resumed
        }
        other => panic!("SESSION answered {other:?}"),
    };
    let a = c.login("alice", 1).unwrap();
    let root = c.mount(a);
    (Session { c, a, root }, resumed)
}

fn sequenced(slot: u32, seq: u32, op: RequestOp) -> RequestOp {
    RequestOp::Sequence {
        slot,
        seq,
        op: Box::new(op),
    }
}

/// Sends `op` again until it is not JUKEBOX (the first attempt may still be running).
fn call_settled(s: &mut Session, op: RequestOp) -> Result<ReplyBody, NfsStatus> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match s.c.call(s.a, op.clone()) {
            Err(NfsStatus::Jukebox) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            r => return r,
        }
    }
}

/// Three changes that done twice would fail on what the first did, each the first of its
/// slot: REMOVE of `gone` (slot 0), guarded CREATE of `made` (slot 1), RENAME of `from` to `to`
/// (slot 2), in `root`.
fn three_changes(root: FileHandle) -> [RequestOp; 3] {
    let remove = sequenced(
        0,
        1,
        RequestOp::Remove {
            dir: root,
            name: b"gone".to_vec(),
        },
    );
    let create = sequenced(
        1,
        1,
        RequestOp::Create {
            dir: root,
            name: b"made".to_vec(),
            how: CreateHow::Guarded(SetAttr {
                mode: Some(0o644),
                ..SetAttr::default()
            }),
        },
    );
    let rename = sequenced(
        2,
        1,
        RequestOp::Rename {
            from_dir: root,
            from_name: b"from".to_vec(),
            to_dir: root,
            to_name: b"to".to_vec(),
        },
    );
    [remove, create, rename]
}

fn start(area: &Area, extra: &[&str]) -> Sfsd {
    std::os::unix::fs::chown(area.export(), Some(1000), Some(1000)).unwrap();
    area.start_for(&[ALICE], extra)
}

#[test]
fn changes_cut_off_with_their_connection_are_answered_from_the_cache_and_done_once() {
    let area = Area::new();
    let s = start(&area, &[]);
    let (mut first, resumed) = session(&s, 1);
    assert!(!resumed);
    for name in ["gone", "from", "other"] {
        std::fs::write(area.export().join(name), name).unwrap();
    }
    let root = first.root;
    let [remove, create, rename] = three_changes(root);
    // Sent, and the connection closed before any reply is read.
    for op in [&remove, &create, &rename] {
        first.c.send(first.a, op.clone());
    }
    drop(first);

    let (mut again, resumed) = session(&s, 1);
    assert!(resumed, "the record outlives its connection");
    // Done once: a second REMOVE would say NOENT, a second guarded CREATE EXIST, a second
    // RENAME NOENT. Each gets the first answer, however often it is sent.
    for _ in 0..2 {
        assert!(matches!(
            call_settled(&mut again, remove.clone()),
            Ok(ReplyBody::Remove { .. })
        ));
        let Ok(ReplyBody::Create(made)) = call_settled(&mut again, create.clone()) else {
            panic!("CREATE not answered from the cache");
        };
        assert!(made.fh.is_some());
        assert!(matches!(
            call_settled(&mut again, rename.clone()),
            Ok(ReplyBody::Rename { .. })
        ));
    }
    let export = area.export();
    assert!(!export.join("gone").exists());
    assert!(export.join("made").exists());
    assert_eq!(std::fs::read(export.join("to")).unwrap(), b"from");

    // The slot's next number is a new change, done.
    let remove_other = sequenced(
        0,
        2,
        RequestOp::Remove {
            dir: root,
            name: b"other".to_vec(),
        },
    );
    assert!(call_settled(&mut again, remove_other).is_ok());
    assert!(!export.join("other").exists());
    // A number that is neither the slot's last nor its next is refused; so is a slot the
    // session does not have.
    let skipped = sequenced(
        0,
        5,
        RequestOp::Remove {
            dir: root,
            name: b"x".to_vec(),
        },
    );
    assert_eq!(
        again.c.call(again.a, skipped),
        Err(NfsStatus::SeqMisordered)
    );
    let beyond = sequenced(
        8,
        1,
        RequestOp::Remove {
            dir: root,
            name: b"x".to_vec(),
        },
    );
    assert_eq!(again.c.call(again.a, beyond), Err(NfsStatus::BadSlot));

    // Another client (another id) has a record of its own: its slot 0, number 1, is a new
    // request, done now, and finds nothing to remove.
    let (mut other, resumed) = session(&s, 2);
    assert!(!resumed);
    assert_eq!(
        call_settled(&mut other, remove.clone()),
        Err(NfsStatus::NoEnt)
    );
}

#[test]
fn a_sequence_without_a_session_and_a_second_session_are_refused() {
    let area = Area::new();
    let s = start(&area, &[]);
    let mut c = s.connect();
    let a = c.login("alice", 1).unwrap();
    let root = c.mount(a);
    let op = sequenced(
        0,
        1,
        RequestOp::Remove {
            dir: root,
            name: b"x".to_vec(),
        },
    );
    assert_eq!(c.call(a, op), Err(NfsStatus::BadSession));
    let session = |id| RequestOp::Session {
        client_id: [id; 32],
        slots: 1,
    };
    assert!(c.call(ANONYMOUS, session(3)).is_ok());
    assert_eq!(c.call(ANONYMOUS, session(4)), Err(NfsStatus::Inval));
}

#[test]
fn a_record_is_forgotten_after_the_grace_period() {
    let area = Area::new();
    // The grace period is the attribute lease.
    let s = start(&area, &["--lease-secs", "1"]);
    let (first, _) = session(&s, 1);
    drop(first);
    std::thread::sleep(Duration::from_millis(300));
    let (back, resumed) = session(&s, 1);
    assert!(resumed, "back within the grace period");
    drop(back);
    std::thread::sleep(Duration::from_millis(1500));
    let (_late, resumed) = session(&s, 1);
    assert!(!resumed, "the record outlived the grace period");
}

/// sfsd started again on `port` with alice's users file and the same state and export, once
/// the port binds again.
fn restart_on(area: &Area, port: u16) -> Sfsd {
    let listen = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = std::panic::catch_unwind(|| start(area, &["--listen", &listen]));
        match r {
            Ok(s) => return s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => std::panic::resume_unwind(e),
        }
    }
}

/// The client's changes were done and answered, then sfsd crashed before the client had the
/// replies: on the restarted sfsd the client finds its record, and each change sent again
/// gets the reply it was given (a REMOVE done twice would say NOENT, a guarded CREATE EXIST, a
/// RENAME NOENT), while a WRITE, which may simply run again, does.
#[test]
fn changes_answered_before_sfsd_crashed_are_answered_again_after_its_restart() {
    let area = Area::new();
    let mut s = start(&area, &[]);
    let port = s.addr.port();
    let (mut first, _) = session(&s, 1);
    for name in ["gone", "from"] {
        std::fs::write(area.export().join(name), name).unwrap();
    }
    let root = first.root;
    let [remove, create, rename] = three_changes(root);
    let mut made_fh = None;
    for op in [&remove, &create, &rename] {
        let reply = call_settled(&mut first, op.clone());
        if let Ok(ReplyBody::Create(made)) = &reply {
            made_fh = made.fh;
        }
        assert!(reply.is_ok(), "{reply:?}");
    }
    let made_fh = made_fh.expect("CREATE's handle");
    let write = sequenced(
        3,
        1,
        RequestOp::Write {
            fh: made_fh,
            offset: 0,
            stable: StableHow::FileSync,
            data: b"first".to_vec().into(),
        },
    );
    assert!(call_settled(&mut first, write.clone()).is_ok());
    // The replies are lost to the client: sfsd crashes.
    s.kill();
    drop(first);
    std::fs::write(area.export().join("made"), b"other").unwrap();

    let s = restart_on(&area, port);
    let (mut again, resumed) = session(&s, 1);
    assert!(resumed, "the record outlives sfsd's crash");
    for _ in 0..2 {
        assert!(matches!(
            call_settled(&mut again, remove.clone()),
            Ok(ReplyBody::Remove { .. })
        ));
        let Ok(ReplyBody::Create(made)) = call_settled(&mut again, create.clone()) else {
            panic!("CREATE not answered from the journal");
        };
        assert_eq!(made.fh, Some(made_fh));
        assert!(matches!(
            call_settled(&mut again, rename.clone()),
            Ok(ReplyBody::Rename { .. })
        ));
    }
    // The WRITE ran again: its bytes are back over what was written since.
    assert!(matches!(
        call_settled(&mut again, write),
        Ok(ReplyBody::Write { .. })
    ));
    assert_eq!(std::fs::read(area.export().join("made")).unwrap(), b"first");
    // The slots' numbers went on: the next ones are new changes.
    let remove_to = sequenced(
        0,
        2,
        RequestOp::Remove {
            dir: root,
            name: b"to".to_vec(),
        },
    );
    assert!(call_settled(&mut again, remove_to).is_ok());
    assert!(!area.export().join("to").exists());
    // Another client's id finds nothing of this one's.
    let (_other, resumed) = session(&s, 2);
    assert!(!resumed);
}
