//! The nginx peer of `sfs-bench read --peer nginx`: what a user would pick instead of sfs to
//! serve files over an encrypted channel. A throwaway nginx on 127.0.0.1 (its own config,
//! self-signed certificate, pid file and logs under the bench's work directory) with one
//! worker per server CPU, pinned as sfsd's workers are, TLS 1.3 only with a single cipher
//! suite, keep-alive, serving the same page-cached file as sfsd. `wrk` loads it with one
//! connection per load client, pinned to the client CPUs, fetching the file over and over.
//!
//! nginx encrypts in user space with OpenSSL: `sendfile` does nothing under TLS without kernel
//! TLS, which this kernel does not offer (and Debian's nginx is not built for), so each
//! response is read from the page cache into nginx's buffers and sealed by `SSL_write`, as
//! sfsd reads and seals a READ.
//!
//! Bytes moved are wrk's own count, printed exactly by a Lua `done` hook (`summary.bytes`: the
//! plaintext wrk read, response headers included, TLS framing not), over wrk's own measured
//! duration; nginx's CPU is read from /proc just before wrk starts and just after it ends.

use std::io::Read;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::sftp::{free_port, process_tree, process_tree_cpu_times};

pub(crate) const NGINX: &str = "/usr/sbin/nginx";
const WRK: &str = "wrk";

/// The TLS 1.3 suites compared: the same AEAD as sfs's ChaCha20-Poly1305 records, and the
/// AES-GCM suite with sfs's AES-256-GCM key size.
pub(crate) const CIPHERS: [&str; 2] = ["TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_256_GCM_SHA384"];

/// `ssl_conf_command`, which sets TLS 1.3 suites, came with nginx 1.19.4.
const MIN_VERSION: (u32, u32, u32) = (1, 19, 4);

/// Prints wrk's exact totals when it is done (its usual report rounds them).
const DONE_SCRIPT: &str = r#"done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("sfs-bench-wrk bytes=%d duration_us=%d requests=%d status_errors=%d connect_errors=%d\n",
    summary.bytes, summary.duration, summary.requests, e.status, e.connect))
end
"#;

/// Whether nginx (new enough for `ssl_conf_command`), wrk and openssl are installed; `Err`
/// says what is missing.
pub(crate) fn check_available() -> anyhow::Result<()> {
    let out = Command::new(NGINX)
        .arg("-v")
        .output()
        .with_context(|| format!("{NGINX} not found (install nginx: scripts/bench-peers.sh)"))?;
    let text = String::from_utf8_lossy(&out.stderr);
    let version = parse_nginx_version(&text)
        .with_context(|| format!("cannot read nginx's version from `{}`", text.trim()))?;
    if version < MIN_VERSION {
        bail!("nginx {version:?} is older than 1.19.4 (no ssl_conf_command for TLS 1.3 suites)");
    }
    for (tool, arg) in [(WRK, "-v"), ("openssl", "version")] {
        let found = Command::new(tool)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !found {
            bail!("`{tool}` not found (install it: scripts/bench-peers.sh)");
        }
    }
    Ok(())
}

/// The version in `nginx -v`'s "nginx version: nginx/1.22.1".
fn parse_nginx_version(text: &str) -> Option<(u32, u32, u32)> {
    let v = text.split("nginx/").nth(1)?.split_whitespace().next()?;
    let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

/// A self-signed P-256 certificate for 127.0.0.1 under `dir` (made once, kept for the run).
pub(crate) fn certificate(dir: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    if cert.is_file() && key.is_file() {
        return Ok((cert, key));
    }
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-subj", "/CN=127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .context("running openssl req")?;
    if !out.status.success() {
        bail!(
            "openssl req failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok((cert, key))
}

/// What one nginx configuration needs.
pub(crate) struct Settings<'a> {
    /// Its prefix: config, pid file, logs and temporary directories go here.
    pub dir: &'a Path,
    /// The address listened on (127.0.0.1 for the loopback benchmarks).
    pub listen: &'a str,
    pub port: u16,
    /// One worker per CPU, each pinned to its own (as libcolor pins sfsd's workers).
    pub cpus: &'a [usize],
    /// The one TLS 1.3 suite offered.
    pub cipher: &'a str,
    /// The directory served at `/`.
    pub root: &'a Path,
    pub cert: &'a Path,
    pub key: &'a Path,
}

/// nginx's `worker_cpu_affinity` masks: one per CPU, rightmost digit CPU 0.
fn affinity_masks(cpus: &[usize]) -> String {
    let width = cpus.iter().max().map_or(1, |m| m + 1);
    cpus.iter()
        .map(|&c| {
            (0..width)
                .rev()
                .map(|bit| if bit == c { '1' } else { '0' })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The configuration: in the foreground, one master with a pinned worker per CPU, no access
/// log, TLS 1.3 with one suite and the server's preference, keep-alive without limits.
pub(crate) fn config(s: &Settings) -> String {
    let dir = s.dir.display();
    format!(
        "daemon off;\n\
         master_process on;\n\
         worker_processes {workers};\n\
         worker_cpu_affinity {masks};\n\
         pid {dir}/nginx.pid;\n\
         error_log {dir}/error.log warn;\n\
         events {{ worker_connections 256; }}\n\
         http {{\n\
         \x20 access_log off;\n\
         \x20 client_body_temp_path {dir}/body;\n\
         \x20 proxy_temp_path {dir}/proxy;\n\
         \x20 fastcgi_temp_path {dir}/fastcgi;\n\
         \x20 uwsgi_temp_path {dir}/uwsgi;\n\
         \x20 scgi_temp_path {dir}/scgi;\n\
         \x20 default_type application/octet-stream;\n\
         \x20 keepalive_requests 1000000;\n\
         \x20 keepalive_timeout 300s;\n\
         \x20 server {{\n\
         \x20   listen {listen}:{port} ssl;\n\
         \x20   ssl_certificate {cert};\n\
         \x20   ssl_certificate_key {key};\n\
         \x20   ssl_protocols TLSv1.3;\n\
         \x20   ssl_prefer_server_ciphers on;\n\
         \x20   ssl_conf_command Ciphersuites {cipher};\n\
         \x20   root {root};\n\
         \x20 }}\n\
         }}\n",
        workers = s.cpus.len(),
        masks = affinity_masks(s.cpus),
        listen = s.listen,
        port = s.port,
        cert = s.cert.display(),
        key = s.key.display(),
        cipher = s.cipher,
        root = s.root.display(),
    )
}

/// A running throwaway nginx.
pub(crate) struct Nginx {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Nginx {
    /// Starts nginx under `dir`, pinned (with taskset) to `cpus` with one worker each,
    /// serving `root` with the TLS 1.3 suite `cipher` only.
    pub(crate) fn start(
        dir: &Path,
        cpus: &[usize],
        cipher: &str,
        root: &Path,
    ) -> anyhow::Result<Nginx> {
        std::fs::create_dir_all(dir)?;
        let (cert, key) = certificate(dir)?;
        let port = free_port()?;
        let conf = dir.join("nginx.conf");
        std::fs::write(
            &conf,
            config(&Settings {
                dir,
                listen: "127.0.0.1",
                port,
                cpus,
                cipher,
                root,
                cert: &cert,
                key: &key,
            }),
        )?;
        let child = pinned_nginx(cpus, dir, &conf)
            .spawn()
            .context("starting nginx")?;
        let mut nginx = Nginx {
            child,
            port,
            dir: dir.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline || matches!(nginx.child.try_wait(), Ok(Some(_))) {
                nginx.stop();
                let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
                bail!("nginx did not start listening on 127.0.0.1:{port}: {log}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(nginx)
    }

    /// The URL of `file` in the served directory.
    pub(crate) fn url(&self, file: &str) -> String {
        format!("https://127.0.0.1:{}/{file}", self.port)
    }

    /// CPU time of the master and its workers.
    pub(crate) fn cpu_times(&self) -> crate::procs::CpuTimes {
        process_tree_cpu_times(self.child.id())
    }

    /// The work directory (for wrk's script).
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// SIGTERM (nginx's fast shutdown), then SIGKILL to whatever is left.
    fn stop(&mut self) {
        crate::procs::signal(self.child.id(), rustix::process::Signal::TERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for pid in process_tree(self.child.id()).into_iter().rev() {
            crate::procs::signal(pid, rustix::process::Signal::KILL);
        }
        let _ = self.child.wait();
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.stop();
    }
}

/// nginx on `cpus` (taskset), with its prefix and error log in `dir` and the config `conf`.
pub(crate) fn pinned_nginx(cpus: &[usize], dir: &Path, conf: &Path) -> Command {
    let mut cmd = Command::new("taskset");
    cmd.args(["-c", &cpu_list(cpus), NGINX]);
    nginx_args(&mut cmd, dir, conf);
    cmd
}

/// The arguments of an nginx run from `dir` with the config `conf` (no output kept but its
/// error log, in `dir`), added to `cmd` (nginx itself, or a wrapper running it).
pub(crate) fn nginx_args(cmd: &mut Command, dir: &Path, conf: &Path) {
    cmd.arg("-p")
        .arg(dir)
        .arg("-e")
        .arg(dir.join("error.log"))
        .arg("-c")
        .arg(conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
}

/// `cpus` as taskset and colorweb's `--pin` take them: `0,1`.
pub(crate) fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// What one wrk run moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WrkSummary {
    pub bytes: u64,
    pub duration: Duration,
    pub requests: u64,
}

/// One wrk run and the CPU time it used (read from its zombie, before it is reaped).
pub(crate) struct WrkRun {
    pub summary: WrkSummary,
    pub cpu: Duration,
}

/// Reads the line [`DONE_SCRIPT`] prints; a failed response (non-2xx, or no connection) is an
/// error, since its bytes would not be the file's.
pub(crate) fn parse_wrk(stdout: &str) -> anyhow::Result<WrkSummary> {
    let line = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("sfs-bench-wrk "))
        .context("wrk printed no `sfs-bench-wrk` summary line (did the Lua script run?)")?;
    let field = |name: &str| -> anyhow::Result<u64> {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .with_context(|| format!("no {name}= in `{line}`"))?
            .parse()
            .with_context(|| format!("{name} in `{line}` is not a count"))
    };
    let (status, connect) = (field("status_errors")?, field("connect_errors")?);
    if status > 0 || connect > 0 {
        bail!("wrk saw {status} non-2xx response(s) and {connect} failed connection(s)");
    }
    Ok(WrkSummary {
        bytes: field("bytes")?,
        duration: Duration::from_micros(field("duration_us")?),
        requests: field("requests")?,
    })
}

/// Runs wrk against `url` for `seconds` (whole seconds, at least 1: wrk's unit) with
/// `connections` keep-alive connections on `threads` threads, pinned to `cpus`.
pub(crate) fn run_wrk(
    nginx: &Nginx,
    url: &str,
    cpus: &[usize],
    connections: usize,
    threads: usize,
    seconds: f64,
) -> anyhow::Result<WrkRun> {
    let script = nginx.dir().join("done.lua");
    std::fs::write(&script, DONE_SCRIPT)?;
    let load = WrkLoad {
        cpus,
        threads,
        connections,
        seconds,
        request_timeout: "120s",
        script: &script,
        url,
    };
    load.run()
}

/// One wrk run: pinned to `cpus`, `threads` threads over `connections` keep-alive
/// connections for `seconds`, with the Lua `script` (which prints the summary line
/// [`parse_wrk`] reads) against `url`.
pub(crate) struct WrkLoad<'a> {
    pub cpus: &'a [usize],
    pub threads: usize,
    pub connections: usize,
    pub seconds: f64,
    /// wrk's `--timeout`: how long one request may take before wrk counts it as failed.
    pub request_timeout: &'a str,
    pub script: &'a Path,
    pub url: &'a str,
}

impl WrkLoad<'_> {
    /// Runs wrk to its end (killed a minute past its duration) and reads its summary and CPU.
    pub(crate) fn run(&self) -> anyhow::Result<WrkRun> {
        let seconds = self.seconds.ceil().max(1.0) as u64;
        let mut child = Command::new("taskset")
            .args(["-c", &cpu_list(self.cpus), WRK])
            .args(["-t", &self.threads.to_string()])
            .args(["-c", &self.connections.to_string()])
            .args([
                "-d",
                &format!("{seconds}s"),
                "--timeout",
                self.request_timeout,
            ])
            .arg("-s")
            .arg(self.script)
            .arg(self.url)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting wrk (install it: scripts/bench-peers.sh)")?;
        // wrk's report is a few hundred bytes: it fits the pipe, so waiting before reading is
        // safe.
        let deadline = Instant::now() + Duration::from_secs(seconds + 60);
        while !crate::procs::exited(child.id()) {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("wrk did not finish within {}s", seconds + 60);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let cpu = crate::procs::cpu_time(child.id()).unwrap_or_default();
        let status = child.wait()?;
        let (mut out, mut err) = (String::new(), String::new());
        if let Some(mut s) = child.stdout.take() {
            s.read_to_string(&mut out)?;
        }
        if let Some(mut s) = child.stderr.take() {
            s.read_to_string(&mut err)?;
        }
        if !status.success() {
            bail!("wrk failed ({status}): {}{}", out.trim(), err.trim());
        }
        let summary = parse_wrk(&out).with_context(|| format!("wrk printed: {out}{err}"))?;
        Ok(WrkRun { summary, cpu })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What wrk 4.1.0 printed against this module's nginx, with the Lua hook's line.
    const WRK_OUTPUT: &str = "Running 5s test @ https://127.0.0.1:18443/data.bin
  1 threads and 4 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.95s     1.16s    3.72s    83.33%
    Req/Sec     2.33      3.33     9.00     83.33%
  6 requests in 5.10s, 1.56GB read
Requests/sec:      1.18
Transfer/sec:    313.71MB
sfs-bench-wrk bytes=1678788054 duration_us=5103482 requests=6 status_errors=0 connect_errors=0
";

    #[test]
    fn wrk_totals_come_from_the_hook_line() {
        let s = parse_wrk(WRK_OUTPUT).unwrap();
        assert_eq!(s.bytes, 1_678_788_054);
        assert_eq!(s.duration, Duration::from_micros(5_103_482));
        assert_eq!(s.requests, 6);
    }

    #[test]
    fn wrk_output_without_the_hook_or_with_failures_is_an_error() {
        let without = WRK_OUTPUT.replace("sfs-bench-wrk", "something else");
        assert!(parse_wrk(&without).is_err());
        let not_found = WRK_OUTPUT.replace("status_errors=0", "status_errors=6");
        let e = parse_wrk(&not_found).unwrap_err().to_string();
        assert!(e.contains("non-2xx"), "{e}");
        let refused = WRK_OUTPUT.replace("connect_errors=0", "connect_errors=4");
        assert!(parse_wrk(&refused).is_err());
        let garbled = WRK_OUTPUT.replace("bytes=1678788054", "bytes=1.5GB");
        assert!(parse_wrk(&garbled).is_err());
        let missing = WRK_OUTPUT.replace(" requests=6", "");
        assert!(parse_wrk(&missing).is_err());
    }

    #[test]
    fn the_config_offers_tls13_with_one_suite_and_pins_one_worker_per_cpu() {
        let (dir, root) = (Path::new("/w/nginx"), Path::new("/w/export-0"));
        let text = config(&Settings {
            dir,
            listen: "127.0.0.1",
            port: 4433,
            cpus: &[0, 1, 3],
            cipher: CIPHERS[1],
            root,
            cert: &dir.join("cert.pem"),
            key: &dir.join("key.pem"),
        });
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for expected in [
            "daemon off;",
            "worker_processes 3;",
            "worker_cpu_affinity 0001 0010 1000;",
            "pid /w/nginx/nginx.pid;",
            "access_log off;",
            "listen 127.0.0.1:4433 ssl;",
            "ssl_protocols TLSv1.3;",
            "ssl_conf_command Ciphersuites TLS_AES_256_GCM_SHA384;",
            "ssl_certificate /w/nginx/cert.pem;",
            "root /w/export-0;",
        ] {
            assert!(lines.contains(&expected), "no `{expected}` in\n{text}");
        }
        assert!(!text.contains("TLSv1.2"), "TLS 1.3 only");
        assert!(!text.contains("CHACHA"), "one suite only");
        assert_eq!(text.matches('{').count(), text.matches('}').count());
    }

    #[test]
    fn affinity_masks_have_one_bit_per_worker() {
        assert_eq!(affinity_masks(&[0]), "1");
        assert_eq!(affinity_masks(&[0, 1]), "01 10");
        assert_eq!(affinity_masks(&[2]), "100");
    }

    #[test]
    fn nginx_versions_parse() {
        assert_eq!(
            parse_nginx_version("nginx version: nginx/1.22.1\n"),
            Some((1, 22, 1))
        );
        assert_eq!(
            parse_nginx_version("nginx version: nginx/1.19 (x)"),
            Some((1, 19, 0))
        );
        assert!(parse_nginx_version("nginx version: nginx/1.18.0").unwrap() < MIN_VERSION);
        assert_eq!(parse_nginx_version("command not found"), None);
    }
}
