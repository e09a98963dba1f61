//! `ls` and `stat`.

use protocol::{Attr, FileType};
use serde::Serialize;

use super::{CmdError, Ctx, Target, shown};

/// Attributes as `--json` prints them.
#[derive(Debug, Serialize)]
pub(crate) struct AttrJson {
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
pub(crate) fn to_json(name: &str, a: &Attr) -> AttrJson {
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

/// Half a Gregorian year in seconds: GNU `ls`'s "six months".
const SIX_MONTHS: i64 = 31_556_952 / 2;

unsafe extern "C" {
    /// POSIX `tzset(3)` (the `libc` crate binds it only for Windows).
    fn tzset();
}

/// Seconds since the epoch, now.
fn now() -> i64 {
    match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

/// `t` (seconds since the epoch) in the local time zone (`TZ`, else `/etc/localtime`).
fn local_tm(t: i64) -> Option<libc::tm> {
    static TZ: std::sync::Once = std::sync::Once::new();
    // SAFETY: tzset only reads the environment and the zone files; called once, before any
    // localtime_r of this process's own.
    TZ.call_once(|| unsafe { tzset() });
    let t = libc::time_t::try_from(t).ok()?;
    // SAFETY: `tm` is plain data (integers and a pointer localtime_r sets), valid zeroed.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call; localtime_r is thread-safe.
    let r = unsafe { libc::localtime_r(&t, &mut tm) };
    (!r.is_null()).then_some(tm)
}

/// A modification time as GNU `ls -l` prints it (C locale), in the local time zone: month,
/// day and `HH:MM` for times within the last six months, else month, day and year (also for
/// times in the future), both 12 characters wide.
fn ls_time(t: i64, now: i64) -> String {
    ls_time_with(t, now, local_tm)
}

/// [`ls_time`] with `tm_of` breaking a time down (`localtime_r`, or `gmtime_r` in tests).
fn ls_time_with(t: i64, now: i64, tm_of: impl Fn(i64) -> Option<libc::tm>) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let Some(tm) = tm_of(t) else {
        // Beyond what the C library can break down: the number itself.
        return format!("{t:>12}");
    };
    let month = usize::try_from(tm.tm_mon)
        .ok()
        .and_then(|m| MONTHS.get(m))
        .unwrap_or(&"???");
    let recent = now.saturating_sub(SIX_MONTHS) < t && t <= now;
    if recent {
        format!(
            "{month} {:>2} {:02}:{:02}",
            tm.tm_mday, tm.tm_hour, tm.tm_min
        )
    } else {
        let year = i64::from(tm.tm_year) + 1900;
        format!("{month} {:>2} {year:>5}", tm.tm_mday)
    }
}

fn long_line(name: &str, a: &Attr, now: i64) -> String {
    format!(
        "{} {:>3} {:>5} {:>5} {:>12} {} {}",
        mode_string(a),
        a.nlink,
        a.uid,
        a.gid,
        a.size,
        ls_time(a.mtime.seconds, now),
        name
    )
}

/// `sfs ls`: one directory's entries sorted by name (or the file itself).
pub(crate) async fn ls(
    ctx: &mut Ctx,
    targets: &[String],
    long: bool,
    json: bool,
) -> Result<(), CmdError> {
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
        } else {
            let shown = shown::on_stdout(name.as_bytes());
            if long {
                println!("{}", long_line(&shown, &attr, now()));
            } else {
                println!("{shown}");
            }
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
        println!("{}:", shown::on_stdout(t.text.as_bytes()));
    }
    let now = now();
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
        } else {
            let shown = shown::on_stdout(&e.name);
            match (long, attr) {
                (true, Some(a)) => println!("{}", long_line(&shown, &a, now)),
                (true, None) => println!("?????????? {shown}"),
                (false, _) => println!("{shown}"),
            }
        }
    }
    Ok(out)
}

/// `sfs stat`.
pub(crate) async fn stat(ctx: &mut Ctx, targets: &[String], json: bool) -> Result<(), CmdError> {
    let mut failed = None;
    let mut all = Vec::new();
    for text in targets {
        let t = Target::parse(text)?;
        match ctx.resolve(&t).await {
            Ok((_, _, a)) => {
                if json {
                    all.push(to_json(text, &a));
                } else {
                    println!("  File: {}", shown::on_stdout(text.as_bytes()));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(t: i64) -> Option<libc::tm> {
        let t = libc::time_t::try_from(t).ok()?;
        // SAFETY: libc::tm is plain integers (and, on glibc, a pointer that may be null):
        // all zeros is a valid value.
        let mut tm: libc::tm = unsafe { std::mem::zeroed() };
        // SAFETY: as in local_tm, with gmtime_r: both pointers are to live locals.
        let r = unsafe { libc::gmtime_r(&t, &mut tm) };
        (!r.is_null()).then_some(tm)
    }

    /// 2023-11-14 22:13:20 UTC.
    const NOW: i64 = 1_700_000_000;

    #[test]
    fn times_print_as_gnu_ls_prints_them() {
        let at = |t: i64| ls_time_with(t, NOW, utc);
        assert_eq!(at(NOW - 3600), "Nov 14 21:13");
        assert_eq!(at(NOW), "Nov 14 22:13", "now is recent");
        assert_eq!(at(1_699_148_000), "Nov  5 01:33", "the day padded like %e");
        assert_eq!(
            at(1_600_000_000),
            "Sep 13  2020",
            "older than six months: the year"
        );
        assert_eq!(
            at(NOW + 30 * 86_400),
            "Dec 14  2023",
            "the future: the year"
        );
        assert_eq!(at(NOW + 1), "Nov 14  2023");
        assert_eq!(
            at(NOW - SIX_MONTHS + 1),
            "May 16 07:18",
            "just within six months"
        );
        assert_eq!(at(NOW - SIX_MONTHS), "May 16  2023");
        assert_eq!(at(-1), "Dec 31  1969");
        for t in [NOW, 1_600_000_000, -1, 0] {
            assert_eq!(at(t).len(), 12, "{t}: one width, so columns line up");
        }
    }

    /// `ls -l` uses the local time zone: local_tm is UTC moved by the zone's own offset.
    #[test]
    fn local_times_are_utc_moved_by_the_zone_offset() {
        for t in [0, 1_600_000_000, NOW] {
            let local = local_tm(t).unwrap();
            let shifted = utc(t + local.tm_gmtoff).unwrap();
            let fields = |tm: &libc::tm| (tm.tm_year, tm.tm_mon, tm.tm_mday, tm.tm_hour, tm.tm_min);
            assert_eq!(fields(&local), fields(&shifted), "{t}");
        }
    }

    #[test]
    fn long_lines_carry_the_time_and_json_the_exact_numbers() {
        let mut a = Attr::test_file(5, 0);
        a.mtime = protocol::Time {
            seconds: 1_600_000_000,
            nanos: 123_456_789,
        };
        a.atime = protocol::Time {
            seconds: NOW,
            nanos: 1,
        };
        let line = long_line("f", &a, NOW);
        let want_time = ls_time(1_600_000_000, NOW);
        assert!(line.ends_with(&format!(" {want_time} f")), "{line}");
        assert!(!line.contains("1600000000"), "{line}");
        let j = to_json("f", &a);
        assert_eq!(j.mtime, 1_600_000_000.0 + 123_456_789.0 / 1e9);
        assert_eq!(j.atime, NOW as f64 + 1e-9);
        let v: serde_json::Value = serde_json::to_value(&j).unwrap();
        assert_eq!(
            v["mtime"].as_f64(),
            Some(j.mtime),
            "printed as the number itself"
        );
        assert_eq!(v["ctime"].as_f64(), Some(1.0));
    }
}
