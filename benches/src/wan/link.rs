//! The two network namespaces and the TUN devices that join them through the relay.
//!
//! Namespace `a` holds the client side (10.77.0.1), `b` the servers (10.77.0.2). Each TUN
//! device is created in the root namespace by this process (so the descriptor is ours) and
//! then moved into its namespace with `ip link set DEV netns NS`: the descriptor stays valid
//! across the move, so the relay, running in the root namespace, reads what namespace `a`
//! sends and writes it into namespace `b` as received, and back. One end-to-end TCP connection
//! crosses it, with the kernels' own congestion control at both ends (unlike a TCP proxy).
//!
//! Nothing may be left behind: [`Link`] deletes its namespaces when dropped (after stopping
//! the relay), every process started in them is registered with [`Cleanup`], and a watcher
//! thread started by [`install_signal_cleanup`] kills them and deletes the namespaces on
//! SIGINT, SIGTERM or SIGHUP before exiting. Namespaces of an earlier run whose process is
//! gone (a SIGKILL) are deleted at the next start.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::relay::{LinkShape, Relay};

/// The client end (namespace `a`).
pub(super) const CLIENT_ADDR: &str = "10.77.0.1";
/// The server end (namespace `b`).
pub(super) const SERVER_ADDR: &str = "10.77.0.2";
/// Prefix of every namespace this harness makes: `sfswan-PID-a` and `-b`.
const PREFIX: &str = "sfswan-";

/// How each TUN device carries packets.
#[derive(Debug, Clone, Copy)]
pub(super) struct TunMode {
    pub mtu: u32,
    /// With a virtio-net header and TCP segmentation offload: the stack hands the device
    /// (and takes from it) 64 KiB super-packets of `mtu`-sized segments, as a VM's virtio-net
    /// does, so TCP sees a normal MSS while the relay moves few packets.
    pub gso: bool,
}

/// The size of `struct virtio_net_hdr` that a TUN device with IFF_VNET_HDR prefixes.
pub(super) const VNET_HDR_LEN: usize = 10;

/// What to undo if the process is interrupted: namespaces and processes, by name and pid.
#[derive(Default)]
struct Registry {
    namespaces: Vec<String>,
    pids: Vec<u32>,
    /// Work directories (the data files), removed after the processes are gone.
    dirs: Vec<std::path::PathBuf>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    namespaces: Vec::new(),
    pids: Vec::new(),
    dirs: Vec::new(),
});
static SIGNALLED: AtomicBool = AtomicBool::new(false);

/// Registration of a namespace or process for the signal-time cleanup.
pub(super) struct Cleanup;

impl Cleanup {
    pub(super) fn add_pid(pid: u32) {
        if let Ok(mut r) = REGISTRY.lock() {
            r.pids.push(pid);
        }
    }

    pub(super) fn remove_pid(pid: u32) {
        if let Ok(mut r) = REGISTRY.lock() {
            r.pids.retain(|p| *p != pid);
        }
    }

    /// A directory to remove if the run is interrupted (a `TempDir` removes it otherwise).
    pub(super) fn add_dir(dir: &std::path::Path) {
        if let Ok(mut r) = REGISTRY.lock() {
            r.dirs.push(dir.to_path_buf());
        }
    }

    fn add_namespace(name: &str) {
        if let Ok(mut r) = REGISTRY.lock() {
            r.namespaces.push(name.to_string());
        }
    }

    fn remove_namespace(name: &str) {
        if let Ok(mut r) = REGISTRY.lock() {
            r.namespaces.retain(|n| n != name);
        }
    }
}

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    SIGNALLED.store(true, Ordering::SeqCst);
}

/// On SIGINT, SIGTERM or SIGHUP: kill every registered process tree, delete every
/// registered namespace, and exit with status 130. The handler only sets a flag; a watcher
/// thread does the work (none of it is async-signal-safe).
pub(super) fn install_signal_cleanup() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: `on_signal` is an `extern "C" fn(c_int)` that only stores to an atomic, which
        // is async-signal-safe; the `sigaction` struct is zeroed (empty mask, no flags) before
        // the handler is set, and a null old-action pointer is allowed.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
    std::thread::spawn(|| {
        while !SIGNALLED.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("\nwan: interrupted; stopping the peers and deleting the namespaces");
        let (pids, namespaces, dirs) = match REGISTRY.lock() {
            Ok(r) => (r.pids.clone(), r.namespaces.clone(), r.dirs.clone()),
            Err(p) => {
                let r = p.into_inner();
                (r.pids.clone(), r.namespaces.clone(), r.dirs.clone())
            }
        };
        for pid in pids {
            kill_tree(pid);
        }
        for ns in namespaces {
            delete_namespace(&ns);
        }
        for dir in dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
        std::process::exit(130);
    });
}

/// SIGKILL to `pid` and its descendants. The tree is stopped first (SIGSTOP, until listing it
/// again finds no new process) so no parent can fork a replacement for a child killed before
/// it: nginx's master respawns a worker that dies.
pub(super) fn kill_tree(pid: u32) {
    use rustix::process::Signal;
    let mut tree = Vec::new();
    for _ in 0..20 {
        let now = crate::read::sftp::process_tree(pid);
        for &p in &now {
            crate::procs::signal(p, Signal::STOP);
        }
        if now == tree {
            break;
        }
        tree = now;
    }
    for p in tree {
        crate::procs::signal(p, Signal::KILL);
    }
}

/// SIGKILL to every process in network namespace `name` (found by the namespace's inode in
/// /proc/PID/ns/net), until none is left: whatever escaped its guard (a process whose parent
/// died first is no longer in any tree this harness can walk) must not outlive its namespace.
fn kill_namespace_processes(name: &str) {
    use std::os::unix::fs::MetadataExt;
    let Ok(ns) = std::fs::metadata(format!("/run/netns/{name}")) else {
        return;
    };
    let wanted = format!("net:[{}]", ns.ino());
    for _ in 0..20 {
        let mut found = false;
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let link = std::fs::read_link(format!("/proc/{pid}/ns/net"));
            if link.is_ok_and(|l| l.as_os_str() == wanted.as_str()) && !crate::procs::exited(pid) {
                found = true;
                crate::procs::signal(pid, rustix::process::Signal::KILL);
            }
        }
        if !found {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Kills what still runs in namespace `name`, then deletes it.
fn delete_namespace(name: &str) {
    kill_namespace_processes(name);
    let _ = Command::new("ip")
        .args(["netns", "del", name])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Runs a command to completion; its stderr is the error if it fails.
pub(super) fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.stdin(Stdio::null()).output().with_context(|| {
        format!("running {cmd:?} (is iproute2 installed? scripts/bench-peers.sh)")
    })?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn ip(args: &[&str]) -> anyhow::Result<String> {
    run(Command::new("ip").args(args))
}

/// Namespaces named by this harness whose process no longer exists (left by a SIGKILL).
fn delete_stale_namespaces() {
    let Ok(list) = ip(&["netns", "list"]) else {
        return;
    };
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            eprintln!("wan: deleting namespace {name} left by process {pid}, which is gone");
            delete_namespace(name);
        }
    }
}

/// `struct ifreq` as TUNSETIFF reads it: a name and the flags (the rest is a union this call
/// does not use; 40 bytes in all on Linux).
#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: libc::c_short,
    _rest: [u8; 22],
}

/// `_IOW('T', 202, int)` and `_IOW('T', 208, unsigned int)` from <linux/if_tun.h>.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;

/// Opens /dev/net/tun and creates the TUN device `name` (no packet-information prefix; with
/// a virtio-net header and TSO when `gso`). The device lives while the descriptor is open.
fn create_tun(name: &str, gso: bool) -> anyhow::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .context("opening /dev/net/tun (needs root and the tun module)")?;
    let mut req = IfReq {
        name: [0; 16],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI | if gso { libc::IFF_VNET_HDR } else { 0 })
            as libc::c_short,
        _rest: [0; 22],
    };
    if name.len() >= req.name.len() {
        bail!("interface name {name} is too long");
    }
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads (and writes back the name into) a `struct ifreq`; `req` is a
    // properly sized and aligned #[repr(C)] image of it that lives across the call, and the
    // descriptor is an open /dev/net/tun.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF, &mut req as *mut IfReq) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error()).context(format!("TUNSETIFF {name}"));
    }
    if gso {
        let offload = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6;
        // SAFETY: TUNSETOFFLOAD takes its unsigned int argument by value; the descriptor is
        // the TUN device configured just above.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETOFFLOAD, offload as libc::c_ulong) };
        if rc < 0 {
            return Err(std::io::Error::last_os_error()).context(format!("TUNSETOFFLOAD {name}"));
        }
    }
    Ok(file)
}

/// TCP buffer limits in both namespaces.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub(super) enum Buffers {
    /// What a new namespace starts with: the root namespace's tcp_rmem and tcp_wmem (the
    /// kernel copies them; on the test machine the maxima are 32 MiB and 4 MiB).
    Default,
    /// tcp_rmem and tcp_wmem maximum raised to 64 MiB.
    Large,
}

/// Two namespaces joined by the relay; deleted when dropped.
pub(super) struct Link {
    pub ns_a: String,
    pub ns_b: String,
    relay: Option<Relay>,
}

impl Link {
    /// Makes the namespaces and devices, applies `buffers`, and starts the relay.
    pub(super) fn new(shape: LinkShape, tun: TunMode, buffers: Buffers) -> anyhow::Result<Link> {
        delete_stale_namespaces();
        let pid = std::process::id();
        let mut link = Link {
            ns_a: format!("{PREFIX}{pid}-a"),
            ns_b: format!("{PREFIX}{pid}-b"),
            relay: None,
        };
        let devs = [format!("sfw{pid}a"), format!("sfw{pid}b")];
        let fds = [
            create_tun(&devs[0], tun.gso)?,
            create_tun(&devs[1], tun.gso)?,
        ];
        let mtu = tun.mtu.to_string();
        for (i, (ns, dev)) in [(&link.ns_a, &devs[0]), (&link.ns_b, &devs[1])]
            .into_iter()
            .enumerate()
        {
            Cleanup::add_namespace(ns);
            ip(&["netns", "add", ns]).context("creating a network namespace")?;
            ip(&["link", "set", dev, "netns", ns])?;
            let (here, there) = if i == 0 {
                (CLIENT_ADDR, SERVER_ADDR)
            } else {
                (SERVER_ADDR, CLIENT_ADDR)
            };
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", ns, "addr", "add", here, "peer", there, "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "mtu", &mtu, "up"])?;
            // Each connection starts afresh: no cached ssthresh or RTT from the last one.
            sysctl(ns, "net.ipv4.tcp_no_metrics_save", "1")?;
            if buffers == Buffers::Large {
                sysctl(ns, "net.ipv4.tcp_rmem", "4096 131072 67108864")?;
                sysctl(ns, "net.ipv4.tcp_wmem", "4096 16384 67108864")?;
            }
        }
        let [a, b] = fds;
        let shape = LinkShape {
            header_bytes: if tun.gso { VNET_HDR_LEN } else { 0 },
            ..shape
        };
        link.relay = Some(Relay::start(a, b, shape).context("starting the relay")?);
        Ok(link)
    }

    pub(super) fn relay(&self) -> &Relay {
        self.relay.as_ref().expect("started in new")
    }

    /// A sysctl's value in namespace `a`.
    pub(super) fn sysctl_a(&self, key: &str) -> String {
        run(Command::new("ip").args(["netns", "exec", &self.ns_a, "sysctl", "-n", key]))
            .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|_| "?".into())
    }

    /// `cmd` to be run in namespace `ns` (through `ip netns exec`, which execs it: the child's
    /// pid is the command's own).
    pub(super) fn command_in(ns: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).arg(program);
        c
    }
}

fn sysctl(ns: &str, key: &str, value: &str) -> anyhow::Result<()> {
    run(Command::new("ip").args([
        "netns",
        "exec",
        ns,
        "sysctl",
        "-qw",
        &format!("{key}={value}"),
    ]))
    .map(|_| ())
}

impl Drop for Link {
    fn drop(&mut self) {
        // Close the devices first, then the namespaces (processes in them were stopped by
        // their own guards, which the caller drops before the link).
        if let Some(mut r) = self.relay.take() {
            r.stop();
        }
        for ns in [&self.ns_a, &self.ns_b] {
            delete_namespace(ns);
            Cleanup::remove_namespace(ns);
        }
    }
}

/// Waits until something in `pid`'s network namespace listens on TCP `port` (from
/// /proc/PID/net/tcp, which lists the sockets of the namespace the process is in), or the
/// process exits.
pub(super) fn wait_listening(pid: u32, port: u16, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let want = format!(":{port:04X}");
    loop {
        let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
        let listening = table.lines().skip(1).any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1].ends_with(&want) && f[3] == "0A"
        });
        if listening {
            return Ok(());
        }
        if crate::procs::exited(pid) {
            bail!("{what} exited before listening on port {port}");
        }
        if Instant::now() > deadline {
            bail!("{what} did not listen on port {port} within 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
