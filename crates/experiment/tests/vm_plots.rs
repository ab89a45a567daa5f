//! Plots of VM cells, in the layout of Figure 1 of the CLOUD 2014 paper: bars grouped
//! by guest workload, one series per guest scheduler and host workload, the idle
//! start-up time as a dashed line, X for cells that timed out.

use std::path::PathBuf;

use experiment::*;

fn accepted() -> Accepted {
    let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    Accepted {
        devices: v(&["hdd-1.8in", "emmc"]),
        host_scheds: v(&["bfq", "cfq"]),
        guest_scheds: v(&["bfq", "cfq"]),
        coordination: v(&["off", "vbfq"]),
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
            let timeout = c.guest_sched.as_deref() == Some("cfq")
                && c.guest_workload.as_deref() == Some("5r-rand")
                && c.host_workload == "5r-seq";
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

#[test]
fn chart_groups_by_guest_workload_and_orders_series_like_the_paper() {
    let results = startup_results(PAPER);
    let chart = build_chart("t", &results, idle_reference(&results));
    assert_eq!(chart.groups, vec!["none", "1r-seq", "5r-rand"]);
    assert_eq!(
        chart.series,
        vec![
            "bfq guest, host none",
            "cfq guest, host none",
            "bfq guest, host 1r-seq",
            "cfq guest, host 1r-seq",
            "bfq guest, host 5r-seq",
            "cfq guest, host 5r-seq",
        ]
    );
    assert_eq!(chart.x_label, "Guest workload (host scheduler bfq)");
    assert_eq!(chart.bars.len(), results.len());
    // each (group, series) pair has exactly one bar, the one of its cell
    for (b, r) in chart.bars.iter().zip(&results) {
        let c = &r.cell;
        assert_eq!(chart.groups[b.group], c.guest_workload.clone().unwrap());
        assert_eq!(
            chart.series[b.series],
            format!(
                "{} guest, host {}",
                c.guest_sched.as_deref().unwrap(),
                c.host_workload
            )
        );
        assert_eq!(b.timeout, r.timeouts() > 0);
        if b.timeout {
            assert_eq!(b.value, 60.0);
            assert!(b.tooltip.ends_with(", 1 timeouts"), "{}", b.tooltip);
        }
    }
    assert_eq!(chart.bars.iter().filter(|b| b.timeout).count(), 1);
    // the idle line: guest none, host none, first in the results (bfq guest)
    let (idle, label) = chart.reference.clone().unwrap();
    // run means 1.9 and 1.95
    assert!((idle - 1.925).abs() < 1e-12, "{idle}");
    assert!(
        label.starts_with("idle start-up (bfq on bfq): 1.9"),
        "{label}"
    );
}

#[test]
fn written_svgs_per_device_have_groups_series_idle_line_and_x() {
    let two_devices = PAPER.replace("[\"hdd-1.8in\"]", "[\"hdd-1.8in\", \"emmc\"]");
    let results = startup_results(&two_devices);
    let d = tmpdir("startup");
    let written = write_outputs(&d, &RunMeta::default(), &results).unwrap();
    for dev in ["hdd-1.8in", "emmc"] {
        let path = d.join(format!("startup-{dev}.svg"));
        assert!(written.contains(&path), "{}", path.display());
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains(&format!("Start-up time of xterm on {dev} (sim)")));
        for g in ["none", "1r-seq", "5r-rand"] {
            assert!(svg.contains(&format!(">{g}</text>")), "group {g}");
        }
        for s in ["bfq guest, host none", "cfq guest, host 5r-seq"] {
            assert!(svg.contains(&format!(">{s}</text>")), "series {s}");
        }
        assert!(svg.contains(">Guest workload (host scheduler bfq)</text>"));
        // the dashed idle line across the plot and its legend entry
        assert_eq!(svg.matches("stroke-dasharray=\"6 4\"").count(), 2);
        assert!(svg.contains(">idle start-up (bfq on bfq): "));
        // one X over the timed-out bar, one in the legend
        assert_eq!(svg.matches(">X</text>").count(), 2);
        assert!(svg.contains(">a start hit the timeout</text>"));
        // one bar per cell of the device
        assert_eq!(svg.matches("</rect>").count(), results.len() / 2);
        assert!(!svg.contains("NaN"));
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn labels_name_coordination_other_vms_and_host_schedulers_when_needed() {
    let results = startup_results(
        "device = [\"hdd-1.8in\"]\nhost_sched = [\"bfq\", \"cfq\"]\nhost_workload = [\"none\"]\nguest_sched = [\"bfq\"]\nguest_workload = [\"none\", \"1r-seq\"]\nother_vms = [\"none\", \"2x5r-seq\"]\ncoordination = [\"off\", \"vbfq\"]\n",
    );
    let chart = build_chart("t", &results, idle_reference(&results));
    assert_eq!(chart.groups, vec!["none", "1r-seq"]);
    assert_eq!(
        chart.series,
        vec![
            "bfq on bfq, host none",
            "bfq on bfq, host none, coord vbfq",
            "bfq on bfq, host none, other VMs 2x5r-seq",
            "bfq on bfq, host none, other VMs 2x5r-seq, coord vbfq",
            "bfq on cfq, host none",
            "bfq on cfq, host none, coord vbfq",
            "bfq on cfq, host none, other VMs 2x5r-seq",
            "bfq on cfq, host none, other VMs 2x5r-seq, coord vbfq",
        ]
    );
    assert_eq!(chart.x_label, "Guest workload");

    // other VMs keep the disk busy: such a cell is no idle reference
    let busy: Vec<CellResult> = results
        .iter()
        .filter(|r| r.cell.has_other_vms())
        .cloned()
        .collect();
    assert_eq!(idle_reference(&busy), None);
    let svg = plot_startup("t", &busy, None);
    assert!(!svg.contains("stroke-dasharray"));
}

#[test]
fn throughput_svg_of_vm_cells_is_grouped_the_same_way() {
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
    let chart = build_chart("t", &results, None);
    assert_eq!(chart.groups, vec!["none", "1r-seq", "5r-rand"]);
    assert_eq!(chart.series.len(), 6);
    assert_eq!(chart.series[1], "cfq guest, host none");
    assert_eq!(chart.y_label, "Aggregate throughput [MB/s]");
    let d = tmpdir("throughput");
    write_outputs(&d, &RunMeta::default(), &results).unwrap();
    let svg = std::fs::read_to_string(d.join("throughput-hdd-1.8in.svg")).unwrap();
    assert!(svg.contains(">Aggregate throughput on hdd-1.8in (sim)</text>"));
    assert!(svg.contains(">5r-rand</text>") && svg.contains(">cfq guest, host 5r-seq</text>"));
    assert!(
        !svg.contains("stroke-dasharray"),
        "no idle line for throughput"
    );
    assert!(!svg.contains(">X</text>"));
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
    let chart = build_chart("t", &both, None);
    assert_eq!(chart.series.len(), 12);
    assert_eq!(chart.series[0], "bfq guest, host none [sim]");
    assert_eq!(chart.series[1], "bfq guest, host none [real]");
    let mut pairs: Vec<(usize, usize)> = chart.bars.iter().map(|b| (b.group, b.series)).collect();
    pairs.sort();
    pairs.dedup();
    assert_eq!(pairs.len(), both.len());
}

/// With several coordination modes, `table.txt` gains one table per device with the
/// modes side by side: one row per VM setup, one column per mode, X where a start
/// timed out. With a single mode there is no such table.
#[test]
fn coordination_modes_side_by_side_table() {
    let matrix = "device = [\"hdd-1.8in\", \"emmc\"]\nhost_sched = [\"bfq\"]\nhost_workload = [\"5r-seq\"]\nguest_sched = [\"bfq\"]\nguest_workload = [\"1r-seq\", \"5r-seq\"]\ncoordination = [\"off\", \"vbfq\"]\n";
    let results: Vec<CellResult> = cells("startup", matrix)
        .into_iter()
        .map(|c| {
            let off = c.coordination == "off";
            let timeout = off && c.guest_workload.as_deref() == Some("5r-seq");
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
    assert!(header.contains("off") && header.contains("vbfq"), "{hdd}");
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
        .filter(|r| r.cell.coordination == "off")
        .collect();
    assert_eq!(render_coordination_tables(&single), "");
}
