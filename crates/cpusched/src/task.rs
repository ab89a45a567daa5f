//! Tasks: what a driver asks for, and the state every class can read.

use crate::weights::nice_to_weight;
use crate::Nanos;

/// A task of one kernel (host or guest), numbered from 0 in creation order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(pub u32);

impl TaskId {
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

/// A CPU cgroup of one kernel (`cpu.shares`), numbered from 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupId(pub u32);

/// A scheduling policy, as `sched_setscheduler(2)` takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// `SCHED_OTHER`/`SCHED_NORMAL` with a nice level (-20..=19).
    Normal { nice: i8 },
    /// `SCHED_FIFO` with an RT priority (1..=99, higher runs first).
    Fifo { prio: u8 },
    /// `SCHED_RR` with an RT priority (1..=99).
    Rr { prio: u8 },
}

impl Policy {
    /// `SCHED_OTHER` at nice 0.
    pub const NORMAL: Policy = Policy::Normal { nice: 0 };

    pub fn is_rt(self) -> bool {
        !matches!(self, Policy::Normal { .. })
    }

    /// The RT priority, 0 for a fair task.
    pub fn rt_prio(self) -> u8 {
        match self {
            Policy::Normal { .. } => 0,
            Policy::Fifo { prio } | Policy::Rr { prio } => prio,
        }
    }

    /// The nice level (RT tasks keep nice 0 for when they return).
    pub fn nice(self) -> i8 {
        match self {
            Policy::Normal { nice } => nice,
            _ => 0,
        }
    }

    /// Parses `other`, `fifo:P`, `rr:P` or `nice:N`.
    pub fn parse(s: &str) -> Result<Policy, String> {
        let bad = || format!("bad policy '{s}' (accepted: other, nice:N, fifo:P, rr:P)");
        let (kind, arg) = s.split_once(':').unwrap_or((s, ""));
        let num = |lo: i32, hi: i32| -> Result<i32, String> {
            let v: i32 = arg.parse().map_err(|_| bad())?;
            if v < lo || v > hi {
                return Err(bad());
            }
            Ok(v)
        };
        match kind {
            "other" if arg.is_empty() => Ok(Policy::NORMAL),
            "nice" => Ok(Policy::Normal {
                nice: num(-20, 19)? as i8,
            }),
            "fifo" => Ok(Policy::Fifo {
                prio: num(1, 99)? as u8,
            }),
            "rr" => Ok(Policy::Rr {
                prio: num(1, 99)? as u8,
            }),
            _ => Err(bad()),
        }
    }
}

/// What a new task is.
#[derive(Clone, Debug)]
pub struct TaskSpec {
    pub name: String,
    pub policy: Policy,
    /// The CPU cgroup; `None` is the root group.
    pub group: Option<GroupId>,
    /// The CPU it starts on (the forking CPU); the class may move it.
    pub cpu: usize,
    /// Its first CPU burst; `None` runs forever (a busy loop).
    pub burst: Option<Nanos>,
    /// Report a [`crate::Completion::Started`] each time it first runs
    /// after a wake-up (cyclictest's wake-up time).
    pub report_start: bool,
}

impl TaskSpec {
    /// A busy loop ("infinite loop" in the study).
    pub fn busy_loop(name: &str) -> TaskSpec {
        TaskSpec {
            name: name.to_string(),
            policy: Policy::NORMAL,
            group: None,
            cpu: 0,
            burst: None,
            report_start: false,
        }
    }
}

/// Where a task is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskState {
    /// On a run queue or running.
    Runnable,
    /// Asleep until a timer or a wake.
    Blocked,
}

/// The per-task state the core keeps and every class may read.
#[derive(Clone, Debug)]
pub struct TaskCore {
    pub name: String,
    pub policy: Policy,
    pub weight: u64,
    pub group: Option<GroupId>,
    /// The CPU it runs, or last ran, or is queued on.
    pub cpu: usize,
    pub state: TaskState,
    /// Work left in the current burst; `u64::MAX` is a busy loop.
    pub work_left: Nanos,
    pub report_start: bool,
    /// Set on wake-up, cleared when the task has first run again.
    pub start_pending: bool,
    /// Total CPU time the task has made progress with.
    pub progress: Nanos,
    /// Bumped on each sleep so a stale timer is ignored.
    pub timer_gen: u32,
}

impl TaskCore {
    pub fn new(spec: &TaskSpec) -> TaskCore {
        TaskCore {
            name: spec.name.clone(),
            policy: spec.policy,
            weight: nice_to_weight(spec.policy.nice()),
            group: spec.group,
            cpu: spec.cpu,
            state: TaskState::Runnable,
            work_left: spec.burst.unwrap_or(u64::MAX),
            report_start: spec.report_start,
            start_pending: false,
            progress: 0,
            timer_gen: 0,
        }
    }
}
