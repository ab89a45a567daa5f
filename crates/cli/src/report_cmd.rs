//! `tandem report`: a run's tables, or the run set against a named reference: a
//! baseline run (`--baseline DIR`) or published numbers (`--paper FILE`).

use std::path::{Path, PathBuf};

use clap::Args;
use cpusched::cfsv_study::published::{Changes, Published};
use cpusched::cyclictest::Histogram;
use experiment::plot::hist::HistogramCounts;
use experiment::readers_hashers;
use experiment::side_by_side::{self, DEFAULT_TOLERANCE};
use experiment::{CellResult, CpuSched, Metric, RunMeta, VmLayout};

use crate::Failure;

#[derive(Args)]
pub struct ReportArgs {
    /// The run: its output directory (holding results.json), or a results.json file.
    dir: PathBuf,
    /// (No second run without --baseline: the reference is named.)
    #[arg(hide = true)]
    other: Option<PathBuf>,
    /// Set the run against this baseline run (a directory or results.json), cell by
    /// cell; ratio = RUN / BASELINE.
    #[arg(long, value_name = "DIR")]
    baseline: Option<PathBuf>,
    /// Set the run against a file of published numbers (e.g.
    /// reference/cloud2014-hdd.toml); ratio = RUN / PAPER. The file must hold the
    /// run's kind of cells (VM or native) and its device. Also writes the run's plots
    /// with the published values beside the bars (`<benchmark>-<device>-vs-paper.svg`
    /// and `.png` in the run's directory). Several files (`--paper A B`, one per
    /// device) each give their table, then one summary line per device.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    paper: Vec<PathBuf>,
    /// With --baseline: set the runs' counter NAME (each cell's mean over its runs)
    /// side by side instead of the cells' values, e.g. `app_cpu_s`, the app's CPU
    /// time per start, which the simulator (on a CPU model) and the real runner both
    /// write; X where a side lacks it.
    #[arg(long, value_name = "NAME", requires = "baseline")]
    counter: Option<String>,
    /// Ratios within this share either way count as agreeing with --baseline
    /// (0.25: the larger value over the smaller at most 1.25).
    #[arg(long, value_name = "SHARE", default_value_t = DEFAULT_TOLERANCE)]
    tolerance: f64,
}

/// A run's results.json path: the file itself, or DIR/results.json.
fn results_path(p: &Path) -> PathBuf {
    if p.is_file() {
        p.to_path_buf()
    } else {
        p.join("results.json")
    }
}

fn read(p: &Path) -> Result<(RunMeta, Vec<CellResult>), Failure> {
    experiment::read_results_json(&results_path(p)).map_err(Failure::Usage)
}

/// A run's name for column headers: its directory's name (that of the directory
/// holding it for a results.json file).
fn run_name(p: &Path) -> String {
    let f = results_path(p);
    f.parent()
        .and_then(|d| d.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| p.display().to_string())
}

/// A readers-hashers run (scenarios/cfsv.toml) against the CFS-v slides'
/// figures (reference/cfsv2014.toml): each case that ran under both `cfs`
/// and `cfs-v` gives its changes.
fn cfsv_vs_paper(path: &Path, results: &[CellResult]) -> Result<String, Failure> {
    let usage = |e: String| Failure::Usage(format!("--paper {}: {e}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| usage(format!("cannot read: {e}")))?;
    let published = Published::from_toml(&text).map_err(usage)?;
    let case = |layout| {
        Some([
            readers_hashers::vm_means(results, layout, CpuSched::Cfs)?,
            readers_hashers::vm_means(results, layout, CpuSched::CfsV)?,
        ])
    };
    let (separate, mixed) = (case(VmLayout::Separate), case(VmLayout::Mixed));
    if separate.is_none() && mixed.is_none() {
        return Err(usage(
            "the run has no vm_layout with both host_cpu_sched cfs and cfs-v (coordination off)"
                .into(),
        ));
    }
    Ok(Changes::from_vms(separate, mixed).render(&published))
}

/// A histogram's counts as the charts take them.
pub(crate) fn counts(h: &Histogram) -> HistogramCounts<'_> {
    HistogramCounts {
        buckets: &h.buckets,
        overflow: h.overflow,
        count: h.count,
    }
}

/// The CPU study's plots of a run with latency or hot start-up cells, real or
/// simulated, drawn into its directory `dir` as `tandem sim run` draws them: the
/// average and maximum against the total loops (log y), and the histograms from
/// the latency cells' histogram files there. A run without such cells gets none.
fn cpu_plots(dir: &Path, results: &[CellResult]) -> Result<Vec<PathBuf>, Failure> {
    let failed = |e: std::io::Error| Failure::Run(format!("writing {}: {e}", dir.display()));
    let mut written = experiment::plot::study::write_cpu_plots(dir, results).map_err(failed)?;
    let mut hists = Vec::new();
    for r in results.iter().filter(|r| r.metric == Metric::LatencyAvgUs) {
        let path = dir.join(experiment::latency::histogram_file_name(&r.cell));
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let h = cpusched::cyclictest_output::parse_histogram(&text)
            .map_err(|e| Failure::Usage(format!("{}: {e}", path.display())))?;
        hists.push((&r.cell, h));
    }
    let pairs: Vec<_> = hists.iter().map(|(c, h)| (*c, counts(h))).collect();
    written.extend(experiment::plot::hist::write_histogram_plots(dir, &pairs).map_err(failed)?);
    Ok(written)
}

/// Unreadable or malformed inputs are usage errors (exit code 2).
pub fn report(a: ReportArgs) -> Result<(), Failure> {
    if let Some(other) = &a.other {
        return Err(Failure::Usage(format!(
            "a second run is compared by name: tandem report {} --baseline {}",
            a.dir.display(),
            other.display()
        )));
    }
    if a.baseline.is_some() && !a.paper.is_empty() {
        return Err(Failure::Usage(
            "one reference at a time: --baseline DIR or --paper FILE".into(),
        ));
    }
    if !(a.tolerance.is_finite() && a.tolerance > 0.0) {
        return Err(Failure::Usage(format!(
            "--tolerance {}: must be a positive share, e.g. 0.25",
            a.tolerance
        )));
    }
    let (_, results) = read(&a.dir)?;
    if let Some(base) = &a.baseline {
        let (_, base_results) = read(base)?;
        let (mut run, mut baseline) = (run_name(&a.dir), run_name(base));
        if run == baseline {
            (run, baseline) = (a.dir.display().to_string(), base.display().to_string());
        }
        let cmp = match &a.counter {
            Some(name) => {
                println!("counter {name}, each cell's mean over its runs");
                side_by_side::compare_counter(&results, &base_results, name)
            }
            None => side_by_side::compare(&results, &base_results),
        };
        print!("{}", cmp.render(&run, &baseline, a.tolerance));
        return Ok(());
    }
    if a.paper.is_empty() {
        print!("{}", experiment::render_tables(&results));
        let file = results_path(&a.dir);
        let dir = file.parent().unwrap_or(Path::new("."));
        for p in cpu_plots(dir, &results)? {
            eprintln!("tandem: wrote {}", p.display());
        }
        return Ok(());
    }
    if results.iter().any(readers_hashers::is_readers_hashers) {
        for path in &a.paper {
            print!("{}", cfsv_vs_paper(path, &results)?);
        }
        return Ok(());
    }
    let mut lines = Vec::new();
    for path in &a.paper {
        let reference = experiment::read_reference(path).map_err(Failure::Usage)?;
        experiment::check_comparable(&reference, &results)
            .map_err(|e| Failure::Usage(format!("--paper {}: {e}", path.display())))?;
        let cmp = experiment::compare_with_reference(&reference, &results);
        print!("{}", experiment::render_comparison(&cmp));
        lines.push(experiment::device_summary_line(&cmp));
        // The run's plots with the published values beside the bars, next to them.
        let file = results_path(&a.dir);
        let dir = file.parent().unwrap_or(Path::new("."));
        let plots = experiment::write_plots(dir, &results, Some(&reference), "-vs-paper")
            .map_err(|e| Failure::Run(e.to_string()))?;
        for p in plots {
            eprintln!("tandem: wrote {}", p.display());
        }
    }
    if lines.len() > 1 {
        println!("== per device ==");
        for l in lines {
            println!("{l}");
        }
    }
    Ok(())
}
