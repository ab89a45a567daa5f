//! `tandem hostd`, `tandem guestd`, `tandem hint`: the coordination daemons
//! (crate `agent`).

use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;

use crate::Failure;

#[derive(Subcommand)]
pub enum HostdCommand {
    /// Run the host daemon (needs root): boosts a VM's QEMU threads while its guest asks for help.
    Run(Box<HostdRunArgs>),
    /// Show the VMs, their boosts and the budget used, from a running hostd.
    Status(ControlArgs),
    /// Print a running hostd's Prometheus metrics.
    Metrics(ControlArgs),
    /// Measure the hint latency (guest exec -> boost applied) and hostd's CPU and memory (needs root).
    BenchLatency(LatencyArgs),
    /// Measure hostd's CPU, memory and another VM's boost latency under hostile inputs (needs root).
    BenchHostile(HostileArgs),
    /// A VM-like process whose reads go through a pool of threads (tests).
    #[command(hide = true)]
    FakeVm(FakeVmArgs),
    /// A start-up-like burst of reads through a fake VM (tests).
    #[command(hide = true)]
    FakeBurst(FakeBurstArgs),
    /// An idle process with threads and open files, run under QEMU's name (tests).
    #[command(hide = true)]
    FakeQemu(FakeQemuArgs),
}

#[derive(Args, Clone)]
pub struct HostdRunArgs {
    /// Configuration file (TOML; see docs/protocol.md and the README).
    #[arg(long)]
    config: Option<PathBuf>,
    /// A VM: name=N,(socket=PATH or cid=N),(pid=PID and/or qmp=PATH)[,cgroup=DIR][,connect=1][,weight=W] (repeatable);
    /// cid=CID instead of socket=PATH: the guest's vsock CID (QEMU's guest-cid), served on --vsock-port.
    #[arg(long = "vm", value_name = "SPEC")]
    vms: Vec<String>,
    /// Serve the VMs whose QMP sockets are in this directory, as they come
    /// and go: <DIR>/<name>.qmp with the channel <DIR>/<name>.sock, or
    /// libvirt's <DIR>/domain-<id>-<name>/monitor.sock (see docs/protocol.md).
    #[arg(long, value_name = "DIR")]
    vm_dir: Option<PathBuf>,
    /// Listen for guests on this vsock port (any CID); each connection goes to the VM with the peer's cid=.
    #[arg(long, value_name = "PORT")]
    vsock_port: Option<u32>,
    /// State file with the original values of boosted knobs.
    #[arg(long)]
    state_file: Option<PathBuf>,
    /// Control socket for `tandem hostd status`.
    #[arg(long)]
    control: Option<PathBuf>,
    /// Prometheus metrics on unix:PATH (default: hostd-metrics.sock beside the control socket), HOST:PORT (TCP), or off.
    #[arg(long)]
    metrics: Option<String>,
    /// ioprio actuator (ioprio-rt sets help-rt's knob).
    #[arg(long, value_enum)]
    ioprio: Option<policy::IoprioBoost>,
    /// Level of the RT class the ioprio-rt actuator sets (0-7, default 4).
    #[arg(long, value_name = "LEVEL")]
    ioprio_level: Option<u32>,
    /// BFQ weight of a boosted VM's cgroup, for VMs with cgroup= (1-1000, default 1000).
    #[arg(long, value_name = "W")]
    cgroup_weight: Option<u32>,
    /// Move a boosted VM's I/O threads into this cgroup v1 blkio group (e.g.
    /// the hierarchy's root) until the boost ends, so that BFQ applies the
    /// ioprio boost at once; the VM lives in a group of its own otherwise.
    #[arg(long, value_name = "DIR")]
    boost_cgroup: Option<PathBuf>,
    /// While a VM is boosted, make BFQ idle for it on the host disks under
    /// its images (strict_guarantees 1, slice_idle 32 ms or more): BFQ then
    /// keeps the disk for the VM's next read instead of letting other
    /// requests in between or injecting them.
    #[arg(long)]
    bfq_idling: bool,
    /// The old name of --bfq-idling (deprecated: it goes in the next release).
    #[arg(long, hide = true)]
    bfq_strict: bool,
    /// Messages per second per channel before coalescing.
    #[arg(long)]
    rate_limit: Option<f64>,
    /// Messages a channel may send at once above the rate.
    #[arg(long)]
    rate_burst: Option<f64>,
    /// Bytes per second hostd reads from a channel (a faster guest waits).
    #[arg(long, value_name = "BYTES")]
    rate_limit_bytes: Option<f64>,
    /// Bytes a channel may send at once above that rate (at least 256).
    #[arg(long, value_name = "BYTES")]
    rate_burst_bytes: Option<f64>,
    /// Look for new threads and exited VMs this often (ms).
    #[arg(long)]
    rescan_ms: Option<u64>,
    /// The host's lease on a HELP (ms).
    #[arg(long)]
    lease_ms: Option<u64>,
    /// Share of the budget window a VM may spend boosted, in (0, 1] (default 0.5).
    #[arg(long, value_name = "F")]
    budget_fraction: Option<f64>,
    /// The sliding window over which budgets are counted, seconds (default 60).
    #[arg(long, value_name = "S")]
    budget_window_s: Option<f64>,
    /// Log each HELP after a quiet spell, NO-HELP, boost and unboost, with
    /// the time and the VM's use of its budget.
    #[arg(long)]
    log_boosts: bool,
    #[command(flatten)]
    cpu: CpuBoostArgs,
    #[command(flatten)]
    cfsv: CfsvArgs,
}

/// The `cfsv` mode's flags (keys of the same names in the configuration).
#[derive(Args, Clone)]
pub struct CfsvArgs {
    /// CFS-v on stock Linux: sample every QEMU thread's schedstat, classify
    /// it with CFS-v's 2-bit counter, and favour the I/O-related threads.
    #[arg(long)]
    cfsv: bool,
    /// How: nice (default), shares (a cpu cgroup of their own), rr
    /// (SCHED_RR, low priority) or deadline (SCHED_DEADLINE, 200 us per ms).
    #[arg(long, value_name = "KIND")]
    cfsv_boost: Option<agent::cfsv::CfsvBoost>,
    /// Sampling period (ms, default 25).
    #[arg(long, value_name = "MS")]
    cfsv_period_ms: Option<u64>,
    /// Nice value of an I/O-related thread with --cfsv-boost nice (default -20).
    #[arg(long, value_name = "NICE", allow_hyphen_values = true)]
    cfsv_nice: Option<i32>,
    /// SCHED_RR priority with --cfsv-boost rr (1-99, default 1).
    #[arg(long, value_name = "PRIO")]
    cfsv_rt_priority: Option<i32>,
    /// cpu.shares of the I/O-related threads' group with --cfsv-boost shares (default 262144).
    #[arg(long, value_name = "SHARES")]
    cfsv_shares: Option<u64>,
    /// SCHED_DEADLINE runtime per 1 ms with --cfsv-boost deadline (us, default 200).
    #[arg(long, value_name = "US")]
    cfsv_dl_runtime_us: Option<u64>,
}

impl CfsvArgs {
    /// Sets the configuration's cfsv keys that were given as flags.
    fn apply(self, c: &mut agent::hostd::HostdConfig) {
        if self.cfsv {
            c.cfsv = true;
        }
        if let Some(v) = self.cfsv_boost {
            c.cfsv_boost = v;
        }
        if let Some(v) = self.cfsv_period_ms {
            c.cfsv_period_ms = v;
        }
        if let Some(v) = self.cfsv_nice {
            c.cfsv_nice = v;
        }
        if let Some(v) = self.cfsv_rt_priority {
            c.cfsv_rt_priority = v;
        }
        if let Some(v) = self.cfsv_shares {
            c.cfsv_shares = v;
        }
        if let Some(v) = self.cfsv_dl_runtime_us {
            c.cfsv_dl_runtime_us = v;
        }
    }
}

/// The CPU boost's flags (keys of the same names in the configuration).
#[derive(Args, Clone)]
pub struct CpuBoostArgs {
    /// Boost a VM's vCPU threads (named by QMP: the VM needs qmp=) while its
    /// guest asks for CPU help: off (default), rr (SCHED_RR), nice, or shares
    /// (its QEMU's cgroup v1 cpu.shares).
    #[arg(long, value_name = "KIND")]
    cpu_boost: Option<agent::cpuboost::CpuBoostKind>,
    /// SCHED_RR priority of a boosted vCPU (1-99, default 8 as pvsched).
    #[arg(long, value_name = "PRIO")]
    cpu_rt_priority: Option<i32>,
    /// Nice value of a boosted vCPU with --cpu-boost nice (-20 to 19, default -10).
    #[arg(long, value_name = "NICE", allow_hyphen_values = true)]
    cpu_nice: Option<i32>,
    /// cpu.shares of a boosted VM's group with --cpu-boost shares (default 8192).
    #[arg(long, value_name = "SHARES")]
    cpu_shares: Option<u64>,
    /// The longest a CPU boost lasts at once (ms, at most 1000, the default).
    #[arg(long, value_name = "MS")]
    cpu_max_boost_ms: Option<u64>,
    /// How long a CPU boost that reached that cap is held off (ms, default 1000).
    #[arg(long, value_name = "MS")]
    cpu_throttle_ms: Option<u64>,
    /// Any HELP boosts both the VM's I/O threads and its vCPUs (needs --cpu-boost).
    #[arg(long)]
    help_all: bool,
}

impl CpuBoostArgs {
    /// Sets the configuration's CPU boost keys that were given as flags.
    fn apply(self, c: &mut agent::hostd::HostdConfig) {
        if let Some(v) = self.cpu_boost {
            c.cpu_boost = v;
        }
        if let Some(v) = self.cpu_rt_priority {
            c.cpu_rt_priority = v;
        }
        if let Some(v) = self.cpu_nice {
            c.cpu_nice = v;
        }
        if let Some(v) = self.cpu_shares {
            c.cpu_shares = v;
        }
        if let Some(v) = self.cpu_max_boost_ms {
            c.cpu_max_boost_ms = v;
        }
        if let Some(v) = self.cpu_throttle_ms {
            c.cpu_throttle_ms = v;
        }
        if self.help_all {
            c.help_all = true;
        }
    }
}

#[derive(Args)]
pub struct ControlArgs {
    /// hostd's control socket.
    #[arg(long, default_value = agent::hostd::DEFAULT_CONTROL)]
    control: PathBuf,
}

#[derive(Args)]
pub struct LatencyArgs {
    /// Hints to time.
    #[arg(long, default_value_t = 10_000)]
    hints: usize,
    /// Hints per second in the load phase.
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    /// Seconds of the idle and of the load phase.
    #[arg(long, default_value_t = 10.0)]
    phase_s: f64,
    /// Time CPU hints (a vCPU to SCHED_RR) instead of I/O ones.
    #[arg(long)]
    cpu: bool,
}

#[derive(Args)]
pub struct HostileArgs {
    /// Seconds each hostile input runs while it is measured.
    #[arg(long, default_value_t = 10.0)]
    window_s: f64,
    /// Boosts of the quiet VM timed during each input.
    #[arg(long, default_value_t = 20)]
    trials: usize,
}

#[derive(Args)]
pub struct FakeVmArgs {
    #[arg(long)]
    image: PathBuf,
    #[arg(long, default_value_t = 4)]
    threads: usize,
    #[arg(long)]
    control: PathBuf,
}

#[derive(Args)]
pub struct FakeQemuArgs {
    /// Idle threads beside the main one.
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// A file to hold open for reading (repeatable).
    #[arg(long)]
    read: Vec<PathBuf>,
    /// A file to hold open for writing (repeatable).
    #[arg(long)]
    write: Vec<PathBuf>,
    /// Serve QMP on this unix socket (as QEMU's -qmp unix:PATH,server=on).
    #[arg(long)]
    qmp: Option<PathBuf>,
    /// vCPU threads named as QEMU's ("CPU N/KVM"), listed by QMP.
    #[arg(long, default_value_t = 0)]
    vcpus: usize,
    /// A thread id QMP lists as a vCPU though it is not this process's (repeatable).
    #[arg(long, value_name = "TID")]
    foreign_vcpu: Vec<u32>,
    /// The vCPU threads spin (a guest computing) instead of idling.
    #[arg(long)]
    busy_vcpus: bool,
    /// QMP's `query-kvm` says KVM is off, as QEMU 7.2 under TCG does (and
    /// the vCPU threads are named "CPU N/TCG").
    #[arg(long)]
    tcg: bool,
    /// I/O-ish threads named "worker" (QEMU's thread pool's name): each
    /// works --work-us then sleeps --sleep-us, over and over.
    #[arg(long, default_value_t = 0)]
    workers: usize,
    #[arg(long, value_name = "US", default_value_t = 50)]
    work_us: u64,
    #[arg(long, value_name = "US", default_value_t = 200)]
    sleep_us: u64,
    /// Write the workers' completed operations to this file (every 100 ms).
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
}

#[derive(Args)]
pub struct FakeBurstArgs {
    #[arg(long)]
    control: PathBuf,
    #[arg(long, default_value_t = 40)]
    reads: u64,
    #[arg(long, default_value_t = 64)]
    kib: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Consecutive reads per place (a file read whole).
    #[arg(long, default_value_t = 1)]
    run: u64,
}

#[derive(Args)]
pub struct GuestdArgs {
    /// The channel to the host: unix:PATH, virtio:NAME (/dev/virtio-ports/NAME) or vsock:CID:PORT.
    /// Optional with --mark-ioprio (marking needs no host daemon).
    #[arg(long, required_unless_present = "mark_ioprio")]
    connect: Option<String>,
    /// The VM's name, sent in Hello (default: the host name).
    #[arg(long)]
    name: Option<String>,
    /// Local socket for explicit hints (`tandem hint`).
    #[arg(long, default_value = agent::guestd::DEFAULT_HINT_SOCKET)]
    hint_socket: PathBuf,
    /// Sample /proc/*/io this often (ms).
    #[arg(long, default_value_t = 250)]
    sample_ms: u64,
    /// Do not listen to the process connector (no exec detection; it needs root).
    #[arg(long)]
    no_netlink: bool,
    /// The lease a HELP asks for (ms).
    #[arg(long, default_value_t = 1000)]
    lease_ms: u64,
    /// Log each change between HELP and NO-HELP, with its reason and the event behind it.
    #[arg(long)]
    verbose: bool,
    /// Ask for CPU help too: on a late wake-up of a 10 ms timer, a steal
    /// time rise, runnable RT tasks, an exec or `tandem hint --cpu`.
    #[arg(long)]
    cpu: bool,
    /// Raise each urgent process's I/O priority in the guest (on an exec,
    /// I/O resumed after an idle time, `tandem hint --pid`) for a lease,
    /// for a host backend that honours each virtio-blk request's priority
    /// (`tandem vhost-blk`). `rt` only if the host allows this VM RT I/O.
    #[arg(long, value_enum, value_name = "CLASS")]
    mark_ioprio: Option<MarkIoprio>,
    /// How much I/O time (time the process read or waited on I/O) one
    /// urgent need's mark covers at most (ms), however long the need: what
    /// one start needs (default: the policy crate's
    /// `mark::DEFAULT_MARK_LEASE_NS`); never longer than BFQ's longest
    /// interactive weight raising (25 s of wall time). A marked process that
    /// reads BFQ's `max_service_from_wr` (58.6 MiB) under its mark loses it
    /// sooner.
    #[arg(long, default_value_t = policy::mark::DEFAULT_MARK_LEASE_NS / policy::MS, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    mark_lease_ms: u64,
    /// Mark only the processes of this user (real uid), e.g. a desktop
    /// guest's user, never the system's services.
    #[arg(long, value_name = "UID", requires = "mark_ioprio")]
    mark_uid: Option<u32>,
}

/// The I/O priority guestd marks urgent processes with.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum MarkIoprio {
    /// Real-time, level 0.
    Rt,
    /// Best-effort, level 0.
    Be0,
}

impl From<MarkIoprio> for agent::iomark::MarkClass {
    fn from(m: MarkIoprio) -> Self {
        match m {
            MarkIoprio::Rt => agent::iomark::MarkClass::Rt,
            MarkIoprio::Be0 => agent::iomark::MarkClass::Be0,
        }
    }
}

#[derive(Args)]
pub struct HintArgs {
    /// How long help is needed, e.g. 3s, 500ms.
    #[arg(long = "for", value_name = "DURATION", default_value = "3s")]
    duration: String,
    /// On behalf of this process (its exit ends the need).
    #[arg(long, conflicts_with = "cpu")]
    pid: Option<u32>,
    /// Ask for CPU help (the host boosts the VM's vCPUs) instead of I/O help.
    #[arg(long)]
    cpu: bool,
    /// guestd's hint socket.
    #[arg(long, default_value = agent::guestd::DEFAULT_HINT_SOCKET)]
    socket: PathBuf,
}

fn fail(e: agent::Error) -> Failure {
    Failure::Run(e.0)
}

/// `3s`, `500ms`, `1.5s` -> milliseconds.
fn parse_duration_ms(s: &str) -> Option<u64> {
    let (num, mul) = if let Some(v) = s.strip_suffix("ms") {
        (v, 1.0)
    } else if let Some(v) = s.strip_suffix('s') {
        (v, 1000.0)
    } else {
        (s, 1000.0)
    };
    let v: f64 = num.parse().ok()?;
    let ms = (v * mul).round();
    (v.is_finite() && (1.0..=600_000.0).contains(&ms)).then_some(ms as u64)
}

fn hostd_config(a: HostdRunArgs) -> Result<agent::hostd::HostdConfig, Failure> {
    let mut c = match &a.config {
        Some(p) => {
            let t = std::fs::read_to_string(p)
                .map_err(|e| Failure::Usage(format!("--config {}: {e}", p.display())))?;
            agent::hostd::HostdConfig::from_toml(&t).map_err(|e| Failure::Usage(e.0))?
        }
        None => agent::hostd::HostdConfig::default(),
    };
    for v in &a.vms {
        c.vms
            .push(agent::hostd::parse_vm_arg(v).map_err(|e| Failure::Usage(e.0))?);
    }
    if a.vm_dir.is_some() {
        c.vm_dir = a.vm_dir;
    }
    if let Some(v) = a.state_file {
        c.state_file = v;
    }
    if let Some(v) = a.control {
        c.control = v;
    }
    if a.metrics.is_some() {
        c.metrics = a.metrics;
    }
    if a.vsock_port.is_some() {
        c.vsock_port = a.vsock_port;
    }
    if let Some(v) = a.ioprio {
        c.ioprio = v;
    }
    if a.boost_cgroup.is_some() {
        c.boost_cgroup = a.boost_cgroup;
    }
    if let Some(v) = a.rate_limit {
        c.rate_limit = v;
    }
    if let Some(v) = a.rate_burst {
        c.rate_burst = v;
    }
    if let Some(v) = a.rate_limit_bytes {
        c.rate_limit_bytes = v;
    }
    if let Some(v) = a.rate_burst_bytes {
        c.rate_burst_bytes = v;
    }
    if let Some(v) = a.rescan_ms {
        c.rescan_ms = v;
    }
    if let Some(v) = a.lease_ms {
        c.lease_ms = v;
    }
    if let Some(v) = a.ioprio_level {
        c.ioprio_level = v;
    }
    if let Some(v) = a.cgroup_weight {
        c.cgroup_weight = v;
    }
    if let Some(v) = a.budget_fraction {
        c.budget_fraction = v;
    }
    if let Some(v) = a.budget_window_s {
        c.budget_window_s = v;
    }
    if a.bfq_strict {
        agent::logging::config_warning(
            "--bfq-strict is deprecated and will go in the next release: write --bfq-idling",
        );
    }
    if a.bfq_idling || a.bfq_strict {
        c.bfq_idling = true;
    }
    if a.log_boosts {
        c.log_boosts = true;
    }
    a.cpu.apply(&mut c);
    a.cfsv.apply(&mut c);
    c.validate().map_err(|e| Failure::Usage(e.0))?;
    Ok(c)
}

pub fn run_hostd(cmd: HostdCommand) -> Result<(), Failure> {
    match cmd {
        HostdCommand::Run(a) => {
            let args = (*a).clone();
            let c = hostd_config(*a)?;
            if !agent::is_root() {
                return Err(Failure::Run(
                    "hostd needs root: it sets the I/O priority of QEMU's threads".into(),
                ));
            }
            // A pid that is not a QEMU process is bad input.
            c.check_processes().map_err(|e| Failure::Usage(e.0))?;
            // SIGHUP reads the configuration file and the command line again.
            let reload = move || {
                hostd_config(args.clone()).map_err(|f| match f {
                    Failure::Usage(m) | Failure::Run(m) => agent::err(m),
                    Failure::Interrupted(code) => agent::err(format!("interrupted ({code})")),
                })
            };
            agent::hostd::Hostd::new(c)
                .map_err(fail)?
                .reload_with(Box::new(reload))
                .run()
                .map_err(fail)
        }
        HostdCommand::Status(a) => {
            print!(
                "{}",
                agent::hostd::query(&a.control, "status").map_err(fail)?
            );
            Ok(())
        }
        HostdCommand::Metrics(a) => {
            print!(
                "{}",
                agent::hostd::query(&a.control, "metrics").map_err(fail)?
            );
            Ok(())
        }
        HostdCommand::BenchLatency(a) => {
            if a.hints == 0 || a.rate <= 0.0 || a.phase_s <= 0.0 {
                return Err(Failure::Usage(
                    "--hints, --rate and --phase-s must be positive".into(),
                ));
            }
            let exe = std::env::current_exe().map_err(|e| Failure::Run(e.to_string()))?;
            let o = agent::latency::LatencyOptions {
                exe,
                hints: a.hints,
                rate: a.rate,
                phase_s: a.phase_s,
                cpu: a.cpu,
            };
            print!("{}", agent::latency::bench_latency(&o).map_err(fail)?);
            Ok(())
        }
        HostdCommand::BenchHostile(a) => {
            if !(a.window_s.is_finite() && a.window_s > 0.0 && a.window_s <= 600.0) || a.trials == 0
            {
                return Err(Failure::Usage(
                    "--window-s must be in (0, 600] and --trials at least 1".into(),
                ));
            }
            let exe = std::env::current_exe().map_err(|e| Failure::Run(e.to_string()))?;
            let o = agent::hostile::HostileOptions {
                exe,
                window_s: a.window_s,
                trials: a.trials,
            };
            let rows = agent::hostile::bench_hostile(&o).map_err(fail)?;
            print!("{}", agent::hostile::table(&rows));
            Ok(())
        }
        HostdCommand::FakeVm(a) => {
            agent::testkit::fake_vm_main(&a.image, a.threads, &a.control).map_err(fail)
        }
        HostdCommand::FakeQemu(a) => {
            agent::testkit::fake_qemu_main(&agent::testkit::FakeQemuSpec {
                threads: a.threads,
                vcpus: a.vcpus,
                foreign_vcpus: a.foreign_vcpu,
                read: a.read,
                write: a.write,
                qmp: a.qmp,
                busy_vcpus: a.busy_vcpus,
                tcg: a.tcg,
                workers: a.workers,
                work_us: a.work_us,
                sleep_us: a.sleep_us,
                report: a.report,
            })
            .map_err(fail)
        }
        HostdCommand::FakeBurst(a) => {
            let s = agent::testkit::burst_main(&a.control, a.reads, a.kib, a.seed, a.run)
                .map_err(fail)?;
            println!("{s:.6}");
            Ok(())
        }
    }
}

pub fn run_guestd(a: GuestdArgs) -> Result<(), Failure> {
    let endpoint = a
        .connect
        .as_deref()
        .map(agent::transport::Endpoint::parse)
        .transpose()
        .map_err(|e| Failure::Usage(e.0))?;
    let name = match a.name {
        Some(n) => n,
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "guest".into()),
    };
    agent::guestd::run(agent::guestd::GuestdOptions {
        endpoint,
        name,
        hint_socket: a.hint_socket,
        sample_ms: a.sample_ms,
        netlink: !a.no_netlink,
        lease_ms: a.lease_ms,
        verbose: a.verbose,
        cpu: a.cpu,
        mark: a.mark_ioprio.map(Into::into),
        mark_lease_ms: a.mark_lease_ms,
        mark_uid: a.mark_uid,
    })
    .map_err(fail)
}

pub fn run_hint(a: HintArgs) -> Result<(), Failure> {
    let ms = parse_duration_ms(&a.duration).ok_or_else(|| {
        Failure::Usage(format!(
            "--for {:?}: expected a duration from 1ms to 600s, e.g. 3s or 500ms",
            a.duration
        ))
    })?;
    let hint = agent::guestd::Hint {
        ms,
        pid: a.pid,
        cpu: a.cpu,
    };
    agent::guestd::send_hint(&a.socket, hint).map_err(fail)
}

#[cfg(test)]
mod tests {
    /// One name per knob: each configuration key of hostd is a flag of
    /// `tandem hostd run` with dashes for underscores, and each flag a key
    /// (but --config, the file itself, and --log-format, set before the
    /// file is read); both lists come from the code.
    #[test]
    fn every_hostd_config_key_is_a_flag_and_every_flag_a_key() {
        use clap::CommandFactory;
        #[derive(clap::Parser)]
        struct Run {
            #[command(flatten)]
            a: super::HostdRunArgs,
        }
        let flags: std::collections::BTreeSet<String> = Run::command()
            .get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long().map(|l| l.replace('-', "_")))
            .filter(|l| !["config", "help", "log_format"].contains(&l.as_str()))
            .collect();
        let keys: std::collections::BTreeSet<String> =
            agent::hostd::HostdConfig::keys().into_iter().collect();
        assert!(keys.len() > 15, "{keys:?}");
        assert_eq!(
            keys.difference(&flags).collect::<Vec<_>>(),
            Vec::<&String>::new(),
            "keys without a flag"
        );
        assert_eq!(
            flags.difference(&keys).collect::<Vec<_>>(),
            Vec::<&String>::new(),
            "flags without a key"
        );
        // The old names are hidden flags or deprecated keys, not knobs.
        for (old, new) in agent::hostd::DEPRECATED_KEYS {
            assert!(!keys.contains(*old) && keys.contains(*new), "{old} {new}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(super::parse_duration_ms("3s"), Some(3000));
        assert_eq!(super::parse_duration_ms("500ms"), Some(500));
        assert_eq!(super::parse_duration_ms("1.5"), Some(1500));
        assert_eq!(super::parse_duration_ms("0s"), None);
        assert_eq!(super::parse_duration_ms("x"), None);
    }
}
