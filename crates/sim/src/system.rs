//! One simulated machine: the host kernel (a device, its block layer and
//! elevator, a page cache), the guest kernels of its virtual machines (each
//! over a virtio disk backed by an image file on the host, see
//! [`crate::vm`]), QEMU's I/O threads, and the processes that use them
//! (background readers and writers, the write-back flushers, and
//! applications being started).

use crate::block::{Backend, Bio, BlockLayer};
use crate::coord::{CoordConfig, CoordStats, Coordination};
use crate::engine::{EventQueue, Rng};
use crate::fs::{FileId, Layout, PageSet, Piece, PAGE, PAGE_SECTORS};
use crate::iosched::{self, Cgroups, SchedConfig, TickSource, MSEC, SEC};
use crate::request::{BioOwner, CgroupId, IoContext, IoPrio, Pid};
use crate::virtio::Virtqueue;
use crate::vm::{
    Aio, VmConfig, COPY_NS_PER_BYTE, IRQ_INJECT_NS, THREAD_POOL_IDLE_NS, THREAD_POOL_MAX,
    VIRTQUEUE_NOTIFY_NS, WORKER_HANDOFF_NS,
};
use crate::workload::AppTrace;
use devmodel::{Device, Direction, IoRequest, Nanos};
use std::collections::VecDeque;
use std::sync::Arc;

/// One kernel of the simulation: the host is [`HOST`], guests follow.
pub type KernelId = usize;
/// The host kernel.
pub const HOST: KernelId = 0;

/// What a machine is made of.
#[derive(Clone, Debug)]
pub struct MachineConfig {
    /// Device preset name (see `devmodel::PRESETS`).
    pub device: String,
    /// The device's command queue depth; `None` takes the preset's.
    pub queue_depth: Option<usize>,
    /// HDD parameters set over the preset's, in order
    /// (`devmodel::preset_with_hdd_params`; flash presets ignore them).
    pub hdd_params: Vec<(String, f64)>,
    /// Elevator name (see `iosched::SCHEDULERS`).
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
            hdd_params: Vec::new(),
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

/// Readahead state of one open file (`struct file_ra_state`), for QEMU's
/// buffered reads of a VM's image (`aio=threads` through the host page
/// cache): where a sequential read would continue, and the last window.
#[derive(Clone, Copy, Debug, Default)]
struct ReadaheadState {
    next_page: u64,
    window_pages: u64,
}

impl ReadaheadState {
    /// Pages to read for a miss at `[first, last)` (`ondemand_readahead()`,
    /// without the async marker): a read that continues the previous one
    /// doubles the window (up to `read_ahead_kb`); any other starts one from
    /// the request's size (`get_init_ra_size()`: 4x a request of at most
    /// 1/32 of the maximum, 2x one of at most 1/4, else the maximum).
    fn window(&mut self, first: u64, last: u64) -> u64 {
        let max = READAHEAD_BYTES / PAGE;
        let req = (last - first).max(1);
        let size = if first == self.next_page && self.window_pages > 0 {
            (self.window_pages * 2).min(max)
        } else {
            let pow = req.next_power_of_two();
            if pow <= max / 32 {
                pow * 4
            } else if pow <= max / 4 {
                pow * 2
            } else {
                max
            }
        };
        let size = size.max(req);
        self.next_page = first + size;
        self.window_pages = size;
        size
    }
}
/// Write size of sequential writers (64 KiB `write()` calls).
const WRITER_CHUNK: u64 = 64 << 10;
/// Background workload files: each reader and writer has its own file of
/// this size (readers wrap around at its end).
pub const WORKLOAD_FILE_BYTES: u64 = 500 << 20;

#[derive(Clone, Copy, Debug)]
enum Ev {
    /// A completion may be due on a kernel's backend (a device completion
    /// on the host, a virtio interrupt in a guest).
    Device(KernelId),
    /// A kernel's elevator timer, armed for this time.
    Timer(KernelId, Nanos),
    /// A process's own timer (think time, rate cap), with its generation.
    Wake(Pid, u64),
    /// The S suite's periodic `sync` (every 2 s while writers run).
    Sync(KernelId),
    /// QEMU drains a VM's virtqueue after the guest's notification.
    Kick(usize),
    /// A QEMU request that needed no disk I/O (page-cache hit, buffered
    /// write) is done copying.
    JobDone(usize),
    /// A guest's coordination message reaches the host.
    CoordMsg(usize, CoordMsg),
    /// The host's arbiter has a deadline (lease expiry, budget, quantum).
    HostCoord(Nanos),
    /// A guest's coordination client has a deadline (renewal, NO-HELP).
    GuestCoord(usize, Nanos),
}

/// A coordination message in flight (the `policy` protocol's HELP and
/// NO-HELP, as the host's arbiter uses them).
#[derive(Clone, Copy, Debug)]
enum CoordMsg {
    Help {
        duration_ns: Nanos,
        reason: policy::HelpReason,
    },
    NoHelp,
}

/// The guest side of a coordinated VM.
struct GuestCoord {
    detector: policy::BfqStateDetector,
    client: policy::HelpClient,
    /// The current need, as the detector last said.
    urgency: policy::Urgency,
    /// The guest asks for help all the time (a misbehaving guest).
    greedy: bool,
    /// Raised busy queues at the last look.
    last_raised: usize,
    /// The pending [`Ev::GuestCoord`] event.
    timer_ev: Option<Nanos>,
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
    /// A worker of a VM's QEMU thread pool (`aio=threads`), on the host,
    /// with the request it is performing.
    QemuWorker { vm: usize, job: Option<usize> },
    /// A VM's QEMU iothread (`aio=native`/`io_uring`), on the host.
    QemuIoThread { vm: usize },
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
    kernel: KernelId,
    ioc: IoContext,
    role: Role,
    rng: Rng,
    gen: u64,
}

/// One kernel: a block layer over a device or a virtqueue, the file
/// system's layout, and the page cache.
pub struct Kernel {
    pub block: BlockLayer,
    pub layout: Layout,
    /// Clean cached pages per file.
    cache: Vec<PageSet>,
    /// Dirty pages per file.
    dirty: Vec<PageSet>,
    dirty_pages: u64,
    dirty_bg_pages: u64,
    dirty_limit_pages: u64,
    flusher: Option<Pid>,
    sync_period: Option<Nanos>,
    device_ev: Option<Nanos>,
    timer_ev: Option<Nanos>,
    capacity_bytes: u64,
    /// Jiffies lag while the kernel idles (guests, see [`crate::vm`]).
    lagging_ticks: bool,
    /// See `VmConfig::sync_writes_async`.
    sync_writes_async: bool,
    /// Last time the kernel ran something other than a completion
    /// interrupt: its jiffies are fresh as of then.
    last_active: Nanos,
}

impl Kernel {
    fn new(block: BlockLayer, capacity_bytes: u64, memory_bytes: u64) -> Kernel {
        let mem_pages = memory_bytes / PAGE;
        Kernel {
            block,
            layout: Layout::new(capacity_bytes),
            cache: Vec::new(),
            dirty: Vec::new(),
            dirty_pages: 0,
            dirty_bg_pages: mem_pages * DIRTY_BACKGROUND_RATIO / 100,
            dirty_limit_pages: mem_pages * DIRTY_RATIO / 100,
            flusher: None,
            sync_period: None,
            device_ev: None,
            timer_ev: None,
            capacity_bytes,
            lagging_ticks: false,
            sync_writes_async: false,
            last_active: 0,
        }
    }

    /// Empty page-cache state for the file just added to the layout.
    fn track_file(&mut self) {
        self.cache.push(PageSet::default());
        self.dirty.push(PageSet::default());
    }
}

/// One VM's QEMU: its guest kernel, its image file on the host, and the
/// requests taken from the virtqueue that wait for a thread.
struct Vm {
    guest: KernelId,
    image: FileId,
    aio: Aio,
    /// Host cgroup of the VM's QEMU threads.
    cgroup: CgroupId,
    kick_scheduled: bool,
    waiting: VecDeque<(u64, IoRequest)>,
    /// Idle pool workers, longest idle first: the pool's semaphore wakes
    /// its waiters in FIFO order (futex wake-ups are FIFO among waiters of
    /// one priority).
    idle_workers: VecDeque<Pid>,
    workers: usize,
    /// The host's readahead on the image file (buffered reads only).
    image_ra: ReadaheadState,
    iothread: Option<Pid>,
    /// Every QEMU thread the VM ever had.
    threads: Vec<Pid>,
    /// Coordination: the guest side (None when the VM does not ask).
    guest_coord: Option<GuestCoord>,
    /// The host privileges the VM's threads now (helped, or statically).
    boosted: bool,
    /// Statically privileged (`static-rt`), whatever the guest says.
    static_boost: bool,
    /// When the current boost began, and the boosted time before it.
    boosted_since: Nanos,
    stats: CoordStats,
}

/// What the host saw of a VM's QEMU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QemuStats {
    /// Threads created so far (pool workers or the iothread).
    pub threads_created: usize,
    /// Threads alive now.
    pub threads_alive: usize,
    /// Weight-raising periods the host's elevator gave those threads:
    /// (interactive, soft real-time).
    pub host_raisings: (u32, u32),
}

/// A guest request being performed by QEMU.
struct Job {
    vm: usize,
    tag: u64,
    /// The guest's request, in guest sectors (= sectors of the image).
    req: IoRequest,
    /// Host bios not yet completed.
    pending: u32,
    /// The QEMU thread performing it.
    thread: Pid,
}

/// A simulated machine.
pub struct Machine {
    q: EventQueue<Ev>,
    kernels: Vec<Kernel>,
    vms: Vec<Vm>,
    jobs: Vec<Option<Job>>,
    free_jobs: Vec<usize>,
    procs: Vec<Proc>,
    rng: Rng,
    woken: Vec<BioOwner>,
    coord: CoordConfig,
    /// The host side of coordination (modes that ask for help).
    arbiter: Option<policy::Arbiter>,
    host_coord_ev: Option<Nanos>,
}

impl Machine {
    pub fn new(cfg: &MachineConfig, seed: u64) -> Result<Machine, String> {
        let model = devmodel::preset_with_hdd_params(&cfg.device, &cfg.hdd_params)?;
        let depth = cfg
            .queue_depth
            .unwrap_or(model.info().default_queue_depth)
            .max(1);
        let capacity_bytes = model.info().capacity_sectors * 512;
        let device = Device::new(model, depth);
        let sched = iosched::by_name(&cfg.sched, &cfg.sched_cfg)?;
        let ticks = TickSource::new(cfg.sched_cfg.hz);
        let block = BlockLayer::new(sched, Backend::Disk(device), Cgroups::new(), ticks);
        Ok(Machine {
            q: EventQueue::new(),
            kernels: vec![Kernel::new(block, capacity_bytes, cfg.memory_bytes)],
            vms: Vec::new(),
            jobs: Vec::new(),
            free_jobs: Vec::new(),
            procs: Vec::new(),
            rng: Rng::new(seed),
            woken: Vec::new(),
            coord: CoordConfig::default(),
            arbiter: None,
            host_coord_ev: None,
        })
    }

    /// Sets the coordination between guests and host. Call it before
    /// adding VMs: each VM added afterwards gets a guest side that asks for
    /// help when the mode does, and the host's arbiter learns of it.
    pub fn set_coordination(&mut self, cfg: CoordConfig) -> Result<(), String> {
        cfg.policy.validate()?;
        if !self.vms.is_empty() {
            return Err("coordination must be set before VMs are added".into());
        }
        self.arbiter = cfg
            .mode
            .asks_for_help()
            .then(|| policy::Arbiter::new(cfg.policy.clone()));
        self.coord = cfg;
        Ok(())
    }

    /// Makes VM `vm` a greedy guest: it asks for help all the time.
    pub fn set_greedy(&mut self, vm: usize) {
        if let Some(gc) = self.vms[vm].guest_coord.as_mut() {
            gc.greedy = true;
        }
        self.poll_guest(vm);
        self.sync_block_events();
    }

    /// Privileges VM `vm`'s QEMU threads for good (`static-rt`).
    pub fn set_static_boost(&mut self, vm: usize) {
        self.vms[vm].static_boost = true;
        self.actuate(vm);
    }

    /// Coordination counters of VM `vm` so far.
    pub fn coord_stats(&self, vm: usize) -> CoordStats {
        let v = &self.vms[vm];
        let mut s = v.stats;
        if v.boosted {
            s.boosted_ns += self.now() - v.boosted_since;
        }
        s
    }

    /// VM `vm`'s live QEMU threads (pool workers or the iothread).
    pub fn qemu_threads(&self, vm: usize) -> Vec<Pid> {
        self.vms[vm]
            .threads
            .iter()
            .copied()
            .filter(|&p| !matches!(self.procs[p as usize].role, Role::Gone))
            .collect()
    }

    /// The ioprio process `pid` issues its I/O with now.
    pub fn ioprio(&self, pid: Pid) -> IoPrio {
        self.procs[pid as usize].ioc.prio
    }

    /// Whether the host privileges VM `vm` now.
    pub fn vm_boosted(&self, vm: usize) -> bool {
        self.vms[vm].boosted || self.vms[vm].static_boost
    }

    /// Adds a virtual machine: its image file is placed on the host at
    /// `image_path`, its guest kernel gets the elevator and tunables of
    /// `cfg`. Returns the guest kernel and the VM's index.
    pub fn add_vm(
        &mut self,
        cfg: &VmConfig,
        image_path: &str,
    ) -> Result<(KernelId, usize), String> {
        let sched = iosched::by_name(&cfg.sched, &cfg.sched_cfg)?;
        let ticks = TickSource::new(cfg.sched_cfg.hz);
        let backend = Backend::Virtio(Virtqueue::new(cfg.virtqueue_depth));
        let block = BlockLayer::new(sched, backend, Cgroups::new(), ticks);
        let mut guest = Kernel::new(block, cfg.image_bytes, cfg.memory_bytes);
        guest.lagging_ticks = cfg.lagging_ticks;
        guest.sync_writes_async = cfg.sync_writes_async;
        guest.last_active = self.now();
        let k = self.kernels.len();
        self.kernels.push(guest);
        let image = self.add_sparse_file(HOST, image_path, cfg.image_bytes);
        let vm = self.vms.len();
        self.vms.push(Vm {
            guest: k,
            image,
            aio: cfg.aio,
            cgroup: 0,
            kick_scheduled: false,
            waiting: VecDeque::new(),
            idle_workers: VecDeque::new(),
            workers: 0,
            image_ra: ReadaheadState::default(),
            iothread: None,
            threads: Vec::new(),
            guest_coord: None,
            boosted: false,
            static_boost: false,
            boosted_since: 0,
            stats: CoordStats::default(),
        });
        if let Some(arb) = self.arbiter.as_mut() {
            arb.add_vm(vm as policy::VmId, 1);
            let lease = self.coord.policy.max_lease_ns;
            self.vms[vm].guest_coord = Some(GuestCoord {
                detector: policy::BfqStateDetector::new(lease)
                    .with_hysteresis(self.coord.no_help_delay_ns),
                client: policy::HelpClient::new(lease),
                urgency: policy::Urgency::NoHelp,
                greedy: false,
                last_raised: 0,
                timer_ev: None,
            });
        }
        if cfg.aio == Aio::IoThread {
            let pid = self.spawn(HOST, Role::QemuIoThread { vm }, IoPrio::DEFAULT, 0);
            self.vms[vm].iothread = Some(pid);
            self.vms[vm].threads.push(pid);
            self.actuate_thread(vm, pid);
        } else {
            // Write-back of the image's dirty pages.
            self.ensure_flusher(HOST);
        }
        Ok((k, vm))
    }

    pub fn now(&self) -> Nanos {
        self.q.now()
    }

    pub fn events_processed(&self) -> u64 {
        self.q.processed()
    }

    pub fn kernel(&self, k: KernelId) -> &Kernel {
        &self.kernels[k]
    }

    pub fn capacity_bytes(&self, k: KernelId) -> u64 {
        self.kernels[k].capacity_bytes
    }

    /// Whether kernel `k` sees its disk as rotational.
    pub fn rotational(&self, k: KernelId) -> bool {
        self.kernels[k].block.backend().rotational()
    }

    /// What the host saw of VM `vm`'s QEMU threads.
    pub fn qemu_stats(&self, vm: usize) -> QemuStats {
        let v = &self.vms[vm];
        let sched = self.kernels[HOST].block.scheduler();
        let host_raisings = v.threads.iter().fold((0, 0), |acc, &pid| {
            let (i, s) = sched.as_bfq().map_or((0, 0), |b| b.raisings(pid));
            (acc.0 + i, acc.1 + s)
        });
        QemuStats {
            threads_created: v.threads.len(),
            threads_alive: v.workers + v.iothread.is_some() as usize,
            host_raisings,
        }
    }

    /// Creates a cgroup with a BFQ weight in kernel `k`.
    pub fn create_cgroup(&mut self, k: KernelId, weight: u32) -> CgroupId {
        self.kernels[k].block.cgroups.create(weight)
    }

    /// Bytes of files, over every kernel's disk, that did not fit and were
    /// placed over others ([`crate::fs::Layout::overlapping_bytes`]).
    pub fn overlapping_file_bytes(&self) -> u64 {
        self.kernels
            .iter()
            .map(|k| k.layout.overlapping_bytes())
            .sum()
    }

    /// Places a file on kernel `k`'s disk. A file in a guest is written
    /// into its VM's image, which takes room on the host for it.
    pub fn add_file(&mut self, k: KernelId, path: &str, size: u64) -> FileId {
        let id = self.kernels[k].layout.add_file(path, size);
        self.kernels[k].track_file();
        if let Some(vm) = self.vms.iter().find(|v| v.guest == k) {
            for e in self.kernels[k].layout.file(id).extents().to_vec() {
                self.kernels[HOST]
                    .layout
                    .fill_sparse(vm.image, e.dev_sector, e.sectors);
            }
        }
        id
    }

    /// Creates a sparse file on kernel `k`'s disk (a VM's image), which
    /// takes room only where data is written into it.
    fn add_sparse_file(&mut self, k: KernelId, path: &str, size: u64) -> FileId {
        let id = self.kernels[k].layout.add_sparse_file(path, size);
        self.kernels[k].track_file();
        id
    }

    /// Bytes VM `vm`'s image takes on the host.
    pub fn image_allocated_bytes(&self, vm: usize) -> u64 {
        self.kernels[HOST]
            .layout
            .allocated_bytes(self.vms[vm].image)
    }

    /// Drops kernel `k`'s clean page cache (`echo 3 >
    /// /proc/sys/vm/drop_caches`); dirty pages stay, as in the kernel.
    pub fn drop_caches(&mut self, k: KernelId) {
        for c in &mut self.kernels[k].cache {
            c.clear();
        }
    }

    fn spawn(&mut self, kernel: KernelId, role: Role, prio: IoPrio, cgroup: CgroupId) -> Pid {
        let pid = self.procs.len() as Pid;
        let rng = self.rng.fork();
        self.procs.push(Proc {
            kernel,
            ioc: IoContext { pid, prio, cgroup },
            role,
            rng,
            gen: 0,
        });
        pid
    }

    /// Starts a buffered sequential reader of `file` in kernel `k` now.
    pub fn start_seq_reader(
        &mut self,
        k: KernelId,
        file: FileId,
        prio: IoPrio,
        cgroup: CgroupId,
    ) -> Pid {
        let pid = self.spawn(k, Role::SeqReader { file, pos: 0 }, prio, cgroup);
        self.wake_in(pid, 0);
        pid
    }

    /// Starts a 4 KiB random reader of `file` in kernel `k` now.
    pub fn start_rand_reader(
        &mut self,
        k: KernelId,
        file: FileId,
        prio: IoPrio,
        cgroup: CgroupId,
    ) -> Pid {
        let pid = self.spawn(k, Role::RandReader { file }, prio, cgroup);
        self.wake_in(pid, 0);
        pid
    }

    /// Starts a buffered writer of `file` in kernel `k`, capped at `rate`
    /// bytes/s (0: uncapped). Starts the kernel's flusher if needed.
    pub fn start_writer(
        &mut self,
        k: KernelId,
        file: FileId,
        random: bool,
        rate: f64,
        prio: IoPrio,
    ) -> Pid {
        self.ensure_flusher(k);
        let role = Role::Writer {
            file,
            pos: 0,
            random,
            rate,
            blocked: false,
        };
        let pid = self.spawn(k, role, prio, 0);
        self.wake_in(pid, 0);
        pid
    }

    /// Makes kernel `k` run `sync` every `period`, as the S suite does
    /// while writers run ("increase difficulty by periodically syncing").
    pub fn periodic_sync(&mut self, k: KernelId, period: Nanos) {
        self.ensure_flusher(k);
        self.kernels[k].sync_period = Some(period);
        let at = self.now() + period;
        self.q.push(at, Ev::Sync(k));
    }

    fn ensure_flusher(&mut self, k: KernelId) {
        if self.kernels[k].flusher.is_none() {
            let role = Role::Flusher {
                inflight: 0,
                sync_left: 0,
            };
            let pid = self.spawn(k, role, IoPrio::DEFAULT, 0);
            self.kernels[k].flusher = Some(pid);
        }
    }

    /// Starts an application in kernel `k` now: `files` are the layout ids
    /// of the trace's files, in trace order.
    pub fn start_app(
        &mut self,
        k: KernelId,
        trace: Arc<AppTrace>,
        files: Vec<FileId>,
        prio: IoPrio,
    ) -> Pid {
        let now = self.now();
        let run = AppRun {
            trace,
            files,
            next: 0,
            pending: 0,
            started: now,
            finished: None,
        };
        let pid = self.spawn(k, Role::App(run), prio, 0);
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

    /// Sectors completed so far by kernel `k`'s disk: (read, write).
    pub fn sectors_done(&self, k: KernelId) -> (u64, u64) {
        let b = &self.kernels[k].block;
        (b.sectors_done[0], b.sectors_done[1])
    }

    /// Bytes completed for requests issued by `pid`.
    pub fn bytes_done_by(&self, pid: Pid) -> u64 {
        let k = self.procs[pid as usize].kernel;
        self.kernels[k]
            .block
            .sectors_by_pid
            .get(pid as usize)
            .copied()
            .unwrap_or(0)
            * 512
    }

    /// Weight-raising periods the elevator of `pid`'s kernel started for
    /// it: (interactive, soft real-time).
    pub fn raisings(&self, pid: Pid) -> (u32, u32) {
        let k = self.procs[pid as usize].kernel;
        let sched = self.kernels[k].block.scheduler();
        sched.as_bfq().map_or((0, 0), |b| b.raisings(pid))
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
            if self.arbiter.is_some() {
                for vm in 0..self.vms.len() {
                    self.poll_guest(vm);
                }
            }
            self.sync_block_events();
            if stop(self) {
                return;
            }
        }
        // Advance the clock even if nothing happened.
        if self.q.now() < until {
            self.q.push(until, Ev::Timer(HOST, Nanos::MAX));
            self.q.pop();
        }
    }

    fn handle(&mut self, now: Nanos, ev: Ev) {
        match ev {
            Ev::Device(k) => {
                self.kernels[k].device_ev = None;
                let mut woken = std::mem::take(&mut self.woken);
                let kern = &mut self.kernels[k];
                // A guest woken by this interrupt has not caught up with
                // its ticks yet (see `crate::vm`).
                if kern.lagging_ticks {
                    let tick = kern.block.ticks.tick_ns();
                    kern.block.ticks.stale = Some(kern.last_active / tick);
                }
                kern.block.complete_due(now, &mut woken);
                kern.block.ticks.stale = None;
                for owner in woken.drain(..) {
                    self.io_done(owner);
                }
                self.woken = woken;
            }
            Ev::Timer(k, at) => {
                let kern = &mut self.kernels[k];
                if kern.timer_ev == Some(at) {
                    kern.timer_ev = None;
                }
                if kern.block.timer_at() == Some(at) {
                    kern.last_active = now;
                    kern.block.fire_timer(now);
                }
            }
            Ev::Wake(pid, gen) => {
                let p = &self.procs[pid as usize];
                if p.gen == gen {
                    self.kernels[p.kernel].last_active = now;
                    self.step(pid);
                }
            }
            Ev::Sync(k) => {
                if let Some(period) = self.kernels[k].sync_period {
                    self.kernels[k].last_active = now;
                    self.start_sync(k);
                    self.q.push(now + period, Ev::Sync(k));
                }
            }
            Ev::Kick(vm) => {
                self.vms[vm].kick_scheduled = false;
                let guest = self.vms[vm].guest;
                if let Backend::Virtio(vq) = self.kernels[guest].block.backend_mut() {
                    let reqs = vq.take_avail();
                    self.vms[vm].waiting.extend(reqs);
                }
                self.qemu_dispatch(vm);
            }
            Ev::JobDone(job) => self.finish_job(job),
            Ev::CoordMsg(vm, msg) => {
                if let Some(arb) = self.arbiter.as_mut() {
                    match msg {
                        CoordMsg::Help {
                            duration_ns,
                            reason,
                        } => arb.help_for(vm as policy::VmId, now, duration_ns, reason),
                        CoordMsg::NoHelp => arb.no_help(vm as policy::VmId, now),
                    }
                }
                self.host_coord_update();
            }
            Ev::HostCoord(at) => {
                if self.host_coord_ev == Some(at) {
                    self.host_coord_ev = None;
                    self.host_coord_update();
                }
            }
            Ev::GuestCoord(vm, at) => {
                if let Some(gc) = self.vms[vm].guest_coord.as_mut() {
                    if gc.timer_ev == Some(at) {
                        gc.timer_ev = None;
                    }
                }
                // The guest is polled after every event.
            }
        }
    }

    // ----- coordination ---------------------------------------------------

    /// The guest side of VM `vm` looks at its elevator: the detector turns
    /// the count of raised busy queues into a need, the client into HELP,
    /// renewals and NO-HELP, which leave through the channel.
    fn poll_guest(&mut self, vm: usize) {
        let now = self.now();
        let guest = self.vms[vm].guest;
        let since = now.saturating_sub(self.coord.help_per_raising_ns);
        let (interactive, soft_rt) = self.kernels[guest]
            .block
            .scheduler()
            .as_bfq()
            .map_or((0, 0), |b| b.raised_busy_queues(since));
        let raised = interactive + soft_rt;
        let channel = self.coord.channel;
        let lease = self.coord.policy.max_lease_ns;
        let Some(gc) = self.vms[vm].guest_coord.as_mut() else {
            return;
        };
        let due = |t: Option<Nanos>| t.is_some_and(|t| t <= now);
        if gc.greedy {
            gc.urgency = policy::Urgency::Help {
                resource: policy::Resource::Io,
                reason: policy::HelpReason::Explicit,
                duration_ns: lease,
            };
        } else if raised != gc.last_raised || due(gc.detector.next_deadline()) {
            gc.last_raised = raised;
            if let Some(u) = gc.detector.observe(now, interactive, soft_rt) {
                gc.urgency = u;
            }
        }
        {
            if let Some(msg) = gc.client.step(now, &gc.urgency) {
                let kind = match msg {
                    policy::Message::Help {
                        duration_hint_ms,
                        reason,
                        ..
                    } => {
                        self.vms[vm].stats.helps_sent += 1;
                        self.vms[vm].stats.start_helps_sent += reason.is_start() as u64;
                        Some(CoordMsg::Help {
                            duration_ns: duration_hint_ms as Nanos * 1_000_000,
                            reason,
                        })
                    }
                    policy::Message::NoHelp { .. } => {
                        self.vms[vm].stats.no_helps_sent += 1;
                        Some(CoordMsg::NoHelp)
                    }
                    _ => None,
                };
                if let Some(kind) = kind {
                    self.q.push(channel.delivery(now), Ev::CoordMsg(vm, kind));
                }
            }
        }
        let gc = self.vms[vm].guest_coord.as_mut().expect("guest side");
        let next = [gc.detector.next_deadline(), gc.client.next_deadline()]
            .into_iter()
            .flatten()
            .filter(|&t| t > now)
            .min();
        if let Some(t) = next {
            if gc.timer_ev.is_none_or(|e| t < e) {
                gc.timer_ev = Some(t);
                self.q.push(t, Ev::GuestCoord(vm, t));
            }
        }
    }

    /// The host's arbiter decides who is boosted now; the changes are
    /// applied to the VMs' QEMU threads.
    fn host_coord_update(&mut self) {
        let now = self.now();
        let Some(arb) = self.arbiter.as_mut() else {
            return;
        };
        let changes = arb.update(now);
        let next = arb.next_deadline();
        for c in changes {
            let (vm, on) = match c {
                policy::BoostChange::Boost(vm) => (vm as usize, true),
                policy::BoostChange::Unboost(vm, _) => (vm as usize, false),
            };
            let v = &mut self.vms[vm];
            if v.boosted == on {
                continue;
            }
            if on {
                v.boosted_since = now;
            } else {
                v.stats.boosted_ns += now - v.boosted_since;
            }
            v.boosted = on;
            self.actuate(vm);
        }
        if let Some(t) = next {
            let t = t.max(now);
            if self.host_coord_ev.is_none_or(|e| t < e || e < now) {
                self.host_coord_ev = Some(t);
                self.q.push(t, Ev::HostCoord(t));
            }
        }
    }

    /// Applies VM `vm`'s current privilege to all its live QEMU threads.
    fn actuate(&mut self, vm: usize) {
        for pid in self.qemu_threads(vm) {
            self.actuate_thread(vm, pid);
        }
    }

    /// Applies VM `vm`'s current privilege to one of its QEMU threads: its
    /// ioprio (seen by the elevator on the thread's next request) and the
    /// host elevator's own boost.
    fn actuate_thread(&mut self, vm: usize, pid: Pid) {
        let on = self.vms[vm].boosted || self.vms[vm].static_boost;
        if self.coord.mode == Coordination::Off {
            return;
        }
        let (boost, prio) = self.coord.actuation(on);
        self.procs[pid as usize].ioc.prio = prio;
        let now = self.now();
        self.kernels[HOST].block.set_boost(now, pid, boost);
    }

    /// Keeps one pending event for the next completion and one for the
    /// elevator timer of each kernel, and a QEMU kick for each guest that
    /// added requests to its virtqueue.
    fn sync_block_events(&mut self) {
        for (k, kern) in self.kernels.iter_mut().enumerate() {
            if let Some(t) = kern.block.next_completion() {
                if kern.device_ev.is_none_or(|d| t < d) {
                    kern.device_ev = Some(t);
                    self.q.push(t, Ev::Device(k));
                }
            }
            if let Some(t) = kern.block.timer_at() {
                if kern.timer_ev != Some(t) {
                    kern.timer_ev = Some(t);
                    self.q.push(t, Ev::Timer(k, t));
                }
            }
        }
        let now = self.q.now();
        for (i, vm) in self.vms.iter_mut().enumerate() {
            if vm.kick_scheduled {
                continue;
            }
            if let Backend::Virtio(vq) = self.kernels[vm.guest].block.backend() {
                if vq.has_avail() {
                    vm.kick_scheduled = true;
                    self.q.push(now + VIRTQUEUE_NOTIFY_NS, Ev::Kick(i));
                }
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
        let p = &self.procs[pid as usize];
        let (k, ioc) = (p.kernel, p.ioc);
        let now = self.now();
        let bio = Bio {
            sector,
            sectors,
            dir,
            sync,
            ioc,
            owner: BioOwner { pid, token },
        };
        self.kernels[k].block.submit(now, bio);
    }

    /// A process's timer fired: it does its next piece of work.
    fn step(&mut self, pid: Pid) {
        let i = pid as usize;
        let k = self.procs[i].kernel;
        match self.procs[i].role {
            Role::SeqReader { file, pos } => {
                let f = self.kernels[k].layout.file(file);
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
                let f = self.kernels[k].layout.file(file);
                let pages = (f.size / PAGE).max(1);
                let start = f.start_sector();
                let page = self.procs[i].rng.below(pages);
                let sector = start + page * PAGE_SECTORS;
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
            Role::QemuWorker { vm, job } => match job {
                Some(job) => self.issue_job(job),
                // Idle for the pool's timeout: the worker exits.
                None => {
                    let v = &mut self.vms[vm];
                    v.idle_workers.retain(|&w| w != pid);
                    v.workers -= 1;
                    self.procs[i].role = Role::Gone;
                }
            },
            Role::QemuIoThread { .. } | Role::Flusher { .. } | Role::Gone => {}
        }
    }

    /// One of `owner.pid`'s bios completed.
    fn io_done(&mut self, owner: BioOwner) {
        let pid = owner.pid;
        match &mut self.procs[pid as usize].role {
            Role::SeqReader { .. } => self.wake_in(pid, READER_CPU_NS),
            Role::RandReader { .. } => self.wake_in(pid, RAND_READER_CPU_NS),
            Role::Flusher { .. } => self.flusher_io_done(pid),
            Role::App(run) => {
                run.pending -= 1;
                if run.pending == 0 {
                    run.next += 1;
                    let think = self.app_think(pid);
                    self.wake_in(pid, think);
                }
            }
            Role::QemuWorker { .. } | Role::QemuIoThread { .. } => {
                let job = owner.token as usize;
                let j = self.jobs[job].as_mut().expect("live job");
                j.pending -= 1;
                if j.pending == 0 {
                    self.finish_job(job);
                }
            }
            Role::Writer { .. } | Role::Gone => {}
        }
    }

    // ----- QEMU ------------------------------------------------------------

    /// Hands the VM's waiting requests to QEMU threads: to idle pool
    /// workers, or new ones up to the pool's limit (`thread_pool_submit_aio()`
    /// spawns a worker when none is idle); or all to the iothread.
    fn qemu_dispatch(&mut self, vm: usize) {
        loop {
            let v = &mut self.vms[vm];
            let Some(&(tag, req)) = v.waiting.front() else {
                return;
            };
            let thread = match v.aio {
                Aio::IoThread => v.iothread.expect("iothread"),
                Aio::Threads => {
                    if let Some(w) = v.idle_workers.pop_front() {
                        w
                    } else if v.workers < THREAD_POOL_MAX {
                        v.workers += 1;
                        let cg = v.cgroup;
                        let role = Role::QemuWorker { vm, job: None };
                        let pid = self.spawn(HOST, role, IoPrio::DEFAULT, cg);
                        self.vms[vm].threads.push(pid);
                        // A new worker of a helped VM is helped too.
                        self.actuate_thread(vm, pid);
                        pid
                    } else {
                        return;
                    }
                }
            };
            self.vms[vm].waiting.pop_front();
            let job = self.new_job(Job {
                vm,
                tag,
                req,
                pending: 0,
                thread,
            });
            match self.vms[vm].aio {
                Aio::IoThread => self.issue_job(job),
                Aio::Threads => {
                    if let Role::QemuWorker { job: j, .. } = &mut self.procs[thread as usize].role {
                        *j = Some(job);
                    }
                    self.wake_in(thread, WORKER_HANDOFF_NS);
                }
            }
        }
    }

    fn new_job(&mut self, job: Job) -> usize {
        match self.free_jobs.pop() {
            Some(i) => {
                self.jobs[i] = Some(job);
                i
            }
            None => {
                self.jobs.push(Some(job));
                self.jobs.len() - 1
            }
        }
    }

    /// A QEMU thread performs a guest request on the image file.
    fn issue_job(&mut self, job: usize) {
        let now = self.now();
        let (vm, req, thread) = {
            let j = self.jobs[job].as_ref().expect("live job");
            (j.vm, j.req, j.thread)
        };
        let image = self.vms[vm].image;
        let token = job as u64;
        if self.vms[vm].aio == Aio::IoThread {
            // O_DIRECT: the request itself goes to the host's block layer,
            // one bio per contiguous piece of the image. Direct I/O is
            // REQ_SYNC in both directions (`dio_bio_write_op()`).
            let bios = self.submit_file_range(
                thread,
                image,
                req.sector,
                req.sectors as u64,
                req.dir,
                true,
                token,
            );
            self.jobs[job].as_mut().expect("live").pending = bios;
            if bios == 0 {
                // All in holes of the image: zeros, no host I/O.
                self.q.push(now, Ev::JobDone(job));
            }
            return;
        }
        // Buffered: through the host page cache of the image file.
        let first = req.sector * 512 / PAGE;
        let last = (req.sector * 512 + req.sectors as u64 * 512).div_ceil(PAGE);
        let copy = (req.sectors as f64 * 512.0 * COPY_NS_PER_BYTE) as Nanos;
        match req.dir {
            Direction::Read => {
                let holes = self.kernels[HOST].cache[image].missing(first, last);
                if holes.is_empty() {
                    self.q.push(now + copy, Ev::JobDone(job));
                    return;
                }
                // A miss reads ahead in the image, as the host kernel does
                // for any buffered reader; the pages beyond the request go
                // in the same bios, and the request waits for them all.
                let image_pages = self.kernels[HOST].layout.file(image).size.div_ceil(PAGE);
                let window = self.vms[vm].image_ra.window(first, last);
                let ra_last = (first + window).min(image_pages).max(last);
                let holes = self.kernels[HOST].cache[image].missing(first, ra_last);
                let mut bios = 0;
                for (s, e) in holes {
                    self.kernels[HOST].cache[image].insert(s, e);
                    bios += self.submit_pages(thread, image, s, e, token);
                }
                self.jobs[job].as_mut().expect("live").pending = bios;
                if bios == 0 {
                    self.q.push(now + copy, Ev::JobDone(job));
                }
            }
            Direction::Write => {
                self.dirty_pages_of(HOST, image, first, last);
                self.q.push(now + copy, Ev::JobDone(job));
            }
        }
    }

    /// Reads pages `[s, e)` of `file` (of the kernel `pid` runs in) as
    /// bios of at most one readahead window each, split where the file is
    /// not contiguous; returns how many.
    fn submit_pages(&mut self, pid: Pid, file: FileId, s: u64, e: u64, token: u64) -> u32 {
        let max_pages = READAHEAD_BYTES / PAGE;
        let mut bios = 0;
        let mut p = s;
        while p < e {
            let n = (e - p).min(max_pages);
            bios += self.submit_file_range(
                pid,
                file,
                p * PAGE_SECTORS,
                n * PAGE_SECTORS,
                Direction::Read,
                true,
                token,
            );
            p += n;
        }
        bios
    }

    /// Submits sectors `[first, first + sectors)` of `file` (of the kernel
    /// `pid` runs in) as one bio per piece contiguous on the device; the
    /// holes of a sparse file need no I/O. Returns how many bios.
    #[allow(clippy::too_many_arguments)]
    fn submit_file_range(
        &mut self,
        pid: Pid,
        file: FileId,
        first: u64,
        sectors: u64,
        dir: Direction,
        sync: bool,
        token: u64,
    ) -> u32 {
        let k = self.procs[pid as usize].kernel;
        let end = first + sectors;
        let mut at = first;
        let mut bios = 0;
        while at < end {
            match self.kernels[k].layout.file(file).piece(at, end - at) {
                Piece::Mapped {
                    dev_sector,
                    sectors,
                } => {
                    self.submit(pid, dev_sector, sectors as u32, dir, sync, token);
                    bios += 1;
                    at += sectors;
                }
                Piece::Hole { sectors } => at += sectors,
            }
        }
        bios
    }

    /// QEMU finished a guest request: it fills the used ring and interrupts
    /// the guest; a pool worker then takes the next waiting request or
    /// idles.
    fn finish_job(&mut self, job: usize) {
        let now = self.now();
        let j = self.jobs[job].take().expect("live job");
        self.free_jobs.push(job);
        let guest = self.vms[j.vm].guest;
        if let Backend::Virtio(vq) = self.kernels[guest].block.backend_mut() {
            vq.complete(j.tag, now + IRQ_INJECT_NS);
        }
        if let Role::QemuWorker { job: current, .. } = &mut self.procs[j.thread as usize].role {
            *current = None;
            // A worker back from a request finds the semaphore already
            // posted when requests wait, and takes one without sleeping;
            // otherwise it sleeps behind the workers already waiting.
            let v = &mut self.vms[j.vm];
            if v.waiting.is_empty() {
                v.idle_workers.push_back(j.thread);
            } else {
                v.idle_workers.push_front(j.thread);
            }
            self.wake_in(j.thread, THREAD_POOL_IDLE_NS);
            self.qemu_dispatch(j.vm);
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
        let k = self.procs[pid as usize].kernel;
        let (file, offset, len) = {
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
                Some(r) => (run.files[r.file], r.offset, r.len),
            }
        };
        let first = offset / PAGE;
        let last = (offset + len).div_ceil(PAGE);
        let holes = self.kernels[k].cache[file].missing(first, last);
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
        let mut bios = 0;
        for (s, e) in holes {
            self.kernels[k].cache[file].insert(s, e);
            bios += self.submit_pages(pid, file, s, e, 0);
        }
        if let Role::App(run) = &mut self.procs[pid as usize].role {
            run.pending += bios;
        }
    }

    // ----- writers and write-back ----------------------------------------

    /// Marks pages `[first, last)` of `file` dirty in kernel `k`, and wakes
    /// the flusher when dirty pages pass the background threshold.
    fn dirty_pages_of(&mut self, k: KernelId, file: FileId, first: u64, last: u64) {
        let kern = &mut self.kernels[k];
        let before = kern.dirty[file].pages();
        kern.dirty[file].insert(first, last);
        kern.dirty_pages += kern.dirty[file].pages() - before;
        if kern.dirty_pages >= kern.dirty_bg_pages {
            self.flush_more(k);
        }
    }

    fn writer_step(&mut self, pid: Pid, file: FileId, pos: u64, random: bool, rate: f64) {
        let k = self.procs[pid as usize].kernel;
        let size = self.kernels[k].layout.file(file).size;
        let (page, pages, next_pos) = if random {
            let pages = (size / PAGE).max(1);
            let page = self.procs[pid as usize].rng.below(pages);
            (page, 1, pos)
        } else {
            let pos = if pos + WRITER_CHUNK > size { 0 } else { pos };
            (pos / PAGE, WRITER_CHUNK / PAGE, pos + WRITER_CHUNK)
        };
        self.dirty_pages_of(k, file, page, page + pages);
        let kern = &self.kernels[k];
        let blocked = kern.dirty_pages >= kern.dirty_limit_pages;
        if let Role::Writer {
            pos: p, blocked: b, ..
        } = &mut self.procs[pid as usize].role
        {
            *p = next_pos;
            *b = blocked;
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
    fn unblock_writers(&mut self, k: KernelId) {
        let kern = &self.kernels[k];
        if kern.dirty_pages >= (kern.dirty_bg_pages + kern.dirty_limit_pages) / 2 {
            return;
        }
        let blocked: Vec<Pid> = self
            .procs
            .iter()
            .enumerate()
            .filter(|(_, p)| p.kernel == k && matches!(p.role, Role::Writer { blocked: true, .. }))
            .map(|(i, _)| i as Pid)
            .collect();
        for pid in blocked {
            if let Role::Writer { blocked, .. } = &mut self.procs[pid as usize].role {
                *blocked = false;
            }
            self.wake_in(pid, 0);
        }
    }

    fn start_sync(&mut self, k: KernelId) {
        let dirty = self.kernels[k].dirty_pages;
        if let Some(f) = self.kernels[k].flusher {
            if let Role::Flusher { sync_left, .. } = &mut self.procs[f as usize].role {
                *sync_left = (*sync_left).max(dirty);
            }
        }
        self.flush_more(k);
    }

    fn flusher_io_done(&mut self, pid: Pid) {
        let k = self.procs[pid as usize].kernel;
        if let Role::Flusher { inflight, .. } = &mut self.procs[pid as usize].role {
            *inflight -= 1;
        }
        self.flush_more(k);
        self.unblock_writers(k);
    }

    /// The flusher submits write-back while it has a reason to: a pending
    /// `sync` (whose writes are REQ_SYNC, as `WB_SYNC_ALL` write-back is,
    /// unless the kernel is one whose `sync` writes back async first, see
    /// `VmConfig::sync_writes_async`), or dirty pages above the background
    /// threshold (async writes).
    fn flush_more(&mut self, k: KernelId) {
        let Some(fpid) = self.kernels[k].flusher else {
            return;
        };
        loop {
            let (inflight, sync_left) = match &self.procs[fpid as usize].role {
                Role::Flusher {
                    inflight,
                    sync_left,
                } => (*inflight, *sync_left),
                _ => return,
            };
            let kern = &mut self.kernels[k];
            let background = kern.dirty_pages > kern.dirty_bg_pages;
            if inflight >= FLUSH_MAX_INFLIGHT || (sync_left == 0 && !background) {
                return;
            }
            // Oldest file first would need ages; the file with the most
            // dirty pages is a fair stand-in for write-back's b_io order.
            let Some(file) = (0..kern.dirty.len())
                .filter(|&f| !kern.dirty[f].is_empty())
                .max_by_key(|&f| (kern.dirty[f].pages(), std::cmp::Reverse(f)))
            else {
                if let Role::Flusher { sync_left, .. } = &mut self.procs[fpid as usize].role {
                    *sync_left = 0;
                }
                return;
            };
            let (s, e) = kern.dirty[file]
                .take_first(FLUSH_CHUNK_PAGES)
                .expect("non-empty");
            let n = e - s;
            kern.dirty_pages -= n;
            let sync = sync_left > 0 && !kern.sync_writes_async;
            let bios = self.submit_file_range(
                fpid,
                file,
                s * PAGE_SECTORS,
                n * PAGE_SECTORS,
                Direction::Write,
                sync,
                0,
            );
            if let Role::Flusher {
                inflight,
                sync_left,
            } = &mut self.procs[fpid as usize].role
            {
                *inflight += bios;
                *sync_left = sync_left.saturating_sub(n);
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `ondemand_readahead()`'s windows: a one-page miss reads 4 pages, a
    /// read that goes on where the window ended doubles it up to
    /// `read_ahead_kb` (32 pages), and a jump starts over from the request.
    #[test]
    fn readahead_windows_ramp_up_on_sequential_reads_and_restart_on_jumps() {
        let mut ra = ReadaheadState::default();
        assert_eq!(ra.window(100, 101), 4);
        assert_eq!(ra.window(104, 105), 8);
        assert_eq!(ra.window(112, 113), 16);
        assert_eq!(ra.window(128, 129), 32);
        assert_eq!(ra.window(160, 161), 32);
        assert_eq!(ra.window(5000, 5001), 4);
        // Larger requests: 2x up to a quarter of the maximum, then all of it.
        assert_eq!(ra.window(9000, 9008), 16);
        assert_eq!(ra.window(20000, 20016), 32);
        // A request larger than the maximum is read whole.
        assert_eq!(ra.window(30000, 30064), 64);
    }
}
