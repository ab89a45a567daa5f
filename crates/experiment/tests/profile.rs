//! The profile benchmark's vocabulary (issue 29): scenario keys, errors,
//! cells, names and result rows.

use experiment::profile::{IO_LATENCY_P50_MS, IO_LATENCY_P99_MS};
use experiment::*;

fn accepted() -> Accepted {
    Accepted {
        devices: vec!["hdd-1.8in".parse().unwrap()],
        host_scheds: ["noop", "deadline", "anticipatory", "cfq"]
            .map(|s| s.parse().unwrap())
            .to_vec(),
        guest_scheds: ["noop", "deadline", "anticipatory", "cfq"]
            .map(|s| s.parse().unwrap())
            .to_vec(),
        coordination: vec!["off".parse().unwrap()],
        apps: vec!["xterm".into()],
        allow_cmd_apps: false,
        allow_vm: true,
    }
}

const STUDY: &str = r#"
name = "t"
benchmark = "profile"
hypervisor = "xen-pv"
duration_s = 10
repetitions = 2
[matrix]
device = ["hdd-1.8in"]
host_sched = ["cfq", "noop"]
host_workload = ["none"]
guest_sched = ["", "noop"]
guest_workload = ["none"]
profile = ["ffsb-randread", "ffsb-seqwrite"]
threads = [1, 8]
"#;

fn parse(text: &str) -> Result<Scenario, String> {
    Scenario::from_toml_str(text, &accepted()).map_err(|e| e.to_string())
}

#[test]
fn a_profile_scenario_crosses_profiles_and_threads_with_native_and_vm_cells() {
    let s = parse(STUDY).unwrap();
    assert_eq!(s.hypervisor, Hypervisor::XenPv);
    let cells = s.cells();
    // (native + 1 guest) x 2 host x 2 profiles x 2 threads.
    assert_eq!(cells.len(), 16);
    assert_eq!(s.cell_count(), 16);
    let c = &cells[1];
    let p = c.profile.unwrap();
    assert_eq!(
        (p.profile, p.threads, p.block_kib),
        (Profile::RandRead, 8, 4)
    );
    assert!(
        c.key().ends_with("profile=ffsb-randread threads=8"),
        "{}",
        c.key()
    );
    assert_eq!(c.get("threads").as_deref(), Some("8"));
    assert_eq!(
        stat_file_name(c),
        "cfq-0r0w-seq-xen-pv-ffsb-randread-8t-10sec-tps_stat.txt"
    );
    assert_eq!(Metric::for_cell(&cells[2]), Metric::ThroughputMbS);
    // Every cell its own seed.
    let mut seeds: Vec<u64> = cells.iter().map(|c| c.seed).collect();
    seeds.sort_unstable();
    seeds.dedup();
    assert_eq!(seeds.len(), cells.len());
}

#[test]
fn threads_default_to_one_and_block_size_and_share_are_settable() {
    let text = STUDY.replace("threads = [1, 8]\n", "").replace(
        "duration_s = 10",
        "duration_s = 10\nblock_kib = 64\nread_share = 70",
    );
    let s = parse(&text).unwrap();
    assert_eq!(s.matrix.threads, vec![1]);
    let p = s.cells()[0].profile.unwrap();
    assert_eq!((p.block_kib, p.read_share), (64, 70));
}

#[test]
fn bad_profile_values_are_clear_errors() {
    let cases = [
        (
            STUDY.replace("\"ffsb-seqwrite\"", "\"ffsb-randrw\""),
            "matrix.profile: unknown profile \"ffsb-randrw\"; accepted: ffsb-randread,",
        ),
        (
            STUDY.replace("[1, 8]", "[1, 0]"),
            "matrix.threads: threads 0 out of range; accepted: 1 to 64",
        ),
        (
            STUDY.replace("[1, 8]", "[1, 65]"),
            "matrix.threads: threads 65 out of range",
        ),
        (
            STUDY.replace("xen-pv", "vmware"),
            "hypervisor: unknown hypervisor \"vmware\"; accepted: kvm, xen-pv",
        ),
        (
            STUDY.replace("profile = [\"ffsb-randread\", \"ffsb-seqwrite\"]\n", ""),
            "matrix.profile: benchmark = \"profile\" needs a non-empty list",
        ),
        (
            STUDY
                .replace("benchmark = \"profile\"", "benchmark = \"throughput\"")
                .replace("[\"\", \"noop\"]", "[\"noop\"]"),
            "is for benchmark = \"profile\" only",
        ),
        (
            STUDY.replace("duration_s = 10", "duration_s = 10\nread_share = 101"),
            "read_share: 101 out of range; accepted: 0 to 100",
        ),
    ];
    for (text, want) in cases {
        let e = parse(&text).unwrap_err();
        assert!(e.contains(want), "{e}\n  wanted: {want}");
    }
}

#[test]
fn a_runner_refuses_a_hypervisor_it_does_not_run() {
    let s = parse(STUDY).unwrap();
    let e = s
        .check_hypervisor(&[Hypervisor::Kvm])
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "hypervisor: \"xen-pv\" is not run by this runner; accepted: kvm"
    );
    assert!(s.check_hypervisor(&Hypervisor::ALL).is_ok());
    // The default stays out of cells' names and records.
    let kvm = parse(&STUDY.replace("hypervisor = \"xen-pv\"\n", "")).unwrap();
    assert!(!stat_file_name(&kvm.cells()[0]).contains("kvm"));
}

#[test]
fn a_profile_cell_gives_three_rows_and_csv_columns_of_its_own() {
    let s = parse(STUDY).unwrap();
    let cell = s.cells().remove(2); // ffsb-seqwrite, 1 thread, native
    let mut run = RunResult {
        values: vec![40.0, 44.0],
        ..RunResult::default()
    };
    run.counters.insert(IO_LATENCY_P50_MS.into(), 3.5);
    run.counters.insert(IO_LATENCY_P99_MS.into(), 20.0);
    let rows = latency::cell_results(&cell, "sim", vec![run]);
    let metrics: Vec<Metric> = rows.iter().map(|r| r.metric).collect();
    assert_eq!(
        metrics,
        [
            Metric::ThroughputMbS,
            Metric::IoLatencyP50Ms,
            Metric::IoLatencyP99Ms
        ]
    );
    assert_eq!(rows[2].runs[0].values, vec![20.0]);
    let csv = results_csv(&rows);
    let header = csv.lines().next().unwrap();
    assert!(
        header.ends_with(",profile,threads,block_kib,read_share,hypervisor"),
        "{header}"
    );
    assert!(csv.contains("io_latency_p99_ms_stat.txt"), "{csv}");
    assert!(csv
        .lines()
        .nth(1)
        .unwrap()
        .ends_with(",ffsb-seqwrite,1,4,50,xen-pv"));
    let parsed = parse_results_csv(&csv).unwrap();
    assert_eq!(parsed[1].metric, Metric::IoLatencyP50Ms);
}
