//! `tandem bench`: the real runner (crate `bench`).

use clap::{Args, Subcommand};
use experiment::{Cell, Filter, Scenario};
use std::path::PathBuf;

use crate::Failure;

#[derive(Subcommand)]
#[allow(clippy::large_enum_variant)]
pub enum BenchCommand {
    /// Run a scenario's cells for real: native cells on a real or emulated block device, VM cells in a QEMU guest whose disk is on it (needs root).
    Run(BenchRunArgs),
    /// Gone: `tandem report RUN --baseline BASELINE` sets two runs side by side.
    #[command(hide = true)]
    Compare(CompareArgs),
    /// Record a command's cold start-up I/O as an app trace (needs root and python3).
    RecordTrace(RecordTraceArgs),
    /// Undo what runs killed without a chance to clean up (SIGKILL, a crash) left behind: scheduler, mounts, files, emulated devices (needs root; every run does it first; runs that still live are left alone).
    Cleanup,
    /// A background reader or writer of a run (started by `run`).
    #[command(hide = true)]
    Worker(WorkerArgs),
    /// Replay of an app's start-up I/O (started by `run`).
    #[command(hide = true)]
    Replay(ReplayArgs),
    /// Runs `hlt` in a real-mode guest through /dev/kvm (started by the KVM
    /// probe; the exit code says how far it got).
    #[command(hide = true)]
    KvmProbe,
}

#[derive(Args)]
pub struct BenchRunArgs {
    /// Scenario file, or the name of an embedded scenario.
    scenario: String,
    #[command(flatten)]
    runner: crate::RunnerArgs,
    /// A real block device (default: an emulated device of the scenario's preset).
    #[arg(long, value_name = "/dev/X")]
    device: Option<String>,
    /// Directory on the device's filesystem for the workload files (with --device).
    #[arg(long)]
    workdir: Option<PathBuf>,
    /// Size of each background process's file, in MiB (S: 500).
    #[arg(long, default_value_t = 500)]
    file_mib: u64,
    /// Go ahead on --device although it is mounted or holds data (a partition table,
    /// a file system or RAID signature, non-zero bytes at either end), naming the same
    /// device again: an unmounted one is formatted (all on it is lost). Without it a
    /// terminal asks; otherwise the run refuses.
    #[arg(long, value_name = "/dev/X", num_args = 0..=1, default_missing_value = "")]
    force: Option<String>,
    /// The app: a command line to start instead of the scenario's app (a cmd: app).
    #[arg(long, value_name = "COMMAND")]
    app_cmd: Option<String>,
    /// Settle time after starting the workload, in seconds (S: 13).
    #[arg(long)]
    settle_s: Option<f64>,
    /// Pause before each start, in seconds (S: 4).
    #[arg(long)]
    pause_s: Option<f64>,
    /// Repetitions per cell, instead of the scenario's.
    #[arg(long)]
    repetitions: Option<u32>,
    /// Seconds each throughput or profile repetition measures, instead of the
    /// scenario's `duration_s` (e.g. longer real runs of a file whose
    /// duration suits the simulator).
    #[arg(long)]
    duration_s: Option<f64>,
    /// VM cells: a guest image made by `tandem vm image` (default: one is built for the run).
    #[arg(long, value_name = "DIR")]
    vm_image: Option<PathBuf>,
    /// VM cells: QEMU's aio mode for the guest disk.
    #[arg(long, value_enum, default_value_t = crate::QemuAio::Native)]
    vm_aio: crate::QemuAio,
    /// VM cells: QEMU's cache mode for the guest disk (none bypasses the host page cache).
    #[arg(long, default_value = "none",
          value_parser = clap::builder::PossibleValuesParser::new(bench::vm::CACHE_MODES))]
    vm_cache: String,
    /// VM cells: guest memory in MiB.
    #[arg(long, default_value_t = 1024)]
    vm_mem_mib: u32,
    /// VM cells: kvm or tcg instead of probing whether /dev/kvm runs a guest.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(bench::vm::ACCELS))]
    vm_accel: Option<String>,
    /// VM cells: `own` puts QEMU in a cgroup v1 blkio group of its own (as libvirt
    /// does), from which tandem hostd moves its I/O threads to the root while
    /// boosting; `root` leaves QEMU in the root group (RT class alone).
    #[arg(long, value_enum, default_value_t = VmGroup::Own)]
    vm_group: VmGroup,
    /// VM cells, help-rt: the share of each 60 s window tandem hostd lets the
    /// VM spend boosted, in (0, 1] (default: hostd's, 0.5).
    #[arg(long, value_name = "F")]
    hostd_budget_fraction: Option<f64>,
    /// VM cells, cfsv: how tandem hostd favours the QEMU threads it finds
    /// I/O-related: nice (hostd's default), shares, rr or deadline.
    #[arg(long, value_name = "KIND")]
    vm_cfsv_boost: Option<agent::cfsv::CfsvBoost>,
    /// A host scheduler tunable set for every cell, e.g. low_latency=0 (repeatable).
    #[arg(long = "host-tunable", value_name = "KEY=VALUE")]
    host_tunables: Vec<String>,
}

/// Where `bench run` puts QEMU among the cgroup v1 blkio groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum VmGroup {
    /// A group of its own, as libvirt does.
    Own,
    /// The root group.
    Root,
}

#[derive(Args)]
pub struct RecordTraceArgs {
    /// Name of the app: the trace is written to OUT/NAME.trace (default: the command's
    /// file name).
    #[arg(long)]
    name: Option<String>,
    /// Traced cold runs; the most typical one is kept (the others go to OUT/runs/).
    #[arg(long, default_value_t = 3)]
    runs: u32,
    /// Output directory.
    #[arg(long, default_value = "apps")]
    out: PathBuf,
    /// The command needs an X display (an Xvfb is started for it).
    #[arg(long)]
    needs_x: bool,
    /// Longest wait for a quiet machine before each run, in seconds.
    #[arg(long, default_value_t = 60.0)]
    quiet_timeout_s: f64,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

#[derive(Args)]
pub struct CompareArgs {
    /// First results directory (or results.json), e.g. the real run.
    a: PathBuf,
    /// Second results directory (or results.json), e.g. the simulator's.
    b: PathBuf,
}

#[derive(Args)]
pub struct WorkerArgs {
    #[arg(long)]
    kind: String,
    #[arg(long)]
    file: Option<PathBuf>,
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Args)]
pub struct ReplayArgs {
    #[arg(long)]
    app: String,
    #[arg(long)]
    dir: PathBuf,
    /// A hot start: the trace's CPU time done as this many units of work
    /// per µs (the host's rate, `bench::cpuload::work_per_us`).
    #[arg(long, value_name = "UNITS", value_parser = positive_rate)]
    cpu_work_per_us: Option<f64>,
}

/// A work rate: a finite number above 0.
fn positive_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?}: a number above 0")),
    }
}

fn fail(e: bench::Error) -> Failure {
    match e {
        bench::Error::Usage(m) => Failure::Usage(m),
        bench::Error::Run(m) => Failure::Run(m),
    }
}

fn load(arg: &str, app_cmd: Option<&str>) -> Result<Scenario, Failure> {
    let accepted = bench::accepted();
    let path = PathBuf::from(arg);
    let text = if path.exists() {
        std::fs::read_to_string(&path)
            .map_err(|e| Failure::Usage(format!("{}: {e}", path.display())))?
    } else if let Some((_, t)) = crate::EMBEDDED_SCENARIOS.iter().find(|(n, _)| *n == arg) {
        t.to_string()
    } else {
        return Err(Failure::Usage(format!(
            "scenario \"{arg}\": no such file, and not an embedded scenario"
        )));
    };
    let mut s =
        Scenario::from_toml_str(&text, &accepted).map_err(|e| Failure::Usage(e.to_string()))?;
    if s.benchmark == experiment::Benchmark::ReadersHashers {
        return Err(Failure::Usage(format!(
            "benchmark = \"{}\": the real runner runs start-up (cold and hot caches), \
             throughput, latency and profile; readers-hashers runs on the simulator (tandem sim run)",
            s.benchmark
        )));
    }
    // The real runner starts QEMU/KVM guests; Xen is the simulator's only.
    s.check_hypervisor(&[experiment::Hypervisor::Kvm])
        .map_err(|e| {
            Failure::Usage(format!(
                "{e} (tandem bench runs QEMU guests; xen-pv runs on tandem sim run)"
            ))
        })?;
    if let Some(c) = app_cmd {
        if c.trim().is_empty() {
            return Err(Failure::Usage("--app-cmd: empty command".into()));
        }
        // The command replaces the scenario's app.
        s.app = format!("cmd:{c}");
    }
    Ok(s)
}

pub fn run(cmd: BenchCommand) -> Result<(), Failure> {
    match cmd {
        BenchCommand::Run(a) => run_scenario(a),
        BenchCommand::Compare(a) => Err(Failure::Usage(format!(
            "tandem bench compare is gone: tandem report {} --baseline {} sets a run \
             against a baseline, cell by cell",
            a.a.display(),
            a.b.display()
        ))),
        BenchCommand::RecordTrace(a) => record_trace(&a),
        BenchCommand::Cleanup => cleanup(),
        BenchCommand::Worker(a) => {
            let kind = bench::workers::Kind::parse(&a.kind)
                .ok_or_else(|| Failure::Usage(format!("unknown worker kind {:?}", a.kind)))?;
            bench::workers::worker_main(kind, a.file.as_deref(), a.rate, a.seed).map_err(fail)
        }
        BenchCommand::Replay(a) => {
            bench::workers::replay_main(&a.app, &a.dir, a.cpu_work_per_us).map_err(fail)
        }
        BenchCommand::KvmProbe => std::process::exit(bench::vm::kvm_probe_main()),
    }
}

/// `tandem bench run`: the options checked, the run, its table on stdout.
fn run_scenario(a: BenchRunArgs) -> Result<(), Failure> {
    let out = a.runner.out.clone();
    let o = options(a)?;
    let started = std::time::Instant::now();
    let results = bench::run(&o, &out).map_err(fail)?;
    let table = std::fs::read_to_string(out.join("table.txt")).unwrap_or_default();
    print!("{table}");
    // Cells, not result rows (a profile cell has three, a latency cell two).
    let cells: std::collections::BTreeSet<String> = results.iter().map(|r| r.cell.key()).collect();
    eprintln!(
        "tandem: {} cells in {:.1} s; results in {}",
        cells.len(),
        started.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(())
}

/// The cells to run: the scenario's, filtered by `--only`, with
/// `--repetitions` and `--duration-s`.
fn cells(scenario: &Scenario, a: &BenchRunArgs) -> Result<Vec<Cell>, Failure> {
    let filter = Filter::parse(&a.runner.only).map_err(Failure::Usage)?;
    let all = scenario.cells();
    filter.check(&all).map_err(Failure::Usage)?;
    let mut cells: Vec<Cell> = filter.apply(&all);
    if let Some(r) = a.repetitions {
        if r == 0 {
            return Err(Failure::Usage("--repetitions 0: at least 1".into()));
        }
        cells.iter_mut().for_each(|c| c.repetitions = r);
    }
    if let Some(d) = a.duration_s {
        if !(d.is_finite() && d > 0.0) {
            return Err(Failure::Usage(format!(
                "--duration-s {d}: a positive number of seconds"
            )));
        }
        cells.iter_mut().for_each(|c| c.duration_s = d);
    }
    if cells.is_empty() {
        return Err(Failure::Usage("no cell matches the --only filters".into()));
    }
    Ok(cells)
}

/// `--host-tunable KEY=VALUE`s, checked.
fn host_tunables(args: &[String]) -> Result<Vec<(String, String)>, Failure> {
    let mut host_tunables = Vec::new();
    for t in args {
        let (k, v) = t
            .split_once('=')
            .filter(|(k, _)| !k.is_empty() && !k.contains('/'))
            .ok_or_else(|| {
                Failure::Usage(format!(
                    "--host-tunable {t:?}: KEY=VALUE expected, e.g. low_latency=0"
                ))
            })?;
        host_tunables.push((k.to_string(), v.to_string()));
    }
    Ok(host_tunables)
}

/// The run's options from the command line.
fn options(a: BenchRunArgs) -> Result<bench::Options, Failure> {
    let scenario = load(&a.scenario, a.app_cmd.as_deref())?;
    let cells = cells(&scenario, &a)?;
    let cells_len = cells.len();
    if a.file_mib == 0 {
        return Err(Failure::Usage(
            "--file-mib 0: files need at least 1 MiB".into(),
        ));
    }
    if a.runner.jobs.is_some_and(|j| j > 1) && !a.runner.quiet {
        eprintln!(
            "tandem: the real runner runs cells one at a time on one device (--jobs ignored)"
        );
    }
    let exe = std::env::current_exe()
        .map_err(|e| Failure::Run(format!("finding the tandem executable: {e}")))?;
    Ok(bench::Options {
        host_tunables: host_tunables(&a.host_tunables)?,
        vm: vm_options(&a)?,
        scenario,
        cells,
        device: a.device,
        workdir: a.workdir,
        file_bytes: a.file_mib << 20,
        force: a.force,
        settle_s: a.settle_s,
        pause_s: a.pause_s,
        quiet: a.runner.quiet,
        exe,
        provenance: experiment::Provenance::start(
            env!("CARGO_PKG_VERSION"),
            env!("TANDEM_GIT_COMMIT"),
            std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            cells_len,
        ),
    })
}

/// How VM cells run their guest, from the `--vm-*` and `--hostd-*` flags.
fn vm_options(a: &BenchRunArgs) -> Result<bench::VmOptions, Failure> {
    Ok(bench::VmOptions {
        image: a.vm_image.clone(),
        disk: bench::vm::DiskOptions {
            aio: a.vm_aio.to_string(),
            cache: a.vm_cache.clone(),
        },
        mem_mib: a.vm_mem_mib,
        accel: a.vm_accel.clone(),
        own_group: a.vm_group == VmGroup::Own,
        // Checked here, before a guest boots, the way hostd
        // will check it (its policy, with its default window).
        hostd_budget_fraction: match a.hostd_budget_fraction {
            Some(f) => {
                let c = agent::hostd::HostdConfig {
                    budget_fraction: f,
                    ..Default::default()
                };
                c.policy()
                    .map_err(|e| Failure::Usage(format!("--hostd-budget-fraction {f}: {e}")))?;
                Some(f)
            }
            None => None,
        },
        cfsv_boost: a.vm_cfsv_boost.unwrap_or_default(),
        logs: Some(a.runner.out.clone()),
    })
}

/// `tandem bench record-trace`: the trace's path on stdout.
fn record_trace(a: &RecordTraceArgs) -> Result<(), Failure> {
    let name = a.name.clone().unwrap_or_else(|| {
        std::path::Path::new(&a.command[0])
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    let trace = bench::record::record_trace(&bench::record::RecordOptions {
        name,
        command: a.command.clone(),
        runs: a.runs,
        out: a.out.clone(),
        needs_x: a.needs_x,
        quiet_timeout_s: a.quiet_timeout_s,
    })
    .map_err(fail)?;
    println!("{}", trace.display());
    Ok(())
}

/// `tandem bench cleanup`: what interrupted runs left, undone.
fn cleanup() -> Result<(), Failure> {
    devemu::need_root(
        "tandem bench cleanup",
        "it restores schedulers, unmounts file systems and tears down emulated devices",
    )
    .map_err(fail)?;
    let done = bench::recover_interrupted().map_err(fail)?;
    if done.is_empty() {
        println!("nothing to undo: no interrupted run left anything behind");
    }
    for (pid, what) in done {
        println!("run {pid}: {}", what.join("; "));
    }
    Ok(())
}
