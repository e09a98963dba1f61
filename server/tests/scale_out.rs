//! The whole scale-out stack (`scripts/scale-out.sh`): a GlusterFS volume replicated over
//! three bricks, NFS-Ganesha with the Gluster FSAL, two sfsd instances sharing one state
//! directory and joined by the peer channel. Checks a round trip through both instances, the
//! cross-instance INVALIDATE delay over the real backend, a brick lost during a write, and an
//! instance lost during a read (the same handle carries on at the other).
//!
//! Intrusive (it runs glusterd as root, writes /etc/hosts and Gluster's fixed paths, all
//! removed at the end, on failure too), so it runs only as root with `SFS_SCALE_OUT_TEST=1`,
//! and skips, saying so, where the packages (`glusterfs-server nfs-ganesha-gluster rpcbind`)
//! are missing or another glusterd runs. `.ci/run` installs the packages where it can and runs
//! it (about 30 s); the longer measurements are `scripts/scale-out-measure.sh` and
//! `scripts/invalidate-delay.sh`. Run it with
//! `SFS_SCALE_OUT_TEST=1 cargo test -p sfsd --test scale_out -- --nocapture`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::stack::{LOCK, lock, retry, sfs_client, unavailable};
use common::*;
use protocol::*;

const VOLUME: &str = "sfstest";
const NAME: &str = "sfs-scale-test";
/// The stack's directory: fixed, so a run killed before its cleanup (SIGKILL, a CI timeout)
/// is cleaned up by the next one, under [`LOCK`].
const SCALE_DIR: &str = "/var/tmp/sfs-scale-out-test";

/// Whether a glusterd runs (not ours: ours are gone once a leftover stack is down).
fn glusterd_running() -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim() == "glusterd").then_some(pid)
    })
}

struct Stack {
    /// Files of the test's own (users, the client's identity, a hosts file).
    dir: tempfile::TempDir,
    _lock: std::fs::File,
}

impl Stack {
    fn script(&self, verb: &str) -> std::process::Output {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        Command::new("bash")
            .arg(repo.join("scripts/scale-out.sh"))
            .arg(verb)
            .env("SCALE_DIR", SCALE_DIR)
            .env("VOLUME", VOLUME)
            .env("NAME", NAME)
            .env("GLUSTER_HOST", "sfs-gluster-test")
            .env("SFSD_PORT", "4104")
            .env("PEER_PORT", "4105")
            .env("NFS_PORT", "20590")
            .env("MNT_PORT", "20591")
            .env("LEASE_SECS", "30")
            .env("SFSD", env!("CARGO_BIN_EXE_sfsd"))
            .env("USERS", self.dir.path().join("users"))
            .output()
            .unwrap()
    }

    fn scale_dir(&self) -> PathBuf {
        PathBuf::from(SCALE_DIR)
    }

    /// (name, address) of instance `i` (1-based), from its log.
    fn instance(&self, i: usize) -> (ServerName, std::net::SocketAddr) {
        let log =
            std::fs::read_to_string(self.scale_dir().join(format!("logs/sfsd-{i}.log"))).unwrap();
        let line = log
            .lines()
            .find(|l| l.starts_with("sfsd: serving "))
            .unwrap();
        let mut w = line.split_whitespace().skip(2);
        let name = w.next().unwrap().parse().unwrap();
        let addr = w.nth(1).unwrap().parse().unwrap();
        (name, addr)
    }

    fn connect(&self, i: usize) -> (Client, u32, FileHandle) {
        let (name, addr) = self.instance(i);
        let mut c = Client::connect(&name, addr);
        let a = c.login("alice", 1).unwrap();
        let root = c.mount(a);
        (c, a, root)
    }

    fn pid(&self, what: &str) -> u32 {
        std::fs::read_to_string(self.scale_dir().join(format!("run/{what}.pid")))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        let out = self.script("down");
        if !out.status.success() {
            eprintln!("scale-out down: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
}

fn gluster(args: &[&str]) -> String {
    let out = Command::new("gluster")
        .arg("--mode=script")
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Pid of one brick process of the volume (from `gluster volume status`).
fn a_brick_pid() -> u32 {
    let status = gluster(&["volume", "status", VOLUME, "detail"]);
    status
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix("Pid")?;
            rest.trim().trim_start_matches(':').trim().parse().ok()
        })
        .unwrap_or_else(|| panic!("no brick pid in {status}"))
}

#[test]
fn scale_out_stack() {
    if std::env::var("SFS_SCALE_OUT_TEST").as_deref() != Ok("1") {
        eprintln!(
            "skipped: the Gluster + Ganesha + two sfsd stack runs only with SFS_SCALE_OUT_TEST=1 \
             (as root: it runs glusterd and edits /etc/hosts; .ci/run sets it)"
        );
        return;
    }
    if let Some(why) = unavailable(&[]) {
        eprintln!("skipped: {why}");
        return;
    }
    let Some(lock) = lock() else {
        eprintln!("skipped: another run of this test held {LOCK} for five minutes");
        return;
    };
    let stack = Stack {
        dir: tempfile::tempdir_in("/var/tmp").unwrap(),
        _lock: lock,
    };
    if Path::new(SCALE_DIR).join("run/up").exists() {
        eprintln!("{SCALE_DIR}: left by a run that did not end; taking it down first");
        stack.script("down");
    }
    if let Some(pid) = glusterd_running() {
        eprintln!(
            "skipped: a glusterd (pid {pid}) not started by this test runs here; \
             the stack needs its own"
        );
        return;
    }
    let k = UserKeypair::from_seed([1; 32]).public_key();
    let mut users = format!("alice {k} 1001 1001\n");
    // The real client too, where it is built (`cargo build -p sfs`): it must find the
    // surviving instance behind the one name.
    let sfs = sfs_client();
    let identity = stack.dir.path().join("identity");
    if let Some(sfs) = &sfs {
        let out = Command::new(sfs)
            .args(["keygen", "--out"])
            .arg(&identity)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let key = text.lines().last().unwrap_or_default().trim().to_string();
        users.push_str(&format!("bob {key} 1001 1001\n"));
    } else {
        eprintln!("the sfs client is not built: its part is skipped");
    }
    std::fs::write(stack.dir.path().join("users"), users).unwrap();
    let started = Instant::now();
    let out = stack.script("up");
    assert!(
        out.status.success(),
        "up failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("stack up in {:?}", started.elapsed());
    assert_eq!(stack.instance(1).0, stack.instance(2).0, "one name");

    // A round trip: written through instance 1, read through instance 2.
    let (mut c1, a1, root) = stack.connect(1);
    let (mut c2, a2, root2) = stack.connect(2);
    assert_eq!(root, root2);
    let f = retry(|| c1.create(a1, root, "f", 0o644));
    let data: Vec<u8> = (0..4 << 20).map(|i: u32| (i % 251) as u8).collect();
    for (i, chunk) in data.chunks(256 << 10).enumerate() {
        retry(|| c1.write(a1, f, (i * (256 << 10)) as u64, chunk));
    }
    assert_eq!(retry(|| c2.read_all(a2, f)), data, "round trip");

    // Cross-instance INVALIDATE over the real backend.
    let mut delays = Vec::new();
    for round in 0..5u8 {
        // Nothing earlier pending (the first datagram instance 2 heard from instance 1 showed
        // a gap, the heartbeats sent before it listened, and invalidated everything).
        while c2.next_message_timeout(Duration::from_millis(50)).is_some() {}
        c2.getattr(a2, f).unwrap();
        c1.write(a1, f, 0, &[round]).unwrap();
        let t = Instant::now();
        match c2.next_message_timeout(Duration::from_secs(5)) {
            Some(ServerMessage::Invalidate(i)) => assert_eq!(i.fh, f),
            o => panic!("no INVALIDATE at instance 2: {o:?}"),
        }
        delays.push(t.elapsed());
    }
    eprintln!("cross-instance INVALIDATE after the writer's reply: {delays:?}");
    assert!(delays.iter().all(|d| *d < Duration::from_secs(1)));

    // A brick lost during a write: every write succeeds (two of three bricks remain), the
    // brick comes back with `start force`, and the data reads back whole.
    let g = retry(|| c1.create(a1, root, "g", 0o644));
    let big: Vec<u8> = (0..16 << 20).map(|i: u32| (i % 239) as u8).collect();
    let mut killed = None;
    for (i, chunk) in big.chunks(256 << 10).enumerate() {
        if i == 8 {
            let pid = a_brick_pid();
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            killed = Some(pid);
        }
        retry(|| c1.write(a1, g, (i * (256 << 10)) as u64, chunk));
    }
    eprintln!("brick {killed:?} killed during a 16 MiB write; all writes answered");
    assert_eq!(retry(|| c2.read_all(a2, g)), big, "after a brick was lost");
    // The brick comes back with `start force` and is healed: every brick directory then holds
    // the whole file.
    gluster(&["volume", "start", VOLUME, "force"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    let bricks: Vec<PathBuf> = (1..=3)
        .map(|i| stack.scale_dir().join(format!("bricks/b{i}/g")))
        .collect();
    loop {
        gluster(&["volume", "heal", VOLUME]);
        let healed = bricks
            .iter()
            .all(|b| std::fs::read(b).is_ok_and(|d| d == big));
        if healed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not healed after 120 s: {}",
            gluster(&["volume", "heal", VOLUME, "info"])
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    eprintln!("healed: all three bricks hold the file");

    // An instance lost during a read: the same handle carries on at the other.
    let (mut c1b, a1b, _) = stack.connect(1);
    let half = big.len() / 2;
    let mut got = Vec::new();
    while got.len() < half {
        let (d, _) = retry(|| c1b.read(a1b, g, got.len() as u64, 256 << 10));
        got.extend_from_slice(&d);
    }
    let pid = stack.pid("sfsd-1");
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
    drop(c1b);
    loop {
        let (d, eof) = retry(|| c2.read(a2, g, got.len() as u64, 256 << 10));
        got.extend_from_slice(&d);
        if eof {
            break;
        }
    }
    assert_eq!(got, big, "read continued on instance 2");

    // With instance 1 gone, `sfs get` of the one name (resolving to both addresses, the dead
    // one first) reaches instance 2.
    if let Some(sfs) = &sfs {
        let (name, _) = stack.instance(2);
        let hosts = stack.dir.path().join("hosts");
        std::fs::write(
            &hosts,
            format!("127.0.0.1 localhost\n127.0.0.2 {NAME}\n127.0.0.3 {NAME}\n"),
        )
        .unwrap();
        let dest = stack.dir.path().join("g.out");
        let out = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c"])
            .arg(format!(
                "mount --bind {} /etc/hosts && exec \"$@\"",
                hosts.display()
            ))
            .arg("sh")
            .arg(sfs)
            .args(["--identity"])
            .arg(&identity)
            .args(["--user", "bob", "--timeout", "5", "get"])
            .arg(format!("{name}/g"))
            .arg(&dest)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "sfs get with instance 1 down: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(std::fs::read(&dest).unwrap(), big);
        eprintln!("sfs get of the one name reached the surviving instance");
    }
}
