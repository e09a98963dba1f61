//! What one directory listing holds: its entries, and when it was asked for and answered.
//! Apart from the code that takes listings ([`super::listings`]), keeps them
//! ([`super::kept_listings`]) and reads ahead along them ([`super::listing_ahead`]), which
//! all use it.

use std::time::Instant;

use fuser::INodeNo;
use protocol::{Attr, FileHandle};

use crate::cache::Stamp;

/// One directory listing taken at `opendir`, served in pieces by `readdir`/`readdirplus`.
pub(super) struct Listing {
    pub(super) entries: Vec<Listed>,
    /// Taken before the listing was asked for: its attributes are from no earlier.
    pub(super) since: Stamp,
    /// When its answer arrived: the entries' leases run from here (a listing may be kept
    /// and handed out again, [`kept_listings`]).
    ///
    /// [`kept_listings`]: super::kept_listings
    pub(super) received: Instant,
}

pub(super) struct Listed {
    /// Inode number for plain `readdir` (ours when known, else the server's file id).
    pub(super) ino: u64,
    pub(super) kind: fuser::FileType,
    pub(super) name: Vec<u8>,
    /// Handle and attributes, for `readdirplus` (none for `.` and `..`).
    pub(super) node: Option<(FileHandle, Attr)>,
}

impl Listed {
    /// The inode number to list for this entry of directory node `dir`: `.` is the node the
    /// directory was opened as (a listing is kept, or read ahead, by handle, not by node).
    pub(super) fn ino_in(&self, dir: INodeNo) -> u64 {
        if self.node.is_none() && self.name == b"." {
            dir.0
        } else {
            self.ino
        }
    }
}
