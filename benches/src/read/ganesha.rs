//! `--backend nfs`: NFS-Ganesha (VFS FSAL) exporting the benchmark's export directories on
//! 127.0.0.1, with sfsd in front of it: the paper's setup, where the SFS server reached the
//! disk through the local NFS server.
//!
//! Ganesha registers with rpcbind for NFSv3; to leave the machine's own rpcbind alone, the
//! group runs in a private mount namespace with a tmpfs on `/run` (its own
//! `/run/rpcbind.sock`) and rpcbind in a private network namespace. Needs root and the
//! Debian packages `nfs-ganesha nfs-ganesha-vfs rpcbind`. Killed (process group) on drop.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

pub(super) struct Ganesha {
    child: Child,
    nfs_port: u16,
    mount_port: u16,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Ganesha {
    /// Exports `exports[i]` as `/e{i}`; config and log go in `dir`.
    pub(super) fn start(dir: &Path, exports: &[PathBuf]) -> anyhow::Result<Ganesha> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            bail!("--backend nfs runs NFS-Ganesha, which needs root");
        }
        let (nfs_port, mount_port) = (free_port()?, free_port()?);
        let mut conf = format!(
            "NFS_CORE_PARAM {{ Bind_Addr = 127.0.0.1; NFS_Port = {nfs_port}; \
             MNT_Port = {mount_port}; Protocols = 3; Enable_NLM = false; Enable_RQUOTA = false; \
             Enable_UDP = false; Mount_Path_Pseudo = true; }}\n\
             NFS_KRB5 {{ Active_krb5 = false; }}\n"
        );
        for (i, e) in exports.iter().enumerate() {
            conf.push_str(&format!(
                "EXPORT {{ Export_Id = {}; Path = {}; Pseudo = /e{i}; Access_Type = RW; \
                 Squash = No_Root_Squash; SecType = sys; Protocols = 3; Transports = TCP; \
                 FSAL {{ Name = VFS; }} }}\n",
                i + 1,
                e.display()
            ));
        }
        let conf_path = dir.join("ganesha.conf");
        std::fs::write(&conf_path, conf)?;
        let script = format!(
            "mount -t tmpfs tmpfs /run && mkdir -p /run/ganesha || exit 1
unshare -n rpcbind -f -w &
for i in $(seq 100); do [ -S /run/rpcbind.sock ] && break; sleep 0.02; done
exec ganesha.nfsd -F -f '{}' -L '{}' -p /run/ganesha/ganesha.pid -N NIV_EVENT",
            conf_path.display(),
            dir.join("ganesha.log").display()
        );
        let child = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .context(
                "starting NFS-Ganesha (apt-get install nfs-ganesha nfs-ganesha-vfs rpcbind)",
            )?;
        let mut g = Ganesha {
            child,
            nfs_port,
            mount_port,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        for port in [mount_port, nfs_port] {
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
                if let Ok(Some(st)) = g.child.try_wait() {
                    bail!(
                        "NFS-Ganesha exited ({st}); see {}",
                        dir.join("ganesha.log").display()
                    );
                }
                if Instant::now() > deadline {
                    bail!("NFS-Ganesha not listening on {port} after 10 s");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(g)
    }

    /// CPU time of NFS-Ganesha and rpcbind (the process tree started here).
    pub(super) fn cpu_times(&self) -> crate::procs::CpuTimes {
        super::sftp::process_tree_cpu_times(self.child.id())
    }

    /// sfsd's `--backend` URL for export `i`.
    pub(super) fn url(&self, i: usize) -> String {
        format!(
            "nfs://127.0.0.1:{}/e{i}?mountport={}",
            self.nfs_port, self.mount_port
        )
    }
}

impl Drop for Ganesha {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group we created; its leader is unreaped, so the id
        // cannot name another group.
        unsafe {
            libc::kill(-(self.child.id() as i32), libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}
