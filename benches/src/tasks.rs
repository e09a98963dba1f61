//! `sfs-bench tasks`: the libasync-smp paper Table 2 on libcolor, beside tokio, plus workloads that
//! stress a colored scheduler where Table 2 does not (`--workloads`):
//!
//! * `table2`: the paper's chains (below), every configuration;
//! * `fan-in`: 16 source colors, each step posting a callback to one of 2 sink colors whose
//!   completion posts the source's next step, so each sink has up to 8 callbacks outstanding
//!   (tokio: source tasks sending to 2 sink tasks over channels, awaiting a reply);
//! * `many-colors`: 4096 chains, each its own color, with a tenth of the work per callback;
//! * `hot-cold`: 8 chains sharing one hot color beside 256 cold single-chain colors (tokio:
//!   the hot chains share a mutex around their work);
//! * `cross-thread`: 2 threads outside the runtime post callbacks into 256 colors, at most
//!   1024 outstanding (tokio: `Handle::spawn` from those threads).
//!
//! Rates are reported per wall second and per CPU second of the whole process (producer
//! threads included), the fair measure on a shared machine.
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
pub(crate) struct TasksArgs {
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
    /// Workloads to run; all but `table2` run only `per-worker+steal` and `tokio`
    #[arg(long, value_delimiter = ',', default_value = "table2")]
    workloads: Vec<Workload>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
pub(crate) enum Workload {
    #[value(name = "table2")]
    Table2,
    #[value(name = "fan-in")]
    FanIn,
    #[value(name = "many-colors")]
    ManyColors,
    #[value(name = "hot-cold")]
    HotCold,
    #[value(name = "cross-thread")]
    CrossThread,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Table2 => "table2",
            Workload::FanIn => "fan-in",
            Workload::ManyColors => "many-colors",
            Workload::HotCold => "hot-cold",
            Workload::CrossThread => "cross-thread",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
pub(crate) enum Config {
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
    workload: &'static str,
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

pub(crate) fn run(args: TasksArgs) -> anyhow::Result<()> {
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
    let mut rows = Vec::new();
    for &workload in &args.workloads {
        let configs: Vec<Config> = if workload == Workload::Table2 {
            args.configs.clone()
        } else {
            args.configs
                .iter()
                .copied()
                .filter(|c| matches!(c, Config::PerWorkerSteal | Config::Tokio))
                .collect()
        };
        let mut samples: Vec<Vec<Sample>> = configs.iter().map(|_| Vec::new()).collect();
        for rep in 0..args.reps {
            for (i, &config) in configs.iter().enumerate() {
                if !args.json {
                    eprintln!(
                        "  {} rep {}/{}: {}",
                        workload.name(),
                        rep + 1,
                        args.reps,
                        config.name()
                    );
                }
                let sample = measure(workload, config, workers, &colors, args.work, &window)
                    .with_context(|| format!("running {} {}", workload.name(), config.name()))?;
                samples[i].push(sample);
            }
        }
        rows.extend(configs.iter().zip(&samples).map(|(&config, samples)| {
            let rates: Vec<f64> = samples.iter().map(|s| s.tasks_per_sec).collect();
            let (lo, hi) = spread(&rates);
            Row {
                workload: workload.name(),
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
        }));
    }
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
    println!(
        "{:<13} {:<18} {:>7} {:>14} {:>25} {:>14} {:>9} {:>9} {:>10}",
        "workload",
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
        let find = |config: &str| {
            rows.iter()
                .find(|b| b.workload == r.workload && b.config == config)
                .map(|b| b.tasks_per_sec)
        };
        let (base, tokio) = (find("shared"), find("tokio"));
        let ratio =
            |b: Option<f64>| b.map_or("-".to_string(), |b| format!("{:.2}x", r.tasks_per_sec / b));
        println!(
            "{:<13} {:<18} {:>7} {:>14.0} {:>12.0} - {:<10.0} {:>14.0} {:>9} {:>9} {:>10.0}",
            r.workload,
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
    workload: Workload,
    config: Config,
    workers: usize,
    colors: &[Color],
    work: u32,
    window: &Window,
) -> anyhow::Result<Sample> {
    match (workload, config) {
        (Workload::Table2, Config::Tokio | Config::TokioSpawn) => {
            measure_tokio(config, workers, colors.len(), work, window)
        }
        (Workload::Table2, _) => {
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
        (_, Config::Tokio | Config::TokioSpawn) => extra::tokio(workload, workers, work, window),
        (_, _) => extra::libcolor(workload, Runtime::builder().workers(workers), work, window),
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

/// The workloads beyond Table 2, on libcolor and on tokio.
mod extra {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    pub(super) const FAN_SOURCES: usize = 16;
    pub(super) const FAN_SINKS: usize = 2;
    pub(super) const MANY: usize = 4096;
    pub(super) const HOT_CHAINS: usize = 8;
    pub(super) const COLD: usize = 256;
    pub(super) const CROSS_COLORS: usize = 256;
    pub(super) const CROSS_PRODUCERS: usize = 2;
    pub(super) const CROSS_OUTSTANDING: usize = 1024;

    fn lanes(workload: Workload) -> usize {
        match workload {
            Workload::Table2 => 1,
            Workload::FanIn => FAN_SOURCES,
            Workload::ManyColors => MANY,
            Workload::HotCold => HOT_CHAINS + COLD,
            Workload::CrossThread => CROSS_PRODUCERS,
        }
    }

    /// A chain in `color`: work, count, repost.
    fn chain(color: Color, index: usize, work: u32, counts: Counters) {
        spin(work, index as u64);
        counts[index].fetch_add(1, Relaxed);
        libcolor::cpucb(color, move || chain(color, index, work, counts));
    }

    /// A fan-in source step: work, then a callback in a sink color which posts the next step.
    fn source(index: usize, work: u32, counts: Counters) {
        spin(work, index as u64);
        counts[index].fetch_add(1, Relaxed);
        let sink = Color(10_000 + (index % FAN_SINKS) as u32);
        libcolor::cpucb(sink, move || {
            spin(work, index as u64);
            counts[index].fetch_add(1, Relaxed);
            libcolor::cpucb(Color(1 + index as u32), move || source(index, work, counts));
        });
    }

    pub(super) fn libcolor(
        workload: Workload,
        builder: libcolor::Builder,
        work: u32,
        window: &Window,
    ) -> anyhow::Result<Sample> {
        let runtime = builder.build()?;
        let handle = runtime.handle();
        let counts = counters(lanes(workload));
        let stop = Arc::new(AtomicBool::new(false));
        let mut producers = Vec::new();
        match workload {
            Workload::Table2 => unreachable!("Table 2 has its own driver"),
            Workload::FanIn => {
                for i in 0..FAN_SOURCES {
                    let counts = counts.clone();
                    handle.cpucb(Color(1 + i as u32), move || source(i, work, counts));
                }
            }
            Workload::ManyColors => {
                for i in 0..MANY {
                    let counts = counts.clone();
                    let color = Color(1 + i as u32);
                    handle.cpucb(color, move || chain(color, i, work / 10, counts));
                }
            }
            Workload::HotCold => {
                for i in 0..HOT_CHAINS + COLD {
                    let counts = counts.clone();
                    let color = if i < HOT_CHAINS {
                        Color(5)
                    } else {
                        Color(100 + i as u32)
                    };
                    handle.cpucb(color, move || chain(color, i, work, counts));
                }
            }
            Workload::CrossThread => {
                let outstanding = Arc::new(AtomicUsize::new(0));
                for p in 0..CROSS_PRODUCERS {
                    let (h, counts, stop, outstanding) = (
                        handle.clone(),
                        counts.clone(),
                        stop.clone(),
                        outstanding.clone(),
                    );
                    producers.push(std::thread::spawn(move || {
                        let mut i = 0u32;
                        while !stop.load(Relaxed) {
                            if outstanding.load(Relaxed) >= CROSS_OUTSTANDING {
                                std::thread::yield_now();
                                continue;
                            }
                            for _ in 0..64 {
                                i = i.wrapping_add(1);
                                let (counts, outstanding) = (counts.clone(), outstanding.clone());
                                outstanding.fetch_add(1, Relaxed);
                                h.cpucb(Color(1 + i % CROSS_COLORS as u32), move || {
                                    spin(work, p as u64);
                                    counts[p].fetch_add(1, Relaxed);
                                    outstanding.fetch_sub(1, Relaxed);
                                });
                            }
                        }
                    }));
                }
            }
        }
        let observer = {
            let (counts, handle, stats_handle) = (counts.clone(), handle.clone(), handle.clone());
            let window = Window { ..*window };
            let stop = stop.clone();
            std::thread::spawn(move || {
                observe(
                    counts,
                    &window,
                    || stats_handle.stats().steals(),
                    || {
                        stop.store(true, Relaxed);
                        handle.stop()
                    },
                )
            })
        };
        runtime.run()?;
        for p in producers {
            let _ = p.join();
        }
        observer
            .join()
            .map_err(|_| anyhow::anyhow!("observer thread panicked"))
    }

    pub(super) fn tokio(
        workload: Workload,
        workers: usize,
        work: u32,
        window: &Window,
    ) -> anyhow::Result<Sample> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .build()?;
        let counts = counters(lanes(workload));
        let stop = Arc::new(AtomicBool::new(false));
        let mut producers = Vec::new();
        let plain = |runtime: &tokio::runtime::Runtime, index: usize, work: u32| {
            let (counts, stop) = (counts.clone(), stop.clone());
            runtime.spawn(async move {
                while !stop.load(Relaxed) {
                    spin(work, index as u64);
                    counts[index].fetch_add(1, Relaxed);
                    tokio::task::yield_now().await;
                }
            });
        };
        match workload {
            Workload::Table2 => unreachable!("Table 2 has its own driver"),
            Workload::FanIn => {
                type Reply = tokio::sync::oneshot::Sender<()>;
                let mut sinks = Vec::new();
                for _ in 0..FAN_SINKS {
                    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Reply)>();
                    let counts = counts.clone();
                    runtime.spawn(async move {
                        while let Some((index, reply)) = rx.recv().await {
                            spin(work, index as u64);
                            counts[index].fetch_add(1, Relaxed);
                            let _ = reply.send(());
                        }
                    });
                    sinks.push(tx);
                }
                for i in 0..FAN_SOURCES {
                    let (counts, stop, sink) =
                        (counts.clone(), stop.clone(), sinks[i % FAN_SINKS].clone());
                    runtime.spawn(async move {
                        while !stop.load(Relaxed) {
                            spin(work, i as u64);
                            counts[i].fetch_add(1, Relaxed);
                            let (tx, rx) = tokio::sync::oneshot::channel();
                            if sink.send((i, tx)).is_err() || rx.await.is_err() {
                                return;
                            }
                        }
                    });
                }
            }
            Workload::ManyColors => {
                for i in 0..MANY {
                    plain(&runtime, i, work / 10);
                }
            }
            Workload::HotCold => {
                let hot = Arc::new(std::sync::Mutex::new(()));
                for i in 0..HOT_CHAINS {
                    let (counts, stop, hot) = (counts.clone(), stop.clone(), hot.clone());
                    runtime.spawn(async move {
                        while !stop.load(Relaxed) {
                            {
                                let _serial = hot.lock().unwrap_or_else(|p| p.into_inner());
                                spin(work, i as u64);
                            }
                            counts[i].fetch_add(1, Relaxed);
                            tokio::task::yield_now().await;
                        }
                    });
                }
                for i in HOT_CHAINS..HOT_CHAINS + COLD {
                    plain(&runtime, i, work);
                }
            }
            Workload::CrossThread => {
                let outstanding = Arc::new(AtomicUsize::new(0));
                for p in 0..CROSS_PRODUCERS {
                    let (h, counts, stop, outstanding) = (
                        runtime.handle().clone(),
                        counts.clone(),
                        stop.clone(),
                        outstanding.clone(),
                    );
                    producers.push(std::thread::spawn(move || {
                        while !stop.load(Relaxed) {
                            if outstanding.load(Relaxed) >= CROSS_OUTSTANDING {
                                std::thread::yield_now();
                                continue;
                            }
                            for _ in 0..64 {
                                let (counts, outstanding) = (counts.clone(), outstanding.clone());
                                outstanding.fetch_add(1, Relaxed);
                                h.spawn(async move {
                                    spin(work, p as u64);
                                    counts[p].fetch_add(1, Relaxed);
                                    outstanding.fetch_sub(1, Relaxed);
                                });
                            }
                        }
                    }));
                }
            }
        }
        let stop_flag = stop.clone();
        let sample = observe(counts, window, || 0, move || stop_flag.store(true, Relaxed));
        for p in producers {
            let _ = p.join();
        }
        runtime.shutdown_timeout(Duration::from_secs(5));
        Ok(sample)
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
            let sample = measure(Workload::Table2, config, 2, &colors, 100, &window).unwrap();
            assert!(sample.tasks_per_sec > 0.0, "{config:?} made no progress");
        }
        for workload in [
            Workload::FanIn,
            Workload::ManyColors,
            Workload::HotCold,
            Workload::CrossThread,
        ] {
            for config in [Config::PerWorkerSteal, Config::Tokio] {
                let sample = measure(workload, config, 2, &colors, 100, &window).unwrap();
                assert!(
                    sample.tasks_per_sec > 0.0,
                    "{workload:?} {config:?} made no progress"
                );
            }
        }
    }
}
