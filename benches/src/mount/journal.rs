//! Whether the work directory is on ext4 without a journal, where creates slow down with
//! every recent delete: ext4 then skips, for each new inode, every inode of the group deleted
//! in the last one to five minutes (`recently_deleted` in `find_inode_bit`, which only runs
//! without a journal). After a few `rm -r`s of the tree a create cost sfsd 0.5 ms instead of
//! 0.09 (benches/README.md, "stop 41"), in every column alike but by what the runs before
//! deleted, so figures from one run to the next are not comparable there.

use std::path::Path;

/// The ext4 device (`vda`) whose file system holds `dir`, if it has no journal.
pub(super) fn unjournaled_ext4(dir: &Path) -> Option<String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let device = ext4_device(&mountinfo, dir)?;
    let task = std::fs::read_to_string(format!("/sys/fs/ext4/{device}/journal_task")).ok()?;
    (task.trim() == "<none>").then_some(device)
}

/// The device name of the ext4 file system `mountinfo` mounts deepest above `dir`, if that
/// mount is ext4.
fn ext4_device(mountinfo: &str, dir: &Path) -> Option<String> {
    let mut best: Option<(usize, &str, &str)> = None;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(dash) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(point), Some(fstype), Some(source)) =
            (fields.get(4), fields.get(dash + 1), fields.get(dash + 2))
        else {
            continue;
        };
        let depth = Path::new(point).components().count();
        if dir.starts_with(point) && best.is_none_or(|(d, _, _)| depth >= d) {
            best = Some((depth, fstype, source));
        }
    }
    let (_, fstype, source) = best?;
    let name = Path::new(source).file_name()?.to_str()?;
    (fstype == "ext4").then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
24 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard
30 24 0:25 / /tmp/x rw - tmpfs tmpfs rw
31 24 7:0 / /mnt/bench rw,relatime shared:9 - ext4 /dev/loop0 rw
";

    #[test]
    fn the_deepest_mount_above_the_directory_decides() {
        let dev = |d: &str| ext4_device(MOUNTINFO, Path::new(d));
        assert_eq!(dev("/tmp/.tmpab/export").as_deref(), Some("vda"));
        assert_eq!(dev("/mnt/bench/mb").as_deref(), Some("loop0"));
        assert_eq!(dev("/tmp/x/mb"), None, "tmpfs");
        assert_eq!(
            dev("/mnt/benchmark").as_deref(),
            Some("vda"),
            "not a path prefix"
        );
    }
}
