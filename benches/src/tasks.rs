//! `sfs-bench tasks`: paper 001 Table 2 on libcolor, beside tokio.
//!
//! `colors` chains of callbacks, each of a distinct color: every callback does a little
//! computation, counts itself and schedules its child in its own color. The colors are chosen
//! so that, under the initial color-to-worker mapping (`color mod workers`), every worker but
//! the last has chains and the last has none: without stealing it idles, with stealing it
//! takes whole colors from the others. Configurations follow the table's rows (a shared queue,
//! per-worker queues, per-worker queues with stealing) plus the uniprocessor flavour and tokio.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use crossbeam_utils::CachePadded;
use libcolor::{Color, QueueMode, Runtime};
use serde::Serialize;

use crate::cputime::process_cpu_time;
use crate::report::{median, spread};

#[derive(clap::Args, Debug)]
pub struct TasksArgs {
    /// Worker threads for the multiprocessor configurations and tokio [default: CPUs available]
    #[arg(long)]
    workers: Option<usize>,
    /// Number of chains, each with its own color (the paper used 16)
    #[arg(long, default_value_t = 16)]
    colors: usize,
    /// Work per callback, in iterations of a dependent xorshift step (about 1 ns each)
    #[arg(long, default_value_t = 400)]
    work: u32,
    /// Seconds of warm-up before each measured window
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    /// Seconds in each measured window
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    /// Repetitions; configurations are interleaved within each repetition
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Configurations to run, in order
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "uni,shared,per-worker,per-worker+steal,tokio,tokio-spawn"
    )]
    configs: Vec<Config>,
    /// Print one JSON object per configuration and line instead of a table
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
pub enum Config {
    /// libcolor's uniprocessor flavour (one thread)
    #[value(name = "uni")]
    Uni,
    /// One run queue shared by all workers (Table 2 "Base")
    #[value(name = "shared")]
    Shared,
    /// Per-worker queues, no stealing (Table 2 "+ Per-thread Queues")
    #[value(name = "per-worker")]
    PerWorker,
    /// Per-worker queues with whole-color stealing (Table 2 "+ Work Stealing")
    #[value(name = "per-worker+steal")]
    PerWorkerSteal,
    /// tokio multi-thread runtime: one task per chain, `yield_now` between steps
    #[value(name = "tokio")]
    Tokio,
    /// tokio multi-thread runtime: each step spawns the next step as a new task (closest to
    /// libcolor's allocation of a fresh callback per step)
    #[value(name = "tokio-spawn")]
    TokioSpawn,
}

impl Config {
    fn name(self) -> &'static str {
        match self {
            Config::Uni => "uni",
            Config::Shared => "shared",
            Config::PerWorker => "per-worker",
            Config::PerWorkerSteal => "per-worker+steal",
            Config::Tokio => "tokio",
            Config::TokioSpawn => "tokio-spawn",
        }
    }
}

/// One measured window.
struct Sample {
    tasks_per_sec: f64,
    tasks_per_cpu_sec: f64,
    steals: u64,
}

#[derive(Serialize)]
struct Row {
    config: &'static str,
    workers: usize,
    colors: usize,
    work: u32,
    reps: usize,
    tasks_per_sec: f64,
    tasks_per_sec_min: f64,
    tasks_per_sec_max: f64,
    tasks_per_cpu_sec: f64,
    steals_per_sec: f64,
}

struct Window {
    warmup: Duration,
    duration: Duration,
}

pub fn run(args: TasksArgs) -> anyhow::Result<()> {
    let workers = args.workers.unwrap_or_else(libcolor::available_cpus).max(1);
    if args.colors == 0 || args.reps == 0 {
        bail!("--colors and --reps must be at least 1");
    }
    if !(args.warmup >= 0.0 && args.duration > 0.0) {
        bail!("--warmup must be >= 0 and --duration > 0");
    }
    let window = Window {
        warmup: Duration::from_secs_f64(args.warmup),
        duration: Duration::from_secs_f64(args.duration),
    };
    let colors = arranged_colors(args.colors, workers);
    if !args.json {
        eprintln!(
            "tasks: {} chains, work {} per callback, {} worker(s); {} rep(s) of {:.1}s (+{:.1}s warm-up) per configuration",
            args.colors, args.work, workers, args.reps, args.duration, args.warmup
        );
    }
    let mut samples: Vec<Vec<Sample>> = args.configs.iter().map(|_| Vec::new()).collect();
    for rep in 0..args.reps {
        for (i, &config) in args.configs.iter().enumerate() {
            if !args.json {
                eprintln!("  rep {}/{}: {}", rep + 1, args.reps, config.name());
            }
            let sample = measure(config, workers, &colors, args.work, &window)
                .with_context(|| format!("running {}", config.name()))?;
            samples[i].push(sample);
        }
    }
    let rows: Vec<Row> = args
        .configs
        .iter()
        .zip(&samples)
        .map(|(&config, samples)| {
            let rates: Vec<f64> = samples.iter().map(|s| s.tasks_per_sec).collect();
            let (lo, hi) = spread(&rates);
            Row {
                config: config.name(),
                workers: if config == Config::Uni { 1 } else { workers },
                colors: args.colors,
                work: args.work,
                reps: args.reps,
                tasks_per_sec: median(&rates),
                tasks_per_sec_min: lo,
                tasks_per_sec_max: hi,
                tasks_per_cpu_sec: median(
                    &samples
                        .iter()
                        .map(|s| s.tasks_per_cpu_sec)
                        .collect::<Vec<_>>(),
                ),
                steals_per_sec: median(
                    &samples
                        .iter()
                        .map(|s| s.steals as f64 / window.duration.as_secs_f64())
                        .collect::<Vec<_>>(),
                ),
            }
        })
        .collect();
    if args.json {
        for row in &rows {
            println!("{}", serde_json::to_string(row)?);
        }
    } else {
        print_table(&rows);
    }
    Ok(())
}

/// Colors whose initial worker (`color mod workers`) is never the last worker, so that one
/// worker starts with no work (as in the paper's setup).
fn arranged_colors(count: usize, workers: usize) -> Vec<Color> {
    (1u32..)
        .filter(|c| workers == 1 || (*c as usize % libcolor::COLOR_SLOTS) % workers != workers - 1)
        .take(count)
        .map(Color)
        .collect()
}

fn print_table(rows: &[Row]) {
    let base = rows
        .iter()
        .find(|r| r.config == "shared")
        .map(|r| r.tasks_per_sec);
    let tokio = rows
        .iter()
        .find(|r| r.config == "tokio")
        .map(|r| r.tasks_per_sec);
    println!(
        "{:<18} {:>7} {:>14} {:>25} {:>14} {:>9} {:>9} {:>10}",
        "config",
        "workers",
        "tasks/s",
        "spread (min-max)",
        "tasks/cpu-s",
        "vs shared",
        "vs tokio",
        "steals/s"
    );
    for r in rows {
        let ratio =
            |b: Option<f64>| b.map_or("-".to_string(), |b| format!("{:.2}x", r.tasks_per_sec / b));
        println!(
            "{:<18} {:>7} {:>14.0} {:>12.0} - {:<10.0} {:>14.0} {:>9} {:>9} {:>10.0}",
            r.config,
            r.workers,
            r.tasks_per_sec,
            r.tasks_per_sec_min,
            r.tasks_per_sec_max,
            r.tasks_per_cpu_sec,
            ratio(base),
            ratio(tokio),
            r.steals_per_sec
        );
    }
}

/// The "little work" of each callback: a xorshift chain, each step depending on the last, so
/// the compiler can neither vectorise nor shortcut it (about 1 ns per iteration).
#[inline]
fn spin(iterations: u32, seed: u64) -> u64 {
    let mut x = seed | 1;
    for _ in 0..iterations {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    std::hint::black_box(x)
}

type Counters = Arc<Vec<CachePadded<AtomicU64>>>;

fn counters(n: usize) -> Counters {
    Arc::new(
        (0..n)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect(),
    )
}

fn total(counters: &Counters) -> u64 {
    counters.iter().map(|c| c.load(Relaxed)).sum()
}

/// Samples the counters over the window from a separate thread, then calls `stop`.
fn observe(
    counters: Counters,
    window: &Window,
    steals: impl Fn() -> u64,
    stop: impl FnOnce(),
) -> Sample {
    std::thread::sleep(window.warmup);
    let (n0, t0, c0, s0) = (
        total(&counters),
        Instant::now(),
        process_cpu_time(),
        steals(),
    );
    std::thread::sleep(window.duration);
    let (n1, t1, c1, s1) = (
        total(&counters),
        Instant::now(),
        process_cpu_time(),
        steals(),
    );
    stop();
    let tasks = (n1 - n0) as f64;
    let cpu = (c1.saturating_sub(c0)).as_secs_f64().max(1e-9);
    Sample {
        tasks_per_sec: tasks / (t1 - t0).as_secs_f64(),
        tasks_per_cpu_sec: tasks / cpu,
        steals: s1 - s0,
    }
}

fn measure(
    config: Config,
    workers: usize,
    colors: &[Color],
    work: u32,
    window: &Window,
) -> anyhow::Result<Sample> {
    match config {
        Config::Tokio | Config::TokioSpawn => {
            measure_tokio(config, workers, colors.len(), work, window)
        }
        _ => {
            let builder = match config {
                Config::Uni => Runtime::builder().uniprocessor(),
                Config::Shared => Runtime::builder()
                    .workers(workers)
                    .queue_mode(QueueMode::Shared),
                Config::PerWorker => Runtime::builder().workers(workers).stealing(false),
                _ => Runtime::builder().workers(workers),
            };
            measure_libcolor(builder, colors, work, window)
        }
    }
}

fn measure_libcolor(
    builder: libcolor::Builder,
    colors: &[Color],
    work: u32,
    window: &Window,
) -> anyhow::Result<Sample> {
    let runtime = builder.build()?;
    let handle = runtime.handle();
    let counts = counters(colors.len());
    for (i, &color) in colors.iter().enumerate() {
        let counts = counts.clone();
        handle.cpucb(color, move || step(color, i, work, counts));
    }
    let observer = {
        let (counts, handle, stats_handle) = (counts.clone(), handle.clone(), handle.clone());
        let window = Window { ..*window };
        std::thread::spawn(move || {
            observe(
                counts,
                &window,
                || stats_handle.stats().steals(),
                || handle.stop(),
            )
        })
    };
    runtime.run()?;
    observer
        .join()
        .map_err(|_| anyhow::anyhow!("observer thread panicked"))
}

/// One link of a chain: work, count, schedule the child in the same color.
fn step(color: Color, index: usize, work: u32, counts: Counters) {
    spin(work, index as u64);
    counts[index].fetch_add(1, Relaxed);
    libcolor::cpucb(color, move || step(color, index, work, counts));
}

fn measure_tokio(
    config: Config,
    workers: usize,
    chains: usize,
    work: u32,
    window: &Window,
) -> anyhow::Result<Sample> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .build()?;
    let counts = counters(chains);
    let stop = Arc::new(AtomicBool::new(false));
    for index in 0..chains {
        let (counts, stop) = (counts.clone(), stop.clone());
        match config {
            Config::TokioSpawn => {
                runtime.spawn(async move { tokio_step(index, work, counts, stop) });
            }
            _ => {
                runtime.spawn(async move {
                    while !stop.load(Relaxed) {
                        spin(work, index as u64);
                        counts[index].fetch_add(1, Relaxed);
                        tokio::task::yield_now().await;
                    }
                });
            }
        }
    }
    let stop_flag = stop.clone();
    let sample = observe(counts, window, || 0, move || stop_flag.store(true, Relaxed));
    runtime.shutdown_timeout(Duration::from_secs(5));
    Ok(sample)
}

fn tokio_step(index: usize, work: u32, counts: Counters, stop: Arc<AtomicBool>) {
    spin(work, index as u64);
    counts[index].fetch_add(1, Relaxed);
    if !stop.load(Relaxed) {
        tokio::spawn(async move { tokio_step(index, work, counts, stop) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arranged_colors_leave_the_last_worker_empty() {
        let colors = arranged_colors(16, 4);
        assert_eq!(colors.len(), 16);
        assert!(colors.iter().all(|c| c.0 % 4 != 3));
        let mut distinct = colors.clone();
        distinct.dedup();
        assert_eq!(distinct.len(), 16);
        assert_eq!(arranged_colors(3, 1), vec![Color(1), Color(2), Color(3)]);
    }

    #[test]
    fn every_configuration_makes_progress() {
        let window = Window {
            warmup: Duration::from_millis(20),
            duration: Duration::from_millis(100),
        };
        let colors = arranged_colors(4, 2);
        for config in [
            Config::Uni,
            Config::Shared,
            Config::PerWorker,
            Config::PerWorkerSteal,
            Config::Tokio,
            Config::TokioSpawn,
        ] {
            let sample = measure(config, 2, &colors, 100, &window).unwrap();
            assert!(sample.tasks_per_sec > 0.0, "{config:?} made no progress");
        }
    }
}
