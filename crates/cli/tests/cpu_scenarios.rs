//! `tandem sim run` on the CPU model's scenarios: latency metrics and
//! cyclictest histograms, the study's coordination finding, determinism,
//! and clear errors for the CPU keys.

use std::collections::HashMap;

mod common;
use common::{tandem, Scratch};

/// A latency scenario like scenarios/fanguede2014.toml, with few loops.
fn latency(loops: u32, host_loads: &str, coordination: &str) -> String {
    format!(
        r#"
name = "cpu-small"
benchmark = "latency"
platform = "chromebook-2014"
loops = {loops}
repetitions = 2
[matrix]
device = ["emmc"]
guest_sched = ["", "cfq"]
guest_workload = ["none"]
host_sched = ["cfq"]
host_workload = ["none"]
host_cpu_sched = ["cfs"]
host_cpu_load = [{host_loads}]
guest_cpu_load = ["0", "1"]
coordination = [{coordination}]
"#
    )
}

/// results.csv as (stat_file -> row), each row by column name.
fn rows(dir: &Scratch) -> HashMap<String, HashMap<String, String>> {
    let text = std::fs::read_to_string(dir.p("out/results.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines
        .map(|l| {
            let row: HashMap<String, String> = header
                .iter()
                .zip(l.split(','))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            (row["stat_file"].clone(), row)
        })
        .collect()
}

fn run(dir: &Scratch, text: &str) {
    std::fs::write(dir.p("s.toml"), text).unwrap();
    let out = tandem(&[
        "sim",
        "run",
        dir.p("s.toml").to_str().unwrap(),
        "--out",
        dir.p("out").to_str().unwrap(),
        "--quiet",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn latency_cells_write_both_metrics_and_a_histogram_each_deterministically() {
    let d = Scratch::new("cpu-latency");
    run(&d, &latency(1500, "\"0\", \"2\", \"3\"", "\"off\""));
    let r = rows(&d);
    // 3 x (1 native + 2 VM cells), two rows each.
    assert_eq!(r.len(), 18, "{:?}", r.keys());
    let g1 = "cfq-0r0w-seq-host-cfq-0r0w-seq-cpu-chromebook-2014-cfs-h2-g1";
    let avg = &r[&format!("{g1}-cyclictest-avg_stat.txt")];
    let max = &r[&format!("{g1}-cyclictest-max_stat.txt")];
    assert_eq!(avg["metric"], "latency_avg_us");
    assert_eq!(max["metric"], "latency_max_us");
    assert_eq!(avg["benchmark"], "latency");
    assert_eq!(avg["n"], "2");
    let (a, m): (f64, f64) = (avg["mean"].parse().unwrap(), max["mean"].parse().unwrap());
    assert!(a > 0.0 && m >= a, "avg {a} max {m}");
    let native = &r["cfq-0r0w-seq-cpu-chromebook-2014-cfs-h2-cyclictest-avg_stat.txt"];
    assert_eq!(native["guest_sched"], "");
    // One histogram per cell, in cyclictest -h's format, both runs summed.
    let hist = std::fs::read_to_string(d.p(&format!("out/{g1}-cyclictest-hist.txt"))).unwrap();
    assert!(hist.starts_with("# Histogram\n000000 "));
    assert_eq!(hist.lines().count(), 1 + 5000 + 5);
    assert_eq!(samples(&hist), 3000, "{}", &hist[hist.len() - 200..]);
    let table = std::fs::read_to_string(d.p("out/table.txt")).unwrap();
    assert!(
        table.contains("total loops  no guest  0 guest  1 guest"),
        "{table}"
    );
    // The study's figures: Figure 1 (average latency against the total loops, a
    // curve per guest load and no guest), Figures 2 and 3 (histograms).
    let fig1 = std::fs::read_to_string(d.p("out/latency-chromebook-2014-cfs-off.svg")).unwrap();
    for label in ["no guest", "0 guest loops", "1 guest loop"] {
        assert!(fig1.contains(label), "{label} missing in Figure 1");
    }
    for png in [
        "latency-chromebook-2014-cfs-off.png",
        "latency-hist-fig2.png",
        "latency-hist-fig3-cfs.png",
    ] {
        let bytes = std::fs::read(d.p(&format!("out/{png}"))).unwrap();
        assert!(bytes.starts_with(b"\x89PNG"), "{png}");
    }
    let fig3 = std::fs::read_to_string(d.p("out/latency-hist-fig3-cfs.svg")).unwrap();
    assert!(fig3.contains("3 loops in the host") && fig3.contains("2 in the host, 1 in the guest"));

    // Determinism: a second run gives the same bytes.
    let first = std::fs::read(d.p("out/results.csv")).unwrap();
    let first_hist = hist;
    std::fs::remove_dir_all(d.p("out")).unwrap();
    run(&d, &latency(1500, "\"0\", \"2\", \"3\"", "\"off\""));
    assert_eq!(first, std::fs::read(d.p("out/results.csv")).unwrap());
    let again = std::fs::read_to_string(d.p(&format!("out/{g1}-cyclictest-hist.txt"))).unwrap();
    assert_eq!(first_hist, again);
}

#[test]
fn help_cpu_stays_within_3x_of_no_guest_where_off_is_10x() {
    let d = Scratch::new("cpu-coord");
    // 3 host loops + 1 guest loop against no guest with 4 host loops (the
    // same total), within help-cpu's budget (4 s runs).
    run(&d, &latency(4000, "\"3\", \"4\"", "\"off\", \"help-cpu\""));
    let r = rows(&d);
    let get = |name: &str| -> f64 { r[name]["mean"].parse().unwrap() };
    let no_guest = get("cfq-0r0w-seq-cpu-chromebook-2014-cfs-h4-cyclictest-avg_stat.txt");
    let vm = "cfq-0r0w-seq-host-cfq-0r0w-seq-cpu-chromebook-2014-cfs-h3-g1";
    let off = get(&format!("{vm}-cyclictest-avg_stat.txt"));
    let help = get(&format!("{vm}-coord-help-cpu-cyclictest-avg_stat.txt"));
    assert!(
        off >= 10.0 * no_guest,
        "off {off} us, no guest {no_guest} us"
    );
    assert!(
        help <= 3.0 * no_guest,
        "help-cpu {help} us, no guest {no_guest} us"
    );
}

#[test]
fn the_embedded_study_scenarios_run() {
    let d = Scratch::new("cpu-embedded");
    let out = tandem(&[
        "sim",
        "run",
        "fanguede2014",
        "--out",
        d.p("out").to_str().unwrap(),
        "--quiet",
        "--only",
        "guest_sched=",
        "--only",
        "host_cpu_load=0",
        "--only",
        "host_cpu_sched=cfs",
        "--only",
        "coordination=off",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hist = std::fs::read_to_string(
        d.p("out/cfq-0r0w-seq-cpu-chromebook-2014-cfs-h0-cyclictest-hist.txt"),
    )
    .unwrap();
    // 2 runs of 100000 loops, as the study.
    assert_eq!(samples(&hist), 200_000);
    let list = tandem(&["sim", "list"]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        text.contains("fanguede2014, fanguede2014-startup"),
        "{text}"
    );
}

/// A scenario error: exit code 2 and every fragment in the message.
fn refused(text: &str, fragments: &[&str]) {
    let d = Scratch::new("cpu-bad");
    std::fs::write(d.p("s.toml"), text).unwrap();
    let out = tandem(&[
        "sim",
        "run",
        d.p("s.toml").to_str().unwrap(),
        "--out",
        d.p("out").to_str().unwrap(),
        "--quiet",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for f in fragments {
        assert!(err.contains(f), "missing {f:?} in: {err}");
    }
    assert!(!d.p("out").exists());
}

#[test]
fn bad_cpu_keys_are_named_and_refused() {
    let ok = latency(100, "\"1\"", "\"off\"");
    refused(
        &ok.replace("chromebook-2014", "pinebook"),
        &["platform", "unknown platform 'pinebook'", "chromebook-2014"],
    );
    refused(
        &ok.replace("loops = 100", "loops = 100\nvcpus = 3"),
        &["vcpus", "3 vCPUs", "at most 2"],
    );
    refused(
        &ok.replace("host_cpu_load = [\"1\"]", "host_cpu_load = [\"9\"]"),
        &["matrix.host_cpu_load", "\"9\"", "\"0\" to \"8\""],
    );
    refused(
        &ok.replace("host_cpu_sched = [\"cfs\"]", "host_cpu_sched = [\"o1\"]"),
        &["matrix.host_cpu_sched", "\"o1\"", "cfs, eevdf, bfs"],
    );
    refused(
        &ok.replace("\"off\"]", "\"help-rt\"]"),
        &[
            "matrix.coordination",
            "\"help-rt\"",
            "off, static-cpu, help-cpu",
        ],
    );
    let throughput = "benchmark = \"throughput\"\ncaches = \"hot\"\n[matrix]\ndevice = [\"emmc\"]\nhost_sched = [\"cfq\"]\nhost_workload = [\"1r-seq\"]\n";
    refused(
        throughput,
        &["caches", "\"hot\"", "start-up benchmark only", "cold"],
    );
    let cold = "benchmark = \"startup\"\n[matrix]\ndevice = [\"emmc\"]\nhost_sched = [\"cfq\"]\nhost_workload = [\"none\"]\nhost_cpu_load = [\"1\"]\n";
    refused(cold, &["matrix.host_cpu_load", "CPU model"]);
    // A vCPU boost in a cold start-up cell needs the CPU model: a platform.
    let cold_help_all = cold.replace(
        "host_cpu_load = [\"1\"]",
        "guest_sched = [\"bfq\"]\nguest_workload = [\"none\"]\ncoordination = [\"help-all\"]",
    );
    refused(
        &cold_help_all,
        &["matrix.coordination", "\"help-all\"", "give platform"],
    );
}

/// Samples in a cyclictest `-h` file: its rows' `Total` (which, as in
/// rt-tests, leaves out the overflows) plus its overflows.
fn samples(hist: &str) -> u64 {
    let field = |name: &str| -> u64 {
        hist.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name}"))
            .trim()
            .parse()
            .unwrap()
    };
    field("# Total:") + field("# Histogram Overflows:")
}
