//! Sending a request: the retry and timeout policy.
//!
//! An idempotent request whose connection broke is sent again on a new one (up to
//! [`Options::retries`](super::Options::retries) times); a non-idempotent one is not, since
//! it may have been done ([`SessionError::NotRetried`]). A request without a reply within
//! [`Options::request_timeout`](super::Options::request_timeout) drops the connection and is
//! retried at most [`MAX_TIMEOUT_RETRIES`] times, so a server that accepts connections but
//! never answers costs a bounded time. JUKEBOX (the server is busy, e.g. a handle waits for
//! the next walk of the export) is retried with growing pauses.

use std::time::Duration;

use protocol::{Attr, FileHandle, NfsStatus, Proc, ReplyBody, Request, RequestOp};

use super::conn::Outgoing;
use super::error::{AfterTimeout, ConnectError, ProtocolError, SessionError, secs};
use super::{Client, MAX_TIMEOUT_RETRIES};
use crate::cache::Stamp;

impl Client {
    /// Sends a request and waits for its reply, reconnecting and retrying when the request is
    /// idempotent.
    pub async fn call(&self, op: RequestOp) -> Result<ReplyBody, SessionError> {
        let proc = op.proc();
        self.call_with(proc, 0, |id, authno, buf| {
            Ok(Outgoing::encode(buf, |buf| {
                Request {
                    id,
                    authno,
                    op: op.clone(),
                }
                .encode_into(buf)
            }))
        })
        .await
    }

    /// [`Client::call`] with a caller-supplied encoder, given the request id, the authno and a
    /// buffer (a recycled one when `size_hint` is large): WRITE reads or copies its data
    /// straight into the request. The encoder runs again for every attempt, since a sent
    /// request's buffer is sealed in place; its error (reading a local file) ends the call.
    pub(super) async fn call_with(
        &self,
        proc: Proc,
        size_hint: usize,
        encode: impl Fn(u64, u32, Vec<u8>) -> std::io::Result<Outgoing>,
    ) -> Result<ReplyBody, SessionError> {
        let mut lost = 0;
        let mut busy = 0u32;
        // Whether the last attempt ended with the server not answering in time, and how many
        // did: a timed-out idempotent request is retried once on a fresh connection, so a
        // server that accepts connections but never answers costs at most two timeouts.
        let mut timed_out = false;
        let mut timeouts = 0u32;
        let timeout = self.inner.opts.request_timeout;
        loop {
            let conn = match self.connection().await {
                Ok(c) => c,
                Err(e) if timed_out => {
                    return Err(self.timeout_error(proc, AfterTimeout::ReconnectFailed, Some(e)));
                }
                Err(e) => return Err(e),
            };
            let authno = match self.authno_on(&conn).await {
                Ok(a) => a,
                Err(e) if proc.is_idempotent() && lost < self.inner.opts.retries => {
                    lost += 1;
                    tracing::info!(
                        server = %self.inner.name,
                        error = %e.report(),
                        "login failed; retrying"
                    );
                    continue;
                }
                Err(e) => return Err(e),
            };
            let id = self.next_id();
            let payload = encode(id, authno, self.inner.buffer_for(size_hint))
                .map_err(SessionError::Source)?;
            let reply = match conn.roundtrip_within(timeout, id, payload).await {
                Ok(r) => {
                    timed_out = false;
                    r
                }
                Err(()) => {
                    tracing::warn!(
                        server = %self.inner.name,
                        ?proc,
                        "no reply within {} s; dropping the connection",
                        secs(timeout)
                    );
                    timed_out = true;
                    timeouts += 1;
                    None
                }
            };
            match reply {
                // JUKEBOX means the server did not do the work (its storage threads were full,
                // or a handle needs a rate-limited walk first), so any request may be sent
                // again, idempotent or not.
                Some(Err(NfsStatus::Jukebox)) if busy < 10 => {
                    busy += 1;
                    tokio::time::sleep(Duration::from_millis(50 << busy.min(6))).await;
                }
                Some(r) => return r.map_err(SessionError::Nfs),
                None if proc.is_idempotent()
                    && lost < self.inner.opts.retries
                    && timeouts <= MAX_TIMEOUT_RETRIES =>
                {
                    lost += 1;
                    tracing::info!(server = %self.inner.name, ?proc, "connection lost; retrying");
                }
                None if proc.is_idempotent() && timed_out => {
                    let after = AfterTimeout::GaveUp { attempts: timeouts };
                    return Err(self.timeout_error(proc, after, None));
                }
                None if proc.is_idempotent() => {
                    return Err(self.connect_error(ConnectError::KeepsBreaking));
                }
                None if timed_out => {
                    return Err(self.timeout_error(proc, AfterTimeout::NotRetried, None));
                }
                None => {
                    return Err(SessionError::NotRetried {
                        name: self.inner.name.to_string(),
                        proc,
                    });
                }
            }
        }
    }

    fn timeout_error(
        &self,
        proc: Proc,
        after: AfterTimeout,
        cause: Option<SessionError>,
    ) -> SessionError {
        SessionError::Timeout {
            name: self.inner.name.to_string(),
            proc,
            timeout: self.inner.opts.request_timeout,
            after,
            source: cause.map(Box::new),
        }
    }

    /// A reply of the wrong kind for the request.
    pub(super) fn unexpected(&self, body: &ReplyBody) -> SessionError {
        self.protocol_error(ProtocolError::UnexpectedReply(body.proc()))
    }

    /// Remembers attributes that came with the reply to a request stamped `since`.
    pub(super) fn note(&self, fh: &FileHandle, attr: &Option<Attr>, since: Stamp) {
        match attr {
            Some(a) => self.inner.cache.put(*fh, *a, since),
            None => self.inner.cache.invalidate(fh),
        }
    }
}
