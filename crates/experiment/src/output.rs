//! Writing (and reading back) a run's output directory.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cell::Cell;
use crate::naming::{result_stat_file_name, sanitize_component, stat_file_contents};
use crate::other_vms::{OtherVms, NO_OTHER_VMS};
use crate::result::{CellResult, Metric, RunMeta, RunResult};
use crate::scenario::Benchmark;
use crate::stats::Summary;
use crate::svg::{build_chart, idle_reference, render_bar_chart};
use crate::table::render_tables;

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
];

/// Value of `schema` in `results.json`.
pub const RESULTS_JSON_SCHEMA: &str = "tandem-results/1";

/// Quotes a CSV field when needed (RFC 4180).
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Fixed number format for CSV: 4 decimals.
fn num(x: f64) -> String {
    format!("{x:.4}")
}

/// Where each result's stat file goes, relative to the output directory:
/// `<stat_file_name>`, or `<device>/<stat_file_name>` when the results span several
/// devices (device sanitized by [`sanitize_component`]).
pub fn stat_file_paths(results: &[CellResult]) -> Vec<String> {
    let mut devices: Vec<&str> = Vec::new();
    for r in results {
        if !devices.contains(&r.cell.device.as_str()) {
            devices.push(&r.cell.device);
        }
    }
    results
        .iter()
        .map(|r| {
            let name = result_stat_file_name(&r.cell, r.metric);
            if devices.len() > 1 {
                format!("{}/{}", sanitize_component(&r.cell.device), name)
            } else {
                name
            }
        })
        .collect()
}

/// The text of `results.csv`: header ([`CSV_COLUMNS`] then [`CSV_EXTRA_COLUMNS`]) and
/// one row per result in input order; numbers with 4 decimals; guest fields empty for
/// native cells.
pub fn results_csv(results: &[CellResult]) -> String {
    let paths = stat_file_paths(results);
    let mut out = String::new();
    let header: Vec<&str> = CSV_COLUMNS
        .iter()
        .chain(CSV_EXTRA_COLUMNS)
        .copied()
        .collect();
    out.push_str(&header.join(","));
    out.push('\n');
    for (r, path) in results.iter().zip(&paths) {
        let c = &r.cell;
        let s = r.summary();
        let fields = [
            r.runner.clone(),
            c.device.clone(),
            c.guest_sched.clone().unwrap_or_default(),
            c.host_sched.clone(),
            c.guest_workload.clone().unwrap_or_default(),
            c.host_workload.clone(),
            c.coordination.clone(),
            c.benchmark.as_str().to_string(),
            c.app.clone(),
            r.metric.as_str().to_string(),
            s.n.to_string(),
            num(s.mean),
            num(s.std),
            num(s.min),
            num(s.max),
            num(s.ci95_low),
            num(s.ci95_high),
            r.timeouts().to_string(),
            c.other_vms.clone(),
            c.scenario.clone(),
            c.iterations.to_string(),
            c.repetitions.to_string(),
            c.seed.to_string(),
            path.clone(),
        ];
        let line: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
        out.push_str(&line.join(","));
        out.push('\n');
    }
    out
}

/// One cell in `results.json`.
#[derive(Serialize)]
struct CellRecordOut<'a> {
    cell: &'a Cell,
    runner: &'a str,
    metric: Metric,
    summary: Summary,
    timeouts: u32,
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
    let paths = stat_file_paths(results);
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
                summary: r.summary(),
                timeouts: r.timeouts(),
                stat_file: p,
                runs: &r.runs,
            })
            .collect(),
    };
    let mut s = serde_json::to_string_pretty(&doc).expect("results serialize");
    s.push('\n');
    s
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

/// Splits CSV text into records of fields (RFC 4180 quoting).
fn csv_records(text: &str) -> Result<Vec<Vec<String>>, String> {
    let mut records = Vec::new();
    let mut record = Vec::new();
    let mut field = String::new();
    let mut chars = text.chars().peekable();
    let mut in_quotes = false;
    let mut line = 1usize;
    let mut any = false;
    while let Some(c) = chars.next() {
        if in_quotes {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => in_quotes = false,
                c => {
                    if c == '\n' {
                        line += 1;
                    }
                    field.push(c);
                }
            }
            continue;
        }
        match c {
            '"' if field.is_empty() => {
                in_quotes = true;
                any = true;
            }
            ',' => {
                record.push(std::mem::take(&mut field));
                any = true;
            }
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' => {
                if any || !field.is_empty() {
                    record.push(std::mem::take(&mut field));
                    records.push(std::mem::take(&mut record));
                }
                any = false;
                line += 1;
            }
            c => {
                field.push(c);
                any = true;
            }
        }
    }
    if in_quotes {
        return Err(format!("line {line}: unterminated quoted field"));
    }
    if any || !field.is_empty() {
        record.push(field);
        records.push(record);
    }
    Ok(records)
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
                 accepted: startup, throughput"
            )
        })?;
        let metric_s = get("metric");
        let metric = Metric::parse(&metric_s).ok_or_else(|| {
            format!(
                "row {lineno}: column metric: unknown metric \"{metric_s}\"; \
                 accepted: startup_s, throughput_mb_s"
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
            coordination: opt("coordination").unwrap_or_else(|| "off".to_string()),
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

/// Title of a plot for one device and benchmark.
fn plot_title(benchmark: Benchmark, device: &str, members: &[&CellResult]) -> String {
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
        Benchmark::Latency => format!("cyclictest latency ({})", runners.join(", ")),
    }
}

/// Writes a run's outputs into `dir` (created if missing) and returns the paths
/// written, in this order:
///
/// - `results.csv` ([`results_csv`]), `results.json` ([`results_json`]),
///   `table.txt` ([`render_tables`]);
/// - one S-style stat file per result ([`stat_file_paths`], [`stat_file_contents`]);
/// - one SVG per device and benchmark: `<benchmark>-<device>.svg` (device sanitized),
///   e.g. `startup-hdd-1.8in.svg`; start-up plots get the idle reference line
///   ([`idle_reference`]).
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
    // (benchmark, device) pairs in first-appearance order, with their plot file names.
    let mut plots: Vec<(Benchmark, String, String)> = Vec::new();
    for r in results {
        let file = format!(
            "{}-{}.svg",
            r.cell.benchmark.as_str(),
            sanitize_component(&r.cell.device)
        );
        if let Some((_, dev, _)) = plots.iter().find(|(_, _, f)| *f == file) {
            if *dev != r.cell.device {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "devices \"{dev}\" and \"{}\" map to the same plot file {file}",
                        r.cell.device
                    ),
                ));
            }
            continue;
        }
        plots.push((r.cell.benchmark, r.cell.device.clone(), file));
    }

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
    for (benchmark, device, file) in &plots {
        let members: Vec<&CellResult> = results
            .iter()
            .filter(|r| r.cell.benchmark == *benchmark && r.cell.device == *device)
            .collect();
        let title = plot_title(*benchmark, device, &members);
        let reference = match benchmark {
            Benchmark::Startup => idle_reference(members.iter().copied()),
            Benchmark::Throughput | Benchmark::Latency => None,
        };
        let svg = render_bar_chart(&build_chart(&title, members.iter().copied(), reference));
        write_file(dir, file, &svg, &mut written)?;
    }
    Ok(written)
}
