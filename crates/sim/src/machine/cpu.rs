//! The CPU part: the machine's cores, as the CPU model of crate `cpusched`
//! runs them, when the machine has a platform ([`CpuConfig`]); without one
//! every process has a core to itself and a CPU burst takes exactly its
//! own length (the machine of every scenario that names no platform).
//!
//! With a platform, each process that spends CPU time is a task of its
//! kernel on the model (host processes on the host's cores, a guest's on
//! its vCPUs, which are host tasks), created at its first burst:
//!
//! - the app's recorded CPU bursts (its think times, scaled by the
//!   platform's speed), with the system call and copy of each read;
//! - the background readers between reads and the writers copying into the
//!   page cache;
//! - the flusher (the CPU cost of its bios);
//! - QEMU's iothread and pool workers: virtqueue processing and the
//!   submission of each request, its completion and the interrupt
//!   injection into the guest.
//!
//! Each bio costs its submitter the block layer's submission and the
//! interrupt and softirq of its completion ([`iocost::BLOCK_SUBMIT_NS`],
//! [`iocost::BLOCK_COMPLETE_NS`]), paid in the submitter's next burst, and a guest's
//! bio also its notification of QEMU (a VM exit, `vm_exit_ns` of the
//! platform). The completion's interrupt runs on the core of whoever it
//! wakes, charged to that task: on a loaded core the wake-up waits for it
//! as it would wait for the interrupt's handler.
//!
//! A burst ends in an event of the machine ([`CpuEv::Done`]) that carries
//! on what the process was doing (a process's next step, QEMU's next
//! stage of a request); the task then blocks unless that step gave it
//! another burst. The event loop ([`Machine::run_until`]) runs whichever
//! comes first, the machine's next event or the model's, so a run stays a
//! pure function of its inputs and seed.
//!
//! The per-request costs live in [`cpusched::iocost`] (shared with the
//! CFS-v study): CPU time on the machine the app traces were recorded on
//! (this machine, an AMD EPYC core), measured there with the commands
//! each names; [`Platform::scale_cpu`] turns them into the platform's,
//! with its one speed factor.

use super::{Ev, Machine, ProcEv, HOST};
use crate::request::Pid;
#[cfg(doc)]
use cpusched::iocost;
use cpusched::{CpuModel, FairKind, Platform, Policy, TaskId, TaskSpec};
use devmodel::Nanos;

/// The CPU model a machine runs on.
#[derive(Clone, Debug)]
pub struct CpuConfig {
    pub platform: Platform,
    /// The host's fair scheduler.
    pub host: FairKind,
    /// Each guest's fair scheduler.
    pub guest: FairKind,
    /// vCPUs of each VM.
    pub vcpus: usize,
    /// Run the app's recorded bursts only: no per-request costs (the
    /// "without CPU costs" side of a comparison).
    pub no_io_costs: bool,
}

/// The CPU part's events.
#[derive(Clone, Copy, Debug)]
pub(super) enum CpuEv {
    /// A task's burst ended: the event kept in slot `.0` carries on.
    Done(usize),
}

/// One process's task and what its bursts lead to.
#[derive(Clone, Debug, Default)]
struct TaskOf {
    task: Option<TaskId>,
    /// Bursts waiting for the current one, with what each leads to.
    queue: std::collections::VecDeque<(Nanos, Ev)>,
    /// What the running burst leads to.
    then: Option<Ev>,
    /// CPU time (recorded machine's) owed for bios, paid in the next
    /// burst.
    owed: Nanos,
    /// CPU time the task ran (platform's), for the reports.
    ran: Nanos,
}

struct Model {
    m: CpuModel,
    cfg: CpuConfig,
    /// The model's kernel of each machine kernel (the host, then guests).
    kernels: Vec<cpusched::KernelId>,
    /// The model's VM of each machine kernel (`None` for the host).
    vms: Vec<Option<cpusched::VmId>>,
    /// The host's busy loops ([`Machine::add_host_cpu_loops`]).
    host_loops: Vec<TaskId>,
    /// By pid.
    procs: Vec<TaskOf>,
    /// Task of each model kernel -> pid.
    owners: Vec<Vec<Pid>>,
    /// Continuations of ended bursts, by slot.
    slots: Vec<Option<(Pid, Ev)>>,
    free_slots: Vec<usize>,
    done: Vec<cpusched::Completion>,
}

/// The machine's CPUs.
#[derive(Default)]
pub(super) struct Cpu {
    model: Option<Box<Model>>,
}

impl Cpu {
    pub(super) fn new(cfg: Option<&CpuConfig>) -> Cpu {
        Cpu {
            model: cfg.map(|c| {
                Box::new(Model {
                    m: CpuModel::new(c.platform.clone(), c.host),
                    cfg: c.clone(),
                    kernels: vec![cpusched::KernelId::HOST],
                    vms: vec![None],
                    host_loops: Vec::new(),
                    procs: Vec::new(),
                    owners: vec![Vec::new()],
                    slots: Vec::new(),
                    free_slots: Vec::new(),
                    done: Vec::new(),
                })
            }),
        }
    }

    /// Whether the machine runs on the CPU model.
    pub(super) fn on(&self) -> bool {
        self.model.is_some()
    }

    /// Whether per-request costs are charged.
    pub(super) fn io_costs(&self) -> bool {
        self.model.as_ref().is_some_and(|m| !m.cfg.no_io_costs)
    }

    /// A guest kernel `k` joins: its vCPUs become host tasks.
    pub(super) fn add_guest(&mut self, k: usize) -> Result<(), String> {
        let Some(md) = self.model.as_mut() else {
            return Ok(());
        };
        let (vm, mk) = md.m.add_vm(md.cfg.vcpus, md.cfg.guest, 1024)?;
        if md.kernels.len() <= k {
            md.kernels.resize(k + 1, cpusched::KernelId::HOST);
            md.vms.resize(k + 1, None);
        }
        md.kernels[k] = mk;
        md.vms[k] = Some(vm);
        md.owners.push(Vec::new());
        Ok(())
    }

    /// Sets the host policy of guest kernel `k`'s vCPU threads (the vCPU
    /// boost of `help-cpu`, `help-all` and `static-cpu`, and its end).
    pub(super) fn set_vcpus(&mut self, k: usize, p: Policy) {
        let Some(md) = self.model.as_mut() else {
            return;
        };
        if let Some(vm) = md.vms.get(k).copied().flatten() {
            for i in 0..md.cfg.vcpus {
                let t = md.m.vcpu_task(vm, i);
                md.m.set_policy(cpusched::KernelId::HOST, t, p);
            }
        }
    }

    /// CPU time the host's busy loops ran so far (platform's time).
    pub(super) fn host_loops_ran(&self) -> Nanos {
        self.model.as_ref().map_or(0, |md| {
            md.host_loops
                .iter()
                .map(|&t| md.m.progress(cpusched::KernelId::HOST, t))
                .sum()
        })
    }

    /// Process `pid` owes `ns` of CPU time (recorded machine's), paid in
    /// its next burst.
    pub(super) fn owe(&mut self, pid: Pid, ns: Nanos) {
        if let Some(md) = self.model.as_mut() {
            md.entry(pid).owed += ns;
        }
    }

    /// Process `pid` owes `ns` of the platform's CPU time.
    pub(super) fn owe_platform(&mut self, pid: Pid, ns: Nanos) {
        if let Some(md) = self.model.as_mut() {
            let recorded = (ns as f64 * md.m.platform.speed).round() as Nanos;
            md.entry(pid).owed += recorded;
        }
    }

    /// The platform's cost of a VM exit (a guest's notification of QEMU).
    pub(super) fn vm_exit_ns(&self) -> Nanos {
        self.model.as_ref().map_or(0, |m| m.m.platform.vm_exit_ns)
    }

    /// Events the model handled (0 without one).
    pub(super) fn events_processed(&self) -> u64 {
        self.model.as_ref().map_or(0, |m| m.m.events_processed())
    }

    /// The next time the model has something to do.
    pub(super) fn next_event_time(&self) -> Option<Nanos> {
        self.model.as_ref().and_then(|m| m.m.next_event_time())
    }

    /// CPU time process `pid` ran on the model, and the share of the
    /// platform's speed it stands for (0 without a model).
    pub(super) fn ran(&self, pid: Pid) -> Nanos {
        self.model
            .as_ref()
            .and_then(|m| m.procs.get(pid as usize))
            .map_or(0, |t| t.ran)
    }
}

impl Model {
    fn entry(&mut self, pid: Pid) -> &mut TaskOf {
        let i = pid as usize;
        if self.procs.len() <= i {
            self.procs.resize(i + 1, TaskOf::default());
        }
        &mut self.procs[i]
    }

    /// Starts the burst of `ns` (platform's time) on `pid`'s task in
    /// model kernel `mk`, leading to `then`.
    fn start(&mut self, pid: Pid, mk: cpusched::KernelId, ns: Nanos, then: Ev) {
        let cores = self.m.kernel(mk).cfg.cpus;
        let e = self.entry(pid);
        e.then = Some(then);
        e.ran += ns;
        match e.task {
            None => {
                let spec = TaskSpec {
                    burst: Some(ns),
                    cpu: pid as usize % cores,
                    ..TaskSpec::busy_loop("proc")
                };
                let t = self.m.spawn(mk, spec);
                self.entry(pid).task = Some(t);
                let owners = &mut self.owners[mk.0];
                if owners.len() <= t.idx() {
                    owners.resize(t.idx() + 1, Pid::MAX);
                }
                owners[t.idx()] = pid;
            }
            Some(t) => {
                self.m.set_burst(mk, t, ns);
                if mk == cpusched::KernelId::HOST {
                    self.m.wake(mk, t);
                } else if self.m.kernel(mk).tasks[t.idx()].state
                    == cpusched::task::TaskState::Blocked
                {
                    // A guest task wakes from the guest's interrupt (a
                    // virtqueue completion), taken by its vCPU.
                    self.m.interrupt_wake(mk, t);
                }
            }
        }
    }
}

impl Machine {
    /// Process `pid` runs `ns` of CPU (recorded machine's time), then
    /// takes its next step; without a CPU model, after exactly `ns`.
    pub(super) fn run_cpu(&mut self, pid: Pid, ns: Nanos) {
        if !self.cpu.on() {
            self.wake_in(pid, ns);
            return;
        }
        let gen = self.procs.arm(pid);
        self.cpu_then(pid, ns, Ev::Proc(ProcEv::Wake(pid, gen)));
    }

    /// Process `pid` runs `ns` of CPU (recorded machine's time), then
    /// `then` happens; without a CPU model, `ns` from now.
    pub(super) fn cpu_then(&mut self, pid: Pid, ns: Nanos, then: Ev) {
        let now = self.now();
        let k = self.procs.kernel_of(pid);
        let Some(md) = self.cpu.model.as_mut() else {
            self.q.push(now + ns, then);
            return;
        };
        let mk = md.kernels[k];
        let e = md.entry(pid);
        let owed = std::mem::take(&mut e.owed);
        let ns = md.m.platform.scale_cpu(ns + owed).max(1);
        if md.entry(pid).then.is_some() {
            md.entry(pid).queue.push_back((ns, then));
            return;
        }
        md.start(pid, mk, ns, then);
    }

    /// Process `pid`'s owed CPU time runs now, with nothing waiting for it
    /// (the flusher's bios).
    pub(super) fn cpu_pay(&mut self, pid: Pid) {
        let Some(md) = self.cpu.model.as_mut() else {
            return;
        };
        if md.entry(pid).owed == 0 {
            return;
        }
        // A burst leading to a stale wake-up of the process: nothing.
        self.cpu_then(pid, 0, Ev::Proc(ProcEv::Wake(pid, u64::MAX)));
    }

    /// Brings the model to `now`, and turns the bursts that ended into
    /// their continuations (at the model's clock).
    pub(super) fn cpu_advance(&mut self, now: Nanos) {
        let Some(md) = self.cpu.model.as_mut() else {
            return;
        };
        let mut done = std::mem::take(&mut md.done);
        done.clear();
        done.extend_from_slice(md.m.advance_to(now));
        let at = md.m.now().max(self.q.now());
        for c in &done {
            if c.kind != cpusched::model::CompletionKind::BurstDone {
                continue;
            }
            let md = self.cpu.model.as_mut().expect("model");
            let pid = md.owners[c.kernel.0][c.task.idx()];
            let e = md.entry(pid);
            let Some(then) = e.then.take() else {
                continue;
            };
            let slot = match md.free_slots.pop() {
                Some(s) => {
                    md.slots[s] = Some((pid, then));
                    s
                }
                None => {
                    md.slots.push(Some((pid, then)));
                    md.slots.len() - 1
                }
            };
            self.q.push(at, Ev::Cpu(CpuEv::Done(slot)));
            let md = self.cpu.model.as_mut().expect("model");
            if let Some((ns, next)) = md.entry(pid).queue.pop_front() {
                md.start(pid, c.kernel, ns, next);
            }
        }
        if let Some(md) = self.cpu.model.as_mut() {
            md.done = done;
        }
    }

    /// [`CpuEv`]: a burst's continuation runs; the task then blocks unless
    /// it was given another burst.
    pub(super) fn on_cpu(&mut self, now: Nanos, ev: CpuEv) {
        let CpuEv::Done(slot) = ev;
        let md = self.cpu.model.as_mut().expect("model");
        let (pid, then) = md.slots[slot].take().expect("live slot");
        md.free_slots.push(slot);
        self.handle(now, then);
        let md = self.cpu.model.as_mut().expect("model");
        let k = self.procs.kernel_of(pid);
        let mk = md.kernels[k];
        let e = md.entry(pid);
        if e.then.is_none() {
            if let Some(t) = e.task {
                md.m.block(mk, t);
            }
        }
    }

    /// CPU time process `pid` ran on the CPU model (platform's time; 0
    /// without one).
    pub fn cpu_time(&self, pid: Pid) -> Nanos {
        self.cpu.ran(pid)
    }

    /// Whether the machine runs on a CPU model.
    pub fn has_cpu_model(&self) -> bool {
        self.cpu.on()
    }

    /// Starts `n` busy loops on the host ("infinite loops", as the
    /// coordinated task scheduling study ran them: the scenario key
    /// `host_cpu_load`), spread over the cores as the CPU model's cells
    /// spread theirs (`cpusched::cyclictest::build_loaded`). They never
    /// block, so the host's processes, QEMU's threads and the vCPUs
    /// compete with them for the cores. Needs a CPU model.
    pub fn add_host_cpu_loops(&mut self, n: usize) -> Result<(), String> {
        let Some(md) = self.cpu.model.as_mut() else {
            return Err(format!(
                "{n} host CPU loops, but the machine has no CPU model (give a platform)"
            ));
        };
        let cores = md.m.platform.cores;
        for i in 0..n {
            let spec = TaskSpec {
                cpu: i % cores,
                ..TaskSpec::busy_loop(&format!("host-loop{i}"))
            };
            let t = md.m.spawn(cpusched::KernelId::HOST, spec);
            md.host_loops.push(t);
        }
        Ok(())
    }

    /// The host loops' share of the cores so far (0 without loops or a
    /// CPU model): what they pay for a mode's boosts.
    pub fn host_loops_share(&self) -> f64 {
        let Some(md) = self.cpu.model.as_ref() else {
            return 0.0;
        };
        let span = md.m.now() as f64 * md.m.platform.cores as f64;
        if span <= 0.0 {
            return 0.0;
        }
        self.cpu.host_loops_ran() as f64 / span
    }
}

/// The host kernel's index, for the bios' costs.
pub(super) const fn is_guest(k: usize) -> bool {
    k != HOST
}
