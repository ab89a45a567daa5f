//! The real-time class (kernel/sched/rt.c): `SCHED_FIFO` and `SCHED_RR`
//! above the fair class, a queue per CPU ordered by priority then arrival,
//! round-robin slices, and RT throttling.
//!
//! Throttling is per CPU. With `RT_RUNTIME_SHARE` (a default scheduler
//! feature until Linux 5.17 turned it off) a CPU that used up its runtime
//! borrows the unused runtime of the others (`do_balance_runtime()`), up
//! to the whole period, so one RT hog on an otherwise RT-free machine is
//! never throttled. The period is checked at the tick, so a throttled CPU
//! resumes RT work up to one tick after the period ends where the
//! kernel's hrtimer is exact.

use crate::class::{Balance, Ctx, Dequeue, Enqueue, SchedClass};
use crate::task::{Policy, TaskId};
use crate::{Nanos, MS};

/// `RR_TIMESLICE` (include/linux/sched/rt.h): 100 ms.
pub const RR_TIMESLICE: Nanos = 100 * MS;
/// `sysctl_sched_rt_period` (kernel/sched/core.c, rt.c): 1 s.
pub const RT_PERIOD: Nanos = 1_000 * MS;
/// `sysctl_sched_rt_runtime`: 950 ms of each period.
pub const RT_RUNTIME: Nanos = 950 * MS;

#[derive(Clone, Debug, Default)]
struct CpuRt {
    /// (priority, arrival) of each queued, not running, task.
    queue: Vec<(u8, u64, TaskId)>,
    rt_time: Nanos,
    /// This CPU's runtime, changed by borrowing.
    rt_runtime: Nanos,
    period_end: Nanos,
    throttled: bool,
}

#[derive(Clone, Debug, Default)]
struct TaskRt {
    time_slice: Nanos,
    exec_start: Nanos,
    /// Queued or running in this class (dequeued tasks are not put back).
    on_rq: bool,
}

pub struct Rt {
    cpus: Vec<CpuRt>,
    tasks: Vec<TaskRt>,
    seq: u64,
    /// `sched_rt_runtime_us`; `None` is -1 (no throttling).
    pub runtime: Option<Nanos>,
    /// `sched_feat(RT_RUNTIME_SHARE)`.
    pub share: bool,
}

impl Rt {
    pub fn new(cpus: usize, share: bool) -> Rt {
        Rt {
            cpus: vec![
                CpuRt {
                    period_end: RT_PERIOD,
                    rt_runtime: RT_RUNTIME,
                    ..Default::default()
                };
                cpus
            ],
            tasks: Vec::new(),
            seq: 0,
            runtime: Some(RT_RUNTIME),
            share,
        }
    }

    /// `do_balance_runtime()`: takes a share of each other CPU's unused
    /// runtime (its spare over the CPU count), up to the whole period.
    fn borrow_runtime(&mut self, cpu: usize) {
        let n = self.cpus.len() as Nanos;
        for j in 0..self.cpus.len() {
            if j == cpu || self.cpus[cpu].rt_runtime >= RT_PERIOD {
                continue;
            }
            let spare = self.cpus[j].rt_runtime.saturating_sub(self.cpus[j].rt_time) / n;
            let diff = spare.min(RT_PERIOD - self.cpus[cpu].rt_runtime);
            self.cpus[j].rt_runtime -= diff;
            self.cpus[cpu].rt_runtime += diff;
        }
    }

    fn push(&mut self, cpu: usize, prio: u8, t: TaskId) {
        self.seq += 1;
        self.cpus[cpu].queue.push((prio, self.seq, t));
    }

    fn best(&self, cpu: usize) -> Option<usize> {
        let q = &self.cpus[cpu].queue;
        (0..q.len()).max_by_key(|&i| (q[i].0, std::cmp::Reverse(q[i].1)))
    }

    /// The priority a CPU runs at for `find_lowest_rq()`: 0 if idle or
    /// fair, else its RT priority.
    fn cpu_prio(ctx: &Ctx, cpu: usize) -> u8 {
        ctx.curr[cpu].map_or(0, |c| ctx.tasks[c.idx()].policy.rt_prio())
    }
}

impl SchedClass for Rt {
    fn name(&self) -> &'static str {
        "rt"
    }

    fn task_new(&mut self, _ctx: &Ctx, _t: TaskId) {
        self.tasks.push(TaskRt {
            time_slice: RR_TIMESLICE,
            exec_start: 0,
            on_rq: false,
        });
    }

    /// `select_task_rq_rt()`: stay unless the CPU runs an RT task at least
    /// as important; then `find_lowest_rq()`.
    fn select_task_rq(&mut self, ctx: &Ctx, t: TaskId, prev: usize) -> usize {
        let prio = ctx.tasks[t.idx()].policy.rt_prio();
        if Self::cpu_prio(ctx, prev) < prio {
            return prev;
        }
        (0..ctx.nr_cpus())
            .min_by_key(|&c| (Self::cpu_prio(ctx, c), c != prev, c))
            .filter(|&c| Self::cpu_prio(ctx, c) < prio)
            .unwrap_or(prev)
    }

    fn enqueue_task(&mut self, ctx: &Ctx, cpu: usize, t: TaskId, _how: Enqueue) {
        let prio = ctx.tasks[t.idx()].policy.rt_prio();
        self.tasks[t.idx()].on_rq = true;
        self.push(cpu, prio, t);
    }

    fn dequeue_task(&mut self, _ctx: &Ctx, cpu: usize, t: TaskId, _how: Dequeue) {
        self.tasks[t.idx()].on_rq = false;
        self.cpus[cpu].queue.retain(|e| e.2 != t);
    }

    /// `check_preempt_curr_rt()`: a strictly higher priority preempts.
    fn wakeup_preempt(&mut self, ctx: &Ctx, cpu: usize, t: TaskId) -> bool {
        let p = ctx.tasks[t.idx()].policy.rt_prio();
        p > Self::cpu_prio(ctx, cpu)
    }

    fn pick_next_task(&mut self, ctx: &Ctx, cpu: usize) -> Option<TaskId> {
        if self.cpus[cpu].throttled {
            return None;
        }
        let i = self.best(cpu)?;
        let t = self.cpus[cpu].queue.remove(i).2;
        self.tasks[t.idx()].exec_start = ctx.now;
        Some(t)
    }

    /// A preempted RT task goes back to the head of its priority (the
    /// kernel's `enqueue_task_rt` with `ENQUEUE_HEAD` on preemption keeps
    /// FIFO order); a task whose RR slice ran out was moved to the tail
    /// by the tick.
    fn put_prev_task(&mut self, ctx: &Ctx, cpu: usize, t: TaskId) {
        if !self.tasks[t.idx()].on_rq
            || ctx.tasks[t.idx()].state != crate::task::TaskState::Runnable
        {
            return;
        }
        if self.cpus[cpu].queue.iter().any(|e| e.2 == t) {
            return;
        }
        let prio = ctx.tasks[t.idx()].policy.rt_prio();
        let head = self.cpus[cpu]
            .queue
            .iter()
            .filter(|e| e.0 == prio)
            .map(|e| e.1)
            .min()
            .unwrap_or(self.seq + 1);
        self.cpus[cpu].queue.push((prio, head - 1, t));
    }

    /// `task_tick_rt()`: SCHED_RR loses the CPU to its peers when its
    /// slice runs out.
    fn task_tick(&mut self, ctx: &Ctx, cpu: usize, t: TaskId) -> bool {
        let Policy::Rr { prio } = ctx.tasks[t.idx()].policy else {
            return false;
        };
        let ts = &mut self.tasks[t.idx()];
        ts.time_slice = ts.time_slice.saturating_sub(ctx.tick_ns);
        if ts.time_slice > 0 {
            return false;
        }
        ts.time_slice = RR_TIMESLICE;
        if self.cpus[cpu].queue.iter().any(|e| e.0 == prio) {
            self.push(cpu, prio, t);
            return true;
        }
        false
    }

    fn yield_task(&mut self, ctx: &Ctx, cpu: usize, t: TaskId) {
        let prio = ctx.tasks[t.idx()].policy.rt_prio();
        self.push(cpu, prio, t);
    }

    /// `update_curr_rt()` and `sched_rt_runtime_exceeded()`.
    fn update_curr(&mut self, ctx: &Ctx, cpu: usize, t: TaskId) -> bool {
        let ts = &mut self.tasks[t.idx()];
        let delta = ctx.now.saturating_sub(ts.exec_start);
        ts.exec_start = ctx.now;
        if self.runtime.is_none() {
            return false;
        }
        self.cpus[cpu].rt_time += delta;
        if self.share && self.cpus[cpu].rt_time > self.cpus[cpu].rt_runtime {
            self.borrow_runtime(cpu);
        }
        let c = &mut self.cpus[cpu];
        if !c.throttled && c.rt_time > c.rt_runtime {
            c.throttled = true;
            return true;
        }
        false
    }

    fn has_queued(&self, _ctx: &Ctx, cpu: usize) -> bool {
        !self.cpus[cpu].throttled && !self.cpus[cpu].queue.is_empty()
    }

    fn needs_timer(&self, cpu: usize) -> bool {
        self.cpus[cpu].throttled && !self.cpus[cpu].queue.is_empty()
    }

    /// `do_sched_rt_period_timer()`: each period forgives one runtime.
    fn cpu_tick(&mut self, ctx: &Ctx, cpu: usize) -> bool {
        let now = ctx.now;
        let c = &mut self.cpus[cpu];
        let runtime = c.rt_runtime;
        if now < c.period_end {
            return false;
        }
        let overrun = (now - c.period_end) / RT_PERIOD + 1;
        c.period_end += overrun * RT_PERIOD;
        c.rt_time -= c.rt_time.min(overrun * runtime);
        if c.throttled && c.rt_time < runtime {
            c.throttled = false;
            return !c.queue.is_empty();
        }
        false
    }

    /// `pull_rt_task()` into a newly idle CPU.
    fn balance(&mut self, ctx: &Ctx, cpu: usize, why: Balance) -> Option<(TaskId, usize)> {
        if why != Balance::NewlyIdle || !ctx.idle(cpu) {
            return None;
        }
        (0..ctx.nr_cpus())
            .filter(|&c| c != cpu && !self.cpus[c].throttled)
            .find_map(|c| self.best(c).map(|i| (self.cpus[c].queue[i].2, c)))
    }
}
