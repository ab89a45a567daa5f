//! The S suite's benchmarks, run on a simulated machine: start-up time of an
//! application with cold caches under a background workload, and aggregate
//! throughput of the workload. The procedure itself (the order of its
//! steps, its cache drops, waits, timeout and samples) is
//! `experiment::procedure`, shared with the real runner; this module builds
//! the simulated machine of a cell and implements the procedure's steps on
//! it ([`SimHost`]).

use crate::coord::{CoordConfig, Coordination};
use crate::engine::Rng;
use crate::fs::FileId;
use crate::iosched::{BfqVersion, SchedConfig};
use crate::machine::{
    secs, to_secs, CpuConfig, KernelId, Machine, MachineConfig, HOST, WORKLOAD_FILE_BYTES,
};
use crate::request::{IoPrio, Pid};
use crate::vm::VmConfig;
use crate::workload::{self, AppTrace};
use devmodel::Nanos;
use experiment::procedure::{self, Scope, Waits};
use experiment::{
    suite, Benchmark, Cell, CellResult, Metric, OtherVm, Pattern, RunResult, WorkloadSpec,
};
use std::sync::Arc;

/// The suite's pause before a start is two `sleep`s and a few commands of
/// a shell script (cache drop, `date`, the command line being parsed): a
/// real run never starts two repetitions at the same instant relative to
/// the background readers. A start is delayed by up to 50 ms more, drawn
/// from the repetition's random stream, so that repetitions differ as real
/// ones do even when every workload is sequential.
const START_JITTER_NS: Nanos = 50_000_000;

/// Knobs of the simulated runs beyond the scenario.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// The host kernel's scheduler tunables.
    pub sched_cfg: SchedConfig,
    /// Override the device's queue depth.
    pub queue_depth: Option<usize>,
    /// The host driver's dispatch depth in front of the device's queue
    /// (`MachineConfig::dispatch_depth`, `--dispatch-depth`).
    pub dispatch_depth: Option<usize>,
    /// HDD parameters set over the preset's (`--hdd-param`): the knobs of
    /// a device calibration. Flash devices ignore them.
    pub hdd_params: Vec<(String, f64)>,
    /// What every VM is made of (its `sched` is replaced by the cell's
    /// guest scheduler, or for the other VMs by the same).
    pub vm: VmConfig,
    /// Coordination between guests and host (its `mode` is replaced by the
    /// cell's `coordination`).
    pub coord: CoordConfig,
    /// Replay this share of the app's filesystem-metadata reads instead of
    /// its preset's (`AppTrace::with_metadata_share` on the recorded trace):
    /// what the calibration of `xterm-2014` sweeps.
    pub app_metadata_share: Option<f64>,
    /// Run on this platform's CPU model instead of the scenario's
    /// (`--platform`); a scenario that names none, and no override, runs
    /// with a core per process.
    pub platform: Option<String>,
    /// The platform's speed relative to the recorded machine instead of
    /// its preset's (`--cpu-speed`): what the calibration sweeps.
    pub cpu_speed: Option<f64>,
    /// Charge the per-request CPU costs (system calls, block layer,
    /// interrupts, copies, QEMU) on the CPU model; off leaves the app's
    /// recorded bursts only (`--no-cpu-io-costs`).
    pub cpu_io_costs: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            sched_cfg: SchedConfig::default(),
            queue_depth: None,
            dispatch_depth: None,
            hdd_params: Vec::new(),
            vm: guest_defaults(),
            coord: CoordConfig::default(),
            app_metadata_share: None,
            platform: None,
            cpu_speed: None,
            cpu_io_costs: true,
        }
    }
}

/// The guests of the published runs: Linux 3.12 on ARM, HZ=100, BFQ v7r2
/// (see `iosched::BfqVersion`), and a `sync` whose writes are async.
pub fn guest_defaults() -> VmConfig {
    let mut vm = VmConfig::default();
    vm.sched_cfg.bfq.version = BfqVersion::V7r2;
    vm.sync_writes_async = true;
    vm
}

/// Devices the simulator knows.
pub fn devices() -> Vec<String> {
    devmodel::PRESETS.iter().map(|s| s.to_string()).collect()
}

/// Schedulers the simulator knows.
pub fn schedulers() -> Vec<String> {
    crate::iosched::SCHEDULERS
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// What `tandem sim run` accepts in a scenario: every device preset,
/// scheduler it implements and coordination mode.
pub fn accepted() -> experiment::Accepted {
    experiment::Accepted {
        devices: experiment::Device::all().collect(),
        host_scheds: crate::iosched::SCHEDULERS.to_vec(),
        guest_scheds: crate::iosched::SCHEDULERS.to_vec(),
        coordination: Coordination::ALL.to_vec(),
        apps: workload::preset_names(),
        allow_cmd_apps: false,
        allow_vm: true,
    }
}

/// A machine set up for one repetition of a cell, with its workloads
/// running.
pub struct Setup {
    pub machine: Machine,
    /// The kernel the app starts in and whose disk throughput counts: the
    /// host for native cells, VM 1's guest for VM cells.
    pub app_kernel: KernelId,
    pub app: Option<(Arc<AppTrace>, Vec<FileId>)>,
    /// Other kernels that start the app at the same moments (VMs with the
    /// `app` role), with the app's files there.
    pub other_apps: Vec<(KernelId, Vec<FileId>)>,
    /// Number of VMs (0 for native cells).
    pub vms: usize,
    /// Every workload started, for the settle time.
    pub workloads: Vec<WorkloadSpec>,
    /// Size of each workload file ([`workload_file_bytes`]).
    pub workload_file_bytes: u64,
    /// The host's and VM 1's workload processes.
    pub workload_cpu: WorkloadCpu,
}

/// Builds the machine of a cell: device, host elevator and host workload;
/// for VM cells, VM 1 with the guest elevator, the app's files and the
/// guest workload. Starts the workloads.
pub fn setup(cell: &Cell, opts: &SimOptions, seed: u64) -> Result<Setup, String> {
    let host_workload = cell.host_workload;
    let cfg = MachineConfig {
        device: cell.device.to_string(),
        queue_depth: opts.queue_depth,
        dispatch_depth: opts.dispatch_depth,
        hdd_params: opts.hdd_params.clone(),
        sched: cell.host_sched.to_string(),
        sched_cfg: opts.sched_cfg.clone(),
        cpu: cpu_config(cell, opts)?,
        ..MachineConfig::default()
    };
    let mut m = Machine::new(&cfg, seed)?;
    let mode = cell.coordination;
    if !mode.is_off() && cell.guest_sched.is_none() {
        return Err(format!(
            "coordination \"{}\" needs VM cells (a guest_sched)",
            cell.coordination
        ));
    }
    m.set_coordination(CoordConfig {
        mode,
        ..opts.coord.clone()
    })?;
    let mut workloads = vec![host_workload];
    let other_vms = match &cell.guest_sched {
        Some(_) => cell.other_vms.vms.clone(),
        None => Vec::new(),
    };
    let guest_workload = cell.guest_workload;
    let file_bytes = {
        let files = std::iter::once(&host_workload)
            .chain(guest_workload.as_ref())
            .chain(other_vms.iter().filter_map(|o| match o {
                OtherVm::Workload(w) | OtherVm::Greedy(w) => Some(w),
                OtherVm::App => None,
            }))
            .map(|w| (w.readers + w.writers) as u64)
            .sum();
        workload_file_bytes(m.capacity_bytes(HOST), files)
    };
    let app_kernel = match &cell.guest_sched {
        None => HOST,
        Some(gs) => {
            let vm_cfg = VmConfig {
                sched: gs.to_string(),
                ..opts.vm.clone()
            };
            let (guest, vm) = m.add_vm(&vm_cfg, &image_path(1))?;
            if mode.when() == policy::mode::When::Always && mode.is_io() {
                m.set_static_boost(vm);
            }
            if mode.when() == policy::mode::When::Always && mode.boosts_vcpus() {
                m.set_static_vcpu_boost(vm);
            }
            guest
        }
    };

    // The application's files, placed in path order as an installed
    // system has them.
    let app = match app_trace(cell, opts)? {
        Some(trace) => {
            let ids = install_app(&mut m, app_kernel, &trace);
            Some((Arc::new(trace), ids))
        }
        None => None,
    };

    // The host's busy loops run on the CPU model; without one (no
    // platform) there are no host CPUs to load, and the cell runs as if
    // they were absent (the real runner's CFS-v throughput cells).
    if m.has_cpu_model() && cell.cpu.host_cpu_load > 0 {
        m.add_host_cpu_loops(cell.cpu.host_cpu_load as usize)?;
    }
    let mut workload_cpu = WorkloadCpu {
        host: start_workload(&mut m, HOST, &host_workload, file_bytes),
        guest: Vec::new(),
    };
    if let Some(gw) = guest_workload {
        workload_cpu.guest = start_workload(&mut m, app_kernel, &gw, file_bytes);
        workloads.push(gw);
    }
    // VMs 2..N, each with its own image on the host and the cell's guest
    // scheduler, running their workloads.
    let mut other_apps = Vec::new();
    let mut vms = 0;
    if let Some(gs) = &cell.guest_sched {
        vms = 1;
        for (i, other) in other_vms.iter().enumerate() {
            let vm_cfg = VmConfig {
                sched: gs.to_string(),
                ..opts.vm.clone()
            };
            let (guest, vm) = m.add_vm(&vm_cfg, &image_path(i + 2))?;
            vms += 1;
            match other {
                OtherVm::Workload(w) => {
                    start_workload(&mut m, guest, w, file_bytes);
                    workloads.push(*w);
                }
                OtherVm::Greedy(w) => {
                    m.set_greedy(vm);
                    start_workload(&mut m, guest, w, file_bytes);
                    workloads.push(*w);
                }
                OtherVm::App => {
                    if let Some((trace, _)) = &app {
                        let ids = install_app(&mut m, guest, trace);
                        other_apps.push((guest, ids));
                    }
                }
            }
        }
    }
    Ok(Setup {
        machine: m,
        app_kernel,
        app,
        other_apps,
        vms,
        workloads,
        workload_file_bytes: file_bytes,
        workload_cpu,
    })
}

/// The CPU model of a cell's machine: the platform `--platform` or the
/// scenario names, with the cell's CPU schedulers and vCPUs; `None` when
/// neither names one (a core per process, the recorded machine's speed).
pub fn cpu_config(cell: &Cell, opts: &SimOptions) -> Result<Option<CpuConfig>, String> {
    let name = match &opts.platform {
        Some(p) => p.as_str(),
        None if cell.cpu.platform != experiment::cpu::DEFAULT_PLATFORM => &cell.cpu.platform,
        None => return Ok(None),
    };
    let mut platform = cpusched::Platform::preset(name)?;
    if let Some(speed) = opts.cpu_speed {
        if !(speed.is_finite() && speed > 0.0) {
            return Err(format!("CPU speed {speed}: must be a positive number"));
        }
        platform.speed = speed;
    }
    let fair = crate::cpu_bench::fair;
    Ok(Some(CpuConfig {
        platform,
        host: crate::xen_cpu::host_sched(cell)?,
        guest: fair(cell.cpu.guest_sched()),
        vcpus: cell.cpu.vcpus as usize,
        no_io_costs: !opts.cpu_io_costs,
    }))
}

/// The app's recorded start-up for a start-up cell (with the metadata share
/// of `--app-metadata-share`, if set); `None` for other benchmarks.
fn app_trace(cell: &Cell, opts: &SimOptions) -> Result<Option<AppTrace>, String> {
    if cell.benchmark != Benchmark::Startup {
        return Ok(None);
    }
    match opts.app_metadata_share {
        Some(share) => workload::preset_with_metadata_share(&cell.app, share),
        None => workload::preset(&cell.app),
    }
    .map(Some)
    .ok_or_else(|| {
        format!(
            "unknown app \"{}\"; accepted: {}",
            cell.app,
            workload::preset_names().join(", ")
        )
    })
}

/// Places the app's files in kernel `k`, in path order as an installed
/// system has them; returns their ids in trace order.
fn install_app(m: &mut Machine, k: KernelId, trace: &AppTrace) -> Vec<FileId> {
    let mut order: Vec<usize> = (0..trace.files.len()).collect();
    order.sort_by(|&a, &b| trace.files[a].path.cmp(&trace.files[b].path));
    let mut ids = vec![0; trace.files.len()];
    for i in order {
        let f = &trace.files[i];
        ids[i] = m.add_file(k, &f.path, f.size.max(1));
    }
    ids
}

/// `overlapping_file_bytes`, when files of the run did not fit on their
/// disk and were placed over others: such a run's seeks and sharing are
/// not physical, and the command line warns about it. And
/// `workload_file_mib` when the workload files were made smaller than the
/// suite's to fit on the device.
fn layout_counters(m: &Machine, workload_file_bytes: u64, out: &mut RunResult) {
    let bytes = m.overlapping_file_bytes();
    if bytes > 0 {
        out.counters
            .insert(OVERLAPPING_FILE_BYTES.into(), bytes as f64);
    }
    if workload_file_bytes < WORKLOAD_FILE_BYTES {
        out.counters
            .insert(WORKLOAD_FILE_MIB.into(), (workload_file_bytes >> 20) as f64);
    }
}

/// The run counter of the workload files' size when it is not the suite's.
pub const WORKLOAD_FILE_MIB: &str = "workload_file_mib";

/// The run counter of files placed over others (see `layout_counters`).
pub const OVERLAPPING_FILE_BYTES: &str = "overlapping_file_bytes";

/// Per-run counters of coordination: for each VM `n` (from 1), the time
/// the host boosted it (`vm<n>_boosted_s`) and the HELP messages it sent
/// (`vm<n>_helps`), plus the run's simulated length (`run_s`), so that
/// `boosted / run` is the share of the run each VM spent boosted.
fn coord_counters(m: &Machine, vms: usize, out: &mut RunResult) {
    if vms == 0 {
        return;
    }
    out.counters.insert("run_s".into(), to_secs(m.now()));
    for vm in 0..vms {
        let s = m.coord_stats(vm);
        out.counters
            .insert(format!("vm{}_boosted_s", vm + 1), to_secs(s.boosted_ns));
        // The vCPU boost (only where a mode boosts vCPUs, so the other
        // modes' results are unchanged).
        if s.vcpu_boosted_ns > 0 {
            out.counters.insert(
                format!("vm{}_vcpu_boosted_s", vm + 1),
                to_secs(s.vcpu_boosted_ns),
            );
        }
        out.counters
            .insert(format!("vm{}_helps", vm + 1), s.helps_sent as f64);
        // `vhost-ioprio`'s backend: requests issued, and how many the
        // guest marked RT and the host got as RT (only in that mode, so the
        // other modes' results are unchanged).
        if s.backend_requests > 0 {
            let n = vm + 1;
            for (name, v) in [
                ("marks", s.marks),
                ("backend_requests", s.backend_requests),
                ("guest_rt_requests", s.guest_rt_requests),
                ("host_rt_requests", s.host_rt_requests),
                ("rt_demoted", s.rt_demoted),
            ] {
                out.counters.insert(format!("vm{n}_{name}"), v as f64);
            }
        }
    }
}

/// The read and write throughput of disk `k`'s completions since `from` (sectors read,
/// sectors written, time), in MB/s (10^6 bytes): the run counters that fill the
/// throughput sections of S-style stat files, as S's iostat samples of the disk do.
fn io_counters(m: &Machine, k: KernelId, from: (u64, u64, Nanos), out: &mut RunResult) {
    let (r, w) = m.sectors_done(k);
    let s = to_secs(m.now() - from.2);
    if s > 0.0 {
        let mb_s = |sectors: u64| sectors as f64 * 512.0 / 1e6 / s;
        out.counters
            .insert(experiment::s_suite::READ_MB_S.into(), mb_s(r - from.0));
        out.counters
            .insert(experiment::s_suite::WRITE_MB_S.into(), mb_s(w - from.1));
    }
}

/// Where VM `n`'s image file lives on the host (VMs count from 1).
pub fn image_path(n: usize) -> String {
    format!("/var/lib/tandem/images/vm{n}.img")
}

/// Share of the host device the background workloads' files may fill,
/// over every kernel (the VMs' files live in their images, on the host
/// device too). The rest holds the systems, the apps and what else the
/// images carry.
pub const WORKLOAD_DEVICE_SHARE: f64 = 0.75;

/// Size of each background workload file: the S suite's 500 MiB
/// ([`WORKLOAD_FILE_BYTES`]), unless a run's `files` files would not fit
/// in [`WORKLOAD_DEVICE_SHARE`] of the host device; then smaller, in whole
/// MiB, as one would shrink the suite's files to run it on a small device
/// (eight VMs with five readers each on a 16 GB eMMC). A reader wraps
/// around at its file's end, so a smaller file changes only how far apart
/// the files lie.
pub fn workload_file_bytes(capacity_bytes: u64, files: u64) -> u64 {
    if files == 0 {
        return WORKLOAD_FILE_BYTES;
    }
    let fit = (capacity_bytes as f64 * WORKLOAD_DEVICE_SHARE) as u64 / files;
    WORKLOAD_FILE_BYTES
        .min(fit / (1 << 20) * (1 << 20))
        .max(1 << 20)
}

/// Starts the S suite's background readers and writers in kernel `k`,
/// each on its own file of `file_bytes` in the suite's work directory.
/// Writers are capped as S caps them when the kernel sees a rotational
/// disk (a guest's virtio disk is one). Returns the readers' and writers'
/// pids (their CPU time: [`WorkloadCpu`]).
pub fn start_workload(m: &mut Machine, k: KernelId, w: &WorkloadSpec, file_bytes: u64) -> Vec<Pid> {
    let random = w.pattern == Some(Pattern::Rand);
    let files: Vec<FileId> = (0..w.readers + w.writers)
        .map(|i| m.add_file(k, &format!("/S/file{i}"), file_bytes))
        .collect();
    let mut pids = Vec::new();
    for &f in &files[..w.readers as usize] {
        pids.push(if random {
            m.start_rand_reader(k, f, IoPrio::DEFAULT, 0)
        } else {
            m.start_seq_reader(k, f, IoPrio::DEFAULT, 0)
        });
    }
    if w.writers > 0 {
        let per_writer = suite::writer_rate_bytes_per_s(w, m.rotational(k));
        for i in 0..w.writers as usize {
            let f = files[w.readers as usize + i];
            pids.push(m.start_writer(k, f, random, per_writer, IoPrio::DEFAULT));
        }
        m.periodic_sync(k, secs(suite::SYNC_PERIOD_S));
    }
    pids
}

/// The processes of the host's workload and of VM 1's guest's, whose CPU
/// time on the CPU model the run reports under the real runner's names
/// (`host_workload_run_ms`, `guest_workload_run_ms`: `bench::cputime`).
#[derive(Clone, Debug, Default)]
pub struct WorkloadCpu {
    pub host: Vec<Pid>,
    pub guest: Vec<Pid>,
}

impl WorkloadCpu {
    /// The CPU time the host's and the guest's workload processes ran so
    /// far (platform's time).
    fn ran(&self, m: &Machine) -> (Nanos, Nanos) {
        let sum = |pids: &[Pid]| pids.iter().map(|&p| m.cpu_time(p)).sum();
        (sum(&self.host), sum(&self.guest))
    }
}

/// The seed of one repetition of a cell.
pub fn repetition_seed(cell_seed: u64, rep: u32) -> u64 {
    let mut r = Rng::new(cell_seed ^ (rep as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    r.next_u64()
}

/// One repetition of a start-up cell: `iterations` cold starts; the run
/// stops at the first start that times out, as the suite does.
pub fn run_startup(cell: &Cell, opts: &SimOptions, rep: u32) -> Result<RunResult, String> {
    startup_run(cell, opts, rep).map(|(run, _)| run)
}

/// [`run_startup`], also returning the machine at the end of the run.
fn startup_run(cell: &Cell, opts: &SimOptions, rep: u32) -> Result<(RunResult, Machine), String> {
    let mut host = SimHost::new(cell, opts, rep);
    let out = procedure::run_repetition(cell, &Waits::default(), &mut host)?;
    let machine = host
        .setup
        .expect("the procedure started the workloads")
        .machine;
    Ok((out, machine))
}

/// One repetition of a throughput cell: aggregate MB/s (10^6 bytes, reads
/// plus writes completed by the disk: the device for native cells, VM 1's
/// virtual disk for VM cells) sampled every `sample_s` over `duration_s`,
/// after the settle time.
pub fn run_throughput(cell: &Cell, opts: &SimOptions, rep: u32) -> Result<RunResult, String> {
    procedure::run_repetition(cell, &Waits::default(), &mut SimHost::new(cell, opts, rep))
}

/// Where the disk's counts stood when the measurement began: sectors read
/// and written by the app's kernel and by the host, and the time.
struct Mark {
    app: (u64, u64),
    host: (u64, u64),
    at: Nanos,
    /// The workloads' CPU time so far (host, guest).
    workload_cpu: (Nanos, Nanos),
}

/// The simulator's side of the S suite's procedure
/// ([`experiment::procedure`]): each step on a simulated [`Machine`],
/// whose time passes only when a step runs it.
///
/// Its properties as a host, which the procedure does not decide:
/// - a repetition's machine is built when its workloads start
///   ([`setup`], from the repetition's seed), so it holds nothing cached
///   before: the first drop of the host's caches has nothing to drop;
/// - a simulated process starts at the exact instant it is asked to, where
///   a real one starts after the suite's shell commands: each pause before
///   a start is up to [`START_JITTER_NS`] longer, drawn from a stream of
///   its own;
/// - the app starts in VM 1's guest and at the same instant in every VM
///   with the `app` role; a start counts until the last of them is up;
/// - its counters: read and write MB/s of the app's disk over the
///   measurement, coordination counters per VM, the workload files' layout,
///   and for throughput cells in VMs what the host's disk delivered to all.
pub struct SimHost<'a> {
    cell: &'a Cell,
    opts: &'a SimOptions,
    seed: u64,
    /// The start jitter's stream: a stream of its own, so that the jitter
    /// does not shift the draws of the simulated machine.
    jitter: Rng,
    setup: Option<Setup>,
    mark: Option<Mark>,
    /// On a CPU model: VM 1's app's CPU time and start-up time, summed
    /// over the starts that finished ([`APP_CPU_SHARE`]).
    app_cpu: (Nanos, Nanos),
}

/// The run counters of the app's CPU time, shared with the real runner: the
/// simulator writes them only when the machine runs on a CPU model (the
/// app's bursts and per-request costs, not its waits for a core or the
/// disk).
pub use experiment::result::{APP_CPU_S, APP_CPU_SHARE};

impl<'a> SimHost<'a> {
    /// The host of repetition `rep` of `cell`.
    pub fn new(cell: &'a Cell, opts: &'a SimOptions, rep: u32) -> Self {
        let seed = repetition_seed(cell.seed, rep);
        SimHost {
            cell,
            opts,
            seed,
            jitter: Rng::new(seed ^ 0x5354_4152_545F_4A49),
            setup: None,
            mark: None,
            app_cpu: (0, 0),
        }
    }

    fn setup(&mut self) -> Result<&mut Setup, String> {
        self.setup
            .as_mut()
            .ok_or_else(|| "the simulated machine is built when the workloads start".to_string())
    }

    /// Runs the machine for `ns` more.
    fn run_for(&mut self, ns: Nanos) -> Result<(), String> {
        let m = &mut self.setup()?.machine;
        m.run_until(m.now() + ns, |_| false);
        Ok(())
    }
}

impl procedure::Host for SimHost<'_> {
    type Error = String;

    fn drop_caches(&mut self, scope: Scope) -> Result<(), String> {
        let Some(s) = self.setup.as_mut() else {
            // Not built yet: a new machine has nothing cached.
            return Ok(());
        };
        let m = &mut s.machine;
        match scope {
            Scope::Guest if s.app_kernel != HOST => {
                m.drop_caches(s.app_kernel);
                for (k, _) in &s.other_apps {
                    m.drop_caches(*k);
                }
            }
            Scope::Guest => {}
            Scope::Host => m.drop_caches(HOST),
        }
        Ok(())
    }

    fn start_workloads(&mut self) -> Result<Vec<WorkloadSpec>, String> {
        let s = setup(self.cell, self.opts, self.seed)?;
        let started = s.workloads.clone();
        self.setup = Some(s);
        Ok(started)
    }

    fn wait(&mut self, secs_: f64) -> Result<(), String> {
        self.run_for(secs(secs_))
    }

    fn pause(&mut self, secs_: f64) -> Result<(), String> {
        let ns = secs(secs_) + self.jitter.below(START_JITTER_NS);
        self.run_for(ns)
    }

    fn begin_measure(&mut self) -> Result<(), String> {
        let s = self.setup()?;
        let m = &s.machine;
        self.mark = Some(Mark {
            app: m.sectors_done(s.app_kernel),
            host: m.sectors_done(HOST),
            at: m.now(),
            workload_cpu: s.workload_cpu.ran(m),
        });
        Ok(())
    }

    fn start_app(&mut self, timeout_s: f64) -> Result<Option<f64>, String> {
        let s = self.setup()?;
        let (trace, files) = s
            .app
            .as_ref()
            .ok_or_else(|| "a start-up cell has an app".to_string())?;
        let m = &mut s.machine;
        let start = m.now();
        // VM 1's app, and those of the VMs that start it at the same
        // moment: the start counts until the last of them is up.
        let mut pids =
            vec![m.start_app(s.app_kernel, trace.clone(), files.clone(), IoPrio::DEFAULT)];
        for (k, ids) in &s.other_apps {
            pids.push(m.start_app(*k, trace.clone(), ids.clone(), IoPrio::DEFAULT));
        }
        let all_up = |m: &Machine| pids.iter().all(|&p| m.app_finished(p).is_some());
        m.run_until(start + secs(timeout_s), all_up);
        let last = pids
            .iter()
            .map(|&p| m.app_finished(p))
            .collect::<Option<Vec<_>>>();
        let first = m
            .app_finished(pids[0])
            .map(|t| (m.cpu_time(pids[0]), t - start));
        for &p in &pids {
            m.kill(p);
        }
        if let Some((cpu, up)) = first {
            self.app_cpu.0 += cpu;
            self.app_cpu.1 += up;
        }
        Ok(last
            .and_then(|ts| ts.into_iter().max())
            .map(|t| to_secs(t - start)))
    }

    fn sectors(&mut self) -> Result<u64, String> {
        let s = self.setup()?;
        let (r, w) = s.machine.sectors_done(s.app_kernel);
        Ok(r + w)
    }

    fn finish(&mut self, out: &mut RunResult) -> Result<(), String> {
        let throughput = self.cell.benchmark == Benchmark::Throughput;
        let host_loops = self.cell.cpu.host_cpu_load > 0;
        let mark = self
            .mark
            .take()
            .ok_or_else(|| "the measurement never began".to_string())?;
        let (cpu, up) = self.app_cpu;
        let s = self.setup()?;
        let m = &s.machine;
        if throughput && s.app_kernel != HOST {
            // What the disk itself delivered to everyone (all VMs and the
            // host's workload): what coordination must not cost.
            let (hr, hw) = m.sectors_done(HOST);
            let (hr0, hw0) = mark.host;
            out.counters.insert(
                "aggregate_mb_s".into(),
                (hr + hw - hr0 - hw0) as f64 * 512.0 / 1e6 / to_secs(m.now() - mark.at),
            );
        }
        io_counters(m, s.app_kernel, (mark.app.0, mark.app.1, mark.at), out);
        coord_counters(m, s.vms, out);
        if m.has_cpu_model() {
            experiment::result::app_cpu_counters(out, cpu, up);
            // The workloads' CPU time over the measurement, as the real
            // runner counts it (`bench::cputime`).
            let (host, guest) = s.workload_cpu.ran(m);
            let ms = |now: Nanos, then: Nanos| (now - then) as f64 / 1e6;
            out.counters
                .insert("host_workload_run_ms".into(), ms(host, mark.workload_cpu.0));
            if s.app_kernel != HOST {
                out.counters.insert(
                    "guest_workload_run_ms".into(),
                    ms(guest, mark.workload_cpu.1),
                );
            }
        }
        // What the host's loops got of the cores over the run: what a
        // mode's vCPU boosts cost them (the CPU model's cells report it too).
        if m.has_cpu_model() && host_loops {
            out.counters
                .insert("host_loops_share".into(), m.host_loops_share());
        }
        layout_counters(m, s.workload_file_bytes, out);
        Ok(())
    }

    fn unsupported(&self, what: &str) -> String {
        format!(
            "{what} runs on the simulator's CPU model (sim::cpu_bench), not on its disk machine"
        )
    }
}

/// Runs one repetition of a cell: the CPU model's benchmarks (latency, hot
/// start-up) on `cpu_bench`, which is not a procedure host yet (see
/// `experiment::procedure`), the others through the procedure on a
/// [`SimHost`].
pub fn run_repetition(cell: &Cell, opts: &SimOptions, rep: u32) -> Result<RunResult, String> {
    match cell.benchmark {
        Benchmark::Latency => crate::cpu_bench::run_latency_rep(cell, rep).map(|(r, _)| r),
        Benchmark::ReadersHashers => crate::cpu_bench::run_readers_hashers(cell, rep),
        Benchmark::Startup if cell.on_cpu_model() => crate::cpu_bench::run_hot_startup(cell, rep),
        Benchmark::Startup => run_startup(cell, opts, rep),
        Benchmark::Throughput => run_throughput(cell, opts, rep),
        Benchmark::Profile => crate::profile_bench::run(cell, rep),
    }
}

/// A cell's result from its repetitions.
pub fn cell_result(cell: &Cell, runs: Vec<RunResult>) -> CellResult {
    CellResult {
        cell: cell.clone(),
        runner: "sim".into(),
        metric: Metric::for_cell(cell),
        runs,
    }
}

/// Runs every repetition of a cell. `progress` is called after each.
pub fn run_cell(
    cell: &Cell,
    opts: &SimOptions,
    mut progress: impl FnMut(),
) -> Result<CellResult, String> {
    let mut runs = Vec::with_capacity(cell.repetitions as usize);
    for rep in 0..cell.repetitions {
        runs.push(run_repetition(cell, opts, rep)?);
        progress();
    }
    Ok(cell_result(cell, runs))
}

/// Runs one repetition of a start-up cell and returns the number of
/// simulated events and the simulated time, for the events-per-second
/// benchmark.
pub fn count_events(cell: &Cell, opts: &SimOptions, rep: u32) -> Result<(u64, Nanos), String> {
    let (_, m) = startup_run(cell, opts, rep)?;
    Ok((m.events_processed(), m.now()))
}
