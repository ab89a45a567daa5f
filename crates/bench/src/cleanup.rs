//! The run's journal: what a run changes on the machine, written down
//! before each change is made, and undone on success, error, Ctrl-C, or by
//! the next run and `tandem bench cleanup` after a kill.
//!
//! A run's directory is `/run/tandem/bench/<pid>-<start time>`: the pid and
//! the start time (field 22 of `/proc/PID/stat`) name one process for good,
//! so a reused pid never passes for the run. The directory holds the journal
//! (`cleanup.json`, written and renamed at every change) and a `lock` file
//! the run holds (`flock`) while it lives. A run is dead when its lock can be
//! taken, or, before the lock file exists, when no process has its pid and
//! start time; only dead runs are undone.
//!
//! What is recorded, each before it is made:
//! - the emulated device, by the name of its devemu state directory (which
//!   is devemu's own record of its backing file, daemon, FUSE mount and loop
//!   device, each also written before it is made);
//! - the scheduler the device had and that scheduler's tunables;
//! - work files and directories, mounts (their mount points are under the
//!   run directory or the recorded directories), blkio groups.
//!
//! Processes are not recorded: workers, the app, QEMU, hostd and the
//! vhost-user-blk backend (`vhost-ioprio`) die with the run
//! ([`devemu::die_with_parent`]); the backend's blkio group is recorded
//! before the backend makes it.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};
use nix::mount::{umount2, MntFlags};
use serde::{Deserialize, Serialize};

use crate::{run_err, workers, Result};

/// The journal's file name in the run directory.
const JOURNAL: &str = "cleanup.json";
/// Where runs keep their directories.
pub const RUNS_DIR: &str = "/run/tandem/bench";

/// One process for good: its pid and start time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunId {
    pub pid: u32,
    /// Clock ticks after boot; 0 in journals of runs from before it was kept.
    #[serde(default)]
    pub start: u64,
}

impl RunId {
    /// This process.
    pub fn me() -> RunId {
        let pid = std::process::id();
        RunId {
            pid,
            start: agent::sys::start_time(&pid.to_string()).unwrap_or(0),
        }
    }

    /// The name of this run's directory, and of things named after it.
    pub fn name(&self) -> String {
        format!("{}-{}", self.pid, self.start)
    }

    /// From a run directory's name (`<pid>-<start>`, or `<pid>` from before
    /// start times were kept).
    pub fn parse(name: &str) -> Option<RunId> {
        let (p, s) = name.split_once('-').unwrap_or((name, "0"));
        Some(RunId {
            pid: p.parse().ok()?,
            start: s.parse().ok()?,
        })
    }

    /// Whether the process still runs: same pid, same start time, not a
    /// zombie. Without a start time, the pid alone.
    pub fn alive(&self) -> bool {
        let Ok(stat) = fs::read_to_string(format!("/proc/{}/stat", self.pid)) else {
            return false;
        };
        let zombie = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_none_or(|s| s == "Z" || s == "X");
        !zombie
            && (self.start == 0
                || agent::sys::start_time(&self.pid.to_string()) == Some(self.start))
    }

    /// The devemu instance name of the emulated device this run brings up.
    pub fn devemu_name(&self) -> String {
        format!("bench-{}", self.name())
    }
}

/// A scheduler as the run found it: the file, the scheduler's name and its
/// tunables (`queue/iosched/*`), which switching away and back would lose.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SchedRecord {
    pub file: PathBuf,
    pub original: String,
    #[serde(default)]
    pub tunables: BTreeMap<String, String>,
}

/// The journal as written to `cleanup.json`. A journal with a field this
/// tandem does not know (another version's) is not read, so never undone in
/// part.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Journal {
    run: Option<RunId>,
    sched: Option<SchedRecord>,
    #[serde(default)]
    files: Vec<PathBuf>,
    #[serde(default)]
    dirs: Vec<PathBuf>,
    #[serde(default)]
    mounts: Vec<PathBuf>,
    /// The devemu instance (state directory name) of the emulated device.
    devemu_instance: Option<String>,
    #[serde(default)]
    cgroups: Vec<PathBuf>,
    /// vCPU threads the run set to a real-time policy (`static-cpu`), with
    /// what they had.
    #[serde(default)]
    threads: Vec<ThreadSched>,
}

/// A thread's CPU scheduling as the run found it: restored only while the
/// thread is the same one (its start time, so that a thread id the kernel
/// gave to another thread since is left alone).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ThreadSched {
    pub tid: u32,
    pub start: u64,
    pub orig: agent::sys::SchedState,
}

/// What the run changed, undone on drop in reverse order.
#[derive(Default)]
pub struct Cleanup {
    /// Background workers (they die with the run: not journaled).
    pub(crate) workers: Vec<Child>,
    j: Journal,
    /// The run directory's lock, held while the run lives.
    lock: Option<Flock<fs::File>>,
    run_dir: Option<PathBuf>,
}

impl Cleanup {
    /// A journal to undo, read back from `run_dir`.
    fn with(j: Journal, run_dir: &Path) -> Cleanup {
        let mut c = Cleanup::default();
        c.j = j;
        c.run_dir = Some(run_dir.to_path_buf());
        c
    }

    /// Writes the journal (write and rename, so that a kill never leaves a
    /// half-written one). A journal that can not be written is an error:
    /// the run must not make what it could not record.
    pub(crate) fn save(&self) -> Result<()> {
        let Some(dir) = &self.run_dir else {
            return Ok(());
        };
        let text = serde_json::to_string(&self.j).expect("serializable journal");
        let tmp = dir.join(format!("{JOURNAL}.tmp"));
        fs::write(&tmp, text)
            .and_then(|_| fs::rename(&tmp, dir.join(JOURNAL)))
            .map_err(|e| {
                run_err(format!(
                    "writing the run's journal in {}: {e}",
                    dir.display()
                ))
            })
    }

    /// The journal a run left in `run_dir`: `Ok(None)` when it wrote none,
    /// an error when it is one this tandem can not read (another version's):
    /// nothing is undone from a journal that is not understood.
    fn load(run_dir: &Path) -> Result<Option<Cleanup>> {
        let path = run_dir.join(JOURNAL);
        let Ok(text) = fs::read_to_string(&path) else {
            return Ok(None);
        };
        let j: Journal = serde_json::from_str(&text).map_err(|e| {
            run_err(format!(
                "{}: a journal this tandem can not read ({e}; from another version?); left as it is",
                path.display()
            ))
        })?;
        Ok(Some(Cleanup::with(j, run_dir)))
    }

    /// Makes this run's directory under [`RUNS_DIR`], takes its lock and
    /// writes the first journal. Returns the directory.
    pub(crate) fn start(&mut self, run: RunId) -> Result<PathBuf> {
        let d = PathBuf::from(RUNS_DIR).join(run.name());
        fs::create_dir_all(&d).map_err(|e| run_err(format!("creating {}: {e}", d.display())))?;
        self.lock = Some(
            lock_run_dir(&d, true)?
                .ok_or_else(|| run_err(format!("{}: locked by another run", d.display())))?,
        );
        self.run_dir = Some(d.clone());
        self.j.run = Some(run);
        self.save()?;
        Ok(d)
    }

    /// Records the emulated device's devemu instance, before `up`.
    pub(crate) fn set_devemu(&mut self, name: String) -> Result<()> {
        self.j.devemu_instance = Some(name);
        self.save()
    }

    /// Records the device's scheduler and its tunables, before a change.
    pub(crate) fn set_sched(&mut self, r: SchedRecord) -> Result<()> {
        self.j.sched = Some(r);
        self.save()
    }

    pub(crate) fn push_file(&mut self, f: PathBuf) -> Result<()> {
        self.j.files.push(f);
        self.save()
    }

    pub(crate) fn push_dir(&mut self, d: PathBuf) -> Result<()> {
        self.j.dirs.push(d);
        self.save()
    }

    pub(crate) fn push_mount(&mut self, m: PathBuf) -> Result<()> {
        self.j.mounts.push(m);
        self.save()
    }

    /// Unmounts the last mount pushed, now (its mount point stays listed
    /// until unmounted).
    pub(crate) fn pop_mount(&mut self) -> Result<()> {
        if let Some(m) = self.j.mounts.last().cloned() {
            umount(&m)?;
            self.j.mounts.pop();
            self.save()?;
            let _ = fs::remove_dir(&m);
        }
        Ok(())
    }

    /// Records a thread's scheduling, before the run changes it.
    pub(crate) fn push_thread(&mut self, t: ThreadSched) -> Result<()> {
        self.j.threads.push(t);
        self.save()
    }

    /// Puts every recorded thread's policy, priority and nice back (those
    /// still alive and the same thread) and forgets them.
    pub(crate) fn restore_threads(&mut self) -> Result<()> {
        for t in std::mem::take(&mut self.j.threads).into_iter().rev() {
            if agent::sys::thread_start_time(t.tid) == Some(t.start) {
                let _ = agent::sys::sched_set(t.tid, &t.orig);
            }
        }
        self.save()
    }

    pub(crate) fn push_cgroup(&mut self, g: PathBuf) -> Result<()> {
        self.j.cgroups.push(g);
        self.save()
    }

    /// What undoing this journal does, in words.
    fn describe(&self) -> Vec<String> {
        let mut d = Vec::new();
        if let (Some(s), None) = (&self.j.sched, &self.j.devemu_instance) {
            d.push(format!("{} back to {}", s.file.display(), s.original));
        }
        for m in &self.j.mounts {
            d.push(format!("unmount {}", m.display()));
        }
        if let Some(name) = &self.j.devemu_instance {
            d.push(format!("tear down the emulated device (devemu {name})"));
        }
        if !self.j.files.is_empty() || !self.j.dirs.is_empty() {
            d.push(format!(
                "remove {} files and {} directories",
                self.j.files.len(),
                self.j.dirs.len()
            ));
        }
        for g in &self.j.cgroups {
            d.push(format!("remove the blkio group {}", g.display()));
        }
        for t in &self.j.threads {
            d.push(format!(
                "thread {} back to policy {} priority {} nice {}",
                t.tid, t.orig.policy, t.orig.priority, t.orig.nice
            ));
        }
        if let Some(r) = &self.run_dir {
            d.push(format!("remove {}", r.display()));
        }
        d
    }

    pub(crate) fn stop_workers(&mut self) {
        for mut c in self.workers.drain(..) {
            workers::kill(&mut c);
        }
    }

    /// Puts the device's scheduler back, with the tunables it had.
    pub(crate) fn restore_sched(&self) {
        let Some(s) = &self.j.sched else {
            return;
        };
        let cur = fs::read_to_string(&s.file).unwrap_or_default();
        if !cur.contains(&format!("[{}]", s.original)) {
            let _ = fs::write(&s.file, &s.original);
        }
        let iosched = s.file.with_file_name("iosched");
        for (k, v) in &s.tunables {
            let f = iosched.join(k);
            if fs::read_to_string(&f).is_ok_and(|now| now.trim() != v) {
                let _ = fs::write(&f, v);
            }
        }
    }

    /// Undoes everything, in reverse order of making. What could not be
    /// undone stays in the journal (and the run directory with it) for the
    /// next attempt.
    pub(crate) fn finish(&mut self) -> Result<()> {
        let mut first = None;
        self.stop_workers();
        if !self.j.threads.is_empty() {
            let _ = self.restore_threads();
        }
        // The scheduler of a device the run brought up goes with the
        // device; its loop device may be another instance's by the time a
        // killed run is undone, so it is left alone.
        if self.j.devemu_instance.is_none() {
            self.restore_sched();
        }
        self.j.sched = None;
        for f in self.j.files.drain(..) {
            let _ = fs::remove_file(f);
        }
        for d in self.j.dirs.drain(..).rev() {
            let _ = fs::remove_dir_all(d);
        }
        let mut still_mounted = Vec::new();
        for m in self.j.mounts.drain(..).rev() {
            match umount(&m) {
                Ok(()) => {
                    let _ = fs::remove_dir(&m);
                }
                Err(e) => {
                    first.get_or_insert(e);
                    still_mounted.push(m);
                }
            }
        }
        still_mounted.reverse();
        self.j.mounts = still_mounted;
        if self.j.mounts.is_empty() {
            if let Some(name) = self.j.devemu_instance.take() {
                if let Err(e) = devemu::control::teardown_id(&name) {
                    first.get_or_insert(e);
                    self.j.devemu_instance = Some(name);
                }
            }
        }
        for g in self.j.cgroups.drain(..) {
            // Empty once QEMU has gone (it dies with the run).
            let _ = fs::remove_dir(g);
        }
        if !self.j.mounts.is_empty() || self.j.devemu_instance.is_some() {
            // Never remove the run directory through a live mount, nor
            // forget a device: keep both, with the journal, for `tandem
            // bench cleanup`.
            let _ = self.save();
            return first.map_or(Ok(()), Err);
        }
        if let Some(d) = self.run_dir.take() {
            remove_run_dir(&d);
        }
        self.lock = None;
        first.map_or(Ok(()), Err)
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// Removes a run directory, and `/run/tandem/bench` and `/run/tandem` when
/// empty. Never through a mount: with anything mounted under it, it stays.
fn remove_run_dir(d: &Path) {
    if has_mounts_under(d) {
        return;
    }
    let _ = fs::remove_dir_all(d);
    if let Some(p) = d.parent() {
        let _ = fs::remove_dir(p);
        if let Some(pp) = p.parent() {
            let _ = fs::remove_dir(pp);
        }
    }
}

/// Takes the lock of a run directory (`flock` on its `lock` file) without
/// waiting: `None` when another process holds it. `create`: make the file
/// if missing (else a missing file is an error).
fn lock_run_dir(dir: &Path, create: bool) -> Result<Option<Flock<fs::File>>> {
    let path = dir.join("lock");
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .open(&path)
        .map_err(|e| run_err(format!("{}: {e}", path.display())))?;
    match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
        Ok(l) => Ok(Some(l)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(run_err(format!("locking {}: {e}", path.display()))),
    }
}

/// Whether a path has anything mounted on it or under it.
fn has_mounts_under(dir: &Path) -> bool {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| Path::new(m).starts_with(dir))
}

/// The journal of the run in `dir` if that run is dead (its lock taken),
/// `Ok(None)` if it lives.
fn claim_dead_run(dir: &Path) -> Result<Option<Cleanup>> {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let Some(run) = RunId::parse(name) else {
        return Ok(None); // not a run directory
    };
    let lock = if dir.join("lock").exists() {
        match lock_run_dir(dir, false)? {
            Some(l) => Some(l),
            None => return Ok(None), // alive
        }
    } else if run.alive() {
        return Ok(None); // making its directory right now
    } else {
        None
    };
    let mut c = Cleanup::load(dir)?.unwrap_or_else(|| Cleanup::with(Journal::default(), dir));
    c.j.run.get_or_insert(run);
    c.lock = lock;
    Ok(Some(c))
}

/// Undoes what runs that could not clean up (killed with SIGKILL, or
/// crashed) left behind, from the journals in their run directories. A run
/// that still lives is left alone. Returns, per run undone, its pid and
/// what was done; a journal that could not be undone entirely is kept for
/// the next attempt.
pub fn recover_interrupted() -> Result<Vec<(u32, Vec<String>)>> {
    let mut done = Vec::new();
    let Ok(entries) = fs::read_dir(RUNS_DIR) else {
        return Ok(done);
    };
    let mut dirs: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    dirs.sort();
    let mut first = None;
    for d in dirs {
        let mut c = match claim_dead_run(&d) {
            Ok(Some(c)) => c,
            Ok(None) => continue,
            // Not ours to undo (another version's journal): said, not failed.
            Err(e) => {
                tracing::warn!("{e}");
                continue;
            }
        };
        let pid = c.j.run.map_or(0, |r| r.pid);
        let what = c.describe();
        match c.finish() {
            Ok(()) if has_mounts_under(&d) => {
                first.get_or_insert(run_err(format!(
                    "{}: something is still mounted under it",
                    d.display()
                )));
            }
            Ok(()) => done.push((pid, what)),
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    match first {
        Some(e) if done.is_empty() => Err(e),
        Some(e) => {
            tracing::warn!("{e}");
            Ok(done)
        }
        None => Ok(done),
    }
}

/// Unmounts `m`, retrying while it is busy (up to 5 s).
pub(crate) fn umount(m: &Path) -> Result<()> {
    for _ in 0..100 {
        match umount2(m, MntFlags::empty()) {
            Ok(()) => return Ok(()),
            // Not a mount point (any more), or gone: nothing to undo.
            Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => return Ok(()),
            Err(nix::errno::Errno::EBUSY) => {}
            Err(e) => return Err(run_err(format!("unmounting {}: {e}", m.display()))),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(run_err(format!("unmounting {}: busy", m.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_name_a_process_for_good() {
        let me = RunId::me();
        assert!(me.start > 0);
        assert!(me.alive());
        assert_eq!(RunId::parse(&me.name()), Some(me));
        // The same pid with another start time is another process.
        let other = RunId {
            pid: me.pid,
            start: me.start + 1,
        };
        assert!(!other.alive());
        // Directories from before start times were kept.
        assert_eq!(RunId::parse("123"), Some(RunId { pid: 123, start: 0 }));
        assert_eq!(RunId::parse("lock"), None);
        assert_eq!(RunId::parse("12-x"), None);
    }

    #[test]
    fn journals_read_back() {
        let dir = std::env::temp_dir().join(format!("tandem-journal-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let mut c = Cleanup::with(Journal::default(), &dir);
        c.j.run = Some(RunId::me());
        c.set_devemu("bench-1-2".into()).unwrap();
        c.push_mount(dir.join("mnt")).unwrap();
        c.set_sched(SchedRecord {
            file: "/sys/block/x/queue/scheduler".into(),
            original: "bfq".into(),
            tunables: [("low_latency".to_string(), "1".to_string())].into(),
        })
        .unwrap();
        let back = Cleanup::load(&dir).unwrap().unwrap();
        assert_eq!(back.j.devemu_instance.as_deref(), Some("bench-1-2"));
        assert_eq!(back.j.mounts, vec![dir.join("mnt")]);
        assert_eq!(back.j.sched.as_ref().unwrap().tunables["low_latency"], "1");
        assert_eq!(back.j.run, Some(RunId::me()));
        // Another version's journal is not understood, so not undone.
        fs::write(
            dir.join(JOURNAL),
            r#"{"pid":1,"sched":["/x","bfq"],"devemu":"/dev/loop9"}"#,
        )
        .unwrap();
        assert!(Cleanup::load(&dir).is_err());
        // Not undone here (it names a device that is not there).
        c.run_dir = None;
        c.j = Journal::default();
        fs::remove_dir_all(&dir).unwrap();
    }
}
