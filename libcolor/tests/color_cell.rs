//! `ColorCell`: state reachable only from callbacks of its color, on its runtime.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use libcolor::{Color, ColorCell, Error, RunningColor, Runtime, WrongColor};

const LIMIT: Duration = Duration::from_secs(30);

/// A plain counter in a cell, bumped by thousands of callbacks posted from several threads
/// and run by several workers: no update is lost without any lock.
#[test]
fn a_cell_is_mutated_without_locks_by_its_colors_callbacks() {
    for (name, builder) in common::configurations() {
        let total = 4 * 1000;
        let result = Arc::new(Mutex::new(None));
        let res = result.clone();
        common::run_bounded(name, builder, LIMIT, move |h| {
            let cell = Arc::new(ColorCell::new(h, Color(3), (0u64, 0u64)));
            let ran = Arc::new(AtomicUsize::new(0));
            for p in 0..4 {
                let (h, cell, ran, res) = (h.clone(), cell.clone(), ran.clone(), res.clone());
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        let (cell, ran, res, h2) =
                            (cell.clone(), ran.clone(), res.clone(), h.clone());
                        h.cpucb(Color(3), move || {
                            let value = cell.with(|(count, sum)| {
                                // A non-atomic read-modify-write: a lost update if two ran at once.
                                let seen = *count;
                                std::hint::black_box(&seen);
                                *count = seen + 1;
                                *sum += p;
                                *count
                            });
                            if ran.fetch_add(1, SeqCst) + 1 == total {
                                *res.lock().unwrap() = Some(value);
                                h2.stop();
                            }
                        });
                    }
                });
            }
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(*result.lock().unwrap(), Some(total as u64), "{name}");
    }
}

#[test]
fn access_from_anywhere_else_is_refused() {
    let rt = Runtime::builder().workers(2).helpers(1).build().unwrap();
    let h = rt.handle();
    let cell = Arc::new(ColorCell::new(&h, Color(5), 1u32));
    // Outside any callback.
    assert_eq!(
        cell.try_with(|v| *v),
        Err(WrongColor {
            owner: Color(5),
            running: RunningColor::None
        })
    );
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let (c, o) = (cell.clone(), outcomes.clone());
    // From another color.
    h.cpucb(Color(6), move || {
        o.lock().unwrap().push(("color 6", c.try_with(|v| *v)))
    });
    // From a helper thread running a blocking job for the right color.
    let (c, o) = (cell.clone(), outcomes.clone());
    h.blocking(
        Color(5),
        move || c.try_with(|v| *v),
        move |r| o.lock().unwrap().push(("helper", r)),
    )
    .unwrap();
    // A same-numbered color of another runtime.
    let other = Runtime::builder().uniprocessor().build().unwrap();
    let oh = other.handle();
    let (c, o, oh2) = (cell.clone(), outcomes.clone(), oh.clone());
    oh.cpucb(Color(5), move || {
        o.lock()
            .unwrap()
            .push(("other runtime", c.try_with(|v| *v)));
        oh2.stop();
    });
    other.run().unwrap();
    // Re-entrant access from its own color, then the right access.
    let (c, o, h2) = (cell.clone(), outcomes.clone(), h.clone());
    h.delaycb(Duration::from_millis(50), Color(5), move || {
        let inner = c.with(|_| c.try_with(|v| *v));
        o.lock().unwrap().push(("re-entrant", inner));
        o.lock().unwrap().push(("own color", c.try_with(|v| *v)));
        h2.stop();
    });
    rt.run().unwrap();
    let mut outcomes = outcomes.lock().unwrap().clone();
    outcomes.sort_by_key(|(what, _)| *what);
    let err = |running| {
        Err(WrongColor {
            owner: Color(5),
            running,
        })
    };
    assert_eq!(
        outcomes,
        vec![
            ("color 6", err(RunningColor::Color(Color(6)))),
            ("helper", err(RunningColor::None)),
            ("other runtime", err(RunningColor::None)),
            ("own color", Ok(1)),
            ("re-entrant", err(RunningColor::Reentrant)),
        ]
    );
}

#[test]
fn with_from_the_wrong_color_panics_with_a_clear_message() {
    let result = common::run_bounded("mp2", Runtime::builder().workers(2), LIMIT, |h| {
        let cell = ColorCell::new(h, Color(1), ());
        h.cpucb(Color(2), move || cell.with(|_| ()));
    });
    match result {
        Err(Error::CallbackPanicked { color, message }) => {
            assert_eq!(color, Color(2));
            assert_eq!(
                message,
                "ColorCell of color 1 accessed from a callback of color 2"
            );
        }
        other => panic!("expected a panic error, got {other:?}"),
    }
}

#[test]
fn io_callbacks_reach_their_colors_cell() {
    use libcolor::mio::Interest;
    use libcolor::mio::net::UnixStream;
    use std::io::{Read, Write};
    let got = Arc::new(Mutex::new(None));
    let g = got.clone();
    common::run_bounded("mp2", Runtime::builder().workers(2), LIMIT, move |h| {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        b.write_all(b"hello").unwrap();
        let reg = h.register(&mut a, Interest::READABLE).unwrap();
        let cell = ColorCell::new(h, Color(9), Vec::new());
        let h2 = h.clone();
        let keep = Mutex::new(Some(b));
        reg.on_readable(Color(9), move || {
            let _ = &keep;
            let mut buf = [0u8; 16];
            let n = a.read(&mut buf).unwrap_or(0);
            cell.with(|v| v.extend_from_slice(&buf[..n]));
            *g.lock().unwrap() = Some(cell.with(|v| v.clone()));
            h2.stop();
        });
        let keep = Mutex::new(Some(reg));
        h.delaycb(Duration::from_secs(3600), Color(1), move || drop(keep));
    })
    .unwrap();
    assert_eq!(got.lock().unwrap().as_deref(), Some(&b"hello"[..]));
}
