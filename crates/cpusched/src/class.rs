//! The scheduling-class seam: one trait that mirrors the kernel's
//! `struct sched_class` (kernel/sched/sched.h), and the read-only view of
//! the core's state a class gets with every call.

use crate::task::{GroupId, TaskCore, TaskId};
use crate::Nanos;

/// What the core lets a class see: the clock, every task's common state,
/// and what each CPU runs.
pub struct Ctx<'a> {
    pub now: Nanos,
    pub tasks: &'a [TaskCore],
    /// The task each CPU runs (`rq->curr`), `None` when idle.
    pub curr: &'a [Option<TaskId>],
    /// The scheduler tick period (1/HZ).
    pub tick_ns: Nanos,
    /// Hardware threads per core ([`crate::Platform::smt`]).
    pub smt: usize,
}

impl Ctx<'_> {
    pub fn nr_cpus(&self) -> usize {
        self.curr.len()
    }

    pub fn idle(&self, cpu: usize) -> bool {
        self.curr[cpu].is_none()
    }
}

/// Why a task is put on a run queue (`ENQUEUE_*` flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enqueue {
    /// A new task (`wake_up_new_task`).
    New,
    /// A wake-up after sleeping (`ENQUEUE_WAKEUP`).
    Wakeup,
    /// Moved from another CPU by the load balancer.
    Migrate,
}

/// Why a task leaves a run queue (`DEQUEUE_*` flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dequeue {
    /// It blocks (`DEQUEUE_SLEEP`).
    Sleep,
    /// The load balancer moves it.
    Migrate,
}

/// Something the host learns about a task outside the class's own hooks
/// (CFS-v's inputs; other classes ignore them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskHint {
    /// What the thread is to its VM (QEMU's main loop, a worker, softirq
    /// work are always I/O-related).
    IoRole(policy::IoRole),
    /// A vCPU thread receives a virtual interrupt (a virtqueue's) or a
    /// rescheduling IPI.
    VirtualInterrupt,
}

/// Which load-balancing pass asks a class to pull work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Balance {
    /// The CPU just went idle (`idle_balance()` / `newidle_balance()`).
    NewlyIdle,
    /// The periodic pass from the tick (`rebalance_domains()`).
    Periodic,
}

/// The hooks of `struct sched_class` the model needs. The core calls them
/// in the kernel's order: `update_curr` before any decision about the
/// running task, `dequeue_task` then `put_prev_task` when the running
/// task blocks, `put_prev_task` then `pick_next_task` in `schedule()`.
/// A class keeps its own per-task state, indexed by [`TaskId`].
pub trait SchedClass {
    fn name(&self) -> &'static str;

    /// A task of this class exists (`task_fork`): set up its state.
    fn task_new(&mut self, ctx: &Ctx, t: TaskId);

    /// A CPU cgroup with `cpu.shares` exists (`alloc_fair_sched_group`).
    fn group_new(&mut self, _g: GroupId, _shares: u64) {}

    /// The CPU a waking or new task goes to (`select_task_rq`).
    fn select_task_rq(&mut self, ctx: &Ctx, t: TaskId, prev_cpu: usize) -> usize;

    fn enqueue_task(&mut self, ctx: &Ctx, cpu: usize, t: TaskId, how: Enqueue);

    /// Also called for the running task when it blocks; `put_prev_task`
    /// follows.
    fn dequeue_task(&mut self, ctx: &Ctx, cpu: usize, t: TaskId, how: Dequeue);

    /// Should woken task `t` (of this class, just enqueued on `cpu`)
    /// preempt `cpu`'s running task, also of this class?
    /// (`check_preempt_curr` / `wakeup_preempt`.)
    fn wakeup_preempt(&mut self, ctx: &Ctx, cpu: usize, t: TaskId) -> bool;

    /// Takes the next task to run on `cpu` off the queue (`pick_next_task`
    /// with `set_next_entity`), or `None`.
    fn pick_next_task(&mut self, ctx: &Ctx, cpu: usize) -> Option<TaskId>;

    /// The running task `t` stops running on `cpu`; if it is still
    /// runnable it goes back on the queue.
    fn put_prev_task(&mut self, ctx: &Ctx, cpu: usize, t: TaskId);

    /// The tick hit while `t` runs: true asks for a reschedule.
    fn task_tick(&mut self, ctx: &Ctx, cpu: usize, t: TaskId) -> bool;

    /// `sched_yield()` by the running task.
    fn yield_task(&mut self, ctx: &Ctx, cpu: usize, t: TaskId);

    /// Charges the running task for the time since it was last charged
    /// (`update_curr`): true asks for a reschedule.
    fn update_curr(&mut self, ctx: &Ctx, cpu: usize, t: TaskId) -> bool;

    /// Whether a task of this class waits to run on `cpu`.
    fn has_queued(&self, ctx: &Ctx, cpu: usize) -> bool;

    /// Whether the class needs the CPU's timer while nothing runs (RT's
    /// period timer of a throttled CPU).
    fn needs_timer(&self, _cpu: usize) -> bool {
        false
    }

    /// Per-CPU housekeeping at every tick whatever runs (RT's period
    /// timer): true asks for a reschedule.
    fn cpu_tick(&mut self, _ctx: &Ctx, _cpu: usize) -> bool {
        false
    }

    /// Introspection for tests and reports, not a kernel hook: the lag
    /// of a fair task (`avg_vruntime - vruntime`) while it is queued.
    fn lag(&self, _t: TaskId) -> Option<i64> {
        None
    }

    /// A [`TaskHint`] about `t`; the core checks preemption afterwards if
    /// `t` waits on a queue.
    fn hint(&mut self, _ctx: &Ctx, _t: TaskId, _h: TaskHint) {}

    /// Load balancing into `cpu`: a task to pull and the CPU it is on.
    fn balance(&mut self, _ctx: &Ctx, _cpu: usize, _why: Balance) -> Option<(TaskId, usize)> {
        None
    }

    /// When the class's own timer for `cpu`'s running task fires (Xen
    /// credit's per-pCPU schedule timer: the end of a time slice or of the
    /// rate limit), if it has one; the core then calls `update_curr`,
    /// whose answer decides the reschedule. Linux's classes need none
    /// beyond the tick.
    fn resched_at(&self, _cpu: usize) -> Option<Nanos> {
        None
    }

    /// Whether [`SchedClass::resched_at`] can ever answer: the core asks
    /// only classes that say so (the question came after every event and
    /// showed in the profile).
    fn has_resched_timer(&self) -> bool {
        false
    }

    /// A cap on a group, in percent of one CPU (Xen credit's per-domain
    /// `cap`; 0: none). Linux's classes ignore it.
    fn group_cap(&mut self, _g: GroupId, _cap_pct: u32) {}
}
