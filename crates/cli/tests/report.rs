//! `tandem report`: tables of a results directory, and the comparison with the paper's
//! published numbers.

use std::path::{Path, PathBuf};
use std::process::Output;

use experiment::{Accepted, CellResult, Metric, RunMeta, RunResult, Scenario};

mod common;
use common::tandem;

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tandem-report-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn paper_file() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../reference/cloud2014-hdd.toml")
        .to_string_lossy()
        .into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A results directory with three VM cells of the paper's matrix, written through the
/// experiment crate: guest bfq 1r-seq with an idle host (2.4 s, paper 2.2), guest cfq
/// 5r-seq with an idle host (timed out, paper 30.0), and the idle cell (2.0 s).
fn results_dir(name: &str) -> PathBuf {
    fn v<T: std::str::FromStr>(xs: &[&str]) -> Vec<T>
    where
        T::Err: std::fmt::Debug,
    {
        xs.iter().map(|s| s.parse().unwrap()).collect()
    }
    let accepted = Accepted {
        devices: v(&["hdd-1.8in"]),
        host_scheds: v(&["bfq"]),
        guest_scheds: v(&["bfq", "cfq"]),
        coordination: v(&["off"]),
        apps: v(&["xterm"]),
        allow_cmd_apps: false,
        allow_vm: true,
    };
    let scenario = Scenario::from_toml_str(
        "benchmark = \"startup\"\n[matrix]\ndevice = \"hdd-1.8in\"\nhost_sched = \"bfq\"\nhost_workload = \"none\"\nguest_sched = [\"bfq\", \"cfq\"]\nguest_workload = [\"none\", \"1r-seq\", \"5r-seq\"]\n",
        &accepted,
    )
    .unwrap();
    let results: Vec<CellResult> = scenario
        .cells()
        .into_iter()
        .filter_map(|c| {
            let run = match (
                c.guest_sched.map(|g| g.name())?,
                c.guest_workload.map(|w| w.name()).as_deref()?,
            ) {
                ("bfq", "none") => RunResult {
                    values: vec![2.0, 2.0],
                    timeouts: 0,
                    ..Default::default()
                },
                ("bfq", "1r-seq") => RunResult {
                    values: vec![2.3, 2.5],
                    timeouts: 0,
                    ..Default::default()
                },
                ("cfq", "5r-seq") => RunResult {
                    values: vec![25.0, 60.0],
                    timeouts: 1,
                    ..Default::default()
                },
                _ => return None,
            };
            Some(CellResult {
                cell: c,
                runner: "sim".into(),
                metric: Metric::StartupS,
                runs: vec![run],
            })
        })
        .collect();
    let d = tmpdir(name);
    experiment::write_outputs(&d, &RunMeta::default(), &results).unwrap();
    d
}

#[test]
fn report_prints_the_tables() {
    let d = results_dir("tables");
    let o = tandem(&["report", d.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(
        out,
        std::fs::read_to_string(d.join("table.txt")).unwrap(),
        "the same tables as table.txt"
    );
    assert!(
        out.contains("== hdd-1.8in | startup of xterm | VM on host bfq | sim =="),
        "{out}"
    );
    // a results.json file works as well as its directory
    let o = tandem(&["report", d.join("results.json").to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), out);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn report_compares_with_the_paper() {
    let d = results_dir("paper");
    let o = tandem(&["report", d.to_str().unwrap(), "--paper", &paper_file()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "== hdd-1.8in | start-up time [s], tandem vs paper | ratio = tandem/paper =="
    );
    assert!(lines[1].starts_with("cell") && lines[1].ends_with("X-match"));
    let row = |prefix: &str| -> Vec<String> {
        let line = lines
            .iter()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no row {prefix} in\n{out}"));
        line[prefix.len()..]
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        row("xterm: idle disk (guest bfq, host bfq)"),
        vec!["1.90", "2.00", "1.05", "yes"]
    );
    assert_eq!(
        row("xterm: guest bfq 1r-seq, host bfq none"),
        vec!["2.20", "2.40", "1.09", "yes"]
    );
    assert_eq!(
        row("xterm: guest cfq 5r-seq, host bfq none"),
        vec!["30.00", "X", "no"]
    );
    assert_eq!(
        row("xterm: guest cfq 5r-rand, host bfq 5r-seq"),
        vec!["X", "missing"]
    );
    // 1 idle row + 24 cells of the figure, 22 of them missing
    assert_eq!(lines.len(), 2 + 25 + 1, "{out}");
    assert_eq!(
        *lines.last().unwrap(),
        "summary: 3 cells compared, 22 missing; 2 of 2 within ±25%; X matches 2 of 3; \
         worst ratio 1.09 (xterm: guest bfq 1r-seq, host bfq none)"
    );
    // the run's plot with the published values beside the bars, next to its own
    for ext in ["svg", "png"] {
        let plot = d.join(format!("startup-hdd-1.8in-vs-paper.{ext}"));
        assert!(plot.is_file(), "{}: {}", plot.display(), stderr(&o));
    }
    let svg = std::fs::read_to_string(d.join("startup-hdd-1.8in-vs-paper.svg")).unwrap();
    assert!(svg.contains("published value (paper)"));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn report_takes_several_paper_files_and_prints_a_line_per_device() {
    let d = results_dir("papers");
    let p = paper_file();
    let o = tandem(&["report", d.to_str().unwrap(), "--paper", &p, &p]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let tail: Vec<&str> = out.lines().rev().take(3).collect();
    let line = "hdd-1.8in: 2 of 2 numeric cells within ±25%; X statuses matched in 2 of 3 cells (22 missing)";
    assert_eq!(tail, vec![line, line, "== per device =="], "{out}");
    assert_eq!(out.matches("tandem vs paper").count(), 2, "{out}");
    // One file: no per-device block.
    let o = tandem(&["report", d.to_str().unwrap(), "--paper", &p]);
    assert!(!stdout(&o).contains("== per device =="));
    let _ = std::fs::remove_dir_all(&d);
}

/// Writes `scenario` into `d` and runs `tandem sim run` on it into `out` with the
/// extra arguments `args`; the run must succeed.
fn sim_run(d: &Path, scenario: &str, out: &Path, args: &[&str]) {
    let file = d.join("scenario.toml");
    std::fs::write(&file, scenario).unwrap();
    let mut all = vec![
        "sim",
        "run",
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ];
    all.extend_from_slice(args);
    let o = tandem(&all);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// A native run set against the paper's VM figures is refused (exit 2) instead of
/// printing every VM cell as missing.
#[test]
fn report_refuses_a_paper_of_another_kind() {
    let d = tmpdir("sim");
    let out = d.join("out");
    sim_run(
        &d,
        "name = \"idle\"\nbenchmark = \"startup\"\napp = \"xterm\"\niterations = 1\nrepetitions = 1\n[matrix]\ndevice = [\"hdd-1.8in\"]\nhost_sched = [\"bfq\", \"noop\"]\nhost_workload = [\"none\", \"1r-seq\"]\n",
        &out,
        &["--only", "host_sched=bfq", "--only", "host_workload=none"],
    );
    let o = tandem(&["report", out.to_str().unwrap(), "--paper", &paper_file()]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    let e = stderr(&o);
    assert!(
        e.contains("cloud2014-hdd.toml: the reference holds VM cells")
            && e.contains("the run's 1 cells are all native"),
        "{e}"
    );
    assert!(o.stdout.is_empty());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bad_inputs_exit_with_code_2() {
    let d = results_dir("bad");
    // no results.json
    let empty = tmpdir("empty");
    let o = tandem(&["report", empty.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.starts_with("tandem: ") && e.contains("results.json: cannot read"),
        "{e}"
    );
    // malformed results.json
    std::fs::write(empty.join("results.json"), "{\"schema\": 1}").unwrap();
    let o = tandem(&["report", empty.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("invalid results.json"),
        "{}",
        stderr(&o)
    );
    // missing reference file
    let missing = empty.join("nope.toml");
    let o = tandem(&[
        "report",
        d.to_str().unwrap(),
        "--paper",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("nope.toml: cannot read"),
        "{}",
        stderr(&o)
    );
    // malformed reference file: the error names the key and the value
    let bad = empty.join("bad.toml");
    std::fs::write(
        &bad,
        "[device]\nname = \"hdd-1.8in\"\n[startup.xterm]\nhost_sched = \"bfq\"\nguest_workloads = [\"1r-seq\"]\n\"bfq/none\" = [\"slow\"]\n",
    )
    .unwrap();
    let o = tandem(&[
        "report",
        d.to_str().unwrap(),
        "--paper",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("bad.toml: startup.xterm.\"bfq/none\"[0]: expected seconds or \"X\" (timed out), found \"slow\""),
        "{e}"
    );
    assert!(o.stdout.is_empty());
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&empty);
}

/// `tandem report A --baseline B` sets two runs side by side, cell by cell: here the
/// same scenario simulated with two different host tick rates, which changes nothing
/// on an idle disk (ratio 1.00). The columns are named after the runs; a second run
/// without --baseline, or with --paper, is a usage error; `bench compare` is gone.
#[test]
fn report_sets_a_run_against_a_baseline() {
    let d = tmpdir("two");
    let scenario = "name = \"idle\"\nbenchmark = \"startup\"\napp = \"bash\"\niterations = 1\nrepetitions = 1\n[matrix]\ndevice = [\"emmc\"]\nhost_sched = [\"bfq\", \"noop\"]\nhost_workload = [\"none\"]\n";
    let (a, b) = (d.join("hz250"), d.join("hz1000"));
    sim_run(&d, scenario, &a, &["--host-kernel-set", "hz=250"]);
    sim_run(&d, scenario, &b, &["--host-kernel-set", "hz=1000"]);
    let o = tandem(&[
        "report",
        a.to_str().unwrap(),
        "--baseline",
        b.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.starts_with("ratio = hz250 / hz1000 (the baseline)"),
        "{text}"
    );
    let header = text.lines().nth(1).unwrap();
    assert!(header.contains("hz250") && header.contains("hz1000") && !header.contains("sim"));
    let rows: Vec<&str> = text.lines().filter(|l| l.contains("device=emmc")).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(rows.iter().all(|r| r.ends_with("1.00  yes")), "{text}");
    for bad in [
        vec!["report", a.to_str().unwrap(), b.to_str().unwrap()],
        vec![
            "report",
            a.to_str().unwrap(),
            "--baseline",
            b.to_str().unwrap(),
            "--paper",
            &paper_file(),
        ],
        vec!["bench", "compare", a.to_str().unwrap(), b.to_str().unwrap()],
    ] {
        let o = tandem(&bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("--baseline"), "{bad:?}: {}", stderr(&o));
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// Two runs of four cells whose means differ by 0.78x, 1.25x, 1.30x and an X:
/// `report A --baseline B` and `report B --baseline A` must agree on which cells
/// are within the tolerance (they did not when "within" was 0.75..1.25 of A/B).
#[test]
fn report_agrees_with_itself_whichever_run_is_the_baseline() {
    let d = tmpdir("sym");
    let scenario = Scenario::from_toml_str(
        "benchmark = \"startup\"\napp = \"xterm\"\n[matrix]\ndevice = \"hdd-1.8in\"\nhost_sched = [\"bfq\", \"cfq\"]\nhost_workload = [\"none\", \"5r-seq\"]\n",
        &Accepted {
            devices: vec!["hdd-1.8in".parse().unwrap()],
            host_scheds: vec!["bfq".parse().unwrap(), "cfq".parse().unwrap()],
            guest_scheds: Vec::new(),
            coordination: vec!["off".parse().unwrap()],
            apps: vec!["xterm".into()],
            allow_cmd_apps: false,
            allow_vm: false,
        },
    )
    .unwrap();
    let write = |name: &str, values: [(f64, u32); 4]| {
        let results: Vec<CellResult> = scenario
            .cells()
            .into_iter()
            .zip(values)
            .map(|(cell, (v, timeouts))| CellResult {
                cell,
                runner: "sim".into(),
                metric: Metric::StartupS,
                runs: vec![RunResult {
                    values: vec![v],
                    timeouts,
                    ..Default::default()
                }],
            })
            .collect();
        let dir = d.join(name);
        experiment::write_outputs(&dir, &RunMeta::default(), &results).unwrap();
        dir
    };
    let a = write("a", [(3.9, 0), (5.0, 0), (1.3, 0), (60.0, 1)]);
    let b = write("b", [(5.0, 0), (4.0, 0), (1.0, 0), (9.0, 0)]);
    let within = |run: &Path, base: &Path, tol: &str| -> Vec<String> {
        let o = tandem(&[
            "report",
            run.to_str().unwrap(),
            "--baseline",
            base.to_str().unwrap(),
            "--tolerance",
            tol,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let mut keys: Vec<String> = stdout(&o)
            .lines()
            .filter(|l| l.ends_with("  yes"))
            .map(|l| l.split("  ").next().unwrap().to_string())
            .collect();
        keys.sort();
        keys
    };
    for tol in ["0.1", "0.25", "0.3"] {
        assert_eq!(within(&a, &b, tol), within(&b, &a, tol), "tolerance {tol}");
    }
    // 5.0 / 4.0 = 1.25 only; 3.9 / 5.0 = 0.78 (5.0 / 3.9 = 1.28) and 1.3 are out
    let keys = within(&a, &b, "0.25");
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(
        keys[0].contains("host_sched=bfq") && keys[0].contains("5r-seq"),
        "{keys:?}"
    );
    assert_eq!(within(&a, &b, "0.3").len(), 3);
    let _ = std::fs::remove_dir_all(&d);
}
