//! Mount-free commands: each resolves a self-certifying path over a session and does one
//! thing, with the messages and exit codes a shell user expects.

pub(crate) mod dest;
pub(crate) mod edit;
pub(crate) mod list;
pub(crate) mod mount;
pub(crate) mod shown;
pub(crate) mod transfer;

use std::collections::HashMap;
use std::fmt;

use protocol::{Attr, FileHandle, FileType, NfsStatus, ServerName, SetAttr};

use crate::identity::Identity;
use crate::session::{Client, Fetched, Options, SessionError};

/// A remote path: the server and the path below its root.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The server (without path).
    pub server: ServerName,
    /// The path below the root, `/`-separated, without empty components.
    pub components: Vec<String>,
    /// What the user typed, for messages.
    pub text: String,
}

impl Target {
    /// Parses `@HOST%PORT,HOSTID/path`, or `ALIAS:/path` with an alias from the bookmarks
    /// file ([`crate::bookmarks`]).
    pub(crate) fn parse(text: &str) -> Result<Target, CmdError> {
        let full = match crate::bookmarks::expand(text) {
            Ok(Some(full)) => full,
            Ok(None) => text.to_owned(),
            Err(e) => return Err(CmdError::Usage(e)),
        };
        let name: ServerName = full
            .parse()
            .map_err(|e| CmdError::Usage(format!("{text}: {e}")))?;
        let components = name
            .path()
            .unwrap_or("/")
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .map(str::to_owned)
            .collect();
        Ok(Target {
            server: name.without_path(),
            components,
            text: text.to_owned(),
        })
    }

    /// The last component (the file's own name), if any.
    pub(crate) fn file_name(&self) -> Option<&str> {
        self.components.last().map(String::as_str)
    }

    /// The same server with `child` appended.
    pub(crate) fn join(&self, child: &str) -> Target {
        let mut t = self.clone();
        t.components.push(child.to_owned());
        t.text = format!("{}/{}", self.text.trim_end_matches('/'), child);
        t
    }
}

/// A command's failure, with what to print.
#[derive(Debug)]
pub(crate) enum CmdError {
    /// Bad arguments (exit 2).
    Usage(String),
    /// A failure about one path: `sfs: CMD: PATH: message` (exit 1).
    Path(String, String),
    /// Anything else (exit 1).
    Other(anyhow::Error),
    /// Already reported on stderr (exit 1, print nothing more).
    Reported,
}

impl fmt::Display for CmdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmdError::Usage(m) => write!(f, "{}", shown::escaped(m)),
            // Paths and messages may carry server-chosen names: never raw control characters.
            CmdError::Path(p, m) => write!(f, "{}: {}", shown::escaped(p), shown::escaped(m)),
            CmdError::Other(e) => write!(f, "{}", shown::escaped(&format!("{e:#}"))),
            CmdError::Reported => write!(f, "failed"),
        }
    }
}

impl CmdError {
    /// The process exit status.
    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            CmdError::Usage(_) => 2,
            _ => 1,
        }
    }

    /// A session error about `path`.
    pub(crate) fn at(path: &str, e: SessionError) -> CmdError {
        match e {
            SessionError::Nfs(_) => CmdError::Path(path.to_owned(), e.to_string()),
            other => CmdError::Other(other.into()),
        }
    }
}

impl From<anyhow::Error> for CmdError {
    fn from(e: anyhow::Error) -> Self {
        CmdError::Other(e)
    }
}

impl From<std::io::Error> for CmdError {
    fn from(e: std::io::Error) -> Self {
        CmdError::Other(e.into())
    }
}

/// Sessions by server, shared by the paths of one command.
pub(crate) struct Ctx {
    identity: Option<Identity>,
    opts: Options,
    clients: HashMap<String, Client>,
    /// Root handles by server, once mounted.
    roots: HashMap<String, FileHandle>,
}

impl Ctx {
    /// A context logging in as `identity` (anonymous when `None`), with session options `opts`.
    pub(crate) fn new(identity: Option<Identity>, opts: Options) -> Ctx {
        Ctx {
            identity,
            opts,
            clients: HashMap::new(),
            roots: HashMap::new(),
        }
    }

    /// The identity and session options new sessions get.
    pub(crate) fn session_settings(&self) -> (Option<Identity>, Options) {
        (self.identity.clone(), self.opts.clone())
    }

    /// The session with `server` and its root handle.
    pub(crate) async fn client(
        &mut self,
        server: &ServerName,
    ) -> Result<(Client, FileHandle), CmdError> {
        let key = server.to_string();
        let c = self.session(server);
        if let Some(r) = self.roots.get(&key) {
            return Ok((c, *r));
        }
        let (root, _) = c.mount("/").await.map_err(|e| CmdError::at(&key, e))?;
        self.roots.insert(key, root);
        Ok((c, root))
    }

    /// The session with `server` (made, not yet connected, on first use).
    fn session(&mut self, server: &ServerName) -> Client {
        let (identity, opts) = (&self.identity, &self.opts);
        self.clients
            .entry(server.to_string())
            .or_insert_with(|| Client::new(server, identity.clone(), opts.clone()))
            .clone()
    }

    /// Resolves a target as [`Ctx::resolve`] does, with a regular file's first bytes: one
    /// FETCH, which on a new session goes out with the LOGIN, so a small file arrives in the
    /// first round trip after the handshake. Where the server cannot FETCH, the walk and the
    /// reads are the usual ones (no bytes come back).
    pub(crate) async fn fetch(
        &mut self,
        t: &Target,
    ) -> Result<(Client, FileHandle, Attr, Option<Fetched>), CmdError> {
        let c = self.session(&t.server);
        let path = format!("/{}", t.components.join("/"));
        match c.fetch(&path).await.map_err(|e| CmdError::at(&t.text, e))? {
            Some(f) => Ok((c, f.fh, f.attr, Some(f))),
            None => {
                let (c, fh, attr) = self.resolve(t).await?;
                Ok((c, fh, attr, None))
            }
        }
    }

    /// The directory a new `t` would go into, found by one FETCH (which on a new session goes
    /// out with the LOGIN: no MOUNT and LOOKUPs, each a round trip), with the new object's
    /// name. `None` when `t` is the root, or the server cannot FETCH: the caller walks with
    /// [`Ctx::parent`].
    pub(crate) async fn fetch_parent(
        &mut self,
        t: &Target,
    ) -> Result<Option<(Client, FileHandle, String)>, CmdError> {
        let Some((name, dirs)) = t.components.split_last() else {
            return Ok(None);
        };
        let c = self.session(&t.server);
        let path = format!("/{}", dirs.join("/"));
        let Some(f) = c
            .fetch_object(&path)
            .await
            .map_err(|e| CmdError::at(&t.text, e))?
        else {
            return Ok(None);
        };
        if f.attr.ftype != FileType::Directory {
            return Err(CmdError::Path(t.text.clone(), "Not a directory".into()));
        }
        Ok(Some((c, f.fh, name.clone())))
    }

    /// Resolves a target to its handle and attributes.
    pub(crate) async fn resolve(
        &mut self,
        t: &Target,
    ) -> Result<(Client, FileHandle, Attr), CmdError> {
        let (c, mut fh) = self.client(&t.server).await?;
        let mut attr = c.getattr(&fh).await.map_err(|e| CmdError::at(&t.text, e))?;
        for comp in &t.components {
            if attr.ftype != FileType::Directory {
                return Err(CmdError::Path(t.text.clone(), "Not a directory".into()));
            }
            let (f, a) = c
                .lookup(&fh, comp.as_bytes())
                .await
                .map_err(|e| CmdError::at(&t.text, e))?;
            fh = f;
            attr = a;
        }
        Ok((c, fh, attr))
    }

    /// Resolves the parent directory of a target: (client, parent handle, own name).
    pub(crate) async fn parent(
        &mut self,
        t: &Target,
    ) -> Result<(Client, FileHandle, String), CmdError> {
        let Some(name) = t.file_name() else {
            return Err(CmdError::Path(
                t.text.clone(),
                "is the root of the server".into(),
            ));
        };
        let name = name.to_owned();
        let mut p = t.clone();
        p.components.pop();
        let (c, fh, attr) = self.resolve(&p).await?;
        if attr.ftype != FileType::Directory {
            return Err(CmdError::Path(p.text, "Not a directory".into()));
        }
        Ok((c, fh, name))
    }
}

/// This process's umask: the permission bits a new object's mode loses, as for local `mkdir`
/// and `open(O_CREAT)`. Read once, where Linux shows it (`/proc/self/status`, since 4.7)
/// without changing it; elsewhere set and restored at once.
pub(crate) fn umask() -> u32 {
    static UMASK: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *UMASK.get_or_init(|| {
        let shown = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| umask_in_status(&s));
        shown.unwrap_or_else(umask_by_setting) & 0o777
    })
}

/// The umask where `/proc` does not show it: set, and put back at once.
#[allow(clippy::useless_conversion)] // mode_t is u16 on some systems
fn umask_by_setting() -> u32 {
    // SAFETY: umask(2) cannot fail; the old mask is put back at once.
    let old = unsafe { libc::umask(0o022) };
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    u32::from(old)
}

/// The `Umask:` line of `/proc/self/status` (octal).
fn umask_in_status(status: &str) -> Option<u32> {
    let line = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
    u32::from_str_radix(line.trim(), 8).ok()
}

/// The mode a local program would make an object with when it asks for `mode`: less the
/// [`umask`], and never setuid or setgid (as `cp` without `-p`). Sent in every request that
/// makes an object, so the server applies no default of its own.
pub(crate) fn new_mode(mode: u32) -> u32 {
    mode & 0o1777 & !umask()
}

/// Makes directory `name` in `parent`, or reuses it if a directory of that name already exists
/// (`mkdir -p`, `put -r`); anything else already there is "File exists". Also says whether it
/// made the directory.
pub(crate) async fn mkdir_or_existing(
    c: &Client,
    parent: &FileHandle,
    name: &str,
    attr: SetAttr,
    label: &str,
) -> Result<(FileHandle, bool), CmdError> {
    match c.mkdir(parent, name.as_bytes(), attr).await {
        Ok(m) => Ok((m.fh, true)),
        Err(SessionError::Nfs(NfsStatus::Exist)) => {
            let (fh, attr) = c
                .lookup(parent, name.as_bytes())
                .await
                .map_err(|e| CmdError::at(label, e))?;
            if attr.ftype != FileType::Directory {
                return Err(CmdError::Path(label.into(), "File exists".into()));
            }
            Ok((fh, false))
        }
        Err(e) => Err(CmdError::at(label, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_umask_is_read_from_proc_and_applied_like_cp() {
        assert_eq!(
            umask_in_status("Name:\tsfs\nUmask:\t0027\nState:\tR\n"),
            Some(0o027)
        );
        assert_eq!(umask_in_status("Name:\tsfs\n"), None);
        // The process's own, however it was read.
        assert_eq!(umask(), umask_by_setting());
        let u = umask();
        assert_eq!(new_mode(0o777), 0o777 & !u);
        assert_eq!(new_mode(0o4755) & 0o7000, 0, "never setuid");
        assert_eq!(new_mode(0o2755) & 0o7000, 0, "never setgid");
        assert_eq!(new_mode(0o1777) & 0o1000, 0o1000, "sticky stays");
    }
}
