//! The libasync-smp paper's web-server figures drawn from `sfs-bench web`'s samples, as SVG:
//! Figure 7 (speedup against CPUs), Figure 8 (absolute throughput), Figure 9 (throughput
//! against concurrent clients), and the server CPU time per request, which on a shared
//! machine is the steadier of the two measures. Medians over repetitions; whiskers min-max.

use std::path::{Path, PathBuf};

use anyhow::Context;
use plotters::prelude::*;

use super::{Mode, Sample};
use crate::report::{median, spread};
use crate::svg;

const MODES: [(Mode, RGBColor, &str); 4] = [
    (
        Mode::Mp,
        RGBColor(31, 119, 180),
        "mp: one colorweb, a libcolor worker per CPU",
    ),
    (
        Mode::Uni,
        RGBColor(150, 150, 150),
        "uni: colorweb --uni (baseline)",
    ),
    (
        Mode::Ncopy,
        RGBColor(255, 127, 14),
        "ncopy: N colorweb --uni copies, one port",
    ),
    (Mode::Nginx, RGBColor(214, 39, 40), "nginx, N workers"),
];

/// Median, min and max of one field over the repetitions of one configuration.
fn stat(
    samples: &[Sample],
    mode: Mode,
    cpus: usize,
    sweep: Option<usize>,
    f: fn(&Sample) -> f64,
) -> Option<(f64, f64, f64)> {
    let v = super::values(samples, mode, cpus, sweep, f);
    if v.is_empty() {
        return None;
    }
    let (lo, hi) = spread(&v);
    Some((median(&v), lo, hi))
}

fn cpu_counts(samples: &[Sample]) -> Vec<usize> {
    let mut c: Vec<usize> = samples
        .iter()
        .filter(|s| !s.sweep)
        .map(|s| s.cpus)
        .collect();
    c.sort_unstable();
    c.dedup();
    c
}

type Drawn = Result<(), Box<dyn std::error::Error>>;

/// A line of a figure: its color, legend and points.
type Line = (RGBColor, &'static str, Vec<(f64, f64)>);

fn finish(path: &Path, drawn: Drawn) -> anyhow::Result<()> {
    drawn
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("drawing {}", path.display()))
}

/// Figure 7: each server's requests/s over a baseline on 1 CPU (colorweb's flavours over
/// `uni`, nginx over nginx), against the CPUs it was given; the dashed line is linear speedup.
fn speedup(path: &Path, samples: &[Sample]) -> anyhow::Result<()> {
    let cpus = cpu_counts(samples);
    let max_cpus = cpus.last().copied().unwrap_or(1);
    let rate = |m: Mode, c: usize| stat(samples, m, c, None, |s| s.requests_per_sec);
    let colorweb_base = rate(Mode::Uni, 1).or_else(|| rate(Mode::Ncopy, 1));
    let mut lines: Vec<(Mode, Vec<(f64, f64)>)> = Vec::new();
    for (mode, _, _) in MODES {
        let base = match mode {
            Mode::Nginx => rate(Mode::Nginx, 1),
            _ => colorweb_base,
        };
        let Some((base, _, _)) = base.filter(|b| b.0 > 0.0) else {
            continue;
        };
        let pts: Vec<(f64, f64)> = cpus
            .iter()
            .filter_map(|&c| rate(mode, c).map(|(r, _, _)| (c as f64, r / base)))
            .collect();
        if !pts.is_empty() {
            lines.push((mode, pts));
        }
    }
    let top = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|&(_, y)| y))
        .fold(max_cpus as f64, f64::max)
        * 1.15;
    let root = SVGBackend::new(path, (800, 520)).into_drawing_area();
    let drawn = (|| -> Drawn {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "colorweb and nginx: speedup (the libasync-smp paper, Figure 7)",
                ("sans-serif", 20),
            )
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(60)
            .build_cartesian_2d(0.8f64..max_cpus as f64 + 0.2, 0f64..top)?;
        chart
            .configure_mesh()
            .x_labels(max_cpus)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .x_desc("CPUs given to the server")
            .y_desc("requests/s over 1 CPU (colorweb: over uni)")
            .draw()?;
        chart
            .draw_series(LineSeries::new(
                vec![(1.0, 1.0), (max_cpus as f64, max_cpus as f64)],
                BLACK.mix(0.4).stroke_width(1),
            ))?
            .label("linear speedup")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK.mix(0.4)));
        for (mode, pts) in &lines {
            let (_, color, label) = MODES.iter().find(|(m, _, _)| m == mode).copied().unwrap();
            svg::dotted_line(&mut chart, pts, color, label)?;
        }
        svg::legend(&mut chart)?;
        root.present()?;
        Ok(())
    })();
    finish(path, drawn)
}

/// Bars of one field per CPU count and mode, with min-max whiskers (Figure 8, and CPU cost).
fn bars(
    path: &Path,
    title: &str,
    y_desc: &str,
    samples: &[Sample],
    f: fn(&Sample) -> f64,
) -> anyhow::Result<()> {
    let cpus = cpu_counts(samples);
    let max_cpus = cpus.last().copied().unwrap_or(1);
    let shown: Vec<(Mode, RGBColor, &str)> = MODES
        .iter()
        .copied()
        .filter(|(m, _, _)| {
            cpus.iter()
                .any(|&c| stat(samples, *m, c, None, f).is_some())
        })
        .collect();
    let top = cpus
        .iter()
        .flat_map(|&c| {
            shown
                .iter()
                .filter_map(move |(m, _, _)| stat(samples, *m, c, None, f))
        })
        .map(|(_, _, hi)| hi)
        .fold(0.0, f64::max)
        * 1.2
        + 1.0;
    let width = 0.8 / shown.len().max(1) as f64;
    let root = SVGBackend::new(path, (800, 520)).into_drawing_area();
    let drawn = (|| -> Drawn {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(70)
            .build_cartesian_2d(0.5f64..max_cpus as f64 + 0.5, 0f64..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(max_cpus)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .x_desc("CPUs given to the server")
            .y_desc(y_desc)
            .draw()?;
        for (slot, (mode, color, label)) in shown.iter().copied().enumerate() {
            let mine: Vec<(usize, (f64, f64, f64))> = cpus
                .iter()
                .filter_map(|&c| stat(samples, mode, c, None, f).map(|v| (c, v)))
                .collect();
            let left = move |c: usize| c as f64 - 0.4 + slot as f64 * width;
            chart
                .draw_series(mine.iter().map(|&(c, (m, _, _))| {
                    Rectangle::new([(left(c), 0.0), (left(c) + width * 0.9, m)], color.filled())
                }))?
                .label(label)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled())
                });
            chart.draw_series(mine.iter().map(|&(c, (_, lo, hi))| {
                let mid = left(c) + width * 0.45;
                PathElement::new(vec![(mid, lo), (mid, hi)], BLACK.stroke_width(2))
            }))?;
        }
        svg::legend(&mut chart)?;
        root.present()?;
        Ok(())
    })();
    finish(path, drawn)
}

/// Figure 9: requests/s against concurrent connections (log scale) at the sweep's CPU count.
fn clients(path: &Path, samples: &[Sample]) -> anyhow::Result<()> {
    let swept: Vec<&Sample> = samples.iter().filter(|s| s.sweep).collect();
    let cpus = swept.iter().map(|s| s.cpus).max().unwrap_or(1);
    let mut conns: Vec<usize> = swept.iter().map(|s| s.connections).collect();
    conns.sort_unstable();
    conns.dedup();
    let (lo, hi) = (
        conns.first().copied().unwrap_or(1).max(1) as f64,
        conns.last().copied().unwrap_or(1).max(2) as f64,
    );
    let mut lines: Vec<Line> = Vec::new();
    for (mode, color, label) in MODES {
        let pts: Vec<(f64, f64)> = conns
            .iter()
            .filter_map(|&c| {
                stat(samples, mode, cpus, Some(c), |s| s.requests_per_sec)
                    .map(|(m, _, _)| (c as f64, m))
            })
            .collect();
        if !pts.is_empty() {
            lines.push((color, label, pts));
        }
    }
    let top = lines
        .iter()
        .flat_map(|(_, _, p)| p.iter().map(|&(_, y)| y))
        .fold(0.0, f64::max)
        * 1.2
        + 1.0;
    let root = SVGBackend::new(path, (800, 520)).into_drawing_area();
    let drawn = (|| -> Drawn {
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "requests/s against concurrent clients, {cpus} CPU(s) (the paper's Figure 9)"
                ),
                ("sans-serif", 20),
            )
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(70)
            .build_cartesian_2d((lo * 0.8..hi * 1.25).log_scale(), 0f64..top)?;
        chart
            .configure_mesh()
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .x_desc("concurrent keep-alive connections (wrk -c)")
            .y_desc("requests/s (one repetition per point)")
            .draw()?;
        for (color, label, pts) in &lines {
            svg::dotted_line(&mut chart, pts, *color, label)?;
        }
        svg::legend(&mut chart)?;
        root.present()?;
        Ok(())
    })();
    finish(path, drawn)
}

/// Draws every figure the samples allow into `dir`; returns the files written.
pub(super) fn all(dir: &Path, samples: &[Sample]) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut written = Vec::new();
    if samples.iter().any(|s| !s.sweep) {
        let p = dir.join("web-fig7-speedup.svg");
        speedup(&p, samples)?;
        written.push(p);
        let p = dir.join("web-fig8-throughput.svg");
        bars(
            &p,
            "colorweb and nginx: throughput (the libasync-smp paper, Figure 8)",
            "requests/s (median; whiskers: min-max)",
            samples,
            |s| s.requests_per_sec,
        )?;
        written.push(p);
        let p = dir.join("web-cpu-per-request.svg");
        bars(
            &p,
            "server CPU time per request (lower is better)",
            "server CPU-us per request (median; min-max)",
            samples,
            |s| s.cpu_us_per_request,
        )?;
        written.push(p);
    }
    if samples.iter().any(|s| s.sweep) {
        let p = dir.join("web-fig9-clients.svg");
        clients(&p, samples)?;
        written.push(p);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(mode: Mode, cpus: usize, connections: usize, rate: f64, sweep: bool) -> Sample {
        Sample {
            mode,
            cpus,
            connections,
            rep: 0,
            requests_per_sec: rate,
            mb_per_sec: rate * 4096.0 / 1e6,
            cpu_us_per_request: 1e6 / rate,
            server_kernel_share: 0.7,
            sweep,
        }
    }

    #[test]
    fn draws_the_three_figures_and_the_cpu_cost() {
        let mut s = Vec::new();
        for (m, r) in [
            (Mode::Mp, 10e3),
            (Mode::Uni, 11e3),
            (Mode::Ncopy, 11e3),
            (Mode::Nginx, 9e3),
        ] {
            s.push(sample(m, 1, 64, r, false));
            if m != Mode::Uni {
                s.push(sample(m, 2, 64, r * 1.8, false));
                for c in [1, 16, 256] {
                    s.push(sample(m, 2, c, r * c as f64 / 16.0, true));
                }
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let files = all(dir.path(), &s).unwrap();
        assert_eq!(files.len(), 4);
        for f in &files {
            let svg = std::fs::read_to_string(f).unwrap();
            assert!(svg.starts_with("<svg") || svg.contains("<svg"), "{svg}");
            assert!(svg.contains("nginx"), "no nginx legend in {}", f.display());
        }
        let fig8 = std::fs::read_to_string(dir.path().join("web-fig8-throughput.svg")).unwrap();
        // 7 bars (4 modes on 1 CPU, 3 on 2) plus the legend's 4 and the background.
        assert!(fig8.matches("<rect").count() >= 11, "{fig8}");
        // The speedup plot puts mp at 1.8 * 10/11 over uni: its points exist.
        let fig7 = std::fs::read_to_string(dir.path().join("web-fig7-speedup.svg")).unwrap();
        assert!(fig7.matches("<circle").count() >= 7, "{fig7}");
    }
}
