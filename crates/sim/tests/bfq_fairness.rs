//! BFQ divides the device in proportion to weights, whatever the budgets.

use sim::machine::{secs, Machine, MachineConfig, HOST, WORKLOAD_FILE_BYTES};
use sim::request::{IoPrio, IoPrioClass};

/// Three sequential readers with weights 1:2:4 for 60 s after a 10 s
/// warm-up; returns each reader's share of the bytes read after warm-up.
fn shares(device: &str, by_cgroup: bool) -> [f64; 3] {
    let cfg = MachineConfig {
        device: device.into(),
        sched: "bfq".into(),
        ..MachineConfig::default()
    };
    let mut m = Machine::new(&cfg, 42).unwrap();
    let files: Vec<_> = (0..3)
        .map(|i| m.add_file(HOST, &format!("/S/file{i}"), WORKLOAD_FILE_BYTES * 8))
        .collect();
    let mut pids = Vec::new();
    for (i, &f) in files.iter().enumerate() {
        let pid = if by_cgroup {
            // blkio.bfq.weight 100, 200, 400: one group per reader.
            let cg = m.create_cgroup(HOST, 100 << i);
            m.start_seq_reader(HOST, f, IoPrio::DEFAULT, cg)
        } else {
            // ioprio levels 7, 6, 4 give BFQ weights 10, 20, 40.
            let level = [7, 6, 4][i];
            m.start_seq_reader(HOST, f, IoPrio::new(IoPrioClass::Be, level), 0)
        };
        pids.push(pid);
    }
    m.run_until(secs(10.0), |_| false);
    let before: Vec<u64> = pids.iter().map(|&p| m.bytes_done_by(p)).collect();
    m.run_until(secs(70.0), |_| false);
    let got: Vec<f64> = pids
        .iter()
        .zip(&before)
        .map(|(&p, &b)| (m.bytes_done_by(p) - b) as f64)
        .collect();
    let total: f64 = got.iter().sum();
    assert!(total > 0.0);
    eprintln!(
        "{device} cg={by_cgroup} total {:.1} MB/s shares {:?}",
        total / 60e6,
        got.iter().map(|g| g / total).collect::<Vec<_>>()
    );
    [got[0] / total, got[1] / total, got[2] / total]
}

fn assert_shares(s: [f64; 3], what: &str) {
    let want = [1.0 / 7.0, 2.0 / 7.0, 4.0 / 7.0];
    for i in 0..3 {
        let rel = (s[i] - want[i]).abs() / want[i];
        assert!(
            rel <= 0.05,
            "{what}: reader {i} got {:.4} of the bytes, want {:.4} (off by {:.1}%); all: {s:?}",
            s[i],
            want[i],
            rel * 100.0
        );
    }
}

#[test]
fn weights_1_2_4_by_cgroup_on_hdd() {
    assert_shares(shares("hdd-1.8in", true), "hdd-1.8in, cgroup weights");
}

#[test]
fn weights_1_2_4_by_cgroup_on_emmc() {
    assert_shares(shares("emmc", true), "emmc, cgroup weights");
}

#[test]
fn weights_1_2_4_by_ioprio_on_hdd() {
    assert_shares(shares("hdd-1.8in", false), "hdd-1.8in, ioprio weights");
}

#[test]
fn weights_1_2_4_by_ioprio_on_emmc() {
    assert_shares(shares("emmc", false), "emmc, ioprio weights");
}
