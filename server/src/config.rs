//! The TOML config file: the same settings as `sfsd serve`'s flags. Flags win; defaults are
//! applied afterwards, in [`crate::settings`].

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;

use crate::cli::ServeArgs;

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct FileConfig {
    pub state: Option<PathBuf>,
    pub export: Option<PathBuf>,
    pub backend: Option<String>,
    pub backend_connections: Option<usize>,
    pub backend_timeout_secs: Option<u64>,
    pub backend_wait_secs: Option<u64>,
    pub listen: Option<String>,
    pub location: Option<String>,
    pub workers: Option<usize>,
    pub uniprocessor: Option<bool>,
    pub pin: Option<bool>,
    pub cpus: Option<Vec<usize>>,
    pub helpers: Option<usize>,
    pub read_only: Option<bool>,
    pub anonymous_read: Option<bool>,
    pub anonymous_uid: Option<u32>,
    pub anonymous_gid: Option<u32>,
    pub users: Option<PathBuf>,
    pub lease_secs: Option<u64>,
    pub no_disk_watch: Option<bool>,
    pub max_leases: Option<usize>,
    pub max_leases_per_conn: Option<usize>,
    pub max_connections: Option<usize>,
    pub max_startups: Option<usize>,
    pub max_in_flight: Option<usize>,
    pub max_output: Option<usize>,
    pub max_record: Option<usize>,
    pub handshake_timeout_secs: Option<u64>,
    pub idle_timeout_secs: Option<u64>,
    pub stats: Option<bool>,
    pub peer_listen: Option<String>,
    pub peers: Option<Vec<String>>,
}

/// Reads and parses the config file (unknown keys are an error).
pub(crate) fn load(path: &Path) -> Result<FileConfig> {
    crate::trust::check_mine(path, crate::trust::Kind::Trusted)?;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Fills the flags not given from the file (defaults come later, in
/// [`crate::settings::Settings::resolve`]).
pub(crate) fn merge(mut a: ServeArgs, f: FileConfig) -> ServeArgs {
    macro_rules! opt {
        ($($field:ident),*) => { $( if a.$field.is_none() { a.$field = f.$field; } )* };
    }
    macro_rules! flag {
        ($($field:ident),*) => { $( a.$field = a.$field || f.$field.unwrap_or(false); )* };
    }
    opt!(
        state,
        export,
        backend,
        backend_connections,
        backend_timeout_secs,
        backend_wait_secs,
        listen,
        location,
        workers,
        cpus,
        helpers,
        users,
        lease_secs,
        max_leases,
        max_leases_per_conn,
        anonymous_uid,
        anonymous_gid,
        idle_timeout_secs,
        max_connections,
        max_startups,
        max_in_flight,
        max_output,
        max_record,
        handshake_timeout_secs,
        peer_listen,
        peers
    );
    flag!(
        uniprocessor,
        pin,
        read_only,
        anonymous_read,
        no_disk_watch,
        stats
    );
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "export = \"/srv\"\nworkers = 3\nread-only = true\n").unwrap();
        let a = ServeArgs {
            workers: Some(5),
            ..ServeArgs::default()
        };
        let m = merge(a, load(&p).unwrap());
        assert_eq!(m.workers, Some(5));
        assert_eq!(m.export, Some(PathBuf::from("/srv")));
        assert!(m.read_only);
        std::fs::write(
            &p,
            "backend = \"nfs://nas/export\"\nbackend-connections = 4\nbackend-wait-secs = 0\n",
        )
        .unwrap();
        let m = merge(ServeArgs::default(), load(&p).unwrap());
        assert_eq!(m.backend.as_deref(), Some("nfs://nas/export"));
        assert_eq!(m.backend_connections, Some(4));
        assert_eq!(m.backend_wait_secs, Some(0));
        std::fs::write(
            &p,
            "export = \"/srv\"\npeer-listen = \"10.0.0.1:4005\"\npeers = [\"10.0.0.2:4005\"]\n",
        )
        .unwrap();
        let m = merge(ServeArgs::default(), load(&p).unwrap());
        assert_eq!(m.peer_listen.as_deref(), Some("10.0.0.1:4005"));
        assert_eq!(m.peers, Some(vec!["10.0.0.2:4005".to_string()]));
        std::fs::write(&p, "bogus = 1\n").unwrap();
        assert!(load(&p).is_err());
    }
}
