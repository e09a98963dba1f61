//! `rm`, `mkdir` and `mv`.

use protocol::{FileHandle, FileType, SetAttr};

use super::transfer::set_nothing;
use super::{CmdError, Ctx, Target};
use crate::session::Client;

/// `sfs rm`.
pub(crate) async fn rm(ctx: &mut Ctx, targets: &[String], recursive: bool) -> Result<(), CmdError> {
    let mut failed = false;
    for text in targets {
        let r = async {
            let t = Target::parse(text)?;
            let (c, dir, name) = ctx.parent(&t).await?;
            let (fh, attr) = c
                .lookup(&dir, name.as_bytes())
                .await
                .map_err(|e| CmdError::at(text, e))?;
            if attr.ftype == FileType::Directory {
                if !recursive {
                    return Err(CmdError::Path(text.clone(), "Is a directory".into()));
                }
                remove_tree(&c, fh, text).await?;
            }
            c.remove(&dir, name.as_bytes(), attr.ftype == FileType::Directory)
                .await
                .map_err(|e| CmdError::at(text, e))
        }
        .await;
        if let Err(e) = r {
            eprintln!("sfs: rm: {e}");
            failed = true;
        }
    }
    if failed {
        Err(CmdError::Reported)
    } else {
        Ok(())
    }
}

fn remove_tree<'a>(
    c: &'a Client,
    dir: FileHandle,
    label: &'a str,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), CmdError>> + 'a>> {
    Box::pin(async move {
        let entries = c
            .readdir_all(&dir)
            .await
            .map_err(|e| CmdError::at(label, e))?;
        for e in entries {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let child = format!("{}/{}", label, String::from_utf8_lossy(&e.name));
            let (fh, attr) = match (e.fh, e.attr) {
                (Some(f), Some(a)) => (f, a),
                _ => c
                    .lookup(&dir, &e.name)
                    .await
                    .map_err(|err| CmdError::at(&child, err))?,
            };
            let is_dir = attr.ftype == FileType::Directory;
            if is_dir {
                remove_tree(c, fh, &child).await?;
            }
            c.remove(&dir, &e.name, is_dir)
                .await
                .map_err(|err| CmdError::at(&child, err))?;
        }
        Ok(())
    })
}

/// `sfs mkdir`.
pub(crate) async fn mkdir(
    ctx: &mut Ctx,
    targets: &[String],
    parents: bool,
) -> Result<(), CmdError> {
    let mut failed = false;
    for text in targets {
        let r = async {
            let t = Target::parse(text)?;
            // As a local mkdir makes it: 0777 less the umask.
            let attr = SetAttr {
                mode: Some(super::new_mode(0o777)),
                ..set_nothing()
            };
            if parents {
                // Parents as GNU `mkdir -p` makes them: writable and searchable by their owner
                // whatever the umask, so the next level can be made in them.
                let parent = SetAttr {
                    mode: attr.mode.map(|m| m | 0o300),
                    ..attr
                };
                let (c, mut fh) = ctx.client(&t.server).await?;
                for (i, comp) in t.components.iter().enumerate() {
                    let last = i + 1 == t.components.len();
                    let attr = if last { &attr } else { &parent };
                    (fh, _) = super::mkdir_or_existing(&c, &fh, comp, *attr, text).await?;
                }
                return Ok(());
            }
            let (c, dir, name) = ctx.parent(&t).await?;
            c.mkdir(&dir, name.as_bytes(), attr)
                .await
                .map(|_| ())
                .map_err(|e| CmdError::at(text, e))
        }
        .await;
        if let Err(e) = r {
            eprintln!("sfs: mkdir: {e}");
            failed = true;
        }
    }
    if failed {
        Err(CmdError::Reported)
    } else {
        Ok(())
    }
}

/// `sfs mv`.
pub(crate) async fn mv(ctx: &mut Ctx, from: &str, to: &str) -> Result<(), CmdError> {
    let f = Target::parse(from)?;
    let mut t = Target::parse(to)?;
    if f.server.to_string() != t.server.to_string() {
        return Err(CmdError::Usage(format!(
            "{from} and {to} are on different servers (use get and put)"
        )));
    }
    if let Ok((_, _, a)) = ctx.resolve(&t).await
        && a.ftype == FileType::Directory
        && let Some(n) = f.file_name()
    {
        t = t.join(n);
    }
    let (c, fdir, fname) = ctx.parent(&f).await?;
    let (_, tdir, tname) = ctx.parent(&t).await?;
    c.rename(&fdir, fname.as_bytes(), &tdir, tname.as_bytes())
        .await
        .map(|_| ())
        .map_err(|e| CmdError::at(from, e))
}
