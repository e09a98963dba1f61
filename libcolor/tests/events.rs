//! I/O readiness on real sockets, timers, cross-thread scheduling, the helper pool, signals.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use libcolor::mio::Interest;
use libcolor::mio::net::{TcpListener, TcpStream};
use libcolor::{Color, Handle, IoRegistration, Runtime};

const LIMIT: Duration = Duration::from_secs(30);

/// An echo server on libcolor: the listener accepts in color 0, each connection echoes in a
/// color of its own. A plain-threads client checks every byte comes back.
#[test]
fn tcp_echo_with_a_color_per_connection() {
    for (name, builder) in common::configurations() {
        let mut listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let clients = 6;
        let done = Arc::new(AtomicUsize::new(0));
        let done_in_rt = done.clone();
        common::run_bounded(name, builder, LIMIT, move |h| {
            let registration = h.register(&mut listener, Interest::READABLE).unwrap();
            let h2 = h.clone();
            let next_color = AtomicUsize::new(1);
            // The registration must outlive the callback's uses: keep it in a holder that
            // the callback owns.
            let keep: Arc<Mutex<Option<IoRegistration>>> = Arc::new(Mutex::new(None));
            let keep2 = keep.clone();
            registration.on_readable(Color::DEFAULT, move || {
                let _hold = &keep2;
                loop {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            let color = Color(next_color.fetch_add(1, SeqCst) as u32);
                            serve_echo(&h2, stream, color);
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => panic!("accept: {e}"),
                    }
                }
            });
            *keep.lock().unwrap() = Some(registration);
            let h3 = h.clone();
            std::thread::spawn(move || {
                let workers: Vec<_> = (0..clients)
                    .map(|i| {
                        std::thread::spawn(move || {
                            let mut s = std::net::TcpStream::connect(addr).unwrap();
                            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                            let payload: Vec<u8> = (0..200_000u32)
                                .map(|b| (b as u8).wrapping_mul(i + 3))
                                .collect();
                            let mut reader = s.try_clone().unwrap();
                            let expect = payload.clone();
                            let reading = std::thread::spawn(move || {
                                let mut got = vec![0u8; expect.len()];
                                reader.read_exact(&mut got).unwrap();
                                assert!(got == expect, "echo corrupted");
                            });
                            s.write_all(&payload).unwrap();
                            reading.join().unwrap();
                        })
                    })
                    .collect();
                for w in workers {
                    w.join().unwrap();
                }
                done_in_rt.store(clients as usize, SeqCst);
                h3.stop();
            });
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(done.load(SeqCst), clients as usize, "{name}");
    }
}

/// Echoes with a bounded buffer: when the peer does not read, stop reading (backpressure)
/// and wait for writability.
fn serve_echo(h: &Handle, stream: TcpStream, color: Color) {
    struct Conn {
        stream: TcpStream,
        pending: Vec<u8>,
    }
    let conn = Arc::new(Mutex::new(Conn {
        stream,
        pending: Vec::new(),
    }));
    let registration = {
        let mut c = conn.lock().unwrap();
        h.register(&mut c.stream, Interest::READABLE | Interest::WRITABLE)
            .unwrap()
    };
    let registration = Arc::new(registration);
    let pump = {
        let conn = conn.clone();
        let reg = Arc::downgrade(&registration);
        move || {
            let mut c = conn.lock().unwrap();
            let Conn { stream, pending } = &mut *c;
            loop {
                while !pending.is_empty() {
                    match stream.write(pending) {
                        Ok(n) => {
                            pending.drain(..n);
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                        Err(_) => return,
                    }
                }
                let mut buf = [0u8; 16 * 1024];
                match stream.read(&mut buf) {
                    Ok(0) => {
                        if let Some(reg) = reg.upgrade() {
                            reg.clear_readable();
                            reg.clear_writable();
                        }
                        return;
                    }
                    Ok(n) => pending.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                    Err(_) => return,
                }
            }
        }
    };
    let pump2 = pump.clone();
    // The callbacks hold the registration strongly so it lives until they are cleared.
    let hold = registration.clone();
    registration.on_readable(color, move || {
        let _ = &hold;
        pump()
    });
    let hold = registration.clone();
    registration.on_writable(color, move || {
        let _ = &hold;
        pump2()
    });
}

#[test]
fn timers_fire_in_deadline_order_and_cancel() {
    for (name, builder) in common::configurations() {
        let fired = Arc::new(Mutex::new(Vec::new()));
        let fired2 = fired.clone();
        let started = Instant::now();
        common::run_bounded(name, builder, LIMIT, |h| {
            // Absolute deadlines from one instant: a setup thread preempted between two
            // `delaycb` calls would otherwise shift the later deadlines past the earlier ones.
            // One color: timers are one source, so its timers must run in deadline order
            // (set order on ties) however late a loaded machine runs them. (Timers of
            // different colors carry no order guarantee once due.)
            for (ms, tag) in [(60u64, 3u32), (20, 1), (40, 2), (40, 22)] {
                let fired = fired2.clone();
                h.timecb(started + Duration::from_millis(ms), Color(5), move || {
                    fired.lock().unwrap().push((tag, started.elapsed()));
                });
            }
            let fired = fired2.clone();
            let cancelled = h.delaycb(Duration::from_millis(30), Color(9), move || {
                fired.lock().unwrap().push((9, Duration::ZERO));
            });
            assert!(h.cancel_timer(cancelled));
            assert!(!h.cancel_timer(cancelled));
            let h2 = h.clone();
            h.delaycb(Duration::from_millis(120), Color::DEFAULT, move || {
                h2.stop()
            });
        })
        .unwrap();
        let fired = fired.lock().unwrap();
        let tags: Vec<u32> = fired.iter().map(|(t, _)| *t).collect();
        assert_eq!(tags, vec![1, 2, 22, 3], "{name}");
        for (tag, at) in fired.iter() {
            let due = match tag {
                1 => 20,
                2 | 22 => 40,
                _ => 60,
            };
            assert!(
                *at >= Duration::from_millis(due),
                "{name}: tag {tag} early: {at:?}"
            );
        }
    }
}

#[test]
fn work_posted_from_another_thread_wakes_a_sleeping_runtime_promptly() {
    for (name, builder) in common::configurations() {
        let latencies = Arc::new(Mutex::new(Vec::new()));
        let lat = latencies.clone();
        common::run_bounded(name, builder, LIMIT, move |h| {
            let h = h.clone();
            std::thread::spawn(move || {
                for i in 0..20u32 {
                    // Let the runtime go idle (blocked in poll or parked) first.
                    std::thread::sleep(Duration::from_millis(10));
                    let sent = Instant::now();
                    let (tx, rx) = std::sync::mpsc::channel();
                    h.cpucb(Color(i % 3), move || tx.send(sent.elapsed()).unwrap());
                    lat.lock().unwrap().push(rx.recv().unwrap());
                }
                h.stop();
            });
        })
        .unwrap();
        let mut lat = latencies.lock().unwrap().clone();
        lat.sort();
        // Without a waker the callback would wait for a poll timeout (there is none: it would
        // hang). A generous bound keeps the check robust on a loaded machine.
        assert!(
            lat[lat.len() / 2] < Duration::from_millis(50),
            "{name}: {lat:?}"
        );
    }
}

#[test]
fn blocking_calls_complete_as_callbacks_of_the_chosen_color() {
    for (name, builder) in common::configurations() {
        let results = Arc::new(Mutex::new(Vec::new()));
        let res = results.clone();
        common::run_bounded(name, builder.helpers(3), LIMIT, move |h| {
            let remaining = Arc::new(AtomicUsize::new(12));
            for i in 0..12u64 {
                let (res, h2, remaining) = (res.clone(), h.clone(), remaining.clone());
                let worker_thread = std::thread::current().id();
                h.blocking(
                    Color(7),
                    move || {
                        std::thread::sleep(Duration::from_millis(5));
                        assert_ne!(std::thread::current().id(), worker_thread);
                        i * i
                    },
                    move |v| {
                        res.lock().unwrap().push(v);
                        if remaining.fetch_sub(1, SeqCst) == 1 {
                            h2.stop();
                        }
                    },
                )
                .unwrap();
            }
        })
        .unwrap();
        let mut got = results.lock().unwrap().clone();
        got.sort();
        assert_eq!(got, (0..12u64).map(|i| i * i).collect::<Vec<_>>(), "{name}");
    }
}

#[test]
fn a_full_helper_pool_refuses_instead_of_blocking() {
    let rt = Runtime::builder()
        .workers(1)
        .helpers(1)
        .helper_queue(1)
        .build()
        .unwrap();
    let h = rt.handle();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let release_rx = Arc::new(Mutex::new(release_rx));
    let mut refused = 0;
    for _ in 0..5 {
        let rx = release_rx.clone();
        if h.blocking(
            Color(1),
            move || {
                let _ = rx.lock().unwrap().recv();
            },
            |_| {},
        )
        .is_err()
        {
            refused += 1;
        }
    }
    assert!(refused >= 3, "refused only {refused}");
    drop(release_tx);
    h.stop();
    rt.run().unwrap();
}

#[test]
fn signals_arrive_as_callbacks() {
    for (name, builder) in common::configurations() {
        let got = Arc::new(AtomicUsize::new(0));
        let got2 = got.clone();
        common::run_bounded(name, builder, LIMIT, move |h| {
            let h2 = h.clone();
            h.on_signal(signal_hook::consts::SIGUSR1, Color(3), move || {
                got2.fetch_add(1, SeqCst);
                h2.stop();
            })
            .unwrap();
            h.delaycb(Duration::from_millis(20), Color::DEFAULT, || {
                signal_hook::low_level::raise(signal_hook::consts::SIGUSR1).unwrap();
            });
        })
        .unwrap();
        assert!(got.load(SeqCst) >= 1, "{name}");
    }
}
