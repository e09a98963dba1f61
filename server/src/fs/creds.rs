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
//!
//! Each credential change the kernel makes costs a copy of the thread's credentials (2 us and
//! more on the machines measured, more than most requests' own system calls), and a switch
//! and its restore made six of them. So the restore gives back only the fsuid, and a request
//! changes the thread's fsgid and supplementary groups only where they differ from the last
//! request's ([`apply`], [`set_groups`]): one user's requests cost two changes, not six.
//! Between requests a thread therefore has fsuid 0 and root's file-system capabilities, with
//! which the fsgid and the groups decide no permission (`CAP_DAC_OVERRIDE`, `CAP_FOWNER`,
//! `CAP_CHOWN` and `CAP_FSETID` override every check they take part in); the fsgid still
//! gives a new file its group, so what sfsd creates for itself on such a thread sets its
//! owner explicitly (the reply journal). A request still always runs with exactly its own
//! fsuid, fsgid and groups. (Where the exported file system ignores root's capabilities, a
//! network file system mapping root to nobody, the export walk, which runs as root, would
//! search with the last request's groups; the walk only indexes, and every access is still
//! checked under the request's credentials.)

use std::cell::{Cell, RefCell};

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
    /// The supplementary groups [`set_groups`] last gave this thread (None: not set here yet,
    /// so not known). Nothing else in sfsd changes them.
    static GROUPS: RefCell<Option<Vec<u32>>> = const { RefCell::new(None) };
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

/// Gives the calling thread the supplementary groups `groups` (the first [`MAX_GROUPS`]),
/// unless it has them already.
fn set_groups(groups: &[u32]) -> std::io::Result<()> {
    let groups = &groups[..groups.len().min(MAX_GROUPS)];
    GROUPS.with(|current| {
        let mut current = current.borrow_mut();
        if current.as_deref() == Some(groups) {
            return Ok(());
        }
        // -1 is no group (the kernel would refuse it, and `Gid` must not hold it). A refused
        // set changes nothing: what `current` says stays true.
        if groups.contains(&u32::MAX) {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        let gids: Vec<Gid> = groups.iter().map(|&g| Gid::from_raw(g)).collect();
        rustix::thread::set_thread_groups(&gids)?;
        *current = Some(groups.to_vec());
        Ok(())
    })
}

/// Applies a request's credentials to the calling thread: its groups first (which needs
/// CAP_SETGID, which a non-zero fsuid does not drop), then its fsgid (if the thread's is
/// another: reading it back changes nothing, so costs no copy), then its fsuid (which, away
/// from 0, drops the file-system capabilities). Returns an error if the kernel refused any
/// part.
fn apply(uid: u32, gid: u32, groups: &[u32]) -> std::io::Result<()> {
    set_groups(groups)?;
    if current_fsgid() != gid {
        set_fsgid(gid);
    }
    set_fsuid(uid);
    if current_fsuid() != uid || current_fsgid() != gid {
        return Err(std::io::Error::other(format!(
            "the kernel refused fsuid {uid} / fsgid {gid}"
        )));
    }
    Ok(())
}

/// Gives the calling thread the server's own fsuid back, and with it root's file-system
/// capabilities; its fsgid and groups stay (the module docs say why).
fn restore() -> std::io::Result<()> {
    set_fsuid(0);
    if current_fsuid() != 0 {
        return Err(std::io::Error::other("the kernel refused fsuid 0"));
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
                if let Err(e) = restore() {
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
        if let Err(e) = restore() {
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

    /// The switcher of a server running as root; None (saying the test skips) otherwise.
    fn per_request() -> Option<Switcher> {
        if Mode::detect() != Mode::PerRequest {
            eprintln!("skipped: credential switching needs root");
            return None;
        }
        Some(Switcher::new(Mode::PerRequest))
    }

    /// A file `name` in `dir`, owned by `uid`:`gid`, with `mode`.
    fn file(
        dir: &std::path::Path,
        name: &str,
        (uid, gid): (u32, u32),
        mode: u32,
    ) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let f = dir.join(name);
        std::fs::write(&f, name).unwrap();
        std::os::unix::fs::chown(&f, Some(uid), Some(gid)).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
        f
    }

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
        let Some(s) = per_request() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let secret = file(dir.path(), "secret", (0, 0), 0o600);
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
        // After the operation the thread has root's fsuid and capabilities again (its fsgid
        // stays the request's until the next request: module docs): the 0600 file opens.
        let after = std::thread::spawn(move || {
            s.run(&creds(4242, &[4243]), || ()).unwrap();
            (current(), std::fs::read(&secret).is_ok())
        })
        .join()
        .unwrap();
        assert_eq!(after, ((0, 4243), true));
    }

    #[test]
    fn supplementary_groups_apply() {
        let Some(s) = per_request() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let f = file(dir.path(), "group-only", (0, 4244), 0o040);
        // Readable only through the second (supplementary) group.
        let with_group = s.run(&creds(4242, &[4243, 4244]), || std::fs::read(&f).is_ok());
        let without = s.run(&creds(4242, &[4243]), || std::fs::read(&f).is_ok());
        assert_eq!((with_group.unwrap(), without.unwrap()), (true, false));
    }

    /// The calling thread's supplementary groups, as the kernel has them (sorted).
    fn thread_groups() -> Vec<u32> {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("Groups:")).unwrap();
        line["Groups:".len()..]
            .split_whitespace()
            .map(|g| g.parse().unwrap())
            .collect()
    }

    #[test]
    fn each_request_runs_with_exactly_its_own_ids_and_groups() {
        let Some(s) = per_request() else {
            return;
        };
        std::thread::spawn(move || {
            let seen = |c: &Creds| s.run(c, || (current(), thread_groups())).unwrap();
            // Its fsuid and fsgid, and its groups as the kernel lists them (sorted).
            let own = |c: &Creds| {
                let mut g = c.gids.clone();
                g.sort_unstable();
                ((c.uid, c.primary_gid()), g)
            };
            let two = creds(4242, &[4243, 4244]);
            let one = creds(4242, &[4243]);
            let other = creds(4250, &[4251, 4244]);
            // The same groups again, fewer, another user's, none (the anonymous user has no
            // groups), and the same again after each: every request sees exactly its own ids
            // and groups.
            for c in [
                &two,
                &two,
                &one,
                &two,
                &other,
                &one,
                &creds(4242, &[]),
                &two,
            ] {
                assert_eq!(seen(c), own(c), "credentials of {c:?}");
            }
            // Between requests the thread has the server's fsuid again.
            assert_eq!(current().0, 0);
            // A set of groups that cannot be applied (an invalid gid) fails the request
            // without running it; the next request still gets exactly its own.
            let refused = s.run(&creds(4242, &[4243, u32::MAX]), thread_groups);
            assert!(refused.is_err(), "an invalid gid was accepted: {refused:?}");
            assert_eq!(current().0, 0);
            for c in [&one, &two, &two] {
                assert_eq!(seen(c), own(c), "credentials of {c:?} after a refused set");
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn as_server_nests_inside_a_request() {
        let Some(s) = per_request() else {
            return;
        };
        let c = creds(4242, &[4243]);
        let dir = tempfile::tempdir().unwrap();
        let other = file(dir.path(), "other", (4300, 4300), 0o600);
        let readable = || std::fs::read(&other).is_ok();
        let ((inner, inner_reads), after_inner, reads) = s
            .run(&c, || {
                let inner = s.as_server(&c, || (current().0, readable()));
                (inner, current(), readable())
            })
            .unwrap();
        // Inside, the server's fsuid and capabilities: another user's 0600 file opens.
        assert_eq!((inner, inner_reads), (0, true));
        // Back to the request's credentials, under which it does not.
        assert_eq!((after_inner, reads), ((4242, 4243), false));
    }
}
