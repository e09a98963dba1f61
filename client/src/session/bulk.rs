//! Whole-file transfers: READ and WRITE with a window of requests in flight (sized in bytes:
//! [`super::Options::requests_in_flight`]), so one stream can fill the link. The single requests are [`Client::read`] and [`Client::write`].

use std::collections::VecDeque;

use protocol::{FileHandle, NfsStatus, StableHow};
use tokio::task::JoinHandle;

use super::Client;
use super::error::SessionError;

/// An outstanding READ of a bulk transfer: its offset and the task doing it.
type ReadTask = (u64, JoinHandle<Result<(Vec<u8>, bool), SessionError>>);

/// Alignment of the blocks a bulk write reads into.
const DATA_ALIGN: usize = 64;

/// An outstanding WRITE of a bulk transfer: (write verifier, bytes) when done.
type WriteTask = JoinHandle<Result<([u8; 8], u64), SessionError>>;

impl Client {
    /// `window` READs outstanding so one stream can fill the link.
    pub async fn read_all(
        &self,
        fh: &FileHandle,
        mut offset: u64,
        mut sink: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<u64, anyhow::Error> {
        let (rmax, _) = self.io_sizes().await?;
        let chunk = u64::from(rmax.max(1));
        let window = self.inner.opts.requests_in_flight(chunk);
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
            while inflight.len() < window {
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
            self.inner.recycle(data);
            total += got;
            offset += got;
            if eof || got == 0 {
                abort(&mut inflight);
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

    /// Writes everything `source` yields (chunks of any size) at increasing offsets from 0,
    /// with up to `window` WRITEs outstanding, then COMMITs. `progress` is told of each
    /// acknowledged byte count.
    pub async fn write_all(
        &self,
        fh: &FileHandle,
        mut source: impl FnMut(&mut [u8]) -> std::io::Result<usize>,
        mut progress: impl FnMut(u64),
    ) -> Result<u64, anyhow::Error> {
        let (_, wmax) = self.io_sizes().await?;
        let window = self.inner.opts.requests_in_flight(u64::from(wmax));
        let mut inflight: VecDeque<WriteTask> = VecDeque::new();
        let mut offset = 0u64;
        let mut done = false;
        let mut verifier = None;
        let mut restarted = false;
        loop {
            while !done && inflight.len() < window {
                // A block from earlier (no fresh pages to fault in for every megabyte), filled
                // from a cache-line boundary: the kernel's copy into an unaligned destination
                // costs several times more on some CPUs.
                let mut buf = self.inner.buffer_for(wmax as usize + DATA_ALIGN);
                buf.resize(wmax as usize + DATA_ALIGN, 0);
                let from = (DATA_ALIGN - buf.as_ptr().addr() % DATA_ALIGN) % DATA_ALIGN;
                let mut filled = from;
                while filled < from + wmax as usize {
                    let n = source(&mut buf[filled..from + wmax as usize])?;
                    if n == 0 {
                        done = true;
                        break;
                    }
                    filled += n;
                }
                if filled == from {
                    self.inner.recycle(buf);
                    break;
                }
                let at = offset;
                offset += (filled - from) as u64;
                let c = self.clone();
                let fh = *fh;
                inflight.push_back(tokio::spawn(async move {
                    let data = &buf[from..filled];
                    let mut pos = 0usize;
                    let mut verf = [0u8; 8];
                    while pos < data.len() {
                        let (n, v) = c
                            .write(&fh, at + pos as u64, StableHow::Unstable, &data[pos..])
                            .await?;
                        if n == 0 {
                            return Err(SessionError::Nfs(NfsStatus::Io));
                        }
                        pos += n as usize;
                        verf = v;
                    }
                    let len = data.len() as u64;
                    c.inner.recycle(buf);
                    Ok((verf, len))
                }));
            }
            let Some(h) = inflight.pop_front() else {
                break;
            };
            let (v, len) = match h.await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    for h in inflight.drain(..) {
                        h.abort();
                    }
                    return Err(e.into());
                }
                Err(e) => return Err(anyhow::anyhow!("write task failed: {e}")),
            };
            if verifier.is_some_and(|old| old != v) {
                restarted = true;
            }
            verifier = Some(v);
            progress(len);
        }
        let committed = self.commit(fh).await?;
        if restarted || verifier.is_some_and(|v| v != committed) {
            anyhow::bail!(
                "the server restarted during the transfer and may have lost unstable writes; \
                 run the command again"
            );
        }
        self.inner.cache.invalidate(fh);
        Ok(offset)
    }
}
