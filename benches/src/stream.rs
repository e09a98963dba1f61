//! `sfs-bench stream`: one client, one stream. `sfs get` and `sfs put` of a page-cached file
//! against a real sfsd with 1..N worker CPUs, beside OpenSSH `sftp` and `scp` with the same
//! cipher (chacha20-poly1305@openssh.com) in the same run. Reports MB/s and the CPU seconds per
//! GB spent by the server and by the client, next to the raw cipher's cost measured in the
//! same run.
//!
//! The client is not pinned: on a small machine it shares the CPUs with the server, as a
//! user's copy would. Server CPU is read from /proc (for sshd: its whole process tree, sampled
//! while the transfer runs, since per-connection processes exit with it); client CPU is the
//! finished child's own (getrusage of children).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;

use crate::cipher::{self, CipherCost};
use crate::cputime::children_cpu_time;
use crate::procs::CpuTimes;
use crate::read::servers::{self, Server};
use crate::read::{BENCH_USER, DATA_FILE, parse_size, prepare_exports, sftp};
use crate::report::{median, median_of_present, spread};

const SSH_CIPHER: &str = sftp::CIPHERS[0];

#[derive(clap::Args, Debug)]
pub(crate) struct StreamArgs {
    /// Size of the file copied, e.g. 256MiB
    #[arg(long, default_value = "256MiB", value_parser = parse_size)]
    size: u64,
    /// Server CPU counts (sfsd workers, pinned); counts above this machine's CPUs are skipped
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    cpus: Vec<usize>,
    /// Directions
    #[arg(long, value_delimiter = ',', default_value = "get,put")]
    directions: Vec<Direction>,
    /// Tools compared with sfs (skipped with a note when OpenSSH is not installed)
    #[arg(long, value_delimiter = ',', default_value = "sftp,scp")]
    peers: Vec<Tool>,
    /// Repetitions; all configurations run once per repetition, interleaved
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Write one JSON object per configuration and line to FILE
    #[arg(long)]
    json: Option<PathBuf>,
    /// The sfsd binary [default: next to sfs-bench]
    #[arg(long)]
    sfsd: Option<PathBuf>,
    /// The sfs binary [default: next to sfs-bench]
    #[arg(long)]
    sfs: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Direction {
    /// Server to client
    Get,
    /// Client to server
    Put,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Tool {
    Sfs,
    Sftp,
    Scp,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Config {
    tool: Tool,
    direction: Direction,
    cpus: usize,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    mb_per_s: f64,
    server_cpu_s_per_gb: f64,
    /// The kernel's share of the server's CPU time.
    server_system_share: Option<f64>,
    client_cpu_s_per_gb: f64,
}

#[derive(Serialize)]
struct Row {
    tool: Tool,
    direction: Direction,
    server_cpus: usize,
    reps: usize,
    file_bytes: u64,
    mb_per_s: f64,
    mb_per_s_min: f64,
    mb_per_s_max: f64,
    server_cpu_s_per_gb: f64,
    /// The kernel's share of `server_cpu_s_per_gb` (system calls, page-cache copies, and
    /// loopback TCP, whose receiving side runs inside the sender's sends).
    server_system_share: Option<f64>,
    client_cpu_s_per_gb: f64,
    /// The record layer's own seal and open cost, measured in this run.
    cipher: CipherCost,
    /// Server CPU per byte over the cipher's (seal for get, open for put).
    server_over_cipher: f64,
    /// For peers: sfs throughput in the same direction and CPU count divided by this row's.
    sfs_over_this: Option<f64>,
}

struct Setup {
    sfsd: PathBuf,
    sfs: PathBuf,
    work: PathBuf,
    export: PathBuf,
    users: PathBuf,
    identity: PathBuf,
    local_file: PathBuf,
    size: u64,
}

pub(crate) fn run(args: StreamArgs) -> anyhow::Result<()> {
    if args.reps == 0 {
        bail!("--reps must be at least 1");
    }
    let sfsd = servers::locate_sfsd(args.sfsd.as_deref())?;
    let sfs = servers::locate_binary("sfs", args.sfs.as_deref())?;
    let machine_cpus = libcolor::available_cpus();
    let cpus: Vec<usize> = args
        .cpus
        .iter()
        .copied()
        .filter(|&c| {
            let fits = c >= 1 && c <= machine_cpus;
            if !fits {
                eprintln!("note: skipping {c} CPU(s): this machine has {machine_cpus}");
            }
            fits
        })
        .collect();
    let mut tools = vec![Tool::Sfs];
    if !args.peers.is_empty() {
        match sftp::check_available() {
            Ok(()) => tools.extend(args.peers.iter().filter(|t| **t != Tool::Sfs)),
            Err(e) => eprintln!("note: skipping the OpenSSH peers: {e}"),
        }
    }
    let mut configs = Vec::new();
    for &cpus in &cpus {
        for &direction in &args.directions {
            for &tool in &tools {
                configs.push(Config {
                    tool,
                    direction,
                    cpus,
                });
            }
        }
    }
    if configs.is_empty() {
        bail!("nothing to measure");
    }
    let scratch = tempfile::tempdir().context("creating a work directory")?;
    let work = scratch.path().to_path_buf();
    let export = prepare_exports(&work, 1, DATA_FILE, args.size)?.remove(0);
    let local_dir = prepare_exports(&work.join("local"), 1, DATA_FILE, args.size)?.remove(0);
    let identity = work.join("identity");
    let public = servers::sfs_keygen(&sfs, &work, &identity)?;
    let users = work.join("users");
    servers::write_users_file(&users, BENCH_USER, &public, &export)?;
    let setup = Setup {
        sfsd,
        sfs,
        export,
        users,
        identity,
        local_file: local_dir.join(DATA_FILE),
        size: args.size,
        work,
    };
    eprintln!(
        "stream: one client, a {} MiB cached file, {} rep(s)",
        args.size >> 20,
        args.reps
    );
    // `sfs` asks for AES-256-GCM where this CPU has AES instructions (and sfsd, on the same
    // machine, agrees).
    let record_cipher = protocol::record::Cipher::for_version(
        protocol::handshake::versions_here()
            .into_iter()
            .max()
            .unwrap_or(2),
    );
    let cipher = cipher::measure(record_cipher, 64 * 1024, Duration::from_millis(600));
    eprintln!(
        "cipher {record_cipher:?} (this machine, this run): seal {:.2} / open {:.2} CPU-s/GB",
        cipher.seal_cpu_s_per_gb, cipher.open_cpu_s_per_gb
    );
    let mut samples: Vec<Vec<Sample>> = configs.iter().map(|_| Vec::new()).collect();
    for rep in 0..args.reps {
        for (i, c) in configs.iter().enumerate() {
            eprint!(
                "  rep {}/{}: {:?} {:?} with {} server CPU(s) ... ",
                rep + 1,
                args.reps,
                c.tool,
                c.direction,
                c.cpus
            );
            let s = measure(&setup, *c).with_context(|| format!("{c:?}"))?;
            eprintln!("{:.0} MB/s", s.mb_per_s);
            samples[i].push(s);
        }
    }
    let rows = summarise(&configs, &samples, &cipher, args.size);
    print_table(&rows, &cipher);
    if let Some(path) = &args.json {
        crate::report::write_json_lines(path, &rows)?;
    }
    Ok(())
}

/// How long a put waits before it starts, so every tool writes into memory in the same state.
/// A VM with free page reporting (Linux `page_reporting`, 2 s after pages are freed) hands
/// freed memory back to its host, and the first write into such a page faults on the host: on
/// the 2-vCPU test VM, `dd` writes a new 512 MiB file at about 400 MB/s into memory that has
/// been free for a few seconds and at 3.9 GB/s into memory freed just before. Without the wait
/// a put ran in either state depending on how soon it followed the last one's delete.
const PUT_SETTLE: Duration = Duration::from_secs(3);

fn measure(setup: &Setup, c: Config) -> anyhow::Result<Sample> {
    let server_cpus: Vec<usize> = (0..c.cpus).collect();
    if c.direction == Direction::Put {
        std::thread::sleep(PUT_SETTLE);
    }
    let (mut command, server) = match c.tool {
        Tool::Sfs => {
            let srv = Server::start(
                &setup.sfsd,
                &server_cpus,
                &["--workers".to_string(), c.cpus.to_string()],
                &setup.work.join("state"),
                &setup.export,
                None,
                &setup.users,
            )?;
            let remote = format!(
                "{}/{}",
                srv.name,
                if c.direction == Direction::Get {
                    DATA_FILE
                } else {
                    "put.bin"
                }
            );
            let mut cmd = Command::new(&setup.sfs);
            cmd.arg("--identity")
                .arg(&setup.identity)
                .args(["--user", BENCH_USER]);
            match c.direction {
                Direction::Get => cmd.args(["get", &remote, "/dev/null"]),
                Direction::Put => cmd.arg("put").arg(&setup.local_file).arg(&remote),
            };
            (cmd, Measured::Sfsd(srv))
        }
        Tool::Sftp | Tool::Scp => {
            let sshd = sftp::Sshd::start(&setup.work.join("sshd"), &server_cpus, SSH_CIPHER)?;
            let user = std::env::var("USER").unwrap_or_else(|_| "root".to_string());
            let remote_file = setup.export.join(if c.direction == Direction::Get {
                DATA_FILE
            } else {
                "put.bin"
            });
            let mut cmd = Command::new(if c.tool == Tool::Sftp { "sftp" } else { "scp" });
            cmd.arg("-i").arg(sshd.client_key());
            cmd.args(["-P", &sshd.port().to_string(), "-c", SSH_CIPHER]);
            cmd.args(sftp::CLIENT_OPTIONS);
            let at = |p: &Path| format!("{user}@127.0.0.1:{}", p.display());
            match (c.tool, c.direction) {
                (Tool::Sftp, _) => {
                    cmd.args(["-b", "-"]).arg(format!("{user}@127.0.0.1"));
                }
                (_, Direction::Get) => {
                    cmd.arg(at(&remote_file)).arg("/dev/null");
                }
                (_, Direction::Put) => {
                    cmd.arg(&setup.local_file).arg(at(&remote_file));
                }
            }
            let batch = match c.direction {
                Direction::Get => format!("get {} /dev/null\n", remote_file.display()),
                Direction::Put => format!(
                    "put {} {}\n",
                    setup.local_file.display(),
                    remote_file.display()
                ),
            };
            (
                cmd,
                Measured::Sshd(sshd, (c.tool == Tool::Sftp).then_some(batch)),
            )
        }
    };
    let sampler = CpuSampler::start(server.processes_fn());
    let children_before = children_cpu_time();
    let t0 = Instant::now();
    let batch = server.batch();
    command
        .stdin(if batch.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = command.spawn().context("starting the client")?;
    if let Some(batch) = batch {
        use std::io::Write;
        let mut stdin = child.stdin.take().context("client stdin")?;
        stdin.write_all(batch.as_bytes())?;
    }
    let output = child.wait_with_output()?;
    let wall = t0.elapsed();
    let client_cpu = children_cpu_time().saturating_sub(children_before);
    let server_cpu = sampler.finish();
    drop(server);
    if !output.status.success() {
        bail!(
            "the client failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    if c.direction == Direction::Put {
        let landed = std::fs::metadata(setup.export.join("put.bin"))
            .map(|m| m.len())
            .unwrap_or(0);
        if landed != setup.size {
            bail!("put.bin has {landed} bytes, not {}", setup.size);
        }
        let _ = std::fs::remove_file(setup.export.join("put.bin"));
    }
    let gb = setup.size as f64 / 1e9;
    Ok(Sample {
        mb_per_s: setup.size as f64 / 1e6 / wall.as_secs_f64(),
        server_cpu_s_per_gb: server_cpu.total().as_secs_f64() / gb,
        server_system_share: server_cpu.system_share(),
        client_cpu_s_per_gb: client_cpu.as_secs_f64() / gb,
    })
}

/// The server side of one measurement (stopped when dropped).
enum Measured {
    Sfsd(Server),
    Sshd(sftp::Sshd, Option<String>),
}

impl Measured {
    /// What the client reads on its standard input (sftp's batch), if anything.
    fn batch(&self) -> Option<String> {
        match self {
            Measured::Sshd(_, batch) => batch.clone(),
            Measured::Sfsd(_) => None,
        }
    }

    /// The server's processes, listed afresh at every sample.
    fn processes_fn(&self) -> Box<dyn Fn() -> Vec<u32> + Send> {
        match self {
            Measured::Sfsd(s) => {
                let pid = s.pid();
                Box::new(move || vec![pid])
            }
            Measured::Sshd(sshd, _) => {
                let pids = sshd.processes();
                let root = pids[0];
                Box::new(move || crate::read::sftp::process_tree(root))
            }
        }
    }
}

/// Samples the CPU time of a changing set of processes every 20 ms, keeping each process's
/// last value, so processes that exit during the transfer are still counted (up to the last
/// 20 ms of their life).
pub(crate) struct CpuSampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<CpuTimes>,
}

impl CpuSampler {
    pub(crate) fn start(processes: Box<dyn Fn() -> Vec<u32> + Send>) -> CpuSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut first: HashMap<u32, CpuTimes> = HashMap::new();
            let mut last: HashMap<u32, CpuTimes> = HashMap::new();
            loop {
                for pid in processes() {
                    if let Some(t) = crate::procs::cpu_times(pid) {
                        first.entry(pid).or_insert(t);
                        last.insert(pid, t);
                    }
                }
                if stop2.load(Ordering::Acquire) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            last.iter().map(|(pid, t)| t.since(first[pid])).sum()
        });
        CpuSampler { stop, thread }
    }

    pub(crate) fn finish(self) -> CpuTimes {
        self.stop.store(true, Ordering::Release);
        self.thread.join().unwrap_or_default()
    }
}

fn summarise(
    configs: &[Config],
    samples: &[Vec<Sample>],
    cipher: &CipherCost,
    size: u64,
) -> Vec<Row> {
    let med =
        |i: usize, f: fn(&Sample) -> f64| median(&samples[i].iter().map(f).collect::<Vec<_>>());
    configs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let rates: Vec<f64> = samples[i].iter().map(|s| s.mb_per_s).collect();
            let (lo, hi) = spread(&rates);
            let mb = median(&rates);
            let server = med(i, |s| s.server_cpu_s_per_gb);
            let own_cipher = match c.direction {
                Direction::Get => cipher.seal_cpu_s_per_gb,
                Direction::Put => cipher.open_cpu_s_per_gb,
            };
            let sfs = configs.iter().position(|o| {
                o.tool == Tool::Sfs && o.direction == c.direction && o.cpus == c.cpus
            });
            Row {
                tool: c.tool,
                direction: c.direction,
                server_cpus: c.cpus,
                reps: samples[i].len(),
                file_bytes: size,
                mb_per_s: mb,
                mb_per_s_min: lo,
                mb_per_s_max: hi,
                server_cpu_s_per_gb: server,
                server_system_share: median_of_present(
                    samples[i].iter().map(|s| s.server_system_share),
                ),
                client_cpu_s_per_gb: med(i, |s| s.client_cpu_s_per_gb),
                cipher: *cipher,
                server_over_cipher: server / own_cipher,
                sfs_over_this: (c.tool != Tool::Sfs)
                    .then_some(sfs)
                    .flatten()
                    .map(|j| med(j, |s| s.mb_per_s) / mb),
            }
        })
        .collect()
}

fn print_table(rows: &[Row], cipher: &CipherCost) {
    println!(
        "{:<6} {:<4} {:>4} {:>8} {:>17} {:>10} {:>6} {:>10} {:>9} {:>8}",
        "tool",
        "dir",
        "cpus",
        "MB/s",
        "spread (min-max)",
        "srv s/GB",
        "kern%",
        "cli s/GB",
        "srv/ciph",
        "sfs/this"
    );
    for r in rows {
        println!(
            "{:<6} {:<4} {:>4} {:>8.0} {:>8.0} - {:<6.0} {:>10.2} {:>6} {:>10.2} {:>9.2} {:>8}",
            format!("{:?}", r.tool).to_lowercase(),
            format!("{:?}", r.direction).to_lowercase(),
            r.server_cpus,
            r.mb_per_s,
            r.mb_per_s_min,
            r.mb_per_s_max,
            r.server_cpu_s_per_gb,
            r.server_system_share
                .map_or("-".into(), |v| format!("{:.0}", v * 100.0)),
            r.client_cpu_s_per_gb,
            r.server_over_cipher,
            r.sfs_over_this.map_or("-".into(), |v| format!("{v:.2}")),
        );
    }
    println!(
        "cipher alone (ChaCha20-Poly1305, one core, this run): seal {:.2}, open {:.2} CPU-s/GB; \
         srv/ciph compares the server with the seal cost (get) or open cost (put)",
        cipher.seal_cpu_s_per_gb, cipher.open_cpu_s_per_gb
    );
}
