//! Application start-up under background load: BFQ's low-latency
//! heuristics against the schedulers that have none.

use experiment::{Benchmark, Cell};
use sim::bench::{run_startup, SimOptions};

fn cell(sched: &str, workload: &str) -> Cell {
    Cell {
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
        benchmark: Benchmark::Startup,
        // The shipped native scenario's app: the recorded xterm calibrated
        // against the CLOUD 2014 idle start-up.
        app: "xterm-2014".into(),
        iterations: 5,
        repetitions: 2,
        timeout_s: 60.0,
        duration_s: 60.0,
        sample_s: 2.0,
        seed: 11,
    }
}

/// Mean start-up time over two runs of five starts.
fn startup(sched: &str, workload: &str) -> f64 {
    startup_with(sched, workload, &SimOptions::default())
}

fn startup_with(sched: &str, workload: &str, opts: &SimOptions) -> f64 {
    let c = cell(sched, workload);
    let mut all = Vec::new();
    for rep in 0..c.repetitions {
        let r = run_startup(&c, opts, rep).unwrap();
        assert_eq!(r.timeouts, 0, "{sched} {workload}: a start timed out");
        all.extend(r.values);
    }
    all.iter().sum::<f64>() / all.len() as f64
}

#[test]
fn bfq_starts_xterm_near_idle_time_under_five_readers_and_noop_deadline_do_not() {
    for sched in ["bfq", "noop", "deadline"] {
        let idle = startup(sched, "none");
        let loaded = startup(sched, "5r-seq");
        let ratio = loaded / idle;
        eprintln!("{sched}: idle {idle:.2} s, 5r-seq {loaded:.2} s, ratio {ratio:.2}");
        if sched == "bfq" {
            assert!(
                ratio <= 2.0,
                "bfq: {loaded:.2} s is {ratio:.2}x idle {idle:.2} s"
            );
        } else {
            assert!(
                ratio >= 5.0,
                "{sched}: {loaded:.2} s is only {ratio:.2}x idle {idle:.2} s"
            );
        }
    }
}

/// The calibration's target (issue 2: xterm's idle start-up on `hdd-1.8in`
/// lands a little under 2 s, as in the CLOUD 2014 paper), and the recorded
/// trace far above it, so that the calibration is what brings it there.
#[test]
fn calibrated_xterm_starts_a_little_under_two_seconds_on_the_idle_disk() {
    let idle = startup("bfq", "none");
    eprintln!("xterm-2014 idle: {idle:.3} s");
    assert!((1.7..2.0).contains(&idle), "xterm-2014 idle {idle:.3} s");
    let mut recorded = cell("bfq", "none");
    recorded.app = "xterm".into();
    let r = run_startup(&recorded, &SimOptions::default(), 0).unwrap();
    let mean = r.values.iter().sum::<f64>() / r.values.len() as f64;
    eprintln!("xterm (recorded) idle: {mean:.3} s");
    assert!(mean > 3.0, "recorded xterm idle {mean:.3} s");
    // The calibration's knob: xterm-2014 with all its metadata reads back
    // is the recorded xterm, start for start.
    let opts = SimOptions {
        app_metadata_share: Some(1.0),
        ..SimOptions::default()
    };
    let knob = run_startup(&cell("bfq", "none"), &opts, 0).unwrap();
    assert_eq!(knob.values, r.values);
}

/// The real runner's transport (`--dispatch-depth 4`, devmodel::LOOP_TAG_DEPTH):
/// deadline picks 4 requests of the readers' batch before the app's next
/// read arrives, which then waits behind them in arrival order, so the app
/// starts slower than when the disk takes one request at a time. noop
/// dispatches in arrival order anyway: a FIFO behind a FIFO changes nothing.
#[test]
fn loop_transport_slows_deadline_under_readers_and_leaves_noop_as_it_is() {
    let loop4 = SimOptions {
        dispatch_depth: Some(devmodel::LOOP_TAG_DEPTH),
        ..SimOptions::default()
    };
    let one = startup("deadline", "5r-seq");
    let four = startup_with("deadline", "5r-seq", &loop4);
    eprintln!("deadline 5r-seq: depth 1 {one:.2} s, loop depth 4 {four:.2} s");
    assert!(four > one * 1.02, "deadline: {four:.2} s vs {one:.2} s");
    let one = startup("noop", "5r-seq");
    let four = startup_with("noop", "5r-seq", &loop4);
    eprintln!("noop 5r-seq: depth 1 {one:.2} s, loop depth 4 {four:.2} s");
    assert!(
        (four / one - 1.0).abs() < 0.01,
        "noop: {four:.2} s vs {one:.2} s"
    );
}
