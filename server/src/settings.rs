//! Every `sfsd serve` setting resolved in one place: a flag wins over the config file, the
//! file over the default, and every default is in [`defaults`] (nowhere else).
//!
//! Resolving is pure (no files opened but the config file's text, which the caller reads);
//! what depends on the machine (the open-file limit, the CPU count) is applied by the caller.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::cli::ServeArgs;
use crate::config::FileConfig;
use crate::limits::Limits;

/// The defaults of every setting that has one.
pub(crate) mod defaults {
    use std::time::Duration;

    /// Address to listen on.
    pub(crate) const LISTEN: &str = "0.0.0.0:4004";
    /// Attribute lease length.
    pub(crate) const LEASE: Duration = Duration::from_secs(60);
    /// Lease table entries (beyond it, replies carry no lease).
    pub(crate) const MAX_LEASES: usize = 100_000;
    /// Leases one connection may hold. A lease is what lets a client cache an object at all
    /// (an object without one is asked for again at every use, each step of every path
    /// through it a round trip), so a share is a client's whole cache, and must hold what a
    /// client works with within a lease: a distribution's kernel headers are ~9,000 entries,
    /// and untarring them and copying the copy is twice that (with 4096, a walk of them took
    /// 50 times as long as within the share). A third of [`MAX_LEASES`]; an address or a user
    /// still holds at most half of the table ([`crate::leases::Shares`]).
    pub(crate) const MAX_LEASES_PER_CONN: usize = 32_768;
    /// uid and gid of anonymous requests ("nobody"/"nogroup").
    pub(crate) const ANONYMOUS_ID: u32 = crate::users::NOBODY;
    /// Storage threads per worker, and the fewest storage threads.
    pub(crate) const STORAGE_THREADS_PER_WORKER: usize = 4;
    /// Fewest storage threads.
    pub(crate) const MIN_STORAGE_THREADS: usize = 8;
    /// Simultaneous connections (lowered at start to fit the open-file limit).
    pub(crate) const MAX_CONNECTIONS: usize = 4096;
    /// Connections not yet logged in. sshd's MaxStartups stops at 100 for connections that
    /// each cost it a process; one here costs a descriptor and a few KiB, and a bigger pool
    /// gives a real client longer to finish its handshake before a flood's arrivals push it
    /// out (see [`crate::startups`]). At most a quarter of the connection limit.
    pub(crate) const MAX_STARTUPS: usize = 256;
    /// Requests in flight per connection.
    pub(crate) const MAX_IN_FLIGHT: usize = 32;
    /// Unsent reply bytes per connection before it is no longer read.
    pub(crate) const MAX_OUTPUT: usize = 4 << 20;
    /// Largest record payload.
    pub(crate) const MAX_RECORD: usize = protocol::record::DEFAULT_MAX_PAYLOAD;
    /// Range a `--max-record` is clamped to.
    pub(crate) const MAX_RECORD_RANGE: std::ops::RangeInclusive<usize> = 4096..=1 << 30;
    /// Time a client has to complete the handshake.
    pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
    /// Time an authenticated connection may stay silent.
    pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(15 * 60);
    /// Connections to an NFS backend.
    pub(crate) const BACKEND_CONNECTIONS: usize = 2;
    /// Range `--backend-connections` is clamped to.
    pub(crate) const BACKEND_CONNECTIONS_RANGE: std::ops::RangeInclusive<usize> = 1..=64;
    /// How long start-up waits for a backend that is not answering yet.
    pub(crate) const BACKEND_START_WAIT: Duration = Duration::from_secs(60);
    /// Time a backend call may go unanswered before its connection is dropped.
    pub(crate) const BACKEND_CALL_TIMEOUT: Duration = crate::fs::nfs::link::CALL_TIMEOUT;
}

/// An NFS server the files are on (`--backend`), instead of a local export.
#[derive(Debug, Clone)]
pub(crate) struct BackendSettings {
    pub url: crate::fs::nfs::BackendUrl,
    /// The URL as given (for logs and errors).
    pub text: String,
    pub connections: usize,
    pub call_timeout: Duration,
    /// How long start-up waits for the backend to answer.
    pub start_wait: Duration,
}

/// The channel to the other instances sharing the state directory (see [`crate::peers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PeerSettings {
    /// Where this instance hears them.
    pub listen: SocketAddr,
    /// Where it tells them.
    pub peers: Vec<SocketAddr>,
}

/// How the runtime runs its workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Workers {
    /// The single-threaded runtime.
    Uniprocessor,
    /// This many workers (None: one per CPU).
    Count(Option<usize>),
}

/// Where the workers run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pinning {
    /// Anywhere the kernel puts them.
    None,
    /// Worker i on CPU i.
    InOrder,
    /// On these CPUs.
    Cpus(Vec<usize>),
}

/// `sfsd serve`, resolved.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// State directory (host key, handle secret, location).
    pub state: PathBuf,
    /// The exported directory (empty with a backend).
    pub export: PathBuf,
    /// The NFS server the files are on instead, if any.
    pub backend: Option<BackendSettings>,
    pub listen: SocketAddr,
    /// `--location`, if given (else chosen from the state and the listening address).
    pub location: Option<String>,
    pub workers: Workers,
    pub pinning: Pinning,
    /// Storage threads; None: [`defaults::STORAGE_THREADS_PER_WORKER`] per worker, at least
    /// [`defaults::MIN_STORAGE_THREADS`] (see [`Settings::storage_threads`]).
    pub helpers: Option<usize>,
    pub read_only: bool,
    pub anonymous_read: bool,
    /// (uid, gid) anonymous requests run as.
    pub anonymous: (u32, u32),
    /// The users file, if any.
    pub users: Option<PathBuf>,
    pub lease: Duration,
    /// Watch the export's file system for changes made behind sfsd's back
    /// ([`crate::disk_watch`]).
    pub disk_watch: bool,
    pub max_leases: usize,
    pub max_leases_per_conn: usize,
    pub limits: Limits,
    /// Print the runtime's statistics at shutdown.
    pub stats: bool,
    /// The other instances sharing the state directory, if any.
    pub peers: Option<PeerSettings>,
}

impl Settings {
    /// `flags` over `file` over [`defaults`]. Fails when no state directory or export is
    /// given, or the listening address does not parse.
    pub(crate) fn resolve(flags: ServeArgs, file: Option<FileConfig>) -> Result<Settings> {
        let a = match file {
            Some(f) => crate::config::merge(flags, f),
            None => flags,
        };
        let Some(state) = a.state else {
            bail!("--state DIR is required (or `state` in the config file)");
        };
        let secs = |s: Option<u64>, default| s.map_or(default, |s| Duration::from_secs(s.max(1)));
        let backend = match a.backend {
            Some(text) => Some(BackendSettings {
                url: text.parse()?,
                text,
                connections: a
                    .backend_connections
                    .unwrap_or(defaults::BACKEND_CONNECTIONS)
                    .clamp(
                        *defaults::BACKEND_CONNECTIONS_RANGE.start(),
                        *defaults::BACKEND_CONNECTIONS_RANGE.end(),
                    ),
                call_timeout: secs(a.backend_timeout_secs, defaults::BACKEND_CALL_TIMEOUT),
                start_wait: a
                    .backend_wait_secs
                    .map_or(defaults::BACKEND_START_WAIT, Duration::from_secs),
            }),
            None => None,
        };
        let export = match (a.export, &backend) {
            (Some(_), Some(_)) => bail!(
                "--export and --backend exclude each other (the config file may set one of them)"
            ),
            (Some(e), None) => e,
            (None, Some(_)) => PathBuf::new(),
            (None, None) => bail!(
                "--export PATH or --backend nfs://HOST/EXPORT is required (or `export`/`backend` \
                 in the config file)"
            ),
        };
        let listen: SocketAddr = a
            .listen
            .as_deref()
            .unwrap_or(defaults::LISTEN)
            .parse()
            .context("--listen wants IP:PORT")?;
        let limits = Limits {
            max_connections: a
                .max_connections
                .map_or(defaults::MAX_CONNECTIONS, |n| n.max(1)),
            max_startups: a.max_startups.map_or(defaults::MAX_STARTUPS, |n| n.max(1)),
            max_in_flight: a
                .max_in_flight
                .map_or(defaults::MAX_IN_FLIGHT, |n| n.max(1)),
            max_output: a.max_output.unwrap_or(defaults::MAX_OUTPUT),
            max_record: a.max_record.map_or(defaults::MAX_RECORD, |n| {
                n.clamp(
                    *defaults::MAX_RECORD_RANGE.start(),
                    *defaults::MAX_RECORD_RANGE.end(),
                )
            }),
            handshake_timeout: secs(a.handshake_timeout_secs, defaults::HANDSHAKE_TIMEOUT),
            idle_timeout: secs(a.idle_timeout_secs, defaults::IDLE_TIMEOUT),
        };
        let peers = match (a.peer_listen, a.peers) {
            (None, None) => None,
            (None, Some(_)) => bail!("--peer needs --peer-listen (where the peers send to)"),
            (Some(listen), peers) => Some(PeerSettings {
                listen: listen.parse().context("--peer-listen wants IP:PORT")?,
                peers: peers
                    .unwrap_or_default()
                    .iter()
                    .map(|p| {
                        p.parse()
                            .with_context(|| format!("--peer wants IP:PORT, not {p:?}"))
                    })
                    .collect::<Result<_>>()?,
            }),
        };
        let pinning = match (a.cpus, a.pin) {
            (Some(cpus), _) => Pinning::Cpus(cpus),
            (None, true) => Pinning::InOrder,
            (None, false) => Pinning::None,
        };
        Ok(Settings {
            state,
            export,
            backend,
            listen,
            location: a.location,
            workers: if a.uniprocessor {
                Workers::Uniprocessor
            } else {
                Workers::Count(a.workers)
            },
            pinning,
            helpers: a.helpers,
            read_only: a.read_only,
            anonymous_read: a.anonymous_read,
            anonymous: (
                a.anonymous_uid.unwrap_or(defaults::ANONYMOUS_ID),
                a.anonymous_gid.unwrap_or(defaults::ANONYMOUS_ID),
            ),
            users: a.users,
            lease: a.lease_secs.map_or(defaults::LEASE, Duration::from_secs),
            disk_watch: !a.no_disk_watch,
            max_leases: a.max_leases.unwrap_or(defaults::MAX_LEASES),
            max_leases_per_conn: a
                .max_leases_per_conn
                .unwrap_or(defaults::MAX_LEASES_PER_CONN),
            limits,
            stats: a.stats,
            peers,
        })
    }

    /// Worker threads the runtime will have (`cpus`: the CPUs available).
    pub(crate) fn worker_count(&self, cpus: usize) -> usize {
        match self.workers {
            Workers::Uniprocessor => 1,
            Workers::Count(n) => n.unwrap_or(cpus),
        }
    }

    /// Storage threads for `workers` workers (one with an NFS backend, whose calls complete as
    /// callbacks).
    pub(crate) fn storage_threads(&self, workers: usize) -> usize {
        if self.backend.is_some() {
            return 1;
        }
        self.helpers
            .unwrap_or(
                (defaults::STORAGE_THREADS_PER_WORKER * workers).max(defaults::MIN_STORAGE_THREADS),
            )
            .max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn required() -> ServeArgs {
        ServeArgs {
            state: Some("/s".into()),
            export: Some("/e".into()),
            ..ServeArgs::default()
        }
    }

    #[test]
    fn defaults_fill_what_is_not_given() {
        let s = Settings::resolve(required(), None).unwrap();
        assert_eq!(s.listen, defaults::LISTEN.parse().unwrap());
        assert_eq!(s.lease, Duration::from_secs(60));
        assert_eq!(s.limits.max_connections, 4096);
        assert_eq!(s.limits.max_startups, 256);
        assert_eq!(s.limits.max_in_flight, 32);
        assert_eq!(s.limits.idle_timeout, Duration::from_secs(900));
        assert_eq!(s.anonymous, (65534, 65534));
        assert_eq!(s.workers, Workers::Count(None));
        assert_eq!(s.pinning, Pinning::None);
        assert_eq!(s.worker_count(3), 3);
        assert_eq!(s.storage_threads(1), 8, "at least eight");
        assert_eq!(s.storage_threads(4), 16, "four per worker");
    }

    #[test]
    fn given_values_are_kept_within_their_bounds() {
        let s = Settings::resolve(
            ServeArgs {
                max_record: Some(1),
                max_in_flight: Some(0),
                idle_timeout_secs: Some(0),
                uniprocessor: true,
                cpus: Some(vec![2, 3]),
                helpers: Some(0),
                ..required()
            },
            None,
        )
        .unwrap();
        assert_eq!(s.limits.max_record, 4096);
        assert_eq!(s.limits.max_in_flight, 1);
        assert_eq!(s.limits.idle_timeout, Duration::from_secs(1));
        assert_eq!(s.worker_count(8), 1);
        assert_eq!(s.pinning, Pinning::Cpus(vec![2, 3]));
        assert_eq!(s.storage_threads(1), 1);
    }

    #[test]
    fn peers_parse_and_need_a_listening_address() {
        let s = Settings::resolve(required(), None).unwrap();
        assert_eq!(s.peers, None);
        let s = Settings::resolve(
            ServeArgs {
                peer_listen: Some("127.0.0.2:4005".into()),
                peers: Some(vec!["127.0.0.3:4005".into(), "127.0.0.2:4005".into()]),
                ..required()
            },
            None,
        )
        .unwrap();
        let p = s.peers.unwrap();
        assert_eq!(p.listen, "127.0.0.2:4005".parse().unwrap());
        assert_eq!(p.peers.len(), 2);
        let e = Settings::resolve(
            ServeArgs {
                peers: Some(vec!["127.0.0.3:4005".into()]),
                ..required()
            },
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("--peer-listen"), "{e}");
        let e = Settings::resolve(
            ServeArgs {
                peer_listen: Some("127.0.0.2:4005".into()),
                peers: Some(vec!["nohost".into()]),
                ..required()
            },
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("nohost"), "{e}");
    }

    #[test]
    fn state_and_export_are_required() {
        let e = Settings::resolve(ServeArgs::default(), None).unwrap_err();
        assert!(e.to_string().contains("--state"), "{e}");
        let e = Settings::resolve(
            ServeArgs {
                state: Some("/s".into()),
                ..ServeArgs::default()
            },
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("--export"), "{e}");
    }
}
