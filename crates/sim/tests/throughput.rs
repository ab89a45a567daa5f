//! Throughput properties of the machine model and the elevators.

use experiment::{Benchmark, Cell};
use sim::bench::{run_throughput, SimOptions};
use sim::machine::{secs, Machine, MachineConfig, HOST};
use sim::request::IoPrio;

/// Aggregate read throughput (bytes/s) of one sequential reader over 60 s
/// after a 10 s warm-up, on a file large enough not to wrap around.
fn one_reader_rate(device: &str, sched: &str) -> f64 {
    let cfg = MachineConfig {
        device: device.into(),
        sched: sched.into(),
        ..MachineConfig::default()
    };
    let mut m = Machine::new(&cfg, 7).unwrap();
    let f = m.add_file(HOST, "/S/file0", 200 << 30);
    m.start_seq_reader(HOST, f, IoPrio::DEFAULT, 0);
    m.run_until(secs(10.0), |_| false);
    let (r0, _) = m.sectors_done(HOST);
    m.run_until(secs(70.0), |_| false);
    let (r1, _) = m.sectors_done(HOST);
    (r1 - r0) as f64 * 512.0 / 60.0
}

#[test]
fn one_sequential_reader_reaches_each_presets_peak() {
    for &dev in devmodel::PRESETS {
        let peak = devmodel::preset(dev).unwrap().info().peak_read_bytes_per_s;
        for sched in ["noop", "bfq"] {
            let got = one_reader_rate(dev, sched);
            let rel = (got - peak).abs() / peak;
            eprintln!(
                "{dev} {sched}: {:.2} MB/s, peak {:.2} MB/s",
                got / 1e6,
                peak / 1e6
            );
            assert!(
                rel <= 0.05,
                "{dev} under {sched}: one sequential reader gets {:.2} MB/s, preset peak {:.2} MB/s",
                got / 1e6,
                peak / 1e6
            );
        }
    }
}

/// The S suite's throughput benchmark on a native cell: mean MB/s over
/// three runs of 60 s.
fn s_throughput(sched: &str, workload: &str) -> f64 {
    let cell = Cell {
        scenario: "test".into(),
        device: "hdd-1.8in".parse().unwrap(),
        host_sched: sched.parse().unwrap(),
        host_workload: workload.parse().unwrap(),
        guest_sched: None,
        guest_workload: None,
        other_vms: "none".parse().unwrap(),
        coordination: "off".parse().unwrap(),
        cpu: Default::default(),
        profile: None,
        hypervisor: Default::default(),
        benchmark: Benchmark::Throughput,
        app: "xterm".into(),
        iterations: 1,
        repetitions: 3,
        timeout_s: 60.0,
        duration_s: 60.0,
        sample_s: 2.0,
        seed: 3,
    };
    let mut sum = 0.0;
    for rep in 0..cell.repetitions {
        let r = run_throughput(&cell, &SimOptions::default(), rep).unwrap();
        sum += r.values.iter().sum::<f64>() / r.values.len() as f64;
    }
    sum / cell.repetitions as f64
}

#[test]
fn bfq_aggregate_throughput_is_at_least_cfqs_with_five_readers_on_hdd() {
    let bfq = s_throughput("bfq", "5r-seq");
    let cfq = s_throughput("cfq", "5r-seq");
    let noop = s_throughput("noop", "5r-seq");
    eprintln!("5r-seq on hdd-1.8in: bfq {bfq:.2} MB/s, cfq {cfq:.2} MB/s, noop {noop:.2} MB/s");
    assert!(bfq >= cfq, "bfq {bfq:.3} MB/s < cfq {cfq:.3} MB/s");
    // Idling keeps each reader's stream sequential; without it (noop) the
    // head moves between five files all the time.
    assert!(bfq > 1.2 * noop, "bfq {bfq:.2} vs noop {noop:.2}");
}
