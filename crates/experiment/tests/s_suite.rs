//! tandem's output read the way S's scripts read it (Algodev-github/S,
//! `utilities/calc_overall_stats.sh` and `calc_avg_and_co.sh`): the `S/` tree of
//! `repetitionN/` folders, the record length, the fields it takes, X, and the conf99%
//! column as S computes it.

use std::path::{Path, PathBuf};

use experiment::s_suite::{s_conf99, s_stats, s_tree, READ_MB_S, S_TREE, WRITE_MB_S};
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

fn cells(text: &str) -> Vec<Cell> {
    Scenario::from_toml_str(text, &accepted()).unwrap().cells()
}

/// S's workload filters (`workload_filters` in calc_overall_stats.sh) that tandem's
/// workloads can produce.
const S_WORKLOADS: &[&str] = &[
    "0r0w-seq",
    "1r0w-seq",
    "5r0w-seq",
    "10r0w-seq",
    "1r0w-rand",
    "5r0w-rand",
    "10r0w-rand",
    "2r2w-seq",
    "5r5w-seq",
    "2r2w-rand",
    "5r5w-rand",
];

/// What calc_overall_stats.sh takes from one file: `None` when the file has fewer
/// than `1 + 3 * quantities` lines (skipped); else per quantity the third field of its
/// values line (line `3q + 3`, counting from 0), or the whole second line when the
/// title's second word is `of` or `completion`.
fn s_fields(text: &str, quantities: usize) -> Option<Vec<String>> {
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() < 1 + 3 * quantities {
        return None;
    }
    Some(
        (0..quantities)
            .map(|q| {
                let title: Vec<&str> = lines[3 * q + 1].split_whitespace().collect();
                assert!(!matches!(title.get(1), Some(&"of") | Some(&"completion")));
                let values: Vec<&str> = lines[3 * q + 3].split_whitespace().collect();
                values.get(2).copied().unwrap_or_default().to_string()
            })
            .collect(),
    )
}

/// The files under `dir` whose names match S's `*<sched>[-]<workload>*.txt`.
fn s_glob(files: &[(PathBuf, String)], dir: &Path, sched: &str, wl: &str) -> Vec<usize> {
    let needle = format!("{sched}-{wl}");
    files
        .iter()
        .enumerate()
        .filter(|(_, (p, _))| {
            let name = p.file_name().unwrap().to_str().unwrap();
            p.starts_with(dir) && name.contains(&needle) && name.ends_with(".txt")
        })
        .map(|(i, _)| i)
        .collect()
}

/// Start-up results of guest bfq/cfq x guest workloads x host workloads, 3
/// repetitions of 2 starts; cfq with 5r-rand under host 5r-seq times out in its
/// second repetition. Runs carry read and write counters.
fn startup_results() -> Vec<CellResult> {
    let text = "benchmark = \"startup\"\napp = \"xterm\"\niterations = 2\nrepetitions = 3\n[matrix]\ndevice = [\"hdd-1.8in\"]\nhost_sched = [\"bfq\"]\nhost_workload = [\"none\", \"5r-seq\"]\nguest_sched = [\"bfq\", \"cfq\"]\nguest_workload = [\"none\", \"1r-seq\", \"5r-rand\"]\n";
    cells(text)
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let bad = c.guest_sched.map(|g| g.name()) == Some("cfq")
                && c.guest_workload.map(|w| w.name()).as_deref() == Some("5r-rand")
                && c.host_workload.to_string() == "5r-seq";
            let runs = (0..3)
                .map(|k| {
                    let v = 2.0 + i as f64 + 0.5 * k as f64;
                    let timeout = bad && k == 1;
                    let mut run = RunResult {
                        values: if timeout {
                            vec![v, c.timeout_s]
                        } else {
                            vec![v, v + 0.2]
                        },
                        timeouts: u32::from(timeout),
                        ..Default::default()
                    };
                    run.counters.insert(READ_MB_S.into(), 4.0 + k as f64);
                    run.counters.insert(WRITE_MB_S.into(), 1.0);
                    run
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

#[test]
fn conf99_is_what_s_prints() {
    // each expectation is the output of S's `sh calc_avg_and_co.sh 99` for the values
    let f = |v: &[f64]| format_g(s_conf99(v));
    assert_eq!(f(&[2.2, 2.6]), "31.6615");
    assert_eq!(f(&[1.0, 2.0, 3.0]), "20.0054");
    let squares: Vec<f64> = (1..=10).map(|i| (i * i) as f64 / 7.0).collect();
    assert_eq!(f(&squares), "21.6662");
    // past 31 values S keeps the 30-degrees-of-freedom quantile
    let forty: Vec<f64> = (1..=40).map(|i| (i % 7) as f64 + 0.5).collect();
    assert_eq!(f(&forty), "3.79032");
    let s = s_stats(&squares).unwrap();
    // S was given the values as awk prints them (6 digits): 4.88193 there
    assert!((s.std_dev - 4.88193).abs() < 2e-5, "{}", s.std_dev);
    // the 95% t half width beside it: t(0.975, 9) = 2.26216 times std / sqrt(10)
    assert!(
        (s.conf95 - 2.262157 * 4.881935 / 10f64.sqrt()).abs() < 1e-4,
        "{}",
        s.conf95
    );
    // one value: no spread to speak of
    let one = s_stats(&[3.0]).unwrap();
    assert!(one.std_dev.is_nan() && one.conf95.is_nan() && one.conf99_s.is_nan());
    assert_eq!(s_stats(&[]), None);
}

#[test]
fn repetition_folders_per_host_setup_with_s_names() {
    let results = startup_results();
    let files = s_tree(&results).unwrap();
    assert_eq!(files.len(), 3 * results.len());
    let dirs: Vec<PathBuf> = {
        let mut d: Vec<PathBuf> = files
            .iter()
            .map(|(p, _)| p.parent().unwrap().parent().unwrap().to_path_buf())
            .collect();
        d.sort();
        d.dedup();
        d
    };
    assert_eq!(
        dirs,
        vec![
            PathBuf::from("hdd-1.8in-xterm_startup-host-bfq-0r0w-seq"),
            PathBuf::from("hdd-1.8in-xterm_startup-host-bfq-5r0w-seq")
        ]
    );
    assert!(files
        .iter()
        .any(|(p, _)| p == Path::new(
            "hdd-1.8in-xterm_startup-host-bfq-5r0w-seq/repetition2/cfq-5r0w-rand-lat_thr_stat.txt"
        )));
    // each (scheduler, workload) S asks for in a folder finds exactly one cell's
    // files, one per repetition: S's globs do not mix cells
    for dir in &dirs {
        for sched in ["bfq", "cfq"] {
            for wl in S_WORKLOADS {
                let hits = s_glob(&files, dir, sched, wl);
                let expected = if ["0r0w-seq", "1r0w-seq", "5r0w-rand"].contains(wl) {
                    3
                } else {
                    0
                };
                assert_eq!(hits.len(), expected, "{} {sched} {wl}", dir.display());
                let names: Vec<&str> = hits
                    .iter()
                    .map(|&i| files[i].0.file_name().unwrap().to_str().unwrap())
                    .collect();
                assert!(names.windows(2).all(|w| w[0] == w[1]));
            }
        }
    }
}

#[test]
fn s_reads_start_up_latency_and_throughput_and_x() {
    let results = startup_results();
    let files = s_tree(&results).unwrap();
    let get = |p: &str| &files.iter().find(|(q, _)| q == Path::new(p)).unwrap().1;
    let ok =
        get("hdd-1.8in-xterm_startup-host-bfq-0r0w-seq/repetition1/bfq-1r0w-seq-lat_thr_stat.txt");
    assert!(ok.starts_with("Results for bfq, 2 xterm, 1 seq readers and 0 seq writers, in a VM"));
    let cell = results
        .iter()
        .find(|r| {
            r.cell.guest_sched.map(|g| g.name()) == Some("bfq")
                && r.cell.guest_workload.map(|w| w.name()).as_deref() == Some("1r-seq")
                && r.cell.host_workload.to_string() == "none"
        })
        .unwrap();
    let mean = cell.runs[1].mean().unwrap();
    // latency: the average of the repetition's starts; throughput: read + write, read,
    // write of the repetition's counters (5 and 1 MB/s in repetition 1)
    assert_eq!(
        s_fields(ok, 4).unwrap(),
        vec![format_g(mean), "6".into(), "5".into(), "1".into()]
    );
    // a repetition with a timed-out start: X where S's table shows X
    let x =
        get("hdd-1.8in-xterm_startup-host-bfq-5r0w-seq/repetition1/cfq-5r0w-rand-lat_thr_stat.txt");
    assert_eq!(s_fields(x, 4).unwrap()[0], "X");
    let fine =
        get("hdd-1.8in-xterm_startup-host-bfq-5r0w-seq/repetition0/cfq-5r0w-rand-lat_thr_stat.txt");
    assert_ne!(s_fields(fine, 4).unwrap()[0], "X");
}

#[test]
fn throughput_files_have_three_quantities() {
    let text = "benchmark = \"throughput\"\nduration_s = 10\nrepetitions = 2\n[matrix]\ndevice = [\"emmc\"]\nhost_sched = [\"bfq\", \"cfq\"]\nhost_workload = [\"2r2w-seq\"]\n";
    let results: Vec<CellResult> = cells(text)
        .into_iter()
        .map(|c| CellResult {
            cell: c,
            runner: "sim".into(),
            metric: Metric::ThroughputMbS,
            runs: vec![
                RunResult {
                    values: vec![10.0, 12.0, 14.0],
                    ..Default::default()
                };
                2
            ],
        })
        .collect();
    let files = s_tree(&results).unwrap();
    let (path, text) = &files[0];
    assert_eq!(
        path,
        Path::new("emmc-throughput/repetition0/bfq-2r2w-seq-10sec-aggthr_stat.txt")
    );
    assert_eq!(
        text.lines().next().unwrap(),
        "Results for bfq, 2 seq readers and 2 seq writers"
    );
    // no read/write counters: S sees X for them, the aggregate from the samples
    assert_eq!(s_fields(text, 3).unwrap(), vec!["12", "X", "X"]);
}

#[test]
fn written_with_the_outputs_and_collisions_refused() {
    let results = startup_results();
    let d = std::env::temp_dir().join(format!("tandem-s-suite-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    write_outputs(&d, &RunMeta::default(), &results).unwrap();
    for (rel, text) in s_tree(&results).unwrap() {
        assert_eq!(
            std::fs::read_to_string(d.join(S_TREE).join(rel)).unwrap(),
            text
        );
    }
    std::fs::remove_dir_all(&d).unwrap();
    // the same cell from two runners would land on the same S file
    let mut twice = results.clone();
    let mut real = results[0].clone();
    real.runner = "real".into();
    twice.push(real);
    let e = s_tree(&twice).unwrap_err();
    assert!(e.contains("same S file") && e.contains("(real)"), "{e}");
}
