//! One regression test per defect found in the review of the previous scheduler (issue 10).
//! Each was run against that code (commit f721dad) and failed there; see the README.
//! They use only the public API that both versions share.

mod common;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use libcolor::mio::Interest;
use libcolor::mio::net::UnixStream;
use libcolor::{Color, Handle, IoRegistration, QueueMode, Runtime};

fn spin_for(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// Two socket pairs, each with a byte waiting, so one poll reports both edges.
fn two_ready_pairs() -> Vec<(UnixStream, UnixStream)> {
    (0..2)
        .map(|_| {
            let (a, mut b) = UnixStream::pair().unwrap();
            b.write_all(b"x").unwrap();
            (a, b)
        })
        .collect()
}

type Regs = Arc<Mutex<Vec<Option<IoRegistration>>>>;
type Sockets = Arc<Vec<Mutex<UnixStream>>>;

fn drain(sock: &Mutex<UnixStream>) {
    let mut buf = [0u8; 64];
    while let Ok(n) = sock.lock().unwrap().read(&mut buf) {
        if n == 0 {
            break;
        }
    }
}

/// Defect: a readiness task queued in color 0 ran the slot's callback as color 0 even after
/// the slot was re-armed in color 7, overlapping a color-7 callback running elsewhere.
#[test]
fn an_io_callback_re_armed_in_another_color_runs_in_that_color() {
    for (name, builder) in [
        ("mp2", Runtime::builder().workers(2)),
        ("mp4", Runtime::builder().workers(4)),
    ] {
        let busy7 = Arc::new(AtomicBool::new(false));
        let started7 = Arc::new(AtomicBool::new(false));
        let overlaps = Arc::new(AtomicUsize::new(0));
        let ran = Arc::new(AtomicBool::new(false));
        let (b7, s7, ov, rn) = (
            busy7.clone(),
            started7.clone(),
            overlaps.clone(),
            ran.clone(),
        );
        let pairs = two_ready_pairs();
        let mut peers = Vec::new();
        common::run_bounded(name, builder, Duration::from_secs(20), move |h| {
            let regs: Regs = Arc::new(Mutex::new(Vec::new()));
            let mut socks = Vec::new();
            for (mut a, b) in pairs {
                let reg = h.register(&mut a, Interest::READABLE).unwrap();
                regs.lock().unwrap().push(Some(reg));
                socks.push(Mutex::new(a));
                peers.push(b);
            }
            let socks: Sockets = Arc::new(socks);
            // A long color-7 callback, running while the color-0 readiness task waits.
            let (b7c, s7c) = (b7.clone(), s7.clone());
            h.cpucb(Color(7), move || {
                b7c.store(true, SeqCst);
                s7c.store(true, SeqCst);
                spin_for(Duration::from_millis(300));
                b7c.store(false, SeqCst);
            });
            let first = Arc::new(AtomicBool::new(false));
            for me in 0..2usize {
                let other = 1 - me;
                let (regs2, socks2, first) = (regs.clone(), socks.clone(), first.clone());
                let (b7, s7, ov, rn, h2) =
                    (b7.clone(), s7.clone(), ov.clone(), rn.clone(), h.clone());
                let reg = regs.lock().unwrap()[me].take().unwrap();
                reg.on_readable(Color::DEFAULT, move || {
                    drain(&socks2[me]);
                    if first.swap(true, SeqCst) {
                        return;
                    }
                    // Let color 7 get going on another worker, then move the other slot to
                    // color 7 while its readiness task is queued in color 0.
                    let deadline = Instant::now() + Duration::from_secs(5);
                    while !s7.load(SeqCst) && Instant::now() < deadline {
                        std::hint::spin_loop();
                    }
                    let (b7, ov, rn, h3, socks3) = (
                        b7.clone(),
                        ov.clone(),
                        rn.clone(),
                        h2.clone(),
                        socks2.clone(),
                    );
                    let guard = regs2.lock().unwrap();
                    let other_reg = guard[other].as_ref().unwrap();
                    other_reg.on_readable(Color(7), move || {
                        if b7.load(SeqCst) {
                            ov.fetch_add(1, SeqCst);
                        }
                        drain(&socks3[other]);
                        if !rn.swap(true, SeqCst) {
                            h3.stop();
                        }
                    });
                });
                regs.lock().unwrap()[me] = Some(reg);
            }
            // Keep the registrations and peers alive until the runtime stops.
            let keep = (regs, std::mem::take(&mut peers));
            h.delaycb(Duration::from_secs(3600), Color(99), move || drop(keep));
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            overlaps.load(SeqCst),
            0,
            "{name}: a color-7 I/O callback ran while another color-7 callback ran"
        );
        assert!(ran.load(SeqCst), "{name}: the re-armed callback never ran");
    }
}

/// Defect: a queued readiness task that found its slot cleared (a backpressure pause) erased
/// the edge, so the next `on_readable` waited for an edge mio never repeats.
#[test]
fn an_edge_whose_task_found_the_slot_cleared_is_kept_for_the_next_arm() {
    for (name, builder) in common::configurations() {
        let ran = Arc::new(AtomicBool::new(false));
        let rn = ran.clone();
        let pairs = two_ready_pairs();
        let result = common::run_bounded(name, builder, Duration::from_secs(5), move |h| {
            let regs: Regs = Arc::new(Mutex::new(Vec::new()));
            let mut socks = Vec::new();
            let mut peers = Vec::new();
            for (mut a, b) in pairs {
                let reg = h.register(&mut a, Interest::READABLE).unwrap();
                regs.lock().unwrap().push(Some(reg));
                socks.push(Mutex::new(a));
                peers.push(b);
            }
            let socks: Sockets = Arc::new(socks);
            let first = Arc::new(AtomicBool::new(false));
            for me in 0..2usize {
                let other = 1 - me;
                let (regs2, socks2, first, rn, h2) = (
                    regs.clone(),
                    socks.clone(),
                    first.clone(),
                    rn.clone(),
                    h.clone(),
                );
                let reg = regs.lock().unwrap()[me].take().unwrap();
                reg.on_readable(Color::DEFAULT, move || {
                    drain(&socks2[me]);
                    if first.swap(true, SeqCst) {
                        return;
                    }
                    // Pause the other slot (its task is queued behind this one), and re-arm
                    // it later. Its byte is still unread: the edge must not be lost.
                    regs2.lock().unwrap()[other]
                        .as_ref()
                        .unwrap()
                        .clear_readable();
                    let (regs3, socks3, rn, h3) =
                        (regs2.clone(), socks2.clone(), rn.clone(), h2.clone());
                    h2.delaycb(Duration::from_millis(30), Color::DEFAULT, move || {
                        let (socks4, rn2, h4) = (socks3.clone(), rn.clone(), h3.clone());
                        regs3.lock().unwrap()[other].as_ref().unwrap().on_readable(
                            Color(3),
                            move || {
                                drain(&socks4[other]);
                                rn2.store(true, SeqCst);
                                h4.stop();
                            },
                        );
                    });
                });
                regs.lock().unwrap()[me] = Some(reg);
            }
            let keep = (regs, peers);
            // Give up after a while (the assertion below then fails) instead of hanging.
            let h2 = h.clone();
            h.delaycb(Duration::from_secs(2), Color(99), move || {
                drop(keep);
                h2.stop();
            });
        });
        result.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(ran.load(SeqCst), "{name}: the paused slot's edge was lost");
    }
}

/// Defect: the pick scanned the whole queue when fewer than 4 colors were queued, so a
/// backlog in a few colors drained in O(n^2).
#[test]
fn a_long_backlog_in_few_colors_drains_in_linear_time() {
    for (name, builder) in [
        ("uni", Runtime::builder().uniprocessor()),
        ("mp2", Runtime::builder().workers(2)),
    ] {
        let n = 60_000u64;
        let done = Arc::new(AtomicU64::new(0));
        let d = done.clone();
        let started = Instant::now();
        common::run_bounded(name, builder, Duration::from_secs(60), move |h| {
            for i in 0..n {
                let (d, h2) = (d.clone(), h.clone());
                h.cpucb(Color(1 + (i % 2) as u32), move || {
                    if d.fetch_add(1, SeqCst) + 1 == n {
                        h2.stop();
                    }
                });
            }
        })
        .unwrap();
        let took = started.elapsed();
        assert_eq!(done.load(SeqCst), n);
        assert!(
            took < Duration::from_secs(8),
            "{name}: {n} callbacks took {took:?}"
        );
    }
}

/// Defect: a color that keeps re-posting itself starved the poller, and with it timers, I/O
/// and work posted from other threads (the poller was a color-0 task behind the cpucb lane).
#[test]
fn a_self_rescheduling_color_starves_neither_timers_nor_io_nor_remote_posts() {
    for (name, builder) in common::configurations() {
        let got = Arc::new(Mutex::new(Vec::<&'static str>::new()));
        let g = got.clone();
        let (mut a, mut b) = UnixStream::pair().unwrap();
        common::run_bounded(name, builder, Duration::from_secs(20), move |h| {
            fn forever(h: Handle, color: Color) {
                let h2 = h.clone();
                h.cpucb(color, move || {
                    if !h2.is_stopping() {
                        forever(h2.clone(), color)
                    }
                });
            }
            forever(h.clone(), Color::DEFAULT);
            forever(h.clone(), Color(1));
            let done = {
                let (g, h) = (g.clone(), h.clone());
                move |what: &'static str| {
                    let mut g = g.lock().unwrap();
                    g.push(what);
                    if g.len() == 3 {
                        h.stop();
                    }
                }
            };
            let d = done.clone();
            h.delaycb(Duration::from_millis(20), Color(2), move || d("timer"));
            let reg = h.register(&mut a, Interest::READABLE).unwrap();
            let d = done.clone();
            let fired = AtomicBool::new(false);
            reg.on_readable(Color::DEFAULT, move || {
                if !fired.swap(true, SeqCst) {
                    d("io");
                }
            });
            let keep = Mutex::new(Some((reg, a)));
            h.delaycb(Duration::from_secs(3600), Color(9), move || drop(keep));
            let (d, h2) = (done.clone(), h.clone());
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(40));
                b.write_all(b"x").unwrap();
                h2.cpucb(Color(3), move || d("remote"));
                std::thread::sleep(Duration::from_secs(30));
                drop(b);
            });
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut got = got.lock().unwrap().clone();
        got.sort();
        assert_eq!(got, vec!["io", "remote", "timer"], "{name}");
    }
}

/// Defect: a thief looked only at the deepest queue and parked if nothing there was
/// stealable (its color was running), leaving a stealable color on another queue waiting.
#[test]
fn an_idle_worker_steals_from_any_queue_not_only_the_deepest() {
    let latency = Arc::new(Mutex::new(None));
    let lat = latency.clone();
    common::run_bounded(
        "mp3",
        Runtime::builder().workers(3),
        Duration::from_secs(20),
        move |h| {
            let h = h.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100)); // every worker idle
                // Color 1 (worker 1): a deep queue of one running color: nothing stealable.
                for _ in 0..6 {
                    h.cpucb(Color(1), || spin_for(Duration::from_millis(100)));
                }
                // Color 2 (worker 2): one long callback, and color 5 (worker 2 too) behind it.
                h.cpucb(Color(2), || spin_for(Duration::from_millis(600)));
                std::thread::sleep(Duration::from_millis(10));
                let posted = Instant::now();
                let (lat, h2) = (lat.clone(), h.clone());
                h.cpucb(Color(5), move || {
                    *lat.lock().unwrap() = Some(posted.elapsed());
                });
                std::thread::sleep(Duration::from_millis(700));
                let h3 = h2.clone();
                h2.cpucb(Color(1), move || h3.stop());
            });
        },
    )
    .unwrap();
    let latency = latency.lock().unwrap().expect("color 5 ran");
    assert!(
        latency < Duration::from_millis(300),
        "color 5 waited {latency:?} behind a long callback while a worker idled"
    );
}

/// Defect: a single queued callback behind a long one was never stolen (the steal threshold
/// was two), and the idle poller blocked in epoll meanwhile.
#[test]
fn a_single_color_queued_behind_a_long_callback_is_stolen() {
    let latency = Arc::new(Mutex::new(None));
    let lat = latency.clone();
    common::run_bounded(
        "mp2",
        Runtime::builder().workers(2),
        Duration::from_secs(20),
        move |h| {
            let h = h.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                h.cpucb(Color(1), || spin_for(Duration::from_millis(600)));
                std::thread::sleep(Duration::from_millis(20));
                let posted = Instant::now();
                let (lat, h2) = (lat.clone(), h.clone());
                h.cpucb(Color(3), move || {
                    *lat.lock().unwrap() = Some(posted.elapsed());
                });
                std::thread::sleep(Duration::from_millis(650));
                let h3 = h2.clone();
                h2.cpucb(Color(0), move || h3.stop());
            });
        },
    )
    .unwrap();
    let latency = latency.lock().unwrap().expect("color 3 ran");
    assert!(
        latency < Duration::from_millis(300),
        "color 3 waited {latency:?} while the other worker idled"
    );
}

fn voluntary_switches() -> i64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage fills the struct on success; RUSAGE_SELF is always valid.
    unsafe {
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()), 0);
        usage.assume_init().ru_nvcsw
    }
}

/// Defect: with the shared queue, an idle worker whose queue held only callbacks of a color
/// running elsewhere spun: it took the poller task (never blocking, since the queue was not
/// empty) and re-queued it, round after round, while one color ran. Nor may idle workers be
/// woken and re-parked per callback (a wake storm).
#[test]
fn the_shared_queue_does_not_spin_idle_workers_while_one_color_runs() {
    let n = 20_000u64;
    let before = voluntary_switches();
    let stats = common::run_bounded(
        "shared3",
        Runtime::builder().workers(3).queue_mode(QueueMode::Shared),
        Duration::from_secs(30),
        move |h| {
            fn chain(h: Handle, left: u64) {
                let h2 = h.clone();
                h.cpucb(Color(4), move || {
                    if left == 0 {
                        h2.stop()
                    } else {
                        chain(h2.clone(), left - 1)
                    }
                });
            }
            chain(h.clone(), n);
        },
    )
    .unwrap();
    let switches = voluntary_switches() - before;
    let polls: u64 = stats.workers.iter().map(|w| w.polls).sum();
    assert!(
        polls < n / 10,
        "{polls} poll turns for a {n}-callback chain: idle workers spin"
    );
    assert!(
        switches < (n / 10) as i64,
        "{switches} voluntary context switches for a {n}-callback chain"
    );
}

/// Defect: helper jobs still queued when the runtime stopped were run during shutdown.
#[test]
fn helper_jobs_queued_at_stop_are_dropped_not_run() {
    let ran_late = Arc::new(AtomicUsize::new(0));
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let rl = ran_late.clone();
    let rt = Runtime::builder().workers(1).helpers(1).build().unwrap();
    let h = rt.handle();
    h.blocking(
        Color(1),
        move || {
            let _ = release_rx.recv_timeout(Duration::from_secs(5));
        },
        |_| {},
    )
    .unwrap();
    for _ in 0..5 {
        let rl = rl.clone();
        h.blocking(Color(1), move || rl.fetch_add(1, SeqCst), |_| {})
            .unwrap();
    }
    h.stop();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        let _ = release_tx.send(());
    });
    rt.run().unwrap();
    assert_eq!(
        ran_late.load(SeqCst),
        0,
        "blocking jobs ran after the runtime stopped"
    );
}

/// Defect: the uniprocessor loop cleared its inbox flag after releasing the inbox lock, so a
/// post from another thread landing in between was not noticed and the loop blocked in poll
/// with that work queued. Two producers post in bursts and wait for their last callback; a
/// lost post shows up as a wait that times out.
#[test]
fn uniprocessor_never_sleeps_on_a_post_from_another_thread() {
    let stalls = Arc::new(AtomicUsize::new(0));
    let st = stalls.clone();
    common::run_bounded(
        "uni",
        Runtime::builder().uniprocessor(),
        Duration::from_secs(60),
        move |h| {
            let h = h.clone();
            std::thread::spawn(move || {
                let producers: Vec<_> = (0..2)
                    .map(|p| {
                        let (h, st) = (h.clone(), st.clone());
                        std::thread::spawn(move || {
                            let deadline = Instant::now() + Duration::from_millis(1500);
                            while Instant::now() < deadline {
                                let (tx, rx) = std::sync::mpsc::channel();
                                for i in 0..3 {
                                    let tx = tx.clone();
                                    h.cpucb(Color(p), move || {
                                        if i == 2 {
                                            let _ = tx.send(());
                                        }
                                    });
                                }
                                if rx.recv_timeout(Duration::from_millis(500)).is_err() {
                                    st.fetch_add(1, SeqCst);
                                    return;
                                }
                            }
                        })
                    })
                    .collect();
                for p in producers {
                    let _ = p.join();
                }
                h.stop();
            });
        },
    )
    .unwrap();
    assert_eq!(stalls.load(SeqCst), 0, "a posted callback was never run");
}
