//! What every runner writes for a latency cell (`benchmark = "latency"`),
//! so that the simulator's cells and the real runner's compare line for
//! line: each run's average latency (us) in `values` and its maximum in the
//! [`LATENCY_MAX_US`] counter, made two result rows by [`cell_results`];
//! the cell's cyclictest histogram in the file [`histogram_file_name`].

use crate::result::READERS_HASHERS_METRICS;
use crate::{Benchmark, Cell, CellResult, Metric, RunResult};

/// The counter that carries a run's maximum latency (us), next to its
/// average in `values`; [`cell_results`] makes it the `latency_max_us` row.
pub const LATENCY_MAX_US: &str = "latency_max_us";

/// A cell's results from its runs, for `runner` ("sim" or "real"): the
/// latency benchmark gives two rows, `latency_avg_us` (the runs' averages,
/// with their counters) and `latency_max_us` (their maxima); the profile
/// benchmark three ([`crate::profile::result_rows`]); the readers-hashers
/// benchmark eight, one per VM and metric, from the runs' counters of those
/// names; every other benchmark one, its benchmark's metric.
pub fn cell_results(cell: &Cell, runner: &str, runs: Vec<RunResult>) -> Vec<CellResult> {
    let row = |metric, runs| CellResult {
        cell: cell.clone(),
        runner: runner.into(),
        metric,
        runs,
    };
    if let (Benchmark::Profile, Some(p)) = (cell.benchmark, cell.profile) {
        return crate::profile::result_rows(&p, runs)
            .into_iter()
            .map(|(metric, runs)| row(metric, runs))
            .collect();
    }
    if cell.benchmark == Benchmark::ReadersHashers {
        return READERS_HASHERS_METRICS
            .into_iter()
            .map(|m| row(m, counter_runs(&runs, m.as_str())))
            .collect();
    }
    if cell.benchmark != Benchmark::Latency {
        return vec![row(Metric::for_cell(cell), runs)];
    }
    let max_runs = counter_runs(&runs, LATENCY_MAX_US);
    vec![
        row(Metric::LatencyAvgUs, runs),
        row(Metric::LatencyMaxUs, max_runs),
    ]
}

/// How many result rows [`cell_results`] makes of `cell`: the slots a run's
/// writer keeps for it ([`crate::incremental::planned`]).
pub fn results_per_cell(cell: &Cell) -> usize {
    match cell.benchmark {
        Benchmark::Latency => 2,
        // The profile's metric, its p50 and its p99 (`crate::profile::result_rows`).
        Benchmark::Profile => 3,
        Benchmark::ReadersHashers => READERS_HASHERS_METRICS.len(),
        _ => 1,
    }
}

/// Each run's counter `name` as the value of a run of its own.
fn counter_runs(runs: &[RunResult], name: &str) -> Vec<RunResult> {
    runs.iter()
        .map(|r| RunResult {
            values: r.counters.get(name).copied().into_iter().collect(),
            ..RunResult::default()
        })
        .collect()
}

/// The histogram file of a latency cell, next to its stat files:
/// `<stat file name without its suffix>-cyclictest-hist.txt`.
pub fn histogram_file_name(cell: &Cell) -> String {
    let name = crate::naming::stat_file_name(cell);
    let stem = name
        .strip_suffix("-cyclictest-avg_stat.txt")
        .unwrap_or(&name);
    format!("{stem}-cyclictest-hist.txt")
}
