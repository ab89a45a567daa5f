//! The `tandem` binary: subcommands only; the work is done by the crates.

use clap::{Args, Parser, Subcommand};
use experiment::{Cell, Filter, RunMeta, Scenario};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

mod agent_cmd;
mod bench_cmd;
mod cpu_cmd;
mod devemu_cmd;
mod vm_cmd;

/// Scenarios shipped inside the binary, usable by name.
const EMBEDDED_SCENARIOS: &[(&str, &str)] = &[
    (
        "native-hdd",
        include_str!("../../../scenarios/native-hdd.toml"),
    ),
    (
        "native-hdd-throughput",
        include_str!("../../../scenarios/native-hdd-throughput.toml"),
    ),
    (
        "cloud2014",
        include_str!("../../../scenarios/cloud2014.toml"),
    ),
    (
        "cloud2014-real",
        include_str!("../../../scenarios/cloud2014-real.toml"),
    ),
    (
        "cloud2014-throughput",
        include_str!("../../../scenarios/cloud2014-throughput.toml"),
    ),
    ("vbfq", include_str!("../../../scenarios/vbfq.toml")),
    (
        "vbfq-throughput",
        include_str!("../../../scenarios/vbfq-throughput.toml"),
    ),
    ("multi-vm", include_str!("../../../scenarios/multi-vm.toml")),
    (
        "fanguede2014",
        include_str!("../../../scenarios/fanguede2014.toml"),
    ),
    (
        "fanguede2014-startup",
        include_str!("../../../scenarios/fanguede2014-startup.toml"),
    ),
];

#[derive(Parser)]
#[command(
    name = "tandem",
    version,
    about = "Coordinated I/O scheduling between guests and hosts: simulator and tools"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// The command enums are built once per process from the command line: the
// size of their largest variant costs nothing worth boxing for.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// The deterministic simulator.
    #[command(subcommand)]
    Sim(SimCommand),
    /// Print the tables of a results directory, or its comparison with published numbers.
    Report(ReportArgs),
    /// Emulated slow block devices (FUSE + loop device; needs root).
    #[command(subcommand)]
    Devemu(devemu_cmd::DevemuCommand),
    /// The real runner: scenarios on real block devices (needs root).
    #[command(subcommand)]
    Bench(bench_cmd::BenchCommand),
    /// The host's coordination daemon: boosts a VM's I/O while its guest asks for help.
    #[command(subcommand)]
    Hostd(agent_cmd::HostdCommand),
    /// The guest's coordination daemon: asks the host for help when an application needs it.
    Guestd(agent_cmd::GuestdArgs),
    /// Ask the local guestd for help, e.g. from a launcher: tandem hint --for 3s.
    Hint(agent_cmd::HintArgs),
    /// Real QEMU guests for the benchmark runner: the guest image.
    #[command(subcommand)]
    Vm(vm_cmd::VmCommand),
}

#[derive(Args)]
struct ReportArgs {
    /// Output directory of a run (holding results.json), or a results.json file.
    dir: PathBuf,
    /// A second run (e.g. the real runner's, against the simulator's in DIR): the two
    /// side by side, cell by cell, with their ratio.
    other: Option<PathBuf>,
    /// Compare with a reference file of published numbers (e.g. reference/cloud2014-hdd.toml).
    #[arg(long, value_name = "FILE")]
    paper: Option<PathBuf>,
}

#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum SimCommand {
    /// Run a scenario's cells and write results, tables and plots.
    Run(RunArgs),
    /// Measure simulated events per second on the 5-reader BFQ hdd-1.8in cell and on
    /// the CPU-contended cyclictest cell (8 host loops, 1 guest loop).
    Bench(BenchArgs),
    /// List devices, schedulers, apps and embedded scenarios.
    List,
    /// The coordinated task scheduling study's latency tables on the CPU model.
    CpuStudy(cpu_cmd::CpuStudyArgs),
}

#[derive(Args)]
struct RunArgs {
    /// Scenario file, or the name of an embedded scenario (default: native-hdd).
    scenario: Option<String>,
    /// Output directory.
    #[arg(long, default_value = "out")]
    out: PathBuf,
    /// Only run cells with KEY=VALUE (repeatable; repeated keys OR, different keys AND).
    #[arg(long = "only", value_name = "KEY=VALUE")]
    only: Vec<String>,
    /// Cells run in parallel (default: the number of cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    #[command(flatten)]
    knobs: SimKnobs,
}

#[derive(Args, Clone)]
struct SimKnobs {
    /// Kernel tick rate of the simulated machine (CONFIG_HZ).
    #[arg(long, default_value_t = 250)]
    hz: u32,
    /// Turn off the "+4 ticks" slack of BFQ's soft real-time test.
    #[arg(long)]
    no_softrt_slack: bool,
    /// Turn off BFQ's low_latency heuristics.
    #[arg(long)]
    no_low_latency: bool,
    /// Which BFQ the host runs: mainline (this machine's) or v7r2 (Linux
    /// 3.12's, the published runs').
    #[arg(long, default_value = "mainline")]
    host_bfq: String,
    /// The host's CFQ and BFQ count `slice_idle` in whole jiffies (HZ /
    /// 125), as Linux before 4.10 and BFQ v7 did: 8 ms at HZ=250, none at
    /// HZ=100.
    #[arg(long)]
    slice_idle_jiffies: bool,
    /// Override the device's command queue depth (NCQ).
    #[arg(long)]
    queue_depth: Option<usize>,
    /// Set one parameter of the HDD model (repeatable; flash devices are
    /// left as they are), to calibrate it: rpm, media_mb_s,
    /// track_to_track_ms, avg_seek_ms, full_stroke_ms, write_settle_ms,
    /// miss_overhead_ms, hit_overhead_ms, host_mb_s, cache_segments,
    /// segment_kib.
    #[arg(long = "hdd-param", value_name = "NAME=VALUE")]
    hdd_params: Vec<String>,
    /// Kernel tick rate of the guests (CONFIG_HZ; the published ARM guests ran at 100).
    #[arg(long, default_value_t = sim::vm::DEFAULT_GUEST_HZ)]
    guest_hz: u32,
    /// Turn off the "+4 ticks" slack of the guests' BFQ soft real-time test.
    #[arg(long)]
    guest_no_softrt_slack: bool,
    /// The guests' CFQ and BFQ count `slice_idle` in whole jiffies (HZ /
    /// 125, so none at the default --guest-hz 100), as Linux 3.12 did.
    #[arg(long)]
    guest_slice_idle_jiffies: bool,
    /// Which BFQ the guests run: v7r2 (Linux 3.12's, the published guests')
    /// or mainline.
    #[arg(long, default_value = "v7r2")]
    guest_bfq: String,
    /// `sync` in the guests as since Linux 4.15: its write-back is REQ_SYNC
    /// (the published 3.12 guests wrote it back async).
    #[arg(long)]
    guest_sync_writes_sync: bool,
    /// Guest jiffies that never lag (by default they catch up only after the
    /// interrupt that wakes an idle guest has been handled).
    #[arg(long)]
    guest_exact_ticks: bool,
    /// How QEMU issues guest I/O on the host: threads, native or io_uring.
    #[arg(long, default_value = "native")]
    aio: String,
    /// virtio-blk queue size of the guests.
    #[arg(long, default_value_t = sim::virtio::DEFAULT_VIRTQUEUE_DEPTH)]
    virtqueue_depth: usize,
    /// Coordination channel from guests to host: hypercall, virtio-serial or polling.
    #[arg(long, default_value = "virtio-serial")]
    channel: String,
    /// Longest help lease, in ms: a HELP not renewed ends after it.
    #[arg(long, value_name = "MS")]
    lease_ms: Option<u64>,
    /// Share of the budget window a VM may spend boosted (0 to 1].
    #[arg(long, value_name = "FRACTION")]
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
}

#[derive(Args)]
struct BenchArgs {
    /// Repetitions of the cell to run (more gives a steadier figure).
    #[arg(long, default_value_t = 20)]
    repetitions: u32,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(SimCommand::Run(a)) => sim_run(a),
        Command::Sim(SimCommand::Bench(a)) => sim_bench(a),
        Command::Sim(SimCommand::CpuStudy(a)) => cpu_cmd::run(a),
        Command::Sim(SimCommand::List) => {
            sim_list();
            Ok(())
        }
        Command::Report(a) => report(a),
        Command::Devemu(c) => devemu_cmd::run(c),
        Command::Bench(c) => bench_cmd::run(c),
        Command::Hostd(c) => agent_cmd::run_hostd(c),
        Command::Guestd(a) => agent_cmd::run_guestd(a),
        Command::Hint(a) => agent_cmd::run_hint(a),
        Command::Vm(c) => vm_cmd::run(c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(m)) => {
            eprintln!("tandem: {m}");
            ExitCode::from(2)
        }
        Err(Failure::Run(m)) => {
            eprintln!("tandem: {m}");
            ExitCode::from(1)
        }
    }
}

enum Failure {
    /// Bad input: exit code 2.
    Usage(String),
    /// Something failed while running: exit code 1.
    Run(String),
}

fn knobs_to_opts(k: &SimKnobs) -> Result<sim::bench::SimOptions, Failure> {
    if !(10..=10_000).contains(&k.hz) {
        return Err(Failure::Usage(format!(
            "--hz {}: out of range; accepted: 10 to 10000",
            k.hz
        )));
    }
    if k.queue_depth == Some(0) {
        return Err(Failure::Usage(
            "--queue-depth 0: the device queue depth must be at least 1".into(),
        ));
    }
    if !(10..=10_000).contains(&k.guest_hz) {
        return Err(Failure::Usage(format!(
            "--guest-hz {}: out of range; accepted: 10 to 10000",
            k.guest_hz
        )));
    }
    if k.virtqueue_depth == 0 {
        return Err(Failure::Usage(
            "--virtqueue-depth 0: the virtqueue must hold at least 1 request".into(),
        ));
    }
    let aio = sim::vm::Aio::parse(&k.aio).map_err(|e| Failure::Usage(format!("--aio: {e}")))?;
    let mut opts = sim::bench::SimOptions::default();
    opts.sched_cfg.hz = k.hz;
    opts.sched_cfg.bfq_softrt_tick_slack = !k.no_softrt_slack;
    opts.sched_cfg.low_latency = !k.no_low_latency;
    opts.sched_cfg.slice_idle_in_jiffies = k.slice_idle_jiffies;
    opts.queue_depth = k.queue_depth;
    opts.hdd_params = devmodel::parse_hdd_params(&k.hdd_params)
        .map_err(|e| Failure::Usage(format!("--hdd-param {e}")))?;
    opts.vm.sched_cfg.hz = k.guest_hz;
    opts.vm.sched_cfg.bfq_softrt_tick_slack = !k.guest_no_softrt_slack;
    opts.vm.sched_cfg.low_latency = !k.no_low_latency;
    opts.vm.sched_cfg.slice_idle_in_jiffies = k.guest_slice_idle_jiffies;
    opts.vm.lagging_ticks = !k.guest_exact_ticks;
    opts.vm.aio = aio;
    opts.vm.virtqueue_depth = k.virtqueue_depth;
    opts.sched_cfg.bfq_version = sim::sched::BfqVersion::parse(&k.host_bfq)
        .map_err(|e| Failure::Usage(format!("--host-bfq: {e}")))?;
    opts.vm.sched_cfg.bfq_version = sim::sched::BfqVersion::parse(&k.guest_bfq)
        .map_err(|e| Failure::Usage(format!("--guest-bfq: {e}")))?;
    opts.vm.sync_writes_async = !k.guest_sync_writes_sync;
    opts.coord.channel = sim::coord::Channel::parse(&k.channel)
        .map_err(|e| Failure::Usage(format!("--channel: {e}")))?;
    if let Some(ms) = k.lease_ms {
        opts.coord.policy.max_lease_ns = ms * 1_000_000;
    }
    if let Some(f) = k.budget {
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
    opts.coord
        .policy
        .validate()
        .map_err(|e| Failure::Usage(format!("coordination policy: {e}")))?;
    Ok(opts)
}

fn load_scenario(arg: Option<&str>) -> Result<Scenario, Failure> {
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

fn progress_bar(total: u64, quiet: bool) -> ProgressBar {
    let pb = ProgressBar::new(total);
    if quiet || !std::io::stderr().is_terminal() {
        pb.set_draw_target(ProgressDrawTarget::hidden());
    }
    pb.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} runs  {elapsed_precise} (eta {eta})")
            .expect("valid template"),
    );
    pb
}

fn sim_run(a: RunArgs) -> Result<(), Failure> {
    let opts = knobs_to_opts(&a.knobs)?;
    let scenario = load_scenario(a.scenario.as_deref())?;
    let filter = Filter::parse(&a.only).map_err(Failure::Usage)?;
    let all = scenario.cells();
    filter.check(&all).map_err(Failure::Usage)?;
    let cells: Vec<Cell> = filter.apply(&all);
    if cells.is_empty() {
        return Err(Failure::Usage("no cell matches the --only filters".into()));
    }
    let total: u64 = cells.iter().map(|c| c.repetitions as u64).sum();
    // Work is handed out by repetition, longest-running cells' repetitions
    // interleaved with short ones, so that the cores stay busy to the end.
    let work: Vec<(usize, u32)> = cells
        .iter()
        .enumerate()
        .flat_map(|(i, c)| (0..c.repetitions).map(move |r| (i, r)))
        .collect();
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1)
        .min(work.len().max(1));
    let pb = progress_bar(total, a.quiet);
    let started = std::time::Instant::now();
    let next = AtomicUsize::new(0);
    type Hist = cpusched::cyclictest::Histogram;
    type RunSlot = Option<Result<(experiment::RunResult, Option<Hist>), String>>;
    let runs: Mutex<Vec<Vec<RunSlot>>> = Mutex::new(
        cells
            .iter()
            .map(|c| vec![None; c.repetitions as usize])
            .collect(),
    );
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let w = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(i, rep)) = work.get(w) else {
                    break;
                };
                let r = if cells[i].benchmark == experiment::Benchmark::Latency {
                    sim::cpu_bench::run_latency_rep(&cells[i], rep).map(|(r, h)| (r, Some(h)))
                } else {
                    sim::bench::run_repetition(&cells[i], &opts, rep).map(|r| (r, None))
                };
                runs.lock().expect("no poisoned lock")[i][rep as usize] = Some(r);
                pb.inc(1);
            });
        }
    });
    pb.finish_and_clear();
    let mut out = Vec::with_capacity(cells.len());
    // cyclictest's histograms, one per latency cell (its runs summed).
    let mut hists: Vec<(String, Hist)> = Vec::new();
    for (cell, cell_runs) in cells
        .iter()
        .zip(runs.into_inner().expect("no poisoned lock"))
    {
        let runs = cell_runs
            .into_iter()
            .map(|r| r.expect("every repetition ran"))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Failure::Run)?;
        let mut hist: Option<Hist> = None;
        let mut cell_runs = Vec::with_capacity(runs.len());
        for (run, h) in runs {
            if let Some(h) = h {
                hist.get_or_insert_with(Hist::default).merge(&h);
            }
            cell_runs.push(run);
        }
        if let Some(h) = hist {
            hists.push((sim::cpu_bench::histogram_file_name(cell), h));
        }
        out.extend(sim::cpu_bench::cell_results(cell, cell_runs));
    }
    // Cells whose files did not fit on their disk: say so, loudly, with
    // the first few of them.
    let overlapping: Vec<(String, f64)> = out
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
            out.len(),
            sim::bench::OVERLAPPING_FILE_BYTES
        );
        for (key, bytes) in overlapping.iter().take(3) {
            eprintln!("  {key}: {:.1} GB over others", bytes / 1e9);
        }
    }
    let mut extra = serde_json::Map::new();
    extra.insert("hz".into(), a.knobs.hz.into());
    extra.insert(
        "bfq_softrt_tick_slack".into(),
        (!a.knobs.no_softrt_slack).into(),
    );
    extra.insert("low_latency".into(), (!a.knobs.no_low_latency).into());
    extra.insert("bfq_version".into(), a.knobs.host_bfq.clone().into());
    extra.insert("slice_idle_ns".into(), opts.sched_cfg.slice_idle().into());
    if let Some(d) = a.knobs.queue_depth {
        extra.insert("queue_depth".into(), d.into());
    }
    if !opts.hdd_params.is_empty() {
        let params: serde_json::Map<String, serde_json::Value> = opts
            .hdd_params
            .iter()
            .map(|(k, v)| (k.clone(), (*v).into()))
            .collect();
        extra.insert("hdd_params".into(), params.into());
    }
    if let Some(share) = a.knobs.app_metadata_share {
        extra.insert("app_metadata_share".into(), share.into());
    }
    if scenario.is_vm() {
        extra.insert("guest_hz".into(), a.knobs.guest_hz.into());
        extra.insert(
            "guest_bfq_softrt_tick_slack".into(),
            (!a.knobs.guest_no_softrt_slack).into(),
        );
        extra.insert(
            "guest_lagging_ticks".into(),
            (!a.knobs.guest_exact_ticks).into(),
        );
        extra.insert("guest_bfq_version".into(), a.knobs.guest_bfq.clone().into());
        extra.insert(
            "guest_slice_idle_ns".into(),
            opts.vm.sched_cfg.slice_idle().into(),
        );
        extra.insert(
            "guest_sync_writes_async".into(),
            (!a.knobs.guest_sync_writes_sync).into(),
        );
        extra.insert("aio".into(), a.knobs.aio.clone().into());
        extra.insert("virtqueue_depth".into(), a.knobs.virtqueue_depth.into());
    }
    let meta = RunMeta {
        runner: "sim".into(),
        scenario: scenario.name.clone(),
        tandem_version: env!("CARGO_PKG_VERSION").into(),
        seed: scenario.seed,
        extra,
    };
    let mut written = experiment::write_outputs(&a.out, &meta, &out)
        .map_err(|e| Failure::Run(format!("writing {}: {e}", a.out.display())))?;
    for (name, h) in &hists {
        let path = a.out.join(name);
        std::fs::write(&path, h.to_cyclictest_text())
            .map_err(|e| Failure::Run(format!("writing {}: {e}", path.display())))?;
        written.push(path);
    }
    let table = std::fs::read_to_string(a.out.join("table.txt")).unwrap_or_default();
    print!("{table}");
    eprintln!(
        "tandem: {} cells, {} runs in {:.1} s; {} files in {}",
        cells.len(),
        total,
        started.elapsed().as_secs_f64(),
        written.len(),
        a.out.display()
    );
    Ok(())
}

fn sim_bench(a: BenchArgs) -> Result<(), Failure> {
    let text = EMBEDDED_SCENARIOS
        .iter()
        .find(|(n, _)| *n == "native-hdd")
        .expect("embedded")
        .1;
    let scenario = Scenario::from_toml_str(text, &sim::bench::accepted())
        .map_err(|e| Failure::Run(e.to_string()))?;
    let mut cell = scenario
        .cells()
        .into_iter()
        .find(|c| c.host_sched == "bfq" && c.host_workload == "5r-seq")
        .ok_or_else(|| Failure::Run("native-hdd has no bfq 5r-seq cell".into()))?;
    cell.repetitions = a.repetitions.max(1);
    let opts = sim::bench::SimOptions::default();
    let started = std::time::Instant::now();
    let mut events = 0u64;
    let mut simulated = 0u64;
    for rep in 0..cell.repetitions {
        let (e, t) = sim::bench::count_events(&cell, &opts, rep).map_err(Failure::Run)?;
        events += e;
        simulated += t;
    }
    let wall = started.elapsed().as_secs_f64();
    println!(
        "cell: {} (startup, {} repetitions)\nevents: {events}\nsimulated time: {:.1} s\nwall time: {wall:.3} s (one core)\nevents per second: {:.2} million",
        cell.key(),
        cell.repetitions,
        simulated as f64 / 1e9,
        events as f64 / wall / 1e6
    );
    sim_bench_cpu()
}

/// The CPU-contended cell: cyclictest in a 1-vCPU guest with 1 busy loop,
/// 8 busy loops in the host (fanguede2014, CFS, no coordination).
fn sim_bench_cpu() -> Result<(), Failure> {
    let scenario = load_scenario(Some("fanguede2014"))?;
    let cell = scenario
        .cells()
        .into_iter()
        .find(|c| {
            !c.is_native()
                && c.cpu.host_cpu_load == 8
                && c.cpu.guest_cpu_load == 1
                && c.get("host_cpu_sched").as_deref() == Some("cfs")
                && c.coordination == "off"
        })
        .ok_or_else(|| Failure::Run("fanguede2014 has no 8+1 loop CFS cell".into()))?;
    let started = std::time::Instant::now();
    let (mut events, mut simulated) = (0u64, 0u64);
    for rep in 0..cell.repetitions {
        let (e, t) = sim::cpu_bench::count_events(&cell, rep).map_err(Failure::Run)?;
        events += e;
        simulated += t;
    }
    let wall = started.elapsed().as_secs_f64();
    println!(
        "\ncell: {} (latency, {} x {} loops)\nevents: {events}\nsimulated time: {:.1} s\nwall time: {wall:.3} s (one core)\nevents per second: {:.2} million",
        cell.key(),
        cell.repetitions,
        cell.cpu.loops,
        simulated as f64 / 1e9,
        events as f64 / wall / 1e6
    );
    Ok(())
}

fn sim_list() {
    println!("devices:    {}", devmodel::PRESETS.join(", "));
    println!("schedulers: {}", sim::sched::SCHEDULERS.join(", "));
    println!("apps:       {}", sim::workload::preset_names().join(", "));
    println!(
        "scenarios:  {}",
        EMBEDDED_SCENARIOS
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// `tandem report`: unreadable or malformed inputs are usage errors (exit code 2).
fn report(a: ReportArgs) -> Result<(), Failure> {
    let read = |p: &PathBuf| {
        let f = if p.is_file() {
            p.clone()
        } else {
            p.join("results.json")
        };
        experiment::read_results_json(&f).map_err(Failure::Usage)
    };
    let (meta, results) = read(&a.dir)?;
    if let Some(other) = &a.other {
        if a.paper.is_some() {
            return Err(Failure::Usage(
                "--paper compares one run with published numbers; give one directory".into(),
            ));
        }
        let (other_meta, other_results) = read(other)?;
        let (rows, missing) = experiment::side_by_side::compare(&results, &other_results);
        print!(
            "{}",
            experiment::side_by_side::render(&meta.runner, &other_meta.runner, &rows, &missing)
        );
        return Ok(());
    }
    match &a.paper {
        None => print!("{}", experiment::render_tables(&results)),
        Some(path) => {
            let reference = experiment::read_reference(path).map_err(Failure::Usage)?;
            let cmp = experiment::compare_with_reference(&reference, &results);
            print!("{}", experiment::render_comparison(&cmp));
        }
    }
    Ok(())
}
