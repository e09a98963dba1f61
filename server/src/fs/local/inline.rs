//! The metadata operations a worker may run itself instead of handing them to a storage
//! thread.
//!
//! A request handed to a storage thread costs two thread wake-ups on top of the operation (the
//! storage thread, then a worker again for color 0's bookkeeping): on the machines measured
//! that was most of a `chmod`'s round trip (sfsd's context switches per SETATTR 7 to 3.4, its
//! CPU 136-168 to 91-100 us, the round trip through a mount 320-385 to 203-247 us). The
//! operations below touch one object or one directory entry of a local file system, which the
//! kernel answers from its dentry and inode caches in microseconds; they run on the worker, in
//! the connection's color, with the request's credentials switched for their duration exactly
//! as on a storage thread.
//!
//! What may take long stays on the storage threads: data (READ from disk, WRITE, COMMIT's
//! `fsync`), truncation (SETATTR of the size frees blocks), RENAME (it may replace a large
//! file), listings and extended attributes. Two things an inline operation finds out only
//! once it runs, and then refuses before changing anything ([`refused`]), so that it runs
//! again on a storage thread: a handle the inode index does not know (resolving it walks the
//! export), and a REMOVE of the last name of a file over [`FREED_INLINE_MAX`] (the kernel
//! frees its blocks in the `unlink`).

use std::cell::Cell;

use protocol::RequestOp;

/// The largest file whose last name a worker removes itself: freeing its blocks is quick.
pub(super) const FREED_INLINE_MAX: u64 = 1 << 20;

thread_local! {
    /// Set while an operation runs inline: it must not start long work.
    static INLINE: Cell<bool> = const { Cell::new(false) };
    /// Set when long work was refused because of [`INLINE`].
    static REFUSED: Cell<bool> = const { Cell::new(false) };
}

/// Whether `op` is one a worker may run itself (see the module's doc).
pub(super) fn runs_inline(op: &RequestOp) -> bool {
    match op {
        RequestOp::GetAttr { .. }
        | RequestOp::Access { .. }
        | RequestOp::Lookup { .. }
        | RequestOp::ReadLink { .. }
        | RequestOp::Create { .. }
        | RequestOp::Mkdir { .. }
        | RequestOp::Symlink { .. }
        | RequestOp::Remove { .. }
        | RequestOp::Rmdir { .. } => true,
        RequestOp::SetAttr { attr, .. } => attr.size.is_none(),
        _ => false,
    }
}

/// Runs `f` inline, long work refused: None if `f` refused some (its result, an error it
/// returned before changing anything, is dropped: the caller runs the operation again on a
/// storage thread).
pub(super) fn only_short<T>(f: impl FnOnce() -> T) -> Option<T> {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            INLINE.with(|w| w.set(false));
        }
    }
    INLINE.with(|w| w.set(true));
    REFUSED.with(|r| r.set(false));
    let _reset = Reset;
    let out = f();
    if REFUSED.with(|r| r.replace(false)) {
        None
    } else {
        Some(out)
    }
}

/// Called where an operation is about to start long work, before it changes anything: true
/// (and the refusal noted) when it runs inline and must not; it then returns at once with
/// any error.
pub(super) fn refused() -> bool {
    if INLINE.with(Cell::get) {
        REFUSED.with(|r| r.set(true));
        true
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use protocol::{ReplyBody, SetAttr, StableHow};

    use super::*;
    use crate::fs::BlockingStorage;
    use crate::fs::local::testing::{backend, ctx, open};

    fn set(mode: Option<u32>, size: Option<u64>) -> SetAttr {
        SetAttr {
            mode,
            size,
            ..SetAttr::default()
        }
    }

    #[test]
    fn short_metadata_runs_inline_and_data_truncation_and_removal_do_not() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"12345").unwrap();
        let (fs, fh) = backend(dir.path(), "f");
        let c = ctx();
        let getattr = fs.execute_inline(&c, &RequestOp::GetAttr { fh });
        assert!(matches!(
            getattr.map(|o| o.result),
            Some(Ok(ReplyBody::GetAttr { .. }))
        ));
        let chmod = RequestOp::SetAttr {
            fh,
            attr: set(Some(0o600), None),
            guard: None,
        };
        let out = fs.execute_inline(&c, &chmod).expect("a chmod runs inline");
        assert!(out.result.is_ok(), "{:?}", out.result);
        assert_eq!(
            out.changed.len(),
            1,
            "lease holders are told, as from a storage thread"
        );
        let mode = std::fs::metadata(dir.path().join("f")).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o600
        );
        let never_inline = [
            RequestOp::SetAttr {
                fh,
                attr: set(None, Some(0)),
                guard: None,
            },
            RequestOp::Write {
                fh,
                offset: 0,
                stable: StableHow::FileSync,
                data: b"x".to_vec().into(),
            },
            RequestOp::Commit {
                fh,
                offset: 0,
                count: 0,
            },
            RequestOp::Rename {
                from_dir: fh,
                from_name: b"f".to_vec(),
                to_dir: fh,
                to_name: b"g".to_vec(),
            },
        ];
        for op in never_inline {
            assert!(fs.execute_inline(&c, &op).is_none(), "{op:?}");
        }
        assert_eq!(
            std::fs::read(dir.path().join("f")).unwrap(),
            b"12345",
            "untouched"
        );
    }

    /// Removing the last name of a small file runs inline; of a large one (the kernel frees
    /// its blocks in the unlink) it gives up before removing anything, and the storage
    /// thread's run removes it.
    #[test]
    fn only_small_files_are_removed_inline() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/small"), b"x").unwrap();
        let big = std::fs::File::create(dir.path().join("d/big")).unwrap();
        big.set_len(FREED_INLINE_MAX + 1).unwrap();
        let (fs, d) = backend(dir.path(), "d");
        let remove = |name: &str| RequestOp::Remove {
            dir: d,
            name: name.as_bytes().to_vec(),
        };
        let out = fs.execute_inline(&ctx(), &remove("small")).expect("inline");
        assert!(
            matches!(out.result, Ok(ReplyBody::Remove { .. })),
            "{:?}",
            out.result
        );
        assert!(!dir.path().join("d/small").exists());
        assert!(fs.execute_inline(&ctx(), &remove("big")).is_none());
        assert!(dir.path().join("d/big").exists(), "nothing removed inline");
        let out = fs.execute(&ctx(), remove("big"));
        assert!(out.result.is_ok(), "{:?}", out.result);
        assert!(!dir.path().join("d/big").exists());
    }

    /// A handle the index does not know (here: a server restarted on the same export) needs a
    /// walk of the export, which never runs on a worker: the inline attempt gives up without
    /// walking (the index still does not know the handle after it), and the storage thread's
    /// run walks and answers.
    #[test]
    fn a_handle_the_index_does_not_know_is_never_walked_inline() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/f"), b"x").unwrap();
        let (_before, fh) = {
            let (fs, d) = backend(dir.path(), "d");
            let lookup = RequestOp::Lookup {
                dir: d,
                name: b"f".to_vec(),
            };
            match fs.execute(&ctx(), lookup).result {
                Ok(ReplyBody::Lookup { fh, .. }) => (fs, fh),
                other => panic!("{other:?}"),
            }
        };
        let restarted = open(dir.path());
        let getattr = RequestOp::GetAttr { fh };
        for _ in 0..2 {
            assert!(restarted.execute_inline(&ctx(), &getattr).is_none());
        }
        let out = restarted.execute(&ctx(), getattr.clone());
        assert!(
            matches!(out.result, Ok(ReplyBody::GetAttr { .. })),
            "{:?}",
            out.result
        );
        // Known now: inline from here on.
        assert!(restarted.execute_inline(&ctx(), &getattr).is_some());
    }
}
