//! The benchmarks that run on the CPU model (crate `cpusched`) rather than on
//! the I/O machine: cyclictest (`benchmark = "latency"`) and the start-up with
//! hot caches (`caches = "hot"`), as the coordinated task scheduling study ran
//! them (Fanguède, Spyridakis, Raho 2014). A cell's platform, CPU schedulers,
//! busy loops and coordination become a [`LatencySetup`]; "no guest" cells
//! (native) run the benchmark on the host.

use cpusched::coord::{BoostChange, HelpCpu};
use cpusched::cyclictest::{
    build_loaded, hypercall_ns, run_latency, set_vcpus, CpuCoordination, Histogram, LatencySetup,
    Loaded, PVSCHED_RR_PRIO, WARMUP,
};
use cpusched::model::CompletionKind;
use cpusched::{FairKind, Nanos, Platform, Policy, TaskSpec, MS};
use experiment::{Cell, CellResult, CpuSched, RunResult, Scenario, ScenarioError};
use policy::PolicyConfig;

use crate::bench::repetition_seed;
use crate::engine::Rng;
use crate::workload;

/// The counter that carries a run's maximum latency (shared with the real
/// runner).
pub use experiment::latency::LATENCY_MAX_US;

/// The pause before each hot start ([`experiment::suite::HOT_PAUSE_MS`],
/// the real runner's too).
const HOT_PAUSE: Nanos = experiment::suite::HOT_PAUSE_MS * MS;
/// Up to this much more, drawn per start, so that starts fall at different
/// phases of the tick (HZ=100: 10 ms) and of the loops' slices.
const HOT_JITTER: Nanos = 50 * MS;
/// `help-cpu` at an app's start: the guest sees a task that starts and asks
/// for 500 ms (ChromeOS's cap on boosting one task, issue 25).
const START_HELP: Nanos = 500 * MS;

/// The CPU model's fair class of a scenario's CPU scheduler.
pub(crate) fn fair(s: CpuSched) -> FairKind {
    match s {
        CpuSched::Cfs => FairKind::Cfs,
        CpuSched::Eevdf => FairKind::Eevdf,
        CpuSched::Bfs => FairKind::Bfs,
        CpuSched::CfsV => FairKind::CfsV(cpusched::cfsv::CfsvOptions::default()),
        CpuSched::Credit => FairKind::Credit(cpusched::credit::CreditOptions::default()),
        CpuSched::CreditNoBoost => FairKind::Credit(cpusched::credit::CreditOptions {
            boost: false,
            ..Default::default()
        }),
    }
}

/// Checks what only the CPU model knows: the platform exists and has room for
/// the VM's vCPUs. The errors name the key, the value and what is accepted.
pub fn check(s: &Scenario) -> Result<(), ScenarioError> {
    let err = |key: &str, message: String| ScenarioError {
        path: None,
        key: Some(key.into()),
        message,
    };
    let p = Platform::preset(&s.cpu.platform).map_err(|e| err("platform", e))?;
    if s.is_vm() && s.cpu.vcpus as usize > p.max_vcpus {
        return Err(err(
            "vcpus",
            format!(
                "{} vCPUs, but platform \"{}\" allows at most {}; accepted: 1 to {}",
                s.cpu.vcpus, p.name, p.max_vcpus, p.max_vcpus
            ),
        ));
    }
    Ok(())
}

/// The CPU model's setup of one repetition of a cell.
pub fn setup(cell: &Cell, rep: u32) -> Result<LatencySetup, String> {
    let c = &cell.cpu;
    let platform = Platform::preset(&c.platform)?;
    let guest_loops = (!cell.is_native()).then_some(c.guest_cpu_load as usize);
    let mut s = LatencySetup::new(
        platform,
        fair(c.host_sched()),
        c.host_cpu_load as usize,
        guest_loops,
    );
    s.guest_sched = fair(c.guest_sched());
    s.loops = c.loops;
    s.vcpus = c.vcpus as usize;
    s.coordination = CpuCoordination::from_mode(cell.coordination).ok_or_else(|| {
        format!(
            "coordination \"{}\" coordinates I/O, which the CPU model does not",
            cell.coordination
        )
    })?;
    // Each repetition starts at its own phase of the tick: up to one host
    // tick later than the warm-up.
    let tick = 1_000_000_000 / s.platform.hz.max(1) as Nanos;
    let mut r = Rng::new(repetition_seed(cell.seed, rep));
    s.warmup = WARMUP + r.below(tick);
    Ok(s)
}

/// One run of cyclictest: its average latency in `values` (us), its maximum
/// in the [`LATENCY_MAX_US`] counter, and the histogram.
pub fn run_latency_rep(cell: &Cell, rep: u32) -> Result<(RunResult, Histogram), String> {
    let s = setup(cell, rep)?;
    let r = run_latency(&s)?;
    let mut run = RunResult {
        values: vec![r.hist.avg_us()],
        ..RunResult::default()
    };
    run.counters.insert(LATENCY_MAX_US.into(), r.hist.max_us());
    run.counters
        .insert("host_loops_share".into(), r.host_loops_share);
    run.counters
        .insert("vcpu_boosted_s".into(), r.boosted_ns as f64 / 1e9);
    Ok((run, r.hist))
}

/// Runs one repetition of a latency cell and returns the events the CPU
/// model handled and the simulated time, for `tandem sim bench`.
/// One run of a readers-hashers cell (the CFS-v study, issue 28) on
/// `cpusched::cfsv_study`, the one home of its workload: the layout's two
/// VMs on the cell's platform and host scheduler (guests run CFS), 3 s of
/// warm-up, then `duration_s` measured. Each VM's figures are counters named
/// by their metric (`vm1_iops`, ...); [`cell_results`] makes them rows.
pub fn run_readers_hashers(cell: &Cell, rep: u32) -> Result<RunResult, String> {
    use cpusched::cfsv_study::{run, Case, StudySetup};
    let c = &cell.cpu;
    let case = match c.vm_layout {
        Some(experiment::VmLayout::Separate) => Case::Separate,
        Some(experiment::VmLayout::Mixed) => Case::Mixed,
        None => return Err("a readers-hashers cell needs vm_layout".into()),
    };
    if c.guest_cpu_sched.is_some_and(|g| g != CpuSched::Cfs) {
        return Err(format!(
            "guest_cpu_sched \"{}\": the readers-hashers guests run cfs",
            c.guest_sched()
        ));
    }
    let mut s = StudySetup::new(case, fair(c.host_sched()));
    s.platform = Platform::preset(&c.platform)?;
    s.measure_ns = (cell.duration_s * 1e9).round() as Nanos;
    s.seed = repetition_seed(cell.seed, rep);
    let r = run(&s)?;
    let mut out = RunResult::default();
    for (i, v) in r.vms.iter().enumerate() {
        let vm = i + 1;
        for (name, x) in [
            ("iops", v.iops),
            ("mb_s", v.mb_s),
            ("hash_mb_s", v.hash_mb_s),
            ("cpu_pct", v.cpu_pct),
        ] {
            out.counters.insert(format!("vm{vm}_{name}"), x);
        }
    }
    out.values.push(r.vms[0].iops);
    Ok(out)
}

pub fn count_events(cell: &Cell, rep: u32) -> Result<(u64, Nanos), String> {
    let r = run_latency(&setup(cell, rep)?)?;
    Ok((r.events, r.measured_ns))
}

/// One run of the hot start-up: `iterations` starts of the app, each its
/// recorded CPU bursts (scaled by the platform's speed) run back to back on
/// the CPU model under the cell's loads, with no disk I/O (hot caches). A
/// start that does not finish within `timeout_s` counts as `timeout_s`.
pub fn run_hot_startup(cell: &Cell, rep: u32) -> Result<RunResult, String> {
    let trace =
        workload::preset(&cell.app).ok_or_else(|| format!("unknown app \"{}\"", cell.app))?;
    let s = setup(cell, rep)?;
    let bursts: Vec<Nanos> = trace
        .reads
        .iter()
        .map(|r| r.think_ns)
        .chain([trace.tail_ns])
        .filter(|&t| t > 0)
        .map(|t| s.platform.scale_cpu(t).max(1))
        .collect();
    let Loaded {
        mut m, k, vcpus, ..
    } = build_loaded(&s)?;
    let help = s.coordination.asks_for_help() && !vcpus.is_empty();
    let mut coord = HelpCpu::new(PolicyConfig::default());
    let boost = Policy::Rr {
        prio: PVSCHED_RR_PRIO,
    };
    let hypercall = if help { hypercall_ns(&s.platform) } else { 0 };
    let mut jitter = Rng::new(repetition_seed(cell.seed, rep) ^ 0x484f_545f_5354_4152);
    let timeout = (cell.timeout_s * 1e9) as Nanos;
    let mut out = RunResult::default();
    for i in 0..cell.iterations {
        let until = m.now() + HOT_PAUSE + jitter.below(HOT_JITTER);
        advance(&mut m, &mut coord, help, &vcpus, until, |_, _| false);
        let start = m.now();
        let spec = TaskSpec {
            burst: Some(bursts[0] + hypercall),
            ..TaskSpec::busy_loop(&format!("{}-{i}", trace.name))
        };
        let t = m.spawn(k, spec);
        if help && coord.help(start, START_HELP) == BoostChange::Boost {
            set_vcpus(&mut m, &vcpus, boost);
        }
        let mut left = bursts[1..].iter();
        let mut done: Option<Nanos> = None;
        advance(&mut m, &mut coord, help, &vcpus, start + timeout, |m, c| {
            if c.kernel != k || c.task != t || c.kind != CompletionKind::BurstDone {
                return false;
            }
            match left.next() {
                Some(&b) => {
                    m.set_burst(k, t, b);
                    false
                }
                None => {
                    // The app is up: it exits.
                    m.block(k, t);
                    done = Some(c.at);
                    true
                }
            }
        });
        match done {
            Some(at) => out.values.push((at - start) as f64 / 1e9),
            None => {
                out.values.push(cell.timeout_s);
                out.timeouts += 1;
                break;
            }
        }
    }
    Ok(out)
}

/// Advances the model to `until`, or until `on` (handed each completion)
/// returns true, ending `help-cpu` boosts whose lease ran out.
fn advance(
    m: &mut cpusched::CpuModel,
    coord: &mut HelpCpu,
    help: bool,
    vcpus: &[cpusched::TaskId],
    until: Nanos,
    mut on: impl FnMut(&mut cpusched::CpuModel, cpusched::Completion) -> bool,
) {
    let mut done = Vec::new();
    while m.now() < until {
        let mut at = m.next_event_time().unwrap_or(until).min(until);
        if let Some(c) = coord.next_check(m.now()) {
            at = at.min(c.max(m.now()));
        }
        done.clear();
        done.extend_from_slice(m.advance_to(at));
        if help && coord.settle(m.now()) == BoostChange::Unboost {
            set_vcpus(m, vcpus, Policy::NORMAL);
        }
        let mut stop = false;
        for &c in &done {
            stop |= on(m, c);
        }
        if stop {
            return;
        }
    }
}

/// A cell's results from its runs ([`experiment::latency::cell_results`],
/// the simulator's rows).
pub fn cell_results(cell: &Cell, runs: Vec<RunResult>) -> Vec<CellResult> {
    experiment::latency::cell_results(cell, "sim", runs)
}

/// The histogram file of a latency cell ([`experiment::latency::histogram_file_name`]).
pub use experiment::latency::histogram_file_name;
