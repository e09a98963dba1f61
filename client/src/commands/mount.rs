//! `nfs`, `mount`, `umount`: the FUSE mount, the loopback NFSv3 server, and unmounting both.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nfsserve::tcp::{NFSTcp, NFSTcpListener};

use super::{CmdError, Ctx, Target};
use crate::nfs::SfsNfs;

/// Starts the loopback NFS server for `name`; returns it bound (port known) but not serving.
pub(crate) async fn start(
    ctx: &mut Ctx,
    name: &str,
    listen: SocketAddr,
) -> Result<NFSTcpListener<SfsNfs>, CmdError> {
    if !listen.ip().is_loopback() {
        return Err(CmdError::Usage(format!(
            "--listen {listen}: the NFS server carries no authentication of its own and must \
             listen on loopback (127.0.0.1)"
        )));
    }
    let t = Target::parse(name)?;
    let (c, root, attr) = ctx.resolve(&t).await?;
    if attr.ftype != protocol::FileType::Directory {
        return Err(CmdError::Path(t.text, "Not a directory".into()));
    }
    let fs = SfsNfs::new(c, root);
    NFSTcpListener::bind(&listen.to_string(), fs)
        .await
        .map_err(|e| CmdError::Other(anyhow::anyhow!("cannot listen on {listen}: {e}")))
}

/// Serves NFS to this user's processes and the kernel only (`peer_owner`).
async fn serve_owner_only(l: &NFSTcpListener<SfsNfs>) -> std::io::Result<()> {
    let me = rustix::process::geteuid().as_raw();
    l.handle_forever_admitting(move |s| match (s.local_addr(), s.peer_addr()) {
        (Ok(local), Ok(peer)) => crate::peer_owner::admits(local, peer, me),
        _ => false,
    })
    .await
}

/// The mount(8) command for a loopback server on `port`.
pub(crate) fn mount_command(port: u16, dir: &Path) -> String {
    format!(
        "mount -t nfs -o vers=3,tcp,nolock,port={port},mountport={port},actimeo=0 127.0.0.1:/ {}",
        dir.display()
    )
}

/// `sfs nfs`: serve until interrupted.
pub(crate) async fn nfs(ctx: &mut Ctx, name: &str, listen: SocketAddr) -> Result<(), CmdError> {
    let l = start(ctx, name, listen).await?;
    let port = l.get_listen_port();
    println!("sfs: NFSv3 for {name} on 127.0.0.1:{port}");
    println!("sfs: mount with: {}", mount_command(port, Path::new("DIR")));
    use std::io::Write;
    let _ = std::io::stdout().flush();
    tokio::select! {
        r = serve_owner_only(&l) => r.map_err(|e| CmdError::Other(e.into())),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

/// Whether this kernel has an NFS client (`/proc/filesystems` lists `nfs`).
fn kernel_has_nfs() -> bool {
    std::fs::read_to_string("/proc/filesystems")
        .map(|s| {
            s.lines()
                .any(|l| l.split_whitespace().last() == Some("nfs"))
        })
        .unwrap_or(false)
}

/// `sfs mount --nfs`: serve, mount, and keep serving until the file system is unmounted.
pub(crate) async fn mount_nfs(
    ctx: &mut Ctx,
    name: &str,
    dir: &Path,
    listen: SocketAddr,
) -> Result<(), CmdError> {
    if !dir.is_dir() {
        return Err(CmdError::Path(
            dir.display().to_string(),
            "No such file or directory (the mount point must be a directory)".into(),
        ));
    }
    let l = start(ctx, name, listen).await?;
    let port = l.get_listen_port();
    let cmd = mount_command(port, dir);
    let serve = tokio::spawn(async move { serve_owner_only(&l).await });
    let has_nfs = kernel_has_nfs();
    let status = if has_nfs {
        let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
        Command::new("mount").args(&args).status().ok()
    } else {
        None
    };
    match status {
        Some(s) if s.success() => {
            println!("sfs: {name} mounted on {}", dir.display());
            println!(
                "sfs: serving until `sfs umount {}` or interrupt",
                dir.display()
            );
            tokio::select! {
                r = serve => match r {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(CmdError::Other(e.into())),
                    Err(e) => Err(CmdError::Other(e.into())),
                },
                _ = tokio::signal::ctrl_c() => {
                    let _ = Command::new("umount").arg(dir).status();
                    Ok(())
                }
            }
        }
        _ => {
            serve.abort();
            let why = if has_nfs {
                "mount -t nfs failed"
            } else {
                "this kernel has no NFS client (no `nfs` in /proc/filesystems), so it cannot mount"
            };
            eprintln!("sfs: mount: {why}.");
            eprintln!("sfs: on a machine with an NFS client, run `sfs nfs {name}` and then:");
            eprintln!(
                "  {}",
                mount_command(port, dir).replace(&port.to_string(), "PORT")
            );
            eprintln!("sfs: where PORT is the port `sfs nfs` prints, e.g.:");
            eprintln!("  {cmd}");
            Err(CmdError::Reported)
        }
    }
}

/// The mount table entry (mountinfo) for the mount point `dir`, if it is one: its file
/// system type (`fuse.sfs`, `nfs`, ...). The last entry wins (mounts stack).
pub(crate) fn mounted_type(dir: &Path) -> Option<String> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = dir.to_string_lossy();
    let mut found = None;
    for line in table.lines() {
        // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
        let mut fields = line.split(' ');
        let Some(point) = fields.nth(4) else { continue };
        if unescape_mountinfo(point) != want {
            continue;
        }
        let mut rest = line.split(" - ");
        if let Some(fstype) = rest.nth(1).and_then(|r| r.split(' ').next()) {
            found = Some(fstype.to_owned());
        }
    }
    found
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `dir` made absolute without following it (a dead FUSE mount point cannot be resolved).
fn absolute(dir: &Path) -> PathBuf {
    dir.canonicalize()
        .or_else(|_| std::path::absolute(dir))
        .unwrap_or_else(|_| dir.to_path_buf())
}

/// Whether `dir` is a FUSE mount whose process is gone (`ENOTCONN`).
fn is_dead_mount(dir: &Path) -> bool {
    matches!(std::fs::metadata(dir), Err(e) if e.raw_os_error() == Some(libc::ENOTCONN))
}

/// `fusermount3 -u [-z] DIR`, falling back to `umount [-l]` where fusermount3 is missing.
fn fuse_unmount(dir: &Path, lazy: bool) -> Result<(), String> {
    let mut c = Command::new("fusermount3");
    c.arg("-u");
    if lazy {
        c.arg("-z");
    }
    c.arg("--").arg(dir).stdin(Stdio::null());
    match c.output() {
        Ok(o) if o.status.success() => return Ok(()),
        Ok(o) => {
            let msg = String::from_utf8_lossy(&o.stderr).trim().to_owned();
            if !msg.is_empty() {
                return Err(msg);
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot run fusermount3: {e}")),
    }
    let mut c = Command::new("umount");
    if lazy {
        c.arg("-l");
    }
    match c.arg(dir).stdin(Stdio::null()).output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(String::from_utf8_lossy(&o.stderr).trim().to_owned()),
        Err(e) => Err(format!("cannot run umount: {e}")),
    }
}

/// The default log file of a background mount on `dir`.
pub(crate) fn default_log(dir: &Path) -> PathBuf {
    let flat: String = absolute(dir)
        .to_string_lossy()
        .trim_matches('/')
        .chars()
        .map(|c| {
            if c == '/' || c.is_whitespace() {
                '_'
            } else {
                c
            }
        })
        .collect();
    let file = format!("mount-{}.log", if flat.is_empty() { "root" } else { &flat });
    match std::env::var_os("HOME") {
        Some(h) => Path::new(&h).join(".sfs").join("log").join(file),
        None => std::env::temp_dir().join(format!("sfs-{file}")),
    }
}

/// Checks the mount point, detaching a dead sfs mount left there; the absolute path.
fn mount_point(dir: &Path) -> Result<PathBuf, CmdError> {
    let abs = absolute(dir);
    if is_dead_mount(&abs) {
        tracing::warn!(dir = %abs.display(), "removing a dead FUSE mount left on the mount point");
        fuse_unmount(&abs, true).map_err(|e| {
            CmdError::Path(
                abs.display().to_string(),
                format!("dead mount not removed: {e}"),
            )
        })?;
    }
    if !abs.is_dir() {
        return Err(CmdError::Path(
            dir.display().to_string(),
            "No such directory (the mount point must be an existing directory)".into(),
        ));
    }
    Ok(abs)
}

/// `sfs mount` without `-f`: runs this same command with `-f` as a background process
/// (standard output and error into the log file, its own process group so the terminal's
/// signals do not reach it) and returns once the file system answers on `dir`, or reports
/// why it did not, with the end of the log.
pub(crate) fn daemonize(dir: &Path, log: Option<&Path>, verbose: u8) -> Result<(), CmdError> {
    use std::os::unix::process::CommandExt;
    let abs = mount_point(dir)?;
    let log = log
        .map(Path::to_path_buf)
        .unwrap_or_else(|| default_log(&abs));
    if let Some(parent) = log.parent() {
        std::fs::create_dir_all(parent).map_err(|e| {
            CmdError::Path(parent.display().to_string(), format!("cannot create: {e}"))
        })?;
    }
    let open = || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| CmdError::Path(log.display().to_string(), format!("cannot open: {e}")))
    };
    let start_len = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let exe = std::env::current_exe()
        .map_err(|e| CmdError::Other(anyhow::anyhow!("cannot find the sfs executable: {e}")))?;
    let mut cmd = Command::new(exe);
    cmd.args(std::env::args_os().skip(1)).arg("--foreground");
    if verbose == 0 {
        cmd.arg("-v"); // the log should say what happened
    }
    cmd.stdin(Stdio::null())
        .stdout(open()?)
        .stderr(open()?)
        .process_group(0);
    let mut child = cmd
        .spawn()
        .map_err(|e| CmdError::Other(anyhow::anyhow!("cannot start the mount process: {e}")))?;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            eprintln!(
                "sfs: mount: the mount process exited ({status}); from its log {}:",
                log.display()
            );
            for line in log_tail(&log, start_len, 20) {
                eprintln!("  {line}");
            }
            return Err(CmdError::Reported);
        }
        if mounted_type(&abs).is_some_and(|t| t.starts_with("fuse")) {
            // Mounted; the first stat waits until the process serves requests.
            if std::fs::metadata(&abs).is_ok() {
                println!(
                    "sfs: mounted on {} (process {}, log {})",
                    abs.display(),
                    child.id(),
                    log.display()
                );
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let _ = fuse_unmount(&abs, true);
            return Err(CmdError::Other(anyhow::anyhow!(
                "the mount was not ready within 120 s; see {}",
                log.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The last `n` lines written to `log` after byte `from`, from at most its last 64 KiB (a log
/// kept for months is not read whole, nor a device given as the log read for ever).
fn log_tail(log: &Path, from: u64, n: usize) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    const MOST: u64 = 64 * 1024;
    let mut text = Vec::new();
    if let Ok(mut f) = std::fs::File::open(log) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let start = from.max(len.saturating_sub(MOST));
        if f.seek(SeekFrom::Start(start)).is_ok() {
            let _ = f.take(MOST).read_to_end(&mut text);
        }
    }
    let text = String::from_utf8_lossy(&text).into_owned();
    let lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

/// Whether this process may mount with `allow_other`/`allow_root` (needed for
/// `auto_unmount`): root may, others only when /etc/fuse.conf says `user_allow_other`.
fn may_allow_other() -> bool {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the effective uid.
    if std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0) {
        return true;
    }
    std::fs::read_to_string("/etc/fuse.conf").is_ok_and(|s| {
        s.lines()
            .any(|l| l.split('#').next().unwrap_or("").trim() == "user_allow_other")
    })
}

/// The effective uid (/proc/self belongs to it).
fn euid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX)
}

/// `sfs mount -f` (and the background process): mounts with FUSE and serves until unmounted
/// or signalled. `users`: many users on one stream (`Some`, with the identities directory).
pub(crate) async fn mount_fuse(
    ctx: &mut Ctx,
    name: &str,
    dir: &Path,
    users: Option<Option<PathBuf>>,
) -> Result<(), CmdError> {
    let abs = mount_point(dir)?;
    let multi_user = users.is_some();
    if multi_user && !may_allow_other() {
        return Err(CmdError::Usage(
            "--multi-user needs allow_other: run as root, or add user_allow_other to \
             /etc/fuse.conf"
                .into(),
        ));
    }
    let t = Target::parse(name)?;
    let (client, root, attr) = ctx.resolve(&t).await?;
    if attr.ftype != protocol::FileType::Directory {
        return Err(CmdError::Path(t.text, "Not a directory".into()));
    }
    let sh = if let Some(dir) = users {
        client.set_identity_resolver(Box::new(move |uid| {
            crate::identity::for_local_user(uid, dir.as_deref())
        }));
        crate::fuse::ServerMount::with_users(client.clone(), root, Some(euid()))
    } else {
        crate::fuse::ServerMount::new(client.clone(), root)
    };
    let rt = tokio::runtime::Handle::current();
    let fsname = name.split(',').next().unwrap_or("sfs").to_owned();
    let sh2 = sh.clone();
    let make = move || crate::fuse::SfsFuse::new(sh2.clone(), rt.clone());
    let mounted = move |notifier: fuser::Notifier| {
        let (tx, rx) = crate::session::invalidations::channel();
        client.on_invalidate(Box::new(move |ev| tx.send(ev)));
        std::thread::Builder::new()
            .name("sfs-invalidate".into())
            .spawn(move || crate::fuse::invalidator(sh, notifier, rx))
            .map(drop)
    };
    serve_fuse(&abs, name, fsname, multi_user, make, mounted).await
}

/// `sfs mount --namespace DIR -f` (and the background process): the self-certifying
/// namespace ([`crate::namespace`]), serving until unmounted or signalled.
pub(crate) async fn mount_namespace(
    ctx: &mut Ctx,
    dir: &Path,
    idle: Duration,
) -> Result<(), CmdError> {
    let abs = mount_point(dir)?;
    let (identity, opts) = ctx.session_settings();
    let ns = crate::namespace::Namespace::new(tokio::runtime::Handle::current(), identity, opts);
    let reaper = tokio::spawn(ns.clone().reap_idle(idle));
    let ns2 = ns.clone();
    let rt = tokio::runtime::Handle::current();
    let make = move || crate::fuse::SfsFuse::with_ranges(ns2.clone(), rt.clone());
    let mounted = move |notifier: fuser::Notifier| {
        ns.set_notifier(notifier);
        Ok(())
    };
    let r = serve_fuse(&abs, "the namespace", "sfs".into(), false, make, mounted).await;
    reaper.abort();
    r
}

/// Mounts the file system `make` builds on `abs` (`fsname` in the mount table), hands the
/// session's notifier to `mounted`, and serves until unmounted from outside or signalled
/// (then unmounts, lazily if busy).
async fn serve_fuse<F, M, N>(
    abs: &Path,
    name: &str,
    fsname: String,
    multi_user: bool,
    make: M,
    mounted: N,
) -> Result<(), CmdError>
where
    F: fuser::Filesystem + Send + 'static,
    M: Fn() -> F + Send + 'static,
    N: FnOnce(fuser::Notifier) -> std::io::Result<()>,
{
    use tokio::signal::unix::{SignalKind, signal};
    let auto_unmount = may_allow_other();
    let config = move |auto: bool| {
        use fuser::MountOption as O;
        let mut c = fuser::Config::default();
        // One thread reading the kernel's requests per CPU, each pinned to its CPU, and while
        // the callers keep to one CPU only that CPU's thread reads (fuser's `duty.rs`): a
        // request is then read on its caller's CPU. Waking a thread on another CPU is what a
        // request answered in the mount process mostly cost (a `getxattr` of `ls -l` on a
        // 2-CPU virtual machine: 150 us with one reader, 32-48 with one pinned per CPU, 14
        // with only the caller's CPU's reading).
        c.n_threads = Some(fuse_readers());
        c.clone_fd = true;
        c.pin_threads = true;
        c.mount_options = vec![
            O::FSName(fsname.clone()),
            O::Subtype("sfs".into()),
            O::NoDev,
            O::NoSuid,
        ];
        if auto {
            // fusermount3 stays behind and unmounts if this process dies.
            c.mount_options.push(O::AutoUnmount);
            c.acl = fuser::SessionACL::RootAndOwner;
        }
        if multi_user {
            // Everyone may enter; the kernel's cache is shared between users, so the kernel
            // checks modes against each caller too (the server checks as each caller's
            // identity in any case).
            c.acl = fuser::SessionACL::All;
            c.mount_options.push(O::DefaultPermissions);
        }
        c
    };
    let dir2 = abs.to_path_buf();
    let session = tokio::task::spawn_blocking(move || {
        let fs = make;
        match fuser::Session::new(fs(), &dir2, &config(auto_unmount)) {
            Err(e) if auto_unmount && !multi_user => {
                tracing::warn!(
                    "mount with auto_unmount failed ({e}); mounting without it (if this \
                     process dies, run `sfs umount {}`)",
                    dir2.display()
                );
                fuser::Session::new(fs(), &dir2, &config(false))
            }
            r => {
                if !auto_unmount {
                    tracing::warn!(
                        "no auto_unmount (needs user_allow_other in /etc/fuse.conf): if this \
                         process dies, run `sfs umount {}`",
                        dir2.display()
                    );
                }
                r
            }
        }
    })
    .await
    .map_err(|e| CmdError::Other(anyhow::anyhow!("mount task failed: {e}")))?
    .map_err(|e| {
        CmdError::Path(
            abs.display().to_string(),
            format!("cannot mount with FUSE: {e} ({})", fuse_hint()),
        )
    })?;
    mounted(session.notifier())?;
    // A thread of its own, not the runtime's blocking pool: a session kept alive by open
    // files after a lazy unmount must not hold up the runtime's shutdown.
    let (done_tx, mut run) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("sfs-fuse".into())
        .spawn(move || {
            let _ = done_tx.send(session.run());
        })?;
    tracing::info!("{name} mounted on {}", abs.display());
    // Not `println!`: a background mount's standard output is its log, and a full disk there
    // must not take the mount down (println! panics when the write fails).
    let _ = writeln!(
        std::io::stdout(),
        "sfs: {name} mounted on {}",
        abs.display()
    );
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    loop {
        tokio::select! {
            r = &mut run => {
                // Unmounted from outside (sfs umount, fusermount3 -u, umount).
                tracing::info!("{} unmounted; exiting", abs.display());
                return match r {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(CmdError::Other(anyhow::anyhow!("FUSE session failed: {e}"))),
                    Err(_) => Err(CmdError::Other(anyhow::anyhow!("the FUSE session thread died"))),
                };
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = hup.recv() => tracing::info!("SIGHUP ignored (unmount with SIGTERM or sfs umount)"),
        }
    }
    tracing::info!("signalled: unmounting {}", abs.display());
    let dir2 = abs.to_path_buf();
    let unmounted = tokio::task::spawn_blocking(move || {
        fuse_unmount(&dir2, false).or_else(|e| {
            // Busy: detach it (open files keep working until closed, then it goes away), so
            // no mount is left behind without a process serving it.
            tracing::warn!("unmount failed ({e}); detaching lazily");
            fuse_unmount(&dir2, true)
        })
    })
    .await
    .map_err(|e| CmdError::Other(anyhow::anyhow!("unmount task failed: {e}")))?;
    if let Err(e) = unmounted {
        tracing::warn!("lazy unmount failed too: {e}");
    }
    if tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .is_err()
    {
        tracing::warn!("the FUSE session did not end within 5 s of unmounting; exiting anyway");
    }
    Ok(())
}

/// What to check when a FUSE mount fails: /dev/fuse usable by this user, fusermount3 there.
fn fuse_hint() -> &'static str {
    let dev = Path::new("/dev/fuse");
    if !dev.exists() {
        "there is no /dev/fuse: load the fuse module, or give the container the device"
    } else if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dev)
        .is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied)
    {
        "this user may not open /dev/fuse: distributions make it mode 0666 (chmod 0666 /dev/fuse)"
    } else {
        "is fusermount3 there (Debian/Ubuntu package fuse3)?"
    }
}

/// `sfs umount`: FUSE mounts through fusermount3 (which unprivileged users may use, and which
/// also removes a mount whose process died), others with umount(8).
pub(crate) fn umount(dir: &Path) -> Result<(), CmdError> {
    let abs = absolute(dir);
    let shown = dir.display().to_string();
    match mounted_type(&abs) {
        None => Err(CmdError::Path(shown, "not a mount point".into())),
        Some(t) if t.starts_with("fuse") => {
            let dead = is_dead_mount(&abs);
            fuse_unmount(&abs, dead).map_err(|e| CmdError::Path(shown, e))
        }
        Some(_) => {
            let s = Command::new("umount")
                .arg(&abs)
                .status()
                .map_err(|e| CmdError::Other(anyhow::anyhow!("cannot run umount: {e}")))?;
            if s.success() {
                Ok(())
            } else {
                Err(CmdError::Path(shown, "umount failed".into()))
            }
        }
    }
}

/// Most threads reading the kernel's requests: one per CPU up to here (each holds a buffer
/// the size of the largest request, touched only as far as requests fill it).
const MAX_FUSE_READERS: usize = 16;

/// Threads reading the kernel's requests: one per CPU this process may use, at most
/// [`MAX_FUSE_READERS`] (then none is pinned).
fn fuse_readers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_FUSE_READERS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_mountinfo(r"/mnt/a\040b"), "/mnt/a b");
        assert_eq!(unescape_mountinfo(r"/x\134y"), r"/x\y");
        assert_eq!(unescape_mountinfo(r"/plain\04"), r"/plain\04");
    }

    #[test]
    fn root_is_a_mount_point_and_tmp_files_are_not() {
        assert!(mounted_type(Path::new("/")).is_some());
        let d = tempfile::tempdir().unwrap();
        assert_eq!(mounted_type(&d.path().join("nope")), None);
    }

    #[test]
    fn default_log_names_the_directory() {
        let l = default_log(Path::new("/mnt/my dir"));
        assert!(
            l.to_string_lossy().ends_with("mount-mnt_my_dir.log"),
            "{}",
            l.display()
        );
    }
}
