//! The fair class's shared machinery (kernel/sched/fair.c): scheduling
//! entities for tasks and for groups, a `cfs_rq` per CPU and per group and
//! CPU, group shares, and load balancing. What differs between CFS and
//! EEVDF (placement, picking, preemption) is a [`FairPolicy`]; `cfs.rs`
//! and `eevdf.rs` hold one each.
//!
//! Queues are plain vectors searched linearly: a run queue here holds a
//! handful of entities, where the kernel's rbtree would cost more than it
//! saves.

mod balance;
pub mod pelt;

use crate::class::{Balance, Ctx, Dequeue, Enqueue, SchedClass};
use crate::task::{GroupId, TaskId};
use crate::weights::{calc_delta_fair, MIN_SHARES};
use crate::Nanos;
use pelt::{RqAvg, SchedAvg};

pub type EntId = usize;
pub type RqId = usize;

/// A scheduling entity (`struct sched_entity`).
#[derive(Clone, Debug, Default)]
pub struct Entity {
    pub weight: u64,
    pub vruntime: i64,
    /// EEVDF's virtual deadline.
    pub deadline: i64,
    /// EEVDF's lag, kept across a sleep or a migration.
    pub vlag: i64,
    pub on_rq: bool,
    /// The `cfs_rq` it is (or will be) queued on.
    pub rq: RqId,
    /// For a group entity: the group's `cfs_rq` on this CPU.
    pub my_rq: Option<RqId>,
    pub sum_exec: Nanos,
    pub prev_sum_exec: Nanos,
    pub exec_start: Nanos,
    pub task: Option<TaskId>,
    /// Enqueue order, for the balancer's choice of the oldest task.
    pub seq: u64,
    /// EEVDF's request size (`se->slice`).
    pub slice: i64,
}

/// A fair run queue (`struct cfs_rq`).
#[derive(Clone, Debug, Default)]
pub struct Rq {
    pub cpu: usize,
    /// Queued entities, not counting `curr`.
    pub queue: Vec<EntId>,
    pub curr: Option<EntId>,
    /// Sum of the weights of its entities on the queue, `curr` included.
    pub load: u64,
    pub nr_running: usize,
    /// Tasks at or below this queue.
    pub h_nr_running: usize,
    pub min_vruntime: i64,
    /// The group entity that stands for this queue in its parent.
    pub se: Option<EntId>,
    /// The group this queue belongs to (`cfs_rq->tg`), `None` for a root.
    pub tg: Option<usize>,
    /// The next buddy (`cfs_rq->next`): the entity whose wake-up just
    /// preempted, which CFS picks unless that is too unfair.
    pub next: Option<EntId>,
}

/// A CPU cgroup (`struct task_group`).
#[derive(Clone, Debug)]
pub struct Group {
    pub shares: u64,
    pub rq: Vec<RqId>,
    pub se: Vec<EntId>,
    /// `tg->load_avg`: the sum of its queues' `tg_load_contrib`.
    pub load_avg: u64,
    /// `tg->runnable_avg`: the sum of its entities' runnable shares.
    pub runnable_avg: u64,
}

/// The state CFS and EEVDF share.
#[derive(Default)]
pub struct FairCore {
    pub ents: Vec<Entity>,
    /// Each entity's tracked load (`se->avg`), apart from [`Entity`] so
    /// that the hot paths, which do not read it, stay in fewer cache lines.
    pub avgs: Vec<SchedAvg>,
    /// Each queue's tracked load, apart from [`Rq`] likewise.
    pub rq_avgs: Vec<RqAvg>,
    pub rqs: Vec<Rq>,
    pub root: Vec<RqId>,
    pub groups: Vec<Group>,
    pub task_se: Vec<EntId>,
    pub ncpus: usize,
    pub now: Nanos,
    pub tick_ns: Nanos,
    seq: u64,
    /// Per CPU: periodic balancing passes in a row that moved nothing
    /// (`sd->nr_balance_failed` of its one domain).
    pub nr_balance_failed: Vec<u32>,
    /// 3.x load tracking for group shares and balancing
    /// ([`crate::Platform::load_tracking`]); off: instantaneous weights.
    pub load_tracking: bool,
    /// CFS's next buddy ([`crate::Platform::next_buddy`]).
    pub next_buddy: bool,
}

/// What makes a fair scheduler CFS or EEVDF.
pub trait FairPolicy {
    fn name(&self) -> &'static str;
    /// Sets the tunables for a kernel with `cpus` CPUs.
    fn configure(&mut self, cpus: usize);
    /// Places an entity being enqueued (`place_entity`).
    fn place(&self, f: &mut FairCore, rq: RqId, se: EntId, how: Enqueue);
    /// An entity leaves its queue (after accounting).
    fn on_dequeue(&self, f: &mut FairCore, rq: RqId, se: EntId, how: Dequeue);
    /// The entity to run next from `rq`'s queue and `curr`.
    fn pick(&self, f: &FairCore, rq: RqId) -> Option<EntId>;
    /// `check_preempt_tick`: should `curr` give way at this tick?
    fn tick_preempt(&self, f: &FairCore, rq: RqId, curr: EntId) -> bool;
    /// Should waking `se` preempt `curr` (both on `rq`)?
    fn wakeup_preempt(&self, f: &FairCore, rq: RqId, curr: EntId, se: EntId) -> bool;
    /// After `curr` was charged: true to reschedule.
    fn after_update_curr(&self, f: &mut FairCore, rq: RqId, se: EntId) -> bool;
    /// `yield_task_fair`.
    fn yield_entity(&self, f: &mut FairCore, rq: RqId, se: EntId);
}

impl FairCore {
    fn sync(&mut self, ctx: &Ctx) {
        self.now = ctx.now;
        self.tick_ns = ctx.tick_ns;
    }

    /// EEVDF's `avg_vruntime()`: the load-weighted mean vruntime of the
    /// queue, curr included; the queue's `min_vruntime` when empty.
    pub fn avg_vruntime(&self, rq: RqId) -> i64 {
        let base = self.rqs[rq].min_vruntime;
        let (sum, load) = self.vruntime_sums(rq);
        if load == 0 {
            return base;
        }
        // Round towards minus infinity, as the kernel's div_s64 of a
        // negative sum is fixed up to do.
        base + sum.div_euclid(load) as i64
    }

    /// `cfs_rq->avg_vruntime` and `avg_load`: the sum of w_i * (v_i -
    /// min_vruntime) and of w_i over the queue, curr included.
    pub fn vruntime_sums(&self, rq: RqId) -> (i128, i128) {
        let base = self.rqs[rq].min_vruntime;
        self.entities(rq).fold((0, 0), |(sum, load), e| {
            let w = self.ents[e].weight as i128;
            (sum + w * (self.ents[e].vruntime - base) as i128, load + w)
        })
    }

    /// The lag of a task's entity against its queue (`V - v_i`).
    pub fn lag(&self, t: TaskId) -> Option<i64> {
        let se = *self.task_se.get(t.idx())?;
        let e = &self.ents[se];
        e.on_rq.then(|| self.avg_vruntime(e.rq) - e.vruntime)
    }

    fn new_rq(&mut self, cpu: usize, se: Option<EntId>, tg: Option<usize>) -> RqId {
        self.rqs.push(Rq {
            cpu,
            se,
            tg,
            ..Default::default()
        });
        self.rq_avgs.push(RqAvg::default());
        self.rqs.len() - 1
    }

    fn new_ent(&mut self, weight: u64, rq: RqId) -> EntId {
        self.ents.push(Entity {
            weight,
            rq,
            ..Default::default()
        });
        self.avgs.push(SchedAvg::default());
        self.ents.len() - 1
    }

    /// The entity's parent (the group entity of its queue), if any.
    pub fn parent(&self, se: EntId) -> Option<EntId> {
        self.rqs[self.ents[se].rq].se
    }

    fn depth(&self, mut se: EntId) -> usize {
        let mut d = 0;
        while let Some(p) = self.parent(se) {
            d += 1;
            se = p;
        }
        d
    }

    /// The queue a task's entity belongs on, on `cpu`.
    fn task_rq(&self, ctx: &Ctx, t: TaskId, cpu: usize) -> RqId {
        match ctx.tasks[t.idx()].group {
            Some(g) => self.groups[g.0 as usize].rq[cpu],
            None => self.root[cpu],
        }
    }

    /// Sum of w_i over `rq`'s entities, curr included.
    pub fn entities(&self, rq: RqId) -> impl Iterator<Item = EntId> + '_ {
        let r = &self.rqs[rq];
        r.queue
            .iter()
            .copied()
            .chain(r.curr.filter(|&c| self.ents[c].on_rq))
    }

    /// `update_min_vruntime()`: follows the smallest of curr and queue,
    /// never going back.
    pub fn update_min_vruntime(&mut self, rq: RqId) {
        let r = &self.rqs[rq];
        let curr = r
            .curr
            .filter(|&c| self.ents[c].on_rq)
            .map(|c| self.ents[c].vruntime);
        let left = r.queue.iter().map(|&e| self.ents[e].vruntime).min();
        let v = match (curr, left) {
            (Some(c), Some(l)) => c.min(l),
            (Some(c), None) => c,
            (None, Some(l)) => l,
            (None, None) => return,
        };
        let r = &mut self.rqs[rq];
        r.min_vruntime = r.min_vruntime.max(v);
    }

    /// `update_curr()` of one queue: charges its running entity.
    fn update_curr_rq<P: FairPolicy>(&mut self, p: &P, rq: RqId) -> bool {
        let Some(se) = self.rqs[rq].curr else {
            return false;
        };
        let e = &mut self.ents[se];
        let delta = self.now.saturating_sub(e.exec_start);
        if delta == 0 {
            return false;
        }
        e.exec_start = self.now;
        e.sum_exec += delta;
        e.vruntime += calc_delta_fair(delta as i64, e.weight);
        self.update_min_vruntime(rq);
        p.after_update_curr(self, rq, se)
    }

    /// `enqueue_entity()`: charge `curr`, place, account the load (tracked
    /// and instantaneous), reweight the group entity that stands for `rq`.
    fn enqueue_entity<P: FairPolicy>(&mut self, p: &P, rq: RqId, se: EntId, how: Enqueue) {
        self.update_curr_rq(p, rq);
        p.place(self, rq, se, how);
        if self.load_tracking {
            self.enqueue_load_avg(rq, se, how == Enqueue::Wakeup);
        }
        self.seq += 1;
        let w = self.ents[se].weight;
        let e = &mut self.ents[se];
        e.on_rq = true;
        e.seq = self.seq;
        let r = &mut self.rqs[rq];
        r.load += w;
        r.nr_running += 1;
        if r.curr != Some(se) {
            r.queue.push(se);
        }
        if self.load_tracking {
            self.update_cfs_shares(p, rq);
        }
    }

    fn dequeue_entity<P: FairPolicy>(&mut self, p: &P, rq: RqId, se: EntId, how: Dequeue) {
        self.update_curr_rq(p, rq);
        if self.load_tracking {
            self.dequeue_load_avg(rq, se, how == Dequeue::Sleep);
        }
        // EEVDF takes the lag against an average that still counts `se`;
        // CFS normalises a migrating entity by the `min_vruntime` before
        // it moves (`dequeue_entity()` orders them so too).
        p.on_dequeue(self, rq, se, how);
        self.clear_next_buddy(rq, se);
        let w = self.ents[se].weight;
        let r = &mut self.rqs[rq];
        r.queue.retain(|&e| e != se);
        r.load -= w;
        r.nr_running -= 1;
        self.ents[se].on_rq = false;
        self.update_min_vruntime(rq);
        if self.load_tracking {
            self.update_cfs_shares(p, rq);
        }
    }

    /// Without load tracking: every CPU's entity of group `g` weighs the
    /// group's shares times that CPU's part of the group's instantaneous
    /// load, recomputed after each enqueue, dequeue and tick.
    fn update_shares_instant(&mut self, g: usize) {
        let grp = &self.groups[g];
        let total: u64 = grp.rq.iter().map(|&r| self.rqs[r].load).sum();
        for cpu in 0..self.ncpus {
            let (rq, se) = (self.groups[g].rq[cpu], self.groups[g].se[cpu]);
            let shares = self.groups[g].shares;
            let w = (shares * self.rqs[rq].load)
                .checked_div(total)
                .map_or(shares, |w| w.clamp(MIN_SHARES, shares));
            let old = self.ents[se].weight;
            if old == w {
                continue;
            }
            if self.ents[se].on_rq {
                let parent = self.ents[se].rq;
                self.rqs[parent].load = self.rqs[parent].load - old + w;
            }
            self.ents[se].weight = w;
        }
    }

    /// `clear_buddies()` for the next buddy: if `se` is `rq`'s next buddy,
    /// it and the ancestors that point to it stop being one
    /// (`__clear_buddies_next()`).
    fn clear_next_buddy(&mut self, rq: RqId, se: EntId) {
        if self.rqs[rq].next != Some(se) {
            return;
        }
        let mut e = Some(se);
        while let Some(s) = e {
            let q = self.ents[s].rq;
            if self.rqs[q].next != Some(s) {
                break;
            }
            self.rqs[q].next = None;
            e = self.rqs[q].se;
        }
    }

    /// `set_next_buddy()`: `se` and its ancestors become their queues'
    /// next buddies.
    fn set_next_buddy(&mut self, se: EntId) {
        let mut e = Some(se);
        while let Some(s) = e {
            let q = self.ents[s].rq;
            self.rqs[q].next = Some(s);
            e = self.rqs[q].se;
        }
    }

    /// `update_cfs_shares()` / `calc_cfs_shares()` (3.x): the weight of
    /// the group entity that stands for `rq` is the group's shares times
    /// this queue's instantaneous load over the group's tracked load
    /// (`tg->load_avg`, with this queue's own part taken instantaneously:
    /// `calc_tg_weight()`), clamped to `MIN_SHARES..=shares`. Threads of
    /// the group that ran or waited recently on other CPUs, blocked ones
    /// included, keep that total up; a thread that wakes alone on a CPU
    /// thus gets a small entity.
    fn update_cfs_shares<P: FairPolicy>(&mut self, p: &P, rq: RqId) {
        let (Some(g), Some(se)) = (self.rqs[rq].tg, self.rqs[rq].se) else {
            return;
        };
        let r = &self.rqs[rq];
        let shares = self.groups[g].shares;
        let tg_weight =
            (self.groups[g].load_avg + r.load).saturating_sub(self.rq_avgs[rq].tg_load_contrib);
        let w = (shares * r.load)
            .checked_div(tg_weight)
            .unwrap_or(shares * r.load)
            .clamp(MIN_SHARES, shares);
        let old = self.ents[se].weight;
        if old == w {
            return;
        }
        // `reweight_entity()`: charge the parent's curr at the old weight.
        let parent = self.ents[se].rq;
        if self.ents[se].on_rq {
            if self.rqs[parent].curr == Some(se) {
                self.update_curr_rq(p, parent);
            }
            self.rqs[parent].load = self.rqs[parent].load - old + w;
        }
        self.ents[se].weight = w;
    }

    /// `update_entity_load_avg()`: accrue `se`'s runnable history; past a
    /// period boundary, recompute its contribution and, with `to_rq`,
    /// carry the change into its queue's runnable or blocked load.
    fn update_entity_load_avg(&mut self, se: EntId, to_rq: bool) {
        let on = self.ents[se].on_rq;
        if !self.avgs[se].update(self.now, on) {
            return;
        }
        let old = self.avgs[se].contrib;
        let new = match self.ents[se].my_rq {
            None => self.avgs[se].task_contrib(self.ents[se].weight),
            Some(my) => self.group_entity_contrib(se, my),
        };
        self.avgs[se].contrib = new;
        if !to_rq {
            return;
        }
        let a = &mut self.rq_avgs[self.ents[se].rq];
        if on {
            a.runnable_load_avg = (a.runnable_load_avg + new).saturating_sub(old);
        } else if new < old {
            a.subtract_blocked(old - new);
        } else {
            a.blocked_load_avg += new - old;
        }
    }

    /// `__update_entity_load_avg_contrib()` of a group entity: push its
    /// runnable share into the group's `runnable_avg`, then its part of
    /// the group's load.
    fn group_entity_contrib(&mut self, se: EntId, my: RqId) -> u64 {
        let g = self.rqs[my].tg.expect("a group entity's queue has a group");
        let d = pelt::tg_runnable_delta(&self.avgs[se], &mut self.rq_avgs[my]);
        let grp = &mut self.groups[g];
        grp.runnable_avg = grp.runnable_avg.saturating_add_signed(d);
        let rq_tg = self.rq_avgs[my].tg_load_contrib;
        pelt::group_contrib(rq_tg, grp.shares, grp.load_avg, grp.runnable_avg)
    }

    /// `update_cfs_rq_blocked_load()`: decay the blocked load by the
    /// milliseconds passed, then update the group's `load_avg`.
    fn update_rq_blocked_load(&mut self, rq: RqId, force: bool) {
        if !self.rq_avgs[rq].decay_blocked(self.now, force) {
            return;
        }
        if let Some(g) = self.rqs[rq].tg {
            let d = self.rq_avgs[rq].tg_load_delta(force);
            let grp = &mut self.groups[g];
            grp.load_avg = grp.load_avg.saturating_add_signed(d);
        }
    }

    /// `enqueue_entity_load_avg()`: a woken entity's blocked contribution
    /// (decayed while it slept) becomes runnable load; a new or moved one
    /// starts from its history.
    fn enqueue_load_avg(&mut self, rq: RqId, se: EntId, wakeup: bool) {
        let mut wakeup = wakeup;
        match self.avgs[se].decay {
            pelt::Decay::Synced => {
                self.avgs[se].last = self.now;
                wakeup = false;
            }
            pelt::Decay::Moved => {
                // Woken on another CPU: the sleep counts as not runnable.
                self.update_entity_load_avg(se, false);
                wakeup = false;
            }
            pelt::Decay::Blocked(at) => {
                let decays = self.rq_avgs[rq].decay_counter.saturating_sub(at);
                let a = &mut self.avgs[se];
                a.contrib = pelt::decay_load(a.contrib, decays);
            }
        }
        self.avgs[se].decay = pelt::Decay::Synced;
        if wakeup {
            let c = self.avgs[se].contrib;
            self.rq_avgs[rq].subtract_blocked(c);
            self.update_entity_load_avg(se, false);
        }
        self.rq_avgs[rq].runnable_load_avg += self.avgs[se].contrib;
        self.update_rq_blocked_load(rq, !wakeup);
    }

    /// `dequeue_entity_load_avg()`: a sleeping entity's contribution moves
    /// to its queue's blocked load, where it decays.
    fn dequeue_load_avg(&mut self, rq: RqId, se: EntId, sleep: bool) {
        self.update_entity_load_avg(se, true);
        self.update_rq_blocked_load(rq, !sleep);
        let c = self.avgs[se].contrib;
        let a = &mut self.rq_avgs[rq];
        a.runnable_load_avg = a.runnable_load_avg.saturating_sub(c);
        if sleep {
            a.blocked_load_avg += c;
            self.avgs[se].decay = pelt::Decay::Blocked(a.decay_counter);
        }
    }

    /// `migrate_task_rq_fair()`: a blocked task about to wake on another
    /// CPU takes its (decayed) contribution out of its old queue's blocked
    /// load (`removed_load`).
    fn migrate_blocked(&mut self, old: RqId, se: EntId) {
        if !self.load_tracking {
            return;
        }
        if let pelt::Decay::Blocked(at) = self.avgs[se].decay {
            let decays = self.rq_avgs[old].decay_counter.saturating_sub(at);
            let a = &mut self.avgs[se];
            a.contrib = pelt::decay_load(a.contrib, decays);
            a.decay = pelt::Decay::Moved;
            self.rq_avgs[old].removed_load += a.contrib;
        }
    }

    /// `update_blocked_averages()` of one CPU (before each balancing
    /// pass): decay every group queue's blocked load and refresh the
    /// group entities' contributions.
    fn update_blocked_averages(&mut self, cpu: usize) {
        if !self.load_tracking {
            return;
        }
        self.update_rq_blocked_load(self.root[cpu], true);
        for g in 0..self.groups.len() {
            let (rq, se) = (self.groups[g].rq[cpu], self.groups[g].se[cpu]);
            self.update_rq_blocked_load(rq, true);
            self.update_entity_load_avg(se, false);
        }
    }

    /// `set_next_entity()`: `se` leaves `rq`'s queue to run; returns its
    /// own queue if it is a group's entity.
    fn set_next_entity(&mut self, rq: RqId, se: EntId) -> Option<RqId> {
        self.rqs[rq].queue.retain(|&e| e != se);
        self.rqs[rq].curr = Some(se);
        let e = &mut self.ents[se];
        e.exec_start = self.now;
        e.prev_sum_exec = e.sum_exec;
        e.my_rq
    }

    /// The tracked load a task puts on its CPU's root queue
    /// (`task_h_load()` with `update_cfs_rq_h_load()`, 3.x): its
    /// contribution over its queue's runnable load, times that queue's
    /// `h_load` (the root's runnable load, scaled down each level by the
    /// group entity's part of its parent's).
    pub fn task_h_load(&self, t: TaskId) -> u64 {
        if !self.load_tracking {
            return self.task_h_weight(t);
        }
        let se = self.task_se[t.idx()];
        let mut frac = (self.avgs[se].contrib as u128, 1u128);
        let mut e = se;
        loop {
            let rq = self.ents[e].rq;
            frac.1 *= self.rq_avgs[rq].runnable_load_avg as u128 + 1;
            match self.rqs[rq].se {
                Some(p) => {
                    frac.0 *= self.avgs[p].contrib as u128;
                    e = p;
                }
                None => {
                    frac.0 *= self.rq_avgs[rq].runnable_load_avg as u128;
                    break;
                }
            }
        }
        (frac.0 / frac.1) as u64
    }

    /// Without load tracking: the task's weight scaled down each level
    /// by its group entity's part of the parent queue's weight.
    fn task_h_weight(&self, t: TaskId) -> u64 {
        let mut se = self.task_se[t.idx()];
        let mut load = self.ents[se].weight as u128;
        while let Some(p) = self.parent(se) {
            let rq_load = self.rqs[self.ents[se].rq].load.max(1) as u128;
            load = load * self.ents[p].weight as u128 / rq_load;
            se = p;
        }
        load as u64
    }

    /// `weighted_cpuload()` (3.x): a CPU's tracked runnable load, or its
    /// instantaneous weight without load tracking.
    pub fn cpu_load(&self, cpu: usize) -> u64 {
        let root = self.root[cpu];
        if self.load_tracking {
            self.rq_avgs[root].runnable_load_avg
        } else {
            self.rqs[root].load
        }
    }
}

/// The deepest entity chain: a task, its group's entity (groups hang off
/// the root here, one level as libvirt's VM groups), and room to spare.
const MAX_DEPTH: usize = 4;

/// A chain of entities on the stack (the hot paths walk one per call).
#[derive(Clone, Copy)]
struct Chain {
    ents: [EntId; MAX_DEPTH],
    len: usize,
}

impl std::ops::Deref for Chain {
    type Target = [EntId];
    fn deref(&self) -> &[EntId] {
        &self.ents[..self.len]
    }
}

/// The fair scheduling class over a policy.
pub struct Fair<P: FairPolicy> {
    pub core: FairCore,
    pub policy: P,
}

impl<P: FairPolicy> Fair<P> {
    pub fn new(mut policy: P, cpus: usize) -> Self {
        policy.configure(cpus);
        let mut core = FairCore {
            ncpus: cpus,
            nr_balance_failed: vec![0; cpus],
            ..Default::default()
        };
        for cpu in 0..cpus {
            let rq = core.new_rq(cpu, None, None);
            core.root.push(rq);
        }
        Fair { core, policy }
    }

    /// A task's entity and its ancestors, bottom up.
    fn chain(&self, t: TaskId) -> Chain {
        let mut c = Chain {
            ents: [0; MAX_DEPTH],
            len: 1,
        };
        c.ents[0] = self.core.task_se[t.idx()];
        while let Some(p) = self.core.parent(c.ents[c.len - 1]) {
            c.ents[c.len] = p;
            c.len += 1;
        }
        c
    }

    /// Picks the queued task `t` and its ancestors on `cpu`, whatever
    /// their vruntime: the next buddy (`cfs_rq->next`, `set_next_buddy()`)
    /// honoured unconditionally, for variants whose wake-up preemption
    /// must hand the CPU to the woken task. `None` (nothing picked) if `t`
    /// is not queued on `cpu`.
    pub fn pick_task(&mut self, ctx: &Ctx, cpu: usize, t: TaskId) -> Option<TaskId> {
        self.core.sync(ctx);
        let se = self.core.task_se[t.idx()];
        let e = &self.core.ents[se];
        if !e.on_rq || self.core.rqs[e.rq].cpu != cpu || ctx.curr[cpu].is_some() {
            return None;
        }
        let chain = self.chain(t);
        for &se in chain.iter().rev() {
            let rq = self.core.ents[se].rq;
            self.core.set_next_entity(rq, se);
        }
        Some(t)
    }

    /// The second loop of `enqueue_task_fair()` / `dequeue_task_fair()`:
    /// the ancestors left on their queues count the task, reweight, and
    /// accrue their load.
    fn update_ancestors(&mut self, chain: &[EntId], add: bool) {
        for &se in chain {
            let rq = self.core.ents[se].rq;
            let h = &mut self.core.rqs[rq].h_nr_running;
            *h = if add { *h + 1 } else { *h - 1 };
            if self.core.load_tracking {
                self.core.update_cfs_shares(&self.policy, rq);
                self.core.update_entity_load_avg(se, true);
            }
        }
    }

    /// Without load tracking, the groups along `chain` are reweighted
    /// after the whole enqueue, dequeue or tick.
    fn refresh_shares_instant(&mut self, chain: &[EntId]) {
        if self.core.load_tracking {
            return;
        }
        for &se in chain {
            if let Some(g) = self.core.rqs[self.core.ents[se].rq].tg {
                self.core.update_shares_instant(g);
            }
        }
    }
}

impl<P: FairPolicy> SchedClass for Fair<P> {
    fn name(&self) -> &'static str {
        self.policy.name()
    }

    fn task_new(&mut self, ctx: &Ctx, t: TaskId) {
        let cpu = ctx.tasks[t.idx()].cpu;
        let rq = self.core.task_rq(ctx, t, cpu);
        let se = self.core.new_ent(ctx.tasks[t.idx()].weight, rq);
        self.core.ents[se].task = Some(t);
        self.core.avgs[se] = SchedAvg::new_task(ctx.now);
        self.core.task_se.push(se);
    }

    fn group_new(&mut self, g: GroupId, shares: u64) {
        let idx = g.0 as usize;
        assert_eq!(idx, self.core.groups.len(), "groups are made in order");
        let mut grp = Group {
            shares,
            rq: vec![],
            se: vec![],
            load_avg: 0,
            runnable_avg: 0,
        };
        for cpu in 0..self.core.ncpus {
            let root = self.core.root[cpu];
            let se = self.core.new_ent(shares, root);
            let rq = self.core.new_rq(cpu, Some(se), Some(idx));
            self.core.ents[se].my_rq = Some(rq);
            grp.rq.push(rq);
            grp.se.push(se);
        }
        self.core.groups.push(grp);
    }

    fn select_task_rq(&mut self, ctx: &Ctx, _t: TaskId, prev: usize) -> usize {
        balance::select_idle_sibling(ctx, prev)
    }

    fn enqueue_task(&mut self, ctx: &Ctx, cpu: usize, t: TaskId, how: Enqueue) {
        self.core.sync(ctx);
        let se = self.core.task_se[t.idx()];
        let (old, new) = (self.core.ents[se].rq, self.core.task_rq(ctx, t, cpu));
        if how == Enqueue::Wakeup && old != new {
            // `task_waking_fair()` and `ENQUEUE_WAKING`: a task that wakes
            // on another CPU keeps its vruntime relative to the queue's
            // `min_vruntime`, not its absolute value.
            let shift = self.core.rqs[new].min_vruntime - self.core.rqs[old].min_vruntime;
            self.core.ents[se].vruntime += shift;
            self.core.migrate_blocked(old, se);
        }
        self.core.ents[se].rq = new;
        self.core.ents[se].weight = ctx.tasks[t.idx()].weight;
        let chain = self.chain(t);
        let mut how = how;
        let mut level = 0;
        while level < chain.len() && !self.core.ents[chain[level]].on_rq {
            let se = chain[level];
            let rq = self.core.ents[se].rq;
            self.core.enqueue_entity(&self.policy, rq, se, how);
            self.core.rqs[rq].h_nr_running += 1;
            how = Enqueue::Wakeup;
            level += 1;
        }
        self.update_ancestors(&chain[level..], true);
        self.refresh_shares_instant(&chain);
    }

    fn dequeue_task(&mut self, ctx: &Ctx, _cpu: usize, t: TaskId, how: Dequeue) {
        self.core.sync(ctx);
        let chain = self.chain(t);
        let mut how = how;
        let mut level = 0;
        while level < chain.len() {
            let se = chain[level];
            let rq = self.core.ents[se].rq;
            self.core.dequeue_entity(&self.policy, rq, se, how);
            self.core.rqs[rq].h_nr_running -= 1;
            level += 1;
            // A parent that still has other entities stays queued.
            if self.core.rqs[rq].load > 0 {
                break;
            }
            how = Dequeue::Sleep;
        }
        self.update_ancestors(&chain[level..], false);
        self.refresh_shares_instant(&chain);
    }

    fn wakeup_preempt(&mut self, ctx: &Ctx, cpu: usize, t: TaskId) -> bool {
        self.core.sync(ctx);
        let Some(c) = ctx.curr[cpu] else {
            return true;
        };
        // find_matching_se(): bring both to the same queue.
        let (mut a, mut b) = (self.core.task_se[c.idx()], self.core.task_se[t.idx()]);
        let (mut da, mut db) = (self.core.depth(a), self.core.depth(b));
        while da > db {
            a = self.core.parent(a).unwrap();
            da -= 1;
        }
        while db > da {
            b = self.core.parent(b).unwrap();
            db -= 1;
        }
        while self.core.ents[a].rq != self.core.ents[b].rq {
            a = self.core.parent(a).unwrap();
            b = self.core.parent(b).unwrap();
        }
        if a == b {
            return false;
        }
        let rq = self.core.ents[a].rq;
        self.core.update_curr_rq(&self.policy, rq);
        let preempt = self.policy.wakeup_preempt(&self.core, rq, a, b);
        if preempt && self.core.next_buddy {
            // "Bias pick_next to pick the sched entity that is triggering
            // this preemption" (3.x `check_preempt_wakeup()`).
            self.core.set_next_buddy(self.core.task_se[t.idx()]);
        }
        preempt
    }

    fn pick_next_task(&mut self, ctx: &Ctx, cpu: usize) -> Option<TaskId> {
        self.core.sync(ctx);
        let mut rq = self.core.root[cpu];
        loop {
            let se = self.policy.pick(&self.core, rq)?;
            self.core.clear_next_buddy(rq, se);
            match self.core.set_next_entity(rq, se) {
                Some(q) => rq = q,
                None => return self.core.ents[se].task,
            }
        }
    }

    fn put_prev_task(&mut self, ctx: &Ctx, _cpu: usize, t: TaskId) {
        self.core.sync(ctx);
        for &se in self.chain(t).iter() {
            let rq = self.core.ents[se].rq;
            if self.core.rqs[rq].curr != Some(se) {
                continue;
            }
            self.core.update_curr_rq(&self.policy, rq);
            if self.core.ents[se].on_rq {
                self.core.rqs[rq].queue.push(se);
                if self.core.load_tracking {
                    self.core.update_entity_load_avg(se, true);
                }
            }
            self.core.rqs[rq].curr = None;
        }
    }

    fn task_tick(&mut self, ctx: &Ctx, _cpu: usize, t: TaskId) -> bool {
        self.core.sync(ctx);
        let chain = self.chain(t);
        let mut resched = false;
        // `entity_tick()` at each level.
        for &se in chain.iter() {
            let rq = self.core.ents[se].rq;
            resched |= self.core.update_curr_rq(&self.policy, rq);
            if self.core.load_tracking {
                self.core.update_entity_load_avg(se, true);
                self.core.update_rq_blocked_load(rq, true);
                self.core.update_cfs_shares(&self.policy, rq);
            }
            if self.core.rqs[rq].nr_running > 1 {
                resched |= self.policy.tick_preempt(&self.core, rq, se);
            }
        }
        self.refresh_shares_instant(&chain);
        resched
    }

    fn yield_task(&mut self, ctx: &Ctx, _cpu: usize, t: TaskId) {
        self.core.sync(ctx);
        let se = self.core.task_se[t.idx()];
        let rq = self.core.ents[se].rq;
        self.core.update_curr_rq(&self.policy, rq);
        self.policy.yield_entity(&mut self.core, rq, se);
    }

    fn update_curr(&mut self, ctx: &Ctx, _cpu: usize, t: TaskId) -> bool {
        self.core.sync(ctx);
        let mut resched = false;
        for &se in self.chain(t).iter() {
            let rq = self.core.ents[se].rq;
            resched |= self.core.update_curr_rq(&self.policy, rq);
        }
        resched
    }

    fn has_queued(&self, ctx: &Ctx, cpu: usize) -> bool {
        let running = ctx.curr[cpu].is_some_and(|c| !ctx.tasks[c.idx()].policy.is_rt());
        self.core.rqs[self.core.root[cpu]].h_nr_running > running as usize
    }

    fn lag(&self, t: TaskId) -> Option<i64> {
        self.core.lag(t)
    }

    fn balance(&mut self, ctx: &Ctx, cpu: usize, why: Balance) -> Option<(TaskId, usize)> {
        self.core.sync(ctx);
        balance::find_task_to_pull(&mut self.core, ctx, cpu, why)
    }
}
