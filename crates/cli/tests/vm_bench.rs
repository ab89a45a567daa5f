//! `tandem bench run` in VM mode, from nothing: the run builds the guest
//! image from Debian packages, brings up an emulated 1.8-inch disk, puts the
//! guest's disk image on it, boots the guest under QEMU (KVM if it really
//! runs a guest, TCG otherwise), runs one reader in the guest, makes two
//! starts of the app with tandem hostd and guestd coordinating, and leaves
//! nothing behind: no QEMU, no hostd, no loop device, no FUSE mount (of its
//! own: other runs may be up at the same time).
//!
//! Needs root, /dev/fuse, loop devices, qemu-system-x86 and apt's access to
//! Debian's packages (`.ci/run` installs what is missing).

use std::sync::Mutex;
use std::time::{Duration, Instant};

mod common;
use common::{leftovers, ppid, processes_with, BenchRun};

static SERIAL: Mutex<()> = Mutex::new(());

const SCENARIO: &str = r#"
name = "ci-vm"
benchmark = "startup"
app = "xterm"
iterations = 2
repetitions = 1
timeout_s = 60
seed = 1

[matrix]
device = ["hdd-1.8in"]
guest_sched = ["bfq"]
guest_workload = ["1r-seq"]
host_sched = ["bfq"]
host_workload = ["none"]
coordination = ["help-rt"]
"#;

#[test]
#[ignore = "needs root and qemu-system-x86_64 (a real guest); CI runs it"]
fn a_vm_cell_runs_in_a_real_guest_and_leaves_nothing_behind() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        devemu::is_root(),
        "VM mode needs root (CI runs as root): run the tests with sudo"
    );
    let args = ["--file-mib", "32", "--settle-s", "3", "--pause-s", "1"];
    let (_dir, out, _) = common::bench_run(SCENARIO, "vm-bench", &args);

    // The result files, with two starts measured in the guest.
    for f in ["results.json", "results.csv", "table.txt"] {
        assert!(out.join(f).exists(), "{f} missing");
    }
    let r = common::results_json(&out);
    let meta = &r["meta"];
    assert_eq!(meta["runner"], "real");
    let accel = meta["extra"]["vm"]["accel"].as_str().unwrap_or("");
    assert!(accel == "kvm" || accel == "tcg", "accel {accel:?}");
    assert_eq!(meta["extra"]["vm"]["blkio_group"], "own");
    assert!(meta["extra"]["vm"]["guest_kernel"]
        .as_str()
        .is_some_and(|k| k.ends_with("-amd64")));
    let cells = r["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 1);
    let run0 = &cells[0]["runs"][0];
    let values: Vec<f64> = run0["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(values.len(), 2, "two starts: {run0}");
    assert_eq!(run0["timeouts"], 0);
    // The xterm trace reads about 10 MB from a 10 MB/s disk: a start takes
    // at least half a second whatever the guest's CPU.
    assert!(values.iter().all(|v| *v > 0.5 && *v < 60.0), "{values:?}");
    // guestd saw the app's exec and asked; hostd boosted the VM.
    let helps = run0["counters"]["vm1_helps"].as_f64().unwrap_or(0.0);
    let boosted = run0["counters"]["vm1_boosted_s"].as_f64().unwrap_or(0.0);
    assert!(
        helps >= 2.0,
        "helps {helps} (counters {})",
        run0["counters"]
    );
    assert!(boosted > 0.0, "boosted {boosted}");
    // A short cell stays within its budget; the counter is there to show it.
    assert_eq!(
        run0["counters"]["vm1_budget_denials"].as_f64(),
        Some(0.0),
        "counters {}",
        run0["counters"]
    );
    // With a cgroup v1 blkio hierarchy (this host has one), hostd moves the
    // boosted VM's I/O threads out of the VM's own group.
    let logs = out.join("vm-logs");
    let hostd_log = std::fs::read_dir(&logs)
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.unwrap().path().join("hostd.log")).ok())
        .collect::<String>();
    assert!(
        hostd_log.contains("actuators: ioprio, blkio-cgroup-move, bfq-idling"),
        "{hostd_log}"
    );
    // Nothing left behind: checked by bench_run.
}

/// Nothing of the run with this pid is left: no QEMU, hostd, worker or
/// devemu daemon, FUSE mount, loop device, file or directory of its own (all
/// name its run directory or devemu instance), and no blkio group of its own
/// (`common::leftovers`, which [`BenchRun::succeed`] checks too). Other runs'
/// resources are not looked at: other tests or users may have theirs up at
/// the same time.
fn nothing_left(pid: u32) {
    let left = leftovers(pid, None);
    assert!(left.is_empty(), "left behind: {left:#?}");
}

#[test]
#[ignore = "needs root and qemu-system-x86_64 (a real guest); CI runs it"]
fn ctrl_c_in_a_vm_cell_stops_qemu_and_hostd_and_leaves_nothing() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "VM mode needs root (CI runs as root)");
    let (_dir, scenario, out) = common::scenario_dir(SCENARIO, "vm-bench-kill");
    let mut run = BenchRun::start(&scenario, &out, &["--file-mib", "32", "--settle-s", "30"]);
    let pid = run.pid();
    // Wait until the run's guest and hostd are both up, then Ctrl-C.
    let t0 = Instant::now();
    loop {
        let mine = |words: &[&str]| {
            processes_with(words)
                .into_iter()
                .any(|p| ppid(p) == Some(pid))
        };
        if mine(&["qemu-system"]) && mine(&["hostd", "run"]) {
            break;
        }
        run.assert_running("its guest was up");
        assert!(
            t0.elapsed() < Duration::from_secs(600),
            "no guest and hostd after 600 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(3));
    common::send_signal(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let (st, e) = run.end_within(90.0, "the run to stop after Ctrl-C");
    assert!(!st.success());
    assert!(e.contains("interrupted"), "{e}");
    nothing_left(pid);
}

/// The backend's counters file of the run's first cell, once it exists.
fn backend_stats(pid: u32) -> Option<serde_json::Value> {
    let runs = common::named("/run/tandem/bench", &format!("{pid}-"));
    let text = std::fs::read_to_string(runs.first()?.join("vm-cell1/vhost-blk.json")).ok()?;
    serde_json::from_str(&text).ok()
}

#[test]
#[ignore = "needs root and qemu-system-x86_64: a VM cell on tandem vhost-blk, whose backend is killed"]
fn a_vhost_backend_killed_mid_cell_fails_that_cell_with_the_reason_and_the_run_goes_on() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "VM mode needs root (CI runs as root)");
    // SCENARIO's cell on `tandem vhost-blk`, whose backend is killed, then
    // an `off` cell; bash's start is the shortest.
    let vhost = SCENARIO
        .replace(r#"["help-rt"]"#, r#"["vhost-ioprio", "off"]"#)
        .replace(r#"app = "xterm""#, r#"app = "bash""#);
    assert!(vhost.contains(r#"["vhost-ioprio", "off"]"#) && vhost.contains(r#""bash""#));
    let (_dir, scenario, out) = common::scenario_dir(&vhost, "vm-bench-vhost");
    let args = [
        "--file-mib",
        "32",
        "--settle-s",
        "20",
        "--pause-s",
        "1",
        "--vm-mem-mib",
        "512",
    ];
    let mut run = BenchRun::start(&scenario, &out, &args);
    let pid = run.pid();
    // The guest's reader is running once the backend has read more than
    // the boot does (a few hundred KiB): kill the backend then, in the
    // repetition's settle time.
    let t0 = Instant::now();
    let backend = loop {
        let read = backend_stats(pid).map_or(0, |s| s["bytes_read"].as_u64().unwrap_or(0));
        let mine: Vec<u32> = processes_with(&["vhost-blk", "--socket"])
            .into_iter()
            .filter(|p| ppid(*p) == Some(pid))
            .collect();
        if read > 4 << 20 && !mine.is_empty() {
            break mine[0];
        }
        run.assert_running("its guest read through the backend");
        assert!(
            t0.elapsed() < Duration::from_secs(600),
            "no guest reading through the backend after 600 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    common::send_signal(backend, nix::sys::signal::Signal::SIGKILL).unwrap();
    let (st, e) = run.end_within(300.0, "the run to end after its backend's death");
    assert!(st.success(), "the run failed: {e}");
    let r = common::results_json(&out);
    // The failed cell, marked with the reason.
    let (cell, why) = common::one_failed_cell(&r);
    assert!(cell.contains("coordination=vhost-ioprio"), "{cell}");
    assert!(
        why.contains("vhost-user-blk backend") && why.contains("signal: 9"),
        "{why}"
    );
    // It kept no repetition; the next cell ran in full.
    let cells = r["cells"].as_array().unwrap();
    let of = |mode: &str| {
        cells
            .iter()
            .find(|c| c["cell"]["coordination"] == mode)
            .unwrap_or_else(|| panic!("no {mode} cell in {cells:?}"))
    };
    assert_eq!(of("vhost-ioprio")["runs"].as_array().unwrap().len(), 0);
    let off = &of("off")["runs"][0]["values"];
    assert_eq!(off.as_array().unwrap().len(), 2, "{off}");
    nothing_left(pid);
}

/// A `help-all` VM cell (a short cyclictest beside one host loop and one
/// guest loop): hostd runs with both boosts and `--help-all`, guestd with
/// its CPU detection; the guest's HELPs start both boosts, every boost hostd
/// began it also ended (its log, kept in OUT/vm-logs), and nothing of the run
/// is left. `TANDEM_TEST_VM_IMAGE` names a `tandem vm image` directory to
/// boot instead of building one. (`cfsv_qemu.rs` checks each thread's
/// policy and ioprio on a real QEMU around hostd `--help-all`.)
#[test]
#[ignore = "needs root, qemu-system-x86_64 and Debian's packages: a help-all cell in a real guest"]
fn a_help_all_cell_boosts_io_and_vcpus_and_ends_every_boost() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert!(devemu::is_root(), "VM mode needs root");
    let (_dir, scenario, out) = common::scenario_dir(
        r#"
name = "ci-help-all"
benchmark = "latency"
loops = 300
repetitions = 1
seed = 1

[matrix]
device = ["hdd-1.8in"]
guest_sched = ["mq-deadline"]
guest_workload = ["none"]
host_sched = ["mq-deadline"]
host_workload = ["none"]
host_cpu_load = ["1"]
guest_cpu_load = ["1"]
coordination = ["help-all"]
"#,
        "vm-bench-help-all",
    );
    let image = std::env::var("TANDEM_TEST_VM_IMAGE").ok();
    let mut args = vec!["--file-mib", "32", "--settle-s", "1"];
    if let Some(img) = &image {
        args.extend(["--vm-image", img]);
    }
    BenchRun::start(&scenario, &out, &args).succeed();
    let hostd_log = std::fs::read_dir(out.join("vm-logs"))
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.unwrap().path().join("hostd.log")).ok())
        .collect::<String>();
    assert!(
        hostd_log.contains("help_all: every HELP boosts I/O and vCPUs"),
        "{hostd_log}"
    );
    let n = |pat: &str| hostd_log.matches(pat).count();
    assert!(
        n(": CPU boost (") >= 1 && n(": boost (") >= 1,
        "{hostd_log}"
    );
    assert_eq!(n(": CPU boost ("), n(": CPU unboost ("), "{hostd_log}");
    assert_eq!(n(": boost ("), n(": unboost"), "{hostd_log}");
    // Nothing left behind: checked by `succeed`.
}
