//! `ls` and `stat`.

use protocol::{Attr, FileType};
use serde::Serialize;

use super::{CmdError, Ctx, Target};

/// Attributes as `--json` prints them.
#[derive(Debug, Serialize)]
pub struct AttrJson {
    /// Entry name (or the path given, for `stat`).
    pub name: String,
    /// `file`, `dir`, `symlink`, ...
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Permission bits, octal.
    pub mode: String,
    /// Link count.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Bytes.
    pub size: u64,
    /// Inode number.
    pub fileid: u64,
    /// Seconds since the epoch.
    pub mtime: f64,
    /// Seconds since the epoch.
    pub atime: f64,
    /// Seconds since the epoch.
    pub ctime: f64,
    /// Lease the server granted on these attributes, in milliseconds.
    pub lease_ms: u32,
}

fn kind(t: FileType) -> &'static str {
    match t {
        FileType::Regular => "file",
        FileType::Directory => "dir",
        FileType::Block => "block",
        FileType::Char => "char",
        FileType::Symlink => "symlink",
        FileType::Socket => "socket",
        FileType::Fifo => "fifo",
    }
}

fn secs(t: protocol::Time) -> f64 {
    t.seconds as f64 + f64::from(t.nanos) / 1e9
}

/// The JSON form of `a` named `name`.
pub fn to_json(name: &str, a: &Attr) -> AttrJson {
    AttrJson {
        name: name.to_owned(),
        kind: kind(a.ftype),
        mode: format!("{:04o}", a.mode & 0o7777),
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        size: a.size,
        fileid: a.fileid,
        mtime: secs(a.mtime),
        atime: secs(a.atime),
        ctime: secs(a.ctime),
        lease_ms: a.lease_ms,
    }
}

fn mode_string(a: &Attr) -> String {
    let t = match a.ftype {
        FileType::Directory => 'd',
        FileType::Symlink => 'l',
        FileType::Block => 'b',
        FileType::Char => 'c',
        FileType::Socket => 's',
        FileType::Fifo => 'p',
        FileType::Regular => '-',
    };
    let mut s = String::from(t);
    for shift in [6u32, 3, 0] {
        let bits = (a.mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

fn long_line(name: &str, a: &Attr) -> String {
    format!(
        "{} {:>3} {:>5} {:>5} {:>12} {:>12} {}",
        mode_string(a),
        a.nlink,
        a.uid,
        a.gid,
        a.size,
        a.mtime.seconds,
        name
    )
}

/// `sfs ls`: one directory's entries sorted by name (or the file itself).
pub async fn ls(ctx: &mut Ctx, targets: &[String], long: bool, json: bool) -> Result<(), CmdError> {
    let mut failed = None;
    let mut all = Vec::new();
    for text in targets {
        let t = Target::parse(text)?;
        match ls_one(ctx, &t, long, json, targets.len() > 1).await {
            Ok(mut v) => all.append(&mut v),
            Err(e) => {
                eprintln!("sfs: ls: {e}");
                failed = Some(e);
            }
        }
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&all).map_err(anyhow::Error::from)?
        );
    }
    match failed {
        Some(_) => Err(CmdError::Reported),
        None => Ok(()),
    }
}

async fn ls_one(
    ctx: &mut Ctx,
    t: &Target,
    long: bool,
    json: bool,
    header: bool,
) -> Result<Vec<AttrJson>, CmdError> {
    let (c, fh, attr) = ctx.resolve(t).await?;
    let mut out = Vec::new();
    if attr.ftype != FileType::Directory {
        let name = t.file_name().unwrap_or("/");
        if json {
            out.push(to_json(name, &attr));
        } else if long {
            println!("{}", long_line(name, &attr));
        } else {
            println!("{name}");
        }
        return Ok(out);
    }
    let mut entries = c
        .readdir_all(&fh)
        .await
        .map_err(|e| CmdError::at(&t.text, e))?;
    entries.retain(|e| e.name != b"." && e.name != b"..");
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    if header && !json {
        println!("{}:", t.text);
    }
    for e in entries {
        let name = String::from_utf8_lossy(&e.name).into_owned();
        let attr = match (&e.attr, &e.fh) {
            (Some(a), _) => Some(*a),
            (None, Some(fh)) if long || json => c.getattr(fh).await.ok(),
            _ => None,
        };
        if json {
            if let Some(a) = attr {
                out.push(to_json(&name, &a));
            }
        } else if long {
            match attr {
                Some(a) => println!("{}", long_line(&name, &a)),
                None => println!("?????????? {name}"),
            }
        } else {
            println!("{name}");
        }
    }
    Ok(out)
}

/// `sfs stat`.
pub async fn stat(ctx: &mut Ctx, targets: &[String], json: bool) -> Result<(), CmdError> {
    let mut failed = None;
    let mut all = Vec::new();
    for text in targets {
        let t = Target::parse(text)?;
        match ctx.resolve(&t).await {
            Ok((_, _, a)) => {
                if json {
                    all.push(to_json(text, &a));
                } else {
                    println!("  File: {text}");
                    println!(
                        "  Size: {:<12} Type: {}  Inode: {}  Links: {}",
                        a.size,
                        kind(a.ftype),
                        a.fileid,
                        a.nlink
                    );
                    println!(
                        "Access: ({:04o}/{})  Uid: {}  Gid: {}",
                        a.mode & 0o7777,
                        mode_string(&a),
                        a.uid,
                        a.gid
                    );
                    println!("Modify: {:.9}", secs(a.mtime));
                    println!("Change: {:.9}", secs(a.ctime));
                    println!(" Lease: {} ms", a.lease_ms);
                }
            }
            Err(e) => {
                eprintln!("sfs: stat: {e}");
                failed = Some(e);
            }
        }
    }
    if json {
        let v = if all.len() == 1 && targets.len() == 1 {
            serde_json::to_string_pretty(&all[0])
        } else {
            serde_json::to_string_pretty(&all)
        };
        println!("{}", v.map_err(anyhow::Error::from)?);
    }
    match failed {
        Some(_) => Err(CmdError::Reported),
        None => Ok(()),
    }
}
