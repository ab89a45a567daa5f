//! CFS as in Linux 3.12 to 3.17 (kernel/sched/fair.c of those releases):
//! vruntime, a period shared out by weight, tick-driven preemption after
//! the slice, `GENTLE_FAIR_SLEEPERS` placement of a waking task, and
//! wake-up preemption beyond the wake-up granularity.
//!
//! The next buddy is kept: a woken entity that preempts is picked next
//! unless it is more than a wake-up grain behind the leftmost one. Left
//! out: the last buddy (set only once `nr_running >= sched_nr_latency`, 8
//! tasks on one queue), the skip buddy (a yield queues the task last
//! instead), and `HRTICK` (off by default: preemption waits for the tick).

use crate::class::{Dequeue, Enqueue};
use crate::fair::{EntId, Fair, FairCore, FairPolicy, RqId};
use crate::weights::{calc_delta_fair, tunable_factor};
use crate::MS;

/// `sysctl_sched_latency` before scaling: 6 ms (fair.c).
pub const SCHED_LATENCY: i64 = 6 * MS as i64;
/// `sysctl_sched_min_granularity` before scaling: 0.75 ms (fair.c).
pub const MIN_GRANULARITY: i64 = 750_000;
/// `sysctl_sched_wakeup_granularity` before scaling: 1 ms (fair.c).
pub const WAKEUP_GRANULARITY: i64 = MS as i64;

/// The scaled tunables of one kernel.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cfs {
    pub latency: i64,
    pub min_granularity: i64,
    pub wakeup_granularity: i64,
    /// `sched_nr_latency` = latency / min_granularity (8).
    pub nr_latency: usize,
}

/// The CFS class for a kernel of `cpus` CPUs.
pub fn new(cpus: usize) -> Fair<Cfs> {
    Fair::new(Cfs::default(), cpus)
}

impl Cfs {
    /// `__sched_period()`: the latency target, stretched when more than
    /// `sched_nr_latency` entities share it.
    fn period(&self, nr: usize) -> i64 {
        if nr > self.nr_latency {
            nr as i64 * self.min_granularity
        } else {
            self.latency
        }
    }

    /// `sched_slice()`: the entity's share of the period, through every
    /// level of the group hierarchy.
    pub fn slice(&self, f: &FairCore, rq: RqId, se: EntId) -> i64 {
        let on = f.ents[se].on_rq;
        let mut slice = self.period(f.rqs[rq].nr_running + !on as usize) as i128;
        let mut e = Some(se);
        while let Some(s) = e {
            let q = f.ents[s].rq;
            let mut load = f.rqs[q].load;
            if !f.ents[s].on_rq {
                load += f.ents[s].weight;
            }
            slice = scale(slice, f.ents[s].weight, load.max(1));
            e = f.parent(s);
        }
        slice as i64
    }

    /// The queued entity of smallest vruntime, the first of equals.
    /// (A plain loop: `min_by_key` over the queue showed in the profile.)
    fn leftmost(f: &FairCore, rq: RqId) -> Option<EntId> {
        let (&first, rest) = f.rqs[rq].queue.split_first()?;
        let mut best = (first, f.ents[first].vruntime);
        for &e in rest {
            let v = f.ents[e].vruntime;
            if v < best.1 {
                best = (e, v);
            }
        }
        Some(best.0)
    }
}

/// `slice * weight / load`, in 64 bits when they suffice (a slice of
/// milliseconds times a weight always does): the same quotient without
/// the slow 128-bit division call.
fn scale(slice: i128, weight: u64, load: u64) -> i128 {
    let small = |v: u64| i64::try_from(v).ok();
    if let (Ok(s), Some(w), Some(l)) = (i64::try_from(slice), small(weight), small(load)) {
        if let Some(p) = s.checked_mul(w) {
            return (p / l) as i128;
        }
    }
    slice * weight as i128 / load as i128
}

/// The entity of smallest (vruntime, enqueue order) among `rq`'s queue
/// and its running entity, the first of equals in [`FairCore::entities`]
/// order, as `min_by_key` gave; a plain loop keeps the key in registers.
fn leftmost_of(f: &FairCore, rq: RqId) -> Option<EntId> {
    let r = &f.rqs[rq];
    let curr = r.curr.filter(|&c| f.ents[c].on_rq);
    let mut best: Option<(EntId, (i64, u64))> = None;
    for &e in r.queue.iter().chain(curr.as_ref()) {
        let key = (f.ents[e].vruntime, f.ents[e].seq);
        if best.is_none_or(|(_, b)| key < b) {
            best = Some((e, key));
        }
    }
    best.map(|(e, _)| e)
}

impl FairPolicy for Cfs {
    fn name(&self) -> &'static str {
        "cfs"
    }

    fn configure(&mut self, cpus: usize) {
        let k = tunable_factor(cpus) as i64;
        self.latency = SCHED_LATENCY * k;
        self.min_granularity = MIN_GRANULARITY * k;
        self.wakeup_granularity = WAKEUP_GRANULARITY * k;
        self.nr_latency = (SCHED_LATENCY / MIN_GRANULARITY) as usize;
    }

    /// `place_entity()` and the `min_vruntime` normalisation of
    /// `enqueue_entity()`: a new task starts one virtual slice after
    /// `min_vruntime` (`START_DEBIT`); a waking one at most half a latency
    /// before it (`GENTLE_FAIR_SLEEPERS`), never earlier than its own
    /// vruntime; a migrated one keeps its offset.
    fn place(&self, f: &mut FairCore, rq: RqId, se: EntId, how: Enqueue) {
        let min = f.rqs[rq].min_vruntime;
        match how {
            Enqueue::New => {
                let vslice = calc_delta_fair(self.slice(f, rq, se), f.ents[se].weight);
                f.ents[se].vruntime = min + vslice;
            }
            Enqueue::Wakeup => {
                let v = min - self.latency / 2;
                let e = &mut f.ents[se];
                e.vruntime = e.vruntime.max(v);
            }
            Enqueue::Migrate => f.ents[se].vruntime += min,
        }
    }

    fn on_dequeue(&self, f: &mut FairCore, rq: RqId, se: EntId, how: Dequeue) {
        if how == Dequeue::Migrate {
            f.ents[se].vruntime -= f.rqs[rq].min_vruntime;
        }
    }

    /// `pick_next_entity()`: the smallest vruntime, or the next buddy if
    /// it is not more than a grain behind it
    /// (`wakeup_preempt_entity(next, left) < 1`).
    fn pick(&self, f: &FairCore, rq: RqId) -> Option<EntId> {
        let left = leftmost_of(f, rq)?;
        let next = f.rqs[rq].next.filter(|&n| f.ents[n].on_rq && n != left);
        match next {
            Some(n) if !self.wakeup_preempt(f, rq, n, left) => Some(n),
            _ => Some(left),
        }
    }

    /// `check_preempt_tick()`.
    fn tick_preempt(&self, f: &FairCore, rq: RqId, curr: EntId) -> bool {
        let ideal = self.slice(f, rq, curr);
        let c = &f.ents[curr];
        let ran = (c.sum_exec - c.prev_sum_exec) as i64;
        if ran > ideal {
            return true;
        }
        if ran < self.min_granularity {
            return false;
        }
        let Some(left) = Self::leftmost(f, rq) else {
            return false;
        };
        c.vruntime - f.ents[left].vruntime > ideal
    }

    /// `wakeup_preempt_entity()` == 1: the woken entity is behind `curr`
    /// by more than the wake-up granularity in its own virtual time
    /// (`wakeup_gran()`).
    fn wakeup_preempt(&self, f: &FairCore, _rq: RqId, curr: EntId, se: EntId) -> bool {
        let vdiff = f.ents[curr].vruntime - f.ents[se].vruntime;
        vdiff > calc_delta_fair(self.wakeup_granularity, f.ents[se].weight)
    }

    fn after_update_curr(&self, _f: &mut FairCore, _rq: RqId, _se: EntId) -> bool {
        false
    }

    /// `yield_task_fair()` marks the task as the skip buddy; without
    /// buddies the same effect is to queue it behind every other entity.
    fn yield_entity(&self, f: &mut FairCore, rq: RqId, se: EntId) {
        if let Some(max) = f.rqs[rq].queue.iter().map(|&e| f.ents[e].vruntime).max() {
            let e = &mut f.ents[se];
            e.vruntime = e.vruntime.max(max + 1);
        }
    }
}
