//! Virtual machines: what a guest is made of, and the constants of the
//! QEMU host side that turns its disk requests into I/O on the host.
//!
//! The I/O path of a guest read, as the simulator models it:
//!
//! 1. A guest process submits a bio to the guest's block layer; the guest's
//!    elevator (any of [`crate::iosched`]) dispatches it to the virtqueue
//!    ([`crate::virtio`]), whose size is the guest's queue depth.
//! 2. The guest notifies QEMU ([`VIRTQUEUE_NOTIFY_NS`] later QEMU drains the
//!    ring).
//! 3. QEMU performs the request on the image file, a file of the host:
//!    - `aio=threads`: each request goes to a worker thread of QEMU's
//!      thread pool, created on demand up to [`THREAD_POOL_MAX`] and exiting
//!      after [`THREAD_POOL_IDLE_NS`] idle; the worker's `preadv` goes
//!      through the host page cache (QEMU's default `cache=writeback`);
//!    - `aio=native` / `aio=io_uring`: one iothread submits every request,
//!      with `O_DIRECT` (`cache=none`, which `aio=native` requires).
//! 4. The host's block layer and elevator see only those QEMU threads as
//!    issuers: the guest's urgent and background requests arrive mixed,
//!    from threads that know nothing of them. This is the missing link.
//! 5. On completion QEMU fills the used ring and injects an interrupt
//!    ([`IRQ_INJECT_NS`] later the guest handles it).
//!
//! Guest time: the guest's jiffies advance at its own HZ. A guest whose
//! vCPU halts while it waits for I/O stops its tick (`NO_HZ` idle), and in
//! this model its jiffies catch up only once the interrupt that wakes it
//! has been handled: the completion work (the elevator's completion hook
//! and the dispatch that follows) reads the jiffies of when the guest went
//! idle, and the next request of the woken process reads jiffies that have
//! jumped. [`VmConfig::lagging_ticks`] turns this off.

use crate::iosched::SchedConfig;
use crate::virtio::DEFAULT_VIRTQUEUE_DEPTH;
use devmodel::Nanos;

/// How QEMU issues the guest's requests on the host (`-drive aio=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aio {
    /// `aio=threads`: a pool of worker threads doing blocking, buffered
    /// `preadv`/`pwritev` through the host page cache.
    Threads,
    /// `aio=native` or `aio=io_uring`: one iothread with asynchronous
    /// `O_DIRECT` I/O, bypassing the host page cache.
    IoThread,
}

impl Aio {
    /// The names `-drive aio=` takes.
    pub const NAMES: &'static [&'static str] = &["threads", "native", "io_uring"];

    pub fn parse(s: &str) -> Result<Aio, String> {
        match s {
            "threads" => Ok(Aio::Threads),
            "native" | "io_uring" => Ok(Aio::IoThread),
            other => Err(format!(
                "unknown aio mode \"{other}\"; accepted: {}",
                Aio::NAMES.join(", ")
            )),
        }
    }
}

/// The default `aio`: one iothread with `O_DIRECT` (`aio=native`,
/// `cache=none`), the configuration the real runner uses by default too, so
/// that simulator and real runs compare. Two reasons make it the sensible
/// default here:
/// - with `cache=none` the host page cache cannot fake a fast disk (a guest
///   sequential reader wrapping around its file would otherwise be served
///   from host memory at memory speed);
/// - with a thread pool, consecutive guest requests go to different
///   threads, and the host BFQ weight-raises every new worker (a new queue)
///   and idles 8 ms after each of its requests for a next request that goes
///   to another thread: mainline BFQ merges such cooperating queues, which
///   this simulator does not model, so the pool costs the guest far more
///   than it would on a real host (idle start-up 5.2 s instead of 2.9 s on
///   `hdd-1.8in`).
///
/// `--aio threads` keeps the pool available.
pub const DEFAULT_AIO: Aio = Aio::IoThread;

/// QEMU's thread pool creates at most 64 workers (`max_threads = 64` in
/// `util/thread-pool.c`, `thread_pool_init_one()`).
pub const THREAD_POOL_MAX: usize = 64;

/// A pool worker waits 10 s for work, then exits (`worker_thread()`:
/// `qemu_sem_timedwait(&pool->sem, 10000)`).
pub const THREAD_POOL_IDLE_NS: Nanos = 10_000_000_000;

/// From the guest's notification (an MMIO write trapping to KVM, then an
/// ioeventfd wake-up of QEMU) to QEMU draining the virtqueue. Published
/// KVM measurements put an exit plus an eventfd wake-up in the tens of
/// microseconds; the start-up times in play are seconds, so this order of
/// magnitude is enough and is not calibrated.
pub const VIRTQUEUE_NOTIFY_NS: Nanos = 20_000;

/// From QEMU's main loop queueing a request in the pool to a worker
/// running it (`qemu_sem_post()` and a thread wake-up): a few
/// microseconds of host scheduling.
pub const WORKER_HANDOFF_NS: Nanos = 5_000;

/// From QEMU filling the used ring to the guest running its interrupt
/// handler (irqfd injection, vCPU kick). Same order as the notification.
pub const IRQ_INJECT_NS: Nanos = 20_000;

/// CPU cost per byte of a request served from the host page cache, or
/// copied into it by a write: about 1 GB/s of `memcpy` on the 1.7 GHz
/// Cortex-A15 of the published runs.
pub const COPY_NS_PER_BYTE: f64 = 1.0;

/// The guest's disk image: a raw file, so that the guest's sector `s` is
/// byte `512 s` of the file, and sparse, as `qemu-img create` makes it: it
/// takes room on the host only where the guest has put data
/// ([`crate::fs::Layout::add_sparse_file`]). 8 GiB holds the guest's system
/// and the workload files of the S suite (up to 5 files of 500 MiB); its
/// size sets how far apart the guest's file system spreads directories.
pub const DEFAULT_IMAGE_BYTES: u64 = 8 << 30;

/// Guest memory. It sets the guest's dirty-page thresholds. The published
/// guests ran on a 2 GB host; half of it is the assumption here.
pub const DEFAULT_GUEST_MEMORY_BYTES: u64 = 1 << 30;

/// CONFIG_HZ of the published guests: Linux 3.12 on ARM (the Chromebook's
/// `exynos` configuration) ran at HZ=100.
pub const DEFAULT_GUEST_HZ: u32 = 100;

/// What one VM is made of.
#[derive(Clone, Debug)]
pub struct VmConfig {
    /// The guest's elevator (see `iosched::SCHEDULERS`).
    pub sched: String,
    /// The guest kernel's scheduler tunables, its HZ among them.
    pub sched_cfg: SchedConfig,
    /// virtio-blk queue size.
    pub virtqueue_depth: usize,
    pub aio: Aio,
    pub image_bytes: u64,
    pub memory_bytes: u64,
    /// Jiffies that lag while the guest idles (see the module docs).
    pub lagging_ticks: bool,
    /// `sync` writes back as Linux before 4.15 did: `sys_sync()` first
    /// queues an async write-back of every dirty page
    /// (`wakeup_flusher_threads()`), which the flusher runs before the
    /// `WB_SYNC_ALL` pass that `sync_inodes_sb()` queues behind it, so
    /// nearly all its writes are async. Since 4.15 (`WB_start_all`) the
    /// flusher takes the queued `WB_SYNC_ALL` work first, and the writes
    /// are REQ_SYNC, as the host's are here.
    pub sync_writes_async: bool,
}

impl Default for VmConfig {
    fn default() -> Self {
        VmConfig {
            sched: "bfq".into(),
            sched_cfg: SchedConfig {
                hz: DEFAULT_GUEST_HZ,
                ..SchedConfig::default()
            },
            virtqueue_depth: DEFAULT_VIRTQUEUE_DEPTH,
            aio: DEFAULT_AIO,
            image_bytes: DEFAULT_IMAGE_BYTES,
            memory_bytes: DEFAULT_GUEST_MEMORY_BYTES,
            lagging_ticks: true,
            sync_writes_async: false,
        }
    }
}
