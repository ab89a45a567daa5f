//! The same seed gives byte-identical results; another seed does not.

use experiment::{results_csv, Benchmark, Cell};
use sim::bench::{run_cell, SimOptions};

fn cells(seed: u64) -> Vec<Cell> {
    ["bfq", "cfq", "deadline"]
        .iter()
        .flat_map(|s| {
            [Benchmark::Startup, Benchmark::Throughput].map(|b| Cell {
                scenario: "det".into(),
                device: "hdd-1.8in".parse().unwrap(),
                host_sched: s.parse().unwrap(),
                host_workload: "2r2w-rand".parse().unwrap(),
                guest_sched: None,
                guest_workload: None,
                other_vms: "none".parse().unwrap(),
                coordination: "off".parse().unwrap(),
                cpu: Default::default(),
                profile: None,
                hypervisor: Default::default(),
                benchmark: b,
                app: "xterm".into(),
                iterations: 2,
                repetitions: 2,
                timeout_s: 60.0,
                duration_s: 10.0,
                sample_s: 2.0,
                seed,
            })
        })
        .collect()
}

fn csv(seed: u64) -> String {
    let results: Vec<_> = cells(seed)
        .iter()
        .map(|c| run_cell(c, &SimOptions::default(), || {}).unwrap())
        .collect();
    results_csv(&results)
}

#[test]
fn same_seed_same_results_csv() {
    let a = csv(5);
    let b = csv(5);
    assert_eq!(a, b);
    let c = csv(6);
    assert_ne!(
        a, c,
        "a different seed should change random readers' offsets"
    );
}
