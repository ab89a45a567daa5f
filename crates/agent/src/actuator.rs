//! How hostd favours a VM: actuators, and the journal that lets any boost be
//! undone, even after a crash.
//!
//! - [`IoprioActuator`]: the I/O priority (`ioprio_set`) of every thread of
//!   the VM's QEMU process: class RT (level 4 by default) or BE level 0. It
//!   acts where the competitors share the VM's block cgroup (BFQ serves the
//!   RT class before BE inside one group, and ranks BE levels by weight).
//! - [`CgroupWeightActuator`]: the BFQ weight of the VM's own cgroup (v2
//!   `io.bfq.weight`, v1 `blkio.bfq.weight`): BFQ schedules groups by weight,
//!   and a thread's RT class inside one group does not beat another group.
//! - [`CgroupMoveActuator`]: moves the VM's I/O threads into another cgroup
//!   v1 blkio group (the hierarchy's root, typically) while boosted, so that
//!   BFQ re-queues their queues at once and the boost's I/O class applies
//!   without waiting for the queue's next turn (see the type).
//! - [`BfqIdlingActuator`]: BFQ's `strict_guarantees` and a longer
//!   `slice_idle` on the host disks under the VM's images while boosted, so
//!   that BFQ waits for the VM's next request instead of filling the disk
//!   with others' requests (see the type).
//! - [`crate::cpuboost::CpuActuator`]: the VM's vCPU threads, named by QMP:
//!   `SCHED_RR`, a nice value, or the VM's cgroup v1 `cpu.shares`, under
//!   the cap of [`crate::cpuboost::BoostCap`]. An actuator acts for one
//!   [`Resource`]: the I/O ones end with an I/O boost, the CPU one with a
//!   CPU boost.
//!
//! Before any knob is changed, its original value is written to the
//! [`Journal`] (a state file, `/run/tandem/hostd.state` by default), and the
//! journal is saved to disk; on unboost the value is restored and the entry
//! dropped. At start hostd restores whatever a crashed predecessor left.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::sys;
use crate::{err, Result};
use policy::Resource;

/// A VM as the actuators see it.
#[derive(Clone, Debug)]
pub struct VmTarget {
    pub name: String,
    /// The QEMU process.
    pub pid: u32,
    /// Its cgroup directory, for the cgroup actuator.
    pub cgroup: Option<PathBuf>,
    /// Its vCPU threads (from QMP), which the I/O actuators leave alone.
    pub vcpu_tids: Vec<u32>,
    /// The threads outside the vCPUs that deliver their timer interrupts
    /// ([`crate::qmp::QemuThreads::timer_tids`]: under TCG, QEMU's main
    /// loop), boosted with the vCPUs by the CPU actuator; the I/O
    /// actuators treat them as any other I/O thread.
    pub timer_tids: Vec<u32>,
}

impl VmTarget {
    /// The threads the I/O actuators act on, with their start times: every
    /// thread of the QEMU process but the vCPU threads, as `/proc` lists
    /// them now (pool workers come and go); threads gone meanwhile are left
    /// out.
    pub fn io_threads(&self) -> Result<Vec<(u32, u64)>> {
        let tids = sys::threads(self.pid)
            .map_err(|e| err(format!("VM {}: /proc/{}/task: {e}", self.name, self.pid)))?;
        Ok(tids
            .into_iter()
            .filter(|tid| !self.vcpu_tids.contains(tid))
            .filter_map(|tid| sys::thread_start_time(tid).map(|start| (tid, start)))
            .collect())
    }
}

/// One changed knob and its original value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// Thread `tid` (started at `start`, in clock ticks after boot) had I/O
    /// priority `orig`.
    Ioprio {
        vm: String,
        tid: u32,
        start: u64,
        orig: u32,
    },
    /// `file` held `orig` (the weight).
    CgroupWeight {
        vm: String,
        file: PathBuf,
        orig: u32,
    },
    /// Thread `tid` (started at `start`) was in the cgroup directory `orig`.
    ThreadCgroup {
        vm: String,
        tid: u32,
        start: u64,
        orig: PathBuf,
    },
    /// The BFQ tunable `file` held `orig`.
    BfqTunable {
        vm: String,
        file: PathBuf,
        orig: String,
    },
    /// vCPU thread `tid` (started at `start`) had this policy, RT
    /// priority and nice value.
    Sched {
        vm: String,
        tid: u32,
        start: u64,
        orig: sys::SchedState,
    },
    /// The VM's cgroup v1 `cpu.shares` file held `orig`.
    CpuShares {
        vm: String,
        file: PathBuf,
        orig: u64,
    },
    /// Thread `tid` (started at `start`) was in the cgroup v1 `cpu` group
    /// directory `orig` (hostd's `cfsv` mode moved it).
    CpuCgroup {
        vm: String,
        tid: u32,
        start: u64,
        orig: PathBuf,
    },
}

impl Entry {
    fn vm(&self) -> &str {
        match self {
            Entry::Ioprio { vm, .. }
            | Entry::CgroupWeight { vm, .. }
            | Entry::ThreadCgroup { vm, .. }
            | Entry::BfqTunable { vm, .. }
            | Entry::Sched { vm, .. }
            | Entry::CpuShares { vm, .. }
            | Entry::CpuCgroup { vm, .. } => vm,
        }
    }

    /// Which boost the knob belongs to.
    pub fn resource(&self) -> Resource {
        match self {
            Entry::Sched { .. } | Entry::CpuShares { .. } | Entry::CpuCgroup { .. } => {
                Resource::Cpu
            }
            _ => Resource::Io,
        }
    }

    /// Puts the original value back. A thread that is gone (or whose id now
    /// names another thread) needs nothing.
    pub fn revert(&self) -> Result<()> {
        match self {
            Entry::Ioprio {
                tid, start, orig, ..
            } => {
                if sys::thread_start_time(*tid) == Some(*start) {
                    match sys::ioprio_set(*tid, *orig) {
                        Ok(()) => {}
                        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                        Err(e) => return Err(err(format!("ioprio_set({tid}): {e}"))),
                    }
                }
                Ok(())
            }
            Entry::CgroupWeight { file, orig, .. } => restore_file(file, orig),
            // A BFQ tunable gone with a scheduler change needs nothing: the
            // new BFQ starts from its defaults anyway.
            Entry::BfqTunable { file, orig, .. } => restore_file(file, orig),
            Entry::CpuShares { file, orig, .. } => restore_file(file, orig),
            Entry::Sched {
                tid, start, orig, ..
            } => {
                if sys::thread_start_time(*tid) != Some(*start) {
                    return Ok(());
                }
                match sys::sched_set(*tid, orig) {
                    Ok(()) => Ok(()),
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
                    Err(e) => Err(err(format!("restoring thread {tid}'s scheduling: {e}"))),
                }
            }
            Entry::ThreadCgroup {
                tid, start, orig, ..
            }
            | Entry::CpuCgroup {
                tid, start, orig, ..
            } => {
                // A thread that is gone, or a group that was removed (its VM
                // was torn down), needs nothing.
                if sys::thread_start_time(*tid) != Some(*start) || !orig.exists() {
                    return Ok(());
                }
                match sys::move_thread(orig, *tid) {
                    Ok(()) => Ok(()),
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
                    Err(e) => Err(err(format!(
                        "moving thread {tid} back to {}: {e}",
                        orig.display()
                    ))),
                }
            }
        }
    }
}

/// Writes `orig` back into the knob `file`, unless the file is gone (its
/// cgroup or its scheduler was removed), which needs nothing.
fn restore_file(file: &Path, orig: &impl std::fmt::Display) -> Result<()> {
    if !file.exists() {
        return Ok(());
    }
    std::fs::write(file, format!("{orig}\n")).map_err(|e| err(format!("{}: {e}", file.display())))
}

/// The original values of every knob hostd changed, mirrored in a state file.
#[derive(Debug)]
pub struct Journal {
    path: Option<PathBuf>,
    entries: Vec<Entry>,
}

#[derive(Serialize, Deserialize)]
struct JournalFile {
    entries: Vec<Entry>,
}

impl Journal {
    /// A journal saved at `path` (`None`: in memory only, for tests).
    pub fn new(path: Option<PathBuf>) -> Journal {
        Journal {
            path,
            entries: Vec::new(),
        }
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn has_ioprio(&self, tid: u32, start: u64) -> bool {
        self.entries.iter().any(
            |e| matches!(e, Entry::Ioprio { tid: t, start: s, .. } if *t == tid && *s == start),
        )
    }

    pub fn has_thread_cgroup(&self, tid: u32, start: u64) -> bool {
        self.entries.iter().any(
            |e| matches!(e, Entry::ThreadCgroup { tid: t, start: s, .. } if *t == tid && *s == start),
        )
    }

    /// Records an entry and saves the journal before the knob is changed.
    pub fn add(&mut self, e: Entry) -> Result<()> {
        self.entries.push(e);
        self.save()
    }

    /// Reverts and forgets the entries of VM `vm`; returns the first error.
    pub fn revert_vm(&mut self, vm: &str) -> Result<()> {
        self.revert_where(|e| e.vm() == vm)
    }

    /// Reverts and forgets the scheduling entries of thread `tid`
    /// (started at `start`): its policy and nice, its `cpu` group.
    pub fn revert_thread(&mut self, tid: u32, start: u64) -> Result<()> {
        self.revert_where(|e| match e {
            Entry::Sched {
                tid: t, start: s, ..
            }
            | Entry::CpuCgroup {
                tid: t, start: s, ..
            } => *t == tid && *s == start,
            _ => false,
        })
    }

    /// Reverts and forgets the entries of VM `vm` for `resource` only.
    pub fn revert_vm_resource(&mut self, vm: &str, resource: Resource) -> Result<()> {
        self.revert_where(|e| e.vm() == vm && e.resource() == resource)
    }

    fn revert_where(&mut self, pick: impl Fn(&Entry) -> bool) -> Result<()> {
        let mut first = Ok(());
        let mut keep = Vec::new();
        for e in self.entries.drain(..) {
            if pick(&e) {
                if let Err(x) = e.revert() {
                    if first.is_ok() {
                        first = Err(x);
                    }
                }
            } else {
                keep.push(e);
            }
        }
        self.entries = keep;
        self.save()?;
        first
    }

    /// Reverts and forgets everything.
    pub fn revert_all(&mut self) -> Result<()> {
        let mut first = Ok(());
        for e in self.entries.drain(..) {
            if let Err(x) = e.revert() {
                if first.is_ok() {
                    first = Err(x);
                }
            }
        }
        self.save()?;
        first
    }

    /// Writes the state file (atomically: a temporary file, then a rename);
    /// removes it when nothing is boosted.
    pub fn save(&self) -> Result<()> {
        let Some(p) = &self.path else { return Ok(()) };
        if self.entries.is_empty() {
            match std::fs::remove_file(p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(err(format!("{}: {e}", p.display()))),
            }
            return Ok(());
        }
        if let Some(d) = p.parent() {
            let _ = std::fs::create_dir_all(d);
        }
        let tmp = p.with_extension("tmp");
        let text = serde_json::to_string_pretty(&JournalFile {
            entries: self.entries.clone(),
        })
        .map_err(|e| err(e.to_string()))?;
        // Root's only: the next hostd trusts this file's entries (see
        // `recover`).
        let _ = std::fs::remove_file(&tmp);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|e| err(format!("{}: {e}", tmp.display())))?;
        std::fs::rename(&tmp, p).map_err(|e| err(format!("{}: {e}", p.display())))
    }

    /// Reverts what a previous hostd left in the state file at `path` (it
    /// crashed or was killed while boosting) and removes the file. The file
    /// is read only if it and its directory are this process's user's and
    /// no one else may write them; each entry is reverted only if `scope`
    /// allows it (a knob this hostd would touch). Returns how many knobs
    /// were restored and why the others were refused.
    pub fn recover(path: &Path, scope: &RecoveryScope) -> Result<Recovered> {
        let text = match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Recovered::default()),
            Err(e) => return Err(err(format!("{}: {e}", path.display()))),
            Ok(_) => {
                check_private(path)?;
                std::fs::read_to_string(path)
                    .map_err(|e| err(format!("{}: {e}", path.display())))?
            }
        };
        let _ = std::fs::remove_file(path.with_extension("tmp"));
        let f: JournalFile = serde_json::from_str(&text).map_err(|e| {
            err(format!(
                "{}: unreadable state file ({e}); fix or remove it",
                path.display()
            ))
        })?;
        let mut out = Recovered::default();
        let mut entries = Vec::new();
        for e in f.entries {
            match scope.allows(&e) {
                Ok(()) => entries.push(e),
                Err(why) => out.refused.push(why),
            }
        }
        out.restored = entries.len();
        let mut j = Journal {
            path: Some(path.to_path_buf()),
            entries,
        };
        j.revert_all()?;
        Ok(out)
    }
}

/// What [`Journal::recover`] did.
#[derive(Debug, Default)]
pub struct Recovered {
    pub restored: usize,
    /// Entries left alone, each with the reason.
    pub refused: Vec<String>,
}

/// Refuses a state file that someone other than this process's user could
/// have written: a symbolic link, a file or directory owned by another user,
/// or writable by group or others.
pub fn check_private(path: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    for (p, what) in [
        (path, "state file"),
        (dir.as_path(), "state file's directory"),
    ] {
        let m = std::fs::symlink_metadata(p).map_err(|e| err(format!("{}: {e}", p.display())))?;
        let problem = if m.file_type().is_symlink() {
            Some("is a symbolic link".to_string())
        } else if m.uid() != me {
            Some(format!("belongs to uid {}, not to hostd's ({me})", m.uid()))
        } else if m.mode() & 0o022 != 0 {
            Some(format!(
                "may be written by others (mode {:o})",
                m.mode() & 0o7777
            ))
        } else {
            None
        };
        if let Some(why) = problem {
            return Err(err(format!(
                "{what} {}: {why}; hostd trusts only a state file in a directory of its own that only root may write (remove the file, or give --state-file under /run/tandem)",
                p.display()
            )));
        }
    }
    Ok(())
}

/// A served VM, as [`RecoveryScope`] knows it.
#[derive(Clone, Debug)]
pub struct ScopeVm {
    pub name: String,
    /// Its QEMU process, if it runs.
    pub pid: Option<u32>,
    pub cgroup: Option<PathBuf>,
}

/// The knobs this hostd would touch: the threads of its VMs' QEMU
/// processes, their cgroups' BFQ weight files, groups of the cgroup v1
/// blkio hierarchy, and BFQ's idling tunables of a disk.
#[derive(Clone, Debug, Default)]
pub struct RecoveryScope {
    pub vms: Vec<ScopeVm>,
    /// Where the cgroup v1 blkio hierarchy is mounted, if it is.
    pub blkio_mount: Option<PathBuf>,
    /// Where the cgroup v1 cpu hierarchy is mounted, if it is.
    pub cpu_mount: Option<PathBuf>,
}

impl RecoveryScope {
    /// Whether `e` names a knob of a served VM; else why not.
    pub fn allows(&self, e: &Entry) -> std::result::Result<(), String> {
        let vm = self
            .vms
            .iter()
            .find(|v| v.name == e.vm())
            .ok_or_else(|| format!("{e:?}: VM {:?} is not served by this hostd", e.vm()))?;
        let thread_ok = |tid: u32, start: u64| -> std::result::Result<(), String> {
            // A thread that is gone needs nothing; a live one must be QEMU's.
            if sys::thread_start_time(tid) != Some(start) {
                return Ok(());
            }
            let tgid = sys::thread_group(tid);
            if tgid.is_some() && tgid == vm.pid {
                Ok(())
            } else {
                Err(format!(
                    "{e:?}: thread {tid} is not a thread of VM {}'s QEMU",
                    vm.name
                ))
            }
        };
        match e {
            Entry::Ioprio { tid, start, .. } | Entry::Sched { tid, start, .. } => {
                thread_ok(*tid, *start)
            }
            Entry::CpuShares { file, .. } => {
                // The file of the group the VM's QEMU runs in now.
                let group = vm.pid.and_then(|p| sys::thread_cgroup(p, "cpu"));
                let known = match (&self.cpu_mount, group) {
                    (Some(m), Some(g)) => {
                        *file == m.join(g.trim_start_matches('/')).join("cpu.shares")
                    }
                    _ => false,
                };
                if known {
                    Ok(())
                } else {
                    Err(format!(
                        "{e:?}: not the cpu.shares file of VM {}'s QEMU's group",
                        vm.name
                    ))
                }
            }
            Entry::CpuCgroup {
                tid, start, orig, ..
            } => {
                group_under(self.cpu_mount.as_deref(), orig, "cpu", e)?;
                thread_ok(*tid, *start)
            }
            Entry::ThreadCgroup {
                tid, start, orig, ..
            } => {
                group_under(self.blkio_mount.as_deref(), orig, "blkio", e)?;
                thread_ok(*tid, *start)
            }
            Entry::CgroupWeight { file, .. } => {
                let known = vm.cgroup.as_ref().is_some_and(|c| {
                    ["io.bfq.weight", "blkio.bfq.weight"]
                        .iter()
                        .any(|f| c.join(f) == *file)
                });
                if known {
                    Ok(())
                } else {
                    Err(format!(
                        "{e:?}: not the BFQ weight file of VM {}'s cgroup",
                        vm.name
                    ))
                }
            }
            Entry::BfqTunable { file, .. } => {
                let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
                let parent = file.parent();
                let known = IDLING_TUNABLES.iter().any(|(n, _)| *n == name)
                    && parent.is_some_and(|p| p.ends_with("queue/iosched"))
                    && file.starts_with("/sys/")
                    && file
                        .components()
                        .all(|c| !matches!(c, std::path::Component::ParentDir));
                if known {
                    Ok(())
                } else {
                    Err(format!("{e:?}: not a BFQ idling tunable of a disk"))
                }
            }
        }
    }
}

/// Something that favours a VM.
pub trait Actuator: Send {
    /// Its name, for status and logs.
    fn name(&self) -> &'static str;
    /// Starts favouring `vm`, or extends the favour to what appeared since the
    /// last call (new threads): hostd calls it on each boost and periodically
    /// while boosted. Records every original value in `j` first. Returns how
    /// many knobs it changed in this call.
    fn boost(&mut self, vm: &VmTarget, j: &mut Journal) -> Result<usize>;
    /// The boost it acts for: I/O (the default) or CPU.
    fn resource(&self) -> Resource {
        Resource::Io
    }
    /// Stops favouring `vm`: restores what `boost` changed (the journal's
    /// entries of the VM for this actuator's resource).
    fn unboost(&mut self, vm: &VmTarget, j: &mut Journal) -> Result<()> {
        j.revert_vm_resource(&vm.name, self.resource())
    }
}

/// Sets the I/O priority of every thread of the VM's process but its vCPU
/// threads, when QMP named them (see [`crate::qmp`]).
pub struct IoprioActuator {
    pub value: u32,
}

impl IoprioActuator {
    /// Class RT, level `level` (0 highest, 7 lowest).
    pub fn rt(level: u32) -> Self {
        IoprioActuator {
            value: sys::ioprio_value(sys::IOPRIO_CLASS_RT, level),
        }
    }
    /// Class BE, level 0.
    pub fn be0() -> Self {
        IoprioActuator {
            value: sys::ioprio_value(sys::IOPRIO_CLASS_BE, 0),
        }
    }
}

impl IoprioActuator {
    /// The original ioprio the journal holds for the VM's main thread (the
    /// QEMU process), while it is boosted.
    fn main_orig(vm: &VmTarget, j: &Journal) -> Option<u32> {
        j.entries().iter().find_map(|e| match e {
            Entry::Ioprio {
                vm: v, tid, orig, ..
            } if *v == vm.name && *tid == vm.pid => Some(*orig),
            _ => None,
        })
    }
}

impl Actuator for IoprioActuator {
    fn name(&self) -> &'static str {
        "ioprio"
    }

    /// Restores the journalled threads, then the threads QEMU made from a
    /// boosted thread since the last [`Actuator::boost`] call (born with
    /// the boost, in no entry): they get the main thread's original, so
    /// that no pool worker is left in the boost's class (found by
    /// `help_all_on_a_real_qemu_...` in `crates/cli/tests/cfsv_qemu.rs`).
    fn unboost(&mut self, vm: &VmTarget, j: &mut Journal) -> Result<()> {
        let main = Self::main_orig(vm, j);
        let known: Vec<u32> = j
            .entries()
            .iter()
            .filter_map(|e| match e {
                Entry::Ioprio { vm: v, tid, .. } if *v == vm.name => Some(*tid),
                _ => None,
            })
            .collect();
        j.revert_vm_resource(&vm.name, self.resource())?;
        let Some(orig) = main else {
            return Ok(());
        };
        for (tid, _) in vm.io_threads().unwrap_or_default() {
            if !known.contains(&tid) && sys::ioprio_get(tid).is_ok_and(|p| p == self.value) {
                match sys::ioprio_set(tid, orig) {
                    Ok(()) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                    Err(e) => return Err(err(format!("ioprio_set({tid}): {e}"))),
                }
            }
        }
        Ok(())
    }

    fn boost(&mut self, vm: &VmTarget, j: &mut Journal) -> Result<usize> {
        let mut changed = 0;
        let main = Self::main_orig(vm, j);
        for (tid, start) in vm.io_threads()? {
            if j.has_ioprio(tid, start) {
                continue;
            }
            let Ok(orig) = sys::ioprio_get(tid) else {
                continue;
            };
            // A thread QEMU made since the last call (a pool worker) from a
            // boosted thread was born with the boost (`clone(2)` copies the
            // ioprio): what it had before is what the main thread had.
            let orig = match main {
                Some(m) if tid != vm.pid && orig == self.value => m,
                _ => orig,
            };
            j.add(Entry::Ioprio {
                vm: vm.name.clone(),
                tid,
                start,
                orig,
            })?;
            match sys::ioprio_set(tid, self.value) {
                Ok(()) => changed += 1,
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => return Err(err(format!("ioprio_set({tid}): {e}"))),
            }
        }
        Ok(changed)
    }
}

/// Sets the BFQ weight of the VM's cgroup.
pub struct CgroupWeightActuator {
    pub weight: u32,
}

/// The BFQ weight file of a cgroup directory (v2 first, then v1).
pub fn bfq_weight_file(cgroup: &Path) -> Option<PathBuf> {
    ["io.bfq.weight", "blkio.bfq.weight"]
        .iter()
        .map(|f| cgroup.join(f))
        .find(|p| p.exists())
}

/// Reads a weight file: v1 holds `100`, v2 `default 100` (then per-device lines).
pub fn read_weight(file: &Path) -> Result<u32> {
    let t = std::fs::read_to_string(file).map_err(|e| err(format!("{}: {e}", file.display())))?;
    let first = t.lines().next().unwrap_or("");
    first
        .split_whitespace()
        .last()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| err(format!("{}: unexpected content {first:?}", file.display())))
}

impl Actuator for CgroupWeightActuator {
    fn name(&self) -> &'static str {
        "cgroup-bfq-weight"
    }

    fn boost(&mut self, vm: &VmTarget, j: &mut Journal) -> Result<usize> {
        let Some(dir) = &vm.cgroup else {
            return Ok(0);
        };
        let file = bfq_weight_file(dir).ok_or_else(|| {
            err(format!(
                "VM {}: {} has no io.bfq.weight or blkio.bfq.weight",
                vm.name,
                dir.display()
            ))
        })?;
        let already = j
            .entries()
            .iter()
            .any(|e| matches!(e, Entry::CgroupWeight { file: f, .. } if *f == file));
        if already {
            return Ok(0);
        }
        let orig = read_weight(&file)?;
        j.add(Entry::CgroupWeight {
            vm: vm.name.clone(),
            file: file.clone(),
            orig,
        })?;
        std::fs::write(&file, format!("{}\n", self.weight))
            .map_err(|e| err(format!("{}: {e}", file.display())))?;
        Ok(1)
    }
}

/// Moves the VM's threads, but its vCPU threads, into the cgroup v1 blkio
/// directory `dir` while the VM is boosted; [`Journal`] moves them back.
///
/// Why: BFQ takes in a queue's new I/O class (`ioprio_set`) only when it
/// queues the queue again: when the queue goes from idle to busy, or after
/// its next turn of service. A VM's queue is rarely idle (the guest keeps a
/// request outstanding), and when the host starves it, because its weight is
/// small beside weight-raised host readers, its next turn may be seconds
/// away: a host trace here showed 8.4 s between the RT class change and the
/// queue's first service, during an app start that needed the help. A thread
/// that has changed blkio group has its queue moved at its next request
/// (`bfq_bic_update_cgroup()` → `bfq_bfqq_move()`), which takes the queue off
/// its service tree and activates it again, and the activation applies the
/// pending class change at once. The guest's own I/O (the app that asked
/// for help) brings that request.
///
/// Where the threads go matters: BFQ schedules a child group as one BE
/// entity, so an RT queue inside a child group does not beat a host process
/// in the root group. The VM therefore lives in its own group while not
/// boosted (as libvirt places each VM) and comes to `dir`, the hierarchy's
/// root, while boosted. cgroup v1 only: v2 moves whole processes (threaded
/// groups aside), and QEMU's vCPU threads must not follow.
pub struct CgroupMoveActuator {
    pub dir: PathBuf,
    mount: PathBuf,
}

impl CgroupMoveActuator {
    /// Checks that `dir` is a group of a mounted cgroup v1 blkio hierarchy.
    pub fn new(dir: &Path) -> Result<CgroupMoveActuator> {
        let mount = sys::cgroup_v1_mount("blkio").ok_or_else(|| {
            err("boost_cgroup: no cgroup v1 blkio hierarchy is mounted (see /proc/mounts)")
        })?;
        if !dir.starts_with(&mount) || !dir.join("tasks").exists() {
            return Err(err(format!(
                "boost_cgroup {}: not a group of the cgroup v1 blkio hierarchy at {}",
                dir.display(),
                mount.display()
            )));
        }
        Ok(CgroupMoveActuator {
            dir: dir.to_path_buf(),
            mount,
        })
    }
}

impl Actuator for CgroupMoveActuator {
    fn name(&self) -> &'static str {
        "blkio-cgroup-move"
    }

    fn boost(&mut self, vm: &VmTarget, j: &mut Journal) -> Result<usize> {
        let mut changed = 0;
        for (tid, start) in vm.io_threads()? {
            if j.has_thread_cgroup(tid, start) {
                continue;
            }
            let Some(rel) = sys::thread_cgroup(tid, "blkio") else {
                continue; // gone meanwhile
            };
            let orig = self.mount.join(rel.trim_start_matches('/'));
            if orig == self.dir {
                continue;
            }
            j.add(Entry::ThreadCgroup {
                vm: vm.name.clone(),
                tid,
                start,
                orig,
            })?;
            match sys::move_thread(&self.dir, tid) {
                Ok(()) => changed += 1,
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => {
                    return Err(err(format!(
                        "moving thread {tid} to {}: {e}",
                        self.dir.display()
                    )))
                }
            }
        }
        Ok(changed)
    }
}

/// Makes BFQ idle for the boosted VM on the host disks holding its images
/// (the disks under the files QEMU reads, when their scheduler is BFQ):
/// `strict_guarantees` 1 and `slice_idle` at least [`BOOST_SLICE_IDLE_US`]
/// while the VM is boosted; [`Journal`] puts the old values back.
///
/// A boosted VM often issues one read at a time (a guest program starting
/// reads its files, and the guest file system's metadata, in a chain), each
/// 1-2 ms after the previous one completes. Two host traces of boosted
/// start-ups that took more than 10 s showed BFQ filling those 1-2 ms gaps
/// with the host readers' 256 KiB requests, so that each guest read waited
/// 30-55 ms behind one of them instead of 12 ms alone. Each knob closes one
/// of the two ways that happened:
///
/// - `strict_guarantees`: BFQ keeps the disk for the queue in service when
///   it empties ("idling") only when idling is needed for service guarantees
///   (`idling_needed_for_service_guarantees()` in `block/bfq-iosched.c`): a
///   weight-raised queue among queues that are not raised, or an asymmetric
///   scenario. Under load the host's own readers are weight-raised too
///   (starved readers empty their queues between bursts and pass BFQ's soft
///   real-time test); with every busy queue raised ×3000, QEMU's and the five
///   host readers', BFQ expired QEMU's queue as soon as its one request was
///   dispatched (`expire (3 ...)`, no more requests) and served a host reader.
///   With `strict_guarantees` BFQ always idles for the queue in service.
/// - `slice_idle`: while it idles, BFQ still *injects* other queues' requests
///   into the disk (`bfq_choose_bfqq_for_injection()`), from any queue and
///   one at a time, when the queue in service does not have a short think
///   time. QEMU's queue had a "long" one (`expire (..., short_ttime 0)`) for
///   the whole of the slow start: BFQ samples a queue's think time only when
///   a request arrives for a queue that is not busy, and a queue BFQ idles
///   for stays busy, so under `strict_guarantees` the only samples are the
///   gaps that outlasted the idle timer, all long (`bfq_update_io_thinktime()`,
///   `bfq_update_has_short_ttime()`). Injection stops with `slice_idle` at
///   32 ms: host requests dispatched while QEMU's queue was in service fell
///   from 340 over a cell's 15 boosted starts (17 a second throughout the
///   slow one) to 66, nearly all in the first second of a boost. Why is not
///   settled: the value was chosen so that the think-time threshold
///   (`slice_idle / 2`, 16 ms) covers any mean the default allows (samples
///   are clamped to `2 * slice_idle`, 16 ms), yet the trace with 32 ms still
///   shows QEMU's queue as long-think-time, and BFQ's `select_queue` simply
///   finds nothing to inject. The injection limit's adaptation
///   (`bfq_update_inject_limit()`) and the host queues' remaining budgets,
///   both of which the idle window shapes, are the candidates.
///
/// Measured on the emulated 1.8-inch disk (`tandem devemu`, BFQ, five
/// buffered sequential readers), dependent 4-32 KiB O_DIRECT reads in RT
/// class with a 1.5 ms think time took 27.4 ms each on average with
/// `strict_guarantees` alone, 13.2 ms with the longer `slice_idle` alone,
/// 12.9 ms with both and 12.3 ms with no readers at all
/// (`tools/bfq-idling-probe/bfq-idling-probe.py`).
///
/// The cost, paid only while a VM is boosted: no command queueing in the
/// disk, and up to 32 ms of idling each time a queue in service empties,
/// which a loaded disk serving mostly one VM loses little to. The knobs are
/// the disk's, so they are set by the first VM boosted on that disk; if
/// another VM's unboost reverts them while this one is still boosted,
/// hostd's periodic boost call sets them again.
pub struct BfqIdlingActuator;

/// BFQ's `slice_idle` while a VM is boosted: 4× the default 8 ms
/// (`bfq_slice_idle` in `block/bfq-iosched.c`), chosen so that the
/// default's largest think-time average (2 × 8 ms) is at most half of it;
/// measured to stop BFQ's injection (see [`BfqIdlingActuator`]).
pub const BOOST_SLICE_IDLE_US: u64 = 32_000;

/// What the boost needs of one BFQ tunable.
enum TunableGoal {
    /// This exact value.
    Exactly(u64),
    /// At least this value: a larger one the administrator chose stays.
    AtLeast(u64),
}

/// The tunables [`BfqIdlingActuator`] sets, in `queue/iosched/`.
const IDLING_TUNABLES: [(&str, TunableGoal); 2] = [
    ("strict_guarantees", TunableGoal::Exactly(1)),
    ("slice_idle_us", TunableGoal::AtLeast(BOOST_SLICE_IDLE_US)),
];

impl Actuator for BfqIdlingActuator {
    fn name(&self) -> &'static str {
        "bfq-idling"
    }

    fn boost(&mut self, vm: &VmTarget, j: &mut Journal) -> Result<usize> {
        let devs = sys::devices_read_by(vm.pid)
            .map_err(|e| err(format!("VM {}: /proc/{}/fd: {e}", vm.name, vm.pid)))?;
        let mut changed = 0;
        for (major, minor) in devs {
            let Some(dir) = sys::bfq_iosched_dir(major, minor) else {
                continue;
            };
            for (name, goal) in &IDLING_TUNABLES {
                let file = dir.join(name);
                let orig = std::fs::read_to_string(&file)
                    .map_err(|e| err(format!("{}: {e}", file.display())))?;
                let orig = orig.trim().to_string();
                let cur: u64 = orig
                    .parse()
                    .map_err(|_| err(format!("{}: not a number: {orig:?}", file.display())))?;
                let want = match *goal {
                    TunableGoal::Exactly(v) if cur != v => v,
                    TunableGoal::AtLeast(v) if cur < v => v,
                    _ => continue,
                };
                j.add(Entry::BfqTunable {
                    vm: vm.name.clone(),
                    file: file.clone(),
                    orig,
                })?;
                std::fs::write(&file, format!("{want}\n"))
                    .map_err(|e| err(format!("{}: {e}", file.display())))?;
                changed += 1;
            }
        }
        Ok(changed)
    }
}

/// A journalled group path must lie in the cgroup v1 `hierarchy` mounted at
/// `mount`, with no `..` to climb out of it.
fn group_under(
    mount: Option<&std::path::Path>,
    orig: &std::path::Path,
    hierarchy: &str,
    e: &Entry,
) -> std::result::Result<(), String> {
    let under = mount.is_some_and(|m| {
        orig.starts_with(m)
            && orig
                .components()
                .all(|c| !matches!(c, std::path::Component::ParentDir))
    });
    if under {
        Ok(())
    } else {
        Err(format!(
            "{e:?}: {} is not a group of the cgroup v1 {hierarchy} hierarchy",
            orig.display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn journal_round_trip() {
        let d = std::env::temp_dir().join(format!("tandem-journal-{}", std::process::id()));
        let p = d.join("hostd.state");
        let mut j = Journal::new(Some(p.clone()));
        let w = d.join("io.bfq.weight");
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        let scope = RecoveryScope {
            vms: vec![ScopeVm {
                name: "a".into(),
                pid: None,
                cgroup: Some(d.clone()),
            }],
            blkio_mount: None,
            cpu_mount: None,
        };
        std::fs::write(&w, "default 100\n").unwrap();
        assert_eq!(read_weight(&w).unwrap(), 100);
        j.add(Entry::CgroupWeight {
            vm: "a".into(),
            file: w.clone(),
            orig: 100,
        })
        .unwrap();
        std::fs::write(&w, "1000\n").unwrap();
        assert!(p.exists());
        assert_eq!(p.metadata().unwrap().mode() & 0o777, 0o600, "root's only");
        drop(j);
        let r = Journal::recover(&p, &scope).unwrap();
        assert_eq!((r.restored, r.refused.len()), (1, 0));
        assert_eq!(read_weight(&w).unwrap(), 100);
        assert!(!p.exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    fn write_state(p: &Path, entries: Vec<Entry>) {
        let t = serde_json::to_string(&JournalFile { entries }).unwrap();
        std::fs::write(p, t).unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    /// A state file someone else could have written is not read, and an
    /// entry for a path hostd would never touch is not acted on.
    #[test]
    fn only_a_private_state_file_and_known_knobs_are_restored() {
        let d = std::env::temp_dir().join(format!("tandem-journal-trust-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("cg")).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        let victim = d.join("precious");
        std::fs::write(&victim, "data\n").unwrap();
        let p = d.join("hostd.state");
        let scope = RecoveryScope {
            vms: vec![ScopeVm {
                name: "a".into(),
                pid: Some(1),
                cgroup: Some(d.join("cg")),
            }],
            blkio_mount: Some("/sys/fs/cgroup/blkio".into()),
            cpu_mount: None,
        };
        let bad = vec![
            // Not a served VM.
            Entry::CgroupWeight {
                vm: "z".into(),
                file: d.join("cg/io.bfq.weight"),
                orig: 5,
            },
            // A served VM, a file that is not its cgroup's weight.
            Entry::CgroupWeight {
                vm: "a".into(),
                file: victim.clone(),
                orig: 5,
            },
            Entry::BfqTunable {
                vm: "a".into(),
                file: victim.clone(),
                orig: "x".into(),
            },
            Entry::BfqTunable {
                vm: "a".into(),
                file: "/sys/block/sda/queue/iosched/../../../../../etc/passwd".into(),
                orig: "x".into(),
            },
            Entry::ThreadCgroup {
                vm: "a".into(),
                tid: std::process::id(),
                start: sys::thread_start_time(std::process::id()).unwrap(),
                orig: d.clone(),
            },
            // This test's own thread is no thread of VM a's QEMU (pid 1).
            Entry::Ioprio {
                vm: "a".into(),
                tid: std::process::id(),
                start: sys::thread_start_time(std::process::id()).unwrap(),
                orig: 0,
            },
        ];
        let n = bad.len();
        write_state(&p, bad);
        let r = Journal::recover(&p, &scope).unwrap();
        assert_eq!((r.restored, r.refused.len()), (0, n), "{:?}", r.refused);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "data\n");
        assert!(!p.exists());

        // Writable by others: refused whole, and left in place.
        write_state(&p, vec![]);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = Journal::recover(&p, &scope).unwrap_err().0;
        assert!(e.contains("may be written by others"), "{e}");
        // In a directory others may write.
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = Journal::recover(&p, &scope).unwrap_err().0;
        assert!(e.contains("state file's directory"), "{e}");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        // A symbolic link.
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink(&victim, &p).unwrap();
        let e = Journal::recover(&p, &scope).unwrap_err().0;
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "data\n");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
