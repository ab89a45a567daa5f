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

use crate::class::{Balance, Ctx, Dequeue, Enqueue, SchedClass};
use crate::task::{GroupId, TaskId};
use crate::weights::{calc_delta_fair, MIN_SHARES};
use crate::Nanos;

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
}

/// A CPU cgroup (`struct task_group`).
#[derive(Clone, Debug)]
pub struct Group {
    pub shares: u64,
    pub rq: Vec<RqId>,
    pub se: Vec<EntId>,
}

/// The state CFS and EEVDF share.
#[derive(Default)]
pub struct FairCore {
    pub ents: Vec<Entity>,
    pub rqs: Vec<Rq>,
    pub root: Vec<RqId>,
    pub groups: Vec<Group>,
    pub task_se: Vec<EntId>,
    pub ncpus: usize,
    pub now: Nanos,
    pub tick_ns: Nanos,
    seq: u64,
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

    fn new_rq(&mut self, cpu: usize, se: Option<EntId>) -> RqId {
        self.rqs.push(Rq {
            cpu,
            se,
            ..Default::default()
        });
        self.rqs.len() - 1
    }

    fn new_ent(&mut self, weight: u64, rq: RqId) -> EntId {
        self.ents.push(Entity {
            weight,
            rq,
            ..Default::default()
        });
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

    fn enqueue_entity<P: FairPolicy>(&mut self, p: &P, rq: RqId, se: EntId, how: Enqueue) {
        self.update_curr_rq(p, rq);
        p.place(self, rq, se, how);
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
    }

    fn dequeue_entity<P: FairPolicy>(&mut self, p: &P, rq: RqId, se: EntId, how: Dequeue) {
        self.update_curr_rq(p, rq);
        // EEVDF takes the lag against an average that still counts `se`;
        // CFS normalises a migrating entity by the `min_vruntime` before
        // it moves (`dequeue_entity()` orders them so too).
        p.on_dequeue(self, rq, se, how);
        let w = self.ents[se].weight;
        let r = &mut self.rqs[rq];
        r.queue.retain(|&e| e != se);
        r.load -= w;
        r.nr_running -= 1;
        self.ents[se].on_rq = false;
        self.update_min_vruntime(rq);
    }

    /// `update_cfs_shares()` / `calc_cfs_shares()`: a group entity's weight
    /// on a CPU is the group's shares times that CPU's part of the group's
    /// load. (Linux 3.x uses tracked load averages; with busy loops and
    /// sleepers of short bursts the instantaneous weights used here give
    /// the same split.)
    fn update_shares(&mut self, g: usize) {
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

    fn group_of_rq(&self, rq: RqId) -> Option<usize> {
        let se = self.rqs[rq].se?;
        self.groups.iter().position(|g| g.se.contains(&se))
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

    /// The load a task puts on its CPU's root queue (`task_h_load`).
    pub fn task_h_load(&self, t: TaskId) -> u64 {
        let mut se = self.task_se[t.idx()];
        let mut load = self.ents[se].weight as u128;
        while let Some(p) = self.parent(se) {
            let rq_load = self.rqs[self.ents[se].rq].load.max(1) as u128;
            load = load * self.ents[p].weight as u128 / rq_load;
            se = p;
        }
        load as u64
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
            ..Default::default()
        };
        for cpu in 0..cpus {
            let rq = core.new_rq(cpu, None);
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

    fn refresh_shares(&mut self, chain: &[EntId]) {
        for &se in chain {
            if let Some(g) = self.core.group_of_rq(self.core.ents[se].rq) {
                self.core.update_shares(g);
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
        self.core.task_se.push(se);
    }

    fn group_new(&mut self, g: GroupId, shares: u64) {
        let idx = g.0 as usize;
        assert_eq!(idx, self.core.groups.len(), "groups are made in order");
        let mut grp = Group {
            shares,
            rq: vec![],
            se: vec![],
        };
        for cpu in 0..self.core.ncpus {
            let root = self.core.root[cpu];
            let se = self.core.new_ent(shares, root);
            let rq = self.core.new_rq(cpu, Some(se));
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
        let mut se = self.core.task_se[t.idx()];
        let (old, new) = (self.core.ents[se].rq, self.core.task_rq(ctx, t, cpu));
        if how == Enqueue::Wakeup && old != new {
            // `task_waking_fair()` and `ENQUEUE_WAKING`: a task that wakes
            // on another CPU keeps its vruntime relative to the queue's
            // `min_vruntime`, not its absolute value.
            let shift = self.core.rqs[new].min_vruntime - self.core.rqs[old].min_vruntime;
            self.core.ents[se].vruntime += shift;
        }
        self.core.ents[se].rq = new;
        self.core.ents[se].weight = ctx.tasks[t.idx()].weight;
        let mut how = how;
        loop {
            if self.core.ents[se].on_rq {
                break;
            }
            let rq = self.core.ents[se].rq;
            self.core.enqueue_entity(&self.policy, rq, se, how);
            how = Enqueue::Wakeup;
            match self.core.parent(se) {
                Some(p) => se = p,
                None => break,
            }
        }
        let chain = self.chain(t);
        for &e in chain.iter() {
            let rq = self.core.ents[e].rq;
            self.core.rqs[rq].h_nr_running += 1;
        }
        self.refresh_shares(&chain);
    }

    fn dequeue_task(&mut self, ctx: &Ctx, _cpu: usize, t: TaskId, how: Dequeue) {
        self.core.sync(ctx);
        let chain = self.chain(t);
        let mut how = how;
        for &se in chain.iter() {
            let rq = self.core.ents[se].rq;
            self.core.dequeue_entity(&self.policy, rq, se, how);
            if self.core.rqs[rq].load > 0 {
                break;
            }
            how = Dequeue::Sleep;
        }
        for &e in chain.iter() {
            let rq = self.core.ents[e].rq;
            self.core.rqs[rq].h_nr_running -= 1;
        }
        self.refresh_shares(&chain);
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
        self.policy.wakeup_preempt(&self.core, rq, a, b)
    }

    fn pick_next_task(&mut self, ctx: &Ctx, cpu: usize) -> Option<TaskId> {
        self.core.sync(ctx);
        let mut rq = self.core.root[cpu];
        loop {
            let se = self.policy.pick(&self.core, rq)?;
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
            }
            self.core.rqs[rq].curr = None;
        }
    }

    fn task_tick(&mut self, ctx: &Ctx, _cpu: usize, t: TaskId) -> bool {
        self.core.sync(ctx);
        let chain = self.chain(t);
        let mut resched = false;
        for &se in chain.iter() {
            let rq = self.core.ents[se].rq;
            resched |= self.core.update_curr_rq(&self.policy, rq);
            if self.core.rqs[rq].nr_running > 1 {
                resched |= self.policy.tick_preempt(&self.core, rq, se);
            }
        }
        self.refresh_shares(&chain);
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
        balance::find_task_to_pull(&self.core, ctx, cpu, why)
    }
}
