//! What a request reserves when it is admitted: the memory it holds until it is answered,
//! counted against the connection's output limit (see the backpressure note in `conn.rs`).

use protocol::RequestOp;

/// Clamps a READ's or FETCH's count to what the peer can receive in one record (`max_read`)
/// and to the server's own maximum (`max_io`) (once the file is open, the storage clamps it to
/// its size too); returns that count (0 for other requests) and the bytes `op` reserves.
pub(super) fn reserve(op: &mut RequestOp, max_read: usize, max_io: usize) -> (usize, usize) {
    let read_count = match op {
        RequestOp::Read { count, .. } => (*count as usize).min(max_read).min(max_io),
        // A FETCH reply carries a handle beside the data: room is left for it.
        RequestOp::Fetch { count, .. } => {
            let clamped = (*count as usize)
                .min(max_read.saturating_sub(FETCH_HANDLE_ROOM))
                .min(max_io);
            *count = clamped as u32;
            clamped
        }
        _ => 0,
    };
    (read_count, reply_reservation(op, read_count))
}

/// Bytes of a FETCH reply's data given up for its handle, so the reply fits where a READ
/// reply of the peer's largest count would.
pub(super) const FETCH_HANDLE_ROOM: usize = 4096;

/// Reply bytes reserved for a request other than READ and READDIR: the largest fixed-size
/// reply (READLINK with a 4 KiB target, attributes) with room to spare.
const SMALL_REPLY: usize = 8 * 1024;

/// The memory `op` holds until it is answered, reserved against the output limit when it is
/// admitted: its largest reply, and a WRITE's data, which waits for a storage thread.
fn reply_reservation(op: &RequestOp, read_count: usize) -> usize {
    match op {
        RequestOp::Read { .. } => read_count + 512,
        RequestOp::Fetch { .. } => read_count + FETCH_HANDLE_ROOM + 512,
        RequestOp::Write { data, .. } => data.len() + SMALL_REPLY,
        // As WRITE: the data waits for a storage thread (or the NFS backend's turn).
        RequestOp::Append { data, .. } => data.len() + SMALL_REPLY,
        RequestOp::ReadDir { .. } | RequestOp::ReadDirPlus { .. } => {
            crate::fs::local::MAX_DIR_REPLY + 512
        }
        // A bit per entry more: an entry takes at least 24 bytes of the page.
        RequestOp::ListDir { .. } => crate::fs::local::MAX_DIR_REPLY * 33 / 32 + 512,
        // The value waits for a storage thread, as a WRITE's data does.
        RequestOp::SetXattr { value, .. } => value.len() + SMALL_REPLY,
        RequestOp::GetXattr { .. } => protocol::xattr::MAX_VALUE_LEN + SMALL_REPLY,
        // Each byte of a name list (a name and its NUL) takes at most 4 bytes encoded (a
        // 1-byte name is 8 bytes for 2 of the list).
        RequestOp::ListXattr { .. } => 4 * protocol::xattr::MAX_LIST_LEN + SMALL_REPLY,
        _ => SMALL_REPLY,
    }
}
