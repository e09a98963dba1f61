//! The `sfsd-stats:` line: libcolor's counters as one line of JSON, for the benchmark harness.
//!
//! `serial_fraction` is the busiest color's share of the busy time (CPU-time corrected), the
//! input of the Amdahl bound; `busiest_slot` names that color slot. `startups_dropped` is the
//! server's own: connections closed before logging in to make room for new ones
//! ([`crate::startups`]). Fields are declared in alphabetical order, the order the line has
//! always had.

use serde::Serialize;

/// The whole line's JSON object.
#[derive(Serialize)]
struct StatsLine {
    amdahl_bound: f64,
    busiest_slot: Option<usize>,
    busiest_slot_busy_ns: Option<u64>,
    callbacks: u64,
    color0_busy_ns: u64,
    cpu_ns: u64,
    other_busy_ns: u64,
    per_worker: Vec<WorkerLine>,
    poll_busy_ns: u64,
    serial_fraction: f64,
    startups_dropped: u64,
    steals: u64,
    workers: usize,
}

/// One worker's counters.
#[derive(Serialize)]
struct WorkerLine {
    awake_ns: u64,
    callbacks: u64,
    color0_busy_ns: u64,
    cpu_ns: u64,
    idle_ns: u64,
    other_busy_ns: u64,
    poll_busy_ns: u64,
    polls: u64,
    queue_high_water: u64,
    shed: u64,
    steals: u64,
    stolen_callbacks: u64,
    wakeups: u64,
}

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The JSON text of the line (without the `sfsd-stats: ` prefix).
pub(crate) fn json(s: &libcolor::Stats, startups_dropped: u64) -> String {
    let busiest = s.busiest_slot();
    let line = StatsLine {
        amdahl_bound: (s.amdahl_bound(s.workers.len()) * 1000.0).round() / 1000.0,
        busiest_slot: busiest.map(|(slot, _)| slot),
        busiest_slot_busy_ns: busiest.map(|(_, d)| nanos(d)),
        callbacks: s.callbacks(),
        color0_busy_ns: nanos(s.color0_busy()),
        cpu_ns: nanos(s.cpu()),
        other_busy_ns: nanos(s.other_busy()),
        per_worker: s
            .workers
            .iter()
            .map(|w| WorkerLine {
                awake_ns: nanos(w.awake),
                callbacks: w.callbacks,
                color0_busy_ns: nanos(w.color0_busy),
                cpu_ns: nanos(w.cpu),
                idle_ns: nanos(w.idle),
                other_busy_ns: nanos(w.other_busy),
                poll_busy_ns: nanos(w.poll_busy),
                polls: w.polls,
                queue_high_water: w.queue_high_water,
                shed: w.shed,
                steals: w.steals,
                stolen_callbacks: w.stolen_callbacks,
                wakeups: w.wakeups,
            })
            .collect(),
        poll_busy_ns: nanos(s.poll_busy()),
        serial_fraction: (s.serial_fraction() * 1e6).round() / 1e6,
        startups_dropped,
        steals: s.steals(),
        workers: s.workers.len(),
    };
    serde_json::to_string(&line).expect("plain numbers always serialise")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_stats_give_one_line_with_every_field() {
        let text = json(&libcolor::Stats::default(), 3);
        assert!(!text.contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        for key in [
            "amdahl_bound",
            "busiest_slot",
            "callbacks",
            "cpu_ns",
            "per_worker",
            "serial_fraction",
            "startups_dropped",
            "workers",
        ] {
            assert!(v.get(key).is_some(), "{key} missing in {text}");
        }
        assert_eq!(v["workers"], 0);
        assert_eq!(v["startups_dropped"], 3);
    }
}
