//! One simulated machine: a device, its block layer and elevator, a page
//! cache, and the processes that use them (background readers and writers,
//! the write-back flusher, and applications being started).

use crate::block::{Bio, BlockLayer};
use crate::engine::{EventQueue, Rng};
use crate::fs::{FileId, Layout, PageSet, PAGE, PAGE_SECTORS};
use crate::request::{BioOwner, CgroupId, IoContext, IoPrio, Pid};
use crate::sched::{self, Cgroups, SchedConfig, TickSource, MSEC, SEC};
use crate::workload::AppTrace;
use devmodel::{Device, Direction, Nanos};
use std::sync::Arc;

/// What a machine is made of.
#[derive(Clone, Debug)]
pub struct MachineConfig {
    /// Device preset name (see `devmodel::PRESETS`).
    pub device: String,
    /// The device's command queue depth; `None` takes the preset's.
    pub queue_depth: Option<usize>,
    /// Elevator name (see `sched::SCHEDULERS`).
    pub sched: String,
    pub sched_cfg: SchedConfig,
    /// Memory size, which sets the dirty-page thresholds. 2 GiB is the
    /// machine of the CLOUD 2014 measurements (ARM Chromebook, 2 GB).
    pub memory_bytes: u64,
}

impl Default for MachineConfig {
    fn default() -> Self {
        MachineConfig {
            device: "hdd-1.8in".into(),
            queue_depth: None,
            sched: "bfq".into(),
            sched_cfg: SchedConfig::default(),
            memory_bytes: 2 << 30,
        }
    }
}

/// `vm.dirty_background_ratio` default: the flusher starts writing back
/// when dirty pages exceed 10% of memory.
const DIRTY_BACKGROUND_RATIO: u64 = 10;
/// `vm.dirty_ratio` default: writers are throttled above 20% of memory.
const DIRTY_RATIO: u64 = 20;
/// Write-back submits at most this many write bios before waiting for
/// completions. Pre-wbt kernels (the 3.x of the published runs) bounded
/// this only by `nr_requests` (128); 16 requests of up to 512 KiB already
/// keep any of the modelled devices busy for a long while.
const FLUSH_MAX_INFLIGHT: u32 = 16;
/// Largest write bio the flusher builds: 128 pages = 512 KiB, the block
/// layer's request size limit.
const FLUSH_CHUNK_PAGES: u64 = 128;
/// Time from a readahead window arriving to the next window's submission.
/// The reader's `read()` wakes up, touches the `PG_readahead` marker page
/// at the start of the window it waited for, and async readahead submits
/// the next window right away, before the data is copied to user space:
/// a page-cache lookup and a bio submission, a couple of microseconds.
const READER_CPU_NS: Nanos = 2_000;
/// CPU time of a random reader between reads (one 4 KiB pread).
const RAND_READER_CPU_NS: Nanos = 5_000;
/// The readahead window of buffered sequential readers: Linux's default
/// `read_ahead_kb` is 128 KiB (`VM_READAHEAD_PAGES`). A reader reading
/// 64 KiB at a time reaches it at once (`get_init_ra_size()` gives the
/// maximum for a first read of more than max/4), and async readahead then
/// issues the next 128 KiB window as soon as the reader touches the marker
/// page, i.e. right after the previous window arrives. So each reader has
/// one 128 KiB sync read in flight, re-issued right after completion.
pub const READAHEAD_BYTES: u64 = 128 << 10;
/// Write size of sequential writers (64 KiB `write()` calls).
const WRITER_CHUNK: u64 = 64 << 10;
/// Background workload files: each reader and writer has its own file of
/// this size (readers wrap around at its end).
pub const WORKLOAD_FILE_BYTES: u64 = 500 << 20;

#[derive(Clone, Copy, Debug)]
enum Ev {
    /// A device completion may be due.
    Device,
    /// The elevator's timer, armed for this time.
    Timer(Nanos),
    /// A process's own timer (think time, rate cap), with its generation.
    Wake(Pid, u64),
    /// The S suite's periodic `sync` (every 2 s while writers run).
    Sync,
}

/// What a process is.
#[derive(Clone)]
pub enum Role {
    /// Buffered sequential reader of one file.
    SeqReader { file: FileId, pos: u64 },
    /// 4 KiB random reader of one file.
    RandReader { file: FileId },
    /// Buffered writer of one file, sequential or random, at most `rate`
    /// bytes per second (0 = no cap).
    Writer {
        file: FileId,
        pos: u64,
        random: bool,
        rate: f64,
        blocked: bool,
    },
    /// The write-back flusher thread.
    Flusher { inflight: u32, sync_left: u64 },
    /// An application being started: a replayed start-up trace.
    App(AppRun),
    /// Finished or stopped.
    Gone,
}

/// State of one application start.
#[derive(Clone)]
pub struct AppRun {
    pub trace: Arc<AppTrace>,
    pub files: Vec<FileId>,
    pub next: usize,
    pub pending: u32,
    pub started: Nanos,
    pub finished: Option<Nanos>,
}

struct Proc {
    ioc: IoContext,
    role: Role,
    rng: Rng,
    gen: u64,
}

/// A simulated machine.
pub struct Machine {
    q: EventQueue<Ev>,
    pub block: BlockLayer,
    pub layout: Layout,
    /// Clean cached pages per file.
    cache: Vec<PageSet>,
    /// Dirty pages per file.
    dirty: Vec<PageSet>,
    dirty_pages: u64,
    dirty_bg_pages: u64,
    dirty_limit_pages: u64,
    procs: Vec<Proc>,
    rng: Rng,
    woken: Vec<BioOwner>,
    device_ev: Option<Nanos>,
    timer_ev: Option<Nanos>,
    flusher: Option<Pid>,
    sync_period: Option<Nanos>,
    capacity_bytes: u64,
}

impl Machine {
    pub fn new(cfg: &MachineConfig, seed: u64) -> Result<Machine, String> {
        let model = devmodel::preset(&cfg.device).map_err(|e| e.to_string())?;
        let depth = cfg
            .queue_depth
            .unwrap_or(model.info().default_queue_depth)
            .max(1);
        let capacity_bytes = model.info().capacity_sectors * 512;
        let device = Device::new(model, depth);
        let sched = sched::by_name(&cfg.sched, &cfg.sched_cfg)?;
        let ticks = TickSource {
            hz: cfg.sched_cfg.hz,
        };
        let block = BlockLayer::new(sched, device, Cgroups::new(), ticks);
        let mem_pages = cfg.memory_bytes / PAGE;
        Ok(Machine {
            q: EventQueue::new(),
            block,
            layout: Layout::new(capacity_bytes),
            cache: Vec::new(),
            dirty: Vec::new(),
            dirty_pages: 0,
            dirty_bg_pages: mem_pages * DIRTY_BACKGROUND_RATIO / 100,
            dirty_limit_pages: mem_pages * DIRTY_RATIO / 100,
            procs: Vec::new(),
            rng: Rng::new(seed),
            woken: Vec::new(),
            device_ev: None,
            timer_ev: None,
            flusher: None,
            sync_period: None,
            capacity_bytes,
        })
    }

    pub fn now(&self) -> Nanos {
        self.q.now()
    }

    pub fn events_processed(&self) -> u64 {
        self.q.processed()
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Creates a cgroup with a BFQ weight.
    pub fn create_cgroup(&mut self, weight: u32) -> CgroupId {
        self.block.cgroups.create(weight)
    }

    /// Places a file on the device.
    pub fn add_file(&mut self, path: &str, size: u64) -> FileId {
        let id = self.layout.add_file(path, size);
        self.cache.push(PageSet::default());
        self.dirty.push(PageSet::default());
        id
    }

    /// Drops the clean page cache (`echo 3 > /proc/sys/vm/drop_caches`);
    /// dirty pages stay, as in the kernel.
    pub fn drop_caches(&mut self) {
        for c in &mut self.cache {
            c.clear();
        }
    }

    fn spawn(&mut self, role: Role, prio: IoPrio, cgroup: CgroupId) -> Pid {
        let pid = self.procs.len() as Pid;
        let rng = self.rng.fork();
        self.procs.push(Proc {
            ioc: IoContext { pid, prio, cgroup },
            role,
            rng,
            gen: 0,
        });
        pid
    }

    /// Starts a buffered sequential reader of `file` now.
    pub fn start_seq_reader(&mut self, file: FileId, prio: IoPrio, cgroup: CgroupId) -> Pid {
        let pid = self.spawn(Role::SeqReader { file, pos: 0 }, prio, cgroup);
        self.wake_in(pid, 0);
        pid
    }

    /// Starts a 4 KiB random reader of `file` now.
    pub fn start_rand_reader(&mut self, file: FileId, prio: IoPrio, cgroup: CgroupId) -> Pid {
        let pid = self.spawn(Role::RandReader { file }, prio, cgroup);
        self.wake_in(pid, 0);
        pid
    }

    /// Starts a buffered writer of `file`, capped at `rate` bytes/s (0:
    /// uncapped). Starts the flusher if needed.
    pub fn start_writer(&mut self, file: FileId, random: bool, rate: f64, prio: IoPrio) -> Pid {
        self.ensure_flusher();
        let role = Role::Writer {
            file,
            pos: 0,
            random,
            rate,
            blocked: false,
        };
        let pid = self.spawn(role, prio, 0);
        self.wake_in(pid, 0);
        pid
    }

    /// Makes the machine run `sync` every `period`, as the S suite does
    /// while writers run ("increase difficulty by periodically syncing").
    pub fn periodic_sync(&mut self, period: Nanos) {
        self.ensure_flusher();
        self.sync_period = Some(period);
        let at = self.now() + period;
        self.q.push(at, Ev::Sync);
    }

    fn ensure_flusher(&mut self) {
        if self.flusher.is_none() {
            let role = Role::Flusher {
                inflight: 0,
                sync_left: 0,
            };
            self.flusher = Some(self.spawn(role, IoPrio::DEFAULT, 0));
        }
    }

    /// Starts an application now: `files` are the layout ids of the
    /// trace's files, in trace order.
    pub fn start_app(&mut self, trace: Arc<AppTrace>, files: Vec<FileId>, prio: IoPrio) -> Pid {
        let now = self.now();
        let run = AppRun {
            trace,
            files,
            next: 0,
            pending: 0,
            started: now,
            finished: None,
        };
        let pid = self.spawn(Role::App(run), prio, 0);
        let think = self.app_think(pid);
        self.wake_in(pid, think);
        pid
    }

    /// When the application `pid` finished starting, if it has.
    pub fn app_finished(&self, pid: Pid) -> Option<Nanos> {
        match &self.procs[pid as usize].role {
            Role::App(run) => run.finished,
            _ => None,
        }
    }

    /// Stops a process: it issues nothing more (its in-flight I/O still
    /// completes).
    pub fn kill(&mut self, pid: Pid) {
        let p = &mut self.procs[pid as usize];
        p.role = Role::Gone;
        p.gen += 1;
    }

    /// Sectors completed so far: (read, write).
    pub fn sectors_done(&self) -> (u64, u64) {
        (self.block.sectors_done[0], self.block.sectors_done[1])
    }

    /// Bytes completed for requests issued by `pid`.
    pub fn bytes_done_by(&self, pid: Pid) -> u64 {
        self.block
            .sectors_by_pid
            .get(pid as usize)
            .copied()
            .unwrap_or(0)
            * 512
    }

    fn wake_in(&mut self, pid: Pid, delay: Nanos) {
        let p = &mut self.procs[pid as usize];
        p.gen += 1;
        let at = self.q.now() + delay;
        self.q.push(at, Ev::Wake(pid, p.gen));
    }

    /// Runs the machine until simulated time `until` (events at exactly
    /// `until` are processed), or until `stop` says so after an event.
    pub fn run_until(&mut self, until: Nanos, mut stop: impl FnMut(&Machine) -> bool) {
        while let Some(t) = self.q.peek_time() {
            if t > until {
                break;
            }
            let (now, ev) = self.q.pop().expect("peeked");
            self.handle(now, ev);
            self.sync_block_events();
            if stop(self) {
                return;
            }
        }
        // Advance the clock even if nothing happened.
        if self.q.now() < until {
            self.q.push(until, Ev::Timer(Nanos::MAX));
            self.q.pop();
        }
    }

    fn handle(&mut self, now: Nanos, ev: Ev) {
        match ev {
            Ev::Device => {
                self.device_ev = None;
                let mut woken = std::mem::take(&mut self.woken);
                self.block.complete_due(now, &mut woken);
                for owner in woken.drain(..) {
                    self.io_done(owner);
                }
                self.woken = woken;
            }
            Ev::Timer(at) => {
                if self.timer_ev == Some(at) {
                    self.timer_ev = None;
                }
                if self.block.timer_at() == Some(at) {
                    self.block.fire_timer(now);
                }
            }
            Ev::Wake(pid, gen) => {
                if self.procs[pid as usize].gen == gen {
                    self.step(pid);
                }
            }
            Ev::Sync => {
                if let Some(period) = self.sync_period {
                    self.start_sync();
                    self.q.push(now + period, Ev::Sync);
                }
            }
        }
    }

    /// Keeps one pending event for the next device completion and one for
    /// the elevator timer.
    fn sync_block_events(&mut self) {
        if let Some(t) = self.block.next_completion() {
            if self.device_ev.is_none_or(|d| t < d) {
                self.device_ev = Some(t);
                self.q.push(t, Ev::Device);
            }
        }
        if let Some(t) = self.block.timer_at() {
            if self.timer_ev != Some(t) {
                self.timer_ev = Some(t);
                self.q.push(t, Ev::Timer(t));
            }
        }
    }

    fn submit(
        &mut self,
        pid: Pid,
        sector: u64,
        sectors: u32,
        dir: Direction,
        sync: bool,
        token: u64,
    ) {
        let ioc = self.procs[pid as usize].ioc;
        let now = self.now();
        let bio = Bio {
            sector,
            sectors,
            dir,
            sync,
            ioc,
            owner: BioOwner { pid, token },
        };
        self.block.submit(now, bio);
    }

    /// A process's timer fired: it does its next piece of work.
    fn step(&mut self, pid: Pid) {
        let i = pid as usize;
        match self.procs[i].role.clone() {
            Role::SeqReader { file, pos } => {
                let f = self.layout.file(file);
                let pos = if pos + READAHEAD_BYTES > f.size {
                    0
                } else {
                    pos
                };
                let sector = f.sector_of(pos);
                self.procs[i].role = Role::SeqReader {
                    file,
                    pos: pos + READAHEAD_BYTES,
                };
                self.submit(
                    pid,
                    sector,
                    (READAHEAD_BYTES / 512) as u32,
                    Direction::Read,
                    true,
                    0,
                );
            }
            Role::RandReader { file } => {
                let f = self.layout.file(file);
                let pages = (f.size / PAGE).max(1);
                let page = self.procs[i].rng.below(pages);
                let sector = f.start_sector + page * PAGE_SECTORS;
                self.submit(pid, sector, PAGE_SECTORS as u32, Direction::Read, true, 0);
            }
            Role::Writer {
                file,
                pos,
                random,
                rate,
                ..
            } => self.writer_step(pid, file, pos, random, rate),
            Role::App(_) => self.app_step(pid),
            Role::Flusher { .. } | Role::Gone => {}
        }
    }

    /// One of `owner.pid`'s bios completed.
    fn io_done(&mut self, owner: BioOwner) {
        let pid = owner.pid;
        match &mut self.procs[pid as usize].role {
            Role::SeqReader { .. } => self.wake_in(pid, READER_CPU_NS),
            Role::RandReader { .. } => self.wake_in(pid, RAND_READER_CPU_NS),
            Role::Flusher { inflight, .. } => {
                *inflight -= 1;
                self.flush_more();
                self.unblock_writers();
            }
            Role::App(run) => {
                run.pending -= 1;
                if run.pending == 0 {
                    run.next += 1;
                    let think = self.app_think(pid);
                    self.wake_in(pid, think);
                }
            }
            Role::Writer { .. } | Role::Gone => {}
        }
    }

    // ----- applications -------------------------------------------------

    /// Think time before the app's next read, or its final CPU time once
    /// all reads are done.
    fn app_think(&self, pid: Pid) -> Nanos {
        match &self.procs[pid as usize].role {
            Role::App(run) => match run.trace.reads.get(run.next) {
                Some(r) => r.think_ns,
                None => run.trace.tail_ns,
            },
            _ => 0,
        }
    }

    fn app_step(&mut self, pid: Pid) {
        let now = self.now();
        let (file, offset, len, done) = {
            let Role::App(run) = &mut self.procs[pid as usize].role else {
                return;
            };
            match run.trace.reads.get(run.next) {
                None => {
                    if run.finished.is_none() {
                        run.finished = Some(now);
                    }
                    return;
                }
                Some(r) => (run.files[r.file], r.offset, r.len, false),
            }
        };
        debug_assert!(!done);
        let first = offset / PAGE;
        let last = (offset + len).div_ceil(PAGE);
        let holes = self.cache[file].missing(first, last);
        if holes.is_empty() {
            // All in memory: go on after the next think time.
            if let Role::App(run) = &mut self.procs[pid as usize].role {
                run.next += 1;
            }
            let think = self.app_think(pid);
            self.wake_in(pid, think);
            return;
        }
        // Pages enter the cache when their reads are submitted (they are
        // locked until the read completes, and nobody else reads them).
        let start_sector = self.layout.file(file).start_sector;
        let max_pages = READAHEAD_BYTES / PAGE;
        let mut bios = 0;
        for (s, e) in holes {
            self.cache[file].insert(s, e);
            let mut p = s;
            while p < e {
                let n = (e - p).min(max_pages);
                self.submit(
                    pid,
                    start_sector + p * PAGE_SECTORS,
                    (n * PAGE_SECTORS) as u32,
                    Direction::Read,
                    true,
                    0,
                );
                bios += 1;
                p += n;
            }
        }
        if let Role::App(run) = &mut self.procs[pid as usize].role {
            run.pending += bios;
        }
    }

    // ----- writers and write-back ----------------------------------------

    fn writer_step(&mut self, pid: Pid, file: FileId, pos: u64, random: bool, rate: f64) {
        let size = self.layout.file(file).size;
        let (page, pages, next_pos) = if random {
            let pages = (size / PAGE).max(1);
            let page = self.procs[pid as usize].rng.below(pages);
            (page, 1, pos)
        } else {
            let pos = if pos + WRITER_CHUNK > size { 0 } else { pos };
            (pos / PAGE, WRITER_CHUNK / PAGE, pos + WRITER_CHUNK)
        };
        let before = self.dirty[file].pages();
        self.dirty[file].insert(page, page + pages);
        self.dirty_pages += self.dirty[file].pages() - before;
        let blocked = self.dirty_pages >= self.dirty_limit_pages;
        if let Role::Writer {
            pos: p, blocked: b, ..
        } = &mut self.procs[pid as usize].role
        {
            *p = next_pos;
            *b = blocked;
        }
        if self.dirty_pages >= self.dirty_bg_pages {
            self.flush_more();
        }
        if !blocked {
            let bytes = pages * PAGE;
            // Copying into the page cache costs about 1 ns per byte of
            // CPU; a rate cap stretches the period.
            let delay = if rate > 0.0 {
                (bytes as f64 / rate * SEC as f64) as Nanos
            } else {
                bytes
            };
            self.wake_in(pid, delay.max(1));
        }
    }

    /// `balance_dirty_pages()` lets throttled writers go once dirty pages
    /// fall back between the background and the hard threshold.
    fn unblock_writers(&mut self) {
        if self.dirty_pages >= (self.dirty_bg_pages + self.dirty_limit_pages) / 2 {
            return;
        }
        let blocked: Vec<Pid> = self
            .procs
            .iter()
            .enumerate()
            .filter(|(_, p)| matches!(p.role, Role::Writer { blocked: true, .. }))
            .map(|(i, _)| i as Pid)
            .collect();
        for pid in blocked {
            if let Role::Writer { blocked, .. } = &mut self.procs[pid as usize].role {
                *blocked = false;
            }
            self.wake_in(pid, 0);
        }
    }

    fn start_sync(&mut self) {
        let dirty = self.dirty_pages;
        if let Some(f) = self.flusher {
            if let Role::Flusher { sync_left, .. } = &mut self.procs[f as usize].role {
                *sync_left = (*sync_left).max(dirty);
            }
        }
        self.flush_more();
    }

    /// The flusher submits write-back while it has a reason to: a pending
    /// `sync` (whose writes are REQ_SYNC, as `WB_SYNC_ALL` write-back is),
    /// or dirty pages above the background threshold (async writes).
    fn flush_more(&mut self) {
        let Some(fpid) = self.flusher else { return };
        loop {
            let (inflight, sync_left) = match &self.procs[fpid as usize].role {
                Role::Flusher {
                    inflight,
                    sync_left,
                } => (*inflight, *sync_left),
                _ => return,
            };
            let background = self.dirty_pages > self.dirty_bg_pages;
            if inflight >= FLUSH_MAX_INFLIGHT || (sync_left == 0 && !background) {
                return;
            }
            // Oldest file first would need ages; the file with the most
            // dirty pages is a fair stand-in for write-back's b_io order.
            let Some(file) = (0..self.dirty.len())
                .filter(|&f| !self.dirty[f].is_empty())
                .max_by_key(|&f| (self.dirty[f].pages(), std::cmp::Reverse(f)))
            else {
                if let Role::Flusher { sync_left, .. } = &mut self.procs[fpid as usize].role {
                    *sync_left = 0;
                }
                return;
            };
            let (s, e) = self.dirty[file]
                .take_first(FLUSH_CHUNK_PAGES)
                .expect("non-empty");
            let n = e - s;
            self.dirty_pages -= n;
            let sync = sync_left > 0;
            if let Role::Flusher {
                inflight,
                sync_left,
            } = &mut self.procs[fpid as usize].role
            {
                *inflight += 1;
                *sync_left = sync_left.saturating_sub(n);
            }
            let sector = self.layout.file(file).start_sector + s * PAGE_SECTORS;
            self.submit(
                fpid,
                sector,
                (n * PAGE_SECTORS) as u32,
                Direction::Write,
                sync,
                0,
            );
        }
    }
}

/// Simulated-time helpers.
pub fn secs(s: f64) -> Nanos {
    (s * SEC as f64).round() as Nanos
}

pub fn to_secs(ns: Nanos) -> f64 {
    ns as f64 / SEC as f64
}

pub const fn ms(n: u64) -> Nanos {
    n * MSEC
}
