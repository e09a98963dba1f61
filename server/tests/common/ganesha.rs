//! NFS-Ganesha for the NFS-backend runs of the server tests.
//!
//! With `SFSD_TEST_BACKEND=nfs`, [`super::Sfsd::start_with`] starts a private NFS-Ganesha
//! exporting the test's `export/` directory on 127.0.0.1 and runs sfsd in front of it
//! (`--backend nfs://...`), so the same tests check both backends. Ganesha needs an rpcbind
//! registration for NFSv3; each instance gets its own: the whole group runs in a private
//! mount namespace with a fresh tmpfs on `/run` (its own `/run/rpcbind.sock`), and rpcbind in
//! a private network namespace (its listeners unreachable, Ganesha registers through the
//! socket). Everything runs in one process group, killed on drop.
//!
//! Needs root and the Debian packages `nfs-ganesha nfs-ganesha-vfs rpcbind` (`.ci/run`
//! installs them and skips this run, saying so, where it cannot).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether the tests run against the NFS backend.
pub(crate) fn enabled() -> bool {
    std::env::var("SFSD_TEST_BACKEND").is_ok_and(|v| v == "nfs")
}

/// Why Ganesha cannot run here, if it cannot.
pub(crate) fn unavailable() -> Option<String> {
    for bin in ["ganesha.nfsd", "rpcbind", "unshare"] {
        let found = std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
            || Path::new("/usr/sbin").join(bin).is_file();
        if !found {
            return Some(format!(
                "{bin} not found (apt-get install nfs-ganesha nfs-ganesha-vfs rpcbind)"
            ));
        }
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("NFS-Ganesha needs root".into());
    }
    None
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running Ganesha (and its rpcbind), killed with its process group on drop.
pub(crate) struct Ganesha {
    child: Option<Child>,
    pub nfs_port: u16,
    pub mount_port: u16,
}

impl Ganesha {
    /// Starts Ganesha exporting `export` as `/`; files (config, log) go in `dir`.
    pub(crate) fn start(dir: &Path, export: &Path) -> Ganesha {
        if let Some(why) = unavailable() {
            panic!("SFSD_TEST_BACKEND=nfs but NFS-Ganesha cannot run: {why}");
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (nfs_port, mount_port) = (free_port(), free_port());
            if nfs_port == mount_port {
                continue;
            }
            match Ganesha::try_start(dir, export, nfs_port, mount_port) {
                Ok(g) => return g,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("ganesha did not start ({e}), retrying with other ports");
                }
                Err(e) => panic!(
                    "NFS-Ganesha did not start: {e}\n{}",
                    std::fs::read_to_string(dir.join("ganesha.log")).unwrap_or_default()
                ),
            }
        }
    }

    fn try_start(
        dir: &Path,
        export: &Path,
        nfs_port: u16,
        mount_port: u16,
    ) -> Result<Ganesha, String> {
        let conf = dir.join("ganesha.conf");
        let log = dir.join("ganesha.log");
        std::fs::write(
            &conf,
            format!(
                "NFS_CORE_PARAM {{
    Bind_Addr = 127.0.0.1;
    NFS_Port = {nfs_port};
    MNT_Port = {mount_port};
    Protocols = 3;
    Enable_NLM = false;
    Enable_RQUOTA = false;
    Enable_UDP = false;
    Mount_Path_Pseudo = true;
}}
NFS_KRB5 {{ Active_krb5 = false; }}
EXPORT {{
    Export_Id = 1;
    Path = {export};
    Pseudo = /;
    Access_Type = RW;
    Squash = No_Root_Squash;
    SecType = sys;
    Protocols = 3;
    Transports = TCP;
    # The tests change the export behind Ganesha's back: no cached attributes.
    Attr_Expiration_Time = 0;
    FSAL {{ Name = VFS; }}
}}
",
                export = export.display()
            ),
        )
        .unwrap();
        let script = format!(
            "mount -t tmpfs tmpfs /run && mkdir -p /run/ganesha || exit 1
unshare -n rpcbind -f -w &
for i in $(seq 100); do [ -S /run/rpcbind.sock ] && break; sleep 0.02; done
exec ganesha.nfsd -F -f '{}' -L '{}' -p /run/ganesha/ganesha.pid -N NIV_EVENT",
            conf.display(),
            log.display()
        );
        let child = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("spawning unshare: {e}"))?;
        let mut g = Ganesha {
            child: Some(child),
            nfs_port,
            mount_port,
        };
        // Ready once both services accept connections (about 0.1 s).
        let deadline = Instant::now() + Duration::from_secs(10);
        for port in [mount_port, nfs_port] {
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
                if let Some(c) = &mut g.child
                    && let Ok(Some(st)) = c.try_wait()
                {
                    return Err(format!("exited with {st}"));
                }
                if Instant::now() > deadline {
                    return Err(format!("port {port} not listening after 10 s"));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(g)
    }

    /// Stops Ganesha and starts it again on the same ports (a backend restart).
    pub(crate) fn restart(&mut self, dir: &Path, export: &Path) {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match Ganesha::try_start(dir, export, self.nfs_port, self.mount_port) {
                Ok(mut g) => {
                    self.child = g.child.take();
                    return;
                }
                Err(e) if Instant::now() < deadline => {
                    eprintln!("ganesha did not restart ({e}), retrying");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("NFS-Ganesha did not restart: {e}"),
            }
        }
    }

    /// The `--backend` URL for sfsd.
    pub(crate) fn url(&self) -> String {
        format!(
            "nfs://127.0.0.1:{}/?mountport={}",
            self.nfs_port, self.mount_port
        )
    }

    /// Kills Ganesha and rpcbind (the whole process group) and waits for them.
    pub(crate) fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) on the process group this harness created (the group id is the
            // leader's pid, which is still unreaped, so it cannot name another group).
            unsafe {
                libc::kill(-(c.id() as i32), libc::SIGKILL);
            }
            let _ = c.wait();
        }
    }
}

impl Drop for Ganesha {
    fn drop(&mut self) {
        self.stop();
    }
}
