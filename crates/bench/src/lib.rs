//! tandem's real runner: a scenario's cells on a real block device, with the
//! kernel's schedulers, real processes, dropped caches and, for VM cells, a
//! QEMU guest whose disk is on that device.
//!
//! The procedure is the S suite's, written once in
//! [`experiment::procedure`] for the simulator and this runner alike; this
//! crate implements its steps ([`experiment::procedure::Host`]) on the host
//! for native cells (`native::OnHost`) and through the guest agent for VM
//! cells (`vm_cell::InGuest`). Results are written by the `experiment`
//! crate, as the simulator's are, with `runner = real`.
//!
//! The modules, by job:
//! - [`options`]: what a run is asked to do, checked before anything is
//!   touched;
//! - `device`: a device brought up (or `--device`), formatted, mounted and
//!   filled with the workload and app files; the machine recorded for
//!   results.json;
//! - [`sysfs`]: the kernel's block-layer files (schedulers, tunables, stats)
//!   and the cache drop;
//! - `cells`: each device's cells in turn, with the scheduler switched per
//!   cell, then the outputs;
//! - `native` and `vm_cell`: the procedure's steps for native and VM
//!   cells;
//! - `interrupt`: the stop signals, which every wait checks;
//! - [`cleanup`], [`guard`], [`vm`], [`guest`], [`workers`], [`record`]: the
//!   undo journal, the consent to write to a device, QEMU guests, the agent
//!   in the guest, background processes and app replay, trace recording.
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
//!
//! See the crate's README.md for where each step lives and how to add a
//! benchmark.

use std::path::Path;

use experiment::{CellResult, IoSched};
use policy::CoordMode;

mod cells;
mod cfsv_cell;
pub mod cleanup;
pub mod cpuload;
pub mod cputime;
mod device;
pub mod guard;
pub mod guest;
mod interrupt;
pub mod latency;
mod native;
pub mod options;
pub mod profile;
pub mod record;
pub mod sysfs;
pub mod vhost;
pub mod vm;
mod vm_cell;
mod vm_vhost;
pub mod workers;

pub use cleanup::{recover_interrupted, Cleanup};
pub(crate) use interrupt::{check_interrupted, sleep};
pub(crate) use native::{app_of, start_workload, time_start, workers_alive};
pub use options::{Options, VmOptions};
pub(crate) use sysfs::{drop_caches, sectors_done};

/// Failures are the device emulator's: usage errors (exit code 2) and run
/// errors (exit code 1), as the command line reports them.
pub use devemu::{Error, Result};

pub(crate) fn run_err(m: impl Into<String>) -> Error {
    Error::Run(m.into())
}

// The S suite's timing and write caps: `experiment::suite`, shared with the
// simulator.
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

/// Coordination modes the real runner runs: `off` without tandem;
/// `help-rt` with `tandem guestd` in the guest and `tandem hostd` on the
/// host (ioprio RT on the QEMU process's threads while helped); `help-cpu`
/// the same for the vCPU threads (`SCHED_RR` while helped); `static-cpu`,
/// the vCPU threads at `SCHED_RR` 8 for the whole cell, set by the runner;
/// `cfsv`, `tandem hostd --cfsv` alone (no guestd: the host classifies the
/// QEMU threads itself), with `--cfsv-boost` from `--vm-cfsv-boost`;
/// `vhost-ioprio`, the guest's disk on `tandem vhost-blk` and guestd marking
/// the starting app's I/O priority in the guest (`vhost`); `help-all`,
/// hostd `--help-all` with both boosts (any HELP boosts the I/O threads and
/// the vCPUs) and guestd with both detections.
/// `help-weight` needs the VM in a cgroup of its own and `help-wr` a kernel
/// patch; the simulator runs those.
pub const COORDINATION: &[CoordMode] = &[
    CoordMode::Off,
    CoordMode::HelpRt,
    CoordMode::StaticCpu,
    CoordMode::HelpCpu,
    CoordMode::Cfsv,
    CoordMode::VhostIoprio,
    CoordMode::HelpAll,
];

/// Progress lines on stderr, when it is a terminal and not `--quiet`.
pub(crate) fn progress(o: &Options, msg: &str) {
    use std::io::IsTerminal;
    if !o.quiet && std::io::stderr().is_terminal() {
        eprintln!("tandem bench: {msg}");
    }
}

/// Run the cells and write the outputs into `out`. Needs root.
pub fn run(o: &Options, out: &Path) -> Result<Vec<CellResult>> {
    devemu::need_root(
        "tandem bench run",
        "it switches I/O schedulers, drops caches, mounts file systems and brings up emulated devices",
    )?;
    let devices = options::check_options(o)?;
    let app = native::app_of(&o.scenario.app)?;
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
    cells::run_devices(o, out, &devices, &app, device_use.as_ref())
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
