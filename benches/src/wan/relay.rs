//! The link itself: a user-space relay that copies packets between two file descriptors (the
//! two TUN devices), one reader and one writer thread per direction. Each packet is held
//! back as a real link would: it waits behind the packets before it for the link to
//! serialise them at `rate` (a drop-tail queue of `queue_bytes`: a packet that would find more
//! than that waiting is dropped), then travels for `one_way` (RTT/2) before it is written out.
//!
//! The whole schedule is decided when a packet arrives: the link is busy until `busy_until`,
//! so the bytes still waiting are `(busy_until - now) * rate`, and the packet leaves the queue
//! at `max(now, busy_until) + size / rate` and is delivered `one_way` later. Delivery times
//! are therefore monotonic in each direction and one FIFO per direction is the whole queue;
//! the writer thread only sleeps until the head is due. The relay never reorders.
//!
//! It works on any descriptor where one `read` is one packet (TUN devices; datagram sockets
//! in the tests).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The largest packet read: a TUN MTU of up to 65535 plus a virtio-net header.
const MAX_PACKET: usize = 65536 + 64;
/// How often blocked threads look at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);

/// What the link does to each packet (the same in both directions).
#[derive(Debug, Clone, Copy)]
pub(super) struct LinkShape {
    /// Propagation delay each way (RTT/2).
    pub one_way: Duration,
    /// Link rate in bits per second; 0 for no limit.
    pub rate_bps: u64,
    /// Drop-tail queue: bytes that may wait for the link before new packets are dropped.
    pub queue_bytes: u64,
    /// Bytes at the start of each packet that are not on the wire (a virtio-net header).
    pub header_bytes: usize,
}

impl LinkShape {
    /// Time the link takes to put `bytes` on the wire.
    fn serialisation(&self, bytes: usize) -> Duration {
        if self.rate_bps == 0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(bytes as f64 * 8.0 / self.rate_bps as f64)
    }
}

/// Counters of one direction.
#[derive(Debug, Default)]
pub(super) struct DirectionStats {
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
    pub dropped: AtomicU64,
    /// Writes the far side refused (e.g. a TUN device that is down).
    pub write_errors: AtomicU64,
}

/// A snapshot of [`DirectionStats`].
#[derive(Debug, Default, Clone, Copy, Serialize, Deserialize)]
pub(super) struct Counts {
    pub packets: u64,
    pub bytes: u64,
    pub dropped: u64,
    pub write_errors: u64,
}

impl DirectionStats {
    pub(super) fn snapshot(&self) -> Counts {
        Counts {
            packets: self.packets.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            write_errors: self.write_errors.load(Ordering::Relaxed),
        }
    }
}

/// The queue between a direction's reader and writer: packets with their delivery time.
#[derive(Default)]
struct Fifo {
    packets: Mutex<VecDeque<(Instant, Vec<u8>)>>,
    ready: Condvar,
}

/// A running relay between two descriptors; stops its threads when dropped.
pub(super) struct Relay {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    tids: Arc<Mutex<Vec<u32>>>,
    /// `[a to b, b to a]`.
    pub stats: [Arc<DirectionStats>; 2],
}

impl Relay {
    /// Relays packets read from `a` to `b` and from `b` to `a`, shaped by `shape`.
    pub(super) fn start(a: File, b: File, shape: LinkShape) -> std::io::Result<Relay> {
        let (a, b) = (Arc::new(a), Arc::new(b));
        let stop = Arc::new(AtomicBool::new(false));
        let tids = Arc::new(Mutex::new(Vec::new()));
        let stats = [Arc::default(), Arc::default()];
        let mut threads = Vec::new();
        for (from, to, st, name) in [
            (a.clone(), b.clone(), &stats[0], "a>b"),
            (b, a, &stats[1], "b>a"),
        ] {
            let fifo = Arc::new(Fifo::default());
            let (stop_r, stop_w) = (stop.clone(), stop.clone());
            let (fifo_r, st_r, tids_r) = (fifo.clone(), Arc::clone(st), tids.clone());
            let (st_w, tids_w) = (Arc::clone(st), tids.clone());
            threads.push(
                std::thread::Builder::new()
                    .name(format!("relay-read-{name}"))
                    .spawn(move || {
                        record_tid(&tids_r);
                        read_loop(&from, &fifo_r, shape, &st_r, &stop_r, name);
                    })?,
            );
            threads.push(
                std::thread::Builder::new()
                    .name(format!("relay-write-{name}"))
                    .spawn(move || {
                        record_tid(&tids_w);
                        write_loop(&to, &fifo, &st_w, &stop_w);
                    })?,
            );
        }
        Ok(Relay {
            stop,
            threads,
            tids,
            stats,
        })
    }

    /// CPU time of the relay's threads so far (user and system, from /proc): what the link
    /// costs this machine. It includes the kernel's work inside the relay's writes, which for
    /// a TUN device is the receiving stack's processing of the packet.
    pub(super) fn cpu_times(&self) -> crate::procs::CpuTimes {
        let tids = self.tids.lock().map(|t| t.clone()).unwrap_or_default();
        tids.into_iter()
            .filter_map(crate::procs::thread_cpu_times)
            .sum()
    }

    /// Stops and joins the threads (also done on drop).
    pub(super) fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop();
    }
}

fn record_tid(tids: &Mutex<Vec<u32>>) {
    let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
    if let Ok(mut t) = tids.lock() {
        t.push(tid);
    }
}

/// Whether `fd` has a packet to read within [`STOP_POLL`].
fn readable(fd: &File) -> bool {
    use rustix::event::{PollFd, PollFlags, poll};
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    let timeout = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: STOP_POLL.as_nanos() as i64,
    };
    matches!(poll(&mut fds, Some(&timeout)), Ok(n) if n > 0)
}

fn read_loop(
    from: &File,
    fifo: &Fifo,
    shape: LinkShape,
    stats: &DirectionStats,
    stop: &AtomicBool,
    name: &str,
) {
    let mut buf = vec![0u8; MAX_PACKET];
    let mut busy_until = Instant::now();
    // SFS_BENCH_WAN_TRACE=1 prints every packet: the round trips of a short exchange (such as
    // a connection's start) can be read off the times.
    let trace = std::env::var_os("SFS_BENCH_WAN_TRACE").is_some();
    let t0 = Instant::now();
    while !stop.load(Ordering::Acquire) {
        if !readable(from) {
            continue;
        }
        let n = match (&*from).read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return,
        };
        let now = Instant::now();
        let wire = wire_bytes(&buf[..n], shape.header_bytes);
        if trace {
            eprintln!(
                "[relay] {:10.3} ms {name} {wire} bytes",
                now.duration_since(t0).as_secs_f64() * 1000.0
            );
        }
        match schedule(&mut busy_until, now, wire, shape) {
            None => {
                stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
            Some(deliver) => {
                stats.packets.fetch_add(1, Ordering::Relaxed);
                stats.bytes.fetch_add(wire as u64, Ordering::Relaxed);
                if let Ok(mut q) = fifo.packets.lock() {
                    q.push_back((deliver, buf[..n].to_vec()));
                }
                fifo.ready.notify_one();
            }
        }
    }
}

/// The bytes a packet puts on the wire: with a virtio-net header of `header_bytes` that asks
/// for segmentation (a TSO super-packet), its payload plus the IP and TCP headers of every
/// segment it becomes, so a link carrying 64 KiB super-packets costs what the MTU-sized
/// segments would; otherwise its length less the header.
pub(super) fn wire_bytes(packet: &[u8], header_bytes: usize) -> usize {
    let Some(ip) = packet.get(header_bytes..) else {
        return 0;
    };
    if header_bytes < 6 || packet[1] == 0 {
        return ip.len(); // no header, or gso_type VIRTIO_NET_HDR_GSO_NONE
    }
    let gso_size = u16::from_le_bytes([packet[4], packet[5]]) as usize;
    let headers = match ip.first().map(|b| b >> 4) {
        Some(4) => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            ip.get(ihl + 12).map(|b| ihl + usize::from(b >> 4) * 4)
        }
        Some(6) => ip.get(40 + 12).map(|b| 40 + usize::from(b >> 4) * 4),
        _ => None,
    };
    match headers {
        Some(h) if gso_size > 0 && ip.len() > h => {
            let payload = ip.len() - h;
            payload + payload.div_ceil(gso_size) * h
        }
        _ => ip.len(),
    }
}

/// When a packet of `wire` bytes arriving at `now` is delivered, or `None` if the queue is
/// full (drop-tail). Advances `busy_until`, the time the link finishes the packets accepted.
pub(super) fn schedule(
    busy_until: &mut Instant,
    now: Instant,
    wire: usize,
    shape: LinkShape,
) -> Option<Instant> {
    let waiting = busy_until.saturating_duration_since(now);
    let backlog = waiting.as_secs_f64() * shape.rate_bps as f64 / 8.0;
    if shape.rate_bps > 0 && backlog + wire as f64 > shape.queue_bytes as f64 && backlog > 0.0 {
        return None;
    }
    let start = (*busy_until).max(now);
    *busy_until = start + shape.serialisation(wire);
    Some(*busy_until + shape.one_way)
}

fn write_loop(to: &File, fifo: &Fifo, stats: &DirectionStats, stop: &AtomicBool) {
    let Ok(mut q) = fifo.packets.lock() else {
        return;
    };
    while !stop.load(Ordering::Acquire) {
        let now = Instant::now();
        let wait = match q.front() {
            None => STOP_POLL,
            Some((due, _)) if *due <= now => {
                let (_, packet) = q.pop_front().expect("front exists");
                drop(q);
                if (&*to).write(&packet).is_err() {
                    stats.write_errors.fetch_add(1, Ordering::Relaxed);
                }
                q = match fifo.packets.lock() {
                    Ok(q) => q,
                    Err(_) => return,
                };
                continue;
            }
            Some((due, _)) => (*due - now).min(STOP_POLL),
        };
        q = match fifo.ready.wait_timeout(q, wait) {
            Ok((q, _)) => q,
            Err(_) => return,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;

    fn shape(one_way_ms: u64, rate_bps: u64, queue_bytes: u64) -> LinkShape {
        LinkShape {
            one_way: Duration::from_millis(one_way_ms),
            rate_bps,
            queue_bytes,
            header_bytes: 0,
        }
    }

    #[test]
    fn a_super_packet_costs_the_headers_of_its_segments() {
        // virtio_net_hdr: flags, gso_type TCPV4, hdr_len, gso_size 1448, csum start/offset.
        let mut p = vec![0u8; 10];
        p[1] = 1;
        p[4..6].copy_from_slice(&1448u16.to_le_bytes());
        let mut ip = vec![0u8; 52 + 2896 + 1];
        ip[0] = 0x45; // IPv4, 20-byte header
        ip[20 + 12] = 8 << 4; // TCP header of 32 bytes
        p.extend_from_slice(&ip);
        assert_eq!(wire_bytes(&p, 10), 2897 + 3 * 52, "three segments");
        p[1] = 0;
        assert_eq!(wire_bytes(&p, 10), ip.len(), "not segmented");
        assert_eq!(wire_bytes(&ip, 0), ip.len(), "no header");
    }

    #[test]
    fn the_schedule_serialises_delays_and_drops_at_the_tail() {
        let s = shape(25, 8_000_000, 3000); // 1 byte per microsecond
        let t0 = Instant::now();
        let mut busy = t0;
        let first = schedule(&mut busy, t0, 1000, s).unwrap();
        assert_eq!(first - t0, Duration::from_micros(1000 + 25_000));
        let second = schedule(&mut busy, t0, 1000, s).unwrap();
        assert_eq!(
            second - first,
            Duration::from_micros(1000),
            "waits behind the first"
        );
        // 2000 bytes wait now: one more of 1000 fits in 3000, a second does not.
        assert!(schedule(&mut busy, t0, 1000, s).is_some());
        assert!(schedule(&mut busy, t0, 1000, s).is_none(), "drop-tail");
        // Once the link has drained, packets pass again.
        let later = t0 + Duration::from_millis(10);
        assert_eq!(
            schedule(&mut busy, later, 1000, s).unwrap() - later,
            Duration::from_micros(26_000)
        );
    }

    /// Packets through a real relay arrive no sooner than the one-way delay, and a burst
    /// takes at least its serialisation time at the link rate (lower bounds only: a busy
    /// machine may add any delay).
    #[test]
    fn packets_through_the_relay_are_delayed_and_rate_limited() {
        let (a_outer, a_inner) = UnixDatagram::pair().unwrap();
        let (b_outer, b_inner) = UnixDatagram::pair().unwrap();
        let to_file = |s: UnixDatagram| File::from(std::os::fd::OwnedFd::from(s));
        // 20 ms each way, 8 Mbit/s (1 byte/us), a queue that holds the whole burst.
        let mut relay = Relay::start(
            to_file(a_inner),
            to_file(b_inner),
            shape(20, 8_000_000, 1 << 20),
        )
        .unwrap();
        b_outer
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        a_outer
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();

        // One packet each way: at least 20 ms.
        let t = Instant::now();
        a_outer.send(b"ping").unwrap();
        let mut buf = [0u8; 2000];
        let n = b_outer.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"ping");
        assert!(
            t.elapsed() >= Duration::from_millis(20),
            "{:?}",
            t.elapsed()
        );
        b_outer.send(b"pong").unwrap();
        let n = a_outer.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"pong");
        assert!(
            t.elapsed() >= Duration::from_millis(40),
            "{:?}",
            t.elapsed()
        );

        // 50 packets of 1000 bytes: 50 ms on the wire plus 20 ms of travel, in order.
        let t = Instant::now();
        for i in 0..50u8 {
            a_outer.send(&[i; 1000]).unwrap();
        }
        for i in 0..50u8 {
            let n = b_outer.recv(&mut buf).unwrap();
            assert_eq!(n, 1000);
            assert_eq!(buf[0], i, "in order");
        }
        assert!(
            t.elapsed() >= Duration::from_millis(70),
            "{:?}: faster than 8 Mbit/s plus 20 ms",
            t.elapsed()
        );
        let counts = relay.stats[0].snapshot();
        assert_eq!(counts.packets, 51);
        assert_eq!(counts.dropped, 0);
        assert!(relay.cpu_times().total() < Duration::from_secs(60));
        relay.stop();
    }

    #[test]
    fn a_full_queue_drops() {
        let (a_outer, a_inner) = UnixDatagram::pair().unwrap();
        let (b_outer, b_inner) = UnixDatagram::pair().unwrap();
        let to_file = |s: UnixDatagram| File::from(std::os::fd::OwnedFd::from(s));
        // 80 kbit/s: 100 ms per 1000-byte packet; a queue of 2 packets.
        let relay =
            Relay::start(to_file(a_inner), to_file(b_inner), shape(0, 80_000, 2000)).unwrap();
        for _ in 0..10 {
            a_outer.send(&[0; 1000]).unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while relay.stats[0].snapshot().packets + relay.stats[0].snapshot().dropped < 10 {
            assert!(Instant::now() < deadline, "relay read nothing");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(relay.stats[0].snapshot().dropped >= 1);
        drop(b_outer);
    }
}
