//! The inode index: from a handle's (device, inode) back to a path below the export root.
//!
//! Each known object records its parent directory and its name there (a dentry, in kernel
//! terms), so renaming a directory updates one entry and every path below it follows; the
//! path is rebuilt by walking up the parents. Bounded: at most `max` entries, paths at most
//! [`MAX_DEPTH`] components (a stale loop of parents ends there instead of spinning).
//!
//! The index is only a hint: every path it yields is opened beneath the export root and the
//! opened object's identity checked against the handle, so a stale entry can make a request
//! fail, never act on another object.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::ObjKey;

/// Deepest path the index rebuilds.
pub const MAX_DEPTH: usize = 2048;

#[derive(Debug)]
struct Entry {
    parent: ObjKey,
    name: Box<[u8]>,
}

/// (device, inode) -> (parent, name), plus the root.
#[derive(Debug)]
pub struct Index {
    root: ObjKey,
    entries: HashMap<ObjKey, Entry>,
    max: usize,
}

impl Index {
    pub fn new(root: ObjKey, max: usize) -> Index {
        Index {
            root,
            entries: HashMap::new(),
            max,
        }
    }

    /// Records that `key` is called `name` in directory `parent`.
    pub fn remember(&mut self, key: ObjKey, parent: ObjKey, name: &[u8]) {
        if key == self.root || key == parent {
            return;
        }
        if self.entries.len() >= self.max && !self.entries.contains_key(&key) {
            return;
        }
        self.entries.insert(
            key,
            Entry {
                parent,
                name: name.into(),
            },
        );
    }

    pub fn forget(&mut self, key: ObjKey) {
        self.entries.remove(&key);
    }

    /// The path of `key` relative to the root (empty for the root), if known.
    pub fn path(&self, key: ObjKey) -> Option<PathBuf> {
        let mut names: Vec<&[u8]> = Vec::new();
        let mut at = key;
        while at != self.root {
            if names.len() >= MAX_DEPTH {
                return None;
            }
            let e = self.entries.get(&at)?;
            names.push(&e.name);
            at = e.parent;
        }
        Some(names.iter().rev().map(|n| OsStr::from_bytes(n)).collect())
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Replaces everything with the result of a fresh walk.
    pub fn replace(&mut self, fresh: Index) {
        self.entries = fresh.entries;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_a_renamed_directory() {
        let mut ix = Index::new((1, 1), 100);
        ix.remember((1, 2), (1, 1), b"a");
        ix.remember((1, 3), (1, 2), b"b");
        ix.remember((1, 4), (1, 3), b"f");
        assert_eq!(ix.path((1, 4)), Some(PathBuf::from("a/b/f")));
        assert_eq!(ix.path((1, 1)), Some(PathBuf::new()));
        // Rename a -> z: one update, the file below follows.
        ix.remember((1, 2), (1, 1), b"z");
        assert_eq!(ix.path((1, 4)), Some(PathBuf::from("z/b/f")));
        ix.forget((1, 3));
        assert_eq!(ix.path((1, 4)), None, "a missing ancestor: unknown");
        assert_eq!(ix.path((9, 9)), None);
    }

    #[test]
    fn bounded_and_loop_safe() {
        let mut ix = Index::new((1, 1), 2);
        ix.remember((1, 2), (1, 3), b"x");
        ix.remember((1, 3), (1, 2), b"y");
        assert_eq!(ix.path((1, 2)), None, "a parent loop ends");
        ix.remember((1, 4), (1, 1), b"z");
        assert_eq!(ix.len(), 2, "full: new entries are not added");
        ix.remember((1, 2), (1, 1), b"x");
        assert_eq!(
            ix.path((1, 2)),
            Some(PathBuf::from("x")),
            "known ones update"
        );
    }
}
