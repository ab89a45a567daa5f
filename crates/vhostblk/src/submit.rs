//! Issuing I/O: the queue thread's own io_uring for the VM's default
//! priority, and one submitter thread, with its own io_uring, per other
//! host I/O priority in use.
//!
//! Why a thread per priority and not only the SQE's `ioprio`: mq-deadline
//! reads each request's priority (`dd_insert_request()` in
//! block/mq-deadline.c takes `req_get_ioprio(rq)`), which the SQE's
//! `ioprio` reaches for direct I/O; BFQ does not. BFQ puts a request in the
//! queue of the submitting task's I/O context (`bfq_init_rq()` →
//! `bfq_get_bfqq_handle_split()` picks `bic_to_bfqq(bic, ...)`, the bic
//! being the task's `io_cq`), and that queue's class and level come from the
//! context's priority: `bfq_check_ioprio_change()` reads
//! `bic->icq.ioc->ioprio` and `bfq_set_next_ioprio_data()` sets the queue's
//! class from it (block/bfq-iosched.c; still so in Linux 6.x, where
//! `bfq_get_queue()` takes the class from `bic->ioprio` and never from the
//! bio's `bi_ioprio`). So each submitter thread sets its
//! own I/O priority with `ioprio_set` once, at start, and keeps it: BFQ then
//! gives each class a queue of that class from the first request on (a
//! class change on a live queue takes effect only when the queue is next
//! activated, see agent's actuator notes), and the SQE carries the same
//! value for mq-deadline. io-wq workers, which take requests that cannot be
//! issued without blocking, are created with `CLONE_IO` (`create_io_thread`
//! in kernel/fork.c) and so share the submitter's I/O context.
//!
//! The fast path ([`LocalRing`]): most requests carry the VM's default
//! priority (a guest task that never set one). For those the queue thread
//! is itself a thread of the right class (it sets the default with
//! `ioprio_set` once, or keeps the process's when the default is none), so
//! it issues them into a ring of its own and reaps their completions
//! itself, woken by the ring's descriptor in its epoll set: no hand-off to
//! another thread and back, as QEMU's own virtio-blk issues and completes
//! in one thread. Only the other classes cross to their submitter.
//!
//! A Linux 6.x guest's default requests carry BE/4, not none: since 5.19
//! `__get_task_ioprio()` (include/linux/ioprio.h; block/ioprio.c before
//! 6.8) turns a task's none into `task_nice_ioclass()`/`task_nice_ioprio()`,
//! BE/4 at nice 0, and that is what the bio, so the request and the
//! virtio-blk header, carry. The queue thread with priority none is that
//! same priority to the host: BFQ's `bfq_set_next_ioprio_data()` derives a
//! queue of class none from the issuing task's nice value the same way, and
//! an SQE without `ioprio` takes `get_current_ioprio()`. So the ring also
//! takes the requests of that effective priority ([`LocalRing::takes`]).

use std::cell::Cell;
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types, IoUring};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::image::Image;
use crate::ioprio::{Class, Ioprio};
use crate::stats::Stats;

/// Ring size of each submitter: the most requests it has in flight. 128 is
/// the default virtqueue size of QEMU's vhost-user-blk, so one full queue
/// fits.
const RING_ENTRIES: u32 = 128;
/// Completion ring of a [`LocalRing`]: room for every request of the
/// largest queue the device accepts (`backend::MAX_QUEUE_SIZE`, one CQE
/// each, a discard or write-zeroes having one range, `MAX_ZERO_SEGMENTS`),
/// twice over, so completions never overflow into the kernel's backlog.
const LOCAL_CQ_ENTRIES: u32 = 2 * 1024;
/// user_data of the wake-up poll on the submitter's eventfd.
const WAKE: u64 = u64::MAX;

/// `FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE` (discard and unmapping write
/// zeroes) and `FALLOC_FL_KEEP_SIZE | FALLOC_FL_ZERO_RANGE`.
pub const PUNCH_HOLE: i32 = libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE;
pub const ZERO_RANGE: i32 = libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_ZERO_RANGE;

/// One piece of I/O.
#[derive(Debug)]
pub enum IoOp {
    /// `iov` points into guest memory the job's completion keeps mapped.
    Read {
        offset: u64,
        iov: Vec<libc::iovec>,
    },
    Write {
        offset: u64,
        iov: Vec<libc::iovec>,
    },
    Flush,
    /// `fallocate` ranges `(offset, len, mode)`.
    Allocate(Vec<(u64, u64, i32)>),
}

// SAFETY: the iovecs point into guest memory that stays mapped while the
// job lives (its completion holds the memory), and only the submitter
// thread touches them.
unsafe impl Send for IoOp {}

/// The outcome: bytes transferred, or the errno.
pub type Outcome = Result<u64, i32>;

/// A request to issue, and what to do when it is done.
pub struct Job {
    pub op: IoOp,
    pub done: Box<dyn FnOnce(Outcome) + Send>,
}

struct InFlight {
    job: Job,
    /// SQEs not completed yet (fallocate issues one per range).
    parts: usize,
    result: Outcome,
    direct: bool,
}

/// The submitters, created on first use of each priority.
pub struct Submitters {
    image: Arc<Image>,
    stats: Arc<Stats>,
    threads: Mutex<HashMap<Ioprio, Submitter>>,
    /// Run first in each submitter thread (the per-VM policy's placement
    /// of the RT thread, `crate::vmpolicy`).
    on_start: Option<ThreadStart>,
}

/// What each submitter thread runs first, given its priority.
pub type ThreadStart = Arc<dyn Fn(Ioprio) -> Result<(), String> + Send + Sync>;

struct Submitter {
    tx: Sender<Job>,
    wake: EventFd,
    handle: JoinHandle<()>,
}

impl Submitters {
    pub fn new(image: Arc<Image>, stats: Arc<Stats>) -> Submitters {
        Submitters {
            image,
            stats,
            threads: Mutex::new(HashMap::new()),
            on_start: None,
        }
    }

    /// Runs `f` first in each submitter thread; a thread whose `f` fails
    /// does not start (its jobs fail with EIO, the error says why).
    pub fn with_thread_start(mut self, f: ThreadStart) -> Submitters {
        self.on_start = Some(f);
        self
    }

    /// Issues `job` with priority `prio`. When no submitter can take it
    /// (its thread could not start, or has died), the job completes at once
    /// with EIO, so the guest sees an I/O error rather than a request that
    /// never ends; the error says why.
    pub fn submit(&self, prio: Ioprio, job: Job) -> Result<(), String> {
        let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        let s = match threads.entry(prio) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => match self.spawn(prio) {
                Ok(s) => e.insert(s),
                Err(why) => {
                    (job.done)(Err(libc::EIO));
                    return Err(why);
                }
            },
        };
        if let Err(mpsc::SendError(job)) = s.tx.send(job) {
            (job.done)(Err(libc::EIO));
            return Err(format!("the {prio} submitter has stopped"));
        }
        s.wake
            .write(1)
            .map_err(|e| format!("waking the {prio} submitter: {e}"))
    }

    fn spawn(&self, prio: Ioprio) -> Result<Submitter, String> {
        let (tx, rx) = mpsc::channel();
        let wake = EventFd::new(EFD_NONBLOCK).map_err(|e| format!("eventfd: {e}"))?;
        let their_wake = wake.try_clone().map_err(|e| format!("eventfd: {e}"))?;
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let image = self.image.clone();
        let stats = self.stats.clone();
        let on_start = self.on_start.clone();
        let handle = std::thread::Builder::new()
            .name(format!("vhost-blk {prio}"))
            .spawn(move || {
                let ring = on_start
                    .map_or(Ok(()), |f| f(prio))
                    .and_then(|()| start_thread(prio));
                let ok = ring.as_ref().map(|_| ()).map_err(Clone::clone);
                let _ = ready_tx.send(ok);
                if let Ok(ring) = ring {
                    Worker::new(ring, prio, image, stats).run(rx, their_wake);
                }
            })
            .map_err(|e| format!("starting the {prio} submitter: {e}"))?;
        ready_rx
            .recv()
            .map_err(|_| format!("the {prio} submitter died at start"))??;
        Ok(Submitter { tx, wake, handle })
    }

    /// Stops every submitter after its jobs are done.
    pub fn shutdown(&self) {
        let threads: Vec<Submitter> = self
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .map(|(_, s)| s)
            .collect();
        for s in threads {
            drop(s.tx);
            let _ = s.wake.write(1);
            let _ = s.handle.join();
        }
    }
}

thread_local! {
    /// The I/O priority this thread gave itself for a [`LocalRing`] (none
    /// yet: the thread has the process's).
    static OWN_PRIO: Cell<Option<Ioprio>> = const { Cell::new(None) };
}

/// Gives the calling thread the I/O priority `prio`, once per thread: BFQ
/// takes a request's class from the issuing thread's I/O context (see the
/// module's notes). `Class::None` keeps the thread's default, unless the
/// thread set another before (then it goes back to none).
fn own_prio(prio: Ioprio) -> Result<(), String> {
    OWN_PRIO.with(|own| {
        let now = own.get().unwrap_or(Ioprio::NONE);
        if now != prio {
            // tid 0: the calling thread.
            agent::sys::ioprio_set(0, u32::from(prio.encode()))
                .map_err(|e| format!("ioprio_set({prio}) on a queue thread: {e}"))?;
        }
        own.set(Some(prio));
        Ok(())
    })
}

/// A queue thread's own ring for the requests of one priority, the VM's
/// default: issued and completed on the queue thread, no other thread
/// involved (the fast path, see the module's notes). Used by one thread at
/// a time: a queue's thread, found again after a reconnection.
pub struct LocalRing {
    worker: Worker,
    prio: Ioprio,
    /// What `prio` is to the host when issued from a queue thread: itself,
    /// or for none the class and level the kernel derives from the thread's
    /// nice value and policy ([`effective_none`]).
    effective: Ioprio,
}

impl LocalRing {
    pub fn new(prio: Ioprio, image: Arc<Image>, stats: Arc<Stats>) -> Result<LocalRing, String> {
        let ring = IoUring::builder()
            .setup_cqsize(LOCAL_CQ_ENTRIES)
            .build(RING_ENTRIES)
            .map_err(|e| format!("io_uring_setup: {e}"))?;
        let effective = if prio.class == Class::None {
            effective_none()
        } else {
            prio
        };
        // The queue thread must never sleep while issuing: it is the one
        // thread that takes the guest's requests, RT ones included, off the
        // virtqueue. An inline issue can sleep even though io_uring asks for
        // IOCB_NOWAIT: ext4's direct I/O maps the file first, and a read
        // mapping whose extent block is not cached reads that block
        // synchronously (`ext4_iomap_begin()` -> `ext4_map_blocks()` ->
        // `ext4_find_extent()`, fs/ext4/inode.c and extents.c, no NOWAIT
        // check for reads). The runner's `drop_caches` before every start
        // evicts those blocks, and a best-effort read of one behind the
        // host's readers took seconds: an RT request stood untaken in the
        // virtqueue for 8.7 s (docs/measurements.md, vhost-ioprio). So the
        // fast path hands each request to io-wq (`IOSQE_ASYNC`), whose
        // workers share this thread's I/O context (`CLONE_IO`), as QEMU's
        // default `aio=threads` issues from its pool. The submitter threads
        // of the other classes issue inline: each serves one class, and a
        // wait there holds back only requests of that class.
        let mut worker = Worker::new(ring, prio, image, stats);
        worker.async_issue = true;
        Ok(LocalRing {
            worker,
            prio,
            effective,
        })
    }

    /// Whether a request of host priority `p` may be issued here: the
    /// ring's own priority, or what it is to the host.
    pub fn takes(&self, p: Ioprio) -> bool {
        p == self.prio || p == self.effective
    }

    /// The ring's descriptor, readable (epoll) while completions wait to
    /// be reaped.
    pub fn fd(&self) -> RawFd {
        self.worker.ring.as_raw_fd()
    }

    /// Queues `job` for [`Self::flush`], on the calling thread, which takes
    /// the ring's priority first. The job comes back when the thread
    /// cannot take it (then a submitter thread must).
    pub fn start(&mut self, job: Job) -> Result<(), (Job, String)> {
        if let Err(e) = own_prio(self.prio) {
            return Err((job, e));
        }
        self.worker.start(job);
        Ok(())
    }

    /// Issues what [`Self::start`] queued: one `io_uring_enter` for all
    /// the requests one kick brought.
    pub fn flush(&mut self) {
        self.worker.flush();
    }

    /// Completes the requests whose I/O is done, without waiting, and
    /// issues what that queued (a retry through the page cache).
    pub fn reap(&mut self) {
        self.worker.reap();
        self.worker.flush();
    }

    pub fn in_flight(&self) -> usize {
        self.worker.in_flight
    }

    /// Whether completions wait to be reaped (a look at the completion
    /// queue in shared memory: no system call).
    pub fn completed(&mut self) -> bool {
        !self.worker.ring.completion().is_empty()
    }

    /// Waits for the requests in flight, at most `timeout` (the backend
    /// stopping).
    pub fn drain(&mut self, timeout: Duration) {
        let t0 = Instant::now();
        self.reap();
        while self.worker.in_flight > 0 && t0.elapsed() < timeout {
            if let Err(e) = self.worker.ring.submit_and_wait(1) {
                if e.raw_os_error() != Some(libc::EINTR) {
                    eprintln!("vhost-blk: io_uring_enter: {e}");
                    return;
                }
            }
            self.reap();
        }
    }
}

/// The priority the kernel gives the calling thread when it has none:
/// `IOPRIO_PRIO_VALUE(task_nice_ioclass(p), task_nice_ioprio(p))` in
/// `__get_task_ioprio()` (include/linux/ioprio.h): class IDLE under
/// `SCHED_IDLE`, RT under a real-time or deadline policy, else BE; level
/// `(nice + 20) / 5`. The queue threads are started by the thread that
/// makes the rings and inherit its nice value and policy.
pub fn effective_none() -> Ioprio {
    // SAFETY: neither call has preconditions; 0 is the calling thread (nice
    // is per thread on Linux, getpriority(2) NOTES).
    let (policy, nice) = unsafe {
        (
            libc::sched_getscheduler(0),
            libc::getpriority(libc::PRIO_PROCESS, 0),
        )
    };
    // The policy may carry SCHED_RESET_ON_FORK (sched_getscheduler(2)).
    let class = match policy & !libc::SCHED_RESET_ON_FORK {
        libc::SCHED_IDLE => Class::Idle,
        // SCHED_DEADLINE is 6 (include/uapi/linux/sched.h).
        libc::SCHED_FIFO | libc::SCHED_RR | 6 => Class::Rt,
        _ => Class::Be,
    };
    Ioprio::new(class, ((nice.clamp(-20, 19) + 20) / 5) as u8)
}

/// Sets the calling thread's I/O priority (none for `Class::None`: the
/// thread then keeps the default, derived from its nice value) and makes
/// its ring.
fn start_thread(prio: Ioprio) -> Result<IoUring, String> {
    if prio.class != Class::None {
        // tid 0: the calling thread (ioprio_set(2) with IOPRIO_WHO_PROCESS).
        agent::sys::ioprio_set(0, u32::from(prio.encode())).map_err(|e| {
            let hint = if prio.class == Class::Rt {
                " (the RT class needs root: CAP_SYS_ADMIN or CAP_SYS_NICE)"
            } else {
                ""
            };
            format!("ioprio_set({prio}): {e}{hint}")
        })?;
    }
    IoUring::new(RING_ENTRIES).map_err(|e| format!("io_uring_setup: {e}"))
}

/// One submitter's state.
struct Worker {
    ring: IoUring,
    /// The SQE's `ioprio`: the thread's own, for mq-deadline.
    prio: u16,
    image: Arc<Image>,
    stats: Arc<Stats>,
    slots: Vec<Option<InFlight>>,
    free: Vec<usize>,
    in_flight: usize,
    /// Issue every SQE through io-wq (`IOSQE_ASYNC`) instead of inline in
    /// `io_uring_enter`: set for a queue thread's [`LocalRing`], see
    /// [`LocalRing::new`].
    async_issue: bool,
}

impl Worker {
    fn new(ring: IoUring, prio: Ioprio, image: Arc<Image>, stats: Arc<Stats>) -> Worker {
        Worker {
            ring,
            prio: prio.encode(),
            image,
            stats,
            slots: Vec::new(),
            free: Vec::new(),
            in_flight: 0,
            async_issue: false,
        }
    }

    fn run(mut self, rx: Receiver<Job>, wake: EventFd) {
        let mut poll_armed = false;
        let mut closing = false;
        loop {
            if !poll_armed && !closing {
                let sqe = opcode::PollAdd::new(types::Fd(wake.as_raw_fd()), libc::POLLIN as u32)
                    .build()
                    .user_data(WAKE);
                self.push(sqe);
                poll_armed = true;
            }
            while !closing && self.in_flight < RING_ENTRIES as usize - 1 {
                match rx.try_recv() {
                    Ok(job) => self.start(job),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => closing = true,
                }
            }
            if closing && self.in_flight == 0 {
                return;
            }
            if let Err(e) = self.ring.submit_and_wait(1) {
                if e.raw_os_error() != Some(libc::EINTR) {
                    eprintln!("vhost-blk: io_uring_enter: {e}");
                }
                continue;
            }
            if self.reap() {
                poll_armed = false;
                let _ = wake.read();
            }
        }
    }

    /// Completes every request whose CQE is in; true if the wake-up poll
    /// fired among them.
    fn reap(&mut self) -> bool {
        let done: Vec<(u64, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        let mut woken = false;
        for (user, res) in done {
            if user == WAKE {
                woken = true;
            } else {
                self.complete(user as usize, res);
            }
        }
        woken
    }

    /// Hands the kernel what is queued, if anything is (a completion
    /// backlog is flushed too, though the ring is sized to have none).
    fn flush(&mut self) {
        let pending = {
            let sq = self.ring.submission();
            !sq.is_empty() || sq.cq_overflow()
        };
        if pending {
            if let Err(e) = self.ring.submit() {
                eprintln!("vhost-blk: io_uring_enter: {e}");
            }
        }
    }

    /// Queues an SQE, submitting what is queued when the ring is full.
    fn push(&mut self, sqe: squeue::Entry) {
        let sqe = if self.async_issue {
            sqe.flags(squeue::Flags::ASYNC)
        } else {
            sqe
        };
        // SAFETY: every SQE's buffers (iovecs into guest memory) live in
        // `slots` until its completion is reaped.
        while unsafe { self.ring.submission().push(&sqe) }.is_err() {
            if let Err(e) = self.ring.submit() {
                eprintln!("vhost-blk: io_uring_enter: {e}");
            }
        }
    }

    fn start(&mut self, job: Job) {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        let direct = self.image.direct.is_some() && aligned(&job.op, self.image.align);
        if !direct && matches!(job.op, IoOp::Read { .. } | IoOp::Write { .. }) {
            self.stats.buffered();
        }
        self.slots[slot] = Some(InFlight {
            job,
            parts: 0,
            result: Ok(0),
            direct,
        });
        self.in_flight += 1;
        self.issue(slot);
    }

    /// Issues (or reissues, through the buffered file) the job in `slot`.
    fn issue(&mut self, slot: usize) {
        let Some(f) = self.slots[slot].as_mut() else {
            return;
        };
        let file: &File = match (&self.image.direct, f.direct) {
            (Some(d), true) => d,
            _ => &self.image.buffered,
        };
        let fd = types::Fd(file.as_raw_fd());
        let prio = self.prio;
        let user = slot as u64;
        let sqes: Vec<squeue::Entry> = match &f.job.op {
            IoOp::Read { offset, iov } => {
                vec![opcode::Readv::new(fd, iov.as_ptr(), iov.len() as u32)
                    .offset(*offset)
                    .ioprio(prio)
                    .build()]
            }
            IoOp::Write { offset, iov } => {
                vec![opcode::Writev::new(fd, iov.as_ptr(), iov.len() as u32)
                    .offset(*offset)
                    .ioprio(prio)
                    .build()]
            }
            IoOp::Flush => vec![opcode::Fsync::new(fd).build()],
            IoOp::Allocate(ranges) => ranges
                .iter()
                .map(|&(off, len, mode)| {
                    opcode::Fallocate::new(fd, len)
                        .offset(off)
                        .mode(mode)
                        .build()
                })
                .collect(),
        };
        f.parts = sqes.len();
        f.result = Ok(0);
        for sqe in sqes {
            self.push(sqe.user_data(user));
        }
    }

    fn complete(&mut self, slot: usize, res: i32) {
        let Some(f) = self.slots.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        f.parts -= 1;
        f.result = match (f.result, res) {
            (Err(e), _) => Err(e),
            (_, r) if r < 0 => Err(-r),
            (Ok(n), r) => Ok(n + r as u64),
        };
        if f.parts > 0 {
            return;
        }
        // O_DIRECT refuses what it cannot align (EINVAL): once more through
        // the page cache.
        if f.direct && f.result == Err(libc::EINVAL) {
            f.direct = false;
            self.stats.buffered();
            self.issue(slot);
            return;
        }
        if let Some(f) = self.slots[slot].take() {
            self.free.push(slot);
            self.in_flight -= 1;
            (f.job.done)(f.result);
        }
    }
}

/// Whether the direct file can take the op: offsets, lengths and buffer
/// addresses all multiples of `align`.
fn aligned(op: &IoOp, align: u64) -> bool {
    match op {
        IoOp::Read { offset, iov } | IoOp::Write { offset, iov } => {
            offset % align == 0
                && iov.iter().all(|v| {
                    (v.iov_base as u64).is_multiple_of(align)
                        && (v.iov_len as u64).is_multiple_of(align)
                })
        }
        IoOp::Flush | IoOp::Allocate(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::sync_channel;
    use std::time::Duration;

    /// A page-aligned buffer (O_DIRECT wants aligned memory).
    struct Aligned(Vec<u8>, usize);
    impl Aligned {
        fn new(len: usize, fill: u8) -> Aligned {
            let v = vec![fill; len + 4096];
            let off = (4096 - v.as_ptr() as usize % 4096) % 4096;
            Aligned(v, off)
        }
        fn slice(&mut self, len: usize) -> &mut [u8] {
            &mut self.0[self.1..self.1 + len]
        }
    }

    fn iov(b: &mut [u8]) -> Vec<libc::iovec> {
        vec![libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.len(),
        }]
    }

    fn run(s: &Submitters, prio: Ioprio, op: IoOp) -> Outcome {
        let (tx, rx) = sync_channel(1);
        s.submit(
            prio,
            Job {
                op,
                done: Box::new(move |o| {
                    let _ = tx.send(o);
                }),
            },
        )
        .unwrap();
        rx.recv_timeout(Duration::from_secs(30)).unwrap()
    }

    #[test]
    fn writes_reads_and_holes_go_through_the_ring_of_their_priority() {
        let dir = std::env::temp_dir().join(format!("vhostblk-submit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("img");
        std::fs::File::create(&path)
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        let image = Arc::new(Image::open(&path, false, 512).unwrap());
        let stats = Arc::new(Stats::default());
        let s = Submitters::new(image, stats.clone());
        let be = Ioprio::new(Class::Be, 7);
        let mut w = Aligned::new(8192, 0xa5);
        assert_eq!(
            run(
                &s,
                be,
                IoOp::Write {
                    offset: 4096,
                    iov: iov(w.slice(8192))
                }
            ),
            Ok(8192)
        );
        assert_eq!(run(&s, be, IoOp::Flush), Ok(0));
        let mut r = Aligned::new(8192, 0);
        assert_eq!(
            run(
                &s,
                be,
                IoOp::Read {
                    offset: 4096,
                    iov: iov(r.slice(8192))
                }
            ),
            Ok(8192)
        );
        assert!(r.slice(8192).iter().all(|&b| b == 0xa5));
        // An unaligned buffer is served through the page cache.
        let mut odd = vec![0u8; 513];
        let buf = &mut odd[1..];
        assert_eq!(
            run(
                &s,
                be,
                IoOp::Read {
                    offset: 4096,
                    iov: iov(buf)
                }
            ),
            Ok(512)
        );
        assert!(buf.iter().all(|&b| b == 0xa5));
        assert!(stats.snapshot()["buffered"].as_u64().unwrap() >= 1);
        // A punched hole reads as zeroes.
        assert_eq!(
            run(&s, be, IoOp::Allocate(vec![(4096, 4096, PUNCH_HOLE)])),
            Ok(0)
        );
        let mut z = Aligned::new(4096, 1);
        assert_eq!(
            run(
                &s,
                be,
                IoOp::Read {
                    offset: 4096,
                    iov: iov(z.slice(4096))
                }
            ),
            Ok(4096)
        );
        assert!(z.slice(4096).iter().all(|&b| b == 0));
        // The BE/7 submitter runs with that I/O priority.
        let tid = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .flatten()
            .find(|t| {
                std::fs::read_to_string(t.path().join("comm"))
                    .unwrap_or_default()
                    .trim()
                    == "vhost-blk be/7"
            })
            .and_then(|t| t.file_name().to_string_lossy().parse::<u32>().ok())
            .expect("a thread named vhost-blk be/7");
        assert_eq!(agent::sys::ioprio_get(tid).unwrap(), u32::from(be.encode()));
        s.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
