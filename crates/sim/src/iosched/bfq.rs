//! BFQ: Budget Fair Queueing, after `block/bfq-iosched.c` and
//! `block/bfq-wf2q.c` (Linux 6.1).
//!
//! Every process gets a queue (async writes share one queue per ioprio and
//! cgroup). Queues are scheduled with B-WF2Q+, a worst-case fair
//! weighted fair queueing scheduler working in the service domain: a queue
//! in service owns the device until it exhausts its budget (in sectors),
//! its budget times out, or it runs dry and idling does not pay off. The
//! virtual start and finish times of the queues make the service each one
//! gets proportional to its weight, whatever the budgets.
//!
//! On top of that come the heuristics that make BFQ what it is, each
//! commented where it is implemented:
//! - budget feedback and max-budget autotuning from the peak rate;
//! - device idling, so that sync queues keep the disk between requests;
//! - charging slow (seeky) queues for time rather than service;
//! - interactive weight raising (x30) of queues that start or restart
//!   doing I/O after a long idle time, for a period computed from the peak
//!   rate, plus soft real-time raising (x3000 overall) of isochronous queues;
//!   the tick-granularity rule that guards the soft real-time test;
//! - large-burst detection, so that many processes started together (a
//!   parallel compile, a daemon's worker pool) are not all raised;
//! - ioprio classes (RT, BE, IDLE) and cgroup weights (a two-level
//!   hierarchy: the root, and one level of child groups).
//!
//! Not modelled: queue merging for cooperating processes (stable merges),
//! I/O injection while idling, and the waker/wakee detection. Merging and
//! waker detection matter for interleaved or synchronized processes, which
//! the scenarios here do not have. Injection does matter on a real host
//! under a VM: BFQ injects other queues' requests while idling for a queue
//! whose think time it deems long, and a host trace showed it doubling a
//! boosted guest's read latency. hostd's `--bfq-idling` (the real help-rt)
//! raises `slice_idle` while boosted, which was measured to stop nearly all
//! of it; the simulated help-rt stands for that configuration (see
//! `agent::actuator::BfqIdlingActuator`).

use super::{
    BfqExt, BfqVersion, HostBoost, IoScheduler, MergeKind, SchedConfig, SchedCtx, MSEC, SEC,
};
use crate::request::{CgroupId, IoContext, IoPrio, IoPrioClass, Pid, RqId};
use devmodel::Nanos;
use rustc_hash::FxHashMap as HashMap;
use std::cell::Cell;
use std::collections::VecDeque;

// ----- constants, with where they come from -----------------------------

/// `bfq_fifo_expire[]`: a request waits at most 125 ms (sync) or 250 ms
/// (async) before its queue serves it out of sector order.
const FIFO_EXPIRE: [Nanos; 2] = [250 * MSEC, 125 * MSEC];
/// `bfq_back_max`: backward seeks up to 16 MiB (in sectors: 32768) are
/// considered when choosing the next request of a queue.
const BACK_MAX_SECTORS: u64 = 16 * 1024 * 2;
/// `bfq_back_penalty`: a backward seek costs twice a forward one.
const BACK_PENALTY: u64 = 2;
/// `BFQ_MIN_TT`: idling for seeky queues is cut to 2 ms.
const MIN_TT: Nanos = 2 * MSEC;
/// `bfq_default_max_budget`: 16384 sectors before autotuning has samples.
const DEFAULT_MAX_BUDGET: u32 = 16 * 1024;
/// `bfq_stats_min_budgets`: budgets to assign before trusting the
/// autotuned max budget.
const STATS_MIN_BUDGETS: u32 = 194;
/// `bfq_async_charge_factor`: async I/O is charged 3x, to limit the
/// bandwidth writes steal from reads.
const ASYNC_CHARGE_FACTOR: u32 = 3;
/// v7r2's `bfq_async_charge_factor` (10): a request of a non-raised async
/// queue was charged `1 + 10` times its size.
const V7R2_ASYNC_CHARGE_FACTOR: u32 = 10;
/// v7r2's `bfq_timeout_async` (HZ/25 = 40 ms): the budget timeout of an
/// async queue, as CFQ's `cfq_slice_async`.
const V7R2_TIMEOUT_ASYNC_MS: u64 = 40;
/// v7r2's `bfq_max_budget_async_rq`: requests an async queue may have in
/// the driver while other queues wait (four times as many when alone).
const V7R2_MAX_ASYNC_IN_DRIVER: u32 = 4;
/// `bfq_timeout`: a queue may hold the device for at most HZ/8 = 125 ms
/// per budget (scaled by the raising coefficient for raised queues).
const TIMEOUT_MS: u64 = 125;
/// `BFQQ_SEEK_THR`: a request farther than 800 sectors from the previous
/// one of its queue is a seek.
const SEEK_THR: u64 = 8 * 100;
/// `BFQQ_SECT_THR_NONROT`: on non-rotational devices only small requests
/// count as seeky.
const SECT_THR_NONROT: u32 = 2 * 32;
/// `BFQQ_SEEKY()`: more than 19 seeks in the last 32 requests.
const SEEKY_HISTORY_THRESHOLD: u32 = 19;
/// `BFQ_HW_QUEUE_THRESHOLD`: a device that keeps more than 3 requests in
/// flight queues commands internally (`hw_tag`).
const HW_QUEUE_THRESHOLD: usize = 3;
/// `BFQ_RATE_MIN_SAMPLES`, `BFQ_RATE_MIN_INTERVAL`, `BFQ_RATE_REF_INTERVAL`:
/// peak-rate estimation needs 32 dispatches over at least 300 ms, and
/// trusts an observation interval of 1 s fully.
const RATE_MIN_SAMPLES: u32 = 32;
const RATE_MIN_INTERVAL: Nanos = 300 * MSEC;
const RATE_REF_INTERVAL: Nanos = SEC;
/// `ref_rate[]`, in the kernel's unit (sectors/usec << `BFQ_RATE_SHIFT`):
/// the peak rates of BFQ's reference rotational and non-rotational
/// devices, used with `ref_wr_duration[]` to size weight raising.
const RATE_SHIFT: u32 = 16;
const REF_RATE: [u64; 2] = [14000, 33000];
/// `ref_wr_duration[]`: 7 s (rotational) and 2.5 s (non-rotational).
const REF_WR_DURATION_MS: [u64; 2] = [7000, 2500];
/// `bfq_wr_duration()` clamps the interactive raising period to 3..25 s.
const WR_DURATION_MIN_MS: u64 = 3000;
const WR_DURATION_MAX_MS: u64 = 25000;
/// `bfq_wr_coeff`: interactive weight raising multiplies the weight by 30.
const WR_COEFF: u32 = 30;
/// `BFQ_SOFTRT_WEIGHT_FACTOR`: soft real-time queues get 100x more.
const SOFTRT_WEIGHT_FACTOR: u32 = 100;
/// v7r2's `bfq_wr_coeff`: 20, for interactive and soft real-time raising
/// alike (the factor of 100 for soft real-time came with mainline).
const V7R2_WR_COEFF: u32 = 20;
/// `bfq_wr_rt_max_time`: soft real-time raising lasts 300 ms, renewed at
/// each new burst of requests.
const WR_RT_MAX_TIME_MS: u64 = 300;
/// `bfq_wr_min_idle_time`: a queue idle for 2 s is raised again when it
/// restarts, like an application being started.
const WR_MIN_IDLE_TIME_MS: u64 = 2000;
/// `bfq_wr_min_inter_arr_async`: async queues get raised again only after
/// 500 ms since the end of their last raising.
const WR_MIN_INTER_ARR_ASYNC_MS: u64 = 500;
/// `bfq_wr_max_softrt_rate`: a soft real-time queue must ask for less than
/// 7000 sectors/s.
const WR_MAX_SOFTRT_RATE: u64 = 7000;
/// `max_service_from_wr`: interactive raising ends after 120000 sectors
/// of service, so that a big sequential reader does not keep it.
const MAX_SERVICE_FROM_WR: u64 = 120_000;
/// `bfq_large_burst_thresh` and `bfq_burst_interval`: 8 queues created
/// less than 180 ms apart form a large burst.
const LARGE_BURST_THRESH: usize = 8;
const BURST_INTERVAL_MS: u64 = 180;
/// `BFQ_CL_IDLE_TIMEOUT`: the IDLE class gets served at least every HZ/5.
const CL_IDLE_TIMEOUT_MS: u64 = 200;
/// `WFQ_SERVICE_SHIFT`: fixed-point shift of virtual times.
const WFQ_SHIFT: u32 = 22;
/// `BFQ_WEIGHT_CONVERSION_COEFF`: weight = (8 - ioprio level) * 10.
const WEIGHT_CONVERSION_COEFF: u32 = 10;
/// Soft real-time raising is granted only to queues at the default weight
/// (`entity.new_weight == 40`, ioprio level 4).
const DEFAULT_QUEUE_WEIGHT: u32 = 40;

/// Number of ioprio classes and their service-tree index.
const CLASSES: usize = 3;
fn class_index(c: IoPrioClass) -> usize {
    match c {
        IoPrioClass::Rt => 0,
        IoPrioClass::Be => 1,
        IoPrioClass::Idle => 2,
    }
}

/// Jiffies are signed here so that "long ago" (`bfq_smallest_from_now()`)
/// can be represented.
type Jiffies = i64;
const LONG_AGO: Jiffies = i64::MIN / 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expiration {
    TooIdle,
    BudgetTimeout,
    BudgetExhausted,
    NoMoreRequests,
    Preempted,
}

type EntId = usize;
type QueueId = usize;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tree {
    None,
    Active,
    Idle,
    /// Out of the trees while in service (still counted in `wsum`).
    InService,
}

#[derive(Clone, Debug)]
struct Entity {
    weight: u32,
    orig_weight: u32,
    budget: u32,
    service: u32,
    start: u64,
    finish: u64,
    tree: Tree,
    /// Counted in its service tree's `wsum`.
    counted: bool,
    class: usize,
    /// Scheduling data this entity is scheduled in.
    parent_sd: usize,
    /// For a group entity: the scheduling data of its children.
    own_sd: Option<usize>,
    queue: Option<QueueId>,
}

impl Entity {
    /// A fresh entity, out of every tree, with no budget yet.
    fn new(
        weight: u32,
        class: usize,
        parent_sd: usize,
        own_sd: Option<usize>,
        queue: Option<QueueId>,
    ) -> Entity {
        Entity {
            weight,
            orig_weight: weight,
            budget: 0,
            service: 0,
            start: 0,
            finish: 0,
            tree: Tree::None,
            counted: false,
            class,
            parent_sd,
            own_sd,
            queue,
        }
    }
}

#[derive(Clone, Debug, Default)]
struct ServiceTree {
    active: Vec<EntId>,
    idle: Vec<EntId>,
    vtime: u64,
    wsum: u64,
}

/// A queue's pending requests, sorted by (sector, id). A queue holds a
/// handful of requests at a time, so a sorted vector beats a B-tree here:
/// no node allocated each time the queue fills up again, and a lookup is
/// one binary search over contiguous memory. Ids are unique, so the order
/// is total and the same as the B-tree's.
#[derive(Clone, Debug, Default)]
struct SortList(Vec<Filed>);

/// A request filed in a [`SortList`]: (sector, id).
type Filed = (u64, RqId);

impl SortList {
    fn insert(&mut self, key: Filed) {
        if let Err(i) = self.0.binary_search(&key) {
            self.0.insert(i, key);
        }
    }

    fn remove(&mut self, key: Filed) {
        if let Ok(i) = self.0.binary_search(&key) {
            // Often the only request: no shifting needed.
            if i + 1 == self.0.len() {
                self.0.pop();
            } else {
                self.0.remove(i);
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn first(&self) -> Option<Filed> {
        self.0.first().copied()
    }

    /// The first request at or after sector `head`, and the last one
    /// before it.
    fn around(&self, head: u64) -> (Option<Filed>, Option<Filed>) {
        let i = self.0.partition_point(|&(s, _)| s < head);
        let back = i.checked_sub(1).map(|j| self.0[j]);
        (self.0.get(i).copied(), back)
    }

    /// Where request `id` is filed.
    fn sector_of(&self, id: RqId) -> Option<u64> {
        self.0.iter().find(|&&(_, x)| x == id).map(|&(s, _)| s)
    }
}

#[derive(Clone, Debug)]
struct SchedData {
    trees: [ServiceTree; CLASSES],
    in_service: Option<EntId>,
    /// The group entity that owns this level (None for the root).
    owner: Option<EntId>,
    class_idle_last_service: Jiffies,
}

/// The kinds of raising [`BfqExt::raised_busy_queues`] counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum UrgentRaising {
    Interactive,
    SoftRt,
}

#[derive(Clone, Debug)]

struct Queue {
    entity: EntId,
    sync: bool,
    class: IoPrioClass,
    /// The ioprio the queue was set up with; a process that changes its
    /// ioprio gets it applied at the queue's next activation or requeue.
    prio: IoPrio,
    /// A changed ioprio waiting for that moment (`entity.prio_changed`).
    new_prio: Option<IoPrio>,
    /// Host-side coordination privilege ([`IoScheduler::set_boost`]).
    boost: HostBoost,
    /// The current raising was started by a [`HostBoost::Raise`], not by
    /// BFQ's own heuristics: it ends with the boost.
    wr_by_boost: bool,
    /// When the current raising began (from an unraised weight).
    wr_started_at: Nanos,
    /// The current interactive raising came although the queue's process
    /// was not idle: its previous request had completed less than
    /// `bfq_wr_min_idle_time` before, and the queue passed for idle only
    /// because that request took so long (a reader the device starves).
    /// BFQ raises it all the same; [`Bfq::raised_busy_queues`] does not
    /// count it as a need for help.
    wr_from_slow_device: bool,
    /// Its raising is soft real-time (not interactive).
    softrt: bool,
    /// Pending requests sorted by sector.
    sort_list: SortList,
    /// Pending requests in arrival order, with their FIFO deadline.
    fifo: VecDeque<(Nanos, RqId)>,
    dispatched: u32,
    busy: bool,
    /// Raising periods started from an unraised weight (statistics):
    /// interactive, and soft real-time. An interactive period switching to
    /// soft real-time and back is not counted again.
    raised_interactive: u32,
    raised_softrt: u32,
    max_budget: u32,
    fifo_expire_used: bool,
    wait_request: bool,
    non_blocking_wait_rq: bool,
    softrt_update: bool,
    io_bound: bool,
    has_short_ttime: bool,
    just_created: bool,
    in_large_burst: bool,
    in_burst_list: bool,
    // weight raising
    wr_coeff: u32,
    wr_cur_max_time: Jiffies,
    last_wr_start_finish: Jiffies,
    wr_start_at_switch_to_srt: Jiffies,
    service_from_wr: u64,
    soft_rt_next_start: Jiffies,
    last_idle_bklogged: Jiffies,
    service_from_backlogged: u64,
    budget_timeout: Jiffies,
    // think time and seekiness
    ttime_samples: u64,
    ttime_total: u64,
    ttime_mean: u64,
    last_end_request: Nanos,
    seek_history: u32,
    last_request_pos: u64,
    io_start_time: Nanos,
    tot_idle_time: Nanos,
}

/// Peak-rate estimator state (`bfq_update_peak_rate()`).
#[derive(Clone, Debug, Default)]
struct RateEstimator {
    samples: u32,
    sequential_samples: u32,
    tot_sectors: u64,
    first_dispatch: Nanos,
    last_dispatch: Nanos,
    delta_from_first: Nanos,
    last_completion: Nanos,
    last_rq_max_size: u32,
}

/// The BFQ scheduler.
pub struct Bfq {
    cfg: SchedConfig,
    /// `bfq_slice_idle`, fixed at creation (`SchedConfig::slice_idle`: 8
    /// ms, or `HZ / 125` whole jiffies as in v7).
    slice_idle: Nanos,
    entities: Vec<Entity>,
    sds: Vec<SchedData>,
    queues: Vec<Queue>,
    /// Sync queue per process, indexed by pid (pids are indices in the
    /// machine's process table, small and dense), and async queue per
    /// (cgroup, class, level).
    sync_queues: Vec<Option<QueueId>>,
    async_queues: HashMap<(CgroupId, IoPrioClass, u8), QueueId>,
    /// Group entity per cgroup (cgroup 0 is the root and has none).
    groups: HashMap<CgroupId, EntId>,
    /// Queue of each request inside the scheduler or the device, indexed
    /// by id: ids are slots of the block layer's request slab, so they are
    /// small and reused, and a vector saves hashing on every hook.
    rq_queue: Vec<Option<QueueId>>,
    in_service: Option<QueueId>,
    queued: usize,
    busy_queues: [usize; CLASSES],
    wr_busy_queues: usize,
    rq_in_driver: usize,
    /// Sync requests in the driver (v7r2's `sync_flight`).
    sync_in_driver: usize,
    // peak rate and budgets
    /// In the kernel's unit: sectors/usec << RATE_SHIFT.
    peak_rate: u64,
    max_budget: u32,
    budgets_assigned: u32,
    rate: RateEstimator,
    last_position: u64,
    last_budget_start: Nanos,
    last_idling_start: Nanos,
    // burst detection
    burst_list: Vec<QueueId>,
    large_burst: bool,
    last_ins_in_burst: Jiffies,
    burst_parent: Option<usize>,
    rotational: Option<bool>,
    /// Host-side coordination privileges by pid, including processes that
    /// have no queue yet (a QEMU worker created while its VM is helped).
    boosts: Vec<HostBoost>,
    /// The time of the hook being run.
    now: Nanos,
    /// `(varied, smallest)` over the weights of the queues with I/O
    /// pending or in flight, for [`Bfq::asymmetric`]; `None` when stale.
    /// The idling and charging decisions ask for it over and over, but it
    /// changes only when a queue's weight changes, a queue becomes busy or
    /// idle, or its first request enters or last request leaves the
    /// device: each of those spots clears it ([`Bfq::weights_changed`]).
    active_weights: Cell<Option<(bool, u32)>>,
}

impl Bfq {
    pub fn new(cfg: &SchedConfig) -> Bfq {
        let root = SchedData {
            trees: Default::default(),
            in_service: None,
            owner: None,
            class_idle_last_service: LONG_AGO,
        };
        Bfq {
            cfg: cfg.clone(),
            slice_idle: cfg.slice_idle(),
            entities: Vec::new(),
            sds: vec![root],
            queues: Vec::new(),
            sync_queues: Vec::new(),
            async_queues: HashMap::default(),
            groups: HashMap::default(),
            rq_queue: Vec::new(),
            in_service: None,
            queued: 0,
            busy_queues: [0; CLASSES],
            wr_busy_queues: 0,
            rq_in_driver: 0,
            sync_in_driver: 0,
            peak_rate: 0,
            max_budget: DEFAULT_MAX_BUDGET,
            budgets_assigned: 0,
            rate: RateEstimator::default(),
            last_position: 0,
            last_budget_start: 0,
            last_idling_start: 0,
            burst_list: Vec::new(),
            large_burst: false,
            last_ins_in_burst: LONG_AGO,
            burst_parent: None,
            rotational: None,
            boosts: Vec::new(),
            now: 0,
            active_weights: Cell::new(None),
        }
    }

    fn nonrot(&self) -> usize {
        usize::from(self.rotational == Some(false))
    }

    // ----- time helpers --------------------------------------------------

    fn jiffies(ctx: &SchedCtx) -> Jiffies {
        ctx.jiffies() as Jiffies
    }

    fn ms_to_j(ctx: &SchedCtx, ms: u64) -> Jiffies {
        ctx.ticks.msecs_to_jiffies(ms) as Jiffies
    }

    /// `bfq_wr_duration()`: the interactive raising period, inversely
    /// proportional to the estimated peak rate: the slower the device, the
    /// longer an application needs to load.
    fn wr_duration(&self, ctx: &SchedCtx) -> Jiffies {
        let nr = self.nonrot();
        let dur_ms = REF_RATE[nr] * REF_WR_DURATION_MS[nr] / self.peak_rate.max(1);
        Self::ms_to_j(ctx, dur_ms.clamp(WR_DURATION_MIN_MS, WR_DURATION_MAX_MS))
    }

    fn timeout_j(ctx: &SchedCtx) -> Jiffies {
        Self::ms_to_j(ctx, TIMEOUT_MS)
    }

    fn mainline(&self) -> bool {
        self.cfg.bfq.version == BfqVersion::Mainline
    }

    /// `bfq_max_budget()`/`bfq_min_budget()`: the default until enough
    /// budgets have been assigned to trust the autotuned value.
    fn cur_max_budget(&self) -> u32 {
        if self.budgets_assigned < STATS_MIN_BUDGETS {
            DEFAULT_MAX_BUDGET
        } else {
            self.max_budget
        }
    }

    fn min_budget(&self) -> u32 {
        self.cur_max_budget() / 32
    }

    // ----- queues and entities -------------------------------------------

    /// `bfq_ioprio_to_weight()`.
    fn ioprio_weight(level: u8) -> u32 {
        (8 - level as u32) * WEIGHT_CONVERSION_COEFF
    }

    fn group_sd(&mut self, cgroup: CgroupId, ctx: &SchedCtx) -> usize {
        if cgroup == 0 {
            return 0;
        }
        if let Some(&e) = self.groups.get(&cgroup) {
            return self.entities[e].own_sd.expect("group entity");
        }
        let sd = self.sds.len();
        let ent = self.entities.len();
        self.sds.push(SchedData {
            trees: Default::default(),
            in_service: None,
            owner: Some(ent),
            class_idle_last_service: LONG_AGO,
        });
        let w = ctx.cgroups.weight(cgroup);
        self.entities.push(Entity::new(
            w,
            class_index(IoPrioClass::Be),
            0,
            Some(sd),
            None,
        ));
        self.groups.insert(cgroup, ent);
        sd
    }

    fn queue_for(&mut self, ctx: &SchedCtx, ioc: &IoContext, sync: bool) -> QueueId {
        let existing = if sync {
            self.sync_queue(ioc.pid)
        } else {
            self.async_queues
                .get(&(ioc.cgroup, ioc.prio.class, ioc.prio.level))
                .copied()
        };
        if let Some(q) = existing {
            return q;
        }
        let sd = self.group_sd(ioc.cgroup, ctx);
        let ent = self.entities.len();
        let w = Self::ioprio_weight(ioc.prio.level);
        let class = class_index(ioc.prio.class);
        self.entities
            .push(Entity::new(w, class, sd, None, Some(self.queues.len())));
        let qid = self.queues.len();
        // `bfq_init_bfqq()`: a new sync queue starts I/O bound, with a
        // short think time, "just created", with the default max budget,
        // and with timestamps that make it look idle for long.
        self.queues.push(Queue {
            entity: ent,
            sync,
            class: ioc.prio.class,
            prio: ioc.prio,
            new_prio: None,
            boost: HostBoost::None,
            wr_by_boost: false,
            wr_started_at: 0,
            wr_from_slow_device: false,
            softrt: false,
            sort_list: SortList::default(),
            fifo: VecDeque::new(),
            dispatched: 0,
            busy: false,
            max_budget: 2 * self.cur_max_budget() / 2,
            fifo_expire_used: false,
            wait_request: false,
            non_blocking_wait_rq: false,
            softrt_update: false,
            raised_interactive: 0,
            raised_softrt: 0,
            io_bound: true,
            has_short_ttime: sync && ioc.prio.class != IoPrioClass::Idle,
            just_created: sync,
            in_large_burst: false,
            in_burst_list: false,
            wr_coeff: 1,
            wr_cur_max_time: 0,
            last_wr_start_finish: LONG_AGO,
            wr_start_at_switch_to_srt: LONG_AGO,
            service_from_wr: 0,
            soft_rt_next_start: LONG_AGO,
            last_idle_bklogged: LONG_AGO,
            service_from_backlogged: 0,
            budget_timeout: LONG_AGO,
            ttime_samples: 0,
            ttime_total: 0,
            ttime_mean: 0,
            last_end_request: ctx.now,
            seek_history: 0,
            last_request_pos: 0,
            io_start_time: ctx.now,
            tot_idle_time: 0,
        });
        if sync {
            let pid = ioc.pid as usize;
            if self.sync_queues.len() <= pid {
                self.sync_queues.resize(pid + 1, None);
            }
            self.sync_queues[pid] = Some(qid);
            // Burst detection runs when a queue is created (the kernel
            // runs it at the queue's first activation after creation).
            self.handle_burst(ctx, qid);
        } else {
            self.async_queues
                .insert((ioc.cgroup, ioc.prio.class, ioc.prio.level), qid);
        }
        qid
    }

    fn sync_queue(&self, pid: Pid) -> Option<QueueId> {
        self.sync_queues.get(pid as usize).copied().flatten()
    }

    fn seeky(q: &Queue) -> bool {
        q.seek_history.count_ones() > SEEKY_HISTORY_THRESHOLD
    }

    fn totally_seeky(q: &Queue) -> bool {
        q.seek_history == u32::MAX
    }

    /// `bfq_delta()`: virtual time taken by `service` at `weight`.
    fn delta(service: u64, weight: u32) -> u64 {
        (service << WFQ_SHIFT) / weight.max(1) as u64
    }

    fn tree_mut(&mut self, e: EntId) -> &mut ServiceTree {
        let (sd, class) = (self.entities[e].parent_sd, self.entities[e].class);
        &mut self.sds[sd].trees[class]
    }

    /// Updates an entity's weight, keeping its tree's weight sum right.
    fn set_weight(&mut self, e: EntId, w: u32) {
        let old = self.entities[e].weight;
        if old == w {
            return;
        }
        if self.entities[e].counted {
            let t = self.tree_mut(e);
            t.wsum = t.wsum - old as u64 + w as u64;
        }
        self.entities[e].weight = w;
        self.weights_changed();
    }

    /// `bfq_forget_idle()`: idle entities whose finish time the virtual
    /// time has passed no longer hold a place in the weight sum.
    fn forget_idle(&mut self, sd: usize, class: usize) {
        // In place: this runs at every dispatch, and the idle tree is
        // usually empty or keeps all its entities.
        let entities = &mut self.entities;
        let t = &mut self.sds[sd].trees[class];
        if t.idle.is_empty() {
            return;
        }
        let vtime = t.vtime;
        t.idle.retain(|&e| {
            let ent = &mut entities[e];
            if ent.finish <= vtime {
                ent.tree = Tree::None;
                ent.counted = false;
                t.wsum -= ent.weight as u64;
                false
            } else {
                true
            }
        });
    }

    /// `__bfq_activate_entity()`: puts an entity on its active tree with a
    /// start time that does not let it gain from having been idle.
    fn activate_entity(&mut self, e: EntId, backshift_ok: bool) {
        let (sd, class) = (self.entities[e].parent_sd, self.entities[e].class);
        match self.entities[e].tree {
            Tree::Active | Tree::InService => return,
            Tree::Idle => {
                let t = &mut self.sds[sd].trees[class];
                t.idle.retain(|&x| x != e);
                let vtime = t.vtime;
                let ent = &mut self.entities[e];
                ent.start = if backshift_ok {
                    ent.finish
                } else {
                    vtime.max(ent.finish)
                };
            }
            Tree::None => {
                let vtime = self.sds[sd].trees[class].vtime;
                let ent = &mut self.entities[e];
                ent.start = if backshift_ok && ent.finish < vtime {
                    ent.finish
                } else {
                    vtime
                };
                let w = ent.weight as u64;
                ent.counted = true;
                self.sds[sd].trees[class].wsum += w;
            }
        }
        let vtime = self.sds[sd].trees[class].vtime;
        let ent = &mut self.entities[e];
        ent.finish = ent.start + Self::delta(ent.budget as u64, ent.weight);
        // `bfq_update_fin_time_enqueue()`: a backshifted queue whose finish
        // time is still behind the virtual time is pushed up to it (by a
        // 1/wr_coeff of the gap if it is raised). Queues that often go idle
        // for an instant would otherwise keep timestamps lower and lower
        // than the virtual time, pushed up meanwhile by the queues served in
        // their absence, and then monopolize the device against every
        // newly activated queue, a raised one included.
        if backshift_ok && vtime > ent.finish {
            let wr_coeff = ent.queue.map_or(1, |q| self.queues[q].wr_coeff.max(1));
            let delta = (vtime - ent.finish) / wr_coeff as u64;
            ent.start += delta;
            ent.finish += delta;
        }
        ent.tree = Tree::Active;
        self.sds[sd].trees[class].active.push(e);
        // A group becomes active with its first active child.
        if let Some(owner) = self.sds[sd].owner {
            if self.entities[owner].tree == Tree::None || self.entities[owner].tree == Tree::Idle {
                let b = self.entities[e].budget;
                self.entities[owner].budget = b;
                self.activate_entity(owner, false);
            }
        }
    }

    fn sd_has_active(&self, sd: usize) -> bool {
        self.sds[sd].in_service.is_some() || self.sds[sd].trees.iter().any(|t| !t.active.is_empty())
    }

    /// An entity leaves service or its trees: it goes on the idle tree if
    /// its finish time is still ahead of the virtual time (so that it
    /// cannot come back earlier than it deserves), or is forgotten.
    fn deactivate_entity(&mut self, e: EntId) {
        let (sd, class) = (self.entities[e].parent_sd, self.entities[e].class);
        if self.entities[e].tree == Tree::Active {
            self.sds[sd].trees[class].active.retain(|&x| x != e);
        }
        if self.sds[sd].in_service == Some(e) {
            self.sds[sd].in_service = None;
        }
        let vtime = self.sds[sd].trees[class].vtime;
        if self.entities[e].finish > vtime {
            self.entities[e].tree = Tree::Idle;
            self.sds[sd].trees[class].idle.push(e);
        } else {
            self.entities[e].tree = Tree::None;
            if self.entities[e].counted {
                self.entities[e].counted = false;
                self.sds[sd].trees[class].wsum -= self.entities[e].weight as u64;
            }
        }
    }

    /// Ends the service of the in-service entity at one level and
    /// requeues it or deactivates it, then walks up to its group.
    fn end_service_entity(&mut self, e: EntId, still_busy: bool) {
        let (sd, class) = (self.entities[e].parent_sd, self.entities[e].class);
        // `bfq_calc_finish(entity, entity->service)`: charge what it got.
        {
            let ent = &mut self.entities[e];
            ent.finish = ent.start + Self::delta(ent.service as u64, ent.weight);
        }
        if self.sds[sd].in_service == Some(e) {
            self.sds[sd].in_service = None;
        }
        if still_busy {
            // `__bfq_requeue_entity()`: the next budget starts where the
            // service just ended, in the class of a changed ioprio
            // (`__bfq_entity_update_weight_prio()`).
            if let Some(q) = self.entities[e].queue {
                if let Some(prio) = self.queues[q].new_prio.take() {
                    self.requeue_with_prio(e, q, prio);
                    self.entities[e].service = 0;
                    return self.end_service_walk_up(sd);
                }
            }
            let ent = &mut self.entities[e];
            ent.start = ent.finish;
            ent.finish = ent.start + Self::delta(ent.budget as u64, ent.weight);
            ent.tree = Tree::Active;
            self.sds[sd].trees[class].active.push(e);
        } else {
            self.entities[e].tree = Tree::Active; // so deactivate can find it
            self.sds[sd].trees[class].active.push(e);
            self.deactivate_entity(e);
        }
        self.entities[e].service = 0;
        self.end_service_walk_up(sd);
    }

    /// After an entity of `sd` ended its service: its group ends its own
    /// service, or leaves the trees if nothing is left in it.
    fn end_service_walk_up(&mut self, sd: usize) {
        if let Some(owner) = self.sds[sd].owner {
            let busy = self.sd_has_active(sd);
            if self.entities[owner].tree == Tree::InService {
                self.end_service_entity(owner, busy);
            } else if !busy && self.entities[owner].tree == Tree::Active {
                self.deactivate_entity(owner);
            }
        }
    }

    /// `bfq_lookup_next_entity()`: the eligible entity with the smallest
    /// finish time, in the highest-priority class that has one.
    fn lookup_next(&mut self, sd: usize, jiffies: Jiffies, ctx: &SchedCtx) -> Option<EntId> {
        let mut classes: [usize; CLASSES] = [0, 1, 2];
        // Serve the IDLE class at least every BFQ_CL_IDLE_TIMEOUT, to
        // avoid starving it (and priority inversions through it).
        if self.sds[sd].class_idle_last_service + Self::ms_to_j(ctx, CL_IDLE_TIMEOUT_MS) < jiffies {
            if !self.sds[sd].trees[2].active.is_empty() {
                classes = [2, 0, 1];
            }
            self.sds[sd].class_idle_last_service = jiffies;
        }
        for class in classes {
            if self.sds[sd].trees[class].active.is_empty() {
                continue;
            }
            // `bfq_update_vtime()`: if nobody is eligible, jump the
            // virtual time to the smallest start time.
            let min_start = self.sds[sd].trees[class]
                .active
                .iter()
                .map(|&e| self.entities[e].start)
                .min()
                .expect("non-empty");
            if min_start > self.sds[sd].trees[class].vtime {
                self.sds[sd].trees[class].vtime = min_start;
                self.forget_idle(sd, class);
            }
            let vtime = self.sds[sd].trees[class].vtime;
            let best = self.sds[sd].trees[class]
                .active
                .iter()
                .copied()
                .filter(|&e| self.entities[e].start <= vtime)
                .min_by_key(|&e| (self.entities[e].finish, e));
            if let Some(e) = best {
                if class == 2 {
                    self.sds[sd].class_idle_last_service = jiffies;
                }
                return Some(e);
            }
        }
        None
    }

    /// `next_queue_may_preempt()`: would B-WF2Q+, looking at the root level
    /// with the in-service entity still in its tree, pick another entity?
    /// Preempting is pointless otherwise: the queue in service would be
    /// chosen again.
    fn next_queue_may_preempt(&self) -> bool {
        let sd = &self.sds[0];
        let Some(isv) = sd.in_service else {
            return true;
        };
        let isv_class = self.entities[isv].class;
        for class in 0..CLASSES {
            let t = &sd.trees[class];
            let cands = t
                .active
                .iter()
                .copied()
                .chain((class == isv_class).then_some(isv));
            let mut any = false;
            let mut min_start = u64::MAX;
            let mut best: Option<EntId> = None;
            for e in cands.clone() {
                any = true;
                min_start = min_start.min(self.entities[e].start);
            }
            if !any {
                continue;
            }
            let vtime = t.vtime.max(min_start);
            for e in cands {
                let ent = &self.entities[e];
                if ent.start <= vtime
                    && best.is_none_or(|b| (ent.finish, e) < (self.entities[b].finish, b))
                {
                    best = Some(e);
                }
            }
            return best != Some(isv);
        }
        false
    }

    /// `bfq_get_next_queue()`: walks down from the root, putting the chosen
    /// entity of each level in service.
    fn get_next_queue(&mut self, ctx: &SchedCtx) -> Option<QueueId> {
        let j = Self::jiffies(ctx);
        let mut sd = 0;
        loop {
            let e = self.lookup_next(sd, j, ctx)?;
            let class = self.entities[e].class;
            self.sds[sd].trees[class].active.retain(|&x| x != e);
            self.entities[e].tree = Tree::InService;
            self.sds[sd].in_service = Some(e);
            match self.entities[e].own_sd {
                Some(child) => sd = child,
                None => return self.entities[e].queue,
            }
        }
    }

    /// `bfq_bfqq_served()`: charges service to a queue and its group, and
    /// advances the virtual times.
    fn served(&mut self, q: QueueId, sectors: u32) {
        let mut e = Some(self.queues[q].entity);
        while let Some(ent) = e {
            self.entities[ent].service += sectors;
            let (sd, class) = (self.entities[ent].parent_sd, self.entities[ent].class);
            let t = &mut self.sds[sd].trees[class];
            t.vtime += Self::delta(sectors as u64, t.wsum.max(1) as u32);
            self.forget_idle(sd, class);
            e = self.sds[sd].owner;
        }
        let qq = &mut self.queues[q];
        qq.service_from_backlogged += sectors as u64;
        if qq.wr_coeff > 1 {
            qq.service_from_wr += sectors as u64;
        }
    }

    // ----- requests within a queue ---------------------------------------

    /// `bfq_choose_req()`/`bfq_find_next_rq()`: the next request of a queue
    /// is the one closest to the head position, going forward, or
    /// backward up to `back_max` at twice the cost.
    fn next_rq(&self, ctx: &SchedCtx, q: QueueId) -> Option<RqId> {
        let qq = &self.queues[q];
        let head = self.last_position;
        let (fwd, back) = qq.sort_list.around(head);
        let cost = |(s, id): (u64, RqId)| -> Option<u64> {
            let end = ctx.rq(id).end_sector();
            if s >= head {
                Some(s - head)
            } else if head - end.min(head) <= BACK_MAX_SECTORS {
                Some((head - s) * BACK_PENALTY)
            } else {
                None
            }
        };
        match (fwd, back) {
            (Some(f), Some(b)) => match (cost(f), cost(b)) {
                (Some(cf), Some(cb)) if cb < cf => Some(b.1),
                (None, Some(_)) => Some(b.1),
                _ => Some(f.1),
            },
            (Some(f), None) => Some(f.1),
            (None, Some(b)) => {
                // Wrap around to the lowest sector when nothing is ahead.
                let first = qq.sort_list.first().unwrap_or(b);
                Some(if cost(b).is_some() { b.1 } else { first.1 })
            }
            (None, None) => None,
        }
    }

    /// `bfq_check_fifo()`: once per budget, an expired request is served
    /// first, so no request of a queue waits forever behind better-placed
    /// ones.
    fn pick_rq(&mut self, ctx: &SchedCtx, q: QueueId) -> Option<RqId> {
        let qq = &self.queues[q];
        if !qq.fifo_expire_used {
            if let Some(&(deadline, id)) = qq.fifo.front() {
                if deadline <= ctx.now {
                    self.queues[q].fifo_expire_used = true;
                    return Some(id);
                }
            }
        }
        self.next_rq(ctx, q)
    }

    /// `bfq_serv_to_charge()`: async requests cost three times their size,
    /// unless raised or in an asymmetric scenario (v7r2: eleven times,
    /// unless raised).
    fn serv_to_charge(&self, ctx: &SchedCtx, q: QueueId, rq: RqId) -> u32 {
        let sectors = ctx.rq(rq).sectors;
        let qq = &self.queues[q];
        if !self.mainline() {
            return if qq.sync || qq.wr_coeff > 1 {
                sectors
            } else {
                sectors * (1 + V7R2_ASYNC_CHARGE_FACTOR)
            };
        }
        if qq.sync || qq.wr_coeff > 1 || self.asymmetric(q) {
            sectors
        } else {
            sectors * ASYNC_CHARGE_FACTOR
        }
    }

    fn budget_left(&self, q: QueueId) -> i64 {
        let e = &self.entities[self.queues[q].entity];
        e.budget as i64 - e.service as i64
    }

    // ----- the decisions -------------------------------------------------

    fn tot_busy(&self) -> usize {
        self.busy_queues.iter().sum()
    }

    /// `bfq_asymmetric_scenario()`: queues with different weights, several
    /// classes, or groups with pending I/O make idling necessary to
    /// preserve service guarantees.
    fn asymmetric(&self, q: QueueId) -> bool {
        let (varied, min) = self.active_weights();
        // The queue with the smallest weight does not need idling to
        // protect itself (`smallest_weight` in the kernel).
        let varied = varied && self.entities[self.queues[q].entity].weight != min;
        let classes_busy = self.busy_queues.iter().filter(|&&n| n > 0).count() > 1;
        let groups_pending = self
            .groups
            .values()
            .any(|&g| self.entities[g].tree != Tree::None && self.entities[g].tree != Tree::Idle);
        varied || classes_busy || groups_pending
    }

    /// Whether the weights of the queues with I/O pending or in flight
    /// differ, and the smallest of them ((false, 0) if there is no such
    /// queue). Cached, see `active_weights`.
    fn active_weights(&self) -> (bool, u32) {
        if let Some(v) = self.active_weights.get() {
            return v;
        }
        let mut weights = self
            .queues
            .iter()
            .filter(|x| x.busy || x.dispatched > 0)
            .map(|x| self.entities[x.entity].weight);
        let v = match weights.next() {
            Some(first) => {
                let mut varied = false;
                let mut min = first;
                for w in weights {
                    varied |= w != first;
                    min = min.min(w);
                }
                (varied, min)
            }
            None => (false, 0),
        };
        self.active_weights.set(Some(v));
        v
    }

    /// A queue's weight changed, or a queue joined or left the set of
    /// those with I/O pending or in flight: `active_weights` is stale.
    fn weights_changed(&self) {
        self.active_weights.set(None);
    }

    fn hw_tag(ctx: &SchedCtx) -> bool {
        ctx.queue_depth > HW_QUEUE_THRESHOLD
    }

    /// `idling_boosts_thr_without_issues()`.
    fn idling_boosts_thr_without_issues(&self, ctx: &SchedCtx, q: QueueId) -> bool {
        let qq = &self.queues[q];
        let rot_without_queueing = ctx.rotational && !Self::hw_tag(ctx);
        let seq_io_bound = !Self::seeky(qq) && qq.io_bound && qq.has_short_ttime;
        let boosts =
            rot_without_queueing || ((ctx.rotational || !Self::hw_tag(ctx)) && seq_io_bound);
        boosts && self.wr_busy_queues == 0
    }

    /// `idling_needed_for_service_guarantees()`.
    fn idling_needed_for_guarantees(&self, q: QueueId) -> bool {
        let qq = &self.queues[q];
        let tot = self.tot_busy();
        (qq.wr_coeff > 1
            && (self.wr_busy_queues < tot || self.rq_in_driver >= qq.dispatched as usize + 4))
            || self.asymmetric(q)
            || tot == 1
    }

    /// `bfq_better_to_idle()`: "idling is performed only if slice_idle >
    /// 0", and if the queue may idle.
    fn better_to_idle(&self, ctx: &SchedCtx, q: QueueId) -> bool {
        self.slice_idle > 0 && self.may_idle(ctx, q)
    }

    /// Whether the queue in service keeps the device while it has requests
    /// in flight and none queued. Mainline keeps it only if it would idle
    /// after them (`bfq_better_to_idle()`, which needs `slice_idle > 0`);
    /// v7 asks `bfq_bfqq_may_idle()`, which does not look at `slice_idle`,
    /// and only its idle timer needs it (`bfq_bfqq_must_idle()`). So a v7
    /// BFQ whose `slice_idle` is 0 (set through sysfs: at HZ=100 in jiffies
    /// `bfq_init()` makes it one jiffy, `SchedConfig::slice_idle`) still
    /// serves one queue at a time, and moves on as soon as the queue's last
    /// request completes.
    fn keeps_device_while_in_flight(&self, ctx: &SchedCtx, q: QueueId) -> bool {
        if self.mainline() {
            self.better_to_idle(ctx, q)
        } else {
            self.may_idle(ctx, q)
        }
    }

    /// `bfq_bfqq_may_idle()` (v7; mainline merged it into
    /// `bfq_better_to_idle()`).
    fn may_idle(&self, ctx: &SchedCtx, q: QueueId) -> bool {
        let qq = &self.queues[q];
        if !qq.sync || qq.class == IoPrioClass::Idle {
            return false;
        }
        // v7r2's idle window: `enable_idle = 0` when `slice_idle` is 0,
        // when the think-time mean (valid above 80 samples) exceeds
        // `slice_idle`, or on a queueing device for a seeky queue; raised
        // queues keep it.
        if self.cfg.bfq.idle_window_by_think_time
            && qq.wr_coeff == 1
            && (self.slice_idle == 0
                || (qq.ttime_samples > 80 && qq.ttime_mean > self.slice_idle)
                || (Self::hw_tag(ctx) && Self::seeky(qq)))
        {
            return false;
        }
        // Coordination (`help-wr`): a queue the host raises for a VM's start
        // is not idled for while another such queue is busy, on a device
        // that does not seek. Idling protects a raised queue from the
        // others, but between two VMs starting applications at once it
        // only serializes them: each start-up held the device through its
        // CPU gaps (30 times the budget timeout, `bfq_set_budget_timeout()`)
        // and the other's I/O never overlapped them. Two xterm start-ups
        // among 2 to 8 VMs on the eMMC went from 2.04x-2.13x to about 1.6x
        // of one alone. A disk keeps the idling: switching between two
        // images costs a seek each time.
        if !ctx.rotational
            && qq.boost == HostBoost::Raise
            && self
                .queues
                .iter()
                .enumerate()
                .any(|(i, other)| i != q && other.busy && other.boost == HostBoost::Raise)
        {
            return false;
        }
        self.idling_boosts_thr_without_issues(ctx, q) || self.idling_needed_for_guarantees(q)
    }

    fn must_idle(&self, ctx: &SchedCtx, q: QueueId) -> bool {
        self.queues[q].sort_list.is_empty() && self.better_to_idle(ctx, q)
    }

    fn budget_timed_out(&self, ctx: &SchedCtx, q: QueueId) -> bool {
        self.queues[q].budget_timeout <= Self::jiffies(ctx)
    }

    /// `bfq_may_expire_for_budg_timeout()`.
    fn may_expire_for_budget_timeout(&self, ctx: &SchedCtx, q: QueueId) -> bool {
        let qq = &self.queues[q];
        (!qq.wait_request || self.budget_left(q) >= self.entities[qq.entity].budget as i64 / 3)
            && self.budget_timed_out(ctx, q)
    }

    /// `bfq_set_budget_timeout()`: raised queues get a longer timeout,
    /// proportional to their raising.
    fn set_budget_timeout(&mut self, ctx: &SchedCtx, q: QueueId) {
        let rt_max = Self::ms_to_j(ctx, WR_RT_MAX_TIME_MS);
        let qq = &self.queues[q];
        let e = &self.entities[qq.entity];
        let coeff = if qq.wr_cur_max_time == rt_max {
            1
        } else {
            (e.weight / e.orig_weight.max(1)).max(1)
        };
        let timeout = if !self.mainline() && !qq.sync {
            Self::ms_to_j(ctx, V7R2_TIMEOUT_ASYNC_MS)
        } else {
            Self::timeout_j(ctx)
        };
        self.last_budget_start = ctx.now;
        self.queues[q].budget_timeout = Self::jiffies(ctx) + timeout * coeff as i64;
    }

    /// `bfq_bfqq_softrt_next_start()`: the earliest time at which the
    /// queue, if it restarts, may be deemed soft real-time: after its last
    /// burst of service at the maximum soft real-time rate, and not before
    /// the idle slice plus 4 ticks. The 4 ticks absorb coarse, jumping
    /// jiffies (HZ=100 guests), which otherwise make a greedy reader look
    /// isochronous.
    fn softrt_next_start(&self, ctx: &SchedCtx, q: QueueId) -> Jiffies {
        let qq = &self.queues[q];
        let hz = ctx.ticks.hz as i64;
        let slack = if self.cfg.bfq.softrt_tick_slack { 4 } else { 0 };
        let by_rate = qq.last_idle_bklogged
            + hz * qq.service_from_backlogged as i64 / WR_MAX_SOFTRT_RATE as i64;
        let by_idle =
            Self::jiffies(ctx) + ctx.ticks.nsecs_to_jiffies(self.slice_idle) as i64 + slack;
        qq.soft_rt_next_start.max(by_rate).max(by_idle)
    }

    fn end_wr(&mut self, q: QueueId, ctx: &SchedCtx) {
        if self.queues[q].wr_coeff > 1 && self.queues[q].busy {
            self.wr_busy_queues -= 1;
        }
        let qq = &mut self.queues[q];
        qq.wr_coeff = 1;
        qq.wr_cur_max_time = 0;
        qq.last_wr_start_finish = Self::jiffies(ctx);
        self.refresh_weight(q);
    }

    /// Applies the raising coefficient to the entity's weight.
    fn refresh_weight(&mut self, q: QueueId) {
        let e = self.queues[q].entity;
        let factor = match self.queues[q].boost {
            HostBoost::Weight(f) => f.max(1),
            HostBoost::None | HostBoost::Raise => 1,
        };
        let w = self.entities[e].orig_weight * self.queues[q].wr_coeff * factor;
        self.set_weight(e, w);
    }

    /// Applies a host-side privilege to queue `q`.
    fn apply_boost(&mut self, ctx: &SchedCtx, q: QueueId, boost: HostBoost) {
        let old = self.queues[q].boost;
        if old == boost {
            return;
        }
        self.queues[q].boost = boost;
        if boost == HostBoost::Raise && self.queues[q].wr_coeff == 1 {
            // Raised as an application being started would be, for as
            // long as the boost lasts (`update_wr_data` leaves it alone).
            let d = self.wr_duration(ctx);
            let j = Self::jiffies(ctx);
            let qq = &mut self.queues[q];
            qq.wr_cur_max_time = d;
            qq.last_wr_start_finish = j;
            qq.service_from_wr = 0;
            qq.wr_by_boost = true;
            self.raise_interactive(q);
        } else if old == HostBoost::Raise && self.queues[q].wr_by_boost {
            self.queues[q].wr_by_boost = false;
            if self.queues[q].wr_coeff > 1 {
                self.end_wr(q, ctx);
            }
        } else {
            self.refresh_weight(q);
        }
    }

    /// Requeues a busy queue's entity that just ended its service in the
    /// class and weight of its new ioprio, at its new tree's virtual time.
    fn requeue_with_prio(&mut self, e: EntId, q: QueueId, prio: IoPrio) {
        let (sd, class) = (self.entities[e].parent_sd, self.entities[e].class);
        if self.entities[e].counted {
            self.sds[sd].trees[class].wsum -= self.entities[e].weight as u64;
            self.entities[e].counted = false;
        }
        self.entities[e].tree = Tree::None;
        self.busy_queues[class_index(self.queues[q].class)] -= 1;
        self.apply_prio_change(q, prio);
        self.busy_queues[class_index(prio.class)] += 1;
        self.activate_entity(e, false);
    }

    /// A sync queue whose process changed its ioprio (`ionice`, or a
    /// coordination daemon) takes the new class and weight when it next
    /// becomes busy, as `bfq_check_ioprio_change()` and
    /// `__bfq_entity_update_weight_prio()` do at the next activation.
    fn apply_prio_change(&mut self, q: QueueId, prio: IoPrio) {
        let e = self.queues[q].entity;
        if self.entities[e].tree == Tree::Idle {
            let (sd, class) = (self.entities[e].parent_sd, self.entities[e].class);
            let t = &mut self.sds[sd].trees[class];
            t.idle.retain(|&x| x != e);
            if self.entities[e].counted {
                t.wsum -= self.entities[e].weight as u64;
            }
            self.entities[e].counted = false;
            self.entities[e].tree = Tree::None;
        }
        debug_assert_eq!(self.entities[e].tree, Tree::None);
        let qq = &mut self.queues[q];
        qq.prio = prio;
        qq.class = prio.class;
        qq.has_short_ttime = prio.class != IoPrioClass::Idle && qq.has_short_ttime;
        self.entities[e].class = class_index(prio.class);
        self.entities[e].orig_weight = Self::ioprio_weight(prio.level);
        self.refresh_weight(q);
    }

    /// Raises `q` as an application starting (interactive).
    fn raise_interactive(&mut self, q: QueueId) {
        self.queues[q].softrt = false;
        let coeff = if self.mainline() {
            WR_COEFF
        } else {
            V7R2_WR_COEFF
        };
        self.set_wr_coeff(q, coeff);
    }

    /// Raises `q` as soft real-time.
    fn raise_softrt(&mut self, q: QueueId) {
        self.queues[q].softrt = true;
        let coeff = if self.mainline() {
            WR_COEFF * SOFTRT_WEIGHT_FACTOR
        } else {
            V7R2_WR_COEFF
        };
        self.set_wr_coeff(q, coeff);
    }

    fn set_wr_coeff(&mut self, q: QueueId, coeff: u32) {
        let was = self.queues[q].wr_coeff > 1;
        self.queues[q].wr_coeff = coeff;
        if !was && coeff > 1 {
            self.queues[q].wr_started_at = self.now;
        }
        if self.queues[q].busy {
            match (was, coeff > 1) {
                (false, true) => self.wr_busy_queues += 1,
                (true, false) => self.wr_busy_queues -= 1,
                _ => {}
            }
        }
        self.refresh_weight(q);
    }

    /// `bfq_update_wr_data()`: ends raising when its period is over, when
    /// the queue is in a large burst, or when an interactive queue has
    /// received too much service.
    fn update_wr_data(&mut self, ctx: &SchedCtx, q: QueueId) {
        let qq = &self.queues[q];
        if qq.wr_coeff <= 1 || qq.boost == HostBoost::Raise {
            return;
        }
        let j = Self::jiffies(ctx);
        let rt_max = Self::ms_to_j(ctx, WR_RT_MAX_TIME_MS);
        if qq.in_large_burst {
            self.end_wr(q, ctx);
        } else if qq.last_wr_start_finish + qq.wr_cur_max_time < j {
            if qq.wr_cur_max_time != rt_max
                || qq.wr_start_at_switch_to_srt + self.wr_duration(ctx) < j
            {
                self.end_wr(q, ctx);
            } else {
                self.switch_back_to_interactive(ctx, q);
            }
        }
        // v7r2 had no such cap; it is kept for the simulated v7r2 too:
        // without it the guest flusher's async queue, raised again at each
        // of the suite's periodic syncs, kept its raising, and BFQ's
        // throughput in the throughput twin fell below CFQ's
        // (`microsd-class6` 2r2w-seq: 10.70 against 13.19 MB/s).
        let qq = &self.queues[q];
        if qq.wr_coeff > 1
            && qq.wr_cur_max_time != rt_max
            && qq.service_from_wr > MAX_SERVICE_FROM_WR
        {
            self.end_wr(q, ctx);
        }
    }

    fn switch_back_to_interactive(&mut self, ctx: &SchedCtx, q: QueueId) {
        let d = self.wr_duration(ctx);
        let qq = &mut self.queues[q];
        qq.wr_cur_max_time = d;
        qq.last_wr_start_finish = qq.wr_start_at_switch_to_srt;
        self.raise_interactive(q);
    }

    /// `bfq_handle_burst()`: queues created within 180 ms of each other
    /// (with the same parent) form a burst; from the 8th on, all of them
    /// are in a large burst and get no interactive raising: they are the
    /// workers of one big job, not an application starting.
    fn handle_burst(&mut self, ctx: &SchedCtx, q: QueueId) {
        let j = Self::jiffies(ctx);
        let parent = self.entities[self.queues[q].entity].parent_sd;
        if self.last_ins_in_burst + Self::ms_to_j(ctx, BURST_INTERVAL_MS) < j
            || self.burst_parent != Some(parent)
        {
            self.large_burst = false;
            for &b in &self.burst_list {
                self.queues[b].in_burst_list = false;
            }
            self.burst_list.clear();
            self.burst_list.push(q);
            self.queues[q].in_burst_list = true;
            self.burst_parent = Some(parent);
        } else if self.large_burst {
            self.queues[q].in_large_burst = true;
        } else {
            self.burst_list.push(q);
            self.queues[q].in_burst_list = true;
            if self.burst_list.len() >= LARGE_BURST_THRESH {
                self.large_burst = true;
                for b in std::mem::take(&mut self.burst_list) {
                    self.queues[b].in_large_burst = true;
                    self.queues[b].in_burst_list = false;
                }
            }
        }
        self.last_ins_in_burst = j;
    }

    /// `bfq_update_io_thinktime()`: exponentially weighted think time,
    /// measured from the queue's last completion to its next request.
    fn update_thinktime(&mut self, ctx: &SchedCtx, q: QueueId) {
        let slice_idle = self.slice_idle;
        let qq = &mut self.queues[q];
        if qq.dispatched > 0 || qq.busy {
            return;
        }
        let elapsed = ctx
            .now
            .saturating_sub(qq.last_end_request)
            .min(2 * slice_idle);
        qq.ttime_samples = (7 * qq.ttime_samples + 256) / 8;
        qq.ttime_total = (7 * qq.ttime_total + 256 * elapsed) / 8;
        qq.ttime_mean = (qq.ttime_total + 128) / qq.ttime_samples.max(1);
        // `bfq_update_has_short_ttime()`: the think time is short if it is
        // below half the idle slice (once there are enough samples: 80,
        // `bfq_sample_valid()`).
        if qq.sync && qq.class != IoPrioClass::Idle {
            qq.has_short_ttime = !(qq.ttime_samples > 80 && qq.ttime_mean > slice_idle / 2);
        }
    }

    /// `bfq_update_io_seektime()`.
    fn update_seektime(&mut self, ctx: &SchedCtx, q: QueueId, rq: RqId) {
        let r = ctx.rq(rq);
        let qq = &mut self.queues[q];
        let dist = r.sector.abs_diff(qq.last_request_pos);
        let seek = dist > SEEK_THR && (ctx.rotational || r.sectors < SECT_THR_NONROT);
        qq.seek_history = (qq.seek_history << 1) | u32::from(seek);
    }

    /// `bfq_update_io_intensity()`: a queue busy less than 80% of the time
    /// (over a 200 ms window) is not I/O bound.
    fn update_io_intensity(&mut self, ctx: &SchedCtx, q: QueueId) {
        let qq = &mut self.queues[q];
        let tot = ctx.now.saturating_sub(qq.io_start_time);
        if qq.sort_list.is_empty() && qq.dispatched == 0 {
            qq.tot_idle_time += ctx.now.saturating_sub(qq.last_end_request);
        }
        if qq.just_created {
            return;
        }
        qq.io_bound = qq.tot_idle_time * 5 <= tot;
        if tot > 200 * MSEC {
            qq.io_start_time = ctx.now - tot / 2;
            qq.tot_idle_time /= 2;
        }
    }

    /// `bfq_add_bfqq_busy()` and the activation of its entity.
    fn add_busy(&mut self, q: QueueId, backshift: bool) {
        let qq = &mut self.queues[q];
        qq.busy = true;
        self.busy_queues[class_index(qq.class)] += 1;
        if qq.wr_coeff > 1 {
            self.wr_busy_queues += 1;
        }
        if qq.dispatched == 0 {
            self.weights_changed();
        }
        let e = self.queues[q].entity;
        self.activate_entity(e, backshift);
    }

    fn del_busy(&mut self, q: QueueId) {
        let qq = &mut self.queues[q];
        qq.busy = false;
        self.busy_queues[class_index(qq.class)] -= 1;
        if qq.wr_coeff > 1 {
            self.wr_busy_queues -= 1;
        }
        if qq.dispatched == 0 {
            self.weights_changed();
        }
    }

    /// `bfq_bfqq_handle_idle_busy_switch()`: a queue with a new request
    /// becomes busy: decide its weight raising and whether it preempts the
    /// queue in service.
    fn idle_busy_switch(&mut self, ctx: &mut SchedCtx, q: QueueId, rq: RqId) {
        let j = Self::jiffies(ctx);
        let old_wr_coeff = self.queues[q].wr_coeff;
        let qq = &self.queues[q];
        let idle_for_long_time =
            qq.dispatched == 0 && qq.budget_timeout + Self::ms_to_j(ctx, WR_MIN_IDLE_TIME_MS) < j;
        let arrived_in_time = ctx.now <= qq.last_end_request + 3 * self.slice_idle;
        let in_burst = qq.in_large_burst;
        let default_weight = self.entities[qq.entity].orig_weight == DEFAULT_QUEUE_WEIGHT;
        let seeky_filtered = self.mainline() && Self::totally_seeky(qq);
        let soft_rt = !seeky_filtered
            && !in_burst
            && qq.soft_rt_next_start < j
            && qq.dispatched == 0
            && default_weight;
        let interactive = !in_burst && idle_for_long_time && default_weight;
        let slow_device = !qq.just_created
            && ctx.now.saturating_sub(qq.last_end_request) < WR_MIN_IDLE_TIME_MS * MSEC;
        let low_latency = self.cfg.low_latency;
        let wr_or_deserves =
            low_latency && (qq.wr_coeff > 1 || (qq.sync && (interactive || soft_rt)));

        let wants_to_preempt = self.update_budg_for_activation(ctx, q, rq, arrived_in_time);

        // A queue idle for more than 10 s leaves its (large) burst.
        if !self.queues[q].just_created
            && idle_for_long_time
            && self.queues[q].budget_timeout + Self::ms_to_j(ctx, 10_000) < j
        {
            self.queues[q].in_large_burst = false;
            self.queues[q].in_burst_list = false;
        }
        self.queues[q].just_created = false;

        if low_latency {
            // `bfq_update_bfqq_wr_on_rq_arrival()`.
            let rt_max = Self::ms_to_j(ctx, WR_RT_MAX_TIME_MS);
            if old_wr_coeff == 1 && wr_or_deserves {
                if interactive {
                    let d = self.wr_duration(ctx);
                    let qq = &mut self.queues[q];
                    qq.service_from_wr = 0;
                    qq.wr_cur_max_time = d;
                    qq.raised_interactive += 1;
                    qq.wr_from_slow_device = slow_device;
                    self.raise_interactive(q);
                } else {
                    let qq = &mut self.queues[q];
                    qq.raised_softrt += 1;
                    qq.wr_start_at_switch_to_srt = LONG_AGO;
                    qq.wr_cur_max_time = rt_max;
                    self.raise_softrt(q);
                }
                // A freshly raised queue starts with a small budget, so
                // that it is served soon (its finish time is small).
                let e = self.queues[q].entity;
                let cap = 2 * self.min_budget();
                self.entities[e].budget = self.entities[e].budget.min(cap);
            } else if old_wr_coeff > 1 {
                if interactive {
                    let d = self.wr_duration(ctx);
                    self.queues[q].wr_cur_max_time = d;
                    // A real idle spell makes even a raising that began on
                    // the device's slowness a start; a slow request never
                    // unmakes one.
                    self.queues[q].wr_from_slow_device &= slow_device;
                    self.raise_interactive(q);
                } else if in_burst && self.queues[q].boost != HostBoost::Raise {
                    self.set_wr_coeff(q, 1);
                } else if soft_rt {
                    if self.queues[q].wr_cur_max_time != rt_max {
                        let qq = &mut self.queues[q];
                        qq.wr_start_at_switch_to_srt = qq.last_wr_start_finish;
                        qq.wr_cur_max_time = rt_max;
                        self.raise_softrt(q);
                    }
                    self.queues[q].last_wr_start_finish = j;
                }
            }
        }

        let qq = &mut self.queues[q];
        qq.last_idle_bklogged = j;
        qq.service_from_backlogged = 0;
        qq.softrt_update = false;

        self.add_busy(q, wants_to_preempt);
        self.preempt_for(ctx, q, wants_to_preempt);
    }

    /// `bfq_bfqq_update_budg_for_activation()`: a queue that lost the
    /// device only because it had nothing to do for an instant keeps its
    /// remaining budget and may preempt (mainline only); any other gets a
    /// fresh budget. Returns whether the queue wants to preempt.
    fn update_budg_for_activation(
        &mut self,
        ctx: &mut SchedCtx,
        q: QueueId,
        rq: RqId,
        arrived_in_time: bool,
    ) -> bool {
        let left = self.budget_left(q);
        let e = self.queues[q].entity;
        if self.mainline() && self.queues[q].non_blocking_wait_rq && arrived_in_time && left > 0 {
            let mb = self.queues[q].max_budget as i64;
            self.entities[e].budget = left.min(mb) as u32;
            self.entities[e].service = 0;
            true
        } else {
            let charge = self.serv_to_charge(ctx, q, rq);
            self.entities[e].service = 0;
            self.entities[e].budget = self.queues[q].max_budget.max(charge);
            self.queues[q].non_blocking_wait_rq = false;
            false
        }
    }

    /// Preemption by queue `q`, just made busy: it takes the device if it
    /// is raised at least as much as the queue in service and kept its
    /// budget, if it has a higher class or weight, or if idling for the
    /// queue in service is pointless. (v7r2 never preempted here.)
    fn preempt_for(&mut self, ctx: &mut SchedCtx, q: QueueId, wants_to_preempt: bool) {
        if let Some(isq) = self.in_service.filter(|_| self.mainline()) {
            if isq != q {
                let higher = self.higher_class_or_weight(q, isq);
                if ((wants_to_preempt && self.queues[q].wr_coeff >= self.queues[isq].wr_coeff)
                    || higher
                    || !self.better_to_idle(ctx, isq))
                    && self.next_queue_may_preempt()
                {
                    self.expire(ctx, isq, false, Expiration::Preempted);
                }
            }
        }
    }

    /// `bfq_bfqq_higher_class_or_weight()`.
    fn higher_class_or_weight(&self, q: QueueId, isq: QueueId) -> bool {
        let (a, b) = (&self.queues[q], &self.queues[isq]);
        if a.class < b.class {
            return true;
        }
        let (ea, eb) = (&self.entities[a.entity], &self.entities[b.entity]);
        let wa = if ea.parent_sd == eb.parent_sd {
            ea.weight
        } else {
            self.sds[ea.parent_sd]
                .owner
                .map(|g| self.entities[g].weight)
                .unwrap_or(ea.weight)
        };
        let wb = if ea.parent_sd == eb.parent_sd {
            eb.weight
        } else {
            self.sds[eb.parent_sd]
                .owner
                .map(|g| self.entities[g].weight)
                .unwrap_or(eb.weight)
        };
        wa > wb
    }

    /// `bfq_bfqq_is_slow()`: a sync queue that got less than half the max
    /// budget in more than 20 ms, or a seeky one, is slow.
    fn is_slow(&self, ctx: &SchedCtx, q: QueueId, compensate: bool) -> (bool, u64) {
        let qq = &self.queues[q];
        let mut slow = Self::seeky(qq);
        if !qq.sync {
            return (false, 0);
        }
        let end = if compensate {
            self.last_idling_start
        } else {
            ctx.now
        };
        let delta_us = end.saturating_sub(self.last_budget_start) / 1000;
        if delta_us < 1000 {
            let ms = if ctx.rotational {
                self.slice_idle / MSEC
            } else {
                MIN_TT / MSEC
            };
            return (slow, ms);
        }
        if delta_us > 20_000 {
            slow = (self.entities[qq.entity].service as u64) < self.max_budget as u64 / 2;
        }
        (slow, delta_us / 1000)
    }

    /// `bfq_bfqq_charge_time()`: a slow queue pays for the time it held
    /// the device, as if it had been served at the max-budget rate, so
    /// that seeky processes cannot take more than their share of time.
    fn charge_time(&mut self, q: QueueId, time_ms: u64) {
        let bounded = time_ms.min(TIMEOUT_MS);
        let by_time = (self.max_budget as u64 * bounded / TIMEOUT_MS) as u32;
        let e = self.queues[q].entity;
        let service = self.entities[e].service;
        let total = by_time.max(service);
        if total > self.entities[e].budget {
            self.entities[e].budget = total;
        }
        if total > service {
            self.served(q, total - service);
        }
    }

    /// `__bfq_bfqq_recalc_budget()`: budget feedback. A queue that
    /// consumes its budget gets a bigger one (x4, or x2 on timeout); one
    /// that goes idle early gets a smaller one. Raised queues keep small
    /// budgets so they are scheduled often. Mainline cuts the budget of a
    /// queue that ran out of requests to what it used; v7r2 left it alone.
    ///
    /// The v7 sources at hand (v7r11) fed raised queues' budgets back as
    /// the others', and charged a slow or timed-out queue its whole budget
    /// (`bfq_bfqq_charge_full_budget()`, raised or not) where mainline
    /// charges the time it held the device (`charge_time`). The simulated
    /// v7r2 keeps mainline's way for both. With v7r11's, the guest's random
    /// readers, raised when they start, grow budgets of up to the maximum,
    /// keep them once the raising ends, and are charged them in full; their
    /// soft real-time next start (`softrt_next_start`) then lies seconds
    /// ahead, and the HZ=100 guest without the +4 ticks slack never
    /// mistakes them for soft real-time (0 raisings in 60 s, against 25 or
    /// more), which the published v7r2 guests did.
    fn recalc_budget(&mut self, ctx: &SchedCtx, q: QueueId, reason: Expiration) {
        let min_budget = self.min_budget();
        let cur_max = self.cur_max_budget();
        let mainline = self.mainline();
        let qq = &self.queues[q];
        let feedback = qq.wr_coeff == 1;
        let mut budget = if feedback {
            qq.max_budget
        } else {
            2 * min_budget
        };
        if qq.sync && feedback {
            budget = match reason {
                Expiration::TooIdle => {
                    if qq.dispatched > 0 {
                        (budget * 2).min(cur_max)
                    } else if budget > 5 * min_budget {
                        budget - 4 * min_budget
                    } else {
                        min_budget
                    }
                }
                Expiration::BudgetTimeout => (budget * 2).min(cur_max),
                Expiration::BudgetExhausted => (budget * 4).min(cur_max),
                Expiration::NoMoreRequests if !mainline => return,
                Expiration::NoMoreRequests => self.entities[qq.entity].service.max(min_budget),
                Expiration::Preempted => return,
            };
        } else if !qq.sync {
            budget = cur_max;
        }
        let mut mb = budget;
        if self.budgets_assigned >= STATS_MIN_BUDGETS {
            mb = mb.min(self.max_budget);
        }
        self.queues[q].max_budget = mb.max(1);
        if let Some(next) = self.next_rq(ctx, q) {
            let charge = self.serv_to_charge(ctx, q, next);
            let e = self.queues[q].entity;
            self.entities[e].budget = mb.max(charge);
        }
    }

    /// `bfq_bfqq_expire()`: the queue in service loses the device.
    fn expire(&mut self, ctx: &mut SchedCtx, q: QueueId, compensate: bool, reason: Expiration) {
        let (slow, delta_ms) = self.is_slow(ctx, q, compensate);
        let e = self.queues[q].entity;
        if self.queues[q].wr_coeff == 1
            && (slow
                || (reason == Expiration::BudgetTimeout
                    && self.budget_left(q) >= self.entities[e].budget as i64 / 3))
        {
            self.charge_time(q, delta_ms);
        }
        let j = Self::jiffies(ctx);
        if self.cfg.low_latency && self.queues[q].wr_coeff == 1 {
            self.queues[q].last_wr_start_finish = j;
        }
        if self.cfg.low_latency && self.queues[q].sort_list.is_empty() {
            if self.queues[q].dispatched == 0 {
                self.queues[q].soft_rt_next_start = self.softrt_next_start(ctx, q);
            } else {
                self.queues[q].softrt_update = true;
            }
        }
        // The IO_bound flag drops for a queue that went idle having used
        // little of its budget.
        if reason == Expiration::TooIdle
            && self.entities[e].service <= 2 * self.entities[e].budget / 10
        {
            self.queues[q].io_bound = false;
        }
        self.recalc_budget(ctx, q, reason);

        // `__bfq_bfqq_expire()`.
        let keep_busy = !self.queues[q].sort_list.is_empty()
            || (reason == Expiration::Preempted && self.idling_needed_for_guarantees(q));
        if !keep_busy {
            if self.queues[q].dispatched == 0 {
                self.queues[q].budget_timeout = j;
            }
            self.del_busy(q);
        }
        let service_left = self.entities[e].budget as i64 - self.entities[e].service as i64;
        self.end_service_entity(e, keep_busy);
        self.in_service = None;
        self.queues[q].wait_request = false;
        ctx.cancel_timer();
        if !keep_busy
            && reason != Expiration::BudgetTimeout
            && reason != Expiration::BudgetExhausted
            && service_left > 0
        {
            // It may come back soon and resume its budget.
            self.queues[q].non_blocking_wait_rq = true;
            let ent = &mut self.entities[e];
            ent.budget = service_left as u32;
        }
    }

    /// `__bfq_set_in_service_queue()`.
    fn set_in_service(&mut self, ctx: &SchedCtx) -> Option<QueueId> {
        let q = self.get_next_queue(ctx)?;
        self.in_service = Some(q);
        self.queues[q].fifo_expire_used = false;
        self.budgets_assigned = (self.budgets_assigned * 7 + 256) / 8;
        // A soft real-time queue that waited for service does not lose
        // raising time for the wait.
        let j = Self::jiffies(ctx);
        let rt_max = Self::ms_to_j(ctx, WR_RT_MAX_TIME_MS);
        let qq = &mut self.queues[q];
        if qq.last_wr_start_finish < j
            && qq.wr_coeff > 1
            && qq.wr_cur_max_time == rt_max
            && qq.budget_timeout < j
        {
            if qq.budget_timeout > qq.last_wr_start_finish {
                qq.last_wr_start_finish += j - qq.budget_timeout;
            } else {
                qq.last_wr_start_finish = j;
            }
        }
        self.set_budget_timeout(ctx, q);
        Some(q)
    }

    /// `bfq_arm_slice_timer()`: wait for the queue's next request. Seeky
    /// queues get only BFQ_MIN_TT (unless the scenario is asymmetric);
    /// raised ones at least 20 ms.
    fn arm_slice_timer(&mut self, ctx: &mut SchedCtx, q: QueueId) {
        self.queues[q].wait_request = true;
        let qq = &self.queues[q];
        let mut sl = self.slice_idle;
        if Self::seeky(qq) && qq.wr_coeff == 1 && !self.asymmetric(q) {
            sl = sl.min(MIN_TT);
        } else if qq.wr_coeff > 1 {
            sl = sl.max(20 * MSEC);
        }
        self.last_idling_start = ctx.now;
        ctx.arm_timer(ctx.now + sl);
    }

    /// `bfq_select_queue()`.
    fn select_queue(&mut self, ctx: &mut SchedCtx) -> Option<QueueId> {
        let mut reason = Expiration::BudgetTimeout;
        if let Some(q) = self.in_service {
            let expire;
            if self.may_expire_for_budget_timeout(ctx, q) && !self.must_idle(ctx, q) {
                expire = true;
            } else if let Some(next) = self.next_rq(ctx, q) {
                if self.serv_to_charge(ctx, q, next) as i64 > self.budget_left(q) {
                    reason = Expiration::BudgetExhausted;
                    expire = true;
                } else {
                    if self.queues[q].wait_request {
                        self.queues[q].wait_request = false;
                        ctx.cancel_timer();
                    }
                    return Some(q);
                }
            } else if self.queues[q].wait_request
                || (self.queues[q].dispatched > 0 && self.keeps_device_while_in_flight(ctx, q))
            {
                // Keep the device for this queue: idle.
                return None;
            } else {
                reason = Expiration::NoMoreRequests;
                expire = true;
            }
            if expire {
                self.expire(ctx, q, false, reason);
            }
        }
        loop {
            let q = self.set_in_service(ctx)?;
            if let Some(next) = self.next_rq(ctx, q) {
                if self.serv_to_charge(ctx, q, next) as i64 > self.budget_left(q) {
                    self.expire(ctx, q, false, Expiration::BudgetExhausted);
                    continue;
                }
                return Some(q);
            }
            // Selected an empty queue: should not happen, but never loop.
            self.expire(ctx, q, false, Expiration::NoMoreRequests);
        }
    }

    fn remove_request(&mut self, ctx: &SchedCtx, q: QueueId, rq: RqId) {
        let sector = ctx.rq(rq).sector;
        let qq = &mut self.queues[q];
        qq.sort_list.remove((sector, rq));
        // Mostly the oldest request goes: pop it without `remove`'s
        // general (wrap-around) shuffling.
        if qq.fifo.front().is_some_and(|&(_, id)| id == rq) {
            qq.fifo.pop_front();
        } else if let Some(pos) = qq.fifo.iter().position(|&(_, id)| id == rq) {
            qq.fifo.remove(pos);
        }
        self.queued -= 1;
    }

    /// `bfq_update_peak_rate()`: estimates the device's peak rate from
    /// sequential dispatches, and retunes the max budget to what the device
    /// serves in one budget timeout.
    fn update_peak_rate(&mut self, ctx: &SchedCtx, rq: RqId) {
        let now = ctx.now;
        let r = ctx.rq(rq);
        let sectors = r.sectors;
        let seeky_rq = {
            let dist = r.sector.abs_diff(self.last_position);
            dist > SEEK_THR && (ctx.rotational || sectors < SECT_THR_NONROT)
        };
        if self.rate.samples == 0 {
            self.reset_rate(now, sectors);
        } else if now - self.rate.last_dispatch > 100 * MSEC && self.rq_in_driver == 0 {
            self.update_rate_reset(now, Some(sectors));
        } else {
            self.rate.samples += 1;
            if (self.rq_in_driver > 0 || now - self.rate.last_completion < MIN_TT) && !seeky_rq {
                self.rate.sequential_samples += 1;
            }
            self.rate.tot_sectors += sectors as u64;
            self.rate.last_rq_max_size = self.rate.last_rq_max_size.max(sectors);
            self.rate.delta_from_first = now - self.rate.first_dispatch;
            if self.rate.delta_from_first >= RATE_REF_INTERVAL {
                self.update_rate_reset(now, Some(sectors));
            }
        }
        self.last_position = r.end_sector();
        self.rate.last_dispatch = now;
    }

    fn reset_rate(&mut self, now: Nanos, sectors: u32) {
        self.rate.first_dispatch = now;
        self.rate.last_dispatch = now;
        self.rate.samples = 1;
        self.rate.sequential_samples = 0;
        self.rate.tot_sectors = sectors as u64;
        self.rate.last_rq_max_size = sectors;
    }

    /// `bfq_update_rate_reset()`: folds an observation into the peak rate
    /// with a weight that grows with how sequential and how long it was.
    fn update_rate_reset(&mut self, now: Nanos, next: Option<u32>) {
        let ok = self.rate.samples >= RATE_MIN_SAMPLES
            && self.rate.delta_from_first >= RATE_MIN_INTERVAL;
        if ok {
            let delta = self.rate.delta_from_first.max(
                self.rate
                    .last_completion
                    .saturating_sub(self.rate.first_dispatch),
            );
            let rate = (self.rate.tot_sectors << RATE_SHIFT) / (delta / 1000).max(1);
            let mostly_seq = self.rate.sequential_samples >= (3 * self.rate.samples) / 4;
            if (mostly_seq || rate > self.peak_rate) && rate <= 20 << RATE_SHIFT {
                let weight = (9 * self.rate.sequential_samples as u64) / self.rate.samples as u64;
                let weight = (weight * delta / RATE_REF_INTERVAL).min(8);
                let divisor = 10 - weight;
                self.peak_rate = self.peak_rate * (divisor - 1) / divisor + rate / divisor;
                self.peak_rate = self.peak_rate.max(1);
                // `bfq_calc_max_budget()`: what the device serves at peak
                // rate in one budget timeout.
                self.max_budget =
                    ((self.peak_rate * 1000 * TIMEOUT_MS) >> RATE_SHIFT).max(32) as u32;
            }
        }
        match next {
            Some(s) => self.reset_rate(now, s),
            None => self.rate.samples = 0,
        }
    }

    /// The estimated peak rate in bytes per second.
    /// Whether queue `q` is one of [`BfqExt::raised_busy_queues`]: raised
    /// since `since`, with I/O queued or in flight, for a program starting
    /// or a soft real-time one.
    fn urgent_raising(q: &Queue, since: Nanos) -> Option<UrgentRaising> {
        if !(q.sync && q.wr_coeff > 1 && (q.busy || q.dispatched > 0) && q.wr_started_at >= since) {
            return None;
        }
        // An interactive raising that BFQ switched to soft real-time (the
        // starting program's reads came spaced out enough) is still a
        // program starting.
        let started_interactive = !q.softrt || q.wr_start_at_switch_to_srt != LONG_AGO;
        if started_interactive {
            // A raising that only the device's slowness earned is no
            // program starting (on a guest, the host's load starving a
            // background reader: the missing link seen from inside).
            (!q.wr_from_slow_device).then_some(UrgentRaising::Interactive)
        } else {
            // Mainline BFQ never deems a totally seeky queue soft real-time
            // (v7r2 did, on coarse ticks): such a raising is a greedy random
            // reader, not a need for help.
            (!Self::totally_seeky(q)).then_some(UrgentRaising::SoftRt)
        }
    }

    pub fn peak_rate_bytes_per_s(&self) -> f64 {
        self.peak_rate as f64 / (1u64 << RATE_SHIFT) as f64 * 512.0 * 1e6
    }

    /// The current weight-raising coefficient of a process's sync queue.
    pub fn wr_coeff_of(&self, pid: Pid) -> Option<u32> {
        self.sync_queue(pid).map(|q| self.queues[q].wr_coeff)
    }
}

impl IoScheduler for Bfq {
    fn name(&self) -> &'static str {
        "bfq"
    }

    fn as_bfq(&self) -> Option<&dyn BfqExt> {
        Some(self)
    }

    fn as_bfq_mut(&mut self) -> Option<&mut dyn BfqExt> {
        Some(self)
    }

    /// `bfq_allow_bio_merge()`: a sync bio merges only into a request of
    /// its own queue.
    fn allow_merge(&self, _ctx: &SchedCtx, rq: RqId, ioc: &IoContext, sync: bool) -> bool {
        if !sync {
            return true;
        }
        match (
            self.rq_queue.get(rq).copied().flatten(),
            self.sync_queue(ioc.pid),
        ) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        }
    }

    fn insert(&mut self, ctx: &mut SchedCtx, rq: RqId) {
        self.now = ctx.now;
        if self.rotational.is_none() {
            self.rotational = Some(ctx.rotational);
            // `bfq_init_queue()`: start from 2/3 of the reference rate.
            self.peak_rate = REF_RATE[self.nonrot()] * 2 / 3;
            self.max_budget = DEFAULT_MAX_BUDGET;
        }
        let (ioc, sync, sector, end) = {
            let r = ctx.rq(rq);
            (r.ioc, r.sync, r.sector, r.end_sector())
        };
        let q = self.queue_for(ctx, &ioc, sync);
        if sync && self.queues[q].prio != ioc.prio {
            // `bfq_check_ioprio_change()`: noted now, applied when the
            // queue is next activated (below, if it is idle) or requeued
            // after its service (`end_service_entity`).
            self.queues[q].new_prio = Some(ioc.prio);
        }
        if sync && !self.queues[q].busy && self.in_service != Some(q) {
            if let Some(prio) = self.queues[q].new_prio.take() {
                self.apply_prio_change(q, prio);
            }
            let boost = self
                .boosts
                .get(ioc.pid as usize)
                .copied()
                .unwrap_or_default();
            if self.queues[q].boost != boost {
                self.apply_boost(ctx, q, boost);
            }
        }
        if self.rq_queue.len() <= rq {
            self.rq_queue.resize(rq + 1, None);
        }
        self.rq_queue[rq] = Some(q);
        // `__bfq_insert_request()`.
        if sync {
            self.update_thinktime(ctx, q);
            self.update_seektime(ctx, q, rq);
            self.update_io_intensity(ctx, q);
        }
        self.queued += 1;
        let fifo_deadline = ctx.now + FIFO_EXPIRE[usize::from(sync)];
        {
            let qq = &mut self.queues[q];
            qq.sort_list.insert((sector, rq));
            qq.fifo.push_back((fifo_deadline, rq));
        }
        let old_wr_coeff = self.queues[q].wr_coeff;
        if !self.queues[q].busy {
            self.idle_busy_switch(ctx, q, rq);
        } else if self.cfg.low_latency
            && old_wr_coeff == 1
            && !sync
            && self.queues[q].last_wr_start_finish + Self::ms_to_j(ctx, WR_MIN_INTER_ARR_ASYNC_MS)
                < Self::jiffies(ctx)
        {
            // Async queues get raised when they restart after a while,
            // as the kernel does in `bfq_add_request()`.
            let d = self.wr_duration(ctx);
            self.queues[q].wr_cur_max_time = d;
            self.raise_interactive(q);
        }
        if self.cfg.low_latency {
            let qq = &self.queues[q];
            if old_wr_coeff == 1 || qq.wr_coeff == 1 {
                let j = Self::jiffies(ctx);
                self.queues[q].last_wr_start_finish = j;
            }
        }
        // `bfq_rq_enqueued()`.
        self.queues[q].last_request_pos = end;
        if self.in_service == Some(q) && self.queues[q].wait_request {
            let small = self.queues[q].sort_list.len() == 1 && ctx.rq(rq).sectors < 32;
            let timed_out = self.budget_timed_out(ctx, q);
            if small && self.idling_boosts_thr_without_issues(ctx, q) && !timed_out {
                // Wait a bit more: a bigger request may follow.
                return;
            }
            self.queues[q].wait_request = false;
            ctx.cancel_timer();
            if timed_out {
                self.expire(ctx, q, false, Expiration::BudgetTimeout);
            }
        }
    }

    fn merged(&mut self, ctx: &mut SchedCtx, rq: RqId, kind: MergeKind) {
        self.now = ctx.now;
        if kind == MergeKind::Front {
            if let Some(q) = self.rq_queue.get(rq).copied().flatten() {
                let qq = &mut self.queues[q];
                let new_sector = ctx.rq(rq).sector;
                if let Some(s) = qq.sort_list.sector_of(rq) {
                    qq.sort_list.remove((s, rq));
                }
                qq.sort_list.insert((new_sector, rq));
            }
        }
    }

    fn dispatch(&mut self, ctx: &mut SchedCtx) -> Option<RqId> {
        self.now = ctx.now;
        self.rq_in_driver = ctx.in_driver;
        if self.queued == 0 {
            return None;
        }
        let q = self.select_queue(ctx)?;
        if !self.mainline() && !self.queues[q].sync {
            // v7r2's `bfq_dispatch_requests()`: writes wait while reads are
            // in the driver, and fill it only a few at a time while others
            // wait, so that a burst of write-back cannot sit in front of
            // the next read.
            let in_driver = self.queues[q].dispatched;
            if self.sync_in_driver > 0
                || (in_driver >= V7R2_MAX_ASYNC_IN_DRIVER
                    && (self.tot_busy() > 1 || in_driver >= 4 * V7R2_MAX_ASYNC_IN_DRIVER))
            {
                return None;
            }
        }
        let rq = self.pick_rq(ctx, q)?;
        // `bfq_dispatch_rq_from_bfqq()`.
        let charge = self.serv_to_charge(ctx, q, rq);
        self.served(q, charge);
        self.remove_request(ctx, q, rq);
        self.update_peak_rate(ctx, rq);
        self.queues[q].dispatched += 1;
        if self.queues[q].dispatched == 1 && !self.queues[q].busy {
            self.weights_changed();
        }
        self.rq_in_driver += 1;
        if self.queues[q].sync {
            self.sync_in_driver += 1;
        }
        self.update_wr_data(ctx, q);
        // An IDLE-class queue gives the device back after each request
        // when others are waiting.
        if self.tot_busy() > 1 && self.queues[q].class == IoPrioClass::Idle {
            self.expire(ctx, q, false, Expiration::BudgetExhausted);
        }
        Some(rq)
    }

    fn completed(&mut self, ctx: &mut SchedCtx, rq: RqId) {
        self.now = ctx.now;
        let Some(q) = self.rq_queue.get_mut(rq).and_then(Option::take) else {
            return;
        };
        self.rq_in_driver = ctx.in_driver;
        let now = ctx.now;
        if self.queues[q].sync {
            self.sync_in_driver -= 1;
        }
        let went_idle = {
            let qq = &mut self.queues[q];
            qq.dispatched -= 1;
            qq.last_end_request = now;
            qq.dispatched == 0 && !qq.busy
        };
        if went_idle {
            self.queues[q].budget_timeout = Self::jiffies(ctx);
            self.weights_changed();
        }
        // A long gap since the last completion with tiny requests means the
        // device went idle: close the current rate observation.
        let delta_us = now.saturating_sub(self.rate.last_completion) / 1000;
        if delta_us > MIN_TT / 1000
            && ((self.rate.last_rq_max_size as u64) << RATE_SHIFT) / delta_us.max(1)
                < 1 << (RATE_SHIFT - 10)
        {
            self.update_rate_reset(now, None);
        }
        self.rate.last_completion = now;
        // Not for an interactive raising (mainline: `wr_coeff !=
        // bfq_wr_coeff`).
        let interactive = self.queues[q].wr_coeff > 1 && !self.queues[q].softrt;
        if self.queues[q].softrt_update
            && self.queues[q].dispatched == 0
            && self.queues[q].sort_list.is_empty()
            && !interactive
        {
            self.queues[q].soft_rt_next_start = self.softrt_next_start(ctx, q);
        }
        if self.in_service == Some(q) {
            if self.must_idle(ctx, q) {
                if self.queues[q].dispatched == 0 {
                    self.arm_slice_timer(ctx, q);
                }
            } else if self.may_expire_for_budget_timeout(ctx, q) {
                self.expire(ctx, q, false, Expiration::BudgetTimeout);
            } else if self.queues[q].sort_list.is_empty()
                && (self.queues[q].dispatched == 0 || !self.keeps_device_while_in_flight(ctx, q))
            {
                self.expire(ctx, q, false, Expiration::NoMoreRequests);
            }
        }
    }

    /// `bfq_idle_slice_timer_body()`: the queue did not issue in time.
    fn timer(&mut self, ctx: &mut SchedCtx) {
        self.now = ctx.now;
        let Some(q) = self.in_service else { return };
        if !self.queues[q].wait_request {
            return;
        }
        self.queues[q].wait_request = false;
        let reason = if self.budget_timed_out(ctx, q) {
            Expiration::BudgetTimeout
        } else if self.queues[q].sort_list.is_empty() {
            Expiration::TooIdle
        } else {
            return;
        };
        self.expire(ctx, q, true, reason);
    }

    fn queued(&self) -> usize {
        self.queued
    }
}

impl BfqExt for Bfq {
    fn raisings(&self, pid: Pid) -> (u32, u32) {
        self.sync_queue(pid).map_or((0, 0), |q| {
            (
                self.queues[q].raised_interactive,
                self.queues[q].raised_softrt,
            )
        })
    }

    /// Raised sync queues with requests queued or in the device: a queue
    /// whose only request is in flight is not busy for B-WF2Q+, but its
    /// process is still waiting for the disk (under host load, for a long
    /// time). Async queues do not count: BFQ raises write-back that comes
    /// back after a pause (`bfq_wr_min_inter_arr_async`), but no one waits
    /// for it, and boosting a VM's write-back only costs the host
    /// throughput (random writes on the card model: the host's aggregate
    /// fell by up to 31.8% in `vbfq-throughput` when the guests asked for
    /// it).
    fn raised_busy_queues(&self, since: Nanos) -> (usize, usize) {
        let mut counts = (0, 0);
        for q in &self.queues {
            match Self::urgent_raising(q, since) {
                Some(UrgentRaising::Interactive) => counts.0 += 1,
                Some(UrgentRaising::SoftRt) => counts.1 += 1,
                None => {}
            }
        }
        counts
    }

    fn raised_busy_pids(&self, since: Nanos) -> Vec<Pid> {
        self.sync_queues
            .iter()
            .enumerate()
            .filter_map(|(pid, q)| {
                let q = &self.queues[(*q)?];
                Self::urgent_raising(q, since).map(|_| pid as Pid)
            })
            .collect()
    }

    fn set_boost(&mut self, ctx: &mut SchedCtx, pid: Pid, boost: HostBoost) {
        self.now = ctx.now;
        let i = pid as usize;
        if self.boosts.len() <= i {
            self.boosts.resize(i + 1, HostBoost::None);
        }
        self.boosts[i] = boost;
        if let Some(q) = self.sync_queue(pid) {
            self.apply_boost(ctx, q, boost);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Rng;
    use std::collections::BTreeSet;

    /// The sorted vector answers every question the scheduler asks of a
    /// queue's requests exactly as the ordered set it stands for.
    #[test]
    fn sort_list_matches_an_ordered_set() {
        let mut list = SortList::default();
        let mut set: BTreeSet<(u64, RqId)> = BTreeSet::new();
        let mut r = Rng::new(11);
        for _ in 0..20_000 {
            let key = (r.below(64) * 8, r.below(16) as RqId);
            if r.below(2) == 0 {
                list.insert(key);
                set.insert(key);
            } else {
                list.remove(key);
                set.remove(&key);
            }
            let head = r.below(70 * 8);
            let fwd = set.range((head, 0)..).next().copied();
            let back = set.range(..(head, 0)).next_back().copied();
            assert_eq!(list.around(head), (fwd, back));
            assert_eq!(list.first(), set.first().copied());
            assert_eq!(list.len(), set.len());
            assert_eq!(list.is_empty(), set.is_empty());
            let id = key.1;
            let filed = set.iter().find(|&&(_, x)| x == id).map(|&(s, _)| s);
            assert_eq!(list.sector_of(id), filed);
        }
    }
}
