//! I/O schedulers behind one trait that mirrors the kernel's elevator hooks.
//!
//! | trait method | kernel hook (`struct elevator_mq_ops`, `block/elevator.h`) |
//! |---|---|
//! | [`IoScheduler::insert`] | `insert_requests` |
//! | [`IoScheduler::dispatch`] | `dispatch_request` |
//! | [`IoScheduler::completed`] | `completed_request` / `finish_request` |
//! | [`IoScheduler::timer`] | the scheduler's own timer (BFQ/CFQ idle slice, AS antic timer) |
//! | [`IoScheduler::allow_merge`] | `allow_merge` |
//! | [`IoScheduler::merged`] | `request_merged` |
//! | [`IoScheduler::has_work`] | `has_work` |
//!
//! The block layer ([`crate::block`]) owns the requests, does the front and
//! back merging, and calls `dispatch` whenever the device can take another
//! command. A scheduler may arm one timer through [`SchedCtx::arm_timer`];
//! when it fires the block layer calls [`IoScheduler::timer`] and then tries
//! to dispatch again.

use crate::request::{CgroupId, IoContext, Pid, Request, RequestTable, RqId};
use devmodel::Nanos;
use experiment::IoSched;

pub mod anticipatory;
pub mod bfq;
pub mod cfq;
pub mod deadline;
pub mod kyber;
pub mod noop;
#[cfg(test)]
mod testutil;

/// Nanoseconds per millisecond.
pub const MSEC: Nanos = 1_000_000;
/// Nanoseconds per second.
pub const SEC: Nanos = 1_000_000_000;

/// How a bio joined an existing request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergeKind {
    /// The bio was appended after the request's last sector.
    Back,
    /// The bio was prepended; the request's start sector moved down.
    Front,
}

/// cgroup weights, as set through `blkio.bfq.weight` (v1) or
/// `io.bfq.weight` (v2). Group 0 is the root.
#[derive(Clone, Debug)]
pub struct Cgroups {
    weights: Vec<u32>,
}

impl Cgroups {
    /// `BFQ_DEFAULT_GRP_WEIGHT` in `block/bfq-iosched.h`.
    pub const DEFAULT_WEIGHT: u32 = 100;

    pub fn new() -> Cgroups {
        Cgroups {
            weights: vec![Self::DEFAULT_WEIGHT],
        }
    }

    /// Creates a child of the root with the given weight (1..=1000, the
    /// range `bfq_io_set_weight` accepts).
    pub fn create(&mut self, weight: u32) -> CgroupId {
        self.weights.push(weight.clamp(1, 1000));
        (self.weights.len() - 1) as CgroupId
    }

    pub fn weight(&self, cg: CgroupId) -> u32 {
        self.weights
            .get(cg as usize)
            .copied()
            .unwrap_or(Self::DEFAULT_WEIGHT)
    }

    pub fn count(&self) -> usize {
        self.weights.len()
    }
}

impl Default for Cgroups {
    fn default() -> Self {
        Cgroups::new()
    }
}

/// The kernel tick. `jiffies` advance in steps of 1/HZ. A kernel whose
/// tick is stopped while it idles can also see `jiffies` that lag: the
/// block layer then sets [`TickSource::stale`] for the duration of a hook,
/// and the hook sees that older value (see `crate::vm` for when a guest's
/// jiffies lag).
#[derive(Clone, Copy, Debug)]
pub struct TickSource {
    pub hz: u32,
    /// When set, the value `jiffies` reads instead of the current one.
    pub stale: Option<u64>,
}

impl TickSource {
    pub fn new(hz: u32) -> TickSource {
        TickSource { hz, stale: None }
    }
    pub fn jiffies(&self, now: Nanos) -> u64 {
        self.stale.unwrap_or(now / self.tick_ns())
    }
    pub fn tick_ns(&self) -> Nanos {
        SEC / self.hz as Nanos
    }
    /// `msecs_to_jiffies`, rounding up as the kernel does.
    pub fn msecs_to_jiffies(&self, ms: u64) -> u64 {
        (ms * self.hz as u64).div_ceil(1000)
    }
    /// `nsecs_to_jiffies`, rounding down as the kernel does.
    pub fn nsecs_to_jiffies(&self, ns: Nanos) -> u64 {
        ns / self.tick_ns()
    }
}

/// What a scheduler may look at and do during a hook.
pub struct SchedCtx<'a> {
    pub now: Nanos,
    pub rqs: &'a RequestTable,
    /// Requests dispatched to the device and not yet completed
    /// (`rq_in_driver` in BFQ and CFQ).
    pub in_driver: usize,
    /// The device's command queue depth (NCQ/TCQ). 1 means no queueing.
    pub queue_depth: usize,
    /// Rotational device (`/sys/block/X/queue/rotational`).
    pub rotational: bool,
    pub cgroups: &'a Cgroups,
    pub ticks: TickSource,
    /// Timer request: `Some(Some(t))` arm at `t`, `Some(None)` cancel,
    /// `None` leave as it is.
    pub timer_request: Option<Option<Nanos>>,
}

impl SchedCtx<'_> {
    pub fn rq(&self, id: RqId) -> &Request {
        self.rqs.get(id)
    }
    /// Arms (or re-arms) the scheduler's single timer at absolute time `at`.
    pub fn arm_timer(&mut self, at: Nanos) {
        self.timer_request = Some(Some(at));
    }
    pub fn cancel_timer(&mut self) {
        self.timer_request = Some(None);
    }
    pub fn jiffies(&self) -> u64 {
        self.ticks.jiffies(self.now)
    }
}

/// The elevator interface. See the module documentation for the mapping to
/// the kernel hooks.
pub trait IoScheduler: Send {
    /// The kernel's name for the scheduler.
    fn name(&self) -> &'static str;

    /// May a bio from `ioc` (sync or not) be merged into pending request
    /// `rq`? CFQ and BFQ refuse merges across queues for sync I/O.
    fn allow_merge(&self, ctx: &SchedCtx, rq: RqId, ioc: &IoContext, sync: bool) -> bool {
        let _ = (ctx, rq, ioc, sync);
        true
    }

    /// A new request enters the scheduler.
    fn insert(&mut self, ctx: &mut SchedCtx, rq: RqId);

    /// Pending request `rq` grew by a bio.
    fn merged(&mut self, ctx: &mut SchedCtx, rq: RqId, kind: MergeKind) {
        let _ = (ctx, rq, kind);
    }

    /// The device can take one more command: hand over a request, or
    /// `None` to leave the device alone (nothing queued, or idling).
    fn dispatch(&mut self, ctx: &mut SchedCtx) -> Option<RqId>;

    /// A dispatched request completed. It is still readable through
    /// `ctx.rq(rq)` and is freed after this call.
    fn completed(&mut self, ctx: &mut SchedCtx, rq: RqId);

    /// The timer armed with [`SchedCtx::arm_timer`] fired.
    fn timer(&mut self, ctx: &mut SchedCtx);

    /// Requests inside the scheduler, not yet dispatched.
    fn queued(&self) -> usize;

    /// BFQ's own interface ([`BfqExt`]), for the callers that use what
    /// only BFQ has: weight raising and the host-side boost. Every other
    /// scheduler has none.
    fn as_bfq(&self) -> Option<&dyn BfqExt> {
        None
    }

    /// [`IoScheduler::as_bfq`], mutably.
    fn as_bfq_mut(&mut self) -> Option<&mut dyn BfqExt> {
        None
    }
}

/// What only BFQ does, beyond the elevator hooks: its weight raising, as
/// reports and the guest side of coordination read it, and the host-side
/// boost that coordination applies to a helped VM's QEMU threads. Reached
/// through [`IoScheduler::as_bfq`] and [`IoScheduler::as_bfq_mut`].
pub trait BfqExt {
    /// Weight-raising periods started so far for process `pid`'s sync
    /// queue: (interactive, soft real-time). Tests and reports use it to
    /// see the heuristics at work, e.g. a greedy reader deemed soft
    /// real-time.
    fn raisings(&self, pid: Pid) -> (u32, u32);

    /// Queues weight-raised now, with I/O queued or in flight, whose raising
    /// began at or after `since` (BFQ's `wr_busy_queues`, restricted to
    /// recent raisings): (interactive, soft real-time). Applications that
    /// the scheduler itself deems urgent and that are waiting for the disk;
    /// a coordinated guest asks its host for help while there are any.
    /// Interactive raisings that only the device's slowness earned (a
    /// queue whose previous request had just completed) are left out.
    fn raised_busy_queues(&self, since: Nanos) -> (usize, usize);

    /// The processes whose sync queues [`BfqExt::raised_busy_queues`]
    /// counts, in pid order: the tasks a guest daemon that marks urgency
    /// itself (`vhost-ioprio`) raises the ioprio of.
    fn raised_busy_pids(&self, since: Nanos) -> Vec<Pid>;

    /// Host-side coordination: privilege (or stop privileging) the I/O of
    /// process `pid`, a QEMU thread of a VM that asked for help. It may be
    /// called before the process has issued any I/O; the scheduler applies
    /// it when the process's queue appears. (With the other schedulers,
    /// coordination changes the ioprio class of the process instead, and
    /// every scheduler sees that on the next request.)
    fn set_boost(&mut self, ctx: &mut SchedCtx, pid: Pid, boost: HostBoost);
}

/// How a host elevator privileges a helped VM's QEMU threads
/// ([`BfqExt::set_boost`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HostBoost {
    /// No privilege.
    #[default]
    None,
    /// The queue's weight is multiplied by this factor (`help-weight`).
    Weight(u32),
    /// The queue is treated as weight-raised, interactive-style
    /// (`help-wr`): the weight x30 and the idling and budget-timeout
    /// treatment of raised queues.
    Raise,
}

/// Tunables shared by the scheduler constructors.
#[derive(Clone, Debug)]
pub struct SchedConfig {
    /// Kernel tick rate (CONFIG_HZ). Matters for the rules written in
    /// jiffies, BFQ's soft real-time test above all.
    pub hz: u32,
    /// The `low_latency` sysfs switch of BFQ and CFQ (default on).
    pub low_latency: bool,
    /// `slice_idle` is `HZ / 125` whole jiffies, as in CFQ before Linux
    /// 4.10 and in BFQ v7 (`static int bfq_slice_idle = HZ / 125;`), but at
    /// least one: 8 ms at HZ=250 or 1000, and at HZ=100, where integer
    /// division gives 0, one jiffy (10 ms), because both elevators' module
    /// init raise a 0 to 1 ("could be 0 on HZ < 1000 setups", `cfq_init()`
    /// of Linux 2.6 to 4.9; "Can be 0 on HZ < 1000 setups", `bfq_init()` of
    /// the BFQ v7 patches). Later kernels count it in nanoseconds
    /// (`NSEC_PER_SEC / 125`), 8 ms at any HZ. Off by default (`tandem sim
    /// run --host-kernel-set slice_idle_jiffies=true` for the host,
    /// `--guest-kernel-set` for the guests; the `linux-3.12-arm` profile
    /// sets it).
    pub slice_idle_in_jiffies: bool,
    /// BFQ's own tunables.
    pub bfq: BfqConfig,
}

/// BFQ's own tunables (the other schedulers ignore them).
#[derive(Clone, Debug)]
pub struct BfqConfig {
    /// The "+4 jiffies" slack in `bfq_bfqq_softrt_next_start()`. Turning
    /// it off reproduces greedy readers mistaken for soft real-time on
    /// coarse ticks.
    pub softrt_tick_slack: bool,
    /// BFQ v7r2's idle window (`bfq_update_idle_window()`, Linux 3.12): no
    /// idling for a queue, not weight-raised, whose mean think time exceeds
    /// `slice_idle`. Mainline BFQ idles on such queues on rotational disks,
    /// but merges the queues of processes doing interleaved I/O (QEMU's I/O
    /// threads are the textbook case), which this simulator does not model;
    /// without one or the other, the host would idle 8 ms after every
    /// request of a thread pool that hands consecutive requests to
    /// different threads. On by default.
    pub idle_window_by_think_time: bool,
    /// Which BFQ the kernel runs: mainline by default; v7r2 in the guests
    /// of the published runs (see `sim::bench::guest_defaults`).
    pub version: BfqVersion,
}

impl Default for BfqConfig {
    fn default() -> Self {
        BfqConfig {
            softrt_tick_slack: true,
            idle_window_by_think_time: true,
            version: BfqVersion::Mainline,
        }
    }
}

impl SchedConfig {
    /// The idle slice of CFQ and BFQ (`cfq_slice_idle`, `bfq_slice_idle`).
    pub fn slice_idle(&self) -> Nanos {
        let ns_slice = SEC / 125;
        if self.slice_idle_in_jiffies {
            // `HZ / 125` jiffies, raised to 1 by `cfq_init()`/`bfq_init()`.
            (self.hz / 125).max(1) as Nanos * (SEC / self.hz as Nanos)
        } else {
            ns_slice
        }
    }
}

/// The two BFQs the simulator knows. They differ where throughput and
/// start-up times depend on it (each difference is explained where
/// `bfq.rs` makes it):
///
/// - reactivation: mainline (since Linux 4.12,
///   `bfq_bfqq_update_budg_for_activation()`) lets a queue that empties and
///   gets a new request within 3 `slice_idle` keep the rest of its budget
///   and its timestamps, and preempt the queue in service; v7r2's
///   `bfq_add_request()` gave it a fresh budget starting at the virtual
///   time, and never preempted;
/// - budgets: mainline cuts the budget of a queue that ran out of requests
///   to the service it received; v7r2's `__bfq_bfqq_recalc_budget()` left
///   it alone (v7's budgets for raised queues and its full-budget charge
///   are not modelled; `bfq.rs` says why);
/// - async writes: v7r2 charged them 11 times their size (mainline: 3),
///   gave an async queue 40 ms (`bfq_timeout_async`, HZ/25) instead of
///   125 ms, let it have at most 4 requests in the driver while other
///   queues wait (`bfq_max_budget_async_rq`), and none at all while sync
///   requests are in the driver (`bfq_dispatch_requests()`);
/// - weight raising: v7r2 raised interactive and soft real-time queues by
///   20 alike (mainline: 30, and 100 times that for soft real-time), and
///   had no cap on the service a raised queue may get (mainline's
///   `max_service_from_wr`);
/// - soft real-time: mainline (since Linux 5.x) never deems a "totally
///   seeky" queue (its last 32 requests all seeky) soft real-time; v7r2
///   had no such filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BfqVersion {
    /// BFQ v7r2, as patched into the Linux 3.12 kernels of the CLOUD 2014
    /// runs.
    V7r2,
    /// Mainline BFQ (Linux 4.12 and later).
    Mainline,
}

impl BfqVersion {
    /// Names as the command line and results.json spell them.
    pub const NAMES: &'static [&'static str] = &["v7r2", "mainline"];

    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "v7r2" => Ok(BfqVersion::V7r2),
            "mainline" => Ok(BfqVersion::Mainline),
            _ => Err(format!(
                "unknown BFQ version '{s}'; known: {}",
                Self::NAMES.join(", ")
            )),
        }
    }
}

impl Default for SchedConfig {
    fn default() -> Self {
        SchedConfig {
            hz: 250,
            low_latency: true,
            slice_idle_in_jiffies: false,
            bfq: BfqConfig::default(),
        }
    }
}

/// The schedulers the simulator implements (their names live in
/// [`IoSched`]).
pub const SCHEDULERS: &[IoSched] = &[
    IoSched::Noop,
    IoSched::None,
    IoSched::Deadline,
    IoSched::MqDeadline,
    IoSched::Anticipatory,
    IoSched::Cfq,
    IoSched::Bfq,
    IoSched::Kyber,
];

/// Builds a scheduler by its kernel name.
pub fn by_name(name: &str, cfg: &SchedConfig) -> Result<Box<dyn IoScheduler>, String> {
    Ok(match name {
        "noop" | "none" => Box::new(noop::Noop::new()),
        "deadline" | "mq-deadline" => Box::new(deadline::Deadline::new()),
        "anticipatory" => Box::new(anticipatory::Anticipatory::new()),
        "cfq" => Box::new(cfq::Cfq::new(cfg)),
        "bfq" => Box::new(bfq::Bfq::new(cfg)),
        "kyber" => Box::new(kyber::Kyber::new()),
        other => {
            return Err(format!(
                "unknown I/O scheduler \"{other}\"; accepted: {}",
                SCHEDULERS
                    .iter()
                    .map(|s| s.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// BFQ's extras are BFQ's alone: it answers `as_bfq`, and every
    /// other elevator has no BFQ interface to offer.
    #[test]
    fn only_bfq_offers_the_bfq_interface() {
        let cfg = SchedConfig::default();
        let mut scheds: Vec<Box<dyn IoScheduler>> = vec![
            Box::new(noop::Noop::new()),
            Box::new(deadline::Deadline::new()),
            Box::new(anticipatory::Anticipatory::new()),
            Box::new(cfq::Cfq::new(&cfg)),
            Box::new(kyber::Kyber::new()),
            Box::new(bfq::Bfq::new(&cfg)),
        ];
        for s in &mut scheds {
            let is_bfq = s.name() == "bfq";
            assert_eq!(s.as_bfq().is_some(), is_bfq, "{}", s.name());
            assert_eq!(s.as_bfq_mut().is_some(), is_bfq, "{}", s.name());
        }
        let bfq = scheds.last().and_then(|s| s.as_bfq()).expect("bfq");
        assert_eq!(bfq.raisings(7), (0, 0), "no queue, no raising");
        assert_eq!(bfq.raised_busy_queues(0), (0, 0));
    }

    fn slice_idle_at(hz: u32, in_jiffies: bool) -> Nanos {
        SchedConfig {
            hz,
            slice_idle_in_jiffies: in_jiffies,
            ..SchedConfig::default()
        }
        .slice_idle()
    }

    /// `HZ / 125` whole jiffies, at least one: one jiffy (10 ms) at HZ=100,
    /// 8 ms at 250 and 1000, and what integer division leaves at 300 (2
    /// jiffies, 6.67 ms). In nanoseconds it is 8 ms at any HZ.
    #[test]
    fn slice_idle_in_jiffies_is_hz_over_125_whole_jiffies_at_least_one() {
        assert_eq!(slice_idle_at(100, true), 10 * MSEC);
        assert_eq!(slice_idle_at(50, true), 20 * MSEC);
        assert_eq!(slice_idle_at(250, true), 8 * MSEC);
        assert_eq!(slice_idle_at(1000, true), 8 * MSEC);
        assert_eq!(slice_idle_at(300, true), 2 * (SEC / 300));
        for hz in [100, 250, 300, 1000] {
            assert_eq!(slice_idle_at(hz, false), 8 * MSEC);
        }
    }

    /// A reads with 1 ms of think time between requests, B is greedy, far
    /// away. With an 8 ms idle slice both elevators wait for A's next
    /// request and serve A in runs, and so they do at HZ=100 in jiffies,
    /// where `HZ / 125` is 0 but the module init makes it one jiffy (10
    /// ms). BFQ is v7r2, the 3.12 one whose `slice_idle` was in jiffies.
    #[test]
    fn at_hz_100_in_jiffies_cfq_and_bfq_v7_idle_one_jiffy() {
        use testutil::{Harness, Spec, Stream};
        const SERVICE: Nanos = MSEC;
        fn longest_run_of_a<S: IoScheduler>(sched: S, hz: u32) -> (usize, usize, usize) {
            let mut h = Harness::new(sched, SERVICE);
            h.ticks = TickSource::new(hz);
            h.add_stream(Stream {
                think: MSEC,
                ..Stream::greedy(Spec::read(1, 0))
            });
            h.add_stream(Stream::greedy(Spec::read(2, 500_000_000)));
            h.run_until(2 * SEC);
            let runs = h.runs();
            let a = runs.iter().filter(|r| r.0 == 1 && r.1 > SEC / 2);
            let longest = a.clone().map(|r| r.3).max().unwrap_or(0);
            (longest, a.count(), h.timer_log.len())
        }
        fn run(name: &str, hz: u32, in_jiffies: bool) -> (usize, usize, usize) {
            let cfg = SchedConfig {
                hz,
                slice_idle_in_jiffies: in_jiffies,
                bfq: BfqConfig {
                    version: BfqVersion::V7r2,
                    ..BfqConfig::default()
                },
                // No weight raising: two equally raised queues make a
                // symmetric scenario, where BFQ does not idle anyway.
                low_latency: false,
            };
            match name {
                "cfq" => longest_run_of_a(cfq::Cfq::new(&cfg), hz),
                _ => longest_run_of_a(bfq::Bfq::new(&cfg), hz),
            }
        }
        for name in ["cfq", "bfq"] {
            for (hz, in_jiffies) in [(100, false), (250, true), (100, true)] {
                let (longest, turns, idle_timers) = run(name, hz, in_jiffies);
                assert!(
                    longest > 5,
                    "{name} at HZ={hz} (jiffies: {in_jiffies}): A's runs are {longest} long"
                );
                assert!(turns > 0, "{name} at HZ={hz}");
                assert!(idle_timers > 0, "{name} at HZ={hz}: no idle timer armed");
            }
        }
    }
}
