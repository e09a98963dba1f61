//! The servers in namespace `b` (sfsd, nginx over TLS 1.3, a throwaway OpenSSH sshd) and the
//! clients run from namespace `a` (`sfs get`/`put`, curl, sftp), each client timed from
//! process start to exit.
//!
//! Servers are started with `ip netns exec`, which execs them in place, so each child's pid
//! is the server's own (its CPU time and process tree are read from /proc). They listen on
//! fixed ports (4004, 443, 22): the namespace is new and empty. Readiness is read from
//! /proc/PID/net/tcp, the socket table of the server's namespace, since this process, in the
//! root namespace, cannot connect to them.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use protocol::ServerName;

use super::link::{Cleanup, Link, SERVER_ADDR, kill_tree, wait_listening};
use crate::procs::CpuTimes;
use crate::read::{nginx, sftp};

pub(super) const SFSD_PORT: u16 = 4004;
pub(super) const HTTPS_PORT: u16 = 443;
pub(super) const SSH_PORT: u16 = 22;
/// The TLS 1.3 suite nginx offers: AES-256-GCM, the AEAD `sfs` picks on a CPU with AES
/// instructions.
pub(super) const TLS_SUITE: &str = nginx::CIPHERS[1];
/// The SSH cipher: AES-GCM as well (OpenSSH's hardware-accelerated default family).
pub(super) const SSH_CIPHER: &str = "aes256-gcm@openssh.com";

/// A server process in namespace `b`: its process tree is stopped (SIGTERM, then SIGKILL
/// after 5 s) when dropped, and killed by the signal-time cleanup if the run is interrupted.
pub(super) struct NsServer {
    child: Child,
    what: &'static str,
}

impl NsServer {
    fn spawn(mut cmd: Command, what: &'static str) -> anyhow::Result<NsServer> {
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {what}: {cmd:?}"))?;
        Cleanup::add_pid(child.id());
        Ok(NsServer { child, what })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A function listing the server's processes now (sshd forks one per connection).
    pub(super) fn processes_fn(&self) -> Box<dyn Fn() -> Vec<u32> + Send> {
        let pid = self.pid();
        Box::new(move || sftp::process_tree(pid))
    }
}

impl Drop for NsServer {
    fn drop(&mut self) {
        let pid = self.child.id();
        crate::procs::signal(pid, rustix::process::Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && !matches!(self.child.try_wait(), Ok(Some(_))) {
            std::thread::sleep(Duration::from_millis(20));
        }
        // Only a child not yet reaped may be signalled by pid (a reaped one's pid may be
        // someone else's by now); what it leaves behind dies with its namespace (`Link`).
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            eprintln!("wan: {} did not stop on SIGTERM; killing it", self.what);
            kill_tree(pid);
            let _ = self.child.wait();
        }
        Cleanup::remove_pid(pid);
    }
}

/// sfsd serving `export` on 10.77.0.2:4004 in namespace `b`, with its self-certifying name.
pub(super) fn start_sfsd(
    link: &Link,
    sfsd: &Path,
    work: &Path,
    export: &Path,
    users: &Path,
    workers: usize,
) -> anyhow::Result<(NsServer, ServerName)> {
    let mut cmd = Link::command_in(&link.ns_b, sfsd);
    cmd.arg("serve")
        .arg("--state")
        .arg(work.join("sfsd-state"))
        .arg("--export")
        .arg(export)
        .arg("--users")
        .arg(users)
        .args(["--listen", &format!("{SERVER_ADDR}:{SFSD_PORT}")])
        .args(["--workers", &workers.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut server = NsServer::spawn(cmd, "sfsd")?;
    let stdout = server.child.stdout.take().context("sfsd stdout")?;
    let (tx, lines) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if std::env::var_os("SFS_BENCH_DEBUG").is_some() {
                eprintln!("[sfsd] {line}");
            }
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let name = loop {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                if let Some(name) = line
                    .split_whitespace()
                    .find(|w| w.starts_with('@'))
                    .and_then(|w| w.parse::<ServerName>().ok())
                {
                    break name;
                }
            }
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                bail!("sfsd did not print its name within 30 s")
            }
        }
    };
    wait_listening(server.pid(), SFSD_PORT, "sfsd")?;
    Ok((server, name))
}

/// nginx (TLS 1.3, one suite, the configuration `read --peer nginx` uses) on
/// 10.77.0.2:443, one worker per CPU.
pub(super) fn start_nginx(
    link: &Link,
    dir: &Path,
    root: &Path,
    cpus: usize,
) -> anyhow::Result<NsServer> {
    std::fs::create_dir_all(dir)?;
    let (cert, key) = nginx::certificate(dir)?;
    let conf = dir.join("nginx.conf");
    let cpus: Vec<usize> = (0..cpus).collect();
    std::fs::write(
        &conf,
        nginx::config(&nginx::Settings {
            dir,
            listen: SERVER_ADDR,
            port: HTTPS_PORT,
            cpus: &cpus,
            cipher: TLS_SUITE,
            root,
            cert: &cert,
            key: &key,
        }),
    )?;
    let mut cmd = Link::command_in(&link.ns_b, nginx::NGINX);
    nginx::nginx_args(&mut cmd, dir, &conf);
    let server = NsServer::spawn(cmd, "nginx")?;
    wait_listening(server.pid(), HTTPS_PORT, "nginx")
        .with_context(|| std::fs::read_to_string(dir.join("error.log")).unwrap_or_default())?;
    Ok(server)
}

/// A throwaway sshd (its own keys and config, as `read --peer sftp`) on 10.77.0.2:22; returns
/// it and the client key it accepts.
pub(super) fn start_sshd(link: &Link, dir: &Path) -> anyhow::Result<(NsServer, PathBuf)> {
    let config = sftp::write_config(dir, SERVER_ADDR, SSH_PORT, SSH_CIPHER)?;
    let mut cmd = Link::command_in(&link.ns_b, sftp::SSHD);
    cmd.args(["-D", "-e", "-f"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let server = NsServer::spawn(cmd, "sshd")?;
    wait_listening(server.pid(), SSH_PORT, "sshd")?;
    Ok((server, sftp::client_key_in(dir)))
}

/// One client run: its wall time from spawn to exit, CPU, and what it printed.
pub(super) struct ClientRun {
    pub wall: Duration,
    pub cpu: Duration,
    pub stdout: String,
}

/// Runs `cmd` (already in namespace `a`) to completion with `stdin` written to it; fails
/// with its stderr if it fails.
pub(super) fn run_client(
    mut cmd: Command,
    stdin: Option<&str>,
    what: &str,
) -> anyhow::Result<ClientRun> {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let before = crate::cputime::children_cpu_time();
    let t0 = Instant::now();
    let mut child = cmd.spawn().with_context(|| format!("starting {what}"))?;
    Cleanup::add_pid(child.id());
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())?;
    }
    let pid = child.id();
    let out = child.wait_with_output();
    let wall = t0.elapsed();
    Cleanup::remove_pid(pid);
    let out = out.with_context(|| format!("waiting for {what}"))?;
    let cpu = crate::cputime::children_cpu_time().saturating_sub(before);
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(ClientRun {
        wall,
        cpu,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
    })
}

/// curl's own timings of one download (`-w`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct CurlTimes {
    pub size: u64,
    pub connect: f64,
    pub tls_done: f64,
    pub first_byte: f64,
    pub total: f64,
}

/// The `-w` format [`parse_curl`] reads.
pub(super) const CURL_FORMAT: &str = "sfs-bench-curl %{http_code} %{size_download} %{time_connect} %{time_appconnect} %{time_starttransfer} %{time_total}\n";

pub(super) fn parse_curl(stdout: &str) -> anyhow::Result<CurlTimes> {
    let line = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("sfs-bench-curl "))
        .context("curl printed no timing line")?;
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() != 6 {
        bail!("curl's timing line `{line}` has {} fields, not 6", f.len());
    }
    if f[0] != "200" {
        bail!("curl got HTTP status {}", f[0]);
    }
    let num = |s: &str| -> anyhow::Result<f64> {
        s.parse::<f64>()
            .with_context(|| format!("`{s}` in curl's `{line}` is not a number"))
    };
    Ok(CurlTimes {
        size: f[1].parse().context("curl's size_download")?,
        connect: num(f[2])?,
        tls_done: num(f[3])?,
        first_byte: num(f[4])?,
        total: num(f[5])?,
    })
}

/// curl fetching `https://10.77.0.2/file` to `sink` from namespace `a` (TLS 1.3, HTTP/1.1,
/// the throwaway certificate not checked).
pub(super) fn curl_command(link: &Link, file: &str, sink: &Path) -> Command {
    let mut cmd = Link::command_in(&link.ns_a, "curl");
    cmd.args(["-sS", "-k", "--tlsv1.3", "--http1.1", "-o"])
        .arg(sink)
        .args(["-w", CURL_FORMAT])
        .arg(format!("https://{SERVER_ADDR}:{HTTPS_PORT}/{file}"));
    cmd
}

/// What `sfs` needs to reach sfsd.
pub(super) struct SfsClient {
    pub sfs: PathBuf,
    pub identity: PathBuf,
    pub user: String,
    /// Its HOME: nothing of the caller's own `~/.sfs` is touched.
    pub home: PathBuf,
}

impl SfsClient {
    /// `sfs get NAME/remote SINK` from namespace `a` (`sfs get` refuses /dev/null: "exists
    /// and is not a regular file").
    pub(super) fn get(&self, link: &Link, name: &ServerName, remote: &str, sink: &Path) -> Command {
        let mut cmd = self.base(link);
        cmd.args(["get", &format!("{name}/{remote}")]).arg(sink);
        cmd
    }

    /// `sfs put LOCAL NAME/remote` from namespace `a`.
    pub(super) fn put(
        &self,
        link: &Link,
        name: &ServerName,
        local: &Path,
        remote: &str,
    ) -> Command {
        let mut cmd = self.base(link);
        cmd.arg("put").arg(local).arg(format!("{name}/{remote}"));
        cmd
    }

    fn base(&self, link: &Link) -> Command {
        let mut cmd = Link::command_in(&link.ns_a, &self.sfs);
        cmd.env("HOME", &self.home)
            .arg("--identity")
            .arg(&self.identity)
            .args(["--user", &self.user]);
        cmd
    }
}

/// sftp from namespace `a` in batch mode (the batch comes on stdin).
pub(super) fn sftp_command(link: &Link, key: &Path) -> Command {
    let user = std::env::var("USER").unwrap_or_else(|_| "root".to_string());
    let mut cmd = Link::command_in(&link.ns_a, "sftp");
    cmd.args(["-b", "-", "-i"])
        .arg(key)
        .args(["-P", &SSH_PORT.to_string(), "-c", SSH_CIPHER])
        .args(sftp::CLIENT_OPTIONS)
        .arg(format!("{user}@{SERVER_ADDR}"));
    cmd
}

/// CPU time of a server's process tree, sampled while a client runs (sshd's per-connection
/// processes exit with the connection).
pub(super) fn sample_server(server: &NsServer) -> crate::stream::CpuSampler {
    crate::stream::CpuSampler::start(server.processes_fn())
}

/// Which tools are installed; each missing one is skipped with a note saying how to install it.
pub(super) fn available(tool: &str) -> anyhow::Result<()> {
    let (program, arg, package) = match tool {
        "curl" => ("curl", "--version", "curl"),
        "nginx" => (nginx::NGINX, "-v", "nginx"),
        "openssl" => ("openssl", "version", "openssl"),
        "sshd" => (sftp::SSHD, "-V", "openssh-server"),
        "sftp" => ("sftp", "-V", "openssh-client"),
        "ip" => ("ip", "-V", "iproute2"),
        other => bail!("unknown tool {other}"),
    };
    Command::new(program)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|_| ())
        .with_context(|| {
            format!("`{program}` not found (install {package}: scripts/bench-peers.sh)")
        })
}

/// Unused server CPU counters read as zero.
pub(super) fn cpu_s(t: CpuTimes) -> f64 {
    t.total().as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curl_timings_parse_and_failures_are_errors() {
        let ok = "sfs-bench-curl 200 268435456 0.050712 0.151310 0.201999 2.541776\n";
        let t = parse_curl(ok).unwrap();
        assert_eq!(t.size, 268_435_456);
        assert_eq!(t.first_byte, 0.201999);
        assert_eq!(t.total, 2.541776);
        assert!(parse_curl("sfs-bench-curl 404 153 0.1 0.2 0.3 0.3").is_err());
        assert!(parse_curl("nothing").is_err());
        assert!(parse_curl("sfs-bench-curl 200 1 x 0.2 0.3 0.3").is_err());
    }
}
