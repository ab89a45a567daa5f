//! The I/O machine on the CPU model (issue 27): start-ups in a guest of the
//! `chromebook-2014` platform carry the app's CPU time and the CPU costs of
//! each request, which wait for a core under load.

use experiment::{Benchmark, Cell};
use sim::bench::{run_startup, SimOptions, APP_CPU_SHARE};

/// xterm-2014 in a BFQ guest over host BFQ on `device`, with `host`
/// workload in the host and nothing in the guest, on `chromebook-2014`.
fn cell(device: &str, host: &str) -> Cell {
    let cpu = experiment::CpuCell {
        platform: "chromebook-2014".into(),
        ..Default::default()
    };
    Cell {
        scenario: "test".into(),
        device: device.parse().unwrap(),
        host_sched: "bfq".parse().unwrap(),
        host_workload: host.parse().unwrap(),
        guest_sched: Some("bfq".parse().unwrap()),
        guest_workload: Some("none".parse().unwrap()),
        other_vms: "none".parse().unwrap(),
        coordination: "off".parse().unwrap(),
        cpu,
        benchmark: Benchmark::Startup,
        app: "xterm-2014".into(),
        iterations: 5,
        repetitions: 2,
        timeout_s: 60.0,
        duration_s: 60.0,
        sample_s: 2.0,
        seed: 5,
        profile: None,
        hypervisor: Default::default(),
    }
}

/// Mean start-up time and mean CPU share of the app over the cell's runs.
fn startup(c: &Cell, opts: &SimOptions) -> (f64, f64) {
    let (mut all, mut share) = (Vec::new(), Vec::new());
    for rep in 0..c.repetitions {
        let r = run_startup(c, opts, rep).unwrap();
        assert_eq!(r.timeouts, 0, "a start timed out");
        all.extend(r.values);
        share.push(r.counters.get(APP_CPU_SHARE).copied().unwrap_or(0.0));
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    (mean(&all), mean(&share))
}

#[test]
fn a_start_up_on_the_cpu_model_is_deterministic() {
    let c = cell("microsd-class6", "1r-seq");
    let opts = SimOptions::default();
    let a = run_startup(&c, &opts, 0).unwrap();
    let b = run_startup(&c, &opts, 0).unwrap();
    assert_eq!(a.values, b.values);
    assert_eq!(a.counters, b.counters);
}

#[test]
fn idle_start_ups_on_flash_carry_their_cpu_time_and_report_its_share() {
    let opts = SimOptions::default();
    let none = SimOptions {
        platform: None,
        ..SimOptions::default()
    };
    for device in ["microsd-class6", "emmc"] {
        let c = cell(device, "none");
        let (t, share) = startup(&c, &opts);
        let mut bare = c.clone();
        bare.cpu = Default::default();
        let (t0, share0) = startup(&bare, &none);
        eprintln!(
            "{device}: idle {t:.3} s, app CPU share {share:.2}; without a CPU model {t0:.3} s"
        );
        assert_eq!(share0, 0.0, "no CPU model, no share reported");
        // On chromebook-2014 (speed 0.17) the eMMC's idle start-up is mostly
        // CPU time (0.62 measured in cloud2014) and the card's a large part
        // of it, not most (0.35: its 6 MB at 16 MB/s and 1.25 ms per random
        // read outweigh the 0.26 s of CPU; docs/calibration.md).
        let floor = if device == "emmc" { 0.5 } else { 0.25 };
        assert!(share >= floor, "{device}: CPU share {share:.2} < {floor}");
        assert!(t > t0 * 1.1, "{device}: {t:.3} s not above {t0:.3} s");
    }
}

#[test]
fn under_five_host_readers_the_emmc_start_up_is_slower_with_cpu_costs() {
    let c = cell("emmc", "5r-seq");
    let with = startup(&c, &SimOptions::default()).0;
    let bursts_only = SimOptions {
        cpu_io_costs: false,
        ..SimOptions::default()
    };
    let without = startup(&c, &bursts_only).0;
    let mut bare = c.clone();
    bare.cpu = Default::default();
    let no_model = startup(&bare, &SimOptions::default()).0;
    eprintln!(
        "emmc, host 5r-seq: {with:.3} s with CPU costs, {without:.3} s with the app's bursts only, \
         {no_model:.3} s without a CPU model"
    );
    // The per-request costs add little once the app's own bursts are long:
    // 0.735 s against 0.727 s at chromebook-2014's speed 0.17 (0.588 s
    // against 0.540 s at the former 0.3). Their size is being re-measured
    // (crates/sim/src/machine/cpu.rs); the bursts' wait for a core is the
    // large part (0.727 s against 0.423 s without a CPU model).
    assert!(with > without, "{with:.3} s vs {without:.3} s");
    assert!(
        without > no_model * 1.3,
        "{without:.3} s vs {no_model:.3} s"
    );
}
