//! `colorweb`: serve a directory over HTTP/1.1 on libcolor.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use colorweb::server::{self, Config};

#[derive(Parser)]
#[command(
    name = "colorweb",
    version,
    about = "Static-file HTTP/1.1 server on libcolor (the libasync-smp paper's web server)",
    long_about = "Static-file HTTP/1.1 server on libcolor, the colored-callback runtime \
        (libasync-smp, Zeldovich et al., USENIX 2003, Figures 7-9).\n\n\
        Serves GET and HEAD for regular files under --root, with keep-alive, pipelining, \
        Last-Modified/If-Modified-Since and single byte ranges. Accepting runs in color 0, \
        each connection in its own color (connections run in parallel on --cpus workers), \
        the file cache in 64 shard colors. Files up to a 256th of --cache-mb (at most \
        1 MiB) are cached in memory; larger ones are sent with sendfile.\n\n\
        Prints `colorweb listening on ADDR` on stdout once it accepts connections; stops on \
        SIGINT or SIGTERM."
)]
struct Cli {
    /// Directory served at `/` (nothing outside it is reachable, symlinks included).
    #[arg(long)]
    root: PathBuf,
    /// Address to listen on (port 0 picks a free port, printed at start).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// libcolor worker threads (default: the CPUs this process may use).
    #[arg(long)]
    cpus: Option<usize>,
    /// The uniprocessor flavour of libcolor (one thread, the baseline for speedups).
    #[arg(long)]
    uni: bool,
    /// Memory for the file cache, in MiB.
    #[arg(long, default_value_t = 64)]
    cache_mb: usize,
    /// Open connections beyond which new ones are closed at once.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Requests of one connection waiting for an answer before it stops reading.
    #[arg(long, default_value_t = 32)]
    max_pipelined: usize,
    /// Seconds a request may take to arrive completely (slowloris bound).
    #[arg(long, default_value_t = 10.0)]
    header_timeout: f64,
    /// Seconds an idle keep-alive connection (or one whose peer reads nothing) is kept.
    #[arg(long, default_value_t = 60.0)]
    idle_timeout: f64,
    /// Set SO_REUSEPORT, so that several copies can listen on one port.
    #[arg(long)]
    reuseport: bool,
    /// Pin worker i to the i-th CPU of this comma-separated list.
    #[arg(long, value_delimiter = ',')]
    pin: Vec<usize>,
    /// Never move a color (a connection) to another worker: each stays on the worker
    /// `color mod --cpus`, so its socket's state stays in one CPU's cache, at the price of
    /// idle workers not helping busy ones.
    #[arg(long)]
    no_stealing: bool,
    /// At exit, print libcolor's per-worker statistics on stderr (callbacks, steals, polls,
    /// idle, CPU and awake time): where a multi-worker run's time went.
    #[arg(long)]
    stats: bool,
}

/// One line per worker of the runtime's counters, for `--stats`.
fn print_stats(stats: &libcolor::Stats) {
    let mut err = std::io::stderr().lock();
    for (i, w) in stats.workers.iter().enumerate() {
        let _ = writeln!(
            err,
            "colorweb worker {i}: callbacks {} steals {} stolen-colors {} polls {} takeovers {} \
             wakeups {} idle {:.3}s poll-busy {:.3}s cpu {:.3}s awake {:.3}s",
            w.callbacks,
            w.steals,
            w.stolen_callbacks,
            w.polls,
            w.takeovers,
            w.wakeups,
            w.idle.as_secs_f64(),
            w.poll_busy.as_secs_f64(),
            w.cpu.as_secs_f64(),
            w.awake.as_secs_f64(),
        );
    }
}

fn seconds(s: f64, what: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| anyhow::anyhow!("--{what} must be a non-negative number of seconds"))
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let cfg = Config {
        root: cli.root,
        listen: cli.listen,
        cpus: cli.cpus.unwrap_or_else(libcolor::available_cpus).max(1),
        uni: cli.uni,
        cache_bytes: cli.cache_mb.saturating_mul(1 << 20),
        max_connections: cli.max_connections.max(1),
        max_pipelined: cli.max_pipelined.max(1),
        header_timeout: seconds(cli.header_timeout, "header-timeout")?,
        idle_timeout: seconds(cli.idle_timeout, "idle-timeout")?,
        reuseport: cli.reuseport,
        pin: cli.pin,
        stealing: !cli.no_stealing,
    };
    let stats = server::run(cfg, |addr| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "colorweb listening on {addr}");
        let _ = out.flush();
    })?;
    if cli.stats {
        print_stats(&stats);
    }
    Ok(())
}
