//! The core guarantees: callbacks of one color never overlap and run in the order they were
//! scheduled, under every configuration, including while colors are being stolen.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use libcolor::{COLOR_SLOTS, Color, Handle};
use proptest::prelude::*;

struct ColorState {
    busy: AtomicBool,
    next_expected: AtomicU64,
}

struct Check {
    colors: Vec<ColorState>,
    overlaps: AtomicUsize,
    out_of_order: AtomicUsize,
    ran: AtomicUsize,
    expected: usize,
}

impl Check {
    fn new(colors: usize, expected: usize) -> Arc<Check> {
        Arc::new(Check {
            colors: (0..colors)
                .map(|_| ColorState {
                    busy: AtomicBool::new(false),
                    next_expected: AtomicU64::new(0),
                })
                .collect(),
            overlaps: AtomicUsize::new(0),
            out_of_order: AtomicUsize::new(0),
            ran: AtomicUsize::new(0),
            expected,
        })
    }

    /// The body of every test callback: flags overlap with the in-callback flag, checks the
    /// per-color sequence number, spins a little to widen race windows.
    fn visit(&self, h: &Handle, color_index: usize, seq: u64, spin: u32) {
        let state = &self.colors[color_index];
        if state.busy.swap(true, SeqCst) {
            self.overlaps.fetch_add(1, SeqCst);
        }
        if state.next_expected.swap(seq + 1, SeqCst) != seq {
            self.out_of_order.fetch_add(1, SeqCst);
        }
        for i in 0..spin {
            std::hint::black_box(i);
        }
        state.busy.store(false, SeqCst);
        if self.ran.fetch_add(1, SeqCst) + 1 == self.expected {
            h.stop();
        }
    }
}

/// Colors spread over several table slots, including two that share a slot.
fn color_of(index: usize) -> Color {
    let spread = |i: usize| Color(i as u32 * 7 + 5 * (i % 2) as u32);
    if index == 1 {
        // A different color that shares index 5's table slot.
        Color(COLOR_SLOTS as u32 + spread(5).0)
    } else {
        spread(index)
    }
}

/// Each color gets a chain: every callback schedules its color's next one (from inside the
/// runtime), while an outside thread also floods cpucb's in parallel, so both the local and
/// cross-thread paths race with stealing.
fn chained_and_flooded(name: &str, builder: libcolor::Builder, colors: usize, per_color: u64) {
    let chained = per_color / 2;
    let flooded = per_color - chained;
    let total = colors * per_color as usize;
    let check = Check::new(colors * 2, total);
    let flood_seq: Arc<Vec<Mutex<u64>>> = Arc::new((0..colors).map(|_| Mutex::new(0)).collect());
    let stats = common::run_bounded(name, builder, Duration::from_secs(60), |h| {
        for c in 0..colors {
            schedule_chain(h.clone(), check.clone(), c, 0, chained);
        }
        let (h, check, flood_seq) = (h.clone(), check.clone(), flood_seq.clone());
        std::thread::spawn(move || {
            for i in 0..flooded {
                for c in 0..colors {
                    // Flooded callbacks use a second color per index so their sequence is
                    // independent of the chain's.
                    let color = Color(color_of(c).0 + 100_000);
                    let check = check.clone();
                    let hh = h.clone();
                    let seq = {
                        let mut s = flood_seq[c].lock().unwrap();
                        *s += 1;
                        *s - 1
                    };
                    assert_eq!(seq, i);
                    h.cpucb(color, move || check.visit(&hh, colors + c, seq, 200));
                }
            }
        });
    })
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        check.overlaps.load(SeqCst),
        0,
        "{name}: same-color callbacks overlapped"
    );
    assert_eq!(
        check.out_of_order.load(SeqCst),
        0,
        "{name}: a color ran out of order"
    );
    assert_eq!(
        check.ran.load(SeqCst),
        total,
        "{name}: lost or extra callbacks"
    );
    assert!(
        stats.callbacks() >= total as u64,
        "{name}: stats undercount"
    );
}

fn schedule_chain(h: Handle, check: Arc<Check>, c: usize, seq: u64, len: u64) {
    if seq == len {
        return;
    }
    let hh = h.clone();
    h.cpucb(color_of(c), move || {
        check.visit(&hh, c, seq, 500);
        // Two children back to back: order between them must hold too.
        schedule_chain(hh.clone(), check.clone(), c, seq + 1, len);
    });
}

#[test]
fn same_color_never_overlaps_and_keeps_order_in_every_configuration() {
    for round in 0..5 {
        for (name, builder) in common::configurations() {
            chained_and_flooded(&format!("{name} round {round}"), builder, 24, 400);
        }
    }
}

#[test]
fn stealing_actually_moves_colors() {
    // All colors on worker 0's slots (even colors start on worker 0 of 2): worker 1 only gets
    // work by stealing. Every color has all its callbacks outstanding at once, so a thief
    // that took a running color, or a queue that reordered one, would be caught.
    let check = Check::new(8, 8 * 150);
    let stats = common::run_bounded(
        "steal",
        libcolor::Runtime::builder().workers(2),
        Duration::from_secs(60),
        |h| {
            for seq in 0..150u64 {
                for c in 0..8 {
                    let (hh, check) = (h.clone(), check.clone());
                    h.cpucb(Color(c as u32 * 2), move || {
                        check.visit(&hh, c, seq, 20_000)
                    });
                }
            }
        },
    )
    .unwrap();
    assert_eq!(check.overlaps.load(SeqCst), 0);
    assert_eq!(check.out_of_order.load(SeqCst), 0);
    assert_eq!(check.ran.load(SeqCst), 8 * 150);
    assert!(stats.steals() > 0, "no steals: {stats:?}");
    assert!(
        stats.workers[1].callbacks > 0,
        "worker 1 never ran: {stats:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    /// Random schedules (colors, counts, spin lengths, configuration), posted by a thread
    /// while the runtime runs (so posts race turns and steals): every callback runs exactly
    /// once, in per-color order, never overlapping.
    #[test]
    fn random_schedules_hold_the_guarantees(
        config in 0usize..6,
        plan in proptest::collection::vec((0usize..12, 1u64..40, 0u32..2000), 1..20),
    ) {
        let (name, builder) = common::configurations().swap_remove(config);
        let mut per_color = [0u64; 12];
        let total: u64 = plan.iter().map(|(_, n, _)| n).sum();
        let check = Check::new(12, total as usize);
        let check2 = check.clone();
        common::run_bounded(name, builder, Duration::from_secs(10), move |h| {
            let h = h.clone();
            std::thread::spawn(move || {
                for &(c, n, spin) in &plan {
                    for _ in 0..n {
                        let seq = per_color[c];
                        per_color[c] += 1;
                        let (check, hh) = (check2.clone(), h.clone());
                        h.cpucb_with_priority(color_of(c), (seq % 3) as i8, move || {
                            check.visit(&hh, c, seq, spin)
                        });
                    }
                }
            });
        }).unwrap();
        prop_assert_eq!(check.overlaps.load(SeqCst), 0);
        prop_assert_eq!(check.out_of_order.load(SeqCst), 0);
        prop_assert_eq!(check.ran.load(SeqCst) as u64, total);
    }
}

/// Callbacks of one runtime posting into another runtime's same-numbered colors (chains that
/// hop between two multiprocessor runtimes): a post must reach the target runtime's own run
/// queues and state, never the posting worker's (found by mutation testing).
#[test]
fn two_runtimes_posting_into_each_other() {
    let a = libcolor::Runtime::builder().workers(2).build().unwrap();
    let b = libcolor::Runtime::builder().workers(2).build().unwrap();
    let (ha, hb) = (a.handle(), b.handle());
    let hops = Arc::new(AtomicUsize::new(0));
    const CHAINS: u32 = 4;
    const HOPS: usize = 200;
    fn hop(here: Handle, there: Handle, color: Color, left: usize, hops: Arc<AtomicUsize>) {
        let (h2, t2) = (here.clone(), there.clone());
        here.cpucb(color, move || {
            hops.fetch_add(1, SeqCst);
            if left == 0 {
                if hops.load(SeqCst) == CHAINS as usize * (HOPS + 1) {
                    h2.stop();
                    t2.stop();
                }
                return;
            }
            hop(t2, h2, color, left - 1, hops);
        });
    }
    for c in 1..=CHAINS {
        hop(ha.clone(), hb.clone(), Color(c), HOPS, hops.clone());
    }
    let runner = std::thread::spawn(move || b.run());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(a.run());
    });
    let a_result = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("runtime a did not stop");
    a_result.unwrap();
    runner.join().unwrap().unwrap();
    assert_eq!(hops.load(SeqCst), CHAINS as usize * (HOPS + 1));
}
