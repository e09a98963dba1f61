//! `sfsd`: the parallel SFS-like file server on libcolor. See `sfsd --help`.

mod changes;
mod cli;
mod config;
mod conn;
mod fs;
mod leases;
mod limits;
mod listener;
mod output;
mod read;
mod server;
mod state;
mod users;

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Parser;
use protocol::{HandshakeConfig, Location};

use cli::{Cli, Command, ServeArgs};

fn main() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SFSD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Init { state, location } => init(&state, &location),
        Command::Serve(args) => serve(*args),
    };
    if let Err(e) = result {
        eprintln!("sfsd: error: {e:#}");
        std::process::exit(1);
    }
}

fn init(dir: &std::path::Path, location: &str) -> Result<()> {
    let location = state::parse_location(location)?;
    let st = state::init(dir, &location)?;
    println!("{}", st.name());
    Ok(())
}

/// The location in the name: `--location`, else the stored one if its port is the one we
/// listen on, else the listening address.
fn pick_location(args: &ServeArgs, dir: &std::path::Path, addr: SocketAddr) -> Result<Location> {
    if let Some(l) = &args.location {
        return state::parse_location(l);
    }
    if let Ok(text) = std::fs::read_to_string(dir.join("location"))
        && let Ok(l) = state::parse_location(text.trim())
        && l.port() == addr.port()
    {
        return Ok(l);
    }
    let host = match addr.ip() {
        ip if ip.is_unspecified() => "localhost".to_string(),
        std::net::IpAddr::V4(ip) => ip.to_string(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
    };
    Location::new(&host, addr.port()).map_err(|e| anyhow::anyhow!("location: {e}"))
}

fn serve(args: ServeArgs) -> Result<()> {
    let args = match args.config.clone() {
        Some(path) => config::merge(args, &path)?,
        None => args,
    };
    let Some(dir) = args.state.clone() else {
        bail!("--state DIR is required (or `state` in the config file)");
    };
    let Some(export) = args.export.clone() else {
        bail!("--export PATH is required (or `export` in the config file)");
    };
    let listen: SocketAddr = args
        .listen
        .as_deref()
        .unwrap_or("0.0.0.0:4004")
        .parse()
        .context("--listen wants IP:PORT")?;
    let std_listener =
        std::net::TcpListener::bind(listen).with_context(|| format!("listening on {listen}"))?;
    std_listener.set_nonblocking(true)?;
    let addr = std_listener.local_addr()?;
    if !state::exists(&dir) {
        let location = pick_location(&args, &dir, addr)?;
        let st = state::init(&dir, &location)?;
        println!("sfsd: initialised {} as {}", dir.display(), st.name());
    }
    let location = pick_location(&args, &dir, addr)?;
    let st = state::load(&dir, Some(&location))?;
    let name = st.name();

    let mut limits = limits::Limits::default();
    if let Some(n) = args.max_connections {
        limits.max_connections = n.max(1);
    }
    if let Some(n) = args.max_in_flight {
        limits.max_in_flight = n.max(1);
    }
    if let Some(n) = args.max_output {
        limits.max_output = n;
    }
    if let Some(n) = args.max_record {
        limits.max_record = n.clamp(4096, 1 << 30);
    }
    if let Some(s) = args.handshake_timeout_secs {
        limits.handshake_timeout = Duration::from_secs(s.max(1));
    }
    if let Some(s) = args.idle_timeout_secs {
        limits.idle_timeout = Duration::from_secs(s.max(1));
    }
    let workers = if args.uniprocessor {
        1
    } else {
        args.workers.unwrap_or_else(libcolor::available_cpus)
    };
    let storage_threads = args.helpers.unwrap_or((4 * workers).max(8)).max(1);
    limits.max_connections =
        limits::fit_connections_to_fd_limit(limits.max_connections, storage_threads);
    // New objects get exactly the mode the client asked for.
    rustix::process::umask(rustix::fs::Mode::empty());
    let cred_mode = fs::creds::Mode::detect();
    if cred_mode == fs::creds::Mode::ServerUser {
        tracing::warn!(
            "not running as root: every request acts as this server's own user (permissions \
             between users are not enforced)"
        );
    }
    let max_io = protocol::max_io_size(limits.max_record);
    let storage = fs::local::LocalFs::open(
        &export,
        st.handle_key.clone(),
        max_io,
        args.read_only,
        fs::creds::Switcher::new(cred_mode),
    )
    .with_context(|| format!("opening export {}", export.display()))?;
    let fs_pool = fs::pool::FsPool::new(
        storage_threads,
        limits.max_in_flight,
        limits.max_connections.saturating_mul(limits.max_in_flight),
    )
    .context("starting the storage threads")?;
    let users = match &args.users {
        Some(p) => users::Users::load(p)?,
        None => users::Users::default(),
    };

    let mut builder = libcolor::Runtime::builder();
    builder = if args.uniprocessor {
        builder.uniprocessor()
    } else if let Some(n) = args.workers {
        builder.workers(n)
    } else {
        builder
    };
    if let Some(cpus) = args.cpus.clone() {
        builder = builder.pin_to(cpus);
    } else if args.pin {
        builder = builder.pin(true);
    }
    let rt = builder.build().context("starting the runtime")?;
    let h = rt.handle();
    let lease = Duration::from_secs(args.lease_secs.unwrap_or(60));
    let srv = Arc::new(server::Server {
        h: h.clone(),
        name: name.clone(),
        handshake: HandshakeConfig {
            max_record_payload: limits.max_record,
            ..HandshakeConfig::default()
        },
        keypair: st.keypair,
        handle_key: st.handle_key,
        storage: Arc::new(storage),
        fs_pool,
        users,
        anonymous: users::Creds::anonymous(
            args.anonymous_uid.unwrap_or(users::NOBODY),
            args.anonymous_gid.unwrap_or(users::NOBODY),
        ),
        max_io: max_io as usize,
        read_only: args.read_only,
        anonymous_read: args.anonymous_read,
        changes: changes::Changes::new(),
        file_budget: read::FileBudget::new(limits::CACHED_FILES),
        color0: libcolor::ColorCell::new(
            &h,
            libcolor::Color::DEFAULT,
            server::Color0 {
                leases: leases::Leases::new(
                    lease,
                    args.max_leases.unwrap_or(100_000),
                    args.max_leases_per_conn.unwrap_or(4096),
                ),
                conns: HashMap::new(),
            },
        ),
        in_flight: AtomicUsize::new(0),
        lease_ms_now: AtomicU32::new(u32::try_from(lease.as_millis()).unwrap_or(u32::MAX)),
        open_conns: AtomicUsize::new(0),
        busy_conns: AtomicUsize::new(0),
        draining: AtomicBool::new(false),
        limits,
    });
    listener::start(
        &srv,
        libcolor::mio::net::TcpListener::from_std(std_listener),
    )?;
    srv.start_reaper((lease / 2).max(Duration::from_secs(1)));
    tracing::info!(
        %name,
        %addr,
        export = %export.display(),
        workers = h.workers(),
        read_only = args.read_only,
        anonymous_read = args.anonymous_read,
        users = srv.users.count(),
        "serving"
    );
    println!("sfsd: serving {name} on {addr}");
    std::io::stdout().flush()?;
    let result = rt.run();
    srv.fs_pool.stop();
    let stats = h.stats();
    tracing::info!(
        serial_fraction = stats.serial_fraction(),
        callbacks = stats.callbacks(),
        "stopped"
    );
    if args.stats {
        println!("sfsd-stats: {}", stats_json(&stats));
        std::io::stdout().flush()?;
    }
    result.context("runtime failed")?;
    Ok(())
}

/// libcolor's counters as one line of JSON (for the benchmark harness). `serial_fraction` is
/// the busiest color's share of the busy time (CPU-time corrected), the input of the Amdahl
/// bound; `busiest_slot` names that color slot.
fn stats_json(s: &libcolor::Stats) -> String {
    let workers: Vec<serde_json::Value> = s
        .workers
        .iter()
        .map(|w| {
            serde_json::json!({
                "callbacks": w.callbacks,
                "steals": w.steals,
                "stolen_callbacks": w.stolen_callbacks,
                "idle_ns": w.idle.as_nanos() as u64,
                "color0_busy_ns": w.color0_busy.as_nanos() as u64,
                "other_busy_ns": w.other_busy.as_nanos() as u64,
                "poll_busy_ns": w.poll_busy.as_nanos() as u64,
                "cpu_ns": w.cpu.as_nanos() as u64,
                "awake_ns": w.awake.as_nanos() as u64,
                "polls": w.polls,
                "shed": w.shed,
                "queue_high_water": w.queue_high_water,
            })
        })
        .collect();
    let busiest = s.busiest_slot();
    let serial = (s.serial_fraction() * 1e6).round() / 1e6;
    serde_json::json!({
        "workers": s.workers.len(),
        "callbacks": s.callbacks(),
        "steals": s.steals(),
        "color0_busy_ns": s.color0_busy().as_nanos() as u64,
        "other_busy_ns": s.other_busy().as_nanos() as u64,
        "poll_busy_ns": s.poll_busy().as_nanos() as u64,
        "cpu_ns": s.cpu().as_nanos() as u64,
        "busiest_slot": busiest.map(|(slot, _)| slot),
        "busiest_slot_busy_ns": busiest.map(|(_, d)| d.as_nanos() as u64),
        "serial_fraction": serial,
        "amdahl_bound": (s.amdahl_bound(s.workers.len()) * 1000.0).round() / 1000.0,
        "per_worker": workers,
    })
    .to_string()
}
