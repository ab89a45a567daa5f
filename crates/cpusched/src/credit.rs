//! The Xen credit scheduler ("credit1", xen/common/sched/credit.c; in Xen
//! 4.x before 4.12 xen/common/sched_credit.c), the vCPU scheduler of a
//! `hypervisor = "xen-pv"` machine. Its tasks are vCPUs (of Dom0 and of
//! every DomU); its groups are domains, each with a weight and a cap.
//!
//! - Each pCPU has a run queue ordered by priority, FIFO within one
//!   (`__runq_insert`): BOOST above UNDER above OVER; an empty queue is
//!   IDLE.
//! - A running vCPU burns [`CREDITS_PER_MSEC`] credits per millisecond
//!   (`burn_credits`). Every [`TSLICE`] the accounting (`csched_acct`)
//!   shares [`CREDITS_PER_TSLICE`] per pCPU among the active domains by
//!   weight, caps them, and sets each active vCPU's priority: UNDER with
//!   credit left, OVER without.
//! - Every [`TICK`] (`csched_tick` -> `csched_unit_acct`) the running vCPU
//!   is charged, becomes active if it was not, and loses BOOST.
//! - A vCPU woken from blocking while UNDER is BOOSTed
//!   (`csched_unit_wake`) and preempts a lower-priority running vCPU
//!   (`__runq_tickle`), but not before that one has run
//!   [`RATELIMIT`] (`csched_schedule`'s rate limit).
//! - A pCPU whose best local vCPU is OVER (or that has none) steals a
//!   higher-priority waiting vCPU from a busy peer (`csched_load_balance`,
//!   `csched_runq_steal`).
//! - A capped domain's vCPUs that overspent are parked (paused) until the
//!   accounting gives them credit again.
//!
//! Left out: soft and hard affinity (every vCPU may run anywhere), SMT
//! and socket-aware placement in `_csched_cpu_pick` (an idle pCPU is an
//! idle pCPU), the tick's migration of a running vCPU to an idler pCPU,
//! `vcpu_migration_delay` (0 by default, so never cache-hot), tasklets,
//! and yield's placement behind one lower-priority vCPU (a yield is a
//! plain reschedule here).

use crate::class::{Ctx, Dequeue, Enqueue, SchedClass};
use crate::task::{GroupId, TaskId, TaskState};
use crate::{Nanos, MS, US};

/// `CSCHED_DEFAULT_WEIGHT` (credit.c): a domain's weight unless set.
pub const DEFAULT_WEIGHT: u64 = 256;
/// `CSCHED_DEFAULT_TSLICE_MS` (credit.c): 30 ms, the time slice and the
/// accounting period (`csched_acct`'s `master_ticker`).
pub const TSLICE: Nanos = 30 * MS;
/// `CSCHED_TICKS_PER_TSLICE` (credit.c): 3 ticks per slice.
pub const TICKS_PER_TSLICE: u64 = 3;
/// `tick_period_us` = tslice / ticks per tslice (`__csched_set_tslice`):
/// 10 ms, the per-pCPU `ticker` running `csched_tick`.
pub const TICK: Nanos = TSLICE / TICKS_PER_TSLICE;
/// The tick as a kernel HZ for the model's periodic tick.
pub const TICK_HZ: u32 = (1_000_000_000 / TICK) as u32;
/// `CSCHED_CREDITS_PER_MSEC` (credit.c): 10.
pub const CREDITS_PER_MSEC: i64 = 10;
/// `credits_per_tslice` = `CSCHED_CREDITS_PER_MSEC` x tslice in ms
/// (`__csched_set_tslice`): 300; also the bound on a vCPU's credit either
/// way (`csched_acct`).
pub const CREDITS_PER_TSLICE: i64 = CREDITS_PER_MSEC * (TSLICE / MS) as i64;
/// `sched_ratelimit_us` default `SCHED_DEFAULT_RATELIMIT_US` = 1000
/// (xen/common/sched/private.h, the `sched_ratelimit_us` boot parameter of
/// schedule.c): a running vCPU is not switched out before 1 ms.
pub const RATELIMIT: Nanos = 1_000 * US;
/// `CSCHED_MIN_TIMER` = `XEN_SYSCTL_SCHED_RATELIMIT_MIN` = 100 us
/// (xen/include/public/sysctl.h): the shortest timer `csched_schedule`
/// sets.
pub const MIN_TIMER: Nanos = 100 * US;

/// `CSCHED_PRI_TS_BOOST` (credit.c): a time-share vCPU that just woke.
pub const PRI_BOOST: i8 = 0;
/// `CSCHED_PRI_TS_UNDER`: with credits.
pub const PRI_UNDER: i8 = -1;
/// `CSCHED_PRI_TS_OVER`: without.
pub const PRI_OVER: i8 = -2;
/// `CSCHED_PRI_IDLE`: the idle vCPU.
pub const PRI_IDLE: i8 = -64;

/// What a credit scheduler does beyond Xen's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreditOptions {
    /// BOOST a vCPU woken while UNDER (Xen always does; off is the
    /// variant without boost, for comparison).
    pub boost: bool,
    /// `sched_ratelimit_us` (0: no rate limit).
    pub ratelimit: Nanos,
}

impl Default for CreditOptions {
    fn default() -> Self {
        CreditOptions {
            boost: true,
            ratelimit: RATELIMIT,
        }
    }
}

/// `struct csched_unit`.
#[derive(Clone, Debug)]
struct Unit {
    dom: usize,
    pri: i8,
    credit: i64,
    /// Nanoseconds x credits/ms not yet a whole credit (`residual`).
    residual: u64,
    /// Charged up to here (`start_time`).
    charged_to: Nanos,
    /// On its domain's active list (earning credit).
    active: bool,
    /// `CSCHED_FLAG_UNIT_PARKED`: paused by its domain's cap.
    parked: bool,
    queued: bool,
    /// The pCPU it runs or waits on.
    cpu: usize,
}

/// `struct csched_dom`.
#[derive(Clone, Debug)]
struct Dom {
    weight: u64,
    /// Percent of one pCPU; 0: uncapped.
    cap: u32,
    active_units: u64,
}

/// Per-pCPU state (`struct csched_pcpu` and the schedule timer).
#[derive(Clone, Debug, Default)]
struct Pcpu {
    runq: Vec<TaskId>,
    /// When the running vCPU started running (`state_entry_time`).
    run_start: Nanos,
    /// The vCPU that ran last, to tell a continuation from a switch.
    last: Option<TaskId>,
    /// The schedule timer: end of the slice or of the rate limit.
    timer: Option<Nanos>,
    /// The accounting epoch its queue was last sorted in.
    sorted: u64,
}

pub struct Credit {
    pub opts: CreditOptions,
    units: Vec<Unit>,
    /// Domain 0 holds tasks of no group; group `g` is domain `g + 1`.
    doms: Vec<Dom>,
    /// `prv->active_sdom`, head first.
    active_doms: Vec<usize>,
    pcpus: Vec<Pcpu>,
    /// `prv->weight`: the weights of the active vCPUs' domains.
    weight_total: u64,
    credit_balance: i64,
    next_acct: Nanos,
    /// `prv->runq_sort`.
    epoch: u64,
    /// `prv->balance_bias`: the peer to look at first when stealing.
    balance_bias: usize,
}

impl Credit {
    pub fn new(cpus: usize, opts: CreditOptions) -> Credit {
        Credit {
            opts,
            units: Vec::new(),
            doms: vec![Dom {
                weight: DEFAULT_WEIGHT,
                cap: 0,
                active_units: 0,
            }],
            active_doms: Vec::new(),
            pcpus: vec![Pcpu::default(); cpus],
            weight_total: 0,
            credit_balance: 0,
            next_acct: TSLICE,
            epoch: 0,
            balance_bias: 0,
        }
    }

    /// A vCPU's priority (for tests and reports).
    pub fn priority(&self, t: TaskId) -> i8 {
        self.units[t.idx()].pri
    }

    /// A vCPU's credit (for tests and reports).
    pub fn credit(&self, t: TaskId) -> i64 {
        self.units[t.idx()].credit
    }

    fn dom_mut(&mut self, d: usize) -> &mut Dom {
        while self.doms.len() <= d {
            self.doms.push(Dom {
                weight: DEFAULT_WEIGHT,
                cap: 0,
                active_units: 0,
            });
        }
        &mut self.doms[d]
    }

    /// `burn_credits`: every nanosecond run since the last charge, once.
    fn burn(&mut self, t: TaskId, now: Nanos) {
        let u = &mut self.units[t.idx()];
        if now <= u.charged_to {
            return;
        }
        let val = (now - u.charged_to) * CREDITS_PER_MSEC as u64 + u.residual;
        u.credit -= (val / MS) as i64;
        u.residual = val % MS;
        u.charged_to = now;
    }

    /// `__runq_insert`: behind every vCPU of the same or higher priority.
    fn runq_insert(&mut self, cpu: usize, t: TaskId) {
        let pri = self.units[t.idx()].pri;
        let q = &self.pcpus[cpu].runq;
        let at = q
            .iter()
            .position(|o| self.units[o.idx()].pri < pri)
            .unwrap_or(q.len());
        self.pcpus[cpu].runq.insert(at, t);
        let u = &mut self.units[t.idx()];
        u.queued = true;
        u.cpu = cpu;
    }

    fn runq_remove(&mut self, t: TaskId) {
        let u = &mut self.units[t.idx()];
        if !u.queued {
            return;
        }
        u.queued = false;
        let q = &mut self.pcpus[u.cpu].runq;
        if let Some(i) = q.iter().position(|&o| o == t) {
            q.remove(i);
        }
    }

    /// `__csched_unit_acct_start`.
    fn acct_start(&mut self, t: TaskId) {
        let d = self.units[t.idx()].dom;
        if self.units[t.idx()].active {
            return;
        }
        self.units[t.idx()].active = true;
        self.weight_total += self.doms[d].weight;
        self.doms[d].active_units += 1;
        if self.doms[d].active_units == 1 {
            self.active_doms.insert(0, d);
        }
    }

    /// `__csched_unit_acct_stop_locked`.
    fn acct_stop(&mut self, t: TaskId) {
        let d = self.units[t.idx()].dom;
        self.units[t.idx()].active = false;
        self.weight_total -= self.doms[d].weight;
        self.doms[d].active_units -= 1;
        if self.doms[d].active_units == 0 {
            self.active_doms.retain(|&o| o != d);
        }
    }

    /// `csched_acct`: shares the period's credits among the active
    /// domains. Returns the vCPUs it unparked.
    fn acct(&mut self) -> Vec<TaskId> {
        let mut unparked = Vec::new();
        let weight_total = self.weight_total as i64;
        let old_balance = self.credit_balance;
        let mut credit_total = CREDITS_PER_TSLICE * self.pcpus.len() as i64;
        // Converge balance towards 0 when it drops negative.
        if old_balance < 0 {
            credit_total -= old_balance;
        }
        if weight_total == 0 {
            self.credit_balance = 0;
            return unparked;
        }
        let mut weight_left = weight_total;
        let mut credit_balance = 0;
        let mut credit_xtra = false;
        for d in self.active_doms.clone() {
            let n = self.doms[d].active_units as i64;
            let w = self.doms[d].weight as i64;
            weight_left -= w * n;
            // At most, a domain can use credits to run all its active
            // vCPUs for one period, more only while the balance is
            // negative.
            let mut credit_peak = n * CREDITS_PER_TSLICE;
            if old_balance < 0 {
                credit_peak += (-old_balance * w * n + weight_total - 1) / weight_total;
            }
            let cap = self.doms[d].cap as i64;
            let mut credit_cap = 0;
            if cap != 0 {
                credit_cap = (cap * CREDITS_PER_TSLICE + 99) / 100;
                credit_peak = credit_peak.min(credit_cap);
                credit_cap = (credit_cap + n - 1) / n;
            }
            let mut credit_fair = (credit_total * w * n + weight_total - 1) / weight_total;
            if credit_fair < credit_peak {
                credit_xtra = true;
            } else {
                // Give other domains a chance at unused credits.
                if weight_left != 0 {
                    credit_total += ((credit_fair - credit_peak) * weight_total + weight_left - 1)
                        / weight_left;
                }
                if credit_xtra {
                    self.active_doms.retain(|&o| o != d);
                    self.active_doms.insert(0, d);
                }
                credit_fair = credit_peak;
            }
            let per_unit = (credit_fair + n - 1) / n;
            credit_balance += self.credit_units(d, per_unit, cap, credit_cap, &mut unparked);
        }
        self.credit_balance = credit_balance;
        self.epoch += 1;
        unparked
    }

    /// `csched_acct`'s loop over a domain's active vCPUs: add the share,
    /// recompute the priority, park or unpark, bound the credit. Returns
    /// the credits they hold.
    fn credit_units(
        &mut self,
        d: usize,
        share: i64,
        cap: i64,
        credit_cap: i64,
        unparked: &mut Vec<TaskId>,
    ) -> i64 {
        let mut held = 0;
        for i in 0..self.units.len() {
            if self.units[i].dom != d || !self.units[i].active {
                continue;
            }
            let t = TaskId(i as u32);
            self.units[i].credit += share;
            let credit = self.units[i].credit;
            if credit < 0 {
                self.units[i].pri = PRI_OVER;
                if cap != 0 && credit < -credit_cap && !self.units[i].parked {
                    self.units[i].parked = true;
                    self.runq_remove(t);
                }
                self.units[i].credit = credit.max(-CREDITS_PER_TSLICE);
            } else {
                self.units[i].pri = PRI_UNDER;
                if self.units[i].parked {
                    // Unpaused without BOOST: the flag goes after the wake.
                    self.units[i].parked = false;
                    unparked.push(t);
                }
                if credit > CREDITS_PER_TSLICE {
                    // Stops earning; half its credit, so it starts a
                    // little ahead when it is active again.
                    self.acct_stop(t);
                    self.units[i].credit = credit / 2;
                }
            }
            held += self.units[i].credit;
        }
        held
    }

    /// `csched_runq_sort`: once per accounting period, UNDER (and BOOST)
    /// vCPUs move ahead of OVER ones, in their order.
    fn runq_sort(&mut self, cpu: usize) {
        if self.pcpus[cpu].sorted == self.epoch {
            return;
        }
        self.pcpus[cpu].sorted = self.epoch;
        let units = &self.units;
        self.pcpus[cpu]
            .runq
            .sort_by_key(|t| units[t.idx()].pri < PRI_UNDER);
    }

    /// `csched_load_balance` / `csched_runq_steal`: the first waiting vCPU
    /// of strictly higher priority than `pri` on a busy peer with more
    /// than one runnable vCPU, peers taken from the balance bias on.
    fn steal(&mut self, ctx: &Ctx, cpu: usize, pri: i8) -> Option<TaskId> {
        let n = self.pcpus.len();
        for k in 0..n {
            let peer = (self.balance_bias + k) % n;
            if peer == cpu || ctx.idle(peer) || self.pcpus[peer].runq.is_empty() {
                continue;
            }
            let head = self.pcpus[peer].runq[0];
            if self.units[head.idx()].pri <= pri {
                continue;
            }
            self.runq_remove(head);
            self.balance_bias = peer;
            return Some(head);
        }
        None
    }

    fn parked_or_blocked(&self, ctx: &Ctx, t: TaskId) -> bool {
        self.units[t.idx()].parked || ctx.tasks[t.idx()].state != TaskState::Runnable
    }
}

impl SchedClass for Credit {
    fn name(&self) -> &'static str {
        if self.opts.boost {
            "credit"
        } else {
            "credit-noboost"
        }
    }

    fn task_new(&mut self, ctx: &Ctx, t: TaskId) {
        let dom = ctx.tasks[t.idx()].group.map_or(0, |g| g.0 as usize + 1);
        self.dom_mut(dom);
        let i = t.idx();
        if self.units.len() <= i {
            self.units.resize(
                i + 1,
                Unit {
                    dom: 0,
                    pri: PRI_UNDER,
                    credit: 0,
                    residual: 0,
                    charged_to: 0,
                    active: false,
                    parked: false,
                    queued: false,
                    cpu: 0,
                },
            );
        }
        self.units[i].dom = dom;
        self.units[i].cpu = ctx.tasks[i].cpu;
    }

    fn group_new(&mut self, g: GroupId, shares: u64) {
        self.dom_mut(g.0 as usize + 1).weight = shares.max(1);
    }

    fn group_cap(&mut self, g: GroupId, cap_pct: u32) {
        self.dom_mut(g.0 as usize + 1).cap = cap_pct;
    }

    /// `_csched_cpu_pick`, without topology: the vCPU's own pCPU if it is
    /// idle, else an idle one after it, else its own.
    fn select_task_rq(&mut self, ctx: &Ctx, _t: TaskId, prev: usize) -> usize {
        let n = ctx.nr_cpus();
        (0..n)
            .map(|k| (prev + k) % n)
            .find(|&c| ctx.idle(c) && self.pcpus[c].runq.is_empty())
            .unwrap_or(prev)
    }

    fn enqueue_task(&mut self, _ctx: &Ctx, cpu: usize, t: TaskId, how: Enqueue) {
        let u = &mut self.units[t.idx()];
        u.cpu = cpu;
        // `csched_unit_wake`: a vCPU waking from blocking (not migrating,
        // not unparking) while UNDER is boosted.
        if how == Enqueue::Wakeup && self.opts.boost && u.pri == PRI_UNDER && !u.parked {
            u.pri = PRI_BOOST;
        }
        if u.parked {
            return;
        }
        self.runq_insert(cpu, t);
    }

    fn dequeue_task(&mut self, _ctx: &Ctx, _cpu: usize, t: TaskId, _how: Dequeue) {
        self.runq_remove(t);
    }

    /// `__runq_tickle` raises the schedule softirq when the woken vCPU has
    /// a higher priority; `csched_schedule` then keeps the running vCPU
    /// until it has run the rate limit, with its timer set for then.
    fn wakeup_preempt(&mut self, ctx: &Ctx, cpu: usize, t: TaskId) -> bool {
        let Some(cur) = ctx.curr[cpu] else {
            return true;
        };
        if self.units[t.idx()].pri <= self.units[cur.idx()].pri {
            return false;
        }
        let p = &mut self.pcpus[cpu];
        let runtime = ctx.now.saturating_sub(p.run_start);
        if runtime < self.opts.ratelimit {
            let at = ctx.now + (self.opts.ratelimit - runtime).max(MIN_TIMER);
            p.timer = Some(p.timer.map_or(at, |e| e.min(at)));
            return false;
        }
        true
    }

    fn pick_next_task(&mut self, ctx: &Ctx, cpu: usize) -> Option<TaskId> {
        self.runq_sort(cpu);
        let head = self.pcpus[cpu].runq.first().copied();
        let head_pri = head.map_or(PRI_IDLE, |h| self.units[h.idx()].pri);
        let next = if head_pri > PRI_OVER {
            self.runq_remove(head.expect("a head"));
            head
        } else if let Some(s) = self.steal(ctx, cpu, head_pri) {
            Some(s)
        } else {
            if let Some(h) = head {
                self.runq_remove(h);
            }
            head
        };
        let p = &mut self.pcpus[cpu];
        match next {
            Some(n) => {
                if p.last != Some(n) {
                    p.run_start = ctx.now;
                }
                p.timer = Some(ctx.now + TSLICE);
                let u = &mut self.units[n.idx()];
                u.cpu = cpu;
                u.charged_to = ctx.now;
            }
            None => p.timer = None,
        }
        next
    }

    fn put_prev_task(&mut self, ctx: &Ctx, cpu: usize, t: TaskId) {
        self.burn(t, ctx.now);
        self.pcpus[cpu].last = Some(t);
        self.pcpus[cpu].timer = None;
        if !self.parked_or_blocked(ctx, t) {
            self.runq_insert(cpu, t);
        }
    }

    /// `csched_tick` -> `csched_unit_acct`: the running vCPU loses BOOST,
    /// is charged and becomes active; the queue is sorted after an
    /// accounting. A parked vCPU stops.
    fn task_tick(&mut self, ctx: &Ctx, cpu: usize, t: TaskId) -> bool {
        if self.units[t.idx()].pri == PRI_BOOST {
            self.units[t.idx()].pri = PRI_UNDER;
        }
        self.burn(t, ctx.now);
        self.acct_start(t);
        self.runq_sort(cpu);
        self.units[t.idx()].parked
    }

    fn yield_task(&mut self, _ctx: &Ctx, _cpu: usize, _t: TaskId) {}

    fn update_curr(&mut self, ctx: &Ctx, cpu: usize, t: TaskId) -> bool {
        self.burn(t, ctx.now);
        self.units[t.idx()].parked || self.pcpus[cpu].timer.is_some_and(|e| ctx.now >= e)
    }

    fn has_queued(&self, _ctx: &Ctx, cpu: usize) -> bool {
        !self.pcpus[cpu].runq.is_empty()
    }

    /// The accounting's `master_ticker` runs on pCPU 0 whatever it runs.
    fn needs_timer(&self, cpu: usize) -> bool {
        cpu == 0
    }

    /// Runs the accounting when its period is due (the first tick at or
    /// after it, on any pCPU: ticks and the 30 ms period are both
    /// multiples of 10 ms, so that is on time); vCPUs it unparks wait on
    /// this pCPU, which reschedules if idle.
    fn cpu_tick(&mut self, ctx: &Ctx, cpu: usize) -> bool {
        let mut unparked = Vec::new();
        while ctx.now >= self.next_acct {
            self.next_acct += TSLICE;
            unparked.extend(self.acct());
        }
        for t in unparked {
            let running = ctx.curr.contains(&Some(t));
            if !running && !self.parked_or_blocked(ctx, t) && !self.units[t.idx()].queued {
                self.runq_insert(cpu, t);
            }
        }
        self.runq_sort(cpu);
        ctx.idle(cpu) && !self.pcpus[cpu].runq.is_empty()
    }

    fn has_resched_timer(&self) -> bool {
        true
    }

    fn resched_at(&self, cpu: usize) -> Option<Nanos> {
        self.pcpus[cpu].timer
    }
}
