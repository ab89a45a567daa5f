//! One kernel's CPU scheduler core (kernel/sched/core.c): its CPUs, its
//! tasks, and the classes in priority order. It knows nothing of events;
//! [`crate::model::CpuModel`] drives it and reads what changed.

use crate::class::{Balance, Ctx, Dequeue, Enqueue, SchedClass, TaskHint};
use crate::task::{GroupId, TaskCore, TaskId, TaskSpec, TaskState};
use crate::Nanos;

/// Index of the RT class in [`Kernel::classes`]; the fair class is 1.
const RT: usize = 0;
const FAIR: usize = 1;

/// The costs and periods of one kernel on one platform.
#[derive(Clone, Debug)]
pub struct KernelCfg {
    pub cpus: usize,
    pub hz: u32,
    /// CPU time a context switch takes before the next task runs.
    pub switch_ns: Nanos,
    /// Periodic load balancing interval while busy: the MC domain's
    /// `min_interval` (= its CPU count, in ms) times `busy_factor` 32
    /// (kernel/sched/topology.c `sd_init()`, 3.x `SD_*_INIT`).
    pub balance_busy_ns: Nanos,
    /// `sched_feat(RT_RUNTIME_SHARE)` (on until Linux 5.17).
    pub rt_runtime_share: bool,
    /// [`crate::Platform::load_tracking`].
    pub load_tracking: bool,
    /// [`crate::Platform::next_buddy`].
    pub next_buddy: bool,
    /// [`crate::Platform::smt`] (1 for guests).
    pub smt: usize,
}

impl KernelCfg {
    pub fn tick_ns(&self) -> Nanos {
        1_000_000_000 / self.hz as Nanos
    }
}

/// Per-CPU core state besides `curr`.
#[derive(Clone, Debug, Default)]
pub struct CpuState {
    /// Switch (or VM entry) work left before `curr` runs.
    pub overhead: Nanos,
    /// Whether the CPU executes: always for a physical CPU; for a vCPU,
    /// while the host runs its thread.
    pub powered: bool,
    /// The time progress was last settled.
    pub since: Nanos,
    pub next_balance: Nanos,
    pub switches: u64,
    /// `rq->idle_stamp`: when the CPU last went idle (3.x `idle_balance()`),
    /// until a wake-up ends the idle period.
    pub idle_stamp: Option<Nanos>,
    /// `rq->avg_idle`: the running average of its idle periods, each
    /// weighted 1/8 (`update_avg()`), capped at twice the migration cost.
    pub avg_idle: Nanos,
}

/// `sysctl_sched_migration_cost` (kernel/sched/core.c, 3.x): 0.5 ms. A CPU
/// whose idle periods average less skips newly idle balancing
/// (`idle_balance()`, 3.13+); `rq->avg_idle` starts at twice it
/// (`sched_init()`) and is capped there (`ttwu_do_wakeup()`).
pub const MIGRATION_COST_NS: Nanos = 500_000;

/// A set of a kernel's CPUs, one bit each: marking one is a single OR
/// however often it is marked, and the driver takes them out in ascending
/// order (what sorting and deduplicating a list of them gave).
#[derive(Clone, Debug, Default)]
pub struct CpuSet {
    words: Vec<u64>,
}

impl CpuSet {
    pub fn new(cpus: usize) -> CpuSet {
        CpuSet {
            words: vec![0; cpus.div_ceil(64)],
        }
    }

    #[inline]
    pub fn push(&mut self, cpu: usize) {
        self.words[cpu / 64] |= 1 << (cpu % 64);
    }

    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// The marked CPUs as one word, leaving the set empty, if the kernel
    /// has at most 64 CPUs (every platform's does); else `None`.
    #[inline]
    pub fn take_word(&mut self) -> Option<u64> {
        match self.words.as_mut_slice() {
            [w] => Some(std::mem::take(w)),
            _ => None,
        }
    }

    /// Moves the marked CPUs, in ascending order, to the end of `out`,
    /// leaving the set empty.
    pub fn drain_into(&mut self, out: &mut Vec<usize>) {
        for (i, w) in self.words.iter_mut().enumerate() {
            let mut bits = std::mem::take(w);
            while bits != 0 {
                out.push(i * 64 + bits.trailing_zeros() as usize);
                bits &= bits - 1;
            }
        }
    }
}

/// Something a driver learns from a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The task first ran after a wake-up, at this time.
    Started(TaskId, Nanos),
    /// The task finished its burst and waits for its next action.
    BurstDone(TaskId, Nanos),
}

pub struct Kernel {
    pub cfg: KernelCfg,
    pub tasks: Vec<TaskCore>,
    pub curr: Vec<Option<TaskId>>,
    pub cpus: Vec<CpuState>,
    classes: [Box<dyn SchedClass>; 2],
    /// CPUs whose `curr`, work or power changed since the driver looked.
    pub dirty: CpuSet,
    pub events: Vec<Event>,
    /// `jiffies` as this kernel last updated it: at a tick it processed,
    /// or when a CPU left idle (`tick_do_update_jiffies64()`). A guest's
    /// jiffies stall while its vCPUs do not run and then jump.
    pub jiffies: u64,
    /// `cfg.tick_ns()`, kept: every call into a class passes it, and a
    /// 64-bit division per call showed in the profile.
    tick_ns: Nanos,
    /// Whether a class has timers of its own ([`SchedClass::has_resched_timer`]).
    class_timers: bool,
}

macro_rules! ctx {
    ($k:expr, $now:expr) => {
        Ctx {
            now: $now,
            tasks: &$k.tasks,
            curr: &$k.curr,
            tick_ns: $k.tick_ns,
            smt: $k.cfg.smt,
        }
    };
}

impl Kernel {
    pub fn new(cfg: KernelCfg, rt: Box<dyn SchedClass>, fair: Box<dyn SchedClass>) -> Kernel {
        let n = cfg.cpus;
        // The CPUs' periodic balancing passes are spread over the
        // interval: in the kernel they drift apart with each CPU's own
        // history; run in the same instant, two CPUs would hand the same
        // task back and forth and never move the other.
        let cpus = (0..n)
            .map(|i| CpuState {
                powered: true,
                next_balance: i as Nanos * cfg.balance_busy_ns / n as Nanos,
                avg_idle: 2 * MIGRATION_COST_NS,
                ..Default::default()
            })
            .collect();
        let class_timers = rt.has_resched_timer() || fair.has_resched_timer();
        Kernel {
            tick_ns: cfg.tick_ns(),
            class_timers,
            cfg,
            tasks: Vec::new(),
            curr: vec![None; n],
            cpus,
            classes: [rt, fair],
            dirty: CpuSet::new(n),
            events: Vec::new(),
            jiffies: 0,
        }
    }

    /// The tick period (1/HZ).
    pub fn tick_ns(&self) -> Nanos {
        self.tick_ns
    }

    pub fn fair_name(&self) -> &'static str {
        self.classes[FAIR].name()
    }

    fn class_of(&self, t: TaskId) -> usize {
        if self.tasks[t.idx()].policy.is_rt() {
            RT
        } else {
            FAIR
        }
    }

    pub fn add_group(&mut self, g: GroupId, shares: u64) {
        self.classes[FAIR].group_new(g, shares);
    }

    /// Caps group `g` at `cap_pct` percent of one CPU (classes that have
    /// caps: Xen credit's domains).
    pub fn set_group_cap(&mut self, g: GroupId, cap_pct: u32) {
        self.classes[FAIR].group_cap(g, cap_pct);
    }

    /// Creates a task; unless `blocked`, it is woken as a new task.
    pub fn spawn(&mut self, spec: &TaskSpec, blocked: bool, now: Nanos) -> TaskId {
        let t = TaskId(self.tasks.len() as u32);
        let mut core = TaskCore::new(spec);
        core.cpu = spec.cpu.min(self.cfg.cpus - 1);
        self.tasks.push(core);
        for c in 0..2 {
            self.classes[c].task_new(&ctx!(self, now), t);
        }
        if blocked {
            self.tasks[t.idx()].state = TaskState::Blocked;
        } else {
            self.activate(t, Enqueue::New, now);
        }
        t
    }

    /// Wakes a blocked task (`try_to_wake_up`); a runnable one is left be.
    pub fn wake(&mut self, t: TaskId, now: Nanos) {
        if self.tasks[t.idx()].state == TaskState::Runnable {
            return;
        }
        self.tasks[t.idx()].state = TaskState::Runnable;
        let report = self.tasks[t.idx()].report_start;
        self.tasks[t.idx()].start_pending = report;
        self.activate(t, Enqueue::Wakeup, now);
    }

    fn activate(&mut self, t: TaskId, how: Enqueue, now: Nanos) {
        let c = self.class_of(t);
        let prev = self.tasks[t.idx()].cpu;
        let cpu = self.classes[c].select_task_rq(&ctx!(self, now), t, prev);
        self.tasks[t.idx()].cpu = cpu;
        if how == Enqueue::Wakeup {
            self.end_idle(cpu, now);
        }
        self.classes[c].enqueue_task(&ctx!(self, now), cpu, t, how);
        self.check_preempt(cpu, t, now);
    }

    /// `check_preempt_curr()`: a higher class always preempts; within a
    /// class the class decides.
    fn check_preempt(&mut self, cpu: usize, t: TaskId, now: Nanos) {
        let Some(curr) = self.curr[cpu] else {
            self.schedule(cpu, now);
            return;
        };
        let (ct, cc) = (self.class_of(t), self.class_of(curr));
        if ct < cc {
            self.schedule(cpu, now);
        } else if ct == cc {
            self.update_curr(cpu, now);
            if self.curr[cpu] == Some(curr)
                && self.classes[ct].wakeup_preempt(&ctx!(self, now), cpu, t)
            {
                self.schedule(cpu, now);
            } else if self.class_timer(cpu).is_some() {
                // The class may have moved its timer instead (credit's
                // rate limit): the driver re-arms the CPU's step.
                self.dirty.push(cpu);
            }
        }
    }

    /// Passes a [`TaskHint`] to `t`'s class; a task waiting on a queue may
    /// then preempt (a boosted vCPU).
    pub fn hint(&mut self, t: TaskId, h: TaskHint, now: Nanos) {
        let c = self.class_of(t);
        self.classes[c].hint(&ctx!(self, now), t, h);
        let cpu = self.tasks[t.idx()].cpu;
        let waiting = self.tasks[t.idx()].state == TaskState::Runnable;
        if waiting && self.curr[cpu] != Some(t) {
            self.check_preempt(cpu, t, now);
        }
    }

    /// The running task `t` blocks (it must have just finished a burst).
    pub fn block(&mut self, t: TaskId, now: Nanos) {
        let cpu = self.tasks[t.idx()].cpu;
        if self.tasks[t.idx()].state == TaskState::Blocked {
            return;
        }
        self.update_curr(cpu, now);
        self.tasks[t.idx()].state = TaskState::Blocked;
        self.tasks[t.idx()].timer_gen += 1;
        let c = self.class_of(t);
        self.classes[c].dequeue_task(&ctx!(self, now), cpu, t, Dequeue::Sleep);
        if self.curr[cpu] == Some(t) {
            self.schedule(cpu, now);
        }
    }

    /// Gives a task its next burst (`u64::MAX`: run forever).
    pub fn set_burst(&mut self, t: TaskId, work: Nanos, now: Nanos) {
        let cpu = self.tasks[t.idx()].cpu;
        if self.curr[cpu] == Some(t) {
            self.settle(cpu, now);
        }
        self.tasks[t.idx()].work_left = work;
        self.dirty.push(cpu);
    }

    /// `sched_yield()`.
    pub fn yield_now(&mut self, t: TaskId, now: Nanos) {
        let cpu = self.tasks[t.idx()].cpu;
        if self.curr[cpu] != Some(t) {
            return;
        }
        self.update_curr(cpu, now);
        let c = self.class_of(t);
        self.classes[c].yield_task(&ctx!(self, now), cpu, t);
        self.schedule(cpu, now);
    }

    /// Moves the progress of `cpu` up to `now`: switch overhead first,
    /// then the running task's burst.
    pub fn settle(&mut self, cpu: usize, now: Nanos) {
        let st = &mut self.cpus[cpu];
        let dt = now.saturating_sub(st.since);
        st.since = now.max(st.since);
        if !st.powered || dt == 0 {
            return;
        }
        let Some(t) = self.curr[cpu] else {
            st.overhead = 0;
            return;
        };
        let o = dt.min(st.overhead);
        st.overhead -= o;
        let run = dt - o;
        let task = &mut self.tasks[t.idx()];
        if task.start_pending && st.overhead == 0 {
            task.start_pending = false;
            self.events.push(Event::Started(t, now - run));
        }
        let done = run.min(task.work_left);
        task.progress += done;
        if task.work_left != u64::MAX {
            task.work_left -= done;
            // The burst ends here, whoever settled the CPU (a tick at the
            // same instant may come before the step event, which would
            // then find nothing left to report).
            if done > 0 && task.work_left == 0 {
                self.events.push(Event::BurstDone(t, now - (run - done)));
            }
        }
    }

    /// Settles and charges the running task; reschedules if its class
    /// asks (EEVDF's deadline, RT throttling).
    pub fn update_curr(&mut self, cpu: usize, now: Nanos) {
        self.settle(cpu, now);
        if let Some(t) = self.curr[cpu] {
            let c = self.class_of(t);
            if self.classes[c].update_curr(&ctx!(self, now), cpu, t) {
                self.schedule(cpu, now);
            }
        }
    }

    /// The driver's step on `cpu`: settling reports a finished burst; a
    /// class timer that is due charges the running task, which may
    /// reschedule.
    pub fn step(&mut self, cpu: usize, now: Nanos) {
        self.settle(cpu, now);
        if self.class_timer(cpu).is_some_and(|at| at <= now) {
            self.update_curr(cpu, now);
        }
        self.dirty.push(cpu);
    }

    /// The running task's class timer on `cpu` ([`SchedClass::resched_at`]).
    fn class_timer(&self, cpu: usize) -> Option<Nanos> {
        if !self.class_timers {
            return None;
        }
        let t = self.curr[cpu]?;
        self.classes[self.class_of(t)].resched_at(cpu)
    }

    /// When `cpu` next needs a step: the end of the switch overhead if a
    /// start must be reported, else the end of the burst or the class's
    /// timer, whichever comes first.
    pub fn next_step(&self, cpu: usize) -> Option<Nanos> {
        if !self.cpus[cpu].powered {
            return None;
        }
        let burst = self.burst_step(cpu);
        match (burst, self.class_timer(cpu)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn burst_step(&self, cpu: usize) -> Option<Nanos> {
        let st = &self.cpus[cpu];
        let t = self.curr[cpu]?;
        if !st.powered {
            return None;
        }
        let task = &self.tasks[t.idx()];
        if task.start_pending && st.overhead > 0 {
            return Some(st.since + st.overhead);
        }
        if task.work_left == u64::MAX || task.work_left == 0 {
            return None;
        }
        Some(st.since + st.overhead + task.work_left)
    }

    /// `__schedule()`: puts the running task back, picks the next from the
    /// highest class that has one, balances when going idle.
    pub fn schedule(&mut self, cpu: usize, now: Nanos) {
        self.schedule_gated(cpu, now, true);
    }

    /// `ttwu_do_wakeup()` (3.13+): a wake-up ends `cpu`'s idle period, which
    /// enters its `avg_idle`.
    fn end_idle(&mut self, cpu: usize, now: Nanos) {
        let st = &mut self.cpus[cpu];
        if let Some(stamp) = st.idle_stamp.take() {
            let delta = now.saturating_sub(stamp) as i64;
            let avg = st.avg_idle as i64;
            st.avg_idle = ((avg + (delta - avg) / 8).max(0) as Nanos).min(2 * MIGRATION_COST_NS);
        }
    }

    /// [`Kernel::schedule`]; `gate`: newly idle balancing is skipped on a
    /// CPU whose idle periods are short (3.13+ `idle_balance()`, with the
    /// platform's `load_tracking`, the 3.16 host); the no-HZ kick's
    /// balancing (`nohz_idle_balance()`, `CPU_IDLE`) has no such gate.
    fn schedule_gated(&mut self, cpu: usize, now: Nanos, gate: bool) {
        self.settle(cpu, now);
        let prev = self.curr[cpu];
        if let Some(p) = prev {
            let c = self.class_of(p);
            self.classes[c].update_curr(&ctx!(self, now), cpu, p);
            self.curr[cpu] = None;
            self.classes[c].put_prev_task(&ctx!(self, now), cpu, p);
        }
        let mut next = self.pick(cpu, now);
        if next.is_none() {
            if self.cpus[cpu].idle_stamp.is_none() {
                self.cpus[cpu].idle_stamp = Some(now);
            }
            let short = self.cfg.load_tracking && self.cpus[cpu].avg_idle < MIGRATION_COST_NS;
            if !(gate && short) {
                if let Some((t, src)) = self.pull(cpu, Balance::NewlyIdle, now) {
                    self.cpus[cpu].idle_stamp = None;
                    self.migrate(t, src, cpu, now);
                    next = self.pick(cpu, now);
                }
            }
        }
        self.curr[cpu] = next;
        if next != prev {
            if let Some(n) = next {
                self.cpus[cpu].overhead += self.cfg.switch_ns;
                self.cpus[cpu].switches += 1;
                let st = self.cpus[cpu].overhead;
                let task = &mut self.tasks[n.idx()];
                task.cpu = cpu;
                if task.start_pending && st == 0 {
                    task.start_pending = false;
                    self.events.push(Event::Started(n, now));
                }
            } else {
                self.cpus[cpu].overhead = 0;
            }
        }
        self.dirty.push(cpu);
    }

    fn pick(&mut self, cpu: usize, now: Nanos) -> Option<TaskId> {
        for c in 0..2 {
            if let Some(t) = self.classes[c].pick_next_task(&ctx!(self, now), cpu) {
                return Some(t);
            }
        }
        None
    }

    fn pull(&mut self, cpu: usize, why: Balance, now: Nanos) -> Option<(TaskId, usize)> {
        for c in 0..2 {
            if let Some(found) = self.classes[c].balance(&ctx!(self, now), cpu, why) {
                return Some(found);
            }
        }
        None
    }

    /// Moves a queued (not running) task to `dst` (`move_queued_task`).
    fn migrate(&mut self, t: TaskId, src: usize, dst: usize, now: Nanos) {
        let c = self.class_of(t);
        self.classes[c].dequeue_task(&ctx!(self, now), src, t, Dequeue::Migrate);
        self.tasks[t.idx()].cpu = dst;
        self.classes[c].enqueue_task(&ctx!(self, now), dst, t, Enqueue::Migrate);
        self.dirty.push(src);
        if self.curr[dst].is_some() {
            self.check_preempt(dst, t, now);
        }
    }

    /// `scheduler_tick()` on `cpu`: charge, class housekeeping, the
    /// running task's tick, then periodic and no-HZ idle balancing.
    pub fn tick(&mut self, cpu: usize, now: Nanos) {
        self.catch_up_jiffies(now);
        self.update_curr(cpu, now);
        let mut resched = false;
        for c in 0..2 {
            resched |= self.classes[c].cpu_tick(&ctx!(self, now), cpu);
        }
        if let Some(t) = self.curr[cpu] {
            let c = self.class_of(t);
            resched |= self.classes[c].task_tick(&ctx!(self, now), cpu, t);
        }
        if resched || self.curr[cpu].is_none() {
            self.schedule(cpu, now);
        }
        if now >= self.cpus[cpu].next_balance {
            self.cpus[cpu].next_balance = now + self.cfg.balance_busy_ns;
            if let Some((t, src)) = self.pull(cpu, Balance::Periodic, now) {
                self.migrate(t, src, cpu, now);
            }
        }
        self.nohz_kick(cpu, now);
    }

    /// `tick_do_update_jiffies64()`: jiffies follow the clock whenever the
    /// kernel runs its timer code.
    pub fn catch_up_jiffies(&mut self, now: Nanos) {
        self.jiffies = self.jiffies.max(now / self.tick_ns);
    }

    /// `nohz_balancer_kick()`: a busy CPU with waiting tasks makes an
    /// idle CPU balance.
    fn nohz_kick(&mut self, cpu: usize, now: Nanos) {
        let waiting = (0..2).any(|c| self.classes[c].has_queued(&ctx!(self, now), cpu));
        if !waiting {
            return;
        }
        if let Some(idle) = (0..self.cfg.cpus).find(|&i| self.curr[i].is_none()) {
            self.schedule_gated(idle, now, false);
        }
    }

    /// The lag of a fair task against its queue, while it is queued
    /// (EEVDF and CFS; `None` for BFS or a sleeping task).
    pub fn fair_lag(&self, t: TaskId) -> Option<i64> {
        if self.tasks[t.idx()].policy.is_rt() {
            return None;
        }
        self.classes[FAIR].lag(t)
    }

    /// Whether `cpu` needs its periodic timer: it runs something, or a
    /// class waits for time to pass (a throttled RT queue).
    pub fn needs_tick(&self, cpu: usize) -> bool {
        self.curr[cpu].is_some() || self.classes.iter().any(|c| c.needs_timer(cpu))
    }

    /// Whether `cpu` has nothing to run at all.
    pub fn cpu_idle(&self, cpu: usize) -> bool {
        self.curr[cpu].is_none()
    }
}

impl Kernel {
    /// `sched_setscheduler()`: the task leaves its class's queue, takes
    /// the new policy (and weight), and comes back, preempting if due.
    pub fn set_policy(&mut self, t: TaskId, policy: crate::task::Policy, now: Nanos) {
        let cpu = self.tasks[t.idx()].cpu;
        let running = self.curr[cpu] == Some(t);
        let runnable = self.tasks[t.idx()].state == TaskState::Runnable;
        if running {
            self.update_curr(cpu, now);
        }
        let old = self.class_of(t);
        if runnable {
            self.classes[old].dequeue_task(&ctx!(self, now), cpu, t, Dequeue::Migrate);
            if self.curr[cpu] == Some(t) {
                self.curr[cpu] = None;
                self.classes[old].put_prev_task(&ctx!(self, now), cpu, t);
            }
        }
        self.tasks[t.idx()].policy = policy;
        self.tasks[t.idx()].weight = crate::weights::nice_to_weight(policy.nice());
        if runnable {
            let c = self.class_of(t);
            self.classes[c].enqueue_task(&ctx!(self, now), cpu, t, Enqueue::Migrate);
            if running {
                self.schedule(cpu, now);
            } else {
                self.check_preempt(cpu, t, now);
            }
        }
    }
}
