//! The OpenSSH peer of `sfs-bench read --peer sftp`: a throwaway sshd on loopback (its own
//! host key, client key and config, pinned like sfsd), and one `sftp` session per client that
//! fetches a page-cached file to /dev/null over and over with a given cipher.
//!
//! Progress is counted from sftp's batch echo: each `sftp> get` line it prints starts a new
//! transfer, so the previous one completed. The file is small (16 MiB) so that counting whole
//! transfers loses little precision over a measured window of seconds.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// OpenSSH client options for the throwaway sshd on 127.0.0.1: its host key is new every run
/// and never recorded, and only errors are printed.
pub(crate) const CLIENT_OPTIONS: [&str; 6] = [
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "LogLevel=ERROR",
];

pub(crate) const SFTP_FILE: &str = "sftp.bin";
pub(crate) const SFTP_FILE_SIZE: u64 = 16 << 20;
pub(crate) const SSHD: &str = "/usr/sbin/sshd";

/// The ciphers compared (the same AEAD as sfs, and the usual hardware-accelerated default).
pub(crate) const CIPHERS: [&str; 2] = ["chacha20-poly1305@openssh.com", "aes128-gcm@openssh.com"];

/// Whether sshd, sftp and ssh-keygen are installed; `Err` says what is missing.
pub(crate) fn check_available() -> anyhow::Result<()> {
    if !Path::new(SSHD).is_file() {
        bail!("{SSHD} not found (install openssh-server)");
    }
    for tool in ["sftp", "ssh-keygen"] {
        let found = Command::new(tool)
            .arg("-?")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !found {
            bail!("`{tool}` not found (install openssh-client)");
        }
    }
    Ok(())
}

/// A running throwaway sshd.
pub(crate) struct Sshd {
    child: Child,
    port: u16,
    client_key: PathBuf,
}

fn keygen(path: &Path) -> anyhow::Result<()> {
    if path.exists() {
        return Ok(());
    }
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .status()?;
    if !status.success() {
        bail!("ssh-keygen failed for {}", path.display());
    }
    Ok(())
}

/// A port on 127.0.0.1 that nothing listens on now.
pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Host key, client key (authorized) and an `sshd_config` under `dir` for an sshd listening
/// on `listen:port` with the one cipher `cipher`; returns the config's path.
pub(crate) fn write_config(
    dir: &Path,
    listen: &str,
    port: u16,
    cipher: &str,
) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    // sshd insists on its privilege-separation directory.
    let _ = std::fs::create_dir_all("/run/sshd");
    let host_key = dir.join("host_ed25519");
    let client_key = dir.join("client_ed25519");
    keygen(&host_key)?;
    keygen(&client_key)?;
    std::fs::copy(
        client_key.with_extension("pub"),
        dir.join("authorized_keys"),
    )?;
    let config = dir.join("sshd_config");
    std::fs::write(
        &config,
        format!(
            "Port {port}\nListenAddress {listen}\nHostKey {}\nAuthorizedKeysFile {}\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
             PermitRootLogin prohibit-password\nUsePAM no\nStrictModes no\nPidFile {}\n\
             Subsystem sftp internal-sftp\nCiphers {cipher}\nLogLevel ERROR\n",
            host_key.display(),
            dir.join("authorized_keys").display(),
            dir.join("sshd.pid").display(),
        ),
    )?;
    Ok(config)
}

/// The client key [`write_config`] made under `dir`.
pub(crate) fn client_key_in(dir: &Path) -> PathBuf {
    dir.join("client_ed25519")
}

impl Sshd {
    pub(crate) fn start(dir: &Path, cpus: &[usize], cipher: &str) -> anyhow::Result<Sshd> {
        let port = free_port()?;
        let config = write_config(dir, "127.0.0.1", port, cipher)?;
        let client_key = client_key_in(dir);
        let cpu_list = cpus
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let child = Command::new("taskset")
            .args(["-c", &cpu_list, SSHD, "-D", "-e", "-f"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting sshd")?;
        let mut sshd = Sshd {
            child,
            port,
            client_key,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline || matches!(sshd.child.try_wait(), Ok(Some(_))) {
                sshd.kill();
                bail!("sshd did not start listening on 127.0.0.1:{port}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(sshd)
    }

    /// Process ids of sshd and every process it forked (one per connection).
    pub(crate) fn processes(&self) -> Vec<u32> {
        process_tree(self.child.id())
    }

    /// The port it listens on (127.0.0.1).
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// The private key it accepts.
    pub(crate) fn client_key(&self) -> &Path {
        &self.client_key
    }

    /// CPU time of sshd and every process it forked (one per connection).
    pub(crate) fn cpu_time(&self) -> Duration {
        self.cpu_times().total()
    }

    /// The same, user and system apart.
    pub(crate) fn cpu_times(&self) -> crate::procs::CpuTimes {
        process_tree_cpu_times(self.child.id())
    }

    fn kill(&mut self) {
        for pid in process_tree(self.child.id()).into_iter().rev() {
            crate::procs::signal(pid, rustix::process::Signal::KILL);
        }
        let _ = self.child.wait();
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// CPU time of `pid` and all its descendants alive now.
pub(crate) fn process_tree_cpu_times(pid: u32) -> crate::procs::CpuTimes {
    process_tree(pid)
        .into_iter()
        .filter_map(crate::procs::cpu_times)
        .sum()
}

/// `pid` and all its descendants (from /proc), parents first.
pub(crate) fn process_tree(pid: u32) -> Vec<u32> {
    let mut parent_of = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(child) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
                continue;
            };
            let ppid = stat
                .rfind(')')
                .and_then(|i| stat[i + 2..].split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if let Some(ppid) = ppid {
                parent_of.push((child, ppid));
            }
        }
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    tree
}

/// One sftp session fetching `file` to /dev/null in a loop, pinned to `cpu`; counts whole
/// transfers into `completed`.
pub(crate) struct SftpClient {
    child: Child,
}

impl SftpClient {
    pub(crate) fn start(
        sshd: &Sshd,
        cpu: usize,
        cipher: &str,
        file: &Path,
        completed: Arc<AtomicU64>,
    ) -> anyhow::Result<SftpClient> {
        let user = std::env::var("USER").unwrap_or_else(|_| "root".to_string());
        let mut child = Command::new("taskset")
            .args(["-c", &cpu.to_string(), "sftp", "-b", "-", "-i"])
            .arg(&sshd.client_key)
            .args(["-P", &sshd.port.to_string(), "-c", cipher])
            .args(CLIENT_OPTIONS)
            .arg(format!("{user}@127.0.0.1"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting sftp")?;
        let mut stdin = child.stdin.take().context("sftp stdin")?;
        let stdout = child.stdout.take().context("sftp stdout")?;
        let command = format!("get {} /dev/null\n", file.display());
        std::thread::spawn(move || while stdin.write_all(command.as_bytes()).is_ok() {});
        std::thread::spawn(move || {
            let mut started = 0u64;
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with("sftp> get") {
                    started += 1;
                    completed.store(started.saturating_sub(1), Relaxed);
                }
            }
        });
        Ok(SftpClient { child })
    }
}

impl SftpClient {
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for SftpClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
