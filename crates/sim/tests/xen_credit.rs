//! Xen's credit scheduler under the Xen PV profile path (issue 29): one
//! DomU on the CPU model keeps the study's figures; CPU-bound DomUs beside
//! an I/O-bound one cost it little with credit's BOOST and nearly all of
//! its throughput without (`scenarios/xen-credit-multi.toml`).

use experiment::{Cell, Scenario};
use sim::bench::{accepted, run_repetition, SimOptions};

/// One profile cell: `extra` holds the top-level keys, `matrix` the matrix
/// keys besides the fixed ones.
fn scenario(extra: &str, matrix: &str) -> Result<Scenario, String> {
    let text = format!(
        "name = \"t\"\nbenchmark = \"profile\"\nduration_s = 3\nsample_s = 1\n\
         repetitions = 1\nseed = 29\n{extra}\n[matrix]\nhost_sched = [\"deadline\"]\n\
         host_workload = [\"none\"]\nguest_sched = [\"noop\"]\nguest_workload = [\"none\"]\n\
         threads = [1]\n{matrix}\n"
    );
    Scenario::from_toml_str(&text, &accepted()).map_err(|e| e.to_string())
}

fn one_cell(extra: &str, matrix: &str) -> Cell {
    let s = scenario(extra, matrix).unwrap();
    let cells = s.cells();
    assert_eq!(cells.len(), 1);
    cells.into_iter().next().unwrap()
}

/// (tps, p50 latency in ms) of one repetition.
fn tps_p50(cell: &Cell) -> (f64, f64) {
    let r = run_repetition(cell, &SimOptions::default(), 0).unwrap();
    let p50 = r.counters[experiment::profile::IO_LATENCY_P50_MS];
    (r.mean().unwrap(), p50)
}

const XEN: &str = "hypervisor = \"xen-pv\"";
const XEN_CPU: &str = "hypervisor = \"xen-pv\"\nplatform = \"chromebook-2014\"";

#[test]
fn one_domu_on_the_cpu_model_keeps_the_delay_paths_figures() {
    let m = "device = [\"sas-10k\"]\nprofile = [\"ffsb-randread\"]";
    let (delays, _) = tps_p50(&one_cell(XEN, m));
    let (on_cpu, _) = tps_p50(&one_cell(XEN_CPU, m));
    let moved = (on_cpu / delays - 1.0).abs();
    assert!(
        moved < 0.03,
        "one DomU: {delays:.1} tps with delays, {on_cpu:.1} on credit"
    );
}

fn competing(sched: &str, load: &str) -> (f64, f64) {
    let m = format!(
        "device = [\"nvme\"]\nprofile = [\"ffsb-randread\"]\n\
         host_cpu_sched = [\"{sched}\"]\nhost_cpu_load = [\"{load}\"]"
    );
    tps_p50(&one_cell(XEN_CPU, &m))
}

#[test]
fn boost_keeps_an_io_domu_going_beside_cpu_bound_domus() {
    let (alone, _) = competing("credit", "0");
    // One spinner leaves the other pCPU idle: nothing changes.
    let (one, _) = competing("credit", "1");
    assert!((one / alone - 1.0).abs() < 0.02, "{alone:.0} vs {one:.0}");
    // Two spinners fill both pCPUs: every wake-up of Dom0's and the DomU's
    // vCPU waits for a spinner's rate limit (1 ms) with BOOST, and for its
    // slice (30 ms) without whenever both are UNDER.
    let (boost, boost_p50) = competing("credit", "2");
    let (plain, plain_p50) = competing("credit-noboost", "2");
    assert!(
        boost < alone * 0.5,
        "rate limit: {boost:.0} of {alone:.0} tps"
    );
    assert!(
        boost_p50 <= 3.0,
        "with BOOST the median waits about two rate limits: {boost_p50:.3} ms"
    );
    assert!(
        boost > 10.0 * plain,
        "BOOST {boost:.0} tps against {plain:.0} without"
    );
    assert!(
        plain_p50 >= 20.0,
        "without BOOST the median waits for slices: {plain_p50:.3} ms"
    );
}

#[test]
fn xen_cpu_keys_are_checked() {
    let cpu = |s: &str| format!("device = [\"nvme\"]\nprofile = [\"ffsb-randread\"]\n{s}");
    // A Linux scheduler cannot schedule Xen's vCPUs ...
    let e = scenario(XEN_CPU, &cpu("host_cpu_sched = [\"cfs\"]")).unwrap_err();
    assert!(e.contains("credit"), "{e}");
    // ... nor credit KVM's.
    let e = scenario("", &cpu("host_cpu_sched = [\"credit\"]")).unwrap_err();
    assert!(e.contains("xen-pv"), "{e}");
    // Not a guest scheduler.
    let e = scenario(XEN_CPU, &cpu("guest_cpu_sched = [\"credit\"]")).unwrap_err();
    assert!(e.contains("host_cpu_sched"), "{e}");
    // CPU-bound DomUs need pCPUs: a platform.
    let c = one_cell(XEN, &cpu("host_cpu_load = [\"2\"]"));
    let e = run_repetition(&c, &SimOptions::default(), 0).unwrap_err();
    assert!(e.contains("platform"), "{e}");
}
