//! The CFS-v experiment (Shim and Lee, Samsung, 2014) on the CPU model:
//! an 8-core host, two VMs of 8 vCPUs in CPU groups of their own
//! (`cpu.shares` 1024 each, libvirt's default), 4 KiB `O_DIRECT` random
//! reads on one shared SATA SSD (`devmodel`'s `ssd-sata`) and MD5-hashing
//! CPU hogs, each virtio-blk request crossing the host tasks of
//! [`path`]. Cases "Separate" (VM 1: 32 readers; VM 2: 16 hashers) and
//! "Mixed" (each VM 16 readers and 8 hashers); host `cfs` against `cfs-v`.

pub mod breakdown;
pub mod path;
pub mod published;

use std::fmt::Write as _;

use devmodel::{Device, Direction, IoRequest};
use policy::IoRole;
use rand_core::{Rng as _, SeedableRng};
use rand_xorshift::XorShiftRng;

use crate::cfsv::CfsvOptions;
use crate::class::TaskHint;
use crate::model::{Completion, CompletionKind, CpuModel, KernelId};
use crate::platform::{Platform, Preemption};
use crate::task::{TaskId, TaskSpec};
use crate::{FairKind, Nanos, MS, US};
use path::{Job, Req, Server};

/// The CPU cost of each hop of a request on the study's platform:
/// [`crate::iocost`]'s figures (CPU time on the machine they were measured
/// on) scaled by the platform's one speed factor. The VM exits and
/// switches are the platform's own costs, added by the CPU model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HopCosts {
    /// Guest: `pread` entry and exit, the `O_DIRECT` bio through blk-mq,
    /// virtio-blk adding the buffers to the virtqueue (the kick's VM exit
    /// is added separately). The host's system call and block-layer
    /// submission (the same kernel code; TCG cannot measure a guest's).
    pub guest_submit: Nanos,
    /// Guest: the virtio interrupt's handler for one request
    /// (`virtblk_done()`, `blk_mq_complete_request()` and the IPI towards
    /// the submitting vCPU): the host's completion interrupt
    /// (`iocost::BLOCK_IRQ_NS`).
    pub guest_irq: Nanos,
    /// Guest: the completion on the submitting vCPU (the end of the
    /// request, bio and direct I/O, the reader's wake-up): the host's
    /// block softirq (`iocost::BLOCK_SOFTIRQ_NS`).
    pub guest_complete: Nanos,
    /// QEMU main loop, once per activation however many requests it
    /// serves (`iocost::MAIN_WAKE_NS`).
    pub main_wake: Nanos,
    /// QEMU main loop, per request submitted: the worker's wake-up
    /// (`iocost::MAIN_SUBMIT_NS`).
    pub main_submit: Nanos,
    /// QEMU main loop, per request completed (`iocost::MAIN_COMPLETE_NS`).
    pub main_complete: Nanos,
    /// Worker: its activation, and `preadv` with `O_DIRECT` through the
    /// host's block layer down to the AHCI command.
    pub worker_submit: Nanos,
    /// Worker: the return from `preadv` and the notifier's `eventfd`
    /// write.
    pub worker_complete: Nanos,
    /// The block softirq, once per activation: the completion's interrupt
    /// (`iocost::BLOCK_IRQ_NS`).
    pub softirq_wake: Nanos,
    /// The block softirq, per request: request and bio completion, waking
    /// the worker (`iocost::BLOCK_SOFTIRQ_NS`).
    pub softirq: Nanos,
}

impl HopCosts {
    /// The hops' costs on platform `p`.
    pub fn on(p: &Platform) -> HopCosts {
        use crate::iocost as c;
        HopCosts {
            guest_submit: p.scale_cpu(c::SYSCALL_NS + c::BLOCK_SUBMIT_NS),
            guest_irq: p.scale_cpu(c::BLOCK_IRQ_NS),
            guest_complete: p.scale_cpu(c::BLOCK_SOFTIRQ_NS),
            main_wake: p.scale_cpu(c::MAIN_WAKE_NS),
            main_submit: p.scale_cpu(c::MAIN_SUBMIT_NS),
            main_complete: p.scale_cpu(c::MAIN_COMPLETE_NS),
            worker_submit: p.scale_cpu(c::WORKER_WAKE_NS + c::BLOCK_SUBMIT_NS),
            worker_complete: p.scale_cpu(c::WORKER_REQUEST_NS),
            softirq_wake: p.scale_cpu(c::BLOCK_IRQ_NS),
            softirq: p.scale_cpu(c::BLOCK_SOFTIRQ_NS),
        }
    }
}

/// MD5 throughput of one Sandy Bridge core at 3.4 GHz, about 5 cycles
/// per byte (assumption, of the order `openssl speed md5` reports); it
/// only turns hashing CPU time into MB/s.
pub const MD5_BYTES_PER_CPU_S: f64 = 650.0e6;
/// The reads' size: 4 KiB (the slides).
pub const READ_BYTES: u64 = 4096;
/// Each VM reads a 16 GiB region of the SSD (assumption: where the reads
/// land only picks the flash unit, uniformly either way).
pub const REGION_SECTORS: u64 = 16 << 21;

/// The slides' host: Intel Core i7-2600 (8 hardware threads, counted as
/// 8 cores as the slides do), 3.4 GHz, 12 GB, Linux 3.16.1; guests of 8
/// vCPUs. HZ=250 is the Kconfig default (`HZ_250`) of a kernel built from
/// the release, as theirs was (assumption). Switch and exit costs are
/// assumptions of the right order for this core (a switch and an exit of
/// a few thousand cycles).
pub fn host_i7_2600() -> Platform {
    Platform {
        name: "i7-2600",
        cores: 8,
        mhz: 3400,
        // The per-request CPU costs of `crate::iocost` were measured on an
        // EPYC 7003 (Zen 3) core; this is the i7-2600's speed against it,
        // an ESTIMATE (no i7-2600 here, and no pair of single-thread
        // scores of both on one benchmark was found): clock times work per
        // clock. Clocks: this core runs at 3.15 GHz (3.13 to 3.19 in three
        // runs of `tools/iocost/clock.c`, 2026-11-26, load 24); the
        // i7-2600 at 3.5 GHz with its four cores busy (Intel's turbo bins
        // over the 3.4 GHz base). Work per clock: a Zen 3 core does about
        // 1.7 times a Sandy Bridge core's on integer code (an estimate
        // from the generations' published gains, AMD's +19% for Zen 3
        // over Zen 2 among them). 3.5 / 3.15 / 1.7 = 0.65. Geekbench 6
        // single-core puts the i7-2600 at 638 (cputronic.com, 2025).
        speed: 0.65,
        hz: 250,
        guest_hz: 250,
        preemption: Preemption::Voluntary,
        switch_ns: 2 * US,
        guest_switch_ns: 2 * US,
        timer_irq_ns: 2 * US,
        vm_exit_ns: 2 * US,
        vm_entry_ns: 2 * US,
        max_vcpus: 8,
        rt_runtime_share: true,
        // Linux 3.16: per-entity load tracking (3.8+) and CFS's next buddy.
        load_tracking: true,
        next_buddy: true,
        // 4 cores of 2 hardware threads each (Intel's specification of the
        // i7-2600), which the slides count as 8 cores.
        smt: 2,
    }
}

/// The two cases of the slides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    /// VM 1: 32 random-read threads; VM 2: 16 hashing threads.
    Separate,
    /// Two VMs, each 16 random-read threads and 8 hashing threads.
    Mixed,
}

impl Case {
    pub fn name(self) -> &'static str {
        match self {
            Case::Separate => "separate",
            Case::Mixed => "mixed",
        }
    }

    /// (readers, hashers) of each VM.
    pub fn vms(self) -> [(usize, usize); 2] {
        match self {
            Case::Separate => [(32, 0), (0, 16)],
            Case::Mixed => [(16, 8), (16, 8)],
        }
    }
}

/// One cell.
#[derive(Clone, Debug)]
pub struct StudySetup {
    pub case: Case,
    pub host: FairKind,
    pub platform: Platform,
    pub warmup_ns: Nanos,
    pub measure_ns: Nanos,
    pub seed: u64,
}

impl StudySetup {
    /// 3 s of warm-up (the balancer settles: see the README), then 2 s
    /// measured.
    pub fn new(case: Case, host: FairKind) -> StudySetup {
        StudySetup {
            case,
            host,
            platform: host_i7_2600(),
            warmup_ns: 3000 * MS,
            measure_ns: 2000 * MS,
            seed: 1,
        }
    }
}

/// What one VM did in the measured window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VmResult {
    pub readers: usize,
    pub hashers: usize,
    pub iops: f64,
    pub mb_s: f64,
    /// MD5 hashing rate of its hashers (MB/s).
    pub hash_mb_s: f64,
    /// CPU use of its host threads (vCPUs, main loop, workers), in % of
    /// one CPU.
    pub cpu_pct: f64,
}

/// What one cell measured.
#[derive(Clone, Debug, PartialEq)]
pub struct StudyResult {
    pub vms: Vec<VmResult>,
    /// Mean time of each of [`HOPS`] in the measured window (us),
    /// waiting for a CPU included.
    pub hops_us: [f64; 7],
    /// Events the CPU model handled (from the start of the run to the
    /// end of the window).
    pub events: u64,
}

impl StudyResult {
    pub fn iops(&self) -> f64 {
        self.vms.iter().map(|v| v.iops).sum()
    }
    pub fn hash_mb_s(&self) -> f64 {
        self.vms.iter().map(|v| v.hash_mb_s).sum()
    }
}

/// One VM's tasks.
struct VmTasks {
    k: KernelId,
    main: Server,
    workers: Vec<Server>,
    free: Vec<usize>,
    hashers: Vec<TaskId>,
    /// The guest's virtio-blk interrupt handler, on vCPU [`IRQ_VCPU`]
    /// (see [`Cell::guest_interrupt`]).
    irq: Server,
    /// Host threads whose CPU time is the VM's.
    host_threads: Vec<TaskId>,
    completions: u64,
}

/// Who a host task is.
#[derive(Clone, Copy, Debug)]
enum HostRole {
    Main(usize),
    Worker(usize, usize),
    Softirq(usize),
}

struct Cell {
    m: CpuModel,
    dev: Device,
    vms: Vec<VmTasks>,
    softirq: Vec<Server>,
    host_role: Vec<Option<HostRole>>,
    /// Guest task -> (VM, is a reader).
    reader_of: Vec<Vec<bool>>,
    /// Per VM, its guest's interrupt handler task.
    irq_task: Vec<TaskId>,
    inflight: Vec<Option<Req>>,
    rng: XorShiftRng,
    costs: HopCosts,
    kick_ns: Nanos,
    hops: Hops,
}

/// The hops of a request, in order: each ends when the named step is done.
pub const HOPS: [&str; 7] = [
    "main loop submitted",
    "worker issued",
    "device served",
    "softirq ran",
    "worker returned",
    "main loop completed",
    "reader ran",
];

/// Time spent in each hop (waiting for a CPU included), summed.
#[derive(Clone, Debug, Default)]
struct Hops {
    /// Per request tag: when its last hop ended.
    last: Vec<Nanos>,
    /// Per VM and guest task: when its request's interrupt went out.
    irq: Vec<Vec<Option<Nanos>>>,
    sum: [u128; 7],
    n: [u64; 7],
}

impl Hops {
    fn mark(&mut self, tag: usize, hop: usize, now: Nanos) {
        self.sum[hop] += (now - self.last[tag]) as u128;
        self.n[hop] += 1;
        self.last[tag] = now;
    }

    fn mean_us(&self) -> [f64; 7] {
        std::array::from_fn(|i| self.sum[i] as f64 / self.n[i].max(1) as f64 / 1e3)
    }
}

/// The vCPU that takes the guest's virtio-blk interrupt. A KVM guest turns
/// x2APIC on without interrupt remapping (Linux 2.6.32+, "x86/apic: Enable
/// x2APIC without interrupt remapping under KVM"; QEMU gives KVM guests
/// x2APIC by default), and without remapping in physical destination mode,
/// so an MSI goes to one CPU: the first of the vector's affinity, all CPUs
/// by default (no irqbalance assumed: with it, another single vCPU).
pub const IRQ_VCPU: usize = 0;

/// QEMU's thread pool holds at most 64 workers (`thread-pool.c`,
/// `max_threads`); one per reader here.
const MAX_WORKERS: usize = 64;

impl HopCosts {
    fn main(&self, j: &Job) -> Nanos {
        match j {
            Job::Submit(_) => self.main_submit,
            Job::Complete(_) => self.main_complete,
        }
    }

    fn worker(&self, j: &Job) -> Nanos {
        match j {
            Job::Submit(_) => self.worker_submit,
            Job::Complete(_) => self.worker_complete,
        }
    }
}

impl Cell {
    fn build(s: &StudySetup) -> Result<Cell, String> {
        let model = devmodel::preset("ssd-sata").map_err(|e| e.to_string())?;
        let depth = model.info().default_queue_depth;
        let mut cell = Cell {
            m: CpuModel::new(s.platform.clone(), s.host),
            dev: Device::new(model, depth),
            vms: Vec::new(),
            softirq: Vec::new(),
            host_role: Vec::new(),
            reader_of: Vec::new(),
            irq_task: Vec::new(),
            inflight: vec![None; 2 * MAX_WORKERS],
            rng: XorShiftRng::seed_from_u64(s.seed),
            costs: HopCosts::on(&s.platform),
            kick_ns: HopCosts::on(&s.platform).guest_submit + s.platform.vm_exit_ns,
            hops: Hops {
                last: vec![0; 2 * MAX_WORKERS],
                ..Default::default()
            },
        };
        for cpu in 0..s.platform.cores {
            let name = format!("ksoftirqd/{cpu}");
            let t = cell.spawn_host(&name, None, cpu, IoRole::Softirq, HostRole::Softirq(cpu));
            cell.softirq
                .push(Server::with_wake_cost(t, cell.costs.softirq_wake));
        }
        for (i, &(readers, hashers)) in s.case.vms().iter().enumerate() {
            cell.add_vm(i, readers, hashers)?;
        }
        Ok(cell)
    }

    /// A host service thread, spawned with a token burst after which it
    /// blocks until its first job.
    fn spawn_host(
        &mut self,
        name: &str,
        group: Option<crate::task::GroupId>,
        cpu: usize,
        role: IoRole,
        hrole: HostRole,
    ) -> TaskId {
        let spec = TaskSpec {
            group,
            cpu,
            burst: Some(1),
            ..TaskSpec::busy_loop(name)
        };
        let t = self.m.spawn(KernelId::HOST, spec);
        self.m.hint(KernelId::HOST, t, TaskHint::IoRole(role));
        self.host_role.resize(t.idx() + 1, None);
        self.host_role[t.idx()] = Some(hrole);
        t
    }

    /// A VM of 8 vCPUs (guest CFS, `cpu.shares` 1024), its QEMU threads,
    /// its readers and hashers.
    fn add_vm(&mut self, i: usize, readers: usize, hashers: usize) -> Result<(), String> {
        if readers > MAX_WORKERS {
            return Err(format!("{readers} readers: at most {MAX_WORKERS}"));
        }
        let cores = self.m.platform.cores;
        let (vm, k) = self.m.add_vm(8, FairKind::Cfs, 1024)?;
        let group = Some(self.m.vm_group(vm));
        let mut host_threads: Vec<TaskId> = (0..8).map(|c| self.m.vcpu_task(vm, c)).collect();
        let name = format!("vm{i}-main-loop");
        let main = self.spawn_host(&name, group, i % cores, IoRole::MainLoop, HostRole::Main(i));
        host_threads.push(main);
        let mut workers = Vec::new();
        for w in 0..readers {
            let name = format!("vm{i}-worker{w}");
            let hrole = HostRole::Worker(i, w);
            let t = self.spawn_host(&name, group, w % cores, IoRole::Worker, hrole);
            host_threads.push(t);
            workers.push(Server::new(t));
        }
        let mut reader_tasks = Vec::new();
        for r in 0..readers {
            let spec = TaskSpec {
                cpu: r % 8,
                burst: Some(self.kick_ns),
                ..TaskSpec::busy_loop(&format!("vm{i}-reader{r}"))
            };
            reader_tasks.push(self.m.spawn(k, spec));
        }
        let hash_tasks = (0..hashers)
            .map(|h| {
                let spec = TaskSpec {
                    cpu: h % 8,
                    ..TaskSpec::busy_loop(&format!("vm{i}-md5-{h}"))
                };
                self.m.spawn(k, spec)
            })
            .collect();
        // The interrupt's handler: above every task of the guest (an
        // interrupt preempts them), on its vCPU, spawned with a token burst
        // after which it blocks.
        let spec = TaskSpec {
            cpu: IRQ_VCPU,
            burst: Some(1),
            policy: crate::task::Policy::Fifo { prio: 99 },
            ..TaskSpec::busy_loop(&format!("vm{i}-virtio-irq"))
        };
        let irq_task = self.m.spawn(k, spec);
        self.irq_task.push(irq_task);
        let mut is_reader = vec![false; self.m.kernel(k).tasks.len()];
        for t in &reader_tasks {
            is_reader[t.idx()] = true;
        }

        self.hops.irq.push(vec![None; is_reader.len()]);
        self.reader_of.push(is_reader);
        self.vms.push(VmTasks {
            k,
            main: Server::with_wake_cost(main, self.costs.main_wake),
            workers,
            free: (0..readers).rev().collect(),
            hashers: hash_tasks,
            irq: Server::guest_irq(k, irq_task),
            host_threads,
            completions: 0,
        });
        Ok(())
    }
}

/// The requests' hops (see [`path`]).
impl Cell {
    fn on_completion(&mut self, c: Completion) {
        if c.kind != CompletionKind::BurstDone {
            return;
        }
        if c.kernel == KernelId::HOST {
            match self.host_role.get(c.task.idx()).copied().flatten() {
                Some(HostRole::Main(v)) => self.main_done(v),
                Some(HostRole::Worker(v, w)) => self.worker_done(v, w),
                Some(HostRole::Softirq(cpu)) => self.softirq_done(cpu),
                None => {}
            }
            return;
        }
        let v = c.kernel.0 - 1;
        if c.task == self.irq_task[v] {
            self.irq_done(v);
            return;
        }
        if self.reader_of[v]
            .get(c.task.idx())
            .copied()
            .unwrap_or(false)
        {
            self.reader_done(v, c.task);
        }
    }

    /// The reader issued its read and kicked: it blocks, the main loop
    /// wakes.
    fn reader_done(&mut self, v: usize, t: TaskId) {
        let now = self.m.now();
        if let Some(at) = self.hops.irq[v][t.idx()].take() {
            self.hops.sum[6] += (now - at) as u128;
            self.hops.n[6] += 1;
        }
        let vm = &mut self.vms[v];
        vm.completions += 1;
        self.m.block(vm.k, t);
        let worker = vm.free.pop().expect("one worker per reader");
        self.hops.last[v * MAX_WORKERS + worker] = now;
        let req = Req {
            vm: v,
            reader: t,
            worker,
        };
        vm.main
            .arrive(&mut self.m, Job::Submit(req), self.costs.main_submit);
    }

    fn main_done(&mut self, v: usize) {
        let vm = &mut self.vms[v];
        let now = self.m.now();
        let c = self.costs;
        match vm.main.done(&mut self.m, |j| c.main(j)) {
            Some(Job::Submit(req)) => {
                self.hops.mark(v * MAX_WORKERS + req.worker, 0, now);
                vm.workers[req.worker].arrive(&mut self.m, Job::Submit(req), c.worker_submit)
            }
            Some(Job::Complete(req)) => {
                self.hops.mark(v * MAX_WORKERS + req.worker, 5, now);
                self.hops.irq[v][req.reader.idx()] = Some(now);
                vm.free.push(req.worker);
                self.guest_interrupt(v, req);
            }
            None => {}
        }
    }

    /// The main loop completed `req` and notified the guest (`irqfd`). The
    /// guest (Linux 3.16) has one virtio-blk virtqueue with one MSI-X
    /// vector, whose interrupt goes to vCPU [`IRQ_VCPU`], unless its
    /// handler is already pending or running: it takes the request too
    /// (`virtblk_done()` loops over the used ring with callbacks off, and
    /// with `VIRTIO_RING_F_EVENT_IDX` QEMU raises no new interrupt until
    /// the guest has caught up). The handler completes each request on
    /// the vCPU that submitted it, by an IPI: `blk_mq_ipi_complete_request()`
    /// (blk-mq's `QUEUE_FLAG_SAME_COMP`), as no two vCPUs share a cache
    /// (QEMU 2.1's `-smp 8` is 8 sockets of one core). That IPI is a
    /// function call (`smp_call_function_single_async()`), neither a
    /// virtqueue interrupt nor a rescheduling IPI, so CFS-v does not boost
    /// its vCPU (the slides' partial boost names those two). A reader on
    /// the interrupt's vCPU completes there (the path before this split).
    fn guest_interrupt(&mut self, v: usize, req: Req) {
        let c = self.costs;
        let vm = &mut self.vms[v];
        let rcpu = self.m.kernel(vm.k).tasks[req.reader.idx()].cpu;
        if rcpu == IRQ_VCPU && !vm.irq.has_jobs() {
            let burst = c.guest_irq + c.guest_complete + self.kick_ns;
            self.m.set_burst(vm.k, req.reader, burst);
            self.m.interrupt_wake(vm.k, req.reader);
            return;
        }
        let cost = self.irq_cost(v, &req);
        self.vms[v]
            .irq
            .arrive(&mut self.m, Job::Complete(req), cost);
    }

    /// The handler's CPU for one request: its part of the completion, and
    /// for a request of another vCPU the IPI's VM exit (the ICR write
    /// traps: Sandy Bridge has no APIC virtualization).
    fn irq_cost(&self, v: usize, req: &Req) -> Nanos {
        let rcpu = self.m.kernel(self.vms[v].k).tasks[req.reader.idx()].cpu;
        let ipi = if rcpu == IRQ_VCPU {
            0
        } else {
            self.m.platform.vm_exit_ns
        };
        self.costs.guest_irq + ipi
    }

    /// The handler finished a request: the reader's completion runs on its
    /// own vCPU, reached by the IPI, or at once on the handler's.
    fn irq_done(&mut self, v: usize) {
        let next = self.vms[v].irq.next_job().copied();
        let cost = next.map_or(0, |j| self.irq_cost(v, j.req()));
        let vm = &mut self.vms[v];
        if let Some(Job::Complete(req)) = vm.irq.done(&mut self.m, |_| cost) {
            let rcpu = self.m.kernel(vm.k).tasks[req.reader.idx()].cpu;
            let burst = self.costs.guest_complete + self.kick_ns;
            self.m.set_burst(vm.k, req.reader, burst);
            if rcpu == IRQ_VCPU {
                self.m.wake(vm.k, req.reader);
            } else {
                self.m.ipi_wake(vm.k, req.reader);
            }
        }
    }

    fn worker_done(&mut self, v: usize, w: usize) {
        let vm = &mut self.vms[v];
        let c = self.costs;
        match vm.workers[w].done(&mut self.m, |j| c.worker(j)) {
            Some(Job::Submit(req)) => {
                let tag = v * MAX_WORKERS + w;
                self.hops.mark(tag, 1, self.m.now());
                self.inflight[tag] = Some(req);
                let n = REGION_SECTORS / 8;
                let off = ((self.rng.next_u64() as u128 * n as u128) >> 64) as u64;
                let io = IoRequest {
                    sector: v as u64 * REGION_SECTORS + off * 8,
                    sectors: (READ_BYTES / 512) as u32,
                    dir: Direction::Read,
                };
                self.dev.submit(self.m.now(), tag as u64, io);
            }
            Some(Job::Complete(req)) => {
                self.hops.mark(v * MAX_WORKERS + w, 4, self.m.now());
                vm.main
                    .arrive(&mut self.m, Job::Complete(req), c.main_complete)
            }
            None => {}
        }
    }

    /// The device finished a read: the block softirq of the CPU its
    /// worker submitted from.
    fn device_done(&mut self, tag: u64) {
        let Some(req) = self.inflight[tag as usize].take() else {
            return;
        };
        self.hops.mark(tag as usize, 2, self.m.now());
        let worker = self.vms[req.vm].workers[req.worker].task;
        let cpu = self.m.kernel(KernelId::HOST).tasks[worker.idx()].cpu;
        let cost = self.costs.softirq;
        self.softirq[cpu].arrive(&mut self.m, Job::Complete(req), cost);
    }

    fn softirq_done(&mut self, cpu: usize) {
        let c = self.costs;
        if let Some(Job::Complete(req)) = self.softirq[cpu].done(&mut self.m, |_| c.softirq) {
            let tag = req.vm * MAX_WORKERS + req.worker;
            self.hops.mark(tag, 3, self.m.now());
            let w = &mut self.vms[req.vm].workers[req.worker];
            w.arrive(&mut self.m, Job::Complete(req), c.worker_complete);
        }
    }

    /// Runs the model and the device up to `limit`.
    fn run_to(&mut self, limit: Nanos) {
        loop {
            let next = [self.m.next_event_time(), self.dev.next_completion()]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(limit)
                .min(limit);
            let done = self.m.advance_to(next).to_vec();
            if !done.is_empty() {
                for c in done {
                    self.on_completion(c);
                }
                continue;
            }
            while let Some(tag) = self.dev.pop_completed(self.m.now()) {
                self.device_done(tag);
            }
            if self.m.now() >= limit {
                return;
            }
        }
    }

    /// Per VM: requests issued, its host threads' CPU time, its hashers'.
    fn counters(&mut self) -> Vec<(u64, Nanos, Nanos)> {
        self.m.settle_all();
        let m = &self.m;
        self.vms
            .iter()
            .map(|vm| {
                let host = vm.host_threads.iter();
                let cpu = host.map(|&t| m.progress(KernelId::HOST, t)).sum();
                let hash = vm.hashers.iter().map(|&t| m.progress(vm.k, t)).sum();
                (vm.completions, cpu, hash)
            })
            .collect()
    }
}

/// Runs one cell: warm-up, then the measured window.
pub fn run(s: &StudySetup) -> Result<StudyResult, String> {
    let mut w = run_windows(s, s.measure_ns)?;
    Ok(w.pop().expect("one window"))
}

/// Runs one cell: warm-up, then the measured window cut into consecutive
/// windows of `window_ns` (the last one shorter if it does not divide
/// it), each with its own figures: how a cell's figures move within one
/// run, against how they move from seed to seed.
pub fn run_windows(s: &StudySetup, window_ns: Nanos) -> Result<Vec<StudyResult>, String> {
    if s.measure_ns == 0 || window_ns == 0 {
        return Err("the measured window must be longer than 0".into());
    }
    let mut cell = Cell::build(s)?;
    cell.run_to(s.warmup_ns);
    let mut out = Vec::new();
    let (mut start, end) = (s.warmup_ns, s.warmup_ns + s.measure_ns);
    while start < end {
        let a = cell.counters();
        (cell.hops.sum, cell.hops.n) = ([0; 7], [0; 7]);
        let stop = (start + window_ns).min(end);
        cell.run_to(stop);
        let b = cell.counters();
        let events = cell.m.events_processed();
        out.push(window_result(s, &a, &b, stop - start, &cell.hops, events));
        start = stop;
    }
    Ok(out)
}

/// One window's figures from the counters at its start and end.
fn window_result(
    s: &StudySetup,
    a: &[(u64, Nanos, Nanos)],
    b: &[(u64, Nanos, Nanos)],
    len_ns: Nanos,
    hops: &Hops,
    events: u64,
) -> StudyResult {
    let secs = len_ns as f64 / 1e9;
    let vms = s
        .case
        .vms()
        .iter()
        .zip(a.iter().zip(b))
        .map(|(&(readers, hashers), (x, y))| {
            let iops = (y.0 - x.0) as f64 / secs;
            VmResult {
                readers,
                hashers,
                iops,
                mb_s: iops * READ_BYTES as f64 / 1e6,
                hash_mb_s: (y.2 - x.2) as f64 / 1e9 / secs * MD5_BYTES_PER_CPU_S / 1e6,
                cpu_pct: (y.1 - x.1) as f64 / len_ns as f64 * 100.0,
            }
        })
        .collect();
    StudyResult {
        vms,
        hops_us: hops.mean_us(),
        events,
    }
}

/// The host schedulers the study's cells set side by side: plain CFS, CFS-v,
/// and CFS-v with each of its rules alone or left out.
pub fn hosts_tried() -> [FairKind; 5] {
    [
        FairKind::Cfs,
        FairKind::CfsV(CfsvOptions::default()),
        FairKind::CfsV(CfsvOptions::compensation_only()),
        FairKind::CfsV(CfsvOptions::grain_only()),
        FairKind::CfsV(CfsvOptions::without_partial_boost()),
    ]
}

/// One case under each host scheduler, as a table.
pub fn case_table(case: Case, hosts: &[FairKind], measure_ns: Nanos) -> Result<String, String> {
    let mut out = format!("{} case, {} ms measured\n", case.name(), measure_ns / MS);
    let _ = writeln!(
        out,
        "{:<10} {:>3} {:>9} {:>8} {:>10} {:>8}",
        "host", "vm", "IOPS", "MB/s", "MD5 MB/s", "CPU %"
    );
    for &h in hosts {
        let label = match h {
            FairKind::CfsV(o) => o.label(),
            other => other.name(),
        };
        let mut s = StudySetup::new(case, h);
        s.measure_ns = measure_ns;
        let r = run(&s)?;
        let hops: Vec<String> = r.hops_us.iter().map(|h| format!("{h:.0}")).collect();
        let _ = writeln!(out, "{label:<10} hops (us): {}", hops.join(" / "));
        for (i, v) in r.vms.iter().enumerate() {
            let _ = writeln!(
                out,
                "{:<10} {:>3} {:>9.0} {:>8.1} {:>10.1} {:>8.1}",
                label,
                i + 1,
                v.iops,
                v.mb_s,
                v.hash_mb_s,
                v.cpu_pct
            );
        }
    }
    Ok(out)
}
