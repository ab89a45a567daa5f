//! EEVDF as in Linux 6.6 and later (kernel/sched/fair.c): each entity has
//! a lag against the queue's weighted average vruntime V, is eligible when
//! its vruntime is at most V, and asks for a slice that sets its virtual
//! deadline; the eligible entity with the earliest deadline runs. Lag is
//! kept across sleeps and migrations (`PLACE_LAG`), and a new task asks
//! for half a slice first (`PLACE_DEADLINE_INITIAL`).
//!
//! Left out: `RUN_TO_PARITY` and the 6.12 delayed dequeue; a group entity
//! that is reweighted keeps its lag unscaled.

use crate::class::{Dequeue, Enqueue};
use crate::fair::{EntId, Fair, FairCore, FairPolicy, RqId};
use crate::weights::{calc_delta_fair, tunable_factor};

/// `sysctl_sched_base_slice` before scaling: 0.75 ms (fair.c, 6.6 to
/// 6.14; 0.70 ms from 6.15).
pub const BASE_SLICE: i64 = 750_000;
/// The 6.15 value.
pub const BASE_SLICE_6_15: i64 = 700_000;

#[derive(Clone, Copy, Debug)]
pub struct Eevdf {
    /// The unscaled base slice (6.6 or 6.15).
    pub base: i64,
    /// The scaled base slice.
    pub slice: i64,
}

/// The EEVDF class for a kernel of `cpus` CPUs (6.6 base slice).
pub fn new(cpus: usize) -> Fair<Eevdf> {
    Fair::new(
        Eevdf {
            base: BASE_SLICE,
            slice: 0,
        },
        cpus,
    )
}

impl Eevdf {
    /// `entity_eligible()`: v_i <= V, compared without dividing.
    fn eligible(f: &FairCore, rq: RqId, se: EntId) -> bool {
        let base = f.rqs[rq].min_vruntime;
        let (avg, load) = f.vruntime_sums(rq);
        avg >= (f.ents[se].vruntime - base) as i128 * load
    }
}

impl FairPolicy for Eevdf {
    fn name(&self) -> &'static str {
        "eevdf"
    }

    fn configure(&mut self, cpus: usize) {
        self.slice = self.base * tunable_factor(cpus) as i64;
    }

    /// `place_entity()`: vruntime = V - lag, the lag scaled by
    /// (W + w) / W so that placing the entity does not move V; the
    /// deadline one virtual slice later (half for a new task).
    fn place(&self, f: &mut FairCore, rq: RqId, se: EntId, how: Enqueue) {
        let v = f.avg_vruntime(rq);
        let w = f.ents[se].weight as i128;
        let mut lag = 0i128;
        if f.rqs[rq].nr_running > 0 {
            let load: i128 = f.entities(rq).map(|e| f.ents[e].weight as i128).sum();
            lag = f.ents[se].vlag as i128 * (load + w) / load.max(1);
        }
        let mut vslice = calc_delta_fair(self.slice, f.ents[se].weight);
        if how == Enqueue::New {
            vslice /= 2;
        }
        let e = &mut f.ents[se];
        e.slice = self.slice;
        e.vruntime = v - lag as i64;
        e.deadline = e.vruntime + vslice;
    }

    /// `update_entity_lag()`: lag = V - v_i, clamped to the larger of two
    /// slices and a tick, in the entity's virtual time.
    fn on_dequeue(&self, f: &mut FairCore, rq: RqId, se: EntId, _how: Dequeue) {
        let lag = f.avg_vruntime(rq) - f.ents[se].vruntime;
        let span = (2 * f.ents[se].slice).max(f.tick_ns as i64);
        let limit = calc_delta_fair(span, f.ents[se].weight);
        f.ents[se].vlag = lag.clamp(-limit, limit);
    }

    /// `pick_eevdf()`: the eligible entity with the earliest deadline.
    fn pick(&self, f: &FairCore, rq: RqId) -> Option<EntId> {
        let best = f
            .entities(rq)
            .filter(|&e| Self::eligible(f, rq, e))
            .min_by_key(|&e| (f.ents[e].deadline, f.ents[e].seq));
        best.or_else(|| f.entities(rq).min_by_key(|&e| f.ents[e].vruntime))
    }

    /// 6.6 dropped `check_preempt_tick()`: the tick's `update_curr()`
    /// reschedules through [`Self::after_update_curr`].
    fn tick_preempt(&self, _f: &FairCore, _rq: RqId, _curr: EntId) -> bool {
        false
    }

    /// `check_preempt_wakeup_fair()`: preempt if EEVDF would now pick
    /// the woken entity.
    fn wakeup_preempt(&self, f: &FairCore, rq: RqId, _curr: EntId, se: EntId) -> bool {
        self.pick(f, rq) == Some(se)
    }

    /// `update_deadline()`: once the entity has used its request, it asks
    /// for a new slice, and others get a chance.
    fn after_update_curr(&self, f: &mut FairCore, rq: RqId, se: EntId) -> bool {
        let e = &mut f.ents[se];
        if e.vruntime < e.deadline {
            return false;
        }
        e.slice = self.slice;
        e.deadline = e.vruntime + calc_delta_fair(self.slice, e.weight);
        f.rqs[rq].nr_running > 1
    }

    /// `yield_task_fair()` in 6.6: the deadline moves one slice on.
    fn yield_entity(&self, f: &mut FairCore, _rq: RqId, se: EntId) {
        let e = &mut f.ents[se];
        e.deadline += calc_delta_fair(e.slice, e.weight);
    }
}
