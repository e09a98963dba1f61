//! How many bytes a bulk transfer keeps in flight: sized to the path as it goes.
//!
//! One stream moves at most (bytes in flight) / (round-trip time). A fixed window that fills a
//! LAN leaves a long link mostly idle (8 MiB over 100 ms is 84 MB/s, whatever the link), and one
//! that fills a 1 Gbit/s, 100 ms link queues tens of megabytes ahead of every other request on
//! a LAN. So the window starts at [`super::Options::window_bytes`] and, as TCP's receive
//! autotuning does, grows while that makes the transfer faster: every round (the time one
//! window's worth of bytes takes to arrive, about one round trip when the window is what
//! limits) it doubles, as long as each round's rate beats the last by [`RISE`]. When a doubling
//! buys nothing, the window goes back to the size that reached that rate and stays: the link,
//! the socket buffers or the disk are the limit now, and a larger window would only add delay.
//! It never passes [`super::Options::window_max_bytes`] (memory: each byte in flight is a byte
//! of buffer at one end or the other).

use std::time::{Duration, Instant};

/// How much faster a round must be than the last for the window to keep growing.
const RISE: f64 = 1.2;

/// A round shorter than this is not timed: on a fast path, the clock's and the scheduler's
/// noise would decide the rate.
const MIN_ROUND: Duration = Duration::from_millis(2);

/// The bytes-in-flight target of one bulk transfer.
#[derive(Debug)]
pub(super) struct Window {
    bytes: u64,
    max: u64,
    /// Still doubling (until a round's rate stops rising).
    growing: bool,
    round_start: Option<Instant>,
    round_bytes: u64,
    /// The best round's rate so far, in bytes per second.
    best_rate: f64,
}

impl Window {
    /// A window of `initial` bytes that may grow to `max`.
    pub(super) fn new(initial: u64, max: u64) -> Window {
        let initial = initial.max(1);
        Window {
            bytes: initial,
            max: max.max(initial),
            growing: true,
            round_start: None,
            round_bytes: 0,
            best_rate: 0.0,
        }
    }

    /// Bytes to keep in flight now.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Requests of `chunk` bytes to keep in flight now: at least two (so the stream never
    /// waits for a reply to send the next request), at most `max_requests`.
    pub(super) fn requests(&self, chunk: u64, max_requests: usize) -> usize {
        let by_bytes = usize::try_from(self.bytes / chunk.max(1)).unwrap_or(usize::MAX);
        by_bytes.max(2).min(max_requests.max(1))
    }

    /// The transfer is starting (or starting again after a pause): time rounds from `now`.
    pub(super) fn start(&mut self, now: Instant) {
        self.round_start = Some(now);
        self.round_bytes = 0;
    }

    /// `n` more bytes arrived (or were acknowledged) at `now`.
    pub(super) fn delivered(&mut self, n: u64, now: Instant) {
        let Some(start) = self.round_start else {
            return self.start(now);
        };
        self.round_bytes += n;
        if !self.growing || self.round_bytes < self.bytes {
            return;
        }
        let elapsed = now.saturating_duration_since(start);
        if elapsed < MIN_ROUND {
            // Too fast to time: the window is not what limits this transfer.
            self.growing = false;
            return;
        }
        let rate = self.round_bytes as f64 / elapsed.as_secs_f64();
        if rate > self.best_rate * RISE {
            self.best_rate = rate;
            if self.bytes >= self.max {
                self.growing = false;
            } else {
                self.bytes = (self.bytes * 2).min(self.max);
            }
        } else {
            // Doubling did not pay: back to the size that reached the best rate.
            self.bytes = (self.bytes / 2).max(1);
            self.growing = false;
        }
        self.start(now);
    }
}

/// The largest window the machine can afford: `configured`, or an eighth of the memory
/// available now if that is less (never under `floor`).
pub(super) fn affordable(configured: u64, floor: u64) -> u64 {
    let available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| mem_available(&s));
    match available {
        Some(bytes) => configured.min(bytes / 8).max(floor),
        None => configured.max(floor),
    }
}

/// `MemAvailable` of /proc/meminfo, in bytes.
fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// Feeds a transfer through `w` over a path of `rtt` where at most `cap` bytes per second
    /// get through: each round delivers the window (or what the cap allows) in one round trip.
    fn run(w: &mut Window, rtt: Duration, cap: f64, rounds: usize) {
        let mut now = Instant::now();
        w.start(now);
        for _ in 0..rounds {
            let by_window = w.bytes() as f64 / rtt.as_secs_f64();
            let rate = by_window.min(cap);
            let bytes = w.bytes();
            now += Duration::from_secs_f64(bytes as f64 / rate);
            // Delivered in four pieces, as replies arrive.
            for _ in 0..4 {
                w.delivered(bytes / 4, now);
            }
        }
    }

    #[test]
    fn grows_until_the_link_is_full_then_stops() {
        // 1 Gbit/s at 100 ms: the path holds 12.5 MB; 8 MiB alone would give 84 MB/s.
        let mut w = Window::new(8 * MIB, 64 * MIB);
        run(&mut w, Duration::from_millis(100), 125e6, 12);
        assert_eq!(w.bytes(), 16 * MIB, "16 MiB fills 12.5 MB; 32 buys nothing");
        assert!(!w.growing);
    }

    #[test]
    fn stays_put_where_the_window_was_not_the_limit() {
        // A LAN: 8 MiB at 0.2 ms would be 42 GB/s; the link gives 1 GB/s.
        let mut w = Window::new(8 * MIB, 64 * MIB);
        run(&mut w, Duration::from_micros(200), 1e9, 12);
        assert_eq!(w.bytes(), 8 * MIB);
    }

    #[test]
    fn never_passes_its_maximum() {
        // 10 Gbit/s at 200 ms would want 250 MB in flight.
        let mut w = Window::new(8 * MIB, 64 * MIB);
        run(&mut w, Duration::from_millis(200), 1.25e9, 20);
        assert_eq!(w.bytes(), 64 * MIB);
    }

    #[test]
    fn a_round_too_short_to_time_stops_the_growth() {
        let mut w = Window::new(MIB, 64 * MIB);
        let now = Instant::now();
        w.start(now);
        w.delivered(MIB, now + Duration::from_micros(100));
        assert_eq!(w.bytes(), MIB);
        assert!(!w.growing);
    }

    #[test]
    fn requests_follow_the_bytes_within_their_bounds() {
        let w = Window::new(8 * MIB, 64 * MIB);
        assert_eq!(w.requests(MIB, 128), 8);
        assert_eq!(w.requests(64 << 10, 32), 32, "capped by the request limit");
        assert_eq!(w.requests(64 * MIB, 128), 2, "never fewer than two");
        assert_eq!(w.requests(MIB, 1), 1, "the request limit wins");
    }

    #[test]
    fn reads_available_memory() {
        let meminfo = "MemTotal:       24000000 kB\nMemAvailable:   16000000 kB\n";
        assert_eq!(mem_available(meminfo), Some(16_000_000 * 1024));
        assert_eq!(mem_available("MemTotal: 1 kB\n"), None);
        assert!(affordable(64 * MIB, 8 * MIB) >= 8 * MIB);
    }
}
