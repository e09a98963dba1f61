//! One epoll per worker: a registration is watched by its worker, yet no event waits behind
//! a long callback of that worker (another worker polls an epoll left unwatched).

mod common;

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use libcolor::mio::Interest;
use libcolor::mio::net::UnixStream;
use libcolor::{Color, IoRegistration, QueueMode, Runtime};

/// How long the callback that holds its worker runs (a seal, a slow metadata operation).
const LONG_CALLBACK: Duration = Duration::from_millis(1500);
/// How soon the event must be served all the same: half of `LONG_CALLBACK`, far above the
/// takeover period (1 ms) plus scheduling noise on a loaded machine (CI runs this beside other
/// tests on two cores).
const SERVED_WITHIN: Duration = Duration::from_millis(750);

/// Registers a socket from inside a long callback (so it goes in that worker's epoll), makes
/// it readable, keeps the worker busy, and returns how long the readable callback took to
/// run.
fn delay_behind_a_long_callback(name: &str, builder: libcolor::Builder) -> Duration {
    let served: Arc<Mutex<Option<Duration>>> = Arc::default();
    let keep: Arc<Mutex<Vec<(IoRegistration, UnixStream)>>> = Arc::default();
    let (served2, keep2) = (served.clone(), keep.clone());
    common::run_bounded(name, builder, Duration::from_secs(20), move |h| {
        let h2 = h.clone();
        h.cpucb(Color(2), move || {
            let (mut a, mut b) = UnixStream::pair().unwrap();
            let reg = h2.register(&mut a, Interest::READABLE).unwrap();
            let written = Instant::now();
            let h3 = h2.clone();
            reg.on_readable(Color(3), move || {
                let mut buf = [0u8; 8];
                while matches!(a.read(&mut buf), Ok(n) if n > 0) {}
                served2.lock().unwrap().get_or_insert(written.elapsed());
                h3.stop();
            });
            b.write_all(b"x").unwrap();
            keep2.lock().unwrap().push((reg, b));
            std::thread::sleep(LONG_CALLBACK);
        });
        // Never hang: stop after a while if the event was never served.
        let h4 = h.clone();
        h.timecb(
            Instant::now() + Duration::from_secs(5),
            Color(5),
            move || h4.stop(),
        );
    })
    .expect("runtime ran");
    drop(keep);
    let served = *served.lock().unwrap();
    served.unwrap_or_else(|| panic!("{name}: the readable callback never ran"))
}

/// With a naive reactor per worker (nobody polls a busy worker's epoll) the event waits for
/// the whole callback, and this fails.
#[test]
fn an_event_on_a_busy_workers_epoll_is_served_by_another_worker() {
    for (name, builder) in [
        ("mp2-steal", Runtime::builder().workers(2)),
        ("mp4-steal", Runtime::builder().workers(4)),
        (
            "mp2-shared",
            Runtime::builder().workers(2).queue_mode(QueueMode::Shared),
        ),
    ] {
        let delay = delay_behind_a_long_callback(name, builder);
        assert!(
            delay < SERVED_WITHIN,
            "{name}: the event waited {delay:?} behind a {LONG_CALLBACK:?} callback"
        );
    }
}

/// A registration made in a color goes in the epoll of the color's home worker, and the
/// events keep being served in order when the color's callbacks run (a smoke test of
/// `register_in` on every configuration).
#[test]
fn register_in_serves_every_edge_on_every_configuration() {
    for (name, builder) in common::configurations() {
        let got: Arc<Mutex<Vec<u8>>> = Arc::default();
        let got2 = got.clone();
        let keep: Arc<Mutex<Vec<IoRegistration>>> = Arc::default();
        let keep2 = keep.clone();
        common::run_bounded(name, builder, Duration::from_secs(20), move |h| {
            let (mut a, mut b) = UnixStream::pair().unwrap();
            let reg = h.register_in(Color(9), &mut a, Interest::READABLE).unwrap();
            let h2 = h.clone();
            reg.on_readable(Color(9), move || {
                let mut buf = [0u8; 16];
                while let Ok(n) = a.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let mut got = got2.lock().unwrap();
                    got.extend_from_slice(&buf[..n]);
                    if got.len() == 10 {
                        h2.stop();
                    }
                }
            });
            keep2.lock().unwrap().push(reg);
            std::thread::spawn(move || {
                for i in 0..10u8 {
                    b.write_all(&[i]).unwrap();
                    std::thread::sleep(Duration::from_millis(2));
                }
            });
        })
        .expect("runtime ran");
        drop(keep);
        assert_eq!(*got.lock().unwrap(), (0..10).collect::<Vec<u8>>(), "{name}");
    }
}
