//! `tandem bench run` with `benchmark = "profile"`: an FFSB-style profile in
//! a real QEMU guest (TCG here), through the shared procedure, and the real
//! runner's refusal of Xen's paravirtual path. The guest test needs root,
//! /dev/fuse, loop devices, qemu-system-x86 and apt's access to Debian's
//! packages (the run builds its guest image); ignored by default, run by CI
//! as root with `--include-ignored`. A guest that dies mid-cell fails that
//! cell only.

mod common;
use common::{ppid, processes_with, tandem, BenchRun};

/// One VM cell: 2 threads of random 4 KiB reads, 3 s in 1 s samples.
const GUEST: &str = r#"
name = "ci-profile"
benchmark = "profile"
repetitions = 1
duration_s = 3
sample_s = 1
seed = 1

[matrix]
device = ["hdd-1.8in"]
guest_sched = ["mq-deadline"]
guest_workload = ["none"]
host_sched = ["none"]
host_workload = ["none"]
profile = ["ffsb-randread"]
threads = [2]
"#;

#[test]
#[ignore = "needs root: an emulated device (FUSE, loop device), qemu-system-x86_64 and apt for the guest image"]
fn a_profile_cell_runs_its_threads_in_a_real_guest() {
    let (_dir, out, _) = common::bench_run(GUEST, "bench-profile", &["--file-mib", "16"]);
    let json = common::results_json(&out);
    let cells = json["cells"].as_array().unwrap();
    let metrics: Vec<&str> = cells
        .iter()
        .map(|c| c["metric"].as_str().unwrap())
        .collect();
    assert_eq!(metrics, ["tps", "io_latency_p50_ms", "io_latency_p99_ms"]);
    let run = &cells[0]["runs"][0];
    let tps: Vec<f64> = run["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    // Three 1 s samples, each with reads done: the emulated disk serves
    // random 4 KiB reads in milliseconds, so even a TCG guest does some.
    assert_eq!(tps.len(), 3, "{run}");
    assert!(tps.iter().all(|t| *t > 0.0 && *t < 100_000.0), "{tps:?}");
    // The files were opened with O_DIRECT in the guest (ext4 takes it).
    assert_eq!(run["counters"]["o_direct"].as_f64(), Some(1.0), "{run}");
    let p50 = cells[1]["runs"][0]["values"][0].as_f64().unwrap();
    let p99 = cells[2]["runs"][0]["values"][0].as_f64().unwrap();
    assert!(p50 > 0.0 && p50 <= p99, "p50 {p50} ms, p99 {p99} ms");
}

/// Two VM cells of 256 KiB sequential reads (so that the guest's reads soon
/// outgrow its boot's), 30 s each.
const TWO_CELLS: &str = r#"
name = "ci-profile-death"
benchmark = "profile"
repetitions = 1
duration_s = 30
sample_s = 1
block_kib = 256
seed = 1

[matrix]
device = ["hdd-1.8in"]
guest_sched = ["mq-deadline", "none"]
guest_workload = ["none"]
host_sched = ["none"]
host_workload = ["none"]
profile = ["ffsb-seqread"]
threads = [2]
"#;

/// What process `pid` has read from block devices (`/proc/PID/io`).
fn read_bytes(pid: u32) -> Option<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("read_bytes: "))?
        .trim()
        .parse()
        .ok()
}

/// The guest of the first cell dies mid-profile (its QEMU killed, as when
/// the guest powers off or crashes): that cell fails with QEMU's account in
/// `failed_cells`, its logs are kept, and the run goes on to the second.
#[test]
#[ignore = "needs root: an emulated device (FUSE, loop device), qemu-system-x86_64 and apt for the guest image"]
fn a_guest_that_dies_mid_cell_fails_that_cell_and_the_run_goes_on() {
    let (_dir, scenario, out) = common::scenario_dir(TWO_CELLS, "bench-profile-death");
    let mut run = BenchRun::start(&scenario, &out, &["--file-mib", "32"]);
    let pid = run.pid();
    // The first cell's QEMU, once the guest has read 8 MiB through it: its
    // boot reads a few hundred KiB, so the profile is running.
    // (The KVM probe's QEMU, also the run's child, has no cell directory.)
    let t0 = std::time::Instant::now();
    let cell_qemu = |cell: &str| -> Option<u32> {
        processes_with(&["qemu-system-x86_64", &format!("/{cell}/console.log")])
            .into_iter()
            .find(|p| ppid(*p) == Some(pid))
    };
    let qemu = loop {
        if let Some(q) = cell_qemu("vm-cell1") {
            if read_bytes(q).unwrap_or(0) > 8 << 20 {
                break q;
            }
        }
        if cell_qemu("vm-cell2").is_some() {
            let _ = common::send_signal(pid, nix::sys::signal::Signal::SIGINT);
            panic!("the first cell ended before its guest read 8 MiB");
        }
        run.assert_running("its first guest read 8 MiB");
        if t0.elapsed() > std::time::Duration::from_secs(900) {
            let _ = common::send_signal(pid, nix::sys::signal::Signal::SIGINT);
            panic!("no guest reading after 900 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    common::send_signal(qemu, nix::sys::signal::Signal::SIGKILL).unwrap();
    run.succeed();
    let json = common::results_json(&out);
    let (cell, why) = common::one_failed_cell(&json);
    assert!(cell.contains("guest_sched=mq-deadline"), "{cell}");
    assert!(
        why.contains("QEMU exited") && why.contains("signal: 9"),
        "{why}"
    );
    // The second cell ran: its throughput samples are there.
    let cells = json["cells"].as_array().unwrap();
    let second = cells
        .iter()
        .find(|c| c["cell"]["guest_sched"] == "none" && c["metric"] == "throughput_mb_s")
        .unwrap_or_else(|| panic!("no row of the second cell: {json}"));
    let mb: Vec<f64> = second["runs"][0]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert!(!mb.is_empty() && mb.iter().all(|v| *v > 0.0), "{mb:?}");
    // The dead guest's logs are kept.
    let logs: Vec<_> = std::fs::read_dir(out.join("vm-logs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        logs.iter().any(|l| l.contains("guest_sched_mq-deadline")
            && out.join("vm-logs").join(l).join("console.log").exists()),
        "{logs:?}"
    );
}

/// `hypervisor = "xen-pv"` is the simulator's: the real runner refuses it
/// before it touches anything (no root needed to be told).
#[test]
fn the_real_runner_refuses_xen_pv() {
    let xen = GUEST.replace("seed = 1\n", "seed = 1\nhypervisor = \"xen-pv\"\n");
    let (_dir, scenario, out) = common::scenario_dir(&xen, "bench-xen");
    let r = tandem(&[
        "bench",
        "run",
        scenario.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.status.code(), Some(2));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("xen-pv") && err.contains("kvm"), "{err}");
    assert!(err.contains("tandem sim run"), "{err}");
    assert!(!out.exists(), "nothing written");
}
