//! The groups a local process acts with: its file-system gid (from the kernel's request) and
//! its supplementary groups (from `/proc/<pid>/status`), for NARROW (docs/PROTOCOL.md,
//! "Narrowed authnos") so the server applies what the process has locally.

use std::io::Read;
use std::sync::Arc;

use protocol::request::MAX_NARROW_GROUPS;

/// A process's primary group and sorted, distinct supplementary groups (at most
/// [`MAX_NARROW_GROUPS`]), shared cheaply between the requests of one caller.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Groups {
    /// The file-system gid: the group of what the process creates.
    pub gid: u32,
    /// Supplementary groups, sorted and distinct.
    pub groups: Arc<[u32]>,
}

/// Bytes of `/proc/<pid>/status` read: the `Groups:` line comes before the first kilobyte or
/// two, and a list too long to fit is more than [`MAX_NARROW_GROUPS`] anyway.
const STATUS_READ_MAX: u64 = 8 * 1024;

impl Groups {
    /// `gid` with `groups` sorted and deduplicated; None when more than [`MAX_NARROW_GROUPS`]
    /// remain (the caller then keeps the login's groups: narrowing to a truncated list would
    /// take away groups the process has).
    pub(crate) fn new(gid: u32, mut groups: Vec<u32>) -> Option<Groups> {
        groups.sort_unstable();
        groups.dedup();
        (groups.len() <= MAX_NARROW_GROUPS).then(|| Groups {
            gid,
            groups: groups.into(),
        })
    }

    /// The groups of process `pid` acting with file-system gid `fsgid`; None when its status
    /// cannot be read (it has exited, or lives in a pid namespace this one cannot see: the
    /// kernel then reports pid 0) or lists too many groups.
    pub(crate) fn of_process(pid: u32, fsgid: u32) -> Option<Groups> {
        if pid == 0 {
            return None;
        }
        let f = std::fs::File::open(format!("/proc/{pid}/status")).ok()?;
        let mut text = String::new();
        f.take(STATUS_READ_MAX).read_to_string(&mut text).ok()?;
        Groups::new(fsgid, parse_status_groups(&text)?)
    }
}

/// The supplementary groups of a `/proc/<pid>/status` text (its complete `Groups:` line);
/// None if there is none, it is cut off, or holds more than [`MAX_NARROW_GROUPS`] entries.
pub(crate) fn parse_status_groups(status: &str) -> Option<Vec<u32>> {
    let start = status.find("\nGroups:")? + "\nGroups:".len();
    let rest = &status[start..];
    let line = &rest[..rest.find('\n')?];
    let mut out = Vec::new();
    for g in line.split_ascii_whitespace() {
        if out.len() == MAX_NARROW_GROUPS {
            return None;
        }
        out.push(g.parse().ok()?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_groups_line() {
        let s = "Name:\tx\nUid:\t1\t1\t1\t1\nGroups:\t4 24 27 \nNgid:\t0\n";
        assert_eq!(parse_status_groups(s), Some(vec![4, 24, 27]));
        assert_eq!(
            parse_status_groups("Name:\tx\nGroups:\t\nX:\n"),
            Some(vec![])
        );
        // Cut off, absent, not numbers, too many.
        assert_eq!(parse_status_groups("Name:\tx\nGroups:\t4 2"), None);
        assert_eq!(parse_status_groups("Name:\tx\n"), None);
        assert_eq!(parse_status_groups("N:\n\nGroups:\t4 x\n"), None);
        let many: String = (0..=MAX_NARROW_GROUPS).map(|g| format!("{g} ")).collect();
        assert_eq!(parse_status_groups(&format!("N:\nGroups:\t{many}\n")), None);
    }

    #[test]
    fn own_process_groups() {
        let me = std::process::id();
        let g = Groups::of_process(me, 4242).expect("own status readable");
        assert_eq!(g.gid, 4242);
        assert!(g.groups.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(Groups::of_process(0, 1), None);
        assert_eq!(Groups::new(1, vec![3, 2, 3]).unwrap().groups[..], [2, 3]);
    }
}
