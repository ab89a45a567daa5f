//! `tandem sim run`: the scenario, its options, the guards (a dry run and an
//! estimate, limits that ask for --yes, --out checked before any work) and the run
//! itself, whose results are written cell by cell as they finish.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use experiment::estimate::{default_memory_limit, estimate, Calibration, Estimate, Limits};
use experiment::{Cell, CellResult, Filter, IncrementalWriter, Provenance, RunMeta, Scenario};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use sim::coord::Channel;
use sim::kernel::{KernelName, KernelProfile};

use crate::sim_pool::{Pool, Signals};
use crate::{Failure, EMBEDDED_SCENARIOS};

/// Longest the calibration may take before the estimate is made from what it has
/// (then a lower bound): long enough for a few runs of the shipped scenarios'
/// slowest cells on one core, short enough for a dry run to answer at once.
const CALIBRATION_WAIT: Duration = Duration::from_secs(10);

/// Used when /proc/meminfo cannot be read: 4 GB.
const FALLBACK_MEMORY_LIMIT: u64 = 4_000_000_000;

#[derive(Args)]
pub struct RunArgs {
    /// Scenario file, or the name of an embedded scenario (default: native-hdd).
    scenario: Option<String>,
    #[command(flatten)]
    runner: crate::RunnerArgs,
    /// Print the cells, the runs and the estimated time and memory (measured on a
    /// few calibration runs), and write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Run even when the estimate is over --time-limit-s or --memory-limit-mb,
    /// without asking.
    #[arg(long)]
    yes: bool,
    /// Longest estimated wall time a run may take without --yes, in seconds.
    #[arg(long, value_name = "S", default_value_t = 3600.0)]
    time_limit_s: f64,
    /// Most estimated memory a run may take without --yes, in MB (default: half
    /// of the memory available when the run starts).
    #[arg(long, value_name = "MB")]
    memory_limit_mb: Option<u64>,
    #[command(flatten)]
    knobs: SimKnobs,
}

/// Every option of `tandem sim run` that can change a result: recorded whole in
/// `results.json` (`meta.extra.options`).
#[derive(Args, Clone, Serialize)]
pub struct SimKnobs {
    /// The host's kernel (CONFIG_HZ, BFQ release, slice_idle in jiffies, BFQ's
    /// soft real-time slack, sync write-back) [default: the scenario's
    /// host_kernel, else linux-6.1].
    #[arg(long, value_enum)]
    #[serde(serialize_with = "by_name_or_null")]
    host_kernel: Option<KernelName>,
    /// Override one field of the host's kernel profile (repeatable): hz=N,
    /// bfq=v7r2|mainline, slice_idle_jiffies=BOOL, softrt_slack=BOOL,
    /// sync_writes_sync=BOOL.
    #[arg(long = "host-kernel-set", value_name = "KEY=VALUE")]
    host_kernel_set: Vec<String>,
    /// The guests' kernel (the default is the published guests' 3.12 as they
    /// behaved: HZ=100, BFQ v7r2, slice_idle 8 ms, async sync write-back).
    #[arg(long, value_enum, default_value_t = KernelName::GUEST_DEFAULT)]
    #[serde(serialize_with = "by_name")]
    guest_kernel: KernelName,
    /// Override one field of the guests' kernel profile (repeatable), as
    /// --host-kernel-set.
    #[arg(long = "guest-kernel-set", value_name = "KEY=VALUE")]
    guest_kernel_set: Vec<String>,
    /// Turn off BFQ's low_latency heuristics.
    #[arg(long)]
    no_low_latency: bool,
    /// Override the device's command queue depth (NCQ).
    #[arg(long)]
    queue_depth: Option<usize>,
    /// Let the host driver take up to N requests from the elevator, which
    /// wait in arrival order for the device's own queue (not reordered by
    /// it): the real runner's emulated disk is a loop device of tag depth 4
    /// in front of a one-command disk model, so compare with real runs
    /// under --dispatch-depth 4. Unset: the device's queue depth.
    #[arg(long, value_name = "N")]
    dispatch_depth: Option<usize>,
    /// Set one parameter of the HDD model (repeatable; flash devices are
    /// left as they are), to calibrate it: rpm, media_mb_s,
    /// track_to_track_ms, avg_seek_ms, full_stroke_ms, write_settle_ms,
    /// miss_overhead_ms, hit_overhead_ms, host_mb_s, cache_segments,
    /// segment_kib.
    #[arg(long = "hdd-param", value_name = "NAME=VALUE")]
    #[serde(rename = "hdd_param")]
    hdd_params: Vec<String>,
    /// Guest jiffies that never lag (by default they catch up only after the
    /// interrupt that wakes an idle guest has been handled).
    #[arg(long)]
    guest_exact_ticks: bool,
    /// How QEMU issues guest I/O on the host.
    #[arg(long, value_enum, default_value_t = crate::QemuAio::Native)]
    aio: crate::QemuAio,
    /// virtio-blk queue size of the guests.
    #[arg(long, default_value_t = sim::virtio::DEFAULT_VIRTQUEUE_DEPTH)]
    virtqueue_depth: usize,
    /// Coordination channel from guests to host.
    #[arg(long, value_enum, default_value_t = Channel::VirtioSerial)]
    #[serde(serialize_with = "by_name")]
    channel: Channel,
    /// Longest help lease, in ms: a HELP not renewed ends after it.
    #[arg(long, value_name = "MS")]
    lease_ms: Option<u64>,
    /// Share of the budget window a VM may spend boosted (0 to 1]; hostd's --budget-fraction.
    #[arg(long, value_name = "FRACTION")]
    budget_fraction: Option<f64>,
    /// The old name of --budget-fraction (deprecated: it goes in the next release).
    #[arg(
        long,
        value_name = "FRACTION",
        hide = true,
        conflicts_with = "budget_fraction"
    )]
    budget: Option<f64>,
    /// Budget window, in seconds.
    #[arg(long, value_name = "S")]
    budget_window_s: Option<f64>,
    /// Arbitration quantum among VMs asking for help at once, in ms.
    #[arg(long, value_name = "MS")]
    quantum_ms: Option<u64>,
    /// Boost slots: VMs the host boosts at once besides those raised as
    /// newcomers (starting applications), which are all boosted.
    #[arg(long, value_name = "N")]
    max_boosted: Option<usize>,
    /// How long into a BFQ raising a guest asks for help, in seconds.
    #[arg(long, value_name = "S")]
    help_per_raising_s: Option<f64>,
    /// How long a guest waits, without a raised queue busy, before it says
    /// NO-HELP, in ms.
    #[arg(long, value_name = "MS")]
    no_help_delay_ms: Option<u64>,
    /// Weight factor of the help-weight mode.
    #[arg(long, default_value_t = sim::coord::DEFAULT_WEIGHT_FACTOR)]
    weight_factor: u32,
    /// Replay this share (0 to 1) of the app trace's filesystem-metadata
    /// reads, in place of the app preset's own (1 for a recorded trace, the
    /// fitted share for a calibrated one such as xterm-2014): the knob the
    /// app calibration sweeps.
    #[arg(long, value_name = "SHARE")]
    app_metadata_share: Option<f64>,
    /// Run the I/O cells' processes on this platform's CPU model (cores,
    /// CPU schedulers, per-request CPU costs) instead of the scenario's
    /// `platform`; without either, every process has a core of its own.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(cpusched::platform::PRESETS))]
    platform: Option<String>,
    /// The platform's CPU speed relative to the machine the app traces were
    /// recorded on, instead of its preset's (chromebook-2014: 0.17): the
    /// calibration's CPU knob.
    #[arg(long, value_name = "FACTOR")]
    cpu_speed: Option<f64>,
    /// On the CPU model, run the app's recorded CPU bursts only, without
    /// the per-request costs (system calls, block layer, interrupts,
    /// copies, QEMU's request handling).
    #[arg(long)]
    no_cpu_io_costs: bool,
}

/// Writes a typed flag value into results.json by its name.
fn by_name<T: std::fmt::Display, S: serde::Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// [`by_name`] for a flag that may be left out (null then).
fn by_name_or_null<T: std::fmt::Display, S: serde::Serializer>(
    v: &Option<T>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.collect_str(v),
        None => s.serialize_none(),
    }
}

/// The host kernel a scenario names (`host_kernel`), checked against the
/// simulator's profiles.
pub fn scenario_host_kernel(scenario: &Scenario) -> Result<Option<KernelName>, Failure> {
    scenario
        .host_kernel
        .as_deref()
        .map(|name| {
            name.parse::<KernelName>().map_err(|e| {
                Failure::Usage(format!("scenario {}: host_kernel: {e}", scenario.name))
            })
        })
        .transpose()
}

/// The host's and the guests' kernels: their profiles with the overrides.
/// The host's is `--host-kernel`, else the scenario's (`scenario_host`), else
/// the simulator's default host.
pub fn kernels(
    k: &SimKnobs,
    scenario_host: Option<KernelName>,
) -> Result<(KernelProfile, KernelProfile), Failure> {
    let host = k
        .host_kernel
        .or(scenario_host)
        .unwrap_or(KernelName::HOST_DEFAULT);
    let resolve = |name: KernelName, sets: &[String], flag: &str| {
        let mut p = name.profile();
        for s in sets {
            p.set(s)
                .map_err(|e| Failure::Usage(format!("{flag} {e}")))?;
        }
        Ok::<_, Failure>(p)
    };
    Ok((
        resolve(host, &k.host_kernel_set, "--host-kernel-set")?,
        resolve(k.guest_kernel, &k.guest_kernel_set, "--guest-kernel-set")?,
    ))
}

pub fn knobs_to_opts(
    k: &SimKnobs,
    scenario_host: Option<KernelName>,
) -> Result<sim::bench::SimOptions, Failure> {
    let (host_kernel, guest_kernel) = kernels(k, scenario_host)?;
    if k.queue_depth == Some(0) {
        return Err(Failure::Usage(
            "--queue-depth 0: the device queue depth must be at least 1".into(),
        ));
    }
    if k.dispatch_depth == Some(0) {
        return Err(Failure::Usage(
            "--dispatch-depth 0: the driver must take at least 1 request".into(),
        ));
    }
    if k.virtqueue_depth == 0 {
        return Err(Failure::Usage(
            "--virtqueue-depth 0: the virtqueue must hold at least 1 request".into(),
        ));
    }
    let mut opts = sim::bench::SimOptions::default();
    host_kernel.apply(&mut opts.sched_cfg);
    opts.sched_cfg.low_latency = !k.no_low_latency;
    opts.queue_depth = k.queue_depth;
    opts.dispatch_depth = k.dispatch_depth;
    opts.hdd_params = devmodel::parse_hdd_params(&k.hdd_params)
        .map_err(|e| Failure::Usage(format!("--hdd-param {e}")))?;
    guest_kernel.apply(&mut opts.vm.sched_cfg);
    opts.vm.sched_cfg.low_latency = !k.no_low_latency;
    opts.vm.sync_writes_async = !guest_kernel.sync_writes_sync;
    opts.vm.lagging_ticks = !k.guest_exact_ticks;
    opts.vm.aio = k.aio.sim();
    opts.vm.virtqueue_depth = k.virtqueue_depth;
    opts.coord.channel = k.channel;
    if let Some(ms) = k.lease_ms {
        opts.coord.policy.max_lease_ns = ms * 1_000_000;
    }
    if k.budget.is_some() {
        eprintln!("tandem sim run: --budget is deprecated and will go in the next release: write --budget-fraction");
    }
    if let Some(f) = k.budget_fraction.or(k.budget) {
        opts.coord.policy.budget_fraction = f;
    }
    if let Some(s) = k.budget_window_s {
        if !(s.is_finite() && s > 0.0) {
            return Err(Failure::Usage(format!(
                "--budget-window-s {s}: must be a positive number of seconds"
            )));
        }
        opts.coord.policy.budget_window_ns = (s * 1e9) as u64;
    }
    if let Some(s) = k.help_per_raising_s {
        if !(s.is_finite() && s > 0.0) {
            return Err(Failure::Usage(format!(
                "--help-per-raising-s {s}: must be a positive number of seconds"
            )));
        }
        opts.coord.help_per_raising_ns = (s * 1e9) as u64;
    }
    if let Some(ms) = k.no_help_delay_ms {
        opts.coord.no_help_delay_ns = ms * 1_000_000;
    }
    if let Some(ms) = k.quantum_ms {
        opts.coord.policy.quantum_ns = ms * 1_000_000;
    }
    if let Some(n) = k.max_boosted {
        opts.coord.policy.max_boosted = n;
    }
    if k.weight_factor == 0 {
        return Err(Failure::Usage(
            "--weight-factor 0: the factor must be at least 1".into(),
        ));
    }
    opts.coord.weight_factor = k.weight_factor;
    if let Some(share) = k.app_metadata_share {
        if !(0.0..=1.0).contains(&share) {
            return Err(Failure::Usage(format!(
                "--app-metadata-share {share}: out of range; accepted: 0 to 1"
            )));
        }
        opts.app_metadata_share = Some(share);
    }
    if let Some(speed) = k.cpu_speed {
        if !(speed.is_finite() && speed > 0.0) {
            return Err(Failure::Usage(format!(
                "--cpu-speed {speed}: must be a positive factor (1 = the recorded machine)"
            )));
        }
    }
    opts.platform = k.platform.clone();
    opts.cpu_speed = k.cpu_speed;
    opts.cpu_io_costs = !k.no_cpu_io_costs;
    opts.coord
        .policy
        .validate()
        .map_err(|e| Failure::Usage(format!("coordination policy: {e}")))?;
    Ok(opts)
}

pub fn load_scenario(arg: Option<&str>) -> Result<Scenario, Failure> {
    let accepted = sim::bench::accepted();
    let name = arg.unwrap_or("native-hdd");
    let path = PathBuf::from(name);
    if path.exists() {
        let s = Scenario::load(&path, &accepted).map_err(|e| Failure::Usage(e.to_string()))?;
        return sim::cpu_bench::check(&s)
            .map(|()| s)
            .map_err(|e| Failure::Usage(format!("{}: {e}", path.display())));
    }
    if let Some((_, text)) = EMBEDDED_SCENARIOS.iter().find(|(n, _)| *n == name) {
        let s = Scenario::from_toml_str(text, &accepted)
            .map_err(|e| Failure::Usage(format!("embedded scenario {name}: {e}")))?;
        return sim::cpu_bench::check(&s)
            .map(|()| s)
            .map_err(|e| Failure::Usage(format!("embedded scenario {name}: {e}")));
    }
    Err(Failure::Usage(format!(
        "scenario \"{name}\": no such file, and not an embedded scenario; embedded: {}",
        EMBEDDED_SCENARIOS
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

/// The progress bar, hidden until the calibration is over and the run goes on
/// (then on stderr, unless `--quiet` or stderr is not a terminal).
fn progress_bar(total: u64) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
    pb.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} runs  {elapsed_precise} (eta {eta})")
            .expect("valid template"),
    );
    pb
}

/// The limits of `a`, checked.
fn limits(a: &RunArgs) -> Result<Limits, Failure> {
    if !(a.time_limit_s.is_finite() && a.time_limit_s > 0.0) {
        return Err(Failure::Usage(format!(
            "--time-limit-s {}: must be a positive number of seconds",
            a.time_limit_s
        )));
    }
    let memory_bytes = match a.memory_limit_mb {
        Some(0) => {
            return Err(Failure::Usage(
                "--memory-limit-mb 0: must be at least 1".into(),
            ))
        }
        Some(mb) => mb.saturating_mul(1_000_000),
        None => default_memory_limit().unwrap_or(FALLBACK_MEMORY_LIMIT),
    };
    Ok(Limits {
        wall_s: a.time_limit_s,
        memory_bytes,
    })
}

/// What a dry run prints, on stdout.
fn print_plan(
    scenario: &Scenario,
    cells: &[Cell],
    all: usize,
    est: &Estimate,
    cal: &Calibration,
    limits: &Limits,
) {
    let runs: u64 = cells.iter().map(|c| u64::from(c.repetitions)).sum();
    println!("scenario: {}", scenario.name);
    println!("cells: {} (of {all} in the matrix)", cells.len());
    println!("runs: {runs}");
    println!("jobs: {}", est.jobs);
    print!("{}", est.describe(cal));
    let over = est.exceeds(limits);
    if over.is_empty() {
        println!(
            "limits: within ({} s, {:.1} MB); the run needs no --yes",
            limits.wall_s,
            limits.memory_bytes as f64 / 1e6
        );
    } else {
        println!("limits: over: {}; the run needs --yes", over.join("; "));
    }
}

/// Asks on the terminal whether to run anyway; without a terminal the answer is no.
fn confirm(over: &[String]) -> bool {
    if !std::io::stdin().is_terminal() {
        return false;
    }
    eprint!("tandem: estimate: {}; run anyway? [y/N] ", over.join("; "));
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).is_ok() && matches!(line.trim(), "y" | "Y" | "yes")
}

pub fn sim_run(a: RunArgs) -> Result<(), Failure> {
    let scenario = load_scenario(a.scenario.as_deref())?;
    let scenario_host = scenario_host_kernel(&scenario)?;
    let opts = knobs_to_opts(&a.knobs, scenario_host)?;
    let limits = limits(&a)?;
    let filter = Filter::parse(&a.runner.only).map_err(Failure::Usage)?;
    let all = scenario.cells();
    filter.check(&all).map_err(Failure::Usage)?;
    let cells: Vec<Cell> = filter.apply(&all);
    if cells.is_empty() {
        return Err(Failure::Usage("no cell matches the --only filters".into()));
    }
    if !a.dry_run {
        experiment::prepare_out_dir(&a.runner.out)
            .map_err(|e| Failure::Usage(format!("--out: {e}")))?;
    }
    let runs: u64 = cells.iter().map(|c| u64::from(c.repetitions)).sum();
    let jobs = a
        .runner
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1)
        .min(runs as usize);
    let signals = Signals::install().map_err(|e| Failure::Run(format!("signal handlers: {e}")))?;
    let pb = progress_bar(runs);
    let provenance = Provenance::start(
        env!("CARGO_PKG_VERSION"),
        env!("TANDEM_GIT_COMMIT"),
        std::env::args_os()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        cells.len(),
    );
    let meta = run_meta(&a, &opts, &scenario);
    let started = std::time::Instant::now();
    let pool = Pool::start(cells.clone(), opts, jobs, signals.stop.clone(), pb.clone());
    let cal = pool.calibrate(CALIBRATION_WAIT);
    let est = estimate(&cal, runs, jobs);
    if a.dry_run {
        pool.stop();
        print_plan(&scenario, &cells, all.len(), &est, &cal, &limits);
        return Ok(());
    }
    if let Some(e) = pool.error() {
        pool.stop();
        return Err(Failure::Run(e));
    }
    let over = est.exceeds(&limits);
    if !over.is_empty() && !a.yes && signals.received().is_none() && !confirm(&over) {
        pool.stop();
        return Err(Failure::Usage(format!(
            "estimate: {}; pass --yes to run it anyway (--dry-run shows the estimate; \
             --time-limit-s and --memory-limit-mb set the limits)",
            over.join("; ")
        )));
    }
    if !a.runner.quiet && std::io::stderr().is_terminal() {
        pb.set_draw_target(ProgressDrawTarget::stderr());
    }
    let planned = experiment::planned(&cells);
    let writer = IncrementalWriter::create(&a.runner.out, meta, provenance, &planned)
        .map_err(|e| Failure::Run(format!("writing {}: {e}", a.runner.out.display())))?;
    pool.go(writer)
        .map_err(|e| Failure::Run(format!("writing {}: {e}", a.runner.out.display())))?;
    let (writer, error, hists) = pool.join();
    pb.finish_and_clear();
    let signal = signals.received();
    let writer = writer.expect("the writer stays with the pool until the end");
    let (written, results) = writer
        .finish(
            signal
                .map(|(name, _)| name)
                .or(error.as_ref().map(|_| "error")),
        )
        .map_err(|e| Failure::Run(format!("writing {}: {e}", a.runner.out.display())))?;
    let mut written = written;
    // cyclictest's histograms, one per latency cell, in its -h format.
    for (i, h) in &hists {
        let path = a
            .runner
            .out
            .join(sim::cpu_bench::histogram_file_name(&cells[*i]));
        std::fs::write(&path, h.to_cyclictest_text())
            .map_err(|e| Failure::Run(format!("writing {}: {e}", path.display())))?;
        written.push(path);
    }
    let pairs: Vec<_> = hists
        .iter()
        .map(|(i, h)| (&cells[*i], crate::report_cmd::counts(h)))
        .collect();
    written.extend(
        experiment::plot::hist::write_histogram_plots(&a.runner.out, &pairs)
            .map_err(|e| Failure::Run(format!("writing {}: {e}", a.runner.out.display())))?,
    );
    if let Some(e) = error {
        return Err(Failure::Run(e));
    }
    if let Some((name, code)) = signal {
        eprintln!(
            "tandem: stopped by {name}: {} of {} cells measured and written to {} \
             (results.json says the run is incomplete)",
            results.len(),
            cells.len(),
            a.runner.out.display()
        );
        return Err(Failure::Interrupted(code));
    }
    warn_overlapping(&results);
    let table = std::fs::read_to_string(a.runner.out.join("table.txt")).unwrap_or_default();
    print!("{table}");
    eprintln!(
        "tandem: {} cells, {} runs in {:.1} s; {} files in {}",
        cells.len(),
        runs,
        started.elapsed().as_secs_f64(),
        written.len(),
        a.runner.out.display()
    );
    Ok(())
}

/// Cells whose files did not fit on their disk: say so, loudly, with the first
/// few of them.
fn warn_overlapping(results: &[CellResult]) {
    let overlapping: Vec<(String, f64)> = results
        .iter()
        .filter_map(|r| {
            let bytes = r
                .runs
                .iter()
                .filter_map(|run| run.counters.get(sim::bench::OVERLAPPING_FILE_BYTES))
                .fold(0.0_f64, |a, &b| a.max(b));
            (bytes > 0.0).then(|| (r.cell.key(), bytes))
        })
        .collect();
    if !overlapping.is_empty() {
        eprintln!(
            "tandem: warning: in {} of {} cells the files (VM images, workload files) do not \
             fit on the simulated device and some were placed over others; their seeks and \
             sharing are not physical (results.json: {}):",
            overlapping.len(),
            results.len(),
            sim::bench::OVERLAPPING_FILE_BYTES
        );
        for (key, bytes) in overlapping.iter().take(3) {
            eprintln!("  {key}: {:.1} GB over others", bytes / 1e9);
        }
    }
}

/// The run's metadata: the options that can change a result, resolved.
/// A resolved kernel profile in results.json: its name and every field.
fn kernel_json(p: &KernelProfile) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    m.insert("profile".into(), p.name.name().into());
    for (k, v) in p.fields() {
        let v = match v.parse::<u64>() {
            Ok(n) => n.into(),
            Err(_) => match v.as_str() {
                "true" => true.into(),
                "false" => false.into(),
                _ => v.into(),
            },
        };
        m.insert(k.into(), v);
    }
    m.into()
}

fn run_meta(a: &RunArgs, opts: &sim::bench::SimOptions, scenario: &Scenario) -> RunMeta {
    let k = &a.knobs;
    let mut extra = serde_json::Map::new();
    // Resolved once already when the options were checked (knobs_to_opts).
    let resolved = scenario_host_kernel(scenario)
        .ok()
        .and_then(|host| kernels(k, host).ok());
    if let Some((host, _)) = &resolved {
        extra.insert("host_kernel".into(), kernel_json(host));
    }
    extra.insert("low_latency".into(), (!k.no_low_latency).into());
    extra.insert("slice_idle_ns".into(), opts.sched_cfg.slice_idle().into());
    if let Some(d) = k.queue_depth {
        extra.insert("queue_depth".into(), d.into());
    }
    if let Some(d) = k.dispatch_depth {
        extra.insert("dispatch_depth".into(), d.into());
    }
    if !opts.hdd_params.is_empty() {
        let params: serde_json::Map<String, serde_json::Value> = opts
            .hdd_params
            .iter()
            .map(|(k, v)| (k.clone(), (*v).into()))
            .collect();
        extra.insert("hdd_params".into(), params.into());
    }
    if let Some(share) = k.app_metadata_share {
        extra.insert("app_metadata_share".into(), share.into());
    }
    if let Some(p) = &k.platform {
        extra.insert("platform".into(), p.clone().into());
    }
    if let Some(speed) = k.cpu_speed {
        extra.insert("cpu_speed".into(), speed.into());
    }
    if k.no_cpu_io_costs {
        extra.insert("no_cpu_io_costs".into(), true.into());
    }
    if scenario.is_vm() {
        if let Some((_, guest)) = &resolved {
            extra.insert("guest_kernel".into(), kernel_json(guest));
        }
        extra.insert("guest_lagging_ticks".into(), (!k.guest_exact_ticks).into());
        extra.insert(
            "guest_slice_idle_ns".into(),
            opts.vm.sched_cfg.slice_idle().into(),
        );
        extra.insert("aio".into(), k.aio.to_string().into());
        extra.insert("virtqueue_depth".into(), k.virtqueue_depth.into());
    }
    let mut options = match serde_json::to_value(k) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    options.insert("only".into(), a.runner.only.clone().into());
    extra.insert(experiment::OPTIONS_KEY.into(), options.into());
    let p = &opts.coord.policy;
    let policy = serde_json::json!({
        "channel": k.channel.name(),
        "max_lease_ns": p.max_lease_ns,
        "budget_fraction": p.budget_fraction,
        "budget_window_ns": p.budget_window_ns,
        "quantum_ns": p.quantum_ns,
        "max_boosted": p.max_boosted,
        "weight_factor": opts.coord.weight_factor,
        "help_per_raising_ns": opts.coord.help_per_raising_ns,
        "no_help_delay_ns": opts.coord.no_help_delay_ns,
    });
    extra.insert("coordination_policy".into(), policy);
    RunMeta {
        runner: "sim".into(),
        scenario: scenario.name.clone(),
        tandem_version: env!("CARGO_PKG_VERSION").into(),
        seed: scenario.seed,
        extra,
    }
}
