//! What a run is asked to do ([`Options`], [`VmOptions`]), and the checks
//! of those options before anything on the machine is touched.

use std::path::PathBuf;

use experiment::procedure::Waits;
use experiment::{Cell, Scenario};

use crate::{vm, Error, Result};

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
    /// hostd's `--cfsv-boost` for `cfsv` cells: how the I/O-related threads
    /// are favoured (hostd's default, `nice`, unless asked).
    pub cfsv_boost: agent::cfsv::CfsvBoost,
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
            cfsv_boost: agent::cfsv::CfsvBoost::default(),
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
    /// The run's record for results.json (`meta.extra.provenance`): the
    /// tandem build and the command line; its cell counts and end are
    /// filled in as the run goes.
    pub provenance: experiment::Provenance,
}

impl Options {
    /// The suite's waits with this run's overrides (`--settle-s`,
    /// `--pause-s`), for the procedure.
    pub fn waits(&self) -> Waits {
        Waits {
            settle_s: self.settle_s,
            pause_s: self.pause_s,
        }
    }
}

/// The checks of a run's options before anything is touched; returns the
/// devices the cells name, in order.
pub(crate) fn check_options(o: &Options) -> Result<Vec<String>> {
    for c in &o.cells {
        if c.has_other_vms() {
            return Err(Error::Usage(format!(
                "matrix.other_vms {:?}: the real runner runs one VM (the simulator runs several)",
                c.other_vms
            )));
        }
        // The host's busy loops of a throughput or cold start-up cell run
        // beside a guest (CFS-v's case and `help-all`'s, `crate::cfsv_cell`);
        // a native one would ignore them. A hot start-up's run natively too
        // (the study's "no guest" reference).
        let beside_guest = matches!(
            c.benchmark,
            experiment::Benchmark::Throughput | experiment::Benchmark::Startup
        ) && !c.on_cpu_model();
        if c.is_native() && beside_guest && c.cpu.host_cpu_load > 0 {
            return Err(Error::Usage(format!(
                "matrix.host_cpu_load {} in a native {} cell: the real runner runs the host's busy loops beside VM throughput and cold start-up cells, and in hot start-up and latency cells",
                c.cpu.host_cpu_load, c.benchmark
            )));
        }
        // A CPU mode in a native cell has no vCPU to boost: the cell is the
        // "no guest" reference, run as with `off` (the simulator does the same).
        if c.is_native() && !c.coordination.is_off() && !c.coordination.is_cpu() {
            return Err(Error::Usage(format!(
                "coordination {:?} needs VM cells (matrix.guest_sched)",
                c.coordination
            )));
        }
    }
    if o.scenario.is_vm() {
        o.vm.disk.validate()?;
        if let Some(a) = &o.vm.accel {
            if !crate::vm::ACCELS.contains(&a.as_str()) {
                return Err(Error::Usage(format!(
                    "--vm-accel {a:?}: accepted: {}",
                    crate::vm::ACCELS.join(", ")
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
