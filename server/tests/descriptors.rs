//! Out of descriptors, an answer is still the truth: an operation answered with an error made
//! nothing, and one that made its object answers success, without the object's handle when
//! looking it up afterwards ran out of descriptors (the client then LOOKUPs the name; an error
//! there would make the client's retry fail on the name its first try took).
//!
//! sfsd is started again and again with an open-file limit one higher each time, across the
//! edge where MKDIR, SYMLINK, MKNOD and CREATE run out.

mod common;

use std::path::Path;

use common::*;
use protocol::*;

/// One storage thread and one worker, so the descriptors a request needs are the only ones
/// opened while it runs.
const QUIET: [&str; 4] = ["--workers", "1", "--helpers", "1"];

/// alice is whoever runs the test, so it runs as root or not.
fn users(area: &Area) -> std::path::PathBuf {
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw().to_string();
    area.users(&[("alice", 1, uid, &gid)])
}

/// sfsd's arguments here: alice's users file, and [`QUIET`].
fn serve_args(users: &Path) -> Vec<&str> {
    [&["--users", users.to_str().unwrap()][..], &QUIET].concat()
}

/// Descriptors sfsd holds with one client logged in and its export mounted.
fn descriptors_in_use(area: &Area, users: &Path) -> u64 {
    let s = area.start(&serve_args(users));
    let mut c = s.connect();
    let a = c.login("alice", 1).unwrap();
    c.mount(a);
    let fds = std::fs::read_dir(format!("/proc/{}/fd", s.pid().unwrap()))
        .unwrap()
        .count();
    fds as u64
}

fn log_tail(s: &Sfsd) -> String {
    let log = s.log();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(12)..].join("\n")
}

/// What one operation answered.
#[derive(Debug, Default)]
struct Tally {
    refused: usize,
    made_with_handle: usize,
    made_without_handle: usize,
}

/// Runs `op`, which makes `name` in the export's root, and checks its answer against what
/// the export holds afterwards.
fn check(
    s: &Sfsd,
    c: &mut Client,
    a: u32,
    export: &Path,
    name: &str,
    op: RequestOp,
    tally: &mut Tally,
) {
    let exists = |n: &str| std::fs::symlink_metadata(export.join(n)).is_ok();
    let Some(answer) = c.call_within(a, op, std::time::Duration::from_secs(10)) else {
        panic!("no answer making {name}");
    };
    match answer {
        Err(status) => {
            assert!(
                !exists(name),
                "answered {status:?}, yet {name} was made: a retry would find it taken; \
                 sfsd's log ends:\n{}",
                log_tail(s)
            );
            tally.refused += 1;
        }
        Ok(
            ReplyBody::Mkdir(o)
            | ReplyBody::Symlink(o)
            | ReplyBody::Mknod(o)
            | ReplyBody::Create(o),
        ) => {
            assert!(exists(name), "answered success, yet {name} is not there");
            match o.fh {
                Some(_) => tally.made_with_handle += 1,
                None => tally.made_without_handle += 1,
            }
        }
        Ok(other) => panic!("making {name} answered {other:?}"),
    }
}

#[test]
fn operations_out_of_descriptors_answer_what_they_did() {
    if common::ganesha::enabled() {
        eprintln!("SKIPPED: in front of an NFS backend the descriptors are the backend's");
        return;
    }
    let area = Area::new();
    let users = users(&area);
    let base = descriptors_in_use(&area, &users);
    let export = area.export();
    let mut tally = Tally::default();
    for limit in base..base + 8 {
        let s = area.start_with(&serve_args(&users), |cmd| with_nofile(cmd, limit, limit));
        let mut c = s.connect();
        let a = c.login("alice", 1).unwrap();
        let Ok(ReplyBody::Mount { fh: root, .. }) = c.call(
            a,
            RequestOp::Mount {
                path: b"/".to_vec(),
            },
        ) else {
            continue;
        };
        let mode = SetAttr {
            mode: Some(0o755),
            ..SetAttr::default()
        };
        let name = |kind: &str| format!("{kind}{limit}");
        let ops = [
            (
                name("dir"),
                RequestOp::Mkdir {
                    dir: root,
                    name: name("dir").into_bytes(),
                    attr: mode,
                },
            ),
            (
                name("link"),
                RequestOp::Symlink {
                    dir: root,
                    name: name("link").into_bytes(),
                    target: b"elsewhere".to_vec(),
                    attr: SetAttr::default(),
                },
            ),
            (
                name("fifo"),
                RequestOp::Mknod {
                    dir: root,
                    name: name("fifo").into_bytes(),
                    kind: SpecialKind::Fifo,
                    attr: mode,
                },
            ),
            (
                name("file"),
                RequestOp::Create {
                    dir: root,
                    name: name("file").into_bytes(),
                    how: CreateHow::Guarded(mode),
                },
            ),
        ];
        for (n, op) in ops {
            check(&s, &mut c, a, &export, &n, op, &mut tally);
        }
    }
    eprintln!("from {base} descriptors up: {tally:?}");
    assert!(
        tally.refused > 0,
        "no limit was low enough to refuse: {tally:?}"
    );
    assert!(
        tally.made_with_handle > 0,
        "no limit was high enough: {tally:?}"
    );
    assert!(
        tally.made_without_handle > 0,
        "no limit fell between making an object and looking it up, the case under test: \
         {tally:?}"
    );
}
