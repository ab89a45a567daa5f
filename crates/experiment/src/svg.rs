//! Hand-written SVG bar charts (no plotting dependency; deterministic text).

use std::fmt::Write as _;

use crate::result::{CellResult, Metric};

/// One bar of a [`BarChart`].
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    /// Index into [`BarChart::groups`].
    pub group: usize,
    /// Index into [`BarChart::series`].
    pub series: usize,
    /// Bar height in data units.
    pub value: f64,
    /// Error bar (low, high) in data units, if any.
    pub error: Option<(f64, f64)>,
    /// Draws an `X` above the bar (a start hit the timeout).
    pub timeout: bool,
    /// Tooltip text (an SVG `<title>`).
    pub tooltip: String,
}

/// A grouped bar chart.
#[derive(Clone, Debug, PartialEq)]
pub struct BarChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// Group labels along the x axis, in order.
    pub groups: Vec<String>,
    /// Series (legend) labels, in order; each gets a color.
    pub series: Vec<String>,
    pub bars: Vec<Bar>,
    /// A horizontal dashed reference line: value and legend label.
    pub reference: Option<(f64, String)>,
}

const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

/// Escapes text for XML content and attribute values.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// A "nice" tick step (1, 2 or 5 times a power of ten) giving about 5 ticks up to `max`.
fn nice_step(max: f64) -> f64 {
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let n = raw / mag;
    let m = if n <= 1.0 {
        1.0
    } else if n <= 2.0 {
        2.0
    } else if n <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

fn tick_label(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10()).ceil().max(0.0) as usize
    };
    format!("{v:.decimals$}")
}

/// Renders a chart as a standalone SVG document (starts with `<svg`).
pub fn render_bar_chart(chart: &BarChart) -> String {
    const BAR_W: f64 = 14.0;
    const GAP: f64 = 20.0;
    const LEFT: f64 = 70.0;
    const TOP: f64 = 44.0;
    const PLOT_H: f64 = 280.0;
    const BOTTOM: f64 = 56.0;
    const CHAR_W: f64 = 6.6;

    let ns = chart.series.len().max(1) as f64;
    let ng = chart.groups.len().max(1) as f64;
    let group_w = ns * BAR_W;
    let plot_w = (ng * (group_w + GAP) + GAP).max(240.0);
    // Center the groups when the minimum width is larger than needed.
    let x0 = LEFT + (plot_w - (ng * (group_w + GAP) + GAP)) / 2.0;

    enum Mark {
        Color(&'static str),
        Dashed,
        Cross,
    }
    let mut legend: Vec<(String, Mark)> = chart
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| (s.clone(), Mark::Color(PALETTE[i % PALETTE.len()])))
        .collect();
    if let Some((_, label)) = &chart.reference {
        legend.push((label.clone(), Mark::Dashed));
    }
    if chart.bars.iter().any(|b| b.timeout) {
        legend.push(("a start hit the timeout".to_string(), Mark::Cross));
    }
    let legend_x = LEFT + plot_w + 20.0;
    let legend_w = 30.0
        + legend
            .iter()
            .map(|(l, _)| l.chars().count() as f64 * CHAR_W)
            .fold(0.0, f64::max);
    // Title: centered over the plot, or left-aligned (and the image widened) if long.
    let title_w = chart.title.chars().count() as f64 * 8.6;
    let title_center = LEFT + plot_w / 2.0;
    let (title_x, title_anchor) = if title_center - title_w / 2.0 < 8.0 {
        (8.0, "start")
    } else {
        (title_center, "middle")
    };
    let width = (legend_x + legend_w + 10.0).max(title_w + 24.0).ceil();
    let height = (TOP + PLOT_H + BOTTOM).max(TOP + 18.0 * legend.len() as f64 + 20.0);

    // y scale
    let mut ymax = 0.0_f64;
    for b in &chart.bars {
        if b.value.is_finite() {
            ymax = ymax.max(b.value);
        }
        if let Some((_, hi)) = b.error {
            if hi.is_finite() {
                ymax = ymax.max(hi);
            }
        }
    }
    if let Some((r, _)) = &chart.reference {
        if r.is_finite() {
            ymax = ymax.max(*r);
        }
    }
    if ymax <= 0.0 || !ymax.is_finite() {
        ymax = 1.0;
    }
    let step = nice_step(ymax * 1.08);
    let ytop = (ymax * 1.08 / step).ceil() * step;
    let y_of = |v: f64| TOP + PLOT_H - (v.max(0.0) / ytop) * PLOT_H;

    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {width:.0} {height:.0}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(
        s,
        "<rect x=\"0\" y=\"0\" width=\"{width:.0}\" height=\"{height:.0}\" fill=\"white\"/>"
    );
    let _ = writeln!(
        s,
        "<text x=\"{title_x:.1}\" y=\"24\" text-anchor=\"{title_anchor}\" font-size=\"15\" font-weight=\"bold\">{}</text>",
        xml_escape(&chart.title)
    );

    // grid and y ticks
    let nticks = (ytop / step).round() as usize;
    for i in 0..=nticks {
        let v = step * i as f64;
        let y = y_of(v);
        let _ = writeln!(
            s,
            "<line x1=\"{LEFT:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#dddddd\"/>",
            LEFT + plot_w
        );
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LEFT - 6.0,
            y + 4.0,
            tick_label(v, step)
        );
    }
    // axes
    let _ = writeln!(
        s,
        "<line x1=\"{LEFT:.1}\" y1=\"{TOP:.1}\" x2=\"{LEFT:.1}\" y2=\"{:.1}\" stroke=\"black\"/>",
        TOP + PLOT_H
    );
    let _ = writeln!(
        s,
        "<line x1=\"{LEFT:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>",
        TOP + PLOT_H,
        LEFT + plot_w,
        TOP + PLOT_H
    );
    let cy = TOP + PLOT_H / 2.0;
    let _ = writeln!(
        s,
        "<text x=\"18\" y=\"{cy:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {cy:.1})\">{}</text>",
        xml_escape(&chart.y_label)
    );
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
        LEFT + plot_w / 2.0,
        TOP + PLOT_H + 42.0,
        xml_escape(&chart.x_label)
    );

    // group labels
    for (gi, g) in chart.groups.iter().enumerate() {
        let gx = x0 + GAP + gi as f64 * (group_w + GAP) + group_w / 2.0;
        let _ = writeln!(
            s,
            "<text x=\"{gx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            TOP + PLOT_H + 18.0,
            xml_escape(g)
        );
    }

    // bars
    for b in &chart.bars {
        if !b.value.is_finite() {
            continue;
        }
        let x = x0 + GAP + b.group as f64 * (group_w + GAP) + b.series as f64 * BAR_W;
        let y = y_of(b.value);
        let h = TOP + PLOT_H - y;
        let color = PALETTE[b.series % PALETTE.len()];
        let _ = writeln!(
            s,
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{color}\" stroke=\"#333333\" stroke-width=\"0.5\"><title>{}</title></rect>",
            BAR_W - 1.0,
            xml_escape(&b.tooltip)
        );
        let cx = x + (BAR_W - 1.0) / 2.0;
        if let (Some((lo, hi)), false) = (b.error, b.timeout) {
            if lo.is_finite() && hi.is_finite() {
                let (ylo, yhi) = (y_of(lo), y_of(hi));
                let _ = writeln!(
                    s,
                    "<path d=\"M{cx:.1} {ylo:.1}V{yhi:.1}M{:.1} {ylo:.1}H{:.1}M{:.1} {yhi:.1}H{:.1}\" stroke=\"black\" fill=\"none\"/>",
                    cx - 3.0,
                    cx + 3.0,
                    cx - 3.0,
                    cx + 3.0
                );
            }
        }
        if b.timeout {
            let _ = writeln!(
                s,
                "<text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\" fill=\"#cc0000\">X</text>",
                y - 4.0
            );
        }
    }

    // reference line
    if let Some((r, _)) = &chart.reference {
        if r.is_finite() {
            let y = y_of(*r);
            let _ = writeln!(
                s,
                "<line x1=\"{LEFT:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"black\" stroke-dasharray=\"6 4\"/>",
                LEFT + plot_w
            );
        }
    }

    // legend
    for (i, (label, mark)) in legend.iter().enumerate() {
        let y = TOP + 18.0 * i as f64;
        match mark {
            Mark::Color(c) => {
                let _ = writeln!(
                    s,
                    "<rect x=\"{legend_x:.1}\" y=\"{y:.1}\" width=\"12\" height=\"12\" fill=\"{c}\" stroke=\"#333333\" stroke-width=\"0.5\"/>"
                );
            }
            Mark::Dashed => {
                let _ = writeln!(
                    s,
                    "<line x1=\"{legend_x:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\" stroke-dasharray=\"6 4\"/>",
                    y + 6.0,
                    legend_x + 14.0,
                    y + 6.0
                );
            }
            Mark::Cross => {
                let _ = writeln!(
                    s,
                    "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-weight=\"bold\" fill=\"#cc0000\">X</text>",
                    legend_x + 6.0,
                    y + 11.0
                );
            }
        }
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            legend_x + 20.0,
            y + 10.5,
            xml_escape(label)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn push_unique(v: &mut Vec<String>, x: &str) -> usize {
    match v.iter().position(|y| y == x) {
        Some(i) => i,
        None => {
            v.push(x.to_string());
            v.len() - 1
        }
    }
}

/// Builds a grouped bar chart from results, in the layout of Figure 1 of the CLOUD 2014
/// paper for VM cells:
///
/// - one group per guest workload (host workload for native cells), in order of first
///   appearance;
/// - one bar per series. Native cells: the host scheduler, plus ` [<coordination>]`
///   when the results have several coordination modes (unchanged from before VM plots).
///   VM cells: `<guest sched> guest, host <host workload>` when the VM cells share one
///   host scheduler (named in the x label), else `<guest sched> on <host sched>, host
///   <host workload>`; then `, other VMs <other_vms>` when not `none` and `, coord
///   <mode>` when not `off`. ` [<runner>]` is appended when the results come from
///   several runners, so their bars do not land on each other;
/// - native series in order of first appearance, then VM series ordered by host
///   scheduler, host workload, other VMs, coordination, guest scheduler (each by first
///   appearance), so that guest schedulers facing the same host load stand side by
///   side, as in the paper.
///
/// Bars show the mean over runs, error bars the min and max of the per-run means; a
/// cell with any timeout is drawn to its `timeout_s` with an `X` above it.
pub fn build_chart<'a, I>(title: &str, results: I, reference: Option<(f64, String)>) -> BarChart
where
    I: IntoIterator<Item = &'a CellResult>,
{
    let results: Vec<&CellResult> = results.into_iter().collect();
    let mut coords: Vec<String> = Vec::new();
    let mut runners: Vec<String> = Vec::new();
    // First-appearance orders of the VM cells' values, for ordering the series.
    let mut vm_host_scheds: Vec<String> = Vec::new();
    let mut vm_host_workloads: Vec<String> = Vec::new();
    let mut vm_other_vms: Vec<String> = Vec::new();
    let mut vm_guest_scheds: Vec<String> = Vec::new();
    for r in &results {
        let c = &r.cell;
        push_unique(&mut coords, &c.coordination);
        push_unique(&mut runners, &r.runner);
        if let Some(gs) = &c.guest_sched {
            push_unique(&mut vm_host_scheds, &c.host_sched);
            push_unique(&mut vm_host_workloads, &c.host_workload);
            push_unique(&mut vm_other_vms, &c.other_vms);
            push_unique(&mut vm_guest_scheds, gs);
        }
    }
    let all_native = results.iter().all(|r| r.cell.is_native());
    let all_vm = results.iter().all(|r| !r.cell.is_native());
    let one_vm_host_sched = vm_host_scheds.len() == 1;
    let metric = results
        .first()
        .map(|r| r.metric)
        .unwrap_or(Metric::StartupS);
    let unit = metric.unit();

    let mut groups = Vec::new();
    let mut series = Vec::new();
    // Sort key of each series, parallel to `series`.
    let mut series_keys: Vec<(usize, Vec<usize>)> = Vec::new();
    let mut bars = Vec::new();
    for r in &results {
        let c = &r.cell;
        let g = push_unique(&mut groups, c.app_side_workload());
        let position = |v: &[String], x: &str| v.iter().position(|y| y == x).unwrap_or(0);
        let (mut label, key) = match &c.guest_sched {
            Some(gs) => {
                let mut label = if one_vm_host_sched {
                    format!("{gs} guest, host {}", c.host_workload)
                } else {
                    format!("{gs} on {}, host {}", c.host_sched, c.host_workload)
                };
                if c.has_other_vms() {
                    label.push_str(&format!(", other VMs {}", c.other_vms));
                }
                if c.coordination != "off" {
                    label.push_str(&format!(", coord {}", c.coordination));
                }
                let key = vec![
                    position(&vm_host_scheds, &c.host_sched),
                    position(&vm_host_workloads, &c.host_workload),
                    position(&vm_other_vms, &c.other_vms),
                    position(&coords, &c.coordination),
                    position(&vm_guest_scheds, gs),
                    position(&runners, &r.runner),
                ];
                (label, (1, key))
            }
            None => {
                let mut label = c.host_sched.clone();
                if coords.len() > 1 {
                    label.push_str(&format!(" [{}]", c.coordination));
                }
                (label, (0, vec![series.len()]))
            }
        };
        if runners.len() > 1 {
            label.push_str(&format!(" [{}]", r.runner));
        }
        let si = match series.iter().position(|s| *s == label) {
            Some(i) => i,
            None => {
                series.push(label.clone());
                series_keys.push(key);
                series.len() - 1
            }
        };
        let sum = r.summary();
        let timeouts = r.timeouts();
        let (value, error) = if timeouts > 0 {
            (c.timeout_s, None)
        } else {
            (sum.mean, Some((sum.min, sum.max)))
        };
        let mut tooltip = format!(
            "{label}, {}: mean {:.3} {unit}, min {:.3}, max {:.3}, n {}",
            c.app_side_workload(),
            sum.mean,
            sum.min,
            sum.max,
            sum.n
        );
        if timeouts > 0 {
            tooltip.push_str(&format!(", {timeouts} timeouts"));
        }
        bars.push(Bar {
            group: g,
            series: si,
            value,
            error,
            timeout: timeouts > 0,
            tooltip,
        });
    }
    // Reorder the series by their keys (stable: equal keys keep first-appearance order).
    let mut order: Vec<usize> = (0..series.len()).collect();
    order.sort_by(|&a, &b| series_keys[a].cmp(&series_keys[b]));
    let mut new_index = vec![0; series.len()];
    for (new, &old) in order.iter().enumerate() {
        new_index[old] = new;
    }
    let series: Vec<String> = order.iter().map(|&i| series[i].clone()).collect();
    for b in &mut bars {
        b.series = new_index[b.series];
    }
    let x_label = if all_native {
        "Host workload".to_string()
    } else if all_vm && one_vm_host_sched {
        format!("Guest workload (host scheduler {})", vm_host_scheds[0])
    } else if all_vm {
        "Guest workload".to_string()
    } else {
        "Workload (guest workload for VM cells, host workload for native cells)".to_string()
    };
    BarChart {
        title: title.to_string(),
        x_label,
        y_label: metric.label().to_string(),
        groups,
        series,
        bars,
        reference,
    }
}

/// Start-up chart (see [`build_chart`]) with an optional reference line, e.g. the idle
/// start-up time, labelled `idle start-up: <value> s`.
pub fn plot_startup<'a, I>(title: &str, results: I, reference: Option<f64>) -> String
where
    I: IntoIterator<Item = &'a CellResult>,
{
    let reference = reference.map(|r| (r, format!("idle start-up: {r:.2} s")));
    render_bar_chart(&build_chart(title, results, reference))
}

/// Throughput chart (see [`build_chart`]) with an optional reference line, e.g. the
/// device's peak rate, labelled `reference: <value> MB/s`.
pub fn plot_throughput<'a, I>(title: &str, results: I, reference: Option<f64>) -> String
where
    I: IntoIterator<Item = &'a CellResult>,
{
    let reference = reference.map(|r| (r, format!("reference: {r:.2} MB/s")));
    render_bar_chart(&build_chart(title, results, reference))
}

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
            && c.host_workload == "none"
            && matches!(c.guest_workload.as_deref(), None | Some("none"))
            && !c.has_other_vms()
            && r.timeouts() == 0;
        let s = r.summary();
        if !idle || s.n == 0 || !s.mean.is_finite() {
            return None;
        }
        let who = match &c.guest_sched {
            Some(gs) => format!("{gs} on {}", c.host_sched),
            None => c.host_sched.clone(),
        };
        Some((s.mean, format!("idle start-up ({who}): {:.2} s", s.mean)))
    })
}
