//! The kernel part: one kernel's block layer (its elevator over a device or
//! a virtqueue), its file layout, its page cache ([`super::pagecache`]),
//! and the I/O path from a process's read or write of a file to bios in
//! the block layer. It owns the block events: a completion due on the
//! backend (a device completion on the host, a virtio interrupt in a
//! guest), and the elevator's timer.

use super::pagecache::PageCache;
use super::{Ev, Machine, MachineConfig};
use crate::block::{Backend, Bio, BlockLayer};
use crate::engine::EventQueue;
use crate::fs::{FileId, Layout, Piece, PAGE, PAGE_SECTORS};
use crate::iosched::{self, Cgroups, TickSource};
use crate::request::{BioOwner, CgroupId, Pid};
use crate::virtio::Virtqueue;
use crate::vm::VmConfig;
use devmodel::{Device, Direction, Nanos};

use super::readahead::READAHEAD_BYTES;

/// One kernel of the simulation: the host is [`HOST`], guests follow.
pub type KernelId = usize;
/// The host kernel.
pub const HOST: KernelId = 0;

/// The kernel part's events.
#[derive(Clone, Copy, Debug)]
pub(super) enum BlockEv {
    /// A completion may be due on the kernel's backend.
    Device,
    /// The kernel's elevator timer, armed for this time.
    Timer(Nanos),
}

/// One kernel: a block layer over a device or a virtqueue, the file
/// system's layout, and the page cache.
pub struct Kernel {
    pub block: BlockLayer,
    pub layout: Layout,
    pages: PageCache,
    /// The pending [`BlockEv::Device`] and [`BlockEv::Timer`] events.
    device_ev: Option<Nanos>,
    timer_ev: Option<Nanos>,
    capacity_bytes: u64,
    /// Jiffies lag while the kernel idles (guests, see [`crate::vm`]).
    lagging_ticks: bool,
    /// Last time the kernel ran something other than a completion
    /// interrupt: its jiffies are fresh as of then.
    last_active: Nanos,
}

/// A range of a file's sectors, for the I/O path.
#[derive(Clone, Copy, Debug)]
pub(super) struct FileRange {
    pub file: FileId,
    pub first: u64,
    pub sectors: u64,
}

/// Who submits bios, and how: the process, REQ_SYNC or not, and the
/// token its completions carry back ([`BioOwner::token`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Submitter {
    pub pid: Pid,
    pub sync: bool,
    pub token: u64,
}

impl Kernel {
    fn new(block: BlockLayer, capacity_bytes: u64, pages: PageCache) -> Kernel {
        Kernel {
            block,
            layout: Layout::new(capacity_bytes),
            pages,
            device_ev: None,
            timer_ev: None,
            capacity_bytes,
            lagging_ticks: false,
            last_active: 0,
        }
    }

    /// The host kernel, over the device `cfg` names.
    pub(super) fn host(cfg: &MachineConfig) -> Result<Kernel, String> {
        let model = devmodel::preset_with_hdd_params(&cfg.device, &cfg.hdd_params)?;
        let depth = cfg
            .queue_depth
            .unwrap_or(model.info().default_queue_depth)
            .max(1);
        let capacity_bytes = model.info().capacity_sectors * 512;
        let dispatch = cfg.dispatch_depth.unwrap_or(depth);
        let device = Device::behind_fifo(model, depth, dispatch);
        let sched = iosched::by_name(&cfg.sched, &cfg.sched_cfg)?;
        let ticks = TickSource::new(cfg.sched_cfg.hz);
        let block = BlockLayer::new(sched, Backend::Disk(device), Cgroups::new(), ticks);
        let pages = PageCache::new(cfg.memory_bytes, false);
        Ok(Kernel::new(block, capacity_bytes, pages))
    }

    /// A VM's guest kernel, over a virtqueue, as of `now`.
    pub(super) fn guest(cfg: &VmConfig, now: Nanos) -> Result<Kernel, String> {
        let sched = iosched::by_name(&cfg.sched, &cfg.sched_cfg)?;
        let ticks = TickSource::new(cfg.sched_cfg.hz);
        let backend = Backend::Virtio(Virtqueue::new(cfg.virtqueue_depth));
        let block = BlockLayer::new(sched, backend, Cgroups::new(), ticks);
        let pages = PageCache::new(cfg.memory_bytes, cfg.sync_writes_async);
        let mut guest = Kernel::new(block, cfg.image_bytes, pages);
        guest.lagging_ticks = cfg.lagging_ticks;
        guest.last_active = now;
        Ok(guest)
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    pub(super) fn pages(&self) -> &PageCache {
        &self.pages
    }

    pub(super) fn pages_mut(&mut self) -> &mut PageCache {
        &mut self.pages
    }

    /// The kernel ran something other than a completion interrupt now.
    pub(super) fn touch(&mut self, now: Nanos) {
        self.last_active = now;
    }

    /// Places a file on the kernel's disk.
    pub(super) fn add_file(&mut self, path: &str, size: u64) -> FileId {
        let id = self.layout.add_file(path, size);
        self.pages.track_file();
        id
    }

    /// Creates a sparse file (a VM's image), which takes room only where
    /// data is written into it.
    pub(super) fn add_sparse_file(&mut self, path: &str, size: u64) -> FileId {
        let id = self.layout.add_sparse_file(path, size);
        self.pages.track_file();
        id
    }

    /// The guest's virtqueue (`None` on the host).
    pub(super) fn virtqueue(&self) -> Option<&Virtqueue> {
        match self.block.backend() {
            Backend::Virtio(vq) => Some(vq),
            Backend::Disk(_) => None,
        }
    }

    /// The guest's virtqueue, mutably (`None` on the host).
    pub(super) fn virtqueue_mut(&mut self) -> Option<&mut Virtqueue> {
        match self.block.backend_mut() {
            Backend::Virtio(vq) => Some(vq),
            Backend::Disk(_) => None,
        }
    }

    /// [`BlockEv::Device`]: completes what is due, into `woken`. A guest
    /// woken by this interrupt has not caught up with its ticks yet (see
    /// [`crate::vm`]).
    fn on_device(&mut self, now: Nanos, woken: &mut Vec<BioOwner>) {
        self.device_ev = None;
        if self.lagging_ticks {
            let tick = self.block.ticks.tick_ns();
            self.block.ticks.stale = Some(self.last_active / tick);
        }
        self.block.complete_due(now, woken);
        self.block.ticks.stale = None;
    }

    /// [`BlockEv::Timer`] armed for `at`: fires the elevator's timer if it
    /// is still armed for then.
    fn on_timer(&mut self, now: Nanos, at: Nanos) {
        if self.timer_ev == Some(at) {
            self.timer_ev = None;
        }
        if self.block.timer_at() == Some(at) {
            self.last_active = now;
            self.block.fire_timer(now);
        }
    }

    /// Keeps one pending event for the block layer's next completion and
    /// one for its elevator timer.
    fn schedule(&mut self, k: KernelId, q: &mut EventQueue<Ev>) {
        if let Some(t) = self.block.next_completion() {
            if self.device_ev.is_none_or(|d| t < d) {
                self.device_ev = Some(t);
                q.push(t, Ev::Block(k, BlockEv::Device));
            }
        }
        if let Some(t) = self.block.timer_at() {
            if self.timer_ev != Some(t) {
                self.timer_ev = Some(t);
                q.push(t, Ev::Block(k, BlockEv::Timer(t)));
            }
        }
    }
}

impl Machine {
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
        let id = self.kernels[k].add_file(path, size);
        if let Some(image) = self.qemu.image_of_guest(k) {
            for e in self.kernels[k].layout.file(id).extents().to_vec() {
                self.kernels[HOST]
                    .layout
                    .fill_sparse(image, e.dev_sector, e.sectors);
            }
        }
        id
    }

    /// Sectors completed so far by kernel `k`'s disk: (read, write).
    pub fn sectors_done(&self, k: KernelId) -> (u64, u64) {
        let b = &self.kernels[k].block;
        (b.sectors_done[0], b.sectors_done[1])
    }

    /// Bytes completed for requests issued by `pid`.
    pub fn bytes_done_by(&self, pid: Pid) -> u64 {
        let k = self.procs.kernel_of(pid);
        self.kernels[k]
            .block
            .sectors_by_pid
            .get(pid as usize)
            .copied()
            .unwrap_or(0)
            * 512
    }

    /// Weight-raising periods the elevator of `pid`'s kernel started for
    /// it: (interactive, soft real-time); none unless it is BFQ.
    pub fn raisings(&self, pid: Pid) -> (u32, u32) {
        let k = self.procs.kernel_of(pid);
        let sched = self.kernels[k].block.scheduler();
        sched.as_bfq().map_or((0, 0), |b| b.raisings(pid))
    }

    /// The kernel part's events.
    pub(super) fn on_block(&mut self, k: KernelId, now: Nanos, ev: BlockEv) {
        match ev {
            BlockEv::Device => {
                let mut woken = std::mem::take(&mut self.woken);
                self.kernels[k].on_device(now, &mut woken);
                for owner in woken.drain(..) {
                    self.io_done(owner);
                }
                self.woken = woken;
            }
            BlockEv::Timer(at) => self.kernels[k].on_timer(now, at),
        }
    }

    /// Keeps each kernel's completion and timer events pending.
    pub(super) fn schedule_block_events(&mut self) {
        for (k, kern) in self.kernels.iter_mut().enumerate() {
            kern.schedule(k, &mut self.q);
        }
    }

    /// Submits one bio of process `by.pid` to the block layer of its
    /// kernel.
    pub(super) fn submit(&mut self, by: Submitter, sector: u64, sectors: u32, dir: Direction) {
        let (k, ioc) = (self.procs.kernel_of(by.pid), self.procs.ioc(by.pid));
        let now = self.now();
        let bio = Bio {
            sector,
            sectors,
            dir,
            sync: by.sync,
            ioc,
            owner: BioOwner {
                pid: by.pid,
                token: by.token,
            },
        };
        self.kernels[k].block.submit(now, bio);
        if self.cpu.io_costs() {
            // The block layer's submission and the completion's interrupt
            // (`cpusched::iocost`); a guest's bio also notifies QEMU.
            let cost = cpusched::iocost::BLOCK_SUBMIT_NS + cpusched::iocost::BLOCK_COMPLETE_NS;
            self.cpu.owe(by.pid, cost);
            if super::cpu::is_guest(k) {
                self.cpu.owe_platform(by.pid, self.cpu.vm_exit_ns());
            }
        }
    }

    /// Submits `range` of a file of the kernel `by.pid` runs in, as one bio
    /// per piece contiguous on the device; the holes of a sparse file need
    /// no I/O. Returns how many bios.
    pub(super) fn submit_file_range(
        &mut self,
        by: Submitter,
        range: FileRange,
        dir: Direction,
    ) -> u32 {
        let k = self.procs.kernel_of(by.pid);
        let end = range.first + range.sectors;
        let mut at = range.first;
        let mut bios = 0;
        while at < end {
            match self.kernels[k].layout.file(range.file).piece(at, end - at) {
                Piece::Mapped {
                    dev_sector,
                    sectors,
                } => {
                    self.submit(by, dev_sector, sectors as u32, dir);
                    bios += 1;
                    at += sectors;
                }
                Piece::Hole { sectors } => at += sectors,
            }
        }
        bios
    }

    /// Reads pages `[s, e)` of `file` (of the kernel `pid` runs in) as
    /// sync bios of at most one readahead window each, split where the
    /// file is not contiguous; returns how many.
    pub(super) fn submit_pages(
        &mut self,
        pid: Pid,
        file: FileId,
        s: u64,
        e: u64,
        token: u64,
    ) -> u32 {
        let max_pages = READAHEAD_BYTES / PAGE;
        let by = Submitter {
            pid,
            sync: true,
            token,
        };
        let mut bios = 0;
        let mut p = s;
        while p < e {
            let n = (e - p).min(max_pages);
            let range = FileRange {
                file,
                first: p * PAGE_SECTORS,
                sectors: n * PAGE_SECTORS,
            };
            bios += self.submit_file_range(by, range, Direction::Read);
            p += n;
        }
        bios
    }
}
