//! What `sfs-bench wan` prints and writes: one row per tool and link setting (bulk transfers
//! and first-byte times), the ratios between tools from the same run, and JSON lines.

use serde::{Deserialize, Serialize};

use super::link::Buffers;
use super::relay::Counts;

/// One measurement (medians over its repetitions).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Row {
    /// `bulk` (the large file) or `first-byte` (a 1-byte file).
    pub kind: String,
    /// `https`, `sfs-get`, `sfs-put` or `sftp`.
    pub tool: String,
    pub rtt_ms: f64,
    pub rate_bps: u64,
    pub buffers: Buffers,
    pub bytes: u64,
    pub reps: usize,
    /// Client process start to exit.
    pub wall_s: f64,
    /// `bytes` over `wall_s` (bulk rows).
    pub mb_per_s: Option<f64>,
    /// curl's time_starttransfer and time_total (https rows).
    pub first_byte_s: Option<f64>,
    pub total_s: Option<f64>,
    pub client_cpu_s: f64,
    pub server_cpu_s: f64,
    /// The relay's threads (both directions) during this measurement.
    pub relay_cpu_s: f64,
    /// Relay counters during this measurement, server to client and client to server.
    pub to_client: Counts,
    pub to_server: Counts,
}

fn rtts(seconds: f64, rtt_ms: f64) -> String {
    if rtt_ms > 0.0 {
        format!("{:.1}", seconds * 1000.0 / rtt_ms)
    } else {
        "-".into()
    }
}

fn opt(v: Option<f64>, scale: f64, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{:.*}", digits, v * scale))
}

/// The tables of the rows a previous run wrote with `--json` to `path`, measuring nothing.
pub(super) fn replay(path: &std::path::Path) -> anyhow::Result<()> {
    let rows: Vec<Row> = crate::report::read_json_lines(path)?;
    let Some(first) = rows.first() else {
        anyhow::bail!("{}: no measurements", path.display());
    };
    let size = rows.iter().map(|r| r.bytes).max().unwrap_or(0);
    println!(
        "wan (from {}): {} Mbit/s link, {} MiB file, one run (ratios are within it)",
        path.display(),
        first.rate_bps as f64 / 1e6,
        size >> 20,
    );
    print(&rows);
    Ok(())
}

/// The tables: bulk rows, ratios per link setting, first-byte rows.
pub(super) fn print(rows: &[Row]) {
    println!(
        "{:>6} {:<8} {:<8} {:>9} {:>8} {:>9} {:>9} {:>9} {:>6} {:>8}",
        "rtt ms",
        "buffers",
        "tool",
        "MB/s",
        "wall s",
        "cli cpu",
        "srv cpu",
        "relay cpu",
        "drops",
        "MB"
    );
    for r in rows.iter().filter(|r| r.kind == "bulk") {
        println!(
            "{:>6} {:<8} {:<8} {:>9} {:>8.2} {:>9.2} {:>9.2} {:>9.2} {:>6} {:>8.0}",
            r.rtt_ms,
            format!("{:?}", r.buffers).to_lowercase(),
            r.tool,
            opt(r.mb_per_s, 1.0, 1),
            r.wall_s,
            r.client_cpu_s,
            r.server_cpu_s,
            r.relay_cpu_s,
            r.to_client.dropped + r.to_server.dropped,
            r.bytes as f64 / 1e6,
        );
    }
    println!();
    println!(
        "{:>6} {:<8} {:>14} {:>14} {:>14}",
        "rtt ms", "buffers", "get/https", "put/https", "get/sftp"
    );
    let mut settings: Vec<(f64, Buffers)> = Vec::new();
    for r in rows {
        if !settings.contains(&(r.rtt_ms, r.buffers)) {
            settings.push((r.rtt_ms, r.buffers));
        }
    }
    for (rtt, buffers) in &settings {
        let rate = |tool: &str| {
            rows.iter()
                .find(|r| {
                    r.kind == "bulk" && r.tool == tool && r.rtt_ms == *rtt && r.buffers == *buffers
                })
                .and_then(|r| r.mb_per_s)
        };
        let ratio = |a: &str, b: &str| match (rate(a), rate(b)) {
            (Some(x), Some(y)) if y > 0.0 => format!("{:.2}", x / y),
            _ => "-".into(),
        };
        println!(
            "{:>6} {:<8} {:>14} {:>14} {:>14}",
            rtt,
            format!("{buffers:?}").to_lowercase(),
            ratio("sfs-get", "https"),
            ratio("sfs-put", "https"),
            ratio("sfs-get", "sftp"),
        );
    }
    let firsts: Vec<&Row> = rows.iter().filter(|r| r.kind == "first-byte").collect();
    if firsts.is_empty() {
        return;
    }
    println!();
    println!("first byte (a 1-byte file; ms, and in RTTs)");
    println!(
        "{:>6} {:<8} {:<8} {:>12} {:>6} {:>14} {:>6} {:>12} {:>6}",
        "rtt ms",
        "buffers",
        "tool",
        "process ms",
        "RTTs",
        "first byte ms",
        "RTTs",
        "total ms",
        "RTTs"
    );
    for r in firsts {
        println!(
            "{:>6} {:<8} {:<8} {:>12.1} {:>6} {:>14} {:>6} {:>12} {:>6}",
            r.rtt_ms,
            format!("{:?}", r.buffers).to_lowercase(),
            r.tool,
            r.wall_s * 1000.0,
            rtts(r.wall_s, r.rtt_ms),
            opt(r.first_byte_s, 1000.0, 1),
            r.first_byte_s.map_or("-".into(), |s| rtts(s, r.rtt_ms)),
            opt(r.total_s, 1000.0, 1),
            r.total_s.map_or("-".into(), |s| rtts(s, r.rtt_ms)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_are_counted_from_milliseconds() {
        assert_eq!(rtts(0.3, 100.0), "3.0");
        assert_eq!(rtts(0.125, 50.0), "2.5");
        assert_eq!(rtts(0.1, 0.0), "-");
    }

    /// The committed results read back whole: every tool measured has a bulk row at every
    /// link setting, so `--from-json` can print the tables a run's text output lost.
    #[test]
    fn committed_results_read_back() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("results/wan.json");
        let rows: Vec<Row> = crate::report::read_json_lines(&path).unwrap();
        let bulk: Vec<&Row> = rows.iter().filter(|r| r.kind == "bulk").collect();
        let mut settings: Vec<(u64, Buffers)> = bulk
            .iter()
            .map(|r| (r.rtt_ms.to_bits(), r.buffers))
            .collect();
        settings.sort_by_key(|&(rtt, b)| (rtt, b == Buffers::Large));
        settings.dedup();
        assert!(settings.len() >= 2, "{settings:?}");
        for tool in ["https", "sfs-get", "sfs-put"] {
            let n = bulk.iter().filter(|r| r.tool == tool).count();
            assert_eq!(n, settings.len(), "{tool}: one bulk row per link setting");
        }
        assert!(rows.iter().any(|r| r.buffers == Buffers::Large));
    }
}
