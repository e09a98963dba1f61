//! Sending a request: the retry and timeout policy.
//!
//! An idempotent request whose connection broke is sent again on a new one (up to
//! [`Options::retries`](super::Options::retries) times). So is every change sent through a
//! slot of the server's reply cache ([`super::slots`]): the server answers a change it already
//! did from the cache, so it is done once. A non-idempotent request without a slot (a server
//! of protocol version 2), or whose slot the server no longer has, is not sent again, since it
//! may have been done ([`SessionError::NotRetried`]). A request without a reply within
//! [`Options::request_timeout`](super::Options::request_timeout) drops the connection and is
//! retried at most [`MAX_TIMEOUT_RETRIES`] times, so a server that accepts connections but
//! never answers costs a bounded time. JUKEBOX (the server is busy, e.g. a handle waits for
//! the next walk of the export) is retried with growing pauses.

use std::time::Duration;

use protocol::client::UnsealedRequest;
use protocol::sequence::Ticket;
use protocol::{Attr, FileHandle, NfsStatus, Proc, ReplyBody, Request, RequestOp};

use super::Sent;
use super::error::{AfterTimeout, ConnectError, ProtocolError, SessionError, secs};
use super::slots::Held;
use super::{Client, MAX_TIMEOUT_RETRIES};
use crate::cache::Stamp;

/// Whether `result` is the server's answer to the request, so its slot's number may advance:
/// any reply but those saying the ticket itself was wrong (which leave the slot's state on the
/// server unknown).
fn answered(result: &Result<ReplyBody, SessionError>) -> bool {
    match result {
        Ok(_) => true,
        Err(SessionError::Nfs(s)) => !matches!(
            s,
            NfsStatus::BadSession
                | NfsStatus::BadSlot
                | NfsStatus::SeqMisordered
                | NfsStatus::Jukebox
        ),
        Err(_) => false,
    }
}

impl Client {
    /// Sends a request and waits for its reply, reconnecting and retrying when the request is
    /// idempotent or went through a slot of the server's reply cache.
    pub(crate) async fn call(&self, op: RequestOp) -> Result<ReplyBody, SessionError> {
        self.call_sent(op, &mut |_| {}).await
    }

    /// [`Client::call`], telling `on_sent` where each attempt went.
    pub(super) async fn call_sent(
        &self,
        op: RequestOp,
        on_sent: &mut (dyn FnMut(Sent) + Send),
    ) -> Result<ReplyBody, SessionError> {
        let proc = op.proc();
        let encode = |id, authno, ticket: Option<Ticket>, buf| {
            let op = match ticket {
                Some(t) => RequestOp::Sequence {
                    slot: t.slot,
                    seq: t.seq,
                    op: Box::new(op.clone()),
                },
                None => op.clone(),
            };
            Ok(UnsealedRequest::new(buf, &Request { id, authno, op }))
        };
        self.call_with(proc, op.is_idempotent(), 0, encode, on_sent)
            .await
    }

    /// [`Client::call`] with a caller-supplied encoder, given the request id, the authno, the
    /// reply-cache ticket to send it with (inside a SEQUENCE) if any, and a buffer (a recycled
    /// one when `size_hint` is large): WRITE reads or copies its data straight into the
    /// request. The encoder runs again for every attempt, since a sent request's buffer is
    /// sealed in place; its error (reading a local file) ends the call.
    /// `on_sent` is told where each attempt went (its last call: the attempt answered).
    /// `idempotent`: whether the request may be done twice (`RequestOp::is_idempotent`).
    pub(super) async fn call_with(
        &self,
        proc: Proc,
        idempotent: bool,
        size_hint: usize,
        encode: impl Fn(u64, u32, Option<Ticket>, Vec<u8>) -> std::io::Result<UnsealedRequest>,
        on_sent: &mut (dyn FnMut(Sent) + Send),
    ) -> Result<ReplyBody, SessionError> {
        // One line per request at debug level: what a test counts to see how many round
        // trips an operation through the mount costs.
        tracing::debug!(target: "sfs::requests", ?proc, "request");
        let mut held = None;
        let result = self
            .attempts(proc, idempotent, size_hint, &encode, &mut held, on_sent)
            .await;
        if let Some(h) = held {
            self.inner.slots.release(h, answered(&result));
        }
        result
    }

    /// Sends until an answer comes or retrying is not safe. A change through a reply-cache
    /// slot (`held`, taken on the first attempt on a connection with a reply cache) is sent
    /// again with the same ticket after a reconnect, whether or not it is idempotent: the
    /// server answers from the cache if it did it. Only if the server lost the cache (a new
    /// epoch) is it "not retried".
    async fn attempts(
        &self,
        proc: Proc,
        idempotent: bool,
        size_hint: usize,
        encode: &impl Fn(u64, u32, Option<Ticket>, Vec<u8>) -> std::io::Result<UnsealedRequest>,
        held: &mut Option<Held>,
        on_sent: &mut (dyn FnMut(Sent) + Send),
    ) -> Result<ReplyBody, SessionError> {
        let mut lost = 0;
        let mut busy = 0u32;
        // Whether the last attempt ended with the server not answering in time, and how many
        // did: a timed-out idempotent request is retried once on a fresh connection, so a
        // server that accepts connections but never answers costs at most two timeouts.
        let mut timed_out = false;
        let mut timeouts = 0u32;
        let mut sent = false;
        let timeout = self.inner.opts.request_timeout;
        loop {
            let conn = match self.connection().await {
                Ok(c) => c,
                Err(e) if timed_out => {
                    return Err(self.timeout_error(proc, AfterTimeout::ReconnectFailed, Some(e)));
                }
                Err(e) => return Err(e),
            };
            if proc.is_sequenced() {
                match (&held, conn.epoch) {
                    (None, Some(epoch)) if !sent => {
                        *held = self.inner.slots.acquire(epoch).await;
                    }
                    // The server kept no replies from where this change was sent: it may have
                    // been done. Sending it again may do it twice, which only an idempotent
                    // change (a WRITE: the same bytes at the same place; a SETATTR of modes,
                    // owners or times) survives; it goes again through a slot of the new
                    // record. Done twice, it still took effect while its caller waited for it,
                    // as once would have.
                    (Some(h), epoch) if sent && epoch != Some(h.epoch) => {
                        if !idempotent {
                            return Err(SessionError::NotRetried {
                                name: self.inner.name.to_string(),
                                proc,
                            });
                        }
                        self.inner.slots.release(*h, false);
                        *held = match epoch {
                            Some(epoch) => self.inner.slots.acquire(epoch).await,
                            None => None,
                        };
                    }
                    _ => {}
                }
            }
            let retriable = idempotent || held.is_some();
            let authno = match self.authno_on(&conn).await {
                Ok(a) => a,
                Err(e) if retriable && lost < self.inner.opts.retries => {
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
            let ticket = held.map(|h| h.ticket);
            let payload = encode(id, authno, ticket, self.inner.buffer_for(size_hint))
                .map_err(SessionError::Source)?;
            sent = true;
            let reply = match conn
                .roundtrip_within_sent(timeout, id, payload, on_sent)
                .await
            {
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
                // or a handle needs a rate-limited walk first), or that the same change sent
                // earlier is still being done: any request may be sent again, idempotent or
                // not, with the same ticket.
                Some(Err(NfsStatus::Jukebox)) if busy < 10 => {
                    busy += 1;
                    tokio::time::sleep(Duration::from_millis(50 << busy.min(6))).await;
                }
                Some(r) => return r.map_err(SessionError::Nfs),
                None if retriable
                    && lost < self.inner.opts.retries
                    && timeouts <= MAX_TIMEOUT_RETRIES =>
                {
                    lost += 1;
                    tracing::info!(server = %self.inner.name, ?proc, "connection lost; retrying");
                }
                None if retriable && timed_out => {
                    let after = AfterTimeout::GaveUp { attempts: timeouts };
                    return Err(self.timeout_error(proc, after, None));
                }
                None if retriable => {
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
