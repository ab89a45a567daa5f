//! `tandem bench run` with `benchmark = "latency"`: cyclictest with busy
//! loops around it, through the shared procedure, natively (and in a guest
//! when the VM test runs). Needs root (the runner brings up an emulated
//! device for the cell, as for every real run) and Debian's `rt-tests`
//! (`cyclictest`); ignored by default, run by CI as root with
//! `--include-ignored`.

use std::process::{Command, Stdio};

mod common;
use common::{leftovers, Scratch};

/// A native latency cell with two host loops and a tiny cyclictest.
const NATIVE: &str = r#"
name = "ci-latency"
benchmark = "latency"
loops = 300
repetitions = 2
seed = 1

[matrix]
device = ["hdd-1.8in"]
guest_sched = [""]
guest_workload = ["none"]
host_sched = ["mq-deadline"]
host_workload = ["none"]
host_cpu_sched = ["cfs"]
host_cpu_load = ["2"]
"#;

/// `tandem bench run SCENARIO --out OUT --quiet`, which must succeed and
/// leave none of its processes behind; returns its results.csv.
fn bench_run(text: &str, name: &str) -> (Scratch, std::path::PathBuf, String) {
    let dir = Scratch::new(name);
    let scenario = dir.0.join("s.toml");
    std::fs::write(&scenario, text).unwrap();
    let out = dir.0.join("out");
    let child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["bench", "run"])
        .arg(&scenario)
        .arg("--out")
        .arg(&out)
        .arg("--quiet")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let r = child.wait_with_output().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let left = leftovers(pid, None);
    assert!(left.is_empty(), "left behind: {left:#?}");
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    (dir, out, csv)
}

#[test]
#[ignore = "needs root: an emulated device (FUSE, loop device) and cyclictest"]
fn a_native_latency_cell_measures_cyclictest_with_its_host_loops() {
    let (_dir, out, csv) = bench_run(NATIVE, "bench-latency-native");
    // Two rows, as the simulator writes: the average and the maximum.
    let metric_col = csv
        .lines()
        .next()
        .unwrap()
        .split(',')
        .position(|h| h == "metric")
        .unwrap();
    let metrics: Vec<&str> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(metric_col).unwrap())
        .collect();
    assert_eq!(metrics, ["latency_avg_us", "latency_max_us"]);
    // The histogram file under the simulator's name, with both
    // repetitions' samples.
    let hist = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with("-cyclictest-hist.txt"))
        .expect("a histogram file");
    // The rows (1 us buckets) and the overflows hold every sample.
    let text = std::fs::read_to_string(hist).unwrap();
    let rows: u64 = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap())
        .sum();
    let over: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("# Histogram Overflows:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(rows + over, 600, "{text}");
    // Each run says what its two loops got.
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let text = json.to_string();
    assert!(text.contains("host_loops_iter_s"), "{text}");
    assert!(text.contains("latency_max_us"));
}
