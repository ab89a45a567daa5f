//! `tandem bench run` with `benchmark = "latency"`: cyclictest with busy
//! loops around it, through the shared procedure, natively (and in a guest
//! when the VM test runs). Needs root (the runner brings up an emulated
//! device for the cell, as for every real run) and Debian's `rt-tests`
//! (`cyclictest`); ignored by default, run by CI as root with
//! `--include-ignored`.

mod common;
use common::{BenchRun, Scratch};

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

/// `tandem bench run SCENARIO --out OUT --quiet` ([`common::bench_run`]).
fn bench_run(text: &str, name: &str) -> (Scratch, std::path::PathBuf, String) {
    common::bench_run(text, name, &[])
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
    let json = common::results_json(&out);
    let text = json.to_string();
    assert!(text.contains("host_loops_iter_s"), "{text}");
    assert!(text.contains("latency_max_us"));
}

/// A VM latency cell: one guest loop and one host loop, `static-cpu` (the
/// runner's own boost, no daemons), a small cyclictest in a TCG guest.
const VM: &str = r#"
name = "ci-latency-vm"
benchmark = "latency"
vcpus = 1
loops = 300
repetitions = 1
seed = 1

[matrix]
device = ["hdd-1.8in"]
guest_sched = ["mq-deadline"]
guest_workload = ["none"]
host_sched = ["mq-deadline"]
host_workload = ["none"]
host_cpu_sched = ["cfs"]
host_cpu_load = ["1"]
guest_cpu_load = ["1"]
coordination = ["static-cpu"]
"#;

/// What a watcher saw of one QEMU thread's scheduling.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    rr: bool,
    last_policy: i32,
}

/// Watches the QEMU of run `run` (its command line names the run's
/// directory) every 10 ms until `stop`: each thread's policy, by thread id;
/// returns them with QEMU's pid.
fn watch_qemu(
    run: u32,
    stop: &std::sync::atomic::AtomicBool,
) -> (Option<u32>, std::collections::BTreeMap<u32, Seen>) {
    let mut seen = std::collections::BTreeMap::<u32, Seen>::new();
    let mut qemu = None;
    let tag = format!("/run/tandem/bench/{run}-");
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        if qemu.is_none() {
            qemu = common::processes_with(&["qemu-system", &tag])
                .first()
                .copied();
        }
        for tid in qemu
            .and_then(|q| agent::sys::threads(q).ok())
            .unwrap_or_default()
        {
            if let Ok(s) = agent::sys::sched_get(tid) {
                let e = seen.entry(tid).or_default();
                e.rr |= s.policy == libc::SCHED_RR && s.priority == 8;
                e.last_policy = s.policy;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    (qemu, seen)
}

/// The latency benchmark in a TCG guest through the runner: results as
/// the simulator writes them (average and maximum rows, the histogram file
/// with every sample), the loops' rates and the QEMU threads' scheduling
/// counters in results.json; `static-cpu` put QEMU's vCPU thread and,
/// since TCG's main loop fires the guest's timers, its main-loop thread
/// (and no other) at SCHED_RR 8, and both were back to SCHED_OTHER before
/// QEMU exited; nothing is left behind.
#[test]
#[ignore = "needs root and qemu: an emulated device, a TCG guest with cyclictest, SCHED_RR on QEMU's threads"]
fn a_vm_latency_cell_measures_cyclictest_in_the_guest_and_restores_the_boost() {
    assert!(devemu::is_root(), "needs root");
    let image = common::latency_guest_image();
    let (_dir, scenario, out) = common::scenario_dir(VM, "bench-latency-vm");
    let run = BenchRun::start(&scenario, &out, &common::tcg_guest(&image));
    let pid = run.pid();
    let ((), (qemu, seen)) = common::watching(|stop| watch_qemu(pid, stop), || run.succeed());
    // The boost: the vCPU and the main loop, no other thread; each back.
    let qemu = qemu.expect("the run's QEMU was seen");
    let boosted: Vec<u32> = seen.iter().filter(|(_, s)| s.rr).map(|(t, _)| *t).collect();
    assert_eq!(boosted.len(), 2, "{seen:?}");
    assert!(
        boosted.contains(&qemu),
        "the main loop was not boosted: {seen:?}"
    );
    for (tid, s) in &seen {
        assert_eq!(
            s.last_policy,
            libc::SCHED_OTHER,
            "thread {tid} left at {s:?}"
        );
    }
    // The rows, the histogram with every sample, the counters.
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert!(
        csv.contains(",latency_avg_us,") && csv.contains(",latency_max_us,"),
        "{csv}"
    );
    let hist = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.to_string_lossy()
                .ends_with("-coord-static-cpu-cyclictest-hist.txt")
        })
        .expect("the cell's histogram file");
    let h = cpusched::cyclictest_output::parse_histogram(&std::fs::read_to_string(hist).unwrap())
        .unwrap();
    assert_eq!(h.count, 300);
    let json = common::results_json(&out);
    let run = &json["cells"][0]["runs"][0];
    assert!(run["values"][0].as_f64().is_some_and(|v| v > 0.0), "{run}");
    for k in [
        "latency_max_us",
        "host_loops_iter_s",
        "guest_loops_iter_s",
        "qemu_main_wait_ms",
        "qemu_vcpu_run_ms",
    ] {
        assert!(
            run["counters"][k].as_f64().is_some_and(|v| v >= 0.0),
            "{k}: {run}"
        );
    }
    // The average and maximum charts of the real run, as the simulator's.
    let files: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    for prefix in ["latency-max-", "latency-"] {
        assert!(
            files
                .iter()
                .any(|f| f.starts_with(prefix) && f.ends_with("-static-cpu.svg")),
            "{prefix}: {files:?}"
        );
    }
}
