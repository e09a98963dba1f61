//! Stopping, panics, overload shedding and statistics.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use libcolor::{Color, Error, Runtime};

const LIMIT: Duration = Duration::from_secs(30);

/// Counts drops, so a test can tell a callback that was released without running.
struct DropCounter(Arc<AtomicUsize>);
impl Drop for DropCounter {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

#[test]
fn stop_with_work_pending_drops_every_pending_callback_exactly_once() {
    for (name, builder) in common::configurations() {
        let ran = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicUsize::new(0));
        let total = 2000;
        let (r, d) = (ran.clone(), dropped.clone());
        common::run_bounded(name, builder, LIMIT, move |h| {
            for i in 0..total {
                let (ran, guard, h2) = (r.clone(), DropCounter(d.clone()), h.clone());
                h.cpucb(Color(i % 16), move || {
                    let _guard = guard;
                    if ran.fetch_add(1, SeqCst) == 10 {
                        h2.stop();
                    }
                });
            }
            // Pending timers and I/O callbacks are released too.
            let guard = DropCounter(d.clone());
            h.delaycb(Duration::from_secs(3600), Color(1), move || drop(guard));
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        // Every callback was either run (and its guard dropped then) or dropped unrun.
        assert_eq!(dropped.load(SeqCst), total as usize + 1, "{name}");
        assert!(
            ran.load(SeqCst) < total as usize,
            "{name}: stop did not stop"
        );
    }
}

#[test]
fn a_panicking_callback_stops_the_runtime_with_an_error() {
    for (name, builder) in common::configurations() {
        let result = common::run_bounded(name, builder, LIMIT, |h| {
            for i in 0..100u32 {
                h.cpucb(Color(i % 5), move || {
                    if i == 42 {
                        panic!("boom {i}");
                    }
                });
            }
        });
        match result {
            Err(Error::CallbackPanicked { color, message }) => {
                assert_eq!(color, Color(2), "{name}");
                assert!(message.contains("boom 42"), "{name}: {message}");
            }
            other => panic!("{name}: expected a panic error, got {other:?}"),
        }
    }
}

#[test]
fn stop_from_another_thread() {
    for (name, builder) in common::configurations() {
        common::run_bounded(name, builder, LIMIT, |h| {
            let h = h.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(30));
                h.stop();
            });
        })
        .unwrap();
    }
}

#[test]
fn overloaded_queue_runs_the_drop_alternative_in_order() {
    let rt = Runtime::builder()
        .uniprocessor()
        .overload_threshold(10)
        .build()
        .unwrap();
    let h = rt.handle();
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    // Scheduled from inside the runtime so they land on the local queue in one burst.
    let (h2, log2) = (h.clone(), log.clone());
    h.cpucb(Color(1), move || {
        for i in 0..30u32 {
            let (a, b) = (log2.clone(), log2.clone());
            h2.cpucb_or_shed(
                Color(1),
                move || a.lock().unwrap().push((i, true)),
                move || b.lock().unwrap().push((i, false)),
            );
        }
        let h3 = h2.clone();
        h2.cpucb(Color(1), move || h3.stop());
    });
    let stats = rt.run().unwrap();
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 30);
    assert!(
        log.windows(2).all(|w| w[0].0 < w[1].0),
        "order kept: {log:?}"
    );
    let served = log.iter().filter(|(_, ran)| *ran).count();
    // The queue held the poller plus earlier tasks; roughly the first 9 fit.
    assert!((8..=10).contains(&served), "served {served}: {log:?}");
    assert_eq!(stats.workers[0].shed as usize, 30 - served);
}

#[test]
fn statistics_separate_color_zero_from_other_colors() {
    let stats = common::run_bounded("mp2", Runtime::builder().workers(2), LIMIT, |h| {
        let remaining = Arc::new(AtomicUsize::new(40));
        for i in 0..40u32 {
            let (h2, remaining) = (h.clone(), remaining.clone());
            // 3/4 of the work in colors 1..=3, 1/4 in color 0.
            h.cpucb(Color(i % 4), move || {
                let until = std::time::Instant::now() + Duration::from_millis(2);
                while std::time::Instant::now() < until {
                    std::hint::spin_loop();
                }
                if remaining.fetch_sub(1, SeqCst) == 1 {
                    h2.stop();
                }
            });
        }
    })
    .unwrap();
    assert_eq!(stats.callbacks(), 40);
    let serial = stats.serial_fraction();
    assert!(
        (0.15..0.40).contains(&serial),
        "serial fraction {serial}: {stats:?}"
    );
    assert!(stats.amdahl_bound(2) > 1.0);
    assert!(
        stats
            .workers
            .iter()
            .map(|w| w.queue_high_water)
            .max()
            .unwrap()
            >= 10
    );
}

#[test]
fn pinned_workers_run() {
    let cpus = libcolor::available_cpus();
    common::run_bounded(
        "pinned",
        Runtime::builder().workers(cpus).pin(true),
        LIMIT,
        |h| {
            let h2 = h.clone();
            h.cpucb(Color(1), move || h2.stop());
        },
    )
    .unwrap();
    // A CPU that does not exist is a clear error, not a silent unpinned run.
    let err = common::run_bounded(
        "bad pin",
        Runtime::builder().workers(1).pin_to(vec![4096]),
        LIMIT,
        |_| {},
    )
    .unwrap_err();
    assert!(matches!(err, Error::Pin { cpu: 4096, .. }), "{err}");
}
