//! Command-line syntax (clap).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// sfs: the self-certifying file system client.
///
/// Remote paths are self-certifying names: @HOST[%PORT],HOSTID[/PATH]. The HOSTID is checked
/// against the server's key on every connection, so no certificate authority is involved.
#[derive(Debug, Parser)]
#[command(name = "sfs", version)]
pub struct Cli {
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
pub enum Command {
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
    /// Serve as NFSv3 on loopback and mount it on DIR.
    Mount {
        /// Server name (@HOST%PORT,HOSTID[/PATH]).
        name: String,
        /// Mount point.
        dir: PathBuf,
        /// Address to listen on (loopback only).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
    },
    /// Unmount a directory mounted with `sfs mount`.
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
}
