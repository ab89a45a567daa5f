//! The Xen PV profile path on the CPU model (issue 29): when a
//! `hypervisor = "xen-pv"` profile scenario names a platform, Xen's credit
//! scheduler ([`cpusched::credit`]) runs the vCPUs of Dom0 and of the
//! DomUs on the platform's pCPUs, and the CPU work of the PV path runs as
//! bursts of the tasks that do it:
//!
//! - each FFSB thread is a task of the measured DomU (its guest kernel on
//!   its vCPUs): blkfront's interrupt handler for its completion
//!   ([`crate::xen::BLKFRONT_IRQ_NS`]), then its loop and system call down to the
//!   next submission ([`profile_bench::THREAD_OVERHEAD_NS`]);
//! - blkback is a kernel thread of Dom0 (a domain under credit like the
//!   others, one vCPU): its wake-up and grant mapping of each request (the
//!   delays [`crate::xen::Blkback`] plans), and the unmap of each completion
//!   ([`crate::xen::GRANT_UNMAP_NS`]) before the response's event-channel
//!   notification ([`crate::xen::EVTCHN_NOTIFY_NS`], still a delay);
//! - `host_cpu_load` = N adds N CPU-bound DomUs, one spinning vCPU each:
//!   Xen has no host processes, so other domains are what competes with
//!   the measured one for the pCPUs.
//!
//! Every wake-up of a task here is an event-channel upcall into its
//! domain ([`CpuModel::interrupt_wake`]), which wakes a blocked vCPU: what
//! credit BOOSTs. Without a platform the path keeps its delays (the
//! study's results, `scenarios/xen2tier.toml`).
//!
//! [`profile_bench::THREAD_OVERHEAD_NS`]: crate::profile_bench::THREAD_OVERHEAD_NS

use std::collections::VecDeque;

use cpusched::credit::{CreditOptions, DEFAULT_WEIGHT};
use cpusched::model::CompletionKind;
use cpusched::task::TaskState;
use cpusched::{CpuModel, FairKind, KernelId, Platform, TaskId, TaskSpec};
use devmodel::Nanos;
use experiment::{Cell, CpuSched, Hypervisor};

/// Dom0's vCPUs: one. Assumption: the study does not say; one Dom0 vCPU
/// (`dom0_max_vcpus=1`) was the usual advice for a 2.6.32 PV Dom0 that
/// only serves I/O.
pub const DOM0_VCPUS: usize = 1;

/// The vCPU scheduler of a cell's machine: Xen's credit (with or without
/// BOOST) for `hypervisor = "xen-pv"`, else the cell's host CPU scheduler.
pub fn host_sched(cell: &Cell) -> Result<FairKind, String> {
    let s = cell.cpu.host_cpu_sched;
    match (cell.hypervisor, s) {
        (Hypervisor::XenPv, None | Some(CpuSched::Credit)) => {
            Ok(FairKind::Credit(CreditOptions::default()))
        }
        (Hypervisor::XenPv, Some(CpuSched::CreditNoBoost)) => Ok(FairKind::Credit(CreditOptions {
            boost: false,
            ..Default::default()
        })),
        (Hypervisor::XenPv, Some(o)) => Err(format!(
            "host_cpu_sched \"{o}\": Xen schedules vCPUs with credit or credit-noboost"
        )),
        (Hypervisor::Kvm, Some(o)) if o.is_xen() => Err(format!(
            "host_cpu_sched \"{o}\" is Xen's; it needs hypervisor = \"xen-pv\""
        )),
        _ => Ok(crate::cpu_bench::fair(cell.cpu.host_sched())),
    }
}

/// A task of the PV path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    Blkback,
    Thread(usize),
}

/// What a burst of the PV path leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Then {
    /// Blkback mapped the head request: submit it.
    BlkbackStep,
    /// Blkback unmapped a completed request: answer on the ring.
    Respond(u64),
    /// The thread took its completion.
    Complete(usize),
    /// The thread reached its next submission.
    Issue(usize),
}

#[derive(Clone, Debug)]
struct Worker {
    kernel: KernelId,
    task: Option<TaskId>,
    /// The vCPU it starts on.
    cpu: usize,
    then: Option<Then>,
    queue: VecDeque<(Nanos, Then)>,
}

/// The counter of a Xen PV profile cell with CPU-bound DomUs: their mean
/// share of one pCPU.
pub const SPIN_DOMU_CPU_SHARE: &str = "spin_domu_cpu_share";

/// The CPU model of a Xen PV profile cell.
pub struct XenCpu {
    m: CpuModel,
    /// Blkback first, then the threads.
    workers: Vec<Worker>,
    spinners: Vec<(KernelId, TaskId)>,
    done: Vec<(Nanos, Then)>,
    completions: Vec<cpusched::Completion>,
}

impl XenCpu {
    /// The CPU model of `cell` with `threads` FFSB threads, or `None` when
    /// the cell is not a Xen PV VM cell on a named platform.
    pub fn new(cell: &Cell, threads: usize) -> Result<Option<XenCpu>, String> {
        let cpu_keys = cell.cpu.host_cpu_load > 0 || cell.cpu.host_cpu_sched.is_some();
        let named = cell.cpu.platform != experiment::cpu::DEFAULT_PLATFORM;
        if cell.hypervisor != Hypervisor::XenPv || cell.guest_sched.is_none() {
            return Ok(None);
        }
        if !named {
            if cpu_keys {
                return Err(
                    "host_cpu_sched and host_cpu_load of a Xen PV profile need a platform \
                     (the pCPUs credit schedules vCPUs on)"
                        .into(),
                );
            }
            return Ok(None);
        }
        let platform = Platform::preset(&cell.cpu.platform)?;
        let mut m = CpuModel::new(platform, host_sched(cell)?);
        let (_, dom0) = m.add_vm(DOM0_VCPUS, FairKind::Cfs, DEFAULT_WEIGHT)?;
        let vcpus = cell.cpu.vcpus as usize;
        let (_, domu) = m.add_vm(vcpus, FairKind::Cfs, DEFAULT_WEIGHT)?;
        let mut spinners = Vec::new();
        for _ in 0..cell.cpu.host_cpu_load {
            let (_, k) = m.add_vm(1, FairKind::Cfs, DEFAULT_WEIGHT)?;
            spinners.push((k, m.spawn(k, TaskSpec::busy_loop("spin"))));
        }
        let worker = |kernel, cpu| Worker {
            kernel,
            task: None,
            cpu,
            then: None,
            queue: VecDeque::new(),
        };
        let workers = std::iter::once(worker(dom0, 0))
            .chain((0..threads).map(|i| worker(domu, i % vcpus)))
            .collect();
        Ok(Some(XenCpu {
            m,
            workers,
            spinners,
            done: Vec::new(),
            completions: Vec::new(),
        }))
    }

    fn index(who: Who) -> usize {
        match who {
            Who::Blkback => 0,
            Who::Thread(i) => i + 1,
        }
    }

    /// `who` runs `ns` of CPU, then `then` happens (after its bursts
    /// before it).
    pub fn run(&mut self, who: Who, ns: Nanos, then: Then) {
        let w = Self::index(who);
        if self.workers[w].then.is_some() {
            self.workers[w].queue.push_back((ns, then));
            return;
        }
        self.start(w, ns, then);
    }

    fn start(&mut self, w: usize, ns: Nanos, then: Then) {
        let wk = &mut self.workers[w];
        wk.then = Some(then);
        let (k, cpu) = (wk.kernel, wk.cpu);
        match wk.task {
            None => {
                let spec = TaskSpec {
                    burst: Some(ns.max(1)),
                    cpu,
                    ..TaskSpec::busy_loop("xen-pv")
                };
                self.workers[w].task = Some(self.m.spawn(k, spec));
            }
            Some(t) => {
                self.m.set_burst(k, t, ns.max(1));
                if self.m.kernel(k).tasks[t.idx()].state == TaskState::Blocked {
                    // An event-channel upcall into the domain wakes it.
                    self.m.interrupt_wake(k, t);
                }
            }
        }
    }

    pub fn next_event_time(&self) -> Option<Nanos> {
        self.m.next_event_time()
    }

    /// Brings the model to `now`; returns the continuations of the bursts
    /// that ended, with their times. Call [`XenCpu::block_idle`] once they
    /// are handled.
    pub fn advance_to(&mut self, now: Nanos) -> &[(Nanos, Then)] {
        self.done.clear();
        self.completions.clear();
        self.completions.extend_from_slice(self.m.advance_to(now));
        for i in 0..self.completions.len() {
            let c = self.completions[i];
            if c.kind != CompletionKind::BurstDone {
                continue;
            }
            let Some(w) = self
                .workers
                .iter()
                .position(|w| w.kernel == c.kernel && w.task == Some(c.task))
            else {
                continue;
            };
            let Some(then) = self.workers[w].then.take() else {
                continue;
            };
            self.done.push((c.at, then));
            if let Some((ns, next)) = self.workers[w].queue.pop_front() {
                self.start(w, ns, next);
            }
        }
        &self.done
    }

    /// Tasks left without a burst block (after the continuations, which may
    /// have given them the next).
    pub fn block_idle(&mut self) {
        for w in &self.workers {
            if let (None, Some(t)) = (w.then, w.task) {
                if self.m.kernel(w.kernel).tasks[t.idx()].state == TaskState::Runnable {
                    self.m.block(w.kernel, t);
                }
            }
        }
    }

    /// The CPU-bound DomUs' mean share of one pCPU so far.
    pub fn spinner_share(&mut self) -> Option<f64> {
        if self.spinners.is_empty() {
            return None;
        }
        self.m.settle_all();
        let now = self.m.now().max(1) as f64;
        let sum: Nanos = self
            .spinners
            .iter()
            .map(|&(k, t)| self.m.progress(k, t))
            .sum();
        Some(sum as f64 / now / self.spinners.len() as f64)
    }
}

/// Blkback's plan while its CPU work runs: "busy" for
/// [`crate::xen::Blkback::notify`] (which wakes only a sleeping blkback), and
/// never due by time; [`Then::BlkbackStep`] makes it due.
pub const ON_CPU: Nanos = Nanos::MAX;
