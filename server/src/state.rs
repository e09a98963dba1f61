//! The server's state directory: host key, file-handle secret and location.
//!
//! Both secrets are written with mode 0600 inside a 0700 directory, and every file is checked
//! before it is read ([`crate::trust`]: sfsd's own or root's, not writable by others, no
//! symlinks). The handle secret must
//! survive restarts (handles are `MAC(secret, object identity)`), so it is created once and
//! only ever read afterwards.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use protocol::{HandleKey, Location, ServerKeypair, ServerName};

use crate::trust::{self, Kind};

const HOST_KEY: &str = "host.key";
const HANDLE_SECRET: &str = "handle.secret";
const LOCATION: &str = "location";

/// What `sfsd init` creates and `sfsd serve` loads.
pub(crate) struct State {
    pub keypair: ServerKeypair,
    pub handle_key: HandleKey,
    pub location: Location,
    /// The reply cache's journal and what it held, once `sfsd serve` has opened it (it is
    /// named after the address the server is bound to).
    pub replies: Option<crate::replies::Opened>,
}

impl State {
    /// The server's self-certifying name.
    pub(crate) fn name(&self) -> ServerName {
        self.keypair.server_name(self.location.clone())
    }
}

fn write_secret(path: &Path, text: &str) -> Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    Ok(())
}

/// Parses `HOST%PORT` or `HOST` (port 4004).
pub(crate) fn parse_location(text: &str) -> Result<Location> {
    text.parse()
        .map_err(|e| anyhow::anyhow!("bad location {text:?}: {e}"))
}

/// Creates a new state directory. Fails if it already holds a key.
pub(crate) fn init(dir: &Path, location: &Location) -> Result<State> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating state dir {}", dir.display()))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    trust::check_mine(dir, Kind::Directory)?;
    if dir.join(HOST_KEY).exists() {
        bail!("{} already holds a host key", dir.display());
    }
    let keypair = ServerKeypair::generate();
    let handle_key = HandleKey::generate();
    write_secret(&dir.join(HOST_KEY), &keypair.to_text())?;
    write_secret(&dir.join(HANDLE_SECRET), &handle_key.to_text())?;
    fs::write(dir.join(LOCATION), format!("{}\n", location_text(location)))?;
    Ok(State {
        keypair,
        handle_key,
        location: location.clone(),
        replies: None,
    })
}

/// `host%port` as written in the state dir and names.
pub(crate) fn location_text(l: &Location) -> String {
    format!("{}%{}", l.host(), l.port())
}

/// Loads an existing state directory. `location` overrides the stored one (e.g. when the
/// listening port was chosen by the OS).
pub(crate) fn load(dir: &Path, location: Option<&Location>) -> Result<State> {
    trust::check_mine(dir, Kind::Directory)?;
    let read = |name: &str| -> Result<String> {
        let p: PathBuf = dir.join(name);
        let kind = if name == LOCATION {
            Kind::Trusted
        } else {
            Kind::Secret
        };
        trust::check_mine(&p, kind)?;
        fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))
    };
    let keypair = ServerKeypair::from_text(&read(HOST_KEY)?)
        .map_err(|e| anyhow::anyhow!("bad host key: {e}"))?;
    let handle_key = HandleKey::from_text(read(HANDLE_SECRET)?.trim())
        .map_err(|e| anyhow::anyhow!("bad handle secret: {e}"))?;
    let location = match location {
        Some(l) => l.clone(),
        None => parse_location(read(LOCATION)?.trim())?,
    };
    Ok(State {
        keypair,
        handle_key,
        location,
        replies: None,
    })
}

/// Whether `dir` already holds a state (a host key).
pub(crate) fn exists(dir: &Path) -> bool {
    dir.join(HOST_KEY).exists()
}
