//! The bar chart of the libasync-smp paper Figure 10: throughput per CPU count, one bar per mode.

use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;

use super::Mode;
use super::table::Row;

/// One bar: a mode's median throughput at a CPU count.
pub(super) struct Bar {
    mode: Mode,
    cpus: usize,
    mb_per_s: f64,
    lo: f64,
    hi: f64,
}

impl From<&Row> for Bar {
    fn from(row: &Row) -> Bar {
        Bar {
            mode: row.mode,
            cpus: row.cpus,
            mb_per_s: row.mb_per_s,
            lo: row.mb_per_s_min,
            hi: row.mb_per_s_max,
        }
    }
}

const MODES: [(Mode, RGBColor); 7] = [
    (Mode::Uni, RGBColor(150, 150, 150)),
    (Mode::Mp, RGBColor(31, 119, 180)),
    (Mode::Ncopy, RGBColor(255, 127, 14)),
    (Mode::SftpChacha20, RGBColor(44, 160, 44)),
    (Mode::SftpAes128Gcm, RGBColor(148, 103, 189)),
    (Mode::NginxChacha20, RGBColor(214, 39, 40)),
    (Mode::NginxAes256Gcm, RGBColor(140, 86, 75)),
];

/// Writes the chart as SVG.
pub(super) fn figure10(path: &Path, bars: &[Bar]) -> anyhow::Result<()> {
    let max_cpus = bars.iter().map(|b| b.cpus).max().unwrap_or(1);
    let top = bars
        .iter()
        .map(|b| b.hi.max(b.mb_per_s))
        .fold(0.0, f64::max)
        * 1.15
        + 1.0;
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "sfsd read throughput (the libasync-smp paper, Figure 10)",
                ("sans-serif", 22),
            )
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(70)
            .build_cartesian_2d(0.5f64..max_cpus as f64 + 0.5, 0f64..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(max_cpus)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .x_desc("CPUs given to the server")
            .y_desc("MB/s (median; whiskers: min-max)")
            .draw()?;
        let shown = MODES
            .iter()
            .filter(|(m, _)| bars.iter().any(|b| b.mode == *m))
            .count();
        let width = 0.8 / shown.max(1) as f64;
        for (slot, (mode, color)) in MODES.iter().enumerate() {
            let mine: Vec<&Bar> = bars.iter().filter(|b| b.mode == *mode).collect();
            let slot = MODES[..slot]
                .iter()
                .filter(|(m, _)| bars.iter().any(|b| b.mode == *m))
                .count();
            if mine.is_empty() {
                continue;
            }
            let left = |b: &Bar| b.cpus as f64 - 0.4 + slot as f64 * width;
            chart
                .draw_series(mine.iter().map(|b| {
                    Rectangle::new(
                        [(left(b), 0.0), (left(b) + width * 0.9, b.mb_per_s)],
                        color.filled(),
                    )
                }))?
                .label(mode_label(*mode))
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled())
                });
            chart.draw_series(mine.iter().map(|b| {
                let mid = left(b) + width * 0.45;
                PathElement::new(vec![(mid, b.lo), (mid, b.hi)], BLACK.stroke_width(2))
            }))?;
        }
        crate::svg::legend(&mut chart)?;
        root.present()?;
        Ok(())
    };
    draw()
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("drawing {}", path.display()))
}

fn mode_label(mode: Mode) -> &'static str {
    match mode {
        Mode::Uni => "uni: sfsd --uniprocessor (baseline)",
        Mode::Mp => "mp: one sfsd, one worker per CPU",
        Mode::Ncopy => "ncopy: N uniprocessor sfsd copies",
        Mode::SftpChacha20 => "OpenSSH sftp, chacha20-poly1305",
        Mode::SftpAes128Gcm => "OpenSSH sftp, aes128-gcm",
        Mode::NginxChacha20 => "nginx TLS 1.3, chacha20-poly1305",
        Mode::NginxAes256Gcm => "nginx TLS 1.3, aes-256-gcm",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_an_svg_with_every_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fig10.svg");
        let bar = |mode, cpus, mb: f64| Bar {
            mode,
            cpus,
            mb_per_s: mb,
            lo: mb * 0.9,
            hi: mb * 1.1,
        };
        figure10(
            &path,
            &[
                bar(Mode::Uni, 1, 100.0),
                bar(Mode::Mp, 1, 98.0),
                bar(Mode::Mp, 2, 180.0),
                bar(Mode::Ncopy, 2, 190.0),
            ],
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("<svg") && svg.contains("ncopy"), "{svg}");
        assert!(svg.matches("<rect").count() >= 4);
    }
}
