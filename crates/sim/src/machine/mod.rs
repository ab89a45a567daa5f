//! One simulated machine: the host kernel (a device, its block layer and
//! elevator, a page cache), the guest kernels of its virtual machines (each
//! over a virtio disk backed by an image file on the host, see
//! [`crate::vm`]), QEMU's I/O threads, and the processes that use them
//! (background readers and writers, the write-back flushers, and
//! applications being started).
//!
//! A [`Machine`] is made of parts, each in a file of its own, each owning
//! its state (private to its file) and the events addressed to it:
//!
//! | part | file | owns | its events (`Ev`) |
//! |---|---|---|---|
//! | event loop | this file, over `crate::engine` | the clock and the queue; routes each event to its part | — |
//! | kernel | `kernel.rs` | a kernel's block layer (elevator, device or virtqueue), its file layout, and the I/O path from a process to the block layer | `BlockEv`: a completion due, the elevator's timer |
//! | page cache and write-back | `pagecache.rs` | clean and dirty pages, the dirty thresholds, the flusher's progress, `sync` | `Ev::Sync`: the periodic `sync` |
//! | read-ahead | `readahead.rs` | the read-ahead window of a buffered reader of a file | — |
//! | processes | `procs.rs` | the process table: each process's role, ioprio, RNG and timer | `ProcEv`: a process's timer |
//! | QEMU | `qemu.rs` | each VM's virtqueue drain, thread pool or iothread, and the guest requests being performed | `QemuEv`: a kick, a request done without disk I/O |
//! | coordination | `coordination.rs` | the guest sides (detector, client), the host's arbiter, who is boosted, the counters | `CoordEv`: a message arriving, a deadline |
//! | CPU | `cpu.rs` | with a platform, the CPU model (crate `cpusched`): each process's task, its bursts and what they lead to, the CPU costs owed for bios | `CpuEv`: a burst ended |
//!
//! A part's file holds the part's type (its state and the methods that
//! touch only it) and an `impl Machine` block: the part's public API on
//! [`Machine`], its event handler, and the steps that reach other parts,
//! which they do through those parts' methods, never their fields.
//!
//! Events run in (time, insertion) order ([`crate::engine::EventQueue`]),
//! so a run is a pure function of its inputs and seed; a part that pushes
//! events must push them in a fixed order.
//!
//! Adding a part: a file here with the part's type and its event enum, a
//! field in [`Machine`], a variant in `Ev` routed in
//! `Machine::handle`, and a row in the table above (and in the crate's
//! README).

mod coordination;
mod cpu;
mod kernel;
mod pagecache;
mod procs;
mod qemu;
mod readahead;

use crate::engine::EventQueue;
use crate::iosched::{SchedConfig, MSEC, SEC};
use crate::request::BioOwner;
use devmodel::Nanos;

use coordination::{CoordEv, Coordinator};
use cpu::{Cpu, CpuEv};
use kernel::BlockEv;
use procs::{ProcEv, Procs};
use qemu::{Qemu, QemuEv};

pub use cpu::CpuConfig;
pub use kernel::{Kernel, KernelId, HOST};
pub use procs::{AppRun, Role};
pub use qemu::QemuStats;
pub use readahead::READAHEAD_BYTES;

/// What a machine is made of.
#[derive(Clone, Debug)]
pub struct MachineConfig {
    /// Device preset name (see `devmodel::PRESETS`).
    pub device: String,
    /// The device's command queue depth; `None` takes the preset's.
    pub queue_depth: Option<usize>,
    /// The host driver's dispatch depth when it is greater than the
    /// device's queue: up to this many requests leave the elevator, and
    /// those the device has no room for wait in arrival order
    /// (`devmodel::Device::behind_fifo`). `Some(devmodel::LOOP_TAG_DEPTH)`
    /// is the real runner's emulated disk; `None` hands the device as many
    /// as its own queue takes.
    pub dispatch_depth: Option<usize>,
    /// HDD parameters set over the preset's, in order
    /// (`devmodel::preset_with_hdd_params`; flash presets ignore them).
    pub hdd_params: Vec<(String, f64)>,
    /// Elevator name (see `iosched::SCHEDULERS`).
    pub sched: String,
    pub sched_cfg: SchedConfig,
    /// Memory size, which sets the dirty-page thresholds. 2 GiB is the
    /// machine of the CLOUD 2014 measurements (ARM Chromebook, 2 GB).
    pub memory_bytes: u64,
    /// The platform and CPU schedulers the machine's processes run on;
    /// `None`: every process has a core of its own ([`cpu`]).
    pub cpu: Option<CpuConfig>,
}

impl Default for MachineConfig {
    fn default() -> Self {
        MachineConfig {
            device: "hdd-1.8in".into(),
            queue_depth: None,
            dispatch_depth: None,
            hdd_params: Vec::new(),
            sched: "bfq".into(),
            sched_cfg: SchedConfig::default(),
            memory_bytes: 2 << 30,
            cpu: None,
        }
    }
}

/// Background workload files: each reader and writer has its own file of
/// this size (readers wrap around at its end).
pub const WORKLOAD_FILE_BYTES: u64 = 500 << 20;

/// An event, addressed to the part that owns it.
#[derive(Clone, Copy, Debug)]
enum Ev {
    /// Kernel `k`'s block layer ([`kernel`]).
    Block(KernelId, BlockEv),
    /// The periodic `sync` of kernel `k` ([`pagecache`]).
    Sync(KernelId),
    /// A process ([`procs`]).
    Proc(ProcEv),
    /// QEMU ([`qemu`]).
    Qemu(QemuEv),
    /// Coordination ([`coordination`]).
    Coord(CoordEv),
    /// The CPU model ([`cpu`]).
    Cpu(CpuEv),
}

/// A simulated machine.
pub struct Machine {
    /// The event loop's queue and clock.
    q: EventQueue<Ev>,
    /// The host ([`HOST`]), then one guest per VM.
    kernels: Vec<Kernel>,
    procs: Procs,
    qemu: Qemu,
    coord: Coordinator,
    cpu: Cpu,
    /// Scratch list of the bios a completion finished, kept to reuse its
    /// allocation.
    woken: Vec<BioOwner>,
}

impl Machine {
    pub fn new(cfg: &MachineConfig, seed: u64) -> Result<Machine, String> {
        Ok(Machine {
            q: EventQueue::new(),
            kernels: vec![Kernel::host(cfg)?],
            procs: Procs::new(seed),
            qemu: Qemu::default(),
            coord: Coordinator::default(),
            cpu: Cpu::new(cfg.cpu.as_ref()),
            woken: Vec::new(),
        })
    }

    pub fn now(&self) -> Nanos {
        self.q.now()
    }

    /// Events handled: the machine's, and its CPU model's if it has one.
    pub fn events_processed(&self) -> u64 {
        self.q.processed() + self.cpu.events_processed()
    }

    /// Runs the machine until simulated time `until` (events at exactly
    /// `until` are processed), or until `stop` says so after an event.
    pub fn run_until(&mut self, until: Nanos, mut stop: impl FnMut(&Machine) -> bool) {
        loop {
            let tm = self.q.peek_time();
            // The CPU model's events go first at equal times: a burst that
            // ends now is over before what happens now.
            if let Some(tc) = self.cpu.next_event_time() {
                if tc <= until && tm.is_none_or(|tm| tc <= tm) {
                    self.cpu_advance(tc);
                    continue;
                }
            }
            let Some(t) = tm else { break };
            if t > until {
                break;
            }
            let (now, ev) = self.q.pop().expect("peeked");
            self.cpu_advance(now);
            self.handle(now, ev);
            if self.coord.asks_for_help() || self.coord.marks_requests() {
                self.poll_guests();
            }
            self.schedule_block_events();
            self.schedule_kicks();
            // Bursts that the event's commands ended at once.
            self.cpu_advance(now);
            if stop(self) {
                return;
            }
        }
        // Advance the clock even if nothing happened.
        if self.q.now() < until {
            self.q
                .push(until, Ev::Block(HOST, BlockEv::Timer(Nanos::MAX)));
            self.q.pop();
        }
        self.cpu_advance(until);
    }

    /// Routes an event to the part that owns it.
    fn handle(&mut self, now: Nanos, ev: Ev) {
        match ev {
            Ev::Block(k, ev) => self.on_block(k, now, ev),
            Ev::Sync(k) => self.on_sync(k, now),
            Ev::Proc(ev) => self.on_proc(now, ev),
            Ev::Qemu(ev) => self.on_qemu(ev),
            Ev::Coord(ev) => self.on_coord(now, ev),
            Ev::Cpu(ev) => self.on_cpu(now, ev),
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
