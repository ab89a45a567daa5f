//! hostd's `cfsv` mode: CFS-v's I/O classifier on stock Linux. Every
//! period hostd reads `/proc/PID/task/TID/schedstat` of each thread of a
//! served VM's QEMU, feeds the 2-bit counter of [`policy::detect::io_class`]
//! (the one the simulator's `cfs-v` host scheduler uses), and gives the
//! threads it calls I/O-related a precedence stock Linux offers
//! ([`CfsvBoost`]). No kernel patch: the kernel's own scheduler still
//! decides, only weights, classes and groups change.
//!
//! Safety as for every hostd knob: each thread's original policy, nice
//! value and cgroup are in the [`Journal`] before they change, and are put
//! back when the thread leaves the I/O-related set, when its VM goes, when
//! hostd exits, and at the next start after a crash.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::str::FromStr;

use policy::detect::io_class::{IoClassifier, IoRole, COUNT_MAX};
use policy::Nanos;
use serde::{Deserialize, Serialize};

use crate::actuator::{Entry, Journal};
use crate::{err, sys, Result};

/// How an I/O-related thread is favoured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CfsvBoost {
    /// Moved to a cgroup v1 `cpu` group of their own at the hierarchy's
    /// root (`tandem-cfsv`), whose `cpu.shares` is `cfsv_shares`: the
    /// I/O-related threads together weigh that much against each task and
    /// group beside them.
    Shares,
    /// A nice value (`cfsv_nice`): a larger CFS weight for each thread.
    /// The default, from the real runner's `scenarios/cfsv-real.toml` (a
    /// TCG guest's 4 KiB random readers beside 3 host hogs on 2 cores, 3
    /// runs per kind, docs/measurements.md "CFS-v on a real host"): nice
    /// raised the guest's IOPS 2.2x for 29% of the hogs' iterations, the
    /// trade nearest CFS-v's own (+764% I/O for -30% computing); shares
    /// gave 4.8x for 54%, rr 5.6x for 82%, deadline 1.1x for 57%. It needs neither a cgroup v1 `cpu` hierarchy nor RT throttling.
    #[default]
    Nice,
    /// `SCHED_RR` at `cfsv_rt_priority`: a woken I/O thread preempts every
    /// normal task at once, within the kernel's RT throttling (never
    /// changed; refused while it is off).
    Rr,
    /// `SCHED_DEADLINE`, `cfsv_dl_runtime_us` in each [`DL_PERIOD_NS`]:
    /// the partial boost (CFS-v gives a mixed vCPU at most 200 us). The
    /// kernel's admission control may refuse a thread (too much total
    /// bandwidth); that thread stays as it is.
    Deadline,
}

impl CfsvBoost {
    pub const NAMES: &'static str = "shares, nice, rr, deadline";

    pub fn name(self) -> &'static str {
        match self {
            CfsvBoost::Shares => "shares",
            CfsvBoost::Nice => "nice",
            CfsvBoost::Rr => "rr",
            CfsvBoost::Deadline => "deadline",
        }
    }
}

impl FromStr for CfsvBoost {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "shares" => Ok(CfsvBoost::Shares),
            "nice" => Ok(CfsvBoost::Nice),
            "rr" => Ok(CfsvBoost::Rr),
            "deadline" => Ok(CfsvBoost::Deadline),
            _ => Err(format!(
                "{s:?} is no cfsv boost; accepted: {}",
                CfsvBoost::NAMES
            )),
        }
    }
}

/// `SCHED_DEADLINE`'s period (and relative deadline): CFS-v's partial
/// boost is "at most 200 us" at a time; 1 ms makes the default runtime
/// 20% of a CPU per thread, so that the kernel's admission control (95% of
/// each CPU for all deadline tasks) admits several threads per CPU.
pub const DL_PERIOD_NS: u64 = 1_000_000;

/// The group [`CfsvBoost::Shares`] moves I/O-related threads to, under
/// the cgroup v1 `cpu` hierarchy's root.
pub const SHARES_GROUP: &str = "tandem-cfsv";

/// How often the thread list of a VM is read again (new QEMU workers,
/// renamed threads): QEMU's pool starts a worker on demand, which waits at
/// most this long to be classified.
pub const RELIST_NS: Nanos = 1_000_000_000;

/// One reading of `/proc/PID/task/TID/schedstat`: the kernel's
/// `se.sum_exec_runtime`, `sched_info.run_delay` and `sched_info.pcount`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedStat {
    /// CPU time, ns (updated at each tick and switch, so a thread running
    /// now shows its current run too).
    pub run_ns: u64,
    /// Time runnable but waiting for a CPU, ns (added when the wait ends).
    pub wait_ns: u64,
    /// Times the thread was put on a CPU ("timeslices").
    pub slices: u64,
}

/// Parses a schedstat line: three decimal numbers.
pub fn parse_schedstat(text: &str) -> Option<SchedStat> {
    let mut it = text.split_ascii_whitespace().map(|w| w.parse::<u64>().ok());
    Some(SchedStat {
        run_ns: it.next()??,
        wait_ns: it.next()??,
        slices: it.next()??,
    })
}

/// A thread that spent at least this share of two periods neither running
/// nor waiting for a CPU was blocked, so some of its runs ended in sleep
/// and began with a wake-up. Not any nanosecond: schedstat's CPU time of
/// a running thread is brought up to date only at a tick or a switch (a
/// tick is 4 ms at HZ=250) and a wait only when it ends, so a busy thread
/// can show several ms of "sleep" at a reading. 10% (5 ms of 50) let
/// spinning vCPUs preempted by boosted workers pass for I/O-related in
/// the root test; an I/O thread sleeps most of its time.
pub const SLEPT_SHARE: f64 = 0.25;

/// One period of a thread: what it ran and waited, in how long.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Period {
    pub ran_ns: u64,
    pub waited_ns: u64,
    pub elapsed_ns: u64,
}

/// What one period of schedstat says about a thread's runs, fed to its
/// counter; returns the period, to be passed as `before` next time.
///
/// schedstat counts time slices and CPU time, not wake-ups: a slice ends
/// when the thread blocks or when it is preempted, and the two cannot be
/// told apart from it. The estimate:
/// - the runs of the period are taken as alike, each `Δrun / Δslices` long
///   (the mean; a mixed thread's short and long runs average out, as its
///   classification in CFS-v would alternate);
/// - they follow wake-ups if the thread slept a share ([`SLEPT_SHARE`]) of
///   this period and the one `before` it (time neither on a CPU nor
///   waiting for one): a thread that never blocks ran or waited the whole
///   time, and its slices ended by preemption. Two periods, because the
///   kernel adds a wait to schedstat only when it ends (and a run at a
///   tick or switch): a busy thread waiting for a CPU at the reading would
///   look asleep; the next period holds that wait, so over the two the
///   error is only the wait going on at the end, over twice the time;
/// - the counter is fed `min(Δslices, 3)` such runs: it saturates at 3, so
///   more alike runs change nothing;
/// - a thread that ran without a new slice (one run still going, a CPU
///   hog alone on its CPU) counts as one run of `Δrun` without a wake-up;
/// - a thread that did not run keeps its counter (the simulator moves a
///   counter only when its thread runs).
pub fn feed(
    c: &mut IoClassifier,
    prev: SchedStat,
    cur: SchedStat,
    elapsed_ns: u64,
    before: Option<Period>,
) -> Period {
    let now = Period {
        ran_ns: cur.run_ns.saturating_sub(prev.run_ns),
        waited_ns: cur.wait_ns.saturating_sub(prev.wait_ns),
        elapsed_ns,
    };
    let slices = cur.slices.saturating_sub(prev.slices);
    if slices == 0 {
        if now.ran_ns > 0 {
            c.on_run(now.ran_ns, false);
        }
        return now;
    }
    let mean = now.ran_ns / slices;
    // The first period of a thread has none before it: no wake-up is
    // counted on one period's evidence.
    let after_wakeup = before.is_some_and(|b| {
        let elapsed = now.elapsed_ns + b.elapsed_ns;
        let slept = elapsed.saturating_sub(now.ran_ns + b.ran_ns + now.waited_ns + b.waited_ns);
        slept as f64 >= SLEPT_SHARE * elapsed as f64
    });
    for _ in 0..slices.min(u64::from(COUNT_MAX)) {
        c.on_run(mean, after_wakeup);
    }
    now
}

/// A QEMU thread's role, from what QEMU names it: the main thread (QEMU's
/// main loop; the process's name, `qemu-system-*`), an iothread (`IO
/// <id>`, QEMU's `iothread_run` names its thread so; it runs an event
/// loop) or a worker of the thread pool (`worker`) are always
/// I/O-related; a vCPU (listed by QMP) and any other thread are counted.
pub fn role_of(tid: u32, pid: u32, comm: &str, vcpus: &[u32]) -> IoRole {
    if vcpus.contains(&tid) {
        IoRole::Counted
    } else if tid == pid
        || comm.starts_with("qemu-system")
        || comm.starts_with("IO ")
        || comm.contains("iothread")
    {
        IoRole::MainLoop
    } else if comm.starts_with("worker") {
        IoRole::Worker
    } else {
        IoRole::Counted
    }
}

/// One tracked thread.
#[derive(Debug)]
struct Tracked {
    start: u64,
    file: File,
    /// The last reading, and when it was taken.
    last: Option<(SchedStat, Nanos)>,
    /// The last period.
    period: Option<Period>,
    class: IoClassifier,
    comm: String,
    boosted: bool,
    /// Whether a boost it was born with (see [`CfsvActuator::born_boosted`])
    /// has been looked for.
    birth_checked: bool,
}

/// One VM's threads, their counters and their boosts.
#[derive(Debug)]
pub struct VmCfsv {
    pub vm: String,
    pub pid: u32,
    threads: BTreeMap<u32, Tracked>,
    listed_ns: Option<Nanos>,
    /// Schedstat files read.
    pub samples: u64,
    /// Boosts that failed (a refused thread, an admission refusal).
    pub errors: u64,
    pub last_error: Option<String>,
}

/// What a VM's threads are now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VmCounts {
    pub threads: usize,
    pub io_related: usize,
    pub boosted: usize,
}

impl VmCfsv {
    pub fn new(vm: &str, pid: u32) -> VmCfsv {
        VmCfsv {
            vm: vm.to_string(),
            pid,
            threads: BTreeMap::new(),
            listed_ns: None,
            samples: 0,
            errors: 0,
            last_error: None,
        }
    }

    pub fn counts(&self) -> VmCounts {
        VmCounts {
            threads: self.threads.len(),
            io_related: self
                .threads
                .values()
                .filter(|t| t.class.is_io_related())
                .count(),
            boosted: self.threads.values().filter(|t| t.boosted).count(),
        }
    }

    /// The thread ids boosted now.
    pub fn boosted(&self) -> Vec<u32> {
        self.threads
            .iter()
            .filter(|(_, t)| t.boosted)
            .map(|(&tid, _)| tid)
            .collect()
    }

    /// Reads the thread list again: new threads are opened and start at
    /// 0, threads gone are forgotten (their journal entries need nothing:
    /// a revert checks the start time), and roles follow names and QMP.
    fn relist(&mut self, vcpus: &[u32]) {
        let Ok(tids) = sys::threads(self.pid) else {
            return;
        };
        self.threads.retain(|tid, _| tids.contains(tid));
        for tid in tids {
            let comm = std::fs::read_to_string(format!("/proc/{}/task/{tid}/comm", self.pid))
                .map(|s| s.trim_end().to_string())
                .unwrap_or_default();
            let role = role_of(tid, self.pid, &comm, vcpus);
            if let Some(t) = self.threads.get_mut(&tid) {
                if t.class.role() != role {
                    // Not sampled while its role was always I/O-related.
                    t.last = None;
                    t.period = None;
                }
                t.class.set_role(role);
                t.comm = comm;
                continue;
            }
            let path = format!("/proc/{}/task/{tid}/schedstat", self.pid);
            let (Ok(file), Some(start)) = (File::open(&path), sys::thread_start_time(tid)) else {
                continue;
            };
            self.threads.insert(
                tid,
                Tracked {
                    start,
                    file,
                    last: None,
                    period: None,
                    class: IoClassifier::new(role),
                    comm,
                    boosted: false,
                    birth_checked: false,
                },
            );
        }
    }

    /// One period: every thread's schedstat read (the file kept open and
    /// read again from its start: no open and close per sample) and fed.
    /// Each reading is timed by `clock` when it is taken, not once per
    /// period: hostd preempted between two reads would otherwise see the
    /// later threads' interval wrong, and a busy thread "sleep".
    pub fn sample(&mut self, now: Nanos, vcpus: &[u32], clock: impl Fn() -> Nanos) {
        if self.listed_ns.is_none_or(|t| now >= t + RELIST_NS) {
            self.relist(vcpus);
            self.listed_ns = Some(now);
        }
        let mut buf = [0u8; 128];
        // A thread whose role is always I/O-related is not read: its class
        // cannot change (most of a real QEMU's threads beside its vCPUs).
        for t in self
            .threads
            .values_mut()
            .filter(|t| !t.class.role().always_io())
        {
            let Ok(n) = t.file.read_at(&mut buf, 0) else {
                continue;
            };
            let at = clock();
            self.samples += 1;
            let Some(cur) = std::str::from_utf8(&buf[..n])
                .ok()
                .and_then(parse_schedstat)
            else {
                continue;
            };
            if let Some((prev, then)) = t.last {
                t.period = Some(feed(
                    &mut t.class,
                    prev,
                    cur,
                    at.saturating_sub(then),
                    t.period,
                ));
            }
            t.last = Some((cur, at));
        }
    }

    /// Brings each thread's boost to its class: I/O-related threads
    /// boosted, the others restored. Returns the first error (the other
    /// threads are still done).
    pub fn reconcile(&mut self, act: &CfsvActuator, j: &mut Journal) -> Result<()> {
        let mut first = Ok(());
        // In thread id order: QEMU's main thread (always I/O-related, its
        // id the pid, below its threads') is boosted and journalled before
        // the threads it creates are looked at.
        for (&tid, t) in self.threads.iter_mut() {
            let want = t.class.is_io_related();
            if !t.birth_checked && !want {
                t.birth_checked = true;
                if let Err(e) = act.unboost_born(self.pid, tid, j) {
                    self.errors += 1;
                    self.last_error = Some(format!("thread {tid} ({}): {e}", t.comm));
                }
            }
            // A thread born boosted that is I/O-related is journalled with
            // the main thread's original below.
            t.birth_checked = true;
            if want == t.boosted {
                continue;
            }
            let r = if want {
                act.boost_thread(&self.vm, (self.pid, tid), t.start, j)
            } else {
                j.revert_thread(tid, t.start)
            };
            match r {
                Ok(()) => t.boosted = want,
                Err(e) => {
                    self.errors += 1;
                    self.last_error = Some(format!("thread {tid} ({}): {e}", t.comm));
                    if want {
                        // Not boosted: whatever was journalled goes back.
                        let _ = j.revert_thread(tid, t.start);
                    }
                    if first.is_ok() {
                        first = Err(err(format!("VM {}: thread {tid}: {e}", self.vm)));
                    }
                }
            }
        }
        first
    }
}

/// The cfsv boost's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CfsvActuator {
    pub boost: CfsvBoost,
    pub nice: i32,
    pub rt_priority: i32,
    pub shares: u64,
    pub dl_runtime_ns: u64,
    /// The `tandem-cfsv` group (with [`CfsvBoost::Shares`]).
    group: Option<PathBuf>,
}

impl CfsvActuator {
    /// Checks what the boost needs: RT throttling on for `rr`; for
    /// `shares`, the cgroup v1 `cpu` hierarchy, where the group is created
    /// (or found, left by a crashed hostd) and given its shares.
    pub fn new(
        boost: CfsvBoost,
        nice: i32,
        rt_priority: i32,
        shares: u64,
        dl_runtime_ns: u64,
    ) -> Result<CfsvActuator> {
        let mut group = None;
        match boost {
            CfsvBoost::Rr => crate::cpuboost::rt_throttling_on()?,
            CfsvBoost::Shares => {
                let mount = sys::cgroup_v1_mount("cpu").ok_or_else(|| {
                    err("cfsv_boost = shares: no cgroup v1 cpu hierarchy is mounted")
                })?;
                let g = mount.join(SHARES_GROUP);
                match std::fs::create_dir(&g) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(err(format!("{}: {e}", g.display()))),
                }
                let f = g.join("cpu.shares");
                std::fs::write(&f, format!("{shares}\n"))
                    .map_err(|e| err(format!("{}: {e}", f.display())))?;
                group = Some(g);
            }
            CfsvBoost::Nice | CfsvBoost::Deadline => {}
        }
        Ok(CfsvActuator {
            boost,
            nice,
            rt_priority,
            shares,
            dl_runtime_ns,
            group,
        })
    }

    /// Whether thread `tid` has this boost now: set by hostd, or inherited
    /// from the thread that created it. A thread is born with its
    /// creator's nice value, policy (`SCHED_DEADLINE` is set with
    /// reset-on-fork, so not that one) and cgroup, and QEMU's pool workers
    /// and iothreads are created by its main loop or an iothread, both
    /// always I/O-related and boosted.
    fn born_boosted(&self, tid: u32) -> bool {
        match self.boost {
            CfsvBoost::Shares => {
                sys::thread_cgroup(tid, "cpu").is_some_and(|g| g == format!("/{SHARES_GROUP}"))
            }
            CfsvBoost::Nice => sys::sched_get(tid)
                .is_ok_and(|s| s.nice == self.nice && s.policy == libc::SCHED_OTHER),
            CfsvBoost::Rr => sys::sched_get(tid)
                .is_ok_and(|s| s.policy == libc::SCHED_RR && s.priority == self.rt_priority),
            CfsvBoost::Deadline => false,
        }
    }

    /// What QEMU's main thread (`pid`) was before hostd boosted it, from
    /// the journal: what its threads are when nobody boosts them.
    fn main_orig(&self, pid: u32, j: &Journal) -> Option<Entry> {
        j.entries()
            .iter()
            .find(|e| match (self.boost, e) {
                (CfsvBoost::Shares, Entry::CpuCgroup { tid, .. }) => *tid == pid,
                (CfsvBoost::Shares, _) => false,
                (_, Entry::Sched { tid, .. }) => *tid == pid,
                _ => false,
            })
            .cloned()
    }

    /// A thread born boosted (from a boosted creator) that is not
    /// I/O-related: put back to what the main thread was before its boost,
    /// unless it was born so before the main thread's boost too.
    pub fn unboost_born(&self, pid: u32, tid: u32, j: &Journal) -> Result<()> {
        if tid == pid || !self.born_boosted(tid) {
            return Ok(());
        }
        let r = match self.main_orig(pid, j) {
            Some(Entry::Sched { orig, .. }) => sys::sched_set(tid, &orig),
            Some(Entry::CpuCgroup { orig, .. }) => sys::move_thread(&orig, tid),
            _ => return Ok(()),
        };
        match r {
            Err(e) if e.raw_os_error() != Some(libc::ESRCH) => {
                Err(err(format!("cfsv: restoring a thread born boosted: {e}")))
            }
            _ => Ok(()),
        }
    }

    /// Boosts one thread of VM `vm`'s QEMU (`pid`, `tid`), its original
    /// state journalled first: the main thread's original for a thread
    /// born with the boost (else the journal would "restore" the boost).
    pub fn boost_thread(
        &self,
        vm: &str,
        (pid, tid): (u32, u32),
        start: u64,
        j: &mut Journal,
    ) -> Result<()> {
        if sys::thread_start_time(tid) != Some(start) {
            return Ok(()); // gone
        }
        let born = if tid != pid && self.born_boosted(tid) {
            self.main_orig(pid, j)
        } else {
            None
        };
        let r = match (self.boost, &self.group) {
            (CfsvBoost::Shares, Some(g)) => {
                let Some(rel) = sys::thread_cgroup(tid, "cpu") else {
                    return Ok(());
                };
                let mount = g.parent().unwrap_or(g);
                let orig = match born {
                    Some(Entry::CpuCgroup { orig, .. }) => orig,
                    _ => mount.join(rel.trim_start_matches('/')),
                };
                j.add(Entry::CpuCgroup {
                    vm: vm.to_string(),
                    tid,
                    start,
                    orig,
                })?;
                sys::move_thread(g, tid)
            }
            (CfsvBoost::Shares, None) => return Err(err("cfsv: the shares group is gone")),
            (kind, _) => {
                let orig = match born {
                    Some(Entry::Sched { orig, .. }) => orig,
                    _ => sys::sched_get(tid).map_err(|e| err(format!("sched_get: {e}")))?,
                };
                j.add(Entry::Sched {
                    vm: vm.to_string(),
                    tid,
                    start,
                    orig,
                })?;
                match kind {
                    CfsvBoost::Nice => sys::set_nice(tid, self.nice),
                    CfsvBoost::Rr => sys::sched_set_policy(tid, libc::SCHED_RR, self.rt_priority),
                    _ => sys::sched_set_deadline(tid, self.dl_runtime_ns, DL_PERIOD_NS),
                }
            }
        };
        match r {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Err(err(format!(
                "{}: the kernel's deadline admission control refused it (too much deadline bandwidth)",
                self.boost.name()
            ))),
            Err(e) => Err(err(format!("cfsv {}: {e}", self.boost.name()))),
        }
    }

    /// Removes the `tandem-cfsv` group, once the journal has moved every
    /// thread back (a group with tasks stays: the kernel refuses).
    pub fn finish(&self) {
        if let Some(g) = &self.group {
            let _ = std::fs::remove_dir(g);
        }
    }
}

/// Removes a `tandem-cfsv` group a crashed hostd left, once the state
/// file's recovery has moved its threads back (a group that still has
/// tasks, or none at all, is left as it is).
pub fn remove_leftover_group() {
    if let Some(m) = sys::cgroup_v1_mount("cpu") {
        let _ = std::fs::remove_dir(m.join(SHARES_GROUP));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;
    const MS: u64 = 1_000_000;

    fn st(run_ns: u64, wait_ns: u64, slices: u64) -> SchedStat {
        SchedStat {
            run_ns,
            wait_ns,
            slices,
        }
    }

    /// A series of schedstat readings, `step` apart, fed to a counter.
    fn run_series(role: IoRole, series: &[SchedStat], step: u64) -> IoClassifier {
        let mut c = IoClassifier::new(role);
        let mut before = None;
        for w in series.windows(2) {
            before = Some(feed(&mut c, w[0], w[1], step, before));
        }
        c
    }

    #[test]
    fn schedstat_lines_parse() {
        assert_eq!(
            parse_schedstat("123456 789 42\n"),
            Some(st(123_456, 789, 42))
        );
        assert_eq!(parse_schedstat("1 2"), None);
        assert_eq!(parse_schedstat("a b c"), None);
        assert_eq!(parse_schedstat(""), None);
    }

    /// The fake worker's pattern: 50 us of work, then 200 us asleep, 80
    /// times in a 20 ms period: I/O-related after two periods (the first
    /// one alone counts nothing).
    #[test]
    fn short_runs_after_sleeps_make_a_thread_io_related() {
        let series: Vec<_> = (0..3u64)
            .map(|k| st(k * 80 * 50 * US, k * 80 * 5 * US, k * 80))
            .collect();
        let c = run_series(IoRole::Counted, &series[..2], 20 * MS);
        assert_eq!(c.count(), 0);
        let c = run_series(IoRole::Counted, &series, 20 * MS);
        assert!(c.is_io_related(), "{c:?}");
        assert_eq!(c.count(), COUNT_MAX);
    }

    /// A CPU hog preempted every 3 ms: short waits, no sleep; never
    /// I/O-related, and it takes an I/O-related thread back down.
    #[test]
    fn a_preempted_hog_is_not_io_related_and_long_runs_take_it_back() {
        // 10 ms run and 10 ms waiting in each 20 ms: slices of 3.3 ms.
        let hog: Vec<_> = (0..5u64)
            .map(|k| st(k * 10 * MS, k * 10 * MS, k * 3))
            .collect();
        let c = run_series(IoRole::Counted, &hog, 20 * MS);
        assert_eq!(c.count(), 0);
        // A thread that was I/O-related then turned hog: one period of
        // mean 3.3 ms runs (3 fed) brings it to 0.
        let mut c = IoClassifier::new(IoRole::Counted);
        let p = feed(&mut c, st(0, 0, 0), st(MS, 0, 40), 20 * MS, None);
        feed(&mut c, st(MS, 0, 40), st(2 * MS, 0, 80), 20 * MS, Some(p));
        assert!(c.is_io_related());
        feed(&mut c, hog[0], hog[1], 20 * MS, None);
        assert!(!c.is_io_related());
        assert_eq!(c.count(), 0);
    }

    /// Short slices without sleep are preemptions (a crowded CPU), not
    /// wake-ups: they do not count up.
    #[test]
    fn short_slices_without_sleep_do_not_count_up() {
        // 40 slices of 250 us, the rest of the period waiting.
        let s = [
            st(0, 0, 0),
            st(10 * MS, 10 * MS, 40),
            st(20 * MS, 20 * MS, 80),
        ];
        let c = run_series(IoRole::Counted, &s, 20 * MS);
        assert_eq!(c.count(), 0);
    }

    /// A busy thread seen waiting at a reading looks asleep in that period
    /// alone; its wait shows in the next one, and over the two it is not
    /// taken for a wake-up.
    #[test]
    fn a_wait_going_on_at_a_reading_is_not_taken_for_sleep() {
        // Preempted every 250 us: 20 ms run and waiting in 40 ms, but the
        // last 5 ms of waiting in the first period are added in the second.
        let s = [
            st(0, 0, 0),
            st(10 * MS, 5 * MS, 40),
            st(20 * MS, 20 * MS, 80),
            st(30 * MS, 25 * MS, 120),
        ];
        // Had it been judged on the first period alone (5 ms of 20 not
        // accounted), it would have looked asleep.
        let mut c = IoClassifier::new(IoRole::Counted);
        let p = feed(&mut c, s[0], s[1], 20 * MS, None);
        let p2 = feed(&mut c, s[1], s[2], 20 * MS, Some(p));
        feed(&mut c, s[2], s[3], 20 * MS, Some(p2));
        assert_eq!(c.count(), 0);
    }

    /// One run through the whole period (no new slice): a long run.
    #[test]
    fn a_run_spanning_the_period_counts_down() {
        let mut c = IoClassifier::new(IoRole::Counted);
        let p = feed(&mut c, st(0, 0, 0), st(MS, 0, 20), 20 * MS, None);
        feed(&mut c, st(MS, 0, 20), st(2 * MS, 0, 40), 20 * MS, Some(p));
        assert_eq!(c.count(), COUNT_MAX);
        feed(&mut c, st(2 * MS, 0, 40), st(22 * MS, 0, 40), 20 * MS, None);
        assert_eq!(c.count(), COUNT_MAX - 1);
        // Did not run at all: unchanged.
        feed(
            &mut c,
            st(22 * MS, 0, 40),
            st(22 * MS, 0, 40),
            20 * MS,
            None,
        );
        assert_eq!(c.count(), COUNT_MAX - 1);
    }

    /// Runs between 500 us and 1 ms move nothing; a mixed thread's mean
    /// decides.
    #[test]
    fn mean_runs_between_the_thresholds_move_nothing() {
        let mut c = IoClassifier::new(IoRole::Counted);
        // 10 runs of 700 us in 20 ms, asleep the rest.
        feed(&mut c, st(0, 0, 0), st(7 * MS, 0, 10), 20 * MS, None);
        assert_eq!(c.count(), 0);
    }

    #[test]
    fn always_io_roles_stay_whatever_they_run() {
        let hog: Vec<_> = (0..5u64).map(|k| st(k * 20 * MS, 0, k)).collect();
        for role in [IoRole::MainLoop, IoRole::Worker] {
            let c = run_series(role, &hog, 20 * MS);
            assert!(c.is_io_related(), "{role:?}");
        }
    }

    #[test]
    fn roles_come_from_qemu_thread_names_and_qmp() {
        let vcpus = [12, 13];
        assert_eq!(role_of(10, 10, "qemu-system-x86", &vcpus), IoRole::MainLoop);
        assert_eq!(role_of(11, 10, "worker", &vcpus), IoRole::Worker);
        assert_eq!(role_of(14, 10, "IO iothread0", &vcpus), IoRole::MainLoop);
        assert_eq!(role_of(15, 10, "IO mon_iothread", &vcpus), IoRole::MainLoop);
        assert_eq!(role_of(12, 10, "CPU 0/KVM", &vcpus), IoRole::Counted);
        // A vCPU is counted whatever its name.
        assert_eq!(role_of(13, 10, "worker", &vcpus), IoRole::Counted);
        assert_eq!(role_of(16, 10, "call_rcu", &vcpus), IoRole::Counted);
    }

    #[test]
    fn boost_kinds_parse() {
        assert_eq!("deadline".parse::<CfsvBoost>(), Ok(CfsvBoost::Deadline));
        assert_eq!("shares".parse::<CfsvBoost>(), Ok(CfsvBoost::Shares));
        assert!("fifo".parse::<CfsvBoost>().unwrap_err().contains("nice"));
    }

    /// This process's own threads, sampled for real: the file is read
    /// again from its start and the running thread's numbers grow.
    #[test]
    fn own_threads_are_sampled() {
        let pid = std::process::id();
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        let mut v = VmCfsv::new("self", pid);
        // Counted as vCPUs: the main thread would not be read.
        let all = sys::threads(pid).unwrap();
        v.sample(0, &all, crate::now_ns);
        let n = v.counts().threads;
        assert!(n >= 1);
        let before = v.threads[&tid].last.expect("read").0;
        let t0 = std::time::Instant::now();
        while t0.elapsed() < std::time::Duration::from_millis(5) {}
        v.sample(5 * MS, &all, crate::now_ns);
        // Other tests' threads come and go meanwhile.
        assert!(v.samples > n as u64, "{} samples of {n} threads", v.samples);
        let after = v.threads[&tid].last.expect("read").0;
        assert!(after.run_ns > before.run_ns, "{before:?} {after:?}");
    }
}
