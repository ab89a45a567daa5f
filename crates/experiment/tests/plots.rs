//! Plots (small multiples in the layout of Figure 1 of the CLOUD 2014 paper: bars
//! grouped by guest workload, guest scheduler or coordination mode as series, one panel
//! per host workload), and the tables in the same layout.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use experiment::plot::{chart_size, paper_marks, render_svg, BarValue, Scale, OKABE_ITO};

use experiment::*;

fn accepted() -> Accepted {
    fn v<T: std::str::FromStr>(xs: &[&str]) -> Vec<T>
    where
        T::Err: std::fmt::Debug,
    {
        xs.iter().map(|s| s.parse().unwrap()).collect()
    }
    Accepted {
        devices: v(&["hdd-1.8in", "emmc"]),
        host_scheds: v(&["bfq", "cfq"]),
        guest_scheds: v(&["bfq", "cfq"]),
        coordination: v(&["off", "help-wr"]),
        apps: v(&["xterm"]),
        allow_cmd_apps: false,
        allow_vm: true,
    }
}

fn cells(benchmark: &str, matrix: &str) -> Vec<Cell> {
    Scenario::from_toml_str(
        &format!("benchmark = \"{benchmark}\"\nduration_s = 10\n[matrix]\n{matrix}"),
        &accepted(),
    )
    .unwrap()
    .cells()
}

const PAPER: &str = "device = [\"hdd-1.8in\"]\nhost_sched = [\"bfq\"]\nhost_workload = [\"none\", \"1r-seq\", \"5r-seq\"]\nguest_sched = [\"bfq\", \"cfq\"]\nguest_workload = [\"none\", \"1r-seq\", \"5r-rand\"]\n";

/// Start-up results of the paper-like matrix: the value grows with the load; cfq with
/// 5r-rand in the guest and 5r-seq in the host times out.
fn startup_results(matrix: &str) -> Vec<CellResult> {
    cells("startup", matrix)
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let timeout = c.guest_sched.map(|g| g.name()) == Some("cfq")
                && c.guest_workload.map(|w| w.name()).as_deref() == Some("5r-rand")
                && c.host_workload.to_string() == "5r-seq";
            let base = 1.9 + 0.5 * i as f64;
            let runs = (0..2)
                .map(|k| RunResult {
                    values: if timeout && k == 0 {
                        vec![base, c.timeout_s]
                    } else {
                        vec![base + 0.1 * k as f64, base]
                    },
                    timeouts: u32::from(timeout && k == 0),
                    ..Default::default()
                })
                .collect();
            CellResult {
                cell: c,
                runner: "sim".into(),
                metric: Metric::StartupS,
                runs,
            }
        })
        .collect()
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-vmplots-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn no_paper() -> BTreeMap<String, PaperValue> {
    BTreeMap::new()
}

#[test]
fn one_panel_per_host_workload_guest_schedulers_as_series() {
    let results = startup_results(PAPER);
    let chart = build_chart("t", &results, &no_paper(), idle_reference(&results));
    let titles: Vec<&str> = chart.panels.iter().map(|p| p.title.as_str()).collect();
    assert_eq!(
        titles,
        vec![
            "host bfq, host workload none",
            "host bfq, host workload 1r-seq",
            "host bfq, host workload 5r-seq"
        ]
    );
    assert_eq!(chart.columns, 3);
    assert_eq!(chart.series, vec!["bfq in the guest", "cfq in the guest"]);
    assert_eq!(chart.x_label, "Workload in the guest");
    let mut bars = 0;
    for panel in &chart.panels {
        assert_eq!(panel.groups, vec!["none", "1r-seq", "5r-rand"]);
        bars += panel.bars.len();
    }
    assert_eq!(bars, results.len());
    // each bar shows the mean and the 95% t-interval that results.csv gives
    for r in &results {
        let c = &r.cell;
        let panel = chart
            .panels
            .iter()
            .find(|p| p.title.ends_with(&format!("workload {}", c.host_workload)))
            .unwrap();
        let g = panel
            .groups
            .iter()
            .position(|g| Some(g.as_str()) == c.guest_workload.map(|w| w.name()).as_deref())
            .unwrap();
        let s = usize::from(c.guest_sched.map(|g| g.name()) == Some("cfq"));
        let bar = panel
            .bars
            .iter()
            .find(|b| b.group == g && b.series == s)
            .unwrap();
        let sum = r.summary();
        if r.timeouts() > 0 {
            assert_eq!(bar.value, BarValue::Timeout);
        } else {
            assert_eq!(
                bar.value,
                BarValue::Mean {
                    mean: sum.mean,
                    ci95: (sum.ci95_low, sum.ci95_high)
                }
            );
        }
    }
    assert_eq!(chart.timeout_s, Some(60.0));
    let (idle, label) = chart.idle.clone().unwrap();
    // run means 1.9 and 1.95
    assert!((idle - 1.925).abs() < 1e-12, "{idle}");
    assert!(
        label.starts_with("idle start-up (bfq on bfq): 1.9"),
        "{label}"
    );
}

#[test]
fn coordination_modes_become_the_series_and_guest_schedulers_the_rows() {
    let results = startup_results(
        "device = [\"hdd-1.8in\"]\nhost_sched = [\"bfq\"]\nhost_workload = [\"none\", \"5r-seq\"]\nguest_sched = [\"bfq\", \"cfq\"]\nguest_workload = [\"none\", \"1r-seq\"]\ncoordination = [\"off\", \"help-wr\"]\n",
    );
    let chart = build_chart("t", &results, &no_paper(), None);
    assert_eq!(
        chart.series,
        vec!["coordination off", "coordination help-wr"]
    );
    assert_eq!(chart.panels.len(), 4);
    assert_eq!(chart.columns, 2, "one column per host workload");
    assert_eq!(
        chart.panels[0].title,
        "guest bfq, host bfq, host workload none"
    );
    assert!(chart
        .panels
        .iter()
        .any(|p| p.title == "guest cfq, host bfq, host workload 5r-seq"));
    for p in &chart.panels {
        assert_eq!(p.bars.len(), 4, "{}", p.title);
    }
}

#[test]
fn other_vms_and_host_schedulers_get_their_own_panels() {
    let results = startup_results(
        "device = [\"hdd-1.8in\"]\nhost_sched = [\"bfq\", \"cfq\"]\nhost_workload = [\"none\"]\nguest_sched = [\"bfq\"]\nguest_workload = [\"none\", \"1r-seq\"]\nother_vms = [\"none\", \"2x5r-seq\"]\n",
    );
    let chart = build_chart("t", &results, &no_paper(), idle_reference(&results));
    assert_eq!(chart.series, vec!["bfq in the guest"]);
    let titles: Vec<&str> = chart.panels.iter().map(|p| p.title.as_str()).collect();
    assert!(
        titles.contains(&"host cfq, host workload none, other VMs 2x5r-seq"),
        "{titles:?}"
    );
    assert_eq!(titles.len(), 4);
    // other VMs keep the disk busy: such a cell is no idle reference
    let busy: Vec<CellResult> = results
        .iter()
        .filter(|r| r.cell.has_other_vms())
        .cloned()
        .collect();
    assert_eq!(idle_reference(&busy), None);
}

/// Results whose means are given: one run of two equal values each.
fn with_means(matrix: &str, means: impl Fn(usize) -> f64) -> Vec<CellResult> {
    cells("startup", matrix)
        .into_iter()
        .enumerate()
        .map(|(i, c)| CellResult {
            cell: c,
            runner: "sim".into(),
            metric: Metric::StartupS,
            runs: vec![RunResult {
                values: vec![means(i), means(i)],
                ..Default::default()
            }],
        })
        .collect()
}

#[test]
fn log_axis_when_values_span_a_decade() {
    let narrow = with_means(PAPER, |i| 2.0 + 0.3 * i as f64);
    match build_chart("t", &narrow, &no_paper(), None).scale {
        Scale::Linear { max } => assert!(max > 2.0 + 0.3 * 17.0, "{max}"),
        s => panic!("expected a linear axis, got {s:?}"),
    }
    let wide = with_means(PAPER, |i| if i == 3 { 45.0 } else { 1.5 + 0.1 * i as f64 });
    assert_eq!(
        build_chart("t", &wide, &no_paper(), None).scale,
        Scale::Log {
            min: 1.0,
            max: 100.0
        }
    );
}

const REFERENCE: &str = "[device]\nname = \"hdd-1.8in\"\n[startup.xterm]\nhost_sched = \"bfq\"\nguest_workloads = [\"1r-seq\", \"5r-rand\"]\n\"bfq/none\" = [2.2, 4.0]\n\"cfq/5r-seq\" = [26.0, \"X\"]\n";

#[test]
fn published_values_sit_beside_the_bars_they_match() {
    let results = startup_results(PAPER);
    let reference = parse_reference(REFERENCE).unwrap();
    let marks = paper_marks(&reference, &results);
    assert_eq!(marks.len(), 4);
    let chart = build_chart("t", &results, &marks, None);
    assert!(chart.has_paper);
    let with_paper: Vec<(&str, &str, Option<PaperValue>)> = chart
        .panels
        .iter()
        .flat_map(|p| {
            p.bars
                .iter()
                .filter(|b| b.paper.is_some())
                .map(move |b| (p.title.as_str(), p.groups[b.group].as_str(), b.paper))
        })
        .collect();
    assert!(with_paper.contains(&(
        "host bfq, host workload none",
        "1r-seq",
        Some(PaperValue::Seconds(2.2))
    )));
    assert!(with_paper.contains(&(
        "host bfq, host workload 5r-seq",
        "5r-rand",
        Some(PaperValue::Timeout)
    )));
    assert_eq!(with_paper.len(), 4);
    let svg = render_svg(&chart).unwrap();
    assert!(svg.contains("published value (paper)"));
    assert!(svg.contains("published X (timed out)"));
    // without a paper file, no marker and no legend entry
    let plain = render_svg(&build_chart("t", &results, &no_paper(), None)).unwrap();
    assert!(!plain.contains("published"));
    assert!(!plain.contains("<polygon"));
    assert!(
        svg.matches("<polygon").count() >= 3,
        "two diamonds and the legend's"
    );
}

/// The PNG's pixel size, and how many pixels of its top `rows` rows are not white.
fn png_facts(path: &Path, rows: u32) -> ((u32, u32), usize) {
    let img = image::open(path).unwrap().to_rgb8();
    let inked = img
        .enumerate_pixels()
        .filter(|(_, y, p)| *y < rows && p.0 != [255, 255, 255])
        .count();
    (img.dimensions(), inked)
}

fn svg_text_count(svg: &str, text: &str) -> usize {
    svg.matches(&format!("\n{text}\n</text>")).count()
}

#[test]
fn written_plots_per_device_svg_and_png_with_legend_x_and_text() {
    let two_devices = PAPER.replace("[\"hdd-1.8in\"]", "[\"hdd-1.8in\", \"emmc\"]");
    let results = startup_results(&two_devices);
    let d = tmpdir("startup");
    let written = write_outputs(&d, &RunMeta::default(), &results).unwrap();
    for dev in ["hdd-1.8in", "emmc"] {
        let svg_path = d.join(format!("startup-{dev}.svg"));
        let png_path = d.join(format!("startup-{dev}.png"));
        assert!(written.contains(&svg_path) && written.contains(&png_path));
        let svg = std::fs::read_to_string(&svg_path).unwrap();
        assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(
            svg_text_count(&svg, &format!("Start-up time of xterm on {dev} (sim)")),
            1
        );
        for g in ["none", "1r-seq", "5r-rand"] {
            assert_eq!(svg_text_count(&svg, g), 3, "group {g}: once per panel");
        }
        assert_eq!(svg_text_count(&svg, "bfq in the guest"), 1);
        assert_eq!(
            svg_text_count(
                &svg,
                "95% t-interval of the mean of run means (ci95_low..ci95_high in results.csv)"
            ),
            1
        );
        // one X for the timed-out cell, one in the legend
        assert_eq!(svg_text_count(&svg, "X"), 2);
        assert_eq!(svg_text_count(&svg, "X: a start hit the 60 s timeout"), 1);
        assert!(svg.contains("idle start-up (bfq on bfq): "));
        assert!(!svg.contains("NaN"));
        let chart = plot::chart_for(
            &plot::plot_files(&results).unwrap()[0],
            &results,
            &no_paper(),
        );
        let (size, title_ink) = png_facts(&png_path, 30);
        assert_eq!(size, chart_size(&chart));
        // the title is the only thing in the top rows: ink there is rendered text
        assert!(title_ink > 200, "title pixels: {title_ink}");
    }
    // the same inputs give the same files
    let d2 = tmpdir("startup2");
    write_outputs(&d2, &RunMeta::default(), &results).unwrap();
    for f in ["startup-emmc.svg", "startup-emmc.png"] {
        assert_eq!(
            std::fs::read(d.join(f)).unwrap(),
            std::fs::read(d2.join(f)).unwrap()
        );
    }
    std::fs::remove_dir_all(&d).unwrap();
    std::fs::remove_dir_all(&d2).unwrap();
}

#[test]
fn write_plots_with_a_paper_suffix_leaves_the_run_plots_alone() {
    let results = startup_results(PAPER);
    let d = tmpdir("paper");
    std::fs::create_dir_all(&d).unwrap();
    let reference = parse_reference(REFERENCE).unwrap();
    let written = write_plots(&d, &results, Some(&reference), "-vs-paper").unwrap();
    assert_eq!(
        written,
        vec![
            d.join("startup-hdd-1.8in-vs-paper.svg"),
            d.join("startup-hdd-1.8in-vs-paper.png")
        ]
    );
    assert!(!d.join("startup-hdd-1.8in.svg").exists());
    let svg = std::fs::read_to_string(&written[0]).unwrap();
    assert!(svg.contains("published value (paper)"));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn okabe_ito_palette_without_black() {
    let mut colours: Vec<_> = OKABE_ITO.iter().map(|c| (c.0, c.1, c.2)).collect();
    colours.sort();
    colours.dedup();
    assert_eq!(colours.len(), 7);
    assert!(!colours.contains(&(0, 0, 0)));
    assert!(colours.contains(&(0xE6, 0x9F, 0x00)) && colours.contains(&(0xCC, 0x79, 0xA7)));
}

#[test]
fn throughput_plot_of_vm_cells_has_no_idle_line_and_no_x() {
    let results: Vec<CellResult> = cells("throughput", PAPER)
        .into_iter()
        .enumerate()
        .map(|(i, c)| CellResult {
            cell: c,
            runner: "sim".into(),
            metric: Metric::ThroughputMbS,
            runs: vec![RunResult {
                values: vec![5.0 + i as f64, 6.0],
                timeouts: 0,
                ..Default::default()
            }],
        })
        .collect();
    let chart = build_chart("t", &results, &no_paper(), None);
    assert_eq!(chart.panels.len(), 3);
    assert_eq!(chart.series.len(), 2);
    assert_eq!(chart.y_label, "Aggregate throughput [MB/s]");
    let d = tmpdir("throughput");
    write_outputs(&d, &RunMeta::default(), &results).unwrap();
    let svg = std::fs::read_to_string(d.join("throughput-hdd-1.8in.svg")).unwrap();
    assert_eq!(
        svg_text_count(&svg, "Aggregate throughput on hdd-1.8in (sim)"),
        1
    );
    assert!(
        !svg.contains("idle start-up"),
        "no idle line for throughput"
    );
    assert_eq!(svg_text_count(&svg, "X"), 0);
    assert!(d.join("throughput-hdd-1.8in.png").is_file());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn several_runners_do_not_share_bars() {
    let sim = startup_results(PAPER);
    let mut real = sim.clone();
    for r in &mut real {
        r.runner = "real".into();
    }
    let both: Vec<CellResult> = sim.into_iter().chain(real).collect();
    let chart = build_chart("t", &both, &no_paper(), None);
    assert_eq!(
        chart.series,
        vec![
            "bfq in the guest [sim]",
            "cfq in the guest [sim]",
            "bfq in the guest [real]",
            "cfq in the guest [real]"
        ]
    );
    for p in &chart.panels {
        let mut pairs: Vec<(usize, usize)> = p.bars.iter().map(|b| (b.group, b.series)).collect();
        pairs.sort();
        pairs.dedup();
        assert_eq!(pairs.len(), p.bars.len());
    }
}

/// The tables in the paper's layout: per device and host scheduler, rows are host
/// workloads with one line per guest scheduler, columns the guest workloads.
#[test]
fn vm_tables_in_the_paper_layout() {
    let results = startup_results(PAPER);
    let t = render_tables(&results);
    assert_eq!(t.matches("== ").count(), 1, "{t}");
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(
        lines[0],
        "== hdd-1.8in | startup of xterm | VM on host bfq | sim =="
    );
    assert!(lines[1].contains("rows: host workload and guest scheduler; columns: guest workload"));
    assert!(lines[1].contains("X: a start hit the 60 s timeout"));
    let cols: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(
        cols,
        ["host", "workload", "guest", "sched", "none", "1r-seq", "5r-rand"]
    );
    let row = |i: usize| lines[i].split_whitespace().collect::<Vec<_>>();
    // results are in expansion order: guest sched, guest workload, host workload
    let text = |gs: &str, gw: &str, hw: &str| {
        cell_text(
            results
                .iter()
                .find(|r| {
                    r.cell.guest_sched.map(|g| g.name()) == Some(gs)
                        && r.cell.guest_workload.map(|w| w.name()).as_deref() == Some(gw)
                        && r.cell.host_workload.to_string() == hw
                })
                .unwrap(),
        )
    };
    assert_eq!(row(3)[..2], ["none", "bfq"]);
    assert_eq!(row(3)[2], text("bfq", "none", "none"));
    assert_eq!(row(4)[0], "cfq", "the host workload is written once");
    assert_eq!(row(4)[3], text("cfq", "5r-rand", "none"));
    assert_eq!(row(7)[..2], ["5r-seq", "bfq"]);
    assert_eq!(
        row(8),
        [
            "cfq",
            &text("cfq", "none", "5r-seq"),
            &text("cfq", "1r-seq", "5r-seq"),
            "X"
        ]
    );
    assert_eq!(lines.len(), 9);
}

/// With several coordination modes, `table.txt` gains one table per device with the
/// modes side by side: one row per VM setup, one column per mode, X where a start
/// timed out. With a single mode there is no such table.
#[test]
fn coordination_modes_side_by_side_table() {
    let matrix = "device = [\"hdd-1.8in\", \"emmc\"]\nhost_sched = [\"bfq\"]\nhost_workload = [\"5r-seq\"]\nguest_sched = [\"bfq\"]\nguest_workload = [\"1r-seq\", \"5r-seq\"]\ncoordination = [\"off\", \"help-wr\"]\n";
    let results: Vec<CellResult> = cells("startup", matrix)
        .into_iter()
        .map(|c| {
            let off = c.coordination.is_off();
            let timeout = off && c.guest_workload.map(|w| w.name()).as_deref() == Some("5r-seq");
            let v = if off { 20.0 } else { 2.5 };
            CellResult {
                runs: vec![RunResult {
                    values: vec![if timeout { c.timeout_s } else { v }],
                    timeouts: u32::from(timeout),
                    ..Default::default()
                }],
                cell: c,
                runner: "sim".into(),
                metric: Metric::StartupS,
            }
        })
        .collect();
    let t = render_coordination_tables(&results);
    assert_eq!(
        t.matches("coordination modes side by side").count(),
        2,
        "{t}"
    );
    let hdd = &t[t.find("== hdd-1.8in").unwrap()..t.find("== emmc").unwrap()];
    let header = hdd.lines().find(|l| l.starts_with("VM setup")).unwrap();
    assert!(
        header.contains("off") && header.contains("help-wr"),
        "{hdd}"
    );
    let row = |w: &str| {
        hdd.lines()
            .find(|l| l.starts_with(&format!("bfq / {w} / bfq 5r-seq")))
            .unwrap()
            .split_whitespace()
            .rev()
            .take(2)
            .collect::<Vec<_>>()
    };
    assert_eq!(row("1r-seq"), vec!["2.50", "20.00"]);
    assert_eq!(row("5r-seq"), vec!["2.50", "X"]);
    assert!(render_tables(&results).contains("coordination modes side by side"));
    let single: Vec<CellResult> = results
        .into_iter()
        .filter(|r| r.cell.coordination.is_off())
        .collect();
    assert_eq!(render_coordination_tables(&single), "");
}
