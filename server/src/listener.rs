//! Accepting connections (color 0) and shutting down on SIGINT/SIGTERM.

use std::io::ErrorKind;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use libcolor::mio::Interest;
use libcolor::mio::net::TcpListener;
use libcolor::{Color, ColorCell, IoRegistration};

use crate::conn;
use crate::server::Server;

/// How long shutdown waits for in-flight requests.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// Connections the kernel may queue for `accept` (capped by `net.core.somaxconn`). std listens
/// with 128: under a flood of connections that queue fills between two rounds of accepts, the
/// kernel then drops SYNs, a real client's among them, and that client waits a second (then
/// three more) before its SYN is sent again. A deeper queue lets the flood in, where
/// [`crate::startups`] sorts it out.
const BACKLOG: i32 = 4096;

/// Deepens `listener`'s accept queue to [`BACKLOG`] (listen(2) again on a listening socket
/// only changes its backlog).
pub(crate) fn deepen_backlog(listener: &std::net::TcpListener) -> std::io::Result<()> {
    rustix::net::listen(listener, BACKLOG)?;
    Ok(())
}

struct Listening {
    listener: TcpListener,
    /// Taken (and deregistered) when shutdown begins.
    reg: Option<IoRegistration>,
    stopping: bool,
}

/// Starts accepting on `listener` (in color 0) and arms the termination signals.
pub(crate) fn start(srv: &Arc<Server>, listener: TcpListener) -> std::io::Result<()> {
    let mut listener = listener;
    let reg = srv.h.register(&mut listener, Interest::READABLE)?;
    // Color 0's own state: reached only from color-0 callbacks.
    let state = Arc::new(ColorCell::new(
        &srv.h,
        Color::DEFAULT,
        Listening {
            listener,
            reg: None,
            stopping: false,
        },
    ));
    let mut next: u32 = 0;
    {
        let (srv, state) = (srv.clone(), state.clone());
        reg.on_readable(Color::DEFAULT, move || {
            state.with(|l| accept_all(&srv, l, &mut next))
        });
    }
    let listening = state.clone();
    srv.h.cpucb(Color::DEFAULT, move || {
        listening.with(|l| {
            if l.stopping {
                let _ = reg.deregister(&mut l.listener);
            } else {
                l.reg = Some(reg);
            }
        });
    });
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let h = srv.h.clone();
        let (srv, state) = (srv.clone(), state.clone());
        h.on_signal(signal, Color::DEFAULT, move || {
            if srv.draining.swap(true, Ordering::SeqCst) {
                return;
            }
            tracing::info!(signal, "stopping: no new connections, draining requests");
            state.with(|l| {
                l.stopping = true;
                if let Some(reg) = l.reg.take() {
                    let _ = reg.deregister(&mut l.listener);
                }
            });
            drain(srv.clone(), Instant::now());
        })?;
    }
    Ok(())
}

/// Color 0, readable: accepts every pending connection.
fn accept_all(srv: &Arc<Server>, l: &mut Listening, next: &mut u32) {
    if l.stopping {
        return;
    }
    loop {
        match l.listener.accept() {
            Ok((stream, peer)) => {
                if srv.at_connection_limit() {
                    tracing::warn!(%peer, "connection limit reached; refusing");
                    drop(stream);
                    continue;
                }
                // Colors 1..: never 0, which is the shared state's.
                *next = next.checked_add(1).unwrap_or(1);
                conn::start(srv, *next, stream, peer);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => {
                // EMFILE and friends: log and wait for the next edge.
                tracing::warn!(error = %e, "accept failed");
                break;
            }
        }
    }
}

/// Stops the runtime once in-flight requests are answered (or after `DRAIN_LIMIT`).
fn drain(srv: Arc<Server>, since: Instant) {
    let pending = srv.drain_pending();
    if pending == 0 || since.elapsed() > DRAIN_LIMIT {
        if pending > 0 {
            tracing::warn!(pending, "stopping with requests still in flight");
        }
        // Give the connection colors a moment to write the last replies.
        let h = srv.h.clone();
        srv.h
            .delaycb(Duration::from_millis(50), Color::DEFAULT, move || h.stop());
        return;
    }
    srv.in_color_after(Duration::from_millis(20), Color::DEFAULT, move |srv| {
        drain(srv.clone(), since)
    });
}
