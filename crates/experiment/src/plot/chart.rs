//! What a plot shows, before anything is drawn: small multiples of grouped bars, built
//! from results. Pure data, so tests can check the layout without parsing a picture.
//!
//! One chart per device and benchmark. Along x: the workload beside the app (the
//! guest's for VM cells, the host's for native cells), as in Figure 1 of the CLOUD 2014
//! paper. Series (colours): the coordination mode when the results hold several,
//! else the app-side scheduler (the guest's for VM cells). Panels: one per value of
//! everything else that varies (host scheduler and workload, other VMs, and the guest
//! scheduler when the series are coordination modes), so no panel carries more than a
//! handful of series.

use std::collections::BTreeMap;

use crate::paper::{compare_with_reference, PaperValue, Reference};
use crate::result::{CellResult, Metric};

/// Values spanning at least this factor (one decade) get a logarithmic y axis, so that
/// a 2 s start beside a 60 s one is still readable.
pub const LOG_SPAN: f64 = 10.0;

/// What a bar shows.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BarValue {
    /// Mean of the run means and the 95% Student's t interval of `results.csv`
    /// (`ci95_low`, `ci95_high`).
    Mean { mean: f64, ci95: (f64, f64) },
    /// A start hit the timeout: drawn as X, without bar or interval.
    Timeout,
    /// The cell ran but has no value.
    NoData,
}

/// One bar: its group (x position) and series (colour) in its panel.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    pub group: usize,
    pub series: usize,
    pub value: BarValue,
    /// The published value of the same cell, drawn as a marker beside the bar.
    pub paper: Option<PaperValue>,
}

/// One small multiple.
#[derive(Clone, Debug, PartialEq)]
pub struct Panel {
    pub title: String,
    /// Group labels along x, in order.
    pub groups: Vec<String>,
    pub bars: Vec<Bar>,
}

/// The y axis, shared by every panel so that they compare at a glance.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scale {
    Linear {
        max: f64,
    },
    /// Powers of ten around the values.
    Log {
        min: f64,
        max: f64,
    },
}

/// A chart: panels laid out in `columns` columns, one legend.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// Legend labels of the series, in colour order.
    pub series: Vec<String>,
    pub panels: Vec<Panel>,
    pub columns: usize,
    pub scale: Scale,
    /// The idle start-up time: a dashed line in every panel, and its legend label.
    pub idle: Option<(f64, String)>,
    /// The largest `timeout_s` among cells that timed out (the legend names it).
    pub timeout_s: Option<f64>,
    /// Whether any bar has a published value beside it.
    pub has_paper: bool,
}

/// The published values of the results' cells, by [`crate::Cell::key`] (see
/// [`compare_with_reference`] for which result a reference cell matches).
pub fn paper_marks(reference: &Reference, results: &[CellResult]) -> BTreeMap<String, PaperValue> {
    compare_with_reference(reference, results)
        .rows
        .into_iter()
        .filter(|r| !r.reference.is_idle())
        .filter_map(|r| r.matched.map(|k| (k, r.reference.value)))
        .collect()
}

fn position(v: &mut Vec<String>, x: &str) -> usize {
    match v.iter().position(|y| y == x) {
        Some(i) => i,
        None => {
            v.push(x.to_string());
            v.len() - 1
        }
    }
}

/// What tells results apart in a chart, besides the x group.
struct Dims {
    coords: Vec<String>,
    runners: Vec<String>,
    host_scheds: Vec<String>,
    host_workloads: Vec<String>,
}

impl Dims {
    fn of(results: &[&CellResult]) -> Dims {
        let mut d = Dims {
            coords: Vec::new(),
            runners: Vec::new(),
            host_scheds: Vec::new(),
            host_workloads: Vec::new(),
        };
        for r in results {
            position(&mut d.coords, r.cell.coordination.name());
            position(&mut d.runners, &r.runner);
            if !r.cell.is_native() {
                position(&mut d.host_scheds, r.cell.host_sched.name());
                position(&mut d.host_workloads, &r.cell.host_workload.name());
            }
        }
        d
    }

    fn series_are_coordination(&self) -> bool {
        self.coords.len() > 1
    }

    /// The legend label of a result's series.
    fn series_label(&self, r: &CellResult) -> String {
        let mut label = if self.series_are_coordination() {
            format!("coordination {}", r.cell.coordination)
        } else if r.cell.is_native() {
            format!("{} (native)", r.cell.host_sched)
        } else {
            format!("{} in the guest", r.cell.app_side_sched())
        };
        if self.runners.len() > 1 {
            label.push_str(&format!(" [{}]", r.runner));
        }
        label
    }

    /// The title of a result's panel: what varies besides the x group and the series.
    fn panel_title(&self, r: &CellResult) -> String {
        let c = &r.cell;
        let mut parts = Vec::new();
        match &c.guest_sched {
            Some(gs) => {
                if self.series_are_coordination() {
                    parts.push(format!("guest {gs}"));
                }
                parts.push(format!(
                    "host {}, host workload {}",
                    c.host_sched, c.host_workload
                ));
            }
            None => {
                parts.push("native".to_string());
                if self.series_are_coordination() {
                    parts.push(c.host_sched.to_string());
                }
            }
        }
        if c.has_other_vms() {
            parts.push(format!("other VMs {}", c.other_vms));
        }
        if !self.series_are_coordination() && !c.coordination.is_off() {
            parts.push(format!("coordination {}", c.coordination));
        }
        parts.join(", ")
    }

    /// Columns of the panel grid: one per host workload when the VM panels differ by
    /// it (so a row reads left to right as the host gets busier), else up to 3.
    fn columns(&self, panels: usize) -> usize {
        let by_host = self.host_workloads.len();
        let cols = if (2..=4).contains(&by_host) && panels.checked_rem(by_host) == Some(0) {
            by_host
        } else {
            panels.min(3)
        };
        cols.max(1)
    }
}

fn bar_value(r: &CellResult) -> BarValue {
    if r.timeouts() > 0 {
        return BarValue::Timeout;
    }
    let s = r.summary();
    if s.n == 0 || !s.mean.is_finite() {
        return BarValue::NoData;
    }
    BarValue::Mean {
        mean: s.mean,
        ci95: (s.ci95_low, s.ci95_high),
    }
}

/// Builds the chart of results of one device and benchmark (see the module doc).
/// `paper`: published values by cell key ([`paper_marks`]); `idle`: the dashed idle
/// line ([`crate::plot::idle_reference`]). Panels and groups keep the results' order
/// of first appearance.
pub fn build_chart<'a, I>(
    title: &str,
    results: I,
    paper: &BTreeMap<String, PaperValue>,
    idle: Option<(f64, String)>,
) -> Chart
where
    I: IntoIterator<Item = &'a CellResult>,
{
    let results: Vec<&CellResult> = results.into_iter().collect();
    let dims = Dims::of(&results);
    let mut series = Vec::new();
    let mut panel_titles: Vec<String> = Vec::new();
    let mut panels: Vec<Panel> = Vec::new();
    let mut timeout_s: Option<f64> = None;
    for r in &results {
        let p = position(&mut panel_titles, &dims.panel_title(r));
        if p == panels.len() {
            panels.push(Panel {
                title: panel_titles[p].clone(),
                groups: Vec::new(),
                bars: Vec::new(),
            });
        }
        let panel = &mut panels[p];
        let value = bar_value(r);
        if value == BarValue::Timeout {
            timeout_s = Some(timeout_s.unwrap_or(0.0).max(r.cell.timeout_s));
        }
        panel.bars.push(Bar {
            group: position(&mut panel.groups, &r.cell.app_side_workload().name()),
            series: position(&mut series, &dims.series_label(r)),
            value,
            paper: paper.get(&r.cell.key()).copied(),
        });
    }
    let metric = results.first().map_or(Metric::StartupS, |r| r.metric);
    let all_vm = !results.is_empty() && results.iter().all(|r| !r.cell.is_native());
    let x_label = if all_vm {
        "Workload in the guest"
    } else {
        "Workload beside the app"
    };
    let has_paper = panels
        .iter()
        .flat_map(|p| &p.bars)
        .any(|b| b.paper.is_some());
    let scale = scale_of(&panels, idle.as_ref().map(|(v, _)| *v));
    Chart {
        title: title.to_string(),
        x_label: x_label.to_string(),
        y_label: metric.label().to_string(),
        series,
        columns: dims.columns(panels.len()),
        panels,
        scale,
        idle,
        timeout_s,
        has_paper,
    }
}

/// The y axis for the values drawn: bar tops, interval ends, published values and the
/// idle line. Logarithmic when the positive values span [`LOG_SPAN`] or more.
fn scale_of(panels: &[Panel], idle: Option<f64>) -> Scale {
    let mut values: Vec<f64> = idle.into_iter().collect();
    for b in panels.iter().flat_map(|p| &p.bars) {
        if let BarValue::Mean { mean, ci95 } = b.value {
            values.extend([mean, ci95.0, ci95.1]);
        }
        if let Some(PaperValue::Seconds(s)) = b.paper {
            values.push(s);
        }
    }
    let positive: Vec<f64> = values
        .into_iter()
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    let lo = positive.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = positive.iter().copied().fold(0.0_f64, f64::max);
    if positive.is_empty() {
        return Scale::Linear { max: 1.0 };
    }
    if hi / lo >= LOG_SPAN {
        Scale::Log {
            min: 10f64.powf(lo.log10().floor()),
            // headroom above the tallest bar for its interval cap and the X marks
            max: 10f64.powf((hi * 1.3).log10().ceil()),
        }
    } else {
        Scale::Linear { max: hi * 1.15 }
    }
}
