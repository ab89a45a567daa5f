//! Compatibility with Paolo Valente's S benchmark suite (Algodev-github/S): the
//! statistics lines of its stat files and the `repetitionN/` tree that its
//! `calc_overall_stats.sh` reads (whose tables `plot_stats.sh` then draws).
//!
//! What S's scripts read, from `utilities/calc_overall_stats.sh`:
//!
//! - it walks the directories under the results directory whose names contain
//!   `startup` or `throughput`, and in each finds, recursively (so in every
//!   `repetitionN/`), the files named `*<sched>-<workload>*.txt` with `<workload>` one
//!   of S's names (`0r0w-seq`, `5r0w-rand`, `2r2w-seq`, ...);
//! - a file counts if it has at least `1 + 3 * quantities` lines: a header, then per
//!   quantity (start-up: latency, aggregated, read and write throughput; throughput:
//!   the last three) a title line, a column header and a values line;
//! - of each values line it takes the third field, the average, over the
//!   repetitions; a field with an `X` makes the quantity X in its tables.
//!
//! S writes its statistics with `utilities/calc_avg_and_co.sh 99`: five columns of 12
//! characters, `min max avg std_dev conf99%`, numbers as C's `%g`. tandem writes those
//! five, the fifth computed as that script does, and a sixth, `conf95%`: the half width
//! of the 95% Student's t interval of the mean, the interval of `results.csv`.

use std::path::PathBuf;

use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::naming::{format_g, sanitize_component, secs, stat_file_header};
use crate::result::{CellResult, Metric, RunResult};
use crate::scenario::Benchmark;
use crate::stats::summarize;

/// The folder of the output directory that holds the S tree ([`s_tree`]): give it to
/// S's `calc_overall_stats.sh`.
pub const S_TREE: &str = "S";

/// The run counters of the read and write throughput of the app's disk (MB/s, 10^6
/// bytes, over the measured part of the run), which fill the stat files' read, write
/// and aggregated throughput sections. A runner that does not measure them leaves the
/// sections X.
pub const READ_MB_S: &str = "read_mb_s";
/// See [`READ_MB_S`].
pub const WRITE_MB_S: &str = "write_mb_s";

/// The statistics of one values line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SStats {
    pub n: usize,
    pub min: f64,
    pub max: f64,
    pub avg: f64,
    /// Sample standard deviation; NaN with fewer than 2 values.
    pub std_dev: f64,
    /// S's `conf99%` (see [`s_conf99`]); NaN with fewer than 2 values.
    pub conf99_s: f64,
    /// Half width of the 95% Student's t interval of the mean; NaN with fewer than 2
    /// values (one value says nothing about its spread).
    pub conf95: f64,
}

/// The `p` quantile of Student's t with `df` degrees of freedom.
fn t_quantile(p: f64, df: f64) -> f64 {
    StudentsT::new(0.0, 1.0, df)
        .map(|t| t.inverse_cdf(p))
        .unwrap_or(f64::NAN)
}

/// The `conf99%` column exactly as S's `calc_avg_and_co.sh 99` computes it, so that
/// tandem's files agree with S's own for the same values: `t * q / 2`, where `t` is the
/// one-sided 99% Student's t quantile with `min(n, 31) - 1` degrees of freedom,
/// rounded to 3 decimals as in the script's table, and `q = sqrt(99 * SS / (n (n -
/// 1)))` (the script adds the squared deviations 99 times). It is not a 99% confidence
/// half width (it is about 4.3 times one at n = 10): read `conf95%` for that.
pub fn s_conf99(values: &[f64]) -> f64 {
    let n = values.len();
    if n < 2 {
        return f64::NAN;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    let ss: f64 = values.iter().map(|v| (v - mean) * (v - mean)).sum();
    let df = (n.min(31) - 1) as f64;
    let t = (t_quantile(0.99, df) * 1000.0).round() / 1000.0;
    let q = (99.0 * ss / (n * (n - 1)) as f64).sqrt();
    t * q / 2.0
}

/// The statistics of `values`, `None` when there are none: those of `results.csv`
/// ([`summarize`]), with S's `conf99%` beside them.
pub fn s_stats(values: &[f64]) -> Option<SStats> {
    let s = summarize(values);
    if s.n == 0 {
        return None;
    }
    let spread = |x: f64| if s.n < 2 { f64::NAN } else { x };
    Some(SStats {
        n: s.n,
        min: s.min,
        max: s.max,
        avg: s.mean,
        std_dev: spread(s.std),
        conf99_s: s_conf99(values),
        conf95: spread(s.ci95_half_width()),
    })
}

/// What a values line shows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Line {
    Stats(SStats),
    /// X in every column: a timeout, or a quantity the runner did not measure.
    X,
}

/// The column header and the values line of a section, 12 characters a field.
pub fn stat_lines(line: Line) -> String {
    let fields: [String; 6] = match line {
        Line::Stats(s) => [s.min, s.max, s.avg, s.std_dev, s.conf99_s, s.conf95].map(format_g),
        Line::X => std::array::from_fn(|_| "X".to_string()),
    };
    let mut out = String::new();
    for h in ["min", "max", "avg", "std_dev", "conf99%", "conf95%"] {
        out.push_str(&format!("{h:>12}"));
    }
    out.push('\n');
    for f in &fields {
        out.push_str(&format!("{f:>12}"));
    }
    out.push('\n');
    out
}

fn line_of(values: &[f64]) -> Line {
    s_stats(values).map_or(Line::X, Line::Stats)
}

/// The read, write and aggregated throughput of runs, from their counters; `None`
/// when some run lacks them.
fn io_values(runs: &[&RunResult]) -> Option<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let mut out = (Vec::new(), Vec::new(), Vec::new());
    for r in runs {
        let read = *r.counters.get(READ_MB_S)?;
        let write = *r.counters.get(WRITE_MB_S)?;
        out.0.push(read + write);
        out.1.push(read);
        out.2.push(write);
    }
    (!runs.is_empty()).then_some(out)
}

/// The sections of a stat file after its header, in S's order. `latency` is the
/// start-up section's values (start-up cells only; `None` for X); `aggregated` the
/// throughput values of a throughput cell; the runs give the read and write counters.
pub fn sections(
    metric: Metric,
    latency: Option<&[f64]>,
    aggregated: &[f64],
    runs: &[&RunResult],
) -> String {
    let io = io_values(runs);
    let mut out = String::new();
    if matches!(metric, Metric::LatencyAvgUs | Metric::LatencyMaxUs) {
        // cyclictest, which S does not run: one section, the runs' values.
        out.push_str(&format!("cyclictest {metric} (us):\n"));
        out.push_str(&stat_lines(line_of(aggregated)));
        return out;
    }
    if metric == Metric::StartupS {
        out.push_str("Latency statistics:\n");
        out.push_str(&stat_lines(latency.map_or(Line::X, line_of)));
    }
    out.push_str("Aggregated throughput:\n");
    let agg = match (&io, metric) {
        (_, Metric::ThroughputMbS) => line_of(aggregated),
        (Some((a, _, _)), _) => line_of(a),
        (None, _) => Line::X,
    };
    out.push_str(&stat_lines(agg));
    out.push_str("Read throughput:\n");
    out.push_str(&stat_lines(io.as_ref().map_or(Line::X, |v| line_of(&v.1))));
    out.push_str("Write throughput:\n");
    out.push_str(&stat_lines(io.as_ref().map_or(Line::X, |v| line_of(&v.2))));
    out
}

/// The trailing lines that say what the columns are.
pub const COLUMNS_NOTE: &str = "conf99%: as S's calc_avg_and_co.sh 99 computes it; \
conf95%: half width of the 95% Student's t interval of the mean\n";

/// The directory of S's results for a cell, relative to the S tree: one per device,
/// benchmark (app) and host setup, named so that S's `calc_overall_stats.sh` knows its
/// kind (`startup` or `throughput` in the name) and writes distinct tables for each:
/// `<device>-<app>_startup` or `<device>-throughput`, then for VM cells
/// `-host-<host sched>-<host workload>` (S's workload names), then `-vms-<other VMs>`,
/// `-hostloops<N>` (`host_cpu_load`) and `-coord-<mode>` when set. Inside it, files carry S's own names, from the app's
/// side: the guest's scheduler and workload in a VM (as S run in the guest names them).
pub fn test_dir(result: &CellResult) -> String {
    let c = &result.cell;
    let mut d = sanitize_component(c.device.name());
    match c.benchmark {
        Benchmark::Startup => {
            let app = c.app.strip_prefix("cmd:").unwrap_or(&c.app);
            d.push_str(&format!("-{}_startup", sanitize_component(app)));
        }
        Benchmark::Throughput => d.push_str("-throughput"),
        Benchmark::Latency => d.push_str("-latency"),
        Benchmark::Profile => d.push_str("-profile"),
        Benchmark::ReadersHashers => d.push_str("-readers-hashers"),
    }
    if !c.hypervisor.is_default() {
        d.push_str(&format!("-{}", c.hypervisor.name()));
    }
    // A profile on the CPU model (Xen's credit, CPU-bound DomUs): its CPU
    // settings tell the cells apart (empty without a platform).
    if c.benchmark == Benchmark::Profile {
        d.push_str(&c.cpu.file_part(!c.is_native()));
    }
    if !c.is_native() {
        d.push_str(&format!(
            "-host-{}-{}",
            sanitize_component(c.host_sched.name()),
            c.host_workload.s_name()
        ));
    }
    if c.has_other_vms() {
        d.push_str(&format!(
            "-vms-{}",
            sanitize_component(&c.other_vms.name().replace(',', "+"))
        ));
    }
    // The host's busy loops beside a guest's I/O (CFS-v's throughput cells,
    // `help-all`'s start-ups): cells that differ only by them.
    if c.cpu.host_cpu_load > 0 {
        d.push_str(&format!("-hostloops{}", c.cpu.host_cpu_load));
    }
    if !c.coordination.is_off() {
        d.push_str(&format!(
            "-coord-{}",
            sanitize_component(c.coordination.name())
        ));
    }
    d
}

/// S's file name of a cell, from the app's side: `<sched>-<N>r<M>w-<pattern>-lat_thr_stat.txt`
/// or `<sched>-<N>r<M>w-<pattern>-<D>sec-aggthr_stat.txt`.
pub fn s_file_name(result: &CellResult) -> String {
    let c = &result.cell;
    let base = format!(
        "{}-{}",
        sanitize_component(c.app_side_sched().name()),
        c.app_side_workload().s_name()
    );
    match c.benchmark {
        Benchmark::Startup => format!("{base}-lat_thr_stat.txt"),
        Benchmark::Throughput => format!("{base}-{}sec-aggthr_stat.txt", secs(c.duration_s)),
        Benchmark::Latency => format!("{base}-cyclictest_stat.txt"),
        // One file per profile and metric (tps or MB/s, p50, p99).
        Benchmark::Profile => format!(
            "{base}{}-{}sec-{}_stat.txt",
            c.profile.map(|p| p.file_part()).unwrap_or_default(),
            secs(c.duration_s),
            result.metric.as_str()
        ),
        Benchmark::ReadersHashers => format!("{base}-{}_stat.txt", result.metric),
    }
}

/// The stat file of one repetition: statistics over its starts (a repetition with a
/// timed-out start is X, as S shows a start that did not finish) or its throughput
/// samples.
pub fn repetition_file(result: &CellResult, run: &RunResult) -> String {
    let mut out = stat_file_header(&result.cell);
    out.push('\n');
    let latency = (run.timeouts == 0).then_some(run.values.as_slice());
    out.push_str(&sections(result.metric, latency, &run.values, &[run]));
    out.push_str(COLUMNS_NOTE);
    out
}

/// The S tree of results: `(path relative to the tree, contents)` for every
/// repetition of every result, `<test dir>/repetition<i>/<S file name>` (see
/// [`test_dir`], [`s_file_name`]). Two results landing on the same path (the same
/// cell from two runners, or names equal after sanitizing) are an error naming both.
pub fn s_tree(results: &[CellResult]) -> Result<Vec<(PathBuf, String)>, String> {
    let mut files: Vec<(PathBuf, String)> = Vec::new();
    let mut owners: Vec<(PathBuf, usize)> = Vec::new();
    // The CPU model's cells (cyclictest, hot start-up) are no S benchmark: their
    // stat files are in the output directory only.
    for (i, r) in results
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.cell.on_cpu_model())
    {
        let dir = PathBuf::from(test_dir(r));
        let name = s_file_name(r);
        let probe = dir.join(&name);
        if let Some((_, j)) = owners.iter().find(|(p, _)| *p == probe) {
            return Err(format!(
                "two results map to the same S file {}: [{}] ({}) and [{}] ({})",
                probe.display(),
                results[*j].cell.key(),
                results[*j].runner,
                r.cell.key(),
                r.runner
            ));
        }
        owners.push((probe, i));
        for (rep, run) in r.runs.iter().enumerate() {
            let path = dir.join(format!("repetition{rep}")).join(&name);
            files.push((path, repetition_file(r, run)));
        }
    }
    Ok(files)
}
