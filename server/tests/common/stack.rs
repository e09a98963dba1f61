//! What the scale-out stack tests share (`scale_out.rs`, `scale_out_multi.rs`): whether the
//! stack can run here, the lock that keeps two runs apart, the `sfs` client, and retrying a
//! backend not reached yet.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use protocol::NfsStatus;

/// Held while a test runs the stack: both tests use Gluster's fixed paths and glusterd's
/// port, so the second waits for the first.
pub(crate) const LOCK: &str = "/var/tmp/sfs-scale-out-test.lock";

/// Why the stack cannot run here, if it cannot: a skip, not a failure (the packages are
/// optional; `.ci/run` installs them where it can). `extra` names further programs needed.
pub(crate) fn unavailable(extra: &[&str]) -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("the scale-out stack needs root".into());
    }
    let on_path = |bin: &str| {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
    };
    let packages = "apt-get install glusterfs-server nfs-ganesha nfs-ganesha-gluster rpcbind";
    let needed = [
        "glusterd",
        "gluster",
        "ganesha.nfsd",
        "rpcbind",
        "unshare",
        "python3",
        "setsid",
    ];
    for bin in needed.iter().chain(extra) {
        if !on_path(bin) {
            return Some(format!("{bin} not found on PATH ({packages} iproute2)"));
        }
    }
    let fsal = std::fs::read_dir("/usr/lib").ok().and_then(|dirs| {
        dirs.flatten()
            .map(|d| d.path().join("ganesha/libfsalgluster.so"))
            .find(|p| p.is_file())
    });
    if fsal.is_none() {
        return Some(format!("no Gluster FSAL for NFS-Ganesha ({packages})"));
    }
    None
}

/// Takes [`LOCK`], waiting up to five minutes for another run to end.
pub(crate) fn lock() -> Option<std::fs::File> {
    let file = std::fs::File::create(LOCK).unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        match file.try_lock() {
            Ok(()) => return Some(file),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(500))
            }
            Err(e) => {
                eprintln!("{LOCK}: {e}");
                return None;
            }
        }
    }
}

/// The `sfs` client binary next to this test's `sfsd`, if it is built.
pub(crate) fn sfs_client() -> Option<PathBuf> {
    let sfs = Path::new(env!("CARGO_BIN_EXE_sfsd")).with_file_name("sfs");
    sfs.is_file().then_some(sfs)
}

/// Retries a call the server answers JUKEBOX ("try later": a backend connection is down or
/// not reached yet).
pub(crate) fn retry<T>(mut f: impl FnMut() -> Result<T, NfsStatus>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match f() {
            Ok(t) => return t,
            Err(NfsStatus::Jukebox) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100))
            }
            Err(e) => panic!("{e:?}"),
        }
    }
}
