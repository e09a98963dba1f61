//! The server: its runtime, the listening socket, and accepting in color 0.
//!
//! As in the paper, accepting is serialised in color 0 (the listener's state is color 0's),
//! and each connection gets its own color, so connections run in parallel. Connections take
//! colors `1..SHARD_COLOR_BASE` round robin; the cache's shards have the colors above.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use libcolor::mio::Interest;
use libcolor::mio::net::TcpListener;
use libcolor::{Color, Handle, IoRegistration, Runtime};
use rustix::net::{AddressFamily, SocketType};

use crate::cache::{Cache, SHARD_COLOR_BASE};
use crate::conn;
use crate::fsroot::Root;

/// What the command line sets.
#[derive(Debug, Clone)]
pub struct Config {
    pub root: PathBuf,
    pub listen: SocketAddr,
    /// libcolor workers (ignored with `uni`).
    pub cpus: usize,
    pub uni: bool,
    pub cache_bytes: usize,
    pub max_connections: usize,
    /// Requests of one connection waiting for an answer before it stops parsing.
    pub max_pipelined: usize,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    /// SO_REUSEPORT on the listener, so several copies can share one port.
    pub reuseport: bool,
    /// Pin worker i to CPU `pin[i]`.
    pub pin: Vec<usize>,
    /// Let idle workers steal queued colors from busy ones (libcolor's default).
    pub stealing: bool,
}

impl Config {
    /// How often a connection checks its time limits.
    pub fn tick(&self) -> Duration {
        (self.header_timeout.min(self.idle_timeout) / 2)
            .clamp(Duration::from_millis(10), Duration::from_secs(1))
    }
}

pub struct Server {
    pub h: Handle,
    pub cfg: Config,
    pub root: Root,
    pub cache: Cache,
    /// Open connections (incremented in color 0 at accept, decremented at close).
    pub conns: AtomicUsize,
}

/// The listening socket: backlog 4096, SO_REUSEADDR, and SO_REUSEPORT when asked.
fn listen(addr: SocketAddr, reuseport: bool) -> anyhow::Result<std::net::TcpListener> {
    let family = if addr.is_ipv4() {
        AddressFamily::INET
    } else {
        AddressFamily::INET6
    };
    let fd = rustix::net::socket(family, SocketType::STREAM, None)?;
    rustix::net::sockopt::set_socket_reuseaddr(&fd, true)?;
    if reuseport {
        rustix::net::sockopt::set_socket_reuseport(&fd, true)?;
    }
    rustix::net::bind(&fd, &addr).with_context(|| format!("binding {addr}"))?;
    rustix::net::listen(&fd, 4096)?;
    let l = std::net::TcpListener::from(fd);
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Runs the server until SIGINT/SIGTERM; `ready` is told the bound address first. Returns
/// libcolor's statistics of the whole run.
pub fn run(cfg: Config, ready: impl FnOnce(SocketAddr)) -> anyhow::Result<libcolor::Stats> {
    let mut b = Runtime::builder().helpers(1);
    b = if cfg.uni {
        b.uniprocessor()
    } else {
        b.workers(cfg.cpus).stealing(cfg.stealing)
    };
    if !cfg.pin.is_empty() {
        b = b.pin_to(cfg.pin.clone());
    }
    let rt = b.build()?;
    let h = rt.handle();
    // First, so that a SIGTERM during start-up (opening the root, binding) already stops the
    // server cleanly (status 0) instead of killing it.
    h.stop_on_termination_signals()?;
    let root =
        Root::open(&cfg.root).with_context(|| format!("opening --root {}", cfg.root.display()))?;
    let std_listener = listen(cfg.listen, cfg.reuseport)?;
    let addr = std_listener.local_addr()?;
    let mut listener = TcpListener::from_std(std_listener);
    let srv = Arc::new(Server {
        cache: Cache::new(&h, cfg.cache_bytes),
        h: h.clone(),
        cfg,
        root,
        conns: AtomicUsize::new(0),
    });
    let reg = h.register(&mut listener, Interest::READABLE)?;
    // The callback owns the listener (color 0's state) and, through `holder`, its own
    // registration: a cycle the runtime breaks when it stops.
    let holder: Arc<parking_lot::Mutex<Option<IoRegistration>>> = Arc::default();
    let (s2, h2) = (srv.clone(), holder.clone());
    let mut next: u32 = 0;
    reg.on_readable(Color::DEFAULT, move || {
        let _keep = &h2;
        accept_all(&s2, &mut listener, &mut next)
    });
    *holder.lock() = Some(reg);
    ready(addr);
    Ok(rt.run()?)
}

/// Color 0, readable: accepts every pending connection, refusing those over the limit.
fn accept_all(srv: &Arc<Server>, listener: &mut TcpListener, next: &mut u32) {
    loop {
        match listener.accept() {
            Ok((stream, _peer)) => {
                if srv.conns.fetch_add(1, Ordering::SeqCst) >= srv.cfg.max_connections {
                    srv.conns.fetch_sub(1, Ordering::SeqCst);
                    drop(stream);
                    continue;
                }
                // Colors 1..SHARD_COLOR_BASE: never 0 (accept's) nor a shard's.
                *next = *next % (SHARD_COLOR_BASE - 1) + 1;
                conn::start(srv, Color(*next), stream);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            // EMFILE and friends: wait for the next edge.
            Err(_) => break,
        }
    }
}
