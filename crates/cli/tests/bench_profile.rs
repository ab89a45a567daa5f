//! `tandem bench run` with `benchmark = "profile"`: an FFSB-style profile in
//! a real QEMU guest (TCG here), through the shared procedure, and the real
//! runner's refusal of Xen's paravirtual path. The guest test needs root,
//! /dev/fuse, loop devices, qemu-system-x86 and apt's access to Debian's
//! packages (the run builds its guest image); ignored by default, run by CI
//! as root with `--include-ignored`.

use std::process::{Command, Stdio};

mod common;
use common::{leftovers, tandem, Scratch};

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
    let dir = Scratch::new("bench-profile");
    let scenario = dir.0.join("s.toml");
    std::fs::write(&scenario, GUEST).unwrap();
    let out = dir.0.join("out");
    let child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["bench", "run"])
        .arg(&scenario)
        .arg("--out")
        .arg(&out)
        .args(["--file-mib", "16", "--quiet"])
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
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
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

/// `hypervisor = "xen-pv"` is the simulator's: the real runner refuses it
/// before it touches anything (no root needed to be told).
#[test]
fn the_real_runner_refuses_xen_pv() {
    let dir = Scratch::new("bench-xen");
    let scenario = dir.0.join("s.toml");
    std::fs::write(
        &scenario,
        GUEST.replace("seed = 1\n", "seed = 1\nhypervisor = \"xen-pv\"\n"),
    )
    .unwrap();
    let out = dir.0.join("out");
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
