//! Command-line syntax (clap).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// sfs: the self-certifying file system client.
///
/// Remote paths are self-certifying names: @HOST[%PORT],HOSTID[/PATH]. The HOSTID is checked
/// against the server's key on every connection, so no certificate authority is involved.
/// ALIAS:/PATH stands for the server named by an `ALIAS @HOST%PORT,HOSTID` line of
/// ~/.sfs/bookmarks (or the file SFS_BOOKMARKS names).
#[derive(Debug, Parser)]
#[command(name = "sfs", version)]
pub(crate) struct Cli {
    /// Identity key file (else SFS_IDENTITY, else ~/.sfs/identity; anonymous when absent).
    #[arg(long, global = true, value_name = "FILE")]
    pub identity: Option<PathBuf>,
    /// User name to log in as (else SFS_USER, else USER).
    #[arg(long, global = true, value_name = "NAME")]
    pub user: Option<String>,
    /// Seconds to wait for each reply before treating the connection as broken (reconnect,
    /// retry idempotent requests, fail the rest).
    #[arg(long, global = true, value_name = "SECS", default_value_t = 30.0, value_parser = parse_timeout)]
    pub timeout: f64,
    /// More log output (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create an identity key; prints the public key (for the server's users file) last.
    Keygen {
        /// Where to write it (default ~/.sfs/identity).
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Replace an existing key file.
        #[arg(long)]
        force: bool,
    },
    /// List directories.
    Ls {
        /// Long format (mode, links, owner, size, time).
        #[arg(short)]
        long: bool,
        /// JSON output.
        #[arg(long)]
        json: bool,
        /// Remote paths.
        #[arg(required = true)]
        targets: Vec<String>,
    },
    /// Show attributes.
    Stat {
        /// JSON output.
        #[arg(long)]
        json: bool,
        /// Remote paths.
        #[arg(required = true)]
        targets: Vec<String>,
    },
    /// Print files to standard output.
    Cat {
        /// Remote paths.
        #[arg(required = true)]
        targets: Vec<String>,
    },
    /// Copy a remote file (or, with -r, directory) to a local path.
    ///
    /// Symbolic links in the tree are copied as links, never followed; neither is a link
    /// already at the local path. An existing regular file is overwritten, as cp does. Names
    /// the server sends that are not one path component (`..`, `a/b`) or that it lists twice
    /// are reported and skipped, and the command fails at the end.
    Get {
        /// Copy directories recursively.
        #[arg(short)]
        recursive: bool,
        /// Remote path.
        remote: String,
        /// Local path (default: the remote file's name in the current directory).
        local: Option<PathBuf>,
    },
    /// Copy a local file (or, with -r, directory) to a remote path.
    Put {
        /// Copy directories recursively.
        #[arg(short)]
        recursive: bool,
        /// Local path.
        local: PathBuf,
        /// Remote path (an existing directory receives the file under its own name).
        remote: String,
    },
    /// Remove files (with -r, directories and their contents).
    Rm {
        /// Remove directories recursively.
        #[arg(short)]
        recursive: bool,
        /// Remote paths.
        #[arg(required = true)]
        targets: Vec<String>,
    },
    /// Create directories.
    Mkdir {
        /// Create missing parents; no error if it exists.
        #[arg(short)]
        parents: bool,
        /// Remote paths.
        #[arg(required = true)]
        targets: Vec<String>,
    },
    /// Rename within one server.
    Mv {
        /// Remote source path.
        from: String,
        /// Remote destination path (an existing directory receives the source under its name).
        to: String,
    },
    /// Serve a remote file system as NFSv3 on loopback.
    Nfs {
        /// Server name (@HOST%PORT,HOSTID[/PATH]).
        name: String,
        /// Address to listen on (loopback only).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
    },
    /// Mount a server's tree on DIR (FUSE; with --nfs, loopback NFSv3).
    ///
    /// By default the tree is mounted with FUSE (the kernel's `fuse` module and `fusermount3`
    /// from the `fuse3` package) and `sfs` goes to the background once the mount is ready,
    /// logging to --log. Attribute and name caches in the kernel last as long as the server's
    /// lease, and changes made through other clients are pushed into them at once (the
    /// server's INVALIDATE). A server that goes away makes calls fail with EIO after --timeout
    /// (or after the reconnect attempts); service resumes by itself when it is back. Unmount
    /// with `sfs umount DIR` (or `fusermount3 -u DIR`); SIGTERM or SIGINT to the sfs process
    /// unmounts too, and if sfs dies the mount is removed rather than left dead.
    ///
    /// `sfs mount --namespace DIR` mounts the self-certifying namespace instead: an empty
    /// root in which `DIR/@HOST%PORT,HOSTID` connects to that server on first use (verifying
    /// the HOSTID) and is its tree, and where each ALIAS of ~/.sfs/bookmarks is a symlink to
    /// its server. Servers unused for --idle-secs are disconnected; the next use reconnects.
    #[command(verbatim_doc_comment)]
    Mount {
        /// Server name (@HOST%PORT,HOSTID[/PATH] or ALIAS:/PATH).
        #[arg(required_unless_present = "namespace")]
        name: Option<String>,
        /// Mount point (an existing directory).
        #[arg(required_unless_present = "namespace")]
        dir: Option<PathBuf>,
        /// Mount the self-certifying namespace on DIR instead of one server's tree.
        #[arg(
            long,
            value_name = "DIR",
            conflicts_with_all = ["name", "dir", "nfs", "multi_user"]
        )]
        namespace: Option<PathBuf>,
        /// With --namespace: disconnect a server after this many seconds without use
        /// (default 300); the next use reconnects.
        #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
        idle_secs: Option<f64>,
        /// Stay in the foreground, logging to standard error (unless --log is given).
        #[arg(short, long)]
        foreground: bool,
        /// Log file of the background process (default ~/.sfs/log/mount-DIR.log).
        #[arg(long, value_name = "FILE")]
        log: Option<PathBuf>,
        /// Many users on one stream: mount with allow_other (root, or user_allow_other in
        /// /etc/fuse.conf) and default_permissions; each local uid other than this process's
        /// logs in with its own identity (--identities DIR/UID, else ~USER/.sfs/identity) on
        /// the same connection and its requests carry that authno; a uid without one is
        /// anonymous.
        #[arg(long, conflicts_with = "nfs")]
        multi_user: bool,
        /// With --multi-user: a directory of identity files named by uid.
        #[arg(long, value_name = "DIR", requires = "multi_user")]
        identities: Option<PathBuf>,
        /// Serve loopback NFSv3 and `mount -t nfs` it instead of FUSE (needs the kernel's NFS
        /// client; the process stays in the foreground).
        #[arg(long)]
        nfs: bool,
        /// With --nfs: the address to listen on (loopback only).
        #[arg(long, default_value = "127.0.0.1:0", requires = "nfs")]
        listen: SocketAddr,
    },
    /// Unmount a directory mounted with `sfs mount` (FUSE or NFS); a FUSE mount whose sfs
    /// process died ("Transport endpoint is not connected") is detached too.
    Umount {
        /// Mount point.
        dir: PathBuf,
    },
}

/// A positive, finite number of seconds.
fn parse_timeout(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1e9 => Ok(v),
        _ => Err(format!("{s:?} is not a positive number of seconds")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_is_a_global_option_with_a_default() {
        let c = Cli::try_parse_from(["sfs", "ls", "@h,x"]).unwrap();
        assert_eq!(c.timeout, 30.0);
        let c = Cli::try_parse_from(["sfs", "cat", "--timeout", "0.5", "@h,x"]).unwrap();
        assert_eq!(c.timeout, 0.5);
        for bad in ["0", "-1", "soon", "inf"] {
            assert!(Cli::try_parse_from(["sfs", "--timeout", bad, "ls", "@h,x"]).is_err());
        }
    }

    #[test]
    fn namespace_mount_takes_only_a_directory() {
        let c = Cli::try_parse_from(["sfs", "mount", "--namespace", "/sfs"]).unwrap();
        let Command::Mount {
            namespace,
            name,
            idle_secs,
            ..
        } = c.command
        else {
            panic!("not mount");
        };
        assert_eq!(namespace.as_deref(), Some(std::path::Path::new("/sfs")));
        assert!(name.is_none());
        assert_eq!(idle_secs, None);
        assert!(
            Cli::try_parse_from(["sfs", "mount", "--namespace", "/sfs", "@h,x", "/m"]).is_err()
        );
        assert!(Cli::try_parse_from(["sfs", "mount", "@h,x"]).is_err());
    }

    #[test]
    fn mount_defaults_to_fuse_in_the_background() {
        let c = Cli::try_parse_from(["sfs", "mount", "@h,x", "/mnt"]).unwrap();
        let Command::Mount {
            foreground, nfs, ..
        } = c.command
        else {
            panic!("not mount");
        };
        assert!(!foreground && !nfs);
        // -f may follow the positionals (the background process is started that way).
        let c = Cli::try_parse_from(["sfs", "mount", "@h,x", "/mnt", "-f"]).unwrap();
        assert!(matches!(
            c.command,
            Command::Mount {
                foreground: true,
                ..
            }
        ));
        // --listen only makes sense for NFS.
        assert!(
            Cli::try_parse_from(["sfs", "mount", "--listen", "127.0.0.1:1", "@h,x", "/m"]).is_err()
        );
        assert!(
            Cli::try_parse_from([
                "sfs",
                "mount",
                "--nfs",
                "--listen",
                "127.0.0.1:1",
                "@h,x",
                "/m"
            ])
            .is_ok()
        );
    }
}
