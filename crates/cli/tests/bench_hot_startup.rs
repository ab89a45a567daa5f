//! `tandem bench run` with `benchmark = "startup"` and `caches = "hot"`
//! (the coordinated task scheduling study's start-up test): one warm-up
//! start, then starts under the cell's busy loops, through the shared
//! procedure, natively and in a TCG guest. The runs need root (an emulated
//! device for the app's files, as for every real run) and, in a guest,
//! QEMU; ignored by default, run as root with `--include-ignored`.

use std::sync::atomic::{AtomicBool, Ordering};

mod common;
use common::{tandem, Scratch};

/// A hot start-up scenario: `starts` starts of xterm's replay, the matrix
/// lines given.
fn scenario(starts: u32, matrix: &str) -> String {
    format!(
        "name = \"ci-hot\"\nbenchmark = \"startup\"\ncaches = \"hot\"\napp = \"xterm\"\n\
         vcpus = 1\niterations = {starts}\nrepetitions = 1\ntimeout_s = 60\nseed = 1\n\n\
         [matrix]\ndevice = [\"hdd-1.8in\"]\nguest_workload = [\"none\"]\n\
         host_sched = [\"mq-deadline\"]\nhost_workload = [\"none\"]\n\
         host_cpu_sched = [\"cfs\"]\n{matrix}"
    )
}

/// The busy loops (`tandem-cpuload`) of the runs whose command line names
/// `tag`: a loop is a fork of the run and shows its command line.
fn loops_of(tag: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
            let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            comm.trim() == "tandem-cpuload" && String::from_utf8_lossy(&cmd).contains(tag)
        })
        .collect()
}

/// The most loops of the runs naming `tag` ([`loops_of`]) seen at once,
/// looking every `every_ms` until `stop`.
fn most_loops(tag: &str, stop: &AtomicBool, every_ms: u64) -> usize {
    let mut most = 0;
    while !stop.load(Ordering::SeqCst) {
        most = most.max(loops_of(tag).len());
        std::thread::sleep(std::time::Duration::from_millis(every_ms));
    }
    most
}

/// The first cell's first run in results.json.
fn first_run(out: &std::path::Path) -> serde_json::Value {
    let json = common::results_json(out);
    json["cells"][0]["runs"][0].clone()
}

/// The real runner takes hot start-up scenarios (the simulator's
/// `fanguede-real-startup` among them) past its checks, and still refuses
/// what runs on the simulator's CPU model only.
#[test]
fn hot_start_up_passes_the_real_runners_checks_and_readers_hashers_does_not() {
    let dir = Scratch::new("bench-hot-refuse");
    let out = dir.0.join("out");
    let o = out.to_str().unwrap();
    // The embedded `cfsv` scenario: readers and hashers.
    let r = tandem(&["bench", "run", "cfsv", "--out", o]);
    let e = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{e}");
    assert!(e.contains("readers-hashers runs on the simulator"), "{e}");
    // Past the scenario's checks, the run stops at what comes next: root
    // for a user, the device for root (no such device).
    let r = tandem(&[
        "bench",
        "run",
        "fanguede-real-startup",
        "--out",
        o,
        "--device",
        "/dev/nonexistent-disk",
    ]);
    let e = String::from_utf8_lossy(&r.stderr);
    assert!(!e.contains("hot"), "{e}");
    if !devemu::is_root() {
        assert!(e.contains("root"), "{e}");
        return;
    }
    assert!(e.contains("no such device"), "{e}");
    // Host loops in a native cell: a hot start-up's (above), not a cold
    // one's (they run beside a guest there).
    let cold = dir.0.join("cold.toml");
    std::fs::write(
        &cold,
        "name = \"ci-cold\"\nbenchmark = \"startup\"\napp = \"xterm\"\n\
         platform = \"chromebook-2014\"\niterations = 3\n[matrix]\n\
         device = [\"hdd-1.8in\"]\nhost_sched = [\"mq-deadline\"]\n\
         host_workload = [\"none\"]\nhost_cpu_load = [\"2\"]\n",
    )
    .unwrap();
    let r = tandem(&["bench", "run", cold.to_str().unwrap(), "--out", o]);
    let e = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{e}");
    assert!(e.contains("in hot start-up and latency cells"), "{e}");
}

/// The replay's work rate is a number above 0.
#[test]
fn the_replay_refuses_a_work_rate_that_is_not_above_zero() {
    for bad in ["0", "-3", "NaN", "inf", "fast"] {
        // `=`, so that "-3" is the option's value and not an option.
        let arg = format!("--cpu-work-per-us={bad}");
        let r = tandem(&[
            "bench",
            "replay",
            "--app",
            "xterm",
            "--dir",
            "/nonexistent",
            &arg,
        ]);
        let e = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{bad}: {e}");
        assert!(e.contains("a number above 0"), "{bad}: {e}");
    }
}

/// A native hot cell with two host loops: three per-start times, the
/// loops' rate and the work rate in its counters, the loops there during
/// the run and gone after it.
#[test]
#[ignore = "needs root: an emulated device (FUSE, loop device)"]
fn a_native_hot_start_up_cell_gives_each_start_and_leaves_no_loop() {
    let text = scenario(3, "guest_sched = [\"\"]\nhost_cpu_load = [\"2\"]\n");
    let tag = format!("bench-hot-native-{}", std::process::id());
    let ((_dir, out, csv), seen) = common::watching(
        |stop| most_loops(&tag, stop, 20),
        || common::bench_run(&text, "bench-hot-native", &["--file-mib", "16"]),
    );
    assert_eq!(seen, 2, "the cell's two loops were not seen running");
    assert!(
        loops_of(&tag).is_empty(),
        "loops left: {:?}",
        loops_of(&tag)
    );
    assert!(csv.contains(",startup_s,"), "{csv}");
    let run = first_run(&out);
    let values = run["values"].as_array().unwrap();
    assert_eq!(values.len(), 3, "{run}");
    assert!(values.iter().all(|v| v.as_f64().unwrap() > 0.0), "{run}");
    assert_eq!(run["timeouts"].as_u64().unwrap_or(0), 0, "{run}");
    for k in ["host_loops_iter_s", "app_work_per_us"] {
        assert!(
            run["counters"][k].as_f64().is_some_and(|v| v > 0.0),
            "{k}: {run}"
        );
    }
}

/// A hot cell in a TCG guest with one host loop and one guest loop under
/// `help-cpu` (hostd and guestd): three per-start times, both sides'
/// loops' rates and the help guestd asked for in its counters; the host's
/// loops there during the run and gone after it, with nothing else left.
#[test]
#[ignore = "needs root and qemu: an emulated device, a TCG guest, hostd's SCHED_RR on the vCPU"]
fn a_vm_hot_start_up_cell_gives_each_start_and_leaves_no_loop() {
    assert!(devemu::is_root(), "needs root");
    let image = common::latency_guest_image();
    let text = scenario(
        3,
        "guest_sched = [\"mq-deadline\"]\nhost_cpu_load = [\"1\"]\nguest_cpu_load = [\"1\"]\n\
         coordination = [\"help-cpu\"]\n",
    );
    let tag = format!("bench-hot-vm-{}", std::process::id());
    let ((_dir, out, _), seen) = common::watching(
        |stop| most_loops(&tag, stop, 50),
        || common::bench_run(&text, "bench-hot-vm", &common::tcg_guest(&image)),
    );
    assert_eq!(seen, 1, "the cell's host loop was not seen running");
    assert!(
        loops_of(&tag).is_empty(),
        "loops left: {:?}",
        loops_of(&tag)
    );
    let run = first_run(&out);
    let values = run["values"].as_array().unwrap();
    assert_eq!(values.len(), 3, "{run}");
    assert!(values.iter().all(|v| v.as_f64().unwrap() > 0.0), "{run}");
    for k in [
        "host_loops_iter_s",
        "guest_loops_iter_s",
        "app_work_per_us",
        "vm1_helps",
    ] {
        assert!(
            run["counters"][k].as_f64().is_some_and(|v| v > 0.0),
            "{k}: {run}"
        );
    }
}
