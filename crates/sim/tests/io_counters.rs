//! The read and write throughput counters of a run, which fill the throughput sections
//! of the S-style stat files.

use experiment::s_suite::{READ_MB_S, WRITE_MB_S};
use experiment::Scenario;
use sim::bench::{accepted, run_startup, run_throughput, SimOptions};

fn cell(benchmark: &str, host_workload: &str) -> experiment::Cell {
    let text = format!(
        "benchmark = \"{benchmark}\"\napp = \"xterm-2014\"\niterations = 2\nrepetitions = 1\n\
         duration_s = 10\nsample_s = 2\n[matrix]\ndevice = [\"hdd-1.8in\"]\n\
         host_sched = [\"bfq\"]\nhost_workload = [\"{host_workload}\"]\n"
    );
    Scenario::from_toml_str(&text, &accepted())
        .unwrap()
        .cells()
        .remove(0)
}

#[test]
fn startup_runs_count_the_disk_reads_and_writes_beside_the_app() {
    let readers = run_startup(&cell("startup", "5r-seq"), &SimOptions::default(), 0).unwrap();
    let (r, w) = (readers.counters[READ_MB_S], readers.counters[WRITE_MB_S]);
    // five sequential readers on a 10 MB/s disk: several MB/s read, nothing written
    assert!(r > 1.0 && r < 12.0, "read {r} MB/s");
    assert_eq!(w, 0.0);
    let writers = run_startup(&cell("startup", "2w-seq"), &SimOptions::default(), 0).unwrap();
    assert!(writers.counters[WRITE_MB_S] > 0.5, "{:?}", writers.counters);
}

#[test]
fn throughput_runs_split_the_aggregate_into_reads_and_writes() {
    let run = run_throughput(&cell("throughput", "2r2w-seq"), &SimOptions::default(), 0).unwrap();
    let (r, w) = (run.counters[READ_MB_S], run.counters[WRITE_MB_S]);
    assert!(r > 0.0 && w > 0.0, "{r} {w}");
    // over the same span as the samples: their mean is the sum of the two
    let mean = run.values.iter().sum::<f64>() / run.values.len() as f64;
    assert!(
        ((r + w) - mean).abs() < 1e-9 * mean.max(1.0),
        "{r} + {w} vs {mean}"
    );
}
