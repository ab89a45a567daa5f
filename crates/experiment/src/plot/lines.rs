//! Line charts: the coordinated task scheduling study's figures of the CPU model's
//! cells (Fanguède, Spyridakis, Raho 2014). Figure 1: average cyclictest latency
//! against the total number of busy loops, log y, one curve per guest load plus "no
//! guest"; Figures 2 and 3: latency histograms (cyclictest's 1 us buckets, log y).
//! Drawn with `plotters` in the fonts and palette of [`super::draw`].

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use plotters::style::FontStyle;

use super::draw::{err, register_fonts, FONT, OKABE_ITO};
use crate::naming::format_g;

/// One curve: a label and its points, x ascending.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// A chart of curves over one x axis.
#[derive(Clone, Debug, PartialEq)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// A log y axis (points with y <= 0 are left out).
    pub log_y: bool,
    /// The x axis's range; `None`: the points'.
    pub x_range: Option<(f64, f64)>,
    /// The log y axis's bottom (e.g. 1 sample); `None`: the decade below the
    /// smallest point.
    pub y_min: Option<f64>,
    pub lines: Vec<Line>,
}

const SIZE: (u32, u32) = (760, 480);

impl LineChart {
    /// The x and y ranges of the points (y positive on a log axis).
    fn ranges(&self) -> ((f64, f64), (f64, f64)) {
        let pts = self.points();
        let x0 = pts.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
        let x1 = pts.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
        let y0 = pts.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
        let y1 = pts.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
        if !x0.is_finite() {
            return ((0.0, 1.0), (1.0, 10.0));
        }
        let x = match self.x_range {
            Some(r) => r,
            None if x1 > x0 => (x0, x1),
            None => (x0 - 1.0, x0 + 1.0),
        };
        if self.log_y {
            // Whole decades around the values.
            let lo = self.y_min.unwrap_or(10f64.powf(y0.log10().floor()));
            let hi = 10f64.powf((y1.log10() + 1e-9).ceil()).max(lo * 10.0);
            (x, (lo, hi))
        } else {
            (x, (0.0, if y1 > 0.0 { y1 * 1.1 } else { 1.0 }))
        }
    }

    fn points(&self) -> Vec<(f64, f64)> {
        self.lines
            .iter()
            .flat_map(|l| l.points.iter().copied())
            .filter(|p| p.0.is_finite() && p.1.is_finite() && (!self.log_y || p.1 > 0.0))
            .collect()
    }

    fn kept(&self, l: &Line) -> Vec<(f64, f64)> {
        l.points
            .iter()
            .copied()
            .filter(|p| p.0.is_finite() && p.1.is_finite() && (!self.log_y || p.1 > 0.0))
            .collect()
    }
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    c: &LineChart,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(err)?;
    let ((x0, x1), (y0, y1)) = c.ranges();
    let mut b = ChartBuilder::on(root);
    b.caption(&c.title, (FONT, 17).into_font().style(FontStyle::Bold))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64);
    let style = |i: usize| OKABE_ITO[i % OKABE_ITO.len()];
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(c.x_label.as_str())
                .y_desc(c.y_label.as_str())
                .label_style((FONT, 13))
                .x_label_formatter(&|v| format_g(*v))
                .y_label_formatter(&|v| format_g(*v))
                .axis_desc_style((FONT, 13))
                .draw()
                .map_err(err)?;
            for (i, l) in c.lines.iter().enumerate() {
                let color = style(i);
                let pts = c.kept(l);
                chart
                    .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                    .map_err(err)?
                    .label(l.label.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                    });
                if pts.len() <= 40 {
                    chart
                        .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                        .map_err(err)?;
                }
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font((FONT, 12))
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(err)?;
        }};
    }
    if c.log_y {
        body!(b
            .build_cartesian_2d(x0..x1, (y0..y1).log_scale())
            .map_err(err)?);
    } else {
        body!(b.build_cartesian_2d(x0..x1, y0..y1).map_err(err)?);
    }
    Ok(())
}

/// The chart as an SVG document.
pub fn render_line_svg(c: &LineChart) -> Result<String, String> {
    register_fonts()?;
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, SIZE).into_drawing_area();
        draw(&root, c)?;
        root.present().map_err(err)?;
    }
    Ok(text)
}

/// The chart as a PNG file at `path`.
pub fn render_line_png(c: &LineChart, path: &Path) -> Result<(), String> {
    register_fonts()?;
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    draw(&root, c)?;
    root.present()
        .map_err(|e| format!("{}: {}", path.display(), err(e)))
}

/// Writes `<stem>.svg` and `<stem>.png` into `dir` and returns their paths.
pub fn write_line_chart(dir: &Path, stem: &str, c: &LineChart) -> std::io::Result<Vec<PathBuf>> {
    let other = |e: String| std::io::Error::other(e);
    let svg = dir.join(format!("{stem}.svg"));
    std::fs::write(&svg, render_line_svg(c).map_err(other)?)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", svg.display())))?;
    let png = dir.join(format!("{stem}.png"));
    render_line_png(c, &png).map_err(other)?;
    Ok(vec![svg, png])
}

/// A latency histogram as a line: 1 us buckets (cyclictest's `-h`), empty buckets
/// left out (log y).
pub fn histogram_line(label: &str, buckets: &[u64]) -> Line {
    Line {
        label: label.to_string(),
        points: buckets
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(us, &n)| (us as f64, n as f64))
            .collect(),
    }
}
