//! tandem's real runner: a scenario's native cells on a real block device,
//! with the kernel's schedulers, real processes and dropped caches.
//!
//! The procedure is the S suite's, as the simulator runs it
//! (`crates/sim/src/bench.rs`): per repetition, the background workload is
//! started and left to settle, then each start waits its pause, drops the
//! caches and runs the app with the timeout (a timed-out start ends the run);
//! throughput cells sample `/sys/block/X/stat`. Results are written by the
//! `experiment` crate, as the simulator's are, with `runner = real`.
//!
//! Everything the run changes is undone by [`Cleanup`] on success, error,
//! timeout and Ctrl-C (SIGINT, SIGTERM, SIGHUP): workers killed, scheduler
//! restored, files removed, filesystems unmounted, emulated devices torn down.
//! A run killed without a chance to clean up (SIGKILL, a crash) leaves its
//! journal in its run directory, each change recorded before it was made
//! ([`cleanup`]); [`recover_interrupted`] (`tandem bench cleanup`, and the
//! start of every run) undoes it once the run is dead.
//!
//! A real device (`--device`) is written to only with the user's consent
//! ([`guard`]): a device that holds anything is refused unless `--force`
//! names it again or the user types its path on a terminal.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use experiment::{
    Benchmark, Cell, CellResult, Metric, Pattern, RunMeta, RunResult, Scenario, WorkloadSpec,
};

pub mod cleanup;
pub mod cpuload;
pub mod guard;
pub mod guest;
pub mod latency;
pub mod record;
pub mod vm;
pub mod workers;

pub use cleanup::{recover_interrupted, Cleanup};
use cleanup::{RunId, SchedRecord};
use devemu::run_cmd;
use experiment::IoSched;
use policy::{CoordMode, IoprioBoost};
use workers::Kind;

/// Failures are the device emulator's: usage errors (exit code 2) and run
/// errors (exit code 1), as the command line reports them.
pub use devemu::{Error, Result};

pub(crate) fn run_err(m: impl Into<String>) -> Error {
    Error::Run(m.into())
}

// The S suite's timing and write caps: `experiment::suite`, shared with the
// simulator.
use experiment::suite::SHORT_START_S;
pub use experiment::suite::{PAUSE_BEFORE_START_S, SETTLE_S};

/// Schedulers a scenario may name: every one tandem knows (their kernel names
/// are [`IoSched::kernel_name`]). `cfq` and `anticipatory` no longer exist in
/// blk-mq kernels (refused at run time when the device lacks them).
pub const SCHEDULERS: &[IoSched] = &IoSched::ALL;

/// What `tandem bench run` accepts in a scenario.
pub fn accepted() -> experiment::Accepted {
    experiment::Accepted {
        devices: experiment::Device::all().collect(),
        host_scheds: SCHEDULERS.to_vec(),
        guest_scheds: SCHEDULERS.to_vec(),
        coordination: COORDINATION.to_vec(),
        apps: experiment::apptrace::preset_names(),
        allow_cmd_apps: true,
        allow_vm: true,
    }
}

/// Coordination modes the real runner runs: `off` without tandem, and
/// `help-rt` with `tandem guestd` in the guest and `tandem hostd` on the
/// host (ioprio RT on the QEMU process's threads while helped).
/// `help-weight` needs the VM in a cgroup of its own and `help-wr` a kernel
/// patch; the simulator runs those.
pub const COORDINATION: &[CoordMode] = &[CoordMode::Off, CoordMode::HelpRt];

/// How VM cells run their guest.
#[derive(Clone, Debug)]
pub struct VmOptions {
    /// An image made by `tandem vm image` (default: one is built for the run
    /// in its run directory and removed afterwards).
    pub image: Option<PathBuf>,
    pub disk: vm::DiskOptions,
    /// Guest memory.
    pub mem_mib: u32,
    /// Force an accelerator (`kvm` or `tcg`) instead of probing.
    pub accel: Option<String>,
    /// Put QEMU in a blkio group of its own in every cell (see
    /// [`vm::VmGroup`]), as libvirt does; `help-rt` then moves the boosted
    /// I/O threads to the root group. Otherwise QEMU stays in the root group.
    pub own_group: bool,
    /// hostd's `--budget-fraction` for `help-rt` cells (`None`: hostd's
    /// default, half of each 60 s window).
    pub hostd_budget_fraction: Option<f64>,
    /// Keep each VM cell's logs (guest console, QEMU, hostd) under this
    /// directory's `vm-logs/` (the run's output directory).
    pub logs: Option<PathBuf>,
}

impl Default for VmOptions {
    fn default() -> Self {
        VmOptions {
            image: None,
            disk: vm::DiskOptions::default(),
            mem_mib: 1024,
            accel: None,
            own_group: true,
            hostd_budget_fraction: None,
            logs: None,
        }
    }
}

/// Options of a run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The scenario (validated with [`accepted`]).
    pub scenario: Scenario,
    /// The cells to run (filtered).
    pub cells: Vec<Cell>,
    /// A real device instead of an emulated one.
    pub device: Option<String>,
    /// Where the workload files go (a directory on the device's filesystem).
    pub workdir: Option<PathBuf>,
    /// Size of each workload file (S: 500 MiB).
    pub file_bytes: u64,
    /// The user's consent to write to `device` although it holds data or is
    /// mounted: the device named again (see [`guard::consent`]).
    pub force: Option<String>,
    /// Settle time override (seconds).
    pub settle_s: Option<f64>,
    /// Pause before each start override (seconds).
    pub pause_s: Option<f64>,
    /// No progress lines.
    pub quiet: bool,
    /// The `tandem` executable (workers, replay and the devemu daemon).
    pub exe: PathBuf,
    /// VM cells.
    pub vm: VmOptions,
    /// Host scheduler tunables set after each switch (`iosched/KEY`), e.g.
    /// `low_latency=0` for BFQ. The scheduler switch resets them.
    pub host_tunables: Vec<(String, String)>,
}

/// Set on SIGINT, SIGTERM or SIGHUP; every wait checks it.
static INTERRUPTED: LazyLock<Arc<AtomicBool>> = LazyLock::new(Default::default);

/// Route the stop signals to [`INTERRUPTED`] (once per process: a second
/// run in the same process keeps the first registration).
fn install_signal_handlers() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        for sig in [SIGINT, SIGTERM, SIGHUP] {
            if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&INTERRUPTED)) {
                tracing::warn!("no handler for signal {sig}: {e}");
            }
        }
    });
}

fn check_interrupted() -> Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        Err(run_err("interrupted; cleaned up"))
    } else {
        Ok(())
    }
}

/// Sleep, waking early (with an error) if the run is interrupted.
fn sleep(secs: f64) -> Result<()> {
    let end = Instant::now() + Duration::from_secs_f64(secs.max(0.0));
    loop {
        check_interrupted()?;
        let now = Instant::now();
        if now >= end {
            return Ok(());
        }
        std::thread::sleep((end - now).min(Duration::from_millis(50)));
    }
}

/// Progress lines on stderr, when it is a terminal and not `--quiet`.
fn progress(o: &Options, msg: &str) {
    use std::io::IsTerminal;
    if !o.quiet && std::io::stderr().is_terminal() {
        eprintln!("tandem bench: {msg}");
    }
}

/// The progress line of repetition `rep` of cell `ci` (of `ncells`), for
/// native and VM cells alike.
fn progress_repetition(o: &Options, ci: usize, ncells: usize, c: &Cell, rep: u32) {
    progress(
        o,
        &format!(
            "cell {}/{} [{}] repetition {}/{}",
            ci + 1,
            ncells,
            c.key(),
            rep + 1,
            c.repetitions
        ),
    );
}

/// The sysfs directory of a block device's request queue, and of its stats.
struct SysBlock {
    queue: PathBuf,
    stat: PathBuf,
}

fn sys_block(dev: &str) -> Result<SysBlock> {
    let name = Path::new(dev)
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let class = PathBuf::from("/sys/class/block").join(&name);
    let real = fs::canonicalize(&class)
        .map_err(|_| Error::Usage(format!("{dev}: no such block device")))?;
    let queue = if real.join("queue").is_dir() {
        real.join("queue")
    } else {
        // A partition: the queue is its disk's.
        real.parent().map(|p| p.join("queue")).unwrap_or_default()
    };
    Ok(SysBlock {
        queue,
        stat: real.join("stat"),
    })
}

/// Schedulers a device offers and the current one.
fn schedulers(q: &Path) -> (Vec<String>, String) {
    let text = fs::read_to_string(q.join("scheduler")).unwrap_or_default();
    let mut cur = String::new();
    let list = text
        .split_whitespace()
        .map(|s| {
            if let Some(n) = s.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
                cur = n.to_string();
                n.to_string()
            } else {
                s.to_string()
            }
        })
        .collect();
    (list, cur)
}

/// Sectors read and written (fields 3 and 7 of the stat file).
fn sectors_done(stat: &Path) -> u64 {
    let s = fs::read_to_string(stat).unwrap_or_default();
    let f: Vec<u64> = s
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    f.get(2).copied().unwrap_or(0) + f.get(6).copied().unwrap_or(0)
}

fn drop_caches() -> Result<()> {
    nix::unistd::sync();
    fs::write("/proc/sys/vm/drop_caches", "3").map_err(|e| run_err(format!("dropping caches: {e}")))
}

fn dev_of(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).ok().map(|m| m.dev())
}

fn rdev_of(dev: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(dev).ok().map(|m| m.rdev())
}

/// The start of the app of a cell.
pub(crate) enum App {
    Trace(String, experiment::apptrace::AppTrace),
    Command(String),
}

/// The app a scenario names: `cmd:<command line>` or a trace preset.
pub(crate) fn app_of(name: &str) -> Result<App> {
    if let Some(c) = name.strip_prefix("cmd:") {
        return Ok(App::Command(c.trim().to_string()));
    }
    experiment::apptrace::preset(name)
        .map(|t| App::Trace(name.to_string(), t))
        .ok_or_else(|| Error::Usage(format!("app {name:?}: no such trace")))
}

/// Run the cells and write the outputs into `out`. Needs root.
pub fn run(o: &Options, out: &Path) -> Result<Vec<CellResult>> {
    devemu::need_root(
        "tandem bench run",
        "it switches I/O schedulers, drops caches, mounts file systems and brings up emulated devices",
    )?;
    let devices = check_options(o)?;
    let app = app_of(&o.scenario.app)?;
    recover_first();
    // Then, before anything is written, what the real device holds and the
    // user's consent.
    let device_use = match &o.device {
        Some(d) => {
            let found = guard::inspect(d)?;
            Some(guard::consent(
                d,
                &found,
                o.force.as_deref(),
                &mut guard::Terminal,
            )?)
        }
        None => None,
    };
    run_devices(o, out, &devices, &app, device_use.as_ref())
}

/// What earlier runs killed without a chance to clean up left, undone
/// before a run starts.
fn recover_first() {
    match recover_interrupted() {
        Ok(done) => {
            for (pid, what) in done {
                tracing::info!(
                    "undid what an interrupted run (pid {pid}) left: {}",
                    what.join("; ")
                );
            }
        }
        Err(e) => tracing::warn!(
            "could not undo all that an interrupted run left ({e}); see tandem bench cleanup"
        ),
    }
}

/// The checks of a run's options before anything is touched; returns the
/// devices the cells name, in order.
fn check_options(o: &Options) -> Result<Vec<String>> {
    for c in &o.cells {
        if c.has_other_vms() {
            return Err(Error::Usage(format!(
                "matrix.other_vms {:?}: the real runner runs one VM (the simulator runs several)",
                c.other_vms
            )));
        }
        if c.is_native() && !c.coordination.is_off() {
            return Err(Error::Usage(format!(
                "coordination {:?} needs VM cells (matrix.guest_sched)",
                c.coordination
            )));
        }
    }
    if o.scenario.is_vm() {
        o.vm.disk.validate()?;
        if let Some(a) = &o.vm.accel {
            if a != "kvm" && a != "tcg" {
                return Err(Error::Usage(format!(
                    "--vm-accel {a:?}: accepted: kvm, tcg"
                )));
            }
        }
    }
    if o.workdir.is_some() && o.device.is_none() {
        return Err(Error::Usage(
            "--workdir needs --device (the device it is on)".into(),
        ));
    }
    let mut devices: Vec<String> = Vec::new();
    for c in &o.cells {
        if !devices.contains(&c.device.to_string()) {
            devices.push(c.device.to_string());
        }
    }
    if o.device.is_some() && devices.len() > 1 {
        return Err(Error::Usage(format!(
            "--device runs one device, and the cells name {} ({}); pick one with --only device=NAME",
            devices.len(),
            devices.join(", ")
        )));
    }
    if o.force.as_deref().is_some_and(str::is_empty) {
        return Err(Error::Usage(
            "--force needs the device again (--force /dev/X), so that it can not apply to another one".into(),
        ));
    }
    if o.force.is_some() && o.device.is_none() {
        return Err(Error::Usage(
            "--force names the --device it applies to; there is no --device".into(),
        ));
    }
    Ok(devices)
}

/// Each device's cells in turn, then the outputs.
fn run_devices(
    o: &Options,
    out: &Path,
    devices: &[String],
    app: &App,
    device_use: Option<&guard::DeviceUse>,
) -> Result<Vec<CellResult>> {
    install_signal_handlers();
    let mut results = Vec::new();
    let mut extra = serde_json::Map::new();
    // On a virtual machine, time the hypervisor gives other guests delays
    // every process of the run, the emulated device's included: recorded
    // with the results.
    let steal = devemu::probe::StealMeter::start();
    for label in devices {
        let cells: Vec<&Cell> = o
            .cells
            .iter()
            .filter(|c| c.device.name() == label)
            .collect();
        let mut cleanup = Cleanup::default();
        let r = run_device(
            o,
            &DeviceRun {
                label,
                cells: &cells,
                app,
                device_use,
            },
            &mut cleanup,
            &mut extra,
        );
        let fin = cleanup.finish();
        results.extend(r?);
        fin?;
    }
    if let Some(share) = steal.share() {
        extra.insert("cpu_steal_share".into(), share.into());
        if share > devemu::probe::STEAL_WARN_SHARE {
            tracing::warn!(
                "the hypervisor stole {:.1}% of the CPU time during the run; the timings include its delays",
                share * 100.0
            );
        }
    }
    let meta = RunMeta {
        runner: "real".into(),
        scenario: o.scenario.name.clone(),
        tandem_version: env!("CARGO_PKG_VERSION").into(),
        seed: o.scenario.seed,
        extra,
    };
    experiment::write_outputs(out, &meta, &results)
        .map_err(|e| run_err(format!("writing {}: {e}", out.display())))?;
    Ok(results)
}

/// Workload files a set of cells needs at most.
fn workload_files(cells: &[&Cell]) -> Result<u32> {
    let mut n = 0;
    for c in cells {
        let w = c.host_workload;
        n = n.max(w.readers + w.writers);
    }
    Ok(n)
}

/// Workload files the guest of a set of cells needs at most (0: no VM cells).
fn guest_workload_files(cells: &[&Cell]) -> Result<u32> {
    let mut n = 0;
    for c in cells {
        if let Some(w) = c.guest_workload {
            n = n.max(w.readers + w.writers);
        }
    }
    Ok(n)
}

/// Size of the guest's disk image for `files` workload files and the app:
/// the files, ext4's metadata and journal (about 5%), and room to spare.
fn guest_disk_bytes(files: u32, file_bytes: u64, app_bytes: u64) -> u64 {
    let data = files as u64 * file_bytes + app_bytes;
    (data + data / 10 + (192 << 20)).div_ceil(1 << 20) << 20
}

/// One device's share of a run.
struct DeviceRun<'a> {
    /// The scenario's device (a preset, or the label of `--device`).
    label: &'a str,
    cells: &'a [&'a Cell],
    app: &'a App,
    /// How the run may use `--device` (consented), `None` when emulated.
    device_use: Option<&'a guard::DeviceUse>,
}

/// Space the cells of a device need on it.
struct Need {
    /// Host workload files.
    nfiles: u32,
    /// The guest's disk image (0 without VM cells).
    guest_disk: u64,
    /// All of it, and room for ext4's own.
    total: u64,
}

fn need_of(o: &Options, d: &DeviceRun) -> Result<Need> {
    let nfiles = workload_files(d.cells)?;
    let app_bytes: u64 = match d.app {
        App::Trace(_, t) => t.files.iter().map(|f| f.size).sum(),
        App::Command(_) => 0,
    };
    let guest_disk = if d.cells.iter().any(|c| !c.is_native()) {
        guest_disk_bytes(guest_workload_files(d.cells)?, o.file_bytes, app_bytes)
    } else {
        0
    };
    Ok(Need {
        nfiles,
        guest_disk,
        total: nfiles as u64 * o.file_bytes + app_bytes + guest_disk + (64 << 20),
    })
}

/// The device the run works on: `--device`, or an emulated one it brings
/// up (recorded in the journal by name before `devemu up` makes anything).
fn open_device(
    o: &Options,
    d: &DeviceRun,
    need: &Need,
    cleanup: &mut Cleanup,
) -> Result<(String, Option<devemu::Instance>)> {
    if let Some(dev) = &o.device {
        return Ok((dev.clone(), None));
    }
    // Big enough for the files and ext4's own, a little room.
    let size = (need.total + need.total / 4 + (256 << 20)).div_ceil(1 << 20) << 20;
    progress(
        o,
        &format!("bringing up an emulated {} ({} MiB)", d.label, size >> 20),
    );
    let name = RunId::me().devemu_name();
    cleanup.set_devemu(name.clone())?;
    let inst = devemu::up(&devemu::UpOptions {
        model: d.label.to_string(),
        size,
        dir: None,
        exe: o.exe.clone(),
        name: Some(name),
    })?;
    Ok((inst.loop_dev.clone().unwrap_or_default(), Some(inst)))
}

/// Every scheduler the cells need must be on `dev` before anything runs.
/// Returns the device's current one.
fn check_schedulers(cells: &[&Cell], dev: &str, sb: &SysBlock) -> Result<String> {
    let (available, original) = schedulers(&sb.queue);
    for c in cells {
        let k = c.host_sched.kernel_name();
        if !available.iter().any(|a| a == k) {
            return Err(Error::Usage(format!(
                "host_sched {:?}: {dev} has no {k} scheduler; it offers: {} (run a subset with --only host_sched=...)",
                c.host_sched,
                available.join(", ")
            )));
        }
    }
    Ok(original)
}

/// Format `dev` with ext4 and mount it on `mnt` (recorded first).
fn format_and_mount(dev: &str, mnt: &Path, extra: &[&str], cleanup: &mut Cleanup) -> Result<()> {
    fs::create_dir_all(mnt).map_err(|e| run_err(format!("{}: {e}", mnt.display())))?;
    let mut args = vec!["-q", "-F"];
    args.extend_from_slice(extra);
    args.push(dev);
    run_cmd("mkfs.ext4", &args)?;
    // Recorded first: a kill between the two must not forget a mount.
    cleanup.push_mount(mnt.to_path_buf())?;
    run_cmd("mount", &[dev, &mnt.to_string_lossy()])?;
    Ok(())
}

/// The directory the run's files go in: on a device it formats (emulated,
/// or `--device` unmounted, with consent), or in a directory of its own on
/// a mounted `--device` (with consent).
fn make_workdir(
    o: &Options,
    d: &DeviceRun,
    dev: &str,
    run_dir: &Path,
    need: &Need,
    cleanup: &mut Cleanup,
) -> Result<PathBuf> {
    let mnt = run_dir.join("mnt");
    let workdir = match d.device_use {
        None => {
            // Emulated: nothing on it but what the run writes, untimed.
            format_and_mount(
                dev,
                &mnt,
                &["-E", "nodiscard,lazy_itable_init=0,lazy_journal_init=0"],
                cleanup,
            )?;
            mnt
        }
        Some(guard::DeviceUse::Mounted(mounts)) => {
            let base = o
                .workdir
                .clone()
                .unwrap_or_else(|| PathBuf::from(&mounts[0]));
            let w = base.join(format!("tandem-bench-{}", std::process::id()));
            cleanup.push_dir(w.clone())?;
            fs::create_dir_all(&w).map_err(|e| run_err(format!("{}: {e}", w.display())))?;
            w
        }
        Some(guard::DeviceUse::Format) => {
            // Room for the files before formatting anything (ext4 keeps about 5%).
            let sectors: u64 = fs::read_to_string(sys_block(dev)?.stat.with_file_name("size"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(u64::MAX / 1024);
            if sectors.saturating_mul(512) / 100 * 90 < need.total {
                return Err(run_err(format!(
                    "not enough space on {dev}: the run needs {} MiB, the device has {} MiB (smaller files: --file-mib)",
                    need.total >> 20,
                    (sectors * 512) >> 20
                )));
            }
            format_and_mount(dev, &mnt, &[], cleanup)?;
            mnt
        }
    };
    if let Some(w) = &o.workdir {
        if d.device_use.is_some() && dev_of(w) != rdev_of(dev) {
            return Err(Error::Usage(format!(
                "--workdir {}: not on {dev}",
                w.display()
            )));
        }
    }
    if let Some(avail) = devemu::control::free_bytes(&workdir) {
        if avail < need.total {
            return Err(run_err(format!(
                "not enough space in {}: the run needs {} MiB, {} MiB are free (smaller files: --file-mib)",
                workdir.display(),
                need.total >> 20,
                avail >> 20
            )));
        }
    }
    Ok(workdir)
}

/// The workload files (one per background process) and the app's, each
/// recorded before it is written. Returns the files and the app directory.
fn write_files(
    o: &Options,
    d: &DeviceRun,
    dev: &str,
    workdir: &Path,
    need: &Need,
    cleanup: &mut Cleanup,
) -> Result<(Vec<PathBuf>, PathBuf)> {
    progress(
        o,
        &format!(
            "writing {} workload files of {} MiB on {dev}",
            need.nfiles,
            o.file_bytes >> 20
        ),
    );
    let files: Vec<PathBuf> = (0..need.nfiles)
        .map(|i| workdir.join(format!("file{i}")))
        .collect();
    for (i, f) in files.iter().enumerate() {
        cleanup.push_file(f.clone())?;
        check_interrupted()?;
        workers::fill_file(f, o.file_bytes, 0x5eed + i as u64)?;
    }
    let app_dir = workdir.join("app");
    if let App::Trace(_, t) = d.app {
        cleanup.push_dir(app_dir.clone())?;
        fill_app_files(&app_dir, t)?;
    }
    Ok((files, app_dir))
}

/// The machine and the device, for results.json.
fn record_device(
    d: &DeviceRun,
    dev: &str,
    emulated: Option<&devemu::Instance>,
    sb: &SysBlock,
    original: &str,
    file_bytes: u64,
    extra: &mut serde_json::Map<String, serde_json::Value>,
) {
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    extra.insert("kernel".into(), kernel.trim().into());
    let mut dinfo = serde_json::Map::new();
    dinfo.insert("path".into(), dev.into());
    dinfo.insert("emulated".into(), emulated.is_some().into());
    if let Some(inst) = emulated {
        dinfo.insert("model".into(), inst.model.clone().into());
        dinfo.insert("size_bytes".into(), inst.size.into());
        dinfo.insert("emulator_overhead_ns".into(), inst.overhead_ns.into());
    }
    for k in [
        "rotational",
        "nr_requests",
        "read_ahead_kb",
        "max_sectors_kb",
    ] {
        let v = fs::read_to_string(sb.queue.join(k)).unwrap_or_default();
        dinfo.insert(k.into(), v.trim().into());
    }
    dinfo.insert("original_scheduler".into(), original.into());
    dinfo.insert("workload_file_bytes".into(), file_bytes.into());
    extra.insert(format!("device:{}", d.label), dinfo.into());
}

fn run_device(
    o: &Options,
    d: &DeviceRun,
    cleanup: &mut Cleanup,
    extra: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<CellResult>> {
    let need = need_of(o, d)?;
    let run_dir = cleanup.start(RunId::me())?;
    let (dev, emulated) = open_device(o, d, &need, cleanup)?;
    let sb = sys_block(&dev)?;
    let original = check_schedulers(d.cells, &dev, &sb)?;
    cleanup.set_sched(SchedRecord {
        file: sb.queue.join("scheduler"),
        original: original.clone(),
        tunables: read_tunables(&sb.queue),
    })?;
    if let Some(inst) = &emulated {
        devemu::control::set_timed(inst, false)?;
    }
    let workdir = make_workdir(o, d, &dev, &run_dir, &need, cleanup)?;
    let (files, app_dir) = write_files(o, d, &dev, &workdir, &need, cleanup)?;
    let vm_ctx = if d.cells.iter().any(|c| !c.is_native()) {
        Some(prepare_vm(
            o,
            d.cells,
            d.app,
            &workdir,
            &run_dir,
            need.guest_disk,
            cleanup,
            extra,
        )?)
    } else {
        None
    };
    if let Some(inst) = &emulated {
        devemu::control::set_timed(inst, true)?;
    }
    record_device(
        d,
        &dev,
        emulated.as_ref(),
        &sb,
        &original,
        o.file_bytes,
        extra,
    );
    let rotational = fs::read_to_string(sb.queue.join("rotational"))
        .map(|s| s.trim() == "1")
        .unwrap_or(true);
    let ctx = CellsCtx {
        d,
        dev: &dev,
        sb: &sb,
        files: &files,
        app_dir: &app_dir,
        workdir: &workdir,
        vm: vm_ctx.as_ref(),
        rotational,
    };
    run_cells(o, &ctx, cleanup, extra)
}

/// What the cells of a device share once it is ready.
struct CellsCtx<'a> {
    d: &'a DeviceRun<'a>,
    dev: &'a str,
    sb: &'a SysBlock,
    files: &'a [PathBuf],
    app_dir: &'a Path,
    workdir: &'a Path,
    vm: Option<&'a VmContext>,
    rotational: bool,
}

/// Sets a cell's scheduler and the `--host-tunable`s on the device.
fn set_cell_sched(o: &Options, k: &str, dev: &str, sb: &SysBlock) -> Result<()> {
    fs::write(sb.queue.join("scheduler"), k)
        .map_err(|e| run_err(format!("setting the {k} scheduler on {dev}: {e}")))?;
    for (key, value) in &o.host_tunables {
        let f = sb.queue.join("iosched").join(key);
        fs::write(&f, value).map_err(|e| {
            Error::Usage(format!(
                "--host-tunable {key}={value}: {k} on {dev}: {e} (its tunables: {})",
                read_tunables(&sb.queue)
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
    }
    Ok(())
}

fn run_cells(
    o: &Options,
    x: &CellsCtx,
    cleanup: &mut Cleanup,
    extra: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<CellResult>> {
    let cells = x.d.cells;
    let mut results = Vec::new();
    let mut tunables = serde_json::Map::new();
    for (ci, c) in cells.iter().enumerate() {
        let k = c.host_sched.kernel_name();
        set_cell_sched(o, k, x.dev, x.sb)?;
        tunables.insert(
            k.to_string(),
            serde_json::to_value(read_tunables(&x.sb.queue)).unwrap_or_default(),
        );
        let runs = if !c.is_native() {
            let ctx = x.vm.ok_or_else(|| run_err("VM cell without a guest"))?;
            run_vm_cell(o, c, ci, cells.len(), ctx, x.files, x.rotational, cleanup)?
        } else {
            let mut runs = Vec::new();
            for rep in 0..c.repetitions {
                progress_repetition(o, ci, cells.len(), c, rep);
                let r = run_repetition(
                    o,
                    c,
                    rep,
                    x.d.app,
                    x.files,
                    x.app_dir,
                    x.workdir,
                    x.sb,
                    x.rotational,
                    cleanup,
                );
                cleanup.stop_workers();
                runs.push(r?);
            }
            runs
        };
        cleanup.restore_sched();
        results.push(CellResult {
            cell: (*c).clone(),
            runner: "real".into(),
            metric: Metric::for_benchmark(c.benchmark),
            runs,
        });
    }
    extra.insert(format!("scheduler_tunables:{}", x.d.label), tunables.into());
    Ok(results)
}

fn read_tunables(q: &Path) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    if let Ok(rd) = fs::read_dir(q.join("iosched")) {
        for e in rd.flatten() {
            if let Ok(v) = fs::read_to_string(e.path()) {
                m.insert(
                    e.file_name().to_string_lossy().to_string(),
                    v.trim().to_string(),
                );
            }
        }
    }
    m
}

/// Start a background workload as S does: readers, then rate-capped
/// writers, and a sync every 2 s while writers run. `files` holds one file
/// per process; the children are pushed on `workers` (killed by the caller).
pub(crate) fn start_workload(
    exe: &Path,
    w: &WorkloadSpec,
    files: &[PathBuf],
    seed: u64,
    rotational: bool,
    workers: &mut Vec<Child>,
) -> Result<()> {
    let random = w.pattern == Some(Pattern::Rand);
    if files.len() < (w.readers + w.writers) as usize {
        return Err(run_err(format!(
            "workload {}: {} files needed, {} there",
            w.name(),
            w.readers + w.writers,
            files.len()
        )));
    }
    for (i, f) in files.iter().enumerate().take(w.readers as usize) {
        let kind = if random {
            Kind::RandRead
        } else {
            Kind::SeqRead
        };
        workers.push(workers::spawn_worker(
            exe,
            kind,
            Some(f),
            0.0,
            seed + i as u64,
        )?);
    }
    if w.writers > 0 {
        let per = experiment::suite::writer_rate_bytes_per_s(w, rotational);
        for i in 0..w.writers as usize {
            let kind = if random {
                Kind::RandWrite
            } else {
                Kind::SeqWrite
            };
            let f = &files[w.readers as usize + i];
            workers.push(workers::spawn_worker(
                exe,
                kind,
                Some(f),
                per,
                seed + 100 + i as u64,
            )?);
        }
        workers.push(workers::spawn_worker(exe, Kind::Sync, None, 0.0, 0)?);
    }
    Ok(())
}

/// One start of the app, with cold caches already: the seconds it took, or
/// `None` when it ran into the timeout (it is killed then).
pub(crate) fn time_start(
    exe: &Path,
    app: &App,
    app_dir: &Path,
    workdir: &Path,
    timeout_s: f64,
) -> Result<Option<f64>> {
    let t0 = Instant::now();
    let mut child = match app {
        App::Trace(name, _) => workers::spawn_replay(exe, name, app_dir)?,
        App::Command(cmdline) => workers::spawn_command(cmdline, workdir)?,
    };
    let timeout = Duration::from_secs_f64(timeout_s);
    let status = loop {
        if let Err(e) = check_interrupted() {
            workers::kill(&mut child);
            return Err(e);
        }
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) => {}
            Err(e) => {
                workers::kill(&mut child);
                return Err(run_err(format!("waiting for the app: {e}")));
            }
        }
        if t0.elapsed() >= timeout {
            break None;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let took = t0.elapsed().as_secs_f64();
    workers::kill(&mut child);
    match status {
        Some(st) if !st.success() => Err(run_err(format!("the app exited with {st}"))),
        Some(_) => Ok(Some(took)),
        None => Ok(None),
    }
}

/// The settle time after starting the workloads: S's 13 s (or `--settle-s`)
/// when anything runs, none on an idle machine.
fn settle_s(o: &Options, busy: bool) -> f64 {
    if busy {
        o.settle_s.unwrap_or(SETTLE_S)
    } else {
        0.0
    }
}

/// A worker that died (a read error, a full disk) is a failed run.
pub(crate) fn workers_alive(workers: &mut [Child], who: &str) -> Result<()> {
    for ch in workers.iter_mut() {
        if let Ok(Some(st)) = ch.try_wait() {
            return Err(run_err(format!("{who} exited early ({st})")));
        }
    }
    Ok(())
}

/// Where a benchmark's measurements come from: the host for native cells,
/// the guest agent for VM cells.
trait Measured {
    /// Drop the caches and start the app once: the seconds it took, or
    /// `None` when it hit the timeout.
    fn cold_start(&mut self) -> Result<Option<f64>>;
    /// Sectors read and written on the benchmarked disk so far.
    fn sectors(&mut self) -> Result<u64>;
}

/// The native side of [`Measured`].
struct OnHost<'a> {
    exe: &'a Path,
    app: &'a App,
    app_dir: &'a Path,
    workdir: &'a Path,
    timeout_s: f64,
    stat: &'a Path,
}

impl Measured for OnHost<'_> {
    fn cold_start(&mut self) -> Result<Option<f64>> {
        drop_caches()?;
        time_start(
            self.exe,
            self.app,
            self.app_dir,
            self.workdir,
            self.timeout_s,
        )
    }
    fn sectors(&mut self) -> Result<u64> {
        Ok(sectors_done(self.stat))
    }
}

/// The S benchmark once the workloads have settled: per start a pause, cold
/// caches and the start (a timeout counts as X and ends the run); or the
/// throughput sampled every `sample_s`.
fn measure(o: &Options, c: &Cell, m: &mut impl Measured) -> Result<RunResult> {
    let mut out = RunResult::default();
    match c.benchmark {
        Benchmark::Latency => {
            return Err(run_err(
                "the latency benchmark runs on the simulator's CPU model only (tandem sim run)",
            ))
        }
        Benchmark::Startup => {
            let pause = o.pause_s.unwrap_or(PAUSE_BEFORE_START_S);
            for _ in 0..c.iterations {
                sleep(pause)?;
                match m.cold_start()? {
                    Some(took) => {
                        out.values.push(took);
                        if took < SHORT_START_S {
                            sleep(SHORT_START_S)?;
                        }
                    }
                    None => {
                        out.values.push(c.timeout_s);
                        out.timeouts += 1;
                        break;
                    }
                }
            }
        }
        Benchmark::Throughput => {
            let samples = (c.duration_s / c.sample_s).floor().max(1.0) as usize;
            let mut last = m.sectors()?;
            for _ in 0..samples {
                sleep(c.sample_s)?;
                let now = m.sectors()?;
                out.values
                    .push(now.saturating_sub(last) as f64 * 512.0 / 1e6 / c.sample_s);
                last = now;
            }
        }
    }
    Ok(out)
}

/// Write an app trace's files under `dir`, as the replay reads them.
fn fill_app_files(dir: &Path, t: &experiment::apptrace::AppTrace) -> Result<()> {
    fs::create_dir_all(dir).map_err(|e| run_err(format!("{}: {e}", dir.display())))?;
    for (i, tf) in t.files.iter().enumerate() {
        workers::fill_file(
            &workers::app_file(dir, i),
            tf.size.max(4096),
            0xa99 + i as u64,
        )?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn run_repetition(
    o: &Options,
    c: &Cell,
    rep: u32,
    app: &App,
    files: &[PathBuf],
    app_dir: &Path,
    workdir: &Path,
    sb: &SysBlock,
    rotational: bool,
    cleanup: &mut Cleanup,
) -> Result<RunResult> {
    let w: WorkloadSpec = c.host_workload;
    let seed = experiment::splitmix64(c.seed ^ rep as u64);
    drop_caches()?;
    start_workload(&o.exe, &w, files, seed, rotational, &mut cleanup.workers)?;
    sleep(settle_s(o, !w.is_none()))?;
    workers_alive(&mut cleanup.workers, "a background worker")?;
    let out = measure(
        o,
        c,
        &mut OnHost {
            exe: &o.exe,
            app,
            app_dir,
            workdir,
            timeout_s: c.timeout_s,
            stat: &sb.stat,
        },
    )?;
    cleanup.stop_workers();
    Ok(out)
}

/// What VM cells share on a device: the guest image, its data disk on the
/// device's filesystem, and the accelerator.
struct VmContext {
    image: vmimage::Image,
    disk: PathBuf,
    accel: vm::Accel,
    run_dir: PathBuf,
}

/// Build (or open) the guest image, make the guest's data disk on the
/// device's filesystem and fill it with the guest workload's files and the
/// app's, and pick the accelerator.
#[allow(clippy::too_many_arguments)]
fn prepare_vm(
    o: &Options,
    cells: &[&Cell],
    app: &App,
    workdir: &Path,
    run_dir: &Path,
    disk_bytes: u64,
    cleanup: &mut Cleanup,
    extra: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<VmContext> {
    let image = match &o.vm.image {
        Some(dir) => vmimage::open(dir).map_err(|e| Error::Usage(format!("--vm-image: {e}")))?,
        None => {
            progress(o, "building the guest image (tandem vm image)");
            vmimage::build(&vmimage::ImageOptions {
                out: run_dir.join("image"),
                tandem_exe: o.exe.clone(),
                kernel_package: "linux-image-amd64".into(),
                cache_dir: None,
                data_disk_bytes: None,
                quiet: o.quiet,
            })
            .map_err(|e| run_err(format!("building the guest image: {e}")))?
        }
    };
    let accel = match o.vm.accel.as_deref() {
        Some("tcg") => vm::Accel::Tcg("--vm-accel tcg".into()),
        Some(_) => vm::Accel::Kvm,
        None => {
            progress(o, "probing KVM");
            vm::probe_accel(&o.exe, &image.kernel, run_dir)
        }
    };
    if let vm::Accel::Tcg(why) = &accel {
        progress(o, &format!("QEMU runs with TCG: {why}"));
    }
    // The guest's disk, next to the host workload's files as in the paper's
    // setup, filled through a loop mount while the emulator is untimed.
    let disk = workdir.join("vm1.img");
    cleanup.push_file(disk.clone())?;
    progress(
        o,
        &format!("making the guest's data disk ({} MiB)", disk_bytes >> 20),
    );
    vmimage::make_data_disk(&disk, disk_bytes)
        .map_err(|e| run_err(format!("making the guest disk: {e}")))?;
    let mnt = run_dir.join("guest-disk");
    fs::create_dir_all(&mnt).map_err(|e| run_err(format!("{}: {e}", mnt.display())))?;
    cleanup.push_mount(mnt.clone())?;
    run_cmd(
        "mount",
        &[
            "-o",
            "loop",
            &disk.to_string_lossy(),
            &mnt.to_string_lossy(),
        ],
    )?;
    let nguest = guest_workload_files(cells)?;
    for i in 0..nguest {
        check_interrupted()?;
        workers::fill_file(
            &mnt.join(format!("file{i}")),
            o.file_bytes,
            0x9e57 + i as u64,
        )?;
    }
    if let App::Trace(_, t) = app {
        fill_app_files(&mnt.join("app"), t)?;
    }
    cleanup.pop_mount()?;
    let mut info = serde_json::Map::new();
    info.insert("accel".into(), accel.name().into());
    if let vm::Accel::Tcg(why) = &accel {
        info.insert("tcg_because".into(), why.clone().into());
    }
    info.insert("guest_kernel".into(), image.kernel_version.clone().into());
    info.insert("aio".into(), o.vm.disk.aio.clone().into());
    info.insert("cache".into(), o.vm.disk.cache.clone().into());
    info.insert("mem_mib".into(), o.vm.mem_mib.into());
    info.insert("vcpus".into(), 1.into());
    // Where QEMU's threads are in the blkio hierarchy: "own" (a group of
    // its own, boosted threads moved to the root) or "root".
    let own = o.vm.own_group && agent::sys::cgroup_v1_mount("blkio").is_some();
    info.insert(
        "blkio_group".into(),
        if own { "own" } else { "root" }.into(),
    );
    info.insert(
        "hostd_budget_fraction".into(),
        o.vm.hostd_budget_fraction
            .unwrap_or(agent::hostd::HostdConfig::default().budget_fraction)
            .into(),
    );
    info.insert("disk_bytes".into(), disk_bytes.into());
    let qv = Command::new(vm::qemu_binary())
        .arg("--version")
        .output()
        .map(|p| {
            String::from_utf8_lossy(&p.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default();
    info.insert("qemu".into(), qv.into());
    extra.insert("vm".into(), info.into());
    Ok(VmContext {
        image,
        disk,
        accel,
        run_dir: run_dir.to_path_buf(),
    })
}

/// Copy the cell's guest console, QEMU's and hostd's logs to
/// `OUT/vm-logs/<cell id>/`, for the record (the run directory goes away).
fn keep_vm_logs(o: &Options, c: &Cell, dir: &Path) {
    let Some(out) = &o.vm.logs else { return };
    let to = out.join("vm-logs").join(c.key().replace([' ', '='], "_"));
    if fs::create_dir_all(&to).is_err() {
        return;
    }
    for f in ["console.log", "qemu.log", "hostd.log"] {
        let _ = fs::copy(dir.join(f), to.join(f));
    }
}

/// The VM side of [`Measured`]: through the guest agent.
struct InGuest<'a> {
    guest: &'a mut vm::Guest,
    app: &'a str,
    timeout_s: f64,
}

impl Measured for InGuest<'_> {
    fn cold_start(&mut self) -> Result<Option<f64>> {
        use serde_json::json;
        // The guest's caches first (its sync writes reach the host), then
        // the host's.
        self.guest.call(json!({"op": "drop_caches"}), None)?;
        drop_caches()?;
        let a = self.guest.call(
            json!({"op": "start", "app": self.app, "timeout_s": self.timeout_s}),
            Some(Duration::from_secs_f64(self.timeout_s + 60.0)),
        )?;
        Ok(a.get("secs").and_then(serde_json::Value::as_f64))
    }
    fn sectors(&mut self) -> Result<u64> {
        Ok(self
            .guest
            .call(serde_json::json!({"op": "sectors"}), None)?
            .get("sectors")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0))
    }
}

/// The cell's coordination: none for `off`; for `help-rt`, hostd on the
/// host and guestd in the guest.
fn start_coordination(
    o: &Options,
    c: &Cell,
    guest: &mut vm::Guest,
    group: Option<&vm::VmGroup>,
) -> Result<Option<vm::Hostd>> {
    let mode = c.coordination;
    let ioprio = IoprioBoost::for_mode(mode);
    match (mode, ioprio) {
        (CoordMode::Off, _) => Ok(None),
        (CoordMode::HelpRt, Some(ioprio)) => {
            let h = vm::Hostd::start(
                &o.exe,
                guest,
                ioprio,
                group.map(|g| g.root.as_path()),
                o.vm.hostd_budget_fraction,
            )?;
            guest.call(serde_json::json!({"op": "guestd", "lease_ms": 1000}), None)?;
            Ok(Some(h))
        }
        (other, _) => Err(Error::Usage(format!(
            "coordination {:?}: the real runner runs {}",
            other.name(),
            COORDINATION
                .iter()
                .map(|m| m.name())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// hostd's counters over a repetition (metrics after minus before), into
/// the repetition's result.
fn hostd_counters(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    out: &mut RunResult,
) {
    for (k, name) in [
        ("boosted_seconds_total", "vm1_boosted_s"),
        ("boosts_total", "vm1_boosts"),
        ("helps_total", "vm1_helps"),
        ("budget_denials_total", "vm1_budget_denials"),
    ] {
        if let Some(a) = after.get(k) {
            let b = before.get(k).copied().unwrap_or(0.0);
            out.counters.insert(name.into(), a - b);
        }
    }
}

/// The repetitions of one VM cell: one guest boot for the cell, and for
/// `help-rt` a hostd and a guestd for it.
#[allow(clippy::too_many_arguments)]
fn run_vm_cell(
    o: &Options,
    c: &Cell,
    ci: usize,
    ncells: usize,
    ctx: &VmContext,
    host_files: &[PathBuf],
    rotational: bool,
    cleanup: &mut Cleanup,
) -> Result<Vec<RunResult>> {
    use serde_json::json;
    let host_w: WorkloadSpec = c.host_workload;
    let guest_w: WorkloadSpec = c.guest_workload.unwrap_or(WorkloadSpec::NONE);
    let gsched = c
        .guest_sched
        .unwrap_or(IoSched::None)
        .kernel_name()
        .to_string();
    progress(
        o,
        &format!(
            "cell {}/{} [{}]: booting the guest",
            ci + 1,
            ncells,
            c.key()
        ),
    );
    let dir = ctx.run_dir.join(format!("vm-cell{}", ci + 1));
    let mut guest = vm::Guest::boot(&vm::BootSpec {
        accel: &ctx.accel,
        kernel: &ctx.image.kernel,
        initramfs: &ctx.image.initramfs,
        disk: &ctx.disk,
        disk_opts: &o.vm.disk,
        mem_mib: o.vm.mem_mib,
        dir: &dir,
    })?;
    guest.call(json!({"op": "sched", "name": gsched}), None)?;
    // The VM in a blkio group of its own in every mode, so that `off` and
    // `help-rt` differ only by tandem; hostd moves the boosted I/O threads to
    // the root group (vm::VmGroup). Without a cgroup v1 blkio hierarchy, QEMU
    // stays in the root group and help-rt is the RT class alone.
    let group = if o.vm.own_group {
        vm::VmGroup::create(vm::VM_NAME, guest.pid(), |d| {
            cleanup.push_cgroup(d.to_path_buf())
        })?
    } else {
        None
    };
    let hostd = start_coordination(o, c, &mut guest, group.as_ref())?;
    let mut runs = Vec::new();
    for rep in 0..c.repetitions {
        progress_repetition(o, ci, ncells, c, rep);
        let before = hostd.as_ref().map(|h| h.metrics()).unwrap_or_default();
        let seed = experiment::splitmix64(c.seed ^ rep as u64);
        drop_caches()?;
        start_workload(
            &o.exe,
            &host_w,
            host_files,
            seed,
            rotational,
            &mut cleanup.workers,
        )?;
        if !guest_w.is_none() {
            guest.call(
                json!({"op": "workload", "spec": guest_w.name(), "seed": seed ^ 0x6e57, "rotational": rotational}),
                None,
            )?;
        }
        sleep(settle_s(o, !(host_w.is_none() && guest_w.is_none())))?;
        workers_alive(&mut cleanup.workers, "a background worker")?;
        let mut out = measure(
            o,
            c,
            &mut InGuest {
                guest: &mut guest,
                app: &o.scenario.app,
                timeout_s: c.timeout_s,
            },
        )?;
        if !guest_w.is_none() {
            guest.call(json!({"op": "stop"}), None)?;
        }
        cleanup.stop_workers();
        if let Some(h) = &hostd {
            hostd_counters(&before, &h.metrics(), &mut out);
        }
        runs.push(out);
    }
    if let Some(h) = hostd {
        h.stop()?;
    }
    guest.shutdown()?;
    drop(group);
    keep_vm_logs(o, c, &dir);
    Ok(runs)
}
