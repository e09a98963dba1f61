//! Command line (clap). Every `serve` setting may also come from a TOML file (`--config`);
//! flags win over the file.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// sfsd: the parallel SFS-like file server.
///
/// Serves a directory over encrypted, authenticated TCP to `sfs` clients. The server is named
/// by a self-certifying name `@HOST%PORT,HOSTID` (the HOSTID is a hash of its public key), so
/// clients need no certificate authority. Each connection's cryptography runs in its own
/// libcolor color, in parallel across CPUs; the shared file-system state runs in color 0.
#[derive(Parser, Debug)]
#[command(name = "sfsd", version, about, long_about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a state directory (host key, file-handle secret; owner-only files) and print the
    /// server's self-certifying name `@LOCATION,HOSTID`.
    Init {
        /// State directory to create.
        #[arg(long)]
        state: PathBuf,
        /// Where clients reach the server: `HOST` or `HOST%PORT` (part of the name).
        #[arg(long, default_value = "localhost")]
        location: String,
    },
    /// Serve a directory. Initialises the state directory first if it does not exist.
    ///
    /// Prints `sfsd: serving @LOCATION,HOSTID on ADDR` on stdout once listening; with
    /// `--stats`, prints `sfsd-stats: {json}` on stdout at shutdown. SIGINT/SIGTERM stop
    /// accepting, let in-flight requests finish (up to 5 s) and exit 0.
    Serve(Box<ServeArgs>),
}

#[derive(Args, Debug, Default, Clone)]
pub struct ServeArgs {
    /// State directory (created by `sfsd init`, or here if missing).
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// Directory to export (the local backend, the default).
    #[arg(long)]
    pub export: Option<PathBuf>,
    /// Serve an NFSv3 server's export instead of a local directory:
    /// `nfs://HOST[:PORT]/EXPORT[?mountport=N]`. Ports not given come from the port mapper on
    /// HOST:111. Every request reaches it with the user's AUTH_SYS credentials.
    #[arg(long, conflicts_with = "export")]
    pub backend: Option<String>,
    /// RPC connections to the NFS backend (default 2).
    #[arg(long)]
    pub backend_connections: Option<usize>,
    /// Seconds start-up waits for an NFS backend that is not answering yet (one started at the
    /// same time as sfsd), trying again with backoff; 0 gives up at once (default 60).
    #[arg(long)]
    pub backend_wait_secs: Option<u64>,
    /// Seconds an NFS backend call may stay unanswered before its connection is dropped and
    /// reopened (default 15; mainly for tests).
    #[arg(long, hide = true)]
    pub backend_timeout_secs: Option<u64>,
    /// TOML file with the same settings as these flags (`export = "/srv"`, `workers = 4`...).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Address to listen on (port 0: any free port; the name then uses the actual port).
    #[arg(long)]
    pub listen: Option<String>,
    /// Location in the server name (`HOST` or `HOST%PORT`); default: the stored one when its
    /// port matches, else the listening address.
    #[arg(long)]
    pub location: Option<String>,
    /// Worker threads of the multiprocessor runtime (default: one per CPU).
    #[arg(long, conflicts_with = "uniprocessor")]
    pub workers: Option<usize>,
    /// Run the single-threaded runtime (the baseline for speedups; one process per CPU for
    /// N-copy experiments).
    #[arg(long)]
    pub uniprocessor: bool,
    /// Pin worker i to CPU i.
    #[arg(long)]
    pub pin: bool,
    /// Pin workers to these CPUs (comma-separated list, e.g. `2,3`; implies pinning).
    #[arg(long, value_delimiter = ',')]
    pub cpus: Option<Vec<usize>>,
    /// Storage threads running file-system operations (default: 4 per worker, at least 8).
    #[arg(long)]
    pub helpers: Option<usize>,
    /// Refuse every change (ROFS).
    #[arg(long)]
    pub read_only: bool,
    /// Let unauthenticated requests (authno 0) read, as the anonymous uid/gid. Anonymous
    /// requests can never modify anything.
    #[arg(long)]
    pub anonymous_read: bool,
    /// uid anonymous requests run as (default 65534, "nobody").
    #[arg(long)]
    pub anonymous_uid: Option<u32>,
    /// gid anonymous requests run as (default 65534, "nogroup").
    #[arg(long)]
    pub anonymous_gid: Option<u32>,
    /// Users file: lines `name ed25519:<hex> uid gid[,gid...]`.
    #[arg(long)]
    pub users: Option<PathBuf>,
    /// Attribute lease length in seconds.
    #[arg(long)]
    pub lease_secs: Option<u64>,
    /// Do not watch the export's file system for changes made by other programs on this
    /// host (fanotify; needs root). Without the watch, clients see such changes when their
    /// leases end.
    #[arg(long)]
    pub no_disk_watch: bool,
    /// Maximum lease table entries (beyond it, replies carry no lease). Default 100000.
    #[arg(long)]
    pub max_leases: Option<usize>,
    /// Maximum leases one connection may hold (past it, each new lease ends the connection's
    /// oldest one, which its client is told of: it caches the objects it used last).
    /// Default 32768.
    #[arg(long)]
    pub max_leases_per_conn: Option<usize>,
    /// Maximum simultaneous connections (default 4096; lowered to fit the open-file limit,
    /// whose soft value is raised to the hard one at start).
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Maximum connections that have not logged in yet (default 256, at most a quarter of
    /// --max-connections). When there are that many, an old one (the oldest still in the
    /// handshake, as a rule) is closed to make room for a new one, so a flood of silent
    /// connections can neither fill the connection limit nor keep a real client out.
    #[arg(long)]
    pub max_startups: Option<usize>,
    /// Maximum requests in flight per connection.
    #[arg(long)]
    pub max_in_flight: Option<usize>,
    /// Maximum unsent reply bytes per connection before it is no longer read.
    #[arg(long)]
    pub max_output: Option<usize>,
    /// Maximum record payload in bytes (4096..=1073741824).
    #[arg(long)]
    pub max_record: Option<usize>,
    /// Seconds a client has to complete the handshake (default 10; mainly for tests).
    #[arg(long, hide = true)]
    pub handshake_timeout_secs: Option<u64>,
    /// Seconds an authenticated connection may stay silent before it is closed (default 900;
    /// clients reconnect transparently).
    #[arg(long)]
    pub idle_timeout_secs: Option<u64>,
    /// Print libcolor statistics as `sfsd-stats: {json}` on stdout at shutdown.
    #[arg(long)]
    pub stats: bool,
    /// UDP address (`IP:PORT`) this instance hears the other instances sharing its state
    /// directory on. Several sfsd instances in front of one backend (one name, one state
    /// directory) tell each other which objects changed, so a change made through one reaches
    /// the lease holders of all as an INVALIDATE within milliseconds, not at the end of their
    /// lease. The datagrams are authenticated with a key derived from the state directory's
    /// handle secret; keep this address on the network between the instances.
    #[arg(long)]
    pub peer_listen: Option<String>,
    /// The other instances' `--peer-listen` addresses (`IP:PORT`, repeatable or
    /// comma-separated; this instance's own address is skipped, so all may share one list).
    #[arg(long = "peer", value_delimiter = ',')]
    pub peers: Option<Vec<String>>,
}
