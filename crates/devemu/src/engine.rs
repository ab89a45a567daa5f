//! The timing engine: one thread that owns a `devmodel::Device` and answers
//! each request when the model says the device would have completed it.
//!
//! Requests arrive from the FUSE thread with their arrival time on one clock
//! (nanoseconds since the engine started). The device accepts up to its
//! command-queue depth (the preset's NCQ/TCQ depth: 1 for the disk, SD card
//! and eMMC); further requests wait in arrival order, as they would in the
//! host's dispatch queue. A disk head therefore serves one request at a time
//! (parallelism 1); flash presets serve as many at once as the model has
//! parallel units. The model is the shared `devmodel` code: this file holds
//! no timing of its own.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use devmodel::{Device, IoRequest, Nanos, ServiceModel};

/// What to do when a request completes (send the FUSE reply).
pub type Completion = Box<dyn FnOnce() + Send>;

/// One request for the engine.
pub struct Job {
    /// Arrival time on the engine's clock.
    pub arrival: Nanos,
    /// The request as the device sees it.
    pub req: IoRequest,
    /// Called at the modelled completion time.
    pub done: Completion,
    /// Instead of the model's time, complete this long after arrival (the
    /// calibration's requests: see [`Calibration`]).
    pub fixed_ns: Option<Nanos>,
}

/// The emulator's own latency, measured by `up` before the device is handed
/// out, and whether the model is in force yet.
///
/// Until [`Calibration::set`] is called, every request completes a fixed delay
/// after it reached the daemon (see [`CalibrationDelays`]), through the same
/// engine thread as timed requests, so that `up` can measure the round trip of
/// the kernel path (application, loop device, FUSE, daemon, engine thread and
/// back) as the timed device will see it. Afterwards each request is started
/// on the model `c0 + c1 * bytes` before it reached the daemon: the
/// application then sees the modelled service time, not the model's plus the
/// kernel path's. [`Calibration::suspend`] answers at once instead (to prepare
/// a device's contents quickly).
#[derive(Default)]
pub struct Calibration {
    /// 0 (the default) while calibrating, then [`TIMED`] or [`SUSPENDED`].
    state: AtomicU8,
    c0_ns: AtomicU64,
    c1_ps_per_byte: AtomicU64,
    delays: CalibrationDelays,
}

const TIMED: u8 = 1;
const SUSPENDED: u8 = 2;

/// How long the calibration's requests take: the model's own mean service
/// time for the calibration's small and large requests.
///
/// The kernel path costs more after a longer wait. On a virtual machine an
/// idle CPU halts and the host deschedules it, so waking the threads on the
/// path takes longer the longer they slept: measured on this machine, the
/// round trip beyond the delay was 50-65 us after 0.3 ms, 50-85 us after 1 ms,
/// 105-110 us after 3 ms and 135-155 us after 10 ms. Calibrating without a
/// delay (answering at once) left an eMMC's 4 KiB reads 5% to 10% slow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CalibrationDelays {
    /// For requests up to [`CalibrationDelays::SMALL_MAX_BYTES`].
    pub small_ns: Nanos,
    /// For larger requests.
    pub large_ns: Nanos,
}

impl CalibrationDelays {
    /// The calibration's small requests are 4 KiB, its large ones 128 KiB.
    pub const SMALL_MAX_BYTES: u64 = 64 * 1024;

    /// The delay for a request of `bytes`.
    pub fn for_bytes(&self, bytes: u64) -> Nanos {
        if bytes <= Self::SMALL_MAX_BYTES {
            self.small_ns
        } else {
            self.large_ns
        }
    }
}

/// What the daemon does with a request, from the calibration state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    /// Complete after the model's service time, started `overhead_ns` early.
    Model { overhead_ns: u64 },
    /// Complete `delay_ns` after arrival.
    Calibrating { delay_ns: Nanos },
    /// Complete at once.
    Immediate,
}

impl Calibration {
    /// A calibration whose requests take `delays` until [`Calibration::set`].
    pub fn new(delays: CalibrationDelays) -> Calibration {
        Calibration {
            delays,
            ..Calibration::default()
        }
    }

    /// Put the model in force with this overhead.
    pub fn set(&self, c0_ns: u64, c1_ps_per_byte: u64) {
        self.c0_ns.store(c0_ns, Ordering::Relaxed);
        self.c1_ps_per_byte.store(c1_ps_per_byte, Ordering::Relaxed);
        self.state.store(TIMED, Ordering::Release);
    }

    /// Take the model out of force: answer every request at once (used to
    /// prepare a device's contents quickly).
    pub fn suspend(&self) {
        self.state.store(SUSPENDED, Ordering::Release);
    }

    /// How a request of `bytes` is to be timed.
    pub fn timing(&self, bytes: u64) -> Timing {
        match self.state.load(Ordering::Acquire) {
            TIMED => Timing::Model {
                overhead_ns: self.c0_ns.load(Ordering::Relaxed)
                    + bytes * self.c1_ps_per_byte.load(Ordering::Relaxed) / 1000,
            },
            SUSPENDED => Timing::Immediate,
            _ => Timing::Calibrating {
                delay_ns: self.delays.for_bytes(bytes),
            },
        }
    }
}

/// Counters the engine keeps (read by `status` through the state directory).
#[derive(Default)]
pub struct Stats {
    /// Requests completed.
    pub requests: AtomicU64,
    /// Bytes read and written.
    pub bytes: AtomicU64,
}

/// Handle to the engine thread.
pub struct Engine {
    epoch: Instant,
    tx: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    /// Counters.
    pub stats: Arc<Stats>,
}

impl Engine {
    /// Start the engine thread for `model` with its default queue depth.
    pub fn start(model: Box<dyn ServiceModel>) -> Engine {
        let depth = model.info().default_queue_depth;
        let epoch = Instant::now();
        let (tx, rx) = mpsc::channel::<Job>();
        let stats = Arc::new(Stats::default());
        let st = stats.clone();
        let thread = std::thread::Builder::new()
            .name("devemu-engine".into())
            .spawn(move || run(Device::new(model, depth), epoch, rx, st))
            .expect("spawn the engine thread");
        Engine {
            epoch,
            tx: Some(tx),
            thread: Some(thread),
            stats,
        }
    }

    /// The engine's clock now.
    pub fn now(&self) -> Nanos {
        self.epoch.elapsed().as_nanos() as Nanos
    }

    /// Hand a request to the engine. If the engine is gone, complete at once.
    pub fn submit(&self, job: Job) {
        if let Some(tx) = &self.tx {
            if let Err(mpsc::SendError(job)) = tx.send(job) {
                (job.done)();
            }
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Make this thread's timed sleeps end as close to their deadline as the
/// kernel allows (the default timer slack is 50 µs).
pub fn tight_timer_slack() {
    // 1 ns: the kernel's smallest slack (0 would mean "the default" again).
    // A kernel that refuses it leaves timing as it was, so no error path.
    let _ = nix::sys::prctl::set_timerslack(1);
}

/// First guess of the timer wake-up lateness (learnt from then on).
const INITIAL_LEAD_NS: Nanos = 50_000;
/// Lateness beyond this is not learnt (a preempted thread, not the timer).
const MAX_LEAD_NS: Nanos = 500_000;

fn run(dev: Device, epoch: Instant, rx: Receiver<Job>, stats: Arc<Stats>) {
    tight_timer_slack();
    let mut l = EngineLoop::new(dev, epoch, rx, stats);
    loop {
        l.submit_waiting();
        let next = l.next_due();
        let Some((incoming, timed_out_for)) = l.wait(next) else {
            break;
        };
        if let Some(job) = incoming {
            l.take(job);
            // Drain whatever else has arrived, so that simultaneous arrivals
            // reach the device together.
            while let Ok(j) = l.rx.try_recv() {
                l.take(j);
            }
            // Start them at their arrival times first, then collect what has
            // completed meanwhile.
            continue;
        }
        l.complete_due(next, timed_out_for);
    }
}

/// The engine thread's state: the model, the requests waiting for it and
/// those it serves, and the learnt timer lateness.
struct EngineLoop {
    dev: Device,
    epoch: Instant,
    rx: Receiver<Job>,
    stats: Arc<Stats>,
    /// Completions by tag; tags are issued in order and slots reused.
    pending: Vec<Option<(Completion, u64)>>,
    free: Vec<usize>,
    /// Requests beyond the device's queue depth, in arrival order.
    host_queue: VecDeque<Job>,
    /// The model's clock: submissions and completions never go back in time.
    last: Nanos,
    /// Whether jobs may still arrive.
    open: bool,
    /// How early the thread wakes before a completion, and its average x 8.
    lead: Nanos,
    lead_acc: Nanos,
    /// Calibration requests: (completion time, reply), kept in completion
    /// order (small and large requests have different delays).
    fixed: VecDeque<(Nanos, Completion)>,
}

impl EngineLoop {
    fn new(dev: Device, epoch: Instant, rx: Receiver<Job>, stats: Arc<Stats>) -> EngineLoop {
        EngineLoop {
            dev,
            epoch,
            rx,
            stats,
            pending: Vec::new(),
            free: Vec::new(),
            host_queue: VecDeque::new(),
            last: 0,
            open: true,
            lead: INITIAL_LEAD_NS,
            lead_acc: INITIAL_LEAD_NS * 8,
            fixed: VecDeque::new(),
        }
    }

    fn clock(&self) -> Nanos {
        self.epoch.elapsed().as_nanos() as Nanos
    }

    /// Move waiting requests onto the device while it has free slots.
    fn submit_waiting(&mut self) {
        while self.dev.can_accept() {
            let Some(job) = self.host_queue.pop_front() else {
                break;
            };
            let at = job.arrival.max(self.last);
            self.last = at;
            let slot = match self.free.pop() {
                Some(s) => s,
                None => {
                    self.pending.push(None);
                    self.pending.len() - 1
                }
            };
            self.pending[slot] = Some((job.done, job.req.bytes()));
            self.dev.submit(at, slot as u64, job.req);
            // Each request's way through the model: RUST_LOG=devemu=trace
            // on the daemon (its serve.log).
            tracing::trace!(
                slot,
                arrival = job.arrival,
                at,
                sector = job.req.sector,
                sectors = job.req.sectors,
                next = ?self.dev.next_completion(),
                "submit"
            );
        }
    }

    /// The next completion, of the model or of a calibration request.
    fn next_due(&self) -> Option<Nanos> {
        match (self.dev.next_completion(), self.fixed.front()) {
            (Some(a), Some(&(b, _))) => Some(a.min(b)),
            (a, b) => a.or(b.map(|f| f.0)),
        }
    }

    /// Wait for the next completion (`next`) or the next arrival. The thread
    /// wakes `lead` early: the lateness of its recent wake-ups, learnt as it
    /// runs, so that replies leave close to the modelled completion time.
    /// Returns the job that arrived, if any, and the wake-up target when the
    /// wait timed out; `None` when nothing is left to do.
    fn wait(&mut self, next: Option<Nanos>) -> Option<(Option<Job>, Option<Nanos>)> {
        let mut timed_out_for = None;
        let incoming = match next {
            None if !self.open => return None,
            None => match self.rx.recv() {
                Ok(j) => Some(j),
                Err(_) => {
                    self.open = false;
                    None
                }
            },
            Some(t) => {
                let now = self.clock();
                let target = t.saturating_sub(self.lead);
                if target <= now {
                    None
                } else if self.open {
                    match self.rx.recv_timeout(Duration::from_nanos(target - now)) {
                        Ok(j) => Some(j),
                        Err(RecvTimeoutError::Timeout) => {
                            timed_out_for = Some(target);
                            None
                        }
                        Err(RecvTimeoutError::Disconnected) => {
                            self.open = false;
                            None
                        }
                    }
                } else {
                    std::thread::sleep(Duration::from_nanos(target - now));
                    None
                }
            }
        };
        Some((incoming, timed_out_for))
    }

    /// A request that arrived: a calibration request waits for its fixed
    /// completion time, any other for the device.
    fn take(&mut self, j: Job) {
        match j.fixed_ns {
            Some(d) => {
                let at = j.arrival + d;
                let pos = self.fixed.partition_point(|&(t, _)| t <= at);
                self.fixed.insert(pos, (at, j.done));
            }
            None => self.host_queue.push_back(j),
        }
    }

    /// Answer every request whose completion time has come.
    fn complete_due(&mut self, next: Option<Nanos>, timed_out_for: Option<Nanos>) {
        let mut now = self.clock();
        if let Some(target) = timed_out_for {
            // Learn the wake-up lateness (exponential average, 1/8 weight).
            let late = now.saturating_sub(target).min(MAX_LEAD_NS);
            self.lead_acc = self.lead_acc - self.lead_acc / 8 + late;
            self.lead = self.lead_acc / 8;
        }
        // Within `lead` of the next completion counts as reaching it.
        if let Some(t) = next {
            if now < t && now + self.lead >= t {
                now = t;
            }
        }
        while self.fixed.front().is_some_and(|f| f.0 <= now) {
            let (_, done) = self.fixed.pop_front().expect("front");
            done();
        }
        let now = now.max(self.last);
        self.last = now;
        while let Some(tag) = self.dev.pop_completed(now) {
            let slot = tag as usize;
            tracing::trace!(slot, at = now, wall = self.clock(), "done");
            if let Some((done, bytes)) = self.pending[slot].take() {
                self.stats.requests.fetch_add(1, Ordering::Relaxed);
                self.stats.bytes.fetch_add(bytes, Ordering::Relaxed);
                done();
            }
            self.free.push(slot);
        }
    }
}
