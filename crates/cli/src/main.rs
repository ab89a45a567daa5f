//! The `tandem` binary: subcommands only; the work is done by the crates.

use clap::{Args, Parser, Subcommand};
use experiment::Scenario;
use std::path::PathBuf;
use std::process::ExitCode;

mod advise_cmd;
mod agent_cmd;
mod bench_cmd;
mod cfsv_cmd;
mod cpu_cmd;
mod devemu_cmd;
mod diskio_cmd;
mod logging;
mod report_cmd;
mod sim_cmd;
mod sim_pool;
mod vhost_cmd;
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
    (
        "fanguede-real",
        include_str!("../../../scenarios/fanguede-real.toml"),
    ),
    (
        "fanguede-real-startup",
        include_str!("../../../scenarios/fanguede-real-startup.toml"),
    ),
    ("help-all", include_str!("../../../scenarios/help-all.toml")),
    ("xen2tier", include_str!("../../../scenarios/xen2tier.toml")),
    ("cfsv", include_str!("../../../scenarios/cfsv.toml")),
    (
        "two-tier-kvm",
        include_str!("../../../scenarios/two-tier-kvm.toml"),
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
    /// How diagnostics on stderr are written: text lines or one JSON object a line. RUST_LOG filters them (default: info).
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: logging::LogFormat,
}

/// What every runner takes besides its scenario (the DESIGN contract: `--out`,
/// `--only`, `--jobs`, `--quiet`), flattened into `sim run` and `bench run`.
#[derive(Args, Clone)]
pub struct RunnerArgs {
    /// Output directory.
    #[arg(long, default_value = "out")]
    pub out: PathBuf,
    /// Only run cells with KEY=VALUE (repeatable; repeated keys OR, different keys AND).
    #[arg(long = "only", value_name = "KEY=VALUE")]
    pub only: Vec<String>,
    /// Repetitions run in parallel (default: the number of cores); the real
    /// runner accepts it and runs cells one at a time, since they share one device.
    #[arg(long)]
    pub jobs: Option<usize>,
    /// No progress bar or progress lines.
    #[arg(long)]
    pub quiet: bool,
}

/// QEMU's `-drive aio=` mode, for `sim run --aio` and `bench run --vm-aio`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
pub enum QemuAio {
    /// A pool of worker threads doing blocking, buffered I/O.
    #[value(name = "threads")]
    #[serde(rename = "threads")]
    Threads,
    /// One iothread with Linux AIO and O_DIRECT.
    #[value(name = "native")]
    #[serde(rename = "native")]
    Native,
    /// One iothread with io_uring and O_DIRECT (the simulator models it as native).
    #[value(name = "io_uring")]
    #[serde(rename = "io_uring")]
    IoUring,
}

impl QemuAio {
    /// The name QEMU takes.
    pub fn name(self) -> &'static str {
        match self {
            QemuAio::Threads => "threads",
            QemuAio::Native => "native",
            QemuAio::IoUring => "io_uring",
        }
    }

    /// How the simulator models it.
    pub fn sim(self) -> sim::vm::Aio {
        match self {
            QemuAio::Threads => sim::vm::Aio::Threads,
            QemuAio::Native | QemuAio::IoUring => sim::vm::Aio::IoThread,
        }
    }
}

impl std::fmt::Display for QemuAio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

// The command enums are built once per process from the command line: the
// size of their largest variant costs nothing worth boxing for.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// The deterministic simulator.
    #[command(subcommand)]
    Sim(SimCommand),
    /// Print the tables of a run, or set it against a baseline run or published numbers.
    Report(report_cmd::ReportArgs),
    /// A host and a guest I/O scheduler for an FFSB-style profile, from a simulated sweep or from results.
    Advise(advise_cmd::AdviseArgs),
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
    /// A vhost-user-blk backend that issues each guest request with the guest's I/O priority.
    VhostBlk(vhost_cmd::VhostBlkArgs),
}

#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum SimCommand {
    /// Run a scenario's cells and write results, tables and plots.
    Run(sim_cmd::RunArgs),
    /// Measure simulated events per second on the 5-reader BFQ hdd-1.8in cell and on
    /// the CPU-contended cyclictest cell (8 host loops, 1 guest loop).
    Bench(BenchArgs),
    /// List devices, schedulers, apps and embedded scenarios.
    List,
    /// The coordinated task scheduling study's latency tables on the CPU model.
    CpuStudy(cpu_cmd::CpuStudyArgs),
    /// The CFS-v experiment on the CPU model, against the slides' figures.
    CfsvStudy(cfsv_cmd::CfsvStudyArgs),
}

#[derive(Args)]
struct BenchArgs {
    /// Repetitions of the cell to run (more gives a steadier figure).
    #[arg(long, default_value_t = 20)]
    repetitions: u32,
    /// Run the start-up cell's processes on this platform's CPU model (the
    /// events counted are the machine's and the model's).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(cpusched::platform::PRESETS))]
    platform: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(m) = logging::init(cli.log_format) {
        eprintln!("tandem: {m}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Sim(SimCommand::Run(a)) => sim_cmd::sim_run(a),
        Command::Sim(SimCommand::Bench(a)) => sim_bench(a),
        Command::Sim(SimCommand::CpuStudy(a)) => cpu_cmd::run(a),
        Command::Sim(SimCommand::CfsvStudy(a)) => cfsv_cmd::run(a),
        Command::Sim(SimCommand::List) => {
            sim_list();
            Ok(())
        }
        Command::Report(a) => report_cmd::report(a),
        Command::Advise(a) => advise_cmd::run(a),
        Command::Devemu(c) => devemu_cmd::run(c),
        Command::Bench(c) => bench_cmd::run(c),
        Command::Hostd(c) => agent_cmd::run_hostd(c),
        Command::Guestd(a) => agent_cmd::run_guestd(a),
        Command::Hint(a) => agent_cmd::run_hint(a),
        Command::Vm(c) => vm_cmd::run(c),
        Command::VhostBlk(a) => vhost_cmd::run(a),
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
        Err(Failure::Interrupted(code)) => ExitCode::from(code),
    }
}

enum Failure {
    /// Bad input: exit code 2.
    Usage(String),
    /// Something failed while running: exit code 1.
    Run(String),
    /// A signal stopped the run after what it measured was written: the shell's
    /// code for the signal (130 for SIGINT, 143 for SIGTERM).
    Interrupted(u8),
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
        .find(|c| c.host_sched == experiment::IoSched::Bfq && c.host_workload.name() == "5r-seq")
        .ok_or_else(|| Failure::Run("native-hdd has no bfq 5r-seq cell".into()))?;
    cell.repetitions = a.repetitions.max(1);
    let opts = sim::bench::SimOptions {
        platform: a.platform.clone(),
        ..sim::bench::SimOptions::default()
    };
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
    let scenario = sim_cmd::load_scenario(Some("fanguede2014"))?;
    let cell = scenario
        .cells()
        .into_iter()
        .find(|c| {
            !c.is_native()
                && c.cpu.host_cpu_load == 8
                && c.cpu.guest_cpu_load == 1
                && c.get("host_cpu_sched").as_deref() == Some("cfs")
                && c.coordination.is_off()
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
    println!("schedulers: {}", sim::bench::schedulers().join(", "));
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
