//! The workloads, each run inside a mount by ordinary file-system calls (and `tar`), timed
//! from the first call to the last byte or name being on the server: writes end with
//! `fsync`, untar with `syncfs`, so a client that only buffers gains nothing.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// Bytes per `write`/`read` call of the sequential workloads.
pub(super) const IO_SIZE: usize = 1 << 20;

/// A measured workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum Workload {
    /// Write a large file sequentially, then fsync.
    SeqWrite,
    /// Read that file sequentially on a fresh mount (cold client cache).
    SeqRead,
    /// Extract a tarball of a source tree, then syncfs.
    Untar,
    /// `cp -r` of a local tree into the mount, then syncfs.
    CpR,
    /// `ls -lR` of everything the workloads made, on a fresh mount.
    LsLrCold,
    /// `ls -lR` again on the same mount (the client's caches warm).
    LsLrWarm,
    /// `find` (names only) on a fresh mount.
    Find,
    /// Walk the tree on a fresh mount, `lstat` every entry.
    FindStat,
    /// `rm -r` of everything the workloads made, on a fresh mount.
    RmR,
}

impl Workload {
    pub(super) const ALL: [Workload; 9] = [
        Workload::SeqWrite,
        Workload::SeqRead,
        Workload::Untar,
        Workload::CpR,
        Workload::LsLrCold,
        Workload::LsLrWarm,
        Workload::Find,
        Workload::FindStat,
        Workload::RmR,
    ];

    pub(super) fn name(self) -> &'static str {
        match self {
            Workload::SeqWrite => "seq-write",
            Workload::SeqRead => "seq-read",
            Workload::Untar => "untar",
            Workload::CpR => "cp-r",
            Workload::LsLrCold => "ls-lR-cold",
            Workload::LsLrWarm => "ls-lR-warm",
            Workload::Find => "find",
            Workload::FindStat => "find+stat",
            Workload::RmR => "rm-r",
        }
    }

    /// Unit of [`Outcome::rate`].
    pub(super) fn unit(self) -> &'static str {
        match self {
            Workload::SeqWrite | Workload::SeqRead => "MB/s",
            _ => "ops/s",
        }
    }
}

/// What one run of a workload did.
#[derive(Clone, Copy, Debug)]
pub(super) struct Outcome {
    pub elapsed: Duration,
    /// Bytes (sequential workloads) or entries (tree workloads).
    pub amount: u64,
}

impl Outcome {
    /// MB/s (10^6 bytes) or entries per second.
    pub(super) fn rate(self, w: Workload) -> f64 {
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        match w {
            Workload::SeqWrite | Workload::SeqRead => self.amount as f64 / 1e6 / secs,
            _ => self.amount as f64 / secs,
        }
    }
}

/// The content of byte `i` of the large file (not all zeros, so nothing can elide it).
fn pattern(buf: &mut [u8], offset: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        let x = offset + i as u64;
        *b = (x ^ (x >> 11) ^ (x >> 23)) as u8;
    }
}

/// Writes `size` bytes to `path` in [`IO_SIZE`] calls, then fsync.
pub(super) fn seq_write(path: &Path, size: u64) -> anyhow::Result<Outcome> {
    let mut buf = vec![0u8; IO_SIZE];
    let start = Instant::now();
    let mut f = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut done = 0u64;
    while done < size {
        let n = (size - done).min(IO_SIZE as u64) as usize;
        pattern(&mut buf[..n], done);
        f.write_all(&buf[..n])?;
        done += n as u64;
    }
    f.sync_all()?;
    drop(f);
    Ok(Outcome {
        elapsed: start.elapsed(),
        amount: size,
    })
}

/// Reads `path` to the end in [`IO_SIZE`] calls; checks its size and a sample of its bytes
/// (the first call's, against [`pattern`]), so a short or wrong read is an error.
pub(super) fn seq_read(path: &Path, size: u64) -> anyhow::Result<Outcome> {
    let mut buf = vec![0u8; IO_SIZE];
    let start = Instant::now();
    let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut total = 0u64;
    let mut first = true;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        if first {
            let mut want = vec![0u8; n];
            pattern(&mut want, 0);
            if buf[..n] != want[..] {
                bail!("{} does not hold what seq-write wrote", path.display());
            }
            first = false;
        }
        total += n as u64;
    }
    let elapsed = start.elapsed();
    if total != size {
        bail!("read {total} bytes of {}, expected {size}", path.display());
    }
    Ok(Outcome {
        elapsed,
        amount: total,
    })
}

/// `tar -xf TARBALL` into `dest` (`copies` times, into `dest/0`, `dest/1`...), then
/// `sync -f`; the amount is `entries` per copy.
pub(super) fn untar(
    tarball: &Path,
    dest: &Path,
    copies: usize,
    entries: u64,
) -> anyhow::Result<Outcome> {
    let start = Instant::now();
    for i in 0..copies {
        let d = dest.join(i.to_string());
        std::fs::create_dir_all(&d)?;
        let out = Command::new("tar")
            .arg("-xf")
            .arg(tarball)
            .arg("-C")
            .arg(&d)
            .stdin(Stdio::null())
            .output()
            .context("running tar")?;
        if !out.status.success() {
            bail!(
                "tar -xf into {} failed: {}",
                d.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let status = Command::new("sync").arg("-f").arg(dest).status()?;
    if !status.success() {
        bail!("sync -f {} failed", dest.display());
    }
    Ok(Outcome {
        elapsed: start.elapsed(),
        amount: entries * copies as u64,
    })
}

/// Walks `root` depth-first (never following symlinks), `lstat`-ing every entry; the amount
/// is the number of entries.
pub(super) fn find_stat(root: &Path) -> anyhow::Result<Outcome> {
    let start = Instant::now();
    let mut stack = vec![root.to_path_buf()];
    let mut n = 0u64;
    while let Some(dir) = stack.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))?
        {
            let path = entry?.path();
            let md = std::fs::symlink_metadata(&path)?;
            n += 1;
            if md.is_dir() {
                stack.push(path);
            }
        }
    }
    Ok(Outcome {
        elapsed: start.elapsed(),
        amount: n,
    })
}

/// Runs `program args...` with its output thrown away (or, with `count`, its output lines
/// counted), failing on a non-zero exit status; the elapsed time is the whole run.
fn run_tool(
    program: &str,
    args: &[&std::ffi::OsStr],
    count: bool,
) -> anyhow::Result<(Duration, u64)> {
    let start = Instant::now();
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(if count { Stdio::piped() } else { Stdio::null() })
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("running {program}"))?;
    let elapsed = start.elapsed();
    if !out.status.success() {
        bail!("{program} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let lines = out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    Ok((elapsed, lines as u64))
}

/// `cp -r SRC DEST` (DEST must not exist: it becomes the copy), then `sync -f`; the amount
/// is `entries`, what `SRC` holds below itself.
pub(super) fn cp_r(src: &Path, dest: &Path, entries: u64) -> anyhow::Result<Outcome> {
    let start = Instant::now();
    run_tool(
        "cp",
        &["-r".as_ref(), src.as_os_str(), dest.as_os_str()],
        false,
    )?;
    run_tool("sync", &["-f".as_ref(), dest.as_os_str()], false)?;
    Ok(Outcome {
        elapsed: start.elapsed(),
        amount: entries,
    })
}

/// `ls -lR` of each of `roots` (output thrown away); the amount is `entries`, which the
/// caller counted (`ls` prints headers and totals besides the entries).
pub(super) fn ls_lr(roots: &[&Path], entries: u64) -> anyhow::Result<Outcome> {
    let mut args: Vec<&std::ffi::OsStr> = vec!["-lR".as_ref()];
    args.extend(roots.iter().map(|r| r.as_os_str()));
    let (elapsed, _) = run_tool("ls", &args, false)?;
    Ok(Outcome {
        elapsed,
        amount: entries,
    })
}

/// `find` of each of `roots`, names only (no `stat`: the kernel's `getdents` answers it);
/// the amount is the number of names printed below the roots.
pub(super) fn find_names(roots: &[&Path]) -> anyhow::Result<Outcome> {
    let args: Vec<&std::ffi::OsStr> = roots.iter().map(|r| r.as_os_str()).collect();
    let (elapsed, lines) = run_tool("find", &args, true)?;
    Ok(Outcome {
        elapsed,
        amount: lines.saturating_sub(roots.len() as u64),
    })
}

/// `rm -r` of each of `roots`; the amount is `entries`, counted by the caller.
pub(super) fn rm_r(roots: &[&Path], entries: u64) -> anyhow::Result<Outcome> {
    let mut args: Vec<&std::ffi::OsStr> = vec!["-r".as_ref()];
    args.extend(roots.iter().map(|r| r.as_os_str()));
    let (elapsed, _) = run_tool("rm", &args, false)?;
    for r in roots {
        if r.symlink_metadata().is_ok() {
            bail!("rm -r left {}", r.display());
        }
    }
    Ok(Outcome {
        elapsed,
        amount: entries,
    })
}

/// Entries below each of `roots` (not the roots), counted by a walk that follows no symlink.
pub(super) fn count_entries(roots: &[&Path]) -> anyhow::Result<u64> {
    let mut n = 0;
    for r in roots {
        n += find_stat(r)?.amount;
    }
    Ok(n)
}

/// `tar -xf TARBALL -C DEST` (DEST made first): the local source of `cp -r`.
pub(super) fn extract(tarball: &Path, dest: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dest)?;
    run_tool(
        "tar",
        &[
            "-xf".as_ref(),
            tarball.as_os_str(),
            "-C".as_ref(),
            dest.as_os_str(),
        ],
        false,
    )?;
    Ok(())
}

/// Number of entries (files, directories, links) in a tarball, as `tar -t` lists them.
pub(super) fn tar_entries(tarball: &Path) -> anyhow::Result<u64> {
    let out = Command::new("tar")
        .arg("-tf")
        .arg(tarball)
        .output()
        .context("running tar -t")?;
    if !out.status.success() {
        bail!("tar -tf {} failed", tarball.display());
    }
    // `./` itself is listed but is the destination, which exists already.
    Ok(out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty() && *l != b"./")
        .count() as u64)
}

/// A tarball of the source tree at `src` (without build output or version-control data).
pub(super) fn make_tarball(src: &Path, tarball: &Path) -> anyhow::Result<()> {
    let out = Command::new("tar")
        .arg("-cf")
        .arg(tarball)
        .args(["--exclude=./target", "--exclude=.git", "--exclude=*/target"])
        .arg("-C")
        .arg(src)
        .arg(".")
        .output()
        .context("running tar -c")?;
    if !out.status.success() {
        bail!(
            "tar -cf of {} failed: {}",
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workloads on a local directory: what they report must be what they did.
    #[test]
    fn workloads_measure_what_they_do() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("big");
        let size = 3 * IO_SIZE as u64 + 17;
        let w = seq_write(&f, size).unwrap();
        assert_eq!(w.amount, size);
        assert_eq!(std::fs::metadata(&f).unwrap().len(), size);
        assert_eq!(seq_read(&f, size).unwrap().amount, size);
        // A file of the wrong size or content is an error, not a rate.
        assert!(seq_read(&f, size + 1).is_err());
        std::fs::write(&f, vec![0u8; size as usize]).unwrap();
        assert!(seq_read(&f, size).is_err());

        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("a/b")).unwrap();
        std::fs::write(src.join("a/b/c.rs"), b"fn main() {}").unwrap();
        std::fs::write(src.join("top"), b"x").unwrap();
        std::fs::create_dir_all(src.join("target/debug")).unwrap();
        std::fs::write(src.join("target/debug/big"), b"build output").unwrap();
        let tarball = dir.path().join("t.tar");
        make_tarball(&src, &tarball).unwrap();
        // a, a/b, a/b/c.rs, top: build output excluded.
        assert_eq!(tar_entries(&tarball).unwrap(), 4);
        let dest = dir.path().join("dest");
        let u = untar(&tarball, &dest, 2, 4).unwrap();
        assert_eq!(u.amount, 8);
        assert!(dest.join("1/a/b/c.rs").is_file());
        // 2 copy directories + 2 x 4 entries.
        assert_eq!(find_stat(&dest).unwrap().amount, 10);
        let local = dir.path().join("local");
        extract(&tarball, &local).unwrap();
        let copy = dir.path().join("copy");
        assert_eq!(cp_r(&local, &copy, 4).unwrap().amount, 4);
        assert!(copy.join("a/b/c.rs").is_file());
        let roots = [dest.as_path(), copy.as_path()];
        assert_eq!(count_entries(&roots).unwrap(), 14);
        assert_eq!(find_names(&roots).unwrap().amount, 14);
        assert_eq!(ls_lr(&roots, 14).unwrap().amount, 14);
        assert!(ls_lr(&[dir.path().join("missing").as_path()], 1).is_err());
        assert_eq!(rm_r(&roots, 14).unwrap().amount, 14);
        assert!(!dest.exists() && !copy.exists());
        let o = Outcome {
            elapsed: Duration::from_secs(2),
            amount: 10_000_000,
        };
        assert_eq!(o.rate(Workload::SeqRead), 5.0);
        assert_eq!(o.rate(Workload::Untar), 5_000_000.0);
    }
}
