//! A device made ready for its cells, and undone after: `--device` (with
//! the user's consent) or an emulated device of the scenario's preset
//! brought up for the run; formatted and mounted (or a directory of its own
//! on a mounted `--device`); the workload files and the app's written while
//! the emulator is untimed; the guest's disk for VM cells. Every change is
//! recorded in the run's [`Cleanup`] journal before it is made.

use std::fs;
use std::path::{Path, PathBuf};

use devemu::run_cmd;
use experiment::Cell;

use crate::cleanup::{Cleanup, RunId, SchedRecord};
use crate::native::App;
use crate::options::Options;
use crate::sysfs::{self, SysBlock};
use crate::vm_cell::{self, VmContext};
use crate::{check_interrupted, guard, progress, run_err, workers, Error, Result};

/// A device ready for its cells: what they share.
pub(crate) struct Ready {
    /// The block device (`--device`, or the emulated device's loop device).
    pub dev: String,
    pub sb: SysBlock,
    /// The host workload's files, one per background process.
    pub files: Vec<PathBuf>,
    /// Where the app's trace files are (a trace app).
    pub app_dir: PathBuf,
    /// The run's directory on the device's file system.
    pub workdir: PathBuf,
    /// The guest of VM cells (none without VM cells).
    pub vm: Option<VmContext>,
    /// Whether the kernel sees the device as rotational (S caps writers).
    pub rotational: bool,
}

/// Bring the device up and fill it: the emulator untimed meanwhile. The
/// scheduler the device had is recorded for the cleanup to restore.
pub(crate) fn prepare(
    d: &DeviceRun,
    cleanup: &mut Cleanup,
    extra: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<Ready> {
    let need = need_of(d)?;
    let run_dir = cleanup.start(RunId::me())?;
    let (dev, emulated) = open_device(d, &need, cleanup)?;
    let sb = sysfs::sys_block(&dev)?;
    let original = sysfs::check_schedulers(d.cells, &dev, &sb)?;
    cleanup.set_sched(SchedRecord {
        file: sb.queue.join("scheduler"),
        original: original.clone(),
        tunables: sysfs::read_tunables(&sb.queue),
    })?;
    if let Some(inst) = &emulated {
        devemu::control::set_timed(inst, false)?;
    }
    let workdir = make_workdir(d, &dev, &run_dir, &need, cleanup)?;
    let (files, app_dir) = write_files(d, &dev, &workdir, &need, cleanup)?;
    let vm = if d.cells.iter().any(|c| !c.is_native()) {
        Some(vm_cell::prepare_vm(
            d,
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
        d.label,
        &dev,
        emulated.as_ref(),
        &sb,
        &original,
        d.o.file_bytes,
        extra,
    );
    let rotational = fs::read_to_string(sb.queue.join("rotational"))
        .map(|s| s.trim() == "1")
        .unwrap_or(true);
    Ok(Ready {
        dev,
        sb,
        files,
        app_dir,
        workdir,
        vm,
        rotational,
    })
}

/// Workload files a set of cells needs at most.
fn workload_files(cells: &[&Cell]) -> Result<u32> {
    let mut n = 0;
    for c in cells {
        let w = c.host_workload;
        n = n.max(w.readers + w.writers);
        // A native profile cell's threads work on the host's files.
        if let (true, Some(p)) = (c.is_native(), c.profile) {
            n = n.max(p.threads);
        }
    }
    Ok(n)
}

/// Workload files the guest of a set of cells needs at most (0: no VM cells).
pub(crate) fn guest_workload_files(cells: &[&Cell]) -> Result<u32> {
    let mut n = 0;
    for c in cells {
        if let Some(w) = c.guest_workload {
            n = n.max(w.readers + w.writers);
        }
        // A VM profile cell's threads work on the guest disk's files.
        if let (false, Some(p)) = (c.is_native(), c.profile) {
            n = n.max(p.threads);
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
pub(crate) struct DeviceRun<'a> {
    pub o: &'a Options,
    /// The scenario's device (a preset, or the label of `--device`).
    pub label: &'a str,
    pub cells: &'a [&'a Cell],
    pub app: &'a App,
    /// How the run may use `--device` (consented), `None` when emulated.
    pub device_use: Option<&'a guard::DeviceUse>,
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

fn need_of(d: &DeviceRun) -> Result<Need> {
    let o = d.o;
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
    d: &DeviceRun,
    need: &Need,
    cleanup: &mut Cleanup,
) -> Result<(String, Option<devemu::Instance>)> {
    let o = d.o;
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
    d: &DeviceRun,
    dev: &str,
    run_dir: &Path,
    need: &Need,
    cleanup: &mut Cleanup,
) -> Result<PathBuf> {
    let o = d.o;
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
            let sectors: u64 =
                fs::read_to_string(sysfs::sys_block(dev)?.stat.with_file_name("size"))
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
        if d.device_use.is_some() && sysfs::dev_of(w) != sysfs::rdev_of(dev) {
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
    d: &DeviceRun,
    dev: &str,
    workdir: &Path,
    need: &Need,
    cleanup: &mut Cleanup,
) -> Result<(Vec<PathBuf>, PathBuf)> {
    let o = d.o;
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
    label: &str,
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
    extra.insert(format!("device:{label}"), dinfo.into());
}

/// Write an app trace's files under `dir`, as the replay reads them.
pub(crate) fn fill_app_files(dir: &Path, t: &experiment::apptrace::AppTrace) -> Result<()> {
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
