//! The page cache and write-back part: one kernel's clean and dirty pages,
//! the dirty thresholds that wake the flusher and throttle writers, the
//! flusher's progress, and `sync`. It owns the periodic `sync` event
//! ([`super::Ev::Sync`]); its flusher is a process ([`super::Role::Flusher`])
//! whose completions come back here.

use super::kernel::{FileRange, KernelId, Submitter};
use super::{Ev, Machine, Role};
use crate::fs::{FileId, PageSet, PAGE, PAGE_SECTORS};
use crate::request::{IoPrio, Pid};
use devmodel::{Direction, Nanos};

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

/// One kernel's page cache, and its write-back.
pub(super) struct PageCache {
    /// Clean cached pages per file.
    clean: Vec<PageSet>,
    /// Dirty pages per file.
    dirty: Vec<PageSet>,
    dirty_pages: u64,
    dirty_bg_pages: u64,
    dirty_limit_pages: u64,
    /// See `VmConfig::sync_writes_async`.
    sync_writes_async: bool,
    /// The flusher thread, once there is something to write back.
    flusher: Option<Pid>,
    /// Write bios of the flusher in flight.
    inflight: u32,
    /// Pages a pending `sync` still has to write.
    sync_left: u64,
    /// The period of the S suite's `sync`, when it runs one.
    sync_period: Option<Nanos>,
}

/// A piece of write-back: pages `[first, first + pages)` of `file`.
struct WriteChunk {
    file: FileId,
    first: u64,
    pages: u64,
    sync: bool,
}

impl PageCache {
    /// An empty page cache of a kernel with `memory_bytes` of memory.
    pub(super) fn new(memory_bytes: u64, sync_writes_async: bool) -> PageCache {
        let mem_pages = memory_bytes / PAGE;
        PageCache {
            clean: Vec::new(),
            dirty: Vec::new(),
            dirty_pages: 0,
            dirty_bg_pages: mem_pages * DIRTY_BACKGROUND_RATIO / 100,
            dirty_limit_pages: mem_pages * DIRTY_RATIO / 100,
            sync_writes_async,
            flusher: None,
            inflight: 0,
            sync_left: 0,
            sync_period: None,
        }
    }

    /// Empty page-cache state for the file just added to the layout.
    pub(super) fn track_file(&mut self) {
        self.clean.push(PageSet::default());
        self.dirty.push(PageSet::default());
    }

    /// Page ranges of `[first, last)` of `file` not in the cache.
    pub(super) fn missing(&self, file: FileId, first: u64, last: u64) -> Vec<(u64, u64)> {
        self.clean[file].missing(first, last)
    }

    /// Pages `[first, last)` of `file` enter the cache (as their reads
    /// are submitted: they are locked until the read completes, and
    /// nobody else reads them).
    pub(super) fn insert(&mut self, file: FileId, first: u64, last: u64) {
        self.clean[file].insert(first, last);
    }

    /// Drops the clean pages; dirty pages stay, as in the kernel.
    fn drop_clean(&mut self) {
        for c in &mut self.clean {
            c.clear();
        }
    }

    /// Marks pages dirty; says whether dirty pages are now past the
    /// background threshold (the flusher has work).
    fn mark_dirty(&mut self, file: FileId, first: u64, last: u64) -> bool {
        let before = self.dirty[file].pages();
        self.dirty[file].insert(first, last);
        self.dirty_pages += self.dirty[file].pages() - before;
        self.dirty_pages >= self.dirty_bg_pages
    }

    /// Writers are throttled (`balance_dirty_pages()`) above the hard
    /// threshold.
    pub(super) fn throttled(&self) -> bool {
        self.dirty_pages >= self.dirty_limit_pages
    }

    /// Throttled writers may go once dirty pages fall back between the
    /// background and the hard threshold.
    fn writers_may_go(&self) -> bool {
        self.dirty_pages < (self.dirty_bg_pages + self.dirty_limit_pages) / 2
    }

    /// A `sync` starts: the flusher writes at least what is dirty now.
    fn start_sync(&mut self) {
        self.sync_left = self.sync_left.max(self.dirty_pages);
    }

    /// The next piece the flusher writes back, while it has a reason to:
    /// a pending `sync` (whose writes are REQ_SYNC, as `WB_SYNC_ALL`
    /// write-back is, unless the kernel is one whose `sync` writes back
    /// async first, see `VmConfig::sync_writes_async`), or dirty pages
    /// above the background threshold (async writes). The pages leave the
    /// dirty set as the chunk is taken.
    fn next_chunk(&mut self) -> Option<WriteChunk> {
        let background = self.dirty_pages > self.dirty_bg_pages;
        if self.inflight >= FLUSH_MAX_INFLIGHT || (self.sync_left == 0 && !background) {
            return None;
        }
        // Oldest file first would need ages; the file with the most
        // dirty pages is a fair stand-in for write-back's b_io order.
        let Some(file) = (0..self.dirty.len())
            .filter(|&f| !self.dirty[f].is_empty())
            .max_by_key(|&f| (self.dirty[f].pages(), std::cmp::Reverse(f)))
        else {
            self.sync_left = 0;
            return None;
        };
        let (s, e) = self.dirty[file]
            .take_first(FLUSH_CHUNK_PAGES)
            .expect("non-empty");
        let pages = e - s;
        self.dirty_pages -= pages;
        let sync = self.sync_left > 0 && !self.sync_writes_async;
        self.sync_left = self.sync_left.saturating_sub(pages);
        Some(WriteChunk {
            file,
            first: s,
            pages,
            sync,
        })
    }
}

impl Machine {
    /// Drops kernel `k`'s clean page cache (`echo 3 >
    /// /proc/sys/vm/drop_caches`); dirty pages stay, as in the kernel.
    pub fn drop_caches(&mut self, k: KernelId) {
        self.kernels[k].pages_mut().drop_clean();
    }

    /// Makes kernel `k` run `sync` every `period`, as the S suite does
    /// while writers run ("increase difficulty by periodically syncing").
    pub fn periodic_sync(&mut self, k: KernelId, period: Nanos) {
        self.ensure_flusher(k);
        self.kernels[k].pages_mut().sync_period = Some(period);
        let at = self.now() + period;
        self.q.push(at, Ev::Sync(k));
    }

    /// Starts kernel `k`'s flusher thread if it has none yet.
    pub(super) fn ensure_flusher(&mut self, k: KernelId) {
        if self.kernels[k].pages().flusher.is_none() {
            let pid = self.procs.spawn(k, Role::Flusher, IoPrio::DEFAULT, 0);
            self.kernels[k].pages_mut().flusher = Some(pid);
        }
    }

    /// [`Ev::Sync`]: the periodic `sync` of kernel `k`.
    pub(super) fn on_sync(&mut self, k: KernelId, now: Nanos) {
        if let Some(period) = self.kernels[k].pages().sync_period {
            self.kernels[k].touch(now);
            self.kernels[k].pages_mut().start_sync();
            self.flush_more(k);
            self.q.push(now + period, Ev::Sync(k));
        }
    }

    /// Marks pages `[first, last)` of `file` dirty in kernel `k`, and wakes
    /// the flusher when dirty pages pass the background threshold.
    pub(super) fn dirty_pages_of(&mut self, k: KernelId, file: FileId, first: u64, last: u64) {
        if self.kernels[k].pages_mut().mark_dirty(file, first, last) {
            self.flush_more(k);
        }
    }

    /// One of the flusher's writes completed.
    pub(super) fn flusher_io_done(&mut self, pid: Pid) {
        let k = self.procs.kernel_of(pid);
        self.kernels[k].pages_mut().inflight -= 1;
        self.flush_more(k);
        self.cpu_pay(pid);
        self.unblock_writers(k);
    }

    /// `balance_dirty_pages()` lets throttled writers go once dirty pages
    /// fall back between the background and the hard threshold.
    fn unblock_writers(&mut self, k: KernelId) {
        if !self.kernels[k].pages().writers_may_go() {
            return;
        }
        for pid in self.procs.unblock_writers(k) {
            self.wake_in(pid, 0);
        }
    }

    /// The flusher submits write-back while it has a reason to (see
    /// `PageCache::next_chunk`).
    fn flush_more(&mut self, k: KernelId) {
        let Some(fpid) = self.kernels[k].pages().flusher else {
            return;
        };
        if !matches!(self.procs.role(fpid), Role::Flusher) {
            return;
        }
        while let Some(c) = self.kernels[k].pages_mut().next_chunk() {
            let by = Submitter {
                pid: fpid,
                sync: c.sync,
                token: 0,
            };
            let range = FileRange {
                file: c.file,
                first: c.first * PAGE_SECTORS,
                sectors: c.pages * PAGE_SECTORS,
            };
            let bios = self.submit_file_range(by, range, Direction::Write);
            self.kernels[k].pages_mut().inflight += bios;
        }
    }
}
