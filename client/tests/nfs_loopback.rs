//! The loopback NFSv3 server (`sfs nfs`) driven by a userspace NFS client against the real
//! `sfsd`: no kernel NFS needed. Also the two-client lease test: the `sfs nfs` process is a
//! long-lived client holding attribute leases; another `sfs` process changes the file.

mod common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use common::*;
use nfs3_client::Nfs3ConnectionBuilder;
use nfs3_client::nfs3_types::nfs3;
use nfs3_client::nfs3_types::xdr_codec::Opaque;
use nfs3_client::tokio::TokioConnector;

fn name(n: &str) -> nfs3::filename3<'static> {
    n.as_bytes().to_vec().into()
}

/// A running `sfsd` exporting `export/dir/a.txt`, and `sfs nfs` in front of it logged in as
/// the export's owner.
struct Loopback {
    dir: tempfile::TempDir,
    export: std::path::PathBuf,
    home: std::path::PathBuf,
    key: std::path::PathBuf,
    server: Server,
    _nfs: Guard,
    port: u16,
}

fn start_loopback() -> Loopback {
    start_loopback_as(None)
}

/// [`start_loopback`] with `sfs nfs` run as local user `owner` (root runs the test).
fn start_loopback_as(owner: Option<u32>) -> Loopback {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let export = dir.path().join("export");
    fs::create_dir_all(&home).unwrap();
    fs::create_dir_all(export.join("dir")).unwrap();
    fs::write(export.join("dir/a.txt"), b"alpha").unwrap();
    // Anonymous clients with an export that allows anonymous writes is not a thing; use a
    // logged-in user mapped to the owner of the export.
    let key = dir.path().join("key");
    let mut c = sfs_cmd(&home);
    c.args(["keygen", "--out"]).arg(&key);
    let out = run(c, Duration::from_secs(60));
    assert!(out.status.success());
    let public = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .to_owned();
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(dir.path()).unwrap();
    let users = dir.path().join("users");
    fs::write(&users, format!("alice {public} {} {}\n", m.uid(), m.gid())).unwrap();
    let server = Server::start(
        &dir.path().join("state"),
        &export,
        0,
        &["--users", users.to_str().unwrap()],
    );

    let mut c = sfs_cmd(&home);
    if let Some(uid) = owner {
        use std::os::unix::fs::PermissionsExt;
        use std::os::unix::process::CommandExt;
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&home, Some(uid), Some(uid)).unwrap();
        std::os::unix::fs::chown(&key, Some(uid), Some(uid)).unwrap();
        c.uid(uid).gid(uid);
    }
    c.arg("--identity")
        .arg(&key)
        .args(["nfs", &server.name, "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut nfs = Guard(c.spawn().unwrap());
    let stdout = nfs.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("sfs nfs prints its port");
    let port: u16 = line
        .rsplit(':')
        .next()
        .unwrap()
        .trim()
        .parse()
        .expect(&line);

    Loopback {
        dir,
        export,
        home,
        key,
        server,
        _nfs: nfs,
        port,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nfs_walk_read_write_create_rename_remove_and_lease_invalidation() {
    let Loopback {
        dir: _dir,
        export,
        home,
        key,
        server,
        _nfs: nfs,
        port,
    } = start_loopback();
    let mut conn = tokio::time::timeout(
        Duration::from_secs(30),
        Nfs3ConnectionBuilder::new(TokioConnector, "127.0.0.1", "/")
            .connect_from_privileged_port(false)
            .mount_port(port)
            .nfs3_port(port)
            .mount(),
    )
    .await
    .expect("mount in time")
    .expect("mount");
    let root = conn.root_nfs_fh3();

    // Walk.
    let d = conn
        .lookup(&nfs3::LOOKUP3args {
            what: nfs3::diropargs3 {
                dir: root.clone(),
                name: name("dir"),
            },
        })
        .await
        .unwrap()
        .unwrap()
        .object;
    let a = conn
        .lookup(&nfs3::LOOKUP3args {
            what: nfs3::diropargs3 {
                dir: d.clone(),
                name: name("a.txt"),
            },
        })
        .await
        .unwrap()
        .unwrap()
        .object;
    let missing = conn
        .lookup(&nfs3::LOOKUP3args {
            what: nfs3::diropargs3 {
                dir: d.clone(),
                name: name("nope"),
            },
        })
        .await
        .unwrap();
    assert!(matches!(
        missing,
        nfs3::Nfs3Result::Err((nfs3::nfsstat3::NFS3ERR_NOENT, _))
    ));

    // Read.
    let r = conn
        .read(&nfs3::READ3args {
            file: a.clone(),
            offset: 0,
            count: 4096,
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.data.as_ref(), b"alpha");
    assert!(r.eof);

    // Two clients: the loopback server holds a lease on a.txt's attributes; another sfs
    // process rewrites the file; the server's INVALIDATE makes the new size visible at once
    // (the lease itself is 60 s).
    let attr = conn
        .getattr(&nfs3::GETATTR3args { object: a.clone() })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(attr.obj_attributes.size, 5);
    let newer = home.join("a.txt");
    fs::write(&newer, b"alpha-bravo").unwrap();
    let mut c = sfs_cmd(&home);
    c.arg("--identity")
        .arg(&key)
        .arg("put")
        .arg(&newer)
        .arg(format!("{}/dir/a.txt", server.name));
    let out = run(c, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut size = 0;
    for _ in 0..50 {
        size = conn
            .getattr(&nfs3::GETATTR3args { object: a.clone() })
            .await
            .unwrap()
            .unwrap()
            .obj_attributes
            .size;
        if size == 11 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(size, 11, "the other client's change is visible within 1 s");

    // Create and write.
    let created = conn
        .create(&nfs3::CREATE3args {
            where_: nfs3::diropargs3 {
                dir: d.clone(),
                name: name("new.txt"),
            },
            how: nfs3::createhow3::UNCHECKED(nfs3::sattr3::default()),
        })
        .await
        .unwrap();
    assert!(matches!(created, nfs3::Nfs3Result::Ok(_)));
    let n = conn
        .lookup(&nfs3::LOOKUP3args {
            what: nfs3::diropargs3 {
                dir: d.clone(),
                name: name("new.txt"),
            },
        })
        .await
        .unwrap()
        .unwrap()
        .object;
    let payload = data(300_000, 9);
    let w = conn
        .write(&nfs3::WRITE3args {
            file: n.clone(),
            offset: 0,
            count: payload.len() as u32,
            stable: nfs3::stable_how::FILE_SYNC,
            data: Opaque::borrowed(&payload),
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(w.count as usize, payload.len());
    assert_eq!(fs::read(export.join("dir/new.txt")).unwrap(), payload);

    // Rename.
    conn.rename(&nfs3::RENAME3args {
        from: nfs3::diropargs3 {
            dir: d.clone(),
            name: name("new.txt"),
        },
        to: nfs3::diropargs3 {
            dir: root.clone(),
            name: name("moved.txt"),
        },
    })
    .await
    .unwrap()
    .unwrap();
    assert!(!export.join("dir/new.txt").exists());
    assert_eq!(fs::read(export.join("moved.txt")).unwrap(), payload);

    // Readdir sees it.
    let list = conn
        .readdir(&nfs3::READDIR3args {
            dir: root.clone(),
            cookie: 0,
            cookieverf: nfs3::cookieverf3::default(),
            count: 64 * 1024,
        })
        .await
        .unwrap()
        .unwrap();
    let names: Vec<String> = list
        .reply
        .entries
        .0
        .iter()
        .map(|e| String::from_utf8_lossy(e.name.0.as_ref()).into_owned())
        .collect();
    assert!(names.contains(&"moved.txt".to_owned()), "{names:?}");
    assert!(names.contains(&"dir".to_owned()), "{names:?}");

    // Remove.
    conn.remove(&nfs3::REMOVE3args {
        object: nfs3::diropargs3 {
            dir: root.clone(),
            name: name("moved.txt"),
        },
    })
    .await
    .unwrap()
    .unwrap();
    assert!(!export.join("moved.txt").exists());
    drop(nfs);
    drop(server);
}

/// An RPC NULL call to program `prog` version 3 on 127.0.0.1:`port`, sent by `sh` run as
/// `uid` (root runs it directly), and how many reply bytes came back within two seconds.
fn reply_bytes_to_null_call_as(uid: u32, port: u16) -> usize {
    // Record mark (last fragment, 40 bytes), xid, CALL, RPC v2, NFS (100003) v3, proc 0,
    // AUTH_NONE credentials and verifier.
    let call = r"\200\0\0\050\0\0\0\1\0\0\0\0\0\0\0\2\0\1\206\243\0\0\0\3\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";
    let script = format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port} || exit 9; printf '{call}' >&3; timeout 2 cat <&3 | wc -c"
    );
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args([
        &format!("--reuid={uid}"),
        &format!("--regid={uid}"),
        "--clear-groups",
        "bash",
        "-c",
        &script,
    ]);
    let out = run(cmd, Duration::from_secs(20));
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{text:?} {}", String::from_utf8_lossy(&out.stderr)))
}

/// `sfs nfs` serves its owner's files with its owner's identity, so another local user's
/// process that connects to 127.0.0.1:PORT must get nothing at all: the connection is closed
/// before a reply. The owner (an ordinary user here) and root (as the kernel's NFS client)
/// are answered.
#[test]
fn other_local_users_get_nothing_from_sfs_nfs() {
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!("skipped: needs root to act as another local user");
        return;
    }
    let owner = 64_124;
    let lb = start_loopback_as(Some(owner));
    assert!(
        reply_bytes_to_null_call_as(owner, lb.port) > 0,
        "the owner is answered"
    );
    assert_eq!(
        reply_bytes_to_null_call_as(64_123, lb.port),
        0,
        "another local user's process is answered"
    );
    // Still serving its owner after the refusal, and root (the kernel's NFS client).
    assert!(reply_bytes_to_null_call_as(owner, lb.port) > 0);
    assert!(reply_bytes_to_null_call_as(0, lb.port) > 0);
    drop(lb);
}
