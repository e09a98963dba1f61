//! Starting sfsd: `sfsd init` (a new state directory) and `sfsd serve` (bind, load the
//! state, open the storage, start the runtime and serve until SIGINT or SIGTERM).

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use protocol::Location;

use crate::cli::ServeArgs;
use crate::settings::{Pinning, Settings, Workers};
use crate::{config, disk_watch, fs, limits, listener, peers, server, state, stats, users};

/// `sfsd init`: makes the state directory `dir` for a server reached at `location` and
/// prints its self-certifying name.
pub fn init(dir: &std::path::Path, location: &str) -> Result<()> {
    let location = state::parse_location(location)?;
    let st = state::init(dir, &location)?;
    println!("{}", st.name());
    Ok(())
}

/// The location in the name: `--location`, else the stored one if its port is the one we
/// listen on, else the listening address.
fn pick_location(
    location: Option<&str>,
    dir: &std::path::Path,
    addr: SocketAddr,
) -> Result<Location> {
    if let Some(l) = location {
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

/// `sfsd serve`: runs the server `args` describe until it is told to stop.
pub fn serve(args: ServeArgs) -> Result<()> {
    let file = args.config.as_deref().map(config::load).transpose()?;
    let mut settings = Settings::resolve(args, file)?;
    let dir = settings.state.clone();
    let export = settings.export.clone();
    let listen = settings.listen;
    let std_listener =
        std::net::TcpListener::bind(listen).with_context(|| format!("listening on {listen}"))?;
    std_listener.set_nonblocking(true)?;
    listener::deepen_backlog(&std_listener).context("listen")?;
    let addr = std_listener.local_addr()?;
    if !state::exists(&dir) {
        let location = pick_location(settings.location.as_deref(), &dir, addr)?;
        let st = state::init(&dir, &location)?;
        println!("sfsd: initialised {} as {}", dir.display(), st.name());
    }
    let location = pick_location(settings.location.as_deref(), &dir, addr)?;
    let mut st = state::load(&dir, Some(&location))?;
    let name = st.name();

    let workers = settings.worker_count(libcolor::available_cpus());
    let storage_threads = settings.storage_threads(workers);
    settings.limits.max_connections =
        limits::fit_connections_to_fd_limit(settings.limits.max_connections, storage_threads);
    let limits = &settings.limits;
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
    let local = match &settings.backend {
        Some(_) => None,
        None => {
            let local = fs::local::LocalFs::open(
                &export,
                st.handle_key.clone(),
                max_io,
                settings.read_only,
                fs::creds::Switcher::new(cred_mode),
            )
            .with_context(|| format!("opening export {}", export.display()))?;
            let fs_pool = fs::pool::FsPool::new(
                storage_threads,
                limits.max_in_flight,
                limits.max_connections.saturating_mul(limits.max_in_flight),
            )
            .context("starting the storage threads")?;
            Some(fs::pooled::Pooled::new(local, fs_pool))
        }
    };
    let users = match &settings.users {
        Some(p) => users::Users::load(p)?,
        None => users::Users::default(),
    };

    let mut builder = libcolor::Runtime::builder();
    builder = match settings.workers {
        Workers::Uniprocessor => builder.uniprocessor(),
        Workers::Count(Some(n)) => builder.workers(n),
        Workers::Count(None) => builder,
    };
    builder = match &settings.pinning {
        Pinning::Cpus(cpus) => builder.pin_to(cpus.clone()),
        Pinning::InOrder => builder.pin(true),
        Pinning::None => builder,
    };
    let rt = builder.build().context("starting the runtime")?;
    let h = rt.handle();
    let storage: Arc<dyn fs::Storage> = match (local, &settings.backend) {
        (Some(l), _) => Arc::new(l),
        (None, Some(backend)) => {
            let cfg = fs::nfs::NfsConfig {
                url: backend.url.clone(),
                connections: backend.connections,
                max_pending: limits.max_in_flight.saturating_mul(64).clamp(64, 4096),
                max_io,
                read_only: settings.read_only,
                call_timeout: backend.call_timeout,
                start_wait: backend.start_wait,
            };
            let b = fs::nfs::NfsBackend::start(&h, &cfg, st.handle_key.clone())
                .with_context(|| format!("starting the NFS backend {}", backend.text))?;
            Arc::new(b)
        }
        (None, None) => unreachable!("a local export unless a backend is given"),
    };
    let peers = match &settings.peers {
        Some(p) => {
            let peers =
                peers::Peers::bind(&h, st.handle_key.to_text().as_bytes(), p.listen, &p.peers)
                    .with_context(|| format!("listening for peers on {}", p.listen))?;
            println!("sfsd: peers on {}", peers.local_addr());
            Some(Arc::new(peers))
        }
        None => None,
    };
    // Opened before the server, whose offered versions say whether it runs.
    let watch = match (&settings.backend, settings.disk_watch) {
        (None, true) => open_disk_watch(&export),
        (backend, _) => {
            let why = if backend.is_some() {
                "the NFS backend"
            } else {
                "--no-disk-watch"
            };
            tracing::info!(
                "not watching the export's file system ({why}): a change made on the server's \
                 disk by another program shows in the clients when their leases end"
            );
            None
        }
    };
    // A restarted sfsd answers the changes it had done with the replies it gave then.
    st.replies = match crate::replies::Journal::open(
        &dir,
        addr,
        settings.limits.max_connections.saturating_mul(2),
        settings.lease,
    ) {
        Ok(Some(opened)) => {
            if !opened.1.is_empty() {
                tracing::info!(
                    clients = opened.1.len(),
                    "reply journal read: clients cut off by the restart get their replies"
                );
            }
            Some(opened)
        }
        Ok(None) => {
            tracing::info!(
                "no reply journal (the boot id cannot be read): a change cut off by a restart \
                 fails in its client"
            );
            None
        }
        Err(e) => {
            tracing::warn!("no reply journal: {e:#}");
            None
        }
    };
    let srv = Arc::new(server::Server::new(
        h.clone(),
        st,
        storage,
        users,
        &settings,
        peers,
        watch.is_some(),
    ));
    if let Some(p) = &srv.peers {
        // The server holds its peers, and their receiver the server (both live as long as
        // the runtime's registrations and timers).
        let to = srv.clone();
        peers::start(p, move |batch| {
            to.in_color(libcolor::Color::DEFAULT, move |srv| {
                let (keys, everything) = batch.open();
                srv.peer_changed(&keys, everything);
            })
        });
    }
    let watch_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    if let Some(watch) = watch {
        start_disk_watch(&srv, watch, &watch_stop)?;
    }
    listener::start(
        &srv,
        libcolor::mio::net::TcpListener::from_std(std_listener),
    )?;
    srv.start_reaper((settings.lease / 2).max(Duration::from_secs(1)));
    tracing::info!(
        %name,
        %addr,
        export = %settings.backend.as_ref().map_or_else(|| export.display().to_string(), |b| b.text.clone()),
        workers = h.workers(),
        read_only = settings.read_only,
        anonymous_read = settings.anonymous_read,
        users = srv.users.count(),
        "serving"
    );
    println!("sfsd: serving {name} on {addr}");
    std::io::stdout().flush()?;
    let result = rt.run();
    watch_stop.store(true, std::sync::atomic::Ordering::Relaxed);
    srv.storage.stop();
    let stats = h.stats();
    let startups_dropped = srv
        .startups_dropped
        .load(std::sync::atomic::Ordering::Relaxed);
    tracing::info!(
        serial_fraction = stats.serial_fraction(),
        callbacks = stats.callbacks(),
        startups_dropped,
        "stopped"
    );
    if settings.stats {
        println!("sfsd-stats: {}", stats::json(&stats, startups_dropped));
        std::io::stdout().flush()?;
    }
    result.context("runtime failed")?;
    Ok(())
}

/// The watch of the file system `export` is on ([`disk_watch`]), or None, saying why.
fn open_disk_watch(export: &std::path::Path) -> Option<disk_watch::DiskWatch> {
    match disk_watch::DiskWatch::open(export) {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::info!(
                error = %e,
                "not watching the export's file system (needs root, and a file system with \
                 file handles): a change made on the server's disk by another program shows \
                 in the clients when their leases end"
            );
            None
        }
    }
}

/// Runs `watch` until `stop`, each batch handed to color 0.
fn start_disk_watch(
    srv: &Arc<server::Server>,
    watch: disk_watch::DiskWatch,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> Result<()> {
    let to = srv.clone();
    watch
        .start(stop.clone(), move |batch| {
            to.in_color(libcolor::Color::DEFAULT, move |srv| {
                srv.changed_on_disk(batch)
            })
        })
        .context("starting the disk watch")?;
    tracing::info!("watching the export's file system for changes made behind sfsd's back");
    Ok(())
}
