//! The vhost-user-blk device: virtqueues in, requests parsed, priorities
//! mapped, I/O issued (by the queue thread itself for the VM's default
//! priority, by the submitter of their class for the others), status and
//! used ring out.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use vhost::vhost_user::message::{VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use vhost_user_backend::{VhostUserBackend, VringRwLock, VringT};
use virtio_bindings::virtio_blk::{VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_OK};
use virtio_queue::QueueT;
use vm_memory::{
    Bytes, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryBackend, GuestMemoryMmap,
};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{
    new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier,
};

use crate::classmap::ClassPolicy;
use crate::config::{DeviceConfig, MAX_ZERO_SEGMENTS};
use crate::image::Image;
use crate::ioprio::{Class, Ioprio};
use crate::poll::AdaptivePoll;
use crate::request::{self, Desc, GuestBytes, Limits, Op, Range, Refusal, Request, Seg, SECTOR};
use crate::stats::Stats;
use crate::submit::{IoOp, Job, LocalRing, Outcome, Submitters, PUNCH_HOLE, ZERO_RANGE};

type Mem = GuestMemoryMmap<()>;
type Atomic = GuestMemoryAtomic<Mem>;
pub type Vring = VringRwLock<Atomic>;

/// The largest queue the device accepts (QEMU's `queue-size` must not be
/// larger; QEMU's vhost-user-blk default is 128).
pub const MAX_QUEUE_SIZE: usize = 1024;
/// How long a queue's stop waits for its requests in flight.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// The id GET_ID answers.
const DEVICE_ID: &str = "tandem-vhost-blk";

/// The device.
pub struct BlkBackend {
    cfg: DeviceConfig,
    limits: Limits,
    mem: RwLock<Option<Atomic>>,
    policy: Arc<Mutex<ClassPolicy>>,
    stats: Arc<Stats>,
    submitters: Submitters,
    /// Each queue's own ring for the VM's default priority (`None` when it
    /// could not be made: every request then goes to a submitter).
    locals: Vec<Mutex<Option<LocalRing>>>,
    /// Requests in flight per queue.
    in_flight: Vec<Arc<AtomicUsize>>,
    /// Each queue thread's polling windows (`crate::poll`).
    polls: Vec<Mutex<QueuePoll>>,
    clock: Instant,
}

impl BlkBackend {
    pub fn new(
        image: Arc<Image>,
        cfg: DeviceConfig,
        policy: ClassPolicy,
        stats: Arc<Stats>,
    ) -> BlkBackend {
        let home = host_prio(policy.classless());
        let locals = (0..cfg.num_queues)
            .map(|_| {
                let ring = LocalRing::new(home, image.clone(), stats.clone());
                if let Err(e) = &ring {
                    eprintln!("tandem vhost-blk: a queue's own ring: {e}; its requests go through a submitter thread");
                }
                Mutex::new(ring.ok())
            })
            .collect();
        BlkBackend {
            limits: Limits {
                capacity: cfg.capacity,
                read_only: cfg.read_only,
                max_zero_segments: MAX_ZERO_SEGMENTS,
            },
            cfg,
            mem: RwLock::new(None),
            policy: Arc::new(Mutex::new(policy)),
            submitters: Submitters::new(image, stats.clone()),
            locals,
            stats,
            in_flight: (0..cfg.num_queues)
                .map(|_| Arc::new(AtomicUsize::new(0)))
                .collect(),
            polls: (0..cfg.num_queues)
                .map(|_| Mutex::new(QueuePoll::default()))
                .collect(),
            clock: Instant::now(),
        }
    }

    /// Polls at most `max` before a queue thread sleeps (`crate::poll`;
    /// zero: never).
    pub fn with_poll_max(mut self, max: Duration) -> BlkBackend {
        let ns = max.as_nanos() as u64;
        for p in &mut self.polls {
            *lock(p) = QueuePoll::new(ns);
        }
        self
    }

    /// Runs `f` first in each submitter thread (see [`Submitters`]).
    pub fn with_thread_start(mut self, f: crate::submit::ThreadStart) -> BlkBackend {
        self.submitters = self.submitters.with_thread_start(f);
        self
    }

    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Waits for the submitters' jobs and stops them, and for the
    /// requests in flight on the queues' own rings.
    pub fn shutdown(&self) {
        self.submitters.shutdown();
        for l in &self.locals {
            if let Some(ring) = lock(l).as_mut() {
                ring.drain(STOP_TIMEOUT);
            }
        }
    }

    /// The descriptor to watch for queue `q`'s completions, and the
    /// `handle_event` number it must be registered with in the epoll set of
    /// the thread that serves queue `q` (`VringEpollHandler::register_listener`;
    /// above `num_queues`, which the daemon keeps for the queues and its exit
    /// event).
    pub fn completion_source(&self, q: usize) -> Option<(RawFd, u16)> {
        let fd = lock(self.locals.get(q)?).as_ref()?.fd();
        Some((fd, self.cfg.num_queues + 1 + q as u16))
    }

    /// Runs `f` on queue `q`'s own ring, if that queue has one.
    fn on_local(&self, q: usize, f: impl FnOnce(&mut LocalRing)) {
        if let Some(ring) = self
            .locals
            .get(q)
            .map(lock)
            .as_mut()
            .and_then(|g| g.as_mut())
        {
            f(ring);
        }
    }

    /// Reaps queue `q`'s own ring (its completion source fired).
    fn reap(&self, q: usize) {
        self.on_local(q, LocalRing::reap);
    }

    /// Issues what queue `q`'s kick queued on its own ring.
    fn flush(&self, q: usize) {
        self.on_local(q, LocalRing::flush);
    }

    /// Serves a kick of queue `q`: every available chain, with the
    /// guest's notifications off (without EVENT_IDX the used ring's
    /// NO_NOTIFY flag; with it the avail event is simply not moved, so the
    /// guest kicks no more after the one that woke us), one
    /// `io_uring_enter` for them all. [`Self::poll`] turns notifications
    /// back on before the thread sleeps.
    fn serve_kick(&self, q: usize, vring: &Vring) -> std::io::Result<()> {
        let _ = vring.disable_notification();
        let r = self.process_queue(q, vring);
        self.flush(q);
        r
    }

    /// Before queue `q`'s thread sleeps: polls for its next event, its own
    /// ring's completion while requests are in flight there, else the
    /// guest's next request, for as long as that source's window says
    /// (`crate::poll`), serving what comes, the guest's notifications
    /// still off (a request caught here costs the guest no kick, as QEMU
    /// turns a virtqueue's notifications off while it polls). When a window
    /// passes with nothing, it turns them on, serves what came meanwhile
    /// (the check that no request is missed, `enable_notification`), and
    /// returns: the thread sleeps in epoll, the wait timed from the
    /// window's start. The avail index is read from guest memory and the
    /// completion queue from the ring's shared memory: no system call
    /// while polling.
    fn poll(&self, q: usize, vring: &Vring) -> std::io::Result<()> {
        let atomic = self.mem.read().unwrap_or_else(|e| e.into_inner()).clone();
        let (Some(state), Some(atomic)) = (self.polls.get(q), atomic) else {
            let _ = vring.enable_notification();
            return Ok(());
        };
        loop {
            let mut io_waiting = false;
            self.on_local(q, |r| io_waiting = r.in_flight() > 0);
            let waiting_for = if io_waiting {
                Source::Completion
            } else {
                Source::Request
            };
            let t0 = Instant::now();
            let window = {
                let mut p = lock(state);
                p.waiting = Some(t0);
                p.of(waiting_for).window()
            };
            let found = if window.is_zero() {
                None
            } else {
                self.poll_for(q, vring, &atomic.memory(), io_waiting, t0, window)
            };
            match found {
                Some(source) => {
                    {
                        let mut p = lock(state);
                        p.waiting = None;
                        p.of(source).adjust(t0.elapsed().as_nanos() as u64);
                    }
                    self.stats.polled(
                        Some(source == Source::Request),
                        t0.elapsed().as_nanos() as u64,
                    );
                    match source {
                        Source::Completion => self.reap(q),
                        Source::Request => self.serve_kick(q, vring)?,
                    }
                }
                None => {
                    if !window.is_zero() {
                        self.stats.polled(None, t0.elapsed().as_nanos() as u64);
                    }
                    if !vring.enable_notification().unwrap_or(false) {
                        return Ok(());
                    }
                    // A request came as notifications went back on.
                    self.serve_kick(q, vring)?;
                }
            }
        }
    }

    /// Spins until queue `q` has an event or `window` has passed since
    /// `t0`: a completion on its own ring (when `io_waiting`), or an
    /// available chain.
    fn poll_for(
        &self,
        q: usize,
        vring: &Vring,
        mem: &Mem,
        io_waiting: bool,
        t0: Instant,
        window: Duration,
    ) -> Option<Source> {
        loop {
            let mut done = false;
            if io_waiting {
                self.on_local(q, |r| done = r.completed());
            }
            if done {
                return Some(Source::Completion);
            }
            // Only a queue the daemon would serve a kick of: started and
            // enabled (`read_kick` in the daemon's event loop).
            let more = {
                let v = vring.get_ref();
                let queue = v.get_queue();
                v.is_enabled()
                    && queue.ready()
                    && queue
                        .avail_idx(mem, Ordering::Acquire)
                        .is_ok_and(|a| a.0 != queue.next_avail())
            };
            if more {
                return Some(Source::Request);
            }
            if t0.elapsed() >= window {
                return None;
            }
            std::hint::spin_loop();
        }
    }

    fn now(&self) -> u64 {
        self.clock.elapsed().as_nanos() as u64
    }

    /// Takes every available chain of `vring`.
    fn process_queue(&self, queue: usize, vring: &Vring) -> std::io::Result<()> {
        let Some(atomic) = self.mem.read().unwrap_or_else(|e| e.into_inner()).clone() else {
            return Ok(());
        };
        let mem = atomic.memory().into_inner();
        loop {
            let chain = vring
                .get_mut()
                .get_queue_mut()
                .pop_descriptor_chain(mem.clone());
            let Some(chain) = chain else {
                return Ok(());
            };
            let head = chain.head_index();
            let descs: Vec<Desc> = chain
                .map(|d| Desc {
                    addr: d.addr().0,
                    len: d.len(),
                    writable: d.is_write_only(),
                })
                .collect();
            let parsed = request::parse(&descs, &MemReader(&mem), &self.limits);
            let Some(status) = parsed.status else {
                self.stats.unanswerable();
                self.finish(&mem, vring, head, None, 0);
                continue;
            };
            let done = Completion {
                mem: mem.clone(),
                vring: vring.clone(),
                head,
                status,
                stats: self.stats.clone(),
                in_flight: self.in_flight[queue].clone(),
                rt: None,
                read_len: 0,
                expect: None,
            };
            match parsed.request {
                Err(r) => {
                    self.stats.refused(r);
                    self.finish(&mem, vring, head, Some((status, r.status())), 0);
                }
                Ok(req) => self.start(queue, req, done),
            }
        }
    }

    /// Answers a request at once (refused, GET_ID, or unanswerable).
    fn finish(&self, mem: &Mem, vring: &Vring, head: u16, status: Option<(u64, u8)>, data: u32) {
        let used = match status {
            Some((addr, s)) if mem.write_obj(s, GuestAddress(addr)).is_ok() => data + 1,
            _ => 0,
        };
        publish(vring, head, used);
    }

    fn start(&self, queue: usize, req: Request, mut done: Completion) {
        let mapped = self
            .policy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map(req.ioprio, self.now());
        self.stats
            .accepted(req.ioprio.class, mapped.host.class, mapped.demoted);
        if mapped.host.class == Class::Rt {
            done.rt = Some((self.policy.clone(), self.clock));
        }
        let op = match req.op {
            Op::GetId { data } => {
                let id = request::device_id(DEVICE_ID);
                let n = write_segments(&done.mem, &data, &id);
                return done.complete_now(VIRTIO_BLK_S_OK as u8, n);
            }
            Op::Read { sector, data } => match iovecs(&done.mem, &data) {
                Some(iov) => {
                    done.read_len = data.iter().map(|s| s.len).sum();
                    done.expect = Some(u64::from(done.read_len));
                    IoOp::Read {
                        offset: sector * SECTOR,
                        iov,
                    }
                }
                None => return self.bad_memory(done),
            },
            Op::Write { sector, data } => match iovecs(&done.mem, &data) {
                Some(iov) => {
                    done.expect = Some(data.iter().map(|s| u64::from(s.len)).sum());
                    IoOp::Write {
                        offset: sector * SECTOR,
                        iov,
                    }
                }
                None => return self.bad_memory(done),
            },
            Op::Flush => {
                self.stats.flush();
                IoOp::Flush
            }
            Op::Discard(r) => {
                self.stats.discard(false);
                IoOp::Allocate(allocations(&r, PUNCH_HOLE))
            }
            Op::WriteZeroes(r) => {
                self.stats.discard(true);
                IoOp::Allocate(allocations(&r, ZERO_RANGE))
            }
        };
        done.in_flight.fetch_add(1, Ordering::AcqRel);
        let job = Job {
            op,
            done: Box::new(move |outcome| done.complete(outcome)),
        };
        let host = host_prio(mapped.host);
        let job = match self
            .locals
            .get(queue)
            .map(lock)
            .as_mut()
            .and_then(|g| g.as_mut())
        {
            Some(ring) if ring.takes(host) => match ring.start(job) {
                Ok(()) => {
                    self.stats.by_queue_thread();
                    return;
                }
                Err((job, e)) => {
                    eprintln!("tandem vhost-blk: {e}; issuing through a submitter thread");
                    job
                }
            },
            _ => job,
        };
        if let Err(e) = self.submitters.submit(host, job) {
            // The request was answered with an I/O error.
            eprintln!("tandem vhost-blk: {e}");
        }
    }

    fn bad_memory(&self, done: Completion) {
        self.stats.bad_memory();
        self.stats.refused(Refusal::Malformed);
        done.complete_now(VIRTIO_BLK_S_IOERR as u8, 0);
    }
}

/// The priority a host priority is issued with: any priority of class
/// none is the thread's own (the level is meaningless then).
fn host_prio(p: Ioprio) -> Ioprio {
    if p.class == Class::None {
        Ioprio::NONE
    } else {
        p
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Puts `head` on the used ring and tells the guest if it wants to know.
fn publish(vring: &Vring, head: u16, used: u32) {
    if vring.add_used(head, used).is_err() {
        return;
    }
    if vring.needs_notification().unwrap_or(true) {
        let _ = vring.signal_used_queue();
    }
}

/// What to do when a request's I/O is done.
struct Completion {
    mem: Arc<Mem>,
    vring: Vring,
    head: u16,
    status: u64,
    stats: Arc<Stats>,
    in_flight: Arc<AtomicUsize>,
    /// For an RT request: the policy to tell, and its clock.
    rt: Option<(Arc<Mutex<ClassPolicy>>, Instant)>,
    /// Bytes a read returns to the guest.
    read_len: u32,
    /// Bytes a read or write must move.
    expect: Option<u64>,
}

impl Completion {
    fn complete_now(self, status: u8, data: u32) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.answer(status, data);
    }

    /// The I/O is done: OK only when it moved every byte it had to (a
    /// short transfer is an error to the guest).
    fn complete(self, outcome: Outcome) {
        let ok = match (outcome, self.expect) {
            (Ok(n), Some(want)) => n == want,
            (Ok(_), None) => true,
            (Err(_), _) => false,
        };
        if let (true, Some(n)) = (ok, self.expect) {
            if self.read_len > 0 {
                self.stats.read(n);
            } else {
                self.stats.written(n);
            }
        }
        let (status, data) = if ok {
            (VIRTIO_BLK_S_OK, self.read_len)
        } else {
            (VIRTIO_BLK_S_IOERR, 0)
        };
        self.answer(status as u8, data);
    }

    fn answer(self, status: u8, data: u32) {
        if let Some((policy, clock)) = &self.rt {
            let now = clock.elapsed().as_nanos() as u64;
            policy
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .rt_done(now);
        }
        self.stats.completed(status == VIRTIO_BLK_S_OK as u8);
        let used = if self
            .mem
            .write_obj(status, GuestAddress(self.status))
            .is_ok()
        {
            data + 1
        } else {
            0
        };
        publish(&self.vring, self.head, used);
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Host iovecs for guest segments (a segment may span memory regions);
/// `None` when a segment is not all guest memory.
fn iovecs(mem: &Mem, data: &[Seg]) -> Option<Vec<libc::iovec>> {
    let mut v = Vec::with_capacity(data.len());
    for s in data {
        for slice in GuestMemoryBackend::get_slices(mem, GuestAddress(s.addr), s.len as usize) {
            let slice = slice.ok()?;
            v.push(libc::iovec {
                iov_base: slice.ptr_guard_mut().as_ptr().cast(),
                iov_len: slice.len(),
            });
        }
    }
    Some(v)
}

/// Writes `bytes` across the segments; returns how many were written.
fn write_segments(mem: &Mem, data: &[Seg], bytes: &[u8]) -> u32 {
    let mut done = 0usize;
    for s in data {
        let n = (s.len as usize).min(bytes.len() - done);
        if n == 0
            || mem
                .write_slice(&bytes[done..done + n], GuestAddress(s.addr))
                .is_err()
        {
            break;
        }
        done += n;
    }
    done as u32
}

fn allocations(ranges: &[Range], discard_mode: i32) -> Vec<(u64, u64, i32)> {
    ranges
        .iter()
        .map(|r| {
            let mode = if discard_mode == ZERO_RANGE && r.unmap {
                PUNCH_HOLE
            } else {
                discard_mode
            };
            (r.sector * SECTOR, u64::from(r.sectors) * SECTOR, mode)
        })
        .collect()
}

struct MemReader<'a>(&'a Mem);

impl GuestBytes for MemReader<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        self.0.read_slice(buf, GuestAddress(addr)).is_ok()
    }
}

impl VhostUserBackend for BlkBackend {
    type Bitmap = ();
    type Vring = Vring;

    fn num_queues(&self) -> usize {
        usize::from(self.cfg.num_queues)
    }

    fn max_queue_size(&self) -> usize {
        MAX_QUEUE_SIZE
    }

    fn features(&self) -> u64 {
        self.cfg.features() | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits()
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        VhostUserProtocolFeatures::CONFIG | VhostUserProtocolFeatures::MQ
    }

    /// The daemon also sets it on each vring (`set_queue_event_idx`),
    /// which is what `enable_notification`, `disable_notification` and
    /// `needs_notification` go by; the counters record it.
    fn set_event_idx(&self, enabled: bool) {
        self.stats.set_event_idx(enabled);
    }

    fn get_config(&self, offset: u32, size: u32) -> Vec<u8> {
        self.cfg.read(offset, size)
    }

    fn update_memory(&self, mem: Atomic) -> std::io::Result<()> {
        *self.mem.write().unwrap_or_else(|e| e.into_inner()) = Some(mem);
        Ok(())
    }

    /// One thread per queue, so the queues of a multi-queue guest are
    /// served in parallel.
    fn queues_per_thread(&self) -> Vec<u64> {
        (0..self.cfg.num_queues).map(|q| 1u64 << q).collect()
    }

    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        new_event_consumer_and_notifier(EventFlag::NONBLOCK).ok()
    }

    fn stop_vring(&self, queue_index: u32) -> std::io::Result<()> {
        let Some(n) = self.in_flight.get(queue_index as usize) else {
            return Ok(());
        };
        let t0 = Instant::now();
        while n.load(Ordering::Acquire) > 0 && t0.elapsed() < STOP_TIMEOUT {
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// Kicks come as event 0 on every thread (the daemon numbers a
    /// thread's vrings from 0), so the queue is the thread's: thread `i`
    /// serves queue `i` (`queues_per_thread`). Completions of a queue's own
    /// ring come as `num_queues + 1 + q` (`completion_source`).
    fn handle_event(
        &self,
        device_event: u16,
        evset: EventSet,
        vrings: &[Vring],
        thread_id: usize,
    ) -> std::io::Result<()> {
        if evset != EventSet::IN {
            return Err(std::io::Error::other(format!(
                "unexpected event set {evset:?}"
            )));
        }
        let queues = usize::from(self.cfg.num_queues);
        let event = usize::from(device_event);
        let (q, source) = if event > queues {
            (event - queues - 1, Source::Completion)
        } else {
            (thread_id, Source::Request)
        };
        let Some(vring) = vrings.first() else {
            return Err(std::io::Error::other(format!("no queue {q}")));
        };
        // The wait that just ended, for the polling window of what ended it.
        if let Some(p) = self.polls.get(q) {
            let mut p = lock(p);
            if let Some(since) = p.waiting.take() {
                p.of(source).adjust(since.elapsed().as_nanos() as u64);
            }
        }
        match source {
            Source::Completion => self.reap(q),
            Source::Request => self.serve_kick(q, vring)?,
        }
        self.poll(q, vring)
    }
}

/// What a queue thread waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// Its own ring's I/O completions.
    Completion,
    /// The guest's next request (a kick).
    Request,
}

/// A queue thread's polling windows, one per source (`crate::poll`), and
/// when its current wait began.
#[derive(Default)]
struct QueuePoll {
    completion: AdaptivePoll,
    request: AdaptivePoll,
    waiting: Option<Instant>,
}

impl QueuePoll {
    fn new(max_ns: u64) -> QueuePoll {
        QueuePoll {
            completion: AdaptivePoll::new(max_ns),
            request: AdaptivePoll::new(max_ns),
            waiting: None,
        }
    }

    fn of(&mut self, s: Source) -> &mut AdaptivePoll {
        match s {
            Source::Completion => &mut self.completion,
            Source::Request => &mut self.request,
        }
    }
}

#[cfg(test)]
mod tests;
