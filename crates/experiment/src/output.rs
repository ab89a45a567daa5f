//! Writing (and reading back) a run's output directory.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cell::Cell;
use crate::naming::{
    result_stat_file_name, sanitize_component, stat_file_contents, stat_file_name,
};
use crate::other_vms::{OtherVms, NO_OTHER_VMS};
use crate::plot::{plot_files, write_plots};
use crate::result::{CellResult, Finished, Metric, RunMeta, RunResult};
use crate::s_suite::{s_tree, S_TREE};
use crate::scenario::Benchmark;
use crate::stats::{IntervalNote, Percentiles, Summary};
use crate::table::render_tables;
use crate::vocab::CoordMode;

/// The columns `results.csv` starts with, in this order (the DESIGN.md contract).
pub const CSV_COLUMNS: &[&str] = &[
    "runner",
    "device",
    "guest_sched",
    "host_sched",
    "guest_workload",
    "host_workload",
    "coordination",
    "benchmark",
    "app",
    "metric",
    "n",
    "mean",
    "std",
    "min",
    "max",
    "ci95_low",
    "ci95_high",
    "timeouts",
];

/// Extra columns after [`CSV_COLUMNS`]. `other_vms` comes first among them rather than
/// next to the other matrix keys, so the contract columns keep their positions.
pub const CSV_EXTRA_COLUMNS: &[&str] = &[
    "other_vms",
    "scenario",
    "iterations",
    "repetitions",
    "seed",
    "stat_file",
    "finished_n",
    "finished_mean",
    "median",
    "p90",
    "p99",
    "ci95_note",
];

/// Value of `schema` in `results.json`.
pub const RESULTS_JSON_SCHEMA: &str = "tandem-results/1";

/// Fixed number format for CSV: 4 decimals.
fn num(x: f64) -> String {
    format!("{x:.4}")
}

/// A number, or an empty field when it is not finite (no value).
fn num_or_empty(x: f64) -> String {
    if x.is_finite() {
        num(x)
    } else {
        String::new()
    }
}

/// Where each result's stat file goes, relative to the output directory:
/// `<stat_file_name>`, or `<device>/<stat_file_name>` when the results span several
/// devices (device sanitized by [`sanitize_component`]).
pub fn stat_file_paths(results: &[CellResult]) -> Vec<String> {
    let name = |r: &CellResult| result_stat_file_name(&r.cell, r.metric);
    stat_file_paths_of(results.iter().map(|r| &r.cell))
        .into_iter()
        .zip(results)
        // The latency benchmark's second metric has a file of its own.
        .map(|(p, r)| p.replace(&stat_file_name(&r.cell), &name(r)))
        .collect()
}

/// [`stat_file_paths`] of cells (e.g. those a run plans, before their results).
pub fn stat_file_paths_of<'a>(cells: impl Iterator<Item = &'a Cell> + Clone) -> Vec<String> {
    let mut devices: Vec<&str> = Vec::new();
    for c in cells.clone() {
        if !devices.contains(&c.device.name()) {
            devices.push(c.device.name());
        }
    }
    cells
        .map(|c| {
            let name = stat_file_name(c);
            if devices.len() > 1 {
                format!("{}/{}", sanitize_component(c.device.name()), name)
            } else {
                name
            }
        })
        .collect()
}

/// The header of `results.csv`: [`CSV_COLUMNS`] then [`CSV_EXTRA_COLUMNS`].
pub fn csv_header() -> Vec<&'static str> {
    CSV_COLUMNS
        .iter()
        .chain(CSV_EXTRA_COLUMNS)
        .copied()
        .collect()
}

/// Columns after [`CSV_EXTRA_COLUMNS`] in results of the profile benchmark
/// only (so the files of every other scenario keep their header):
/// the profile, its threads, block size and read share, and the hypervisor.
pub const CSV_PROFILE_COLUMNS: &[&str] = &[
    "profile",
    "threads",
    "block_kib",
    "read_share",
    "hypervisor",
];

/// True when `results.csv` of these results has [`CSV_PROFILE_COLUMNS`].
pub fn has_profile_columns(results: &[CellResult]) -> bool {
    results.iter().any(|r| r.cell.profile.is_some())
}

/// The values of [`CSV_PROFILE_COLUMNS`] for a cell (empty without a profile).
pub fn csv_profile_fields(c: &Cell) -> Vec<String> {
    match c.profile {
        Some(p) => vec![
            p.profile.to_string(),
            p.threads.to_string(),
            p.block_kib.to_string(),
            p.read_share.to_string(),
            c.hypervisor.to_string(),
        ],
        None => vec![String::new(); CSV_PROFILE_COLUMNS.len()],
    }
}

/// One row of `results.csv` for `r`, whose stat file is `stat_file`.
///
/// `mean` and the statistics after it are over the run means, a timed-out start
/// counting as `timeout_s`; a cell with timeouts (X) has no interval (`ci95_low` and
/// `ci95_high` empty) and `finished_n`/`finished_mean` give the starts that did
/// finish. `median`, `p90` and `p99` are over every start (or sample) of every run.
/// `ci95_note` says when the interval is not one (see [`IntervalNote`]).
pub fn csv_record(r: &CellResult, stat_file: &str) -> Vec<String> {
    let c = &r.cell;
    let s = r.summary();
    let note = r.interval_note();
    let interval = |x: f64| {
        if note.has_interval() {
            num(x)
        } else {
            String::new()
        }
    };
    let finished = r.finished();
    let p = r.percentiles();
    vec![
        r.runner.clone(),
        c.device.to_string(),
        c.guest_sched.map(|g| g.to_string()).unwrap_or_default(),
        c.host_sched.to_string(),
        c.guest_workload.map(|g| g.name()).unwrap_or_default(),
        c.host_workload.name(),
        c.coordination.to_string(),
        c.benchmark.as_str().to_string(),
        c.app.clone(),
        r.metric.as_str().to_string(),
        s.n.to_string(),
        num(s.mean),
        num(s.std),
        num(s.min),
        num(s.max),
        interval(s.ci95_low),
        interval(s.ci95_high),
        r.timeouts().to_string(),
        c.other_vms.name(),
        c.scenario.clone(),
        c.iterations.to_string(),
        c.repetitions.to_string(),
        c.seed.to_string(),
        stat_file.to_string(),
        finished.n.to_string(),
        num_or_empty(finished.mean),
        num_or_empty(p.median),
        num_or_empty(p.p90),
        num_or_empty(p.p99),
        note.as_str().to_string(),
    ]
}

/// A CSV writer with `results.csv`'s conventions (quoting only where RFC 4180 needs
/// it, `\n` line ends).
pub fn csv_writer<W: io::Write>(w: W) -> csv::Writer<W> {
    csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(w)
}

/// The text of `results.csv`: header ([`csv_header`]) and one row per result
/// ([`csv_record`]) in input order; numbers with 4 decimals; guest fields empty for
/// native cells.
pub fn results_csv(results: &[CellResult]) -> String {
    let paths = stat_file_paths(results);
    let mut w = csv_writer(Vec::new());
    let profiles = has_profile_columns(results);
    let mut header = csv_header();
    if profiles {
        header.extend_from_slice(CSV_PROFILE_COLUMNS);
    }
    w.write_record(header).expect("writing to memory");
    for (r, path) in results.iter().zip(&paths) {
        let mut record = csv_record(r, path);
        if profiles {
            record.extend(csv_profile_fields(&r.cell));
        }
        w.write_record(record).expect("writing to memory");
    }
    let bytes = w.into_inner().expect("flushing to memory");
    String::from_utf8(bytes).expect("fields are UTF-8")
}

/// One cell in `results.json`.
#[derive(Serialize)]
struct CellRecordOut<'a> {
    cell: &'a Cell,
    runner: &'a str,
    metric: Metric,
    summary: Summary,
    /// What the summary's interval is worth.
    interval: IntervalNote,
    timeouts: u32,
    /// The starts that finished, apart from the timeouts.
    finished: Finished,
    percentiles: Percentiles,
    stat_file: &'a str,
    runs: &'a [RunResult],
}

#[derive(Serialize)]
struct ResultsOut<'a> {
    schema: &'a str,
    meta: &'a RunMeta,
    cells: Vec<CellRecordOut<'a>>,
}

#[derive(Deserialize)]
struct ResultsIn {
    schema: String,
    meta: RunMeta,
    cells: Vec<CellResult>,
}

/// The text of `results.json`: `{"schema", "meta", "cells": [{"cell", "runner",
/// "metric", "summary", "timeouts", "stat_file", "runs": [{"values", "timeouts"}]}]}`,
/// pretty-printed. Deterministic: nothing but `meta` and the results goes in.
/// Non-finite numbers (the summary of a cell without values) are written as `null`.
pub fn results_json(meta: &RunMeta, results: &[CellResult]) -> String {
    let refs: Vec<&CellResult> = results.iter().collect();
    let mut out = Vec::new();
    write_results_json(&mut out, meta, &refs).expect("writing to memory");
    String::from_utf8(out).expect("JSON is UTF-8")
}

/// The summary as results.json gives it: without an interval (`null`) when the
/// cell has none ([`IntervalNote::has_interval`]), as results.csv.
fn shown_summary(r: &CellResult) -> Summary {
    let mut s = r.summary();
    if !r.interval_note().has_interval() {
        s.ci95_low = f64::NAN;
        s.ci95_high = f64::NAN;
    }
    s
}

/// Writes [`results_json`]'s text to `w` as it goes, without the whole text (or a
/// copy of the results) in memory: the run's results are written this way while it
/// runs.
pub fn write_results_json<W: io::Write>(
    mut w: W,
    meta: &RunMeta,
    results: &[&CellResult],
) -> io::Result<()> {
    let paths = stat_file_paths_of(results.iter().map(|r| &r.cell));
    let doc = ResultsOut {
        schema: RESULTS_JSON_SCHEMA,
        meta,
        cells: results
            .iter()
            .zip(&paths)
            .map(|(r, p)| CellRecordOut {
                cell: &r.cell,
                runner: &r.runner,
                metric: r.metric,
                summary: shown_summary(r),
                interval: r.interval_note(),
                timeouts: r.timeouts(),
                finished: r.finished(),
                percentiles: r.percentiles(),
                stat_file: p,
                runs: &r.runs,
            })
            .collect(),
    };
    serde_json::to_writer_pretty(&mut w, &doc)?;
    w.write_all(b"\n")
}

/// Parses `results.json` text back into its meta and results (summaries are
/// recomputed from the runs by [`CellResult::summary`]).
pub fn parse_results_json(text: &str) -> Result<(RunMeta, Vec<CellResult>), String> {
    let doc: ResultsIn =
        serde_json::from_str(text).map_err(|e| format!("invalid results.json: {e}"))?;
    if doc.schema != RESULTS_JSON_SCHEMA {
        return Err(format!(
            "unsupported results.json schema \"{}\"; expected \"{RESULTS_JSON_SCHEMA}\"",
            doc.schema
        ));
    }
    Ok((doc.meta, doc.cells))
}

/// Reads `results.json` (see [`parse_results_json`]); errors name the path.
pub fn read_results_json(path: &Path) -> Result<(RunMeta, Vec<CellResult>), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    parse_results_json(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// One row of a `results.csv` (columns in any order; extra columns are ignored;
/// `n`, the statistics and `timeouts` may be empty, e.g. in hand-written reference
/// files with only a mean).
#[derive(Clone, Debug, PartialEq)]
pub struct CsvRow {
    pub runner: String,
    pub device: String,
    pub guest_sched: Option<String>,
    pub host_sched: String,
    pub guest_workload: Option<String>,
    pub host_workload: String,
    /// Canonical `other_vms`; `none` when the column is missing or empty.
    pub other_vms: String,
    pub coordination: String,
    pub benchmark: Benchmark,
    pub app: String,
    pub metric: Metric,
    pub n: Option<usize>,
    pub mean: Option<f64>,
    pub std: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub ci95_low: Option<f64>,
    pub ci95_high: Option<f64>,
    pub timeouts: Option<u32>,
}

/// Splits CSV text into records of fields (RFC 4180 quoting, by the `csv` crate).
fn csv_records(text: &str) -> Result<Vec<Vec<String>>, String> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(text.as_bytes());
    reader
        .records()
        .map(|rec| {
            rec.map(|r| r.iter().map(str::to_string).collect())
                .map_err(|e| match e.position() {
                    Some(p) => format!("line {}: {e}", p.line()),
                    None => e.to_string(),
                })
        })
        .collect()
}

/// Parses a `results.csv` (ours or a hand-written reference file with the same
/// columns). Errors name the line and column.
pub fn parse_results_csv(text: &str) -> Result<Vec<CsvRow>, String> {
    let records = csv_records(text)?;
    let Some((header, rows)) = records.split_first() else {
        return Err("empty CSV: no header row".to_string());
    };
    let col = |name: &str| header.iter().position(|h| h.trim() == name);
    let required = [
        "runner",
        "device",
        "host_sched",
        "host_workload",
        "benchmark",
        "metric",
    ];
    for r in required {
        if col(r).is_none() {
            return Err(format!(
                "missing column \"{r}\"; columns: {}",
                CSV_COLUMNS.join(",")
            ));
        }
    }
    let mut out = Vec::new();
    for (i, rec) in rows.iter().enumerate() {
        let lineno = i + 2;
        let get = |name: &str| -> String {
            col(name)
                .and_then(|j| rec.get(j))
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        let opt = |name: &str| {
            let v = get(name);
            if v.is_empty() {
                None
            } else {
                Some(v)
            }
        };
        let float = |name: &str| -> Result<Option<f64>, String> {
            match opt(name) {
                None => Ok(None),
                Some(v) => v
                    .parse::<f64>()
                    .map(Some)
                    .map_err(|_| format!("row {lineno}: column {name}: not a number: \"{v}\"")),
            }
        };
        let benchmark_s = get("benchmark");
        let benchmark = Benchmark::parse(&benchmark_s).ok_or_else(|| {
            format!(
                "row {lineno}: column benchmark: unknown benchmark \"{benchmark_s}\"; \
                 accepted: {}",
                crate::scenario::ACCEPTED_BENCHMARKS
            )
        })?;
        let metric_s = get("metric");
        let metric = Metric::parse(&metric_s).ok_or_else(|| {
            format!(
                "row {lineno}: column metric: unknown metric \"{metric_s}\"; \
                 accepted: startup_s, throughput_mb_s, latency_avg_us, latency_max_us, \
                 tps, io_latency_p50_ms, io_latency_p99_ms"
            )
        })?;
        let n = match opt("n") {
            None => None,
            Some(v) => Some(
                v.parse::<usize>()
                    .map_err(|_| format!("row {lineno}: column n: not a count: \"{v}\""))?,
            ),
        };
        let timeouts = match opt("timeouts") {
            None => None,
            Some(v) => Some(
                v.parse::<u32>()
                    .map_err(|_| format!("row {lineno}: column timeouts: not a count: \"{v}\""))?,
            ),
        };
        let other_vms = match opt("other_vms") {
            None => NO_OTHER_VMS.to_string(),
            Some(v) => OtherVms::canonical(&v)
                .map_err(|e| format!("row {lineno}: column other_vms: {e}"))?,
        };
        out.push(CsvRow {
            runner: get("runner"),
            device: get("device"),
            guest_sched: opt("guest_sched"),
            host_sched: get("host_sched"),
            guest_workload: opt("guest_workload"),
            host_workload: get("host_workload"),
            other_vms,
            coordination: opt("coordination").unwrap_or_else(|| CoordMode::Off.to_string()),
            benchmark,
            app: get("app"),
            metric,
            n,
            mean: float("mean")?,
            std: float("std")?,
            min: float("min")?,
            max: float("max")?,
            ci95_low: float("ci95_low")?,
            ci95_high: float("ci95_high")?,
            timeouts,
        });
    }
    Ok(out)
}

fn write_file(dir: &Path, rel: &str, text: &str, written: &mut Vec<PathBuf>) -> io::Result<()> {
    let path = dir.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&path, text)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    written.push(path);
    Ok(())
}

/// Writes a run's outputs into `dir` (created if missing) and returns the paths
/// written, in this order:
///
/// - `results.csv` ([`results_csv`]), `results.json` ([`results_json`]),
///   `table.txt` ([`render_tables`]);
/// - one S-style stat file per result ([`stat_file_paths`], [`stat_file_contents`]);
/// - S's tree, `S/<test dir>/repetition<i>/<S file name>`, for S's own scripts
///   ([`s_tree`]);
/// - one SVG and one PNG per device and benchmark: `<benchmark>-<device>.svg` and
///   `.png` (device sanitized), e.g. `startup-hdd-1.8in.svg` ([`write_plots`]).
///
/// Same inputs give byte-identical files. Two results that would share a stat file
/// (same cell twice, or device names equal after sanitizing) are an `InvalidInput`
/// error, before anything is written.
pub fn write_outputs(
    dir: &Path,
    meta: &RunMeta,
    results: &[CellResult],
) -> io::Result<Vec<PathBuf>> {
    let stat_paths = stat_file_paths(results);
    for (i, p) in stat_paths.iter().enumerate() {
        if let Some(j) = stat_paths[..i].iter().position(|q| q == p) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "two results map to the same stat file {p}: [{}] ({}) and [{}] ({})",
                    results[j].cell.key(),
                    results[j].runner,
                    results[i].cell.key(),
                    results[i].runner
                ),
            ));
        }
    }
    let invalid = |e: String| io::Error::new(io::ErrorKind::InvalidInput, e);
    plot_files(results).map_err(invalid)?;
    let s_files = s_tree(results).map_err(invalid)?;
    std::fs::create_dir_all(dir)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
    let mut written = Vec::new();
    write_file(dir, "results.csv", &results_csv(results), &mut written)?;
    write_file(
        dir,
        "results.json",
        &results_json(meta, results),
        &mut written,
    )?;
    write_file(dir, "table.txt", &render_tables(results), &mut written)?;
    for (r, p) in results.iter().zip(&stat_paths) {
        write_file(dir, p, &stat_file_contents(r), &mut written)?;
    }
    for (rel, text) in &s_files {
        write_file(
            dir,
            &format!("{S_TREE}/{}", rel.display()),
            text,
            &mut written,
        )?;
    }
    written.extend(write_plots(dir, results, None, "")?);
    written.extend(crate::plot::study::write_cpu_plots(dir, results)?);
    Ok(written)
}
