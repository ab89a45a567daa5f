//! guestd's in-guest marking (`tandem guestd --mark-ioprio CLASS`): while
//! the guest's own rules ([`policy::GuestSignalDetector`]) judge a process
//! urgent (it just started, it resumed I/O after an idle time, a
//! `tandem hint --pid` named it), guestd raises that process's I/O priority
//! inside the guest for a lease. The guest kernel writes each request's
//! priority into the virtio-blk header (`req_get_ioprio()` in
//! `drivers/block/virtio_blk.c`), and `tandem vhost-blk` issues it with that
//! class on the host, so no message to the host is needed for I/O.
//!
//! The priority is per thread: `ioprio_set(IOPRIO_WHO_PROCESS, who)` finds
//! the task `who` (`find_task_by_vpid()` in `block/ioprio.c`, a thread id
//! works) and sets that task's own I/O context (`set_task_ioprio()`).
//! Threads do not share an I/O context unless created with `CLONE_IO`, so
//! every thread of the process is set. A thread or a child a marked thread
//! creates inherits the mark (`copy_io()` in `kernel/fork.c` copies a valid
//! priority): on restore, every thread still carrying the mark is put back,
//! and a child that comes to guestd's notice (an exec) with the mark its
//! marked parent gave it is taken as guestd's too.
//!
//! guestd never touches a process whose priority was set by someone else:
//! it marks only a process whose threads all have the default priority
//! (class NONE: the priority then follows the nice value), and on restore it
//! puts back only the threads that still carry guestd's mark (a thread the
//! user re-prioritised during the lease keeps the user's value).
//!
//! An unset priority reads as class NONE from `ioprio_get` (so on the
//! guest's 6.1 and the host's 6.18 here: `IOPRIO_DEFAULT` is
//! `IOPRIO_PRIO_VALUE(IOPRIO_CLASS_NONE, 0)` since Jan Kara's "block: fix
//! default IO priority handling again", 2022). Kernels with commit
//! e70344c05995 ("block: fix default IO priority handling", 2021) and
//! without that fix (around 5.15 to 5.19) report best-effort level 4
//! instead, which cannot be told from a user's `ionice -c2 -n4`: on such a
//! guest kernel guestd leaves every process alone (`--verbose` logs each).

use std::collections::HashMap;
use std::io;

use policy::mark::{Mark, MarkEnd, MarkRule, Usage};
use policy::{GuestSignalDetector, HelpReason, Nanos};

use crate::sys;

/// The priority guestd marks an urgent process with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkClass {
    /// Real-time, level 0. The host's backend keeps RT only for VMs allowed
    /// it (`vhost-blk --allow-rt`, within the VM's budget) and otherwise
    /// issues it as best-effort level 0; inside the guest, RT I/O can
    /// starve the guest's other readers for the lease, so only on the
    /// operator's word.
    Rt,
    /// Best-effort, level 0: above the default (best-effort level 4 at
    /// nice 0, `task_nice_ioprio()`), and safe for the guest's other I/O.
    Be0,
}

impl MarkClass {
    /// The ioprio value (`IOPRIO_PRIO_VALUE(class, 0)`).
    pub fn value(self) -> u32 {
        match self {
            MarkClass::Rt => sys::ioprio_value(sys::IOPRIO_CLASS_RT, 0),
            MarkClass::Be0 => sys::ioprio_value(sys::IOPRIO_CLASS_BE, 0),
        }
    }
}

/// Whether a need of this reason marks the process: a start (an exec, I/O
/// resumed after an idle time) or an explicit hint. A soft real-time
/// reader's need is long-lived and periodic, and the guest's scheduler
/// already favours it; it is left to the host-side coordination.
pub fn marks(reason: HelpReason) -> bool {
    matches!(
        reason,
        HelpReason::Exec | HelpReason::IoResume | HelpReason::Explicit
    )
}

/// The needs guestd marks at `now`: each process with a live need of a
/// reason that [`marks`], and when its need ends.
pub fn needs_to_mark(d: &GuestSignalDetector, now: Nanos) -> Vec<(u32, Nanos)> {
    d.process_needs(now)
        .into_iter()
        .filter(|(_, reasons, _)| reasons.iter().any(|&r| marks(r)))
        .map(|(pid, _, until)| (pid, until))
        .collect()
}

/// What the detector counted of process `pid` for a mark's rule: the bytes
/// it read and its I/O time.
pub fn usage(d: &GuestSignalDetector, pid: u32) -> Usage {
    Usage {
        read: d.read_bytes(pid),
        io_ns: d.io_ns(pid),
    }
}

/// The system calls the marker makes: a seam for the unit tests.
pub trait IoprioOps {
    /// The thread ids of process `pid`.
    fn threads(&self, pid: u32) -> io::Result<Vec<u32>>;
    fn get(&self, tid: u32) -> io::Result<u32>;
    fn set(&self, tid: u32, value: u32) -> io::Result<()>;
    /// The process's start time (with the pid, names it uniquely).
    fn start_time(&self, pid: u32) -> Option<u64>;
    fn parent(&self, pid: u32) -> Option<u32>;
}

/// The real system calls.
pub struct SysIoprio;

impl IoprioOps for SysIoprio {
    fn threads(&self, pid: u32) -> io::Result<Vec<u32>> {
        sys::threads(pid)
    }
    fn get(&self, tid: u32) -> io::Result<u32> {
        sys::ioprio_get(tid)
    }
    fn set(&self, tid: u32, value: u32) -> io::Result<()> {
        sys::ioprio_set(tid, value)
    }
    fn start_time(&self, pid: u32) -> Option<u64> {
        sys::start_time(&pid.to_string())
    }
    fn parent(&self, pid: u32) -> Option<u32> {
        sys::parent_pid(pid)
    }
}

/// What the marker did (for the log and the tests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MarkEvent {
    Marked {
        pid: u32,
        threads: usize,
    },
    Restored {
        pid: u32,
        threads: usize,
        /// Why the mark ended (`None`: guestd is leaving, or the process
        /// exited).
        why: Option<MarkEnd>,
    },
    /// A thread of the process has a priority someone else set.
    LeftAlone {
        pid: u32,
        tid: u32,
        value: u32,
    },
    /// The process could not be marked (gone, or not permitted).
    Failed {
        pid: u32,
        error: String,
    },
}

#[derive(Clone, Copy, Debug)]
enum Entry {
    Marked {
        start: Option<u64>,
        mark: Mark,
        ends: Nanos,
    },
    /// Its lease is over (or marking failed) while its need lasts: not
    /// again until the need ends and a new one starts.
    Spent,
    /// Someone else set its priority: never touched.
    UserSet,
}

/// The default priority (class NONE, level 0): what an unset task reports
/// and what restoring sets back.
const DEFAULT: u32 = 0;

/// The marks: which urgent processes carry guestd's priority, until when.
pub struct Marker<O: IoprioOps> {
    ops: O,
    value: u32,
    rule: MarkRule,
    procs: HashMap<u32, Entry>,
}

impl<O: IoprioOps> Marker<O> {
    /// `rule`: how long one need's mark lasts at most, and how much its
    /// process may read under it (the policy crate's, shared with the
    /// simulator).
    pub fn new(ops: O, class: MarkClass, rule: MarkRule) -> Self {
        Marker {
            ops,
            value: class.value(),
            rule: MarkRule {
                lease_ns: rule.lease_ns.max(1),
                ..rule
            },
            procs: HashMap::new(),
        }
    }

    /// [`Marker::update_with`] without counts of what the processes do:
    /// only wall time bounds the marks.
    pub fn update(&mut self, now: Nanos, needs: &[(u32, Nanos)]) -> Vec<MarkEvent> {
        self.update_with(now, needs, |_| Usage::default())
    }

    /// Brings the marks in line with the urgent processes at `now`: each
    /// `(pid, until)` a process whose need (of a reason that [`marks`])
    /// lasts until `until`; `used(pid)`, what the process has done so far
    /// (bytes read, I/O time). A new one is marked, and keeps its mark
    /// while the policy crate's [`MarkRule`] says (until its need ends, its
    /// lease of I/O time runs out or it has read the rule's greedy amount
    /// since the mark); a mark that ended is restored and not set again
    /// while the same need lasts.
    pub fn update_with(
        &mut self,
        now: Nanos,
        needs: &[(u32, Nanos)],
        used: impl Fn(u32) -> Usage,
    ) -> Vec<MarkEvent> {
        let live: HashMap<u32, Nanos> = needs.iter().copied().collect();
        let mut out = Vec::new();
        let mut pids: Vec<u32> = self.procs.keys().copied().collect();
        pids.sort_unstable();
        for pid in pids {
            let need = live.get(&pid).copied();
            match (self.procs[&pid], need) {
                (Entry::Marked { start, mark, .. }, need) => {
                    match self.rule.check(&mark, now, need, used(pid)) {
                        Ok(ends) => {
                            self.procs.insert(pid, Entry::Marked { start, mark, ends });
                        }
                        Err(why) => {
                            out.extend(self.restore(pid, start, Some(why)));
                            if need.is_some() {
                                self.procs.insert(pid, Entry::Spent);
                            } else {
                                self.procs.remove(&pid);
                            }
                        }
                    }
                }
                (Entry::Spent | Entry::UserSet, None) => {
                    self.procs.remove(&pid);
                }
                (Entry::Spent | Entry::UserSet, Some(_)) => {}
            }
        }
        let mut fresh: Vec<(u32, Nanos)> = needs
            .iter()
            .copied()
            .filter(|(pid, until)| !self.procs.contains_key(pid) && *until > now)
            .collect();
        // Parents before their children: a child's inherited mark is taken
        // as guestd's only if its parent is marked.
        fresh.sort_unstable();
        for (pid, until) in fresh {
            let mark = self.rule.start(now, used(pid));
            out.extend(self.mark(pid, mark, until));
        }
        out
    }

    /// The process exited: its threads are gone with their priorities. If
    /// it is in fact still there (an exit inferred from `/proc` that could
    /// not be read for a moment), its mark is restored all the same.
    pub fn exited(&mut self, pid: u32) -> Option<MarkEvent> {
        match self.procs.remove(&pid)? {
            Entry::Marked { start, .. } => self.restore(pid, start, None),
            _ => None,
        }
    }

    /// When the next mark's lease ends (needs that end come as updates).
    pub fn next_deadline(&self) -> Option<Nanos> {
        self.procs
            .values()
            .filter_map(|e| match e {
                Entry::Marked { ends, .. } => Some(*ends),
                _ => None,
            })
            .min()
    }

    /// Whether `pid` carries guestd's mark now.
    pub fn is_marked(&self, pid: u32) -> bool {
        matches!(self.procs.get(&pid), Some(Entry::Marked { .. }))
    }

    /// guestd is leaving: every mark is restored.
    pub fn restore_all(&mut self) -> Vec<MarkEvent> {
        let marked: Vec<(u32, Option<u64>)> = self
            .procs
            .iter()
            .filter_map(|(&pid, e)| match e {
                Entry::Marked { start, .. } => Some((pid, *start)),
                _ => None,
            })
            .collect();
        self.procs.clear();
        marked
            .into_iter()
            .filter_map(|(pid, start)| self.restore(pid, start, None))
            .collect()
    }

    /// Whether the value a thread of `pid` has is one guestd may take as
    /// the default: the default itself, or guestd's mark inherited from a
    /// parent guestd marked.
    fn is_ours_or_default(&self, pid: u32, value: u32) -> bool {
        if sys_class(value) == sys::IOPRIO_CLASS_NONE {
            return true;
        }
        value == self.value
            && self
                .ops
                .parent(pid)
                .is_some_and(|pp| pp != pid && self.is_marked(pp))
    }

    /// Marks `pid`; nothing to say if it has exited already (a short-lived
    /// program's exec is often seen after its exit).
    fn mark(&mut self, pid: u32, mark: Mark, until: Nanos) -> Option<MarkEvent> {
        let start = self.ops.start_time(pid);
        let tids = match self.ops.threads(pid) {
            Ok(t) if !t.is_empty() && start.is_some() => t,
            _ => {
                self.procs.insert(pid, Entry::Spent);
                return None;
            }
        };
        for &tid in &tids {
            match self.ops.get(tid) {
                Ok(v) if self.is_ours_or_default(pid, v) => {}
                Ok(value) => {
                    self.procs.insert(pid, Entry::UserSet);
                    return Some(MarkEvent::LeftAlone { pid, tid, value });
                }
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {} // the thread ended
                Err(e) => return Some(self.failed(pid, format!("ioprio_get({tid}): {e}"))),
            }
        }
        let mut set = 0;
        for &tid in &tids {
            match self.ops.set(tid, self.value) {
                Ok(()) => set += 1,
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => {
                    // Not permitted (RT needs CAP_SYS_ADMIN in the guest):
                    // put back what was set, and say so.
                    self.restore(pid, start, None);
                    return Some(self.failed(pid, format!("ioprio_set({tid}): {e}")));
                }
            }
        }
        if set == 0 {
            self.procs.insert(pid, Entry::Spent); // its threads ended
            return None;
        }
        let ends = self
            .rule
            .check(&mark, mark.at, Some(until), mark.used_at)
            .unwrap_or(mark.at);
        self.procs.insert(pid, Entry::Marked { start, mark, ends });
        Some(MarkEvent::Marked { pid, threads: set })
    }

    fn failed(&mut self, pid: u32, error: String) -> MarkEvent {
        self.procs.insert(pid, Entry::Spent);
        MarkEvent::Failed { pid, error }
    }

    /// Puts back the default on every thread of `pid` that still carries
    /// the mark, if `pid` is still the process marked (its start time).
    fn restore(&self, pid: u32, start: Option<u64>, why: Option<MarkEnd>) -> Option<MarkEvent> {
        if start.is_none() || self.ops.start_time(pid) != start {
            return None; // exited: a reused pid is someone else's
        }
        let tids = self.ops.threads(pid).ok()?;
        let threads = tids
            .into_iter()
            .filter(|&tid| self.ops.get(tid).ok() == Some(self.value))
            .filter(|&tid| self.ops.set(tid, DEFAULT).is_ok())
            .count();
        Some(MarkEvent::Restored { pid, threads, why })
    }
}

fn sys_class(value: u32) -> u32 {
    value >> sys::IOPRIO_CLASS_SHIFT
}

#[cfg(test)]
mod tests;
