//! What one directory listing holds: its entries, and when it was asked for and answered.
//! Apart from the code that takes listings ([`super::listings`]), keeps them
//! ([`super::kept_listings`]) and reads ahead along them ([`super::listing_ahead`]), which
//! all use it.

use std::time::Instant;

use fuser::INodeNo;
use protocol::{Attr, FileHandle};

use super::ROOT;
use crate::cache::Stamp;

/// One directory listing taken at `opendir`, served in pieces by `readdir`/`readdirplus`.
#[derive(Clone)]
pub(super) struct Listing {
    pub(super) entries: Vec<Listed>,
    /// Taken before the listing was asked for: its attributes are from no earlier.
    pub(super) since: Stamp,
    /// As of when its names are the directory's: [`Listing::since`], or the reply to our own
    /// last change edited into it ([`super::kept_listings`]). A change of the directory after
    /// this makes its entries no longer ones the kernel may keep.
    pub(super) names_since: Stamp,
    /// When its answer arrived: the entries' leases run from here (a listing may be kept
    /// and handed out again, [`kept_listings`]).
    ///
    /// [`kept_listings`]: super::kept_listings
    pub(super) received: Instant,
}

#[derive(Clone)]
pub(super) struct Listed {
    /// `Unknown` for an entry listed by name alone.
    pub(super) kind: fuser::FileType,
    pub(super) name: Vec<u8>,
    /// Handle and attributes, for `readdirplus`. None for `.` and `..`, and for an entry the
    /// server listed without them: in a directory its caller may read but not search, where
    /// every lookup is refused, such a name is all there is to list (as on a local disk).
    pub(super) node: Option<(FileHandle, Attr)>,
    /// The server's file id for an entry listed by name alone (0 for the others, whose
    /// attributes or the directory's own say it).
    pub(super) fileid: u64,
}

impl Listed {
    /// `.` or `..`.
    pub(super) fn is_dots(&self) -> bool {
        self.name == b"." || self.name == b".."
    }

    /// The node to list `.` or `..` (the entries without a handle) of directory node `dir`
    /// as: `.` is the node the directory was opened as (a listing is kept, or read ahead, by
    /// handle, not by node); the kernel makes nothing of `..`'s.
    pub(super) fn dots_node(&self, dir: INodeNo) -> u64 {
        if self.name == b"." { dir.0 } else { ROOT }
    }
}
