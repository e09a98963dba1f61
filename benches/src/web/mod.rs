//! `sfs-bench web`: the libasync-smp paper's web server experiment (Figures 7-9) on colorweb.
//! wrk's keep-alive clients fetch small files from a working set that fits in memory; the
//! server runs with 1..N pinned CPUs as one libcolor process (`mp`), as its uniprocessor
//! flavour (`uni`, 1 CPU), as N uniprocessor copies on one port (`ncopy`), and as nginx with
//! N workers (`nginx`), all in the same run. Then a concurrency sweep (Figure 9): requests/s
//! against the number of concurrent clients, at the largest CPU count.
//!
//! Requests/s and MB/s are wrk's exact totals over its own duration (its Lua `done` hook);
//! the server's CPU time is read from /proc before and after the measured window, so
//! `cpu-us/req` and `req/cpu-s` count every thread and process of the server, kernel time
//! included (on loopback that includes TCP's receive path of the server's sends).

mod plot;
mod servers;

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use crate::report::{median, write_json_lines};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mode {
    Mp,
    Uni,
    Ncopy,
    Nginx,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Mp => "mp",
            Mode::Uni => "uni",
            Mode::Ncopy => "ncopy",
            Mode::Nginx => "nginx",
        }
    }
}

#[derive(clap::Args, Debug)]
pub(crate) struct WebArgs {
    /// CPU counts to give the server; counts above this machine's CPUs are skipped
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    cpus: Vec<usize>,
    /// Server arrangements to measure (`uni` runs at 1 CPU only)
    #[arg(long, value_delimiter = ',', default_value = "mp,uni,ncopy,nginx")]
    modes: Vec<Mode>,
    /// Files in the working set
    #[arg(long, default_value_t = 2000)]
    files: usize,
    /// Bytes per file
    #[arg(long, default_value_t = 4096)]
    file_size: usize,
    /// Concurrent keep-alive connections (wrk -c)
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// wrk threads
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Seconds of warm-up before each measured window (fills the caches)
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Seconds in each measured window (whole seconds: wrk's unit)
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Repetitions; all configurations run once per repetition, interleaved
    #[arg(long, default_value_t = 1)]
    reps: usize,
    /// Concurrency sweep (Figure 9): connection counts, at the largest CPU count, for mp,
    /// ncopy and nginx (those of --modes)
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64,256")]
    sweep: Vec<usize>,
    /// Skip the concurrency sweep
    #[arg(long)]
    no_sweep: bool,
    /// Write one JSON object per measurement and line to FILE
    #[arg(long)]
    json: Option<PathBuf>,
    /// Draw the paper's Figures 7-9 (and the CPU cost per request) as SVG files into DIR
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// Measure nothing: read the samples a previous run wrote with --json from FILE, then
    /// print the tables and draw the plots (--plot) from them
    #[arg(long, value_name = "FILE")]
    from_json: Option<PathBuf>,
    /// The colorweb binary [default: next to sfs-bench]
    #[arg(long)]
    colorweb: Option<PathBuf>,
}

/// One measured window.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Sample {
    pub mode: Mode,
    pub cpus: usize,
    pub connections: usize,
    pub rep: usize,
    pub requests_per_sec: f64,
    pub mb_per_sec: f64,
    /// Server CPU time (user + system, all processes) per request, microseconds.
    pub cpu_us_per_request: f64,
    pub server_kernel_share: f64,
    pub sweep: bool,
}

/// Prints wrk's exact totals; requests cycle through the working set from a per-thread offset.
fn wrk_script(files: usize) -> String {
    format!(
        r#"local n = {files}
local reqs = {{}}
local i = 0
init = function(args)
  for k = 0, n - 1 do reqs[k] = wrk.format("GET", "/f" .. k) end
  i = math.random(0, n - 1)
end
request = function()
  i = (i + 7919) % n
  return reqs[i]
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("sfs-bench-wrk bytes=%d duration_us=%d requests=%d status_errors=%d connect_errors=%d\n",
    summary.bytes, summary.duration, summary.requests, e.status, e.connect))
end
"#
    )
}

struct Ctx {
    args: WebArgs,
    work: tempfile::TempDir,
    root: PathBuf,
    script: PathBuf,
    bin: PathBuf,
    machine_cpus: usize,
}

/// The CPUs the clients run on: those the server does not use, if any.
fn client_cpus(server: usize, machine: usize) -> Vec<usize> {
    let spare: Vec<usize> = (server..machine).collect();
    if spare.is_empty() {
        (0..machine).collect()
    } else {
        spare
    }
}

fn run_wrk(
    ctx: &Ctx,
    port: u16,
    cpus: &[usize],
    connections: usize,
    seconds: f64,
) -> anyhow::Result<crate::read::nginx::WrkSummary> {
    let load = crate::read::nginx::WrkLoad {
        cpus,
        threads: ctx.args.threads.clamp(1, connections.max(1)),
        connections,
        seconds,
        request_timeout: "10s",
        script: &ctx.script,
        url: &format!("http://127.0.0.1:{port}/"),
    };
    Ok(load.run()?.summary)
}

fn measure(
    ctx: &Ctx,
    mode: Mode,
    cpus: usize,
    connections: usize,
    rep: usize,
    sweep: bool,
) -> anyhow::Result<Sample> {
    let server_cpus: Vec<usize> = (0..cpus).collect();
    let running = match mode {
        Mode::Mp => servers::colorweb_mp(&ctx.bin, &ctx.root, &server_cpus)?,
        Mode::Uni => servers::colorweb_copies(&ctx.bin, &ctx.root, &server_cpus[..1])?,
        Mode::Ncopy => servers::colorweb_copies(&ctx.bin, &ctx.root, &server_cpus)?,
        Mode::Nginx => servers::nginx(
            &ctx.work
                .path()
                .join(format!("nginx-{cpus}-{connections}-{rep}")),
            &ctx.root,
            &server_cpus,
        )?,
    };
    let clients = client_cpus(cpus, ctx.machine_cpus);
    if ctx.args.warmup > 0.0 {
        run_wrk(ctx, running.port, &clients, connections, ctx.args.warmup)?;
    }
    let before = running.cpu_times();
    let s = run_wrk(ctx, running.port, &clients, connections, ctx.args.duration)?;
    let used = running.cpu_times().since(before);
    let secs = s.duration.as_secs_f64().max(1e-9);
    let requests = s.requests.max(1) as f64;
    Ok(Sample {
        mode,
        cpus,
        connections,
        rep,
        requests_per_sec: s.requests as f64 / secs,
        mb_per_sec: s.bytes as f64 / secs / 1e6,
        cpu_us_per_request: used.total().as_secs_f64() * 1e6 / requests,
        server_kernel_share: used.system_share().unwrap_or(0.0),
        sweep,
    })
}

fn make_root(dir: &Path, files: usize, size: usize) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    for i in 0..files {
        let body: Vec<u8> = (0..size).map(|j| (i * 31 + j) as u8).collect();
        std::fs::write(dir.join(format!("f{i}")), body)?;
    }
    Ok(())
}

fn colorweb_binary(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let bin = match given {
        Some(p) => p,
        None => std::env::current_exe()?
            .parent()
            .context("sfs-bench has no directory")?
            .join("colorweb"),
    };
    if !bin.is_file() {
        bail!(
            "{} not found: build it (cargo build --release -p colorweb) or pass --colorweb",
            bin.display()
        );
    }
    Ok(bin)
}

/// Reads the JSON lines `--json` wrote.
fn read_samples(path: &Path) -> anyhow::Result<Vec<Sample>> {
    crate::report::read_json_lines(path)
}

/// The modes in the order repetition `rep` measures them: rotated by one each repetition.
/// A configuration measured right after another ran 5-15% faster on this machine (at 1 CPU
/// `uni` and `ncopy` are the same program, and `ncopy`, always right after `uni`, won every
/// repetition), so a fixed order would bias the ratios.
fn in_turn(modes: &[Mode], rep: usize) -> Vec<Mode> {
    let mut order = modes.to_vec();
    let n = order.len();
    if n > 0 {
        order.rotate_left(rep % n);
    }
    order
}

/// Prints the tables of `samples` (and draws them with --plot) without measuring.
fn replay(path: &Path, plot_dir: Option<&Path>) -> anyhow::Result<()> {
    let samples = read_samples(path)?;
    let mut cpus: Vec<usize> = samples
        .iter()
        .filter(|s| !s.sweep)
        .map(|s| s.cpus)
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    let mut sweep: Vec<usize> = samples
        .iter()
        .filter(|s| s.sweep)
        .map(|s| s.connections)
        .collect();
    sweep.sort_unstable();
    sweep.dedup();
    print_tables(&samples, &cpus, &sweep);
    draw(plot_dir, &samples)
}

fn draw(plot_dir: Option<&Path>, samples: &[Sample]) -> anyhow::Result<()> {
    if let Some(dir) = plot_dir {
        for f in plot::all(dir, samples)? {
            eprintln!("wrote {}", f.display());
        }
    }
    Ok(())
}

pub(crate) fn run(args: WebArgs) -> anyhow::Result<()> {
    if let Some(path) = &args.from_json {
        return replay(path, args.plot.as_deref());
    }
    let bin = colorweb_binary(args.colorweb.clone())?;
    let machine_cpus = libcolor::available_cpus();
    let work = tempfile::tempdir()?;
    let root = work.path().join("root");
    make_root(&root, args.files, args.file_size)?;
    let script = work.path().join("web.lua");
    std::fs::write(&script, wrk_script(args.files))?;
    let mut cpus: Vec<usize> = args
        .cpus
        .iter()
        .copied()
        .filter(|&c| c >= 1 && c <= machine_cpus)
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    if cpus.is_empty() {
        bail!("no CPU count in --cpus fits this machine ({machine_cpus} CPUs)");
    }
    if args.modes.contains(&Mode::Nginx) && !Path::new(crate::read::nginx::NGINX).exists() {
        bail!("nginx not found (scripts/bench-peers.sh installs it), or leave it out of --modes");
    }
    let ctx = Ctx {
        args,
        work,
        root,
        script,
        bin,
        machine_cpus,
    };
    eprintln!(
        "sfs-bench web: {} files of {} bytes, {} connections, {} s windows, {} rep(s), {} CPUs on this machine",
        ctx.args.files,
        ctx.args.file_size,
        ctx.args.connections,
        ctx.args.duration,
        ctx.args.reps,
        machine_cpus
    );
    let mut samples = Vec::new();
    for rep in 0..ctx.args.reps {
        for &c in &cpus {
            for mode in in_turn(&ctx.args.modes, rep) {
                if mode == Mode::Uni && c != 1 {
                    continue;
                }
                let s = measure(&ctx, mode, c, ctx.args.connections, rep, false)
                    .with_context(|| format!("{} on {c} CPU(s)", mode.name()))?;
                eprintln!(
                    "  rep {rep} {:>5} cpus={c}: {:>9.0} req/s {:>7.1} MB/s {:>6.1} cpu-us/req",
                    mode.name(),
                    s.requests_per_sec,
                    s.mb_per_sec,
                    s.cpu_us_per_request
                );
                samples.push(s);
            }
        }
    }
    let top = *cpus.last().unwrap_or(&1);
    let sweep = if ctx.args.no_sweep {
        Vec::new()
    } else {
        ctx.args.sweep.clone()
    };
    for &conns in &sweep {
        for mode in [Mode::Mp, Mode::Ncopy, Mode::Nginx] {
            if !ctx.args.modes.contains(&mode) {
                continue;
            }
            let s = measure(&ctx, mode, top, conns.max(1), 0, true)
                .with_context(|| format!("sweep: {} with {conns} connections", mode.name()))?;
            eprintln!(
                "  sweep {:>5} c={conns}: {:>9.0} req/s",
                mode.name(),
                s.requests_per_sec
            );
            samples.push(s);
        }
    }
    print_tables(&samples, &cpus, &sweep);
    if let Some(path) = &ctx.args.json {
        write_json_lines(path, &samples)?;
    }
    draw(ctx.args.plot.as_deref(), &samples)
}

/// A field over the repetitions of one configuration (`sweep`: the sweep's point of that
/// many connections, else the CPU-count runs).
fn values(
    samples: &[Sample],
    mode: Mode,
    cpus: usize,
    sweep: Option<usize>,
    f: fn(&Sample) -> f64,
) -> Vec<f64> {
    samples
        .iter()
        .filter(|s| {
            s.mode == mode
                && s.cpus == cpus
                && match sweep {
                    Some(c) => s.sweep && s.connections == c,
                    None => !s.sweep,
                }
        })
        .map(f)
        .collect()
}

/// Median of a field over the repetitions of one configuration.
fn med(
    samples: &[Sample],
    mode: Mode,
    cpus: usize,
    sweep: Option<usize>,
    f: fn(&Sample) -> f64,
) -> Option<f64> {
    let v = values(samples, mode, cpus, sweep, f);
    (!v.is_empty()).then(|| median(&v))
}

fn print_tables(samples: &[Sample], cpus: &[usize], sweep: &[usize]) {
    println!();
    println!(
        "{:>4}  {:<6} {:>10} {:>8} {:>10} {:>10} {:>6} {:>9} {:>9}",
        "cpus",
        "server",
        "req/s",
        "MB/s",
        "cpu-us/req",
        "req/cpu-s",
        "kern%",
        "mp/ncopy",
        "mp/nginx"
    );
    for &c in cpus {
        for mode in [Mode::Mp, Mode::Uni, Mode::Ncopy, Mode::Nginx] {
            let Some(rate) = med(samples, mode, c, None, |s| s.requests_per_sec) else {
                continue;
            };
            let mb = med(samples, mode, c, None, |s| s.mb_per_sec).unwrap_or(0.0);
            let cpu = med(samples, mode, c, None, |s| s.cpu_us_per_request).unwrap_or(0.0);
            let kern = med(samples, mode, c, None, |s| s.server_kernel_share).unwrap_or(0.0);
            let ratio = |other: Mode| -> String {
                match (mode, med(samples, other, c, None, |s| s.requests_per_sec)) {
                    (Mode::Mp, Some(o)) if o > 0.0 => format!("{:.2}", rate / o),
                    _ => String::new(),
                }
            };
            println!(
                "{:>4}  {:<6} {:>10.0} {:>8.1} {:>10.1} {:>10.0} {:>6.0} {:>9} {:>9}",
                c,
                mode.name(),
                rate,
                mb,
                cpu,
                if cpu > 0.0 { 1e6 / cpu } else { 0.0 },
                kern * 100.0,
                ratio(Mode::Ncopy),
                ratio(Mode::Nginx)
            );
        }
    }
    let top = *cpus.last().unwrap_or(&1);
    if !sweep.is_empty() {
        println!();
        println!("concurrency sweep at {top} CPU(s) (Figure 9): requests/s");
        println!(
            "{:>6} {:>10} {:>10} {:>10}",
            "conns", "mp", "ncopy", "nginx"
        );
        for &c in sweep {
            let cell = |m: Mode| {
                med(samples, m, top, Some(c.max(1)), |s| s.requests_per_sec)
                    .map_or(String::from("-"), |v| format!("{v:.0}"))
            };
            println!(
                "{:>6} {:>10} {:>10} {:>10}",
                c,
                cell(Mode::Mp),
                cell(Mode::Ncopy),
                cell(Mode::Nginx)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_takes_every_place_in_turn() {
        let modes = [Mode::Mp, Mode::Uni, Mode::Ncopy, Mode::Nginx];
        assert_eq!(in_turn(&modes, 0), modes);
        assert_eq!(
            in_turn(&modes, 1),
            [Mode::Uni, Mode::Ncopy, Mode::Nginx, Mode::Mp]
        );
        assert_eq!(in_turn(&modes, 4), modes);
        for place in 0..modes.len() {
            let first: Vec<Mode> = (0..4).map(|rep| in_turn(&modes, rep)[place]).collect();
            for m in modes {
                assert!(first.contains(&m), "{m:?} never at place {place}");
            }
        }
        assert!(in_turn(&[], 3).is_empty());
    }

    #[test]
    fn the_script_cycles_over_every_file_and_prints_the_totals_line() {
        let s = wrk_script(2000);
        assert!(s.contains("local n = 2000"));
        assert!(s.contains("wrk.format(\"GET\", \"/f\" .. k)"));
        assert!(s.contains("sfs-bench-wrk bytes=%d"));
    }

    #[test]
    fn clients_use_spare_cpus_or_share() {
        assert_eq!(client_cpus(1, 2), vec![1]);
        assert_eq!(client_cpus(2, 2), vec![0, 1]);
    }
}
