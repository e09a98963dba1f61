//! Starting, measuring and stopping `sfsd` processes for the read experiment.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use protocol::ServerName;

/// How long a server may take to print its name.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a server may take to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// Where the `sfsd` binary is: `--sfsd`, else next to this executable (`cargo build --release`
/// puts both in `target/release`).
pub(crate) fn locate_sfsd(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    locate_binary("sfsd", explicit)
}

/// Where the `name` binary is: `explicit` (its `--NAME` flag), else next to this executable.
pub(crate) fn locate_binary(name: &str, explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(path) = explicit {
        return Ok(path.to_path_buf());
    }
    let me = std::env::current_exe().context("locating sfs-bench")?;
    let candidate = me.with_file_name(name);
    if candidate.is_file() {
        return Ok(candidate);
    }
    bail!(
        "cannot find {name} next to {} (build it with `cargo build --release -p {name}`, or pass --{name} PATH)",
        me.display()
    )
}

/// `sfs keygen --out KEY` with `HOME=home` (nothing of the caller's own `~/.sfs` is touched);
/// returns the public key it prints last, for a users file.
pub(crate) fn sfs_keygen(sfs: &Path, home: &Path, key: &Path) -> anyhow::Result<String> {
    let out = Command::new(sfs)
        .env("HOME", home)
        .args(["keygen", "--force", "--out"])
        .arg(key)
        .output()
        .context("running sfs keygen")?;
    if !out.status.success() {
        bail!("sfs keygen: {}", String::from_utf8_lossy(&out.stderr));
    }
    String::from_utf8(out.stdout)?
        .lines()
        .last()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .context("sfs keygen printed no key")
}

/// Writes a users file at `path` with one line: `user` with `public_key`, mapped to the owner
/// (uid, gid) of `export`, so the benchmark user may read and write the export.
pub(crate) fn write_users_file(
    path: &Path,
    user: &str,
    public_key: &impl std::fmt::Display,
    export: &Path,
) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(export)
        .with_context(|| format!("reading the owner of {}", export.display()))?;
    std::fs::write(
        path,
        format!("{user} {public_key} {} {}\n", owner.uid(), owner.gid()),
    )
    .with_context(|| format!("writing {}", path.display()))
}

/// A running `sfsd serve`.
pub(crate) struct Server {
    child: Child,
    pub name: ServerName,
    lines: Receiver<String>,
}

/// What the server reported about itself at shutdown (`--stats`).
#[derive(Debug, Default, Clone)]
pub(crate) struct ServerStats {
    pub serial_fraction: Option<f64>,
}

impl Server {
    /// Starts `sfsd serve` pinned (with taskset) to `cpus`, with `mode` flags such as
    /// `--workers 2` or `--uniprocessor`, serving `export` or, with a `backend` URL, that NFS
    /// server's export.
    pub(crate) fn start(
        sfsd: &Path,
        cpus: &[usize],
        mode: &[String],
        state: &Path,
        export: &Path,
        backend: Option<&str>,
        users: &Path,
    ) -> anyhow::Result<Server> {
        let cpu_list = cpus
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let mut child = Command::new("taskset")
            .arg("-c")
            .arg(&cpu_list)
            .arg(sfsd)
            .arg("serve")
            .arg("--state")
            .arg(state)
            .args(match backend {
                Some(url) => ["--backend".as_ref(), url.as_ref()],
                None => ["--export".as_ref(), export.as_os_str()],
            })
            .arg("--users")
            .arg(users)
            .args(["--listen", "127.0.0.1:0", "--stats"])
            .args(mode)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting taskset -c {cpu_list} {}", sfsd.display()))?;
        let stdout = child.stdout.take().context("sfsd stdout")?;
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(name) = line
                        .split_whitespace()
                        .find(|word| word.starts_with('@'))
                        .and_then(|word| word.parse::<ServerName>().ok())
                    {
                        return Ok(Server { child, name, lines });
                    }
                }
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    bail!("sfsd did not print its name within {START_TIMEOUT:?}");
                }
            }
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// User + system CPU time of the server process (all threads), from /proc.
    pub(crate) fn cpu_time(&self) -> Duration {
        self.cpu_times().total()
    }

    /// The server process's CPU time (all threads), user and system apart.
    pub(crate) fn cpu_times(&self) -> crate::procs::CpuTimes {
        crate::procs::cpu_times(self.child.id()).unwrap_or_default()
    }

    /// SIGTERM, wait (kill after a timeout), and parse the `sfsd-stats:` line if printed.
    pub(crate) fn stop(mut self) -> ServerStats {
        crate::procs::signal(self.child.id(), rustix::process::Signal::TERM);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let mut stats = ServerStats::default();
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(500)) {
            if std::env::var_os("SFS_BENCH_DEBUG").is_some() {
                eprintln!("[sfsd] {line}");
            }
            if let Some(json) = line.strip_prefix("sfsd-stats:")
                && let Ok(value) = serde_json::from_str::<serde_json::Value>(json.trim())
            {
                stats.serial_fraction = value.get("serial_fraction").and_then(|v| v.as_f64());
            }
        }
        stats
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// utime + stime of a process.
pub(crate) fn process_cpu_time(pid: u32) -> Option<Duration> {
    crate::procs::cpu_time(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_cpu_time() {
        let until = Instant::now() + Duration::from_millis(50);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        let t = process_cpu_time(std::process::id()).unwrap();
        assert!(t > Duration::ZERO);
    }
}
