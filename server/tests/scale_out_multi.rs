//! The scale-out stack on three "machines" (`scripts/scale-out.sh up --role ...`): three
//! network namespaces joined by a bridge (10.88.0.1-3; the root namespace is 10.88.0.254),
//! each with Gluster's fixed paths (`/var/lib/glusterd`, `/run`, `/var/log/glusterfs`) and
//! `/etc/hosts` bind-mounted from a directory of its own, and its brick on a file system of its
//! own (a tmpfs). The brick role on all three (the first probes the others and creates the
//! volume, replicated over one brick per machine, without `force`), the gateway (Ganesha) on
//! the first, sfsd on the second and third from one state directory made by `state-init`.
//!
//! Checks: the volume is `1 x 3` over the three hosts; each machine's `status --role` shows its
//! daemons running; no daemon listens on a wildcard address; Ganesha refuses the MOUNT of an
//! sfsd not among the sfsd hosts (one in the root namespace);
//! `sfs put` through each instance and `sfs get` through the other (the one name resolved to
//! one instance each time) give back the data, which every machine's brick holds; a write
//! through one instance reaches the other's lease holder as an INVALIDATE (the peer channel);
//! and after `down --role ...` on each machine nothing is left: no process in the namespaces,
//! nothing under the machines' Gluster paths or bricks, no `$SCALE_DIR`, `/etc/hosts` as it
//! was. Then the namespaces, the bridge and the tmpfs go (on failure too, by a guard).
//!
//! Gated like `scale_out.rs` (root, `SFS_SCALE_OUT_TEST=1`, the Gluster and Ganesha packages,
//! and `ip`), under the same lock. Needs the `sfs` client built next to `sfsd` (`cargo build
//! -p sfs`; `cargo test --workspace` builds it), else it skips. Run it with
//! `SFS_SCALE_OUT_TEST=1 cargo test -p sfsd --test scale_out_multi -- --nocapture`.

mod common;

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::stack::{LOCK, lock, retry, sfs_client, unavailable};
use common::*;
use protocol::*;

/// Everything of the test's: fixed, so a run killed before its cleanup is cleaned up by the
/// next one, under [`LOCK`].
const BASE: &str = "/var/tmp/sfs-scale-multi-test";
const BRIDGE: &str = "sfsmtbr";
const VOLUME: &str = "sfsmulti";
const NAME: &str = "sfs-multi-test";
const SFSD_PORT: u16 = 4204;
const NFS_PORT: &str = "20690";
const MNT_PORT: &str = "20691";
/// Machine 1 (10.88.0.1) is brick and gateway; 2 and 3 brick and sfsd.
const MACHINES: [usize; 3] = [1, 2, 3];

fn netns(m: usize) -> String {
    format!("sfsmt{m}")
}

fn ip(m: usize) -> String {
    format!("10.88.0.{m}")
}

fn machine_dir(m: usize) -> PathBuf {
    Path::new(BASE).join(format!("m{m}"))
}

/// Where machine `m`'s brick is (a directory on its own tmpfs, as Gluster wants: not the root
/// file system, not the mount point itself).
fn brick(m: usize) -> PathBuf {
    machine_dir(m).join("disk/brick")
}

fn scale_dir(m: usize) -> PathBuf {
    machine_dir(m).join("scale")
}

fn script_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/scale-out.sh")
}

/// Runs a command, bounded by `timeout`, and returns its output.
fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().unwrap()
}

fn must(what: &str, out: Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sh(script: &str) -> Output {
    run(Command::new("sh").args(["-c", script]))
}

/// `argv` on machine `m`: in its network namespace, in a mount namespace of its own (made by
/// `ip netns exec`) where Gluster's fixed paths and /etc/hosts are the machine's.
fn on(m: usize, argv: &[&str]) -> Command {
    let d = machine_dir(m);
    let binds = format!(
        "mount --bind {d}/lib /var/lib/glusterd && mount --bind {d}/run /run && \
         mount --bind {d}/log /var/log/glusterfs && mount --bind {d}/hosts /etc/hosts && \
         exec \"$@\"",
        d = d.display()
    );
    let mut c = Command::new("timeout");
    c.args([
        "-k",
        "5",
        "150",
        "ip",
        "netns",
        "exec",
        &netns(m),
        "sh",
        "-c",
    ])
    .arg(binds)
    .arg("sh")
    .args(argv);
    c
}

/// `scale-out.sh ARGS` on machine `m` with the settings every machine shares.
fn script(m: usize, args: &[&str], env: &[(&str, String)]) -> Output {
    let script = script_path();
    let mut argv = vec!["bash", script.to_str().unwrap()];
    argv.extend_from_slice(args);
    let mut c = on(m, &argv);
    let bricks: Vec<String> = MACHINES
        .iter()
        .map(|&b| format!("{}:{}", ip(b), brick(b).display()))
        .collect();
    c.env("SCALE_DIR", scale_dir(m))
        .env("VOLUME", VOLUME)
        .env("NAME", NAME)
        .env("SFSD_PORT", SFSD_PORT.to_string())
        .env("PEER_PORT", (SFSD_PORT + 1).to_string())
        .env("NFS_PORT", NFS_PORT)
        .env("MNT_PORT", MNT_PORT)
        .env("BRICK_HOSTS", bricks.join(" "))
        .env("SFSD_ADDRS", format!("{} {}", ip(2), ip(3)))
        .env("NFS_ADDR", ip(1))
        .env("LEASE_SECS", "30")
        .env("PEER_WAIT", "60")
        .env("SFSD", env!("CARGO_BIN_EXE_sfsd"))
        .env("USERS", Path::new(BASE).join("users"));
    for (k, v) in env {
        c.env(k, v);
    }
    run(&mut c)
}

/// The inode of a network namespace, to find the processes in it.
fn netns_inode(m: usize) -> Option<u64> {
    std::fs::metadata(format!("/run/netns/{}", netns(m)))
        .ok()
        .map(|md| md.ino())
}

/// (pid, command) of every process in our namespaces.
fn processes_in_namespaces() -> Vec<(u32, String)> {
    let inodes: Vec<u64> = MACHINES.iter().filter_map(|&m| netns_inode(m)).collect();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let ino = std::fs::metadata(e.path().join("ns/net")).ok()?.ino();
            inodes.contains(&ino).then(|| {
                let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
                (pid, comm.trim().to_string())
            })
        })
        .collect()
}

/// Files left under a directory (recursively), but for `run/mount` (mount(8)'s own table,
/// written by the bind mounts of [`on`], not by the stack).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut left = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return left;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.ends_with("run/mount") {
            continue;
        }
        if p.is_dir() && !p.is_symlink() {
            let under = files_under(&p);
            if under.is_empty() && !p.ends_with("run/gluster") {
                left.push(p);
            }
            left.extend(under);
        } else {
            left.push(p);
        }
    }
    left
}

/// Brings the three machines up (namespaces, bridge, private paths, tmpfs bricks) and tears
/// them down, on failure too.
struct Machines {
    hosts_before: String,
    _lock: std::fs::File,
}

impl Machines {
    fn create(lock: std::fs::File) -> Machines {
        let hosts_before = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
        let machines = Machines {
            hosts_before,
            _lock: lock,
        };
        let mut setup = format!(
            "set -e; ip link add {BRIDGE} type bridge; ip addr add 10.88.0.254/24 dev {BRIDGE}; \
             ip link set {BRIDGE} up\n"
        );
        for m in MACHINES {
            let (ns, d) = (netns(m), machine_dir(m));
            setup += &format!(
                "ip netns add {ns}\n\
                 ip link add {ns}h type veth peer name eth0 netns {ns}\n\
                 ip link set {ns}h master {BRIDGE} up\n\
                 ip -n {ns} addr add {ip}/24 dev eth0\n\
                 ip -n {ns} link set eth0 up\n\
                 ip -n {ns} link set lo up\n\
                 mkdir -p {d}/lib {d}/run/gluster {d}/log {d}/disk\n\
                 mount -t tmpfs -o size=256m,mode=755 sfs-multi-test {d}/disk\n",
                ip = ip(m),
                d = d.display()
            );
            let mut hosts = String::from("127.0.0.1 localhost\n");
            for n in MACHINES {
                hosts += &format!("{} m{n}\n", ip(n));
            }
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("hosts"), hosts).unwrap();
        }
        must("the namespaces and bridge", sh(&setup));
        machines
    }

    /// Every role down on every machine, then anything still running in the namespaces
    /// killed (only ours run there), the namespaces, the bridge, the tmpfs and [`BASE`] gone.
    fn teardown() {
        for m in MACHINES {
            if netns_inode(m).is_some() && scale_dir(m).join("run").exists() {
                let out = script(m, &["down", "--role", "sfsd,gateway,brick"], &[]);
                if !out.status.success() {
                    eprintln!(
                        "m{m}: down: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                }
            }
        }
        for (pid, comm) in processes_in_namespaces() {
            eprintln!("killing {comm} (pid {pid}), left in a test namespace");
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(pid as i32).unwrap(),
                rustix::process::Signal::KILL,
            );
        }
        // Each machine's veth deleted by its host end first: that removes both ends at once,
        // where the namespace's deletion frees them only once the kernel has torn the
        // namespace down, after `ip netns del` returns (seen: links left at the check below).
        let mut cleanup = String::new();
        for m in MACHINES {
            cleanup += &format!(
                "ip link del {ns}h 2>/dev/null; ip netns del {ns} 2>/dev/null; \
                 umount {}/disk 2>/dev/null;\n",
                machine_dir(m).display(),
                ns = netns(m),
            );
        }
        cleanup += &format!("ip link del {BRIDGE} 2>/dev/null; rm -rf {BASE}\n");
        sh(&cleanup);
    }
}

impl Drop for Machines {
    fn drop(&mut self) {
        Machines::teardown();
        let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
        if hosts != self.hosts_before && !std::thread::panicking() {
            panic!("/etc/hosts changed:\n{hosts}");
        }
    }
}

/// The `sfs` client in the root namespace, with /etc/hosts (its own, in a mount namespace of
/// its own) resolving the one name to machine `m`'s instance only.
fn sfs(m: usize, args: &[&str]) -> Output {
    let hosts = Path::new(BASE).join(format!("client-hosts-{m}"));
    std::fs::write(&hosts, format!("127.0.0.1 localhost\n{} {NAME}\n", ip(m))).unwrap();
    let mut c = Command::new("timeout");
    c.args([
        "60",
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
    ])
    .arg(format!(
        "mount --bind {} /etc/hosts && exec \"$@\"",
        hosts.display()
    ))
    .arg("sh")
    .arg(sfs_client().unwrap())
    .arg("--identity")
    .arg(Path::new(BASE).join("identity"))
    .args(["--user", "bob", "--timeout", "10"])
    .args(args);
    run(&mut c)
}

/// (name, address) an instance prints once serving.
fn instance(m: usize) -> (ServerName, std::net::SocketAddr) {
    let log = std::fs::read_to_string(scale_dir(m).join("logs/sfsd-1.log")).unwrap();
    let line = log
        .lines()
        .find(|l| l.starts_with("sfsd: serving "))
        .unwrap();
    let mut w = line.split_whitespace().skip(2);
    let name = w.next().unwrap().parse().unwrap();
    let addr = w.nth(1).unwrap().parse().unwrap();
    (name, addr)
}

#[test]
fn scale_out_on_three_machines() {
    if std::env::var("SFS_SCALE_OUT_TEST").as_deref() != Ok("1") {
        eprintln!(
            "skipped: the three-namespace scale-out stack runs only with SFS_SCALE_OUT_TEST=1 \
             (as root: it makes network namespaces and a bridge and runs glusterd; .ci/run sets it)"
        );
        return;
    }
    if let Some(why) = unavailable(&["ip", "ss", "timeout"]) {
        eprintln!("skipped: {why}");
        return;
    }
    if sfs_client().is_none() {
        eprintln!("skipped: the sfs client is not built next to sfsd (cargo build -p sfs)");
        return;
    }
    let Some(lock) = lock() else {
        eprintln!("skipped: another scale-out test held {LOCK} for five minutes");
        return;
    };
    if Path::new(BASE).exists() || netns_inode(1).is_some() {
        eprintln!("{BASE}: left by a run that did not end; taking it down first");
        Machines::teardown();
    }
    let started = Instant::now();
    let machines = Machines::create(lock);

    // Users: alice (the protocol client, seed 1) and bob (the sfs client's new identity).
    let identity = Path::new(BASE).join("identity");
    let out = run(Command::new(sfs_client().unwrap())
        .args(["keygen", "--out"])
        .arg(&identity));
    let keygen = must("sfs keygen", out);
    let bob = keygen.lines().last().unwrap_or_default().trim().to_string();
    let alice = UserKeypair::from_seed([1; 32]).public_key();
    std::fs::write(
        Path::new(BASE).join("users"),
        format!("alice {alice} 1001 1001\nbob {bob} 1001 1001\n"),
    )
    .unwrap();

    // The bricks: the others first, then the first, which probes them and makes the volume.
    for m in [2, 3, 1] {
        must(
            &format!("m{m}: up --role brick"),
            script(m, &["up", "--role", "brick"], &[]),
        );
    }
    let bricks_up = started.elapsed();
    let info = String::from_utf8_lossy(
        &on(1, &["gluster", "volume", "info", VOLUME])
            .output()
            .unwrap()
            .stdout,
    )
    .into_owned();
    assert!(
        info.contains("Number of Bricks: 1 x 3 = 3"),
        "not replica 3:\n{info}"
    );
    for m in MACHINES {
        let b = format!("{}:{}", ip(m), brick(m).display());
        assert!(info.contains(&b), "no brick {b}:\n{info}");
    }
    must(
        "m1: up --role gateway",
        script(1, &["up", "--role", "gateway"], &[]),
    );

    // One state directory, copied to each sfsd machine (here: to its directory).
    let state = Path::new(BASE).join("state");
    let mut init = Command::new("bash");
    init.arg(script_path())
        .args(["state-init"])
        .arg(&state)
        .env("NAME", NAME)
        .env("SFSD_PORT", SFSD_PORT.to_string())
        .env("SFSD", env!("CARGO_BIN_EXE_sfsd"));
    let name = must("state-init", run(&mut init));
    for m in [2, 3] {
        let copy = machine_dir(m).join("state");
        must(
            "copying the state directory",
            run(Command::new("cp").arg("-a").arg(&state).arg(&copy)),
        );
        let env = [("STATE", copy.display().to_string())];
        must(
            &format!("m{m}: up --role sfsd"),
            script(m, &["up", "--role", "sfsd"], &env),
        );
    }
    let up = started.elapsed();
    eprintln!("three machines up in {up:?} (bricks and volume after {bricks_up:?})");
    assert_eq!(instance(2).0, instance(3).0, "one name");
    assert_eq!(
        name.trim(),
        instance(2).0.to_string(),
        "the name state-init printed"
    );
    assert_eq!(instance(2).1.to_string(), format!("{}:{SFSD_PORT}", ip(2)));
    assert_eq!(instance(3).1.to_string(), format!("{}:{SFSD_PORT}", ip(3)));

    // Each machine's status names what runs there.
    for (m, roles, running) in [
        (1, "brick,gateway", &["glusterd", "ganesha"][..]),
        (2, "brick,sfsd", &["glusterd", "sfsd-1"][..]),
        (3, "brick,sfsd", &["glusterd", "sfsd-1"][..]),
    ] {
        let status = must("status", script(m, &["status", "--role", roles], &[]));
        for what in running {
            assert!(
                status.contains(&format!("{what}: running")),
                "m{m}: {what} not running:\n{status}"
            );
        }
        assert!(!status.contains("NOT running"), "m{m}:\n{status}");
    }

    // Every daemon listens on its machine's address, none on a wildcard one.
    for m in MACHINES {
        let ss = String::from_utf8_lossy(&on(m, &["ss", "-ltnuH"]).output().unwrap().stdout)
            .into_owned();
        for line in ss.lines() {
            let local = line.split_whitespace().nth(4).unwrap_or_default();
            assert!(
                local.starts_with(&format!("{}:", ip(m)))
                    || local.starts_with(&format!("[::ffff:{}]:", ip(m))),
                "m{m}: a socket not bound to {}: {line}",
                ip(m)
            );
        }
    }

    // Ganesha's export admits the sfsd hosts only: an sfsd in the root namespace
    // (10.88.0.254) is refused its MOUNT.
    let backend = format!("nfs://{}:{NFS_PORT}/{VOLUME}?mountport={MNT_PORT}", ip(1));
    let out = run(Command::new("timeout")
        .args(["30", env!("CARGO_BIN_EXE_sfsd"), "serve", "--state"])
        .arg(&state)
        .args(["--backend", &backend, "--backend-wait-secs", "5"])
        .args(["--listen", "127.0.0.1:0"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("refused"),
        "an sfsd not among SFSD_HOSTS was not refused by Ganesha ({}):\n{stderr}",
        out.status
    );

    // sfs put through each instance, get through the other: one backend behind both.
    let name = instance(2).0.to_string();
    for (from, to) in [(2, 3), (3, 2)] {
        let data: Vec<u8> = (0..1u32 << 20)
            .map(|i| (i % 251) as u8 ^ from as u8)
            .collect();
        let local = Path::new(BASE).join(format!("put-{from}"));
        std::fs::write(&local, &data).unwrap();
        let remote = format!("{name}/via-m{from}");
        let t = Instant::now();
        must(
            &format!("sfs put through m{from}"),
            sfs(from, &["put", local.to_str().unwrap(), &remote]),
        );
        let back = Path::new(BASE).join(format!("get-{to}"));
        must(
            &format!("sfs get through m{to}"),
            sfs(to, &["get", &remote, back.to_str().unwrap()]),
        );
        assert_eq!(
            std::fs::read(&back).unwrap(),
            data,
            "put through m{from}, get through m{to}"
        );
        // Replicated: every machine's brick holds the file.
        for m in MACHINES {
            let mut on_brick = Vec::new();
            std::fs::File::open(brick(m).join(format!("via-m{from}")))
                .and_then(|mut f| f.read_to_end(&mut on_brick))
                .unwrap_or_else(|e| panic!("m{m}'s brick has no via-m{from}: {e}"));
            assert!(
                on_brick == data,
                "m{m}'s brick holds other data for via-m{from}"
            );
        }
        eprintln!(
            "1 MiB put through m{from}, got through m{to}, on all three bricks: {:?}",
            t.elapsed()
        );
    }

    // The peer channel: a write through m2's instance reaches m3's lease holder.
    let (n2, a2) = instance(2);
    let (n3, a3) = instance(3);
    let mut c2 = Client::connect(&n2, a2);
    let u2 = c2.login("alice", 1).unwrap();
    let r2 = c2.mount(u2);
    let mut c3 = Client::connect(&n3, a3);
    let u3 = c3.login("alice", 1).unwrap();
    let r3 = c3.mount(u3);
    assert_eq!(r2, r3, "one root handle on both instances");
    let f = retry(|| c2.lookup(u2, r2, "via-m2"));
    while c3
        .next_message_timeout(Duration::from_millis(100))
        .is_some()
    {}
    retry(|| c3.getattr(u3, f));
    retry(|| c2.write(u2, f, 0, b"changed through m2"));
    let t = Instant::now();
    match c3.next_message_timeout(Duration::from_secs(5)) {
        Some(ServerMessage::Invalidate(i)) => assert_eq!(i.fh, f),
        o => panic!("no INVALIDATE at m3's client: {o:?}"),
    }
    eprintln!(
        "m2's write reached m3's client as an INVALIDATE {:?} after the reply",
        t.elapsed()
    );
    drop((c2, c3));

    // Down, each machine its roles, in the documented order; then nothing left.
    let t = Instant::now();
    for (m, roles) in [
        (2, "sfsd"),
        (3, "sfsd"),
        (1, "gateway"),
        (1, "brick"),
        (2, "brick"),
        (3, "brick"),
    ] {
        must(
            &format!("m{m}: down --role {roles}"),
            script(m, &["down", "--role", roles], &[]),
        );
    }
    eprintln!("down in {:?}", t.elapsed());
    let left = processes_in_namespaces();
    assert!(
        left.is_empty(),
        "processes left in the namespaces: {left:?}"
    );
    for m in MACHINES {
        let d = machine_dir(m);
        assert!(!scale_dir(m).exists(), "{} left", scale_dir(m).display());
        for sub in ["lib", "run", "log", "disk"] {
            let files = files_under(&d.join(sub));
            assert!(files.is_empty(), "m{m}: left under {sub}: {files:?}");
        }
    }
    drop(machines);
    assert!(netns_inode(1).is_none() && !Path::new(BASE).exists());
    let links = String::from_utf8_lossy(&sh("ip -o link show").stdout).into_owned();
    assert!(
        !links.contains(BRIDGE) && !links.contains("sfsmt"),
        "links left:\n{links}"
    );
    eprintln!("the whole run: {:?}", started.elapsed());
}
