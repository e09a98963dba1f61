//! The two names the rest of sfsd shares: an object's key and a connection's id. They live
//! apart from the storage and the lease table, which both use both.

/// Server-side identity of an object: (device, inode) for the local backend, (fsid, fileid)
/// for the NFS backend; the same for every instance sharing a backend.
pub(crate) type ObjKey = (u64, u64);

/// Connection identifier (also its color).
pub(crate) type ConnId = u32;
