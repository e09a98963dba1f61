//! `sfs-bench idle`: what idle connections cost the server. Opens N authenticated
//! connections (handshake, LOGIN, MOUNT, LOOKUP), leaves them idle, and reports the growth of
//! sfsd's resident memory per connection; measures one active reader's throughput before and
//! with them open, so idle connections are shown not to slow active ones.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use protocol::UserKeypair;
use serde::Serialize;

use crate::read::load::{self, LoadConfig, Progress, Target};
use crate::read::servers::{self, Server};
use crate::read::{BENCH_USER, DATA_FILE, prepare_exports};

#[derive(clap::Args, Debug)]
pub(crate) struct IdleArgs {
    /// Idle connections to open
    #[arg(default_value_t = 2000)]
    connections: usize,
    /// sfsd worker threads
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Seconds the active reader runs, before and with the idle connections
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Threads opening connections
    #[arg(long, default_value_t = 4)]
    openers: usize,
    /// Write the result as one JSON object to FILE
    #[arg(long)]
    json: Option<PathBuf>,
    /// The sfsd binary [default: next to sfs-bench]
    #[arg(long)]
    sfsd: Option<PathBuf>,
}

#[derive(Serialize)]
struct Result {
    connections: usize,
    rss_before_bytes: u64,
    rss_with_idle_bytes: u64,
    bytes_per_connection: f64,
    active_mb_per_s_before: f64,
    active_mb_per_s_with_idle: f64,
    open_seconds: f64,
}

pub(crate) fn run(args: IdleArgs) -> anyhow::Result<()> {
    if args.connections == 0 || args.openers == 0 {
        bail!("connections and --openers must be at least 1");
    }
    raise_fd_limit(args.connections as u64 + 256)?;
    let sfsd = servers::locate_sfsd(args.sfsd.as_deref())?;
    let scratch = tempfile::tempdir().context("creating a work directory")?;
    let work = scratch.path();
    let size = 64u64 << 20;
    let export = prepare_exports(work, 1, DATA_FILE, size)?.remove(0);
    let identity = Arc::new(UserKeypair::generate());
    let users = work.join("users");
    servers::write_users_file(&users, BENCH_USER, &identity.public_key(), &export)?;
    let cpus: Vec<usize> = (0..args.workers.min(libcolor::available_cpus())).collect();
    let server = Server::start(
        &sfsd,
        &cpus,
        &[
            "--workers".into(),
            cpus.len().to_string(),
            "--max-connections".into(),
            (args.connections + 64).to_string(),
        ],
        &work.join("state"),
        &export,
        None,
        &users,
    )?;
    let target = Target {
        name: server.name.clone(),
        file: DATA_FILE.to_string(),
        file_size: size,
    };
    let config = LoadConfig {
        user: BENCH_USER.to_string(),
        identity,
        chunk: 64 * 1024,
        window: 8,
        verify: false,
        cipher: crate::read::load::CipherChoice::Auto,
    };
    let duration = Duration::from_secs_f64(args.duration);
    let rss = || crate::procs::rss_bytes(server.pid()).unwrap_or(0);
    let before = active_rate(&target, &config, duration)?;
    // Let the reader's buffers go back before the baseline.
    std::thread::sleep(Duration::from_millis(300));
    let rss_before = rss();
    eprintln!(
        "idle: baseline {} MiB resident, one reader at {before:.0} MB/s; opening {} connections",
        rss_before >> 20,
        args.connections
    );
    let t0 = Instant::now();
    let idle = open_idle(&target, &config, args.connections, args.openers)?;
    let open_seconds = t0.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(500));
    let rss_with = rss();
    let with = active_rate(&target, &config, duration)?;
    let per_conn = rss_with.saturating_sub(rss_before) as f64 / idle.len() as f64;
    let result = Result {
        connections: idle.len(),
        rss_before_bytes: rss_before,
        rss_with_idle_bytes: rss_with,
        bytes_per_connection: per_conn,
        active_mb_per_s_before: before,
        active_mb_per_s_with_idle: with,
        open_seconds,
    };
    println!(
        "{} idle connections (opened in {:.1} s): sfsd resident {} -> {} MiB, {:.1} KiB per connection",
        result.connections,
        open_seconds,
        rss_before >> 20,
        rss_with >> 20,
        per_conn / 1024.0
    );
    println!(
        "one active reader: {before:.0} MB/s before, {with:.0} MB/s with them open ({:.2}x)",
        with / before.max(1e-9)
    );
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string(&result)? + "\n")?;
        eprintln!("wrote {}", path.display());
    }
    drop(idle);
    server.stop();
    Ok(())
}

/// One reader's MB/s over `duration` (after a second of warm-up).
fn active_rate(target: &Target, config: &LoadConfig, duration: Duration) -> anyhow::Result<f64> {
    let progress = Arc::new(Progress::default());
    let reader = {
        let (target, config, progress) = (target.clone(), config.clone(), progress.clone());
        std::thread::spawn(move || load::run(&target, &config, &progress))
    };
    std::thread::sleep(Duration::from_secs(1));
    let (b0, t0) = (progress.bytes.load(Relaxed), Instant::now());
    std::thread::sleep(duration);
    let (b1, t1) = (progress.bytes.load(Relaxed), Instant::now());
    progress.stop.store(true, Relaxed);
    reader
        .join()
        .map_err(|_| anyhow::anyhow!("the reader panicked"))??;
    Ok((b1 - b0) as f64 / 1e6 / (t1 - t0).as_secs_f64())
}

fn open_idle(
    target: &Target,
    config: &LoadConfig,
    n: usize,
    threads: usize,
) -> anyhow::Result<Vec<load::IdleConnection>> {
    let per_thread = n.div_ceil(threads);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (target, config) = (target.clone(), config.clone());
            let count = per_thread.min(n.saturating_sub(t * per_thread));
            std::thread::spawn(move || {
                (0..count)
                    .map(|_| load::connect_idle(&target, &config))
                    .collect::<anyhow::Result<Vec<_>>>()
            })
        })
        .collect();
    let mut all = Vec::with_capacity(n);
    for h in handles {
        all.extend(
            h.join()
                .map_err(|_| anyhow::anyhow!("an opener panicked"))??,
        );
    }
    Ok(all)
}

/// Raises this process's open-file limit to at least `want` (up to the hard limit).
fn raise_fd_limit(want: u64) -> anyhow::Result<()> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut lim = getrlimit(Resource::Nofile);
    let hard = lim.maximum.unwrap_or(u64::MAX);
    if hard < want {
        bail!("the open-file hard limit ({hard}) is below the {want} descriptors needed");
    }
    lim.current = Some(hard);
    setrlimit(Resource::Nofile, lim).context("raising the open-file limit")?;
    Ok(())
}
