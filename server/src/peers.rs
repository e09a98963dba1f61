//! Coherence between sfsd instances that share one state directory (`--peer-listen`, `--peer`).
//!
//! Each instance keeps its own lease table, so without this a client of one instance would
//! see a change made through another only when its lease ends. Here every instance tells the
//! others which objects changed, and each runs, for its own lease holders, the same INVALIDATE
//! fan-out as for a change made through itself (the [`Batch`] handed to the callback given to
//! [`start`], which sfsd's `run` points at `Server::peer_changed`).
//!
//! ```text
//! color 0 (finish: an operation changed objects) -> Outbox: keys gathered for FLUSH_DELAY,
//!     or until a datagram is full -> one UDP datagram to each peer (non-blocking send)
//! peer's receive color: recv, size check, HMAC check, replay/loss check -> a Batch to the
//!     callback, which takes it to color 0: Server::peer_changed ends the local leases on
//!     those objects and INVALIDATEs their holders
//! ```
//!
//! **What is sent.** Object keys (`(fsid, fileid)`, 16 bytes each), never handles or data: the
//! receiver names the object in its INVALIDATE with the handle its own lease table holds. The
//! keys of one object are the same on every instance, since they come from the shared backend
//! (the local file system's device and inode, or the NFS server's fsid and fileid).
//!
//! **Authenticated.** Every datagram carries an HMAC-SHA256 tag under a key derived from the
//! state directory's file-handle secret: only instances that share the state directory (and
//! can already forge handles) can speak. A datagram of the wrong size is dropped before its
//! tag is computed; one with a bad tag after (in the receive color, never in color 0).
//!
//! **Replay and loss.** Each instance picks a random sender id when it starts and numbers its
//! datagrams 1, 2, 3... (a heartbeat every [`HEARTBEAT`] takes a number too). A receiver
//! accepts only a number above the last it accepted from that sender, and a time stamp within
//! [`MAX_SKEW`] of its own clock. A number that skips one means datagrams were lost: the
//! receiver then ends *every* lease it holds (INVALIDATE to all holders), so a lost datagram
//! costs a refetch, never a stale cache beyond [`HEARTBEAT`] (the next heartbeat reveals the
//! gap). A replayed datagram can only cause extra INVALIDATEs, never suppress one.
//!
//! **Cut off.** An instance the others cannot reach (or that cannot reach them) sends and
//! receives nothing: its clients see changes made elsewhere when their leases end
//! (`--lease-secs`), as without peers. When the link returns, the first datagram shows the
//! gap and everything is invalidated.
//!
//! **Bounded.** Datagrams at most [`MAX_DATAGRAM`] bytes ([`MAX_KEYS`] keys); one outbox of at
//! most [`MAX_KEYS`] keys in color 0 (full: sent at once); at most [`MAX_QUEUED`] received
//! batches waiting for color 0 (beyond: dropped, and the next batch invalidates everything);
//! at most [`MAX_SENDERS`] senders remembered (the one heard from least recently is
//! forgotten). Datagrams sent are at most one per [`MAX_KEYS`] changes, per [`FLUSH_DELAY`]
//! and per [`HEARTBEAT`], to each peer.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use libcolor::mio::Interest;
use libcolor::mio::net::UdpSocket;
use libcolor::{Color, ColorCell, Handle, IoRegistration};
use ring::hmac;

use crate::fs::ObjKey;

/// Keys in one datagram.
pub(crate) const MAX_KEYS: usize = 64;
const MAGIC: &[u8; 4] = b"SFSP";
const VERSION: u8 = 1;
/// magic, version, reserved, key count (u16), sender (u64), sequence (u64), time (u64 ms).
const HEADER: usize = 4 + 1 + 1 + 2 + 8 + 8 + 8;
const TAG: usize = 32;
/// Largest datagram (1088 bytes: below any path MTU, no fragmentation).
pub(crate) const MAX_DATAGRAM: usize = HEADER + MAX_KEYS * 16 + TAG;
/// How long color 0 gathers changed keys before sending them: the delay a client of another
/// instance waits for its INVALIDATE, beyond the network and that instance's color 0.
pub(crate) const FLUSH_DELAY: Duration = Duration::from_millis(2);
/// Interval of the heartbeats that reveal a lost datagram when nothing else is sent.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(1);
/// Largest difference between a datagram's time stamp and the receiver's clock.
pub(crate) const MAX_SKEW: Duration = Duration::from_secs(60);
/// Senders whose last sequence number is remembered.
pub(crate) const MAX_SENDERS: usize = 64;
/// Received batches waiting for color 0.
pub(crate) const MAX_QUEUED: usize = 64;
/// Color of the receiving socket (connection colors count up from 1 and never get here).
const RECEIVE_COLOR: Color = Color(u32::MAX);

/// The channel's key: HMAC-SHA256 of a fixed label under the state directory's handle secret
/// (so the secret itself never keys two different things).
pub(crate) struct PeerKey(hmac::Key);

impl PeerKey {
    pub(crate) fn derive(secret: &[u8]) -> PeerKey {
        let root = hmac::Key::new(hmac::HMAC_SHA256, secret);
        let tag = hmac::sign(&root, b"sfsd peer channel v1");
        PeerKey(hmac::Key::new(hmac::HMAC_SHA256, tag.as_ref()))
    }
}

/// One datagram's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Message {
    pub sender: u64,
    pub seq: u64,
    /// Sender's wall clock, milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// Objects that changed (none: a heartbeat).
    pub keys: Vec<ObjKey>,
}

/// Why a datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reject {
    /// Not the size its key count says, or too large.
    Size,
    /// Not this protocol or version.
    Magic,
    /// The tag does not verify: not from an instance sharing the state directory.
    Tag,
}

/// Encodes and tags `m` (at most [`MAX_KEYS`] keys; more are a bug of the caller).
pub(crate) fn seal(key: &PeerKey, m: &Message) -> Vec<u8> {
    assert!(m.keys.len() <= MAX_KEYS, "a datagram holds {MAX_KEYS} keys");
    let mut b = Vec::with_capacity(HEADER + m.keys.len() * 16 + TAG);
    b.extend_from_slice(MAGIC);
    b.push(VERSION);
    b.push(0);
    b.extend_from_slice(&(m.keys.len() as u16).to_be_bytes());
    b.extend_from_slice(&m.sender.to_be_bytes());
    b.extend_from_slice(&m.seq.to_be_bytes());
    b.extend_from_slice(&m.time_ms.to_be_bytes());
    for (fsid, fileid) in &m.keys {
        b.extend_from_slice(&fsid.to_be_bytes());
        b.extend_from_slice(&fileid.to_be_bytes());
    }
    let tag = hmac::sign(&key.0, &b);
    b.extend_from_slice(tag.as_ref());
    b
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

/// Checks and decodes a datagram. Sizes are checked before the tag is computed, the tag
/// (in constant time) before anything is decoded.
pub(crate) fn open(key: &PeerKey, b: &[u8]) -> Result<Message, Reject> {
    if b.len() < HEADER + TAG || b.len() > MAX_DATAGRAM {
        return Err(Reject::Size);
    }
    if &b[..4] != MAGIC || b[4] != VERSION {
        return Err(Reject::Magic);
    }
    let count = u16::from_be_bytes([b[6], b[7]]) as usize;
    if count > MAX_KEYS || b.len() != HEADER + count * 16 + TAG {
        return Err(Reject::Size);
    }
    let (body, tag) = b.split_at(b.len() - TAG);
    hmac::verify(&key.0, body, tag).map_err(|_| Reject::Tag)?;
    let keys = (0..count)
        .map(|i| {
            let at = HEADER + i * 16;
            (u64_at(b, at), u64_at(b, at + 8))
        })
        .collect();
    Ok(Message {
        sender: u64_at(b, 8),
        seq: u64_at(b, 16),
        time_ms: u64_at(b, 24),
        keys,
    })
}

/// What a receiver makes of an authentic datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// New: act on its keys; `gap`: datagrams before it were lost (or this sender was not
    /// heard from its first datagram on), so invalidate everything.
    Fresh { gap: bool },
    /// Already seen (a replay or a duplicate), or its time stamp is too far from ours.
    Stale,
}

/// The last sequence number accepted from each sender (at most [`MAX_SENDERS`]).
#[derive(Default)]
pub(crate) struct Senders {
    /// sender -> (last sequence number, when it was heard: a counter of accepted datagrams).
    last: HashMap<u64, (u64, u64)>,
    heard: u64,
}

impl Senders {
    /// Whether `m` is new, at our time `now_ms`.
    pub(crate) fn accept(&mut self, m: &Message, now_ms: u64) -> Verdict {
        if now_ms.abs_diff(m.time_ms) > MAX_SKEW.as_millis() as u64 {
            return Verdict::Stale;
        }
        let gap = match self.last.get(&m.sender) {
            Some(&(last, _)) if m.seq <= last => return Verdict::Stale,
            Some(&(last, _)) => m.seq != last + 1,
            None => m.seq != 1,
        };
        if !self.last.contains_key(&m.sender)
            && self.last.len() >= MAX_SENDERS
            && let Some((&oldest, _)) = self.last.iter().min_by_key(|(_, (_, heard))| *heard)
        {
            self.last.remove(&oldest);
        }
        self.heard += 1;
        self.last.insert(m.sender, (m.seq, self.heard));
        Verdict::Fresh { gap }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Color 0's side: changed keys waiting to be sent.
struct Outbox {
    seq: u64,
    pending: Vec<ObjKey>,
    flush_scheduled: bool,
}

/// The receive color's side.
struct Inbox {
    senders: Senders,
    buf: Box<[u8]>,
}

/// The channel of one instance: its socket, the peers it tells, and both sides' state.
pub(crate) struct Peers {
    h: Handle,
    key: PeerKey,
    socket: UdpSocket,
    local: SocketAddr,
    to: Vec<SocketAddr>,
    sender: u64,
    outbox: ColorCell<Outbox>,
    inbox: ColorCell<Inbox>,
    /// Received batches not yet handled by color 0.
    queued: AtomicUsize,
    /// A batch was dropped because color 0 was behind: the next one invalidates everything.
    lost: AtomicBool,
    reg: parking_lot::Mutex<Option<IoRegistration>>,
    pub sent: AtomicU64,
    pub received: AtomicU64,
    pub rejected: AtomicU64,
}

impl Peers {
    /// Binds `listen` and prepares to tell `peers` (the instance's own address among them is
    /// skipped, so every instance may be given the same list).
    pub(crate) fn bind(
        h: &Handle,
        secret: &[u8],
        listen: SocketAddr,
        peers: &[SocketAddr],
    ) -> std::io::Result<Peers> {
        let std_socket = std::net::UdpSocket::bind(listen)?;
        std_socket.set_nonblocking(true)?;
        let local = std_socket.local_addr()?;
        let mut socket = UdpSocket::from_std(std_socket);
        let reg = h.register(&mut socket, Interest::READABLE)?;
        let to = peers.iter().copied().filter(|p| *p != local).collect();
        Ok(Peers {
            h: h.clone(),
            key: PeerKey::derive(secret),
            socket,
            local,
            to,
            sender: rand::random::<u64>(),
            outbox: ColorCell::new(
                h,
                Color::DEFAULT,
                Outbox {
                    seq: 0,
                    pending: Vec::with_capacity(MAX_KEYS),
                    flush_scheduled: false,
                },
            ),
            inbox: ColorCell::new(
                h,
                RECEIVE_COLOR,
                Inbox {
                    senders: Senders::default(),
                    buf: vec![0u8; MAX_DATAGRAM + 1].into_boxed_slice(),
                },
            ),
            queued: AtomicUsize::new(0),
            lost: AtomicBool::new(false),
            reg: parking_lot::Mutex::new(Some(reg)),
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        })
    }

    /// The address peers send to.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Color 0: `key` changed here; the peers will hear of it within [`FLUSH_DELAY`].
    pub(crate) fn changed(self: &Arc<Self>, key: ObjKey) {
        if self.to.is_empty() {
            return;
        }
        let (full, schedule) = self.outbox.with(|o| {
            if !o.pending.contains(&key) {
                o.pending.push(key);
            }
            let schedule = !o.flush_scheduled;
            o.flush_scheduled = true;
            (o.pending.len() >= MAX_KEYS, schedule)
        });
        if full {
            self.flush();
        }
        if schedule {
            let p = self.clone();
            self.h.delaycb(FLUSH_DELAY, Color::DEFAULT, move || {
                p.outbox.with(|o| o.flush_scheduled = false);
                p.flush();
            });
        }
    }

    /// Color 0: sends what is pending (nothing pending: a heartbeat) to every peer.
    fn flush(&self) {
        let datagram = self.outbox.with(|o| {
            o.seq += 1;
            seal(
                &self.key,
                &Message {
                    sender: self.sender,
                    seq: o.seq,
                    time_ms: now_ms(),
                    keys: std::mem::take(&mut o.pending),
                },
            )
        });
        for to in &self.to {
            // Non-blocking: a full socket buffer loses the datagram, which the receiver sees
            // as a gap at the next one.
            match self.socket.send_to(&datagram, *to) {
                Ok(_) => {
                    self.sent.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => tracing::debug!(peer = %to, error = %e, "peer datagram not sent"),
            }
        }
    }

    /// Receive color, readable: every waiting datagram, checked, then the keys to `deliver`
    /// (which takes them to color 0).
    fn receive(self: &Arc<Self>, deliver: &(impl Fn(Batch) + ?Sized)) {
        let (keys, gap) = self.inbox.with(|inbox| {
            let mut keys: Vec<ObjKey> = Vec::new();
            let mut gap = false;
            loop {
                let n = match self.socket.recv_from(&mut inbox.buf) {
                    Ok((n, _)) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        tracing::debug!(error = %e, "peer socket");
                        break;
                    }
                };
                let m = match open(&self.key, &inbox.buf[..n]) {
                    Ok(m) => m,
                    Err(why) => {
                        self.rejected.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(?why, "peer datagram dropped");
                        continue;
                    }
                };
                if m.sender == self.sender {
                    continue;
                }
                match inbox.senders.accept(&m, now_ms()) {
                    Verdict::Stale => {
                        self.rejected.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(sender = m.sender, seq = m.seq, "stale peer datagram");
                    }
                    Verdict::Fresh { gap: g } => {
                        self.received.fetch_add(1, Ordering::Relaxed);
                        gap |= g;
                        if keys.len() + m.keys.len() > MAX_KEYS * 16 {
                            // More than color 0 should take at once: everything instead.
                            gap = true;
                            keys.clear();
                        }
                        if !gap {
                            keys.extend_from_slice(&m.keys);
                        }
                    }
                }
            }
            (keys, gap)
        });
        if keys.is_empty() && !gap {
            return;
        }
        if self.queued.fetch_add(1, Ordering::AcqRel) >= MAX_QUEUED {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            self.lost.store(true, Ordering::Release);
            return;
        }
        deliver(Batch {
            peers: self.clone(),
            keys,
            gap,
        });
    }
}

/// Changes other instances told of, on their way from the receive color to color 0.
pub(crate) struct Batch {
    peers: Arc<Peers>,
    keys: Vec<ObjKey>,
    gap: bool,
}

impl Batch {
    /// Color 0: the objects that changed, and whether every lease must end instead (datagrams
    /// were lost, or a batch was dropped because color 0 was behind).
    pub(crate) fn open(self) -> (Vec<ObjKey>, bool) {
        self.peers.queued.fetch_sub(1, Ordering::AcqRel);
        let everything = self.gap || self.peers.lost.swap(false, Ordering::AcqRel);
        (self.keys, everything)
    }
}

/// Starts receiving (in its own color), each batch of changes handed to `deliver`, and the
/// heartbeats (color 0).
pub(crate) fn start(peers: &Arc<Peers>, deliver: impl Fn(Batch) + Send + Sync + 'static) {
    if let Some(reg) = peers.reg.lock().as_ref() {
        let p = peers.clone();
        reg.on_readable(RECEIVE_COLOR, move || p.receive(&deliver));
    }
    heartbeat(peers.clone());
}

fn heartbeat(p: Arc<Peers>) {
    let h = p.h.clone();
    h.delaycb(HEARTBEAT, Color::DEFAULT, move || {
        if p.h.is_stopping() {
            return;
        }
        if !p.to.is_empty() {
            p.flush();
        }
        heartbeat(p);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(seq: u64, keys: Vec<ObjKey>) -> Message {
        Message {
            sender: 7,
            seq,
            time_ms: 1_000_000,
            keys,
        }
    }

    #[test]
    fn sealed_opens_and_every_tamper_is_caught() {
        let k = PeerKey::derive(b"secret");
        let m = msg(3, vec![(1, 2), (3, u64::MAX)]);
        let b = seal(&k, &m);
        assert_eq!(open(&k, &b), Ok(m.clone()));
        for i in 0..b.len() {
            let mut t = b.clone();
            t[i] ^= 1;
            assert!(open(&k, &t).is_err(), "flip at {i} accepted");
        }
        assert_eq!(open(&PeerKey::derive(b"other"), &b), Err(Reject::Tag));
        assert_eq!(open(&k, &b[..b.len() - 1]), Err(Reject::Size));
        assert_eq!(open(&k, &[]), Err(Reject::Size));
        assert_eq!(open(&k, &vec![0u8; MAX_DATAGRAM + 1]), Err(Reject::Size));
        let full = seal(&k, &msg(1, vec![(9, 9); MAX_KEYS]));
        assert_eq!(full.len(), MAX_DATAGRAM);
        assert!(open(&k, &full).is_ok());
        // A key count that promises more than the datagram holds.
        let mut lying = b.clone();
        lying[7] = 200;
        assert_eq!(open(&k, &lying), Err(Reject::Size));
    }

    #[test]
    fn replays_are_stale_and_gaps_are_seen() {
        let mut s = Senders::default();
        let now = 1_000_000;
        assert_eq!(
            s.accept(&msg(1, vec![]), now),
            Verdict::Fresh { gap: false }
        );
        assert_eq!(s.accept(&msg(1, vec![]), now), Verdict::Stale);
        assert_eq!(
            s.accept(&msg(2, vec![]), now),
            Verdict::Fresh { gap: false }
        );
        assert_eq!(s.accept(&msg(5, vec![]), now), Verdict::Fresh { gap: true });
        assert_eq!(s.accept(&msg(4, vec![]), now), Verdict::Stale);
        // Too far from our clock, either way.
        let skew = MAX_SKEW.as_millis() as u64 + 1;
        assert_eq!(s.accept(&msg(6, vec![]), now + skew), Verdict::Stale);
        assert_eq!(s.accept(&msg(6, vec![]), now - skew), Verdict::Stale);
        // A sender first heard after its first datagram: something may have been missed.
        let other = Message {
            sender: 8,
            ..msg(3, vec![])
        };
        assert_eq!(s.accept(&other, now), Verdict::Fresh { gap: true });
    }

    #[test]
    fn senders_are_bounded() {
        let mut s = Senders::default();
        for sender in 0..(MAX_SENDERS as u64 * 3) {
            let m = Message {
                sender,
                ..msg(1, vec![])
            };
            assert_eq!(s.accept(&m, 1_000_000), Verdict::Fresh { gap: false });
        }
        assert_eq!(s.last.len(), MAX_SENDERS);
    }
}
