//! `sfs-bench read`: the libasync-smp paper Figure 10 on sfsd. K clients read a large, page-cached file
//! over one stream each; the server runs with 1..N pinned CPUs as one multiprocessor process
//! (`mp`), as the uniprocessor baseline (`uni`, 1 CPU), or as N independent uniprocessor
//! copies each exporting its own copy of the data (`ncopy`: the speedup the OS allows).

mod ganesha;
pub(crate) mod load;
pub(crate) mod nginx;
mod plot;
pub(crate) mod servers;
pub(crate) mod sftp;
mod table;

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use protocol::UserKeypair;
use serde::Serialize;

use crate::report::{median, median_of_present, spread};
use load::{LoadConfig, Progress, Target};
use protocol::record::Cipher;
use servers::Server;
use table::{human_bytes, print_table, summarise};

pub(crate) const DATA_FILE: &str = "data.bin";
pub(crate) const BENCH_USER: &str = "bench";

#[derive(clap::Args, Debug)]
pub(crate) struct ReadArgs {
    /// CPU counts to give the server; counts above this machine's CPUs are skipped
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4")]
    cpus: Vec<usize>,
    /// Server arrangements to measure
    #[arg(long, value_delimiter = ',', default_value = "mp,uni,ncopy")]
    modes: Vec<Mode>,
    /// Load clients (one TCP stream each)
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Seconds of warm-up before each measured window
    #[arg(long, default_value_t = 5.0)]
    warmup: f64,
    /// Seconds in each measured window
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Repetitions; all configurations run once per repetition, interleaved
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Size of the file each export holds, e.g. 200MiB, 1GiB, 64MB
    #[arg(long, default_value = "200MiB", value_parser = parse_size)]
    file_size: u64,
    /// Bytes per READ (clamped to what the server's records allow)
    #[arg(long, default_value_t = 65536)]
    chunk: u32,
    /// Outstanding READs per client
    #[arg(long, default_value_t = 8)]
    window: usize,
    /// Open, decode and check every reply (costs the clients far more CPU)
    #[arg(long)]
    verify: bool,
    /// Record cipher the load clients ask for (`auto`: AES-256-GCM where this CPU has AES
    /// instructions, as `sfs` does)
    #[arg(long, value_enum, default_value = "auto")]
    cipher: load::CipherChoice,
    /// Write one JSON object per configuration and line to FILE
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw the Figure 10 bar chart to FILE (.svg)
    #[arg(long)]
    plot: Option<PathBuf>,
    /// The sfsd binary [default: next to sfs-bench]
    #[arg(long)]
    sfsd: Option<PathBuf>,
    /// Directory for exports and server state [default: a temporary directory]
    #[arg(long)]
    workdir: Option<PathBuf>,
    /// Also measure what a user would pick instead, in the same run: `sftp` (OpenSSH sshd on
    /// loopback, pinned like sfsd, with chacha20-poly1305 and aes128-gcm), `nginx` (HTTPS,
    /// TLS 1.3 with ChaCha20-Poly1305 and AES-256-GCM, loaded by wrk)
    #[arg(long, value_delimiter = ',')]
    peer: Vec<Peer>,
    /// Where sfsd gets the files: `local` (the export directory) or `nfs` (NFS-Ganesha on
    /// 127.0.0.1 exporting it, sfsd in front: the paper's setup; needs root and nfs-ganesha)
    #[arg(long, default_value = "local")]
    backend: Backend,
    /// Serve this NFS export instead (`nfs://HOST[:PORT]/EXPORT[?mountport=P]`), one the
    /// bench does not start, e.g. `scripts/scale-out.sh`'s Ganesha over Gluster: every sfsd of
    /// every mode reads the same file there (`ncopy`: C instances in front of one volume, the
    /// clients split across them). The file is written through an sfsd first unless it is
    /// there with `--file-size` bytes
    #[arg(long)]
    backend_url: Option<String>,
    /// Also report the CPU per byte of another process and its descendants, as NAME=PID
    /// (repeatable): e.g. the NFS server and storage daemons behind `--backend-url`
    #[arg(long, value_parser = parse_watch)]
    watch: Vec<Watch>,
}

/// A process (with its descendants) whose CPU per byte the table reports beside sfsd's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Watch {
    name: String,
    pid: u32,
}

/// Parses `NAME=PID`.
fn parse_watch(text: &str) -> Result<Watch, String> {
    let (name, pid) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not NAME=PID"))?;
    let pid = pid
        .trim()
        .parse()
        .map_err(|_| format!("`{pid}` in `{text}` is not a process id"))?;
    if name.is_empty() {
        return Err(format!("`{text}` has no name before ="));
    }
    Ok(Watch {
        name: name.to_string(),
        pid,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Backend {
    Local,
    Nfs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Peer {
    /// OpenSSH SFTP, one connection per client
    Sftp,
    /// nginx over TLS 1.3, one wrk keep-alive connection per client
    Nginx,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mode {
    /// One sfsd with one worker per CPU
    Mp,
    /// One sfsd --uniprocessor on one CPU: the baseline
    Uni,
    /// N sfsd --uniprocessor processes, one per CPU, each with its own copy of the data
    Ncopy,
    /// OpenSSH SFTP with chacha20-poly1305@openssh.com (selected with --peer sftp)
    #[value(skip)]
    #[serde(rename = "sftp-chacha20-poly1305")]
    SftpChacha20,
    /// OpenSSH SFTP with aes128-gcm@openssh.com (selected with --peer sftp)
    #[value(skip)]
    #[serde(rename = "sftp-aes128-gcm")]
    SftpAes128Gcm,
    /// nginx, TLS 1.3 with TLS_CHACHA20_POLY1305_SHA256 (selected with --peer nginx)
    #[value(skip)]
    #[serde(rename = "nginx-chacha20-poly1305")]
    NginxChacha20,
    /// nginx, TLS 1.3 with TLS_AES_256_GCM_SHA384 (selected with --peer nginx)
    #[value(skip)]
    #[serde(rename = "nginx-aes256-gcm")]
    NginxAes256Gcm,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Mp => "mp",
            Mode::Uni => "uni",
            Mode::Ncopy => "ncopy",
            Mode::SftpChacha20 => "sftp-chacha20-poly1305",
            Mode::SftpAes128Gcm => "sftp-aes128-gcm",
            Mode::NginxChacha20 => "nginx-chacha20-poly1305",
            Mode::NginxAes256Gcm => "nginx-aes256-gcm",
        }
    }

    /// A peer's cipher, in its own tool's name (`None` for sfsd's modes).
    fn cipher(self) -> Option<&'static str> {
        match self {
            Mode::SftpChacha20 => Some(sftp::CIPHERS[0]),
            Mode::SftpAes128Gcm => Some(sftp::CIPHERS[1]),
            Mode::NginxChacha20 => Some(nginx::CIPHERS[0]),
            Mode::NginxAes256Gcm => Some(nginx::CIPHERS[1]),
            Mode::Mp | Mode::Uni | Mode::Ncopy => None,
        }
    }

    /// The AEAD family of a peer's cipher, to set its CPU per byte beside sfsd's with the
    /// same family (sftp's AES-GCM has a 128-bit key, sfs's and nginx's 256).
    fn family(self) -> Option<Cipher> {
        match self {
            Mode::SftpChacha20 | Mode::NginxChacha20 => Some(Cipher::ChaCha20Poly1305),
            Mode::SftpAes128Gcm | Mode::NginxAes256Gcm => Some(Cipher::Aes256Gcm),
            Mode::Mp | Mode::Uni | Mode::Ncopy => None,
        }
    }
}

/// One configuration to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Config {
    mode: Mode,
    cpus: usize,
}

struct Sample {
    mb_per_s: f64,
    server_cpu_s_per_gb: f64,
    /// The kernel's share of the server's CPU time.
    server_system_share: Option<f64>,
    /// NFS-Ganesha's CPU per byte, with `--backend nfs` (not in `server_cpu_s_per_gb`).
    backend_cpu_s_per_gb: Option<f64>,
    /// Each `--watch` process tree's CPU per byte, in their order.
    watched_cpu_s_per_gb: Vec<f64>,
    client_cpu_s_per_gb: f64,
    serial_fraction: Option<f64>,
}

/// Parses sizes such as `200MiB`, `1GiB`, `64MB`, `4096`.
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a size like 200MiB"))?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "kib" => 1 << 10,
        "m" | "mb" => 1_000_000,
        "mib" => 1 << 20,
        "g" | "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        other => {
            return Err(format!(
                "unknown size unit `{other}` (use KiB, MiB, GiB, KB, MB, GB)"
            ));
        }
    };
    n.checked_mul(scale)
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("`{text}` is not a usable size"))
}

pub(crate) fn run(args: ReadArgs) -> anyhow::Result<()> {
    if args.clients == 0 || args.reps == 0 || args.window == 0 {
        bail!("--clients, --reps and --window must be at least 1");
    }
    if args.backend_url.is_some() && args.backend == Backend::Nfs {
        bail!("--backend nfs starts its own NFS server; --backend-url names another: pick one");
    }
    let sfsd = servers::locate_sfsd(args.sfsd.as_deref())?;
    let machine_cpus = libcolor::available_cpus();
    let mut cpu_counts: Vec<usize> = Vec::new();
    for &c in &args.cpus {
        if c == 0 || c > machine_cpus {
            eprintln!("note: skipping {c} CPU(s): this machine has {machine_cpus}");
        } else if !cpu_counts.contains(&c) {
            cpu_counts.push(c);
        }
    }
    let mut configs = Vec::new();
    if args.modes.contains(&Mode::Uni) {
        configs.push(Config {
            mode: Mode::Uni,
            cpus: 1,
        });
    }
    let mut sftp = args.peer.contains(&Peer::Sftp);
    if sftp && let Err(e) = sftp::check_available() {
        eprintln!("note: skipping the sftp peer: {e}");
        sftp = false;
    }
    let mut nginx = args.peer.contains(&Peer::Nginx);
    if nginx && let Err(e) = nginx::check_available() {
        eprintln!("note: skipping the nginx peer: {e}");
        nginx = false;
    }
    for &cpus in &cpu_counts {
        for mode in [Mode::Mp, Mode::Ncopy] {
            if args.modes.contains(&mode) {
                configs.push(Config { mode, cpus });
            }
        }
        if sftp {
            for mode in [Mode::SftpChacha20, Mode::SftpAes128Gcm] {
                configs.push(Config { mode, cpus });
            }
        }
        if nginx {
            for mode in [Mode::NginxChacha20, Mode::NginxAes256Gcm] {
                configs.push(Config { mode, cpus });
            }
        }
    }
    if configs.is_empty() {
        bail!("nothing to measure: no CPU count fits this machine");
    }

    let scratch;
    let workdir = match &args.workdir {
        Some(dir) => dir.clone(),
        None => {
            scratch = tempfile::tempdir().context("creating a work directory")?;
            scratch.path().to_path_buf()
        }
    };
    let copies = configs
        .iter()
        .map(|c| if c.mode == Mode::Ncopy { c.cpus } else { 1 })
        .max()
        .unwrap_or(1);
    eprintln!(
        "read: {} client(s), {} of data per export, {} copies; {} rep(s) of {:.0}s (+{:.0}s warm-up)",
        args.clients,
        human_bytes(args.file_size),
        copies,
        args.reps,
        args.duration,
        args.warmup
    );
    let exports = if args.backend_url.is_some() {
        // The data is on the NFS server: the directories only stand for it (the users file
        // maps the bench user to their owner).
        (0..copies)
            .map(|i| {
                let dir = workdir.join(format!("export-{i}"));
                std::fs::create_dir_all(&dir).map(|()| dir)
            })
            .collect::<Result<Vec<_>, _>>()?
    } else {
        prepare_exports(&workdir, copies, DATA_FILE, args.file_size)?
    };
    if sftp {
        prepare_exports(&workdir, 1, sftp::SFTP_FILE, sftp::SFTP_FILE_SIZE)?;
    }
    let identity = Arc::new(UserKeypair::generate());
    let users = workdir.join("users");
    servers::write_users_file(&users, BENCH_USER, &identity.public_key(), &exports[0])?;
    let load = LoadConfig {
        user: BENCH_USER.to_string(),
        identity,
        chunk: args.chunk,
        window: args.window,
        verify: args.verify,
        cipher: args.cipher,
    };
    // Ganesha's CPU time is not in the cpu-s/GB column (that is sfsd's alone).
    let ganesha = match args.backend {
        Backend::Local => None,
        Backend::Nfs => {
            eprintln!("read: sfsd in front of NFS-Ganesha (--backend nfs)");
            Some(ganesha::Ganesha::start(&workdir, &exports)?)
        }
    };
    let ctx = Bench {
        ganesha,
        backend_url: args.backend_url.clone(),
        watch: args.watch.clone(),
        sfsd,
        workdir: workdir.clone(),
        exports,
        users,
        load,
        clients: args.clients,
        machine_cpus,
        file_size: args.file_size,
        warmup: Duration::from_secs_f64(args.warmup),
        duration: Duration::from_secs_f64(args.duration),
    };

    if let Some(url) = &ctx.backend_url {
        seed_backend(&ctx, url)?;
    }
    let cipher = crate::cipher::measure(
        args.cipher.cipher(),
        args.chunk as usize,
        Duration::from_millis(600),
    );
    eprintln!(
        "cipher {:?} (this machine, this run): seal {:.2} CPU-s/GB",
        args.cipher.cipher(),
        cipher.seal_cpu_s_per_gb
    );
    let mut samples: Vec<Vec<Sample>> = configs.iter().map(|_| Vec::new()).collect();
    for rep in 0..args.reps {
        for (i, config) in configs.iter().enumerate() {
            eprint!(
                "  rep {}/{}: {} on {} CPU(s) ... ",
                rep + 1,
                args.reps,
                config.mode.name(),
                config.cpus
            );
            let sample = measure(&ctx, *config)
                .with_context(|| format!("{} on {} CPU(s)", config.mode.name(), config.cpus))?;
            eprintln!("{:.0} MB/s", sample.mb_per_s);
            samples[i].push(sample);
        }
    }

    let rows = summarise(
        &configs,
        &samples,
        (ctx.clients, ctx.machine_cpus),
        (args.cipher.cipher(), cipher.seal_cpu_s_per_gb),
        &args.watch,
    );
    print_table(&rows);
    if let Some(path) = &args.json {
        crate::report::write_json_lines(path, &rows)?;
    }
    if let Some(path) = &args.plot {
        plot::figure10(path, &rows.iter().map(plot::Bar::from).collect::<Vec<_>>())?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Everything a measurement needs.
struct Bench {
    ganesha: Option<ganesha::Ganesha>,
    /// `--backend-url`: the NFS export every sfsd serves.
    backend_url: Option<String>,
    watch: Vec<Watch>,
    sfsd: PathBuf,
    workdir: PathBuf,
    exports: Vec<PathBuf>,
    users: PathBuf,
    load: LoadConfig,
    clients: usize,
    machine_cpus: usize,
    file_size: u64,
    warmup: Duration,
    duration: Duration,
}

/// Makes sure the NFS export behind `--backend-url` holds the data file, writing it through
/// an sfsd if it does not.
fn seed_backend(ctx: &Bench, url: &str) -> anyhow::Result<()> {
    let all: Vec<usize> = (0..ctx.machine_cpus).collect();
    let state = ctx.workdir.join("state-0");
    let server = Server::start(
        &ctx.sfsd,
        &all,
        &[],
        &state,
        &ctx.exports[0],
        Some(url),
        &ctx.users,
    )?;
    let target = Target {
        name: server.name.clone(),
        file: DATA_FILE.to_string(),
        file_size: ctx.file_size,
    };
    let started = Instant::now();
    let wrote = load::ensure_file(&target, &ctx.load)
        .with_context(|| format!("writing {DATA_FILE} to {url}"))?;
    server.stop();
    if wrote {
        eprintln!(
            "read: wrote {} to {url} in {:.1}s",
            human_bytes(ctx.file_size),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// Creates `copies` export directories, each with its own copy of the data file, and reads
/// each once so it sits in the page cache.
pub(crate) fn prepare_exports(
    workdir: &Path,
    copies: usize,
    name: &str,
    size: u64,
) -> anyhow::Result<Vec<PathBuf>> {
    let mut exports = Vec::new();
    for i in 0..copies {
        let dir = workdir.join(format!("export-{i}"));
        std::fs::create_dir_all(&dir)?;
        let file = dir.join(name);
        let current = std::fs::metadata(&file).map(|m| m.len()).ok();
        if current != Some(size) {
            let mut out = BufWriter::with_capacity(1 << 20, File::create(&file)?);
            let mut block = vec![0u8; 1 << 20];
            let mut offset = 0u64;
            while offset < size {
                let n = (size - offset).min(block.len() as u64) as usize;
                for (i, b) in block[..n].iter_mut().enumerate() {
                    *b = load::pattern_byte(offset + i as u64);
                }
                out.write_all(&block[..n])?;
                offset += n as u64;
            }
            out.flush()?;
        }
        // Warm the page cache.
        let mut f = File::open(&file)?;
        let mut buf = vec![0u8; 1 << 20];
        while f.read(&mut buf)? > 0 {}
        exports.push(dir);
    }
    Ok(exports)
}

/// The CPUs the clients run on: those the server does not use, if there are any.
fn client_cpus(server_cpus: usize, machine_cpus: usize) -> Vec<usize> {
    let spare: Vec<usize> = (server_cpus..machine_cpus).collect();
    if spare.is_empty() {
        (0..machine_cpus).collect()
    } else {
        spare
    }
}

fn measure_sftp(ctx: &Bench, config: Config, cipher: &str) -> anyhow::Result<Sample> {
    let server_cpus: Vec<usize> = (0..config.cpus).collect();
    let sshd = sftp::Sshd::start(&ctx.workdir.join("sshd"), &server_cpus, cipher)?;
    let cpus = client_cpus(config.cpus, ctx.machine_cpus);
    let file = ctx.exports[0].join(sftp::SFTP_FILE);
    let counters: Vec<Arc<std::sync::atomic::AtomicU64>> =
        (0..ctx.clients).map(|_| Arc::default()).collect();
    let clients = counters
        .iter()
        .enumerate()
        .map(|(i, done)| {
            sftp::SftpClient::start(&sshd, cpus[i % cpus.len()], cipher, &file, done.clone())
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let bytes = || counters.iter().map(|c| c.load(Relaxed)).sum::<u64>() * sftp::SFTP_FILE_SIZE;
    let client_cpu = || {
        clients
            .iter()
            .filter_map(|c| crate::procs::cpu_time(c.pid()))
            .sum::<Duration>()
    };
    std::thread::sleep(ctx.warmup);
    let (b0, t0, c0, k0) = (bytes(), Instant::now(), sshd.cpu_times(), client_cpu());
    std::thread::sleep(ctx.duration);
    let (b1, t1, c1, k1) = (bytes(), Instant::now(), sshd.cpu_times(), client_cpu());
    drop(clients);
    drop(sshd);
    if b1 == b0 {
        bail!("no sftp transfer completed during the window (is sshd working?)");
    }
    let moved = (b1 - b0) as f64;
    let server = c1.since(c0);
    Ok(Sample {
        mb_per_s: moved / 1e6 / (t1 - t0).as_secs_f64(),
        server_cpu_s_per_gb: server.total().as_secs_f64() / (moved / 1e9),
        server_system_share: server.system_share(),
        backend_cpu_s_per_gb: None,
        watched_cpu_s_per_gb: Vec::new(),
        client_cpu_s_per_gb: k1.saturating_sub(k0).as_secs_f64() / (moved / 1e9),
        serial_fraction: None,
    })
}

/// nginx serves the data file sfsd serves; wrk, pinned to the client CPUs with one connection
/// per load client, fetches it over and over: once for the warm-up, once for the window.
fn measure_nginx(ctx: &Bench, config: Config, cipher: &str) -> anyhow::Result<Sample> {
    let server_cpus: Vec<usize> = (0..config.cpus).collect();
    let server = nginx::Nginx::start(
        &ctx.workdir.join("nginx"),
        &server_cpus,
        cipher,
        &ctx.exports[0],
    )?;
    let cpus = client_cpus(config.cpus, ctx.machine_cpus);
    // One or two wrk threads, as the load has CPUs (wrk needs a connection per thread).
    let threads = cpus.len().clamp(1, 2).min(ctx.clients);
    let url = server.url(DATA_FILE);
    let wrk = |seconds: f64| nginx::run_wrk(&server, &url, &cpus, ctx.clients, threads, seconds);
    if !ctx.warmup.is_zero() {
        wrk(ctx.warmup.as_secs_f64())?;
    }
    let c0 = server.cpu_times();
    let run = wrk(ctx.duration.as_secs_f64())?;
    let c1 = server.cpu_times();
    drop(server);
    let moved = run.summary.bytes as f64;
    if moved == 0.0 {
        bail!("wrk read nothing from nginx during the window");
    }
    let used = c1.since(c0);
    Ok(Sample {
        mb_per_s: moved / 1e6 / run.summary.duration.as_secs_f64().max(1e-9),
        server_cpu_s_per_gb: used.total().as_secs_f64() / (moved / 1e9),
        server_system_share: used.system_share(),
        backend_cpu_s_per_gb: None,
        watched_cpu_s_per_gb: Vec::new(),
        client_cpu_s_per_gb: run.cpu.as_secs_f64() / (moved / 1e9),
        serial_fraction: None,
    })
}

fn measure(ctx: &Bench, config: Config) -> anyhow::Result<Sample> {
    match (config.mode, config.mode.cipher()) {
        (Mode::NginxChacha20 | Mode::NginxAes256Gcm, Some(cipher)) => {
            return measure_nginx(ctx, config, cipher);
        }
        (_, Some(cipher)) => return measure_sftp(ctx, config, cipher),
        (_, None) => {}
    }
    let server_cpus: Vec<usize> = (0..config.cpus).collect();
    let mut servers = Vec::new();
    let processes = if config.mode == Mode::Ncopy {
        config.cpus
    } else {
        1
    };
    for p in 0..processes {
        let (cpus, flags): (Vec<usize>, Vec<String>) = match config.mode {
            Mode::Mp => (
                server_cpus.clone(),
                vec!["--workers".into(), config.cpus.to_string()],
            ),
            _ => (vec![p], vec!["--uniprocessor".into()]),
        };
        let state = ctx.workdir.join(format!("state-{p}"));
        servers.push(Server::start(
            &ctx.sfsd,
            &cpus,
            &flags,
            &state,
            &ctx.exports[p],
            ctx.ganesha
                .as_ref()
                .map(|g| g.url(p))
                .or_else(|| ctx.backend_url.clone())
                .as_deref(),
            &ctx.users,
        )?);
    }
    let client_cpus = client_cpus(config.cpus, ctx.machine_cpus);
    let progress = Arc::new(Progress::default());
    let mut clients = Vec::new();
    for i in 0..ctx.clients {
        let server = &servers[i % servers.len()];
        let target = Target {
            name: server.name.clone(),
            file: DATA_FILE.to_string(),
            file_size: ctx.file_size,
        };
        let (load, progress) = (ctx.load.clone(), progress.clone());
        let cpu = client_cpus[i % client_cpus.len()];
        clients.push(std::thread::spawn(move || {
            core_affinity::set_for_current(core_affinity::CoreId { id: cpu });
            let result = load::run(&target, &load, &progress);
            if result.is_err() {
                progress.stop.store(true, Relaxed);
            }
            result
        }));
    }
    std::thread::sleep(ctx.warmup);
    let cpu = |servers: &[Server]| {
        servers
            .iter()
            .map(Server::cpu_times)
            .sum::<crate::procs::CpuTimes>()
    };
    let mine = crate::cputime::process_cpu_time;
    let backend = || ctx.ganesha.as_ref().map(ganesha::Ganesha::cpu_times);
    let watched = || -> Vec<crate::procs::CpuTimes> {
        ctx.watch
            .iter()
            .map(|w| sftp::process_tree_cpu_times(w.pid))
            .collect()
    };
    let (b0, t0, c0, k0, g0, w0) = (
        progress.bytes.load(Relaxed),
        Instant::now(),
        cpu(&servers),
        mine(),
        backend(),
        watched(),
    );
    std::thread::sleep(ctx.duration);
    let (b1, t1, c1, k1, g1, w1) = (
        progress.bytes.load(Relaxed),
        Instant::now(),
        cpu(&servers),
        mine(),
        backend(),
        watched(),
    );
    progress.stop.store(true, Relaxed);
    let mut failure = None;
    for client in clients {
        match client.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failure = Some(e),
            Err(_) => failure = Some(anyhow::anyhow!("a load client panicked")),
        }
    }
    let stats: Vec<_> = servers.into_iter().map(Server::stop).collect();
    if let Some(e) = failure {
        return Err(e.context("a load client failed"));
    }
    let bytes = (b1 - b0) as f64;
    let fractions: Vec<f64> = stats.iter().filter_map(|s| s.serial_fraction).collect();
    let server = c1.since(c0);
    Ok(Sample {
        mb_per_s: bytes / 1e6 / (t1 - t0).as_secs_f64(),
        server_cpu_s_per_gb: server.total().as_secs_f64() / (bytes / 1e9).max(1e-9),
        server_system_share: server.system_share(),
        backend_cpu_s_per_gb: g0
            .zip(g1)
            .map(|(g0, g1)| g1.since(g0).total().as_secs_f64() / (bytes / 1e9).max(1e-9)),
        watched_cpu_s_per_gb: w0
            .iter()
            .zip(&w1)
            .map(|(w0, w1)| w1.since(*w0).total().as_secs_f64() / (bytes / 1e9).max(1e-9))
            .collect(),
        client_cpu_s_per_gb: k1.saturating_sub(k0).as_secs_f64() / (bytes / 1e9).max(1e-9),
        serial_fraction: (!fractions.is_empty())
            .then(|| fractions.iter().sum::<f64>() / fractions.len() as f64),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_size("200MiB"), Ok(200 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("64MB"), Ok(64_000_000));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("0").is_err());
        assert!(parse_size("12furlongs").is_err());
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("99999999999GiB").is_err());
    }
}
