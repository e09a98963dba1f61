//! The web servers `sfs-bench web` compares, each started pinned to its CPUs on 127.0.0.1:
//! colorweb on libcolor (`mp`), its uniprocessor flavour (`uni`), N uniprocessor copies
//! sharing one port with SO_REUSEPORT (`ncopy`: the kernel spreads connections over them),
//! and nginx with N workers (plain HTTP, sendfile on, access_log off).

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::procs::CpuTimes;
use crate::read::sftp::{free_port, process_tree, process_tree_cpu_times};

/// One running server arrangement: its processes and port.
pub(super) struct Running {
    children: Vec<Child>,
    pub port: u16,
}

impl Running {
    /// CPU time of every process of the arrangement (nginx's master and workers, every copy).
    pub(super) fn cpu_times(&self) -> CpuTimes {
        self.children
            .iter()
            .map(|c| process_tree_cpu_times(c.id()))
            .sum()
    }

    fn wait_listening(mut self) -> anyhow::Result<Running> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            let exited = self
                .children
                .iter_mut()
                .any(|c| matches!(c.try_wait(), Ok(Some(_))));
            if exited || Instant::now() > deadline {
                bail!("server did not start listening on 127.0.0.1:{}", self.port);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Every copy must be up before the load starts, or the first ones take it all.
        std::thread::sleep(Duration::from_millis(100));
        Ok(self)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        for c in &self.children {
            crate::procs::signal(c.id(), rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for c in &mut self.children {
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            for pid in process_tree(c.id()).into_iter().rev() {
                crate::procs::signal(pid, rustix::process::Signal::KILL);
            }
            let _ = c.wait();
        }
    }
}

fn colorweb_process(
    bin: &Path,
    root: &Path,
    port: u16,
    cpus: &[usize],
    extra: &[&str],
) -> anyhow::Result<Child> {
    Command::new("taskset")
        .args(["-c", &crate::read::nginx::cpu_list(cpus)])
        .arg(bin)
        .arg("--root")
        .arg(root)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args([
            "--pin",
            &crate::read::nginx::cpu_list(cpus),
            "--max-connections",
            "4096",
        ])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))
}

/// colorweb with one libcolor worker per CPU in `cpus`, each pinned.
pub(super) fn colorweb_mp(bin: &Path, root: &Path, cpus: &[usize]) -> anyhow::Result<Running> {
    let port = free_port()?;
    let n = cpus.len().to_string();
    let child = colorweb_process(bin, root, port, cpus, &["--cpus", &n])?;
    Running {
        children: vec![child],
        port,
    }
    .wait_listening()
}

/// One uniprocessor colorweb per CPU in `cpus`, all on one port (SO_REUSEPORT).
pub(super) fn colorweb_copies(bin: &Path, root: &Path, cpus: &[usize]) -> anyhow::Result<Running> {
    let port = free_port()?;
    let mut children = Vec::new();
    for &cpu in cpus {
        children.push(colorweb_process(
            bin,
            root,
            port,
            &[cpu],
            &["--uni", "--reuseport"],
        )?);
    }
    Running { children, port }.wait_listening()
}

/// nginx's configuration: one pinned worker per CPU, plain HTTP on 127.0.0.1, sendfile on,
/// no access log, unlimited keep-alive, and the open-file cache on (the static-file setup
/// nginx is usually tuned with; colorweb caches the files themselves).
pub(super) fn nginx_config(dir: &Path, root: &Path, port: u16, cpus: &[usize]) -> String {
    let width = cpus.iter().max().map_or(1, |m| m + 1);
    let masks: Vec<String> = cpus
        .iter()
        .map(|&c| {
            (0..width)
                .rev()
                .map(|b| if b == c { '1' } else { '0' })
                .collect()
        })
        .collect();
    let d = dir.display();
    format!(
        "daemon off;\nmaster_process on;\nworker_processes {n};\nworker_cpu_affinity {masks};\n\
         pid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  sendfile on;\n  tcp_nopush on;\n\
         \x20 open_file_cache max=10000 inactive=60s;\n\
         \x20 client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
         \x20 fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
         \x20 default_type application/octet-stream;\n\
         \x20 keepalive_requests 1000000;\n  keepalive_timeout 300s;\n\
         \x20 server {{\n    listen 127.0.0.1:{port};\n    root {root};\n  }}\n}}\n",
        n = cpus.len(),
        masks = masks.join(" "),
        root = root.display(),
    )
}

/// nginx with one worker per CPU in `cpus`.
pub(super) fn nginx(dir: &Path, root: &Path, cpus: &[usize]) -> anyhow::Result<Running> {
    std::fs::create_dir_all(dir)?;
    let port = free_port()?;
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, nginx_config(dir, root, port, cpus))?;
    let child = crate::read::nginx::pinned_nginx(cpus, dir, &conf)
        .spawn()
        .context("starting nginx")?;
    Running {
        children: vec![child],
        port,
    }
    .wait_listening()
    .with_context(|| std::fs::read_to_string(dir.join("error.log")).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nginx_config_is_plain_http_with_sendfile_and_pinned_workers() {
        let text = nginx_config(Path::new("/w"), Path::new("/w/root"), 8080, &[0, 1]);
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for want in [
            "worker_processes 2;",
            "worker_cpu_affinity 01 10;",
            "access_log off;",
            "sendfile on;",
            "listen 127.0.0.1:8080;",
            "root /w/root;",
        ] {
            assert!(lines.contains(&want), "no `{want}` in\n{text}");
        }
        assert!(!text.contains("ssl"));
        assert_eq!(text.matches('{').count(), text.matches('}').count());
    }
}
