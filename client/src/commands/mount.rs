//! `nfs`, `mount`, `umount`: the loopback NFSv3 server and the kernel mount around it.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use nfsserve::tcp::{NFSTcp, NFSTcpListener};

use super::{CmdError, Ctx, Target};
use crate::nfs::SfsNfs;

/// Starts the loopback NFS server for `name`; returns it bound (port known) but not serving.
pub async fn start(
    ctx: &mut Ctx,
    name: &str,
    listen: SocketAddr,
) -> Result<NFSTcpListener<SfsNfs>, CmdError> {
    if !listen.ip().is_loopback() {
        return Err(CmdError::Usage(format!(
            "--listen {listen}: the NFS server carries no authentication of its own and must \
             listen on loopback (127.0.0.1)"
        )));
    }
    let t = Target::parse(name)?;
    let (c, root, attr) = ctx.resolve(&t).await?;
    if attr.ftype != protocol::FileType::Directory {
        return Err(CmdError::Path(t.text, "Not a directory".into()));
    }
    let fs = SfsNfs::new(c, root);
    NFSTcpListener::bind(&listen.to_string(), fs)
        .await
        .map_err(|e| CmdError::Other(anyhow::anyhow!("cannot listen on {listen}: {e}")))
}

/// The mount(8) command for a loopback server on `port`.
pub fn mount_command(port: u16, dir: &Path) -> String {
    format!(
        "mount -t nfs -o vers=3,tcp,nolock,port={port},mountport={port},actimeo=0 127.0.0.1:/ {}",
        dir.display()
    )
}

/// `sfs nfs`: serve until interrupted.
pub async fn nfs(ctx: &mut Ctx, name: &str, listen: SocketAddr) -> Result<(), CmdError> {
    let l = start(ctx, name, listen).await?;
    let port = l.get_listen_port();
    println!("sfs: NFSv3 for {name} on 127.0.0.1:{port}");
    println!("sfs: mount with: {}", mount_command(port, Path::new("DIR")));
    use std::io::Write;
    let _ = std::io::stdout().flush();
    tokio::select! {
        r = l.handle_forever() => r.map_err(|e| CmdError::Other(e.into())),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

/// Whether this kernel has an NFS client (`/proc/filesystems` lists `nfs`).
fn kernel_has_nfs() -> bool {
    std::fs::read_to_string("/proc/filesystems")
        .map(|s| {
            s.lines()
                .any(|l| l.split_whitespace().last() == Some("nfs"))
        })
        .unwrap_or(false)
}

/// `sfs mount`: serve, mount, and keep serving until the file system is unmounted.
pub async fn mount(
    ctx: &mut Ctx,
    name: &str,
    dir: &Path,
    listen: SocketAddr,
) -> Result<(), CmdError> {
    if !dir.is_dir() {
        return Err(CmdError::Path(
            dir.display().to_string(),
            "No such file or directory (the mount point must be a directory)".into(),
        ));
    }
    let l = start(ctx, name, listen).await?;
    let port = l.get_listen_port();
    let cmd = mount_command(port, dir);
    let serve = tokio::spawn(async move { l.handle_forever().await });
    let has_nfs = kernel_has_nfs();
    let status = if has_nfs {
        let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
        Command::new("mount").args(&args).status().ok()
    } else {
        None
    };
    match status {
        Some(s) if s.success() => {
            println!("sfs: {name} mounted on {}", dir.display());
            println!(
                "sfs: serving until `sfs umount {}` or interrupt",
                dir.display()
            );
            tokio::select! {
                r = serve => match r {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(CmdError::Other(e.into())),
                    Err(e) => Err(CmdError::Other(e.into())),
                },
                _ = tokio::signal::ctrl_c() => {
                    let _ = Command::new("umount").arg(dir).status();
                    Ok(())
                }
            }
        }
        _ => {
            serve.abort();
            let why = if has_nfs {
                "mount -t nfs failed"
            } else {
                "this kernel has no NFS client (no `nfs` in /proc/filesystems), so it cannot mount"
            };
            eprintln!("sfs: mount: {why}.");
            eprintln!("sfs: on a machine with an NFS client, run `sfs nfs {name}` and then:");
            eprintln!(
                "  {}",
                mount_command(port, dir).replace(&port.to_string(), "PORT")
            );
            eprintln!("sfs: where PORT is the port `sfs nfs` prints, e.g.:");
            eprintln!("  {cmd}");
            Err(CmdError::Reported)
        }
    }
}

/// `sfs umount`.
pub fn umount(dir: &Path) -> Result<(), CmdError> {
    let s = Command::new("umount")
        .arg(dir)
        .status()
        .map_err(|e| CmdError::Other(anyhow::anyhow!("cannot run umount: {e}")))?;
    if s.success() {
        Ok(())
    } else {
        Err(CmdError::Path(
            dir.display().to_string(),
            "umount failed".into(),
        ))
    }
}
