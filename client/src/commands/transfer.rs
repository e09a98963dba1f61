//! `cat`, `get` and `put`: bulk transfers with a window of outstanding requests.

use std::borrow::Cow;
use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use protocol::{Attr, CreateHow, FileHandle, FileType, NfsStatus, SetAttr, SetTime};

use super::{CmdError, Ctx, Target, dest, shown};
use crate::progress::Progress;
use crate::session::{Client, Fetched, SessionError};

/// `sfs cat`.
pub(crate) async fn cat(ctx: &mut Ctx, targets: &[String]) -> Result<(), CmdError> {
    let mut failed = false;
    for text in targets {
        let t = Target::parse(text)?;
        let r = async {
            let (c, fh, attr, fetched) = ctx.fetch(&t).await?;
            if attr.ftype == FileType::Directory {
                return Err(CmdError::Path(t.text.clone(), "Is a directory".into()));
            }
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            let mut offset = 0;
            if let Some(first) = fetched {
                write_in_pieces(&mut out, &first.data)?;
                offset = first.data.len() as u64;
                if first.eof {
                    out.flush()?;
                    return Ok(());
                }
            }
            c.read_all(&fh, offset, |d| write_in_pieces(&mut out, d))
                .await?;
            out.flush()?;
            Ok(())
        }
        .await;
        if let Err(e) = r {
            eprintln!("sfs: cat: {e}");
            failed = true;
        }
    }
    if failed {
        Err(CmdError::Reported)
    } else {
        Ok(())
    }
}

/// The most one `write` puts into the page cache: 32 KiB, eight pages.
///
/// The kernel sizes the page-cache folios of a write by its length, and on a virtual machine
/// with free page reporting folios larger than eight pages fill slowly in memory that has
/// been free for a few seconds (docs/DESIGN.md, "Writing into the page cache"). Measured:
/// `sfs get` of 512 MiB into a new file, 6 interleaved runs, 1.3 client CPU-s whole against
/// 0.7 in pieces.
const PAGE_CACHE_WRITE_MAX: usize = 32 * 1024;

/// Writes all of `data` to `out` in pieces of at most [`PAGE_CACHE_WRITE_MAX`].
fn write_in_pieces(out: &mut impl Write, data: &[u8]) -> std::io::Result<()> {
    data.chunks(PAGE_CACHE_WRITE_MAX)
        .try_for_each(|piece| out.write_all(piece))
}

/// `sfs get`: the file (or with `-r` the tree) is written beneath the destination's
/// directory by descriptor ([`super::dest`]): nothing the server names can put a file
/// outside the destination, and no symlink met there is followed. An existing regular file
/// the user names is overwritten, as `cp` does; an existing symlink is not followed (an
/// error). In a tree, an entry whose name is not one component or is listed twice, or whose
/// local file cannot be made, is reported and the copy goes on with the others (the command
/// fails at the end); an error from the server stops it.
pub(crate) async fn get(
    ctx: &mut Ctx,
    remote: &str,
    local: Option<&Path>,
    recursive: bool,
) -> Result<(), CmdError> {
    let t = Target::parse(remote)?;
    let (c, fh, attr, fetched) = ctx.fetch(&t).await?;
    let name = t.file_name().unwrap_or("root").to_owned();
    let (parent, leaf) = match local {
        Some(p) if p.is_dir() => (p.to_path_buf(), name.into_bytes()),
        Some(p) => match p.file_name() {
            Some(n) => (
                p.parent().map(Path::to_path_buf).unwrap_or_default(),
                n.as_bytes().to_vec(),
            ),
            None => {
                return Err(CmdError::Path(
                    p.display().to_string(),
                    "not a file name".into(),
                ));
            }
        },
        None => (PathBuf::new(), name.into_bytes()),
    };
    let shown = parent.join(OsStr::from_bytes(&leaf)).display().to_string();
    if let Some(why) = dest::check_name(&leaf) {
        return Err(CmdError::Path(shown, why.into()));
    }
    if attr.ftype == FileType::Directory && !recursive {
        return Err(CmdError::Path(
            t.text,
            "Is a directory (use -r to copy it)".into(),
        ));
    }
    let local_error = |e: std::io::Error| CmdError::Path(shown.clone(), io_message(&e));
    let parent = dest::Dir::open_named(&parent)
        .map_err(|e| CmdError::Path(parent.display().to_string(), io_message(&e)))?;
    if attr.ftype == FileType::Directory {
        let top = parent.make_dir(&leaf).map_err(local_error)?;
        let failed = get_tree(&c, fh, &t.text, top).await?;
        return if failed {
            Err(CmdError::Reported)
        } else {
            Ok(())
        };
    }
    let file = parent.create_named_file(&leaf).map_err(local_error)?;
    get_file(&c, &fh, &attr, &t.text, fetched, file).await
}

/// How deep `get -r` goes: each level holds a directory descriptor open while the levels
/// below it are copied, and a server could otherwise nest directories without end. Real
/// trees are a few dozen levels deep; 256 stays well inside the usual limit of 1024 open
/// files.
const MAX_DEPTH: usize = 256;

/// Copies the file `fh` into `f`, starting with the bytes a FETCH brought if there were any.
async fn get_file(
    c: &Client,
    fh: &FileHandle,
    attr: &Attr,
    label: &str,
    fetched: Option<Fetched>,
    mut f: fs::File,
) -> Result<(), CmdError> {
    let mut bar = Progress::new(label, Some(attr.size));
    let mut offset = 0;
    if let Some(first) = fetched {
        write_in_pieces(&mut f, &first.data)?;
        bar.inc(first.data.len() as u64);
        offset = first.data.len() as u64;
        if first.eof {
            f.flush()?;
            bar.finish();
            return Ok(());
        }
    }
    c.read_all(fh, offset, |d| {
        bar.inc(d.len() as u64);
        write_in_pieces(&mut f, d)
    })
    .await
    .map_err(|e| path_error(label, e))?;
    f.flush()?;
    bar.finish();
    Ok(())
}

/// Reports a problem with one entry of a tree (the copy goes on).
fn entry_failed(failed: &mut bool, label: &str, message: String) {
    eprintln!("sfs: get: {}", CmdError::Path(label.to_owned(), message));
    *failed = true;
}

/// A server's name for messages: quoted as `ls` quotes it, in single quotes when it needs
/// no escapes (so an empty name shows as `''`).
fn name_shown(name: &[u8]) -> String {
    match shown::quoted(name) {
        Cow::Borrowed(s) => format!("'{s}'"),
        Cow::Owned(s) => s,
    }
}

/// A directory of the tree still to copy: its handle, and where it goes locally.
struct Pending {
    fh: FileHandle,
    label: String,
    depth: usize,
    place: Place,
}

/// Where a [`Pending`] directory goes.
enum Place {
    /// Already made (the top).
    Made(dest::Dir),
    /// To be made as `name` beneath a directory held open until then (always one on the
    /// path from the top, so at most [`MAX_DEPTH`] are open).
    Beneath(Rc<dest::Dir>, Vec<u8>),
}

/// Copies the tree of `dir` into `top`, depth first, with a stack of its own rather than
/// recursion (each level of nested futures costs stack, and a server can nest without end).
/// Per-entry problems are reported; whether there were any. An error from the server is
/// returned.
async fn get_tree(
    c: &Client,
    dir: FileHandle,
    label: &str,
    top: dest::Dir,
) -> Result<bool, CmdError> {
    let mut failed = false;
    let mut stack = vec![Pending {
        fh: dir,
        label: label.to_owned(),
        depth: 0,
        place: Place::Made(top),
    }];
    while let Some(Pending {
        fh: dir,
        label,
        depth,
        place,
    }) = stack.pop()
    {
        let local = match place {
            Place::Made(d) => d,
            Place::Beneath(parent, name) => {
                if depth > MAX_DEPTH {
                    let msg = format!("more than {MAX_DEPTH} levels deep; not copied");
                    entry_failed(&mut failed, &label, msg);
                    continue;
                }
                match parent.make_dir(&name) {
                    Ok(d) => d,
                    Err(err) => {
                        let shown = parent.path_of(&name).display().to_string();
                        entry_failed(&mut failed, &shown, io_message(&err));
                        continue;
                    }
                }
            }
        };
        let local = Rc::new(local);
        let entries = c
            .readdir_all(&dir)
            .await
            .map_err(|e| CmdError::at(&label, e))?;
        // Names made here: one listed twice could be written through the first (a symlink
        // `d`, then a directory `d`).
        let mut claimed = HashSet::new();
        let mut subdirs = Vec::new();
        for e in entries {
            if let Some(why) = dest::check_name(&e.name) {
                let msg = format!("refusing the name {} ({why})", name_shown(&e.name));
                entry_failed(&mut failed, &label, msg);
                continue;
            }
            let child_label = format!(
                "{}/{}",
                label.trim_end_matches('/'),
                String::from_utf8_lossy(&e.name)
            );
            if !claimed.insert(e.name.clone()) {
                let msg = "listed twice by the server; only the first was copied".into();
                entry_failed(&mut failed, &child_label, msg);
                continue;
            }
            let (fh, attr) = match (e.fh, e.attr) {
                (Some(fh), Some(a)) => (fh, a),
                _ => c
                    .lookup(&dir, &e.name)
                    .await
                    .map_err(|err| CmdError::at(&child_label, err))?,
            };
            let local_failed = |failed: &mut bool, err: std::io::Error| {
                let shown = local.path_of(&e.name).display().to_string();
                entry_failed(failed, &shown, io_message(&err));
            };
            match attr.ftype {
                FileType::Directory => subdirs.push(Pending {
                    fh,
                    label: child_label,
                    depth: depth + 1,
                    place: Place::Beneath(local.clone(), e.name.clone()),
                }),
                FileType::Regular => match local.create_file(&e.name) {
                    Ok(f) => get_file(c, &fh, &attr, &child_label, None, f).await?,
                    Err(err) => local_failed(&mut failed, err),
                },
                FileType::Symlink => {
                    let target = c
                        .readlink(&fh)
                        .await
                        .map_err(|err| CmdError::at(&child_label, err))?;
                    if let Err(err) = local.symlink(&e.name, &target) {
                        local_failed(&mut failed, err);
                    }
                }
                _ => eprintln!(
                    "sfs: get: {}: skipping special file",
                    shown::escaped(&child_label)
                ),
            }
        }
        // In listing order once popped.
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(failed)
}

/// `sfs put`.
pub(crate) async fn put(
    ctx: &mut Ctx,
    local: &Path,
    remote: &str,
    recursive: bool,
) -> Result<(), CmdError> {
    let meta = fs::metadata(local)
        .map_err(|e| CmdError::Path(local.display().to_string(), io_message(&e)))?;
    let local_name = local
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "upload".into());
    let mut t = Target::parse(remote)?;
    // A file: made by path with one CREATEAT riding with the LOGIN, so the first WRITE goes
    // one round trip after the handshake; whether the name is an existing directory is asked
    // only if CREATEAT finds it taken.
    if !meta.is_dir() && !t.components.is_empty() {
        let c = ctx.session(&t.server);
        let path = format!("/{}", t.components.join("/"));
        match put_file(&c, Dest::At(&path), local, &t.text, true).await? {
            Put::Done => return Ok(()),
            Put::IsDir(into) => {
                let t = t.join(&local_name);
                let place = Dest::In(&into, &local_name);
                return put_file(&c, place, local, &t.text, false).await.map(|_| ());
            }
            // An older server: as below.
            Put::NoCreateAt => {}
        }
    }
    // Its directory by one FETCH riding with the LOGIN, and CREATE at once: two round trips
    // after the handshake before the first WRITE, where MOUNT, LOOKUP of the name and CREATE
    // took four.
    if !meta.is_dir()
        && let Some((c, dir, name)) = ctx.fetch_parent(&t).await?
    {
        let into = match put_file(&c, Dest::In(&dir, &name), local, &t.text, true).await? {
            Put::IsDir(into) => into,
            Put::Done | Put::NoCreateAt => return Ok(()),
        };
        let t = t.join(&local_name);
        let place = Dest::In(&into, &local_name);
        return put_file(&c, place, local, &t.text, false).await.map(|_| ());
    }
    // An existing directory receives the file under its own name.
    if let Ok((_, _, a)) = ctx.resolve(&t).await
        && a.ftype == FileType::Directory
    {
        t = t.join(&local_name);
    }
    let (c, dir, name) = ctx.parent(&t).await?;
    if meta.is_dir() {
        if !recursive {
            return Err(CmdError::Path(
                local.display().to_string(),
                "Is a directory (use -r to copy it)".into(),
            ));
        }
        return put_tree(&c, dir, &name, local, &t.text).await;
    }
    put_file(&c, Dest::In(&dir, &name), local, &t.text, false)
        .await
        .map(|_| ())
}

/// What [`put_file`] did.
enum Put {
    Done,
    /// The name is an existing directory (asked only when told to): nothing was written.
    IsDir(FileHandle),
    /// The server cannot make a file by path (before version 11): nothing was done.
    NoCreateAt,
}

/// Where [`put_file`] makes its file.
#[derive(Clone, Copy)]
enum Dest<'a> {
    /// A name in a directory found before (CREATE).
    In(&'a FileHandle, &'a str),
    /// A path from the export's root (CREATEAT).
    At(&'a str),
}

impl Dest<'_> {
    /// The file made here as `how` says; `None` if the server cannot make it by path.
    async fn create(self, c: &Client, how: CreateHow) -> Result<Option<FileHandle>, SessionError> {
        match self {
            Dest::In(dir, name) => c
                .create(dir, name.as_bytes(), how)
                .await
                .map(|m| Some(m.fh)),
            Dest::At(path) => Ok(c.create_at(path, how).await?.map(|(fh, _)| fh)),
        }
    }

    /// What is here now.
    async fn look_up(self, c: &Client) -> Result<(FileHandle, Attr), SessionError> {
        match self {
            Dest::In(dir, name) => c.lookup(dir, name.as_bytes()).await,
            Dest::At(path) => match c.fetch_object(path).await? {
                Some(found) => Ok((found.fh, found.attr)),
                // A server with CREATEAT has FETCH.
                None => Err(SessionError::Nfs(NfsStatus::NotSupp)),
            },
        }
    }
}

/// Copies the regular file `local` to `place`. With `dir_check`, a name that exists is looked
/// up first, and an existing directory is returned untouched, for the file to go into it (the
/// caller found only the parent, or nothing).
async fn put_file(
    c: &Client,
    place: Dest<'_>,
    local: &Path,
    label: &str,
    dir_check: bool,
) -> Result<Put, CmdError> {
    let local_error =
        |e: std::io::Error| CmdError::Path(local.display().to_string(), io_message(&e));
    let f = fs::File::open(local).map_err(local_error)?;
    let meta = f.metadata().map_err(local_error)?;
    // Blocks are read at their offsets (again, if one must be resent), which a pipe or device
    // cannot do; sftp refuses them too.
    if !meta.is_file() {
        return Err(CmdError::Path(
            local.display().to_string(),
            "Not a regular file".into(),
        ));
    }
    let size = Some(meta.len());
    let mode = super::new_mode(meta.permissions().mode());
    // Writable by its owner while the data goes in: WRITE is checked against the file's mode
    // (the protocol keeps no open descriptor), so a read-only file is made read-only after.
    let filling = mode | 0o200;
    let attr = SetAttr {
        mode: Some(filling),
        size: Some(0),
        ..set_nothing()
    };
    // A new file; or an existing one truncated (UNCHECKED), which keeps its own mode, as cp.
    let (fh, made) = match place.create(c, CreateHow::Guarded(attr)).await {
        Ok(Some(fh)) => (fh, true),
        Ok(None) => return Ok(Put::NoCreateAt),
        Err(SessionError::Nfs(NfsStatus::Exist)) => {
            if dir_check {
                let (fh, a) = place.look_up(c).await.map_err(|e| CmdError::at(label, e))?;
                if a.ftype == FileType::Directory {
                    return Ok(Put::IsDir(fh));
                }
            }
            match place.create(c, CreateHow::Unchecked(attr)).await {
                Ok(Some(fh)) => (fh, false),
                Ok(None) => return Ok(Put::NoCreateAt),
                Err(e) => return Err(CmdError::at(label, e)),
            }
        }
        Err(e) => return Err(CmdError::at(label, e)),
    };
    let mut bar = Progress::new(label, size);
    let written = c
        .write_file(&fh, std::sync::Arc::new(f), |n| bar.inc(n))
        .await;
    if made && protocol::create_keeps_open_state(filling) {
        // The server kept the creating descriptor (the owner may not read it): done with it.
        let _ = c.close(&fh).await;
    }
    written.map_err(|e| path_error(label, e))?;
    bar.finish();
    if made && filling != mode {
        set_mode(c, &fh, mode, label).await?;
    }
    Ok(Put::Done)
}

/// SETATTR of the mode alone.
async fn set_mode(c: &Client, fh: &FileHandle, mode: u32, label: &str) -> Result<(), CmdError> {
    let attr = SetAttr {
        mode: Some(mode),
        ..set_nothing()
    };
    c.setattr(fh, attr)
        .await
        .map(|_| ())
        .map_err(|e| CmdError::at(label, e))
}

fn put_tree<'a>(
    c: &'a Client,
    parent: FileHandle,
    name: &'a str,
    local: &'a Path,
    label: &'a str,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), CmdError>> + 'a>> {
    Box::pin(async move {
        let meta = fs::metadata(local)?;
        let mode = super::new_mode(meta.permissions().mode());
        // Writable and searchable by its owner while it is filled (as cp -r does), its own
        // mode after.
        let filling = mode | 0o700;
        let attr = SetAttr {
            mode: Some(filling),
            ..set_nothing()
        };
        let (dir, made) = super::mkdir_or_existing(c, &parent, name, attr, label).await?;
        let mut entries: Vec<_> = fs::read_dir(local)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let n = e.file_name().to_string_lossy().into_owned();
            let child_label = format!("{}/{}", label.trim_end_matches('/'), n);
            let ft = e.file_type()?;
            if ft.is_dir() {
                put_tree(c, dir, &n, &e.path(), &child_label).await?;
            } else if ft.is_file() {
                put_file(c, Dest::In(&dir, &n), &e.path(), &child_label, false).await?;
            } else if ft.is_symlink() {
                let target = fs::read_link(e.path())?;
                #[cfg(unix)]
                {
                    use std::os::unix::ffi::OsStrExt;
                    c.symlink(
                        &dir,
                        n.as_bytes(),
                        target.as_os_str().as_bytes(),
                        set_nothing(),
                    )
                    .await
                    .map_err(|err| CmdError::at(&child_label, err))?;
                }
            }
        }
        if made && filling != mode {
            set_mode(c, &dir, mode, label).await?;
        }
        Ok(())
    })
}

/// A SETATTR that changes nothing.
pub(crate) fn set_nothing() -> SetAttr {
    SetAttr {
        mode: None,
        uid: None,
        gid: None,
        size: None,
        atime: SetTime::DontChange,
        mtime: SetTime::DontChange,
    }
}

fn io_message(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "No such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "Permission denied".into(),
        _ => e.to_string(),
    }
}

fn path_error(label: &str, e: anyhow::Error) -> CmdError {
    match e.downcast::<SessionError>() {
        Ok(se) => CmdError::at(label, se),
        Err(e) => CmdError::Other(e),
    }
}
