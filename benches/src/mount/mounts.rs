//! The two mounts compared: `sfs mount -f` (FUSE) against a local sfsd, and sshfs against a
//! throwaway sshd (the one `read --peer sftp` uses) with the same AEAD; and, as the bound
//! both aim at, the exported directory itself (no mount). Each is a foreground
//! child process, so its CPU time can be read from /proc while it runs, and each is
//! unmounted with `fusermount3 -u` (lazily, and killed after a timeout, so none stays).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::read::servers::process_cpu_time;
use crate::read::sftp::{Sshd, process_tree};

/// How long a mount may take to appear in /proc/self/mountinfo.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a mount process may take to exit after its unmount.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);

/// Which file system a mount is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum System {
    /// `sfs mount` (FUSE) to sfsd.
    Sfs,
    /// sshfs to OpenSSH's sshd (internal-sftp).
    Sshfs,
    /// No mount: the exported directory itself, what a network file system aims at.
    Local,
}

impl System {
    pub(super) fn name(self) -> &'static str {
        match self {
            System::Sfs => "sfs",
            System::Sshfs => "sshfs",
            System::Local => "local",
        }
    }
}

/// How to mount each system (what stays the same across mounts of one run).
pub(super) struct Recipe {
    /// `sfs` binary, identity file, user name, server name.
    pub sfs: PathBuf,
    pub identity: PathBuf,
    pub user: String,
    pub server: String,
    /// sshfs target: the export directory as the ssh user sees it.
    pub sshfs_remote: String,
    /// The exported directory (the local system's "mount").
    pub export: PathBuf,
}

/// A mounted file system; unmounted on drop. For [`System::Local`] there is no mount nor
/// process: `dir` is the exported directory itself.
pub(super) struct Mounted {
    pub dir: PathBuf,
    child: Option<Child>,
    system: System,
}

/// Whether `dir` is a FUSE mount point of file-system type `fstype` (e.g. `fuse.sfs`).
fn is_mounted(dir: &Path, fstype: &str) -> bool {
    let want = dir.to_string_lossy().replace(' ', "\\040");
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(&want) && l.contains(&format!(" - {fstype} ")))
}

impl Mounted {
    /// Mounts `system` on `dir` (created if needed) and waits until the kernel shows it.
    pub(super) fn mount(
        system: System,
        recipe: &Recipe,
        sshd: Option<&Sshd>,
        dir: &Path,
        log: &Path,
    ) -> anyhow::Result<Mounted> {
        if system == System::Local {
            return Ok(Mounted {
                dir: recipe.export.clone(),
                child: None,
                system,
            });
        }
        std::fs::create_dir_all(dir)?;
        let dir = dir.canonicalize()?;
        let (mut cmd, fstype) = match system {
            System::Local => unreachable!("no mount for the local directory"),
            System::Sfs => {
                let mut c = Command::new(&recipe.sfs);
                c.arg("--identity")
                    .arg(&recipe.identity)
                    .arg("--user")
                    .arg(&recipe.user)
                    .args(["mount", "-f", &recipe.server])
                    .arg(&dir)
                    .arg("--log")
                    .arg(log);
                (c, "fuse.sfs")
            }
            System::Sshfs => {
                let sshd = sshd.context("sshfs needs the sshd")?;
                let mut c = Command::new("sshfs");
                c.arg("-f")
                    .arg(&recipe.sshfs_remote)
                    .arg(&dir)
                    .arg("-o")
                    .arg(format!(
                        "port={},IdentityFile={},StrictHostKeyChecking=no,\
                         UserKnownHostsFile=/dev/null,LogLevel=ERROR,\
                         Ciphers=chacha20-poly1305@openssh.com",
                        sshd.port(),
                        sshd.client_key().display()
                    ));
                (c, "fuse.sshfs")
            }
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting the {} mount", system.name()))?;
        let mut m = Mounted {
            dir,
            child: Some(child),
            system,
        };
        let deadline = Instant::now() + MOUNT_TIMEOUT;
        while !is_mounted(&m.dir, fstype) {
            if let Some(Ok(Some(status))) = m.child.as_mut().map(Child::try_wait) {
                bail!(
                    "{} mount exited ({status}) before mounting; see {}",
                    system.name(),
                    log.display()
                );
            }
            if Instant::now() > deadline {
                bail!("{} did not mount within {MOUNT_TIMEOUT:?}", system.name());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(m)
    }

    /// CPU time of the client side: the sfs process, or sshfs and its ssh child.
    pub(super) fn cpu_time(&self) -> Duration {
        let Some(child) = &self.child else {
            return Duration::ZERO;
        };
        let pids = match self.system {
            System::Sfs => vec![child.id()],
            System::Sshfs => process_tree(child.id()),
            System::Local => Vec::new(),
        };
        pids.into_iter().filter_map(process_cpu_time).sum()
    }

    /// Unmounts and waits for the mount process to exit (killed after a timeout).
    pub(super) fn unmount(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(child) = self.child.as_mut() else {
            return;
        };
        let _ = Command::new("fusermount3")
            .args(["-u", "-z", "--"])
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + EXIT_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(Ok(None)) = self.child.as_mut().map(Child::try_wait) {
            self.stop();
        }
    }
}
