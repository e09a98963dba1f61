//! Stopping, panics, overload shedding, priorities and statistics.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use libcolor::{Color, Error, Handle, QueueMode, Runtime};

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

/// What ran (`true`) or was shed (`false`), by post number.
type ShedLog = Arc<std::sync::Mutex<Vec<(u32, bool)>>>;

/// From inside color 1, posts 30 sheddable callbacks to color 1 in one burst (so they queue
/// behind the running callback), then a callback that stops the runtime.
fn burst_of_sheddable_posts(h: &Handle, log: &ShedLog) {
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
}

#[test]
fn overloaded_queue_runs_the_drop_alternative_in_order() {
    let rt = Runtime::builder()
        .uniprocessor()
        .overload_threshold(10)
        .build()
        .unwrap();
    let log = ShedLog::default();
    burst_of_sheddable_posts(&rt.handle(), &log);
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

/// The multiprocessor runtime sheds by the depth of the color's own FIFO: a color that posts
/// 30 callbacks to itself in one turn keeps the first `threshold` and sheds the rest, in
/// order, while the other worker stays free.
#[test]
fn multiprocessor_sheds_by_the_depth_of_the_colors_own_queue() {
    for (name, builder) in [
        ("mp2", Runtime::builder().workers(2)),
        ("mp2-nosteal", Runtime::builder().workers(2).stealing(false)),
    ] {
        let log = ShedLog::default();
        let log2 = log.clone();
        let stats = common::run_bounded(name, builder.overload_threshold(10), LIMIT, move |h| {
            burst_of_sheddable_posts(h, &log2)
        })
        .unwrap();
        let log = log.lock().unwrap();
        let expected: Vec<(u32, bool)> = (0..30).map(|i| (i, i < 10)).collect();
        assert_eq!(
            *log, expected,
            "{name}: the first 10 run, the rest shed, in order"
        );
        let shed: u64 = stats.workers.iter().map(|w| w.shed).sum();
        assert_eq!(shed, 20, "{name}");
    }
}

/// A color posted with a positive priority runs before colors queued earlier without one (the
/// multiprocessor runtime's priority injector, served first), and a priority never reorders
/// one color's callbacks.
#[test]
fn multiprocessor_runs_a_priority_color_before_earlier_ones() {
    for (name, builder) in [
        ("mp1", Runtime::builder().workers(1)),
        (
            "mp1-shared",
            Runtime::builder().workers(1).queue_mode(QueueMode::Shared),
        ),
    ] {
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log2 = log.clone();
        common::run_bounded(name, builder, LIMIT, move |h| {
            let h2 = h.clone();
            h.cpucb(Color(1), move || {
                let left = Arc::new(AtomicUsize::new(11));
                let post = |color: u32, seq: u32, priority: i8| {
                    let (log, left, h) = (log2.clone(), left.clone(), h2.clone());
                    h2.cpucb_with_priority(Color(color), priority, move || {
                        log.lock().unwrap().push((color, seq));
                        if left.fetch_sub(1, SeqCst) == 1 {
                            h.stop();
                        }
                    });
                };
                for c in 2..=9 {
                    post(c, 0, 0);
                }
                post(10, 0, 0);
                post(10, 1, 5); // behind color 10's first callback, whatever its priority
                post(11, 0, 5);
            });
        })
        .unwrap();
        let log = log.lock().unwrap();
        assert_eq!(log.len(), 11, "{name}: {log:?}");
        assert_eq!(log[0], (11, 0), "{name}: the priority color first: {log:?}");
        let tens: Vec<_> = log.iter().filter(|(c, _)| *c == 10).collect();
        assert_eq!(tens, [&(10, 0), &(10, 1)], "{name}: one color's order kept");
    }
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
