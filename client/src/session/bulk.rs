//! Whole-file transfers: READ and WRITE with a window of requests in flight, sized in bytes
//! and grown to the path as the transfer goes ([`super::window`]), so one stream can fill the
//! link. The single requests are [`Client::read`] and [`Client::write_from_file`].

use std::collections::VecDeque;
use std::fs::File;
use std::sync::Arc;
use std::time::Instant;

use protocol::{Data, FileHandle, NfsStatus, StableHow};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::Client;
use super::error::SessionError;
use super::{Sent, SentSoFar};

/// An outstanding READ of a bulk transfer: its offset and the task doing it.
type ReadTask = (u64, JoinHandle<Result<(Data, bool), SessionError>>);

/// An outstanding WRITE of a bulk transfer: (write verifier, bytes, where its answered attempt
/// went) when done.
type WriteTask = JoinHandle<Result<([u8; 8], u64, Option<Sent>), SessionError>>;

/// A COMMIT sent behind the last WRITE: (write verifier, where its answered attempt went).
type CommitTask = JoinHandle<Result<([u8; 8], Option<Sent>), SessionError>>;

impl Client {
    /// READs outstanding, as many as the window holds, so one stream can fill the link.
    pub(crate) async fn read_all(
        &self,
        fh: &FileHandle,
        mut offset: u64,
        mut sink: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<u64, anyhow::Error> {
        let (rmax, _) = self.io_sizes().await?;
        let chunk = u64::from(rmax.max(1));
        let max_requests = self.inner.opts.window;
        let mut window = self.inner.opts.bulk_window();
        window.start(Instant::now());
        let mut inflight: VecDeque<ReadTask> = VecDeque::new();
        let mut next = offset;
        let mut total = 0u64;
        let spawn = |at: u64| {
            let c = self.clone();
            let fh = *fh;
            tokio::spawn(async move { c.read(&fh, at, rmax).await })
        };
        let abort = |q: &mut VecDeque<(u64, JoinHandle<_>)>| {
            for (_, h) in q.drain(..) {
                h.abort();
            }
        };
        loop {
            while inflight.len() < window.requests(chunk, max_requests) {
                inflight.push_back((next, spawn(next)));
                next += chunk;
            }
            let Some((at, h)) = inflight.pop_front() else {
                return Ok(total);
            };
            debug_assert_eq!(at, offset);
            let (data, eof) = match h.await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    abort(&mut inflight);
                    return Err(e.into());
                }
                Err(e) => {
                    abort(&mut inflight);
                    return Err(anyhow::anyhow!("read task failed: {e}"));
                }
            };
            if let Err(e) = sink(&data) {
                abort(&mut inflight);
                return Err(e.into());
            }
            let got = data.len() as u64;
            window.delivered(got, Instant::now());
            self.inner.recycle(data.into_buffer());
            total += got;
            offset += got;
            if eof || got == 0 {
                abort(&mut inflight);
                tracing::debug!(bytes = total, window = window.bytes(), "bulk read done");
                return Ok(total);
            }
            if got < chunk {
                // A short read that is not the end: the later requests assumed full chunks,
                // so restart the pipeline from where this one ended.
                abort(&mut inflight);
                next = offset;
            }
        }
    }

    /// Copies `file` to the server's file `fh` from offset 0, then COMMITs: WRITEs of the
    /// largest size the server takes, as many outstanding as the window holds (grown to the
    /// path as for reads), each read straight from the
    /// file into its request (read again if it must be sent again). A file that grows
    /// meanwhile is copied to its new end; one that shrinks is an error. `progress` is told of
    /// each acknowledged byte count.
    ///
    /// Where the server orders a COMMIT behind the WRITEs of its file sent before it on the
    /// same connection (protocol versions 9 and up), the COMMIT goes out as soon as the last
    /// WRITE has, not a round trip after the last reply. It counts only if every WRITE's
    /// answered attempt went out before it on the connection that answered it (no reconnect,
    /// no WRITE sent again after it, the file did not grow); otherwise another COMMIT is sent
    /// after the last reply, as with older servers.
    pub(crate) async fn write_file(
        &self,
        fh: &FileHandle,
        file: Arc<File>,
        mut progress: impl FnMut(u64),
    ) -> Result<u64, anyhow::Error> {
        let (_, wmax) = self.io_sizes().await?;
        let ordered = protocol::handshake::has_ordered_commit(self.connection().await?.version);
        let chunk = u64::from(wmax.max(1));
        let max_requests = self.inner.opts.window;
        let mut window = self.inner.opts.bulk_window();
        window.start(Instant::now());
        let local_len = |f: &File| f.metadata().map(|m| m.len()).map_err(SessionError::Source);
        let mut inflight: VecDeque<WriteTask> = VecDeque::new();
        let mut offset = 0u64;
        let mut end = local_len(&file)?;
        let mut verifier = None;
        let mut restarted = false;
        // Each WRITE task says once that its request went out; the early COMMIT waits for
        // all of them.
        let (went_tx, went_rx) = mpsc::unbounded_channel::<()>();
        let mut went_rx = Some(went_rx);
        let mut spawned = 0usize;
        let mut early: Option<CommitTask> = None;
        let mut sent = SentSoFar::default();
        let result = loop {
            while inflight.len() < window.requests(chunk, max_requests) {
                if offset >= end {
                    end = local_len(&file)?;
                    if offset >= end {
                        break;
                    }
                }
                let len = (end - offset).min(u64::from(wmax));
                let at = offset;
                offset += len;
                let c = self.clone();
                let fh = *fh;
                let file = file.clone();
                let went = went_tx.clone();
                spawned += 1;
                inflight.push_back(tokio::spawn(async move {
                    // The server may write less than it was sent; the rest goes again.
                    let mut done = 0u64;
                    let mut verf = [0u8; 8];
                    let mut last = None;
                    let mut on_sent = |s: Sent| {
                        if last.is_none() {
                            let _ = went.send(());
                        }
                        last = Some(s);
                    };
                    while done < len {
                        let rest = (len - done) as usize;
                        let (n, v) = c
                            .write_from_file(
                                &fh,
                                at + done,
                                StableHow::Unstable,
                                &file,
                                rest,
                                &mut on_sent,
                            )
                            .await?;
                        if n == 0 {
                            return Err(SessionError::Nfs(NfsStatus::Io));
                        }
                        done += u64::from(n).min(len - done);
                        verf = v;
                    }
                    Ok((verf, len, last))
                }));
            }
            if ordered
                && offset >= end
                && spawned > 0
                && let Some(mut rx) = went_rx.take()
            {
                // Every byte is in a WRITE: COMMIT once they have all gone out.
                let (c, fh, all) = (self.clone(), *fh, spawned);
                early = Some(tokio::spawn(async move {
                    for _ in 0..all {
                        if rx.recv().await.is_none() {
                            break;
                        }
                    }
                    let mut at = None;
                    let v = c.commit_sent(&fh, &mut |s| at = Some(s)).await?;
                    Ok((v, at))
                }));
            }
            let Some(h) = inflight.pop_front() else {
                break Ok(());
            };
            let (v, len, last) = match h.await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => break Err(e.into()),
                Err(e) => break Err(anyhow::anyhow!("write task failed: {e}")),
            };
            if verifier.is_some_and(|old| old != v) {
                restarted = true;
            }
            verifier = Some(v);
            sent.add(last);
            window.delivered(len, Instant::now());
            progress(len);
        };
        if let Err(e) = result {
            for h in inflight.drain(..) {
                h.abort();
            }
            if let Some(h) = early {
                h.abort();
            }
            return Err(e);
        }
        tracing::debug!(bytes = offset, window = window.bytes(), "bulk write sent");
        let early = match early {
            Some(h) => match h.await {
                Ok(r) => Some(r?),
                Err(e) => return Err(anyhow::anyhow!("commit task failed: {e}")),
            },
            None => None,
        };
        let committed = match early {
            Some((v, Some(at))) if sent.covered_by(at, protocol::handshake::has_ordered_commit) => {
                v
            }
            _ => self.commit(fh).await?,
        };
        if restarted || verifier.is_some_and(|v| v != committed) {
            anyhow::bail!(
                "the server's write verifier changed during the transfer (its machine or \
                 storage restarted), so it may have lost unstable writes; run the command again"
            );
        }
        self.inner.cache.invalidate(fh);
        Ok(offset)
    }
}
