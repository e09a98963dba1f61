//! The command line: init, help, config file, limits.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use common::*;

fn sfsd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sfsd"))
}

#[test]
fn init_prints_the_name_and_keeps_secrets_private() {
    let area = Area::new();
    let out = sfsd()
        .args(["init", "--state"])
        .arg(area.state())
        .args(["--location", "files.example.org%4010"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let name = String::from_utf8(out.stdout).unwrap();
    let name: protocol::ServerName = name.trim().parse().unwrap();
    assert_eq!((name.host(), name.port()), ("files.example.org", 4010));
    for f in ["host.key", "handle.secret"] {
        let mode = std::fs::metadata(area.state().join(f))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{f} is private");
    }
    let dir_mode = std::fs::metadata(area.state())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o077, 0);
    // A second init refuses to overwrite the key.
    let again = sfsd()
        .args(["init", "--state"])
        .arg(area.state())
        .output()
        .unwrap();
    assert!(!again.status.success());
    let help = sfsd().arg("--help").output().unwrap();
    assert!(String::from_utf8(help.stdout).unwrap().contains("serve"));
    let help = sfsd().args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    for flag in [
        "--workers",
        "--uniprocessor",
        "--anonymous-read",
        "--users",
        "--lease-secs",
        "--stats",
        "--cpus",
    ] {
        assert!(help.contains(flag), "{flag}");
    }
}

#[test]
fn config_file_and_connection_limit() {
    let area = Area::new();
    std::fs::write(area.export().join("f"), b"x").unwrap();
    let cfg = area.path().join("sfsd.toml");
    std::fs::write(
        &cfg,
        "anonymous-read = true\nlease-secs = 7\nmax-connections = 2\n",
    )
    .unwrap();
    let s = area.start(&["--config", cfg.to_str().unwrap()]);
    let mut c1 = s.connect();
    let root = c1.mount(0);
    assert_eq!(c1.getattr(0, root).unwrap().lease_ms, 7000);
    let _c2 = s.connect();
    // The third connection is refused (closed at once).
    let mut third = std::net::TcpStream::connect(s.addr).unwrap();
    third.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut buf = Vec::new();
    let _ = std::io::Read::read_to_end(&mut third, &mut buf);
    assert!(
        buf.is_empty(),
        "no handshake for a connection over the limit"
    );
    drop(c1);
    // A slot frees when a connection closes.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let mut c3 = s.connect();
    assert_eq!(c3.mount(0), root);
}

#[test]
fn many_idle_connections_cost_little() {
    let area = Area::new();
    std::fs::write(area.export().join("f"), b"still here").unwrap();
    let s = area.start(&["--anonymous-read"]);
    let idle: Vec<Client> = (0..300).map(|_| s.connect()).collect();
    let mut c = s.connect();
    let root = c.mount(0);
    let f = c.lookup(0, root, "f").unwrap();
    assert_eq!(c.read_all(0, f).unwrap(), b"still here");
    drop(idle);
    let mut c2 = s.connect();
    assert_eq!(c2.mount(0), root);
}

#[test]
fn backend_urls_and_an_absent_backend_give_clear_errors() {
    let area = Area::new();
    let serve = |extra: &[&str]| {
        let out = sfsd()
            .args(["serve", "--state"])
            .arg(area.state())
            .args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{extra:?} started");
        String::from_utf8(out.stderr).unwrap()
    };
    assert!(serve(&["--backend", "http://nas/export"]).contains("must start with nfs://"));
    assert!(serve(&["--backend", "nfs://nas"]).contains("no export path"));
    assert!(serve(&["--backend", "nfs://nas/e?port=1"]).contains("unknown option"));
    assert!(serve(&[]).contains("--backend nfs://HOST/EXPORT is required"));
    // Nothing listens on these ports: start-up waits as long as it was told, then says which
    // step failed.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let url = format!("nfs://127.0.0.1:{port}/export?mountport={port}");
    let started = std::time::Instant::now();
    let err = serve(&["--backend", &url, "--backend-wait-secs", "1"]);
    let took = started.elapsed();
    assert!(
        err.contains("starting the NFS backend")
            && err.contains("did not answer within 1 s")
            && err.contains("MOUNT"),
        "{err}"
    );
    assert!(err.contains("not answering yet; trying again"), "{err}");
    assert!(took < std::time::Duration::from_secs(10), "{took:?}");
    let err = serve(&["--backend", &url, "--backend-wait-secs", "0"]);
    assert!(
        err.contains("MOUNT") && !err.contains("trying again"),
        "no wait: {err}"
    );
}

/// sfsd trusts only its own files (sshd's StrictModes): a state directory, a secret, a users
/// file or a config file that another user owns, that group or others may write, or that is
/// a symlink is refused at start with the file's name and the reason.
#[test]
fn files_others_could_change_are_refused_by_name() {
    let area = Area::new();
    let init = sfsd()
        .args(["init", "--state"])
        .arg(area.state())
        .output()
        .unwrap();
    assert!(init.status.success());
    let users = area.users(&[("alice", 1, 1000, "1000")]);
    // Whether sfsd started serving (it is stopped then), and what it said on stderr.
    let serve = |extra: &[&str]| {
        let mut child = sfsd()
            .args(["serve", "--state"])
            .arg(area.state())
            .arg("--export")
            .arg(area.export())
            .args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        let exited = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if std::time::Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        if exited.is_none() {
            let _ = child.kill();
        }
        let out = child.wait_with_output().unwrap();
        (
            exited.is_none(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let chmod = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
    };
    let users_s = users.to_str().unwrap().to_owned();
    // A users file anyone in its group may write lets them map their key to root.
    chmod(&users, 0o664);
    let (ok, err) = serve(&["--users", &users_s]);
    assert!(
        !ok && err.contains("users") && err.contains("writable by group or others"),
        "{err}"
    );
    chmod(&users, 0o644);
    // A secret readable by others.
    let key = area.state().join("host.key");
    chmod(&key, 0o640);
    let (ok, err) = serve(&[]);
    assert!(
        !ok && err.contains("host.key") && err.contains("readable by others"),
        "{err}"
    );
    chmod(&key, 0o600);
    // A state directory others may write (they could swap the key).
    chmod(&area.state(), 0o777);
    let (ok, err) = serve(&[]);
    assert!(!ok && err.contains("writable by group or others"), "{err}");
    chmod(&area.state(), 0o700);
    // A secret replaced by a symlink.
    let moved = area.path().join("elsewhere.secret");
    std::fs::rename(area.state().join("handle.secret"), &moved).unwrap();
    std::os::unix::fs::symlink(&moved, area.state().join("handle.secret")).unwrap();
    let (ok, err) = serve(&[]);
    assert!(
        !ok && err.contains("handle.secret") && err.contains("symbolic link"),
        "{err}"
    );
    std::fs::remove_file(area.state().join("handle.secret")).unwrap();
    std::fs::rename(&moved, area.state().join("handle.secret")).unwrap();
    // Owned by another user (as root, the test can make it so).
    if rustix::process::geteuid().is_root() {
        std::os::unix::fs::chown(&users, Some(4321), None).unwrap();
        let (ok, err) = serve(&["--users", &users_s]);
        assert!(!ok && err.contains("belongs to uid 4321"), "{err}");
        std::os::unix::fs::chown(&users, Some(0), None).unwrap();
    }
    let (ok, err) = serve(&["--users", &users_s]);
    assert!(ok, "the same files, put right, are served: {err}");
}
