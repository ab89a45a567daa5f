//! BFS 0.44x by Con Kolivas (kernel/sched/bfs.c of the 3.x patches), the
//! one the coordinated scheduling study ran: one global queue for all
//! CPUs; a task's virtual deadline is set to now + `rr_interval` x its nice
//! ratio when its time slice runs out (and only then: a task keeps its
//! deadline across a sleep, so a task that slept long has an early one);
//! the earliest deadline runs, found by an O(n) scan; a waking task
//! preempts the CPU running the latest deadline if its own is earlier.
//! A task preempted while runnable is "sticky" to its CPU: another CPU
//! sees its deadline shifted left by the cache distance.
//!
//! RT tasks are left to the shared RT class above this one; BFS's
//! `SCHED_ISO` and `SCHED_IDLEPRIO` are not modelled.

use crate::class::{Ctx, Dequeue, Enqueue, SchedClass};
use crate::task::{TaskId, TaskState};
use crate::Nanos;

/// `rr_interval` (bfs.c): 6 ms, in BFS's milliseconds.
pub const RR_INTERVAL_MS: u64 = 6;
/// `MS_TO_NS(1)` in bfs.c is `1 << 20` ns (a shift, not 10^6).
const MS_TO_NS_1: u64 = 1 << 20;
/// `MS_TO_US(1)` in bfs.c is `1 << 10` us.
const MS_TO_US_1: u64 = 1 << 10;
/// BFS's microsecond: slices are kept in units of `NS_TO_US(ns)` =
/// `ns >> 10` (bfs.c `update_cpu_clock()`), 1024 ns each.
const BFS_US_NS: Nanos = 1 << 10;
/// `RESCHED_US` (bfs.c): a slice below 100 (BFS) us counts as used up.
pub const RESCHED_NS: Nanos = 100 * BFS_US_NS;
/// `cpu_locality` of two cores that share a cache (bfs.c
/// `sched_init_smp()`: 0 same CPU, 1 SMT sibling, 2 shared cache).
pub const LOCALITY_SHARED_CACHE: u32 = 2;

/// `prio_ratios[]` (bfs.c `sched_init()`): 128 for nice -20, then each
/// level 11/10 of the one before, in integer steps.
pub fn prio_ratios() -> [u64; 40] {
    let mut r = [0u64; 40];
    r[0] = 128;
    for i in 1..40 {
        r[i] = r[i - 1] * 11 / 10;
    }
    r
}

/// `prio_deadline_diff()`: the deadline offset of a nice level, in ns.
pub fn deadline_diff(nice: i8) -> Nanos {
    let user_prio = (nice.clamp(-20, 19) as i32 + 20) as usize;
    prio_ratios()[user_prio] * RR_INTERVAL_MS * (MS_TO_NS_1 / 128)
}

/// `timeslice()`: `rr_interval` in BFS's microseconds (`MS_TO_US`),
/// as ns: 6 x 1024 x 1024 ns = 6.29 ms.
pub fn timeslice() -> Nanos {
    RR_INTERVAL_MS * MS_TO_US_1 * BFS_US_NS
}

#[derive(Clone, Debug, Default)]
struct TaskBfs {
    deadline: Nanos,
    time_slice: Nanos,
    last_charge: Nanos,
    sticky: bool,
    last_cpu: usize,
    /// Queued or running in this class (dequeued tasks are not put back).
    on_rq: bool,
}

pub struct Bfs {
    /// The global queue of runnable, not running, fair tasks.
    queue: Vec<TaskId>,
    tasks: Vec<TaskBfs>,
    /// The cache distance between any two distinct CPUs.
    pub locality: u32,
}

impl Bfs {
    pub fn new() -> Bfs {
        Bfs {
            queue: Vec::new(),
            tasks: Vec::new(),
            locality: LOCALITY_SHARED_CACHE,
        }
    }

    /// `time_slice_expired()`: a new slice and a new deadline.
    fn expire(&mut self, ctx: &Ctx, t: TaskId) {
        let nice = ctx.tasks[t.idx()].policy.nice();
        let b = &mut self.tasks[t.idx()];
        b.time_slice = timeslice();
        b.deadline = ctx.now + deadline_diff(nice);
    }

    /// `check_deadline()`.
    fn check_deadline(&mut self, ctx: &Ctx, t: TaskId) {
        if self.tasks[t.idx()].time_slice < RESCHED_NS {
            self.expire(ctx, t);
        }
    }

    fn running_deadline(&self, ctx: &Ctx, cpu: usize) -> Option<Nanos> {
        let c = ctx.curr[cpu]?;
        (!ctx.tasks[c.idx()].policy.is_rt()).then(|| self.tasks[c.idx()].deadline)
    }

    pub fn deadline(&self, t: TaskId) -> Nanos {
        self.tasks[t.idx()].deadline
    }
}

impl Default for Bfs {
    fn default() -> Self {
        Self::new()
    }
}

impl SchedClass for Bfs {
    fn name(&self) -> &'static str {
        "bfs"
    }

    fn task_new(&mut self, ctx: &Ctx, t: TaskId) {
        self.tasks.push(TaskBfs {
            last_cpu: ctx.tasks[t.idx()].cpu,
            ..Default::default()
        });
        self.expire(ctx, t);
    }

    /// `try_preempt()`'s choice: an idle CPU (the task's own first),
    /// else the CPU running the latest deadline. RT-running CPUs are
    /// never preempted by a fair task.
    fn select_task_rq(&mut self, ctx: &Ctx, t: TaskId, prev: usize) -> usize {
        self.tasks[t.idx()].sticky = false;
        let n = ctx.nr_cpus();
        if let Some(c) = (0..n).map(|i| (prev + i) % n).find(|&c| ctx.idle(c)) {
            return c;
        }
        (0..n)
            .filter_map(|c| self.running_deadline(ctx, c).map(|d| (d, c)))
            .max_by_key(|&(d, c)| (d, c == prev))
            .map_or(prev, |(_, c)| c)
    }

    fn enqueue_task(&mut self, ctx: &Ctx, _cpu: usize, t: TaskId, how: Enqueue) {
        if how == Enqueue::New {
            self.expire(ctx, t);
        }
        self.tasks[t.idx()].on_rq = true;
        self.queue.push(t);
    }

    fn dequeue_task(&mut self, _ctx: &Ctx, _cpu: usize, t: TaskId, _how: Dequeue) {
        self.tasks[t.idx()].on_rq = false;
        self.queue.retain(|&q| q != t);
    }

    /// `can_preempt()`: an earlier deadline preempts.
    fn wakeup_preempt(&mut self, ctx: &Ctx, cpu: usize, t: TaskId) -> bool {
        match self.running_deadline(ctx, cpu) {
            Some(d) => self.tasks[t.idx()].deadline < d,
            None => true,
        }
    }

    /// `earliest_deadline_task()`: an O(n) scan of the global queue; a
    /// sticky task of another CPU competes with `deadline << locality`.
    fn pick_next_task(&mut self, ctx: &Ctx, cpu: usize) -> Option<TaskId> {
        let mut best: Option<(u128, usize)> = None;
        for (i, &t) in self.queue.iter().enumerate() {
            let b = &self.tasks[t.idx()];
            let mut dl = b.deadline as u128;
            if b.sticky && b.last_cpu != cpu {
                dl <<= self.locality;
            }
            if best.is_none_or(|(d, _)| dl < d) {
                best = Some((dl, i));
            }
        }
        let (_, i) = best?;
        let t = self.queue.remove(i);
        let b = &mut self.tasks[t.idx()];
        b.last_cpu = cpu;
        b.sticky = false;
        b.last_charge = ctx.now;
        Some(t)
    }

    /// The tail of `schedule()`: `check_deadline(prev)`, then a still
    /// runnable task goes back on the global queue, sticky if others wait
    /// (`swap_sticky()`).
    fn put_prev_task(&mut self, ctx: &Ctx, cpu: usize, t: TaskId) {
        self.check_deadline(ctx, t);
        let b = &self.tasks[t.idx()];
        if !b.on_rq || ctx.tasks[t.idx()].state != TaskState::Runnable || self.queue.contains(&t) {
            return;
        }
        let others = !self.queue.is_empty();
        let b = &mut self.tasks[t.idx()];
        b.sticky = others;
        b.last_cpu = cpu;
        self.queue.push(t);
    }

    /// `task_running_tick()`: reschedule once the slice is used up.
    fn task_tick(&mut self, _ctx: &Ctx, _cpu: usize, t: TaskId) -> bool {
        self.tasks[t.idx()].time_slice < RESCHED_NS
    }

    /// `sched_yield()` in BFS expires the slice.
    fn yield_task(&mut self, ctx: &Ctx, _cpu: usize, t: TaskId) {
        self.tasks[t.idx()].time_slice = 0;
        self.check_deadline(ctx, t);
    }

    /// `update_cpu_clock()`: the running task's slice shrinks by the time
    /// it ran.
    fn update_curr(&mut self, ctx: &Ctx, _cpu: usize, t: TaskId) -> bool {
        let b = &mut self.tasks[t.idx()];
        let d = ctx.now.saturating_sub(b.last_charge);
        b.last_charge = ctx.now;
        b.time_slice = b.time_slice.saturating_sub(d);
        false
    }

    fn has_queued(&self, _ctx: &Ctx, _cpu: usize) -> bool {
        !self.queue.is_empty()
    }
}
