//! VM cells: the app and the guest workload run in a QEMU guest whose disk
//! is a file on the device's file system, the host workload on the host.
//! [`InGuest`] is the procedure's host for them
//! ([`experiment::procedure::Host`]): the steps inside the guest go through
//! the guest agent (`crate::guest`), the host's steps run here.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use devemu::run_cmd;
use experiment::procedure::{self, Scope};
use experiment::{Cell, IoSched, RunResult, WorkloadSpec};
use policy::{CoordMode, IoprioBoost};
use serde_json::json;

use crate::cells::CellCtx;
use crate::cleanup::Cleanup;
use crate::cputime::{self, QemuThreads, Role, RunCpu, Snapshot};
use crate::device::{fill_app_files, guest_workload_files, DeviceRun};
use crate::native::App;
use crate::options::Options;
use crate::{
    check_interrupted, progress, run_err, sleep, vm, workers, workers_alive, Error, Result,
    COORDINATION,
};

/// What VM cells share on a device: the guest image, its data disk on the
/// device's filesystem, and the accelerator.
pub(crate) struct VmContext {
    image: vmimage::Image,
    disk: PathBuf,
    accel: vm::Accel,
    run_dir: PathBuf,
}

/// Build (or open) the guest image, make the guest's data disk on the
/// device's filesystem and fill it with the guest workload's files and the
/// app's, and pick the accelerator.
pub(crate) fn prepare_vm(
    d: &DeviceRun,
    workdir: &Path,
    run_dir: &Path,
    disk_bytes: u64,
    cleanup: &mut Cleanup,
    extra: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<VmContext> {
    let o = d.o;
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
    fill_guest_disk(d, &disk, &run_dir.join("guest-disk"), cleanup)?;
    let ctx = VmContext {
        image,
        disk,
        accel,
        run_dir: run_dir.to_path_buf(),
    };
    extra.insert("vm".into(), vm_record(o, &ctx, disk_bytes).into());
    Ok(ctx)
}

/// The guest workload's files and the app's, written on the guest's disk
/// through a loop mount on `mnt` (recorded first, unmounted after).
fn fill_guest_disk(d: &DeviceRun, disk: &Path, mnt: &Path, cleanup: &mut Cleanup) -> Result<()> {
    fs::create_dir_all(mnt).map_err(|e| run_err(format!("{}: {e}", mnt.display())))?;
    cleanup.push_mount(mnt.to_path_buf())?;
    run_cmd(
        "mount",
        &[
            "-o",
            "loop",
            &disk.to_string_lossy(),
            &mnt.to_string_lossy(),
        ],
    )?;
    let nguest = guest_workload_files(d.cells)?;
    for i in 0..nguest {
        check_interrupted()?;
        workers::fill_file(
            &mnt.join(format!("file{i}")),
            d.o.file_bytes,
            0x9e57 + i as u64,
        )?;
    }
    if let App::Trace(_, t) = d.app {
        fill_app_files(&mnt.join("app"), t)?;
    }
    cleanup.pop_mount()?;
    Ok(())
}

/// The guest, QEMU and coordination settings of the run, for results.json.
fn vm_record(
    o: &Options,
    ctx: &VmContext,
    disk_bytes: u64,
) -> serde_json::Map<String, serde_json::Value> {
    let mut info = serde_json::Map::new();
    info.insert("accel".into(), ctx.accel.name().into());
    if let vm::Accel::Tcg(why) = &ctx.accel {
        info.insert("tcg_because".into(), why.clone().into());
    }
    info.insert(
        "guest_kernel".into(),
        ctx.image.kernel_version.clone().into(),
    );
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
    info
}

/// Copy the cell's guest console, QEMU's and hostd's logs to
/// `OUT/vm-logs/<cell id>/`, for the record (the run directory goes away).
pub(crate) fn keep_vm_logs(o: &Options, c: &Cell, dir: &Path) {
    let Some(out) = &o.vm.logs else { return };
    let to = out.join("vm-logs").join(c.key().replace([' ', '='], "_"));
    if fs::create_dir_all(&to).is_err() {
        return;
    }
    for f in [
        "console.log",
        "qemu.log",
        "hostd.log",
        "vhost-blk.log",
        "vhost-blk.json",
    ] {
        let _ = fs::copy(dir.join(f), to.join(f));
    }
}

/// The VM side of the procedure: the guest's steps through the guest agent,
/// the host's here.
///
/// Its properties as a host: the app starts in the guest, and the
/// benchmarked disk is the guest's virtual disk (its sectors as the guest
/// sees them); dropping the guests' caches asks the guest agent, whose
/// write-back reaches the host; a background worker on the host that died
/// during the settle time fails the run; its counters are hostd's over the
/// repetition (for `help-rt`).
pub(crate) struct InGuest<'a> {
    x: &'a CellCtx<'a>,
    guest: &'a mut vm::Guest,
    hostd: Option<&'a vm::Hostd>,
    /// hostd's counters when the repetition began.
    before: BTreeMap<String, f64>,
    /// The vhost-user-blk backend's counters when the repetition began.
    backend_before: BTreeMap<String, f64>,
    /// The guest disk's sectors moved, and when, once the workloads started.
    disk_from: Option<(u64, std::time::Instant)>,
    guest_w: WorkloadSpec,
    /// The repetition's seed, for the workers' random offsets.
    seed: u64,
    cleanup: &'a mut Cleanup,
    /// The cell's cyclictest histogram, the repetitions' merged (latency).
    hist: &'a mut Option<cpusched::cyclictest::Histogram>,
    /// The host's busy loops of a throughput cell (`host_cpu_load`).
    hogs: Option<crate::cfsv_cell::HostHogs>,
    /// The repetition's CPU time of the app (in the guest), the workloads
    /// (the host's and the guest's) and QEMU's threads.
    cpu: RunCpu,
    /// QEMU's threads by role, found when the measurement began.
    qemu: Option<QemuThreads>,
    /// The host's and the guest's busy loops of a hot start-up.
    loads: Option<VmLoads>,
}

/// The CPU roles a VM cell counts besides the app's.
const VM_ROLES: [Role; 5] = [
    Role::HostWorkload,
    Role::GuestWorkload,
    Role::QemuMain,
    Role::QemuVcpu,
    Role::QemuOther,
];

impl InGuest<'_> {
    /// The threads of the host's workload, the guest's (through the agent)
    /// and QEMU's now ([`crate::cputime`]). A guest agent older than
    /// `workload_sched` leaves the guest's out (its counters then read 0).
    fn cpu_snapshot(&mut self) -> Snapshot {
        let mut s = crate::native::workers_snapshot(&self.cleanup.workers, Role::HostWorkload);
        if let Some(q) = &self.qemu {
            q.read_into(&mut s);
        }
        if !self.guest_w.is_none() {
            match self.guest.call(json!({"op": "workload_sched"}), None) {
                Ok(a) => s.add_rows(Role::GuestWorkload, &a["threads"]),
                Err(e) => tracing::warn!("the guest workload's CPU time: {e}"),
            }
        }
        s
    }
}

/// QEMU's threads by role: its main thread, and its vCPUs as QMP lists them.
fn qemu_threads(guest: &vm::Guest) -> Result<QemuThreads> {
    Ok(QemuThreads {
        pid: guest.pid(),
        vcpus: agent::qmp::query_threads(&guest.qmp_socket())
            .map_err(|e| run_err(format!("the vCPU threads: {e}")))?
            .vcpus
            .iter()
            .map(|&(_, tid)| tid)
            .collect(),
    })
}

impl procedure::Host for InGuest<'_> {
    type Error = Error;

    fn drop_caches(&mut self, scope: Scope) -> Result<()> {
        match scope {
            Scope::Guest => self
                .guest
                .call(json!({"op": "drop_caches"}), None)
                .map(drop),
            Scope::Host => crate::drop_caches(),
        }
    }

    fn start_workloads(&mut self) -> Result<Vec<WorkloadSpec>> {
        let host_w: WorkloadSpec = self.x.c.host_workload;
        let r = self.x.ready;
        crate::start_workload(
            &self.x.d.o.exe,
            &host_w,
            &r.files,
            self.seed,
            r.rotational,
            &mut self.cleanup.workers,
        )?;
        self.hogs = crate::cfsv_cell::HostHogs::start(self.x.c)?;
        if !self.guest_w.is_none() {
            self.guest.call(
                json!({"op": "workload", "spec": self.guest_w.name(), "seed": self.seed ^ 0x6e57, "rotational": r.rotational}),
                None,
            )?;
        }
        self.disk_from = Some((self.sectors()?, std::time::Instant::now()));
        Ok(vec![host_w, self.guest_w])
    }

    fn wait(&mut self, secs: f64) -> Result<()> {
        sleep(secs)
    }

    fn begin_measure(&mut self) -> Result<()> {
        if let Some(h) = &mut self.hogs {
            h.begin();
        }
        self.qemu = Some(qemu_threads(self.guest)?);
        let now = self.cpu_snapshot();
        self.cpu.begin(now);
        Ok(())
    }

    fn settle(&mut self, secs: f64) -> Result<()> {
        sleep(secs)?;
        workers_alive(&mut self.cleanup.workers, "a background worker")
    }

    fn start_app(&mut self, timeout_s: f64) -> Result<Option<f64>> {
        let mut req =
            json!({"op": "start", "app": self.x.d.o.scenario.app, "timeout_s": timeout_s});
        if let Some(rate) = crate::native::hot_work(self.x.c) {
            // A hot start: the guest does the host's work for its CPU time.
            req["work_per_us"] = rate.into();
        }
        let a = self.guest.call(
            req,
            // The guest times the start; its answer may take the timeout
            // and the agent's own work on a slow (TCG) guest.
            Some(Duration::from_secs_f64(timeout_s + 60.0)),
        )?;
        let secs = a.get("secs").and_then(serde_json::Value::as_f64);
        // The app's schedstat in the guest (absent from an older agent).
        self.cpu
            .app_start(cputime::parse_sched_json(&a["sched"]), secs);
        Ok(secs)
    }

    fn start_cpu_loads(&mut self) -> Result<()> {
        self.loads = Some(VmLoads::start(self.guest, self.x.c)?);
        Ok(())
    }

    fn stop_cpu_loads(&mut self, out: &mut RunResult) -> Result<()> {
        let Some(loads) = self.loads.take() else {
            return Ok(());
        };
        let (host, guest) = loads.finish(self.guest)?;
        crate::native::hot_counters(out, host, guest);
        Ok(())
    }

    fn latency(&mut self, loops: u64) -> Result<RunResult> {
        let run = guest_latency(self.guest, self.x.c, loops)?;
        crate::native::keep_histogram(self.hist, &run.hist);
        Ok(run.run_result())
    }

    fn profile(
        &mut self,
        p: &experiment::ProfileCell,
        duration_s: f64,
        sample_s: f64,
    ) -> Result<RunResult> {
        crate::profile::run_in_guest(self.guest, p, duration_s, sample_s, self.seed)
    }

    fn sectors(&mut self) -> Result<u64> {
        Ok(self
            .guest
            .call(json!({"op": "sectors"}), None)?
            .get("sectors")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0))
    }

    fn finish(&mut self, out: &mut RunResult) -> Result<()> {
        // What the guest's disk moved over the repetition (its readers and
        // the app's starts together), in MB/s: the guest readers' share of
        // the disk, compared across modes.
        if let Some((from, t0)) = self.disk_from.take() {
            let mb = (self.sectors()?.saturating_sub(from) * 512) as f64 / 1e6;
            out.counters.insert(
                "vm1_guest_disk_mb_s".into(),
                mb / t0.elapsed().as_secs_f64(),
            );
        }
        let now = self.cpu_snapshot();
        self.cpu.finish(now, &VM_ROLES, out);
        if !self.guest_w.is_none() {
            self.guest.call(json!({"op": "stop"}), None)?;
        }
        self.cleanup.stop_workers();
        if let Some(h) = self.hogs.take() {
            h.finish(out)?;
        }
        if let Some(iops) = crate::cfsv_cell::read_iops(&self.guest_w, out) {
            out.counters
                .insert(crate::cfsv_cell::VM1_READ_IOPS.into(), iops);
        }
        if let Some(h) = self.hostd {
            let after = h.metrics();
            hostd_counters(&self.before, &after, out);
            crate::cfsv_cell::cfsv_counters(&after, out);
        }
        if let Some(b) = self.guest.backend() {
            crate::vhost::counters_into(&self.backend_before, &b.counters(), out);
        }
        Ok(())
    }

    fn unsupported(&self, what: &str) -> Error {
        crate::native::cpu_model_only(what)
    }
}
/// The busy loops of a VM cell's CPU benchmarks (latency, hot start-up):
/// the host's (`host_cpu_load`) and the guest's (`guest_cpu_load`, by the
/// agent), started together and warmed up ([`crate::latency::WARMUP`]),
/// each side sampled when the measurement begins. Dropping it stops the
/// host's; [`VmLoads::finish`] stops the guest's too (after an error the
/// agent's `stop` or the guest's shutdown does).
pub(crate) struct VmLoads {
    host: crate::cpuload::CpuLoad,
    host_begun: crate::cpuload::Sample,
    guest_loops: u8,
    guest_begun: serde_json::Value,
}

impl VmLoads {
    pub fn start(guest: &mut vm::Guest, c: &Cell) -> Result<VmLoads> {
        let host = crate::cpuload::CpuLoad::start(c.cpu.host_cpu_load as usize)?;
        let guest_loops = c.cpu.guest_cpu_load;
        guest.call(json!({"op": "cpu_load", "n": guest_loops}), None)?;
        sleep(crate::latency::WARMUP.as_secs_f64())?;
        Ok(VmLoads {
            host_begun: host.sample(),
            host,
            guest_loops,
            guest_begun: guest.call(json!({"op": "cpu_load_sample"}), None)?,
        })
    }

    /// The host's and the guest's loops' iterations per second since the
    /// measurement began (`None` for a side without loops), after checking
    /// none died; both sides' loops stop, on an error too.
    pub fn finish(mut self, guest: &mut vm::Guest) -> Result<(Option<f64>, Option<f64>)> {
        let rates = (|| {
            let host_now = self.host.sample();
            let guest_now = guest.call(json!({"op": "cpu_load_sample"}), None)?;
            self.host.check_running()?;
            let host = (!self.host.is_empty()).then(|| host_now.rate_since(&self.host_begun));
            let guest = if self.guest_loops > 0 {
                Some(crate::latency::guest_loops_rate(
                    &self.guest_begun,
                    &guest_now,
                )?)
            } else {
                None
            };
            Ok((host, guest))
        })();
        self.host.stop();
        let stopped = guest.call(json!({"op": "cpu_load", "n": 0}), None);
        let rates = rates?;
        stopped?;
        Ok(rates)
    }
}

/// One repetition of a VM latency cell: the cell's loops ([`VmLoads`])
/// started, the guest's cyclictest for `loops` samples, the loops sampled
/// around it and stopped.
fn guest_latency(
    guest: &mut vm::Guest,
    c: &Cell,
    loops: u64,
) -> Result<crate::latency::LatencyRun> {
    use crate::latency;
    let threads = qemu_threads(guest)?;
    let loads = VmLoads::start(guest, c)?;
    let r = (|| {
        let sched_before = threads.snapshot();
        let a = guest.call(
            json!({"op": "cyclictest", "loops": loops}),
            Some(latency::run_timeout(loops)),
        )?;
        let sched_after = threads.snapshot();
        let output = a
            .get("output")
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| run_err(format!("cyclictest in the guest: no output in {a}")))?;
        Ok((
            latency::parse(output)?,
            cputime::counters(&sched_before, &sched_after, &Role::QEMU),
        ))
    })();
    let rates = loads.finish(guest);
    let (hist, qemu_threads) = r?;
    let (host_loops_iter_s, guest_loops_iter_s) = rates?;
    Ok(latency::LatencyRun {
        hist,
        host_loops_iter_s,
        guest_loops_iter_s,
        qemu_threads,
    })
}

/// The cell's coordination: none for `off`; for `help-rt` and `help-cpu`,
/// hostd on the host (ioprio RT on the I/O threads, `SCHED_RR` on the vCPU
/// threads) and guestd in the guest (with its CPU detection for
/// `help-cpu`); for `help-all`, hostd with both and `--help-all` (any HELP
/// boosts both) and guestd with both detections; for `static-cpu`, the vCPU threads at `SCHED_RR`
/// [`STATIC_CPU_RR_PRIO`] for the cell ([`static_cpu`]); for `cfsv`,
/// hostd `--cfsv` alone.
fn start_coordination(
    o: &Options,
    c: &Cell,
    guest: &mut vm::Guest,
    group: Option<&vm::VmGroup>,
    cleanup: &mut Cleanup,
) -> Result<Option<vm::Hostd>> {
    let mode = c.coordination;
    let boost = match (mode, IoprioBoost::for_mode(mode)) {
        (CoordMode::Off, _) => return Ok(None),
        (CoordMode::StaticCpu, _) => return static_cpu(guest, cleanup).map(|()| None),
        (CoordMode::VhostIoprio, _) => return crate::vm_vhost::start_marking(guest).map(|()| None),
        (CoordMode::HelpRt, Some(ioprio)) => vm::HostdBoost::Io(ioprio),
        (CoordMode::HelpCpu, _) => vm::HostdBoost::Cpu(agent::cpuboost::CpuBoostKind::Rr),
        (CoordMode::HelpAll, Some(ioprio)) => {
            vm::HostdBoost::All(ioprio, agent::cpuboost::CpuBoostKind::Rr)
        }
        // hostd alone: it classifies QEMU's threads itself, no guestd.
        (CoordMode::Cfsv, _) => {
            let b = vm::HostdBoost::Cfsv(o.vm.cfsv_boost);
            return vm::Hostd::start(&o.exe, guest, b, None, None).map(Some);
        }
        (other, _) => {
            return Err(Error::Usage(format!(
                "coordination {:?}: the real runner runs {}",
                other.name(),
                COORDINATION
                    .iter()
                    .map(|m| m.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            )))
        }
    };
    let h = vm::Hostd::start(
        &o.exe,
        guest,
        boost,
        group.map(|g| g.root.as_path()),
        o.vm.hostd_budget_fraction,
    )?;
    // guestd's CPU detection for the modes that boost vCPUs: in
    // `help-all` its HELPs, for the CPU or the I/O, each boost both.
    let cpu = mode.boosts_vcpus();
    guest.call(
        serde_json::json!({"op": "guestd", "lease_ms": 1000, "cpu": cpu}),
        None,
    )?;
    Ok(Some(h))
}

/// `static-cpu`'s priority: pvsched's boost, `SCHED_RR` 8, as the
/// simulator's (`cpusched::cyclictest::PVSCHED_RR_PRIO`).
pub const STATIC_CPU_RR_PRIO: u8 = cpusched::cyclictest::PVSCHED_RR_PRIO;

/// `static-cpu`: every vCPU thread of the VM (QMP's `query-cpus-fast`),
/// and under TCG the thread that fires their timers (QEMU's main loop,
/// [`agent::qmp::QemuThreads::timer_tids`], as hostd's CPU boost), at
/// `SCHED_RR` [`STATIC_CPU_RR_PRIO`] for the whole cell, each recorded in
/// the run's journal first, so that the end of the cell, an error, Ctrl-C
/// or `tandem bench cleanup` after a killed run puts it back. QEMU's other
/// threads are left alone. The kernel's RT throttling stays as it is.
fn static_cpu(guest: &vm::Guest, cleanup: &mut Cleanup) -> Result<()> {
    let threads = agent::qmp::query_threads(&guest.qmp_socket())
        .map_err(|e| run_err(format!("static-cpu: {e}")))?;
    if threads.vcpus.is_empty() {
        return Err(run_err("static-cpu: QMP names no vCPU thread"));
    }
    let mut tids = threads.vcpu_tids();
    tids.extend(threads.timer_tids(guest.pid()));
    for tid in tids {
        let orig = agent::sys::sched_get(tid)
            .map_err(|e| run_err(format!("static-cpu: vCPU thread {tid}: {e}")))?;
        let start = agent::sys::thread_start_time(tid)
            .ok_or_else(|| run_err(format!("static-cpu: vCPU thread {tid} is gone")))?;
        cleanup.push_thread(crate::cleanup::ThreadSched { tid, start, orig })?;
        agent::sys::sched_set_policy(tid, libc::SCHED_RR, STATIC_CPU_RR_PRIO.into())
            .map_err(|e| run_err(format!("static-cpu: SCHED_RR on vCPU thread {tid}: {e}")))?;
    }
    Ok(())
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

/// A booted guest and its blkio group, or why the guest died while it
/// booted (its QEMU exited: a panic, a power-off).
type Booted = std::result::Result<(vm::Guest, Option<vm::VmGroup>), String>;

/// Boot the cell's guest with its scheduler, and put it in a blkio group of
/// its own when asked.
fn boot(x: &CellCtx, ctx: &VmContext, dir: &Path, cleanup: &mut Cleanup) -> Result<Booted> {
    let o = x.d.o;
    let gsched =
        x.c.guest_sched
            .unwrap_or(IoSched::None)
            .kernel_name()
            .to_string();
    progress(
        o,
        &format!(
            "cell {}/{} [{}]: booting the guest",
            x.ci + 1,
            x.d.cells.len(),
            x.c.key()
        ),
    );
    crate::vm_vhost::host_idling(x)?;
    let backend = crate::vm_vhost::backend_for(x, &ctx.disk, dir, cleanup)?;
    let socket = backend.as_ref().map(|b| b.socket.clone());
    let spec = vm::BootSpec {
        accel: &ctx.accel,
        kernel: &ctx.image.kernel,
        initramfs: &ctx.image.initramfs,
        disk: &ctx.disk,
        disk_opts: &o.vm.disk,
        mem_mib: o.vm.mem_mib,
        dir,
        vhost_socket: socket.as_deref(),
    };
    let mut guest = match vm::Guest::boot_or_died(&spec, backend) {
        Ok(g) => g,
        Err((e, true)) => return Ok(Err(e.to_string())),
        Err((e, false)) => return Err(e),
    };
    if let Err(e) = guest.call(json!({"op": "sched", "name": gsched}), None) {
        return if guest.is_dead() {
            Ok(Err(e.to_string()))
        } else {
            Err(e)
        };
    }
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
    Ok(Ok((guest, group)))
}

/// The repetitions of one VM cell, each through the procedure: one guest
/// boot for the cell, and for `help-rt` a hostd and a guestd for it. The
/// cell's logs (guest console, QEMU, hostd) are kept in `OUT/vm-logs/`
/// however it ends, once its QEMU is gone.
pub(crate) fn run_cell(
    x: &CellCtx,
    cleanup: &mut Cleanup,
    hist: &mut Option<cpusched::cyclictest::Histogram>,
    extra: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<RunResult>> {
    let ctx = x
        .ready
        .vm
        .as_ref()
        .ok_or_else(|| run_err("VM cell without a guest"))?;
    let dir = ctx.run_dir.join(format!("vm-cell{}", x.ci + 1));
    let r = cell_in_guest(x, ctx, &dir, cleanup, hist, extra);
    keep_vm_logs(x.d.o, x.c, &dir);
    r
}

/// [`run_cell`]'s guest and repetitions, its files in `dir`.
fn cell_in_guest(
    x: &CellCtx,
    ctx: &VmContext,
    dir: &Path,
    cleanup: &mut Cleanup,
    hist: &mut Option<cpusched::cyclictest::Histogram>,
    extra: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<RunResult>> {
    let o = x.d.o;
    let guest_w: WorkloadSpec = x.c.guest_workload.unwrap_or(WorkloadSpec::NONE);
    let (mut guest, group) = match boot(x, ctx, dir, cleanup)? {
        Ok(booted) => booted,
        // The guest died while it booted: the cell fails, the run goes on.
        Err(why) => {
            crate::vm_vhost::fail_cell(x, None, cleanup, extra, &why, 0);
            return Ok(Vec::new());
        }
    };
    let hostd = start_coordination(o, x.c, &mut guest, group.as_ref(), cleanup)?;
    let mut runs = Vec::new();
    for rep in 0..x.c.repetitions {
        x.progress_repetition(rep);
        let backend_before = guest.backend().map(|b| b.counters()).unwrap_or_default();
        let mut host = InGuest {
            x,
            guest: &mut guest,
            hostd: hostd.as_ref(),
            before: hostd.as_ref().map(|h| h.metrics()).unwrap_or_default(),
            backend_before,
            disk_from: None,
            guest_w,
            seed: x.rep_seed(rep),
            cleanup,
            hist: &mut *hist,
            hogs: None,
            cpu: RunCpu::default(),
            qemu: None,
            loads: None,
        };
        match procedure::run_repetition(x.c, &o.waits(), &mut host) {
            Ok(r) => runs.push(r),
            Err(e) => {
                // A dead disk backend or a dead guest fails this cell, not
                // the run: the next cell boots a guest of its own.
                let why = match guest.backend().and_then(|b| b.died()) {
                    Some(why) => why,
                    None if guest.is_dead() => e.to_string(),
                    None => return Err(e),
                };
                crate::vm_vhost::fail_cell(x, Some(guest), cleanup, extra, &why, rep);
                drop(hostd);
                drop(group);
                return Ok(runs);
            }
        }
    }
    if let Some(h) = hostd {
        h.stop()?;
    }
    cleanup.restore_threads()?;
    guest.shutdown()?;
    drop(group);
    Ok(runs)
}
