//! APPEND: data written at the end of a file as the server finds it, so programs appending
//! through different clients never overwrite each other (a WRITE at the size this client
//! believes would overwrite what another client appended since).

use protocol::{FileHandle, ReplyBody, RequestOp, StableHow};

use super::Client;
use super::error::SessionError;

/// What one APPEND did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Appended {
    /// Where the data went: the file's size just before, as the server placed it.
    pub offset: u64,
    /// Bytes written (all of them, unless the server ran out of room).
    pub count: u32,
    /// The write verifier: unstable appends are committed like unstable writes.
    pub verifier: [u8; 8],
}

impl Client {
    /// One APPEND of at most the negotiated WRITE size. Sent again after a lost connection
    /// only through the server's reply cache (a replay without it would append the data
    /// twice). A server without APPEND (protocol version 2, which would close the connection
    /// on it) or that cannot append to this file answers `NotSupp`, and the caller decides what
    /// to do instead.
    pub(crate) async fn append(
        &self,
        fh: &FileHandle,
        stable: StableHow,
        data: &[u8],
    ) -> Result<Appended, SessionError> {
        if self.connection().await?.version < protocol::SESSIONS_VERSION {
            return Err(SessionError::Nfs(protocol::NfsStatus::NotSupp));
        }
        let change = self.inner.cache.begin_data(fh);
        let op = RequestOp::Append {
            fh: *fh,
            stable,
            data: data.to_vec().into(),
        };
        match self.call(op).await? {
            ReplyBody::Append {
                attr,
                count,
                verifier,
                offset,
                ..
            } => {
                // The reply's attributes are the file's after our data went in (its size
                // includes whatever others appended before us).
                change.end(attr);
                Ok(Appended {
                    offset,
                    count,
                    verifier,
                })
            }
            other => Err(self.unexpected(&other)),
        }
    }

    /// Reports a change of `fh` the kernel must learn of although no INVALIDATE will come
    /// (our own APPEND put data where the kernel did not expect it): it reaches the same hook
    /// as the server's INVALIDATEs, whose consumer tells the kernel from its own thread.
    pub(crate) fn invalidate_locally(&self, fh: &FileHandle) {
        self.inner
            .invalidated(super::Invalidation::Object(*fh, None));
    }
}
