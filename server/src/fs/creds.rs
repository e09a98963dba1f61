//! Per-thread file-system credentials: the kernel decides every permission.
//!
//! A file-system operation for a request runs on a storage thread that has switched, for that
//! operation only, to the request's mapped credentials: fsuid, fsgid and the supplementary
//! groups. Linux keeps credentials per thread; the raw system calls change only the calling
//! thread (glibc's `setgroups` wrapper would change every thread of the process, so it is not
//! used). With a non-zero fsuid the kernel also drops the file-system capabilities
//! (`CAP_DAC_OVERRIDE`, `CAP_FOWNER`, `CAP_CHOWN`...) from the thread, so search permission on
//! every path step, sticky directories, `protected_hardlinks`, setgid inheritance, ACLs and
//! ownership of new objects are all the kernel's decisions, exactly as for a local process of
//! that user. This is what the kernel NFS server and NFS-Ganesha do.
//!
//! When the server does not run as root, switching is impossible: every request then acts as
//! the server's own user (like sshfs).

use std::cell::Cell;

use rustix::fs::Gid;

use crate::users::Creds;

/// How the server applies request credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Running as root: each operation runs with the request's fsuid/fsgid/groups.
    PerRequest,
    /// Not root: every operation runs as the server's own user.
    ServerUser,
}

impl Mode {
    /// Detects the mode from the process's effective uid.
    pub(crate) fn detect() -> Mode {
        if rustix::process::geteuid().is_root() {
            Mode::PerRequest
        } else {
            Mode::ServerUser
        }
    }
}

/// At most this many supplementary groups are applied (the kernel's NGROUPS_MAX is 65536; a
/// users-file line is far shorter).
const MAX_GROUPS: usize = 64;

thread_local! {
    /// Whether this thread currently runs with a request's credentials (for nesting checks).
    static SWITCHED: Cell<bool> = const { Cell::new(false) };
}

fn set_fsuid(uid: u32) -> u32 {
    // SAFETY: setfsuid takes one integer argument and touches no memory of ours; it changes
    // only the calling thread's credentials. It returns the previous fsuid.
    unsafe { libc::syscall(libc::SYS_setfsuid, uid as libc::c_long) as u32 }
}

fn set_fsgid(gid: u32) -> u32 {
    // SAFETY: as for `set_fsuid`: one integer argument, no memory access, calling thread only.
    unsafe { libc::syscall(libc::SYS_setfsgid, gid as libc::c_long) as u32 }
}

/// setfsuid/setfsgid report failure only by not changing anything: passing -1 (never a valid
/// id) reads the current value back.
fn current_fsuid() -> u32 {
    set_fsuid(u32::MAX)
}

fn current_fsgid() -> u32 {
    set_fsgid(u32::MAX)
}

/// Applies `creds` to the calling thread. Returns an error if the kernel refused any part.
fn apply(uid: u32, gid: u32, groups: &[u32]) -> std::io::Result<()> {
    let groups: Vec<Gid> = groups
        .iter()
        .take(MAX_GROUPS)
        .map(|&g| Gid::from_raw(g))
        .collect();
    // Groups first (needs CAP_SETGID, which a non-zero fsuid does not drop), then fsgid, then
    // fsuid (which drops the file-system capabilities).
    rustix::thread::set_thread_groups(&groups)?;
    set_fsgid(gid);
    set_fsuid(uid);
    if current_fsuid() != uid || current_fsgid() != gid {
        return Err(std::io::Error::other(format!(
            "the kernel refused fsuid {uid} / fsgid {gid}"
        )));
    }
    Ok(())
}

/// Switches the calling thread's file-system credentials for the length of one operation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Switcher {
    mode: Mode,
}

impl Switcher {
    pub(crate) fn new(mode: Mode) -> Switcher {
        Switcher { mode }
    }

    /// Runs `f` with `creds` as this thread's file-system credentials, then restores the
    /// server's own. If the credentials cannot be applied, `f` does not run and the error is
    /// returned; if they cannot be restored the process aborts (a thread left with another
    /// user's credentials must never serve the next request).
    pub(crate) fn run<T>(&self, creds: &Creds, f: impl FnOnce() -> T) -> std::io::Result<T> {
        if self.mode == Mode::ServerUser {
            return Ok(f());
        }
        assert!(
            !SWITCHED.with(Cell::get),
            "nested credential switch on one thread"
        );
        struct Restore;
        impl Drop for Restore {
            fn drop(&mut self) {
                SWITCHED.with(|s| s.set(false));
                if let Err(e) = apply(0, 0, &[]) {
                    eprintln!("sfsd: cannot restore server credentials: {e}; aborting");
                    std::process::abort();
                }
            }
        }
        if let Err(e) = apply(creds.uid, creds.primary_gid(), &creds.gids) {
            let _restore = Restore;
            return Err(e);
        }
        SWITCHED.with(|s| s.set(true));
        let _restore = Restore;
        Ok(f())
    }

    /// Inside [`Switcher::run`]: runs `f` with the server's own credentials (the export walk,
    /// which indexes objects no single user may see), then switches back to `creds`.
    pub(crate) fn as_server<T>(&self, creds: &Creds, f: impl FnOnce() -> T) -> T {
        if self.mode == Mode::ServerUser || !SWITCHED.with(Cell::get) {
            return f();
        }
        struct Back<'a>(&'a Creds);
        impl Drop for Back<'_> {
            fn drop(&mut self) {
                if let Err(e) = apply(self.0.uid, self.0.primary_gid(), &self.0.gids) {
                    eprintln!("sfsd: cannot switch back to request credentials: {e}; aborting");
                    std::process::abort();
                }
            }
        }
        if let Err(e) = apply(0, 0, &[]) {
            eprintln!("sfsd: cannot restore server credentials: {e}; aborting");
            std::process::abort();
        }
        let _back = Back(creds);
        f()
    }
}

/// The calling thread's (fsuid, fsgid), for tests.
#[cfg(test)]
fn current() -> (u32, u32) {
    (current_fsuid(), current_fsgid())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(uid: u32, gids: &[u32]) -> Creds {
        Creds {
            name: "t".into(),
            uid,
            gids: gids.to_vec(),
            anonymous: false,
        }
    }

    #[test]
    fn switch_is_per_thread_and_restored() {
        if Mode::detect() != Mode::PerRequest {
            eprintln!("skipped: credential switching needs root");
            return;
        }
        let s = Switcher::new(Mode::PerRequest);
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"x").unwrap();
        std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        // While one thread acts as uid 4242, another (still root) is unaffected.
        let (tx, rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let p2 = secret.clone();
        let t = std::thread::spawn(move || {
            s.run(&creds(4242, &[4243, 4244]), || {
                let seen = current();
                tx.send(()).unwrap();
                go_rx.recv().unwrap();
                let denied = std::fs::read(&p2).is_err();
                (seen, denied)
            })
            .unwrap()
        });
        rx.recv().unwrap();
        assert_eq!(current(), (0, 0), "other threads keep root");
        assert!(std::fs::read(&secret).is_ok());
        go_tx.send(()).unwrap();
        let ((uid, gid), denied) = t.join().unwrap();
        assert_eq!((uid, gid), (4242, 4243));
        assert!(denied, "a 0600 root file is unreadable as uid 4242");
        // After the operation the thread is root again.
        let after = std::thread::spawn(move || {
            s.run(&creds(4242, &[4243]), || ()).unwrap();
            current()
        })
        .join()
        .unwrap();
        assert_eq!(after, (0, 0));
    }

    #[test]
    fn supplementary_groups_apply() {
        if Mode::detect() != Mode::PerRequest {
            eprintln!("skipped: credential switching needs root");
            return;
        }
        let s = Switcher::new(Mode::PerRequest);
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("group-only");
        std::fs::write(&f, b"g").unwrap();
        std::os::unix::fs::chown(&f, Some(0), Some(4244)).unwrap();
        std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o040)).unwrap();
        // Readable only through the second (supplementary) group.
        let with_group = s.run(&creds(4242, &[4243, 4244]), || std::fs::read(&f).is_ok());
        let without = s.run(&creds(4242, &[4243]), || std::fs::read(&f).is_ok());
        assert_eq!((with_group.unwrap(), without.unwrap()), (true, false));
    }

    #[test]
    fn as_server_nests_inside_a_request() {
        if Mode::detect() != Mode::PerRequest {
            eprintln!("skipped: credential switching needs root");
            return;
        }
        let s = Switcher::new(Mode::PerRequest);
        let c = creds(4242, &[4243]);
        let (inner, after_inner) = s
            .run(&c, || {
                let inner = s.as_server(&c, current);
                (inner, current())
            })
            .unwrap();
        assert_eq!(inner, (0, 0));
        assert_eq!(after_inner, (4242, 4243));
    }
}
