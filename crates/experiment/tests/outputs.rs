use std::path::PathBuf;

use experiment::*;

fn accepted() -> Accepted {
    fn v<T: std::str::FromStr>(xs: &[&str]) -> Vec<T>
    where
        T::Err: std::fmt::Debug,
    {
        xs.iter().map(|s| s.parse().unwrap()).collect()
    }
    Accepted {
        devices: v(&["hdd-1.8in", "emmc", "ssd-sata"]),
        host_scheds: v(&["noop", "deadline", "cfq", "bfq", "mq-deadline"]),
        guest_scheds: v(&["noop", "cfq", "bfq"]),
        coordination: v(&["off", "help-wr"]),
        apps: v(&["bash", "xterm", "konsole"]),
        allow_cmd_apps: true,
        allow_vm: true,
    }
}

fn scenario(text: &str) -> Scenario {
    Scenario::from_toml_str(text, &accepted()).unwrap()
}

fn native_cell(sched: &str, wl: &str, bench: &str) -> Cell {
    let s = scenario(&format!(
        "benchmark = \"{bench}\"\nduration_s = 10\n[matrix]\ndevice = [\"hdd-1.8in\"]\nhost_sched = [\"{sched}\"]\nhost_workload = [\"{wl}\"]\n"
    ));
    s.cells().remove(0)
}

fn vm_cell(gs: &str, gw: &str, hs: &str, hw: &str, coord: &str, bench: &str) -> Cell {
    let s = scenario(&format!(
        "benchmark = \"{bench}\"\n[matrix]\ndevice = [\"hdd-1.8in\"]\nhost_sched = [\"{hs}\"]\nhost_workload = [\"{hw}\"]\nguest_sched = [\"{gs}\"]\nguest_workload = [\"{gw}\"]\ncoordination = [\"{coord}\"]\n"
    ));
    s.cells().remove(0)
}

#[test]
fn native_names_are_exactly_s() {
    // comm_startup_lat.sh: ${sched}-${NUM_READERS}r${NUM_WRITERS}w-${RW_TYPE}-lat_thr_stat.txt
    assert_eq!(
        stat_file_name(&native_cell("bfq", "5r-seq", "startup")),
        "bfq-5r0w-seq-lat_thr_stat.txt"
    );
    assert_eq!(
        stat_file_name(&native_cell("cfq", "none", "startup")),
        "cfq-0r0w-seq-lat_thr_stat.txt"
    );
    assert_eq!(
        stat_file_name(&native_cell("bfq", "2r2w-rand", "startup")),
        "bfq-2r2w-rand-lat_thr_stat.txt"
    );
    assert_eq!(
        stat_file_name(&native_cell("mq-deadline", "1r-rand", "startup")),
        "mq-deadline-1r0w-rand-lat_thr_stat.txt"
    );
    // throughput-sync.sh: ${sched}-${NUM_READERS}r${NUM_WRITERS}w-${RW_TYPE}-${DURATION}sec-aggthr_stat.txt
    assert_eq!(
        stat_file_name(&native_cell("bfq", "5r-seq", "throughput")),
        "bfq-5r0w-seq-10sec-aggthr_stat.txt"
    );
    assert_eq!(
        stat_file_name(&native_cell("bfq", "3w-seq", "throughput")),
        "bfq-0r3w-seq-10sec-aggthr_stat.txt"
    );
    let mut c = native_cell("bfq", "1r-seq", "throughput");
    c.duration_s = 2.5;
    assert_eq!(stat_file_name(&c), "bfq-1r0w-seq-2.5sec-aggthr_stat.txt");
}

#[test]
fn vm_names_extend_s() {
    assert_eq!(
        stat_file_name(&vm_cell("bfq", "5r-seq", "cfq", "1r-seq", "off", "startup")),
        "bfq-5r0w-seq-host-cfq-1r0w-seq-lat_thr_stat.txt"
    );
    assert_eq!(
        stat_file_name(&vm_cell("bfq", "none", "bfq", "none", "help-wr", "startup")),
        "bfq-0r0w-seq-host-bfq-0r0w-seq-coord-help-wr-lat_thr_stat.txt"
    );
    assert_eq!(
        stat_file_name(&vm_cell(
            "cfq",
            "2r2w-rand",
            "bfq",
            "5r-seq",
            "help-wr",
            "throughput"
        )),
        "cfq-2r2w-rand-host-bfq-5r0w-seq-coord-help-wr-60sec-aggthr_stat.txt"
    );
}

fn startup_result(cell: Cell, runs: &[&[f64]], timeouts: &[u32]) -> CellResult {
    CellResult {
        cell,
        runner: "sim".into(),
        metric: Metric::StartupS,
        runs: runs
            .iter()
            .enumerate()
            .map(|(i, v)| RunResult {
                values: v.to_vec(),
                timeouts: timeouts.get(i).copied().unwrap_or(0),
                ..Default::default()
            })
            .collect(),
    }
}

#[test]
fn format_g_like_c() {
    for (x, s) in [
        (0.0, "0"),
        (1.0, "1"),
        (2.31, "2.31"),
        (1.0 / 3.0, "0.333333"),
        (123456.0, "123456"),
        (1234567.0, "1.23457e+06"),
        (0.0001, "0.0001"),
        (0.00001234, "1.234e-05"),
        (-2.5, "-2.5"),
        (99999.95, "99999.9"),
        (999999.5, "1e+06"),
        (10.0, "10"),
        (1e-300, "1e-300"),
    ] {
        assert_eq!(format_g(x), s, "{x}");
    }
}

#[test]
fn stat_file_layout() {
    let r = startup_result(
        native_cell("bfq", "5r-seq", "startup"),
        &[&[2.0, 2.2, 2.4], &[2.4, 2.6, 2.8]],
        &[],
    );
    let text = stat_file_contents(&r);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "Results for bfq, 5 xterm, 5 seq readers and 0 seq writers"
    );
    assert_eq!(lines[1], "Latency statistics:");
    assert_eq!(
        lines[2],
        "         min         max         avg     std_dev     conf99%     conf95%"
    );
    // run means 2.2 and 2.6: mean 2.4, std 0.282843; conf99% 31.6615, what S's
    // `calc_avg_and_co.sh 99` prints for 2.2 and 2.6; the 95% t half width:
    // 12.7062 * 0.2 = 2.54124
    assert_eq!(
        lines[3],
        "         2.2         2.6         2.4    0.282843     31.6615     2.54124"
    );
    assert_eq!(lines[4], "Aggregated throughput:");
    assert_eq!(lines[7], "Read throughput:");
    assert_eq!(lines[10], "Write throughput:");
    // no read/write counters in these runs: X, which S's tables show as X
    assert_eq!(lines[12].split_whitespace().collect::<Vec<_>>(), ["X"; 6]);
    // 1 + 4 * 3 lines: S's calc_overall_stats.sh record_lines for startup_lat
    assert_eq!(
        lines[13],
        "2 repetitions, statistics over the per-repetition means"
    );
    assert!(lines[14].starts_with("conf99%: as S's calc_avg_and_co.sh 99"));

    let vm = startup_result(
        vm_cell("bfq", "1r-seq", "cfq", "5r-seq", "help-wr", "startup"),
        &[&[60.0, 3.0]],
        &[1],
    );
    let text = stat_file_contents(&vm);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "Results for bfq, 5 xterm, 1 seq readers and 0 seq writers, in a VM on host scheduler cfq with 5 seq readers and 0 seq writers in the host, coordination help-wr");
    assert_eq!(
        lines[3].split_whitespace().collect::<Vec<_>>(),
        ["X"; 6],
        "a timeout makes the latency X"
    );
    assert!(
        lines[15].starts_with("X: 1 of 2 starts hit the 60 s timeout"),
        "{}",
        lines[15]
    );

    let mut t = CellResult {
        cell: native_cell("bfq", "5r-seq", "throughput"),
        runner: "sim".into(),
        metric: Metric::ThroughputMbS,
        runs: vec![RunResult {
            values: vec![10.0, 12.0],
            timeouts: 0,
            ..Default::default()
        }],
    };
    let text = stat_file_contents(&t);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "Results for bfq, 5 seq readers and 0 seq writers");
    assert_eq!(lines[1], "Aggregated throughput:");
    // one repetition says nothing about the spread: nan, not a zero-width interval
    assert_eq!(
        lines[3],
        "          11          11          11         nan         nan         nan"
    );
    assert_eq!(lines[4], "Read throughput:");
    assert_eq!(lines[7], "Write throughput:");
    // with the runs' read and write counters, the sections are filled
    for (i, (r, w)) in [(8.0, 2.0), (9.0, 3.0)].into_iter().enumerate() {
        if i > 0 {
            t.runs.push(t.runs[0].clone());
        }
        t.runs[i].counters.insert(s_suite::READ_MB_S.into(), r);
        t.runs[i].counters.insert(s_suite::WRITE_MB_S.into(), w);
    }
    let text = stat_file_contents(&t);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[6].split_whitespace().next(), Some("8"), "{text}");
    assert_eq!(lines[6].split_whitespace().nth(2), Some("8.5"));
    assert_eq!(lines[9].split_whitespace().nth(2), Some("2.5"));
}

#[test]
fn summary_over_run_means() {
    let r = startup_result(
        native_cell("bfq", "none", "startup"),
        &[&[1.0, 3.0], &[3.0, 5.0], &[], &[5.0, 7.0]],
        &[0, 1, 0, 0],
    );
    assert_eq!(r.run_means(), vec![2.0, 4.0, 6.0]);
    let s = r.summary();
    assert_eq!((s.n, s.mean, s.min, s.max), (3, 4.0, 2.0, 6.0));
    assert_eq!(s.std, 2.0);
    assert_eq!(r.timeouts(), 1);
    assert_eq!(r.pooled_summary().n, 6);
}

/// A realistic set of VM results on two devices, with a timeout.
fn sample_results() -> (RunMeta, Vec<CellResult>) {
    let s = scenario(
        r#"
name = "vm-startup"
benchmark = "startup"
app = "xterm"
repetitions = 3
seed = 7
[matrix]
device = ["hdd-1.8in", "emmc"]
host_sched = ["bfq", "cfq"]
host_workload = ["none", "1r-seq", "5r-seq"]
guest_sched = ["bfq"]
guest_workload = ["none", "5r-seq"]
"#,
    );
    let results: Vec<CellResult> = s
        .cells()
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let base = 1.9 + i as f64 * 0.37;
            let timeout =
                c.host_sched.to_string() == "cfq" && c.host_workload.to_string() == "5r-seq";
            let runs: Vec<RunResult> = (0..3)
                .map(|k| {
                    let mut values: Vec<f64> = (0..5)
                        .map(|j| base + 0.1 * k as f64 + 0.01 * j as f64)
                        .collect();
                    let mut timeouts = 0;
                    if timeout && k == 1 {
                        values[2] = c.timeout_s;
                        timeouts = 1;
                    }
                    RunResult {
                        values,
                        timeouts,
                        ..Default::default()
                    }
                })
                .collect();
            CellResult {
                cell: c,
                runner: "sim".into(),
                metric: Metric::StartupS,
                runs,
            }
        })
        .collect();
    let mut extra = serde_json::Map::new();
    extra.insert("note".into(), serde_json::Value::String("test".into()));
    let meta = RunMeta {
        runner: "sim".into(),
        scenario: "vm-startup".into(),
        tandem_version: "0.1.0".into(),
        seed: 7,
        extra,
    };
    (meta, results)
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-exp-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn csv_header_and_rows() {
    let (_, results) = sample_results();
    let csv = results_csv(&results);
    let mut lines = csv.lines();
    let header = lines.next().unwrap();
    assert!(header.starts_with(
        "runner,device,guest_sched,host_sched,guest_workload,host_workload,coordination,benchmark,app,metric,n,mean,std,min,max,ci95_low,ci95_high,timeouts"
    ));
    let cols: Vec<&str> = header.split(',').collect();
    let first: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(first.len(), cols.len());
    assert_eq!(
        &first[..10],
        &[
            "sim",
            "hdd-1.8in",
            "bfq",
            "bfq",
            "none",
            "none",
            "off",
            "startup",
            "xterm",
            "startup_s"
        ]
    );
    assert_eq!(first[10], "3");
    // mean of run means: 1.92, 2.02, 2.12 -> 2.02
    assert_eq!(first[11], "2.0200");
    assert_eq!(first[17], "0");
    assert_eq!(csv.lines().count(), results.len() + 1);
    // native cells have empty guest fields; fields with commas get quoted
    let mut r = startup_result(native_cell("bfq", "none", "startup"), &[&[1.0]], &[]);
    r.cell.app = "cmd:sh -c 'a, b'".into();
    let csv = results_csv(&[r]);
    let row = csv.lines().nth(1).unwrap();
    assert!(row.starts_with("sim,hdd-1.8in,,bfq,,none,off,startup,\"cmd:sh -c 'a, b'\",startup_s,1,1.0000,0.0000,1.0000,1.0000,1.0000,1.0000,0,"), "{row}");
    let parsed = parse_results_csv(&csv).unwrap();
    assert_eq!(parsed[0].app, "cmd:sh -c 'a, b'");
    assert_eq!(parsed[0].guest_sched, None);
    assert_eq!(parsed[0].mean, Some(1.0));
}

#[test]
fn csv_parses_back() {
    let (_, results) = sample_results();
    let rows = parse_results_csv(&results_csv(&results)).unwrap();
    assert_eq!(rows.len(), results.len());
    for (row, r) in rows.iter().zip(&results) {
        assert_eq!(row.device, r.cell.device.name());
        assert_eq!(row.guest_sched, r.cell.guest_sched.map(|g| g.to_string()));
        assert_eq!(row.host_workload, r.cell.host_workload.name());
        assert_eq!(row.metric, Metric::StartupS);
        assert_eq!(row.timeouts, Some(r.timeouts()));
        assert!((row.mean.unwrap() - r.summary().mean).abs() < 1e-4);
    }
    // columns in any order, missing optional stats
    let rows = parse_results_csv(
        "metric,mean,host_workload,host_sched,device,runner,benchmark\nstartup_s,2.2,1r-seq,bfq,hdd,paper,startup\n",
    )
    .unwrap();
    assert_eq!(rows[0].mean, Some(2.2));
    assert_eq!(rows[0].std, None);
    assert_eq!(rows[0].coordination, "off");
    let e = parse_results_csv("runner,device\nsim,hdd\n").unwrap_err();
    assert!(e.contains("missing column \"host_sched\""), "{e}");
    let e = parse_results_csv(
        "runner,device,host_sched,host_workload,benchmark,metric,mean\nsim,hdd,bfq,none,startup,startup_s,abc\n",
    )
    .unwrap_err();
    assert_eq!(e, "row 2: column mean: not a number: \"abc\"");
}

#[test]
fn json_round_trip() {
    let (meta, results) = sample_results();
    let text = results_json(&meta, &results);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["schema"], "tandem-results/1");
    assert_eq!(v["meta"]["extra"]["note"], "test");
    assert_eq!(v["cells"][0]["summary"]["n"], 3);
    assert_eq!(
        v["cells"][0]["runs"][0]["values"].as_array().unwrap().len(),
        5
    );
    assert_eq!(v["cells"][0]["cell"]["benchmark"], "startup");
    assert_eq!(v["cells"][0]["metric"], "startup_s");
    assert_eq!(
        v["cells"][0]["stat_file"],
        "hdd-1.8in/bfq-0r0w-seq-host-bfq-0r0w-seq-lat_thr_stat.txt"
    );
    let (m2, r2) = parse_results_json(&text).unwrap();
    assert_eq!(m2, meta);
    assert_eq!(r2, results);
}

#[test]
fn write_outputs_is_deterministic_and_complete() {
    let (meta, results) = sample_results();
    let d1 = tmpdir("det1");
    let d2 = tmpdir("det2");
    let w1 = write_outputs(&d1, &meta, &results).unwrap();
    let w2 = write_outputs(&d2, &meta, &results).unwrap();
    assert_eq!(w1.len(), w2.len());
    // csv, json, table, a stat file per cell, an SVG and a PNG per device, and S's
    // tree: one file per repetition of each cell
    assert_eq!(w1.len(), 3 + results.len() + 4 + 3 * results.len());
    for (a, b) in w1.iter().zip(&w2) {
        assert_eq!(a.strip_prefix(&d1).unwrap(), b.strip_prefix(&d2).unwrap());
        assert_eq!(
            std::fs::read(a).unwrap(),
            std::fs::read(b).unwrap(),
            "{}",
            a.display()
        );
    }
    for f in [
        "results.csv",
        "results.json",
        "table.txt",
        "startup-hdd-1.8in.svg",
        "startup-emmc.svg",
        "startup-emmc.png",
        "S/emmc-xterm_startup-host-bfq-0r0w-seq/repetition2/bfq-5r0w-seq-lat_thr_stat.txt",
        "hdd-1.8in/bfq-5r0w-seq-host-cfq-1r0w-seq-lat_thr_stat.txt",
        "emmc/bfq-0r0w-seq-host-bfq-0r0w-seq-lat_thr_stat.txt",
    ] {
        assert!(d1.join(f).is_file(), "{f}");
    }
    // read back
    let (m, r) = read_results_json(&d1.join("results.json")).unwrap();
    assert_eq!(m, meta);
    assert_eq!(r, results);
    std::fs::remove_dir_all(&d1).unwrap();
    std::fs::remove_dir_all(&d2).unwrap();
}

#[test]
fn single_device_stat_files_at_top_level_and_collisions() {
    let (meta, results) = sample_results();
    let one: Vec<CellResult> = results
        .iter()
        .filter(|r| r.cell.device.to_string() == "emmc")
        .cloned()
        .collect();
    let d = tmpdir("single");
    write_outputs(&d, &meta, &one).unwrap();
    assert!(d
        .join("bfq-0r0w-seq-host-bfq-0r0w-seq-lat_thr_stat.txt")
        .is_file());
    assert!(!d.join("emmc").exists());
    std::fs::remove_dir_all(&d).unwrap();

    let dup = vec![one[0].clone(), one[0].clone()];
    let d = tmpdir("dup");
    let e = write_outputs(&d, &meta, &dup).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("same stat file"), "{e}");
    assert!(!d.exists(), "nothing written on error");
}

#[test]
fn table_text() {
    let (_, results) = sample_results();
    let t = render_tables(&results);
    // 2 devices x 2 host schedulers
    assert_eq!(t.matches("== ").count(), 4, "{t}");
    let first: Vec<&str> = t.split("\n\n").next().unwrap().lines().collect();
    assert_eq!(
        first[0],
        "== hdd-1.8in | startup of xterm | VM on host bfq | sim =="
    );
    assert!(first[1].contains("X: a start hit the 60 s timeout"));
    assert_eq!(first[2], "host workload  guest sched  none  5r-seq");
    assert_eq!(first[3], "none           bfq          2.02    4.24");
    assert_eq!(first[4], "1r-seq         bfq          2.39    4.61");
    assert_eq!(first[5], "5r-seq         bfq          2.76    4.98");
    assert_eq!(cell_text(&results[0]), "2.02");
    let cfq = t.split("\n\n").nth(1).unwrap();
    assert!(cfq.starts_with("== hdd-1.8in | startup of xterm | VM on host cfq | sim =="));
    assert!(cfq.lines().nth(5).unwrap().ends_with("X"), "{cfq}");
}

#[test]
fn table_with_coordination_columns() {
    let s = scenario(
        "benchmark = \"startup\"\n[matrix]\ndevice = [\"ssd-sata\"]\nhost_sched = [\"bfq\"]\nhost_workload = [\"none\"]\ncoordination = [\"off\", \"help-wr\"]\n",
    );
    let results: Vec<CellResult> = s
        .cells()
        .into_iter()
        .map(|c| startup_result(c, &[&[1.0]], &[]))
        .collect();
    let t = render_tables(&results);
    assert!(t.contains("host workload  bfq/off  bfq/help-wr"), "{t}");
}

#[test]
fn device_paths_are_sanitized() {
    assert_eq!(sanitize_component("/dev/sdb"), "dev_sdb");
    assert_eq!(sanitize_component("hdd-1.8in"), "hdd-1.8in");
    assert_eq!(sanitize_component(".."), "_");
    assert_eq!(sanitize_component("a b/c"), "a_b_c");
}

/// The columns after the contract's: the finished starts apart from the timeouts,
/// percentiles of every start, and a note when the interval is not one.
#[test]
fn csv_statistics_columns() {
    let col = |csv: &str, name: &str| -> String {
        let mut rows = csv.lines();
        let header: Vec<&str> = rows.next().unwrap().split(',').collect();
        let row: Vec<&str> = rows.next().unwrap().split(',').collect();
        let i = header.iter().position(|h| *h == name).unwrap();
        row[i].to_string()
    };
    let header = results_csv(&[]);
    assert!(
        header.trim_end().ends_with(
            ",timeouts,other_vms,scenario,iterations,repetitions,seed,stat_file,finished_n,finished_mean,median,p90,p99,ci95_note"
        ),
        "{header}"
    );
    // a timeout: X, no interval; the finished starts apart (2.0, 4.0 and 3.0)
    let cell = native_cell("noop", "5r-seq", "startup");
    let r = startup_result(cell.clone(), &[&[2.0, 4.0], &[3.0, 60.0]], &[0, 1]);
    let json: serde_json::Value =
        serde_json::from_str(&results_json(&RunMeta::default(), std::slice::from_ref(&r))).unwrap();
    let c = &json["cells"][0];
    assert!(c["summary"]["ci95_low"].is_null() && c["summary"]["ci95_high"].is_null());
    assert_eq!(c["interval"], "timeouts");
    assert_eq!(c["finished"]["n"], 3);
    assert_eq!(c["finished"]["mean"], 3.0);
    assert_eq!(c["percentiles"]["median"], 3.5);
    let csv = results_csv(&[r]);
    assert_eq!(col(&csv, "timeouts"), "1");
    assert_eq!(col(&csv, "ci95_low"), "");
    assert_eq!(col(&csv, "ci95_high"), "");
    assert_eq!(col(&csv, "ci95_note"), "timeouts");
    assert_eq!(col(&csv, "finished_n"), "3");
    assert_eq!(col(&csv, "finished_mean"), "3.0000");
    // median of 2, 3, 4, 60
    assert_eq!(col(&csv, "median"), "3.5000");
    assert_eq!(col(&csv, "p99"), "60.0000");
    // deterministic repetitions: a zero-width interval, named
    let r = startup_result(cell.clone(), &[&[2.5], &[2.5], &[2.5]], &[]);
    let csv = results_csv(&[r]);
    assert_eq!(col(&csv, "ci95_low"), "2.5000");
    assert_eq!(col(&csv, "ci95_note"), "zero-width");
    // a real interval has no note; percentiles over every start (type 8)
    let r = startup_result(cell, &[&[1.0, 2.0], &[3.0, 4.0], &[5.0, 6.0]], &[]);
    let csv = results_csv(&[r]);
    assert_eq!(col(&csv, "ci95_note"), "");
    assert_eq!(col(&csv, "median"), "3.5000");
    assert_eq!(col(&csv, "p90"), "6.0000");
    assert_eq!(col(&csv, "finished_n"), "6");
}
