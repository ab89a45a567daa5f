//! Drawing a [`Chart`] with `plotters`, as SVG text or a PNG file.
//!
//! Text is drawn with DejaVu Sans from the `dejavu` crate, registered with plotters'
//! `ab_glyph` font table, so PNGs carry their text on a machine without fontconfig or
//! system fonts, and SVG layout (which measures text with the same font) does not
//! depend on the machine either.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::ranged1d::{
    AsRangedCoord, DefaultFormatting, KeyPointHint, Ranged, ValueFormatter,
};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

use super::chart::{Bar, BarValue, Chart, Panel, Scale};
use crate::naming::format_g;
use crate::paper::PaperValue;

/// The font family every text of a chart uses (registered by [`register_fonts`]).
pub(crate) const FONT: &str = "sans-serif";

/// The Okabe-Ito palette (Okabe and Ito, "Color Universal Design", 2008), without its
/// black, which the intervals and markers use: distinguishable with the common forms
/// of colour blindness. Series past the seventh repeat a colour, drawn hollow.
pub const OKABE_ITO: [RGBColor; 7] = [
    RGBColor(0xE6, 0x9F, 0x00), // orange
    RGBColor(0x56, 0xB4, 0xE9), // sky blue
    RGBColor(0x00, 0x9E, 0x73), // bluish green
    RGBColor(0xF0, 0xE4, 0x42), // yellow
    RGBColor(0x00, 0x72, 0xB2), // blue
    RGBColor(0xD5, 0x5E, 0x00), // vermillion
    RGBColor(0xCC, 0x79, 0xA7), // reddish purple
];

/// Pixel sizes of the layout.
const SLOT: f64 = 16.0; // one bar and its paper marker
const GROUP_GAP: f64 = 14.0;
const PANEL_H: u32 = 290;
const PANEL_MIN_W: u32 = 300;
const Y_AREA: u32 = 62;
const TITLE_H: u32 = 38;
const LEGEND_ROW_H: u32 = 22;
const TEXT: u32 = 13;

/// Registers DejaVu Sans (regular and bold) as [`FONT`], once per process.
pub(crate) fn register_fonts() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let bad = |_| "the embedded DejaVu Sans font is invalid".to_string();
        plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
            .map_err(bad)?;
        plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold()).map_err(bad)
    })
    .clone()
}

pub(crate) fn err<E: std::fmt::Display>(e: E) -> String {
    format!("drawing a chart: {e}")
}

/// Width of one panel: the widest panel's bars, or [`PANEL_MIN_W`].
fn panel_width(chart: &Chart) -> u32 {
    let slots = chart.series.len().max(1) as f64 * SLOT + GROUP_GAP;
    let groups = chart
        .panels
        .iter()
        .map(|p| p.groups.len())
        .max()
        .unwrap_or(1);
    ((Y_AREA as f64 + 20.0 + groups as f64 * slots) as u32).max(PANEL_MIN_W)
}

/// A legend entry: how its sample is drawn and its text.
enum Sample {
    Series(usize),
    Interval,
    Idle,
    Timeout,
    Paper,
    PaperTimeout,
}

fn legend_entries(chart: &Chart) -> Vec<(Sample, String)> {
    let mut v: Vec<(Sample, String)> = chart
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| (Sample::Series(i), s.clone()))
        .collect();
    v.push((
        Sample::Interval,
        "95% t-interval of the mean of run means (ci95_low..ci95_high in results.csv)".into(),
    ));
    if let Some((_, label)) = &chart.idle {
        v.push((Sample::Idle, label.clone()));
    }
    if let Some(t) = chart.timeout_s {
        v.push((
            Sample::Timeout,
            format!("X: a start hit the {} s timeout", format_g(t)),
        ));
    }
    if chart.has_paper {
        v.push((Sample::Paper, "published value (paper)".into()));
        let paper_x = chart
            .panels
            .iter()
            .flat_map(|p| &p.bars)
            .any(|b| b.paper == Some(PaperValue::Timeout));
        if paper_x {
            v.push((Sample::PaperTimeout, "published X (timed out)".into()));
        }
    }
    v
}

/// Legend entries placed in rows that fit `width`: (entry, x, row).
fn legend_layout(entries: &[(Sample, String)], width: u32) -> Vec<(usize, u32, u32)> {
    let font = (FONT, TEXT).into_font();
    let mut out = Vec::new();
    let (mut x, mut row) = (10u32, 0u32);
    for (i, (_, text)) in entries.iter().enumerate() {
        let w = 30
            + font
                .box_size(text)
                .map(|(w, _)| w)
                .unwrap_or(8 * text.len() as u32);
        if x > 10 && x + w > width {
            x = 10;
            row += 1;
        }
        out.push((i, x, row));
        x += w + 18;
    }
    out
}

/// The pixel size of a chart: the panel grid, the title and the legend.
pub fn chart_size(chart: &Chart) -> (u32, u32) {
    let cols = chart.columns.max(1);
    let rows = chart.panels.len().max(1).div_ceil(cols);
    let width = (cols as u32 * panel_width(chart)).max(640);
    let entries = legend_entries(chart);
    let legend_rows = legend_layout(&entries, width)
        .last()
        .map_or(1, |(_, _, r)| r + 1);
    let height = TITLE_H + rows as u32 * PANEL_H + legend_rows * LEGEND_ROW_H + 14;
    (width, height)
}

/// The chart as an SVG document.
pub fn render_svg(chart: &Chart) -> Result<String, String> {
    register_fonts()?;
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, chart_size(chart)).into_drawing_area();
        draw_chart(&root, chart)?;
        root.present().map_err(err)?;
    }
    Ok(text)
}

/// The chart as a PNG file at `path`.
pub fn render_png(chart: &Chart, path: &Path) -> Result<(), String> {
    register_fonts()?;
    let root = BitMapBackend::new(path, chart_size(chart)).into_drawing_area();
    draw_chart(&root, chart)?;
    root.present()
        .map_err(|e| format!("{}: {}", path.display(), err(e)))
}

fn draw_chart<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: &Chart,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(err)?;
    let (width, height) = root.dim_in_pixel();
    let entries = legend_entries(chart);
    let layout = legend_layout(&entries, width);
    let legend_rows = layout.last().map_or(1, |(_, _, r)| r + 1);
    let (top, legend) = root.split_vertically(height - legend_rows * LEGEND_ROW_H - 14);
    let body = top
        .titled(&chart.title, (FONT, 17).into_font().style(FontStyle::Bold))
        .map_err(err)?;
    let cols = chart.columns.max(1);
    let rows = chart.panels.len().max(1).div_ceil(cols);
    let cells = body.split_evenly((rows, cols));
    for (panel, area) in chart.panels.iter().zip(&cells) {
        match chart.scale {
            Scale::Linear { max } => draw_panel(area, chart, panel, 0.0..max, 0.0)?,
            Scale::Log { min, max } => {
                // Every power of ten labelled (plotters' own log ticks skip the lowest),
                // 2..9 times each as light grid lines.
                let decades: Vec<f64> = (min.log10().round() as i32..=max.log10().round() as i32)
                    .map(|e| 10f64.powi(e))
                    .collect();
                let light: Vec<f64> = decades
                    .iter()
                    .flat_map(|d| (2..10).map(move |k| d * k as f64))
                    .filter(|v| *v < max)
                    .collect();
                let y = (min..max)
                    .log_scale()
                    .with_key_points(decades)
                    .with_light_points(light);
                draw_panel(area, chart, panel, y, min)?
            }
        }
    }
    draw_legend(&legend, &entries, &layout)
}

/// The x position of a bar's left edge: groups are one unit wide, slots split them.
fn bar_x(chart: &Chart, bar: &Bar) -> (f64, f64) {
    let n = chart.series.len().max(1) as f64;
    let slot = 1.0 / (n + GROUP_GAP / SLOT);
    let left = bar.group as f64 + (1.0 - n * slot) / 2.0 + bar.series as f64 * slot;
    (left, slot)
}

/// The x axis of a panel: group `g` spans `g..g + 1`, its label sits at its centre.
/// Written here because plotters' `with_key_points` on an `f64` range loses the value
/// formatter that its mesh needs.
struct GroupAxis {
    groups: usize,
}

impl Ranged for GroupAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let span = f64::from(limit.1 - limit.0);
        limit.0 + (value / self.groups as f64 * span).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, _hint: H) -> Vec<f64> {
        (0..self.groups).map(|g| g as f64 + 0.5).collect()
    }

    fn range(&self) -> std::ops::Range<f64> {
        0.0..self.groups as f64
    }
}

fn series_style(i: usize) -> ShapeStyle {
    let c = OKABE_ITO[i % OKABE_ITO.len()];
    if i < OKABE_ITO.len() {
        c.filled()
    } else {
        c.stroke_width(2)
    }
}

fn draw_panel<DB, Y>(
    area: &DrawingArea<DB, Shift>,
    chart: &Chart,
    panel: &Panel,
    y: Y,
    floor: f64,
) -> Result<(), String>
where
    DB: DrawingBackend,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let groups = panel.groups.len().max(1);
    let mut cc = ChartBuilder::on(area)
        .caption(&panel.title, (FONT, TEXT + 1))
        .margin(8)
        .x_label_area_size(38)
        .y_label_area_size(Y_AREA)
        .build_cartesian_2d(GroupAxis { groups }, y)
        .map_err(err)?;
    let label = |x: &f64| {
        let g = x.floor() as usize;
        panel.groups.get(g).cloned().unwrap_or_default()
    };
    cc.configure_mesh()
        .disable_x_mesh()
        .x_label_formatter(&label)
        .y_label_formatter(&|v: &f64| format_g(*v))
        .x_desc(&chart.x_label)
        .y_desc(&chart.y_label)
        .label_style((FONT, TEXT - 1))
        .axis_desc_style((FONT, TEXT - 1))
        .draw()
        .map_err(err)?;
    for bar in &panel.bars {
        let (left, slot) = bar_x(chart, bar);
        let width = slot * 0.72;
        let mid = left + width / 2.0;
        match bar.value {
            BarValue::Mean { mean, ci95 } => {
                let top = mean.max(floor);
                let rect = Rectangle::new(
                    [(left, floor), (left + width, top)],
                    series_style(bar.series),
                );
                let outline = Rectangle::new([(left, floor), (left + width, top)], BLACK.mix(0.6));
                cc.draw_series([rect, outline]).map_err(err)?;
                let (lo, hi) = (ci95.0.max(floor), ci95.1.max(floor));
                let cap = width * 0.3;
                let whisker = [
                    PathElement::new(vec![(mid, lo), (mid, hi)], BLACK.stroke_width(1)),
                    PathElement::new(
                        vec![(mid - cap, lo), (mid + cap, lo)],
                        BLACK.stroke_width(1),
                    ),
                    PathElement::new(
                        vec![(mid - cap, hi), (mid + cap, hi)],
                        BLACK.stroke_width(1),
                    ),
                ];
                cc.draw_series(whisker).map_err(err)?;
            }
            BarValue::Timeout => {
                let x = EmptyElement::at((mid, floor))
                    + Text::new(
                        "X",
                        (-5, -18),
                        (FONT, 15).into_font().style(FontStyle::Bold),
                    );
                cc.draw_series([x]).map_err(err)?;
            }
            BarValue::NoData => {}
        }
        let px = left + slot * 0.86;
        match bar.paper {
            Some(PaperValue::Seconds(v)) => {
                let diamond = EmptyElement::at((px, v))
                    + Polygon::new(vec![(0, -5), (4, 0), (0, 5), (-4, 0)], BLACK.filled());
                cc.draw_series([diamond]).map_err(err)?;
            }
            Some(PaperValue::Timeout) => {
                let top = cc.y_range().end;
                cc.draw_series([Cross::new((px, top), 4, BLACK.stroke_width(2))])
                    .map_err(err)?;
            }
            None => {}
        }
    }
    if let Some((v, _)) = &chart.idle {
        let line = DashedLineSeries::new(
            vec![(0.0, *v), (groups as f64, *v)],
            6,
            4,
            BLACK.stroke_width(1),
        );
        cc.draw_series(line).map_err(err)?;
    }
    Ok(())
}

fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[(Sample, String)],
    layout: &[(usize, u32, u32)],
) -> Result<(), String> {
    let font = (FONT, TEXT).into_font();
    for &(i, x, row) in layout {
        let (sample, text) = &entries[i];
        let (x, y) = (x as i32, (6 + row * LEGEND_ROW_H) as i32);
        let at = EmptyElement::at((x, y));
        let drawn = match sample {
            Sample::Series(s) => area.draw(
                &(at + Rectangle::new([(0, 1), (14, 14)], series_style(*s))
                    + Rectangle::new([(0, 1), (14, 14)], BLACK.mix(0.6))),
            ),
            Sample::Interval => area.draw(
                &(at + PathElement::new(vec![(7, 0), (7, 15)], BLACK)
                    + PathElement::new(vec![(3, 0), (11, 0)], BLACK)
                    + PathElement::new(vec![(3, 15), (11, 15)], BLACK)),
            ),
            Sample::Idle => area.draw(
                &(at + PathElement::new(vec![(0, 8), (5, 8)], BLACK)
                    + PathElement::new(vec![(9, 8), (14, 8)], BLACK)),
            ),
            Sample::Timeout => area.draw(
                &(at + Text::new("X", (2, 0), (FONT, 15).into_font().style(FontStyle::Bold))),
            ),
            Sample::Paper => area
                .draw(&(at + Polygon::new(vec![(7, 2), (11, 7), (7, 12), (3, 7)], BLACK.filled()))),
            Sample::PaperTimeout => {
                area.draw(&Cross::new((x + 7, y + 7), 4, BLACK.stroke_width(2)))
            }
        };
        drawn.map_err(err)?;
        area.draw(&Text::new(text.as_str(), (x + 22, y), font.clone()))
            .map_err(err)?;
    }
    Ok(())
}
