//! CFS-v (Shim and Lee, "CFS-v: I/O Demand-driven VM Scheduler in KVM",
//! Samsung, 2014) on top of this crate's CFS 3.x: the host finds a VM's
//! I/O-related threads with the `policy` crate's 2-bit
//! [`IoClassifier`] and lets a woken one preempt a thread that is not.
//!
//! - The classifier: +1 when a woken thread runs less than 500 us before
//!   blocking, -1 for a run of more than 1 ms; QEMU's main loop, workers
//!   and softirq work always count (told with [`TaskHint::IoRole`]).
//! - A woken I/O-related task always preempts a task that is not, and
//!   runs next (the next buddy, honoured whatever its vruntime:
//!   [`Fair::pick_task`]).
//! - Partial boost: a vCPU thread that is not I/O-related but receives a
//!   virtqueue interrupt or a rescheduling IPI ([`TaskHint::VirtualInterrupt`])
//!   counts as I/O-related for its next [`PARTIAL_BOOST_NS`] of CPU, and
//!   gives the CPU back at the next tick.
//! - Two options the slides discuss as what stock CFS gets wrong, to try
//!   them alone: the vruntime compensation (a woken entity's vruntime
//!   reset to its queue's `min_vruntime` minus a threshold) and the grain
//!   rule read as the slides write it (a woken entity preempts when its
//!   vruntime is below the current one's plus its grain).
//!
//! Everything else is [`crate::cfs`]'s, reached through [`Fair`]: this
//! class wraps it and adds only the decisions above.

use policy::detect::io_class::{IoClassifier, IoRole, LONG_RUN_NS, SHORT_RUN_NS};

use crate::cfs::Cfs;
use crate::class::{Balance, Ctx, Dequeue, Enqueue, SchedClass, TaskHint};
use crate::fair::{EntId, Fair, FairCore, FairPolicy, RqId};
use crate::task::{GroupId, TaskId, TaskState};
use crate::weights::calc_delta_fair;
use crate::{Nanos, MS, US};

/// The partial boost's budget: "partially boosted within 200us time
/// slice" (the slides).
pub const PARTIAL_BOOST_NS: Nanos = 200 * US;
/// The slides' example threshold of the vruntime compensation
/// ("threshold (e.g., 12000000)", ns). It equals stock CFS's
/// `GENTLE_FAIR_SLEEPERS` credit on 8 CPUs (half of 6 ms x 4).
pub const COMPENSATION_EXAMPLE_NS: i64 = 12 * MS as i64;

/// How a woken entity is judged against the running one when the I/O
/// rule does not decide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GrainRule {
    /// CFS's `wakeup_preempt_entity()`: preempt when the woken entity's
    /// vruntime plus its grain (`wakeup_gran()`, the wake-up granularity
    /// in its own virtual time: large for a small weight) is below the
    /// current one's.
    #[default]
    Stock,
    /// The slides' sentence taken literally: preempt when the woken
    /// entity's vruntime is below the current one's plus its grain.
    Slides,
}

/// What CFS-v turns on. The default is CFS-v as the slides describe it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CfsvOptions {
    /// A woken I/O-related task always preempts a task that is not.
    pub io_preempt: bool,
    /// Partial boost of a vCPU that is not I/O-related on a virtual
    /// interrupt or rescheduling IPI (acts through `io_preempt`).
    pub partial_boost: bool,
    pub grain: GrainRule,
    /// The vruntime compensation: a woken entity's vruntime is reset to
    /// its queue's `min_vruntime` minus this (ns); `None` keeps CFS's
    /// placement.
    pub compensation_ns: Option<i64>,
}

impl Default for CfsvOptions {
    fn default() -> Self {
        CfsvOptions {
            io_preempt: true,
            partial_boost: true,
            grain: GrainRule::Stock,
            compensation_ns: None,
        }
    }
}

impl CfsvOptions {
    /// Only the vruntime compensation at the slides' 12 ms, over CFS.
    pub fn compensation_only() -> Self {
        CfsvOptions {
            io_preempt: false,
            partial_boost: false,
            grain: GrainRule::Stock,
            compensation_ns: Some(COMPENSATION_EXAMPLE_NS),
        }
    }

    /// Only the grain rule as the slides write it, over CFS.
    pub fn grain_only() -> Self {
        CfsvOptions {
            io_preempt: false,
            partial_boost: false,
            grain: GrainRule::Slides,
            compensation_ns: None,
        }
    }

    /// A short name for tables: `cfs-v` for the default, else which
    /// option was tried.
    pub fn label(&self) -> &'static str {
        match *self {
            o if o == Self::default() => "cfs-v",
            o if o == Self::compensation_only() => "comp-only",
            o if o == Self::grain_only() => "grain-only",
            o if o == Self::without_partial_boost() => "no-boost",
            _ => "cfs-v*",
        }
    }

    /// CFS-v without the partial boost.
    pub fn without_partial_boost() -> Self {
        CfsvOptions {
            partial_boost: false,
            ..Self::default()
        }
    }
}

/// CFS's fair policy with the compensation and grain options.
pub struct VPolicy {
    cfs: Cfs,
    opts: CfsvOptions,
}

impl FairPolicy for VPolicy {
    fn name(&self) -> &'static str {
        "cfs-v"
    }
    fn configure(&mut self, cpus: usize) {
        self.cfs.configure(cpus);
    }
    fn place(&self, f: &mut FairCore, rq: RqId, se: EntId, how: Enqueue) {
        match (how, self.opts.compensation_ns) {
            (Enqueue::Wakeup, Some(thr)) => f.ents[se].vruntime = f.rqs[rq].min_vruntime - thr,
            _ => self.cfs.place(f, rq, se, how),
        }
    }
    fn on_dequeue(&self, f: &mut FairCore, rq: RqId, se: EntId, how: Dequeue) {
        self.cfs.on_dequeue(f, rq, se, how);
    }
    fn pick(&self, f: &FairCore, rq: RqId) -> Option<EntId> {
        self.cfs.pick(f, rq)
    }
    fn tick_preempt(&self, f: &FairCore, rq: RqId, curr: EntId) -> bool {
        self.cfs.tick_preempt(f, rq, curr)
    }
    fn wakeup_preempt(&self, f: &FairCore, rq: RqId, curr: EntId, se: EntId) -> bool {
        match self.opts.grain {
            GrainRule::Stock => self.cfs.wakeup_preempt(f, rq, curr, se),
            GrainRule::Slides => {
                let gran = calc_delta_fair(self.cfs.wakeup_granularity, f.ents[se].weight);
                f.ents[se].vruntime < f.ents[curr].vruntime + gran
            }
        }
    }
    fn after_update_curr(&self, f: &mut FairCore, rq: RqId, se: EntId) -> bool {
        self.cfs.after_update_curr(f, rq, se)
    }
    fn yield_entity(&self, f: &mut FairCore, rq: RqId, se: EntId) {
        self.cfs.yield_entity(f, rq, se);
    }
}

/// One task's CFS-v state.
#[derive(Clone, Copy, Debug)]
struct TaskIo {
    class: IoClassifier,
    /// Woken and not yet blocked again.
    woken: bool,
    /// `sum_exec` at the wake-up, and at the start of the current run.
    wake_exec: Nanos,
    run_exec: Nanos,
    /// A partial boost lasts until `sum_exec` reaches this.
    boost_until: Option<Nanos>,
}

/// The CFS-v class: CFS plus the decisions of the module's doc.
pub struct CfsV {
    pub fair: Fair<VPolicy>,
    opts: CfsvOptions,
    io: Vec<TaskIo>,
    /// Per CPU: the task a CFS-v preemption hands the CPU to.
    next: Vec<Option<TaskId>>,
}

/// The CFS-v class for a kernel of `cpus` CPUs.
pub fn new(cpus: usize, opts: CfsvOptions) -> CfsV {
    let policy = VPolicy {
        cfs: Cfs::default(),
        opts,
    };
    CfsV {
        fair: Fair::new(policy, cpus),
        opts,
        io: Vec::new(),
        next: vec![None; cpus],
    }
}

impl CfsV {
    fn exec(&self, t: TaskId) -> Nanos {
        self.fair.core.ents[self.fair.core.task_se[t.idx()]].sum_exec
    }

    /// Whether `t` counts as I/O-related now (its counter or role, or a
    /// partial boost with budget left).
    pub fn io_related(&self, t: TaskId) -> bool {
        let io = &self.io[t.idx()];
        io.class.is_io_related() || io.boost_until.is_some_and(|end| self.exec(t) < end)
    }

    /// The classifier of `t` (for tests and reports).
    pub fn classifier(&self, t: TaskId) -> IoClassifier {
        self.io[t.idx()].class
    }

    /// The run since the last mark counts down if longer than 1 ms.
    fn end_run(&mut self, t: TaskId) {
        let exec = self.exec(t);
        let io = &mut self.io[t.idx()];
        io.class.on_run(exec - io.run_exec, false);
        io.run_exec = exec;
    }

    fn started(&mut self, t: Option<TaskId>) -> Option<TaskId> {
        if let Some(t) = t {
            self.io[t.idx()].run_exec = self.exec(t);
        }
        t
    }
}

impl SchedClass for CfsV {
    fn name(&self) -> &'static str {
        "cfs-v"
    }

    fn task_new(&mut self, ctx: &Ctx, t: TaskId) {
        self.fair.task_new(ctx, t);
        debug_assert_eq!(self.io.len(), t.idx());
        self.io.push(TaskIo {
            class: IoClassifier::new(IoRole::Counted),
            woken: false,
            wake_exec: 0,
            run_exec: 0,
            boost_until: None,
        });
    }

    fn group_new(&mut self, g: GroupId, shares: u64) {
        self.fair.group_new(g, shares);
    }

    fn select_task_rq(&mut self, ctx: &Ctx, t: TaskId, prev: usize) -> usize {
        self.fair.select_task_rq(ctx, t, prev)
    }

    fn enqueue_task(&mut self, ctx: &Ctx, cpu: usize, t: TaskId, how: Enqueue) {
        self.fair.enqueue_task(ctx, cpu, t, how);
        if how == Enqueue::Wakeup {
            let exec = self.exec(t);
            let io = &mut self.io[t.idx()];
            io.woken = true;
            io.wake_exec = exec;
        }
    }

    fn dequeue_task(&mut self, ctx: &Ctx, cpu: usize, t: TaskId, how: Dequeue) {
        self.fair.dequeue_task(ctx, cpu, t, how);
        if how != Dequeue::Sleep {
            return;
        }
        let exec = self.exec(t);
        let io = &mut self.io[t.idx()];
        let since_wake = exec - io.wake_exec;
        if io.woken && since_wake < SHORT_RUN_NS {
            io.class.on_run(since_wake, true);
        } else if exec - io.run_exec > LONG_RUN_NS {
            io.class.on_run(exec - io.run_exec, false);
        }
        io.run_exec = exec;
        io.woken = false;
        io.boost_until = None;
    }

    fn wakeup_preempt(&mut self, ctx: &Ctx, cpu: usize, t: TaskId) -> bool {
        if let Some(c) = ctx.curr[cpu] {
            // A partial boost lets a vCPU preempt; it does not shield it
            // from a woken I/O thread (it is not I/O-related itself).
            let c_io = self.io[c.idx()].class.is_io_related();
            if self.opts.io_preempt && self.io_related(t) && !c_io {
                self.next[cpu] = Some(t);
                return true;
            }
        }
        self.fair.wakeup_preempt(ctx, cpu, t)
    }

    fn pick_next_task(&mut self, ctx: &Ctx, cpu: usize) -> Option<TaskId> {
        if let Some(t) = self.next[cpu].take() {
            if let Some(t) = self.fair.pick_task(ctx, cpu, t) {
                return self.started(Some(t));
            }
        }
        let t = self.fair.pick_next_task(ctx, cpu);
        self.started(t)
    }

    fn put_prev_task(&mut self, ctx: &Ctx, cpu: usize, t: TaskId) {
        self.fair.put_prev_task(ctx, cpu, t);
        if ctx.tasks[t.idx()].state == TaskState::Runnable {
            self.end_run(t);
        }
    }

    /// CFS's tick, the classifier's count-down for a long run, and the
    /// end of a partial boost: "after a timer interrupt, the
    /// partially-boosted vCPU returns CPU".
    fn task_tick(&mut self, ctx: &Ctx, cpu: usize, t: TaskId) -> bool {
        let mut resched = self.fair.task_tick(ctx, cpu, t);
        if self.exec(t) - self.io[t.idx()].run_exec > LONG_RUN_NS {
            self.end_run(t);
        }
        if self.io[t.idx()].boost_until.take().is_some() {
            resched = true;
        }
        resched
    }

    fn yield_task(&mut self, ctx: &Ctx, cpu: usize, t: TaskId) {
        self.fair.yield_task(ctx, cpu, t);
    }

    fn update_curr(&mut self, ctx: &Ctx, cpu: usize, t: TaskId) -> bool {
        self.fair.update_curr(ctx, cpu, t)
    }

    fn has_queued(&self, ctx: &Ctx, cpu: usize) -> bool {
        self.fair.has_queued(ctx, cpu)
    }

    fn lag(&self, t: TaskId) -> Option<i64> {
        self.fair.lag(t)
    }

    fn hint(&mut self, ctx: &Ctx, t: TaskId, h: TaskHint) {
        match h {
            TaskHint::IoRole(r) => self.io[t.idx()].class.set_role(r),
            TaskHint::VirtualInterrupt => {
                let running = ctx.curr[ctx.tasks[t.idx()].cpu] == Some(t);
                if self.opts.partial_boost && !running && !self.io_related(t) {
                    self.io[t.idx()].boost_until = Some(self.exec(t) + PARTIAL_BOOST_NS);
                }
            }
        }
    }

    fn balance(&mut self, ctx: &Ctx, cpu: usize, why: Balance) -> Option<(TaskId, usize)> {
        self.fair.balance(ctx, cpu, why)
    }
}
