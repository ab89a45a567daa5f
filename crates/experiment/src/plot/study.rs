//! The coordinated task scheduling study's Figure 1 from a run's CPU model cells:
//! per (runner, benchmark, platform, CPU schedulers, coordination), the average
//! latency (or the hot start-up time) against the total number of busy loops, one
//! curve per guest load plus "no guest", log y; and the same for the maximum
//! latency (`latency-max-...`), which the study reported beside the average.

use std::path::{Path, PathBuf};

use super::lines::{write_line_chart, Line, LineChart};
use crate::cpu_table::{column, key_of, total, Key};
use crate::naming::sanitize_component;
use crate::result::{CellResult, Metric};

/// The Figure 1 charts of `results` (latency averages and maxima, hot
/// start-ups), with their file stems, in order of first appearance.
pub fn figure1_charts(results: &[CellResult]) -> Vec<(String, LineChart)> {
    let cpu: Vec<&CellResult> = results
        .iter()
        .filter(|r| r.cell.on_cpu_model() && !crate::readers_hashers::is_readers_hashers(r))
        .collect();
    let mut keys: Vec<Key> = Vec::new();
    for r in &cpu {
        let k = key_of(r);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.iter()
        .map(|k| {
            let members: Vec<&CellResult> =
                cpu.iter().copied().filter(|r| key_of(r) == *k).collect();
            let mut cols: Vec<Option<u8>> = members.iter().map(|r| column(r)).collect();
            cols.sort();
            cols.dedup();
            let lines = cols
                .iter()
                .map(|c| {
                    let mut points: Vec<(f64, f64)> = members
                        .iter()
                        .filter(|r| column(r) == *c && r.timeouts() == 0)
                        .map(|r| (f64::from(total(r)), r.summary().mean))
                        .collect();
                    points.sort_by(|a, b| a.0.total_cmp(&b.0));
                    Line {
                        label: match c {
                            None => "no guest".to_string(),
                            Some(1) => "1 guest loop".to_string(),
                            Some(n) => format!("{n} guest loops"),
                        },
                        points,
                    }
                })
                .collect();
            let max = k.metric == Metric::LatencyMaxUs.label();
            let (what, prefix) = if k.benchmark == "startup" {
                (format!("hot start-up of {}", k.app), "hot-startup")
            } else if max {
                ("cyclictest's maximum".to_string(), "latency-max")
            } else {
                ("cyclictest".to_string(), "latency")
            };
            let stem = format!(
                "{prefix}-{}-{}-{}",
                sanitize_component(&k.platform),
                sanitize_component(&k.scheds.replace(", ", "-").replace(' ', "-")),
                sanitize_component(&k.coordination)
            );
            let chart = LineChart {
                title: format!(
                    "{what}, CPU {} on {}, coordination {} ({})",
                    k.scheds, k.platform, k.coordination, k.runner
                ),
                x_label: "busy loops in host and guest".to_string(),
                y_label: k.metric.clone(),
                log_y: true,
                x_range: None,
                y_min: None,
                lines,
            };
            (stem, chart)
        })
        .collect()
}

/// Writes the Figure 1 charts (`.svg` and `.png`) into `dir` and returns their
/// paths.
pub fn write_cpu_plots(dir: &Path, results: &[CellResult]) -> std::io::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for (stem, chart) in figure1_charts(results) {
        written.extend(write_line_chart(dir, &stem, &chart)?);
    }
    Ok(written)
}
