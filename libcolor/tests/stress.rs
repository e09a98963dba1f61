//! Stress tests that can fail: many callbacks outstanding per color, several producer
//! threads posting while workers run and steal, callbacks posting to other colors, I/O slots
//! re-armed across colors, timers. Every callback checks, with an in-callback flag per color,
//! that no other callback of its color is running, and, with a sequence number per (source,
//! color), that it runs in the order its source posted it. A runtime that let two workers run
//! one color, or reordered a color's FIFO, fails these (checked by breaking the slot state
//! machine on purpose, see the README).

mod common;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use libcolor::mio::Interest;
use libcolor::mio::net::UnixStream;
use libcolor::{COLOR_SLOTS, Color, Handle, IoRegistration};

/// The colors under test: color 0, colors spread over the table, and two that share a slot.
fn colors() -> Vec<Color> {
    vec![
        Color(0),
        Color(1),
        Color(2),
        Color(3),
        Color(7),
        Color(8),
        Color(1 + COLOR_SLOTS as u32),
        Color(501),
        Color(1000),
    ]
}

struct Checker {
    colors: Vec<Color>,
    busy: Vec<AtomicBool>,
    /// Next expected sequence number per (source, color index).
    next: Vec<AtomicU64>,
    /// Next sequence number a color gives its children, per (parent color, child color).
    next_child: Vec<AtomicU64>,
    sources: usize,
    overlaps: AtomicUsize,
    out_of_order: AtomicUsize,
    posted: AtomicUsize,
    ran: AtomicUsize,
}

impl Checker {
    fn new(sources: usize) -> Arc<Checker> {
        let colors = colors();
        let n = colors.len();
        Arc::new(Checker {
            busy: (0..n).map(|_| AtomicBool::new(false)).collect(),
            next: (0..sources * n).map(|_| AtomicU64::new(0)).collect(),
            next_child: (0..n * n).map(|_| AtomicU64::new(0)).collect(),
            colors,
            sources,
            overlaps: AtomicUsize::new(0),
            out_of_order: AtomicUsize::new(0),
            posted: AtomicUsize::new(0),
            ran: AtomicUsize::new(0),
        })
    }

    fn enter(&self, c: usize) {
        if self.busy[c].swap(true, SeqCst) {
            self.overlaps.fetch_add(1, SeqCst);
        }
    }

    fn leave(&self, c: usize) {
        self.busy[c].store(false, SeqCst);
    }

    fn order(&self, source: usize, c: usize, seq: u64) {
        if self.next[source * self.colors.len() + c].swap(seq + 1, SeqCst) != seq {
            self.out_of_order.fetch_add(1, SeqCst);
        }
    }

    fn assert_clean(&self, name: &str) {
        assert_eq!(
            self.overlaps.load(SeqCst),
            0,
            "{name}: same-color callbacks overlapped"
        );
        assert_eq!(
            self.out_of_order.load(SeqCst),
            0,
            "{name}: a color ran out of order"
        );
        assert_eq!(
            self.ran.load(SeqCst),
            self.posted.load(SeqCst),
            "{name}: lost or extra callbacks"
        );
    }
}

/// xorshift: deterministic per-thread pseudo-randomness.
fn next_rand(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn spin(iterations: u64) {
    for i in 0..iterations {
        std::hint::black_box(i);
    }
}

/// Posts a checked callback of color index `c` from `source` with sequence `seq`. One in four
/// callbacks posts a child to another color (its source: its own color, whose callbacks are
/// serial, so the per-(source, color) counter needs no lock).
fn post(h: &Handle, check: &Arc<Checker>, source: usize, c: usize, seq: u64, priority: i8) {
    check.posted.fetch_add(1, SeqCst);
    let (check, h2) = (check.clone(), h.clone());
    let producers = check.sources - check.colors.len();
    h.cpucb_with_priority(check.colors[c], priority, move || {
        check.enter(c);
        check.order(source, c, seq);
        let mut x = seq.wrapping_mul(0x9E37_79B9) | 1;
        spin(next_rand(&mut x) % 1500);
        if seq.is_multiple_of(4) {
            let target = (next_rand(&mut x) % check.colors.len() as u64) as usize;
            let counter = &check.next_child[c * check.colors.len() + target];
            let child_seq = counter.fetch_add(1, SeqCst);
            post(&h2, &check, producers + c, target, child_seq, 0);
        }
        check.leave(c);
        check.ran.fetch_add(1, SeqCst);
    });
}

/// Waits (on a helper thread) until every posted callback ran, then stops the runtime.
fn stop_when_drained(
    h: &Handle,
    check: &Arc<Checker>,
    producers_done: Arc<AtomicUsize>,
    producers: usize,
) {
    let (h, check) = (h.clone(), check.clone());
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(50);
        while Instant::now() < deadline {
            if producers_done.load(SeqCst) == producers
                && check.ran.load(SeqCst) == check.posted.load(SeqCst)
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        h.stop();
    });
}

#[test]
fn many_outstanding_callbacks_per_color_from_several_producers() {
    const PRODUCERS: usize = 3;
    const PER_PRODUCER: u64 = 1500;
    for round in 0..2 {
        for (name, builder) in common::configurations() {
            let name = format!("{name} round {round}");
            let check = Checker::new(PRODUCERS + colors().len());
            let done = Arc::new(AtomicUsize::new(0));
            common::run_bounded(&name, builder, Duration::from_secs(60), |h| {
                for p in 0..PRODUCERS {
                    let (h, check, done) = (h.clone(), check.clone(), done.clone());
                    std::thread::spawn(move || {
                        let mut x = 0x1234_5678 + p as u64;
                        let mut seqs = vec![0u64; check.colors.len()];
                        for i in 0..PER_PRODUCER {
                            let c = (next_rand(&mut x) % check.colors.len() as u64) as usize;
                            let priority = (next_rand(&mut x) % 3) as i8 - 1;
                            post(&h, &check, p, c, seqs[c], priority);
                            seqs[c] += 1;
                            if i.is_multiple_of(200) {
                                std::thread::yield_now();
                            }
                        }
                        done.fetch_add(1, SeqCst);
                    });
                }
                stop_when_drained(h, &check, done.clone(), PRODUCERS);
            })
            .unwrap_or_else(|e| panic!("{name}: {e}"));
            check.assert_clean(&name);
            assert!(
                check.ran.load(SeqCst) >= PRODUCERS * PER_PRODUCER as usize,
                "{name}: stopped early"
            );
        }
    }
}

/// Sockets whose readable slot is re-armed in a different color on every edge, from its own
/// callback and from other colors' callbacks, while producers post cpucbs into the same
/// colors and timers fire into them.
#[test]
fn io_rearmed_across_colors_with_timers_and_producers_keeps_exclusion() {
    /// The timers' source index (producer 1 posts them).
    const TIMER_SOURCE: usize = 1;
    const SOCKETS: usize = 6;
    const WRITES: usize = 400;
    for (name, builder) in common::configurations() {
        let check = Checker::new(2 + colors().len());
        let n_colors = colors().len();
        let bytes_read = Arc::new(AtomicUsize::new(0));
        let timer_order = Arc::new(AtomicUsize::new(0));
        let timers_fired = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let mut pairs: Vec<(UnixStream, UnixStream)> =
            (0..SOCKETS).map(|_| UnixStream::pair().unwrap()).collect();
        let peers: Vec<UnixStream> = pairs
            .iter_mut()
            .map(|(_, b)| {
                let (x, _) = UnixStream::pair().unwrap();
                std::mem::replace(b, x)
            })
            .collect();
        let peers = Arc::new(peers.into_iter().map(Mutex::new).collect::<Vec<_>>());
        let (c2, br, to, tf, dn) = (
            check.clone(),
            bytes_read.clone(),
            timer_order.clone(),
            timers_fired.clone(),
            done.clone(),
        );
        common::run_bounded(name, builder, Duration::from_secs(60), move |h| {
            let check = c2;
            let regs: Arc<Vec<Mutex<Option<IoRegistration>>>> =
                Arc::new((0..SOCKETS).map(|_| Mutex::new(None)).collect());
            let socks: Arc<Vec<Mutex<UnixStream>>> = Arc::new(
                pairs
                    .into_iter()
                    .enumerate()
                    .map(|(i, (mut a, _))| {
                        let reg = h.register(&mut a, Interest::READABLE).unwrap();
                        *regs[i].lock().unwrap() = Some(reg);
                        Mutex::new(a)
                    })
                    .collect(),
            );
            // The readable callback of socket `s`, armed in color index `c`.
            fn arm(
                regs: &Arc<Vec<Mutex<Option<IoRegistration>>>>,
                socks: &Arc<Vec<Mutex<UnixStream>>>,
                check: &Arc<Checker>,
                bytes: &Arc<AtomicUsize>,
                s: usize,
                c: usize,
            ) {
                let (regs2, socks2, check2, bytes2) =
                    (regs.clone(), socks.clone(), check.clone(), bytes.clone());
                let guard = regs[s].lock().unwrap();
                guard
                    .as_ref()
                    .unwrap()
                    .on_readable(check.colors[c], move || {
                        check2.enter(c);
                        let mut buf = [0u8; 256];
                        while let Ok(n) = socks2[s].lock().unwrap().read(&mut buf) {
                            if n == 0 {
                                break;
                            }
                            bytes2.fetch_add(n, SeqCst);
                        }
                        spin(300);
                        check2.leave(c);
                        // Re-arm in the next color, from inside the callback.
                        let next = (c + 1 + s) % check2.colors.len();
                        arm(&regs2, &socks2, &check2, &bytes2, s, next);
                    });
            }
            for s in 0..SOCKETS {
                arm(&regs, &socks, &check, &br, s, s % n_colors);
            }
            // Producer 0: cpucbs into every color; some re-arm a socket from a foreign color.
            {
                let (h, check, regs, socks, br, dn) = (
                    h.clone(),
                    check.clone(),
                    regs.clone(),
                    socks.clone(),
                    br.clone(),
                    dn.clone(),
                );
                std::thread::spawn(move || {
                    let mut x = 77u64;
                    let mut seqs = vec![0u64; n_colors];
                    for i in 0..3000u64 {
                        let c = (next_rand(&mut x) % n_colors as u64) as usize;
                        post(&h, &check, 0, c, seqs[c], 0);
                        seqs[c] += 1;
                        if i.is_multiple_of(50) {
                            let (regs, socks, check2, br) =
                                (regs.clone(), socks.clone(), check.clone(), br.clone());
                            let s = (i / 50) as usize % SOCKETS;
                            let target = (next_rand(&mut x) % n_colors as u64) as usize;
                            check.posted.fetch_add(1, SeqCst);
                            h.cpucb(Color(4242), move || {
                                arm(&regs, &socks, &check2, &br, s, target);
                                check2.ran.fetch_add(1, SeqCst);
                            });
                            std::thread::yield_now();
                        }
                    }
                    dn.fetch_add(1, SeqCst);
                });
            }
            // Producer 1: bytes into the sockets, and timers into the colors with increasing
            // deadlines (one source: per color they must fire in order).
            {
                let (h, check, peers, to, tf, dn) = (
                    h.clone(),
                    check.clone(),
                    peers.clone(),
                    to.clone(),
                    tf.clone(),
                    dn.clone(),
                );
                std::thread::spawn(move || {
                    let start = Instant::now();
                    let mut seqs = vec![0u64; n_colors];
                    for i in 0..WRITES {
                        let _ = peers[i % SOCKETS].lock().unwrap().write_all(&[i as u8]);
                        if i.is_multiple_of(4) {
                            let c = (i / 4) % n_colors;
                            let seq = seqs[c];
                            seqs[c] += 1;
                            let (check, to, tf) = (check.clone(), to.clone(), tf.clone());
                            check.posted.fetch_add(1, SeqCst);
                            h.timecb(
                                start + Duration::from_micros(200 * i as u64),
                                check.colors[c],
                                move || {
                                    check.enter(c);
                                    if check.next[TIMER_SOURCE * check.colors.len() + c]
                                        .swap(seq + 1, SeqCst)
                                        != seq
                                    {
                                        to.fetch_add(1, SeqCst);
                                    }
                                    check.leave(c);
                                    tf.fetch_add(1, SeqCst);
                                    check.ran.fetch_add(1, SeqCst);
                                },
                            );
                        }
                        if i.is_multiple_of(20) {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                    dn.fetch_add(1, SeqCst);
                });
            }
            let keep = (regs, socks);
            let h2 = h.clone();
            h.delaycb(Duration::from_secs(3600), Color(99), move || drop(keep));
            // Stop once everything ran and every byte was read.
            let (check, br) = (check.clone(), br.clone());
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(50);
                while Instant::now() < deadline {
                    if dn.load(SeqCst) == 2
                        && check.ran.load(SeqCst) == check.posted.load(SeqCst)
                        && br.load(SeqCst) == WRITES
                    {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                h2.stop();
            });
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        check.assert_clean(name);
        assert_eq!(bytes_read.load(SeqCst), WRITES, "{name}: bytes lost");
        assert_eq!(
            timer_order.load(SeqCst),
            0,
            "{name}: timers of a color out of order"
        );
        assert_eq!(timers_fired.load(SeqCst), WRITES / 4, "{name}");
    }
}
