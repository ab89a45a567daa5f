//! Histogram charts of a run's latency cells (cyclictest's `-h`, 1 us buckets,
//! log y), from the simulator's histograms and the real runner's alike (each
//! latency cell's histogram file, [`crate::latency::histogram_file_name`]):
//! - the study's Figure 2, an idle 1-vCPU guest (no loops anywhere) under each
//!   CPU scheduler (`latency-hist-fig2`);
//! - its Figure 3, per CPU scheduler, 3 loops in the host against 2 in the host
//!   and 1 in the guest (`latency-hist-fig3-<sched>`);
//!
//! both from `off` cells, as the study drew them; and
//! - per CPU scheduler and loads in the host and the guest that ran under more
//!   than one coordination mode, one line per mode
//!   (`latency-hist-modes-h<H>-g<G>-<sched>`): what a mode does to the whole
//!   distribution, not only to its average and maximum.
//!
//! A chart whose cells did not run is left out.

use std::path::{Path, PathBuf};

use super::lines::{histogram_line, write_line_chart, Line, LineChart};
use crate::naming::sanitize_component;
use crate::{Cell, CpuSched};

/// A latency cell's histogram as the charts need it: samples per 1 us bucket
/// (cyclictest's `-h N`: N buckets), the samples beyond the last bucket, and all
/// samples.
#[derive(Clone, Copy, Debug)]
pub struct HistogramCounts<'a> {
    pub buckets: &'a [u64],
    pub overflow: u64,
    pub count: u64,
}

/// A VM cell with `h` loops in the host and `g` in the guest.
fn loads(c: &Cell, h: u8, g: u8) -> bool {
    !c.is_native() && c.cpu.host_cpu_load == h && c.cpu.guest_cpu_load == g
}

fn chart(title: String, buckets: usize, lines: Vec<Line>) -> LineChart {
    LineChart {
        title,
        x_label: "latency [us] (1 us buckets)".into(),
        y_label: "samples".into(),
        log_y: true,
        x_range: Some((0.0, buckets as f64)),
        y_min: Some(1.0),
        lines,
    }
}

/// The line of one histogram; its label says how many samples lie beyond the
/// last bucket.
fn line(label: &str, h: &HistogramCounts) -> Line {
    let over = 100.0 * h.overflow as f64 / h.count.max(1) as f64;
    histogram_line(
        &format!("{label} ({over:.1}% over {} us)", h.buckets.len()),
        h.buckets,
    )
}

/// Writes every histogram chart of `hists` into `dir` (`.svg` and `.png`) and
/// returns their paths.
pub fn write_histogram_plots(
    dir: &Path,
    hists: &[(&Cell, HistogramCounts)],
) -> std::io::Result<Vec<PathBuf>> {
    let Some(buckets) = hists.iter().map(|(_, h)| h.buckets.len()).max() else {
        return Ok(Vec::new());
    };
    let mut written = Vec::new();
    let idle: Vec<_> = hists
        .iter()
        .filter(|(c, _)| loads(c, 0, 0) && c.coordination.is_off())
        .map(|(c, h)| line(&format!("{} in host and guest", c.cpu.guest_sched()), h))
        .collect();
    if !idle.is_empty() {
        let title = "cyclictest in an idle guest (Figure 2)".to_string();
        written.extend(write_line_chart(
            dir,
            "latency-hist-fig2",
            &chart(title, buckets, idle),
        )?);
    }
    let mut scheds: Vec<CpuSched> = hists.iter().map(|(c, _)| c.cpu.host_sched()).collect();
    scheds.sort();
    scheds.dedup();
    for s in scheds {
        let of_sched: Vec<_> = hists
            .iter()
            .filter(|(c, _)| c.cpu.host_sched() == s)
            .collect();
        let find = |h: u8, g: u8, label: &str| {
            of_sched
                .iter()
                .find(|(c, _)| loads(c, h, g) && c.coordination.is_off())
                .map(|(_, hist)| line(label, hist))
        };
        let lines: Vec<_> = [
            find(3, 0, "3 loops in the host"),
            find(2, 1, "2 in the host, 1 in the guest"),
        ]
        .into_iter()
        .flatten()
        .collect();
        if lines.len() == 2 {
            let title = format!("cyclictest in the guest, {s}, 3 loops (Figure 3)");
            let stem = format!("latency-hist-fig3-{s}");
            written.extend(write_line_chart(dir, &stem, &chart(title, buckets, lines))?);
        }
        written.extend(write_mode_plots(dir, s, &of_sched, buckets)?);
    }
    Ok(written)
}

/// The per-mode charts of one CPU scheduler's cells: for each loads in the host
/// and the guest that ran under two modes or more, a line per mode.
fn write_mode_plots(
    dir: &Path,
    s: CpuSched,
    hists: &[&(&Cell, HistogramCounts)],
    buckets: usize,
) -> std::io::Result<Vec<PathBuf>> {
    let mut groups: Vec<(u8, u8)> = hists
        .iter()
        .filter(|(c, _)| !c.is_native())
        .map(|(c, _)| (c.cpu.host_cpu_load, c.cpu.guest_cpu_load))
        .collect();
    groups.sort();
    groups.dedup();
    let mut written = Vec::new();
    for (h, g) in groups {
        let members: Vec<_> = hists.iter().filter(|(c, _)| loads(c, h, g)).collect();
        let mut modes: Vec<&str> = members.iter().map(|(c, _)| c.coordination.name()).collect();
        modes.sort();
        modes.dedup();
        if modes.len() < 2 {
            continue;
        }
        // A mode's first cell (a scenario with several guest I/O schedulers
        // has one per scheduler; the CPU study's figures show one).
        let lines = modes
            .iter()
            .filter_map(|m| members.iter().find(|(c, _)| c.coordination.name() == *m))
            .map(|(c, hist)| line(c.coordination.name(), hist))
            .collect();
        let title = format!(
            "cyclictest in the guest, {s}, {h} loops in the host and {g} in the guest, by coordination"
        );
        let stem = format!(
            "latency-hist-modes-h{h}-g{g}-{}",
            sanitize_component(s.as_str())
        );
        written.extend(write_line_chart(dir, &stem, &chart(title, buckets, lines))?);
    }
    Ok(written)
}
