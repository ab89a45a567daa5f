//! Plots of a run: one chart per device and benchmark, `<benchmark>-<device>.svg` and a
//! `.png` beside it, drawn with `plotters`.
//!
//! [`chart`] decides what is shown (small multiples, series, scale, X, published
//! values); [`draw`] draws it.

pub mod chart;
pub mod draw;
pub mod hist;
pub mod lines;
pub mod study;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use chart::{build_chart, paper_marks, Bar, BarValue, Chart, Panel, Scale, LOG_SPAN};
pub use draw::{chart_size, render_png, render_svg, OKABE_ITO};

use crate::naming::sanitize_component;
use crate::paper::{PaperValue, Reference};
use crate::result::{CellResult, Metric};
use crate::scenario::Benchmark;

/// The idle start-up reference among results: the first start-up cell without
/// timeouts whose host workload is `none`, whose guest workload is `none` or absent,
/// and without other VMs (their I/O would make the disk busy); returns its mean and a
/// label naming its scheduler(s).
pub fn idle_reference<'a, I>(results: I) -> Option<(f64, String)>
where
    I: IntoIterator<Item = &'a CellResult>,
{
    results.into_iter().find_map(|r| {
        let c = &r.cell;
        let idle = r.metric == Metric::StartupS
            && c.host_workload.is_none()
            && c.guest_workload.is_none_or(|w| w.is_none())
            && !c.has_other_vms()
            && r.timeouts() == 0;
        let s = r.summary();
        if !idle || s.n == 0 || !s.mean.is_finite() {
            return None;
        }
        let who = match c.guest_sched {
            Some(gs) => format!("{gs} on {}", c.host_sched),
            None => c.host_sched.to_string(),
        };
        Some((s.mean, format!("idle start-up ({who}): {:.2} s", s.mean)))
    })
}

/// One chart file to write: the results of one benchmark on one device.
#[derive(Clone, Debug, PartialEq)]
pub struct PlotFile {
    pub benchmark: Benchmark,
    pub device: String,
    /// `<benchmark>-<device>` (device sanitized); `.svg` and `.png` are added.
    pub stem: String,
}

/// The chart files of results, in order of first appearance. Two devices whose names
/// are equal after sanitizing would share a file: an error naming both.
pub fn plot_files(results: &[CellResult]) -> Result<Vec<PlotFile>, String> {
    let mut files: Vec<PlotFile> = Vec::new();
    // The CPU model's cells (latency, hot start-up) have charts of their own
    // (the study's figures), not bars by device; so do the profiles, whose
    // rows mix three metrics (tps or MB/s, p50, p99) and are read as tables.
    for r in results
        .iter()
        .filter(|r| !r.cell.on_cpu_model() && r.cell.benchmark != Benchmark::Profile)
    {
        let stem = format!(
            "{}-{}",
            r.cell.benchmark.as_str(),
            sanitize_component(r.cell.device.name())
        );
        match files.iter().find(|f| f.stem == stem) {
            Some(f) if f.device != r.cell.device.name() => {
                return Err(format!(
                    "devices \"{}\" and \"{}\" map to the same plot file {stem}.svg",
                    f.device, r.cell.device
                ))
            }
            Some(_) => {}
            None => files.push(PlotFile {
                benchmark: r.cell.benchmark,
                device: r.cell.device.to_string(),
                stem,
            }),
        }
    }
    Ok(files)
}

/// Title of a chart for one device and benchmark.
fn chart_title(benchmark: Benchmark, device: &str, members: &[&CellResult]) -> String {
    let mut runners: Vec<&str> = Vec::new();
    let mut apps: Vec<&str> = Vec::new();
    for r in members {
        if !runners.contains(&r.runner.as_str()) {
            runners.push(&r.runner);
        }
        if !apps.contains(&r.cell.app.as_str()) {
            apps.push(&r.cell.app);
        }
    }
    match benchmark {
        Benchmark::Startup => format!(
            "Start-up time of {} on {device} ({})",
            apps.join(", "),
            runners.join(", ")
        ),
        Benchmark::Throughput => {
            format!("Aggregate throughput on {device} ({})", runners.join(", "))
        }
        Benchmark::Latency => format!("cyclictest latency on {device} ({})", runners.join(", ")),
        Benchmark::Profile => format!("FFSB-style profiles on {device} ({})", runners.join(", ")),
        Benchmark::ReadersHashers => {
            format!(
                "Readers beside hashers on {device} ({})",
                runners.join(", ")
            )
        }
    }
}

/// The chart of one plot file: its results, the idle line for start-up, and the
/// published values of `paper`.
pub fn chart_for(
    file: &PlotFile,
    results: &[CellResult],
    paper: &BTreeMap<String, PaperValue>,
) -> Chart {
    let members: Vec<&CellResult> = results
        .iter()
        .filter(|r| r.cell.benchmark == file.benchmark && r.cell.device.name() == file.device)
        .collect();
    let idle = match file.benchmark {
        Benchmark::Startup => idle_reference(members.iter().copied()),
        Benchmark::Throughput
        | Benchmark::Latency
        | Benchmark::Profile
        | Benchmark::ReadersHashers => None,
    };
    let title = chart_title(file.benchmark, &file.device, &members);
    build_chart(&title, members, paper, idle)
}

/// Writes `<stem><suffix>.svg` and `<stem><suffix>.png` for each plot file of
/// `results` into `dir` (which must exist) and returns the paths written. With a
/// reference, only the charts of its device are written, with its published values
/// beside the bars they match. Same inputs give byte-identical files.
pub fn write_plots(
    dir: &Path,
    results: &[CellResult],
    paper: Option<&Reference>,
    suffix: &str,
) -> std::io::Result<Vec<PathBuf>> {
    let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, e);
    let other = |e: String| std::io::Error::other(e);
    let marks = paper.map(|p| paper_marks(p, results)).unwrap_or_default();
    let mut written = Vec::new();
    let files = plot_files(results).map_err(invalid)?;
    // A reference holds the numbers of one device: only its charts get markers.
    let files = files.into_iter().filter(|f| match paper {
        Some(p) => p.device == f.device,
        None => true,
    });
    for file in files {
        let chart = chart_for(&file, results, &marks);
        let svg_path = dir.join(format!("{}{suffix}.svg", file.stem));
        let svg = render_svg(&chart).map_err(other)?;
        std::fs::write(&svg_path, svg)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", svg_path.display())))?;
        written.push(svg_path);
        let png_path = dir.join(format!("{}{suffix}.png", file.stem));
        render_png(&chart, &png_path).map_err(other)?;
        written.push(png_path);
    }
    Ok(written)
}
