//! Published reference numbers (the files under `reference/`) and their comparison with
//! tandem's results.
//!
//! A reference file is TOML:
//!
//! ```toml
//! [device]
//! name = "hdd-1.8in"            # the device preset the numbers are compared on
//!
//! [idle]
//! xterm_startup_s = 1.9         # <app>_startup_s: start-up time with the disk idle
//!
//! [startup.xterm]               # start-up times of an app in one VM
//! host_sched = "bfq"
//! guest_workloads = ["1r-seq", "5r-seq"]
//! "bfq/none"   = [2.2, 2.6]     # "<guest_sched>/<host_workload>" = one value per
//! "cfq/1r-seq" = [14.0, "X"]    #   guest workload: seconds, or "X" (timed out)
//! ```
//!
//! Other keys of `[device]` (model, peak rate, ...) are documentation and are ignored.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::Deserialize;
use toml::{Spanned, Value};

use crate::result::{CellResult, Metric};
use crate::scenario::describe;
use crate::side_by_side::within;
use crate::workload::WorkloadSpec;

/// Top-level keys of a reference file.
pub const REFERENCE_KEYS: &[&str] = &["device", "idle", "startup"];

/// Ratios tandem/paper within `WITHIN` either way count as agreeing in the summary
/// (see [`within`]: the larger value over the smaller at most `1 + WITHIN`).
pub const WITHIN: f64 = crate::side_by_side::DEFAULT_TOLERANCE;

/// A published value: seconds, or `X` (the app did not start within the timeout).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PaperValue {
    Seconds(f64),
    Timeout,
}

impl fmt::Display for PaperValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PaperValue::Seconds(s) => write!(f, "{s:.2}"),
            PaperValue::Timeout => f.write_str("X"),
        }
    }
}

/// One published number and the cell it was measured in.
#[derive(Clone, Debug, PartialEq)]
pub struct ReferenceCell {
    pub device: String,
    pub app: String,
    /// `None` when the reference does not say (the idle start-up time).
    pub host_sched: Option<String>,
    /// `None` when the reference does not say (the idle start-up time).
    pub guest_sched: Option<String>,
    /// Canonical workload name.
    pub guest_workload: String,
    /// Canonical workload name.
    pub host_workload: String,
    pub value: PaperValue,
}

impl ReferenceCell {
    /// True for the idle start-up time (no workload anywhere, schedulers not given).
    pub fn is_idle(&self) -> bool {
        self.host_sched.is_none() && self.guest_sched.is_none()
    }

    /// A short description, e.g. `xterm: guest cfq 5r-seq, host bfq 1r-seq` or
    /// `xterm: idle disk`.
    pub fn describe(&self) -> String {
        match (&self.guest_sched, &self.host_sched) {
            (Some(gs), Some(hs)) => format!(
                "{}: guest {gs} {}, host {hs} {}",
                self.app, self.guest_workload, self.host_workload
            ),
            _ => format!("{}: idle disk", self.app),
        }
    }
}

/// A parsed reference file: its device and its cells, idle cells first (in app
/// order), then each `[startup.<app>]` table's series in file order, each series'
/// values in `guest_workloads` order.
#[derive(Clone, Debug, PartialEq)]
pub struct Reference {
    pub device: String,
    pub cells: Vec<ReferenceCell>,
}

/// Parses a reference file's text. Errors name the key and the value.
pub fn parse_reference(text: &str) -> Result<Reference, String> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| e.to_string().trim_end().to_string())?;
    for k in table.keys() {
        if !REFERENCE_KEYS.contains(&k.as_str()) {
            return Err(format!(
                "unknown key \"{k}\"; accepted keys: {}",
                REFERENCE_KEYS.join(", ")
            ));
        }
    }
    let device = match table.get("device") {
        Some(Value::Table(t)) => match t.get("name") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
            Some(v) => {
                return Err(format!(
                    "device.name: expected a non-empty device name, found {}",
                    describe(v)
                ))
            }
            None => return Err("device.name: missing (the device preset name)".to_string()),
        },
        Some(v) => return Err(format!("device: expected a table, found {}", describe(v))),
        None => return Err("device: missing table [device] with the device name".to_string()),
    };

    let mut cells = Vec::new();
    match table.get("idle") {
        None => {}
        Some(Value::Table(t)) => {
            for (k, v) in t {
                let key = format!("idle.{k}");
                let app = k
                    .strip_suffix("_startup_s")
                    .filter(|a| !a.is_empty())
                    .ok_or_else(|| {
                        format!(
                            "{key}: unknown key; accepted: <app>_startup_s (e.g. xterm_startup_s)"
                        )
                    })?;
                cells.push(ReferenceCell {
                    device: device.clone(),
                    app: app.to_string(),
                    host_sched: None,
                    guest_sched: None,
                    guest_workload: "none".to_string(),
                    host_workload: "none".to_string(),
                    value: paper_value(&key, v)?,
                });
            }
        }
        Some(v) => return Err(format!("idle: expected a table, found {}", describe(v))),
    }

    match table.get("startup") {
        None => {}
        Some(Value::Table(apps)) => {
            let order = series_order(text);
            for (app, t) in apps {
                let Value::Table(t) = t else {
                    return Err(format!(
                        "startup.{app}: expected a table [startup.{app}], found {}",
                        describe(t)
                    ));
                };
                startup_cells(&device, app, t, order.get(app), &mut cells)?;
            }
        }
        Some(v) => {
            return Err(format!(
                "startup: expected tables [startup.<app>], found {}",
                describe(v)
            ))
        }
    }
    if cells.is_empty() {
        return Err(
            "no reference values; give [idle] <app>_startup_s or [startup.<app>] tables"
                .to_string(),
        );
    }
    Ok(Reference { device, cells })
}

/// Reads a reference file (see [`parse_reference`]); errors start with the path.
pub fn read_reference(path: &Path) -> Result<Reference, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    parse_reference(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The cells of one `[startup.<app>]` table, series in file order (`order`: each key's
/// byte offset in the file), each series' values in `guest_workloads` order.
fn startup_cells(
    device: &str,
    app: &str,
    t: &toml::Table,
    order: Option<&BTreeMap<String, usize>>,
    cells: &mut Vec<ReferenceCell>,
) -> Result<(), String> {
    let key = |k: &str| format!("startup.{app}.{k}");
    let host_sched = match t.get("host_sched") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(v) => {
            return Err(format!(
                "{}: expected a scheduler name, found {}",
                key("host_sched"),
                describe(v)
            ))
        }
        None => return Err(format!("{}: missing", key("host_sched"))),
    };
    let guest_workloads: Vec<String> = match t.get("guest_workloads") {
        Some(Value::Array(items)) if !items.is_empty() => {
            let mut names: Vec<String> = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let k = format!("{}[{i}]", key("guest_workloads"));
                let Value::String(s) = item else {
                    return Err(format!(
                        "{k}: expected a workload name, found {}",
                        describe(item)
                    ));
                };
                let name = WorkloadSpec::canonical(s).map_err(|e| format!("{k}: {e}"))?;
                if names.contains(&name) {
                    return Err(format!("{k}: duplicate workload \"{s}\""));
                }
                names.push(name);
            }
            names
        }
        Some(v) => {
            return Err(format!(
                "{}: expected a non-empty list of workload names, found {}",
                key("guest_workloads"),
                describe(v)
            ))
        }
        None => return Err(format!("{}: missing", key("guest_workloads"))),
    };
    let mut series: Vec<(&String, &Value)> = t
        .iter()
        .filter(|(k, _)| k.as_str() != "host_sched" && k.as_str() != "guest_workloads")
        .collect();
    if let Some(order) = order {
        series.sort_by_key(|(k, _)| order.get(k.as_str()).copied().unwrap_or(usize::MAX));
    }
    for (k, v) in series {
        let sk = key(&format!("\"{k}\""));
        let (guest_sched, host_workload) = k
            .split_once('/')
            .filter(|(g, h)| !g.is_empty() && !h.is_empty())
            .ok_or_else(|| {
                format!(
                    "{sk}: unknown key; accepted: host_sched, guest_workloads, and series \
                     \"<guest_sched>/<host_workload>\" (e.g. \"bfq/1r-seq\")"
                )
            })?;
        let host_workload =
            WorkloadSpec::canonical(host_workload).map_err(|e| format!("{sk}: {e}"))?;
        let Value::Array(values) = v else {
            return Err(format!(
                "{sk}: expected a list of {} values (seconds or \"X\"), found {}",
                guest_workloads.len(),
                describe(v)
            ));
        };
        if values.len() != guest_workloads.len() {
            return Err(format!(
                "{sk}: {} values, but guest_workloads has {} ({})",
                values.len(),
                guest_workloads.len(),
                guest_workloads.join(", ")
            ));
        }
        for (i, (gw, item)) in guest_workloads.iter().zip(values).enumerate() {
            cells.push(ReferenceCell {
                device: device.to_string(),
                app: app.to_string(),
                host_sched: Some(host_sched.clone()),
                guest_sched: Some(guest_sched.to_string()),
                guest_workload: gw.clone(),
                host_workload: host_workload.clone(),
                value: paper_value(&format!("{sk}[{i}]"), item)?,
            });
        }
    }
    Ok(())
}

/// A value: a positive, finite number of seconds, or `"X"`.
fn paper_value(key: &str, v: &Value) -> Result<PaperValue, String> {
    let x = match v {
        Value::Integer(i) => *i as f64,
        Value::Float(f) => *f,
        Value::String(s) if s == "X" => return Ok(PaperValue::Timeout),
        _ => {
            return Err(format!(
                "{key}: expected seconds or \"X\" (timed out), found {}",
                describe(v)
            ))
        }
    };
    if !(x.is_finite() && x > 0.0) {
        return Err(format!(
            "{key}: expected a positive, finite number of seconds, found {}",
            describe(v)
        ));
    }
    Ok(PaperValue::Seconds(x))
}

/// Byte offsets of the keys of each `[startup.<app>]` table, to keep the file's series
/// order: `toml::Table` iterates in key order, and the file's order (the paper's
/// legend order) reads better. Empty when the file does not have that shape (the
/// caller has reported the error by then, or falls back to key order).
fn series_order(text: &str) -> BTreeMap<String, BTreeMap<String, usize>> {
    #[derive(Deserialize)]
    struct Spans {
        #[serde(default)]
        startup: BTreeMap<String, BTreeMap<String, Spanned<Value>>>,
    }
    match toml::from_str::<Spans>(text) {
        Ok(s) => s
            .startup
            .into_iter()
            .map(|(app, keys)| {
                let offsets = keys.into_iter().map(|(k, v)| (k, v.span().start)).collect();
                (app, offsets)
            })
            .collect(),
        Err(_) => BTreeMap::new(),
    }
}

/// tandem's value of a cell, as its tables show it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TandemValue {
    /// Mean of the run means, in seconds.
    Seconds(f64),
    /// At least one start hit the timeout (X).
    Timeout,
    /// The cell ran but has no value.
    NoData,
    /// No result matches the reference cell.
    Missing,
}

impl fmt::Display for TandemValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TandemValue::Seconds(s) => write!(f, "{s:.2}"),
            TandemValue::Timeout => f.write_str("X"),
            TandemValue::NoData => f.write_str("-"),
            TandemValue::Missing => f.write_str("missing"),
        }
    }
}

/// One reference cell against tandem's result.
#[derive(Clone, Debug, PartialEq)]
pub struct ComparisonRow {
    pub reference: ReferenceCell,
    /// [`ReferenceCell::describe`], plus the schedulers of the matched cell for idle.
    pub description: String,
    /// [`crate::Cell::key`] of the result compared against.
    pub matched: Option<String>,
    pub tandem: TandemValue,
    /// tandem / paper, when both are numbers.
    pub ratio: Option<f64>,
    /// Whether both are X or both are numbers; `None` when tandem has no value.
    pub x_match: Option<bool>,
}

/// Totals over a comparison's rows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ComparisonSummary {
    /// Rows with a tandem value (a number or X).
    pub compared: usize,
    /// Reference cells without a matching result.
    pub missing: usize,
    /// Rows where both values are numbers.
    pub numeric: usize,
    /// Rows with a ratio within `WITHIN` either way ([`within`]).
    pub within: usize,
    /// Compared rows where tandem and the paper agree on X.
    pub x_matches: usize,
    /// The ratio farthest from 1 (by factor, either way) and its row's description.
    pub worst: Option<(f64, String)>,
}

/// The comparison of a reference with results.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    pub device: String,
    pub rows: Vec<ComparisonRow>,
    pub summary: ComparisonSummary,
}

/// Whether `r` is the measurement of reference cell `c`: same device and app, start-up
/// time, no coordination, no other VMs, and the same schedulers and workloads. The
/// idle reference matches a cell with host workload `none` and guest workload `none`
/// (or a native cell), whatever its schedulers.
fn matches(c: &ReferenceCell, r: &CellResult) -> bool {
    let cell = &r.cell;
    if r.metric != Metric::StartupS
        || cell.device.name() != c.device
        || crate::apptrace::app_of(&cell.app) != c.app
        || !cell.coordination.is_off()
        || cell.has_other_vms()
        || cell.host_workload.name() != c.host_workload
    {
        return false;
    }
    if c.is_idle() {
        return cell.guest_workload.is_none_or(|w| w.is_none());
    }
    cell.guest_sched.map(|g| g.name()) == c.guest_sched.as_deref()
        && cell.guest_workload.map(|w| w.name()).as_deref() == Some(c.guest_workload.as_str())
        && Some(cell.host_sched.name()) == c.host_sched.as_deref()
}

/// Refuses to set `results` against a reference of another kind: a reference of VM
/// cells (guest and host schedulers) against a run of native cells only, or a
/// reference for a device the run did not measure. The error says what each holds.
pub fn check_comparable(reference: &Reference, results: &[CellResult]) -> Result<(), String> {
    let reference_vm = reference.cells.iter().any(|c| c.guest_sched.is_some());
    let run_vm = results.iter().any(|r| r.cell.guest_sched.is_some());
    if reference_vm && !run_vm {
        return Err(format!(
            "the reference holds VM cells (a guest scheduler and a host scheduler each) and \
             the run's {} cells are all native (no guest): nothing to compare; compare a VM \
             run (e.g. tandem sim run cloud2014)",
            results.len()
        ));
    }
    if !results
        .iter()
        .any(|r| r.cell.device.name() == reference.device)
    {
        let mut devices: Vec<&str> = results.iter().map(|r| r.cell.device.name()).collect();
        devices.dedup();
        return Err(format!(
            "the reference is for device {} and the run measured {}: nothing to compare",
            reference.device,
            if devices.is_empty() {
                "no cell".to_string()
            } else {
                devices.join(", ")
            }
        ));
    }
    Ok(())
}

/// Compares a reference with results: one row per reference cell, in the reference's
/// order, with the first matching result. Reference cells without a result are
/// `Missing`, except the idle cell, which is left out when no idle cell ran.
pub fn compare_with_reference(reference: &Reference, results: &[CellResult]) -> Comparison {
    let mut rows = Vec::new();
    let mut summary = ComparisonSummary::default();
    for c in &reference.cells {
        let found = results.iter().find(|r| matches(c, r));
        if found.is_none() && c.is_idle() {
            continue;
        }
        let mut description = c.describe();
        if let (true, Some(r)) = (c.is_idle(), found) {
            let who = match &r.cell.guest_sched {
                Some(gs) => format!("guest {gs}, host {}", r.cell.host_sched),
                None => format!("native {}", r.cell.host_sched),
            };
            description.push_str(&format!(" ({who})"));
        }
        let tandem = match found {
            None => TandemValue::Missing,
            Some(r) if r.timeouts() > 0 => TandemValue::Timeout,
            Some(r) => {
                let s = r.summary();
                if s.n > 0 && s.mean.is_finite() {
                    TandemValue::Seconds(s.mean)
                } else {
                    TandemValue::NoData
                }
            }
        };
        let ratio = match (c.value, tandem) {
            (PaperValue::Seconds(p), TandemValue::Seconds(t)) => Some(t / p),
            _ => None,
        };
        let x_match = match tandem {
            TandemValue::Seconds(_) => Some(c.value != PaperValue::Timeout),
            TandemValue::Timeout => Some(c.value == PaperValue::Timeout),
            TandemValue::NoData | TandemValue::Missing => None,
        };
        match tandem {
            TandemValue::Missing => summary.missing += 1,
            TandemValue::NoData => {}
            TandemValue::Seconds(_) | TandemValue::Timeout => summary.compared += 1,
        }
        if x_match == Some(true) {
            summary.x_matches += 1;
        }
        if let Some(q) = ratio {
            summary.numeric += 1;
            if within(q, WITHIN) {
                summary.within += 1;
            }
            let off = q.ln().abs();
            let worse = match &summary.worst {
                None => true,
                Some((w, _)) => off > w.ln().abs(),
            };
            if worse {
                summary.worst = Some((q, description.clone()));
            }
        }
        rows.push(ComparisonRow {
            reference: c.clone(),
            description,
            matched: found.map(|r| r.cell.key()),
            tandem,
            ratio,
            x_match,
        });
    }
    Comparison {
        device: reference.device.clone(),
        rows,
        summary,
    }
}

/// Renders a comparison as a fixed-width text table (columns `cell`, `paper`,
/// `tandem`, `ratio`, `X-match`) and a summary line.
pub fn render_comparison(cmp: &Comparison) -> String {
    let mut grid: Vec<[String; 5]> = vec![[
        "cell".to_string(),
        "paper".to_string(),
        "tandem".to_string(),
        "ratio".to_string(),
        "X-match".to_string(),
    ]];
    for r in &cmp.rows {
        grid.push([
            r.description.clone(),
            r.reference.value.to_string(),
            r.tandem.to_string(),
            r.ratio.map(|q| format!("{q:.2}")).unwrap_or_default(),
            match r.x_match {
                Some(true) => "yes".to_string(),
                Some(false) => "no".to_string(),
                None => String::new(),
            },
        ]);
    }
    let widths: Vec<usize> = (0..5)
        .map(|i| grid.iter().map(|l| l[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = format!(
        "== {} | start-up time [s], tandem vs paper | ratio = tandem/paper ==\n",
        cmp.device
    );
    for line in &grid {
        let mut text = format!("{:<w$}", line[0], w = widths[0]);
        for (i, field) in line.iter().enumerate().skip(1) {
            if i == 4 {
                text.push_str(&format!("  {:<w$}", field, w = widths[i]));
            } else {
                text.push_str(&format!("  {:>w$}", field, w = widths[i]));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out.push_str(&summary_line(&cmp.summary));
    out.push('\n');
    out
}

fn summary_line(s: &ComparisonSummary) -> String {
    let pct = (WITHIN * 100.0).round();
    let worst = match &s.worst {
        Some((q, d)) => format!("worst ratio {q:.2} ({d})"),
        None => "worst ratio: none (no cell has two numbers)".to_string(),
    };
    format!(
        "summary: {} cells compared, {} missing; {} of {} within ±{pct}%; X matches {} of {}; {worst}",
        s.compared, s.missing, s.within, s.numeric, s.x_matches, s.compared
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::Cell;
    use crate::result::RunResult;
    use crate::scenario::Benchmark;
    use crate::{CoordMode, OtherVms};

    const SMALL: &str = r#"
[device]
name = "hdd-1.8in"
model = "ignored"

[idle]
xterm_startup_s = 2

[startup.xterm]
host_sched = "bfq"
guest_workloads = ["1r-seq", "5r0w-seq"]
"cfq/none" = [4.0, "X"]
"bfq/none" = [2.0, 3.0]
"#;

    fn cell(gs: Option<&str>, gw: Option<&str>, hs: &str, hw: &str) -> Cell {
        Cell {
            scenario: "t".into(),
            device: "hdd-1.8in".parse().unwrap(),
            host_sched: hs.parse().unwrap(),
            host_workload: hw.parse().unwrap(),
            guest_sched: gs.map(|g| g.parse().unwrap()),
            guest_workload: gw.map(|g| g.parse().unwrap()),
            other_vms: OtherVms::none(),
            coordination: CoordMode::Off,
            cpu: Default::default(),
            profile: None,
            hypervisor: Default::default(),
            benchmark: Benchmark::Startup,
            app: "xterm".into(),
            iterations: 2,
            repetitions: 2,
            timeout_s: 60.0,
            duration_s: 60.0,
            sample_s: 2.0,
            seed: 1,
        }
    }

    fn result(c: Cell, runs: &[&[f64]], timeouts: u32) -> CellResult {
        CellResult {
            cell: c,
            runner: "sim".into(),
            metric: Metric::StartupS,
            runs: runs
                .iter()
                .enumerate()
                .map(|(i, v)| RunResult {
                    values: v.to_vec(),
                    timeouts: if i == 0 { timeouts } else { 0 },
                    ..Default::default()
                })
                .collect(),
        }
    }

    #[test]
    fn parses_cells_in_file_order() {
        let r = parse_reference(SMALL).unwrap();
        assert_eq!(r.device, "hdd-1.8in");
        let got: Vec<(Option<&str>, &str, &str, PaperValue)> = r
            .cells
            .iter()
            .map(|c| {
                (
                    c.guest_sched.as_deref(),
                    c.guest_workload.as_str(),
                    c.host_workload.as_str(),
                    c.value,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (None, "none", "none", PaperValue::Seconds(2.0)),
                (Some("cfq"), "1r-seq", "none", PaperValue::Seconds(4.0)),
                (Some("cfq"), "5r-seq", "none", PaperValue::Timeout),
                (Some("bfq"), "1r-seq", "none", PaperValue::Seconds(2.0)),
                (Some("bfq"), "5r-seq", "none", PaperValue::Seconds(3.0)),
            ]
        );
        assert!(r.cells[0].is_idle());
        assert_eq!(r.cells[1].host_sched.as_deref(), Some("bfq"));
        assert_eq!(
            r.cells[1].describe(),
            "xterm: guest cfq 1r-seq, host bfq none"
        );
    }

    #[test]
    fn malformed_files_name_key_and_value() {
        let base = "[device]\nname = \"hdd\"\n";
        let st =
            "[startup.xterm]\nhost_sched = \"bfq\"\nguest_workloads = [\"1r-seq\", \"5r-seq\"]\n";
        for (text, want) in [
            ("[device\n".to_string(), "TOML parse error"),
            (
                "foo = 1\n".to_string() + base,
                "unknown key \"foo\"; accepted keys: device, idle, startup",
            ),
            (
                "[idle]\nxterm_startup_s = 1\n".to_string(),
                "device: missing",
            ),
            (
                "[device]\nname = 3\n".to_string(),
                "device.name: expected a non-empty device name, found 3",
            ),
            (
                format!("{base}[idle]\nxterm = 1.9\n"),
                "idle.xterm: unknown key",
            ),
            (
                format!("{base}[idle]\nxterm_startup_s = -1.9\n"),
                "idle.xterm_startup_s: expected a positive, finite number of seconds, found -1.9",
            ),
            (
                format!("{base}[idle]\nxterm_startup_s = \"fast\"\n"),
                "idle.xterm_startup_s: expected seconds or \"X\" (timed out), found \"fast\"",
            ),
            (format!("startup = 3\n{base}"), "startup: expected tables"),
            (base.to_string(), "no reference values"),
            (
                format!("{base}[startup]\nxterm = 3\n"),
                "startup.xterm: expected a table",
            ),
            (
                format!("{base}[startup.xterm]\nguest_workloads = [\"1r-seq\"]\n"),
                "startup.xterm.host_sched: missing",
            ),
            (
                format!("{base}[startup.xterm]\nhost_sched = \"bfq\"\n"),
                "startup.xterm.guest_workloads: missing",
            ),
            (
                format!(
                    "{base}[startup.xterm]\nhost_sched = \"bfq\"\nguest_workloads = [\"1r-sq\"]\n"
                ),
                "startup.xterm.guest_workloads[0]: unknown workload \"1r-sq\"",
            ),
            (
                format!("{base}{st}\"bfq/none\" = [1.0]\n"),
                "startup.xterm.\"bfq/none\": 1 values, but guest_workloads has 2",
            ),
            (
                format!("{base}{st}\"bfq/none\" = [1.0, \"x\"]\n"),
                "startup.xterm.\"bfq/none\"[1]: expected seconds or \"X\" (timed out), found \"x\"",
            ),
            (
                format!("{base}{st}\"bfq/none\" = [1.0, true]\n"),
                "startup.xterm.\"bfq/none\"[1]: expected seconds or \"X\" (timed out), found true",
            ),
            (
                format!("{base}{st}\"bfq/5r\" = [1.0, 2.0]\n"),
                "startup.xterm.\"bfq/5r\": unknown workload \"5r\"",
            ),
            (
                format!("{base}{st}\"bfq\" = [1.0, 2.0]\n"),
                "startup.xterm.\"bfq\": unknown key; accepted: host_sched, guest_workloads",
            ),
            (
                format!("{base}{st}\"bfq/none\" = 2.0\n"),
                "startup.xterm.\"bfq/none\": expected a list of 2 values",
            ),
        ] {
            let e = parse_reference(&text).unwrap_err();
            assert!(e.contains(want), "{text}\n=> {e}\nwanted: {want}");
        }
    }

    #[test]
    fn compares_values_timeouts_and_missing_cells() {
        let reference = parse_reference(SMALL).unwrap();
        let results = vec![
            // idle: matches the native idle cell
            result(cell(None, None, "bfq", "none"), &[&[2.0, 2.4]], 0),
            // paper 4.0, tandem 5.0
            result(
                cell(Some("cfq"), Some("1r-seq"), "bfq", "none"),
                &[&[5.0], &[5.0]],
                0,
            ),
            // paper X, tandem X
            result(
                cell(Some("cfq"), Some("5r-seq"), "bfq", "none"),
                &[&[60.0]],
                1,
            ),
            // paper 2.0, tandem X
            result(
                cell(Some("bfq"), Some("1r-seq"), "bfq", "none"),
                &[&[60.0]],
                1,
            ),
            // bfq/5r-seq missing; a cell of another device and host scheduler are ignored
            result(
                cell(Some("bfq"), Some("5r-seq"), "cfq", "none"),
                &[&[1.0]],
                0,
            ),
        ];
        let cmp = compare_with_reference(&reference, &results);
        assert_eq!(cmp.rows.len(), 5);
        let tandem: Vec<TandemValue> = cmp.rows.iter().map(|r| r.tandem).collect();
        assert_eq!(
            tandem,
            vec![
                TandemValue::Seconds(2.2),
                TandemValue::Seconds(5.0),
                TandemValue::Timeout,
                TandemValue::Timeout,
                TandemValue::Missing,
            ]
        );
        assert_eq!(cmp.rows[0].description, "xterm: idle disk (native bfq)");
        assert!((cmp.rows[0].ratio.unwrap() - 1.1).abs() < 1e-12);
        assert_eq!(cmp.rows[1].ratio, Some(1.25));
        let x: Vec<Option<bool>> = cmp.rows.iter().map(|r| r.x_match).collect();
        assert_eq!(
            x,
            vec![Some(true), Some(true), Some(true), Some(false), None]
        );
        let s = &cmp.summary;
        assert_eq!(
            (s.compared, s.missing, s.numeric, s.within, s.x_matches),
            (4, 1, 2, 2, 3)
        );
        assert_eq!(s.worst.as_ref().unwrap().0, 1.25);

        let text = render_comparison(&cmp);
        let expected = "\
== hdd-1.8in | start-up time [s], tandem vs paper | ratio = tandem/paper ==
cell                                    paper   tandem  ratio  X-match
xterm: idle disk (native bfq)            2.00     2.20   1.10  yes
xterm: guest cfq 1r-seq, host bfq none   4.00     5.00   1.25  yes
xterm: guest cfq 5r-seq, host bfq none      X        X         yes
xterm: guest bfq 1r-seq, host bfq none   2.00        X         no
xterm: guest bfq 5r-seq, host bfq none   3.00  missing
";
        assert!(text.starts_with(expected), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[7],
            "summary: 4 cells compared, 1 missing; 2 of 2 within ±25%; X matches 3 of 4; \
             worst ratio 1.25 (xterm: guest cfq 1r-seq, host bfq none)"
        );
    }

    #[test]
    fn idle_row_left_out_without_an_idle_cell() {
        let reference = parse_reference(SMALL).unwrap();
        let cmp = compare_with_reference(&reference, &[]);
        assert_eq!(cmp.rows.len(), 4);
        assert!(cmp.rows.iter().all(|r| r.tandem == TandemValue::Missing));
        assert_eq!(cmp.summary.missing, 4);
        assert!(render_comparison(&cmp).contains("worst ratio: none"));
        // a VM idle cell counts, whatever its schedulers
        let r = result(
            cell(Some("cfq"), Some("none"), "noop", "none"),
            &[&[1.9]],
            0,
        );
        let cmp = compare_with_reference(&reference, &[r]);
        assert_eq!(
            cmp.rows[0].description,
            "xterm: idle disk (guest cfq, host noop)"
        );
    }

    #[test]
    fn the_shipped_reference_parses() {
        let text = include_str!("../../../reference/cloud2014-hdd.toml");
        let r = parse_reference(text).unwrap();
        assert_eq!(r.device, "hdd-1.8in");
        // idle + 6 series x 4 guest workloads
        assert_eq!(r.cells.len(), 1 + 6 * 4);
        assert_eq!(r.cells[0].value, PaperValue::Seconds(1.9));
        let c = &r.cells[1];
        assert_eq!(
            (
                c.guest_sched.as_deref(),
                c.guest_workload.as_str(),
                c.host_workload.as_str()
            ),
            (Some("bfq"), "1r-seq", "none")
        );
        assert_eq!(c.value, PaperValue::Seconds(2.2));
        let timeouts = r
            .cells
            .iter()
            .filter(|c| c.value == PaperValue::Timeout)
            .count();
        assert_eq!(timeouts, 5);
        let last = r.cells.last().unwrap();
        assert_eq!(
            (
                last.guest_sched.as_deref(),
                last.guest_workload.as_str(),
                last.host_workload.as_str()
            ),
            (Some("cfq"), "5r-rand", "5r-seq")
        );
        assert_eq!(last.value, PaperValue::Timeout);
    }

    #[test]
    fn a_reference_of_another_kind_is_refused() {
        let reference = parse_reference(SMALL).unwrap();
        let native = result(cell(None, None, "bfq", "none"), &[&[2.0]], 0);
        let e = check_comparable(&reference, std::slice::from_ref(&native)).unwrap_err();
        assert!(e.contains("VM cells") && e.contains("all native"), "{e}");
        let vm = result(cell(Some("bfq"), Some("none"), "bfq", "none"), &[&[2.0]], 0);
        assert_eq!(check_comparable(&reference, &[native, vm.clone()]), Ok(()));
        let mut other = vm;
        other.cell.device = "emmc".parse().unwrap();
        let e = check_comparable(&reference, &[other]).unwrap_err();
        assert!(
            e.contains("device hdd-1.8in and the run measured emmc"),
            "{e}"
        );
    }
}
