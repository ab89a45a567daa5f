//! The block layer between processes and the device: bios become requests,
//! requests are merged (front and back) while they wait in the elevator, and
//! a dispatch/complete loop keeps at most the device's queue depth of
//! commands in flight.

use crate::iosched::{Cgroups, HostBoost, IoScheduler, MergeKind, SchedCtx, TickSource};
use crate::request::{BioOwner, IoContext, IoPrio, Pid, Request, RequestTable, RqId};
use crate::virtio::Virtqueue;
use devmodel::{Device, Direction, IoRequest, Nanos};
use rustc_hash::FxHashMap as HashMap;

/// A bio: what a process (or the page cache on its behalf) submits.
#[derive(Clone, Copy, Debug)]
pub struct Bio {
    pub sector: u64,
    pub sectors: u32,
    pub dir: Direction,
    pub sync: bool,
    pub ioc: IoContext,
    pub owner: BioOwner,
}

/// One dispatched request, for tests and traces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DispatchRecord {
    pub at: Nanos,
    pub pid: u32,
    pub sector: u64,
    pub sectors: u32,
    pub dir: Direction,
}

/// Largest request the block layer builds by merging, in sectors. 512 KiB
/// is a common `max_sectors_kb` for SATA/ATA disks and eMMC hosts
/// (`/sys/block/X/queue/max_sectors_kb`; the kernel's `BLK_DEF_MAX_SECTORS`
/// was 1280 sectors for years, hardware limits are often lower).
pub const DEFAULT_MAX_SECTORS: u32 = 1024;

/// What the block layer hands its requests to: a physical device, or (in
/// a guest) the virtqueue of a virtio-blk disk.
pub enum Backend {
    Disk(Device),
    Virtio(Virtqueue),
}

impl Backend {
    fn can_accept(&self) -> bool {
        match self {
            Backend::Disk(d) => d.can_accept(),
            Backend::Virtio(v) => v.can_accept(),
        }
    }

    /// `ioprio` is the request's (`req_get_ioprio()`), which only a
    /// virtio-blk disk passes on, in its request header.
    fn submit(&mut self, now: Nanos, tag: u64, io: IoRequest, ioprio: IoPrio) {
        match self {
            Backend::Disk(d) => d.submit(now, tag, io),
            Backend::Virtio(v) => v.submit(tag, io, ioprio),
        }
    }

    fn pop_completed(&mut self, now: Nanos) -> Option<u64> {
        match self {
            Backend::Disk(d) => d.pop_completed(now),
            Backend::Virtio(v) => v.pop_completed(now),
        }
    }

    pub fn next_completion(&self) -> Option<Nanos> {
        match self {
            Backend::Disk(d) => d.next_completion(),
            Backend::Virtio(v) => v.next_completion(),
        }
    }

    pub fn queue_depth(&self) -> usize {
        match self {
            Backend::Disk(d) => d.queue_depth(),
            Backend::Virtio(v) => v.depth(),
        }
    }

    /// `/sys/block/X/queue/rotational`. virtio-blk leaves it at 1 (the
    /// driver of the published 3.12 guests never set `QUEUE_FLAG_NONROT`),
    /// so a guest's elevator treats its virtual disk as a rotating one.
    pub fn rotational(&self) -> bool {
        match self {
            Backend::Disk(d) => d.info().rotational,
            Backend::Virtio(_) => true,
        }
    }
}

/// The elevator's view of the block layer at `now`, for one hook call.
fn sched_ctx<'a>(
    now: Nanos,
    rqs: &'a RequestTable,
    cgroups: &'a Cgroups,
    in_driver: usize,
    backend: &Backend,
    ticks: TickSource,
) -> SchedCtx<'a> {
    SchedCtx {
        now,
        rqs,
        in_driver,
        queue_depth: backend.queue_depth(),
        rotational: backend.rotational(),
        cgroups,
        ticks,
        timer_request: None,
    }
}

pub struct BlockLayer {
    pub rqs: RequestTable,
    sched: Box<dyn IoScheduler>,
    backend: Backend,
    pub cgroups: Cgroups,
    pub ticks: TickSource,
    max_sectors: u32,
    /// Pending (not yet dispatched) requests by end sector, for back merges.
    by_end: HashMap<u64, RqId>,
    /// Pending requests by start sector, for front merges.
    by_start: HashMap<u64, RqId>,
    in_driver: usize,
    timer_at: Option<Nanos>,
    /// Sectors completed so far, per direction (read, write).
    pub sectors_done: [u64; 2],
    pub requests_done: u64,
    /// Sectors completed per issuing process (indexed by pid).
    pub sectors_by_pid: Vec<u64>,
    pub merges: u64,
    /// When set, every dispatch is recorded here.
    pub dispatch_log: Option<Vec<DispatchRecord>>,
}

impl BlockLayer {
    pub fn new(
        sched: Box<dyn IoScheduler>,
        backend: Backend,
        cgroups: Cgroups,
        ticks: TickSource,
    ) -> BlockLayer {
        BlockLayer {
            rqs: RequestTable::default(),
            sched,
            backend,
            cgroups,
            ticks,
            max_sectors: DEFAULT_MAX_SECTORS,
            by_end: HashMap::default(),
            by_start: HashMap::default(),
            in_driver: 0,
            timer_at: None,
            sectors_done: [0, 0],
            requests_done: 0,
            sectors_by_pid: Vec::new(),
            merges: 0,
            dispatch_log: None,
        }
    }

    /// Sets the largest request merging builds, in sectors (a driver's
    /// `blk_queue_max_sectors`, e.g. Xen blkfront's 11 segments of a page).
    pub fn set_max_sectors(&mut self, sectors: u32) {
        self.max_sectors = sectors.max(1);
    }

    pub fn scheduler(&self) -> &dyn IoScheduler {
        self.sched.as_ref()
    }

    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    pub fn backend_mut(&mut self) -> &mut Backend {
        &mut self.backend
    }

    /// The physical device, when there is one (not in a guest).
    pub fn device(&self) -> Option<&Device> {
        match &self.backend {
            Backend::Disk(d) => Some(d),
            Backend::Virtio(_) => None,
        }
    }

    pub fn in_driver(&self) -> usize {
        self.in_driver
    }

    /// The scheduler's armed timer, if any.
    pub fn timer_at(&self) -> Option<Nanos> {
        self.timer_at
    }

    /// Next device completion, if any.
    pub fn next_completion(&self) -> Option<Nanos> {
        self.backend.next_completion()
    }

    /// Runs one elevator hook with a fresh context and applies its timer
    /// request.
    fn with_ctx<T>(
        &mut self,
        now: Nanos,
        f: impl FnOnce(&mut dyn IoScheduler, &mut SchedCtx) -> T,
    ) -> T {
        let mut ctx = sched_ctx(
            now,
            &self.rqs,
            &self.cgroups,
            self.in_driver,
            &self.backend,
            self.ticks,
        );
        let out = f(self.sched.as_mut(), &mut ctx);
        if let Some(req) = ctx.timer_request {
            self.timer_at = req;
        }
        out
    }

    /// Submits a bio: merges it into a pending request if it can
    /// (`blk_mq_sched_try_merge`/`elv_merge`), or makes a new request and
    /// inserts it into the elevator. Then dispatches what it can.
    pub fn submit(&mut self, now: Nanos, bio: Bio) {
        if !self.try_merge(now, &bio) {
            let rq = Request {
                sector: bio.sector,
                sectors: bio.sectors,
                dir: bio.dir,
                sync: bio.sync,
                ioc: bio.ioc,
                inserted_at: now,
                dispatched_at: 0,
                owners: vec![bio.owner],
            };
            let end = rq.end_sector();
            let id = self.rqs.insert(rq);
            self.by_end.insert(end, id);
            self.by_start.insert(bio.sector, id);
            self.with_ctx(now, |s, ctx| s.insert(ctx, id));
        }
        self.dispatch(now);
    }

    fn mergeable(&self, now: Nanos, id: RqId, bio: &Bio) -> bool {
        let rq = self.rqs.get(id);
        if rq.dir != bio.dir || rq.sync != bio.sync || rq.sectors + bio.sectors > self.max_sectors {
            return false;
        }
        let ctx = sched_ctx(
            now,
            &self.rqs,
            &self.cgroups,
            self.in_driver,
            &self.backend,
            self.ticks,
        );
        self.sched.allow_merge(&ctx, id, &bio.ioc, bio.sync)
    }

    fn try_merge(&mut self, now: Nanos, bio: &Bio) -> bool {
        if let Some(&id) = self.by_end.get(&bio.sector) {
            if self.mergeable(now, id, bio) {
                self.by_end.remove(&bio.sector);
                let rq = self.rqs.get_mut(id);
                rq.sectors += bio.sectors;
                rq.owners.push(bio.owner);
                let end = rq.end_sector();
                self.by_end.insert(end, id);
                self.merges += 1;
                self.with_ctx(now, |s, ctx| s.merged(ctx, id, MergeKind::Back));
                return true;
            }
        }
        let bio_end = bio.sector + bio.sectors as u64;
        if let Some(&id) = self.by_start.get(&bio_end) {
            if self.mergeable(now, id, bio) {
                self.by_start.remove(&bio_end);
                let rq = self.rqs.get_mut(id);
                rq.sector = bio.sector;
                rq.sectors += bio.sectors;
                rq.owners.push(bio.owner);
                self.by_start.insert(bio.sector, id);
                self.merges += 1;
                self.with_ctx(now, |s, ctx| s.merged(ctx, id, MergeKind::Front));
                return true;
            }
        }
        false
    }

    fn forget_pending(&mut self, id: RqId) {
        let rq = self.rqs.get(id);
        let (start, end) = (rq.sector, rq.end_sector());
        if self.by_end.get(&end) == Some(&id) {
            self.by_end.remove(&end);
        }
        if self.by_start.get(&start) == Some(&id) {
            self.by_start.remove(&start);
        }
    }

    /// Hands requests to the device while it has room and the elevator
    /// has something to give (`blk_mq_do_dispatch_sched`).
    pub fn dispatch(&mut self, now: Nanos) {
        while self.backend.can_accept() {
            let Some(id) = self.with_ctx(now, |s, ctx| s.dispatch(ctx)) else {
                break;
            };
            self.forget_pending(id);
            let rq = self.rqs.get_mut(id);
            rq.dispatched_at = now;
            let io = IoRequest {
                sector: rq.sector,
                sectors: rq.sectors,
                dir: rq.dir,
            };
            if let Some(log) = self.dispatch_log.as_mut() {
                log.push(DispatchRecord {
                    at: now,
                    pid: rq.ioc.pid,
                    sector: rq.sector,
                    sectors: rq.sectors,
                    dir: rq.dir,
                });
            }
            self.in_driver += 1;
            let ioprio = rq.ioc.prio;
            self.backend.submit(now, id as u64, io, ioprio);
        }
    }

    /// Collects the device's completions due at `now`, tells the elevator,
    /// and returns the owners to wake. Then dispatches again.
    pub fn complete_due(&mut self, now: Nanos, woken: &mut Vec<BioOwner>) {
        while let Some(tag) = self.backend.pop_completed(now) {
            let id = tag as RqId;
            self.in_driver -= 1;
            self.with_ctx(now, |s, ctx| s.completed(ctx, id));
            let rq = self.rqs.remove(id);
            let d = if rq.is_read() { 0 } else { 1 };
            self.sectors_done[d] += rq.sectors as u64;
            self.requests_done += 1;
            let pid = rq.ioc.pid as usize;
            if self.sectors_by_pid.len() <= pid {
                self.sectors_by_pid.resize(pid + 1, 0);
            }
            self.sectors_by_pid[pid] += rq.sectors as u64;
            woken.extend_from_slice(&rq.owners);
        }
        self.dispatch(now);
    }

    /// Host-side coordination: a BFQ elevator privileges (or stops
    /// privileging) process `pid`'s I/O; see [`crate::iosched::BfqExt::set_boost`]; other
    /// elevators have no such notion and ignore it. Dispatches afterwards,
    /// since a privileged queue may now be served.
    pub fn set_boost(&mut self, now: Nanos, pid: Pid, boost: HostBoost) {
        self.with_ctx(now, |s, ctx| {
            if let Some(bfq) = s.as_bfq_mut() {
                bfq.set_boost(ctx, pid, boost);
            }
        });
        self.dispatch(now);
    }

    /// The scheduler's timer fired.
    pub fn fire_timer(&mut self, now: Nanos) {
        self.timer_at = None;
        self.with_ctx(now, |s, ctx| s.timer(ctx));
        self.dispatch(now);
    }

    /// Requests waiting in the elevator.
    pub fn queued(&self) -> usize {
        self.sched.queued()
    }
}
