//! Resource limits (their defaults, sane for a server with thousands of mostly idle clients,
//! are in [`crate::settings::defaults`]).

/// Limits applied per server and per connection.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    /// Connections served at once; more are accepted and closed at once.
    pub max_connections: usize,
    /// Connections not yet logged in, at most (a quarter of `max_connections` at most; see
    /// [`crate::startups`]): when there are this many, the oldest is dropped for a new one.
    pub max_startups: usize,
    /// Requests of one connection being worked on; the connection is not read beyond this.
    pub max_in_flight: usize,
    /// Bytes of sealed replies waiting for a slow reader before the connection is not read.
    pub max_output: usize,
    /// Largest record payload accepted (advertised in the handshake).
    pub max_record: usize,
    /// Time a client has to complete the handshake before the connection is closed.
    pub handshake_timeout: std::time::Duration,
    /// An authenticated connection that sends nothing for this long is closed (the client
    /// reconnects when it needs the server again).
    pub idle_timeout: std::time::Duration,
}

/// Descriptors the READ fast path may keep open, server-wide ([`crate::read`]).
pub(crate) const CACHED_FILES: usize = 256;

/// Open states (descriptors kept for connections' users), server-wide
/// ([`crate::fs::local`]'s `open`).
pub(crate) const OPEN_STATES: usize = 1024;

/// Descriptors kept for files, the listener, logs and the runtime: per storage thread a few
/// open objects (an operation holds at most about six), the READ path's cached descriptors,
/// the open states, plus a fixed margin.
pub(crate) fn reserved_fds(storage_threads: usize) -> u64 {
    64 + 8 * storage_threads as u64 + CACHED_FILES as u64 + OPEN_STATES as u64
}

/// Raises the soft open-file limit to the hard limit and returns the number of connections the
/// server can hold with room left for files: `wanted`, or less if the limit is lower.
pub(crate) fn fit_connections_to_fd_limit(wanted: usize, storage_threads: usize) -> usize {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut lim = getrlimit(Resource::Nofile);
    if let Some(hard) = lim.maximum
        && lim.current != Some(hard)
    {
        lim.current = Some(hard);
        if let Err(e) = setrlimit(Resource::Nofile, lim) {
            tracing::warn!(error = %e, "cannot raise the open-file limit");
        }
    }
    let soft = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    let room = soft.saturating_sub(reserved_fds(storage_threads));
    let fit = usize::try_from(room).unwrap_or(usize::MAX).max(1);
    if fit < wanted {
        tracing::warn!(
            wanted,
            allowed = fit,
            open_file_limit = soft,
            "--max-connections lowered to fit the open-file limit"
        );
    }
    wanted.min(fit)
}
